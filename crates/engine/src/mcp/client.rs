//! The one file that speaks to the `rmcp` crate (the official MCP SDK):
//! connecting to a server (a child process over stdio, or streamable HTTP),
//! `tools/list`, `tools/call` with its progress and cancellation, and the
//! server's `notifications/tools/list_changed`. Everything it hands back is
//! mia's own plain types or JSON, so an upgrade of the SDK touches this
//! file only.

use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam, ClientNotification,
    ClientRequest, ProgressNotificationParam, ProgressToken, RequestId, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{McpServerSpec, McpToolDef};

/// Lines of a server's stderr kept for error messages.
const STDERR_LINES: usize = 20;
/// Longest stderr line kept (bytes).
const STDERR_LINE_BYTES: usize = 500;

/// Most `tools/list` pages read from one server.
const MAX_TOOL_PAGES: usize = 20;
/// Most tools taken from one server.
const MAX_TOOLS: usize = 1000;
/// Longest message mia reads from a stdio MCP server: a tool result past
/// it could never reach a model whole (tool output is cut far shorter).
const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// Longest progress message passed on (bytes).
const PROGRESS_MESSAGE_BYTES: usize = 200;
/// Least time between two progress reports of one call passed on: a server
/// that floods them does not flood the chat.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// One `notifications/progress` of a running call, as mia shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// Where a call's progress goes.
pub type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// A call's sink, when it last passed a report on, and the newest report
/// held back since.
struct Listener {
    sink: ProgressSink,
    last: Option<Instant>,
    waiting: Option<Progress>,
}

/// Most tokens whose reports are kept before a call claims them.
const EARLY_TOKENS: usize = 16;
/// Longest token (as JSON) whose reports are kept before a call claims them.
const EARLY_TOKEN_BYTES: usize = 64;

/// The progress of the calls in flight, by token. A server may report
/// before its call is registered here: it can answer the request at once,
/// and the SDK hands the report over while `call_tool` still awaits the
/// request's sending. Such a report (the newest per token) is kept and
/// passed on when its call registers. Tokens nobody registers (one mia
/// never handed out, a call that ended) go with the oldest, beyond
/// [`EARLY_TOKENS`].
#[derive(Default)]
struct Progresses {
    calls: HashMap<String, Listener>,
    early: VecDeque<(String, Progress)>,
}

impl Progresses {
    /// Registers the sink of call `key`; returns the report that came
    /// before it, if one did (to pass on now).
    fn register(&mut self, key: String, sink: ProgressSink, now: Instant) -> Option<Progress> {
        let early = self
            .early
            .iter()
            .position(|(k, _)| *k == key)
            .and_then(|i| self.early.remove(i))
            .map(|(_, report)| report);
        let last = early.as_ref().map(|_| now);
        self.calls.insert(
            key,
            Listener {
                sink,
                last,
                waiting: None,
            },
        );
        early
    }

    /// Keeps `report` of a token no call has registered (yet). The SDK's
    /// tokens are numbers: a long one is none of mia's, and is not kept.
    fn keep_early(&mut self, key: String, report: Progress) {
        if key.len() > EARLY_TOKEN_BYTES {
            return;
        }
        if let Some(entry) = self.early.iter_mut().find(|(k, _)| *k == key) {
            entry.1 = report;
            return;
        }
        if self.early.len() == EARLY_TOKENS {
            self.early.pop_front();
        }
        self.early.push_back((key, report));
    }
}

/// What the SDK calls on a server's notifications: progress goes to the
/// call it names; a changed tool list wakes [`McpClient::tools_changed`].
struct Handler {
    progress: Arc<Mutex<Progresses>>,
    tools_changed: Arc<Notify>,
}

impl Drop for Handler {
    /// The connection is gone: whoever follows the tool list wakes and
    /// finds it closed (no task waits forever on a dead server).
    fn drop(&mut self) {
        self.tools_changed.notify_one();
    }
}

fn token_key(t: &ProgressToken) -> String {
    serde_json::to_string(t).unwrap_or_default()
}

impl ClientHandler for Handler {
    async fn on_progress(&self, params: ProgressNotificationParam, _: NotificationContext<RoleClient>) {
        let message = params.message.map(|mut m| {
            m = m.replace(['\n', '\r'], " ");
            super::cut(&mut m, PROGRESS_MESSAGE_BYTES);
            m
        });
        let finite = |v: f64| v.is_finite().then_some(v);
        let report = Progress {
            progress: finite(params.progress).unwrap_or(0.0),
            total: params.total.and_then(finite),
            message,
        };
        let key = token_key(&params.progress_token);
        let now = Instant::now();
        let (sink, now_report, wait) = {
            let mut progresses = self.progress.lock().unwrap_or_else(|p| p.into_inner());
            // A token no call registered: kept, in case its call is about to.
            let Some(l) = progresses.calls.get_mut(&key) else {
                progresses.keep_early(key, report);
                return;
            };
            match l.last {
                // Too soon after the last one: the newest waits, and is
                // passed on when the time has come (unless a newer one is).
                Some(t) if now.duration_since(t) < PROGRESS_EVERY => {
                    let first_waiting = l.waiting.replace(report).is_none();
                    if !first_waiting {
                        return;
                    }
                    (l.sink.clone(), None, Some(PROGRESS_EVERY - now.duration_since(t)))
                }
                _ => {
                    l.last = Some(now);
                    (l.sink.clone(), Some(report), None)
                }
            }
        };
        if let Some(report) = now_report {
            sink(report);
        }
        let Some(wait) = wait else { return };
        let shared = self.progress.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let waiting = {
                let mut progresses = shared.lock().unwrap_or_else(|p| p.into_inner());
                let Some(l) = progresses.calls.get_mut(&key) else {
                    return;
                };
                l.last = Some(Instant::now());
                l.waiting.take()
            };
            if let Some(report) = waiting {
                sink(report);
            }
        });
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }
}

/// Sends `notifications/cancelled` for a request still open when dropped
/// (the user stopped the turn, or the call timed out), and forgets its
/// progress sink.
struct OpenRequest {
    peer: rmcp::service::Peer<RoleClient>,
    id: Option<RequestId>,
    token: String,
    progress: Arc<Mutex<Progresses>>,
    reason: &'static str,
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.progress
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .calls
            .remove(&self.token);
        let Some(id) = self.id.take() else { return };
        let notification =
            CancelledNotification::new(CancelledNotificationParam::new(Some(id), Some(self.reason.to_string())));
        let peer = self.peer.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let sent = peer.send_notification(ClientNotification::CancelledNotification(notification));
                let _ = tokio::time::timeout(Duration::from_secs(2), sent).await;
            });
        }
    }
}

/// A connected MCP server.
pub struct McpClient {
    name: String,
    service: RunningService<RoleClient, Handler>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Fires when the server's stderr has been read to its end.
    stderr_done: CancellationToken,
    timeout: Duration,
    progress: Arc<Mutex<Progresses>>,
    tools_changed: Arc<Notify>,
    /// Why mia cut the connection (a message past [`MAX_MESSAGE_BYTES`]).
    fault: Arc<Mutex<Option<String>>>,
    /// A stdio server's process (killed when dropped) and its group, ended with the client.
    _child: Option<tokio::process::Child>,
    _group: crate::reaper::GroupGuard,
}

impl McpClient {
    /// Starts (or connects to) the server and completes MCP's handshake,
    /// within the spec's timeout.
    pub async fn connect(spec: &McpServerSpec) -> Result<McpClient, String> {
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_done = CancellationToken::new();
        let timeout = Duration::from_millis(spec.timeout_ms);
        let progress: Arc<Mutex<Progresses>> = Arc::default();
        let tools_changed = Arc::new(Notify::new());
        let handler = || Handler {
            progress: progress.clone(),
            tools_changed: tools_changed.clone(),
        };
        let mut group = crate::reaper::GroupGuard(None);
        let mut child: Option<tokio::process::Child> = None;
        let fault: Arc<Mutex<Option<String>>> = Arc::default();
        let service = if let Some(url) = &spec.url {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let mut config =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
            for (k, v) in &spec.headers {
                let name =
                    reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header `{k}`: {e}"))?;
                let value = reqwest::header::HeaderValue::from_str(v).map_err(|e| format!("header `{k}`: {e}"))?;
                config.custom_headers.insert(name, value);
            }
            let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                mia_llm::tls::client_builder()
                    .build()
                    .map_err(|e| format!("cannot create an HTTP client: {e}"))?,
                config,
            );
            tokio::time::timeout(timeout, handler().serve(transport))
                .await
                .map_err(|_| format!("no answer to MCP's initialize within {} ms", spec.timeout_ms))?
                .map_err(|e| format!("cannot connect to {url}: {e}"))?
        } else {
            let Some((program, args)) = spec.command.split_first() else {
                return Err("no command".into());
            };
            let mut cmd = match &spec.sandbox {
                None => {
                    let mut cmd = tokio::process::Command::new(program);
                    cmd.args(args);
                    cmd
                }
                Some(sandbox) => sandboxed(spec, sandbox, program, args).await?,
            };
            // A group of its own: `npx` and the like start the server as
            // their child, and the whole group ends with the client, or with
            // Neovim however it ends.
            cmd.envs(&spec.env).kill_on_drop(true).process_group(0);
            // Provider keys only when the server's config passes them (mia_llm::secret_env).
            for name in mia_llm::secret_env::hidden_from(|n| spec.env.contains_key(n)) {
                cmd.env_remove(name);
            }
            if let Some(cwd) = &spec.cwd {
                cmd.current_dir(cwd);
            }
            let watched = crate::reaper::watch_group(&mut cmd);
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut spawned = cmd.spawn().map_err(|e| format!("cannot start `{program}`: {e}"))?;
            group = crate::reaper::GroupGuard(crate::reaper::track_group(spawned.id(), watched));
            let (Some(stdin), Some(stdout)) = (spawned.stdin.take(), spawned.stdout.take()) else {
                return Err(format!("cannot start `{program}`: its stdin or stdout is missing"));
            };
            let err = spawned.stderr.take();
            child = Some(spawned);
            // A message past the bound ends the connection at once, and says why,
            // instead of being buffered and parsed whole (the call then waited
            // its whole timeout for an answer that never came).
            let transport = (
                crate::acp::line_cap::LineCap::new(stdout, MAX_MESSAGE_BYTES, Some(fault.clone())),
                stdin,
            );
            if let Some(err) = err {
                let keep = stderr.clone();
                let done = stderr_done.clone();
                tokio::spawn(async move {
                    // Lines are cut as they are read: one that never ends is not buffered.
                    crate::acp::line_cap::read_cut_lines(err, STDERR_LINE_BYTES, |line| {
                        let mut q = keep.lock().unwrap_or_else(|p| p.into_inner());
                        if q.len() == STDERR_LINES {
                            q.pop_front();
                        }
                        q.push_back(line);
                    })
                    .await;
                    done.cancel();
                });
            } else {
                stderr_done.cancel();
            }
            let started = tokio::time::timeout(timeout, handler().serve(transport)).await;
            let tail = tail_of(&stderr);
            started
                .map_err(|_| format!("no answer to MCP's initialize within {} ms{tail}", spec.timeout_ms))?
                .map_err(|e| format!("the MCP handshake failed: {e}{tail}"))?
        };
        Ok(McpClient {
            name: spec.name.clone(),
            service,
            stderr,
            stderr_done,
            timeout,
            progress,
            tools_changed,
            fault,
            _child: child,
            _group: group,
        })
    }

    /// Wakes once for every `notifications/tools/list_changed` (a burst
    /// may wake it once).
    pub fn tools_changed(&self) -> Arc<Notify> {
        self.tools_changed.clone()
    }

    /// The server's tools (`tools/list`, every page).
    pub async fn list_tools(&self) -> Result<Vec<McpToolDef>, String> {
        let tools = tokio::time::timeout(self.timeout, self.bounded_tool_pages())
            .await
            .map_err(|_| format!("tools/list got no answer within {} ms", self.timeout.as_millis()))?
            .map_err(|e| e.to_string());
        let tools = match tools {
            Ok(t) => t,
            Err(e) => return Err(self.failure("tools/list", e).await),
        };
        Ok(tools
            .iter()
            .filter_map(|t| serde_json::to_value(t).ok())
            .filter_map(|v| McpToolDef::from_json(&v))
            .collect())
    }

    /// Every page of `tools/list`, following `nextCursor` for at most
    /// [`MAX_TOOL_PAGES`] pages and [`MAX_TOOLS`] tools: a server that pages
    /// without end (or lists without end) is cut there, not followed.
    async fn bounded_tool_pages(&self) -> Result<Vec<rmcp::model::Tool>, rmcp::ServiceError> {
        let mut tools = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
            let page = self.service.peer().list_tools(Some(params)).await?;
            tools.extend(page.tools);
            cursor = page.next_cursor;
            if cursor.is_none() || tools.len() >= MAX_TOOLS {
                break;
            }
        }
        if cursor.is_some() || tools.len() > MAX_TOOLS {
            tracing::warn!("MCP server `{}` lists more tools than mia takes ({MAX_TOOLS} in {MAX_TOOL_PAGES} pages); the rest are left out", self.name);
        }
        tools.truncate(MAX_TOOLS);
        Ok(tools)
    }

    /// Calls tool `name` (the server's own name) with `args`; the answer is
    /// the result as JSON (`content`, `structuredContent`, `isError`). The
    /// server's progress reports go to `progress`. Dropping the future
    /// before the answer (the user stopped the turn) or running out of time
    /// sends the server `notifications/cancelled`.
    pub async fn call_tool(
        &self,
        name: &str,
        args: Value,
        timeout: Duration,
        progress: Option<ProgressSink>,
    ) -> Result<Value, String> {
        let mut params = CallToolRequestParams::new(name.to_string());
        params.arguments = match args {
            Value::Object(m) => Some(m),
            Value::Null => None,
            other => return Err(format!("arguments must be an object, got {other}")),
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let peer = self.service.peer();
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| e.to_string());
        let handle = match handle {
            Ok(h) => h,
            Err(e) => return Err(self.failure("tools/call", e).await),
        };
        let mut open = OpenRequest {
            peer: peer.clone(),
            id: Some(handle.id.clone()),
            token: token_key(&handle.progress_token),
            progress: self.progress.clone(),
            reason: "stopped by the user",
        };
        if let Some(sink) = progress {
            let early = self.progress.lock().unwrap_or_else(|p| p.into_inner()).register(
                open.token.clone(),
                sink.clone(),
                Instant::now(),
            );
            if let Some(report) = early {
                sink(report);
            }
        }
        let answer = tokio::time::timeout(timeout, handle.await_response()).await;
        let result = match answer {
            Err(_) => {
                open.reason = "timed out";
                return Err(format!("no answer within {} ms", timeout.as_millis()));
            }
            Ok(r) => {
                open.id = None;
                r.map_err(|e| e.to_string())
            }
        };
        drop(open);
        let result = match result {
            Ok(ServerResult::CallToolResult(r)) => r,
            // A result without content (an empty `{}`) is an empty success.
            Ok(ServerResult::EmptyResult(_)) => return Ok(serde_json::json!({ "content": [] })),
            Ok(_) => {
                return Err(format!(
                    "MCP server `{}` answered tools/call with something else than a tool result",
                    self.name
                ))
            }
            Err(e) => return Err(self.failure("tools/call", e).await),
        };
        serde_json::to_value(result).map_err(|e| e.to_string())
    }

    /// True once the connection is gone (the process exited).
    pub fn is_closed(&self) -> bool {
        self.service.is_transport_closed()
    }

    /// The error for a failed request; when the server has gone, its last
    /// stderr lines belong in it: let them arrive (bounded).
    async fn failure(&self, what: &str, e: String) -> String {
        // A server that is going may not be marked closed yet: a short wait then.
        let wait = if self.is_closed() { 2000 } else { 300 };
        let _ = tokio::time::timeout(Duration::from_millis(wait), self.stderr_done.cancelled()).await;
        let fault = self.fault.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(fault) = fault {
            let text = format!(
                "MCP server `{}`: {what} failed: the server was {fault}; it is started again on its next use",
                self.name
            );
            tracing::warn!("{text}");
            return text;
        }
        format!(
            "MCP server `{}`: {what} failed: {e}{}",
            self.name,
            tail_of(&self.stderr)
        )
    }

    /// Whether the server said (in its handshake) that it has resources,
    /// and prompts: a server that did not is never asked for them.
    pub fn offers(&self) -> (bool, bool) {
        match self.service.peer().peer_info() {
            Some(info) => (
                info.capabilities.resources.is_some(),
                info.capabilities.prompts.is_some(),
            ),
            None => (false, false),
        }
    }

    /// The server's resources (`resources/list`, at most [`super::catalog::MAX_PAGES`]
    /// pages and [`super::catalog::MAX_ITEMS`] resources), within the spec's timeout.
    pub async fn list_resources(&self) -> Result<Vec<super::catalog::McpResourceDef>, String> {
        let pages = async {
            let mut out = Vec::new();
            let mut cursor = None;
            for _ in 0..super::catalog::MAX_PAGES {
                let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
                let page = self.service.peer().list_resources(Some(params)).await?;
                out.extend(page.resources.iter().filter_map(|r| serde_json::to_value(r).ok()));
                cursor = page.next_cursor;
                if cursor.is_none() || out.len() >= super::catalog::MAX_ITEMS {
                    break;
                }
            }
            Ok::<_, rmcp::ServiceError>(out)
        };
        let values = self.bounded("resources/list", pages).await?;
        Ok(values
            .iter()
            .filter_map(super::catalog::McpResourceDef::from_json)
            .take(super::catalog::MAX_ITEMS)
            .collect())
    }

    /// The server's prompts (`prompts/list`, bounded as resources are).
    pub async fn list_prompts(&self) -> Result<Vec<super::catalog::McpPromptDef>, String> {
        let pages = async {
            let mut out = Vec::new();
            let mut cursor = None;
            for _ in 0..super::catalog::MAX_PAGES {
                let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
                let page = self.service.peer().list_prompts(Some(params)).await?;
                out.extend(page.prompts.iter().filter_map(|p| serde_json::to_value(p).ok()));
                cursor = page.next_cursor;
                if cursor.is_none() || out.len() >= super::catalog::MAX_ITEMS {
                    break;
                }
            }
            Ok::<_, rmcp::ServiceError>(out)
        };
        let values = self.bounded("prompts/list", pages).await?;
        Ok(values
            .iter()
            .filter_map(super::catalog::McpPromptDef::from_json)
            .take(super::catalog::MAX_ITEMS)
            .collect())
    }

    /// `resources/read` of `uri`: its `contents` as JSON (each with `uri`,
    /// `mimeType`, and `text` or `blob`).
    pub async fn read_resource(&self, uri: &str) -> Result<Vec<Value>, String> {
        let params = rmcp::model::ReadResourceRequestParams::new(uri);
        let result = self
            .bounded("resources/read", self.service.peer().read_resource(params))
            .await?;
        Ok(result
            .contents
            .iter()
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect())
    }

    /// `prompts/get` of `name` with `args`: its `messages` as JSON (each
    /// with `role` and one `content` block).
    pub async fn get_prompt(&self, name: &str, args: serde_json::Map<String, Value>) -> Result<Vec<Value>, String> {
        let params = rmcp::model::GetPromptRequestParams::new(name).with_arguments(args);
        let answer = self
            .bounded("prompts/get", self.service.peer().get_prompt_once(params))
            .await?;
        match answer {
            rmcp::model::GetPromptResponse::Complete(result) => Ok(result
                .messages
                .iter()
                .filter_map(|m| serde_json::to_value(m).ok())
                .collect()),
            _ => Err(format!(
                "MCP server `{}`: prompt `{name}` asks for more input, which mia does not support",
                self.name
            )),
        }
    }

    /// Ends the connection: a child process is asked to exit (its stdin
    /// closed, then SIGTERM, then killed) and waited for, at most `wait`.
    pub async fn shut_down(&self, wait: Duration) {
        self.service.cancellation_token().cancel();
        let _ = tokio::time::timeout(wait, async {
            while !self.is_closed() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            self.stderr_done.cancelled().await;
        })
        .await;
    }

    /// Runs one request within the spec's timeout; its error names it.
    async fn bounded<T>(
        &self,
        what: &str,
        work: impl std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, String> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.failure(what, e.to_string()).await),
            Err(_) => Err(format!(
                "MCP server `{}`: {what} got no answer within {} ms",
                self.name,
                self.timeout.as_millis()
            )),
        }
    }
}

/// The last stderr lines, as a suffix for an error message.
fn tail_of(stderr: &Mutex<VecDeque<String>>) -> String {
    let q = stderr.lock().unwrap_or_else(|p| p.into_inner());
    let last: Vec<&str> = q.iter().rev().take(5).map(String::as_str).collect();
    if last.is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = last.into_iter().rev().collect();
        format!("; its last stderr lines:\n{}", lines.join("\n"))
    }
}

/// The server's command under the sandbox's supervisor; an error (naming
/// what is missing) where the sandbox cannot run: a server that asked for
/// it never runs unconfined.
async fn sandboxed(
    spec: &super::McpServerSpec,
    sandbox: &super::McpSandbox,
    program: &str,
    args: &[String],
) -> Result<tokio::process::Command, String> {
    let setup = crate::sandbox::SandboxSetup {
        config: crate::sandbox::SandboxConfig {
            mode: crate::sandbox::SandboxMode::On,
            ..Default::default()
        },
        data_dir: sandbox.data_dir.clone(),
        rule_denied: Vec::new(),
        rule_hidden: None,
        session_id: format!("mcp-{}", spec.name),
        // A server runs as long as its client: each start has its own
        // temporary directory and memory of denied inodes.
        memory: Default::default(),
    };
    let root = match &spec.cwd {
        Some(c) => c.clone(),
        None => std::env::current_dir().map_err(|e| format!("no working directory to sandbox it in: {e}"))?,
    };
    let plan = tokio::task::spawn_blocking(move || crate::sandbox::plan(&setup, &root, 1_000))
        .await
        .map_err(|e| e.to_string())?;
    match plan {
        crate::sandbox::Plan::Confined { helper, policy, tmp } => {
            let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
            let (program, all) = policy.command_line(&helper, program.as_ref(), &args);
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(all).env("TMPDIR", tmp);
            Ok(cmd)
        }
        crate::sandbox::Plan::Refused(why) => Err(format!("it asks for the sandbox (sandbox = true), and {why}")),
        crate::sandbox::Plan::Unconfined { note } => Err(format!(
            "it asks for the sandbox (sandbox = true), which cannot run here: {}",
            note.unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(n: f64) -> Progress {
        Progress {
            progress: n,
            total: Some(4.0),
            message: None,
        }
    }

    fn sink() -> ProgressSink {
        Arc::new(|_| {})
    }

    #[test]
    fn a_report_that_comes_before_its_call_registers_is_passed_on_when_it_does() {
        let mut p = Progresses::default();
        let now = Instant::now();
        // The server reported twice, and with a token nobody hands out, before the call registered.
        p.keep_early("1".into(), report(1.0));
        p.keep_early("\"not-mine\"".into(), report(99.0));
        p.keep_early("1".into(), report(2.0));
        assert_eq!(p.register("1".into(), sink(), now), Some(report(2.0)));
        // Passed on now: the next report of the call waits its turn.
        assert_eq!(p.calls["1"].last, Some(now));
        // Claimed once; another call gets nothing of it.
        assert_eq!(p.register("2".into(), sink(), now), None);
        assert_eq!(p.calls["2"].last, None);
        assert_eq!(p.early.len(), 1);
    }

    #[test]
    fn reports_nobody_claims_are_bounded() {
        let mut p = Progresses::default();
        for i in 0..10 * EARLY_TOKENS {
            p.keep_early(i.to_string(), report(i as f64));
        }
        assert_eq!(p.early.len(), EARLY_TOKENS);
        // The oldest went first: the newest tokens are still claimable.
        let newest = 10 * EARLY_TOKENS - 1;
        assert_eq!(
            p.register(newest.to_string(), sink(), Instant::now()),
            Some(report(newest as f64))
        );
        assert_eq!(p.register("0".into(), sink(), Instant::now()), None);
        // A token longer than any of mia's is not kept at all.
        let long = format!("\"{}\"", "x".repeat(EARLY_TOKEN_BYTES));
        p.keep_early(long.clone(), report(1.0));
        assert!(p.early.iter().all(|(k, _)| *k != long));
    }
}
