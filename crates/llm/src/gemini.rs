//! Google Gemini `generateContent` / `streamGenerateContent?alt=sse`: the
//! request body, the streamed response decoder, the whole-response reader
//! and the model list.
//!
//! Gemini's wire rules that shape this file: the assistant's role is
//! `model`, a tool result names its function (not a call id), thinking
//! models attach an opaque `thoughtSignature` to parts that must be sent
//! back on the same part, every stream chunk is a complete response object
//! with cumulative usage, and there is no end marker besides `finishReason`.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::delta::{AnswerBudget, DecodeEvent, Delta};
use super::error::{from_provider_error, ErrorClass, LlmError};
use super::message::{ChatRequest, Message, Part, Role, StopReason, ToolDef};
use super::providers::ResolvedProvider;
use super::stream::SseEvent;
use super::wire::{self, Builtin, CountRequest, StreamDecoder, WireFormat};
use mia_cost::Usage;

/// The Gemini API as a [`WireFormat`] (`kind = "gemini"`).
pub struct Gemini;

impl WireFormat for Gemini {
    fn kind(&self) -> &'static str {
        "gemini"
    }

    fn builtin(&self) -> Option<Builtin> {
        Some(Builtin {
            name: "gemini",
            base_url: "https://generativelanguage.googleapis.com/v1beta",
            api_key_env: Some("GEMINI_API_KEY"),
        })
    }

    fn headers(&self, p: &ResolvedProvider) -> Vec<(String, String)> {
        p.api_key
            .as_ref()
            .map(|key| vec![("x-goog-api-key".to_string(), key.clone())])
            .unwrap_or_default()
    }

    fn chat_url(&self, p: &ResolvedProvider, model: &str, stream: bool) -> String {
        if stream {
            wire::url(p, &format!("/models/{model}:streamGenerateContent?alt=sse"))
        } else {
            wire::url(p, &format!("/models/{model}:generateContent"))
        }
    }

    fn request_body(&self, _p: &ResolvedProvider, _model: &str, req: &ChatRequest, _stream: bool) -> Value {
        request_body(req)
    }

    fn decoder(&self, p: &ResolvedProvider) -> Box<dyn StreamDecoder> {
        Box::new(GeminiDecoder::with_id_prefix(&p.name, &wire::unique_call_prefix()))
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

    /// `models/{model}:countTokens` over the same contents.
    fn count_request(&self, p: &ResolvedProvider, model: &str, req: &ChatRequest) -> Option<CountRequest> {
        let mut inner = request_body(req);
        if let Value::Object(map) = &mut inner {
            map.insert("model".into(), json!(format!("models/{model}")));
        }
        Some(CountRequest {
            url: wire::url(p, &format!("/models/{model}:countTokens")),
            body: json!({ "generateContentRequest": inner }),
            field: "totalTokens",
        })
    }

    fn retry_delay_ms(&self, error_body: &Value) -> Option<u64> {
        retry_delay_ms(error_body)
    }
}

impl StreamDecoder for GeminiDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        GeminiDecoder::decode(self, event, out)
    }
}

/// Gemini's `error.status` names.
pub const ERROR_TYPES: super::error::ErrorTypes = &[
    ("RESOURCE_EXHAUSTED", ErrorClass::RateLimit),
    ("INTERNAL", ErrorClass::ServerError),
    ("UNAVAILABLE", ErrorClass::ServerError),
    ("UNKNOWN", ErrorClass::ServerError),
    ("DEADLINE_EXCEEDED", ErrorClass::Timeout),
    ("UNAUTHENTICATED", ErrorClass::AuthFailure),
    ("PERMISSION_DENIED", ErrorClass::AuthFailure),
    ("NOT_FOUND", ErrorClass::ModelNotFound),
    ("SAFETY", ErrorClass::ContentFilter),
];

/// Gemini's `RetryInfo.retryDelay` (e.g. `"12s"`, `"1.5s"`) from an error
/// body. Negative, NaN and garbage delays are ignored; huge ones saturate
/// (the retry loop refuses waits beyond `retry.max_wait_ms`).
pub fn retry_delay_ms(body: &serde_json::Value) -> Option<u64> {
    let details = body.pointer("/error/details")?.as_array()?;
    details.iter().find_map(|d| {
        let is_retry_info = d
            .get("@type")
            .and_then(|t| t.as_str())
            .is_some_and(|t| t.ends_with("RetryInfo"));
        let delay = d.get("retryDelay")?.as_str()?;
        let wait = super::ratelimit::parse_seconds(delay.trim().strip_suffix('s')?)?;
        is_retry_info.then_some(super::ratelimit::duration_ms(wait))
    })
}

/// The JSON body of a `generateContent` or `streamGenerateContent` call
/// (the model and the streaming choice live in the URL, not the body).
pub fn request_body(req: &ChatRequest) -> Value {
    let mut body = Map::new();
    body.insert("contents".into(), Value::Array(contents(&req.messages)));
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert("systemInstruction".into(), json!({ "parts": [{ "text": system }] }));
    }
    if !req.tools.is_empty() {
        let declarations: Vec<Value> = req.tools.iter().map(declaration).collect();
        body.insert("tools".into(), json!([{ "functionDeclarations": declarations }]));
    }
    let mut config = Map::new();
    if let Some(max) = req.max_tokens {
        config.insert("maxOutputTokens".into(), json!(max));
    }
    if let Some(t) = req.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if !req.stop_sequences.is_empty() {
        config.insert("stopSequences".into(), json!(req.stop_sequences));
    }
    if let Some(f) = &req.response_format {
        config.insert("responseMimeType".into(), json!("application/json"));
        config.insert("responseJsonSchema".into(), f.schema.clone());
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    Value::Object(body)
}

/// A tool as a function declaration. Gemini refuses an object schema with
/// no properties ("should be non-empty for OBJECT type"), so a tool without
/// arguments is declared without `parameters`.
fn declaration(tool: &ToolDef) -> Value {
    let mut d = json!({ "name": tool.name, "description": tool.description });
    if !takes_no_arguments(&tool.parameters) {
        d["parameters"] = tool.parameters.clone();
    }
    d
}

fn takes_no_arguments(schema: &Value) -> bool {
    let no_properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty);
    let described_otherwise = ["$ref", "anyOf", "oneOf", "allOf"]
        .iter()
        .any(|k| schema.get(*k).is_some())
        || schema.get("additionalProperties").is_some_and(Value::is_object);
    no_properties && !described_otherwise
}

/// Converts the history into Gemini `contents`, merging neighbours that end
/// up with the same role (a tool result and the user's next words are both
/// `user`).
fn contents(history: &[Message]) -> Vec<Value> {
    // Tool results name the function they answer; ids map to the names of
    // the calls seen so far (ids generated per stream may repeat across
    // turns, so the latest call with an id wins).
    let mut call_names: HashMap<&str, &str> = HashMap::new();
    let mut merged: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in history {
        let role = match m.role {
            Role::User | Role::Tool => "user",
            Role::Assistant => "model",
        };
        let mut parts = Vec::new();
        for p in &m.parts {
            if let Part::ToolCall { id, name, .. } = p {
                call_names.insert(id, name);
            }
            if let Some(v) = part(p, &call_names) {
                parts.push(v);
            }
        }
        place_reasoning_signatures(m, &mut parts);
        if parts.is_empty() {
            continue;
        }
        match merged.last_mut() {
            Some((last_role, last_parts)) if *last_role == role => last_parts.extend(parts),
            _ => merged.push((role, parts)),
        }
    }
    merged
        .into_iter()
        .map(|(role, parts)| json!({ "role": role, "parts": parts }))
        .collect()
}

/// One internal part as a Gemini part, or `None` when it has nothing Gemini can use.
fn part(p: &Part, call_names: &HashMap<&str, &str>) -> Option<Value> {
    match p {
        Part::Text { text } if text.is_empty() => None,
        Part::Text { text } => Some(json!({ "text": text })),
        Part::Image { media_type, data } => Some(json!({ "inlineData": { "mimeType": media_type, "data": data } })),
        Part::ToolCall {
            name,
            arguments,
            signature,
            ..
        } => {
            let args = if arguments.is_object() {
                arguments.clone()
            } else {
                json!({})
            };
            let mut v = json!({ "functionCall": { "name": name, "args": args } });
            if let Some(sig) = signature.as_deref().filter(|s| !s.is_empty()) {
                v["thoughtSignature"] = json!(sig);
            }
            Some(v)
        }
        Part::ToolResult {
            tool_call_id,
            content,
            is_error,
        } => {
            // A result whose call is not in the history has no known name;
            // its id is the best label left.
            let name = call_names
                .get(tool_call_id.as_str())
                .copied()
                .unwrap_or(tool_call_id.as_str());
            // Gemini's documented convention: an `error` key marks a failed
            // call; any other object is the function's output.
            let response = match serde_json::from_str::<Value>(content) {
                Ok(obj @ Value::Object(_)) if !is_error => obj,
                _ if *is_error => json!({ "error": content }),
                _ => json!({ "content": content }),
            };
            Some(json!({ "functionResponse": { "name": name, "response": response } }))
        }
        // Anthropic's and OpenAI's encrypted reasoning mean nothing to Gemini.
        Part::Reasoning { redacted: true, .. } | Part::EncryptedReasoning { .. } => None,
        // Thought text is replayed as the unsigned thought part Gemini sent
        // (the Gen AI SDKs append whole model turns, thought parts included,
        // to chat history, so Gemini accepts it). Its signature travels on a
        // part of its own: see `place_reasoning_signatures`.
        Part::Reasoning { text, .. } if text.is_empty() => None,
        Part::Reasoning { text, .. } => Some(json!({ "text": text, "thought": true })),
    }
}

/// Puts the signatures of `m`'s reasoning back where Gemini sends them.
/// The internal format keeps one signature with the reasoning text, but
/// Gemini signs a separate part, and its docs forbid merging a signed part
/// into an unsigned one. A turn without function calls carries its
/// signature on an empty last part; a turn whose calls came back unsigned
/// (Gemini 3 sometimes signs a trailing empty part instead) gets it on its
/// first call, which is where Gemini validates it.
fn place_reasoning_signatures(m: &Message, parts: &mut Vec<Value>) {
    let mut signatures = m.parts.iter().filter_map(|p| match p {
        Part::Reasoning {
            signature: Some(sig),
            redacted: false,
            ..
        } if !sig.is_empty() => Some(sig.as_str()),
        _ => None,
    });
    let mut calls = parts.iter().filter(|p| p.get("functionCall").is_some()).peekable();
    let calls_unsigned = calls.peek().is_some() && calls.all(|c| c.get("thoughtSignature").is_none());
    if calls_unsigned {
        let first_call = parts.iter_mut().find(|p| p.get("functionCall").is_some());
        if let (Some(call), Some(sig)) = (first_call, signatures.next()) {
            call["thoughtSignature"] = json!(sig);
        }
    }
    for sig in signatures {
        parts.push(json!({ "text": "", "thoughtSignature": sig }));
    }
}

/// A function call whose arguments are still streaming (Vertex AI's
/// `partialArgs` with `willContinue`).
#[derive(Debug)]
struct PendingCall {
    id: String,
    args: Value,
    /// The JSON path whose string value continues in the next partial arg.
    continuing: Option<String>,
    /// JSON values the partial args' paths have created so far.
    nodes: usize,
}

/// Most steps in one partial argument's `jsonPath` (`$.a.b[0]` has three).
const MAX_PATH_STEPS: usize = 32;
/// Largest array index a partial argument's `jsonPath` may name.
const MAX_PATH_INDEX: usize = 4095;
/// Most JSON values the paths of one call may create (array padding included).
const MAX_PATH_NODES: usize = 1 << 16;

/// Why a partial argument's path was not followed.
#[derive(Debug, PartialEq, Eq)]
enum PathError {
    /// Not a path this decoder reads: the argument is skipped.
    Unreadable,
    /// Deeper, wider or bigger than the bounds above.
    TooBig,
}

impl PendingCall {
    /// Applies `partial`; returns the bytes it added (path and string values).
    fn apply_partial_args(&mut self, partial: Option<&Value>) -> Result<usize, PathError> {
        let mut added = 0usize;
        for arg in partial.and_then(Value::as_array).into_iter().flatten() {
            let Some(path) = arg.get("jsonPath").and_then(Value::as_str) else {
                continue;
            };
            let value = ["stringValue", "numberValue", "boolValue"]
                .iter()
                .find_map(|k| arg.get(*k).cloned())
                .unwrap_or(Value::Null);
            added = added
                .saturating_add(path.len())
                .saturating_add(value.as_str().map_or(8, str::len));
            let append = self.continuing.as_deref() == Some(path);
            match slot_at(&mut self.args, path, &mut self.nodes) {
                Ok(slot) => match (slot, value) {
                    (Value::String(old), Value::String(more)) if append => old.push_str(&more),
                    (slot, value) => *slot = value,
                },
                Err(PathError::Unreadable) => {}
                Err(PathError::TooBig) => return Err(PathError::TooBig),
            }
            let continues = arg.get("willContinue").and_then(Value::as_bool).unwrap_or(false);
            self.continuing = continues.then(|| path.to_string());
        }
        Ok(added)
    }
}

/// The value at a simple JSON path (`$.a.b[0]`, `$['a']`) inside `root`,
/// creating objects and arrays on the way (counted in `nodes`). The path's
/// steps, indexes and created values are bounded: a server cannot make it
/// allocate a huge array or nest values deep enough to hurt.
fn slot_at<'a>(root: &'a mut Value, path: &str, nodes: &mut usize) -> Result<&'a mut Value, PathError> {
    let mut rest = path.strip_prefix('$').ok_or(PathError::Unreadable)?;
    let mut slot = root;
    let mut steps = 0usize;
    while !rest.is_empty() {
        steps += 1;
        if steps > MAX_PATH_STEPS {
            return Err(PathError::TooBig);
        }
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let (key, tail) = after.split_at(end);
            if key.is_empty() {
                return Err(PathError::Unreadable);
            }
            slot = object_entry(slot, key, nodes)?;
            rest = tail;
        } else if let Some(after) = rest.strip_prefix('[') {
            let (inner, tail) = after.split_once(']').ok_or(PathError::Unreadable)?;
            rest = tail;
            let quoted = inner
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')));
            if let Some(key) = quoted {
                slot = object_entry(slot, key, nodes)?;
            } else {
                let index: usize = inner.parse().map_err(|_| PathError::Unreadable)?;
                if index > MAX_PATH_INDEX {
                    return Err(PathError::TooBig);
                }
                if !slot.is_array() {
                    *slot = Value::Array(Vec::new());
                }
                let items = slot.as_array_mut().ok_or(PathError::Unreadable)?;
                if items.len() <= index {
                    let more = index + 1 - items.len();
                    *nodes = nodes.saturating_add(more);
                    if *nodes > MAX_PATH_NODES {
                        return Err(PathError::TooBig);
                    }
                    items.resize(index + 1, Value::Null);
                }
                slot = items.get_mut(index).ok_or(PathError::Unreadable)?;
            }
        } else {
            return Err(PathError::Unreadable);
        }
    }
    Ok(slot)
}

fn object_entry<'a>(slot: &'a mut Value, key: &str, nodes: &mut usize) -> Result<&'a mut Value, PathError> {
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    let Value::Object(map) = slot else {
        // Just made an object above.
        return Err(PathError::Unreadable);
    };
    if !map.contains_key(key) {
        *nodes = nodes.saturating_add(1);
        if *nodes > MAX_PATH_NODES {
            return Err(PathError::TooBig);
        }
    }
    Ok(map.entry(key.to_string()).or_insert(Value::Null))
}

/// Decodes the `data:` payloads of one `streamGenerateContent?alt=sse` answer.
#[derive(Debug)]
pub struct GeminiDecoder {
    provider: String,
    id_prefix: String,
    /// Calls seen so far: numbers generated ids, and turns `STOP` into `ToolUse`.
    calls: usize,
    pending: Option<PendingCall>,
    last_usage: Option<Usage>,
    budget: AnswerBudget,
}

impl GeminiDecoder {
    /// A decoder for one answer; `provider` names the source in errors.
    pub fn new(provider: &str) -> Self {
        GeminiDecoder {
            provider: provider.to_string(),
            id_prefix: "call_".to_string(),
            calls: 0,
            pending: None,
            last_usage: None,
            budget: AnswerBudget::default(),
        }
    }

    /// A decoder whose generated call ids start with `prefix`: Gemini's own
    /// calls carry no ids, and ids that repeat across turns would confuse a
    /// history later sent to another provider.
    pub fn with_id_prefix(provider: &str, prefix: &str) -> Self {
        GeminiDecoder {
            id_prefix: prefix.to_string(),
            ..GeminiDecoder::new(provider)
        }
    }

    /// Turns one SSE event (one GenerateContentResponse) into normalized events.
    pub fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let payload: Value = super::error::parse_chunk(&self.provider, data)?;
        self.charged(&payload, out)
    }

    /// [`Self::response`], with what it produced counted against the answer's budget.
    fn charged(&mut self, payload: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let before = out.len();
        let result = self.response(payload, out);
        self.budget
            .charge(&self.provider, out.get(before..).unwrap_or_default())?;
        result
    }

    /// One GenerateContentResponse (or a list of them, as the non-SSE
    /// stream sends).
    fn response(&mut self, v: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        if let Some(list) = v.as_array() {
            for item in list {
                self.response(item, out)?;
            }
            return Ok(());
        }
        if v.get("error").is_some() {
            return Err(error_of(&self.provider, v));
        }
        if let Some(reason) = v.pointer("/promptFeedback/blockReason").and_then(Value::as_str) {
            return Err(LlmError::new(
                ErrorClass::ContentFilter,
                Some(&self.provider),
                format!(
                    "{}: the prompt was blocked by the provider's safety filter ({reason}). Rephrase the prompt.",
                    self.provider
                ),
            ));
        }
        if let Some(candidate) = v.pointer("/candidates/0") {
            let parts = candidate.pointer("/content/parts").and_then(Value::as_array);
            for p in parts.into_iter().flatten() {
                self.part(p, out)?;
            }
            if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
                self.close_pending(out);
                out.push(DecodeEvent::Finish(self.stop_reason(reason)));
            }
        }
        if let Some(usage) = v.get("usageMetadata").and_then(usage_of) {
            if self.last_usage != Some(usage) {
                self.last_usage = Some(usage);
                out.push(DecodeEvent::Delta(Delta::Usage { usage }));
            }
        }
        Ok(())
    }

    fn part(&mut self, p: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let signature = p
            .get("thoughtSignature")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        if let Some(call) = p.get("functionCall") {
            return self.function_call(call, signature, out);
        }
        if let Some(text) = p.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            let text = text.to_string();
            if p.get("thought").and_then(Value::as_bool) == Some(true) {
                out.push(DecodeEvent::Delta(Delta::Reasoning { text }));
            } else {
                out.push(DecodeEvent::Delta(Delta::Text { text }));
            }
        }
        if let Some(sig) = signature {
            out.push(DecodeEvent::Signature {
                tool_call_id: None,
                signature: sig.to_string(),
            });
        }
        Ok(())
    }

    /// Gemini sends whole calls, except Vertex AI with streamed arguments:
    /// a named call with `willContinue`, then nameless pieces carrying
    /// `partialArgs`, then a piece without `willContinue` that closes it.
    fn function_call(
        &mut self,
        call: &Value,
        signature: Option<&str>,
        out: &mut Vec<DecodeEvent>,
    ) -> Result<(), LlmError> {
        let will_continue = call.get("willContinue").and_then(Value::as_bool).unwrap_or(false);
        let name = call.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
        let Some(name) = name else {
            if let Some(pending) = self.pending.as_mut() {
                let added = pending
                    .apply_partial_args(call.get("partialArgs"))
                    .map_err(|_| path_too_big(&self.provider))?;
                self.budget.add_bytes(&self.provider, added)?;
                if let Some(sig) = signature {
                    out.push(DecodeEvent::Signature {
                        tool_call_id: Some(pending.id.clone()),
                        signature: sig.to_string(),
                    });
                }
            }
            if !will_continue {
                self.close_pending(out);
            }
            return Ok(());
        };
        self.close_pending(out);
        self.budget.start_call(&self.provider)?;
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("{}{}", self.id_prefix, self.calls));
        self.calls += 1;
        out.push(DecodeEvent::Delta(Delta::ToolCallStart {
            id: id.clone(),
            name: name.to_string(),
        }));
        if let Some(sig) = signature {
            out.push(DecodeEvent::Signature {
                tool_call_id: Some(id.clone()),
                signature: sig.to_string(),
            });
        }
        let mut pending = PendingCall {
            id,
            args: call
                .get("args")
                .filter(|a| a.is_object())
                .cloned()
                .unwrap_or_else(|| json!({})),
            continuing: None,
            nodes: 0,
        };
        let added = pending
            .apply_partial_args(call.get("partialArgs"))
            .map_err(|_| path_too_big(&self.provider))?;
        self.budget.add_bytes(&self.provider, added)?;
        if will_continue {
            self.pending = Some(pending);
        } else {
            out.push(DecodeEvent::Delta(Delta::ToolCallEnd {
                id: pending.id,
                arguments: pending.args,
            }));
        }
        Ok(())
    }

    fn close_pending(&mut self, out: &mut Vec<DecodeEvent>) {
        if let Some(p) = self.pending.take() {
            out.push(DecodeEvent::Delta(Delta::ToolCallEnd {
                id: p.id,
                arguments: p.args,
            }));
        }
    }

    fn stop_reason(&self, reason: &str) -> StopReason {
        match reason {
            // Gemini says STOP after function calls too.
            "STOP" if self.calls > 0 => StopReason::ToolUse,
            "STOP" => StopReason::EndTurn,
            "MAX_TOKENS" => StopReason::MaxTokens,
            "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
                StopReason::ContentFilter
            }
            other => StopReason::Other(other.to_string()),
        }
    }
}

/// Gemini counts cached tokens inside `promptTokenCount` and thinking
/// outside `candidatesTokenCount`; mia keeps the cache apart and bills
/// thinking as output. `None` when the metadata carries no counts at all
/// (early stream chunks may hold only `trafficType`).
fn usage_of(meta: &Value) -> Option<Usage> {
    let fields = [
        "promptTokenCount",
        "candidatesTokenCount",
        "thoughtsTokenCount",
        "cachedContentTokenCount",
        "totalTokenCount",
    ];
    if !fields.iter().any(|f| meta.get(*f).is_some()) {
        return None;
    }
    let n = |f: &str| meta.get(f).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("cachedContentTokenCount");
    let thoughts = n("thoughtsTokenCount");
    Some(Usage {
        input_tokens: n("promptTokenCount").saturating_sub(cached),
        // Server numbers may be anything up to u64::MAX.
        output_tokens: n("candidatesTokenCount").saturating_add(thoughts),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: thoughts,
        estimated: false,
    })
}

/// A streamed argument whose path is too deep, too wide or creates too much.
fn path_too_big(provider: &str) -> LlmError {
    let mut err = LlmError::new(
        ErrorClass::ServerError,
        Some(provider),
        format!(
            "{provider}: a streamed tool argument names a path deeper than {MAX_PATH_STEPS} steps, an index over {MAX_PATH_INDEX}, or more than {MAX_PATH_NODES} values; mia stopped the answer (the partial answer is kept). Try again."
        ),
    );
    err.retryable = false;
    err
}

/// `{"error":{"code":…,"status":…,"message":…,"details":[…]}}`, in a stream or a body.
fn error_of(provider: &str, payload: &Value) -> LlmError {
    let status = payload.pointer("/error/status").and_then(Value::as_str).unwrap_or("");
    let message = payload
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("unknown error");
    let mut err = from_provider_error(provider, ERROR_TYPES, status, message, retry_delay_ms(payload));
    err.status = payload
        .pointer("/error/code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok());
    err
}

/// Reads a non-streaming `generateContent` response into the events its
/// stream would have produced.
pub fn parse_response(provider: &str, body: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
    let mut decoder = GeminiDecoder::new(provider);
    let mut out = Vec::new();
    decoder.charged(body, &mut out)?;
    let before = out.len();
    decoder.close_pending(&mut out);
    decoder.budget.charge(provider, out.get(before..).unwrap_or_default())?;
    Ok(out)
}

/// The model ids of a `GET /v1beta/models` response, without `models/`.
pub fn model_ids(body: &Value) -> Vec<String> {
    body.get("models")
        .and_then(Value::as_array)
        .map(|models| {
            models
                .iter()
                .filter_map(|m| m.get("name").and_then(Value::as_str))
                .map(|name| name.strip_prefix("models/").unwrap_or(name).to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_retry_delay_is_read_from_retry_info() {
        let body = serde_json::json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12s"}
        ]}});
        assert_eq!(retry_delay_ms(&body), Some(12_000));
    }

    #[test]
    fn absurd_gemini_retry_delays_are_bounded_or_ignored() {
        let longest = super::super::ratelimit::duration_ms(super::super::ratelimit::LONGEST_WAIT);
        let delay = |d: &str| {
            retry_delay_ms(&serde_json::json!({"error": {"details": [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": d}
            ]}}))
        };
        let cases: &[(&str, Option<u64>)] = &[
            ("1.5s", Some(1_500)),
            ("0s", Some(0)),
            ("1e400s", Some(longest)),
            ("1e308s", Some(longest)),
            ("99999999999999999999s", Some(longest)),
            ("-3s", None),
            ("NaNs", None),
            ("infs", None),
            ("s", None),
            ("", None),
            ("12", None),
            ("soon", None),
        ];
        for (text, want) in cases {
            assert_eq!(delay(text), *want, "{text:?}");
        }
        let not_a_string = serde_json::json!({"error": {"details": [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": 1e308}
        ]}});
        assert_eq!(retry_delay_ms(&not_a_string), None);
    }

    fn round_trip_request() -> ChatRequest {
        ChatRequest {
            model: "gemini/gemini-x".into(),
            system: Some("You are terse.".into()),
            messages: vec![
                Message {
                    role: Role::User,
                    parts: vec![
                        Part::Text {
                            text: "What is in this picture, and the weather in Oslo?".into(),
                        },
                        Part::Image {
                            media_type: "image/jpeg".into(),
                            data: "/9j/4AAQ".into(),
                        },
                    ],
                },
                Message {
                    role: Role::Assistant,
                    parts: vec![
                        Part::Reasoning {
                            text: "Two questions.".into(),
                            signature: Some("RS1".into()),
                            redacted: false,
                        },
                        Part::Text {
                            text: "A cat. Checking Oslo.".into(),
                        },
                        Part::ToolCall {
                            id: "call_0".into(),
                            name: "weather".into(),
                            arguments: json!({ "city": "Oslo" }),
                            signature: Some("CiQB".into()),
                        },
                        Part::ToolCall {
                            id: "call_1".into(),
                            name: "clock".into(),
                            arguments: json!({}),
                            signature: None,
                        },
                    ],
                },
                Message {
                    role: Role::Tool,
                    parts: vec![
                        Part::ToolResult {
                            tool_call_id: "call_0".into(),
                            content: "4°C, rain".into(),
                            is_error: false,
                        },
                        Part::ToolResult {
                            tool_call_id: "call_1".into(),
                            content: r#"{"time": "09:00"}"#.into(),
                            is_error: false,
                        },
                    ],
                },
                Message::text(Role::User, "Thanks. And tomorrow?"),
            ],
            tools: vec![
                ToolDef {
                    name: "weather".into(),
                    description: "Current weather for a city".into(),
                    parameters: json!({
                        "type": "object",
                        "properties": { "city": { "type": "string" } },
                        "required": ["city"]
                    }),
                },
                ToolDef {
                    name: "clock".into(),
                    description: "The local time".into(),
                    parameters: json!({ "type": "object", "properties": {} }),
                },
            ],
            max_tokens: Some(2048),
            temperature: Some(0.5),
            ..ChatRequest::default()
        }
    }

    #[test]
    fn request_body_carries_history_tools_and_config() {
        assert_eq!(
            request_body(&round_trip_request()),
            json!({
                "contents": [
                    { "role": "user", "parts": [
                        { "text": "What is in this picture, and the weather in Oslo?" },
                        { "inlineData": { "mimeType": "image/jpeg", "data": "/9j/4AAQ" } }
                    ]},
                    { "role": "model", "parts": [
                        { "text": "Two questions.", "thought": true },
                        { "text": "A cat. Checking Oslo." },
                        { "functionCall": { "name": "weather", "args": { "city": "Oslo" } }, "thoughtSignature": "CiQB" },
                        { "functionCall": { "name": "clock", "args": {} } },
                        { "text": "", "thoughtSignature": "RS1" }
                    ]},
                    { "role": "user", "parts": [
                        { "functionResponse": { "name": "weather", "response": { "content": "4°C, rain" } } },
                        { "functionResponse": { "name": "clock", "response": { "time": "09:00" } } },
                        { "text": "Thanks. And tomorrow?" }
                    ]}
                ],
                "systemInstruction": { "parts": [{ "text": "You are terse." }] },
                "tools": [{ "functionDeclarations": [
                    {
                        "name": "weather",
                        "description": "Current weather for a city",
                        "parameters": {
                            "type": "object",
                            "properties": { "city": { "type": "string" } },
                            "required": ["city"]
                        }
                    },
                    { "name": "clock", "description": "The local time" }
                ]}],
                "generationConfig": { "maxOutputTokens": 2048, "temperature": 0.5 }
            })
        );
    }

    #[test]
    fn plain_request_has_no_optional_sections_and_errors_use_the_error_key() {
        let req = ChatRequest {
            model: "gemini/gemini-x".into(),
            system: None,
            messages: vec![
                Message::text(Role::User, "run it"),
                Message {
                    role: Role::Assistant,
                    parts: vec![
                        Part::Reasoning {
                            text: "ENCRYPTED".into(),
                            signature: None,
                            redacted: true,
                        },
                        Part::ToolCall {
                            id: "x".into(),
                            name: "run".into(),
                            arguments: json!("{broken"),
                            signature: None,
                        },
                    ],
                },
                Message {
                    role: Role::Tool,
                    parts: vec![Part::ToolResult {
                        tool_call_id: "x".into(),
                        content: "arguments did not parse".into(),
                        is_error: true,
                    }],
                },
            ],
            ..ChatRequest::default()
        };
        assert_eq!(
            request_body(&req),
            json!({ "contents": [
                { "role": "user", "parts": [{ "text": "run it" }] },
                { "role": "model", "parts": [{ "functionCall": { "name": "run", "args": {} } }] },
                { "role": "user", "parts": [
                    { "functionResponse": { "name": "run", "response": { "error": "arguments did not parse" } } }
                ]}
            ]})
        );
    }

    fn assistant_turn(parts: Vec<Part>) -> Value {
        let req = ChatRequest {
            model: "gemini/gemini-x".into(),
            system: None,
            messages: vec![Message {
                role: Role::Assistant,
                parts,
            }],
            ..ChatRequest::default()
        };
        request_body(&req)["contents"][0]["parts"].clone()
    }

    #[test]
    fn reasoning_signature_goes_last_or_onto_unsigned_calls() {
        let signed_reasoning = || Part::Reasoning {
            text: String::new(),
            signature: Some("EqsF".into()),
            redacted: false,
        };
        // A plain answer: the signature rides on an empty last part, as Gemini sent it.
        assert_eq!(
            assistant_turn(vec![signed_reasoning(), Part::Text { text: "Three.".into() }]),
            json!([{ "text": "Three." }, { "text": "", "thoughtSignature": "EqsF" }])
        );
        // Calls that came back unsigned: the first call carries it.
        let call = |id: &str| Part::ToolCall {
            id: id.into(),
            name: "read".into(),
            arguments: json!({ "path": id }),
            signature: None,
        };
        assert_eq!(
            assistant_turn(vec![signed_reasoning(), call("a"), call("b")]),
            json!([
                { "functionCall": { "name": "read", "args": { "path": "a" } }, "thoughtSignature": "EqsF" },
                { "functionCall": { "name": "read", "args": { "path": "b" } } }
            ])
        );
    }

    fn decode_all(payloads: &[&str]) -> Result<Vec<DecodeEvent>, LlmError> {
        let mut d = GeminiDecoder::new("gemini");
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
    fn thought_parts_are_reasoning_and_signatures_are_kept() {
        let out = decode_all(&[
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Count the r's.","thought":true}]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Three."}]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"","thoughtSignature":"EqsF"}]},"finishReason":"STOP"}]}"#,
        ])
        .unwrap();
        assert_eq!(
            out,
            vec![
                DecodeEvent::Delta(Delta::Reasoning {
                    text: "Count the r's.".into()
                }),
                DecodeEvent::Delta(Delta::Text { text: "Three.".into() }),
                DecodeEvent::Signature {
                    tool_call_id: None,
                    signature: "EqsF".into()
                },
                DecodeEvent::Finish(StopReason::EndTurn),
            ]
        );
    }

    #[test]
    fn calls_without_ids_get_stream_unique_ids_and_stop_means_tool_use() {
        let out = decode_all(&[
            r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"read","args":{"path":"a"}},"thoughtSignature":"AY89"},{"functionCall":{"name":"read","args":{"path":"b"}}}]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"id":"srv-7","name":"list"}}]},"finishReason":"STOP"}]}"#,
        ])
        .unwrap();
        assert_eq!(
            out,
            vec![
                DecodeEvent::Delta(Delta::ToolCallStart {
                    id: "call_0".into(),
                    name: "read".into()
                }),
                DecodeEvent::Signature {
                    tool_call_id: Some("call_0".into()),
                    signature: "AY89".into()
                },
                DecodeEvent::Delta(Delta::ToolCallEnd {
                    id: "call_0".into(),
                    arguments: json!({ "path": "a" })
                }),
                DecodeEvent::Delta(Delta::ToolCallStart {
                    id: "call_1".into(),
                    name: "read".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallEnd {
                    id: "call_1".into(),
                    arguments: json!({ "path": "b" })
                }),
                DecodeEvent::Delta(Delta::ToolCallStart {
                    id: "srv-7".into(),
                    name: "list".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallEnd {
                    id: "srv-7".into(),
                    arguments: json!({})
                }),
                DecodeEvent::Finish(StopReason::ToolUse),
            ]
        );
    }

    #[test]
    fn streamed_partial_arguments_are_assembled_by_json_path() {
        let out = decode_all(&[
            r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"edit","willContinue":true}}]}}]}"#,
            r#"{"candidates":[{"content":{"parts":[{"functionCall":{"partialArgs":[{"jsonPath":"$.path","stringValue":"src/ma","willContinue":true}],"willContinue":true}}]}}]}"#,
            r#"{"candidates":[{"content":{"parts":[{"functionCall":{"partialArgs":[{"jsonPath":"$.path","stringValue":"in.rs"},{"jsonPath":"$.lines[1]","numberValue":7},{"jsonPath":"$.opts.dry","boolValue":true}],"willContinue":true}}]}}]}"#,
            r#"{"candidates":[{"content":{"parts":[{"functionCall":{}}]},"finishReason":"STOP"}]}"#,
        ])
        .unwrap();
        assert_eq!(
            out,
            vec![
                DecodeEvent::Delta(Delta::ToolCallStart {
                    id: "call_0".into(),
                    name: "edit".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallEnd {
                    id: "call_0".into(),
                    arguments: json!({ "path": "src/main.rs", "lines": [null, 7], "opts": { "dry": true } })
                }),
                DecodeEvent::Finish(StopReason::ToolUse),
            ]
        );
    }

    #[test]
    fn usage_moves_cached_tokens_out_and_thoughts_into_output() {
        let out = decode_all(&[
            r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}],"usageMetadata":{"trafficType":"ON_DEMAND"}}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"!"}]},"finishReason":"MAX_TOKENS"}],"usageMetadata":{"promptTokenCount":1000,"cachedContentTokenCount":600,"candidatesTokenCount":40,"thoughtsTokenCount":200,"totalTokenCount":1240}}"#,
        ])
        .unwrap();
        assert_eq!(
            out[2..],
            [
                DecodeEvent::Finish(StopReason::MaxTokens),
                DecodeEvent::Delta(Delta::Usage {
                    usage: Usage {
                        input_tokens: 400,
                        output_tokens: 240,
                        cache_read_tokens: 600,
                        reasoning_tokens: 200,
                        ..Usage::default()
                    }
                }),
            ]
        );
    }

    #[test]
    fn safety_finish_is_a_content_filter() {
        let out = decode_all(&[r#"{"candidates":[{"finishReason":"PROHIBITED_CONTENT"}]}"#]).unwrap();
        assert_eq!(out, vec![DecodeEvent::Finish(StopReason::ContentFilter)]);
    }

    #[test]
    fn error_payload_with_retry_info_is_a_rate_limit_with_a_delay() {
        let err = decode_all(&[
            r#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7.5s"}]}}"#,
        ])
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::RateLimit);
        assert_eq!(err.retry_after_ms, Some(7_500));
        assert_eq!(err.status, Some(429));
        assert!(err.retryable);
        assert!(err.message.contains("Quota exceeded"), "{}", err.message);
    }

    #[test]
    fn blocked_prompt_is_a_content_filter_error() {
        let err = decode_all(&[r#"{"promptFeedback":{"blockReason":"SAFETY"}}"#]).unwrap_err();
        assert_eq!(err.class, ErrorClass::ContentFilter);
        assert!(err.message.contains("SAFETY"), "{}", err.message);
    }

    #[test]
    fn malformed_chunk_is_a_clear_error() {
        let err = decode_all(&[r#"{"candidates":[{"content":"#]).unwrap_err();
        assert_eq!(err.class, ErrorClass::ServerError);
        assert!(
            err.message.starts_with("gemini: the stream carried a malformed chunk"),
            "{}",
            err.message
        );
    }

    #[test]
    fn whole_response_gives_the_stream_events() {
        let body = json!({
            "candidates": [{
                "content": { "role": "model", "parts": [
                    { "text": "Looking.", "thoughtSignature": "Zm9v" },
                    { "functionCall": { "name": "read", "args": { "path": "a.rs" } } }
                ]},
                "finishReason": "STOP"
            }],
            "usageMetadata": { "promptTokenCount": 20, "candidatesTokenCount": 8, "totalTokenCount": 28 }
        });
        assert_eq!(
            parse_response("gemini", &body).unwrap(),
            vec![
                DecodeEvent::Delta(Delta::Text {
                    text: "Looking.".into()
                }),
                DecodeEvent::Signature {
                    tool_call_id: None,
                    signature: "Zm9v".into()
                },
                DecodeEvent::Delta(Delta::ToolCallStart {
                    id: "call_0".into(),
                    name: "read".into()
                }),
                DecodeEvent::Delta(Delta::ToolCallEnd {
                    id: "call_0".into(),
                    arguments: json!({ "path": "a.rs" })
                }),
                DecodeEvent::Finish(StopReason::ToolUse),
                DecodeEvent::Delta(Delta::Usage {
                    usage: Usage {
                        input_tokens: 20,
                        output_tokens: 8,
                        ..Usage::default()
                    }
                }),
            ]
        );
    }

    #[test]
    fn model_ids_drop_the_models_prefix() {
        let body = json!({ "models": [
            { "name": "models/gemini-2.5-pro", "displayName": "Gemini 2.5 Pro" },
            { "name": "models/gemini-2.5-flash" }
        ]});
        assert_eq!(model_ids(&body), vec!["gemini-2.5-pro", "gemini-2.5-flash"]);
    }

    #[test]
    fn golden_stop_sequences_and_response_schema() {
        let mut req = round_trip_request();
        req.stop_sequences = vec!["END".into()];
        req.response_format = Some(crate::message::ResponseFormat {
            name: "point".into(),
            schema: json!({ "type": "object", "properties": { "x": { "type": "integer" } }, "required": ["x"], "additionalProperties": false }),
        });
        let body = request_body(&req);
        let config = &body["generationConfig"];
        assert_eq!(config["stopSequences"], json!(["END"]));
        assert_eq!(config["responseMimeType"], json!("application/json"));
        assert_eq!(
            config["responseJsonSchema"],
            json!({ "type": "object", "properties": { "x": { "type": "integer" } }, "required": ["x"], "additionalProperties": false })
        );
    }
}
