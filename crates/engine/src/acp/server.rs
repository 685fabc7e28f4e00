//! `mia-acp`: mia's own agent served over the Agent Client Protocol on
//! stdio, for any ACP client (Zed, other editors). It is one more UI of the
//! core: the agent loop pushes its ACP `session/update`s and its calls
//! (`session/request_permission`, `fs/*`) on an [`EventQueue`] exactly as it
//! does for Neovim; here a pump forwards the updates as notifications, the
//! calls as requests to the client, and the end of a turn as the answer to
//! `session/prompt`.
//!
//! Nothing reaches stdout but the protocol: logs go to the log file.

pub mod config;
mod forward;
pub(crate) mod memory;
mod switch_mode;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::{Agent, Client};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::guarded_lines::{GuardedLines, Line};
use crate::agent::{AgentDeps, Prompt};
use crate::events::{Event, EventQueue, StreamId};
use crate::session::{updates, Session, SessionInfo, Sessions, Stop, TurnEnd};
use crate::tools::registry::{Registry, ToolSource};
pub use config::{AcpConfig, ConfigError};

type Cx = agent_client_protocol::v1::ConnectionTo<Client>;
type Responder<T> = agent_client_protocol::v1::Responder<T>;
type RpcError = agent_client_protocol::Error;

/// The slash commands mia-acp runs itself: name, description, input hint.
const COMMANDS: [(&str, &str, Option<&str>); 4] = [
    ("compact", "summarize the conversation so far to save context", None),
    ("costs", "what this session has cost", None),
    ("tools", "the tools the model may use in this mode", None),
    ("mode", "switch mode (ask, architect, code, …)", Some("mode id")),
];

/// A `session/prompt` waiting for its turn to end.
struct Pending {
    session_id: String,
    responder: Responder<acp::PromptResponse>,
    /// The turn's share of the memory bound, given back when it ends.
    _charge: Option<memory::Charge>,
}

/// The agent's state, shared by the protocol handlers and the event pump.
pub struct Server {
    config: AcpConfig,
    deps: AgentDeps,
    rt: tokio::runtime::Handle,
    sessions: Arc<Sessions>,
    /// What this server runs with (its store, sessions, providers).
    app: Arc<crate::app::App>,
    /// Prompts in flight, by stream.
    pending: Mutex<HashMap<StreamId, Pending>>,
    /// Which session each stream (turn, `/compact`) belongs to.
    streams: Mutex<HashMap<StreamId, String>>,
    next_stream: AtomicU64,
    /// The client's `fs` capabilities (read, write), from `initialize`.
    client_fs: Mutex<(bool, bool)>,
    /// The MCP servers the client sent for a session, by session id.
    session_mcp: Mutex<HashMap<String, SessionMcp>>,
    /// `acp.max_memory_mb` and the turns charged against it.
    bound: Arc<memory::MemoryBound>,
}

/// A session's own MCP servers (`mcpServers` of `session/new` or
/// `session/load`) and the registry their tools join: each session has its
/// own, so one session's servers never show in another's tool list, and
/// their processes are kept under the session's id (see
/// [`crate::mcp::ensure_started_in`]): two sessions with different servers
/// do not stop each other's.
struct SessionMcp {
    specs: Vec<crate::mcp::McpServerSpec>,
    registry: Arc<Registry>,
}

/// mia's tools for mia-acp: the built-in ones and `switch_mode`.
fn tool_registry(sessions: &Arc<Sessions>) -> Arc<Registry> {
    let registry = Arc::new(Registry::with_builtins());
    registry.register(
        Arc::new(switch_mode::SwitchMode {
            sessions: sessions.clone(),
        }),
        ToolSource::Plugin,
    );
    registry
}

/// A message of the core, as an ACP client's user reads it: mia-acp's name,
/// and the protocol's way instead of Neovim's where the core names one.
pub(crate) fn for_client(message: &str) -> String {
    let mut text = message.replacen("mia:", "mia-acp:", 1);
    for (neovim, acp) in [
        (
            "Stop it with :Mia stop (or <C-c> in the chat) first.",
            "Cancel it first (session/cancel).",
        ),
        ("stop it with :Mia stop", "cancel it (session/cancel)"),
        ("(see :checkhealth mia)", "(see mia-acp's log file)"),
        ("the log file from :checkhealth mia", "mia-acp's log file"),
        (" (:Mia model)", ""),
    ] {
        text = text.replace(neovim, acp);
    }
    // `setup({ limits = { max_event_bytes = N } })` in mia-acp's JSON.
    const LUA: &str = "setup({ limits = { max_event_bytes = ";
    if let Some(at) = text.find(LUA) {
        let rest = &text[at + LUA.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if rest[digits..].starts_with(" } })") {
            let json = format!(
                "\"limits\": {{ \"max_event_bytes\": {} }} in mia-acp's --config file",
                &rest[..digits]
            );
            text = format!("{}{json}{}", &text[..at], &rest[digits + " } })".len()..]);
        }
    }
    text
}

fn rpc_error(code: i32, message: impl Into<String>) -> RpcError {
    RpcError::new(code, message.into())
}

fn invalid_params(message: impl Into<String>) -> RpcError {
    rpc_error(-32602, message)
}

/// A schema type from its JSON (the responses are written as the protocol
/// documents them; a mismatch is a bug reported as an internal error).
fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, RpcError> {
    serde_json::from_value(v).map_err(|e| rpc_error(-32603, format!("mia-acp: internal error: {e}")))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// ISO 8601 (UTC) for ACP's `updatedAt`.
fn iso(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

/// The text of a prompt's content blocks (resources by their text or link),
/// taken by value: a large prompt is not copied once more.
fn prompt_text(blocks: Vec<acp::ContentBlock>) -> String {
    let mut parts = Vec::new();
    for b in blocks {
        match b {
            acp::ContentBlock::Text(t) => parts.push(t.text),
            acp::ContentBlock::ResourceLink(l) => parts.push(format!("@{}", l.uri)),
            acp::ContentBlock::Resource(r) => match r.resource {
                acp::EmbeddedResourceResource::TextResourceContents(t) => {
                    parts.push(format!("<file uri=\"{}\">\n{}\n</file>", t.uri, t.text));
                }
                acp::EmbeddedResourceResource::BlobResourceContents(b) => parts.push(format!("@{}", b.uri)),
                _ => {}
            },
            _ => {}
        }
    }
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    parts.join("\n\n")
}

impl Server {
    /// The server for `config` on `app`, which must already be configured
    /// from it (providers, agent settings).
    pub fn new(
        app: Arc<crate::app::App>,
        config: AcpConfig,
        queue: Arc<EventQueue>,
        rt: tokio::runtime::Handle,
    ) -> Arc<Server> {
        let sessions = app.sessions();
        let registry = tool_registry(&sessions);
        let deps = AgentDeps {
            registry,
            // Its own calls: they are answered by this server, not by a UI.
            calls: Arc::new(crate::calls::PendingCalls::default()),
            settings: config.agent.clone(),
            ..app.agent_deps(queue)
        };
        let bound = memory::MemoryBound::new(config.max_memory_mb);
        tracing::info!(
            "mia-acp: memory bound {} MB (acp.max_memory_mb): messages up to {} MB, a turn's text up to {} MB",
            bound.limit_mb(),
            bound.message_cap() / (1024 * 1024),
            bound.turn_cap() / (1024 * 1024)
        );
        Arc::new(Server {
            bound,
            config,
            deps,
            rt,
            sessions,
            app,
            pending: Mutex::default(),
            streams: Mutex::default(),
            next_stream: AtomicU64::new(1),
            client_fs: Mutex::new((false, false)),
            session_mcp: Mutex::default(),
        })
    }

    /// What a turn of `session_id` runs with: the session's own MCP
    /// servers (after any of the configuration's) and their registry.
    fn deps_for(&self, session_id: &str) -> AgentDeps {
        let mut deps = self.deps.clone();
        if let Some(m) = lock(&self.session_mcp).get(session_id) {
            deps.registry = m.registry.clone();
            deps.settings.mcp.extend(m.specs.iter().cloned());
            deps.settings.mcp_scope = session_id.to_string();
        }
        deps
    }

    /// The client's `mcpServers` for a session in `cwd`, checked (a bad
    /// entry is an invalid-params error naming it).
    fn mcp_specs(
        servers: &[acp::McpServer],
        cwd: &std::path::Path,
    ) -> Result<Vec<crate::mcp::McpServerSpec>, RpcError> {
        super::mcp_servers::from_acp(servers, cwd).map_err(invalid_params)
    }

    /// `session_id` runs `specs` from now on. Servers it had and no longer
    /// has stop now when it has none left, else on its next turn.
    async fn set_session_mcp(&self, session_id: &str, specs: Vec<crate::mcp::McpServerSpec>) {
        let dropped = {
            let mut map = lock(&self.session_mcp);
            if specs.is_empty() {
                map.remove(session_id)
            } else {
                match map.get_mut(session_id) {
                    Some(m) => m.specs = specs,
                    None => {
                        map.insert(
                            session_id.to_string(),
                            SessionMcp {
                                specs,
                                registry: tool_registry(&self.sessions),
                            },
                        );
                    }
                }
                None
            }
        };
        if let Some(old) = dropped {
            crate::mcp::ensure_started_in(&self.app.mcp(), session_id, &old.registry, &[]).await;
        }
    }

    fn modes_json(&self, current: &str) -> Value {
        json!({
            "currentModeId": current,
            "availableModes": self.config.modes.iter().map(|m| json!({
                "id": m.id, "name": m.name, "description": m.description,
            })).collect::<Vec<_>>(),
        })
    }

    /// ACP's `available_commands_update` for `session`.
    fn commands(&self, session: &Session) -> acp::SessionUpdate {
        let commands = COMMANDS
            .iter()
            .filter(|(name, _, _)| *name != "compact" || session.has_messages())
            .map(|(name, description, hint)| {
                let mut c = json!({ "name": name, "description": description });
                if let Some(h) = hint {
                    c["input"] = json!({ "hint": h });
                }
                c
            })
            .collect::<Vec<_>>();
        serde_json::from_value(json!({ "sessionUpdate": "available_commands_update", "availableCommands": commands }))
            .unwrap_or_else(|_| updates::available_commands(session.has_messages()))
    }

    fn notify(cx: &Cx, session_id: &str, update: acp::SessionUpdate) {
        let n = acp::SessionNotification::new(session_id.to_string(), update);
        if let Err(e) = cx.send_notification(n) {
            tracing::warn!("mia-acp: cannot send an update: {e}");
        }
    }

    fn session(&self, id: &acp::SessionId) -> Result<Arc<Session>, RpcError> {
        self.sessions
            .get(&id.0)
            .ok_or_else(|| invalid_params(format!("mia-acp: no session `{}` (create or load it first)", id.0)))
    }

    async fn initialize(&self, req: acp::InitializeRequest) -> Result<acp::InitializeResponse, RpcError> {
        *lock(&self.client_fs) = (
            req.client_capabilities.fs.read_text_file,
            req.client_capabilities.fs.write_text_file,
        );
        from_json(json!({
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": { "embeddedContext": true },
                "sessionCapabilities": { "list": {} },
                "mcpCapabilities": { "http": true },
            },
            "agentInfo": { "name": "mia-acp", "title": "mia", "version": mia_log::version::VERSION },
            "authMethods": [],
        }))
    }

    async fn new_session(&self, req: acp::NewSessionRequest) -> Result<(acp::NewSessionResponse, String), RpcError> {
        if !req.cwd.is_absolute() {
            return Err(invalid_params(format!(
                "mia-acp: cwd must be an absolute path (got {})",
                req.cwd.display()
            )));
        }
        if !req.cwd.is_dir() {
            return Err(invalid_params(format!(
                "mia-acp: cwd {} is not a directory",
                req.cwd.display()
            )));
        }
        let mcp = Self::mcp_specs(&req.mcp_servers, &req.cwd)?;
        let id = crate::session::new_session_id();
        self.set_session_mcp(&id, mcp).await;
        let info = SessionInfo {
            id: id.clone(),
            cwd: req.cwd.clone(),
            title: None,
            mode: self.config.mode.clone(),
            model: self.config.model.clone(),
            agent: "mia".into(),
            created_at_ms: crate::session::now_ms(),
        };
        let store = self.app.store().await;
        self.sessions.insert(Session::new(info, store, self.app.telemetry()));
        let response = from_json(json!({ "sessionId": id, "modes": self.modes_json(&self.config.mode) }))?;
        Ok((response, id))
    }

    async fn load_session(&self, req: &acp::LoadSessionRequest, cx: &Cx) -> Result<acp::LoadSessionResponse, RpcError> {
        let id = req.session_id.0.to_string();
        let mcp = Self::mcp_specs(&req.mcp_servers, &req.cwd)?;
        let session = match self.sessions.get(&id) {
            Some(s) if s.is_running() => {
                return Err(invalid_params(format!(
                    "mia-acp: session `{id}` is answering a prompt; cancel it first"
                )))
            }
            Some(s) => s,
            None => {
                let store = self.app.store().await.ok_or_else(|| {
                    rpc_error(
                        -32603,
                        "mia-acp: sessions need the store, and it could not be opened (see the log)",
                    )
                })?;
                let s = Session::load(store, &id, self.app.telemetry())
                    .await
                    .map_err(|e| invalid_params(for_client(&e.to_string())))?;
                self.sessions.insert(s.clone());
                s
            }
        };
        self.set_session_mcp(&id, mcp).await;
        for item in session.replay() {
            match item {
                updates::ReplayItem::Update(u) => match *u {
                    acp::SessionUpdate::AvailableCommandsUpdate(_) => {}
                    u => Self::notify(cx, &id, u),
                },
                updates::ReplayItem::End(_) => {}
            }
        }
        from_json(json!({ "modes": self.modes_json(&session.info().mode) }))
    }

    async fn list_sessions(&self, req: acp::ListSessionsRequest) -> Result<acp::ListSessionsResponse, RpcError> {
        let store = self
            .app
            .store()
            .await
            .ok_or_else(|| rpc_error(-32603, "mia-acp: the session store could not be opened (see the log)"))?;
        let cwd = req.cwd.as_ref().map(|p| p.display().to_string());
        let page = store
            .list_sessions(cwd.as_deref(), req.cursor.as_deref(), self.config.page_size)
            .await
            .map_err(|e| invalid_params(format!("mia-acp: {e}")))?;
        let sessions: Vec<Value> = page
            .sessions
            .iter()
            .map(|s| {
                json!({
                    "sessionId": s.id,
                    "cwd": s.cwd,
                    "title": s.title,
                    "updatedAt": iso(s.updated_at_ms),
                    "_meta": { "mia": {
                        "messageCount": s.message_count,
                        "costUsd": s.cost_usd,
                        "mode": s.mode,
                        "model": s.model,
                        "createdAt": iso(s.created_at_ms),
                    } },
                })
            })
            .collect();
        let mut out = json!({ "sessions": sessions });
        if let Some(next) = page.next_cursor {
            out["nextCursor"] = json!(next);
        }
        from_json(out)
    }

    /// Changes the session's mode and tells the client.
    fn set_mode(&self, session: &Session, mode: &str, cx: &Cx) -> Result<(), RpcError> {
        if !self.config.modes.iter().any(|m| m.id == mode) {
            let ids: Vec<&str> = self.config.modes.iter().map(|m| m.id.as_str()).collect();
            return Err(invalid_params(format!(
                "mia-acp: no mode `{mode}`; modes: {}",
                ids.join(", ")
            )));
        }
        session.update_info(Some(mode), None, None);
        if session.has_messages() {
            let s = session.id();
            if let Some(session) = self.sessions.get(&s) {
                self.rt.spawn(async move { session.persist().await });
            }
        }
        Self::notify(cx, &session.id(), updates::current_mode(mode));
        Ok(())
    }

    /// Starts a turn in `session` whose end answers `responder`: its cancel
    /// token, the guard that keeps other turns out, and its event stream.
    /// `None` (answered with the error) when a turn is already running.
    fn begin_turn(
        &self,
        session: &Arc<Session>,
        responder: Responder<acp::PromptResponse>,
        prompt_bytes: usize,
    ) -> Option<(CancellationToken, crate::session::Turn, StreamId)> {
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let id = session.id();
        // Idle sessions' conversations count once; this one's goes with its turn.
        let idle: usize = self
            .sessions
            .all()
            .iter()
            .filter(|s| s.id() != id && !s.is_running())
            .map(|s| s.text_bytes())
            .sum();
        let charge = match self.bound.admit(stream, session.text_bytes() + prompt_bytes, idle) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("{e}");
                let _ = responder.respond_with_error(rpc_error(-32000, e));
                return None;
            }
        };
        let cancel = CancellationToken::new();
        let turn = match session.begin(cancel.clone()) {
            Ok(t) => t,
            Err(e) => {
                let _ = responder.respond_with_error(invalid_params(for_client(&e.to_string())));
                return None;
            }
        };
        lock(&self.streams).insert(stream, id.clone());
        lock(&self.pending).insert(
            stream,
            Pending {
                session_id: id,
                responder,
                _charge: Some(charge),
            },
        );
        Some((cancel, turn, stream))
    }

    fn end_turn(responder: Responder<acp::PromptResponse>, stop: &str) {
        match from_json::<acp::PromptResponse>(json!({ "stopReason": stop })) {
            Ok(r) => {
                let _ = responder.respond(r);
            }
            Err(e) => {
                let _ = responder.respond_with_error(e);
            }
        }
    }

    /// `session/prompt`: a slash command runs here; anything else starts a
    /// turn whose end answers the request (see [`Server::on_event`]).
    fn prompt(&self, req: acp::PromptRequest, responder: Responder<acp::PromptResponse>, cx: &Cx) {
        let session = match self.session(&req.session_id) {
            Ok(s) => s,
            Err(e) => {
                let _ = responder.respond_with_error(e);
                return;
            }
        };
        let text = prompt_text(req.prompt);
        if text.len() >= memory::LARGE_MESSAGE {
            self.bound.prompt_taken();
        }
        if let Some(rest) = text.trim_start().strip_prefix('/') {
            let (name, input) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            if COMMANDS.iter().any(|(n, _, _)| *n == name) {
                return self.command(&session, name.trim(), input.trim(), responder, cx);
            }
        }
        if text.trim().is_empty() {
            let _ = responder.respond_with_error(invalid_params("mia-acp: the prompt is empty"));
            return;
        }
        let Some((cancel, turn, stream)) = self.begin_turn(&session, responder, text.len()) else {
            return;
        };
        let title = session.info().title.is_none().then(|| {
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
            first.chars().take(60).collect::<String>()
        });
        let prompt = Prompt {
            content: text,
            system: Some(self.config.system.clone()),
            title,
            ..Prompt::default()
        };
        let deps = self.deps_for(&session.id());
        crate::stream_task::spawn_turn(&self.rt, deps, stream, session, turn, prompt, cancel);
    }

    /// A slash command; its answer streams as the agent's message.
    fn command(
        &self,
        session: &Arc<Session>,
        name: &str,
        input: &str,
        responder: Responder<acp::PromptResponse>,
        cx: &Cx,
    ) {
        let id = session.id();
        let say = |text: String| Self::notify(cx, &id, updates::agent_text(&text));
        match name {
            "mode" => {
                if input.is_empty() {
                    let ids: Vec<&str> = self.config.modes.iter().map(|m| m.id.as_str()).collect();
                    say(format!("Mode: {} (modes: {})", session.info().mode, ids.join(", ")));
                } else if let Err(e) = self.set_mode(session, input, cx) {
                    let _ = responder.respond_with_error(e);
                    return;
                } else {
                    say(format!("Mode: {input}"));
                }
                Self::end_turn(responder, "end_turn");
            }
            "tools" => {
                let mode = session.info().mode;
                let registry = self.deps_for(&id).registry;
                let mut tools = registry.available(&mode, &self.deps.settings.permissions);
                if let Some(only) = self.deps.settings.mode_tools.get(&mode) {
                    tools.retain(|t| only.iter().any(|n| n == t.name()));
                }
                let lines: Vec<String> = tools
                    .iter()
                    .map(|t| format!("- `{}`: {}", t.name(), t.description().lines().next().unwrap_or("")))
                    .collect();
                say(format!("Tools in {mode} mode:\n{}", lines.join("\n")));
                Self::end_turn(responder, "end_turn");
            }
            "costs" => {
                let session = session.clone();
                let cx = cx.clone();
                let id = id.clone();
                // The store is read on the runtime; the answer follows.
                let task = async move {
                    let usd = session.cost_usd().await;
                    Self::notify(
                        &cx,
                        &id,
                        updates::agent_text(&format!(
                            "This session has cost {}.",
                            crate::shared::format_usd(Some(usd))
                        )),
                    );
                    Self::end_turn(responder, "end_turn");
                };
                self.rt.spawn(task);
            }
            _ => {
                // compact
                if !session.has_messages() {
                    say("Nothing to compact: the session is empty.".into());
                    return Self::end_turn(responder, "end_turn");
                }
                let Some((cancel, turn, stream)) = self.begin_turn(session, responder, 0) else {
                    return;
                };
                let deps = self.deps_for(&id);
                let session = session.clone();
                self.rt.spawn(async move {
                    let model = session.info().model;
                    let result = crate::agent::compact_session(&deps, stream, session, cancel, turn).await;
                    let end = match result {
                        Ok(()) => TurnEnd {
                            stop: Stop::EndTurn,
                            model,
                            usage: Default::default(),
                            cost: Default::default(),
                            error: None,
                            notice: None,
                            session_cost_usd: None,
                            usage_unreported: false,
                        },
                        Err(e) => crate::agent::failed_end(&model, &e),
                    };
                    deps.queue.push(Event::End {
                        stream,
                        end: Box::new(end),
                    });
                });
            }
        }
    }
}

/// Serves ACP on stdin/stdout until the client closes stdin.
pub async fn serve(app: Arc<crate::app::App>, config: AcpConfig) -> Result<(), RpcError> {
    let rt = app
        .handle()
        .map_err(|e| rpc_error(-32603, format!("mia-acp: cannot start the runtime: {e}")))?;
    let queue = app.queue().map_err(|e| rpc_error(-32603, format!("mia-acp: {e}")))?;
    let server = Server::new(app, config, queue.clone(), rt);
    let (tx, mut rx) = mpsc::unbounded_channel();
    forward::pump(queue, tx);
    let (transport, writer) = stdio_lines(server.bound.clone());
    let s1 = server.clone();
    let s2 = server.clone();
    let s3 = server.clone();
    let s4 = server.clone();
    let s5 = server.clone();
    let s6 = server.clone();
    let s7 = server.clone();
    let s8 = server.clone();
    let served = Agent
        .v1()
        .name("mia-acp")
        .on_receive_request(
            async move |req: acp::InitializeRequest, responder: Responder<acp::InitializeResponse>, _cx: Cx| match s1
                .initialize(req)
                .await
            {
                Ok(r) => responder.respond(r),
                Err(e) => responder.respond_with_error(e),
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::NewSessionRequest, responder: Responder<acp::NewSessionResponse>, cx: Cx| match s2
                .new_session(req)
                .await
            {
                Ok((r, id)) => {
                    responder.respond(r)?;
                    if let Some(s) = s2.sessions.get(&id) {
                        Server::notify(&cx, &id, s2.commands(&s));
                    }
                    Ok(())
                }
                Err(e) => responder.respond_with_error(e),
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::LoadSessionRequest, responder: Responder<acp::LoadSessionResponse>, cx: Cx| match s3
                .load_session(&req, &cx)
                .await
            {
                Ok(r) => {
                    responder.respond(r)?;
                    if let Some(s) = s3.sessions.get(&req.session_id.0) {
                        Server::notify(&cx, &req.session_id.0, s3.commands(&s));
                    }
                    Ok(())
                }
                Err(e) => responder.respond_with_error(e),
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::ListSessionsRequest, responder: Responder<acp::ListSessionsResponse>, _cx: Cx| {
                match s4.list_sessions(req).await {
                    Ok(r) => responder.respond(r),
                    Err(e) => responder.respond_with_error(e),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::SetSessionModeRequest, responder: Responder<acp::SetSessionModeResponse>, cx: Cx| {
                let result = s5
                    .session(&req.session_id)
                    .and_then(|s| s5.set_mode(&s, &req.mode_id.0, &cx));
                match result {
                    Ok(()) => responder.respond(acp::SetSessionModeResponse::new()),
                    Err(e) => responder.respond_with_error(e),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::PromptRequest, responder: Responder<acp::PromptResponse>, cx: Cx| {
                s6.prompt(req, responder, &cx);
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: acp::AuthenticateRequest, responder: Responder<acp::AuthenticateResponse>, _cx: Cx| {
                responder.respond(acp::AuthenticateResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: acp::CancelNotification, _cx: Cx| {
                if let Some(s) = s7.sessions.get(&n.session_id.0) {
                    s.cancel();
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(transport, async move |cx: Cx| {
            loop {
                tokio::select! {
                    event = rx.recv() => match event {
                        Some(event) => s8.on_event(event, &cx),
                        None => break,
                    },
                    _ = cx.incoming_closed() => break,
                }
            }
            // The client left: stop every turn still running.
            for (_, p) in lock(&s8.pending).drain() {
                if let Some(s) = s8.sessions.get(&p.session_id) {
                    s.cancel();
                }
            }
            Ok(())
        })
        .await;
    // What is still queued for the client goes out before mia-acp ends.
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), writer).await;
    served
}

/// mia-acp's stdio as the SDK's line transport: lines from stdin checked
/// by [`GuardedLines`] (a refused request is answered here), and one writer
/// task that owns stdout, so that those answers and the SDK's messages never
/// interleave. The writer ends once both have let go of it.
fn stdio_lines(
    bound: Arc<memory::MemoryBound>,
) -> (
    agent_client_protocol::Lines<
        impl futures_util::Sink<String, Error = std::io::Error> + Send + 'static,
        impl futures_util::Stream<Item = std::io::Result<String>> + Send + 'static,
    >,
    tokio::task::JoinHandle<()>,
) {
    use tokio::io::AsyncWriteExt;
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(mut line) = out_rx.recv().await {
            line.push('\n');
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let replies = out_tx.clone();
    let max_message = bound.message_cap();
    // The large prompt passed last: the next line waits until it is handled.
    let reader = (
        GuardedLines::new(
            tokio::io::BufReader::with_capacity(1 << 16, tokio::io::stdin()),
            max_message,
        ),
        false,
    );
    let incoming = futures_util::stream::unfold(reader, move |(mut lines, mut large)| {
        let replies = replies.clone();
        let bound = bound.clone();
        async move {
            if large {
                bound.wait_taken().await;
            }
            loop {
                match lines.next().await {
                    Ok(Some(Line::Pass(text))) => {
                        large = text.len() >= memory::LARGE_MESSAGE && GuardedLines::<()>::is_prompt(&text);
                        return Some((Ok(text), (lines, large)));
                    }
                    Ok(Some(Line::Reply(text))) => {
                        let _ = replies.send(text);
                    }
                    Ok(Some(Line::Skip)) => {}
                    Ok(None) => return None,
                    Err(e) => return Some((Err(e), (lines, false))),
                }
            }
        }
    });
    let outgoing = futures_util::sink::unfold(out_tx, |tx, line: String| async move {
        tx.send(line)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "mia-acp: stdout is closed"))?;
        Ok::<_, std::io::Error>(tx)
    });
    (
        agent_client_protocol::Lines::new(Box::pin(outgoing), Box::pin(incoming)),
        writer,
    )
}

#[cfg(test)]
mod tests {
    use super::for_client;
    use crate::session::SessionError;

    #[test]
    fn core_errors_reach_acp_clients_without_neovims_commands() {
        let busy = for_client(&SessionError::Busy.to_string());
        assert!(busy.starts_with("mia-acp:"), "{busy}");
        assert!(!busy.contains(":Mia") && !busy.contains("<C-c>"), "{busy}");
        assert!(busy.contains("session/cancel"), "{busy}");
        let store = for_client(&SessionError::NoStore.to_string());
        assert!(!store.contains(":checkhealth"), "{store}");
        let big = for_client("scn: too big; raise the limit, e.g. setup({ limits = { max_event_bytes = 33554432 } }).");
        assert_eq!(
            big,
            "scn: too big; raise the limit, e.g. \"limits\": { \"max_event_bytes\": 33554432 } in mia-acp's --config file."
        );
    }
}
