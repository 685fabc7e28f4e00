//! The real recorded streams of OpenAI's Responses API (gpt-5, in
//! ../shared/fixtures/recorded/openai-responses) decode to the right text,
//! tool call, encrypted reasoning, stop reason, usage and error, whatever
//! the network chunking. Expected values were written by hand from reading
//! the recordings. Skips (with a message) when ../shared is not beside the
//! project.

mod common;

use common::{decode_chunked, recorded, XorShift};

use mia_cost::Usage;
use mia_llm::delta::{Accumulator, DecodeEvent};
use mia_llm::error::{ErrorClass, LlmError};
use mia_llm::message::{Part, StopReason};
use mia_llm::responses::ResponsesDecoder;
use mia_llm::stream::SseDecoder;

fn path(name: &str) -> String {
    format!("openai-responses/openai-responses-{name}.sse")
}

/// Feeds the recorded bytes as they are (SSE with `event:` lines) in
/// random chunks; every chunking decodes the same.
fn decode(wire: &str, seed: u64) -> (Accumulator, Vec<DecodeEvent>) {
    let mut dec = ResponsesDecoder::new("recorded");
    decode_chunked(wire.as_bytes(), seed, |e, out| {
        dec.decode(e, out).expect("recorded stream decodes")
    })
}

fn usage(input: u64, output: u64, reasoning: u64) -> Option<Usage> {
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        reasoning_tokens: reasoning,
        ..Usage::default()
    })
}

fn encrypted(msg: &mia_llm::message::Message) -> Vec<&str> {
    msg.parts
        .iter()
        .filter_map(|p| match p {
            Part::EncryptedReasoning { data } => Some(data.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn text_after_a_reasoning_item_keeps_the_items_final_encrypted_content() {
    let Some(s) = recorded(&path("text-helloWorldResponse")) else {
        return;
    };
    for seed in [1, 7, 42] {
        let (acc, _) = decode(&s, seed);
        assert_eq!(acc.text, "Hello, World!");
        assert_eq!(acc.reasoning, "", "no summary was asked for");
        assert_eq!(acc.stop_reason, Some(StopReason::EndTurn));
        assert!(acc.terminal);
        assert_eq!(acc.usage, usage(12, 10, 0));
        // The item as done (not as added, nor the copy in response.completed).
        assert_eq!(encrypted(&acc.message()), vec!["encrypted-2"]);
        assert_eq!(
            acc.message().parts,
            vec![
                Part::EncryptedReasoning {
                    data: "encrypted-2".into()
                },
                Part::Text {
                    text: "Hello, World!".into()
                }
            ]
        );
    }
}

#[test]
fn a_function_call_in_pieces_is_assembled_with_its_call_id_after_its_reasoning() {
    let Some(s) = recorded(&path("toolcalls-response1")) else {
        return;
    };
    for seed in [2, 9, 31] {
        let (acc, events) = decode(&s, seed);
        assert_eq!(acc.text, "");
        assert_eq!(acc.tool_calls.len(), 1);
        let call = &acc.tool_calls[0];
        assert_eq!(
            (call.id.as_str(), call.name.as_str()),
            ("call_5dp5Uj0Loqn1YcyIpqSq6sLX", "get_weather")
        );
        assert_eq!(call.arguments, serde_json::json!({ "location": "New York City, USA" }));
        let pieces: String = events
            .iter()
            .filter_map(|e| match e {
                DecodeEvent::Delta(mia_llm::delta::Delta::ToolCallDelta { arguments_delta, .. }) => {
                    Some(arguments_delta.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(pieces, "{ \"location\": \"New York City, USA\" }");
        assert_eq!(acc.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(acc.usage, usage(75, 155, 128));
        let message = acc.message();
        let enc = encrypted(&message);
        assert_eq!(enc.len(), 1);
        assert!(enc[0].starts_with("gAAAAABo2TA_9aBcwzsK") && enc[0].ends_with("KPQDR8Yw=="));
        assert_eq!(enc[0].len(), 1764);
        assert!(matches!(message.parts[0], Part::EncryptedReasoning { .. }));
        assert!(matches!(message.parts[1], Part::ToolCall { .. }));
    }
}

#[test]
fn the_answer_after_the_tool_output_decodes() {
    let Some(s) = recorded(&path("toolcalls-response2")) else {
        return;
    };
    let (acc, _) = decode(&s, 5);
    assert_eq!(acc.text, "Current weather in New York City, USA: Sunny.");
    assert!(acc.tool_calls.is_empty());
    assert_eq!(acc.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(acc.usage, usage(114, 15, 0));
    assert!(encrypted(&acc.message()).is_empty());
}

#[test]
fn structured_output_is_the_json_text() {
    let Some(s) = recorded(&path("structuredoutput-structuredOutputResponse")) else {
        return;
    };
    let (acc, _) = decode(&s, 13);
    assert_eq!(acc.text, r#"{"temperatureCelsius":22,"condition":"Partly Cloudy"}"#);
    let parsed: serde_json::Value = serde_json::from_str(&acc.text).expect("the answer is JSON");
    assert_eq!(parsed["condition"], "Partly Cloudy");
    assert_eq!(acc.usage, usage(72, 25, 0));
    assert_eq!(encrypted(&acc.message())[0].len(), 932);
}

#[test]
fn a_failed_stream_is_one_clear_unretried_error() {
    let Some(s) = recorded(&path("errorhandling-insufficientQuotaErrorResponse")) else {
        return;
    };
    for seed in [3, 4] {
        let mut dec = ResponsesDecoder::new("openai");
        let mut sse = SseDecoder::new();
        let mut rng = XorShift(seed);
        let (mut events, mut out) = (Vec::new(), Vec::new());
        let mut bytes = s.as_bytes();
        let mut first: Option<LlmError> = None;
        while !bytes.is_empty() {
            let (piece, rest) = bytes.split_at(rng.next().min(bytes.len()));
            bytes = rest;
            sse.push(piece, &mut events).expect("events fit");
            for e in events.drain(..) {
                if let Err(err) = dec.decode(&e, &mut out) {
                    first.get_or_insert(err);
                }
            }
        }
        assert!(out.is_empty(), "{out:?}");
        let err = first.expect("the stream fails");
        assert_eq!(err.class, ErrorClass::InvalidRequest);
        assert!(!err.retryable, "retrying does not bring quota back");
        assert!(
            err.message
                .starts_with("openai: the request was refused (You exceeded your current quota, please check your plan and billing details."),
            "{}",
            err.message
        );
    }
}
