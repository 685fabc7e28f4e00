//! Property tests of every stream decoder: whatever bytes a server sends, in
//! whatever pieces the network cuts them, no decoder panics, no event passes
//! the size limit, and a valid answer decodes the same for every chunking.
//!
//! Each property runs a fixed number of cases (printed as `proptest NAME:
//! N cases`), so the whole file stays well under a minute in
//! `cargo test --release`. A panic inside a case fails the property (the
//! runner reports it with the shrunk input), so these tests fail on a panic.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Map, Value};

use mia_llm::delta::{Accumulator, DecodeEvent, MAX_TOOL_CALLS};
use mia_llm::error::{ErrorClass, LlmError};
use mia_llm::stream::{EventTooLarge, FrameDecoder, JsonArrayDecoder, NdjsonDecoder, SseDecoder, SseEvent};
use mia_llm::{anthropic, gemini, ollama, openai, responses};

/// Runs `test` on `cases` inputs from `strategy`; fails with the shrunk
/// input on a failed assertion or a panic.
fn check<S: Strategy>(name: &str, cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>) {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    if let Err(e) = runner.run(&strategy, test) {
        panic!("proptest {name} failed: {e}");
    }
    eprintln!("proptest {name}: {cases} cases");
}

// ---- framing ---------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Framing {
    Sse,
    Ndjson,
    JsonArray,
}

/// One framing decoder's `push`.
type Push = Box<dyn FnMut(&[u8], &mut Vec<SseEvent>) -> Result<(), EventTooLarge>>;

fn framer(f: Framing, limit: usize) -> Push {
    match f {
        Framing::Sse => {
            let mut d = SseDecoder::with_limit(limit);
            Box::new(move |c, out| d.push(c, out))
        }
        Framing::Ndjson => {
            let mut d = NdjsonDecoder::with_limit(limit);
            Box::new(move |c, out| d.push(c, out))
        }
        Framing::JsonArray => {
            let mut d = JsonArrayDecoder::with_limit(limit);
            Box::new(move |c, out| d.push(c, out))
        }
    }
}

/// `bytes` cut at `cuts` (positions taken modulo the length, any order).
fn pieces<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
}

/// Feeds `bytes` in pieces through a [`FrameDecoder`] for `content_type`,
/// the way the stream task does: stop at the first error, else finish.
fn frame(content_type: &str, limit: usize, bytes: &[u8], cuts: &[usize]) -> (Vec<SseEvent>, Option<EventTooLarge>) {
    let mut d = FrameDecoder::with_limit(content_type, limit);
    let mut out = Vec::new();
    for piece in pieces(bytes, cuts) {
        if let Err(e) = d.push(piece, &mut out) {
            return (out, Some(e));
        }
    }
    d.finish(&mut out);
    (out, None)
}

/// Bytes that look like a stream now and then: SSE fields, JSON
/// punctuation, newlines and CRs, multi-byte UTF-8, and plain noise.
fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"data: ".to_vec()),
        Just(b"data:".to_vec()),
        Just(b"event: message_stop".to_vec()),
        Just(b": ping".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n\n".to_vec()),
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"[".to_vec()),
        Just(b"]".to_vec()),
        Just(b",".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"\\".to_vec()),
        Just("é你🎉".as_bytes().to_vec()),
        Just(vec![0xf0, 0x9f]),
        Just(vec![0xff]),
        prop::collection::vec(any::<u8>(), 0..24),
        "[a-z0-9 ]{0,40}".prop_map(String::into_bytes),
    ];
    prop::collection::vec(token, 0..60).prop_map(|ts| ts.concat())
}

fn cuts() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(any::<usize>(), 0..40)
}

fn limit() -> impl Strategy<Value = usize> {
    prop_oneof![1usize..64, 64usize..2048, Just(8usize << 20)]
}

#[test]
fn framings_never_panic_and_are_the_same_for_every_chunking() {
    for (framing, content_type) in [
        (Framing::Sse, "text/event-stream"),
        (Framing::Ndjson, "application/x-ndjson"),
        (Framing::JsonArray, "application/json"),
    ] {
        let name = format!("{framing:?} arbitrary bytes");
        check(
            &name,
            3000,
            (
                prop_oneof![stream_bytes(), prop::collection::vec(any::<u8>(), 0..512)],
                cuts(),
                limit(),
            ),
            |(bytes, cuts, limit)| {
                let whole = frame(content_type, limit, &bytes, &[]);
                let cut = frame(content_type, limit, &bytes, &cuts);
                prop_assert_eq!(&whole, &cut);
                // The limit counts the bytes received; invalid UTF-8 comes out as
                // U+FFFD (3 bytes for each bad byte), so text may be up to 3 times that.
                for e in &whole.0 {
                    prop_assert!(e.data.len() <= 3 * limit.max(1), "{} > 3 * {limit}", e.data.len());
                }
                // The framing's own decoder, fed the same way, gives what the
                // dispatcher gave (before `finish`, which may add a last event).
                let mut direct = framer(framing, limit);
                let mut out = Vec::new();
                let mut err = None;
                for piece in pieces(&bytes, &cuts) {
                    if let Err(e) = direct(piece, &mut out) {
                        err = Some(e);
                        break;
                    }
                }
                prop_assert_eq!(err, whole.1);
                prop_assert!(whole.0.starts_with(&out), "{:?} vs {:?}", out, whole.0);
                Ok(())
            },
        );
    }
}

#[test]
fn the_content_type_dispatcher_never_panics_on_any_content_type() {
    check(
        "FrameDecoder content types",
        1000,
        ("\\PC{0,30}", stream_bytes(), cuts()),
        |(ct, bytes, cuts)| {
            let (events, _) = frame(&ct, 256, &bytes, &cuts);
            prop_assert!(events.iter().all(|e| e.data.len() <= 3 * 256));
            Ok(())
        },
    );
}

// ---- wire decoders on arbitrary payloads -----------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Wire {
    OpenAi,
    Anthropic,
    Gemini,
    Ollama,
    Responses,
}

const WIRES: [Wire; 5] = [
    Wire::OpenAi,
    Wire::Anthropic,
    Wire::Gemini,
    Wire::Ollama,
    Wire::Responses,
];

/// One wire decoder's `decode`.
type Decode = Box<dyn FnMut(&SseEvent, &mut Vec<DecodeEvent>) -> Result<(), LlmError>>;

fn wire_decoder(wire: Wire) -> Decode {
    match wire {
        Wire::OpenAi => {
            let mut d = openai::OpenAiDecoder::new("p");
            Box::new(move |e, out| d.decode(e, out))
        }
        Wire::Anthropic => {
            let mut d = anthropic::AnthropicDecoder::new("p");
            Box::new(move |e, out| d.decode(e, out))
        }
        Wire::Gemini => {
            let mut d = gemini::GeminiDecoder::new("p");
            Box::new(move |e, out| d.decode(e, out))
        }
        Wire::Ollama => {
            let mut d = ollama::OllamaDecoder::new("p");
            Box::new(move |e, out| d.decode(e, out))
        }
        Wire::Responses => {
            let mut d = responses::ResponsesDecoder::new("p");
            Box::new(move |e, out| d.decode(e, out))
        }
    }
}

fn parse_response(wire: Wire, body: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
    match wire {
        Wire::OpenAi => openai::parse_response("p", body),
        Wire::Anthropic => anthropic::parse_response("p", body),
        Wire::Gemini => gemini::parse_response("p", body),
        Wire::Ollama => ollama::parse_response("p", body),
        Wire::Responses => responses::parse_response("p", body),
    }
}

/// Keys and string values the three wire formats use, so generated JSON
/// reaches deep into the decoders instead of being ignored at the top.
const KEYS: &[&str] = &[
    "type",
    "index",
    "delta",
    "text",
    "content_block",
    "id",
    "name",
    "input",
    "partial_json",
    "thinking",
    "signature",
    "data",
    "usage",
    "message",
    "stop_reason",
    "error",
    "choices",
    "content",
    "reasoning_content",
    "reasoning",
    "tool_calls",
    "function",
    "arguments",
    "finish_reason",
    "x_groq",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "completion_tokens_details",
    "reasoning_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "input_tokens",
    "output_tokens",
    "candidates",
    "parts",
    "thought",
    "thoughtSignature",
    "functionCall",
    "args",
    "partialArgs",
    "jsonPath",
    "stringValue",
    "numberValue",
    "boolValue",
    "willContinue",
    "finishReason",
    "usageMetadata",
    "promptTokenCount",
    "candidatesTokenCount",
    "thoughtsTokenCount",
    "cachedContentTokenCount",
    "totalTokenCount",
    "promptFeedback",
    "blockReason",
    "status",
    "code",
    "details",
    "@type",
    "retryDelay",
    "done",
    "done_reason",
    "prompt_eval_count",
    "eval_count",
    "eval_duration",
    "tool_name",
    "item",
    "item_id",
    "call_id",
    "output",
    "summary",
    "encrypted_content",
    "response",
    "incomplete_details",
    "input_tokens_details",
    "output_tokens_details",
];

const STRINGS: &[&str] = &[
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "error",
    "ping",
    "text",
    "text_delta",
    "tool_use",
    "input_json_delta",
    "thinking",
    "thinking_delta",
    "signature_delta",
    "redacted_thinking",
    "stop",
    "tool_calls",
    "length",
    "end_turn",
    "STOP",
    "MAX_TOKENS",
    "SAFETY",
    "[DONE]",
    "$",
    "$.a",
    "$.a.b",
    "$.a[2]",
    "$[3]",
    "$['k']",
    "$[\"k\"]",
    "$[4294967295]",
    "$[18446744073709551615]",
    "$.a[",
    "$..",
    "$[x]",
    "$.é[1].你",
    "{\"a\":",
    "{}",
    "RESOURCE_EXHAUSTED",
    "12s",
    "1e400s",
    "overloaded_error",
    "server busy",
    "model \"x\" not found, try pulling it first",
    "response.output_text.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_part.added",
    "response.output_item.added",
    "response.output_item.done",
    "response.function_call_arguments.delta",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "response.refusal.delta",
    "function_call",
    "reasoning",
    "fc_1",
    "incomplete",
    "max_output_tokens",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        Just(json!(u64::MAX)),
        Just(json!(4_294_967_295u64)),
        Just(json!(-1)),
        Just(json!(1e308)),
        Just(json!(0.5)),
        prop::sample::select(STRINGS).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kvs| {
                Value::Object(kvs.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>())
            }),
        ]
    })
}

/// One event's data: JSON in the formats' vocabulary, or any text.
fn event_data() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => json_value().prop_map(|v| v.to_string()),
        1 => "\\PC{0,40}",
        1 => prop::sample::select(STRINGS).prop_map(str::to_string),
    ]
}

#[test]
fn wire_decoders_never_panic_on_arbitrary_events() {
    for wire in WIRES {
        check(
            &format!("{wire:?} stream decoder"),
            3000,
            prop::collection::vec((prop::option::of(prop::sample::select(STRINGS)), event_data()), 0..12),
            |events| {
                let mut decode = wire_decoder(wire);
                let mut acc = Accumulator::default();
                let mut out = Vec::new();
                for (name, data) in events {
                    let event = SseEvent {
                        event: name.map(str::to_string),
                        data,
                    };
                    if decode(&event, &mut out).is_err() {
                        break;
                    }
                    out.drain(..).for_each(|d| acc.apply(&d));
                }
                prop_assert!(acc.tool_calls.len() <= MAX_TOOL_CALLS);
                let _ = acc.message();
                Ok(())
            },
        );
    }
}

#[test]
fn whole_response_parsers_never_panic_on_arbitrary_json() {
    for wire in WIRES {
        check(&format!("{wire:?} whole-response parser"), 2000, json_value(), |body| {
            if let Ok(events) = parse_response(wire, &body) {
                let mut acc = Accumulator::default();
                events.iter().for_each(|e| acc.apply(e));
                prop_assert!(acc.tool_calls.len() <= MAX_TOOL_CALLS);
            }
            Ok(())
        });
    }
}

// ---- valid answers decode the same whatever the chunking --------------------

#[derive(Debug, Clone)]
struct Answer {
    reasoning: Vec<String>,
    text: Vec<String>,
    calls: Vec<(String, Value)>,
}

fn answer() -> impl Strategy<Value = Answer> {
    let piece = "\\PC{0,10}";
    let args = prop::collection::btree_map("[a-z]{1,6}", json_value(), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()));
    (
        prop::collection::vec(piece, 0..4),
        prop::collection::vec(piece, 0..8),
        prop::collection::vec(("[a-z_]{1,10}", args), 0..3),
    )
        .prop_map(|(reasoning, text, calls)| Answer { reasoning, text, calls })
}

/// `s` cut in two at a char boundary near its middle.
fn halves(s: &str) -> (String, String) {
    let mut at = s.len() / 2;
    while !s.is_char_boundary(at) {
        at += 1;
    }
    (s[..at].to_string(), s[at..].to_string())
}

/// The answer as the payloads (one JSON text per event) of `wire`'s stream,
/// with Anthropic's `event:` names.
fn payloads(wire: Wire, a: &Answer) -> Vec<(Option<&'static str>, String)> {
    let mut out: Vec<(Option<&'static str>, String)> = Vec::new();
    match wire {
        Wire::OpenAi => {
            let chunk = |delta: Value, finish: Value| {
                json!({"choices":[{"index":0,"delta":delta,"finish_reason":finish}]}).to_string()
            };
            out.push((None, chunk(json!({"role":"assistant","content":""}), Value::Null)));
            for r in &a.reasoning {
                out.push((None, chunk(json!({ "reasoning_content": r }), Value::Null)));
            }
            for t in &a.text {
                out.push((None, chunk(json!({ "content": t }), Value::Null)));
            }
            for (k, (name, args)) in a.calls.iter().enumerate() {
                out.push((None, chunk(json!({"tool_calls":[{"index":k,"id":format!("call_{k}"),"type":"function","function":{"name":name,"arguments":""}}]}), Value::Null)));
                let (x, y) = halves(&args.to_string());
                for part in [x, y] {
                    out.push((
                        None,
                        chunk(
                            json!({"tool_calls":[{"index":k,"function":{"arguments":part}}]}),
                            Value::Null,
                        ),
                    ));
                }
            }
            let finish = if a.calls.is_empty() { "stop" } else { "tool_calls" };
            out.push((None, chunk(json!({}), json!(finish))));
            out.push((
                None,
                json!({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}).to_string(),
            ));
            out.push((None, "[DONE]".to_string()));
        }
        Wire::Anthropic => {
            let mut ev = |name: &'static str, v: Value| out.push((Some(name), v.to_string()));
            ev(
                "message_start",
                json!({"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}),
            );
            let mut index = 0;
            if !a.reasoning.is_empty() {
                ev(
                    "content_block_start",
                    json!({"type":"content_block_start","index":index,"content_block":{"type":"thinking","thinking":"","signature":""}}),
                );
                for r in &a.reasoning {
                    ev(
                        "content_block_delta",
                        json!({"type":"content_block_delta","index":index,"delta":{"type":"thinking_delta","thinking":r}}),
                    );
                }
                ev(
                    "content_block_delta",
                    json!({"type":"content_block_delta","index":index,"delta":{"type":"signature_delta","signature":"sig"}}),
                );
                ev("content_block_stop", json!({"type":"content_block_stop","index":index}));
                index += 1;
            }
            ev(
                "content_block_start",
                json!({"type":"content_block_start","index":index,"content_block":{"type":"text","text":""}}),
            );
            for t in &a.text {
                ev(
                    "content_block_delta",
                    json!({"type":"content_block_delta","index":index,"delta":{"type":"text_delta","text":t}}),
                );
            }
            ev("content_block_stop", json!({"type":"content_block_stop","index":index}));
            for (k, (name, args)) in a.calls.iter().enumerate() {
                index += 1;
                ev(
                    "content_block_start",
                    json!({"type":"content_block_start","index":index,"content_block":{"type":"tool_use","id":format!("call_{k}"),"name":name,"input":{}}}),
                );
                let (x, y) = halves(&args.to_string());
                for part in [x, y] {
                    ev(
                        "content_block_delta",
                        json!({"type":"content_block_delta","index":index,"delta":{"type":"input_json_delta","partial_json":part}}),
                    );
                }
                ev("content_block_stop", json!({"type":"content_block_stop","index":index}));
            }
            let stop = if a.calls.is_empty() { "end_turn" } else { "tool_use" };
            ev(
                "message_delta",
                json!({"type":"message_delta","delta":{"stop_reason":stop},"usage":{"output_tokens":5}}),
            );
            ev("message_stop", json!({"type":"message_stop"}));
        }
        Wire::Gemini => {
            let resp = |parts: Value| json!({"candidates":[{"content":{"role":"model","parts":parts},"index":0}]});
            for r in &a.reasoning {
                out.push((None, resp(json!([{ "text": r, "thought": true }])).to_string()));
            }
            for t in &a.text {
                out.push((None, resp(json!([{ "text": t }])).to_string()));
            }
            let calls: Vec<Value> = a
                .calls
                .iter()
                .map(|(name, args)| json!({"functionCall":{"name":name,"args":args}}))
                .collect();
            let mut last = resp(if calls.is_empty() {
                json!([{ "text": "" }])
            } else {
                Value::Array(calls)
            });
            last["candidates"][0]["finishReason"] = json!("STOP");
            last["usageMetadata"] = json!({"promptTokenCount":3,"candidatesTokenCount":5,"totalTokenCount":8});
            out.push((None, last.to_string()));
        }
        Wire::Ollama => {
            let line = |message: Value| json!({"model":"m","message":message,"done":false}).to_string();
            for r in &a.reasoning {
                out.push((None, line(json!({"role":"assistant","content":"","thinking":r}))));
            }
            for t in &a.text {
                out.push((None, line(json!({"role":"assistant","content":t}))));
            }
            if !a.calls.is_empty() {
                let calls: Vec<Value> = a
                    .calls
                    .iter()
                    .map(|(name, args)| json!({"function":{"name":name,"arguments":args}}))
                    .collect();
                out.push((None, line(json!({"role":"assistant","content":"","tool_calls":calls}))));
            }
            out.push((
                None,
                json!({"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":3,"eval_count":5}).to_string(),
            ));
        }
        Wire::Responses => {
            let mut ev = |name: &'static str, v: Value| out.push((Some(name), v.to_string()));
            ev(
                "response.created",
                json!({"type":"response.created","response":{"status":"in_progress"}}),
            );
            let rs = json!({"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"enc"});
            ev(
                "response.output_item.added",
                json!({"type":"response.output_item.added","item":rs}),
            );
            for r in &a.reasoning {
                ev(
                    "response.reasoning_summary_text.delta",
                    json!({"type":"response.reasoning_summary_text.delta","item_id":"rs_1","delta":r}),
                );
            }
            ev(
                "response.output_item.done",
                json!({"type":"response.output_item.done","item":rs}),
            );
            for t in &a.text {
                ev(
                    "response.output_text.delta",
                    json!({"type":"response.output_text.delta","item_id":"msg_1","delta":t}),
                );
            }
            for (k, (name, args)) in a.calls.iter().enumerate() {
                let item = json!({"id":format!("fc_{k}"),"type":"function_call","call_id":format!("call_{k}"),"name":name,"arguments":""});
                ev(
                    "response.output_item.added",
                    json!({"type":"response.output_item.added","item":item}),
                );
                let (x, y) = halves(&args.to_string());
                for part in [x, y] {
                    ev(
                        "response.function_call_arguments.delta",
                        json!({"type":"response.function_call_arguments.delta","item_id":format!("fc_{k}"),"delta":part}),
                    );
                }
                let mut done = item.clone();
                done["arguments"] = json!(args.to_string());
                ev(
                    "response.output_item.done",
                    json!({"type":"response.output_item.done","item":done}),
                );
            }
            ev(
                "response.completed",
                json!({"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":3,"output_tokens":5}}}),
            );
        }
    }
    out
}

/// The payloads framed for the wire: SSE (with `event:` names), NDJSON, or a JSON array.
fn framed(framing: Framing, payloads: &[(Option<&'static str>, String)]) -> Vec<u8> {
    match framing {
        Framing::Sse => payloads
            .iter()
            .map(|(name, data)| match name {
                Some(n) => format!("event: {n}\ndata: {data}\n\n"),
                None => format!("data: {data}\n\n"),
            })
            .collect::<String>()
            .into_bytes(),
        Framing::Ndjson => payloads
            .iter()
            .map(|(_, data)| format!("{data}\n"))
            .collect::<String>()
            .into_bytes(),
        Framing::JsonArray => format!(
            "[{}]",
            payloads
                .iter()
                .filter(|(_, d)| d.starts_with('{'))
                .map(|(_, d)| d.as_str())
                .collect::<Vec<_>>()
                .join(",\r\n")
        )
        .into_bytes(),
    }
}

fn content_type(framing: Framing) -> &'static str {
    match framing {
        Framing::Sse => "text/event-stream",
        Framing::Ndjson => "application/x-ndjson",
        Framing::JsonArray => "application/json; charset=UTF-8",
    }
}

/// Frames, chunks and decodes `bytes`; the folded answer.
fn decode_wire(wire: Wire, framing: Framing, bytes: &[u8], cuts: &[usize]) -> Result<Accumulator, String> {
    let (events, err) = frame(content_type(framing), 8 << 20, bytes, cuts);
    if let Some(e) = err {
        return Err(e.to_string());
    }
    let mut decode = wire_decoder(wire);
    let mut acc = Accumulator::default();
    let mut out = Vec::new();
    for e in &events {
        decode(e, &mut out).map_err(|e| e.message)?;
        out.drain(..).for_each(|d| acc.apply(&d));
    }
    Ok(acc)
}

#[test]
fn valid_answers_decode_the_same_whatever_the_chunking() {
    for wire in WIRES {
        // OpenAI-compatible servers may frame as NDJSON or a JSON array.
        let framings: &[Framing] = match wire {
            Wire::OpenAi => &[Framing::Sse, Framing::Ndjson, Framing::JsonArray],
            Wire::Gemini => &[Framing::Sse, Framing::JsonArray],
            Wire::Anthropic => &[Framing::Sse],
            Wire::Ollama => &[Framing::Ndjson],
            Wire::Responses => &[Framing::Sse],
        };
        for &framing in framings {
            check(
                &format!("{wire:?} valid answers over {framing:?}"),
                500,
                (answer(), cuts()),
                |(a, cuts)| {
                    let bytes = framed(framing, &payloads(wire, &a));
                    let whole = decode_wire(wire, framing, &bytes, &[]);
                    let cut = decode_wire(wire, framing, &bytes, &cuts);
                    let (whole, cut) = match (whole, cut) {
                        (Ok(w), Ok(c)) => (w, c),
                        other => return Err(TestCaseError::fail(format!("decoding failed: {other:?}"))),
                    };
                    prop_assert_eq!(&whole.text, &a.text.concat());
                    prop_assert_eq!(&whole.reasoning, &a.reasoning.concat());
                    let calls: Vec<(String, Value)> = whole
                        .tool_calls
                        .iter()
                        .map(|c| (c.name.clone(), c.arguments.clone()))
                        .collect();
                    prop_assert_eq!(&calls, &a.calls);
                    prop_assert!(whole.complete());
                    prop_assert_eq!(whole.message(), cut.message());
                    prop_assert_eq!(whole.usage, cut.usage);
                    prop_assert_eq!(whole.stop_reason, cut.stop_reason);
                    Ok(())
                },
            );
        }
    }
}

// ---- bounded values from the server -----------------------------------------

fn decode_payloads(wire: Wire, payloads: &[String]) -> Result<Vec<DecodeEvent>, LlmError> {
    let mut decode = wire_decoder(wire);
    let mut out = Vec::new();
    for p in payloads {
        decode(
            &SseEvent {
                event: None,
                data: p.clone(),
            },
            &mut out,
        )?;
    }
    Ok(out)
}

#[test]
fn a_huge_openai_tool_call_index_costs_nothing() {
    let out = decode_payloads(
        Wire::OpenAi,
        &[
            json!({"choices":[{"delta":{"tool_calls":[{"index":4_294_967_295u64,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}).to_string(),
            json!({"choices":[{"delta":{"tool_calls":[{"index":u64::MAX,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}).to_string(),
            json!({"choices":[{"delta":{},"finish_reason":"tool_calls"}]}).to_string(),
        ],
    )
    .expect("two calls decode");
    let mut acc = Accumulator::default();
    out.iter().for_each(|e| acc.apply(e));
    let ids: Vec<&str> = acc.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
}

fn many_calls(wire: Wire, n: usize) -> Vec<String> {
    match wire {
        Wire::OpenAi => (0..n)
            .map(|k| json!({"choices":[{"delta":{"tool_calls":[{"index":k,"id":format!("c{k}"),"function":{"name":"f","arguments":"{}"}}]}}]}).to_string())
            .collect(),
        Wire::Anthropic => (0..n)
            .map(|k| json!({"type":"content_block_start","index":k,"content_block":{"type":"tool_use","id":format!("c{k}"),"name":"f","input":{}}}).to_string())
            .collect(),
        Wire::Gemini => vec![json!({"candidates":[{"content":{"parts":
            (0..n).map(|_| json!({"functionCall":{"name":"f","args":{}}})).collect::<Vec<_>>()}}]})
        .to_string()],
        Wire::Ollama => vec![json!({"message":{"tool_calls":
            (0..n).map(|_| json!({"function":{"name":"f","arguments":{}}})).collect::<Vec<_>>()}})
        .to_string()],
        Wire::Responses => (0..n)
            .map(|k| json!({"type":"response.output_item.added","item":{"id":format!("fc_{k}"),"type":"function_call","call_id":format!("c{k}"),"name":"f","arguments":"{}"}}).to_string())
            .collect(),
    }
}

#[test]
fn more_than_128_tool_calls_in_one_answer_is_a_clear_error() {
    for wire in WIRES {
        assert!(
            decode_payloads(wire, &many_calls(wire, MAX_TOOL_CALLS)).is_ok(),
            "{wire:?}"
        );
        let err = decode_payloads(wire, &many_calls(wire, MAX_TOOL_CALLS + 1)).expect_err("over the cap");
        assert_eq!(err.class, ErrorClass::ServerError, "{wire:?}");
        assert!(!err.retryable);
        assert_eq!(
            err.message,
            "p: the server sent more than 128 tool calls in one answer; mia stopped the answer (the partial answer is kept). Try again, or ask for a smaller answer.",
        );
    }
    // The whole-response parsers keep the same cap.
    let calls: Vec<Value> = (0..=MAX_TOOL_CALLS)
        .map(|k| json!({"id":format!("c{k}"),"type":"function","function":{"name":"f","arguments":"{}"}}))
        .collect();
    let body = json!({"choices":[{"message":{"tool_calls":calls},"finish_reason":"tool_calls"}]});
    assert!(openai::parse_response("p", &body).is_err());
    let blocks: Vec<Value> = (0..=MAX_TOOL_CALLS)
        .map(|k| json!({"type":"tool_use","id":format!("c{k}"),"name":"f","input":{}}))
        .collect();
    assert!(anthropic::parse_response("p", &json!({ "content": blocks })).is_err());
    let parts: Vec<Value> = (0..=MAX_TOOL_CALLS)
        .map(|_| json!({"functionCall":{"name":"f","args":{}}}))
        .collect();
    assert!(gemini::parse_response("p", &json!({"candidates":[{"content":{"parts":parts}}]})).is_err());
    let calls: Vec<Value> = (0..=MAX_TOOL_CALLS)
        .map(|_| json!({"function":{"name":"f","arguments":{}}}))
        .collect();
    assert!(ollama::parse_response("p", &json!({"message":{"tool_calls":calls},"done":true})).is_err());
    let items: Vec<Value> = (0..=MAX_TOOL_CALLS)
        .map(|k| json!({"id":format!("fc_{k}"),"type":"function_call","call_id":format!("c{k}"),"name":"f","arguments":"{}"}))
        .collect();
    assert!(responses::parse_response("p", &json!({ "output": items, "status": "completed" })).is_err());
}

fn gemini_partial(path: &str) -> Vec<String> {
    vec![
        json!({"candidates":[{"content":{"parts":[{"functionCall":{"name":"edit","willContinue":true}}]}}]}).to_string(),
        json!({"candidates":[{"content":{"parts":[{"functionCall":{"partialArgs":[{"jsonPath":path,"stringValue":"x"}],"willContinue":true}}]}}]}).to_string(),
        json!({"candidates":[{"content":{"parts":[{"functionCall":{}}]},"finishReason":"STOP"}]}).to_string(),
    ]
}

#[test]
fn gemini_json_paths_cannot_allocate_huge_arrays_or_nest_deep() {
    for path in [
        "$.a[4294967295]".to_string(),
        "$[18446744073709551615]".to_string(),
        "$.a[99999999999999999999999]".to_string(),
        format!("${}", ".a".repeat(100_000)),
        format!("${}", "[0]".repeat(100_000)),
    ] {
        match decode_payloads(Wire::Gemini, &gemini_partial(&path)) {
            Err(e) => {
                assert_eq!(e.class, ErrorClass::ServerError);
                assert!(
                    e.message.contains("a streamed tool argument names a path"),
                    "{}",
                    e.message
                );
            }
            // A path too big to be an index at all is not a path mia reads: skipped.
            Ok(out) => assert!(path.contains("99999999999999999999999"), "{path}: {out:?}"),
        }
    }
    // Many paths, each a wide array: the created values are bounded too.
    let args: Vec<Value> = (0..100)
        .map(|k| json!({"jsonPath": format!("$.k{k}[4095]"), "numberValue": 1}))
        .collect();
    let err = decode_payloads(
        Wire::Gemini,
        &[
            json!({"candidates":[{"content":{"parts":[{"functionCall":{"name":"edit","willContinue":true}}]}}]})
                .to_string(),
            json!({"candidates":[{"content":{"parts":[{"functionCall":{"partialArgs":args,"willContinue":true}}]}}]})
                .to_string(),
        ],
    )
    .expect_err("too many values");
    assert!(err.message.contains("more than 65536 values"), "{}", err.message);
    // A small path still works.
    assert!(decode_payloads(Wire::Gemini, &gemini_partial("$.a[2].b")).is_ok());
}

#[test]
fn deeply_nested_payloads_are_an_error_not_a_stack_overflow() {
    let deep_array = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    let deep_object = format!("{}1{}", "{\"a\":".repeat(200_000), "}".repeat(200_000));
    for wire in WIRES {
        for data in [&deep_array, &deep_object] {
            let err = decode_payloads(wire, std::slice::from_ref(data)).expect_err("too deep");
            assert!(err.message.contains("malformed chunk"), "{}", err.message);
            assert!(err.message.contains("recursion limit"), "{}", err.message);
        }
    }
    // Deep tool arguments stay an unparsed string instead of a deep value.
    let out = decode_payloads(
        Wire::Anthropic,
        &[
            json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}).to_string(),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":deep_array}}).to_string(),
            json!({"type":"content_block_stop","index":0}).to_string(),
        ],
    )
    .expect("decodes");
    let mut acc = Accumulator::default();
    out.iter().for_each(|e| acc.apply(e));
    assert!(acc.tool_calls[0].arguments.is_string());
}

#[test]
fn usage_numbers_near_u64_max_saturate_instead_of_wrapping() {
    let out = decode_payloads(
        Wire::Gemini,
        &[json!({"candidates":[{"finishReason":"STOP"}],"usageMetadata":{"candidatesTokenCount":u64::MAX,"thoughtsTokenCount":5}}).to_string()],
    )
    .expect("decodes");
    let mut acc = Accumulator::default();
    out.iter().for_each(|e| acc.apply(e));
    assert_eq!(acc.usage.map(|u| u.output_tokens), Some(u64::MAX));

    let out = decode_payloads(
        Wire::OpenAi,
        &[
            json!({"choices":[],"usage":{"prompt_tokens":u64::MAX,"completion_tokens":2,"total_tokens":0,
            "completion_tokens_details":{"reasoning_tokens":u64::MAX}}})
            .to_string(),
        ],
    )
    .expect("decodes");
    let mut acc = Accumulator::default();
    out.iter().for_each(|e| acc.apply(e));
    // The sum wraps to 0 == total_tokens in wrapping arithmetic; it must not be read as "reasoning outside".
    assert_eq!(acc.usage.map(|u| u.output_tokens), Some(2));
}

#[test]
fn an_answer_over_64_mib_of_text_is_stopped() {
    let piece = "x".repeat(1 << 20);
    let event = json!({"choices":[{"delta":{"content":piece}}]}).to_string();
    let mut decode = wire_decoder(Wire::OpenAi);
    let mut out = Vec::new();
    let mut sent = 0usize;
    let err = loop {
        match decode(
            &SseEvent {
                event: None,
                data: event.clone(),
            },
            &mut out,
        ) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        out.clear();
        assert!(sent <= 64, "no error after {sent} MiB");
    };
    assert_eq!(sent, 64);
    assert!(err.message.contains("more than 64 MiB of text"), "{}", err.message);
}
