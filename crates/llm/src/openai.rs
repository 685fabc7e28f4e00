//! OpenAI Chat Completions: the request body and the streamed chunk decoder.
//! OpenAI-compatible servers (Ollama, Groq, DeepSeek, OpenRouter, vLLM, xAI)
//! use this same format with their own base URL; their quirks live here too.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::delta::{AnswerBudget, DecodeEvent, Delta};
use super::error::{from_provider_error, ErrorClass, LlmError};
use super::message::{ChatRequest, Message, Part, Role, StopReason};
use super::providers::ResolvedProvider;
use super::stream::SseEvent;
use super::wire::{self, Builtin, StreamDecoder, WireFormat};
use mia_cost::Usage;

/// Chat Completions as a [`WireFormat`]: OpenAI itself (`kind = "openai"`)
/// and any compatible server (`kind = "openai_compatible"`, no usual
/// address, a key only when configured).
pub struct OpenAi {
    kind: &'static str,
    builtin: Option<Builtin>,
    options: OpenAiOptions,
}

/// OpenAI itself.
pub const OPENAI: OpenAi = OpenAi {
    kind: "openai",
    builtin: Some(Builtin {
        name: "openai",
        base_url: "https://api.openai.com/v1",
        api_key_env: Some("OPENAI_API_KEY"),
    }),
    options: OpenAiOptions {
        max_completion_tokens: true,
    },
};

/// Servers that speak OpenAI's format (Groq, DeepSeek, OpenRouter, vLLM,
/// llama.cpp, Ollama's `/v1`…).
pub const COMPATIBLE: OpenAi = OpenAi {
    kind: "openai_compatible",
    builtin: None,
    options: OpenAiOptions {
        max_completion_tokens: false,
    },
};

impl WireFormat for OpenAi {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn builtin(&self) -> Option<Builtin> {
        self.builtin
    }

    fn key_optional(&self) -> bool {
        self.builtin.is_none()
    }

    fn headers(&self, p: &ResolvedProvider) -> Vec<(String, String)> {
        wire::bearer(p)
    }

    fn chat_url(&self, p: &ResolvedProvider, _model: &str, _stream: bool) -> String {
        wire::url(p, "/chat/completions")
    }

    fn speaks_responses(&self) -> bool {
        true
    }

    fn request_body(&self, _p: &ResolvedProvider, model: &str, req: &ChatRequest, stream: bool) -> Value {
        request_body(req, model, self.options, stream)
    }

    fn decoder(&self, p: &ResolvedProvider) -> Box<dyn StreamDecoder> {
        Box::new(OpenAiDecoder::new(&p.name))
    }

    fn parse_response(&self, provider: &str, json: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
        parse_response(provider, json)
    }

    fn models_url(&self, p: &ResolvedProvider) -> String {
        wire::url(p, "/models")
    }

    fn model_ids(&self, json: &Value) -> Vec<String> {
        model_ids(json)
    }
}

impl StreamDecoder for OpenAiDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        OpenAiDecoder::decode(self, event, out)
    }
}

/// OpenAI's `error.type` and `error.code` names (compatible servers reuse them).
pub const ERROR_TYPES: super::error::ErrorTypes = &[
    ("rate_limit_exceeded", ErrorClass::RateLimit),
    ("requests", ErrorClass::RateLimit),
    ("tokens", ErrorClass::RateLimit),
    ("server_error", ErrorClass::ServerError),
    ("invalid_api_key", ErrorClass::AuthFailure),
    ("model_not_found", ErrorClass::ModelNotFound),
    ("context_length_exceeded", ErrorClass::ContextOverflow),
    ("content_filter", ErrorClass::ContentFilter),
    ("content_policy_violation", ErrorClass::ContentFilter),
];

/// Differences between OpenAI itself and compatible servers that matter to the body.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAiOptions {
    /// OpenAI proper wants `max_completion_tokens`; compatible servers know `max_tokens`.
    pub max_completion_tokens: bool,
}

fn content_of(m: &Message) -> Value {
    let only_text = m
        .parts
        .iter()
        .all(|p| matches!(p, Part::Text { .. } | Part::Reasoning { .. } | Part::ToolCall { .. }));
    if only_text {
        return Value::String(m.plain_text());
    }
    Value::Array(
        m.parts
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(json!({ "type": "text", "text": text })),
                Part::Image { media_type, data } => Some(json!({
                    "type": "image_url",
                    "image_url": { "url": format!("data:{media_type};base64,{data}") }
                })),
                _ => None,
            })
            .collect(),
    )
}

/// The JSON body of a chat completion for `model` (the part after `provider/`).
/// Reasoning parts are not sent back: OpenAI-style servers reject or ignore them.
pub fn request_body(req: &ChatRequest, model: &str, opts: OpenAiOptions, stream: bool) -> Value {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({ "role": "system", "content": system }));
    }
    for m in &req.messages {
        match m.role {
            Role::Tool => {
                for p in &m.parts {
                    if let Part::ToolResult {
                        tool_call_id, content, ..
                    } = p
                    {
                        messages.push(json!({ "role": "tool", "tool_call_id": tool_call_id, "content": content }));
                    }
                }
                // A tool message holds text only: images the tools attached
                // follow in a user message.
                let images: Vec<Value> = m
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Image { media_type, data } => Some(json!({
                            "type": "image_url",
                            "image_url": { "url": format!("data:{media_type};base64,{data}") }
                        })),
                        _ => None,
                    })
                    .collect();
                if !images.is_empty() {
                    let mut content =
                        vec![json!({ "type": "text", "text": "The images the tool results above refer to:" })];
                    content.extend(images);
                    messages.push(json!({ "role": "user", "content": content }));
                }
            }
            Role::User => messages.push(json!({ "role": "user", "content": content_of(m) })),
            Role::Assistant => {
                let calls: Vec<Value> = m
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::ToolCall {
                            id, name, arguments, ..
                        } => Some(json!({
                            "id": id,
                            "type": "function",
                            "function": { "name": name, "arguments": arguments.to_string() }
                        })),
                        _ => None,
                    })
                    .collect();
                let text = m.plain_text();
                let mut msg = json!({ "role": "assistant" });
                msg["content"] = if text.is_empty() && !calls.is_empty() {
                    Value::Null
                } else {
                    Value::String(text)
                };
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                messages.push(msg);
            }
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| json!({ "type": "function", "function": { "name": t.name, "description": t.description, "parameters": t.parameters } }))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    if let Some(max) = req.max_tokens {
        let key = if opts.max_completion_tokens {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body.insert(key.into(), json!(max));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if !req.stop_sequences.is_empty() {
        body.insert("stop".into(), json!(req.stop_sequences));
    }
    if let Some(f) = &req.response_format {
        body.insert(
            "response_format".into(),
            json!({ "type": "json_schema", "json_schema": { "name": f.name, "schema": f.schema, "strict": true } }),
        );
    }
    Value::Object(body)
}

/// A tool call being assembled from index-keyed deltas.
#[derive(Debug)]
struct OpenCall {
    id: String,
    arguments: String,
}

/// Decodes the `data:` payloads of a chat-completions stream.
#[derive(Debug, Default)]
pub struct OpenAiDecoder {
    provider: String,
    /// Keyed by the server's `index` (any u64): a map, so a huge index costs nothing.
    calls: BTreeMap<u64, OpenCall>,
    budget: AnswerBudget,
}

impl OpenAiDecoder {
    pub fn new(provider: &str) -> Self {
        OpenAiDecoder {
            provider: provider.to_string(),
            calls: BTreeMap::new(),
            budget: AnswerBudget::default(),
        }
    }

    /// Turns one SSE event into normalized events.
    pub fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let before = out.len();
        let result = self.decode_event(event, out);
        self.budget
            .charge(&self.provider, out.get(before..).unwrap_or_default())?;
        result
    }

    fn decode_event(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.close_calls(out);
            out.push(DecodeEvent::Terminal);
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Value = super::error::parse_chunk(&self.provider, data)?;
        self.decode_value(&chunk, out)
    }

    /// Decodes one parsed chunk (also used for whole non-streaming responses,
    /// whose `message` takes the place of `delta`).
    fn decode_value(&mut self, chunk: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        if let Some(err) = chunk.get("error") {
            let message = err.get("message").and_then(Value::as_str).unwrap_or("unknown error");
            let kind = err
                .get("type")
                .and_then(Value::as_str)
                .or_else(|| err.get("code").and_then(Value::as_str))
                .unwrap_or("server_error");
            return Err(from_provider_error(&self.provider, ERROR_TYPES, kind, message, None));
        }
        if let Some(choice) = chunk.pointer("/choices/0") {
            let delta = choice.get("delta").or_else(|| choice.get("message"));
            let text_of = |key: &str| {
                delta
                    .and_then(|d| d.get(key))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
            };
            // DeepSeek and vLLM send `reasoning_content`; OpenRouter and Ollama `reasoning`.
            if let Some(text) = text_of("reasoning_content").or_else(|| text_of("reasoning")) {
                out.push(DecodeEvent::Delta(Delta::Reasoning { text: text.to_string() }));
            }
            if let Some(text) = text_of("content") {
                out.push(DecodeEvent::Delta(Delta::Text { text: text.to_string() }));
            }
            if let Some(calls) = delta.and_then(|d| d.get("tool_calls")).and_then(Value::as_array) {
                for (position, call) in calls.iter().enumerate() {
                    self.tool_call_delta(position as u64, call, out)?;
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.close_calls(out);
                out.push(DecodeEvent::Finish(stop_reason(reason)));
            }
        }
        // Groq has sent usage inside `x_groq` instead of at the top level.
        let usage = chunk
            .get("usage")
            .filter(|u| u.is_object())
            .or_else(|| chunk.pointer("/x_groq/usage").filter(|u| u.is_object()));
        if let Some(usage) = usage {
            out.push(DecodeEvent::Delta(Delta::Usage { usage: usage_of(usage) }));
            // LiteLLM (and OpenRouter) put their own cost of the call here.
            if let Some(usd) = mia_cost::gateway::from_usage(usage) {
                out.push(DecodeEvent::GatewayCost(usd));
            }
        }
        Ok(())
    }

    fn tool_call_delta(&mut self, position: u64, call: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let index = call.get("index").and_then(Value::as_u64).unwrap_or(position);
        let name = call.pointer("/function/name").and_then(Value::as_str);
        let args = call.pointer("/function/arguments");
        if !self.calls.contains_key(&index) {
            self.budget.start_call(&self.provider)?;
        }
        let entry = self.calls.entry(index).or_insert_with(|| {
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .unwrap_or_else(|| format!("call_{index}"));
            out.push(DecodeEvent::Delta(Delta::ToolCallStart {
                id: id.clone(),
                name: name.unwrap_or_default().to_string(),
            }));
            OpenCall {
                id,
                arguments: String::new(),
            }
        });
        // Arguments are a JSON string in deltas; some servers send an object whole.
        let piece = match args {
            Some(Value::String(s)) => s.clone(),
            Some(v @ Value::Object(_)) => v.to_string(),
            _ => String::new(),
        };
        if !piece.is_empty() {
            entry.arguments.push_str(&piece);
            out.push(DecodeEvent::Delta(Delta::ToolCallDelta {
                id: entry.id.clone(),
                arguments_delta: piece,
            }));
        }
        Ok(())
    }

    /// Ends every open tool call with its arguments parsed (unparseable
    /// arguments travel as a string, so validation can report them).
    fn close_calls(&mut self, out: &mut Vec<DecodeEvent>) {
        for (_, call) in std::mem::take(&mut self.calls) {
            out.push(DecodeEvent::Delta(Delta::ToolCallEnd {
                id: call.id,
                arguments: parse_arguments(&call.arguments),
            }));
        }
    }
}

/// Tool arguments as JSON: empty means `{}`; text that is not JSON stays a string.
pub fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

/// A whole (non-streaming) chat completion as the events a stream would give.
pub fn parse_response(provider: &str, body: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
    let mut decoder = OpenAiDecoder::new(provider);
    let mut out = Vec::new();
    decoder.decode_value(body, &mut out)?;
    decoder.close_calls(&mut out);
    decoder.budget.charge(provider, &out)?;
    out.push(DecodeEvent::Terminal);
    Ok(out)
}

/// Model ids from `GET /models`.
pub fn model_ids(body: &Value) -> Vec<String> {
    body.get("data")
        .and_then(Value::as_array)
        .map(|models| {
            models
                .iter()
                .filter_map(|m| m.get("id")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "stop" => StopReason::EndTurn,
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_string()),
    }
}

/// OpenAI counts cached prompt tokens inside `prompt_tokens` and reasoning
/// inside `completion_tokens`; mia keeps cache reads apart. xAI reports
/// reasoning outside `completion_tokens` (prompt + completion + reasoning =
/// total), which is detected from the total.
fn usage_of(u: &Value) -> Usage {
    let n = |ptr: &str| u.pointer(ptr).and_then(Value::as_u64);
    let prompt = n("/prompt_tokens").unwrap_or(0);
    let completion = n("/completion_tokens").unwrap_or(0);
    let reasoning = n("/completion_tokens_details/reasoning_tokens").unwrap_or(0);
    let cached = n("/prompt_tokens_details/cached_tokens")
        .or_else(|| n("/prompt_cache_hit_tokens"))
        .unwrap_or(0);
    // Server numbers may be anything up to u64::MAX: sums saturate.
    let reasoning_outside = reasoning > 0
        && n("/total_tokens").is_some_and(|total| {
            prompt.checked_add(completion).and_then(|s| s.checked_add(reasoning)) == Some(total)
                && completion < reasoning
        });
    Usage {
        input_tokens: prompt.saturating_sub(cached),
        output_tokens: if reasoning_outside {
            completion.saturating_add(reasoning)
        } else {
            completion
        },
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: reasoning,
        estimated: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorClass;
    use crate::message::ToolDef;

    fn decode_all(payloads: &[&str]) -> Result<Vec<DecodeEvent>, LlmError> {
        let mut d = OpenAiDecoder::new("openai");
        let mut out = Vec::new();
        for p in payloads {
            d.decode(
                &SseEvent {
                    event: None,
                    data: p.to_string(),
                },
                &mut out,
            )?;
        }
        Ok(out)
    }

    #[test]
    fn text_finish_usage_and_done_are_decoded() {
        let out = decode_all(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4}}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            out,
            vec![
                DecodeEvent::Delta(Delta::Text { text: "Hi".into() }),
                DecodeEvent::Finish(StopReason::EndTurn),
                DecodeEvent::Delta(Delta::Usage {
                    usage: Usage {
                        input_tokens: 8,
                        output_tokens: 3,
                        cache_read_tokens: 4,
                        ..Usage::default()
                    }
                }),
                DecodeEvent::Terminal,
            ]
        );
    }

    #[test]
    fn a_gateways_cost_in_the_last_usage_chunk_is_decoded_and_a_hostile_one_dropped() {
        let last = |cost: &str| {
            let chunk =
                format!(r#"{{"choices":[],"usage":{{"prompt_tokens":5,"completion_tokens":2,"cost":{cost}}}}}"#);
            decode_all(&[chunk.as_str(), "[DONE]"]).unwrap()
        };
        let out = last("0.00042");
        assert_eq!(out[1], DecodeEvent::GatewayCost(0.00042));
        assert_eq!(out.len(), 3, "{out:?}");
        for hostile in ["-1", "1e9", "\"NaN\"", "\"\"", "[1]", "null"] {
            let out = last(hostile);
            assert!(
                !out.iter().any(|e| matches!(e, DecodeEvent::GatewayCost(_))),
                "{hostile}: {out:?}"
            );
            assert!(
                matches!(out[0], DecodeEvent::Delta(Delta::Usage { .. })),
                "usage still counts"
            );
        }
        // A whole response carries it the same way.
        let body = json!({"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],
                          "usage":{"prompt_tokens":5,"completion_tokens":2,"cost":0.5}});
        let events = parse_response("lite", &body).unwrap();
        assert!(events.contains(&DecodeEvent::GatewayCost(0.5)), "{events:?}");
    }

    #[test]
    fn index_keyed_tool_call_deltas_are_assembled() {
        let out = decode_all(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"grep","arguments":"{\"q\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.rs\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        ])
        .unwrap();
        let ends: Vec<_> = out
            .iter()
            .filter_map(|e| match e {
                DecodeEvent::Delta(Delta::ToolCallEnd { id, arguments }) => Some((id.as_str(), arguments.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            ends,
            vec![("call_a", json!({"path": "a.rs"})), ("call_b", json!({"q": "x"}))]
        );
        assert_eq!(out.last(), Some(&DecodeEvent::Finish(StopReason::ToolUse)));
        assert_eq!(
            out[0],
            DecodeEvent::Delta(Delta::ToolCallStart {
                id: "call_a".into(),
                name: "read_file".into()
            })
        );
    }

    #[test]
    fn unparseable_arguments_travel_as_a_string() {
        assert_eq!(parse_arguments("{\"a\":"), Value::String("{\"a\":".into()));
        assert_eq!(parse_arguments(""), json!({}));
    }

    #[test]
    fn error_chunk_is_classified_by_its_type() {
        let err = decode_all(&[r#"{"error":{"message":"Overloaded","type":"server_error"}}"#]).unwrap_err();
        assert_eq!(err.class, ErrorClass::ServerError);
        assert!(err.retryable);
    }

    #[test]
    fn malformed_chunk_is_a_clear_error() {
        let err = decode_all(&[r#"{"choices":[{"delta":{"content":"#]).unwrap_err();
        assert_eq!(err.class, ErrorClass::ServerError);
        assert!(
            err.message.starts_with("openai: the stream carried a malformed chunk"),
            "{}",
            err.message
        );
    }

    #[test]
    fn xai_reasoning_outside_completion_is_counted_as_output() {
        let u = usage_of(&json!({"prompt_tokens":12,"completion_tokens":2,"total_tokens":354,
            "prompt_tokens_details":{"cached_tokens":11},"completion_tokens_details":{"reasoning_tokens":340}}));
        assert_eq!(
            (u.input_tokens, u.cache_read_tokens, u.output_tokens, u.reasoning_tokens),
            (1, 11, 342, 340)
        );
    }

    fn round_trip_request() -> ChatRequest {
        ChatRequest {
            model: "openai/gpt-4.1".into(),
            system: Some("be brief".into()),
            messages: vec![
                Message {
                    role: Role::User,
                    parts: vec![
                        Part::Text {
                            text: "what is in a.png?".into(),
                        },
                        Part::Image {
                            media_type: "image/png".into(),
                            data: "iVBORw0KGgo=".into(),
                        },
                    ],
                },
                Message {
                    role: Role::Assistant,
                    parts: vec![
                        Part::Reasoning {
                            text: "look at it".into(),
                            signature: None,
                            redacted: false,
                        },
                        Part::ToolCall {
                            id: "call_1".into(),
                            name: "read_file".into(),
                            arguments: json!({"path": "a.png"}),
                            signature: None,
                        },
                    ],
                },
                Message {
                    role: Role::Tool,
                    parts: vec![Part::ToolResult {
                        tool_call_id: "call_1".into(),
                        content: "a cat".into(),
                        is_error: false,
                    }],
                },
            ],
            tools: vec![ToolDef {
                name: "read_file".into(),
                description: "Read a file".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            }],
            max_tokens: Some(100),
            ..ChatRequest::default()
        }
    }

    #[test]
    fn golden_body_with_system_tools_round_trip_and_image() {
        let body = request_body(
            &round_trip_request(),
            "gpt-4.1",
            OpenAiOptions {
                max_completion_tokens: true,
            },
            true,
        );
        assert_eq!(
            body,
            json!({
                "model": "gpt-4.1",
                "messages": [
                    { "role": "system", "content": "be brief" },
                    { "role": "user", "content": [
                        { "type": "text", "text": "what is in a.png?" },
                        { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=" } }
                    ] },
                    { "role": "assistant", "content": null, "tool_calls": [
                        { "id": "call_1", "type": "function", "function": { "name": "read_file", "arguments": "{\"path\":\"a.png\"}" } }
                    ] },
                    { "role": "tool", "tool_call_id": "call_1", "content": "a cat" }
                ],
                "tools": [ { "type": "function", "function": {
                    "name": "read_file", "description": "Read a file",
                    "parameters": { "type": "object", "properties": { "path": { "type": "string" } }, "required": ["path"] }
                } } ],
                "stream": true,
                "stream_options": { "include_usage": true },
                "max_completion_tokens": 100
            })
        );
    }

    #[test]
    fn images_a_tool_attached_follow_the_tool_messages_in_a_user_message() {
        let mut req = round_trip_request();
        req.messages[2].parts.push(Part::Image {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into(),
        });
        let body = request_body(&req, "m", OpenAiOptions::default(), false);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(
            messages[messages.len() - 2],
            json!({ "role": "tool", "tool_call_id": "call_1", "content": "a cat" })
        );
        assert_eq!(
            messages[messages.len() - 1],
            json!({ "role": "user", "content": [
                { "type": "text", "text": "The images the tool results above refer to:" },
                { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=" } }
            ] })
        );
    }

    #[test]
    fn compatible_servers_get_max_tokens_and_no_stream_fields_when_not_streaming() {
        let body = request_body(&round_trip_request(), "m", OpenAiOptions::default(), false);
        assert_eq!(body["max_tokens"], json!(100));
        assert!(body.get("stream").is_none() && body.get("max_completion_tokens").is_none());
    }

    #[test]
    fn golden_stop_sequences_and_response_format() {
        let mut req = round_trip_request();
        req.stop_sequences = vec!["END".into(), "\n\n".into()];
        req.response_format = Some(crate::message::ResponseFormat {
            name: "point".into(),
            schema: json!({ "type": "object", "properties": { "x": { "type": "integer" } }, "required": ["x"], "additionalProperties": false }),
        });
        let body = request_body(&req, "m", OpenAiOptions::default(), true);
        assert_eq!(body["stop"], json!(["END", "\n\n"]));
        assert_eq!(
            body["response_format"],
            json!({ "type": "json_schema", "json_schema": { "name": "point", "strict": true, "schema": json!({ "type": "object", "properties": { "x": { "type": "integer" } }, "required": ["x"], "additionalProperties": false }) } })
        );
        let plain = request_body(&round_trip_request(), "m", OpenAiOptions::default(), true);
        assert!(plain.get("stop").is_none() && plain.get("response_format").is_none());
    }
}
