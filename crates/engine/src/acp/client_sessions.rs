//! An external agent's own sessions and settings: `session/list` (for
//! `:Mia sessions`), `session/load` (its replayed updates draw in the chat
//! through the normal renderer; the next prompt continues the session) and
//! `session/set_config_option` (`:Mia mode {configId} {value}`).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol as sdk;
use agent_client_protocol::v1::schema as s;
use serde_json::{json, Value};

use super::client::{AcpClientError, AgentProc, Live};
use super::session_list::{AgentSession, Pager};

/// Longest detail of an agent's error kept in a message (characters).
const MAX_DETAIL: usize = 500;

/// An agent's error as one line: its message and what its `data` says
/// (the TypeScript SDK puts a thrown error's text in `data.details`).
fn error_text(e: &sdk::Error) -> String {
    let detail = match &e.data {
        None | Some(Value::Null) => String::new(),
        Some(Value::Object(m)) if m.len() == 1 && m.get("details").is_some_and(Value::is_string) => {
            m["details"].as_str().unwrap_or_default().to_string()
        }
        Some(Value::String(t)) => t.clone(),
        Some(v) => v.to_string(),
    };
    let detail: String = detail.split_whitespace().collect::<Vec<_>>().join(" ");
    let detail: String = detail.chars().take(MAX_DETAIL).collect();
    if detail.is_empty() || detail == e.message {
        e.message.clone()
    } else {
        format!("{}: {detail}", e.message)
    }
}

/// Longest user message kept while a loaded session is replayed (bytes).
const MAX_REPLAYED_PROMPT: usize = 1 << 20;

/// A user message being replayed by `session/load`, until its last chunk.
#[derive(Debug, Default)]
pub struct Replay {
    id: Option<String>,
    text: String,
}

/// Agents whose sessions could not be listed, with why (for one warning).
#[derive(Debug, Default)]
pub struct Listed {
    pub sessions: Vec<AgentSession>,
    pub failed: Vec<(String, String)>,
}

/// Which agents `list_everywhere` asks: the running ones, and the chat's
/// agent, started if needed.
pub struct Ask {
    pub agent: Arc<AgentProc>,
    pub start: bool,
}

/// The sessions of every agent in `ask` that offers `session/list`, each in
/// its own cwd (where its chat sessions are made),
/// asked together; each gets `timeout` once it runs (a starting agent first
/// gets its start). A slow or failing agent is named in `failed`, the
/// others are kept.
pub async fn list_everywhere(ask: Vec<Ask>, timeout: Duration) -> Listed {
    let jobs = ask.into_iter().map(|a| async move {
        let name = a.agent.spec.name.clone();
        (name, list_one(a, timeout).await)
    });
    let mut out = Listed::default();
    for (name, r) in futures_util::future::join_all(jobs).await {
        match r {
            Ok(mut list) => out.sessions.append(&mut list),
            Err(why) => out.failed.push((name, why)),
        }
    }
    out
}

async fn list_one(a: Ask, timeout: Duration) -> Result<Vec<AgentSession>, String> {
    let cwd = a.agent.root_dir();
    let secs = timeout.as_secs_f64();
    let live = if a.start {
        a.agent
            .ensure(a.agent.stream)
            .await
            .map_err(|e| e.to_string().trim_start_matches("mia: ").to_string())?
    } else {
        match tokio::time::timeout(timeout, a.agent.running()).await {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(Vec::new()),
            Err(_) => return Err(format!("it did not start within {secs} s")),
        }
    };
    if !live.can_list {
        return Ok(Vec::new());
    }
    match tokio::time::timeout(timeout, a.agent.list_pages(&live, cwd)).await {
        Ok(r) => r.map_err(|e| e.to_string().trim_start_matches("mia: ").to_string()),
        Err(_) => Err(format!("no answer to session/list within {secs} s")),
    }
}

impl AgentProc {
    /// The live connection if the agent runs now (none is started).
    pub(super) async fn running(&self) -> Option<Arc<Live>> {
        let live = self.live.lock().await;
        live.as_ref().filter(|l| !l.died.is_cancelled()).cloned()
    }

    /// Every page of its `session/list` for `cwd`, within the bounds of [`Pager`].
    async fn list_pages(&self, live: &Live, cwd: PathBuf) -> Result<Vec<AgentSession>, AcpClientError> {
        let mut pager = Pager::new();
        let mut cursor: Option<String> = None;
        loop {
            let req = s::ListSessionsRequest::new().cwd(cwd.clone()).cursor(cursor.clone());
            let page = live
                .cx
                .send_request(req)
                .block_task()
                .await
                .map_err(|e| self.protocol("session/list", error_text(&e)))?;
            let sessions = page
                .sessions
                .into_iter()
                .map(|s| {
                    AgentSession::new(
                        &self.spec.name,
                        s.session_id.to_string(),
                        s.cwd.display().to_string(),
                        s.title,
                        s.updated_at,
                    )
                })
                .collect();
            cursor = pager.page(sessions, page.next_cursor);
            if cursor.is_none() {
                return Ok(pager.sessions);
            }
        }
    }

    fn protocol(&self, method: &str, message: String) -> AcpClientError {
        AcpClientError::Protocol {
            name: self.spec.name.clone(),
            method: method.into(),
            message,
        }
    }

    /// `session/load` of `session_id` (in `cwd`, with the MCP servers
    /// `session/new` got): the agent
    /// replays it as updates on the agent's stream, which the chat draws;
    /// prompts then go to that session. Returns `{ sessionId }`.
    pub async fn load_session(
        self: Arc<Self>,
        session_id: String,
        cwd: Option<PathBuf>,
    ) -> Result<Value, AcpClientError> {
        let live = self.ensure(self.stream).await?;
        if !live.can_load {
            return Err(AcpClientError::CannotLoad {
                name: self.spec.name.clone(),
            });
        }
        if self.turn.load(Ordering::SeqCst) != 0 {
            return Err(AcpClientError::Busy {
                name: self.spec.name.clone(),
            });
        }
        let cwd = cwd.unwrap_or_else(|| self.root_dir());
        *self.replay.lock().unwrap_or_else(|p| p.into_inner()) = Some(Replay::default());
        let req = s::LoadSessionRequest::new(session_id.clone(), cwd).mcp_servers(live.mcp_servers.clone());
        let answer = live.cx.send_request(req).block_task().await;
        self.end_replay();
        let answer = answer.map_err(|e| self.protocol("session/load", error_text(&e)))?;
        live.set_session(s::SessionId::new(session_id.clone()));
        if let Some(modes) = &answer.modes {
            self.set_info("modes", serde_json::to_value(modes).unwrap_or(Value::Null));
        }
        if let Some(options) = &answer.config_options {
            self.set_info("configOptions", serde_json::to_value(options).unwrap_or(Value::Null));
        }
        Ok(json!({ "sessionId": session_id }))
    }

    /// Where the agent works (its `cwd`, else Neovim's).
    fn root_dir(&self) -> PathBuf {
        match &self.spec.cwd {
            Some(c) => c.clone(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        }
    }

    /// During a load: keeps a user message chunk's text (the chunks of one
    /// message become one, drawn under the agent's name; a chunk with
    /// another `messageId` starts the next message) and sends what was kept
    /// before any other update. True when `update` was kept.
    pub(super) fn replayed(&self, update: &s::SessionUpdate) -> bool {
        let mut replay = self.replay.lock().unwrap_or_else(|p| p.into_inner());
        let Some(pending) = replay.as_mut() else {
            return false;
        };
        let s::SessionUpdate::UserMessageChunk(c) = update else {
            let text = std::mem::take(&mut pending.text);
            drop(replay);
            self.send_replayed(text);
            return false;
        };
        let id = c.message_id.as_ref().map(|m| m.to_string());
        if id.is_some() && pending.id.is_some() && id != pending.id {
            let text = std::mem::take(&mut pending.text);
            pending.id = id;
            drop(replay);
            self.send_replayed(text);
            replay = self.replay.lock().unwrap_or_else(|p| p.into_inner());
        } else if id.is_some() {
            pending.id = id;
        }
        if let (Some(pending), s::ContentBlock::Text(t)) = (replay.as_mut(), &c.content) {
            if pending.text.len() < MAX_REPLAYED_PROMPT {
                pending.text.push_str(&t.text);
            }
        }
        true
    }

    /// Ends a load: sends the user's text still kept.
    fn end_replay(&self) {
        let pending = self.replay.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(p) = pending {
            self.send_replayed(p.text);
        }
    }

    /// One replayed user message, drawn with the agent's name.
    fn send_replayed(&self, text: String) {
        if text.is_empty() {
            return;
        }
        let mut chunk = s::ContentChunk::new(s::ContentBlock::Text(s::TextContent::new(text)));
        chunk.meta = Some(super::client::mia_meta(
            json!({ "model": self.spec.name, "agent": self.spec.name, "replayed": true }),
        ));
        self.push(self.stream, s::SessionUpdate::UserMessageChunk(chunk));
    }

    /// `session/set_config_option`: `value` is a select option's value id
    /// (a string) or a boolean. Returns the agent's config options as it
    /// answered them (kept for Lua too).
    pub async fn set_config_option(self: Arc<Self>, config_id: String, value: Value) -> Result<Value, AcpClientError> {
        let live = self.ensure(self.stream).await?;
        let value = match value {
            Value::Bool(b) => s::SessionConfigOptionValue::boolean(b),
            Value::String(v) => s::SessionConfigOptionValue::value_id(v),
            other => {
                return Err(self.protocol(
                    "session/set_config_option",
                    format!("mia sends only a value id or a boolean, not {other}"),
                ))
            }
        };
        let req = s::SetSessionConfigOptionRequest::new(live.session(), config_id, value);
        let answer = live
            .cx
            .send_request(req)
            .block_task()
            .await
            .map_err(|e| self.protocol("session/set_config_option", error_text(&e)))?;
        let options = serde_json::to_value(&answer.config_options).unwrap_or(Value::Null);
        self.set_info("configOptions", options.clone());
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_error_names_its_details_in_one_bounded_line() {
        let mut e = sdk::Error::internal_error();
        assert_eq!(error_text(&e), e.message);
        e.data = Some(json!({ "details": "the index\nis corrupt" }));
        assert_eq!(error_text(&e), format!("{}: the index is corrupt", e.message));
        e.data = Some(json!({ "cwd": "/x" }));
        assert_eq!(error_text(&e), format!("{}: {{\"cwd\":\"/x\"}}", e.message));
        e.data = Some(json!("x".repeat(2000)));
        assert_eq!(
            error_text(&e).chars().count(),
            e.message.chars().count() + 2 + MAX_DETAIL
        );
    }
}
