//! OpenAI Chat Completions: the request body and the streamed chunk decoder.
//! OpenAI-compatible servers (Ollama, Groq, DeepSeek, OpenRouter, vLLM) use
//! this same format with their own base URL.

use serde_json::{json, Map, Value};

use super::delta::{DecodeEvent, Delta};
use super::error::{ErrorClass, LlmError};
use super::message::{ChatRequest, Part, Role, StopReason, Usage};
use super::stream::SseEvent;

/// The JSON body of a streaming chat completion for `model` (the part after `provider/`).
pub fn request_body(req: &ChatRequest, model: &str) -> Value {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({ "role": "system", "content": system }));
    }
    for m in &req.messages {
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        };
        let only_text = m.parts.iter().all(|p| matches!(p, Part::Text { .. }));
        let content = if only_text {
            Value::String(m.plain_text())
        } else {
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
        };
        messages.push(json!({ "role": role, "content": content }));
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    if let Some(max) = req.max_tokens {
        body.insert("max_tokens".into(), json!(max));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    Value::Object(body)
}

/// Decodes the `data:` payloads of a chat-completions stream.
#[derive(Debug, Default)]
pub struct OpenAiDecoder {
    provider: String,
}

impl OpenAiDecoder {
    pub fn new(provider: &str) -> Self {
        OpenAiDecoder {
            provider: provider.to_string(),
        }
    }

    /// Turns one SSE event into normalized events.
    pub fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            out.push(DecodeEvent::Terminal);
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            let start: String = data.chars().take(80).collect();
            LlmError::new(
                ErrorClass::ServerError,
                Some(&self.provider),
                format!(
                    "{}: the stream carried a malformed chunk ({e}): {start}",
                    self.provider
                ),
            )
        })?;
        if let Some(err) = chunk.get("error") {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error");
            return Err(LlmError::new(
                ErrorClass::ServerError,
                Some(&self.provider),
                format!("{}: the stream reported an error: {message}", self.provider),
            ));
        }
        if let Some(choice) = chunk.pointer("/choices/0") {
            let delta = choice.get("delta");
            let text_of = |key: &str| {
                delta
                    .and_then(|d| d.get(key))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
            };
            if let Some(text) = text_of("reasoning_content") {
                out.push(DecodeEvent::Delta(Delta::Reasoning {
                    text: text.to_string(),
                }));
            }
            if let Some(text) = text_of("content") {
                out.push(DecodeEvent::Delta(Delta::Text {
                    text: text.to_string(),
                }));
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                out.push(DecodeEvent::Finish(stop_reason(reason)));
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            out.push(DecodeEvent::Delta(Delta::Usage {
                usage: usage_of(usage),
            }));
        }
        Ok(())
    }
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

/// OpenAI counts cached prompt tokens inside `prompt_tokens`; mia keeps them apart.
fn usage_of(u: &Value) -> Usage {
    let n = |ptr: &str| u.pointer(ptr).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("/prompt_tokens_details/cached_tokens");
    Usage {
        input_tokens: n("/prompt_tokens").saturating_sub(cached),
        output_tokens: n("/completion_tokens"),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        reasoning_tokens: n("/completion_tokens_details/reasoning_tokens"),
        estimated: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::message::Message;

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
    fn malformed_chunk_is_a_clear_error() {
        let err = decode_all(&[r#"{"choices":[{"delta":{"content":"#]).unwrap_err();
        assert_eq!(err.class, ErrorClass::ServerError);
        assert!(
            err.message
                .starts_with("openai: the stream carried a malformed chunk"),
            "{}",
            err.message
        );
    }

    #[test]
    fn body_puts_system_first_and_asks_for_usage() {
        let req = ChatRequest {
            model: "openai/gpt-4.1".into(),
            system: Some("be brief".into()),
            messages: vec![Message::text(Role::User, "hello")],
            tools: vec![],
            max_tokens: Some(100),
            temperature: None,
        };
        assert_eq!(
            request_body(&req, "gpt-4.1"),
            json!({
                "model": "gpt-4.1",
                "messages": [
                    { "role": "system", "content": "be brief" },
                    { "role": "user", "content": "hello" }
                ],
                "stream": true,
                "stream_options": { "include_usage": true },
                "max_tokens": 100
            })
        );
    }
}
