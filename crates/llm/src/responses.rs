//! OpenAI's Responses API (`POST {base}/responses`): the request body and
//! the streamed event decoder. A provider of kind `openai`, `azure_openai`
//! or `openai_compatible` speaks it with `api = "responses"`; kind `openai`
//! picks it by itself for the models in [`prefers_responses`].
//!
//! mia uses it statelessly: every request carries the whole conversation,
//! with `store: false`, and asks for the model's reasoning back encrypted
//! (`include: ["reasoning.encrypted_content"]`). Each reasoning item's
//! encrypted content is kept in the assistant message
//! ([`Part::EncryptedReasoning`]) and sent back in the next request, so the
//! model keeps the reasoning behind its tool calls without OpenAI storing
//! anything. Reasoning summaries stream as [`Delta::Reasoning`] (shown as
//! thoughts). Credentials, model listing and errors are the provider
//! kind's own (OpenAI's error shapes).

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::delta::{AnswerBudget, DecodeEvent, Delta};
use super::error::{from_provider_error, LlmError};
use super::message::{ChatRequest, Message, Part, Role, StopReason};
use super::openai::{parse_arguments, ERROR_TYPES};
use super::providers::ResolvedProvider;
use super::stream::SseEvent;
use super::wire::{StreamDecoder, WireFormat};
use mia_cost::Usage;

/// Model-name prefixes of OpenAI's reasoning models: the GPT-5 family
/// (codex and pro models included), the o-series and the codex models.
/// Several are served only by the Responses API, and all of them keep their
/// reasoning across tool calls only there. Kept current by hand when OpenAI
/// names a new family (doc/mia.txt says so); `providers.NAME.api` overrides
/// it either way.
pub const REASONING_MODEL_PREFIXES: &[&str] = &["gpt-5", "o1", "o3", "o4", "codex-", "gpt-oss"];

/// Whether `model` (the id after `openai/`) is one of OpenAI's reasoning
/// models, which kind `openai` sends to the Responses API unless
/// `providers.NAME.api` says otherwise. The `-chat` models (e.g.
/// `gpt-5-chat-latest`) do not reason and stay on Chat Completions.
pub fn prefers_responses(model: &str) -> bool {
    let id = model.to_ascii_lowercase();
    REASONING_MODEL_PREFIXES.iter().any(|p| id.starts_with(p)) && !id.contains("-chat")
}

/// The Responses API as a [`WireFormat`]. Not a `kind` of its own: it is
/// reached through [`ResolvedProvider::format`], and everything but the
/// chat request (headers, model list, rate-limit headers, waits) is the
/// provider kind's.
pub struct Responses;

impl WireFormat for Responses {
    fn kind(&self) -> &'static str {
        "responses"
    }

    fn headers(&self, p: &ResolvedProvider) -> Vec<(String, String)> {
        p.kind.format().headers(p)
    }

    fn chat_url(&self, p: &ResolvedProvider, _model: &str, _stream: bool) -> String {
        p.kind.format().responses_url(p)
    }

    fn request_body(&self, _p: &ResolvedProvider, model: &str, req: &ChatRequest, stream: bool) -> Value {
        request_body(req, model, stream)
    }

    fn decoder(&self, p: &ResolvedProvider) -> Box<dyn StreamDecoder> {
        Box::new(ResponsesDecoder::new(&p.name))
    }

    fn parse_response(&self, provider: &str, json: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
        parse_response(provider, json)
    }

    fn models_url(&self, p: &ResolvedProvider) -> String {
        p.kind.format().models_url(p)
    }

    fn model_ids(&self, json: &Value) -> Vec<String> {
        super::openai::model_ids(json)
    }
}

impl StreamDecoder for ResponsesDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        ResponsesDecoder::decode(self, event, out)
    }
}

fn image_url(media_type: &str, data: &str) -> String {
    format!("data:{media_type};base64,{data}")
}

/// A user message's content parts: text and images.
fn user_content(m: &Message) -> Vec<Value> {
    m.parts
        .iter()
        .filter_map(|p| match p {
            Part::Text { text } => Some(json!({ "type": "input_text", "text": text })),
            Part::Image { media_type, data } => {
                Some(json!({ "type": "input_image", "image_url": image_url(media_type, data) }))
            }
            _ => None,
        })
        .collect()
}

/// The conversation as Responses input items, in order. An assistant
/// message keeps its parts' order: encrypted reasoning, its text as one
/// `message` item where it stood, function calls. Reasoning text alone
/// (a summary, or another provider's thinking) is not sent: only encrypted
/// items carry reasoning back, and another format's signatures mean nothing
/// here.
fn input_items(req: &ChatRequest) -> Vec<Value> {
    let mut items = Vec::with_capacity(req.messages.len() + 1);
    for m in &req.messages {
        match m.role {
            Role::User => {
                let content = user_content(m);
                if !content.is_empty() {
                    items.push(json!({ "type": "message", "role": "user", "content": content }));
                }
            }
            Role::Assistant => {
                let mut text = String::new();
                let flush = |text: &mut String, items: &mut Vec<Value>| {
                    if !text.is_empty() {
                        items.push(json!({
                            "type": "message",
                            "role": "assistant",
                            "content": [{ "type": "output_text", "text": std::mem::take(text) }]
                        }));
                    }
                };
                for p in &m.parts {
                    match p {
                        Part::Text { text: t } => text.push_str(t),
                        Part::EncryptedReasoning { data } => {
                            flush(&mut text, &mut items);
                            items.push(json!({ "type": "reasoning", "summary": [], "encrypted_content": data }));
                        }
                        Part::ToolCall {
                            id, name, arguments, ..
                        } => {
                            flush(&mut text, &mut items);
                            let arguments = match arguments {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            };
                            items.push(json!({
                                "type": "function_call",
                                "call_id": id,
                                "name": name,
                                "arguments": arguments
                            }));
                        }
                        Part::Reasoning { .. } | Part::Image { .. } | Part::ToolResult { .. } => {}
                    }
                }
                flush(&mut text, &mut items);
            }
            Role::Tool => {
                for p in &m.parts {
                    if let Part::ToolResult {
                        tool_call_id, content, ..
                    } = p
                    {
                        items.push(
                            json!({ "type": "function_call_output", "call_id": tool_call_id, "output": content }),
                        );
                    }
                }
                // Images the tools attached follow in a user message (as on Chat Completions).
                let images: Vec<Value> = m
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Image { media_type, data } => {
                            Some(json!({ "type": "input_image", "image_url": image_url(media_type, data) }))
                        }
                        _ => None,
                    })
                    .collect();
                if !images.is_empty() {
                    let mut content =
                        vec![json!({ "type": "input_text", "text": "The images the tool results above refer to:" })];
                    content.extend(images);
                    items.push(json!({ "type": "message", "role": "user", "content": content }));
                }
            }
        }
    }
    items
}

/// The JSON body of a Responses request for `model` (the part after
/// `provider/`). Stop sequences have no field in this API and are not sent.
pub fn request_body(req: &ChatRequest, model: &str, stream: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert("instructions".into(), json!(system));
    }
    body.insert("input".into(), Value::Array(input_items(req)));
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({ "type": "function", "name": t.name, "description": t.description,
                        "parameters": t.parameters, "strict": false })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("store".into(), json!(false));
    if prefers_responses(model) {
        // Reasoning models: summaries to show, encrypted items to send back.
        body.insert("reasoning".into(), json!({ "summary": "auto" }));
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    if let Some(max) = req.max_tokens {
        body.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(f) = &req.response_format {
        body.insert(
            "text".into(),
            json!({ "format": { "type": "json_schema", "name": f.name, "schema": f.schema, "strict": true } }),
        );
    }
    Value::Object(body)
}

/// A function call being assembled: its `call_id` (the id mia and the
/// tool result use) and the arguments so far.
#[derive(Debug)]
struct OpenCall {
    item_id: String,
    call_id: String,
    arguments: String,
}

/// Decodes the events of a Responses stream (`event:` names and each
/// payload's `type` agree; the payload's `type` is read).
#[derive(Debug, Default)]
pub struct ResponsesDecoder {
    provider: String,
    /// Calls started and not yet done, in order.
    calls: Vec<OpenCall>,
    /// Whether any call was seen (the stop reason is then tool use).
    called: bool,
    /// Items whose text or summary arrived as deltas: their `done` event
    /// repeats it and adds nothing.
    streamed: HashSet<String>,
    /// Some reasoning was shown, so the next summary part starts on a new paragraph.
    reasoned: bool,
    refused: bool,
    budget: AnswerBudget,
}

impl ResponsesDecoder {
    pub fn new(provider: &str) -> Self {
        ResponsesDecoder {
            provider: provider.to_string(),
            ..ResponsesDecoder::default()
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
        if data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        let value: Value = super::error::parse_chunk(&self.provider, data)?;
        self.decode_value(&value, out)
    }

    fn decode_value(&mut self, v: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let str_at = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or_default();
        match str_at("type") {
            "response.output_text.delta" | "response.refusal.delta" => {
                if str_at("type") == "response.refusal.delta" {
                    self.refused = true;
                }
                self.mark_streamed(str_at("item_id"))?;
                let text = str_at("delta");
                if !text.is_empty() {
                    out.push(DecodeEvent::Delta(Delta::Text { text: text.to_string() }));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.mark_streamed(str_at("item_id"))?;
                self.reasoning(str_at("delta"), out);
            }
            "response.reasoning_summary_part.added" if self.reasoned => {
                out.push(DecodeEvent::Delta(Delta::Reasoning { text: "\n\n".into() }));
            }
            "response.output_item.added" => {
                if let Some(item) = v.get("item").filter(|i| i["type"] == "function_call") {
                    self.start_call(item, out)?;
                }
            }
            "response.function_call_arguments.delta" => {
                let piece = str_at("delta");
                let item_id = str_at("item_id");
                if let Some(call) = self.calls.iter_mut().find(|c| c.item_id == item_id) {
                    if !piece.is_empty() {
                        call.arguments.push_str(piece);
                        out.push(DecodeEvent::Delta(Delta::ToolCallDelta {
                            id: call.call_id.clone(),
                            arguments_delta: piece.to_string(),
                        }));
                    }
                }
            }
            "response.output_item.done" => {
                if let Some(item) = v.get("item") {
                    self.item_done(item, out)?;
                }
            }
            "response.completed" | "response.incomplete" => self.finish(v.get("response"), out)?,
            "response.failed" => {
                let error = v.pointer("/response/error").filter(|e| e.is_object());
                return Err(self.error(error.unwrap_or(&Value::Null)));
            }
            "error" => {
                // The recorded streams nest the error; the reference shows it flat.
                return Err(self.error(v.get("error").filter(|e| e.is_object()).unwrap_or(v)));
            }
            _ => {}
        }
        Ok(())
    }

    /// Notes that `item_id`'s content arrived as deltas. Every id kept is
    /// charged to the answer's budget, so endless new ids cannot grow it
    /// without bound.
    fn mark_streamed(&mut self, item_id: &str) -> Result<(), LlmError> {
        if !self.streamed.contains(item_id) {
            self.budget.add_bytes(&self.provider, item_id.len().max(1))?;
            self.streamed.insert(item_id.to_string());
        }
        Ok(())
    }

    fn reasoning(&mut self, text: &str, out: &mut Vec<DecodeEvent>) {
        if !text.is_empty() {
            self.reasoned = true;
            out.push(DecodeEvent::Delta(Delta::Reasoning { text: text.to_string() }));
        }
    }

    fn start_call(&mut self, item: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let item_id = item.get("id").and_then(Value::as_str).unwrap_or_default();
        if !item_id.is_empty() && self.calls.iter().any(|c| c.item_id == item_id) {
            return Ok(());
        }
        self.budget.start_call(&self.provider)?;
        self.called = true;
        let call_id = item
            .get("call_id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .or(Some(item_id).filter(|s| !s.is_empty()))
            .map(str::to_string)
            .unwrap_or_else(|| format!("call_{}", self.calls.len()));
        let name = item.get("name").and_then(Value::as_str).unwrap_or_default();
        out.push(DecodeEvent::Delta(Delta::ToolCallStart {
            id: call_id.clone(),
            name: name.to_string(),
        }));
        let arguments = item.get("arguments").and_then(Value::as_str).unwrap_or_default();
        if !arguments.is_empty() {
            out.push(DecodeEvent::Delta(Delta::ToolCallDelta {
                id: call_id.clone(),
                arguments_delta: arguments.to_string(),
            }));
        }
        self.calls.push(OpenCall {
            item_id: item_id.to_string(),
            call_id,
            arguments: arguments.to_string(),
        });
        Ok(())
    }

    /// A finished output item: a call's whole arguments, reasoning's
    /// encrypted content, and text or summaries no delta carried (a server
    /// that sends items whole).
    fn item_done(&mut self, item: &Value, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let id = item.get("id").and_then(Value::as_str).unwrap_or_default();
        let streamed = self.streamed.contains(id);
        match item.get("type").and_then(Value::as_str).unwrap_or_default() {
            "function_call" => {
                if id.is_empty() || !self.calls.iter().any(|c| c.item_id == id) {
                    self.start_call(
                        &json!({ "arguments": "", "call_id": item.get("call_id"),
                                              "name": item.get("name"), "id": id }),
                        out,
                    )?;
                }
                let Some(at) = self.calls.iter().position(|c| c.item_id == id) else {
                    return Ok(());
                };
                let call = self.calls.remove(at);
                // The item's arguments are the whole; the deltas were pieces of them.
                let whole = item.get("arguments").and_then(Value::as_str).unwrap_or(&call.arguments);
                out.push(DecodeEvent::Delta(Delta::ToolCallEnd {
                    id: call.call_id,
                    arguments: parse_arguments(whole),
                }));
            }
            "reasoning" => {
                if !streamed {
                    let texts = ["summary", "content"]
                        .iter()
                        .filter_map(|k| item.get(*k).and_then(Value::as_array))
                        .flatten()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .filter(|t| !t.is_empty())
                        .collect::<Vec<_>>();
                    for (i, text) in texts.iter().enumerate() {
                        if i > 0 || self.reasoned {
                            out.push(DecodeEvent::Delta(Delta::Reasoning { text: "\n\n".into() }));
                        }
                        self.reasoning(text, out);
                    }
                }
                if let Some(data) = item
                    .get("encrypted_content")
                    .and_then(Value::as_str)
                    .filter(|d| !d.is_empty())
                {
                    out.push(DecodeEvent::EncryptedReasoning(data.to_string()));
                }
            }
            "message" if !streamed => {
                for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    let text = match part.get("type").and_then(Value::as_str) {
                        Some("output_text") => part.get("text"),
                        Some("refusal") => {
                            self.refused = true;
                            part.get("refusal")
                        }
                        _ => None,
                    };
                    if let Some(text) = text.and_then(Value::as_str).filter(|t| !t.is_empty()) {
                        out.push(DecodeEvent::Delta(Delta::Text { text: text.to_string() }));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `response.completed` / `response.incomplete`: usage, why it stopped, the end.
    fn finish(&mut self, response: Option<&Value>, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        // Calls the stream never closed end with what arrived.
        for call in std::mem::take(&mut self.calls) {
            out.push(DecodeEvent::Delta(Delta::ToolCallEnd {
                id: call.call_id,
                arguments: parse_arguments(&call.arguments),
            }));
        }
        let response = response.unwrap_or(&Value::Null);
        if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
            out.push(DecodeEvent::Delta(Delta::Usage { usage: usage_of(usage) }));
        }
        let incomplete = response
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
            .filter(|_| response.get("status").and_then(Value::as_str) == Some("incomplete"));
        let reason = match incomplete {
            Some("max_output_tokens") => StopReason::MaxTokens,
            Some("content_filter") => StopReason::ContentFilter,
            Some(other) => StopReason::Other(other.to_string()),
            None if self.refused => StopReason::ContentFilter,
            None if self.called => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        out.push(DecodeEvent::Finish(reason));
        out.push(DecodeEvent::Terminal);
        Ok(())
    }

    /// An `error` event's or a failed response's error, classified by its
    /// `code` (or `type`) with OpenAI's table.
    fn error(&self, e: &Value) -> LlmError {
        let message = e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("the response failed");
        let kind = e
            .get("code")
            .and_then(Value::as_str)
            .or_else(|| e.get("type").and_then(Value::as_str))
            .unwrap_or("server_error");
        from_provider_error(&self.provider, ERROR_TYPES, kind, message, None)
    }
}

/// A whole (non-streaming) response object as the events a stream would give.
pub fn parse_response(provider: &str, body: &Value) -> Result<Vec<DecodeEvent>, LlmError> {
    let mut decoder = ResponsesDecoder::new(provider);
    let mut out = Vec::new();
    if let Some(error) = body.get("error").filter(|e| e.is_object()) {
        return Err(decoder.error(error));
    }
    for item in body.get("output").and_then(Value::as_array).into_iter().flatten() {
        if item.get("type").and_then(Value::as_str) == Some("function_call") {
            decoder.start_call(item, &mut out)?;
        }
        decoder.item_done(item, &mut out)?;
    }
    decoder.finish(Some(body), &mut out)?;
    decoder.budget.charge(provider, &out)?;
    Ok(out)
}

/// The Responses usage object: `input_tokens` include the cached ones
/// (mia keeps cache reads apart), `output_tokens` include reasoning.
fn usage_of(u: &Value) -> Usage {
    let n = |ptr: &str| u.pointer(ptr).and_then(Value::as_u64).unwrap_or(0);
    let input = n("/input_tokens");
    let cached = n("/input_tokens_details/cached_tokens");
    Usage {
        input_tokens: input.saturating_sub(cached),
        output_tokens: n("/output_tokens"),
        cache_read_tokens: cached.min(input),
        cache_write_tokens: 0,
        reasoning_tokens: n("/output_tokens_details/reasoning_tokens"),
        estimated: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::Accumulator;
    use crate::error::ErrorClass;
    use crate::message::ToolDef;
    use crate::providers::{Api, CoreConfig, Providers};

    fn decode_all(events: &[Value]) -> Result<Vec<DecodeEvent>, LlmError> {
        let mut d = ResponsesDecoder::new("openai");
        let mut out = Vec::new();
        for e in events {
            d.decode(
                &SseEvent {
                    event: e["type"].as_str().map(str::to_string),
                    data: e.to_string(),
                },
                &mut out,
            )?;
        }
        Ok(out)
    }

    fn folded(events: &[DecodeEvent]) -> Accumulator {
        let mut acc = Accumulator::default();
        for e in events {
            acc.apply(e);
        }
        acc
    }

    fn completed(usage: Value) -> Value {
        json!({ "type": "response.completed", "response": { "status": "completed", "usage": usage } })
    }

    #[test]
    fn summaries_are_thoughts_text_is_text_and_usage_keeps_cached_and_reasoning_apart() {
        let out = decode_all(&[
            json!({ "type": "response.created", "response": { "status": "in_progress" } }),
            json!({ "type": "response.output_item.added", "item": { "id": "rs_1", "type": "reasoning", "summary": [] } }),
            json!({ "type": "response.reasoning_summary_part.added", "item_id": "rs_1", "summary_index": 0 }),
            json!({ "type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": "Think" }),
            json!({ "type": "response.reasoning_summary_part.added", "item_id": "rs_1", "summary_index": 1 }),
            json!({ "type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": "More" }),
            json!({ "type": "response.output_item.done", "item": { "id": "rs_1", "type": "reasoning",
                "summary": [{ "type": "summary_text", "text": "Think" }, { "type": "summary_text", "text": "More" }],
                "encrypted_content": "gAAAA-enc" } }),
            json!({ "type": "response.output_text.delta", "item_id": "msg_1", "delta": "Hi" }),
            json!({ "type": "response.output_item.done", "item": { "id": "msg_1", "type": "message",
                "content": [{ "type": "output_text", "text": "Hi" }] } }),
            completed(json!({ "input_tokens": 100, "input_tokens_details": { "cached_tokens": 60 },
                "output_tokens": 30, "output_tokens_details": { "reasoning_tokens": 20 }, "total_tokens": 130 })),
        ])
        .unwrap();
        let acc = folded(&out);
        assert_eq!(acc.reasoning, "Think\n\nMore");
        assert_eq!(
            acc.text, "Hi",
            "the done item repeats the streamed text and adds nothing"
        );
        assert_eq!(
            acc.usage,
            Some(Usage {
                input_tokens: 40,
                cache_read_tokens: 60,
                output_tokens: 30,
                reasoning_tokens: 20,
                ..Usage::default()
            })
        );
        assert_eq!(acc.stop_reason, Some(StopReason::EndTurn));
        assert!(acc.terminal);
        assert_eq!(
            acc.message().parts,
            vec![
                Part::Reasoning {
                    text: "Think\n\nMore".into(),
                    signature: None,
                    redacted: false
                },
                Part::EncryptedReasoning {
                    data: "gAAAA-enc".into()
                },
                Part::Text { text: "Hi".into() },
            ]
        );
    }

    #[test]
    fn items_sent_whole_still_give_text_summary_and_calls() {
        let out = decode_all(&[
            json!({ "type": "response.output_item.done", "item": { "id": "rs_1", "type": "reasoning",
                "summary": [{ "type": "summary_text", "text": "Plan" }] } }),
            json!({ "type": "response.output_item.done", "item": { "id": "msg_1", "type": "message",
                "content": [{ "type": "output_text", "text": "Calling." }] } }),
            json!({ "type": "response.output_item.done", "item": { "id": "fc_1", "type": "function_call",
                "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a\"}" } }),
            completed(json!({ "input_tokens": 1, "output_tokens": 1 })),
        ])
        .unwrap();
        let acc = folded(&out);
        assert_eq!((acc.reasoning.as_str(), acc.text.as_str()), ("Plan", "Calling."));
        assert_eq!(acc.tool_calls.len(), 1);
        assert_eq!(
            (acc.tool_calls[0].id.as_str(), &acc.tool_calls[0].arguments),
            ("call_1", &json!({ "path": "a" }))
        );
        assert_eq!(acc.stop_reason, Some(StopReason::ToolUse));
    }

    #[test]
    fn two_calls_keep_their_call_ids_pieces_and_the_reasoning_between_them() {
        let out = decode_all(&[
            json!({ "type": "response.output_item.done", "item": { "id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "E1" } }),
            json!({ "type": "response.output_item.added", "item": { "id": "fc_a", "type": "function_call", "call_id": "call_a", "name": "grep", "arguments": "" } }),
            json!({ "type": "response.function_call_arguments.delta", "item_id": "fc_a", "delta": "{\"q\":" }),
            json!({ "type": "response.function_call_arguments.delta", "item_id": "fc_a", "delta": "\"x\"}" }),
            json!({ "type": "response.output_item.done", "item": { "id": "fc_a", "type": "function_call", "call_id": "call_a", "name": "grep", "arguments": "{\"q\":\"x\"}" } }),
            json!({ "type": "response.output_item.done", "item": { "id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": "E2" } }),
            json!({ "type": "response.output_item.added", "item": { "id": "fc_b", "type": "function_call", "call_id": "call_b", "name": "read_file", "arguments": "" } }),
            json!({ "type": "response.function_call_arguments.delta", "item_id": "fc_b", "delta": "{}" }),
            completed(json!({})),
        ])
        .unwrap();
        let acc = folded(&out);
        let parts: Vec<String> = acc
            .message()
            .parts
            .iter()
            .map(|p| match p {
                Part::EncryptedReasoning { data } => data.clone(),
                Part::ToolCall { id, arguments, .. } => format!("{id} {arguments}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(parts, vec!["E1", "call_a {\"q\":\"x\"}", "E2", "call_b {}"]);
    }

    #[test]
    fn errors_in_band_are_classified_like_openais_whichever_shape() {
        let nested = decode_all(&[json!({ "type": "error", "error": { "type": "server_error", "code": "server_error", "message": "Overloaded" } })])
            .unwrap_err();
        assert_eq!(nested.class, ErrorClass::ServerError);
        assert!(nested.retryable);
        assert_eq!(
            nested.message,
            "openai: server error (Overloaded). The provider is having trouble; try again shortly."
        );
        let flat = decode_all(&[
            json!({ "type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null }),
        ])
        .unwrap_err();
        assert_eq!(flat.class, ErrorClass::RateLimit);
        let failed = decode_all(&[json!({ "type": "response.failed", "response": { "status": "failed",
            "error": { "code": "context_length_exceeded", "message": "Your input exceeds the context window of this model." } } })])
        .unwrap_err();
        assert_eq!(failed.class, ErrorClass::ContextOverflow);
        let malformed = decode_all(&[]).map(|_| ());
        assert!(malformed.is_ok());
        let mut d = ResponsesDecoder::new("openai");
        let err = d
            .decode(
                &SseEvent {
                    event: None,
                    data: "{\"type\":\"response.output_text.delta\",\"delta\":".into(),
                },
                &mut Vec::new(),
            )
            .unwrap_err();
        assert!(
            err.message.starts_with("openai: the stream carried a malformed chunk"),
            "{}",
            err.message
        );
    }

    #[test]
    fn incomplete_answers_say_why_they_stopped() {
        let stop = |reason: &str| {
            let out = decode_all(&[
                json!({ "type": "response.incomplete", "response": { "status": "incomplete",
                "incomplete_details": { "reason": reason }, "usage": { "input_tokens": 3, "output_tokens": 9 } } }),
            ])
            .unwrap();
            folded(&out).stop_reason
        };
        assert_eq!(stop("max_output_tokens"), Some(StopReason::MaxTokens));
        assert_eq!(stop("content_filter"), Some(StopReason::ContentFilter));
        let refused = decode_all(&[
            json!({ "type": "response.refusal.delta", "item_id": "m", "delta": "I can't help with that." }),
            completed(json!({})),
        ])
        .unwrap();
        assert_eq!(folded(&refused).stop_reason, Some(StopReason::ContentFilter));
    }

    #[test]
    fn too_many_calls_end_the_answer() {
        let mut events: Vec<Value> = (0..=crate::delta::MAX_TOOL_CALLS)
            .map(|i| json!({ "type": "response.output_item.added", "item": { "id": format!("fc_{i}"), "type": "function_call", "call_id": format!("c{i}"), "name": "t" } }))
            .collect();
        events.push(completed(json!({})));
        let err = decode_all(&events).unwrap_err();
        assert!(err.message.contains("tool calls in one answer"), "{}", err.message);
    }

    fn conversation() -> ChatRequest {
        ChatRequest {
            model: "openai/gpt-5".into(),
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
                            signature: Some("anthropic-sig".into()),
                            redacted: false,
                        },
                        Part::Reasoning {
                            text: "EmwKredacted".into(),
                            signature: None,
                            redacted: true,
                        },
                        Part::EncryptedReasoning { data: "gAAAA-1".into() },
                        Part::Text {
                            text: "Reading it.".into(),
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
                    parts: vec![
                        Part::ToolResult {
                            tool_call_id: "call_1".into(),
                            content: "an image".into(),
                            is_error: false,
                        },
                        Part::Image {
                            media_type: "image/png".into(),
                            data: "AAAA".into(),
                        },
                    ],
                },
            ],
            tools: vec![ToolDef {
                name: "read_file".into(),
                description: "Read a file".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            }],
            max_tokens: Some(100),
            ..ChatRequest::default()
        }
    }

    #[test]
    fn golden_stateless_body_with_images_tools_and_the_encrypted_reasoning_sent_back() {
        let body = request_body(&conversation(), "gpt-5", true);
        assert_eq!(
            body,
            json!({
                "model": "gpt-5",
                "instructions": "be brief",
                "input": [
                    { "type": "message", "role": "user", "content": [
                        { "type": "input_text", "text": "what is in a.png?" },
                        { "type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=" }
                    ] },
                    { "type": "reasoning", "summary": [], "encrypted_content": "gAAAA-1" },
                    { "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": "Reading it." }] },
                    { "type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a.png\"}" },
                    { "type": "function_call_output", "call_id": "call_1", "output": "an image" },
                    { "type": "message", "role": "user", "content": [
                        { "type": "input_text", "text": "The images the tool results above refer to:" },
                        { "type": "input_image", "image_url": "data:image/png;base64,AAAA" }
                    ] }
                ],
                "tools": [{ "type": "function", "name": "read_file", "description": "Read a file",
                    "parameters": { "type": "object", "properties": { "path": { "type": "string" } } }, "strict": false }],
                "store": false,
                "reasoning": { "summary": "auto" },
                "include": ["reasoning.encrypted_content"],
                "stream": true,
                "max_output_tokens": 100
            })
        );
    }

    #[test]
    fn a_model_that_does_not_reason_gets_no_reasoning_fields_and_structured_output_goes_in_text() {
        let mut req = conversation();
        req.response_format = Some(crate::message::ResponseFormat {
            name: "point".into(),
            schema: json!({ "type": "object" }),
        });
        let body = request_body(&req, "gpt-4.1", false);
        assert!(body.get("reasoning").is_none() && body.get("include").is_none() && body.get("stream").is_none());
        assert_eq!(body["store"], json!(false));
        assert_eq!(
            body["text"],
            json!({ "format": { "type": "json_schema", "name": "point", "schema": { "type": "object" }, "strict": true } })
        );
    }

    #[test]
    fn the_reasoning_models_are_the_ones_kind_openai_sends_to_responses() {
        for m in [
            "gpt-5",
            "gpt-5.1-codex-max",
            "gpt-5-mini",
            "o3",
            "o4-mini",
            "o1-pro",
            "codex-mini-latest",
            "GPT-5.2",
        ] {
            assert!(prefers_responses(m), "{m}");
        }
        for m in [
            "gpt-4.1",
            "gpt-4o-mini",
            "gpt-5-chat-latest",
            "echo",
            "omni-moderation-latest",
        ] {
            assert!(!prefers_responses(m), "{m}");
        }
    }

    fn resolve(entry: Value, model: &str) -> Result<ResolvedProvider, LlmError> {
        let mut config = CoreConfig::default();
        config
            .providers
            .insert("p".into(), serde_json::from_value(entry).expect("a provider entry"));
        Providers::new(config).resolve(&format!("p/{model}")).map(|(p, _)| p)
    }

    #[test]
    fn api_picks_the_format_and_its_url_per_kind() {
        let openai = |api: Value, model| {
            resolve(
                json!({ "kind": "openai", "base_url": "http://h/v1", "api_key": "k", "api": api }),
                model,
            )
            .unwrap()
        };
        let p = openai(Value::Null, "gpt-5");
        assert_eq!(p.api, Api::Responses);
        assert_eq!(p.format().chat_url(&p, "gpt-5", true), "http://h/v1/responses");
        assert_eq!(
            p.format().headers(&p),
            vec![("authorization".to_string(), "Bearer k".to_string())]
        );
        assert_eq!(p.format().models_url(&p), "http://h/v1/models");
        assert_eq!(openai(Value::Null, "gpt-4.1").api, Api::Chat);
        assert_eq!(openai(json!("chat"), "gpt-5").api, Api::Chat);
        assert_eq!(openai(json!("responses"), "gpt-4.1").api, Api::Responses);
        let compat = resolve(
            json!({ "kind": "openai_compatible", "base_url": "http://h/v1" }),
            "gpt-5",
        )
        .unwrap();
        assert_eq!(compat.api, Api::Chat, "only OpenAI itself picks by model");
        let compat = resolve(
            json!({ "kind": "openai_compatible", "base_url": "http://h/v1", "api": "responses" }),
            "m",
        )
        .unwrap();
        assert_eq!(compat.format().chat_url(&compat, "m", true), "http://h/v1/responses");
        let az = resolve(json!({ "kind": "azure_openai", "base_url": "https://r.openai.azure.com/", "api_key": "k", "api": "responses" }), "dep").unwrap();
        assert_eq!(
            az.format().chat_url(&az, "dep", true),
            "https://r.openai.azure.com/openai/v1/responses"
        );
        assert_eq!(az.format().headers(&az), vec![("api-key".to_string(), "k".to_string())]);
        let az = resolve(json!({ "kind": "azure_openai", "base_url": "https://r.openai.azure.com", "api_key": "k", "api": "responses", "api_version": "preview" }), "dep").unwrap();
        assert_eq!(
            az.format().chat_url(&az, "dep", true),
            "https://r.openai.azure.com/openai/v1/responses?api-version=preview"
        );
        let err = resolve(
            json!({ "kind": "anthropic", "api_key": "k", "api": "responses" }),
            "claude",
        )
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidRequest);
        assert!(
            err.message
                .contains("providers.p.api = \"responses\" needs kind openai, azure_openai or openai_compatible"),
            "{}",
            err.message
        );
        assert!(serde_json::from_value::<crate::providers::ProviderConfig>(
            json!({ "kind": "openai", "api": "completions" })
        )
        .is_err());
    }

    #[test]
    fn a_whole_response_decodes_like_a_stream() {
        let body = json!({ "status": "completed", "output": [
            { "id": "rs_1", "type": "reasoning", "summary": [{ "type": "summary_text", "text": "Hm" }], "encrypted_content": "E" },
            { "id": "msg_1", "type": "message", "content": [{ "type": "output_text", "text": "ok" }] },
            { "id": "fc_1", "type": "function_call", "call_id": "call_9", "name": "t", "arguments": "{}" }
        ], "usage": { "input_tokens": 5, "output_tokens": 2 } });
        let acc = folded(&parse_response("openai", &body).unwrap());
        assert_eq!((acc.reasoning.as_str(), acc.text.as_str()), ("Hm", "ok"));
        assert_eq!(acc.tool_calls[0].id, "call_9");
        assert_eq!(acc.encrypted_reasoning, vec![(0, "E".to_string())]);
        assert!(acc.complete());
        let err = parse_response(
            "openai",
            &json!({ "error": { "code": "invalid_api_key", "message": "bad key" } }),
        )
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::AuthFailure);
    }
}
