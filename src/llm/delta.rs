//! Normalized stream events: what every decoder produces, whatever the wire.

use serde::Serialize;

use super::error::ErrorClass;
use super::message::{StopReason, Usage};

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
        delay_ms: u64,
        class: ErrorClass,
        message: String,
    },
}

/// What a wire decoder reports besides deltas.
#[derive(Debug, Clone, PartialEq)]
pub enum DecodeEvent {
    Delta(Delta),
    /// The model said why it stopped (finish_reason, stop_reason, finishReason).
    Finish(StopReason),
    /// The wire format's own end marker (`[DONE]`, `message_stop`).
    Terminal,
}

/// A tool call as it stands at the end of a stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
}

/// The cost of one answer; `known == false` (and no figures) when the model has no price.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cost {
    pub known: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write_usd: Option<f64>,
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
}

/// Folds deltas into the final answer, so the done event never depends on
/// the consumer having kept every delta.
#[derive(Debug, Default)]
pub struct Accumulator {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    pub stop_reason: Option<StopReason>,
    pub terminal: bool,
}

impl Accumulator {
    /// Records one decoder event.
    pub fn apply(&mut self, event: &DecodeEvent) {
        match event {
            DecodeEvent::Delta(Delta::Text { text }) => self.text.push_str(text),
            DecodeEvent::Delta(Delta::Reasoning { text }) => self.reasoning.push_str(text),
            DecodeEvent::Delta(Delta::ToolCallStart { id, name }) => {
                self.tool_calls.push(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: serde_json::Value::Null,
                })
            }
            DecodeEvent::Delta(Delta::ToolCallEnd { id, arguments }) => {
                if let Some(call) = self.tool_calls.iter_mut().find(|c| &c.id == id) {
                    call.arguments = arguments.clone();
                }
            }
            // Usage is cumulative on every wire we speak: the last report wins.
            DecodeEvent::Delta(Delta::Usage { usage }) => self.usage = Some(*usage),
            DecodeEvent::Delta(Delta::ToolCallDelta { .. })
            | DecodeEvent::Delta(Delta::Retry { .. }) => {}
            DecodeEvent::Finish(reason) => self.stop_reason = Some(reason.clone()),
            DecodeEvent::Terminal => self.terminal = true,
        }
    }

    /// True once the stream carried a sign that it ended on purpose.
    pub fn complete(&self) -> bool {
        self.terminal || self.stop_reason.is_some()
    }
}
