//! `:Mia sessions` across agents, as plain functions over plain data: how
//! far an agent's `session/list` pages are followed, and how its sessions
//! are merged with mia's own stored ones.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

/// Most `session/list` pages asked of one agent (an agent whose cursor
/// never ends cannot keep the picker waiting).
pub const MAX_PAGES: usize = 10;
/// Most sessions kept from one agent.
pub const MAX_ENTRIES: usize = 200;
/// Longest title kept (characters): agents send what they like.
const MAX_TITLE: usize = 200;

/// One session an agent listed, named by the agent (ACP's SessionInfo plus
/// `agent`), as the picker and `mia.sessions.list({ agent })` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSession {
    pub agent: String,
    pub session_id: String,
    pub cwd: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

impl AgentSession {
    /// A listed session, its title cut to one bounded line.
    pub fn new(
        agent: &str,
        session_id: String,
        cwd: String,
        title: Option<String>,
        updated_at: Option<String>,
    ) -> Self {
        let title = title
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
            .map(|t| t.chars().take(MAX_TITLE).collect::<String>())
            .filter(|t| !t.is_empty());
        Self {
            agent: agent.to_string(),
            session_id,
            cwd,
            title,
            updated_at,
        }
    }
}

/// Follows one agent's `nextCursor`s within [`MAX_PAGES`] and
/// [`MAX_ENTRIES`], and stops at a cursor it has seen (a loop).
#[derive(Debug, Default)]
pub struct Pager {
    pages: usize,
    cursors: HashSet<String>,
    seen: HashSet<String>,
    /// The sessions kept so far, in the agent's order, without repeats.
    pub sessions: Vec<AgentSession>,
}

impl Pager {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one page; returns the cursor of the next page to ask for, or
    /// None when the listing is complete or a bound is reached.
    pub fn page(&mut self, sessions: Vec<AgentSession>, next_cursor: Option<String>) -> Option<String> {
        self.pages += 1;
        for s in sessions {
            if self.sessions.len() == MAX_ENTRIES {
                break;
            }
            if self.seen.insert(s.session_id.clone()) {
                self.sessions.push(s);
            }
        }
        let cursor = next_cursor.filter(|c| !c.is_empty())?;
        if self.pages >= MAX_PAGES || self.sessions.len() >= MAX_ENTRIES || !self.cursors.insert(cursor.clone()) {
            return None;
        }
        Some(cursor)
    }
}

/// Unix milliseconds of an ISO 8601 (RFC 3339) time, or None.
fn millis(iso: &str) -> Option<i128> {
    let t = time::OffsetDateTime::parse(iso, &time::format_description::well_known::Rfc3339).ok()?;
    Some(t.unix_timestamp_nanos() / 1_000_000)
}

fn updated(entry: &Value) -> Option<i128> {
    entry.get("updatedAt").and_then(Value::as_str).and_then(millis)
}

/// The picker's order: mia's sessions of this directory and the agents'
/// sessions (all listed for this directory) together, newest first (an
/// entry without a time last), then mia's sessions of other directories as
/// they came (newest first), without repeating one listed above.
pub fn merge(own_here: Vec<Value>, agents: Vec<AgentSession>, own_elsewhere: Vec<Value>) -> Vec<Value> {
    let here_ids: HashSet<String> = own_here
        .iter()
        .filter_map(|s| s.get("sessionId").and_then(Value::as_str).map(str::to_string))
        .collect();
    let mut first: Vec<Value> = own_here;
    first.extend(agents.iter().filter_map(|a| serde_json::to_value(a).ok()));
    // Stable: equal times keep mia's own first, each list in its order.
    first.sort_by_key(|e| std::cmp::Reverse(updated(e).unwrap_or(i128::MIN)));
    first.extend(own_elsewhere.into_iter().filter(|s| {
        s.get("sessionId")
            .and_then(Value::as_str)
            .is_none_or(|id| !here_ids.contains(id))
    }));
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s(id: &str) -> AgentSession {
        AgentSession::new("a", id.to_string(), "/p".into(), None, None)
    }

    fn page(ids: std::ops::Range<usize>) -> Vec<AgentSession> {
        ids.map(|i| s(&format!("s{i}"))).collect()
    }

    #[test]
    fn pages_are_followed_until_the_agent_gives_no_cursor() {
        let mut p = Pager::new();
        assert_eq!(p.page(page(0..2), Some("c1".into())), Some("c1".into()));
        assert_eq!(p.page(page(2..4), Some(String::new())), None);
        assert_eq!(p.sessions.len(), 4);
    }

    #[test]
    fn an_endless_cursor_stops_after_ten_pages() {
        let mut p = Pager::new();
        let mut asked = 1;
        while p
            .page(page(asked * 2..asked * 2 + 2), Some(format!("c{asked}")))
            .is_some()
        {
            asked += 1;
        }
        assert_eq!(asked, MAX_PAGES);
        assert_eq!(p.sessions.len(), 2 * MAX_PAGES);
    }

    #[test]
    fn entries_stop_at_two_hundred_and_a_repeated_cursor_ends_the_listing() {
        let mut p = Pager::new();
        assert_eq!(p.page(page(0..150), Some("c".into())), Some("c".into()));
        assert_eq!(p.page(page(150..300), Some("d".into())), None);
        assert_eq!(p.sessions.len(), MAX_ENTRIES);
        assert_eq!(p.sessions.last().unwrap().session_id, "s199");

        let mut q = Pager::new();
        assert_eq!(q.page(page(0..2), Some("same".into())), Some("same".into()));
        assert_eq!(q.page(page(0..2), Some("same".into())), None);
        assert_eq!(q.sessions.len(), 2, "a session listed twice is kept once");
    }

    #[test]
    fn titles_are_one_bounded_line_and_an_empty_title_is_none() {
        let long = "x".repeat(500);
        let a = AgentSession::new("a", "1".into(), "/p".into(), Some(format!("two\n  lines {long}")), None);
        assert!(a.title.as_deref().unwrap().starts_with("two lines x"));
        assert_eq!(a.title.unwrap().chars().count(), MAX_TITLE);
        assert_eq!(
            AgentSession::new("a", "1".into(), "/p".into(), Some(" \n".into()), None).title,
            None
        );
    }

    #[test]
    fn merge_puts_this_directory_newest_first_then_mias_other_directories() {
        let own_here = vec![
            json!({ "sessionId": "m1", "updatedAt": "2026-12-01T10:00:00Z" }),
            json!({ "sessionId": "m2", "updatedAt": "2026-12-01T08:00:00Z" }),
        ];
        let agents = vec![
            AgentSession::new(
                "claude",
                "c1".into(),
                "/p".into(),
                Some("t".into()),
                Some("2026-12-01T09:30:00.500Z".into()),
            ),
            AgentSession::new("claude", "c2".into(), "/p".into(), None, None),
            AgentSession::new(
                "tools",
                "t1".into(),
                "/p".into(),
                None,
                Some("2026-12-01T12:00:00+02:00".into()),
            ),
        ];
        let elsewhere = vec![
            json!({ "sessionId": "m1", "updatedAt": "2026-12-01T10:00:00Z" }),
            json!({ "sessionId": "m9", "updatedAt": "2026-12-01T11:00:00Z" }),
        ];
        let merged = merge(own_here, agents, elsewhere);
        let ids: Vec<&str> = merged.iter().map(|e| e["sessionId"].as_str().unwrap()).collect();
        // t1 is 10:00 UTC (after m1 by order, same time), c1 09:30, m2 08:00, c2 has no time.
        assert_eq!(ids, ["m1", "t1", "c1", "m2", "c2", "m9"]);
        assert_eq!(merged[2]["agent"], "claude");
        assert_eq!(merged[2]["title"], "t");
        assert!(merged[0].get("agent").is_none(), "mia's own entries stay as they are");
    }
}
