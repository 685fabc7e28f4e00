//! Tools the model can call: the [`Tool`] contract, the per-invocation
//! [`ToolContext`], the registry, argument validation and permissions.
//! Built-in tools live in `builtin/`; tools written in Lua are registered
//! through `nvim/` and run on Neovim's main thread. [`direct`] runs one tool
//! without a model (`mia_core.run_tool`).
//!
//! Dependencies: `tools` → `calls` (a [`ToolContext`] carries the
//! [`LuaBridge`] its calls into Neovim go through) and `llm` (the
//! conversation snapshot). Nothing here reaches for the runtime's
//! globals: whoever runs a tool hands it what it needs. Errors of this layer
//! are [`ToolError`]; they reach the model as a [`ToolOutput`] through
//! `From`.

pub mod builtin;
pub mod control_files;
pub mod direct;
pub mod landing;
pub mod lua_tool;
pub mod paths;
pub mod permissions;
pub mod registry;
pub mod schema;
pub mod shell;

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::calls::LuaBridge;

/// Why the tools layer could not do what it was asked. A tool that ran and
/// failed is not one of these: that is a [`ToolOutput`] with `is_error`,
/// which goes to the model as it is.
///
/// Every message is written for the model (it goes back to it as the tool
/// result through [`ToolOutput::from`]) and for the user who reads it in the
/// chat.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    NotFound(#[from] registry::ToolNotFound),
    /// The arguments do not match the tool's JSON Schema ([`schema::validate`]).
    #[error("{0}")]
    InvalidArguments(String),
    /// The tool's own parameter schema is not a valid JSON Schema.
    #[error("{0}")]
    InvalidSchema(String),
    /// A Lua tool's subject function failed or answered something that is
    /// not a subject ([`lua_tool::dynamic_subject`]).
    #[error("{0}")]
    Subject(String),
    /// The call's path cannot be used (outside the root through a link, unresolvable...).
    #[error(transparent)]
    Path(#[from] paths::PathError),
    /// A permission rule in `setup()` that cannot be used (reaches the user
    /// through `configure_agent`'s configuration error).
    #[error(transparent)]
    InvalidRule(#[from] permissions::InvalidRule),
}

impl From<ToolError> for ToolOutput {
    /// The error as the tool result the model sees.
    fn from(e: ToolError) -> Self {
        ToolOutput::error(e.to_string())
    }
}

/// What running a tool may do to the world; permission rules key on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolEffect {
    /// Only reads (files, buffers, diagnostics).
    Read,
    /// Changes files or buffers.
    Write,
    /// Runs a command.
    Execute,
}

/// What one tool call acts on, as permission rules see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolSubject {
    /// A file or directory path, relative to the project root or absolute.
    Path(String),
    /// A shell command line.
    Command(String),
    /// Anything else, matched by rules exactly as written.
    Text(String),
}

impl ToolSubject {
    /// The text as the tool received it (for questions and messages).
    pub fn as_str(&self) -> &str {
        match self {
            ToolSubject::Path(s) | ToolSubject::Command(s) | ToolSubject::Text(s) => s,
        }
    }
}

/// What a tool does with a path outside the project that no rule allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutsidePolicy {
    /// Refuse it (built-in file tools).
    #[default]
    Refuse,
    /// Ask the user (the editor tools: a buffer the user opened elsewhere).
    Ask,
}

/// Who the tool is running for.
#[derive(Debug, Clone, Serialize)]
pub struct AgentInfo {
    pub name: String,
    pub mode: String,
}

/// Limits the built-in tools respect.
#[derive(Debug, Clone, Copy)]
pub struct ToolLimits {
    /// Largest file `read_file` returns whole (bigger files need a line range).
    pub max_read_bytes: u64,
    /// Most bytes of command output or search results returned to the model.
    pub output_cap_bytes: usize,
    /// Default timeout of a `bash` command.
    pub bash_timeout_ms: u64,
    /// Time a command gets between SIGTERM and SIGKILL of its process group.
    pub kill_grace_ms: u64,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            max_read_bytes: 256 * 1024,
            output_cap_bytes: 32 * 1024,
            bash_timeout_ms: 120_000,
            kill_grace_ms: 2_000,
        }
    }
}

/// Everything one invocation of a tool may use. Created per call, dropped after.
#[derive(Clone)]
pub struct ToolContext {
    /// The stream (agent run) this call belongs to; its events go there.
    pub stream: u64,
    pub session_id: String,
    pub message_id: String,
    pub call_id: String,
    pub agent: AgentInfo,
    /// The project root: file tools refuse paths outside it.
    pub root: PathBuf,
    /// Fires when the user stops the answer; tools should return what they have.
    pub abort: CancellationToken,
    pub limits: ToolLimits,
    /// A path outside the project that a rule allowed for this call (the
    /// physical path); file tools reach it and nothing else outside.
    pub outside_allowed: Option<PathBuf>,
    /// The call's path subject in canonical form, when the tool has one.
    pub subject: Option<paths::CanonicalPath>,
    /// True for a path (relative to the root) that a deny rule hides from
    /// this tool; directory walks skip such entries.
    pub hidden: Option<PathFilter>,
    /// Reports progress or a summary for the chat (e.g. `{ "summary": "wrote 4.1 KB to a.rs" }`).
    pub metadata: Arc<dyn Fn(Value) + Send + Sync>,
    /// A read-only snapshot of the conversation up to this call.
    pub conversation: Arc<Vec<mia_llm::message::Message>>,
    /// Where calls into Neovim go (Lua tools, [`ToolContext::ask`]).
    pub lua: LuaBridge,
    /// Where this call's edits land (agent runs): the session's file
    /// ledger and the turn's checkpoint ([`landing`]).
    pub edits: Option<Arc<landing::EditScope>>,
    /// True when this call's edit is shown to the user before it lands.
    pub review: bool,
    /// Called when the user accepted the reviewed edit, before it lands: a
    /// reviewed call is pending until then and in progress from then on.
    pub on_accepted: Option<Arc<dyn Fn() + Send + Sync>>,
    /// The permissions in effect for this tool in this mode
    /// ([`permissions::PermissionConfig::effective`]); null outside a turn.
    pub permissions: Value,
    /// Where edit decisions are counted (off by default).
    pub telemetry: Arc<crate::telemetry::Hub>,
    /// How commands this call runs are sandboxed (`crate::sandbox`); `None`
    /// (calls outside a model's turn: scripts, `run_tool`): not at all.
    pub sandbox: Option<crate::sandbox::SharedSetup>,
}

impl ToolContext {
    /// A context for a call outside any chat turn (a script, a test, a
    /// bench, an external agent's request): no session or message, the
    /// default limits, no review; set what differs with `..`.
    pub fn new(stream: u64, root: PathBuf, agent: AgentInfo, lua: LuaBridge) -> Self {
        ToolContext {
            stream,
            session_id: String::new(),
            message_id: String::new(),
            call_id: String::new(),
            agent,
            root,
            abort: CancellationToken::new(),
            limits: ToolLimits::default(),
            outside_allowed: None,
            subject: None,
            hidden: None,
            metadata: Arc::new(|_| {}),
            conversation: Arc::new(Vec::new()),
            lua,
            edits: None,
            review: false,
            on_accepted: None,
            permissions: Value::Null,
            telemetry: Arc::default(),
            sandbox: None,
        }
    }
}

/// Replaces `path` with `content` atomically (a temporary file renamed over
/// it), creating parent directories; true when the file existed.
pub fn atomic_write(path: &std::path::Path, content: &[u8]) -> std::io::Result<bool> {
    builtin::write_atomically(path, content)
}

/// [`atomic_write`] without the wait for the disk (checkpoint snapshots).
pub(crate) fn atomic_write_unsynced(path: &std::path::Path, content: &[u8]) -> std::io::Result<bool> {
    builtin::write_atomically_unsynced(path, content)
}

/// A test on a path relative to the project root.
pub type PathFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Options of [`ToolContext::ask`], as Lua's `ctx.ask` takes them.
pub use mia_proto::AskOptions;

impl ToolContext {
    /// Asks the user a question in Neovim (through `vim.ui.select`, or
    /// `vim.ui.input` with `allow_freeform`) and waits for the answer without
    /// blocking anything; `None` when dismissed, timed out or cancelled.
    pub async fn ask(&self, question: &str, opts: AskOptions) -> Option<String> {
        let wait = std::time::Duration::from_millis(opts.timeout.map(|t| t + 1000).unwrap_or(3_600_000));
        let default = opts.default.clone();
        let request = mia_proto::EditorCall::Ask(mia_proto::Question {
            question: question.to_string(),
            opts,
        });
        match self.lua.call_for(self.stream, request, wait, &self.abort).await {
            Ok(Ok(mia_proto::reply::AskReply(Some(answer)))) => Some(answer),
            _ => default,
        }
    }
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("call_id", &self.call_id)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// What a tool returns to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolOutput {
    /// The text the model sees as the tool result.
    pub content: String,
    pub is_error: bool,
    /// For the chat only (e.g. `{ "summary": "✏ wrote 4.1 KB to src/auth.rs" }`).
    pub metadata: Value,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: false,
            metadata: Value::Null,
        }
    }

    pub fn error(content: impl Into<String>) -> Self {
        ToolOutput {
            content: content.into(),
            is_error: true,
            metadata: Value::Null,
        }
    }

    /// Adds a one-line summary for the chat.
    pub fn with_summary(mut self, summary: impl Into<String>) -> Self {
        self.metadata = serde_json::json!({ "summary": summary.into() });
        self
    }

    /// Marks how the user's review of the edit ended (`accepted`, `rejected`,
    /// `modified`), kept beside the summary in the metadata.
    pub fn with_review(mut self, verdict: &str) -> Self {
        match &mut self.metadata {
            Value::Object(m) => {
                m.insert("review".into(), Value::from(verdict));
            }
            other => *other = serde_json::json!({ "review": verdict }),
        }
        self
    }
}

/// A tool the model can call. Arguments arrive already validated against
/// [`Tool::parameters`].
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments.
    fn parameters(&self) -> Value;
    fn effect(&self) -> ToolEffect;
    /// What the call acts on, for permission rules: a path (checked in its
    /// canonical form and confined to the project), a shell command (parsed
    /// into its simple commands), or plain text matched as written.
    fn subject(&self, args: &Value) -> Option<ToolSubject> {
        let _ = args;
        None
    }
    /// True when [`Tool::subject`] cannot answer synchronously (a Lua tool
    /// whose subject is a Lua function): the agent loop then asks Neovim.
    fn dynamic_subject(&self) -> bool {
        false
    }
    /// What happens to a path outside the project that no rule allows.
    fn outside_project(&self) -> OutsidePolicy {
        OutsidePolicy::Refuse
    }
    /// True when the tool's edits go through [`landing`]: a call the rules
    /// would ask about is shown as a diff there instead of a plain question.
    fn reviews_edits(&self) -> bool {
        false
    }
    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput>;
}

/// A shared tool.
pub type SharedTool = Arc<dyn Tool>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Event;

    fn ctx(stream: u64, lua: LuaBridge) -> ToolContext {
        let agent = AgentInfo {
            name: "mia".into(),
            mode: "ask".into(),
        };
        ToolContext {
            session_id: "s".into(),
            message_id: "m".into(),
            call_id: "c".into(),
            ..ToolContext::new(stream, std::env::temp_dir(), agent, lua)
        }
    }

    fn bridge() -> LuaBridge {
        LuaBridge::new(Arc::new(crate::events::EventQueue::new().unwrap()), Arc::default())
    }

    #[test]
    fn ask_waits_for_the_answer_from_the_main_thread() {
        let lua = bridge();
        let (queue, calls) = (lua.queue.clone(), lua.calls.clone());
        // a stand-in for Neovim's main thread: answers this stream's question
        let main = std::thread::spawn(move || loop {
            for e in queue.drain() {
                if let Event::Call {
                    stream: 4242,
                    call,
                    request,
                } = e
                {
                    let mia_proto::EditorCall::Ask(q) = *request else {
                        panic!("not a question: {request:?}");
                    };
                    assert_eq!(q.question, "Proceed?");
                    assert_eq!(q.opts.choices, ["yes", "no"]);
                    calls.answer(call, Ok(Value::String("no".into())));
                    return;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let opts = AskOptions {
            choices: vec!["yes".into(), "no".into()],
            ..Default::default()
        };
        let answer = rt.block_on(ctx(4242, lua).ask("Proceed?", opts));
        main.join().unwrap();
        assert_eq!(answer.as_deref(), Some("no"));
    }

    #[test]
    fn a_tools_error_reaches_the_model_as_an_error_result_with_its_message() {
        let schema = serde_json::json!({ "type": "object", "required": ["path"] });
        let err = schema::validate("read_file", &schema, &serde_json::json!({})).unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(_)), "{err:?}");
        let out = ToolOutput::from(err.clone());
        assert!(out.is_error);
        assert_eq!(out.content, err.to_string());
        assert!(
            out.content.starts_with("Invalid arguments for `read_file`"),
            "{}",
            out.content
        );
    }

    #[test]
    fn ask_falls_back_to_the_default_when_cancelled() {
        let c = ctx(4343, bridge());
        c.abort.cancel();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let opts = AskOptions {
            default: Some("later".into()),
            ..Default::default()
        };
        assert_eq!(rt.block_on(c.ask("Now?", opts)).as_deref(), Some("later"));
    }
}
