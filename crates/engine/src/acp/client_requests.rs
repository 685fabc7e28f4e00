//! What an external agent asks of mia (ACP's client-side methods), answered
//! through Neovim: permission through mia's permission UI, file reads from
//! the buffers the user sees, file writes through mia's diff review
//! ([`crate::tools::landing`]), and terminals as Neovim terminal buffers.
//! Every answer comes back as a call ([`crate::calls`]); nothing waits on
//! the main thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_client_protocol as sdk;
use agent_client_protocol::v1::schema as s;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::approved_writes::Approval;
use super::client::AgentProc;
use super::permission_diff;
use crate::calls::CallError;
use crate::tools::{landing, paths, AgentInfo, ToolContext, ToolOutput};
use mia_proto::reply::{PermissionReply, ReadReply, Reply};
use mia_proto::EditorCall;

/// How long a question may wait for the user.
const ASK_WAIT: Duration = Duration::from_secs(3600);
/// How long a buffer read or a terminal operation waits for Neovim.
const EDITOR_WAIT: Duration = Duration::from_secs(10);
/// Longest a `terminal/wait_for_exit` waits (the agent cancels sooner).
const EXIT_WAIT: Duration = Duration::from_secs(24 * 3600);
/// Largest file `fs/read_text_file` reads from disk.
const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;

fn error(message: impl Into<String>) -> sdk::Error {
    let mut e = sdk::Error::internal_error();
    e.message = message.into();
    e
}

fn invalid(message: impl Into<String>) -> sdk::Error {
    let mut e = sdk::Error::invalid_params();
    e.message = message.into();
    e
}

impl AgentProc {
    fn root(&self) -> PathBuf {
        match &self.spec.cwd {
            Some(c) => c.clone(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        }
    }

    /// The physical path of `path` if it lies in the agent's project (as for
    /// mia's own file tools).
    fn confined(&self, path: &Path) -> Result<PathBuf, sdk::Error> {
        paths::resolve_in_root(&self.root(), &path.to_string_lossy()).map_err(|e| invalid(e.to_string()))
    }

    /// [`Self::confined`], then the user's deny rules for mia's own `tool`
    /// (`read_file` or `write_file`; rules limited to a mode do not apply to
    /// an external agent): a denied path is refused, whatever its spelling.
    fn allowed(&self, path: &Path, tool: &str) -> Result<PathBuf, sdk::Error> {
        let physical = self.confined(path)?;
        let root = self.root();
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        let rel = physical
            .strip_prefix(&root)
            .unwrap_or(&physical)
            .to_string_lossy()
            .to_string();
        let hidden = crate::app::settings_in(&self.settings)
            .permissions
            .hidden_paths("", tool);
        if hidden(&rel) {
            return Err(invalid(format!(
                "mia: `{rel}` is denied by a permission rule for {tool}; agents in mia's chat cannot reach it either"
            )));
        }
        Ok(physical)
    }

    async fn lua(&self, request: EditorCall, wait: Duration) -> Result<Value, CallError> {
        let cancel = self.turn_cancel.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match self.bridge.call(self.current_stream(), request, wait, &cancel).await? {
            Ok(v) => Ok(v),
            Err(message) => Ok(json!({ "_error": message })),
        }
    }

    /// A Lua answer as the typed response, or the error Lua gave.
    async fn lua_typed<T: DeserializeOwned>(&self, request: EditorCall, wait: Duration) -> Result<T, sdk::Error> {
        let kind = request.kind();
        let v = self
            .lua(request, wait)
            .await
            .map_err(|e| error(format!("{kind}: {e}")))?;
        if let Some(message) = v.get("_error").and_then(Value::as_str) {
            return Err(error(message.to_string()));
        }
        // An empty Lua table crosses as a list: the empty answers are objects.
        let v = match v {
            Value::Null => json!({}),
            Value::Array(a) if a.is_empty() => json!({}),
            v => v,
        };
        serde_json::from_value(v).map_err(|e| error(format!("{kind}: bad answer from the editor: {e}")))
    }

    /// `session/request_permission`: the user picks one of the agent's own
    /// options (its exact `optionId` goes back); a dismissed question, a
    /// cancelled turn or an unknown answer is `cancelled`. A tool call that
    /// carries a diff is shown in mia's review, prepared by
    /// [`permission_diff::prepare`].
    pub(super) async fn permission(
        self: Arc<Self>,
        r: s::RequestPermissionRequest,
    ) -> Result<s::RequestPermissionResponse, sdk::Error> {
        let payload = serde_json::to_value(&r).map_err(|e| error(e.to_string()))?;
        // A diff goes to mia's review: bounded, and named as the user knows the file.
        let root = self.root();
        let this = self.clone();
        let diff = first_diff(&r).cloned();
        let session_id = r.session_id.to_string();
        let (mut payload, review, approval) = tokio::task::spawn_blocking(move || {
            let mut payload = payload;
            let review = permission_diff::prepare(&mut payload, &root);
            let approval = diff.and_then(|d| this.approval(&session_id, &d));
            (payload, review, approval)
        })
        .await
        .map_err(|e| error(e.to_string()))?;
        let mut mia = review.unwrap_or_default();
        mia.insert("agent".into(), json!(self.spec.name));
        payload["_meta"] = json!({ "mia": mia });
        let cancelled = s::RequestPermissionResponse::new(s::RequestPermissionOutcome::Cancelled);
        let reply = match self.lua(EditorCall::Permission(payload), ASK_WAIT).await {
            Ok(v) => PermissionReply::from_reply(v),
            Err(_) => return Ok(cancelled),
        };
        let Some(chosen) = reply.option else {
            return Ok(cancelled);
        };
        let Some(option) = r.options.iter().find(|o| *o.option_id.0 == *chosen) else {
            return Ok(cancelled);
        };
        let allowed = matches!(
            option.kind,
            s::PermissionOptionKind::AllowOnce | s::PermissionOptionKind::AllowAlways
        );
        if let (true, Some(approval)) = (allowed, approval) {
            self.approved
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .approve(approval, Instant::now());
        }
        Ok(s::RequestPermissionResponse::new(
            s::RequestPermissionOutcome::Selected(s::SelectedPermissionOutcome::new(option.option_id.clone())),
        ))
    }

    /// What approving the diff `d` in `session_id` would approve: the file
    /// resolved as [`Self::write_text_file`] resolves it, and read now.
    /// Reads the disk: call it off the runtime's worker threads.
    fn approval(&self, session_id: &str, d: &s::Diff) -> Option<Approval> {
        let path = self.confined(&d.path).ok()?;
        let on_disk = paths::read_regular(&path, MAX_READ_BYTES).ok();
        Approval::from_diff(session_id, path, d.old_text.as_deref(), &d.new_text, on_disk.as_deref())
    }

    /// `fs/read_text_file`: an open buffer's text (unsaved changes included),
    /// else the file on disk; `line` (1-based) and `limit` select lines.
    pub(super) async fn read_text_file(
        self: Arc<Self>,
        r: s::ReadTextFileRequest,
    ) -> Result<s::ReadTextFileResponse, sdk::Error> {
        let path = self.allowed(&r.path, "read_file")?;
        let payload = json!({
            "sessionId": r.session_id.to_string(),
            "path": path.display().to_string(),
            "_meta": { "mia": { "loaded": true } },
        });
        // A Lua error (`_error`) or no buffer: the disk.
        let from_buffer = match self.lua(EditorCall::ReadTextFile(payload), EDITOR_WAIT).await {
            Ok(v) => ReadReply::from_reply(v).0.map(|b| b.content),
            Err(_) => None,
        };
        let text = match from_buffer {
            Some(t) => t,
            None => {
                let p = path.clone();
                tokio::task::spawn_blocking(move || read_disk(&p))
                    .await
                    .map_err(|e| error(e.to_string()))??
            }
        };
        Ok(s::ReadTextFileResponse::new(select_lines(&text, r.line, r.limit)))
    }

    /// `fs/write_text_file`: the change goes through mia's review (the user
    /// sees the diff) and lands in the buffer or on disk; a rejection is an
    /// error whose message carries the user's reason.
    pub(super) async fn write_text_file(
        self: Arc<Self>,
        r: s::WriteTextFileRequest,
    ) -> Result<s::WriteTextFileResponse, sdk::Error> {
        let path = self.allowed(&r.path, "write_file")?;
        let root = self.root();
        let p = path.clone();
        let before = tokio::task::spawn_blocking(move || paths::read_regular(&p, MAX_READ_BYTES).ok())
            .await
            .map_err(|e| error(e.to_string()))?;
        let name = paths::display_relative(&root, &path);
        let agent = AgentInfo {
            name: self.spec.name.clone(),
            mode: String::new(),
        };
        // The exact edit the user just approved in the agent's own question is not asked again.
        let approved = self.approved.lock().unwrap_or_else(|p| p.into_inner()).take(
            &r.session_id.to_string(),
            &path,
            before.as_deref(),
            r.content.as_bytes(),
            Instant::now(),
        );
        let lua = self.bridge.clone().with_editor_fs();
        let ctx = ToolContext {
            session_id: r.session_id.to_string(),
            call_id: format!("{}-write", self.spec.name),
            abort: self.turn_cancel.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            review: !approved,
            telemetry: self.telemetry.clone(),
            ..ToolContext::new(self.current_stream(), root, agent, lua)
        };
        let proposal = landing::Proposal {
            path,
            name: name.clone(),
            before,
            after: r.content.into_bytes(),
        };
        let tool = format!("{} (write)", self.spec.name);
        let out = landing::land(&ctx, &tool, proposal, ToolOutput::ok(format!("wrote {name}"))).await;
        if out.is_error {
            return Err(error(out.content));
        }
        Ok(s::WriteTextFileResponse::new())
    }

    pub(super) async fn terminal_create(
        self: Arc<Self>,
        r: s::CreateTerminalRequest,
    ) -> Result<s::CreateTerminalResponse, sdk::Error> {
        let mut payload = serde_json::to_value(&r).map_err(|e| error(e.to_string()))?;
        let cwd = match &r.cwd {
            Some(c) => self.confined(c)?,
            None => self.root(),
        };
        payload["cwd"] = json!(cwd.display().to_string());
        self.sandboxed(&mut payload, r.session_id.to_string()).await?;
        // The terminal's command must not inherit provider keys (mia_llm::secret_env);
        // a variable the agent passes in the request's own `env` is its choice.
        payload["_meta"] = json!({ "mia": { "agent": self.spec.name, "hide_env": mia_llm::secret_env::names() } });
        self.lua_typed(EditorCall::TerminalCreate(payload), EDITOR_WAIT).await
    }

    /// Puts the terminal's command under the sandbox's supervisor, as the
    /// bash tool's (`crate::sandbox`): the project root is the agent's, the
    /// deny rules are `read_file`'s for every mode. Where mode "on" cannot
    /// sandbox, the request is refused with the reason.
    async fn sandboxed(&self, payload: &mut Value, session_id: String) -> Result<(), sdk::Error> {
        let settings = crate::app::settings_in(&self.settings);
        let patterns = settings.permissions.deny_patterns("", "read_file");
        let is_glob = |p: &String| p.contains(['*', '?', '[', '{']);
        let setup = crate::sandbox::SandboxSetup {
            config: settings.sandbox.clone(),
            data_dir: settings.data_dir.clone(),
            rule_hidden: patterns
                .iter()
                .any(is_glob)
                .then(|| settings.permissions.hidden_paths("", "read_file")),
            rule_denied: patterns.into_iter().filter(|p| !is_glob(p)).collect(),
            session_id,
            memory: self.sandbox.clone(),
        };
        let root = self.root();
        let plan = tokio::task::spawn_blocking(move || crate::sandbox::plan(&setup, &root, 1_000))
            .await
            .map_err(|e| error(e.to_string()))?;
        let (helper, policy, tmp) = match plan {
            crate::sandbox::Plan::Refused(why) => return Err(error(why)),
            crate::sandbox::Plan::Unconfined { .. } => return Ok(()),
            crate::sandbox::Plan::Confined { helper, policy, tmp } => (helper, policy, tmp),
        };
        let text = |p: &std::ffi::OsStr| {
            p.to_str().map(str::to_string).ok_or_else(|| {
                error(format!(
                    "mia: `{}` is not UTF-8, so the sandboxed terminal cannot be described to Neovim; rename it or set sandbox.mode = \"off\"",
                    p.to_string_lossy()
                ))
            })
        };
        let mut args: Vec<Value> = Vec::new();
        for a in policy.to_args() {
            args.push(json!(text(&a)?));
        }
        args.push(payload["command"].clone());
        if let Some(Value::Array(rest)) = payload.get("args") {
            args.extend(rest.iter().cloned());
        }
        payload["command"] = json!(text(helper.as_os_str())?);
        payload["args"] = Value::Array(args);
        let tmpdir = json!({ "name": "TMPDIR", "value": text(tmp.as_os_str())? });
        match payload.get_mut("env") {
            Some(Value::Array(env)) => env.push(tmpdir),
            _ => payload["env"] = json!([tmpdir]),
        }
        Ok(())
    }

    pub(super) async fn terminal_output(
        self: Arc<Self>,
        r: s::TerminalOutputRequest,
    ) -> Result<s::TerminalOutputResponse, sdk::Error> {
        let payload = serde_json::to_value(&r).map_err(|e| error(e.to_string()))?;
        self.lua_typed(EditorCall::TerminalOutput(payload), EDITOR_WAIT).await
    }

    pub(super) async fn terminal_wait(
        self: Arc<Self>,
        r: s::WaitForTerminalExitRequest,
    ) -> Result<s::WaitForTerminalExitResponse, sdk::Error> {
        let payload = serde_json::to_value(&r).map_err(|e| error(e.to_string()))?;
        self.lua_typed(EditorCall::TerminalWaitForExit(payload), EXIT_WAIT)
            .await
    }

    pub(super) async fn terminal_kill(
        self: Arc<Self>,
        r: s::KillTerminalRequest,
    ) -> Result<s::KillTerminalResponse, sdk::Error> {
        let payload = serde_json::to_value(&r).map_err(|e| error(e.to_string()))?;
        self.lua_typed(EditorCall::TerminalKill(payload), EDITOR_WAIT).await
    }

    pub(super) async fn terminal_release(
        self: Arc<Self>,
        r: s::ReleaseTerminalRequest,
    ) -> Result<s::ReleaseTerminalResponse, sdk::Error> {
        let payload = serde_json::to_value(&r).map_err(|e| error(e.to_string()))?;
        self.lua_typed(EditorCall::TerminalRelease(payload), EDITOR_WAIT).await
    }
}

/// The diff a permission question shows: its tool call's first.
fn first_diff(r: &s::RequestPermissionRequest) -> Option<&s::Diff> {
    r.tool_call.fields.content.iter().flatten().find_map(|c| match c {
        s::ToolCallContent::Diff(d) => Some(d),
        _ => None,
    })
}

fn read_disk(path: &Path) -> Result<String, sdk::Error> {
    // Only a regular file, opened without blocking: a pipe would hold the agent's request forever.
    let (file, len) = paths::open_regular(path).map_err(|e| match e.kind() {
        // ACP's "resource not found": the agent can tell a missing file (one
        // it may create) from a failure.
        std::io::ErrorKind::NotFound => sdk::Error::new(
            sdk::ErrorCode::RESOURCE_NOT_FOUND,
            format!("Resource not found: {}", path.display()),
        )
        .data(json!({ "uri": path.display().to_string() })),
        _ => error(format!("cannot read {}: {e}", path.display())),
    })?;
    if len > MAX_READ_BYTES {
        return Err(error(format!(
            "{} is larger than {} MB; read it with line and limit",
            path.display(),
            MAX_READ_BYTES / (1024 * 1024)
        )));
    }
    let mut bytes = Vec::new();
    use std::io::Read;
    file.take(MAX_READ_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| error(format!("cannot read {}: {e}", path.display())))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Lines `line..line+limit` (1-based `line`) of `text`, each with its newline.
fn select_lines(text: &str, line: Option<u32>, limit: Option<u32>) -> String {
    if line.is_none() && limit.is_none() {
        return text.to_string();
    }
    let start = line.unwrap_or(1).max(1) as usize - 1;
    let take = limit.map(|l| l as usize).unwrap_or(usize::MAX);
    text.split_inclusive('\n').skip(start).take(take).collect()
}

#[cfg(test)]
mod tests {
    use super::select_lines;

    #[test]
    fn line_and_limit_select_whole_lines_counted_from_one() {
        let text = "a\nb\nc\nd";
        assert_eq!(select_lines(text, None, None), text);
        assert_eq!(select_lines(text, Some(2), Some(2)), "b\nc\n");
        assert_eq!(select_lines(text, Some(3), None), "c\nd");
        assert_eq!(select_lines(text, None, Some(1)), "a\n");
        assert_eq!(select_lines(text, Some(0), Some(1)), "a\n");
        assert_eq!(select_lines(text, Some(9), Some(1)), "");
    }
}
