//! Architect mode's way out, for mia-acp: the plan goes to the client as
//! ACP's `session/request_permission` with the three options of mia's chat
//! (auto-accept in code mode, accept manually in ask mode, stay), and the
//! answer changes the session's mode. The agent loop then sends the
//! `current_mode_update` before its next request. (In Neovim the same tool
//! is written in Lua, `lua/mia/tools/editor.lua`.)

use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use crate::session::Sessions;
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutput};

/// The options, in the order the client shows them: (option id = the mode it
/// switches to, label, kind).
pub const OPTIONS: [(&str, &str, acp::PermissionOptionKind); 3] = [
    (
        "code",
        "Yes, and auto-accept all actions",
        acp::PermissionOptionKind::AllowAlways,
    ),
    (
        "ask",
        "Yes, and manually accept actions",
        acp::PermissionOptionKind::AllowOnce,
    ),
    (
        "architect",
        "No, stay in architect mode",
        acp::PermissionOptionKind::RejectOnce,
    ),
];

/// The `switch_mode` tool of mia-acp's sessions.
pub struct SwitchMode {
    pub sessions: Arc<Sessions>,
}

fn request(ctx: &ToolContext, plan: &str) -> acp::RequestPermissionRequest {
    let tool_call = acp::ToolCallUpdate::new(
        ctx.call_id.clone(),
        acp::ToolCallUpdateFields::new()
            .title("Plan ready: switch mode?")
            .kind(acp::ToolKind::SwitchMode)
            .status(acp::ToolCallStatus::Pending)
            .content(vec![acp::ToolCallContent::from(plan.to_string())]),
    );
    let options = OPTIONS
        .iter()
        .map(|(id, name, kind)| acp::PermissionOption::new(*id, *name, *kind))
        .collect();
    acp::RequestPermissionRequest::new(ctx.session_id.clone(), tool_call, options)
}

impl Tool for SwitchMode {
    fn name(&self) -> &str {
        "switch_mode"
    }

    fn description(&self) -> &str {
        "When your plan is ready, show it to the user and ask to switch to a mode that can carry it out."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": { "plan": { "type": "string", "description": "The plan, in Markdown" } },
            "required": ["plan"],
        })
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Read
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let sessions = self.sessions.clone();
        Box::pin(async move {
            let plan = args.get("plan").and_then(Value::as_str).unwrap_or_default().to_string();
            let payload = serde_json::to_value(request(&ctx, &plan)).unwrap_or(Value::Null);
            let answer = ctx
                .lua
                .call_for::<mia_proto::reply::PermissionReply>(
                    ctx.stream,
                    mia_proto::EditorCall::Permission(payload),
                    Duration::from_secs(3600),
                    &ctx.abort,
                )
                .await;
            let chosen = match answer {
                Ok(Ok(reply)) => reply.option,
                _ => None,
            };
            match chosen.as_deref() {
                Some(mode @ ("code" | "ask")) => {
                    if let Some(session) = sessions.get(&ctx.session_id) {
                        session.update_info(Some(mode), None, None);
                    }
                    ToolOutput::ok(format!(
                        "The user approved the plan; mode is now {mode}. Carry out the plan."
                    ))
                    .with_summary(format!("switched to {mode} mode"))
                }
                _ => ToolOutput::ok(
                    "The user chose to stay in architect mode (reject_once). Refine the plan or ask what to change.",
                ),
            }
        })
    }
}
