//! The real recorded Anthropic Messages streams in ../shared/fixtures/recorded
//! (`anthropic/*.chunks.txt`, one JSON event per line, and `anthropic-sse/*.txt`,
//! raw SSE text) decode to the right text, reasoning, tool calls, stop reason
//! and usage, whatever the network chunking. Expected values were written by
//! hand from reading the recordings. Skips (with a message) when ../shared is
//! not beside the project.

mod common;

use common::{decode_chunked, recorded};

use mia_cost::Usage;
use mia_llm::anthropic::{request_body, AnthropicDecoder, AnthropicOptions};
use mia_llm::delta::{Accumulator, DecodeEvent};
use mia_llm::message::{ChatRequest, Message, Role, StopReason};
use serde_json::{json, Value};

/// What a stream decoded to: the folded answer and every event, in order.
struct Decoded {
    acc: Accumulator,
    events: Vec<DecodeEvent>,
}

impl Decoded {
    fn signatures(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                DecodeEvent::Signature {
                    tool_call_id: None,
                    signature,
                } => Some(signature.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Frames each recorded JSON line as `event: <type>` + `data: <json>`.
fn frame_lines(lines: &str) -> String {
    let mut wire = String::new();
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        let json: Value = serde_json::from_str(line).expect("each recorded line is JSON");
        let kind = json["type"].as_str().expect("each event names its type");
        wire.push_str(&format!("event: {kind}\r\ndata: {line}\r\n\r\n"));
    }
    wire
}

/// Feeds raw SSE bytes in pseudo-random chunks through the SSE parser,
/// the Anthropic decoder and an accumulator.
fn decode_wire(wire: &str, seed: u64) -> Decoded {
    let mut dec = AnthropicDecoder::new("recorded");
    let (acc, events) = decode_chunked(wire.as_bytes(), seed, |e, out| {
        dec.decode(e, out).expect("recorded stream decodes")
    });
    Decoded { acc, events }
}

fn decode_chunks(rel: &str, seed: u64) -> Option<Decoded> {
    recorded(rel).map(|s| decode_wire(&frame_lines(&s), seed))
}

fn decode_sse(rel: &str, seed: u64) -> Option<Decoded> {
    recorded(rel).map(|s| decode_wire(&s, seed))
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

#[test]
fn text_stream_decodes_whatever_the_chunking() {
    for seed in [1, 7, 42] {
        let Some(d) = decode_chunks("anthropic/anthropic-text.chunks.txt", seed) else {
            return;
        };
        assert_eq!(
            d.acc.text,
            "Hello! I'm doing well, thank you for asking. How are you doing today? Is there anything I can help you with?"
        );
        assert_eq!(d.acc.reasoning, "");
        assert!(d.acc.tool_calls.is_empty());
        assert_eq!(d.acc.stop_reason, Some(StopReason::EndTurn));
        assert!(d.acc.terminal);
        assert_eq!(d.acc.usage, Some(usage(12, 30)));
    }
}

#[test]
fn thinking_is_kept_apart_with_its_signature() {
    let Some(d) = decode_chunks("anthropic/anthropic-clear-thinking.1.chunks.txt", 3) else {
        return;
    };
    assert_eq!(
        d.acc.reasoning,
        "The previous result was 925. Now I need to divide that by 5.\n\n925 ÷ 5 = 185"
    );
    assert_eq!(d.acc.text, "925 ÷ 5 = 185");
    let sigs = d.signatures();
    assert_eq!(sigs.len(), 1);
    assert!(sigs[0].starts_with("EvQBCkYICxgCKkAxhD4N"), "{}", sigs[0]);
    assert!(sigs[0].ends_with("/EhT6Ca17BgB"), "{}", sigs[0]);
    assert_eq!(d.acc.reasoning_signature.as_deref(), Some(sigs[0]));

    // The answer goes back in the next request as signed thinking, then text.
    let req = ChatRequest {
        model: "anthropic/claude-sonnet-4-5".into(),
        system: None,
        messages: vec![Message::text(Role::User, "Divide by 5"), d.acc.message()],
        ..ChatRequest::default()
    };
    let body = request_body(&req, "claude-sonnet-4-5", &AnthropicOptions::default(), true);
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {
                "type": "thinking",
                "thinking": "The previous result was 925. Now I need to divide that by 5.\n\n925 ÷ 5 = 185",
                "signature": sigs[0]
            },
            { "type": "text", "text": "925 ÷ 5 = 185" }
        ])
    );
    assert_eq!(d.acc.stop_reason, Some(StopReason::EndTurn));
    assert!(d.acc.complete());
    assert_eq!(d.acc.usage, Some(usage(69, 53)));
}

#[test]
fn server_run_code_execution_is_not_a_client_tool_call_and_cache_usage_is_final() {
    let Some(d) = decode_chunks(
        "anthropic/anthropic-code-execution-20260120-prompt-cache.1.chunks.txt",
        5,
    ) else {
        return;
    };
    assert_eq!(
        d.acc.text,
        "The sum of the squares of the numbers 1 through 12 is **650**."
    );
    // Two `server_tool_use` blocks ran on Anthropic's side: nothing for mia to run.
    assert!(d.acc.tool_calls.is_empty(), "{:?}", d.acc.tool_calls);
    assert_eq!(d.acc.stop_reason, Some(StopReason::EndTurn));
    assert!(d.acc.terminal);
    // message_start said 2 in / 3068 written / 0 read / 69 out; the final
    // message_delta totals replace all of them.
    assert_eq!(
        d.acc.usage,
        Some(Usage {
            input_tokens: 6,
            output_tokens: 198,
            cache_write_tokens: 3337,
            cache_read_tokens: 6289,
            ..Usage::default()
        })
    );
}

#[test]
fn json_tool_arguments_are_assembled() {
    let Some(d) = decode_chunks("anthropic/anthropic-json-tool.1.chunks.txt", 11) else {
        return;
    };
    assert_eq!(d.acc.text, "");
    assert_eq!(d.acc.tool_calls.len(), 1);
    let call = &d.acc.tool_calls[0];
    assert_eq!(call.id, "toolu_01KFbKqPYSuAKujiL6mTfzYA");
    assert_eq!(call.name, "json");
    assert_eq!(
        call.arguments,
        json!({ "elements": [{ "location": "San Francisco", "temperature": 58, "condition": "sunny" }] })
    );
    assert_eq!(d.acc.stop_reason, Some(StopReason::ToolUse));
    assert!(d.acc.terminal);
    assert_eq!(d.acc.usage, Some(usage(849, 47)));
}

#[test]
fn input_tokens_in_message_delta_replace_the_start_count() {
    let Some(d) = decode_chunks("anthropic/anthropic-message-delta-input-tokens.chunks.txt", 13) else {
        return;
    };
    assert_eq!(d.acc.text, "pong");
    assert_eq!(d.acc.stop_reason, Some(StopReason::EndTurn));
    // message_start said 43 input tokens, message_delta says 61: the later total wins.
    assert_eq!(d.acc.usage, Some(usage(61, 2)));
}

#[test]
fn refusal_is_a_content_filter_stop_with_no_text() {
    let Some(d) = decode_chunks("anthropic/anthropic-refusal.chunks.txt", 17) else {
        return;
    };
    assert_eq!(d.acc.text, "");
    assert!(d.acc.tool_calls.is_empty());
    assert_eq!(d.acc.stop_reason, Some(StopReason::ContentFilter));
    assert!(d.acc.terminal);
    assert_eq!(d.acc.usage, Some(usage(18, 5)));
}

#[test]
fn tool_without_arguments_gets_an_empty_object() {
    let Some(d) = decode_chunks("anthropic/anthropic-tool-no-args.chunks.txt", 19) else {
        return;
    };
    assert_eq!(d.acc.text, "I'll update the issue list for you.");
    assert_eq!(d.acc.tool_calls.len(), 1);
    let call = &d.acc.tool_calls[0];
    assert_eq!(call.id, "toolu_01QE1WLsSVp5hy5Q3GmGTmjP");
    assert_eq!(call.name, "updateIssueList");
    assert_eq!(call.arguments, json!({}));
    assert_eq!(d.acc.stop_reason, Some(StopReason::ToolUse));
    assert_eq!(d.acc.usage, Some(usage(565, 48)));
}

#[test]
fn raw_sse_basic_response_keeps_start_input_tokens() {
    for seed in [2, 23] {
        let Some(d) = decode_sse("anthropic-sse/basic_response.txt", seed) else {
            return;
        };
        assert_eq!(d.acc.text, "Hello there!");
        assert_eq!(d.acc.stop_reason, Some(StopReason::EndTurn));
        assert!(d.acc.terminal);
        // message_delta only carries output_tokens: input stays at 11.
        assert_eq!(d.acc.usage, Some(usage(11, 6)));
    }
}

#[test]
fn raw_sse_tool_use_response_decodes() {
    let Some(d) = decode_sse("anthropic-sse/tool_use_response.txt", 29) else {
        return;
    };
    assert_eq!(d.acc.text, "I'll check the current weather in Paris for you.");
    assert_eq!(d.acc.tool_calls.len(), 1);
    let call = &d.acc.tool_calls[0];
    assert_eq!(call.id, "toolu_01NRLabsLyVHZPKxbKvkfSMn");
    assert_eq!(call.name, "get_weather");
    assert_eq!(call.arguments, json!({ "location": "Paris" }));
    assert_eq!(d.acc.stop_reason, Some(StopReason::ToolUse));
    assert!(d.acc.terminal);
    assert_eq!(d.acc.usage, Some(usage(377, 65)));
}

/// The answer ran out of tokens inside a tool call: the stream itself ends
/// properly (max_tokens, then message_stop) but the `tool_use` block is never
/// stopped and its JSON is cut mid-string. The answer is complete, the stop
/// reason says why, and the call keeps its raw, unparseable arguments so the
/// tool step refuses it instead of running it with made-up input.
#[test]
fn tool_call_cut_by_max_tokens_keeps_unparseable_arguments() {
    let Some(d) = decode_sse("anthropic-sse/incomplete_partial_json_response.txt", 31) else {
        return;
    };
    assert_eq!(
        d.acc.text,
        "I'll create a comprehensive tax guide for someone with multiple W2s and save it in a file called taxes.txt. Let me do that for you now."
    );
    assert_eq!(d.acc.stop_reason, Some(StopReason::MaxTokens));
    assert!(d.acc.terminal);
    assert!(d.acc.complete());
    assert_eq!(d.acc.tool_calls.len(), 1);
    let call = &d.acc.tool_calls[0];
    assert_eq!(call.id, "toolu_01EKqbqmZrGRXy18eN7m9kvY");
    assert_eq!(call.name, "make_file");
    assert_eq!(
        call.arguments,
        Value::String(
            "{\"filename\": \"taxes.txt\", \"lines_of_text\": [\n\"# COMPREHENSIVE TAX GUIDE FOR INDIVIDUALS WITH MULTIPLE W-2s\",\n\"\",\n\"## INTRODUCTION\",\n\"\",\n\"Filing taxes"
                .into()
        )
    );
    assert_eq!(d.acc.usage, Some(usage(450, 124)));
}

#[test]
fn stream_cut_before_message_stop_is_not_complete() {
    let Some(s) = recorded("anthropic/anthropic-text.chunks.txt") else {
        return;
    };
    // Keep everything up to the last text delta: no message_delta, no message_stop.
    let cut: String = s
        .lines()
        .take_while(|l| !l.contains("\"content_block_stop\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let d = decode_wire(&frame_lines(&cut), 37);
    assert!(d.acc.text.starts_with("Hello! I'm doing well"));
    assert!(!d.acc.complete());
}
