//! The provider SDK: one internal format, one transformer and decoder per
//! wire format, one error model. `stream_chat` is the whole pipeline:
//! resolve the provider, build its request, send it, decode the stream.

pub mod delta;
pub mod error;
pub mod http;
pub mod message;
pub mod openai;
pub mod providers;
pub mod stream;

use std::time::Duration;

use futures_util::StreamExt;

use delta::{Accumulator, Cost, DecodeEvent, Delta, StreamDone};
use error::{ErrorClass, LlmError};
use http::WireRequest;
use message::{ChatRequest, StopReason};
use providers::{ProviderKind, Providers, ResolvedProvider};
use stream::{SseDecoder, SseEvent};

/// A wire format's stream decoder (one per response).
enum WireDecoder {
    OpenAi(openai::OpenAiDecoder),
}

impl WireDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        match self {
            WireDecoder::OpenAi(d) => d.decode(event, out),
        }
    }
}

/// Builds the HTTP request and the matching decoder for `provider`'s wire format.
fn prepare(
    provider: &ResolvedProvider,
    model: &str,
    req: &ChatRequest,
) -> Result<(WireRequest, WireDecoder), LlmError> {
    match provider.kind {
        ProviderKind::Openai | ProviderKind::OpenaiCompatible => {
            let mut headers = Vec::new();
            if let Some(key) = &provider.api_key {
                headers.push(("authorization".to_string(), format!("Bearer {key}")));
            }
            let wire = WireRequest {
                url: format!("{}/chat/completions", provider.base_url),
                headers,
                body: openai::request_body(req, model),
            };
            Ok((wire, WireDecoder::OpenAi(openai::OpenAiDecoder::new(&provider.name))))
        }
        ProviderKind::Anthropic | ProviderKind::Gemini => Err(LlmError::new(
            ErrorClass::InvalidRequest,
            Some(&provider.name),
            format!(
                "{}: this build of mia speaks only the OpenAI chat-completions format so far. Use an OpenAI or OpenAI-compatible provider.",
                provider.name
            ),
        )),
    }
}

/// Streams one answer. Every delta goes to `emit` as it is decoded; the
/// result is the whole answer, or the error that ended it (deltas already
/// emitted stay with the caller: a failure never erases partial text).
pub async fn stream_chat(
    providers: &Providers,
    req: &ChatRequest,
    emit: &mut (dyn FnMut(Delta) + Send),
) -> Result<StreamDone, LlmError> {
    let (provider, model) = providers.resolve(&req.model)?;
    let (wire, mut decoder) = prepare(&provider, &model, req)?;
    let client = providers.client(&provider.name)?;
    let timeouts = providers.config.timeouts;
    tracing::debug!(provider = %provider.name, model = %model, "request sent");
    let response = http::send(&client, &provider, &model, wire, &timeouts).await?;

    let mut body = response.bytes_stream();
    let mut sse = SseDecoder::new();
    let mut sse_events = Vec::new();
    let mut decoded = Vec::new();
    let mut acc = Accumulator::default();
    let idle = Duration::from_millis(timeouts.stream_idle_ms);
    loop {
        let chunk = match tokio::time::timeout(idle, body.next()).await {
            Err(_) => {
                return Err(LlmError::new(
                    ErrorClass::Timeout,
                    Some(&provider.name),
                    format!(
                        "{}: the answer stalled for {} ms (timeouts.stream_idle_ms); the partial answer is kept.",
                        provider.name, timeouts.stream_idle_ms
                    ),
                ))
            }
            Ok(None) => {
                sse.finish(&mut sse_events);
                None
            }
            Ok(Some(Err(e))) => return Err(http::interrupted_error(&provider.name, &e)),
            Ok(Some(Ok(bytes))) => {
                sse.push(&bytes, &mut sse_events);
                Some(())
            }
        };
        for event in sse_events.drain(..) {
            decoder.decode(&event, &mut decoded)?;
            for d in decoded.drain(..) {
                acc.apply(&d);
                if let DecodeEvent::Delta(delta) = d {
                    emit(delta);
                }
            }
        }
        if chunk.is_none() {
            break;
        }
    }
    if !acc.complete() {
        return Err(LlmError::new(
            ErrorClass::NetworkError,
            Some(&provider.name),
            format!(
                "{}: the stream ended before the answer was complete; the partial answer is kept.",
                provider.name
            ),
        ));
    }
    let usage = acc.usage.unwrap_or_else(|| estimate_usage(req, &acc.text));
    Ok(StreamDone {
        usage,
        stop_reason: acc.stop_reason.unwrap_or(StopReason::EndTurn),
        text: acc.text,
        reasoning: acc.reasoning,
        tool_calls: acc.tool_calls,
        cost: Cost::default(),
        provider: provider.name,
        model,
    })
}

/// Servers that never report usage still get a count, marked as estimated
/// (about four characters per token, the usual rule of thumb for English and code).
fn estimate_usage(req: &ChatRequest, answer: &str) -> message::Usage {
    let tokens = |s: &str| (s.chars().count() as u64).div_ceil(4);
    let prompt: u64 = req.system.as_deref().map(tokens).unwrap_or(0)
        + req
            .messages
            .iter()
            .map(|m| tokens(&m.plain_text()))
            .sum::<u64>();
    message::Usage {
        input_tokens: prompt,
        output_tokens: tokens(answer),
        estimated: true,
        ..message::Usage::default()
    }
}
