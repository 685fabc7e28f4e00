//! The real recorded Gemini streams in ../shared/fixtures/recorded/gemini
//! (one GenerateContentResponse JSON per line, as `alt=sse` sends them)
//! decode to the right text, reasoning, tool calls, stop reason and usage,
//! whatever the network chunking; the recorded 429 body classifies as a rate
//! limit with its RetryInfo delay. Expected values were written by hand from
//! reading the recordings. Skips (with a message) when ../shared is not
//! beside the project.

mod common;

use common::{decode_chunked, recorded};

use mia_cost::Usage;
use mia_llm::delta::{Accumulator, DecodeEvent};
use mia_llm::error::{from_provider_error, ErrorClass};
use mia_llm::gemini;
use mia_llm::gemini::{request_body, GeminiDecoder};
use mia_llm::message::{ChatRequest, Message, Role, StopReason};
use mia_llm::stream::SseDecoder;
use serde_json::{json, Value};

/// What a stream decoded to: the folded answer and every event, in order.
struct Decoded {
    acc: Accumulator,
    events: Vec<DecodeEvent>,
}

impl Decoded {
    /// Signatures as (tool call id, first 8 characters).
    fn signatures(&self) -> Vec<(Option<&str>, &str)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                DecodeEvent::Signature {
                    tool_call_id,
                    signature,
                } => Some((tool_call_id.as_deref(), &signature[..8])),
                _ => None,
            })
            .collect()
    }
}

/// Frames each recorded JSON line as an SSE `data:` event, feeds the stream
/// in pseudo-random chunks through the SSE parser, the Gemini decoder and
/// an accumulator.
fn decode(rel: &str, seed: u64) -> Option<Decoded> {
    let lines = recorded(rel)?;
    let mut wire = String::new();
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        wire.push_str("data: ");
        wire.push_str(line);
        wire.push_str("\r\n\r\n");
    }
    let mut dec = GeminiDecoder::new("recorded");
    let (acc, events) = decode_chunked(wire.as_bytes(), seed, |e, out| {
        dec.decode(e, out).expect("recorded stream decodes")
    });
    Some(Decoded { acc, events })
}

fn usage(input: u64, output: u64, reasoning: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        reasoning_tokens: reasoning,
        ..Usage::default()
    }
}

#[test]
fn text_stream_decodes_with_thoughts_billed_as_output() {
    for seed in [1, 7, 42] {
        let Some(d) = decode("gemini/google-text.chunks.txt", seed) else {
            return;
        };
        assert_eq!(
            d.acc.text,
            "There are **3** \"r\"s in strawberry.\n\nst**r**awbe**rr**y"
        );
        assert_eq!(d.acc.reasoning, "");
        assert!(d.acc.tool_calls.is_empty());
        // The signature rides on an empty text part at the end.
        assert_eq!(d.signatures(), vec![(None, "EqsFCqgF")]);
        assert_eq!(d.acc.stop_reason, Some(StopReason::EndTurn));
        // No end marker on this wire: the finish reason is the end.
        assert!(!d.acc.terminal);
        assert!(d.acc.complete());
        // 9 prompt; 23 answer + 185 thinking.
        assert_eq!(d.acc.usage, Some(usage(9, 208, 185)));
    }
}

#[test]
fn hidden_thinking_shows_only_in_usage_and_signature() {
    let Some(d) = decode("gemini/google-reasoning.chunks.txt", 3) else {
        return;
    };
    assert_eq!(
        d.acc.text,
        "There are **3** \"r\"s in strawberry.\n\nHere is the breakdown: st**r**awbe**rr**y."
    );
    // The model thought (256 tokens) but sent no thought text.
    assert_eq!(d.acc.reasoning, "");
    assert_eq!(d.signatures(), vec![(None, "Eo0HCooH")]);
    assert_eq!(d.acc.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(d.acc.usage, Some(usage(9, 285, 256)));
}

#[test]
fn tool_call_gets_a_generated_id_and_stop_becomes_tool_use() {
    let Some(d) = decode("gemini/google-tool-call.chunks.txt", 5) else {
        return;
    };
    assert_eq!(d.acc.text, "");
    assert_eq!(d.acc.tool_calls.len(), 1);
    let call = &d.acc.tool_calls[0];
    assert_eq!(call.id, "call_0");
    assert_eq!(call.name, "weather");
    assert_eq!(call.arguments, json!({ "location": "San Francisco" }));
    assert_eq!(d.signatures(), vec![(Some("call_0"), "EqUCCqIC")]);
    assert!(call.signature.as_deref().is_some_and(|s| s.starts_with("EqUCCqIC")));
    // The recording says STOP.
    assert_eq!(d.acc.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(d.acc.usage, Some(usage(29, 60, 45)));
}

#[test]
fn gemini3_tool_call_keeps_its_long_signature_on_the_call() {
    let Some(d) = decode("gemini/google-tool-call-gemini3.chunks.txt", 9) else {
        return;
    };
    assert_eq!(d.acc.tool_calls.len(), 1);
    let call = &d.acc.tool_calls[0];
    assert_eq!(call.name, "weather");
    assert_eq!(call.arguments, json!({ "location": "San Francisco" }));
    assert_eq!(d.signatures(), vec![(Some("call_0"), "EpEgCo4g")]);
    let full = d
        .events
        .iter()
        .find_map(|e| match e {
            DecodeEvent::Signature { signature, .. } => Some(signature.as_str()),
            _ => None,
        })
        .unwrap_or_default();
    assert!(full.ends_with("w3YcJ1FX"), "{full}");
    assert_eq!(d.acc.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(d.acc.usage, Some(usage(29, 819, 804)));
}

/// Vertex AI streamed the arguments: each `read_screen` call arrives as a
/// named piece with `willContinue`, `partialArgs` pieces for `$.id`, and an
/// empty `functionCall: {}` closing it. `read_theme` comes whole, without args.
#[test]
fn streamed_function_arguments_are_assembled_into_four_calls() {
    for seed in [11, 12] {
        let Some(d) = decode("gemini/google-stream-no-args-tool-call.chunks.txt", seed) else {
            return;
        };
        assert_eq!(
            d.acc.reasoning,
            "**Processing User Requests**\n\nI've started by understanding the user's instructions. Currently, I'm focusing on the initial steps: reading the specified theme using the appropriate tool. Next, I plan to tackle reading the screens, beginning with screen \"A,\" then proceeding with \"B\" and \"C\" in parallel as instructed.\n\n\n"
        );
        assert_eq!(d.acc.text, "");
        let calls: Vec<(&str, &str, &Value)> = d
            .acc
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments))
            .collect();
        assert_eq!(
            calls,
            vec![
                ("call_0", "read_theme", &json!({})),
                ("call_1", "read_screen", &json!({ "id": "A" })),
                ("call_2", "read_screen", &json!({ "id": "B" })),
                ("call_3", "read_screen", &json!({ "id": "C" })),
            ]
        );
        assert_eq!(d.signatures(), vec![(Some("call_0"), "AY89a18a")]);
        assert_eq!(d.acc.stop_reason, Some(StopReason::ToolUse));
        // Early chunks carry usageMetadata with only trafficType: no usage
        // until the last chunk's 249 prompt, 58 answer + 183 thinking.
        let usage_events = d
            .events
            .iter()
            .filter(|e| matches!(e, DecodeEvent::Delta(mia_llm::delta::Delta::Usage { .. })))
            .count();
        assert_eq!(usage_events, 1);
        assert_eq!(d.acc.usage, Some(usage(249, 241, 183)));
    }
}

/// The decoded answer, sent back as history, puts the thought text first and
/// the signature on `read_theme`, where Gemini 3 validates it.
#[test]
fn streamed_calls_go_back_with_their_signature() {
    let Some(d) = decode("gemini/google-stream-no-args-tool-call.chunks.txt", 13) else {
        return;
    };
    let req = ChatRequest {
        model: "gemini/gemini-3-flash-preview".into(),
        system: None,
        messages: vec![
            Message::text(Role::User, "Read the theme, then screens A, B and C"),
            d.acc.message(),
        ],
        ..ChatRequest::default()
    };
    let body = request_body(&req);
    let parts = body["contents"][1]["parts"].as_array().cloned().unwrap_or_default();
    assert_eq!(body["contents"][1]["role"], "model");
    assert_eq!(parts.len(), 5, "{parts:?}");
    assert_eq!(parts[0]["thought"], true);
    assert!(parts[0]["text"]
        .as_str()
        .unwrap_or_default()
        .starts_with("**Processing User Requests**"));
    assert_eq!(parts[1]["functionCall"], json!({ "name": "read_theme", "args": {} }));
    assert!(parts[1]["thoughtSignature"]
        .as_str()
        .unwrap_or_default()
        .starts_with("AY89a18a"));
    assert_eq!(
        parts[2]["functionCall"],
        json!({ "name": "read_screen", "args": { "id": "A" } })
    );
    assert_eq!(
        parts[4]["functionCall"],
        json!({ "name": "read_screen", "args": { "id": "C" } })
    );
    assert!(parts[2..].iter().all(|p| p.get("thoughtSignature").is_none()));
}

#[test]
fn recorded_429_body_is_a_rate_limit_with_the_retry_info_delay() {
    let Some(text) = recorded("gemini/google-429-retry-info.json") else {
        return;
    };
    let body: Value = serde_json::from_str(&text).expect("the recorded body is JSON");
    let err = from_provider_error(
        "gemini",
        gemini::ERROR_TYPES,
        body["error"]["status"].as_str().unwrap_or_default(),
        body["error"]["message"].as_str().unwrap_or_default(),
        gemini::retry_delay_ms(&body),
    );
    assert_eq!(err.class, ErrorClass::RateLimit);
    assert_eq!(err.class.as_str(), "rate_limit");
    assert!(err.retryable);
    // "retryDelay": "34.4s"
    assert_eq!(err.retry_after_ms, Some(34_400));
    assert!(
        err.message
            .contains("You exceeded your current quota, please check your plan."),
        "{}",
        err.message
    );

    // The same body arriving inside a stream (pretty-printed, so as
    // several `data:` lines) ends the stream with the same error.
    let mut wire = String::new();
    for line in text.lines() {
        wire.push_str(&format!("data: {line}\n"));
    }
    wire.push('\n');
    let mut sse = SseDecoder::new();
    let mut events = Vec::new();
    sse.push(wire.as_bytes(), &mut events).unwrap();
    assert_eq!(events.len(), 1);
    let err = GeminiDecoder::new("gemini")
        .decode(&events[0], &mut Vec::new())
        .expect_err("an error payload is an error");
    assert_eq!(err.class, ErrorClass::RateLimit);
    assert_eq!(err.retry_after_ms, Some(34_400));
    assert_eq!(err.status, Some(429));
}
