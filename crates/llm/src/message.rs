//! The internal conversation format. Every wire format converts from and to
//! these types, so history, tools and system prompt survive a provider switch.

use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    Tool,
}

/// One typed piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
    },
    /// Base64 image data with its media type (e.g. `image/png`).
    Image {
        media_type: String,
        data: String,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: serde_json::Value,
        /// Opaque provider token that must travel back with this call in the
        /// history (Gemini's `thoughtSignature`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    ToolResult {
        tool_call_id: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
    Reasoning {
        text: String,
        /// Opaque provider token that must travel back with this reasoning
        /// (Anthropic's thinking `signature`, Gemini's `thoughtSignature`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        /// Anthropic's `redacted_thinking`: `text` holds the encrypted data.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        redacted: bool,
    },
    /// One reasoning item of OpenAI's Responses API in stateless use
    /// (`store: false`): the model's reasoning as OpenAI encrypted it
    /// (`encrypted_content`), opaque to mia. It must go back with the rest
    /// of the turn on the next request, or the model loses the reasoning
    /// behind its tool calls; every other wire format leaves it out (it
    /// means nothing to them). Its readable summary is a separate
    /// [`Part::Reasoning`].
    EncryptedReasoning {
        data: String,
    },
}

/// A message as Lua writes it: `{ role, content = "text" }` or `{ role, parts = {...} }`.
#[derive(Deserialize)]
struct LuaMessage {
    role: Role,
    content: Option<String>,
    parts: Option<Vec<Part>>,
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "LuaMessage")]
pub struct Message {
    pub role: Role,
    pub parts: Vec<Part>,
}

impl TryFrom<LuaMessage> for Message {
    type Error = String;

    fn try_from(m: LuaMessage) -> Result<Self, Self::Error> {
        let mut parts = m.parts.unwrap_or_default();
        if let Some(text) = m.content {
            parts.insert(0, Part::Text { text });
        }
        if parts.is_empty() {
            return Err("a message needs `content` (a string) or `parts` (a list)".to_string());
        }
        Ok(Message { role: m.role, parts })
    }
}

impl Message {
    /// A message made of one text part.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Message {
            role,
            parts: vec![Part::Text { text: text.into() }],
        }
    }

    /// The concatenated text parts (what a user reads of this message).
    pub fn plain_text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// A tool the model may call: name, description and JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_object_schema")]
    pub parameters: serde_json::Value,
}

fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({ "type": "object", "properties": {} })
}

/// What `mia.stream` and the agent loop ask a provider for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// `"provider/model"`, e.g. `"openai/gpt-4.1"`.
    pub model: String,
    #[serde(default)]
    pub system: Option<String>,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Vec<ToolDef>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Provider-specific fields merged into the top level of the wire body
    /// (set by pre-request transform hooks, e.g. `reasoning_effort`).
    #[serde(default)]
    pub extra_body: Option<serde_json::Value>,
    /// Text that ends the answer where it appears (not included in it).
    #[serde(default)]
    pub stop_sequences: Vec<String>,
    /// An answer that is JSON matching a schema.
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
}

/// `{ name, schema }`: the answer must be JSON matching the JSON Schema
/// `schema` (`name` names it where a provider asks for one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFormat {
    #[serde(default = "default_format_name")]
    pub name: String,
    pub schema: serde_json::Value,
}

fn default_format_name() -> String {
    "answer".to_string()
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    ToolUse,
    ContentFilter,
    StopSequence,
    Other(String),
}
