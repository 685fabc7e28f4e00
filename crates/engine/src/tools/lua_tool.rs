//! A tool written in Lua: its metadata lives here, its code on Neovim's main
//! thread. Calling it queues a `tool` call event and waits for Lua's answer,
//! bounded by a timeout and cancelled with the answer.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{OutsidePolicy, Tool, ToolContext, ToolEffect, ToolError, ToolOutput, ToolSubject};
use crate::calls::{CallError, LuaBridge};
use mia_proto::reply::{SubjectReply, ToolReply};
use mia_proto::{EditorCall, SubjectRequest, ToolRun};

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
    /// What the tool acts on, so that rules and confinement apply to it as
    /// to the built-in tools.
    #[serde(default)]
    pub subject: Option<LuaSubject>,
    /// What happens to a path outside the project that no rule allows.
    #[serde(default)]
    pub outside: OutsidePolicy,
    /// The tool declares an edit (`edit = function` in Lua): it answers a
    /// proposal (the subject file's new content) that [`super::landing`]
    /// reviews, checkpoints and writes.
    #[serde(default)]
    pub edits: bool,
}

/// A Lua tool's subject declaration: the argument that holds its path,
/// command or other subject, or `dynamic` when a Lua function computes it.
/// (Lua turns the shorthand `subject = "path"` into `{ path = "path" }`.)
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LuaSubject {
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub dynamic: bool,
}

/// Asks Neovim for the subject of a call of Lua tool `name` whose subject
/// is a Lua function. An error (the function failed, or answered something
/// that is not a subject) refuses the call with that message.
pub async fn dynamic_subject(
    lua: &LuaBridge,
    stream: u64,
    name: &str,
    args: &Value,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Option<ToolSubject>, ToolError> {
    let request = EditorCall::Subject(SubjectRequest {
        name: name.to_string(),
        arguments: args.clone(),
    });
    let answer = lua
        .call_for::<SubjectReply>(stream, request, Duration::from_secs(10), cancel)
        .await;
    let problem = match answer {
        Ok(Ok(reply)) => match subject_of_reply(reply) {
            Ok(subject) => return Ok(subject),
            Err(e) => format!("`{name}`'s subject function {e}"),
        },
        Ok(Err(message)) => format!("`{name}`'s subject function failed: {message}"),
        Err(e) => format!("`{name}`'s subject could not be computed ({e:?})"),
    };
    Err(ToolError::Subject(problem))
}

/// `nil`, a path string, or `{ path = … }` / `{ command = … }` / `{ text = … }`.
fn subject_of_reply(reply: SubjectReply) -> Result<Option<ToolSubject>, String> {
    match reply {
        SubjectReply::None => Ok(None),
        SubjectReply::Path(p) => Ok(Some(ToolSubject::Path(p))),
        SubjectReply::Command(c) => Ok(Some(ToolSubject::Command(c))),
        SubjectReply::Text(t) => Ok(Some(ToolSubject::Text(t))),
        SubjectReply::Invalid(shown) => Err(format!(
            "returned {shown}; return a path, or a table with `path`, `command` or `text`"
        )),
    }
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

    fn subject(&self, args: &Value) -> Option<ToolSubject> {
        let spec = self.spec.subject.as_ref()?;
        let arg = |key: &String| args.get(key).and_then(Value::as_str).map(str::to_string);
        spec.path
            .as_ref()
            .and_then(arg)
            .map(ToolSubject::Path)
            .or_else(|| spec.command.as_ref().and_then(arg).map(ToolSubject::Command))
            .or_else(|| spec.text.as_ref().and_then(arg).map(ToolSubject::Text))
    }

    fn dynamic_subject(&self) -> bool {
        self.spec.subject.as_ref().is_some_and(|s| s.dynamic)
    }

    fn outside_project(&self) -> OutsidePolicy {
        self.spec.outside
    }

    fn reviews_edits(&self) -> bool {
        self.spec.edits
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let name = self.spec.name.clone();
        let edits = self.spec.edits;
        let timeout = Duration::from_millis(self.spec.timeout_ms);
        Box::pin(async move {
            let request = EditorCall::Tool(ToolRun {
                name: name.clone(),
                arguments: args,
                ctx: json!({
                    "session_id": ctx.session_id,
                    "message_id": ctx.message_id,
                    "call_id": ctx.call_id,
                    "agent": agent_with_permissions(&ctx),
                    "root": ctx.root.display().to_string(),
                    "subject": ctx.subject.as_ref().map(|c| json!({
                        "path": c.physical.display().to_string(),
                        "relative": c.subject,
                        "inside": c.inside,
                    })),
                }),
            });
            match ctx.lua.call_for::<ToolReply>(ctx.stream, request, timeout, &ctx.abort).await {
                Ok(Ok(reply)) if edits => land_proposal(&name, reply, &ctx).await,
                Ok(Ok(reply)) => output_of(reply),
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

/// A Lua tool's proposal `{ proposal = { content, message? } }` for its
/// subject file, landed like the built-in tools' edits.
async fn land_proposal(name: &str, reply: ToolReply, ctx: &ToolContext) -> ToolOutput {
    let Some(content) = reply.proposal.as_deref() else {
        return ToolOutput::error(format!(
            "`{name}` proposed no edit (its edit function returned no content)."
        ));
    };
    let Some(subject) = ctx.subject.clone() else {
        return ToolOutput::error(format!(
            "`{name}` declares an edit but its call names no file; its `subject` must name the path argument"
        ));
    };
    let path = subject.physical;
    let shown = crate::tools::paths::display_relative(&ctx.root, &path);
    let before = match crate::tools::builtin::current_content(ctx, &path, &shown, name).await {
        Ok(b) => b,
        Err(out) => return out,
    };
    let message = reply
        .proposal_message
        .clone()
        .unwrap_or_else(|| format!("Changed `{shown}`."));
    let accepted = ToolOutput::ok(message).with_summary(format!("✏ {name}: {shown}"));
    let proposal = super::landing::Proposal {
        path,
        name: shown,
        before,
        after: content.as_bytes().to_vec(),
    };
    super::landing::land(ctx, name, proposal, accepted).await
}

/// Lua answers `{ content = "...", metadata = {...}, is_error = bool }`.
fn output_of(reply: ToolReply) -> ToolOutput {
    ToolOutput {
        content: reply.content,
        is_error: reply.is_error,
        metadata: reply.metadata,
    }
}

/// `ctx.agent` as a Lua tool sees it: name, mode and the permissions in
/// effect for the tool.
fn agent_with_permissions(ctx: &ToolContext) -> Value {
    let mut agent = json!(ctx.agent);
    if !ctx.permissions.is_null() {
        agent["permissions"] = ctx.permissions.clone();
    }
    agent
}
