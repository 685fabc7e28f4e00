//! The provider SDK: one internal format, one [`wire::WireFormat`] per wire
//! format (its own file, registered in [`wire::FORMATS`]), one error model. `stream_chat` is the whole pipeline:
//! resolve the provider, build its request, send it, decode the stream,
//! retry what can be retried without repeating anything the user has seen.
//!
//! Dependencies: `llm` → `cost` only. The decoders report token counts as
//! [`mia_cost::Usage`], and a finished answer carries its
//! [`mia_cost::Cost`], priced with the providers' [`mia_cost::PricingRegistry`].
//! Nothing in `cost` names an `llm` type, so the two never form a cycle.

pub mod anthropic;
pub mod azure;
pub mod count;
pub mod delta;
pub mod error;
pub mod gemini;
pub mod http;
pub mod key_cmd;
pub mod message;
pub mod ollama;
pub mod openai;
pub mod prompt_tools;
pub mod providers;
pub mod ratelimit;
pub mod responses;
pub mod secret_env;
pub mod stream;
pub mod tls;
pub mod wire;

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use delta::{Accumulator, DecodeEvent, Delta, StreamDone};
use error::{ErrorClass, LlmError};
use http::WireRequest;
use message::{ChatRequest, StopReason};
use providers::{Providers, ResolvedProvider};
use stream::FrameDecoder;

/// Builds the HTTP request for `provider`'s wire format.
fn prepare(provider: &ResolvedProvider, model: &str, req: &ChatRequest, stream: bool) -> WireRequest {
    let format = provider.format();
    let mut body = format.request_body(provider, model, req, stream);
    if let (Some(Value::Object(extra)), Value::Object(target)) = (&req.extra_body, &mut body) {
        for (k, v) in extra {
            target.insert(k.clone(), v.clone());
        }
    }
    WireRequest {
        url: format.chat_url(provider, model, stream),
        headers: format.headers(provider),
        body: Some(body),
    }
}

/// Streams one answer. Every delta goes to `emit` as it is decoded; the
/// result is the whole answer, or the error that ended it (deltas already
/// emitted stay with the caller: a failure never erases partial text).
///
/// Retryable failures are retried (with `Delta::Retry` telling the user
/// why and for how long) only while nothing of the answer has been
/// emitted: a retry after partial output would show the user a duplicate.
pub async fn stream_chat(
    providers: &Providers,
    req: &ChatRequest,
    emit: &mut (dyn FnMut(Delta) + Send),
) -> Result<StreamDone, LlmError> {
    with_retries(providers, req, true, emit).await
}

/// The same as [`stream_chat`] over a non-streaming request: one JSON
/// response, decoded into the same answer.
pub async fn send_chat(
    providers: &Providers,
    req: &ChatRequest,
    emit: &mut (dyn FnMut(Delta) + Send),
) -> Result<StreamDone, LlmError> {
    with_retries(providers, req, false, emit).await
}

async fn with_retries(
    providers: &Providers,
    req: &ChatRequest,
    stream: bool,
    emit: &mut (dyn FnMut(Delta) + Send),
) -> Result<StreamDone, LlmError> {
    let (mut provider, model) = providers.keyed(&req.model, false).await?;
    let retry = &providers.config.retry;
    let mut delays = retry.delays();
    let mut attempt = 0u32;
    // A refused key is read again (command or variable) and tried once more.
    let mut reread = false;
    // A timed-out attempt is retried with longer limits (×1.5 each, capped).
    let mut stretch = 1.0f64;
    loop {
        match providers.rate_limits.wait_for(&provider.name, retry.pacing) {
            Some(ratelimit::Hold::Exhausted(wait)) => {
                // A window further away than the cap: the request is not sent
                // and nothing sleeps; the user learns when it resets.
                if wait > Duration::from_millis(retry.max_wait_ms) {
                    let err = ratelimit::window_over_cap(&provider.name, wait, retry.max_wait_ms);
                    return Err(finalize_error(providers, &provider, &model, err, attempt).await);
                }
                emit(Delta::Retry {
                    attempt,
                    max_retries: retry.max_retries,
                    delay_ms: ratelimit::duration_ms(wait),
                    class: ErrorClass::RateLimit,
                    message: format!(
                        "{}: the rate-limit window is exhausted; waiting for it to reset",
                        provider.name
                    ),
                });
                tokio::time::sleep(wait).await;
            }
            Some(ratelimit::Hold::Paced(wait)) => {
                // Short turns pass quietly; a noticeable one says why.
                if wait >= Duration::from_secs(1) {
                    emit(Delta::Retry {
                        attempt,
                        max_retries: retry.max_retries,
                        delay_ms: ratelimit::duration_ms(wait),
                        class: ErrorClass::RateLimit,
                        message: format!(
                            "{}: few requests are left in the rate-limit window; spacing them until it resets",
                            provider.name
                        ),
                    });
                }
                tracing::debug!(provider = %provider.name, wait_ms = ratelimit::duration_ms(wait), "paced");
                tokio::time::sleep(wait).await;
            }
            None => {}
        }
        let mut delivered = false;
        let mut watch = |d: Delta| {
            if !matches!(d, Delta::Usage { .. } | Delta::Retry { .. }) {
                delivered = true;
            }
            emit(d)
        };
        let timeouts = providers.config.timeouts.stretched(stretch);
        let slot = providers.connection_slot(&provider.name).await;
        let result = attempt_once(providers, &provider, &model, req, stream, &timeouts, &mut watch).await;
        drop(slot);
        let err = match result {
            Ok(mut done) => {
                done.retries = attempt;
                return Ok(done);
            }
            // a server may quote the key back, in a body or in-band
            Err(mut err) => {
                for secret in provider.secrets() {
                    err.message = error::redact(&err.message, Some(secret));
                }
                err
            }
        };
        if err.class == ErrorClass::AuthFailure && !delivered {
            if let Some(sources) = providers.key_sources(&provider.name) {
                if !reread {
                    reread = true;
                    // Read again: a command's key may have been rotated, a
                    // variable changed (`vim.env`). The same key is not sent twice.
                    let (fresh, _) = providers.keyed(&req.model, true).await?;
                    if fresh.api_key.is_some() && fresh.api_key != provider.api_key {
                        tracing::info!(provider = %provider.name, "the key was refused: read again, retrying once");
                        provider = fresh;
                        continue;
                    }
                }
                let mut err = err;
                err.message = format!(
                    "{} The key was read again before giving up: check {sources}.",
                    err.message
                );
                return Err(finalize_error(providers, &provider, &model, err, attempt).await);
            }
        }
        let backoff = delays.next();
        if !retry.retries(&err) || delivered || attempt >= retry.max_retries {
            return Err(finalize_error(providers, &provider, &model, err, attempt).await);
        }
        // The server's own wait (already bounded by the parsers) wins over
        // backoff, but never beyond the cap: past it, no retry and no sleep.
        let server_wait = err.retry_after_ms.map(Duration::from_millis);
        if let Some(wait) = server_wait.filter(|w| *w > Duration::from_millis(retry.max_wait_ms)) {
            let err = ratelimit::retry_after_over_cap(err, wait, retry.max_wait_ms);
            return Err(finalize_error(providers, &provider, &model, err, attempt).await);
        }
        let Some(delay) = server_wait.or(backoff) else {
            return Err(finalize_error(providers, &provider, &model, err, attempt).await);
        };
        // Our own backoff stays within the cap too (max_delay_ms could exceed it).
        let delay = delay.min(Duration::from_millis(retry.max_wait_ms));
        if err.class == ErrorClass::Timeout {
            stretch = (stretch * providers::TIMEOUT_GROWTH).min(providers::TIMEOUT_GROWTH_CAP);
        }
        attempt += 1;
        tracing::info!(provider = %provider.name, attempt, delay_ms = ratelimit::duration_ms(delay), class = err.class.as_str(), "retrying");
        emit(Delta::Retry {
            attempt,
            max_retries: retry.max_retries,
            delay_ms: rounded_ms(delay),
            class: err.class,
            message: err.message.clone(),
        });
        tokio::time::sleep(delay).await;
    }
}

/// `d` to the nearest millisecond (backoff delays like 39.99 ms say 40), saturating.
fn rounded_ms(d: Duration) -> u64 {
    ratelimit::duration_ms(d.saturating_add(Duration::from_micros(500)))
}

/// Adds what helps the user act on a final error: the models that exist
/// when the model was not found, and how many retries were spent.
async fn finalize_error(
    providers: &Providers,
    provider: &ResolvedProvider,
    model: &str,
    mut err: LlmError,
    attempts: u32,
) -> LlmError {
    if err.class == ErrorClass::ModelNotFound {
        let listed = tokio::time::timeout(Duration::from_secs(5), list_models_of(providers, provider)).await;
        let known = match listed {
            Ok(Ok(ids)) if !ids.is_empty() => ids,
            _ => provider.models.clone(),
        };
        if !known.is_empty() {
            let shown: Vec<&str> = known.iter().take(12).map(String::as_str).collect();
            let more = known.len().saturating_sub(shown.len());
            let tail = if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            };
            err.message = format!(
                "{} Models of {}: {}{tail}.",
                err.message,
                provider.name,
                shown.join(", ")
            );
        }
        tracing::debug!(model, "model not found");
    }
    if attempts > 0 {
        err.message = format!("{} (after {attempts} retries)", err.message);
    }
    err
}

async fn attempt_once(
    providers: &Providers,
    provider: &ResolvedProvider,
    model: &str,
    req: &ChatRequest,
    stream: bool,
    timeouts: &providers::Timeouts,
    emit: &mut (dyn FnMut(Delta) + Send),
) -> Result<StreamDone, LlmError> {
    // A provider without a native tool field gets the tools in the prompt,
    // and the calls written in the answer are read back out of its text.
    let prompted;
    let (req, mut extractor) = if provider.native_tools {
        (req, None)
    } else {
        prompted = prompt_tools::into_prompt(req);
        let extractor = prompt_tools::CallExtractor::new(&wire::unique_call_prefix());
        (&prompted, Some(extractor))
    };
    let wire = prepare(provider, model, req, stream);
    let client = providers.client(&provider.name)?;
    let timeouts = *timeouts;
    tracing::debug!(provider = %provider.name, model = %model, stream, "request sent");
    let response = http::send(&client, provider, model, wire, &timeouts, &providers.rate_limits).await?;
    let header_cost = response
        .headers()
        .get(mia_cost::gateway::HEADER)
        .and_then(|v| mia_cost::gateway::from_header(v.as_bytes()));
    let mut acc = Accumulator::default();
    let max_event = providers.config.limits.max_event_bytes;
    if stream {
        decode_stream(
            provider,
            response,
            &timeouts,
            max_event,
            extractor.as_mut(),
            &mut acc,
            emit,
        )
        .await?;
    } else {
        let idle = Duration::from_millis(timeouts.stream_idle_ms.max(timeouts.request_ms));
        let body = match tokio::time::timeout(idle, read_body(provider, response, max_event)).await {
            Err(_) => return Err(stalled(provider, timeouts.stream_idle_ms)),
            Ok(result) => result?,
        };
        let json: Value = serde_json::from_slice(&body).map_err(|e| {
            LlmError::new(
                ErrorClass::ServerError,
                Some(&provider.name),
                format!("{}: the response is not valid JSON ({e}).", provider.name),
            )
        })?;
        let mut events = provider.format().parse_response(&provider.name, &json)?;
        if let Some(x) = extractor.as_mut() {
            let mut read = Vec::new();
            for e in events {
                x.feed(e, &mut read);
            }
            x.flush(&mut read);
            events = read;
        }
        for e in events {
            acc.apply(&e);
            if let DecodeEvent::Delta(d) = e {
                emit(d);
            }
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
    // A gateway's own figure wins over the price table: the body's (the
    // last streamed chunk's) `usage.cost`, else the response header.
    let cost = match acc.gateway_cost.or(header_cost) {
        Some(usd) => mia_cost::gateway::cost(usd),
        None => providers.cost_of(&provider.name, model, &usage),
    };
    Ok(StreamDone {
        message: acc.message(),
        retries: 0,
        usage,
        stop_reason: acc.stop_reason.clone().unwrap_or(StopReason::EndTurn),
        text: acc.text,
        reasoning: acc.reasoning,
        tool_calls: acc.tool_calls,
        cost,
        provider: provider.name.clone(),
        model: model.to_string(),
    })
}

fn stalled(provider: &ResolvedProvider, ms: u64) -> LlmError {
    LlmError::new(
        ErrorClass::Timeout,
        Some(&provider.name),
        format!(
            "{}: the answer stalled for {ms} ms (timeouts.stream_idle_ms); the partial answer is kept.",
            provider.name
        ),
    )
}

/// A whole (non-streamed) response body, refused once it passes `max` bytes.
async fn read_body(provider: &ResolvedProvider, response: reqwest::Response, max: usize) -> Result<Vec<u8>, LlmError> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| http::interrupted_error(&provider.name, &e))?;
        if body.len().saturating_add(chunk.len()) > max {
            return Err(too_large(provider, stream::EventTooLarge { limit: max }));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// One line or event passed `limits.max_event_bytes`: what happened, the
/// limit, and how to raise it. Not retried: the server would send it again.
fn too_large(provider: &ResolvedProvider, e: stream::EventTooLarge) -> LlmError {
    let p = &provider.name;
    let mut err = LlmError::new(
        ErrorClass::ServerError,
        Some(p),
        format!(
            "{p}: {e}; mia stopped reading the answer (the partial answer is kept). \
             If this provider really sends events that large, raise the limit, e.g. \
             setup({{ limits = {{ max_event_bytes = {} }} }}).",
            e.limit.saturating_mul(4)
        ),
    );
    err.retryable = false;
    err
}

async fn decode_stream(
    provider: &ResolvedProvider,
    response: reqwest::Response,
    timeouts: &providers::Timeouts,
    max_event_bytes: usize,
    mut extractor: Option<&mut prompt_tools::CallExtractor>,
    acc: &mut Accumulator,
    emit: &mut (dyn FnMut(Delta) + Send),
) -> Result<(), LlmError> {
    let mut decoder = provider.format().decoder(provider);
    let mut read = Vec::new();
    // No content type at all is read as SSE (what every provider sends);
    // one that names another format is refused, never guessed at.
    let content_type = match response.headers().get(reqwest::header::CONTENT_TYPE) {
        None => "text/event-stream".to_string(),
        Some(v) => {
            let ct = String::from_utf8_lossy(v.as_bytes())
                .chars()
                .take(100)
                .collect::<String>();
            if !stream::known_stream_type(&ct) {
                return Err(LlmError::new(
                    ErrorClass::UnsupportedStreamFormat,
                    Some(&provider.name),
                    format!(
                        "{}: the answer came as `{}`, a stream format mia cannot read \
                         (it reads text/event-stream, application/x-ndjson and application/json). \
                         Check providers.{}.base_url: it may point at a web page or a proxy.",
                        provider.name,
                        ct.escape_debug(),
                        provider.name
                    ),
                ));
            }
            ct
        }
    };
    // Servers frame streams as SSE, NDJSON or a growing JSON array; every
    // framing yields the same payloads for the wire decoder.
    let mut sse = FrameDecoder::with_limit(&content_type, max_event_bytes);
    let mut body = response.bytes_stream();
    let mut sse_events = Vec::new();
    let mut decoded = Vec::new();
    let idle = Duration::from_millis(timeouts.stream_idle_ms);
    let mut overflow = None;
    loop {
        let ended = match tokio::time::timeout(idle, body.next()).await {
            Err(_) => return Err(stalled(provider, timeouts.stream_idle_ms)),
            Ok(None) => {
                sse.finish(&mut sse_events);
                true
            }
            Ok(Some(Err(e))) => return Err(http::interrupted_error(&provider.name, &e)),
            Ok(Some(Ok(bytes))) => {
                overflow = sse.push(&bytes, &mut sse_events).err();
                false
            }
        };
        for event in sse_events.drain(..) {
            decoder.decode(&event, &mut decoded)?;
            if let Some(x) = extractor.as_deref_mut() {
                for d in decoded.drain(..) {
                    x.feed(d, &mut read);
                }
                decoded.append(&mut read);
            }
            for d in decoded.drain(..) {
                acc.apply(&d);
                if let DecodeEvent::Delta(delta) = d {
                    emit(delta);
                }
            }
        }
        // An answer cut off mid-tag keeps what it wrote as text.
        if let (true, Some(x)) = (ended || overflow.is_some(), extractor.as_deref_mut()) {
            x.flush(&mut read);
            for d in read.drain(..) {
                acc.apply(&d);
                if let DecodeEvent::Delta(delta) = d {
                    emit(delta);
                }
            }
        }
        if let Some(e) = overflow {
            // Past the limit the rest of the body is dropped unread: the
            // connection closes, and nothing more is buffered.
            return Err(too_large(provider, e));
        }
        if ended {
            return Ok(());
        }
    }
}

async fn list_models_of(providers: &Providers, provider: &ResolvedProvider) -> Result<Vec<String>, LlmError> {
    let format = provider.format();
    let client = providers.client(&provider.name)?;
    let wire = WireRequest {
        url: format.models_url(provider),
        headers: format.headers(provider),
        body: None,
    };
    let response = http::send(
        &client,
        provider,
        "",
        wire,
        &providers.config.timeouts,
        &providers.rate_limits,
    )
    .await?;
    // The list is one JSON document: bounded like any response body.
    let body = read_body(provider, response, providers.config.limits.max_event_bytes).await?;
    let json: Value = serde_json::from_slice(&body).map_err(|e| {
        LlmError::new(
            ErrorClass::ServerError,
            Some(&provider.name),
            format!("{}: the model list is not valid JSON ({e}).", provider.name),
        )
    })?;
    Ok(format.model_ids(&json))
}

/// The models `provider` serves (its `models` endpoint).
pub async fn list_models(providers: &Providers, provider: &str) -> Result<Vec<String>, LlmError> {
    let (resolved, _) = providers.keyed(&format!("{provider}/-"), false).await?;
    list_models_of(providers, &resolved).await
}

/// What `health_check` finds: whether the provider answered its model
/// listing (with the configured credentials), how fast, how many models,
/// and what its last response said of the request window.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Health {
    pub connected: bool,
    pub latency_ms: u64,
    pub models: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<LlmError>,
}

/// Lists `provider`'s models and reports on the way (see [`Health`]). Only
/// an unknown provider is an error; a failing one is `connected = false`
/// with the error.
pub async fn health_check(providers: &Providers, provider: &str) -> Result<Health, LlmError> {
    let (resolved, _) = providers.keyed(&format!("{provider}/-"), false).await?;
    let started = std::time::Instant::now();
    let listed = list_models_of(providers, &resolved).await;
    let latency_ms = ratelimit::duration_ms(started.elapsed());
    let rate_limit = providers.rate_limits.snapshot(&resolved.name).map(|w| {
        serde_json::json!({
            "remaining": w.remaining,
            "limit": w.limit,
            "reset_ms": ratelimit::duration_ms(w.reset),
        })
    });
    Ok(match listed {
        Ok(ids) => Health {
            connected: true,
            latency_ms,
            models: ids.len(),
            rate_limit,
            error: None,
        },
        Err(e) => Health {
            connected: false,
            latency_ms,
            models: 0,
            rate_limit,
            error: Some(e),
        },
    })
}

/// Servers that never report usage still get a count, marked as estimated
/// (about four characters per token, the usual rule of thumb for English and code).
fn estimate_usage(req: &ChatRequest, answer: &str) -> mia_cost::Usage {
    let tokens = |s: &str| (s.chars().count() as u64).div_ceil(4);
    let prompt: u64 = req.system.as_deref().map(tokens).unwrap_or(0)
        + req.messages.iter().map(|m| tokens(&m.plain_text())).sum::<u64>();
    mia_cost::Usage {
        input_tokens: prompt,
        output_tokens: tokens(answer),
        estimated: true,
        ..mia_cost::Usage::default()
    }
}
