//! A tool written in Lua: its metadata lives here, its code on Neovim's main
//! thread. Calling it queues a `tool` call event and waits for Lua's answer,
//! bounded by a timeout and cancelled with the answer.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{Tool, ToolContext, ToolEffect, ToolOutput};
use crate::calls::CallError;

/// What `mia.register_tool` tells the core about a Lua tool.
#[derive(Debug, Clone, Deserialize)]
pub struct LuaToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_parameters")]
    pub parameters: Value,
    #[serde(default = "default_effect")]
    pub effect: ToolEffect,
    /// How long the tool may take (default 60 s).
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
}

fn default_parameters() -> Value {
    json!({ "type": "object", "properties": {} })
}

fn default_effect() -> ToolEffect {
    ToolEffect::Read
}

fn default_timeout() -> u64 {
    60_000
}

#[derive(Debug)]
pub struct LuaTool {
    pub spec: LuaToolSpec,
}

impl Tool for LuaTool {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn description(&self) -> &str {
        &self.spec.description
    }

    fn parameters(&self) -> Value {
        self.spec.parameters.clone()
    }

    fn effect(&self) -> ToolEffect {
        self.spec.effect
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let name = self.spec.name.clone();
        let timeout = Duration::from_millis(self.spec.timeout_ms);
        Box::pin(async move {
            let queue = match crate::runtime::queue() {
                Ok(q) => q,
                Err(e) => return ToolOutput::error(format!("cannot reach Neovim: {e}")),
            };
            let payload = json!({
                "name": name,
                "arguments": args,
                "ctx": {
                    "session_id": ctx.session_id,
                    "message_id": ctx.message_id,
                    "call_id": ctx.call_id,
                    "agent": ctx.agent,
                    "root": ctx.root.display().to_string(),
                },
            });
            let pending = crate::calls::pending();
            match pending.call(&queue, ctx.stream, "tool", payload, timeout, &ctx.abort).await {
                Ok(Ok(value)) => output_of(value),
                Ok(Err(message)) => ToolOutput::error(format!("`{name}` failed: {message}")),
                Err(CallError::TimedOut(ms)) => ToolOutput::error(format!(
                    "`{name}` did not complete within {ms} ms and was stopped (raise its timeout_ms if it needs longer)."
                )),
                Err(CallError::Cancelled) => ToolOutput::error(format!("`{name}` was cancelled by the user.")),
                Err(CallError::Gone) => ToolOutput::error(format!("`{name}` could not finish: Neovim is shutting down.")),
            }
        })
    }
}

/// Lua answers `{ content = "...", metadata = {...}, is_error = bool }`.
fn output_of(value: Value) -> ToolOutput {
    let content = match value.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    ToolOutput {
        content,
        is_error: value.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        metadata: value.get("metadata").cloned().unwrap_or(Value::Null),
    }
}
