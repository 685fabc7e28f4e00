//! One round of tool calls: validate, ask permission (one question at a
//! time), run the approved calls in parallel, and return the results as one
//! tool message in the order the model asked.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{notify, AgentDeps};
use crate::calls::CallError;
use crate::events::StreamId;
use crate::llm::delta::{StreamDone, ToolCall};
use crate::llm::message::{Message, Part, Role};
use crate::tools::permissions::{remembered_rule, Action, Checked, Remembered, Rule};
use crate::tools::{AgentInfo, SharedTool, ToolContext, ToolError, ToolLimits, ToolOutput};

/// How much of a tool's output the chat shows.
const CHAT_OUTPUT_CAP: usize = 4000;

fn status(deps: &AgentDeps, stream: StreamId, call: &ToolCall, status: &str, extra: Value) {
    let mut v =
        json!({ "type": "tool", "id": call.id, "name": call.name, "status": status, "arguments": call.arguments });
    if let (Value::Object(target), Value::Object(more)) = (&mut v, extra) {
        target.extend(more);
    }
    notify(&deps.queue, stream, v);
}

fn short(text: &str) -> String {
    match text.char_indices().nth(CHAT_OUTPUT_CAP) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// Runs the tool calls of `done`; the returned message holds one result per call.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    deps: &AgentDeps,
    stream: StreamId,
    agent: &AgentInfo,
    root: &Path,
    session_id: &str,
    done: &StreamDone,
    remembered: &mut Vec<Rule>,
    cancel: &CancellationToken,
    history: &[Message],
) -> Message {
    for call in &done.tool_calls {
        status(deps, stream, call, "pending", json!({}));
    }
    let mut results: HashMap<String, ToolOutput> = HashMap::new();
    let mut approved: Vec<(&ToolCall, SharedTool, Checked)> = Vec::new();
    for call in &done.tool_calls {
        if cancel.is_cancelled() {
            results.insert(
                call.id.clone(),
                ToolOutput::error("Cancelled by the user before it ran."),
            );
            continue;
        }
        let tool = match deps.registry.get(&call.name) {
            Ok(t) => t,
            Err(e) => {
                results.insert(
                    call.id.clone(),
                    ToolOutput::error(format!("{e}. Call one of those instead.")),
                );
                continue;
            }
        };
        if let Err(problem) = crate::tools::schema::validate(&call.name, &tool.parameters(), &call.arguments) {
            results.insert(call.id.clone(), ToolOutput::from(problem));
            continue;
        }
        let subject = if tool.dynamic_subject() {
            crate::tools::lua_tool::dynamic_subject(
                &crate::calls::LuaBridge::new(deps.queue.clone(), deps.calls.clone()),
                stream,
                &call.name,
                &call.arguments,
                cancel,
            )
            .await
        } else {
            Ok(tool.subject(&call.arguments))
        };
        let checked = match subject.and_then(|s| Checked::new(root, s.as_ref()).map_err(ToolError::from)) {
            Ok(c) => c,
            Err(problem) => {
                results.insert(call.id.clone(), ToolOutput::from(problem));
                continue;
            }
        };
        let decision = deps.settings.permissions.decide(
            &agent.mode,
            &call.name,
            tool.effect(),
            &checked,
            remembered,
            tool.outside_project(),
        );
        let subject = checked.shown();
        match decision.action {
            Action::Allow => approved.push((call, tool, checked)),
            Action::Deny => {
                results.insert(
                    call.id.clone(),
                    ToolOutput::error(format!(
                        "Permission denied ({}). Do not retry this call.",
                        decision.because
                    )),
                );
            }
            Action::Ask => {
                status(deps, stream, call, "awaiting_permission", json!({ "subject": subject }));
                let payload = json!({
                    "tool": call.name,
                    "call_id": call.id,
                    "arguments": call.arguments,
                    "subject": subject,
                    "effect": tool.effect(),
                    "because": decision.because,
                    "root": root.display().to_string(),
                });
                let timeout = Duration::from_millis(deps.settings.ask_timeout_ms);
                let answer = deps
                    .calls
                    .call(&deps.queue, stream, "permission", payload, timeout, cancel)
                    .await;
                match answer {
                    Ok(Ok(Value::String(a))) if a == "allow_once" => approved.push((call, tool, checked)),
                    Ok(Ok(Value::String(a))) if a == "allow_always" => {
                        let rule = remembered_rule(&call.name, &checked);
                        if let Some(dir) = &deps.settings.data_dir {
                            if let Err(e) = Remembered::remember(dir, root, rule.clone()).await {
                                tracing::warn!("cannot save the permission: {e}");
                            }
                        }
                        remembered.push(rule);
                        approved.push((call, tool, checked));
                    }
                    Err(CallError::Cancelled) => {
                        results.insert(
                            call.id.clone(),
                            ToolOutput::error("Cancelled by the user before it ran."),
                        );
                    }
                    _ => {
                        results.insert(
                            call.id.clone(),
                            ToolOutput::error("The user rejected this call. Ask what they want instead."),
                        );
                    }
                }
            }
        }
    }
    let limits = ToolLimits {
        max_read_bytes: deps.settings.max_read_bytes,
        output_cap_bytes: deps.settings.output_cap_bytes,
        bash_timeout_ms: deps.settings.bash_timeout_ms,
        ..ToolLimits::default()
    };
    let message_id = format!(
        "{stream}:{}",
        done.tool_calls.first().map(|c| c.id.as_str()).unwrap_or("")
    );
    let conversation = Arc::new(history.to_vec());
    for call in &done.tool_calls {
        if let Some(out) = results.get(&call.id) {
            let state = if out.content.starts_with("The user rejected") {
                "rejected"
            } else {
                "failed"
            };
            status(deps, stream, call, state, json!({ "output": short(&out.content) }));
        }
    }
    let runs = approved.into_iter().map(|(call, tool, checked)| {
        let queue = deps.queue.clone();
        let call_id = call.id.clone();
        let message_id = message_id.clone();
        let ctx = ToolContext {
            stream,
            session_id: session_id.to_string(),
            message_id: message_id.clone(),
            call_id: call.id.clone(),
            agent: agent.clone(),
            root: root.to_path_buf(),
            abort: cancel.child_token(),
            limits,
            outside_allowed: checked.outside_path(),
            hidden: Some(deps.settings.permissions.hidden_paths(&agent.mode, &call.name)),
            subject: checked.path().cloned(),
            conversation: conversation.clone(),
            lua: crate::calls::LuaBridge::new(deps.queue.clone(), deps.calls.clone()),
            metadata: Arc::new(move |m| {
                notify(
                    &queue,
                    stream,
                    json!({ "type": "tool_metadata", "id": call_id, "metadata": m }),
                );
            }),
        };
        async move {
            status(deps, stream, call, "running", json!({}));
            let started = Instant::now();
            let out = tool.call(call.arguments.clone(), ctx).await;
            (call, out, started.elapsed())
        }
    });
    // A tool may print a key (`env`, a config file): it goes neither to the
    // provider, nor to the store, nor to the chat.
    let secrets = deps.providers.secrets();
    for (call, mut out, took) in join_all(runs).await {
        for secret in &secrets {
            if out.content.contains(secret.as_str()) {
                out.content = out.content.replace(secret.as_str(), "<redacted>");
            }
        }
        let state = if cancel.is_cancelled() {
            "cancelled"
        } else if out.is_error {
            "failed"
        } else {
            "done"
        };
        status(
            deps,
            stream,
            call,
            state,
            json!({ "output": short(&out.content), "metadata": out.metadata, "duration_ms": took.as_millis() as u64 }),
        );
        results.insert(call.id.clone(), out);
    }
    let parts = done
        .tool_calls
        .iter()
        .map(|call| {
            let out = results
                .remove(&call.id)
                .unwrap_or_else(|| ToolOutput::error("The tool did not run."));
            Part::ToolResult {
                tool_call_id: call.id.clone(),
                content: out.content,
                is_error: out.is_error,
            }
        })
        .collect();
    Message {
        role: Role::Tool,
        parts,
    }
}
