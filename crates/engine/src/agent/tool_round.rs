//! One round of tool calls: validate, ask permission (one question at a
//! time), run the approved calls in parallel, and return the results as one
//! tool message in the order the model asked.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use agent_client_protocol_schema::v1 as acp;

use super::{update, AgentDeps};
use crate::calls::CallError;
use crate::events::StreamId;
use crate::session::{updates, ToolOutcome, ToolStatus};
use crate::tools::landing::EditScope;
use crate::tools::permissions::{remembered_rule, Action, Checked, Decision, Remembered, Rule};
use crate::tools::{AgentInfo, SharedTool, ToolContext, ToolError, ToolLimits, ToolOutput};
use mia_llm::delta::{StreamDone, ToolCall};
use mia_llm::message::{Message, Part, Role};

/// The permission question for one call, as ACP's `session/request_permission`:
/// the call, and the options in the order the UI shows them. What mia's
/// picker needs besides (subject, effect, the rule that asked) is in `_meta.mia`.
fn permission_request(session_id: &str, call: &ToolCall, extra: Value) -> acp::RequestPermissionRequest {
    let tool_call = acp::ToolCallUpdate::new(
        call.id.clone(),
        acp::ToolCallUpdateFields::new()
            .title(call.name.clone())
            .kind(updates::tool_kind(&call.name))
            .status(acp::ToolCallStatus::Pending)
            .raw_input(call.arguments.clone()),
    );
    let mut meta = acp::Meta::new();
    meta.insert("mia".into(), extra);
    acp::RequestPermissionRequest::new(
        session_id.to_string(),
        tool_call,
        vec![
            acp::PermissionOption::new("allow_once", "Allow once", acp::PermissionOptionKind::AllowOnce),
            acp::PermissionOption::new(
                "allow_always",
                "Allow always for this project",
                acp::PermissionOptionKind::AllowAlways,
            ),
            acp::PermissionOption::new("reject_once", "Reject", acp::PermissionOptionKind::RejectOnce),
        ],
    )
    .meta(meta)
}

/// Decides on one call: the permission rules, and for `bash` the sandbox
/// (issue 48): in `code` mode a command the sandbox confines runs without
/// asking where only the mode's default would have asked; a command asked
/// to run outside the sandbox (`outside_sandbox`) is always asked, and
/// refused while `sandbox.mode` is "on".
fn decide(
    deps: &AgentDeps,
    agent: &AgentInfo,
    name: &str,
    tool: &SharedTool,
    args: &Value,
    checked: &Checked,
    remembered: &[Rule],
) -> Decision {
    let permissions = &deps.settings.permissions;
    let sandbox = &deps.settings.sandbox;
    let decide = |p: &crate::tools::permissions::PermissionConfig| {
        p.decide(
            &agent.mode,
            name,
            tool.effect(),
            checked,
            remembered,
            tool.outside_project(),
        )
    };
    if name != "bash" {
        return decide(permissions);
    }
    let outside = args.get("outside_sandbox") == Some(&Value::Bool(true));
    let decision = decide(permissions);
    if outside && decision.action != Action::Deny {
        if sandbox.mode == crate::sandbox::SandboxMode::On {
            return Decision {
                action: Action::Deny,
                because: "sandbox.mode is \"on\": commands never run outside the sandbox".into(),
            };
        }
        return Decision {
            action: Action::Ask,
            because: "running a command outside mia's sandbox always asks".into(),
        };
    }
    if !outside && decision.action == Action::Ask && agent.mode == "code" && crate::sandbox::in_force(sandbox) {
        return decide(&permissions.executing_allowed(&agent.mode));
    }
    decision
}

/// The user's answer: the option chosen, or `None` for a dismissed question.
/// What the round's commands are confined by: the options, and what the
/// rules deny `read_file` in this mode (kept unreadable by any program).
fn sandbox_setup(deps: &AgentDeps, agent: &AgentInfo, session_id: &str) -> crate::sandbox::SharedSetup {
    let permissions = &deps.settings.permissions;
    let patterns = permissions.deny_patterns(&agent.mode, "read_file");
    let is_glob = |p: &String| p.contains(['*', '?', '[', '{']);
    Arc::new(crate::sandbox::SandboxSetup {
        config: deps.settings.sandbox.clone(),
        data_dir: deps.settings.data_dir.clone(),
        rule_hidden: patterns
            .iter()
            .any(is_glob)
            .then(|| permissions.hidden_paths(&agent.mode, "read_file")),
        rule_denied: patterns.into_iter().filter(|p| !is_glob(p)).collect(),
        session_id: session_id.to_string(),
        memory: deps.sandbox.clone(),
    })
}

/// Says once per chat, in the chat, that commands run unconfined because
/// the system has no sandbox (`sandbox.mode = "auto"`).
fn note_unsandboxed(deps: &AgentDeps, stream: StreamId, session_id: &str) {
    let sandbox = &deps.settings.sandbox;
    if sandbox.mode != crate::sandbox::SandboxMode::Auto {
        return;
    }
    if let Some(why) = crate::sandbox::missing() {
        if deps.sandbox.first_note(session_id) {
            let text = format!("mia: commands are not sandboxed: {why} (see :h mia-sandbox)");
            super::mia_event(&deps.queue, stream, crate::events::MiaEvent::Warning { text });
        }
    }
}

/// Runs the tool calls of `done`; the returned message holds one result per
/// call, and the map how each ended (typed: done, failed, rejected, cancelled).
/// `acp_ids` are the calls' ids unique in the session
/// ([`crate::session::tool_ids`]): what the UI, the permission questions and
/// the map see; the results keep the provider's ids for the provider.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    deps: &AgentDeps,
    stream: StreamId,
    agent: &AgentInfo,
    root: &Path,
    session_id: &str,
    message_id: &str,
    done: &StreamDone,
    acp_ids: &[String],
    remembered: &mut Vec<Rule>,
    cancel: &CancellationToken,
    history: &[Message],
    scope: Option<&Arc<EditScope>>,
) -> (Message, BTreeMap<String, ToolOutcome>) {
    // "Allow always" answers given in reviews of the previous round.
    if let Some(scope) = scope {
        remembered.extend(scope.ledger.take_rules());
    }
    // From here on each call carries its ACP id; the provider's come back at the end.
    let calls: Vec<ToolCall> = done
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, call)| ToolCall {
            id: acp_ids.get(i).cloned().unwrap_or_else(|| call.id.clone()),
            ..call.clone()
        })
        .collect();
    // The plan tool's calls reach the UI as `plan` updates, every other call as a tool block.
    for call in &calls {
        if updates::is_plan_tool(&call.name) {
            if let Some(plan) = updates::plan(&call.arguments) {
                update(&deps.queue, stream, plan);
            }
        } else {
            update(
                &deps.queue,
                stream,
                updates::tool_call(&call.id, &call.name, &call.arguments),
            );
        }
    }
    let mut results: HashMap<String, ToolOutput> = HashMap::new();
    let mut ended: HashMap<String, ToolStatus> = HashMap::new();
    let mut approved: Vec<(&ToolCall, SharedTool, Checked, bool)> = Vec::new();
    for call in &calls {
        if cancel.is_cancelled() {
            results.insert(
                call.id.clone(),
                ToolOutput::error("Cancelled by the user before it ran."),
            );
            ended.insert(call.id.clone(), ToolStatus::Cancelled);
            continue;
        }
        let (tool, compiled) = match deps.registry.get_checked(&call.name) {
            Ok(found) => found,
            Err(e) => {
                results.insert(
                    call.id.clone(),
                    ToolOutput::error(format!("{e}. Call one of those instead.")),
                );
                continue;
            }
        };
        if let Err(problem) = crate::tools::schema::check(&call.name, &compiled, &call.arguments) {
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
        let decision = decide(deps, agent, &call.name, &tool, &call.arguments, &checked, remembered);
        let subject = checked.shown();
        let sid = (!session_id.is_empty()).then_some(session_id);
        match decision.action {
            Action::Allow => {
                deps.telemetry.tool_decision(sid, &call.name, true, "config");
                approved.push((call, tool, checked, false))
            }
            // An edit the rules would ask about is shown as a diff when it is
            // proposed (landing), unless the user accepted the file for the session.
            Action::Ask if scope.is_some() && tool.reviews_edits() && checked.path().is_some() => {
                // A control file is reviewed every time (see tools::control_files).
                let accepted_file = scope.zip(checked.path()).is_some_and(|(s, p)| {
                    s.ledger.allowed(&p.physical) && crate::tools::control_files::control_path(p).is_none()
                });
                approved.push((call, tool, checked, !accepted_file));
            }
            Action::Deny => {
                deps.telemetry.tool_decision(sid, &call.name, false, "config");
                results.insert(
                    call.id.clone(),
                    ToolOutput::error(format!(
                        "Permission denied ({}). Do not retry this call.",
                        decision.because
                    )),
                );
            }
            Action::Ask => {
                update(
                    &deps.queue,
                    stream,
                    updates::tool_progress(&call.id, ToolStatus::AwaitingPermission, json!({ "subject": subject })),
                );
                let request = permission_request(
                    session_id,
                    call,
                    json!({
                        "tool": call.name,
                        "subject": subject,
                        "effect": tool.effect(),
                        "because": decision.because,
                        "root": root.display().to_string(),
                    }),
                );
                let payload = serde_json::to_value(&request).unwrap_or(Value::Null);
                let timeout = Duration::from_millis(deps.settings.ask_timeout_ms);
                let answer = deps
                    .calls
                    .call_for::<mia_proto::reply::PermissionReply>(
                        &deps.queue,
                        stream,
                        mia_proto::EditorCall::Permission(payload),
                        timeout,
                        cancel,
                    )
                    .await;
                let choice = match answer {
                    Ok(Ok(reply)) => Ok(reply.option),
                    Ok(Err(_)) => Ok(None),
                    Err(e) => Err(e),
                };
                deps.telemetry.tool_decision(
                    sid,
                    &call.name,
                    matches!(&choice, Ok(Some(a)) if a == "allow_once" || a == "allow_always"),
                    "user",
                );
                match choice {
                    Ok(Some(a)) if a == "allow_once" => approved.push((call, tool, checked, false)),
                    Ok(Some(a)) if a == "allow_always" => {
                        let rule = remembered_rule(&call.name, &checked);
                        if let Some(dir) = &deps.settings.data_dir {
                            Remembered::save(dir, root, rule.clone()).await;
                        }
                        remembered.push(rule);
                        approved.push((call, tool, checked, false));
                    }
                    Err(CallError::Cancelled) => {
                        results.insert(
                            call.id.clone(),
                            ToolOutput::error("Cancelled by the user before it ran."),
                        );
                        ended.insert(call.id.clone(), ToolStatus::Cancelled);
                    }
                    _ => {
                        results.insert(
                            call.id.clone(),
                            ToolOutput::error("The user rejected this call. Ask what they want instead."),
                        );
                        ended.insert(call.id.clone(), ToolStatus::Rejected);
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
    let message_id = message_id.to_string();
    let conversation = Arc::new(history.to_vec());
    let sandbox = sandbox_setup(deps, agent, session_id);
    if approved.iter().any(|(call, ..)| call.name == "bash") {
        note_unsandboxed(deps, stream, session_id);
    }
    let mut outcomes: BTreeMap<String, ToolOutcome> = BTreeMap::new();
    for call in &calls {
        if let Some(out) = results.get(&call.id) {
            let outcome = ToolOutcome {
                status: ended.get(&call.id).copied().unwrap_or(ToolStatus::Failed),
                duration_ms: None,
                summary: None,
            };
            update(
                &deps.queue,
                stream,
                updates::tool_finished(&call.id, &out.content, &outcome),
            );
            outcomes.insert(call.id.clone(), outcome);
        }
    }
    let runs = approved.into_iter().map(|(call, tool, checked, review)| {
        let queue = deps.queue.clone();
        let call_id = call.id.clone();
        // A reviewed edit asks first (its review is the permission
        // question): pending until the user accepts, as bash is.
        let on_accepted: Option<Arc<dyn Fn() + Send + Sync>> = review.then(|| {
            let (queue, call_id) = (deps.queue.clone(), call.id.clone());
            Arc::new(move || {
                update(
                    &queue,
                    stream,
                    updates::tool_progress(&call_id, ToolStatus::Running, json!({})),
                )
            }) as Arc<dyn Fn() + Send + Sync>
        });
        let subject = checked.shown();
        let message_id = message_id.clone();
        let ctx = ToolContext {
            telemetry: deps.telemetry.clone(),
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
            lua: crate::calls::LuaBridge::new(deps.queue.clone(), deps.calls.clone()).with_editor_fs(),
            edits: scope.cloned(),
            review,
            on_accepted,
            permissions: deps
                .settings
                .permissions
                .effective(&agent.mode, &call.name, tool.effect()),
            metadata: Arc::new(move |m| {
                update(&queue, stream, updates::tool_metadata(&call_id, m));
            }),
            sandbox: Some(sandbox.clone()),
        };
        async move {
            let status = if review {
                updates::tool_progress(&call.id, ToolStatus::AwaitingPermission, json!({ "subject": subject }))
            } else {
                updates::tool_progress(&call.id, ToolStatus::Running, json!({}))
            };
            update(&deps.queue, stream, status);
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
        let status = if cancel.is_cancelled() {
            ToolStatus::Cancelled
        } else if out.metadata.get("review").and_then(Value::as_str) == Some("rejected") {
            ToolStatus::Rejected
        } else if out.is_error {
            ToolStatus::Failed
        } else {
            ToolStatus::Done
        };
        deps.telemetry.tool_result(
            (!session_id.is_empty()).then_some(session_id),
            &call.name,
            status == ToolStatus::Done,
            took.as_millis() as u64,
        );
        let outcome = ToolOutcome {
            status,
            duration_ms: Some(took.as_millis() as u64),
            summary: out.metadata.get("summary").and_then(Value::as_str).map(str::to_string),
        };
        update(
            &deps.queue,
            stream,
            updates::tool_finished(&call.id, &out.content, &outcome),
        );
        outcomes.insert(call.id.clone(), outcome);
        results.insert(call.id.clone(), out);
    }
    let mut images = Vec::new();
    let mut parts: Vec<Part> = calls
        .iter()
        .zip(&done.tool_calls)
        .map(|(call, asked)| {
            let out = results
                .remove(&call.id)
                .unwrap_or_else(|| ToolOutput::error("The tool did not run."));
            images.extend(attached_images(&out.metadata));
            Part::ToolResult {
                tool_call_id: asked.id.clone(),
                content: out.content,
                is_error: out.is_error,
            }
        })
        .collect();
    // Images a tool attached follow the results, in the same message.
    parts.extend(images.into_iter().take(MAX_IMAGES_PER_ROUND));
    (
        Message {
            role: Role::Tool,
            parts,
        },
        outcomes,
    )
}

/// Most images the tools of one round attach to the model's next request.
const MAX_IMAGES_PER_ROUND: usize = 8;
/// Largest attached image, in bytes of base64.
pub const MAX_IMAGE_BASE64: usize = 4 * 1024 * 1024;

/// The images a tool attached for the model (`metadata.images`: a list of
/// `{ media_type, data }`, base64 data): only the image types every
/// provider reads, at most [`MAX_IMAGE_BASE64`] each.
fn attached_images(metadata: &Value) -> Vec<Part> {
    let Some(list) = metadata.get("images").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|img| {
            let media_type = img.get("media_type")?.as_str()?;
            let data = img.get("data")?.as_str()?;
            let known = matches!(media_type, "image/png" | "image/jpeg" | "image/gif" | "image/webp");
            let base64 = data
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
            (known && base64 && !data.is_empty() && data.len() <= MAX_IMAGE_BASE64).then(|| Part::Image {
                media_type: media_type.to_string(),
                data: data.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod image_tests {
    use super::*;

    #[test]
    fn only_known_image_types_in_base64_within_the_cap_are_attached() {
        let big = "A".repeat(MAX_IMAGE_BASE64 + 1);
        let meta = json!({ "images": [
            { "media_type": "image/png", "data": "iVBORw0KGgo=" },
            { "media_type": "image/svg+xml", "data": "PHN2Zz4=" },
            { "media_type": "image/png", "data": "not base64!" },
            { "media_type": "image/png", "data": big },
            { "media_type": "image/jpeg" },
            "junk"
        ] });
        assert_eq!(
            attached_images(&meta),
            vec![Part::Image {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into()
            }]
        );
        assert!(attached_images(&json!(null)).is_empty());
    }
}
