//! Normalized stream events: what every decoder produces, whatever the wire.

use serde::Serialize;

use super::error::{ErrorClass, LlmError};
use super::message::{Message, Part, Role, StopReason};
use mia_cost::{Cost, Usage};

/// One increment of a streamed answer, in the shape Lua's `on_delta` receives.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Delta {
    Text {
        text: String,
    },
    Reasoning {
        text: String,
    },
    ToolCallStart {
        id: String,
        name: String,
    },
    ToolCallDelta {
        id: String,
        arguments_delta: String,
    },
    ToolCallEnd {
        id: String,
        arguments: serde_json::Value,
    },
    Usage {
        usage: Usage,
    },
    Retry {
        attempt: u32,
        /// `retry.max_retries`: the notice says "2/3".
        max_retries: u32,
        delay_ms: u64,
        class: ErrorClass,
        message: String,
    },
}

/// What a wire decoder reports besides deltas.
#[derive(Debug, Clone, PartialEq)]
pub enum DecodeEvent {
    Delta(Delta),
    /// An opaque token to keep with the reasoning (`tool_call_id: None`) or
    /// with one tool call, so it can be sent back in the history.
    Signature {
        tool_call_id: Option<String>,
        signature: String,
    },
    /// Anthropic `redacted_thinking` data, kept only to be sent back.
    RedactedReasoning(String),
    /// An OpenAI Responses reasoning item's `encrypted_content`, kept only
    /// to be sent back ([`Part::EncryptedReasoning`]).
    EncryptedReasoning(String),
    /// The model said why it stopped (finish_reason, stop_reason, finishReason).
    Finish(StopReason),
    /// The wire format's own end marker (`[DONE]`, `message_stop`).
    Terminal,
    /// What an LLM gateway says the call cost (`usage.cost`), already
    /// checked by [`mia_cost::gateway`]; the last one wins.
    GatewayCost(f64),
}

/// Most tool calls one answer may carry; past it the answer ends with an error.
pub const MAX_TOOL_CALLS: usize = 128;

/// Most bytes one answer may carry in text, reasoning, tool arguments and
/// opaque signatures together (a real answer is a few MB at most); past it
/// the answer ends with an error instead of growing Neovim's memory.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// What one answer has used of [`MAX_TOOL_CALLS`] and [`MAX_ANSWER_BYTES`].
/// Every wire decoder keeps one, so whatever a server sends, what the
/// decoder and the accumulator hold stays bounded.
#[derive(Debug, Default, Clone)]
pub struct AnswerBudget {
    bytes: usize,
    calls: usize,
}

impl AnswerBudget {
    /// Counts one more tool call; an error past [`MAX_TOOL_CALLS`].
    pub fn start_call(&mut self, provider: &str) -> Result<(), LlmError> {
        if self.calls >= MAX_TOOL_CALLS {
            return Err(over_budget(
                provider,
                format!("more than {MAX_TOOL_CALLS} tool calls in one answer"),
            ));
        }
        self.calls += 1;
        Ok(())
    }

    /// Counts `n` bytes the decoder keeps; an error past [`MAX_ANSWER_BYTES`].
    pub fn add_bytes(&mut self, provider: &str, n: usize) -> Result<(), LlmError> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > MAX_ANSWER_BYTES {
            return Err(over_budget(
                provider,
                format!(
                    "more than {} MiB of text, reasoning and tool arguments in one answer",
                    MAX_ANSWER_BYTES >> 20
                ),
            ));
        }
        Ok(())
    }

    /// Counts what `events` carry (the events a decoder just produced).
    pub fn charge(&mut self, provider: &str, events: &[DecodeEvent]) -> Result<(), LlmError> {
        let n = events.iter().fold(0usize, |n, e| n.saturating_add(carried_bytes(e)));
        self.add_bytes(provider, n)
    }
}

/// The bytes an event adds to what the answer keeps.
fn carried_bytes(event: &DecodeEvent) -> usize {
    match event {
        DecodeEvent::Delta(Delta::Text { text }) | DecodeEvent::Delta(Delta::Reasoning { text }) => text.len(),
        DecodeEvent::Delta(Delta::ToolCallStart { id, name }) => id.len() + name.len(),
        DecodeEvent::Delta(Delta::ToolCallDelta { arguments_delta, .. }) => arguments_delta.len(),
        DecodeEvent::Delta(Delta::ToolCallEnd { arguments, .. }) => json_len(arguments),
        DecodeEvent::Signature { signature, .. } => signature.len(),
        DecodeEvent::RedactedReasoning(data) | DecodeEvent::EncryptedReasoning(data) => data.len(),
        DecodeEvent::Delta(Delta::Usage { .. } | Delta::Retry { .. })
        | DecodeEvent::Finish(_)
        | DecodeEvent::Terminal
        | DecodeEvent::GatewayCost(_) => 0,
    }
}

/// The length of `v` as compact JSON, without building the text.
fn json_len(v: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing into a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, v);
    count.0
}

fn over_budget(provider: &str, what: String) -> LlmError {
    let mut err = LlmError::new(
        ErrorClass::ServerError,
        Some(provider),
        format!("{provider}: the server sent {what}; mia stopped the answer (the partial answer is kept). Try again, or ask for a smaller answer."),
    );
    err.retryable = false;
    err
}

/// A tool call as it stands at the end of a stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// The finished answer: what Lua's `on_done` receives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamDone {
    pub text: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub stop_reason: StopReason,
    pub usage: Usage,
    pub cost: Cost,
    pub provider: String,
    pub model: String,
    /// The answer as an assistant message in the internal format (reasoning
    /// with its signature, text, tool calls), ready to append to the history.
    pub message: Message,
    /// How many times the request was retried before this answer.
    pub retries: u32,
}

/// Folds deltas into the final answer, so the done event never depends on
/// the consumer having kept every delta.
#[derive(Debug, Default)]
pub struct Accumulator {
    pub text: String,
    pub reasoning: String,
    pub reasoning_signature: Option<String>,
    pub redacted_reasoning: Vec<String>,
    /// Encrypted reasoning items, each with the number of tool calls that
    /// came before it, so the message keeps them where they were.
    pub encrypted_reasoning: Vec<(usize, String)>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    pub stop_reason: Option<StopReason>,
    pub terminal: bool,
    /// The gateway's cost of the call, when the stream carried one.
    pub gateway_cost: Option<f64>,
}

impl Accumulator {
    /// Records one decoder event.
    pub fn apply(&mut self, event: &DecodeEvent) {
        match event {
            DecodeEvent::Delta(Delta::Text { text }) => self.text.push_str(text),
            DecodeEvent::Delta(Delta::Reasoning { text }) => self.reasoning.push_str(text),
            DecodeEvent::Delta(Delta::ToolCallStart { id, name }) => self.tool_calls.push(ToolCall {
                id: id.clone(),
                name: name.clone(),
                arguments: serde_json::Value::Null,
                signature: None,
            }),
            DecodeEvent::Signature {
                tool_call_id: None,
                signature,
            } => self.reasoning_signature = Some(signature.clone()),
            DecodeEvent::Signature {
                tool_call_id: Some(id),
                signature,
            } => {
                if let Some(call) = self.tool_calls.iter_mut().find(|c| &c.id == id) {
                    call.signature = Some(signature.clone());
                }
            }
            DecodeEvent::RedactedReasoning(data) => self.redacted_reasoning.push(data.clone()),
            DecodeEvent::EncryptedReasoning(data) => {
                self.encrypted_reasoning.push((self.tool_calls.len(), data.clone()))
            }
            DecodeEvent::Delta(Delta::ToolCallEnd { id, arguments }) => {
                if let Some(call) = self.tool_calls.iter_mut().find(|c| &c.id == id) {
                    call.arguments = arguments.clone();
                }
            }
            // Usage is cumulative on every wire we speak: the last report wins.
            DecodeEvent::Delta(Delta::Usage { usage }) => self.usage = Some(*usage),
            DecodeEvent::Delta(Delta::ToolCallDelta { .. }) | DecodeEvent::Delta(Delta::Retry { .. }) => {}
            DecodeEvent::Finish(reason) => self.stop_reason = Some(reason.clone()),
            DecodeEvent::Terminal => self.terminal = true,
            DecodeEvent::GatewayCost(usd) => self.gateway_cost = Some(*usd),
        }
    }

    /// The answer as an assistant message: reasoning first, then text, then
    /// tool calls; an encrypted reasoning item stays before the tool calls
    /// that followed it in the stream (the order OpenAI expects it back in).
    pub fn message(&self) -> Message {
        let mut parts = Vec::new();
        if !self.reasoning.is_empty() || self.reasoning_signature.is_some() {
            parts.push(Part::Reasoning {
                text: self.reasoning.clone(),
                signature: self.reasoning_signature.clone(),
                redacted: false,
            });
        }
        for data in &self.redacted_reasoning {
            parts.push(Part::Reasoning {
                text: data.clone(),
                signature: None,
                redacted: true,
            });
        }
        let encrypted = |calls_before: usize| {
            self.encrypted_reasoning
                .iter()
                .filter(move |(n, _)| *n == calls_before)
                .map(|(_, data)| Part::EncryptedReasoning { data: data.clone() })
        };
        parts.extend(encrypted(0));
        if !self.text.is_empty() {
            parts.push(Part::Text {
                text: self.text.clone(),
            });
        }
        for (i, call) in self.tool_calls.iter().enumerate() {
            if i > 0 {
                parts.extend(encrypted(i));
            }
            parts.push(Part::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                signature: call.signature.clone(),
            });
        }
        if !self.tool_calls.is_empty() {
            parts.extend(encrypted(self.tool_calls.len()));
        }
        Message {
            role: Role::Assistant,
            parts,
        }
    }

    /// True once the stream carried a sign that it ended on purpose.
    pub fn complete(&self) -> bool {
        self.terminal || self.stop_reason.is_some()
    }
}
