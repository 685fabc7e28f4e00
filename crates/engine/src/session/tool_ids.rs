//! Tool-call ids unique within a session, as ACP requires: a provider's id
//! is its own (OpenAI-compatible servers and Anthropic's pass theirs
//! through, some reuse `call_0` every turn), so the id a client sees is the
//! provider's the first time and `ID#N` when the session already used it.
//! The provider keeps its own id in the history (the stored parts), and the
//! ACP id follows from the order of the session's log alone, so the live
//! turn and a replay of the log give every call the same id.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::Value;

use mia_store::MessageRow;

/// The ACP ids given so far in one session.
#[derive(Debug, Default)]
pub struct ToolIds {
    used: HashSet<String>,
    /// The last suffix tried for a provider id (so a long run of one reused
    /// id does not probe from 2 every time).
    suffix: HashMap<String, u64>,
}

impl ToolIds {
    /// The ACP id of the session's next tool call that the provider called
    /// `provider_id`: never one given before in the session.
    pub fn assign(&mut self, provider_id: &str) -> String {
        if self.used.insert(provider_id.to_string()) {
            return provider_id.to_string();
        }
        let n = self.suffix.entry(provider_id.to_string()).or_insert(1);
        loop {
            *n += 1;
            let id = format!("{provider_id}#{n}");
            if self.used.insert(id.clone()) {
                return id;
            }
        }
    }
}

/// The provider ids of the tool calls one stored row holds, in order.
pub fn row_tool_calls(row: &MessageRow) -> impl Iterator<Item = &str> {
    row.parts.as_array().into_iter().flatten().filter_map(|p| {
        (p.get("type").and_then(Value::as_str) == Some("tool_call"))
            .then(|| p.get("id").and_then(Value::as_str))
            .flatten()
    })
}

/// The ACP ids of one round's calls, by provider id in call order: what
/// the round's results (which name the provider's ids) are shown under.
#[derive(Debug, Default)]
pub struct Round {
    by_provider: HashMap<String, VecDeque<String>>,
}

impl Round {
    pub fn push(&mut self, provider_id: &str, acp_id: String) {
        self.by_provider
            .entry(provider_id.to_string())
            .or_default()
            .push_back(acp_id);
    }

    /// The ACP id of the next result for `provider_id` (itself when unknown).
    pub fn take(&mut self, provider_id: &str) -> String {
        self.by_provider
            .get_mut(provider_id)
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| provider_id.to_string())
    }
}

/// The ACP ids of the tool calls in row `message_id` of `log`, in order
/// (empty when the row is not there).
pub fn ids_of_row(log: &[MessageRow], message_id: &str) -> Vec<String> {
    let mut ids = ToolIds::default();
    for row in log {
        let assigned: Vec<String> = row_tool_calls(row).map(|id| ids.assign(id)).collect();
        if row.id == message_id {
            return assigned;
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_provider_id_gets_a_new_acp_id_each_time() {
        let mut ids = ToolIds::default();
        assert_eq!(ids.assign("call_0"), "call_0");
        assert_eq!(ids.assign("call_1"), "call_1");
        assert_eq!(ids.assign("call_0"), "call_0#2");
        assert_eq!(ids.assign("call_0"), "call_0#3");
    }

    #[test]
    fn a_provider_id_that_looks_like_a_given_one_is_still_unique() {
        let mut ids = ToolIds::default();
        assert_eq!(ids.assign("x#2"), "x#2");
        assert_eq!(ids.assign("x"), "x");
        assert_eq!(ids.assign("x"), "x#3");
        assert_eq!(ids.assign("x#3"), "x#3#2");
    }

    #[test]
    fn results_take_the_ids_of_their_calls_in_order() {
        let mut round = Round::default();
        round.push("c", "c#2".into());
        round.push("c", "c#3".into());
        assert_eq!(round.take("c"), "c#2");
        assert_eq!(round.take("c"), "c#3");
        assert_eq!(round.take("c"), "c");
        assert_eq!(round.take("other"), "other");
    }
}
