//! The plain data the store takes and gives back. These cross into Lua (via
//! serde) as they are, so field names are the user-facing ones.

use serde::{Deserialize, Serialize};

use mia_llm::message::Role;

/// One conversation. `cwd` scopes listings to a project; `meta` holds
/// whatever the UI wants to remember that the store does not interpret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRow {
    /// Chosen by the caller (the agent's session id); the primary key.
    pub id: String,
    /// The project directory the session belongs to (listings filter on it exactly).
    pub cwd: String,
    /// `None` until the user or the title generator names the session.
    #[serde(default)]
    pub title: Option<String>,
    /// The agent mode the session runs in (e.g. `"build"`, `"plan"`).
    #[serde(default)]
    pub mode: String,
    /// `"provider/model"` last used in the session.
    #[serde(default)]
    pub model: String,
    /// Kept from the first insert: a later upsert cannot move it.
    pub created_at_ms: i64,
    /// Orders listings (newest first).
    pub updated_at_ms: i64,
    /// A JSON object (or any JSON value) the store keeps verbatim.
    #[serde(default = "empty_object")]
    pub meta: serde_json::Value,
}

/// Where a message is in its life. A streaming message is checkpointed with
/// `Streaming` and rewritten in place with its final state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageState {
    /// Still being written: a checkpoint of the text so far.
    Streaming,
    /// Finished normally.
    Complete,
    /// Stopped by the user; `parts` hold what had arrived.
    Cancelled,
    /// Ended by a provider or tool error; `meta` may say which.
    Error,
}

impl MessageState {
    /// The text stored in `messages.state` (the schema's CHECK lists the same words).
    pub fn as_str(self) -> &'static str {
        match self {
            MessageState::Streaming => "streaming",
            MessageState::Complete => "complete",
            MessageState::Cancelled => "cancelled",
            MessageState::Error => "error",
        }
    }

    /// The inverse of [`MessageState::as_str`]; `None` for any other text.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "streaming" => Some(MessageState::Streaming),
            "complete" => Some(MessageState::Complete),
            "cancelled" => Some(MessageState::Cancelled),
            "error" => Some(MessageState::Error),
            _ => None,
        }
    }
}

/// What a message row is. Stored as `messages.kind` plus, for a compaction,
/// `covers_from`/`covers_to` (the schema's CHECK keeps them together).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MessageKind {
    /// A prompt, an answer or tool results: shown, and sent to the model
    /// unless a later compaction covers it.
    #[default]
    Message,
    /// A summary that stands for the session's messages with `seq` in
    /// `covers_from..=covers_to` in requests to the model. Those messages stay
    /// in the store (the transcript still shows them); only requests use the
    /// summary (the row's `parts`) in their place.
    Compaction { covers_from: i64, covers_to: i64 },
}

impl MessageKind {
    /// The text stored in `messages.kind` (the schema's CHECK lists the same words).
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::Message => "message",
            MessageKind::Compaction { .. } => "compaction",
        }
    }

    /// The `(covers_from, covers_to)` columns.
    pub fn covers(self) -> (Option<i64>, Option<i64>) {
        match self {
            MessageKind::Message => (None, None),
            MessageKind::Compaction { covers_from, covers_to } => (Some(covers_from), Some(covers_to)),
        }
    }

    /// The inverse of [`MessageKind::as_str`] and [`MessageKind::covers`];
    /// `None` for an unknown kind or a compaction without its range.
    pub fn parse(kind: &str, covers_from: Option<i64>, covers_to: Option<i64>) -> Option<Self> {
        match (kind, covers_from, covers_to) {
            ("message", _, _) => Some(MessageKind::Message),
            ("compaction", Some(covers_from), Some(covers_to)) => {
                Some(MessageKind::Compaction { covers_from, covers_to })
            }
            _ => None,
        }
    }
}

/// One message of a session, in the internal message format
/// ([`mia_llm::message::Part`] list as JSON). The store keeps `parts` as an
/// opaque JSON value so that it never has to change when a part type is added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageRow {
    /// Unique across sessions; upserting the same id rewrites the message.
    pub id: String,
    pub session_id: String,
    /// Position in the session, unique per session; messages are read in this
    /// order. [`crate::Store::append_message`] assigns it (the caller's
    /// value is ignored); [`crate::Store::upsert_message`] takes it as given.
    pub seq: i64,
    /// Stored as the text `Role` serializes to (`"user"`, `"assistant"`, `"tool"`).
    pub role: Role,
    /// A JSON array of parts.
    pub parts: serde_json::Value,
    pub state: MessageState,
    /// Per-message extras (stop reason, error text, model...), kept verbatim.
    #[serde(default = "empty_object")]
    pub meta: serde_json::Value,
    /// A plain message or a compaction summary (see [`MessageKind`]).
    #[serde(default)]
    pub kind: MessageKind,
    /// Kept from the first insert (the first checkpoint of a streaming message).
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// One provider call: who asked (session, message, agent), whom (provider,
/// model), what it consumed and what that cost. Token counts follow
/// [`mia_cost::Usage`]: input excludes cache reads and writes;
/// reasoning is part of output.
///
/// `cost_known` is false when the model had no price; its `*_usd` fields are
/// then ignored by every sum, and reports count such rows apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UsageRow {
    /// `None` for calls made outside a session (e.g. a one-off stream).
    pub session_id: Option<String>,
    /// The assistant message the call produced, if any.
    pub message_id: Option<String>,
    /// Which agent made the call (main agent, a subagent, title generator...).
    pub agent: String,
    /// The provider id (`"anthropic"`), as in the `"provider/model"` spec.
    pub provider: String,
    /// The model name without the provider prefix; reports group by it.
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    /// True when the server reported no usage and the counts are an estimate.
    pub estimated: bool,
    /// False when no price was known; see the type's docs.
    pub cost_known: bool,
    /// The cost parts (USD), as the pricing code split them.
    pub input_usd: f64,
    pub output_usd: f64,
    pub cache_read_usd: f64,
    pub cache_write_usd: f64,
    /// What the call cost in all; what budgets and reports add up.
    pub total_usd: f64,
    /// Who priced the call: `local` (mia's price table; then the parts add
    /// up to the total) or `gateway` (the LLM gateway's own figure, a total
    /// without parts). A `mixed` value is stored as `local`.
    pub cost_source: mia_cost::CostSource,
    /// When the request was sent.
    pub started_at_ms: i64,
    /// Time from sending the request to the end of the response.
    pub duration_ms: i64,
    /// When the call finished and was recorded; every time filter uses this.
    pub created_at_ms: i64,
    /// How many times the request was retried before its answer: exported
    /// with the `mia.api_request` event (|mia-telemetry|), not stored.
    #[serde(skip)]
    pub retries: u32,
}

/// A session as a picker shows it: its row without `meta`, plus how many
/// messages it has and what its calls with a known price cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub id: String,
    pub cwd: String,
    pub title: Option<String>,
    pub mode: String,
    pub model: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// Prompts, answers and tool results; compactions are not counted.
    pub message_count: u64,
    pub cost_usd: f64,
}

/// One page of [`crate::Store::list_sessions`]. `next_cursor` is
/// `None` on the last page; otherwise pass it back verbatim for the next one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionPage {
    pub sessions: Vec<SessionSummary>,
    pub next_cursor: Option<String>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_state_text_round_trips() {
        for s in [
            MessageState::Streaming,
            MessageState::Complete,
            MessageState::Cancelled,
            MessageState::Error,
        ] {
            assert_eq!(MessageState::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert_eq!(MessageState::parse("done"), None);
    }

    #[test]
    fn partial_usage_row_deserializes_with_zero_defaults() {
        let row: UsageRow = serde_json::from_str(r#"{"provider":"openai","model":"gpt","input_tokens":3}"#).unwrap();
        assert_eq!(row.input_tokens, 3);
        assert!(!row.cost_known);
        assert_eq!(row.session_id, None);
    }
}
