//! Ollama's native API (`POST /api/chat`, `GET /api/tags`): the request
//! body, the streamed response decoder, the whole-response reader and the
//! model list.
//!
//! Ollama's wire rules that shape this file: a stream is NDJSON (one JSON
//! object per line) whose last object says `"done": true` with the token
//! counts (`prompt_eval_count`, `eval_count`) and nanosecond timings; tool
//! calls arrive whole, their arguments a JSON object, without ids; a tool
//! result names its function (`tool_name`); images are bare base64 strings
//! on their message; an error is `{"error": "text"}`, as an HTTP error body
//! or as a line of the stream.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::delta::{AnswerBudget, DecodeEvent, Delta};
use super::error::{from_provider_error, ErrorClass, ErrorTypes, LlmError};
use super::message::{ChatRequest, Message, Part, Role, StopReason, ToolDef};
use super::providers::ResolvedProvider;
use super::stream::SseEvent;
use super::wire::{self, Builtin, StreamDecoder, WireFormat};
use mia_cost::Usage;

/// Where chats go, after the provider's base URL (`http://localhost:11434`).
pub const CHAT_PATH: &str = "/api/chat";

/// Where the local models are listed, after the base URL.
pub const TAGS_PATH: &str = "/api/tags";

/// Ollama's native API as a [`WireFormat`] (`kind = "ollama"`), with a
/// built-in `ollama` provider at Ollama's usual address that needs no key.
pub struct Ollama;

impl WireFormat for Ollama {
    fn kind(&self) -> &'static str {
        "ollama"
    }

    fn builtin(&self) -> Option<Builtin> {
        Some(Builtin {
            name: "ollama",
            base_url: "http://localhost:11434",
            api_key_env: None,
        })
    }

    /// A local Ollama takes no key; one behind a proxy or hosted may be
    /// given one (`api_key_env`), sent as a bearer token.
    fn key_optional(&self) -> bool {
        true
    }

    /// Ollama serves models on the user's machine: free unless `local = false`.
    fn local(&self) -> bool {
        true
    }

    fn headers(&self, p: &ResolvedProvider) -> Vec<(String, String)> {
        wire::bearer(p)
    }

    fn chat_url(&self, p: &ResolvedProvider, _model: &str, _stream: bool) -> String {
        wire::url(p, CHAT_PATH)
    }

    fn request_body(&self, _p: &ResolvedProvider, model: &str, req: &ChatRequest, stream: bool) -> Value {
        request_body(req, model, stream)
    }

    fn decoder(&self, p: &ResolvedProvider) -> Box<dyn StreamDecoder> {
        Box::new(OllamaDecoder::with_id_prefix(&p.name, &wire::unique_call_prefix()))
    }

    fn parse_response(&self, provider: &str, json: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
        parse_response(provider, json)
    }

    fn models_url(&self, p: &ResolvedProvider) -> String {
        wire::url(p, TAGS_PATH)
    }

    fn model_ids(&self, json: &Value) -> Vec<String> {
        model_ids(json)
    }
}

impl StreamDecoder for OllamaDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        OllamaDecoder::decode(self, event, out)
    }
}

/// Ollama's errors are bare text (`{"error": "…"}`) with no type; these are
/// the kinds [`error_kind`] reads from the text, and their classes.
pub const ERROR_TYPES: ErrorTypes = &[
    ("not_found", ErrorClass::ModelNotFound),
    ("unauthorized", ErrorClass::AuthFailure),
    ("rate_limited", ErrorClass::RateLimit),
    ("context_length", ErrorClass::ContextOverflow),
    ("server", ErrorClass::ServerError),
];

/// The kind (in [`ERROR_TYPES`]) an error text names. What it does not
/// place is `server`: an error line inside a stream that had begun means
/// the model failed while answering, which a retry may cure.
fn error_kind(message: &str) -> &'static str {
    let lower = message.to_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    if has(&["not found"]) {
        "not_found"
    } else if has(&["unauthorized", "invalid api key"]) {
        "unauthorized"
    } else if has(&["rate limit", "too many requests"]) {
        "rate_limited"
    } else if has(&["context length"]) {
        "context_length"
    } else {
        "server"
    }
}

/// The JSON body of an `/api/chat` call for `model` (the part after
/// `provider/`). Ollama streams unless told otherwise, so `stream` is
/// always sent.
pub fn request_body(req: &ChatRequest, model: &str, stream: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages(req)));
    body.insert("stream".into(), json!(stream));
    if !req.tools.is_empty() {
        body.insert("tools".into(), req.tools.iter().map(tool).collect());
    }
    if let Some(f) = &req.response_format {
        // `format` takes a JSON schema itself (or the string "json").
        body.insert("format".into(), f.schema.clone());
    }
    let mut options = Map::new();
    if let Some(t) = req.temperature {
        options.insert("temperature".into(), json!(t));
    }
    if let Some(max) = req.max_tokens {
        options.insert("num_predict".into(), json!(max));
    }
    if !req.stop_sequences.is_empty() {
        options.insert("stop".into(), json!(req.stop_sequences));
    }
    if !options.is_empty() {
        body.insert("options".into(), Value::Object(options));
    }
    Value::Object(body)
}

/// A tool in the OpenAI-style function shape Ollama takes.
fn tool(t: &ToolDef) -> Value {
    json!({
        "type": "function",
        "function": { "name": t.name, "description": t.description, "parameters": t.parameters }
    })
}

/// The history as Ollama messages: the system prompt first, then one
/// message per turn, and one `tool` message per tool result.
fn messages(req: &ChatRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        out.push(json!({ "role": "system", "content": system }));
    }
    // Tool results name the function they answer; ids map to the names of
    // the calls seen so far (generated ids may repeat across turns, so the
    // latest call with an id wins).
    let mut call_names: HashMap<&str, &str> = HashMap::new();
    for m in &req.messages {
        match m.role {
            Role::User => out.push(user_message(m)),
            Role::Assistant => {
                for p in &m.parts {
                    if let Part::ToolCall { id, name, .. } = p {
                        call_names.insert(id, name);
                    }
                }
                out.push(assistant_message(m));
            }
            Role::Tool => tool_messages(m, &call_names, &mut out),
        }
    }
    out
}

/// The base64 data of `m`'s images (Ollama takes them without a media type).
fn images_of(m: &Message) -> Vec<&str> {
    m.parts
        .iter()
        .filter_map(|p| match p {
            Part::Image { data, .. } => Some(data.as_str()),
            _ => None,
        })
        .collect()
}

fn user_message(m: &Message) -> Value {
    let mut msg = json!({ "role": "user", "content": m.plain_text() });
    let images = images_of(m);
    if !images.is_empty() {
        msg["images"] = json!(images);
    }
    msg
}

/// Text, the model's own reasoning (Ollama's `thinking`, which thinking
/// models read back when they continue after a tool call) and tool calls.
fn assistant_message(m: &Message) -> Value {
    let mut msg = json!({ "role": "assistant", "content": m.plain_text() });
    let thinking: String = m
        .parts
        .iter()
        .filter_map(|p| match p {
            // Another provider's encrypted reasoning means nothing here.
            Part::Reasoning {
                text, redacted: false, ..
            } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if !thinking.is_empty() {
        msg["thinking"] = json!(thinking);
    }
    let calls: Vec<Value> = m
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall { name, arguments, .. } => {
                Some(json!({ "function": { "name": name, "arguments": arguments_object(arguments) } }))
            }
            _ => None,
        })
        .collect();
    if !calls.is_empty() {
        msg["tool_calls"] = Value::Array(calls);
    }
    msg
}

/// Ollama wants an object: arguments kept as text (they did not parse when
/// they arrived) are parsed again, anything else becomes `{}`.
fn arguments_object(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(obj @ Value::Object(_)) => obj,
            _ => json!({}),
        },
        _ => json!({}),
    }
}

/// One `tool` message per result; images a tool attached follow in a user
/// message (as for OpenAI-style servers).
fn tool_messages(m: &Message, call_names: &HashMap<&str, &str>, out: &mut Vec<Value>) {
    for p in &m.parts {
        if let Part::ToolResult {
            tool_call_id, content, ..
        } = p
        {
            // A result whose call is not in the history has no known name;
            // its id is the best label left.
            let name = call_names
                .get(tool_call_id.as_str())
                .copied()
                .unwrap_or(tool_call_id.as_str());
            out.push(json!({ "role": "tool", "content": content, "tool_name": name }));
        }
    }
    let images = images_of(m);
    if !images.is_empty() {
        out.push(json!({
            "role": "user",
            "content": "The images the tool results above refer to:",
            "images": images
        }));
    }
}

/// Decodes the lines of one `/api/chat` NDJSON stream (each arrives as an
/// [`SseEvent`] whose data is the line).
#[derive(Debug)]
pub struct OllamaDecoder {
    provider: String,
    id_prefix: String,
    /// Calls seen so far: numbers generated ids, and turns `stop` into `ToolUse`.
    calls: usize,
    budget: AnswerBudget,
}

impl OllamaDecoder {
    /// A decoder for one answer; `provider` names the source in errors.
    pub fn new(provider: &str) -> Self {
        OllamaDecoder {
            provider: provider.to_string(),
            id_prefix: "call_".to_string(),
            calls: 0,
            budget: AnswerBudget::default(),
        }
    }

    /// A decoder whose generated call ids start with `prefix`: Ollama's
    /// calls carry no ids, and ids that repeat across turns would confuse a
    /// history later sent to another provider.
    pub fn with_id_prefix(provider: &str, prefix: &str) -> Self {
        OllamaDecoder {
            id_prefix: prefix.to_string(),
            ..OllamaDecoder::new(provider)
        }
    }

    /// Turns one NDJSON line into normalized events.
    pub fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let line: Value = super::error::parse_chunk(&self.provider, data)?;
        self.charged(&line, out)
    }

    /// [`Self::object`], with what it produced counted against the answer's budget.
    fn charged(&mut self, v: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let before = out.len();
        let result = self.object(v, out);
        self.budget
            .charge(&self.provider, out.get(before..).unwrap_or_default())?;
        result
    }

    /// One response object: a piece of the message, the final `done`
    /// object (which may carry the whole message when not streaming), or
    /// an error. Anything else on a line is ignored: only `done` ends an
    /// answer, so a stream of nonsense ends incomplete, never silently.
    fn object(&mut self, v: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(&self.provider, err));
        }
        if let Some(message) = v.get("message") {
            let text_of = |key: &str| message.get(key).and_then(Value::as_str).filter(|s| !s.is_empty());
            if let Some(text) = text_of("thinking") {
                out.push(DecodeEvent::Delta(Delta::Reasoning { text: text.to_string() }));
            }
            if let Some(text) = text_of("content") {
                out.push(DecodeEvent::Delta(Delta::Text { text: text.to_string() }));
            }
            if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
                for call in calls {
                    self.tool_call(call, out)?;
                }
            }
        }
        if v.get("done").and_then(Value::as_bool) == Some(true) {
            let reason = v.get("done_reason").and_then(Value::as_str);
            out.push(DecodeEvent::Finish(self.stop_reason(reason)));
            if let Some(usage) = usage_of(v) {
                out.push(DecodeEvent::Delta(Delta::Usage { usage }));
            }
            log_timings(&self.provider, v);
            out.push(DecodeEvent::Terminal);
        }
        Ok(())
    }

    /// A whole call: `{"function": {"name", "arguments": {…}}}`. A call
    /// without a name cannot be run and is skipped.
    fn tool_call(&mut self, call: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let function = call.get("function");
        let Some(name) = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            return Ok(());
        };
        self.budget.start_call(&self.provider)?;
        // Newer servers may send an id; one is made up otherwise.
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("{}{}", self.id_prefix, self.calls));
        self.calls += 1;
        let arguments = match function.and_then(|f| f.get("arguments")) {
            None | Some(Value::Null) => json!({}),
            // Some proxies send the arguments as JSON text, as OpenAI does;
            // text that does not parse stays a string for validation to report.
            Some(Value::String(text)) => super::openai::parse_arguments(text),
            // Anything else (an array, a number) goes to validation as sent.
            Some(other) => other.clone(),
        };
        out.push(DecodeEvent::Delta(Delta::ToolCallStart {
            id: id.clone(),
            name: name.to_string(),
        }));
        out.push(DecodeEvent::Delta(Delta::ToolCallEnd { id, arguments }));
        Ok(())
    }

    fn stop_reason(&self, reason: Option<&str>) -> StopReason {
        match reason {
            // Ollama says `stop` after tool calls too; older servers say nothing.
            None | Some("stop") if self.calls > 0 => StopReason::ToolUse,
            None | Some("stop") => StopReason::EndTurn,
            Some("length") => StopReason::MaxTokens,
            Some(other) => StopReason::Other(other.to_string()),
        }
    }
}

/// `prompt_eval_count` is the prompt, `eval_count` the answer (thinking
/// included). Ollama leaves `prompt_eval_count` out when the whole prompt
/// came from its cache, so either may be missing; `None` when both are
/// (the answer's usage is then estimated). Counts that are not unsigned
/// integers (negative, fractional, text) count as missing.
fn usage_of(done: &Value) -> Option<Usage> {
    let count = |key: &str| done.get(key).and_then(Value::as_u64);
    let prompt = count("prompt_eval_count");
    let answer = count("eval_count");
    if prompt.is_none() && answer.is_none() {
        return None;
    }
    Some(Usage {
        input_tokens: prompt.unwrap_or(0),
        output_tokens: answer.unwrap_or(0),
        ..Usage::default()
    })
}

/// Ollama's timings (nanoseconds) go to the log: load time and generation
/// speed explain a slow local answer better than the token counts do.
fn log_timings(provider: &str, done: &Value) {
    let ms = |key: &str| done.get(key).and_then(Value::as_u64).map(|ns| ns / 1_000_000);
    let eval_count = done.get("eval_count").and_then(Value::as_u64);
    let eval_ns = done.get("eval_duration").and_then(Value::as_u64);
    let tokens_per_s = match (eval_count, eval_ns) {
        (Some(n), Some(ns)) if ns > 0 => Some(n as f64 * 1e9 / ns as f64),
        _ => None,
    };
    tracing::debug!(
        provider,
        total_ms = ?ms("total_duration"),
        load_ms = ?ms("load_duration"),
        prompt_eval_ms = ?ms("prompt_eval_duration"),
        eval_ms = ?ms("eval_duration"),
        tokens_per_s = ?tokens_per_s,
        "ollama timings"
    );
}

/// `{"error": "text"}` on a line of a stream that had already begun (or
/// as a whole response): classified by its text ([`error_kind`]).
fn stream_error(provider: &str, err: &Value) -> LlmError {
    let message = match err {
        Value::String(s) => s.clone(),
        // Proxies in front of Ollama may nest it OpenAI-style.
        other => other
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| other.to_string()),
    };
    let message: String = message.chars().take(300).collect();
    from_provider_error(provider, ERROR_TYPES, error_kind(&message), &message, None)
}

/// Reads a non-streaming `/api/chat` response (one object, `done: true`)
/// into the events its stream would have produced.
pub fn parse_response(provider: &str, body: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
    let mut decoder = OllamaDecoder::new(provider);
    let mut out = Vec::new();
    decoder.charged(body, &mut out)?;
    Ok(out)
}

/// The model names of a `GET /api/tags` response (`llama3.2:latest`).
pub fn model_ids(body: &Value) -> Vec<String> {
    body.get("models")
        .and_then(Value::as_array)
        .map(|models| {
            models
                .iter()
                .filter_map(|m| m.get("name").or_else(|| m.get("model")).and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::{Accumulator, MAX_TOOL_CALLS};
    use crate::message::ResponseFormat;
    use crate::stream::NdjsonDecoder;

    fn round_trip_request() -> ChatRequest {
        ChatRequest {
            model: "ollama/llama3.2".into(),
            system: Some("You are terse.".into()),
            messages: vec![
                Message {
                    role: Role::User,
                    parts: vec![
                        Part::Text {
                            text: "What is in this picture, and the weather in Oslo?".into(),
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
                            text: "Two questions.".into(),
                            signature: None,
                            redacted: false,
                        },
                        Part::Reasoning {
                            text: "ENCRYPTED".into(),
                            signature: None,
                            redacted: true,
                        },
                        Part::Text {
                            text: "A cat. Checking Oslo.".into(),
                        },
                        Part::ToolCall {
                            id: "call_7".into(),
                            name: "weather".into(),
                            arguments: json!({ "city": "Oslo" }),
                            signature: None,
                        },
                        Part::ToolCall {
                            id: "call_8".into(),
                            name: "clock".into(),
                            arguments: json!("{broken"),
                            signature: None,
                        },
                    ],
                },
                Message {
                    role: Role::Tool,
                    parts: vec![
                        Part::ToolResult {
                            tool_call_id: "call_7".into(),
                            content: "4°C, rain".into(),
                            is_error: false,
                        },
                        Part::ToolResult {
                            tool_call_id: "call_8".into(),
                            content: "arguments did not parse".into(),
                            is_error: true,
                        },
                        Part::ToolResult {
                            tool_call_id: "lost".into(),
                            content: "?".into(),
                            is_error: false,
                        },
                    ],
                },
                Message::text(Role::User, "Thanks. And tomorrow?"),
            ],
            tools: vec![ToolDef {
                name: "weather".into(),
                description: "Current weather for a city".into(),
                parameters: json!({ "type": "object", "properties": { "city": { "type": "string" } }, "required": ["city"] }),
            }],
            max_tokens: Some(2048),
            temperature: Some(0.5),
            ..ChatRequest::default()
        }
    }

    #[test]
    fn golden_body_with_history_tools_images_and_options() {
        assert_eq!(
            request_body(&round_trip_request(), "llama3.2", true),
            json!({
                "model": "llama3.2",
                "messages": [
                    { "role": "system", "content": "You are terse." },
                    { "role": "user", "content": "What is in this picture, and the weather in Oslo?",
                      "images": ["iVBORw0KGgo="] },
                    { "role": "assistant", "content": "A cat. Checking Oslo.", "thinking": "Two questions.",
                      "tool_calls": [
                        { "function": { "name": "weather", "arguments": { "city": "Oslo" } } },
                        { "function": { "name": "clock", "arguments": {} } }
                      ] },
                    { "role": "tool", "content": "4°C, rain", "tool_name": "weather" },
                    { "role": "tool", "content": "arguments did not parse", "tool_name": "clock" },
                    { "role": "tool", "content": "?", "tool_name": "lost" },
                    { "role": "user", "content": "Thanks. And tomorrow?" }
                ],
                "stream": true,
                "tools": [{ "type": "function", "function": {
                    "name": "weather",
                    "description": "Current weather for a city",
                    "parameters": { "type": "object", "properties": { "city": { "type": "string" } }, "required": ["city"] }
                } }],
                "options": { "temperature": 0.5, "num_predict": 2048 }
            })
        );
    }

    #[test]
    fn golden_plain_body_has_no_optional_fields_and_says_stream_false() {
        let req = ChatRequest {
            model: "ollama/qwen3:8b".into(),
            messages: vec![Message::text(Role::User, "hi")],
            ..ChatRequest::default()
        };
        assert_eq!(
            request_body(&req, "qwen3:8b", false),
            json!({ "model": "qwen3:8b", "messages": [{ "role": "user", "content": "hi" }], "stream": false })
        );
    }

    #[test]
    fn golden_stop_sequences_and_response_format() {
        let mut req = round_trip_request();
        req.stop_sequences = vec!["END".into(), "\n\n".into()];
        let schema = json!({ "type": "object", "properties": { "x": { "type": "integer" } }, "required": ["x"] });
        req.response_format = Some(ResponseFormat {
            name: "point".into(),
            schema: schema.clone(),
        });
        let body = request_body(&req, "llama3.2", true);
        assert_eq!(body["format"], schema);
        assert_eq!(
            body["options"],
            json!({ "temperature": 0.5, "num_predict": 2048, "stop": ["END", "\n\n"] })
        );
    }

    #[test]
    fn images_a_tool_attached_follow_in_a_user_message() {
        let mut req = round_trip_request();
        req.messages[2].parts.push(Part::Image {
            media_type: "image/png".into(),
            data: "QUJD".into(),
        });
        let body = request_body(&req, "m", true);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(
            messages[6],
            json!({ "role": "user", "content": "The images the tool results above refer to:", "images": ["QUJD"] })
        );
    }

    fn decode_lines(lines: &[&str]) -> Result<Vec<DecodeEvent>, LlmError> {
        let mut d = OllamaDecoder::new("ollama");
        let mut out = Vec::new();
        for line in lines {
            d.decode(
                &SseEvent {
                    event: None,
                    data: line.to_string(),
                },
                &mut out,
            )?;
        }
        Ok(out)
    }

    /// Frames `body` as NDJSON cut at `cuts` and decodes it; stops at the first error.
    fn decode_body(body: &str, cuts: &[usize]) -> (Vec<DecodeEvent>, Option<LlmError>) {
        let bytes = body.as_bytes();
        let mut at = vec![0];
        at.extend(cuts.iter().copied());
        at.push(bytes.len());
        let mut framer = NdjsonDecoder::new();
        let mut d = OllamaDecoder::new("ollama");
        let (mut lines, mut out) = (Vec::new(), Vec::new());
        let mut feed = |lines: &mut Vec<SseEvent>, out: &mut Vec<DecodeEvent>| -> Option<LlmError> {
            lines.drain(..).find_map(|line| d.decode(&line, out).err())
        };
        for w in at.windows(2) {
            framer.push(&bytes[w[0]..w[1]], &mut lines).unwrap();
            if let Some(e) = feed(&mut lines, &mut out) {
                return (out, Some(e));
            }
        }
        framer.finish(&mut lines);
        let err = feed(&mut lines, &mut out);
        (out, err)
    }

    /// A stream as a real server sends it: thinking, text (with multi-byte
    /// characters), a tool call, and the final object.
    const STREAM: &str = concat!(
        r#"{"model":"qwen3","created_at":"2025-06-01T10:00:00.1Z","message":{"role":"assistant","content":"","thinking":"Weather → tool."},"done":false}"#,
        "\n",
        r#"{"model":"qwen3","created_at":"2025-06-01T10:00:00.2Z","message":{"role":"assistant","content":"Looking up "},"done":false}"#,
        "\n",
        r#"{"model":"qwen3","created_at":"2025-06-01T10:00:00.3Z","message":{"role":"assistant","content":"Oslo 🌧"},"done":false}"#,
        "\n",
        r#"{"model":"qwen3","created_at":"2025-06-01T10:00:00.4Z","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"weather","arguments":{"city":"Oslo"}}}]},"done":false}"#,
        "\n",
        r#"{"model":"qwen3","created_at":"2025-06-01T10:00:00.5Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":885095291,"load_duration":3753500,"prompt_eval_count":122,"prompt_eval_duration":328493000,"eval_count":33,"eval_duration":552222000}"#,
        "\n",
    );

    fn expected_stream_events() -> Vec<DecodeEvent> {
        vec![
            DecodeEvent::Delta(Delta::Reasoning {
                text: "Weather → tool.".into(),
            }),
            DecodeEvent::Delta(Delta::Text {
                text: "Looking up ".into(),
            }),
            DecodeEvent::Delta(Delta::Text {
                text: "Oslo 🌧".into()
            }),
            DecodeEvent::Delta(Delta::ToolCallStart {
                id: "call_0".into(),
                name: "weather".into(),
            }),
            DecodeEvent::Delta(Delta::ToolCallEnd {
                id: "call_0".into(),
                arguments: json!({ "city": "Oslo" }),
            }),
            DecodeEvent::Finish(StopReason::ToolUse),
            DecodeEvent::Delta(Delta::Usage {
                usage: Usage {
                    input_tokens: 122,
                    output_tokens: 33,
                    ..Usage::default()
                },
            }),
            DecodeEvent::Terminal,
        ]
    }

    #[test]
    fn a_stream_gives_thinking_text_a_call_stop_and_usage() {
        let (out, err) = decode_body(STREAM, &[]);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(out, expected_stream_events());
        let mut acc = Accumulator::default();
        out.iter().for_each(|e| acc.apply(e));
        assert!(acc.complete());
        assert_eq!(acc.text, "Looking up Oslo 🌧");
    }

    #[test]
    fn a_stream_cut_at_every_byte_boundary_decodes_the_same() {
        let expected = expected_stream_events();
        for cut in 0..=STREAM.len() {
            let (out, err) = decode_body(STREAM, &[cut]);
            assert!(err.is_none(), "cut at {cut}: {err:?}");
            assert_eq!(out, expected, "cut at {cut}");
        }
        // And one byte at a time.
        let every: Vec<usize> = (1..STREAM.len()).collect();
        assert_eq!(decode_body(STREAM, &every).0, expected);
    }

    #[test]
    fn each_call_gets_a_unique_id_unless_the_server_sent_one() {
        let mut d = OllamaDecoder::with_id_prefix("ollama", "call_abc_");
        let mut out = Vec::new();
        let line = r#"{"message":{"role":"assistant","content":"","tool_calls":[
            {"function":{"name":"read","arguments":{"path":"a"}}},
            {"id":"srv-1","function":{"name":"read","arguments":{"path":"b"}}},
            {"function":{"name":"read","arguments":{"path":"c"}}}]},"done":false}"#
            .replace('\n', "");
        d.decode(
            &SseEvent {
                event: None,
                data: line,
            },
            &mut out,
        )
        .unwrap();
        let ids: Vec<&str> = out
            .iter()
            .filter_map(|e| match e {
                DecodeEvent::Delta(Delta::ToolCallStart { id, .. }) => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["call_abc_0", "srv-1", "call_abc_2"]);
    }

    #[test]
    fn stop_without_calls_ends_the_turn_and_length_is_max_tokens() {
        let out = decode_lines(&[r#"{"message":{"content":"Hi"},"done":true,"done_reason":"stop"}"#]).unwrap();
        assert_eq!(out[1], DecodeEvent::Finish(StopReason::EndTurn));
        let out = decode_lines(&[r#"{"message":{"content":"Hi"},"done":true,"done_reason":"length"}"#]).unwrap();
        assert_eq!(out[1], DecodeEvent::Finish(StopReason::MaxTokens));
        // Older servers: `done` without a reason.
        let out = decode_lines(&[r#"{"done":true,"prompt_eval_count":26,"eval_count":282}"#]).unwrap();
        assert_eq!(out[0], DecodeEvent::Finish(StopReason::EndTurn));
        let out = decode_lines(&[r#"{"done":true,"done_reason":"load"}"#]).unwrap();
        assert_eq!(out[0], DecodeEvent::Finish(StopReason::Other("load".into())));
    }

    #[test]
    fn a_cached_prompt_leaves_prompt_eval_count_out_and_no_counts_mean_no_usage() {
        let out = decode_lines(&[r#"{"done":true,"done_reason":"stop","eval_count":5}"#]).unwrap();
        assert_eq!(
            out[1],
            DecodeEvent::Delta(Delta::Usage {
                usage: Usage {
                    output_tokens: 5,
                    ..Usage::default()
                }
            })
        );
        let out = decode_lines(&[r#"{"done":true,"done_reason":"stop"}"#]).unwrap();
        assert_eq!(
            out,
            vec![DecodeEvent::Finish(StopReason::EndTurn), DecodeEvent::Terminal]
        );
    }

    #[test]
    fn hostile_counts_are_ignored_or_kept_within_u64() {
        let out = decode_lines(&[
            r#"{"done":true,"prompt_eval_count":-5,"eval_count":18446744073709551615,"eval_duration":0,"total_duration":-1,"load_duration":1e400}"#,
        ]);
        // 1e400 is not a JSON number serde accepts: a malformed line, not a panic.
        assert!(out.is_err());
        let out =
            decode_lines(&[r#"{"done":true,"prompt_eval_count":-5,"eval_count":18446744073709551615,"eval_duration":0,"total_duration":-1}"#])
                .unwrap();
        assert_eq!(
            out[1],
            DecodeEvent::Delta(Delta::Usage {
                usage: Usage {
                    input_tokens: 0,
                    output_tokens: u64::MAX,
                    ..Usage::default()
                }
            })
        );
        let out = decode_lines(&[r#"{"done":true,"prompt_eval_count":1.5,"eval_count":"7"}"#]).unwrap();
        assert_eq!(
            out,
            vec![DecodeEvent::Finish(StopReason::EndTurn), DecodeEvent::Terminal]
        );
    }

    #[test]
    fn hostile_shapes_never_make_a_call_without_a_name_and_keep_odd_arguments_for_validation() {
        let out = decode_lines(&[
            r#"{"message":{"tool_calls":[{"function":{"arguments":{"a":1}}},{"function":{"name":""}},"x",7,{"function":"f"}]}}"#,
            r#"{"message":{"tool_calls":[{"function":{"name":"a","arguments":[1,2]}},{"function":{"name":"b","arguments":"{\"k\":1}"}},{"function":{"name":"c","arguments":"{nope"}},{"function":{"name":"d"}}]}}"#,
            r#"{"message":"text","done":"true"}"#,
            r#"{"message":{"content":7,"thinking":["x"],"tool_calls":{"function":{}}}}"#,
            r#"42"#,
            r#"[{"done":true}]"#,
        ])
        .unwrap();
        let ends: Vec<(String, Value)> = out
            .iter()
            .filter_map(|e| match e {
                DecodeEvent::Delta(Delta::ToolCallEnd { id, arguments }) => Some((id.clone(), arguments.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            ends,
            vec![
                ("call_0".to_string(), json!([1, 2])),
                ("call_1".to_string(), json!({ "k": 1 })),
                ("call_2".to_string(), json!("{nope")),
                ("call_3".to_string(), json!({})),
            ]
        );
        // None of those lines said `done`: the answer is not complete.
        let mut acc = Accumulator::default();
        out.iter().for_each(|e| acc.apply(e));
        assert!(!acc.complete());
    }

    #[test]
    fn too_many_calls_end_the_answer_with_a_clear_error() {
        let calls: Vec<String> = (0..=MAX_TOOL_CALLS)
            .map(|i| format!(r#"{{"function":{{"name":"t{i}","arguments":{{}}}}}}"#))
            .collect();
        let line = format!(r#"{{"message":{{"tool_calls":[{}]}}}}"#, calls.join(","));
        let err = decode_lines(&[&line]).unwrap_err();
        assert!(
            err.message.starts_with("ollama: the server sent more than"),
            "{}",
            err.message
        );
        assert!(!err.retryable);
    }

    #[test]
    fn a_stream_that_never_says_done_is_incomplete() {
        let lines: Vec<String> = (0..1000)
            .map(|i| format!(r#"{{"message":{{"role":"assistant","content":"w{i} "}},"done":false}}"#))
            .collect();
        let body = lines.join("\n");
        let (out, err) = decode_body(&body, &[body.len() / 2]);
        assert!(err.is_none());
        let mut acc = Accumulator::default();
        out.iter().for_each(|e| acc.apply(e));
        assert!(acc.text.starts_with("w0 w1 ") && acc.text.ends_with("w999 "));
        assert!(!acc.complete(), "a stream without done must end as incomplete");
    }

    #[test]
    fn a_malformed_line_is_one_clear_error_naming_the_provider() {
        let body = concat!(
            r#"{"message":{"content":"ok "},"done":false}"#,
            "\n",
            r#"{"message":{"role":"assistant","content":"#,
            "\n",
            r#"{"message":{"content":"after"},"done":false}"#,
            "\n"
        );
        let (out, err) = decode_body(body, &[7]);
        let err = err.expect("an error");
        assert_eq!(out, vec![DecodeEvent::Delta(Delta::Text { text: "ok ".into() })]);
        assert_eq!(err.class, ErrorClass::ServerError);
        assert!(
            err.message.starts_with("ollama: the stream carried a malformed chunk"),
            "{}",
            err.message
        );
    }

    #[test]
    fn error_lines_are_classified_by_their_text() {
        let class_of = |line: &str| decode_lines(&[line]).unwrap_err();
        let busy = class_of(r#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#);
        assert_eq!(busy.class, ErrorClass::ServerError);
        assert!(busy.retryable);
        assert!(busy.message.starts_with("ollama: "), "{}", busy.message);
        let crashed = class_of(r#"{"error":"an error was encountered while running the model: unexpected EOF"}"#);
        assert_eq!(crashed.class, ErrorClass::ServerError);
        assert!(crashed.message.contains("unexpected EOF"), "{}", crashed.message);
        let missing = class_of(r#"{"error":"model \"nope\" not found, try pulling it first"}"#);
        assert_eq!(missing.class, ErrorClass::ModelNotFound);
        let long = class_of(r#"{"error":"input length exceeds maximum context length"}"#);
        assert_eq!(long.class, ErrorClass::ContextOverflow);
        let nested = class_of(r#"{"error":{"message":"Rate limit reached","type":"x"}}"#);
        assert_eq!(nested.class, ErrorClass::RateLimit);
        let huge = format!(r#"{{"error":"{}"}}"#, "é".repeat(100_000));
        assert!(class_of(&huge).message.chars().count() < 600);
    }

    #[test]
    fn a_whole_response_gives_the_stream_events() {
        let body = json!({
            "model": "llama3.2",
            "created_at": "2024-07-22T20:33:28.123648Z",
            "message": {
                "role": "assistant",
                "content": "",
                "thinking": "Paris.",
                "tool_calls": [{ "function": { "name": "get_current_weather", "arguments": { "format": "celsius", "location": "Paris, FR" } } }]
            },
            "done_reason": "stop",
            "done": true,
            "total_duration": 885095291,
            "load_duration": 3753500,
            "prompt_eval_count": 122,
            "prompt_eval_duration": 328493000,
            "eval_count": 33,
            "eval_duration": 552222000
        });
        assert_eq!(
            parse_response("ollama", &body).unwrap(),
            vec![
                DecodeEvent::Delta(Delta::Reasoning { text: "Paris.".into() }),
                DecodeEvent::Delta(Delta::ToolCallStart {
                    id: "call_0".into(),
                    name: "get_current_weather".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallEnd {
                    id: "call_0".into(),
                    arguments: json!({ "format": "celsius", "location": "Paris, FR" })
                }),
                DecodeEvent::Finish(StopReason::ToolUse),
                DecodeEvent::Delta(Delta::Usage {
                    usage: Usage {
                        input_tokens: 122,
                        output_tokens: 33,
                        ..Usage::default()
                    }
                }),
                DecodeEvent::Terminal,
            ]
        );
        let err = parse_response(
            "ollama",
            &json!({ "error": "model \"x\" not found, try pulling it first" }),
        )
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::ModelNotFound);
    }

    #[test]
    fn the_builtin_ollama_needs_no_key_and_speaks_api_chat_and_api_tags() {
        use crate::providers::{CoreConfig, Providers};
        let providers = Providers::new(CoreConfig::default());
        let (p, model) = providers.resolve("ollama/qwen3:8b").expect("no key needed");
        assert_eq!(
            (p.kind.name(), model.as_str(), p.api_key.as_deref()),
            ("ollama", "qwen3:8b", None)
        );
        let format = wire::lookup("ollama").expect("registered");
        assert_eq!(format.chat_url(&p, &model, true), "http://localhost:11434/api/chat");
        assert_eq!(format.chat_url(&p, &model, false), "http://localhost:11434/api/chat");
        assert_eq!(format.models_url(&p), "http://localhost:11434/api/tags");
        assert!(format.headers(&p).is_empty());
        let keyed = ResolvedProvider {
            api_key: Some("sk-proxy".into()),
            ..p.clone()
        };
        assert_eq!(
            format.headers(&keyed),
            vec![("authorization".to_string(), "Bearer sk-proxy".to_string())]
        );
        let req = ChatRequest {
            messages: vec![Message::text(Role::User, "hi")],
            ..ChatRequest::default()
        };
        assert_eq!(format.request_body(&p, &model, &req, false)["stream"], json!(false));
    }

    #[test]
    fn model_ids_are_the_tag_names() {
        let body = json!({ "models": [
            { "name": "llama3.2:latest", "model": "llama3.2:latest", "size": 2019393189,
              "details": { "family": "llama", "parameter_size": "3.2B" } },
            { "model": "qwen3:8b" },
            { "name": 7 },
            "junk"
        ]});
        assert_eq!(model_ids(&body), vec!["llama3.2:latest", "qwen3:8b"]);
        assert!(model_ids(&json!({ "models": {} })).is_empty());
    }
}
