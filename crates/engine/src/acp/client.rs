//! External ACP agents in mia's chat: mia is the client. Each configured
//! agent (`setup({ agents = { NAME = { command, env, cwd } } })`) runs as
//! one child process speaking ACP over its stdio through the official SDK.
//!
//! What the agent sends becomes the chat's own event stream: its
//! `session/update`s are pushed as [`Event::Update`] (so they draw like
//! mia's own agent), the answer to `session/prompt` as one [`Event::End`],
//! and its client-side requests (permission, fs, terminal) go to Neovim as
//! calls ([`crate::calls`]), answered without ever blocking the main thread.
//!
//! One [`AgentProc`] per configured name holds the live connection, if any.
//! It starts on first use (or `:Mia agent NAME`); when the process dies the
//! turn in flight ends with an error naming its last stderr lines, and the
//! next prompt starts it again.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol as sdk;
use agent_client_protocol::v1::schema as s;
use agent_client_protocol::v1::ConnectionTo;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use tokio_util::sync::CancellationToken;

use super::line_cap::{LineCap, MAX_MESSAGE_BYTES};
use crate::calls::LuaBridge;
use crate::events::{Event, MiaEvent, StreamId};
use crate::reaper::{end_group, track_group, watch_group, GroupGuard};
use crate::session::updates::TurnError;
use crate::session::{Stop, TurnEnd};
use mia_cost::{Cost, Usage};
use mia_store::{Store, UsageRow};

/// Most stderr lines kept per agent for the message shown when it dies.
const STDERR_TAIL: usize = 20;
/// Longest stderr line kept (characters); the log gets the same cut.
const STDERR_LINE: usize = 500;
/// How long starting an agent (spawn, `initialize`, `session/new`) may take.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a cancelled turn waits for the agent's answer before it ends anyway.
const CANCEL_GRACE: Duration = Duration::from_secs(10);

/// One configured agent: what `setup({ agents = { NAME = … } })` holds.
/// Its `Debug` names env variables without their values (keys live there).
#[derive(Clone, PartialEq, Deserialize, Serialize)]
pub struct AgentSpec {
    pub name: String,
    /// The program and its arguments.
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Where the process runs and the session's cwd (default: Neovim's cwd).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The MCP servers passed in `session/new` and `session/load`: the
    /// configured ones unless `agents.NAME.mcp = false`.
    #[serde(default)]
    pub mcp_servers: Vec<crate::mcp::McpServerSpec>,
}

impl std::fmt::Debug for AgentSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSpec")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("mcp_servers", &self.mcp_servers)
            .finish()
    }
}

/// What can go wrong talking to an agent, each with what to do about it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AcpClientError {
    #[error("mia: the agent `{name}` has no command; set agents.{name}.command = {{ \"program\", \"arg\", … }}")]
    NoCommand { name: String },
    #[error("mia: cannot start the agent `{name}` (`{program}`): {reason}. Check agents.{name}.command (is it installed and on $PATH?)")]
    Spawn {
        name: String,
        program: String,
        reason: String,
    },
    #[error("mia: the agent `{name}` exited ({status}){tail}")]
    Exited { name: String, status: String, tail: String },
    #[error("mia: the agent `{name}` did not start within {secs} s{tail}")]
    StartTimeout { name: String, secs: u64, tail: String },
    #[error("mia: the agent `{name}` needs you to log in: {how}")]
    AuthNeeded { name: String, how: String },
    #[error("mia: the agent `{name}` cannot load past sessions: its `initialize` does not offer `loadSession`. Start a new chat with it instead")]
    CannotLoad { name: String },
    #[error("mia: the agent `{name}` is still answering; stop it with :Mia stop before loading a session")]
    Busy { name: String },
    #[error("mia: the agent `{name}` answered `{method}` with an error: {message}")]
    Protocol {
        name: String,
        method: String,
        message: String,
    },
}

/// The stderr lines an agent wrote last, as a message suffix.
fn tail_text(lines: &VecDeque<String>) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let body: Vec<&str> = lines.iter().map(String::as_str).collect();
    format!(". Its last stderr lines:\n{}", body.join("\n"))
}

/// A running agent: its connection and the session the chat talks to in it.
pub(super) struct Live {
    pub(super) cx: ConnectionTo<sdk::Agent>,
    /// The session `session/new` opened, or the one `session/load` loaded since.
    session_id: Mutex<s::SessionId>,
    /// It offers `session/list` (`sessionCapabilities.list` in `initialize`).
    pub(super) can_list: bool,
    /// It offers `session/load` (`loadSession` in `initialize`).
    pub(super) can_load: bool,
    /// The MCP servers its sessions get (`session/new` got them, `session/load` gets them).
    pub(super) mcp_servers: Vec<s::McpServer>,
    /// Fires when the process or the connection ends.
    pub(super) died: CancellationToken,
    /// Dropping it ends the connection (and kills the process).
    _close: oneshot::Sender<()>,
}

/// How a start ended, from the connection task.
struct Ready {
    cx: ConnectionTo<sdk::Agent>,
    init: s::InitializeResponse,
    session: s::NewSessionResponse,
    /// The MCP servers sent, and those left out (why, by name).
    mcp: (Vec<s::McpServer>, Vec<String>),
}

/// One configured agent, started or not.
pub struct AgentProc {
    pub spec: AgentSpec,
    /// The app's agent settings: the user's deny rules in force apply to the agent's requests.
    pub(super) settings: crate::app::SettingsCell,
    /// What the sandbox remembers of the agent's sessions (the App's).
    pub(super) sandbox: Arc<crate::sandbox::SandboxMemory>,
    /// The app's telemetry: the agent's edits are counted there.
    pub(super) telemetry: Arc<crate::telemetry::Hub>,
    /// Where updates that arrive outside a turn go (commands, modes, status).
    pub stream: StreamId,
    pub(super) bridge: LuaBridge,
    pub(super) live: tokio::sync::Mutex<Option<Arc<Live>>>,
    /// The stream of the turn in flight (0: none).
    pub(super) turn: AtomicU64,
    /// Cancels the client-side requests of the turn in flight.
    pub(super) turn_cancel: Mutex<CancellationToken>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// How the last process ended ("exit status 1").
    exit: Arc<Mutex<Option<String>>>,
    /// The session's cumulative cost as the agent last reported it (USD).
    cost_seen: Mutex<Option<f64>>,
    /// What the agent said about itself, its modes and commands (for Lua).
    info: Mutex<Value>,
    /// While a `session/load` replays the session: the user's text so far
    /// (its chunks become one message, drawn with the agent's name).
    pub(super) replay: Mutex<Option<super::client_sessions::Replay>>,
    /// The warning about MCP servers left out was given (once per agent).
    mcp_warned: std::sync::atomic::AtomicBool,
    /// The warning about a cost past `MAX_AGENT_SESSION_USD` was given (once per agent).
    cost_warned: std::sync::atomic::AtomicBool,
    /// Edits the user approved in the agent's permission questions this
    /// turn, which its `fs/write_text_file` may land unreviewed once.
    pub(super) approved: Mutex<super::approved_writes::ApprovedWrites>,
}

impl Live {
    /// The session prompts go to.
    pub(super) fn session(&self) -> s::SessionId {
        self.session_id.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Prompts go to `id` from now on (a loaded session).
    pub(super) fn set_session(&self, id: s::SessionId) {
        *self.session_id.lock().unwrap_or_else(|p| p.into_inner()) = id;
    }
}

impl std::fmt::Debug for AgentProc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentProc").field("name", &self.spec.name).finish()
    }
}

/// An app's external agents, by name.
pub type Agents = Mutex<HashMap<String, Arc<AgentProc>>>;

/// The agent named by `spec`, created on first use. A changed spec (a new
/// `setup()`) replaces the old one, whose process ends.
pub fn agent(
    app: &crate::app::App,
    spec: &AgentSpec,
    bridge: &LuaBridge,
    new_stream: impl FnOnce() -> StreamId,
) -> Arc<AgentProc> {
    let mut map = app.agents().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(a) = map.get(&spec.name) {
        if a.spec == *spec {
            return a.clone();
        }
    }
    let a = Arc::new(AgentProc {
        spec: spec.clone(),
        settings: app.settings_cell(),
        sandbox: app.sandbox_memory(),
        telemetry: app.telemetry(),
        stream: new_stream(),
        bridge: bridge.clone(),
        live: tokio::sync::Mutex::new(None),
        turn: AtomicU64::new(0),
        turn_cancel: Mutex::new(CancellationToken::new()),
        stderr: Arc::new(Mutex::new(VecDeque::new())),
        exit: Arc::new(Mutex::new(None)),
        cost_seen: Mutex::new(None),
        info: Mutex::new(Value::Null),
        replay: Mutex::new(None),
        mcp_warned: std::sync::atomic::AtomicBool::new(false),
        cost_warned: std::sync::atomic::AtomicBool::new(false),
        approved: Mutex::default(),
    });
    map.insert(spec.name.clone(), a.clone());
    a
}

/// The agent called `name`, if it was ever used.
pub fn existing(app: &crate::app::App, name: &str) -> Option<Arc<AgentProc>> {
    app.agents()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
        .cloned()
}

/// Ends every agent process (Neovim exits, or the agents were reconfigured).
pub fn stop_all(app: &crate::app::App) {
    app.agents().lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// One prompt of the chat to an agent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AgentPrompt {
    pub content: String,
    /// The chat's session id, which its usage rows are recorded under.
    pub session_id: Option<String>,
    pub utc_offset_s: i32,
}

/// What a turn needs besides the agent: the store and the budgets.
pub struct TurnDeps {
    pub store: Option<Arc<Store>>,
    /// The app's spend in memory, for when the store cannot be read.
    pub ledger: Arc<mia_cost::ledger::Ledger>,
    pub budgets: mia_cost::budget::BudgetConfig,
}

pub(super) fn mia_meta(value: Value) -> s::Meta {
    let mut m = s::Meta::new();
    m.insert("mia".into(), value);
    m
}

impl AgentProc {
    pub(super) fn push(&self, stream: StreamId, update: s::SessionUpdate) {
        self.bridge.queue.push(Event::Update {
            stream,
            update: Box::new(update),
        });
    }

    fn status(&self, stream: StreamId, text: String) {
        self.bridge.queue.push(Event::Mia {
            stream,
            event: MiaEvent::Status { text },
        });
    }

    /// The stream client-side requests and updates belong to now.
    pub(super) fn current_stream(&self) -> StreamId {
        match self.turn.load(Ordering::SeqCst) {
            0 => self.stream,
            t => t,
        }
    }

    /// What Lua shows of the agent: `{ agentInfo, authMethods, modes, commands }`.
    pub fn info(&self) -> Value {
        self.info.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn set_info(&self, key: &str, value: Value) {
        let mut info = self.info.lock().unwrap_or_else(|p| p.into_inner());
        if !info.is_object() {
            *info = json!({});
        }
        info[key] = value;
    }

    fn stderr_tail(&self) -> String {
        tail_text(&self.stderr.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// One `session/update` from the agent: kept where Lua asks for it
    /// (modes, commands), counted (usage), and sent to the chat.
    fn on_update(&self, update: s::SessionUpdate) {
        let mut update = update;
        match &mut update {
            s::SessionUpdate::UsageUpdate(u) => {
                if let Some(cost) = &u.cost {
                    // A negative amount would lower the day's spend and reopen
                    // a reached limit: only a finite, non-negative one counts.
                    let usd =
                        cost.currency.eq_ignore_ascii_case("USD") && cost.amount.is_finite() && cost.amount >= 0.0;
                    if usd && cost.amount <= MAX_AGENT_SESSION_USD {
                        *self.cost_seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(cost.amount);
                    } else if usd && !self.cost_warned.swap(true, Ordering::SeqCst) {
                        let text = format!(
                            "mia: the agent {} reported a session cost over ${MAX_AGENT_SESSION_USD:.0}, more than \
                             any session costs: that figure is not recorded",
                            self.spec.name
                        );
                        tracing::warn!("{text}");
                        self.bridge.queue.push(Event::Mia {
                            stream: self.current_stream(),
                            event: MiaEvent::Warning { text },
                        });
                    }
                }
            }
            s::SessionUpdate::AvailableCommandsUpdate(c) => {
                self.set_info(
                    "commands",
                    serde_json::to_value(&c.available_commands).unwrap_or(Value::Null),
                );
            }
            s::SessionUpdate::CurrentModeUpdate(m) => {
                let mut info = self.info.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(modes) = info.get_mut("modes").and_then(Value::as_object_mut) {
                    modes.insert("currentModeId".into(), json!(m.current_mode_id.to_string()));
                }
            }
            s::SessionUpdate::ConfigOptionUpdate(c) => {
                self.set_info(
                    "configOptions",
                    serde_json::to_value(&c.config_options).unwrap_or(Value::Null),
                );
            }
            _ => {}
        }
        if self.replayed(&update) {
            return;
        }
        self.push(self.current_stream(), update);
    }

    /// The live connection, started when there is none (or the last one died).
    /// Progress goes to `stream` as status lines.
    pub(super) async fn ensure(self: &Arc<Self>, stream: StreamId) -> Result<Arc<Live>, AcpClientError> {
        let mut live = self.live.lock().await;
        if let Some(l) = live.as_ref() {
            if !l.died.is_cancelled() {
                return Ok(l.clone());
            }
        }
        *live = None;
        self.status(stream, format!("⏳ starting the agent `{}`…", self.spec.name));
        let started = self.start(stream).await;
        self.status(stream, String::new());
        let l = Arc::new(started?);
        *live = Some(l.clone());
        Ok(l)
    }

    /// Starts the connection now (`:Mia agent NAME`) so the first prompt
    /// does not wait; errors go to the agent's stream as a warning.
    pub async fn connect(self: Arc<Self>) {
        if let Err(e) = self.ensure(self.stream).await {
            self.bridge.queue.push(Event::Mia {
                stream: self.stream,
                event: MiaEvent::Warning { text: e.to_string() },
            });
        }
    }

    /// Ends the agent's process, if any.
    pub async fn stop(&self) {
        *self.live.lock().await = None;
    }

    async fn start(self: &Arc<Self>, _stream: StreamId) -> Result<Live, AcpClientError> {
        let name = self.spec.name.clone();
        let Some((program, args)) = self.spec.command.split_first() else {
            return Err(AcpClientError::NoCommand { name });
        };
        let cwd = match &self.spec.cwd {
            Some(c) => c.clone(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        };
        self.stderr.lock().unwrap_or_else(|p| p.into_inner()).clear();
        *self.exit.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let mut cmd = tokio::process::Command::new(program);
        // Provider keys only when the agent's config passes them (mia_llm::secret_env).
        for name in mia_llm::secret_env::hidden_from(|n| self.spec.env.contains_key(n)) {
            cmd.env_remove(name);
        }
        cmd.args(args)
            .envs(&self.spec.env)
            .current_dir(&cwd)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let watched = watch_group(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| AcpClientError::Spawn {
            name: name.clone(),
            program: program.clone(),
            reason: e.to_string(),
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(AcpClientError::Spawn {
                name,
                program: program.clone(),
                reason: "its stdio could not be connected".into(),
            });
        };
        let tail = self.stderr.clone();
        let who = name.clone();
        let stderr_done = tokio::spawn(super::line_cap::read_cut_lines(stderr, STDERR_LINE, move |line| {
            tracing::info!(agent = %who, "agent stderr: {line}");
            let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
            if t.len() == STDERR_TAIL {
                t.pop_front();
            }
            t.push_back(line);
        }));
        let died = CancellationToken::new();
        let (ready_tx, ready_rx) = oneshot::channel::<Result<Ready, AcpClientError>>();
        let (close_tx, close_rx) = oneshot::channel::<()>();
        let me = self.clone();
        let exit = self.exit.clone();
        let died2 = died.clone();
        let session_cwd = cwd.clone();
        let group = track_group(child.id(), watched);
        tokio::spawn(async move {
            let conn = me.clone().connection(stdin, stdout, session_cwd, ready_tx, close_rx);
            let unasked: bool;
            let status = tokio::select! {
                r = conn => {
                    match r {
                        Ok(asked) => unasked = !asked,
                        Err(e) => {
                            unasked = true;
                            tracing::info!(agent = %me.spec.name, "agent connection ended: {e}");
                        }
                    }
                    let _ = child.start_kill();
                    match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
                        Ok(Ok(s)) => s.to_string(),
                        _ => "stopped".to_string(),
                    }
                }
                s = child.wait() => {
                    unasked = true;
                    match s {
                        Ok(s) => s.to_string(),
                        Err(e) => e.to_string(),
                    }
                }
            };
            end_group(group);
            // Its last stderr lines belong in the message: let them arrive (bounded).
            let _ = tokio::time::timeout(Duration::from_secs(2), stderr_done).await;
            tracing::info!(agent = %me.spec.name, "agent process ended: {status}");
            // A reason mia gave already (a message over the limit) says more than the signal mia sent.
            exit.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(status);
            died2.cancel();
            // Dying between turns (a turn in flight says so in its own end):
            // the user hears it now, and the next prompt starts it again.
            if unasked && me.turn.load(Ordering::SeqCst) == 0 {
                me.bridge.queue.push(Event::Mia {
                    stream: me.stream,
                    event: MiaEvent::Warning {
                        text: format!("{} The next prompt starts it again.", me.exited_error()),
                    },
                });
            }
        });
        let ready = tokio::select! {
            r = ready_rx => r.ok(),
            _ = tokio::time::sleep(START_TIMEOUT) => {
                return Err(AcpClientError::StartTimeout {
                    name,
                    secs: START_TIMEOUT.as_secs(),
                    tail: self.stderr_tail(),
                });
            }
        };
        let ready = match ready {
            Some(Ok(r)) => r,
            Some(Err(e)) => return Err(e),
            None => {
                // The connection ended before it was ready: the process died.
                let _ = tokio::time::timeout(Duration::from_secs(2), died.cancelled()).await;
                return Err(self.exited_error());
            }
        };
        self.set_info(
            "agentInfo",
            serde_json::to_value(&ready.init.agent_info).unwrap_or(Value::Null),
        );
        self.set_info(
            "authMethods",
            serde_json::to_value(&ready.init.auth_methods).unwrap_or(Value::Null),
        );
        self.set_info(
            "modes",
            serde_json::to_value(&ready.session.modes).unwrap_or(Value::Null),
        );
        self.set_info(
            "configOptions",
            serde_json::to_value(&ready.session.config_options).unwrap_or(Value::Null),
        );
        let can_list = ready.init.agent_capabilities.session_capabilities.list.is_some();
        let can_load = ready.init.agent_capabilities.load_session;
        self.set_info(
            "capabilities",
            json!({ "listSessions": can_list, "loadSession": can_load }),
        );
        *self.cost_seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let (mcp_servers, left_out) = ready.mcp;
        if !left_out.is_empty() && !self.mcp_warned.swap(true, Ordering::SeqCst) {
            self.bridge.queue.push(Event::Mia {
                stream: self.stream,
                event: MiaEvent::Warning {
                    text: super::mcp_servers::left_out_warning(&self.spec.name, &left_out),
                },
            });
        }
        Ok(Live {
            cx: ready.cx,
            session_id: Mutex::new(ready.session.session_id),
            can_list,
            can_load,
            mcp_servers,
            died,
            _close: close_tx,
        })
    }

    pub(super) fn exited_error(&self) -> AcpClientError {
        let status = self
            .exit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| "its connection closed".into());
        AcpClientError::Exited {
            name: self.spec.name.clone(),
            status,
            tail: self.stderr_tail(),
        }
    }

    /// Runs the ACP connection over the process's stdio until `close` fires
    /// or the agent goes away. Sends the handshake's outcome on `ready`.
    /// `Ok(true)`: mia ended it; otherwise the agent went away.
    async fn connection(
        self: Arc<Self>,
        stdin: tokio::process::ChildStdin,
        stdout: tokio::process::ChildStdout,
        cwd: PathBuf,
        ready: oneshot::Sender<Result<Ready, AcpClientError>>,
        close: oneshot::Receiver<()>,
    ) -> Result<bool, sdk::Error> {
        let stdout = LineCap::new(stdout, MAX_MESSAGE_BYTES, Some(self.exit.clone()));
        let transport = sdk::ByteStreams::new(stdin.compat_write(), stdout.compat());
        let name = self.spec.name.clone();
        let mcp = self.spec.mcp_servers.clone();
        let (p1, p2, p3, p4, p5, p6, p7, p8, p9) = (
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
        );
        // Requests that wait for the user or a process run in their own task:
        // a handler holds the connection's dispatch loop while it runs.
        macro_rules! forward {
            ($p:ident, $req:ty, $method:ident) => {
                async move |r: $req, responder, _cx| {
                    let p = $p.clone();
                    tokio::spawn(async move {
                        let out = p.$method(r).await;
                        let _ = responder.respond_with_result(out);
                    });
                    Ok(())
                }
            };
        }
        sdk::Client
            .v1()
            .name("mia")
            .on_receive_notification(
                async move |n: s::SessionNotification, _cx| {
                    p1.on_update(n.update);
                    Ok(())
                },
                sdk::on_receive_notification!(),
            )
            .on_receive_request(
                forward!(p2, s::RequestPermissionRequest, permission),
                sdk::on_receive_request!(),
            )
            .on_receive_request(
                forward!(p3, s::ReadTextFileRequest, read_text_file),
                sdk::on_receive_request!(),
            )
            .on_receive_request(
                forward!(p4, s::WriteTextFileRequest, write_text_file),
                sdk::on_receive_request!(),
            )
            .on_receive_request(
                forward!(p5, s::CreateTerminalRequest, terminal_create),
                sdk::on_receive_request!(),
            )
            .on_receive_request(
                forward!(p6, s::TerminalOutputRequest, terminal_output),
                sdk::on_receive_request!(),
            )
            .on_receive_request(
                forward!(p7, s::WaitForTerminalExitRequest, terminal_wait),
                sdk::on_receive_request!(),
            )
            .on_receive_request(
                forward!(p8, s::KillTerminalRequest, terminal_kill),
                sdk::on_receive_request!(),
            )
            .on_receive_request(
                forward!(p9, s::ReleaseTerminalRequest, terminal_release),
                sdk::on_receive_request!(),
            )
            .connect_with(transport, async move |cx: ConnectionTo<sdk::Agent>| {
                let outcome = handshake(&cx, &name, cwd, &mcp).await;
                let ok = outcome.is_ok();
                let _ = ready.send(outcome.map(|(init, session, mcp)| Ready {
                    cx: cx.clone(),
                    init,
                    session,
                    mcp,
                }));
                if ok {
                    let _ = close.await;
                }
                // Ended from our side: mia closed it, or the handshake failed (reported already).
                Ok(true)
            })
            .await
    }

    /// One prompt turn: the user's text, the agent's updates, and always one
    /// `End` event (also when the agent dies or the user cancels).
    pub async fn prompt(
        self: Arc<Self>,
        deps: TurnDeps,
        stream: StreamId,
        prompt: AgentPrompt,
        cancel: CancellationToken,
    ) {
        let started_ms = crate::agent::record::now_ms();
        let mut user = s::ContentChunk::new(s::ContentBlock::Text(s::TextContent::new(prompt.content.clone())));
        user.meta = Some(mia_meta(json!({ "model": self.spec.name, "agent": self.spec.name })));
        self.push(stream, s::SessionUpdate::UserMessageChunk(user));
        let end = self.run_turn(&deps, stream, &prompt, &cancel, started_ms).await;
        self.turn.store(0, Ordering::SeqCst);
        self.approved.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.bridge.queue.push(Event::End {
            stream,
            end: Box::new(end),
        });
    }

    fn end(&self, stop: Stop, error: Option<TurnError>) -> TurnEnd {
        TurnEnd {
            stop,
            model: self.spec.name.clone(),
            usage: Usage::default(),
            cost: Cost::default(),
            error,
            notice: None,
            session_cost_usd: None,
            usage_unreported: false,
        }
    }

    fn error_end(&self, class: &str, message: String) -> TurnEnd {
        self.end(
            Stop::Error,
            Some(TurnError {
                class: class.into(),
                message,
            }),
        )
    }

    async fn run_turn(
        self: &Arc<Self>,
        deps: &TurnDeps,
        stream: StreamId,
        prompt: &AgentPrompt,
        cancel: &CancellationToken,
        started_ms: i64,
    ) -> TurnEnd {
        let session = prompt.session_id.clone().unwrap_or_default();
        let (day_start, day_end) = crate::agent::record::local_day(started_ms, prompt.utc_offset_s);
        // Without a limit every turn proceeds: the spend is not needed.
        if deps.budgets.has_limit() {
            let (spend, _) =
                crate::agent::record::spend_now(deps.store.as_deref(), &deps.ledger, &session, day_start, day_end)
                    .await;
            let gate = crate::agent::record::gate_spend(
                &deps.budgets,
                spend,
                &self.bridge.calls,
                &self.bridge.queue,
                stream,
                cancel,
            )
            .await;
            if let Err(e) = gate {
                if cancel.is_cancelled() {
                    return self.end(Stop::Cancelled, None);
                }
                return self.error_end("budget_exceeded", e.message);
            }
        }
        let live = tokio::select! {
            l = self.ensure(stream) => l,
            _ = cancel.cancelled() => return self.end(Stop::Cancelled, None),
        };
        let live = match live {
            Ok(l) => l,
            Err(e) => return self.error_end("agent", e.to_string()),
        };
        let turn_cancel = CancellationToken::new();
        *self.turn_cancel.lock().unwrap_or_else(|p| p.into_inner()) = turn_cancel.clone();
        self.turn.store(stream, Ordering::SeqCst);
        let cost_before = *self.cost_seen.lock().unwrap_or_else(|p| p.into_inner());
        let request = s::PromptRequest::new(
            live.session(),
            vec![s::ContentBlock::Text(s::TextContent::new(prompt.content.clone()))],
        );
        let answer = live.cx.send_request(request).block_task();
        tokio::pin!(answer);
        let mut cancelled = false;
        let grace = tokio::time::sleep(Duration::from_secs(u64::MAX / 4));
        tokio::pin!(grace);
        let outcome = loop {
            tokio::select! {
                r = &mut answer => break Some(r),
                _ = cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    // Pending questions end as `cancelled`, then the agent is told.
                    turn_cancel.cancel();
                    let _ = live.cx.send_notification(s::CancelNotification::new(live.session()));
                    grace.as_mut().reset(tokio::time::Instant::now() + CANCEL_GRACE);
                }
                _ = &mut grace, if cancelled => break None,
                _ = live.died.cancelled() => {
                    // Let the exit status arrive, then say what happened.
                    break Some(Err(sdk::Error::internal_error()));
                }
            }
        };
        turn_cancel.cancel();
        let response = match outcome {
            None => return self.end(Stop::Cancelled, None),
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                if live.died.is_cancelled()
                    || tokio::time::timeout(Duration::from_millis(300), live.died.cancelled())
                        .await
                        .is_ok()
                {
                    return self.error_end(
                        "agent_exited",
                        format!("{} Send a prompt again to restart it.", self.exited_error()),
                    );
                }
                if cancelled {
                    return self.end(Stop::Cancelled, None);
                }
                return self.error_end(
                    "agent",
                    AcpClientError::Protocol {
                        name: self.spec.name.clone(),
                        method: "session/prompt".into(),
                        message: e.message.clone(),
                    }
                    .to_string(),
                );
            }
        };
        let stop = match response.stop_reason {
            s::StopReason::EndTurn => Stop::EndTurn,
            s::StopReason::MaxTokens => Stop::MaxTokens,
            s::StopReason::MaxTurnRequests => Stop::MaxTurnRequests,
            s::StopReason::Refusal => Stop::Refusal,
            s::StopReason::Cancelled => Stop::Cancelled,
            _ => Stop::EndTurn,
        };
        let mut end = self.end(if cancelled { Stop::Cancelled } else { stop }, None);
        // No token counts in the answer (Gemini CLI keeps its own in
        // `_meta.quota`, not read: its slash commands answer zeros there that
        // were never measured): the footer says so instead of showing zeros.
        end.usage_unreported = response.usage.is_none();
        if let Some(u) = &response.usage {
            end.usage = Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cache_read_tokens: u.cached_read_tokens.unwrap_or(0),
                cache_write_tokens: u.cached_write_tokens.unwrap_or(0),
                reasoning_tokens: u.thought_tokens.unwrap_or(0),
                estimated: false,
            };
        }
        let cost_after = *self.cost_seen.lock().unwrap_or_else(|p| p.into_inner());
        let turn_cost = turn_cost(cost_before, cost_after);
        if let Some(usd) = turn_cost {
            end.cost = Cost {
                known: true,
                total_usd: Some(usd),
                ..Cost::default()
            };
        }
        if response.usage.is_some() || turn_cost.is_some() {
            self.record(deps, &session, &end, started_ms, prompt.utc_offset_s, stream)
                .await;
        }
        end
    }

    /// One usage row for the turn, under the agent's name; warns when a budget
    /// warning threshold is crossed.
    async fn record(
        &self,
        deps: &TurnDeps,
        session: &str,
        end: &TurnEnd,
        started_ms: i64,
        utc_offset_s: i32,
        stream: StreamId,
    ) {
        let store = deps.store.as_deref();
        let (day_start, day_end) = crate::agent::record::local_day(started_ms, utc_offset_s);
        // The spend before and after the row tells which warning the turn
        // crossed; with no warning set nothing reads it.
        let before = if deps.budgets.has_warning() {
            let (spend, _) = crate::agent::record::spend_now(store, &deps.ledger, session, day_start, day_end).await;
            Some(spend)
        } else {
            None
        };
        let now = crate::agent::record::now_ms();
        let row = UsageRow {
            session_id: (!session.is_empty()).then(|| session.to_string()),
            message_id: None,
            agent: self.spec.name.clone(),
            provider: self.spec.name.clone(),
            model: self.spec.name.clone(),
            input_tokens: end.usage.input_tokens,
            output_tokens: end.usage.output_tokens,
            cache_read_tokens: end.usage.cache_read_tokens,
            cache_write_tokens: end.usage.cache_write_tokens,
            reasoning_tokens: end.usage.reasoning_tokens,
            estimated: false,
            cost_known: end.cost.known,
            total_usd: end.cost.total_usd.unwrap_or(0.0),
            started_at_ms: started_ms,
            duration_ms: now - started_ms,
            created_at_ms: now,
            retries: 0,
            ..UsageRow::default()
        };
        crate::agent::record::record_usage(store, &deps.ledger, row).await;
        let Some(b) = before else { return };
        let (a, _) = crate::agent::record::spend_now(store, &deps.ledger, session, day_start, day_end).await;
        for w in mia_cost::budget::crossed_warnings(&deps.budgets, b, a) {
            self.bridge.queue.push(Event::Mia {
                stream,
                event: MiaEvent::Warning { text: w.message },
            });
        }
    }

    /// `session/set_mode` in the agent's session.
    pub async fn set_mode(self: Arc<Self>, mode: String) -> Result<(), AcpClientError> {
        let live = self.ensure(self.stream).await?;
        let req = s::SetSessionModeRequest::new(live.session(), mode.clone());
        live.cx
            .send_request(req)
            .block_task()
            .await
            .map_err(|e| AcpClientError::Protocol {
                name: self.spec.name.clone(),
                method: "session/set_mode".into(),
                message: e.message,
            })?;
        let mut info = self.info.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(modes) = info.get_mut("modes").and_then(Value::as_object_mut) {
            modes.insert("currentModeId".into(), json!(mode));
        }
        Ok(())
    }
}

/// The most an agent's session may say it has cost (USD). A larger figure
/// is a fault or an attack, not a bill: recorded, it would keep every
/// budget refusing for the day, and a few such rows overflow the reports'
/// sums to infinity.
const MAX_AGENT_SESSION_USD: f64 = 1_000_000.0;

/// The turn's cost from the session's cumulative cost before and after it.
/// An agent whose figure goes down reports per answer: take it as is.
fn turn_cost(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    let after = after?;
    match before {
        Some(b) if after >= b => Some(after - b),
        _ => Some(after),
    }
}

/// `initialize` then `session/new` (with the MCP servers the agent can
/// take: HTTP ones only when it offers `mcpCapabilities.http`); an agent
/// that needs a login gets `authenticate` when it offers exactly one method
/// mia can use. Answers the MCP servers sent and those left out.
async fn handshake(
    cx: &ConnectionTo<sdk::Agent>,
    name: &str,
    cwd: PathBuf,
    mcp: &[crate::mcp::McpServerSpec],
) -> Result<(s::InitializeResponse, s::NewSessionResponse, McpSent), AcpClientError> {
    let protocol = |method: &str, e: sdk::Error| AcpClientError::Protocol {
        name: name.to_string(),
        method: method.to_string(),
        message: e.message,
    };
    let init: s::InitializeRequest =
        serde_json::from_value(initialize_params()).map_err(|e| AcpClientError::Protocol {
            name: name.to_string(),
            method: "initialize".into(),
            message: e.to_string(),
        })?;
    let init = cx
        .send_request(init)
        .block_task()
        .await
        .map_err(|e| protocol("initialize", e))?;
    let (servers, left_out) = super::mcp_servers::to_acp(mcp, init.agent_capabilities.mcp_capabilities.http);
    let new_session = || {
        cx.send_request(s::NewSessionRequest::new(cwd.clone()).mcp_servers(servers.clone()))
            .block_task()
    };
    let session = match new_session().await {
        Ok(s) => s,
        Err(e) if i32::from(e.code) == i32::from(sdk::Error::auth_required().code) => {
            let usable: Vec<&s::AuthMethodAgent> = init
                .auth_methods
                .iter()
                .filter_map(|m| match m {
                    s::AuthMethod::Agent(a) => Some(a),
                    _ => None,
                })
                .collect();
            let names: Vec<String> = init.auth_methods.iter().map(auth_method_text).collect();
            if usable.len() != 1 {
                return Err(AcpClientError::AuthNeeded {
                    name: name.to_string(),
                    how: if names.is_empty() {
                        format!(
                            "it lists no login method ({}); log in with the agent's own CLI first",
                            e.message
                        )
                    } else {
                        format!(
                            "it offers {}; log in with the agent's own CLI (or set its API key in agents.{name}.env)",
                            names.join(", ")
                        )
                    },
                });
            }
            cx.send_request(s::AuthenticateRequest::new(usable[0].id.clone()))
                .block_task()
                .await
                .map_err(|e| AcpClientError::AuthNeeded {
                    name: name.to_string(),
                    how: format!("`authenticate` with {} failed: {}", names.join(", "), e.message),
                })?;
            new_session().await.map_err(|e| protocol("session/new", e))?
        }
        Err(e) => return Err(protocol("session/new", e)),
    };
    Ok((init, session, (servers, left_out)))
}

/// The MCP servers a `session/new` carried, and those left out (why, by name).
type McpSent = (Vec<s::McpServer>, Vec<String>);

fn auth_method_text(m: &s::AuthMethod) -> String {
    let v = serde_json::to_value(m).unwrap_or(Value::Null);
    let name = v.get("name").and_then(Value::as_str).unwrap_or("?");
    let id = v.get("id").and_then(Value::as_str).unwrap_or("?");
    match v.get("description").and_then(Value::as_str) {
        Some(d) => format!("`{id}` ({name}: {d})"),
        None => format!("`{id}` ({name})"),
    }
}

/// What mia offers in `initialize`: file reads and writes through the
/// editor, and terminals.
fn initialize_params() -> Value {
    json!({
        "protocolVersion": 1,
        "clientCapabilities": {
            "fs": { "readTextFile": true, "writeTextFile": true },
            "terminal": true,
        },
        "clientInfo": { "name": "mia", "title": "mia (Neovim)", "version": mia_log::version::VERSION },
    })
}

/// `:checkhealth mia`: starts the agent, runs `initialize`, and reports what
/// it said (`agentInfo`, `protocolVersion`, `authMethods`), within `timeout`.
pub async fn probe(spec: AgentSpec, timeout: Duration) -> Result<Value, AcpClientError> {
    let name = spec.name.clone();
    let Some((program, args)) = spec.command.split_first() else {
        return Err(AcpClientError::NoCommand { name });
    };
    let mut cmd = tokio::process::Command::new(program);
    for name in mia_llm::secret_env::hidden_from(|n| spec.env.contains_key(n)) {
        cmd.env_remove(name);
    }
    cmd.args(args)
        .envs(&spec.env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    let watched = watch_group(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| AcpClientError::Spawn {
        name: name.clone(),
        program: program.clone(),
        reason: e.to_string(),
    })?;
    let _group = GroupGuard(track_group(child.id(), watched));
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(AcpClientError::Spawn {
            name,
            program: program.clone(),
            reason: "its stdio could not be connected".into(),
        });
    };
    let stdout = LineCap::new(stdout, MAX_MESSAGE_BYTES, None);
    let transport = sdk::ByteStreams::new(stdin.compat_write(), stdout.compat());
    let init: s::InitializeRequest =
        serde_json::from_value(initialize_params()).map_err(|e| AcpClientError::Protocol {
            name: name.clone(),
            method: "initialize".into(),
            message: e.to_string(),
        })?;
    let run = sdk::Client
        .v1()
        .name("mia")
        .connect_with(transport, async move |cx: ConnectionTo<sdk::Agent>| {
            cx.send_request(init).block_task().await
        });
    let outcome = tokio::select! {
        r = run => r,
        s = child.wait() => {
            return Err(AcpClientError::Exited {
                name,
                status: s.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()),
                tail: String::new(),
            });
        }
        _ = tokio::time::sleep(timeout) => {
            return Err(AcpClientError::StartTimeout { name, secs: timeout.as_secs(), tail: String::new() });
        }
    };
    let _ = child.start_kill();
    let init = outcome.map_err(|e| AcpClientError::Protocol {
        name: name.clone(),
        method: "initialize".into(),
        message: e.message,
    })?;
    Ok(json!({
        "name": name,
        "agentInfo": init.agent_info,
        "protocolVersion": init.protocol_version,
        "authMethods": init.auth_methods.iter().map(auth_method_text).collect::<Vec<_>>(),
        "loadSession": init.agent_capabilities.load_session,
        "listSessions": init.agent_capabilities.session_capabilities.list.is_some(),
        "mcpHttp": init.agent_capabilities.mcp_capabilities.http,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cumulative_cost_gives_the_turn_its_difference_and_a_per_answer_cost_is_taken_as_is() {
        assert_eq!(turn_cost(None, None), None);
        assert_eq!(turn_cost(None, Some(0.5)), Some(0.5));
        assert_eq!(turn_cost(Some(0.5), Some(0.75)), Some(0.25));
        assert_eq!(turn_cost(Some(0.5), Some(0.1)), Some(0.1));
    }

    #[test]
    fn the_stderr_tail_is_named_in_the_message_only_when_there_is_one() {
        let mut lines = VecDeque::new();
        assert_eq!(tail_text(&lines), "");
        lines.push_back("boom".to_string());
        assert_eq!(tail_text(&lines), ". Its last stderr lines:\nboom");
    }

    #[test]
    fn debug_output_names_env_variables_but_never_their_values() {
        let spec = AgentSpec {
            name: "g".into(),
            command: vec!["gemini".into()],
            env: [("GEMINI_API_KEY".to_string(), "sk-secret-value".to_string())].into(),
            cwd: None,
            mcp_servers: vec![serde_json::from_value(json!({
                "name": "fs", "command": ["srv"], "env": { "TOKEN": "sk-secret-value" },
            }))
            .expect("spec")],
        };
        let shown = format!("{spec:?}");
        assert!(
            shown.contains("GEMINI_API_KEY") && !shown.contains("sk-secret-value"),
            "{shown}"
        );
        let mcp: crate::mcp::McpServerSpec = serde_json::from_value(json!({
            "name": "remote", "url": "https://example.test/mcp",
            "headers": { "Authorization": "Bearer sk-secret-value" },
            "env": { "TOKEN": "sk-secret-value" },
        }))
        .expect("spec");
        let shown = format!("{mcp:?}");
        assert!(
            shown.contains("Authorization") && !shown.contains("sk-secret-value"),
            "{shown}"
        );
    }

    #[test]
    fn initialize_offers_fs_and_terminal_in_the_schema_shape() {
        let init: s::InitializeRequest = serde_json::from_value(initialize_params()).unwrap();
        assert!(init.client_capabilities.fs.read_text_file);
        assert!(init.client_capabilities.fs.write_text_file);
        assert!(init.client_capabilities.terminal);
    }
}
