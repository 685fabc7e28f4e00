//! Anthropic Messages API: the request body, the streamed event decoder, the
//! non-streaming response reader and the model list.
//!
//! Anthropic's wire rules that shape this file: roles must alternate (so
//! neighbouring messages of one role are merged), tool results travel in
//! `user` messages and must open them, thinking blocks must open assistant
//! messages and are only accepted back with their signature, and usage is
//! reported twice (`message_start`, then cumulative totals in `message_delta`).

use serde_json::{json, Map, Value};

use super::delta::{AnswerBudget, DecodeEvent, Delta};
use super::error::{from_provider_error, ErrorClass, LlmError};
use super::message::{ChatRequest, Message, Part, Role, StopReason};
use super::providers::ResolvedProvider;
use super::ratelimit::{ResetFormat, WindowHeaders};
use super::stream::SseEvent;
use super::wire::{self, Builtin, CountRequest, StreamDecoder, WireFormat};
use mia_cost::Usage;

/// The `anthropic-version` header value mia speaks.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The Messages API as a [`WireFormat`] (`kind = "anthropic"`).
pub struct Anthropic;

impl WireFormat for Anthropic {
    fn kind(&self) -> &'static str {
        "anthropic"
    }

    fn builtin(&self) -> Option<Builtin> {
        Some(Builtin {
            name: "anthropic",
            base_url: "https://api.anthropic.com",
            api_key_env: Some("ANTHROPIC_API_KEY"),
        })
    }

    fn headers(&self, p: &ResolvedProvider) -> Vec<(String, String)> {
        let mut headers = vec![("anthropic-version".to_string(), ANTHROPIC_VERSION.to_string())];
        if let Some(key) = &p.api_key {
            headers.insert(0, ("x-api-key".to_string(), key.clone()));
        }
        headers
    }

    fn chat_url(&self, p: &ResolvedProvider, _model: &str, _stream: bool) -> String {
        wire::url(p, "/v1/messages")
    }

    fn request_body(&self, p: &ResolvedProvider, model: &str, req: &ChatRequest, stream: bool) -> Value {
        let opts = AnthropicOptions {
            prompt_caching: p.prompt_caching,
            ..AnthropicOptions::default()
        };
        request_body(req, model, &opts, stream)
    }

    fn decoder(&self, p: &ResolvedProvider) -> Box<dyn StreamDecoder> {
        Box::new(AnthropicDecoder::new(&p.name))
    }

    fn parse_response(&self, provider: &str, json: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
        parse_response(provider, json)
    }

    fn models_url(&self, p: &ResolvedProvider) -> String {
        wire::url(p, "/v1/models")
    }

    fn model_ids(&self, json: &Value) -> Vec<String> {
        model_ids(json)
    }

    /// `POST /v1/messages/count_tokens`: the messages body minus what only
    /// an answer needs.
    fn count_request(&self, p: &ResolvedProvider, model: &str, req: &ChatRequest) -> Option<CountRequest> {
        let mut body = self.request_body(p, model, req, false);
        if let Value::Object(map) = &mut body {
            for key in ["max_tokens", "stream", "temperature"] {
                map.remove(key);
            }
        }
        Some(CountRequest {
            url: wire::url(p, "/v1/messages/count_tokens"),
            body,
            field: "input_tokens",
        })
    }

    fn rate_limit_headers(&self) -> &'static [WindowHeaders] {
        RATE_LIMIT_HEADERS
    }
}

impl StreamDecoder for AnthropicDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        AnthropicDecoder::decode(self, event, out)
    }
}

/// `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-*`,
/// each with an RFC 3339 reset time.
pub const RATE_LIMIT_HEADERS: &[WindowHeaders] = &[
    family(
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-reset",
        true,
    ),
    family(
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-tokens-reset",
        false,
    ),
    family(
        "anthropic-ratelimit-input-tokens-remaining",
        "anthropic-ratelimit-input-tokens-limit",
        "anthropic-ratelimit-input-tokens-reset",
        false,
    ),
    family(
        "anthropic-ratelimit-output-tokens-remaining",
        "anthropic-ratelimit-output-tokens-limit",
        "anthropic-ratelimit-output-tokens-reset",
        false,
    ),
];

const fn family(remaining: &'static str, limit: &'static str, reset: &'static str, requests: bool) -> WindowHeaders {
    WindowHeaders {
        remaining,
        limit,
        reset,
        reset_format: ResetFormat::Rfc3339,
        requests,
    }
}

/// Anthropic's `error.type` names.
pub const ERROR_TYPES: super::error::ErrorTypes = &[
    ("overloaded_error", ErrorClass::Overloaded),
    ("api_error", ErrorClass::ServerError),
    ("rate_limit_error", ErrorClass::RateLimit),
    ("authentication_error", ErrorClass::AuthFailure),
    ("permission_error", ErrorClass::AuthFailure),
    ("not_found_error", ErrorClass::ModelNotFound),
    ("request_too_large", ErrorClass::ContextOverflow),
];

/// Anthropic-only request settings.
#[derive(Debug, Clone)]
pub struct AnthropicOptions {
    /// Marks the system prompt and the last user message as cache breakpoints,
    /// so a long conversation is billed at the cache-read rate on the next turn.
    pub prompt_caching: bool,
    /// `max_tokens` when the request names none; Anthropic requires the field.
    pub default_max_tokens: u32,
}

impl Default for AnthropicOptions {
    fn default() -> Self {
        AnthropicOptions {
            prompt_caching: false,
            default_max_tokens: 8192,
        }
    }
}

/// The JSON body of a `POST /v1/messages` for `model` (the part after `provider/`).
/// `stream` adds `"stream": true`; without it the answer comes back whole
/// (read it with [`parse_response`]).
pub fn request_body(req: &ChatRequest, model: &str, opts: &AnthropicOptions, stream: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "max_tokens".into(),
        json!(req.max_tokens.unwrap_or(opts.default_max_tokens)),
    );
    if stream {
        body.insert("stream".into(), json!(true));
    }
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        let value = if opts.prompt_caching {
            json!([{ "type": "text", "text": system, "cache_control": ephemeral() }])
        } else {
            json!(system)
        };
        body.insert("system".into(), value);
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if !req.stop_sequences.is_empty() {
        body.insert("stop_sequences".into(), json!(req.stop_sequences));
    }
    if let Some(f) = &req.response_format {
        body.insert(
            "output_config".into(),
            json!({ "format": { "type": "json_schema", "schema": f.schema } }),
        );
    }
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.parameters,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert(
        "messages".into(),
        Value::Array(messages(&req.messages, opts.prompt_caching)),
    );
    Value::Object(body)
}

fn ephemeral() -> Value {
    json!({ "type": "ephemeral" })
}

/// Converts the history into alternating `user` / `assistant` messages.
fn messages(history: &[Message], prompt_caching: bool) -> Vec<Value> {
    let mut merged: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in history {
        let role = match m.role {
            Role::User | Role::Tool => "user",
            Role::Assistant => "assistant",
        };
        let blocks: Vec<Value> = m.parts.iter().filter_map(block).collect();
        if blocks.is_empty() {
            // Anthropic rejects empty content (e.g. a turn made only of
            // unsigned reasoning); dropping it keeps its neighbours valid.
            continue;
        }
        match merged.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => merged.push((role, blocks)),
        }
    }
    for (role, blocks) in &mut merged {
        // Tool results must open a user message, thinking must open an
        // assistant message; a stable sort keeps every other order intact.
        blocks.sort_by_key(|b| !leads(role, b));
    }
    if prompt_caching {
        let last_user_block = merged
            .iter_mut()
            .rev()
            .find(|(role, _)| *role == "user")
            .and_then(|(_, blocks)| blocks.last_mut());
        if let Some(Value::Object(block)) = last_user_block {
            block.insert("cache_control".into(), ephemeral());
        }
    }
    merged
        .into_iter()
        .map(|(role, blocks)| json!({ "role": role, "content": blocks }))
        .collect()
}

fn block_type(block: &Value) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Whether `block` must come before the other blocks of a `role` message.
fn leads(role: &str, block: &Value) -> bool {
    matches!(
        (role, block_type(block)),
        ("user", "tool_result") | ("assistant", "thinking" | "redacted_thinking")
    )
}

/// One internal part as an Anthropic content block, or `None` when Anthropic
/// cannot take it back (empty text, reasoning without a signature).
fn block(part: &Part) -> Option<Value> {
    match part {
        Part::Text { text } if text.is_empty() => None,
        Part::Text { text } => Some(json!({ "type": "text", "text": text })),
        Part::Image { media_type, data } => Some(json!({
            "type": "image",
            "source": { "type": "base64", "media_type": media_type, "data": data }
        })),
        Part::ToolCall {
            id, name, arguments, ..
        } => {
            let input = if arguments.is_object() {
                arguments.clone()
            } else {
                json!({})
            };
            Some(json!({ "type": "tool_use", "id": id, "name": name, "input": input }))
        }
        Part::ToolResult {
            tool_call_id,
            content,
            is_error,
        } => {
            let mut b = json!({ "type": "tool_result", "tool_use_id": tool_call_id, "content": content });
            if *is_error {
                b["is_error"] = json!(true);
            }
            Some(b)
        }
        Part::Reasoning {
            text, redacted: true, ..
        } => Some(json!({ "type": "redacted_thinking", "data": text })),
        Part::Reasoning {
            text,
            signature: Some(sig),
            ..
        } if !sig.is_empty() => Some(json!({ "type": "thinking", "thinking": text, "signature": sig })),
        Part::Reasoning { .. } => None,
        // OpenAI's encrypted reasoning means nothing to Anthropic.
        Part::EncryptedReasoning { .. } => None,
    }
}

/// A `tool_use` block whose input is still arriving as JSON fragments.
#[derive(Debug)]
struct OpenToolCall {
    index: u64,
    id: String,
    json: String,
    /// The `input` the block started with (`{}` when streaming).
    initial: Value,
}

/// Decodes the SSE events of one streamed Messages answer.
#[derive(Debug)]
pub struct AnthropicDecoder {
    provider: String,
    /// Running totals: `message_start` sets them, `message_delta` overwrites.
    usage: Usage,
    open_tools: Vec<OpenToolCall>,
    budget: AnswerBudget,
}

impl AnthropicDecoder {
    /// A decoder for one answer; `provider` names the source in errors.
    pub fn new(provider: &str) -> Self {
        AnthropicDecoder {
            provider: provider.to_string(),
            usage: Usage::default(),
            open_tools: Vec::new(),
            budget: AnswerBudget::default(),
        }
    }

    /// Turns one SSE event into normalized events. The JSON's own `type`
    /// decides what the event is; the `event:` line is only a fallback.
    pub fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let before = out.len();
        let result = self.decode_event(event, out);
        self.budget
            .charge(&self.provider, out.get(before..).unwrap_or_default())?;
        result
    }

    fn decode_event(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let payload: Value = super::error::parse_chunk(&self.provider, data)?;
        let kind = payload
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or("");
        match kind {
            "message_start" => {
                self.usage = Usage::default();
                if let Some(u) = payload.pointer("/message/usage") {
                    self.merge_usage(u);
                }
                out.push(DecodeEvent::Delta(Delta::Usage { usage: self.usage }));
            }
            "content_block_start" => self.block_start(&payload, out)?,
            "content_block_delta" => self.block_delta(&payload, out),
            "content_block_stop" => {
                if let Some(index) = payload.get("index").and_then(Value::as_u64) {
                    if let Some(pos) = self.open_tools.iter().position(|t| t.index == index) {
                        let call = self.open_tools.remove(pos);
                        out.push(end_tool_call(call));
                    }
                }
            }
            "message_delta" => {
                // A stream cut short by max_tokens inside a tool_use block
                // never stops that block; close it with what arrived, so
                // the call is reported (with unparseable arguments) rather
                // than lost.
                for call in std::mem::take(&mut self.open_tools) {
                    out.push(end_tool_call(call));
                }
                if let Some(reason) = payload.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    out.push(DecodeEvent::Finish(stop_reason(reason)));
                }
                if let Some(u) = payload.get("usage").filter(|u| u.is_object()) {
                    self.merge_usage(u);
                    out.push(DecodeEvent::Delta(Delta::Usage { usage: self.usage }));
                }
            }
            "message_stop" => {
                for call in std::mem::take(&mut self.open_tools) {
                    out.push(end_tool_call(call));
                }
                out.push(DecodeEvent::Terminal);
            }
            "error" => return Err(stream_error(&self.provider, &payload)),
            // `ping` and event types newer than this decoder carry nothing mia shows.
            _ => {}
        }
        Ok(())
    }

    fn block_start(&mut self, payload: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let Some(block) = payload.get("content_block") else {
            return Ok(());
        };
        let index = payload.get("index").and_then(Value::as_u64).unwrap_or(0);
        match block_type(block) {
            "text" => push_text(out, block.get("text")),
            "tool_use" => {
                self.budget.start_call(&self.provider)?;
                let id = str_field(block, "id");
                out.push(DecodeEvent::Delta(Delta::ToolCallStart {
                    id: id.clone(),
                    name: str_field(block, "name"),
                }));
                self.open_tools.push(OpenToolCall {
                    index,
                    id,
                    json: String::new(),
                    initial: block.get("input").cloned().unwrap_or(Value::Null),
                });
            }
            "thinking" => {
                push_reasoning(out, block.get("thinking"));
                push_signature(out, block.get("signature"));
            }
            "redacted_thinking" => {
                out.push(DecodeEvent::RedactedReasoning(str_field(block, "data")));
            }
            // `server_tool_use` and the `*_tool_result` blocks are tools
            // Anthropic runs itself (web search, code execution): they are
            // not calls for mia to execute, so they are not reported as such.
            _ => {}
        }
        Ok(())
    }

    fn block_delta(&mut self, payload: &Value, out: &mut Vec<DecodeEvent>) {
        let Some(delta) = payload.get("delta") else {
            return;
        };
        let index = payload.get("index").and_then(Value::as_u64).unwrap_or(0);
        match block_type(delta) {
            "text_delta" => push_text(out, delta.get("text")),
            "thinking_delta" => push_reasoning(out, delta.get("thinking")),
            "signature_delta" => push_signature(out, delta.get("signature")),
            "input_json_delta" => {
                let fragment = delta.get("partial_json").and_then(Value::as_str).unwrap_or("");
                // Fragments of server-run tools have no open call and are dropped.
                let Some(call) = self.open_tools.iter_mut().find(|t| t.index == index) else {
                    return;
                };
                if fragment.is_empty() {
                    return;
                }
                call.json.push_str(fragment);
                out.push(DecodeEvent::Delta(Delta::ToolCallDelta {
                    id: call.id.clone(),
                    arguments_delta: fragment.to_string(),
                }));
            }
            _ => {}
        }
    }

    /// Overwrites every count `u` carries; counts it leaves out keep their value.
    fn merge_usage(&mut self, u: &Value) {
        let set = |field: &mut u64, ptr: &str| {
            if let Some(n) = u.pointer(ptr).and_then(Value::as_u64) {
                *field = n;
            }
        };
        set(&mut self.usage.input_tokens, "/input_tokens");
        set(&mut self.usage.output_tokens, "/output_tokens");
        set(&mut self.usage.cache_write_tokens, "/cache_creation_input_tokens");
        set(&mut self.usage.cache_read_tokens, "/cache_read_input_tokens");
        set(
            &mut self.usage.reasoning_tokens,
            "/output_tokens_details/thinking_tokens",
        );
    }
}

/// The `ToolCallEnd` of a finished `tool_use` block. Arguments that do not
/// parse stay as the raw string, so validation can show the model's mistake.
fn end_tool_call(call: OpenToolCall) -> DecodeEvent {
    let arguments = if call.json.trim().is_empty() {
        if call.initial.is_object() {
            call.initial
        } else {
            json!({})
        }
    } else {
        serde_json::from_str(&call.json).unwrap_or(Value::String(call.json))
    };
    DecodeEvent::Delta(Delta::ToolCallEnd { id: call.id, arguments })
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn non_empty(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string)
}

fn push_text(out: &mut Vec<DecodeEvent>, v: Option<&Value>) {
    if let Some(text) = non_empty(v) {
        out.push(DecodeEvent::Delta(Delta::Text { text }));
    }
}

fn push_reasoning(out: &mut Vec<DecodeEvent>, v: Option<&Value>) {
    if let Some(text) = non_empty(v) {
        out.push(DecodeEvent::Delta(Delta::Reasoning { text }));
    }
}

fn push_signature(out: &mut Vec<DecodeEvent>, v: Option<&Value>) {
    if let Some(signature) = non_empty(v) {
        out.push(DecodeEvent::Signature {
            tool_call_id: None,
            signature,
        });
    }
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" => StopReason::EndTurn,
        "max_tokens" => StopReason::MaxTokens,
        "tool_use" => StopReason::ToolUse,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_string()),
    }
}

/// `{"type":"error","error":{"type":…,"message":…}}`, in a stream or a body.
fn stream_error(provider: &str, payload: &Value) -> LlmError {
    let kind = payload.pointer("/error/type").and_then(Value::as_str).unwrap_or("");
    let message = payload
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("unknown error");
    from_provider_error(provider, ERROR_TYPES, kind, message, None)
}

/// Reads a non-streaming Messages response into the events its stream would
/// have produced: content in order, then finish, usage and the end marker.
pub fn parse_response(provider: &str, body: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
    if block_type(body) == "error" {
        return Err(stream_error(provider, body));
    }
    let Some(content) = body.get("content").and_then(Value::as_array) else {
        return Err(LlmError::new(
            ErrorClass::ServerError,
            Some(provider),
            format!("{provider}: the response has no `content` list; the provider may have changed its format."),
        ));
    };
    let mut out = Vec::new();
    let mut budget = AnswerBudget::default();
    for block in content {
        match block_type(block) {
            "text" => push_text(&mut out, block.get("text")),
            "thinking" => {
                push_reasoning(&mut out, block.get("thinking"));
                push_signature(&mut out, block.get("signature"));
            }
            "redacted_thinking" => out.push(DecodeEvent::RedactedReasoning(str_field(block, "data"))),
            "tool_use" => {
                budget.start_call(provider)?;
                let id = str_field(block, "id");
                out.push(DecodeEvent::Delta(Delta::ToolCallStart {
                    id: id.clone(),
                    name: str_field(block, "name"),
                }));
                out.push(end_tool_call(OpenToolCall {
                    index: 0,
                    id,
                    json: String::new(),
                    initial: block.get("input").cloned().unwrap_or(Value::Null),
                }));
            }
            _ => {}
        }
    }
    if let Some(reason) = body.get("stop_reason").and_then(Value::as_str) {
        out.push(DecodeEvent::Finish(stop_reason(reason)));
    }
    if let Some(u) = body.get("usage").filter(|u| u.is_object()) {
        let mut d = AnthropicDecoder::new(provider);
        d.merge_usage(u);
        out.push(DecodeEvent::Delta(Delta::Usage { usage: d.usage }));
    }
    budget.charge(provider, &out)?;
    out.push(DecodeEvent::Terminal);
    Ok(out)
}

/// The model ids of a `GET /v1/models` response, in the order listed.
pub fn model_ids(body: &Value) -> Vec<String> {
    body.get("data")
        .and_then(Value::as_array)
        .map(|models| {
            models
                .iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolDef;

    fn round_trip_request() -> ChatRequest {
        ChatRequest {
            model: "anthropic/claude-x".into(),
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
                        Part::Text {
                            text: "A cat. Checking Oslo.".into(),
                        },
                        Part::ToolCall {
                            id: "toolu_1".into(),
                            name: "weather".into(),
                            arguments: json!({ "city": "Oslo" }),
                            signature: None,
                        },
                        // Anthropic cannot take unsigned thinking back: dropped.
                        Part::Reasoning {
                            text: "unsigned musing".into(),
                            signature: None,
                            redacted: false,
                        },
                        // Signed thinking goes first in the message.
                        Part::Reasoning {
                            text: "The user wants two things.".into(),
                            signature: Some("sig-1".into()),
                            redacted: false,
                        },
                    ],
                },
                Message {
                    role: Role::Tool,
                    parts: vec![Part::ToolResult {
                        tool_call_id: "toolu_1".into(),
                        content: "4°C, rain".into(),
                        is_error: false,
                    }],
                },
                Message::text(Role::User, "Thanks. And tomorrow?"),
            ],
            tools: vec![ToolDef {
                name: "weather".into(),
                description: "Current weather for a city".into(),
                parameters: json!({
                    "type": "object",
                    "properties": { "city": { "type": "string" } },
                    "required": ["city"]
                }),
            }],
            max_tokens: None,
            temperature: Some(0.2),
            ..ChatRequest::default()
        }
    }

    #[test]
    fn request_body_merges_tool_results_into_the_next_user_turn() {
        let body = request_body(&round_trip_request(), "claude-x", &AnthropicOptions::default(), true);
        assert_eq!(
            body,
            json!({
                "model": "claude-x",
                "max_tokens": 8192,
                "stream": true,
                "system": "You are terse.",
                "temperature": 0.2,
                "tools": [{
                    "name": "weather",
                    "description": "Current weather for a city",
                    "input_schema": {
                        "type": "object",
                        "properties": { "city": { "type": "string" } },
                        "required": ["city"]
                    }
                }],
                "messages": [
                    { "role": "user", "content": [
                        { "type": "text", "text": "What is in this picture, and the weather in Oslo?" },
                        { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo=" } }
                    ]},
                    { "role": "assistant", "content": [
                        { "type": "thinking", "thinking": "The user wants two things.", "signature": "sig-1" },
                        { "type": "text", "text": "A cat. Checking Oslo." },
                        { "type": "tool_use", "id": "toolu_1", "name": "weather", "input": { "city": "Oslo" } }
                    ]},
                    { "role": "user", "content": [
                        { "type": "tool_result", "tool_use_id": "toolu_1", "content": "4°C, rain" },
                        { "type": "text", "text": "Thanks. And tomorrow?" }
                    ]}
                ]
            })
        );
    }

    #[test]
    fn prompt_caching_marks_system_and_last_user_block() {
        let mut req = round_trip_request();
        req.max_tokens = Some(1000);
        req.temperature = None;
        let opts = AnthropicOptions {
            prompt_caching: true,
            default_max_tokens: 8192,
        };
        assert_eq!(
            request_body(&req, "claude-x", &opts, false),
            json!({
                "model": "claude-x",
                "max_tokens": 1000,
                "system": [{ "type": "text", "text": "You are terse.", "cache_control": { "type": "ephemeral" } }],
                "tools": [{
                    "name": "weather",
                    "description": "Current weather for a city",
                    "input_schema": {
                        "type": "object",
                        "properties": { "city": { "type": "string" } },
                        "required": ["city"]
                    }
                }],
                "messages": [
                    { "role": "user", "content": [
                        { "type": "text", "text": "What is in this picture, and the weather in Oslo?" },
                        { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo=" } }
                    ]},
                    { "role": "assistant", "content": [
                        { "type": "thinking", "thinking": "The user wants two things.", "signature": "sig-1" },
                        { "type": "text", "text": "A cat. Checking Oslo." },
                        { "type": "tool_use", "id": "toolu_1", "name": "weather", "input": { "city": "Oslo" } }
                    ]},
                    { "role": "user", "content": [
                        { "type": "tool_result", "tool_use_id": "toolu_1", "content": "4°C, rain" },
                        { "type": "text", "text": "Thanks. And tomorrow?", "cache_control": { "type": "ephemeral" } }
                    ]}
                ]
            })
        );
    }

    #[test]
    fn error_results_redacted_thinking_and_non_object_arguments() {
        let req = ChatRequest {
            model: "anthropic/claude-x".into(),
            system: None,
            messages: vec![
                Message::text(Role::User, "go"),
                Message {
                    role: Role::Assistant,
                    parts: vec![
                        Part::ToolCall {
                            id: "t1".into(),
                            name: "run".into(),
                            arguments: json!("{not json"),
                            signature: None,
                        },
                        Part::Reasoning {
                            text: "ENCRYPTED".into(),
                            signature: None,
                            redacted: true,
                        },
                    ],
                },
                Message {
                    role: Role::Tool,
                    parts: vec![Part::ToolResult {
                        tool_call_id: "t1".into(),
                        content: "bad arguments".into(),
                        is_error: true,
                    }],
                },
            ],
            ..ChatRequest::default()
        };
        let body = request_body(&req, "m", &AnthropicOptions::default(), false);
        assert_eq!(
            body["messages"],
            json!([
                { "role": "user", "content": [{ "type": "text", "text": "go" }] },
                { "role": "assistant", "content": [
                    { "type": "redacted_thinking", "data": "ENCRYPTED" },
                    { "type": "tool_use", "id": "t1", "name": "run", "input": {} }
                ]},
                { "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "t1", "content": "bad arguments", "is_error": true }
                ]}
            ])
        );
        assert!(body.get("tools").is_none());
        assert!(body.get("system").is_none());
    }

    fn decode_all(payloads: &[&str]) -> Result<Vec<DecodeEvent>, LlmError> {
        let mut d = AnthropicDecoder::new("anthropic");
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

    fn usages(events: &[DecodeEvent]) -> Vec<Usage> {
        events
            .iter()
            .filter_map(|e| match e {
                DecodeEvent::Delta(Delta::Usage { usage }) => Some(*usage),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn message_delta_usage_overwrites_the_start_totals() {
        let out = decode_all(&[
            r#"{"type":"message_start","message":{"usage":{"input_tokens":2,"cache_creation_input_tokens":3000,"cache_read_input_tokens":0,"output_tokens":1}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":6,"cache_read_input_tokens":700,"output_tokens":90}}"#,
            r#"{"type":"message_stop"}"#,
        ])
        .unwrap();
        assert_eq!(
            usages(&out),
            vec![
                Usage {
                    input_tokens: 2,
                    output_tokens: 1,
                    cache_write_tokens: 3000,
                    ..Usage::default()
                },
                // cache_creation was not repeated, so it keeps its start value.
                Usage {
                    input_tokens: 6,
                    output_tokens: 90,
                    cache_write_tokens: 3000,
                    cache_read_tokens: 700,
                    ..Usage::default()
                },
            ]
        );
        assert!(out.contains(&DecodeEvent::Finish(StopReason::EndTurn)));
        assert_eq!(out.last(), Some(&DecodeEvent::Terminal));
    }

    #[test]
    fn tool_arguments_are_assembled_from_fragments_by_block_index() {
        let out = decode_all(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me look."}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_9","name":"grep","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"pat"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"tern\": \"fn main\"}"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":20}}"#,
        ])
        .unwrap();
        let id = || "toolu_9".to_string();
        assert_eq!(
            out[..6],
            [
                DecodeEvent::Delta(Delta::Text {
                    text: "Let me look.".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallStart {
                    id: id(),
                    name: "grep".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallDelta {
                    id: id(),
                    arguments_delta: "{\"pat".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallDelta {
                    id: id(),
                    arguments_delta: "tern\": \"fn main\"}".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallEnd {
                    id: id(),
                    arguments: json!({ "pattern": "fn main" })
                }),
                DecodeEvent::Finish(StopReason::ToolUse),
            ]
        );
    }

    #[test]
    fn thinking_signature_and_redacted_thinking_are_reported() {
        let out = decode_all(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm."}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwK"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
        ])
        .unwrap();
        assert_eq!(
            out,
            vec![
                DecodeEvent::Delta(Delta::Reasoning { text: "Hmm.".into() }),
                DecodeEvent::Signature {
                    tool_call_id: None,
                    signature: "EqQB".into()
                },
                DecodeEvent::RedactedReasoning("EmwK".into()),
            ]
        );
    }

    #[test]
    fn unfinished_or_broken_tool_json_stays_a_string() {
        let out = decode_all(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"write","input":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":5}}"#,
        ])
        .unwrap();
        assert_eq!(
            out[2..4],
            [
                DecodeEvent::Delta(Delta::ToolCallEnd {
                    id: "t".into(),
                    arguments: Value::String("{\"path\": \"a".into())
                }),
                DecodeEvent::Finish(StopReason::MaxTokens),
            ]
        );
    }

    #[test]
    fn error_event_is_classified_by_its_type() {
        let err = decode_all(&[r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#])
            .unwrap_err();
        assert_eq!(err.class, ErrorClass::Overloaded);
        assert!(err.retryable);
        assert_eq!(err.provider.as_deref(), Some("anthropic"));
        assert!(err.message.contains("Overloaded"), "{}", err.message);

        let err =
            decode_all(&[r#"{"type":"error","error":{"type":"rate_limit_error","message":"Slow down"}}"#]).unwrap_err();
        assert_eq!(err.class, ErrorClass::RateLimit);
    }

    #[test]
    fn malformed_event_is_a_clear_error() {
        let err = decode_all(&[r#"{"type":"content_block_delta","index":0,"delta":{"#]).unwrap_err();
        assert_eq!(err.class, ErrorClass::ServerError);
        assert!(
            err.message
                .starts_with("anthropic: the stream carried a malformed chunk"),
            "{}",
            err.message
        );
    }

    #[test]
    fn event_name_is_used_when_the_json_has_no_type() {
        let mut d = AnthropicDecoder::new("anthropic");
        let mut out = Vec::new();
        d.decode(
            &SseEvent {
                event: Some("message_stop".into()),
                data: "{}".into(),
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(out, vec![DecodeEvent::Terminal]);
    }

    #[test]
    fn whole_response_gives_the_stream_events() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant",
            "content": [
                { "type": "thinking", "thinking": "Check the file.", "signature": "sig" },
                { "type": "text", "text": "Reading it." },
                { "type": "tool_use", "id": "toolu_2", "name": "read", "input": { "path": "a.rs" } }
            ],
            "stop_reason": "tool_use",
            "usage": { "input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 30 }
        });
        assert_eq!(
            parse_response("anthropic", &body).unwrap(),
            vec![
                DecodeEvent::Delta(Delta::Reasoning {
                    text: "Check the file.".into()
                }),
                DecodeEvent::Signature {
                    tool_call_id: None,
                    signature: "sig".into()
                },
                DecodeEvent::Delta(Delta::Text {
                    text: "Reading it.".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallStart {
                    id: "toolu_2".into(),
                    name: "read".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallEnd {
                    id: "toolu_2".into(),
                    arguments: json!({ "path": "a.rs" })
                }),
                DecodeEvent::Finish(StopReason::ToolUse),
                DecodeEvent::Delta(Delta::Usage {
                    usage: Usage {
                        input_tokens: 10,
                        output_tokens: 30,
                        cache_read_tokens: 90,
                        ..Usage::default()
                    }
                }),
                DecodeEvent::Terminal,
            ]
        );
        let err = parse_response(
            "anthropic",
            &json!({"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}),
        )
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::AuthFailure);
    }

    #[test]
    fn model_ids_come_from_the_data_list() {
        let body = json!({
            "data": [
                { "type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5" },
                { "type": "model", "id": "claude-haiku-4-5" }
            ],
            "has_more": false
        });
        assert_eq!(model_ids(&body), vec!["claude-sonnet-4-5", "claude-haiku-4-5"]);
        assert!(model_ids(&json!({})).is_empty());
    }

    #[test]
    fn golden_stop_sequences_and_output_config() {
        let mut req = round_trip_request();
        req.stop_sequences = vec!["END".into()];
        req.response_format = Some(crate::message::ResponseFormat {
            name: "point".into(),
            schema: json!({ "type": "object", "properties": { "x": { "type": "integer" } }, "required": ["x"], "additionalProperties": false }),
        });
        let body = request_body(&req, "claude-x", &AnthropicOptions::default(), true);
        assert_eq!(body["stop_sequences"], json!(["END"]));
        assert_eq!(
            body["output_config"],
            json!({ "format": { "type": "json_schema", "schema": json!({ "type": "object", "properties": { "x": { "type": "integer" } }, "required": ["x"], "additionalProperties": false }) } })
        );
        let plain = request_body(&round_trip_request(), "claude-x", &AnthropicOptions::default(), true);
        assert!(plain.get("stop_sequences").is_none() && plain.get("output_config").is_none());
    }
}
