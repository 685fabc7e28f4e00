//! Tools the model can call: the [`Tool`] contract, the per-invocation
//! [`ToolContext`], the registry, argument validation and permissions.
//! Built-in tools live in `builtin/`; tools written in Lua are registered
//! through `nvim/` and run on Neovim's main thread.

pub mod builtin;
pub mod lua_tool;
pub mod paths;
pub mod permissions;
pub mod registry;
pub mod schema;

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

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
    /// Reports progress or a summary for the chat (e.g. `{ "summary": "wrote 4.1 KB to a.rs" }`).
    pub metadata: Arc<dyn Fn(Value) + Send + Sync>,
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
}

/// A tool the model can call. Arguments arrive already validated against
/// [`Tool::parameters`].
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments.
    fn parameters(&self) -> Value;
    fn effect(&self) -> ToolEffect;
    /// The path or command permission patterns match against, if any.
    fn subject(&self, args: &Value) -> Option<String> {
        let _ = args;
        None
    }
    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput>;
}

/// A shared tool.
pub type SharedTool = Arc<dyn Tool>;
