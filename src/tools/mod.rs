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
pub mod shell;

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
    /// A read-only snapshot of the conversation up to this call.
    pub conversation: Arc<Vec<crate::llm::message::Message>>,
}

/// Options of [`ToolContext::ask`], as Lua's `ctx.ask` takes them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AskOptions {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Milliseconds before the default answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    pub allow_freeform: bool,
}

impl ToolContext {
    /// Asks the user a question in Neovim (through `vim.ui.select`, or
    /// `vim.ui.input` with `allow_freeform`) and waits for the answer without
    /// blocking anything; `None` when dismissed, timed out or cancelled.
    pub async fn ask(&self, question: &str, opts: AskOptions) -> Option<String> {
        let queue = crate::runtime::queue().ok()?;
        let wait = std::time::Duration::from_millis(opts.timeout.map(|t| t + 1000).unwrap_or(3_600_000));
        let payload = serde_json::json!({ "question": question, "opts": opts });
        match crate::calls::pending()
            .call(&queue, self.stream, "ask", payload, wait, &self.abort)
            .await
        {
            Ok(Ok(Value::String(answer))) => Some(answer),
            _ => opts.default,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Event;

    fn ctx(stream: u64) -> ToolContext {
        ToolContext {
            stream,
            session_id: "s".into(),
            message_id: "m".into(),
            call_id: "c".into(),
            agent: AgentInfo {
                name: "mia".into(),
                mode: "ask".into(),
            },
            root: std::env::temp_dir(),
            abort: CancellationToken::new(),
            limits: ToolLimits::default(),
            metadata: Arc::new(|_| {}),
            conversation: Arc::new(Vec::new()),
        }
    }

    #[test]
    fn ask_waits_for_the_answer_from_the_main_thread() {
        let queue = crate::runtime::queue().unwrap();
        // a stand-in for Neovim's main thread: answers this stream's question
        let main = std::thread::spawn(move || loop {
            for e in queue.drain() {
                if let Event::Call {
                    stream: 4242,
                    call,
                    kind,
                    payload,
                    ..
                } = e
                {
                    assert_eq!(kind, "ask");
                    assert_eq!(payload["question"], "Proceed?");
                    assert_eq!(payload["opts"]["choices"], serde_json::json!(["yes", "no"]));
                    crate::calls::pending().answer(call, Ok(Value::String("no".into())));
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
        let answer = rt.block_on(ctx(4242).ask("Proceed?", opts));
        main.join().unwrap();
        assert_eq!(answer.as_deref(), Some("no"));
    }

    #[test]
    fn ask_falls_back_to_the_default_when_cancelled() {
        let c = ctx(4343);
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
