//! The one event stream from the core to a UI: the Agent Client Protocol's
//! `session/update` notifications (the schema crate's own types), plus the
//! end of a prompt turn. mia-only facts travel in `_meta.mia`, never as text
//! to parse.
//!
//! Every update is built here, by the same functions live and on replay:
//! the chat draws a session loaded from the store exactly as it drew it
//! while it happened.

use agent_client_protocol_schema::v1 as acp;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use mia_cost::{Cost, Usage};
use mia_llm::message::{Part, Role};
use mia_store::{MessageKind, MessageRow, MessageState};

/// How much of a tool's output the chat shows.
pub const CHAT_OUTPUT_CAP: usize = 4000;

/// `_meta` holding `{ "mia": value }`.
fn mia_meta(value: Value) -> acp::Meta {
    let mut m = acp::Meta::new();
    m.insert("mia".into(), value);
    m
}

/// The user's prompt, echoed as ACP's `session/load` replays it; `_meta.mia.model`
/// names the model that answers it, `_meta.mia.rules` the rules files applied.
/// `_meta.mia.mentions` lists what the prompt's @-mentions attached (label and summary, for the chat).
pub fn user_chunk(text: &str, model: &str, rules: &[String], mentions: &[Value]) -> acp::SessionUpdate {
    let mut meta = json!({ "model": model });
    if !rules.is_empty() {
        meta["rules"] = json!(rules);
    }
    if !mentions.is_empty() {
        let shown: Vec<Value> = mentions
            .iter()
            .map(|m| json!({ "kind": m["kind"], "label": m["label"], "summary": m["summary"] }))
            .collect();
        meta["mentions"] = json!(shown);
    }
    acp::SessionUpdate::UserMessageChunk(acp::ContentChunk::new(text.to_string().into()).meta(mia_meta(meta)))
}

/// One attachment of the user's prompt, as ACP content after the prompt's
/// text: a `resource_link` naming it (the chat draws the prompt's
/// `_meta.mia.mentions`; other clients see what was attached, not its bytes).
/// `_meta.mia.mention` marks it as part of the prompt just echoed.
pub fn mention_chunk(m: &Value) -> acp::SessionUpdate {
    let label = m["label"].as_str().unwrap_or("");
    let uri = m["uri"].as_str().unwrap_or(label);
    let mut link = acp::ResourceLink::new(label.to_string(), uri.to_string());
    if let Some(summary) = m["summary"].as_str() {
        link = link.description(summary.to_string());
    }
    if let Some(mime) = m["mime"].as_str() {
        link = link.mime_type(mime.to_string());
    }
    acp::SessionUpdate::UserMessageChunk(
        acp::ContentChunk::new(acp::ContentBlock::ResourceLink(link)).meta(mia_meta(json!({ "mention": true }))),
    )
}

pub fn agent_text(text: &str) -> acp::SessionUpdate {
    acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(text.to_string().into()))
}

pub fn agent_thought(text: &str) -> acp::SessionUpdate {
    acp::SessionUpdate::AgentThoughtChunk(acp::ContentChunk::new(text.to_string().into()))
}

/// ACP's tool kind for one of mia's tools (the UI may pick an icon by it).
pub fn tool_kind(name: &str) -> acp::ToolKind {
    match name {
        "read_file" | "list_dir" => acp::ToolKind::Read,
        "edit_file" | "write_file" => acp::ToolKind::Edit,
        "grep" | "glob" => acp::ToolKind::Search,
        "bash" => acp::ToolKind::Execute,
        _ => acp::ToolKind::Other,
    }
}

/// A tool call the model asked for (status `pending`).
pub fn tool_call(id: &str, name: &str, arguments: &Value) -> acp::SessionUpdate {
    acp::SessionUpdate::ToolCall(
        acp::ToolCall::new(id.to_string(), name.to_string())
            .kind(tool_kind(name))
            .status(acp::ToolCallStatus::Pending)
            .raw_input(arguments.clone())
            .meta(mia_meta(json!({ "status": "pending" }))),
    )
}

/// A tool call waiting for the user or running.
pub fn tool_progress(id: &str, status: ToolStatus, extra: Value) -> acp::SessionUpdate {
    let acp_status = match status {
        ToolStatus::Running => acp::ToolCallStatus::InProgress,
        _ => acp::ToolCallStatus::Pending,
    };
    let mut meta = json!({ "status": status });
    if let (Value::Object(m), Value::Object(more)) = (&mut meta, extra) {
        m.extend(more);
    }
    acp::SessionUpdate::ToolCallUpdate(
        acp::ToolCallUpdate::new(id.to_string(), acp::ToolCallUpdateFields::new().status(acp_status))
            .meta(mia_meta(meta)),
    )
}

/// Progress a running tool reported (`ctx.metadata`).
pub fn tool_metadata(id: &str, metadata: Value) -> acp::SessionUpdate {
    acp::SessionUpdate::ToolCallUpdate(
        acp::ToolCallUpdate::new(id.to_string(), acp::ToolCallUpdateFields::new())
            .meta(mia_meta(json!({ "metadata": metadata }))),
    )
}

/// The start of `text` the chat shows.
pub fn short(text: &str) -> String {
    match text.char_indices().nth(CHAT_OUTPUT_CAP) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// How one tool call ended, as typed data (stored with the tool results).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Pending,
    AwaitingPermission,
    Running,
    Done,
    Failed,
    /// The user answered no to the permission question.
    Rejected,
    /// The user stopped the answer before or while it ran.
    Cancelled,
}

/// What the chat shows of an ended tool call besides its output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutcome {
    pub status: ToolStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The tool's own one-line summary (`metadata.summary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// The end of a tool call: its status, output and outcome.
pub fn tool_finished(id: &str, output: &str, outcome: &ToolOutcome) -> acp::SessionUpdate {
    let status = match outcome.status {
        ToolStatus::Done => acp::ToolCallStatus::Completed,
        _ => acp::ToolCallStatus::Failed,
    };
    let shown = short(output);
    acp::SessionUpdate::ToolCallUpdate(
        acp::ToolCallUpdate::new(
            id.to_string(),
            acp::ToolCallUpdateFields::new()
                .status(status)
                .content(vec![acp::ToolCallContent::from(shown)]),
        )
        .meta(mia_meta(serde_json::to_value(outcome).unwrap_or(Value::Null))),
    )
}

/// A compaction: the summary that now stands for the older messages.
pub fn compaction(id: &str, summary: &str) -> acp::SessionUpdate {
    acp::SessionUpdate::CompactionUpdate(
        acp::CompactionUpdate::new(id.to_string(), acp::CompactionStatus::Completed)
            .summary(vec![summary.to_string().into()]),
    )
}

/// The model's plan (its `update_plan` call), as ACP's `plan` update:
/// `None` for arguments that are not a plan.
pub fn plan(arguments: &Value) -> Option<acp::SessionUpdate> {
    crate::tools::builtin::update_plan::plan_of(arguments).map(acp::SessionUpdate::Plan)
}

/// True for the tool whose calls reach the UI as `plan` updates, not tool blocks.
pub fn is_plan_tool(name: &str) -> bool {
    name == crate::tools::builtin::update_plan::NAME
}

/// The commands the core runs for this session (ACP's slash commands of an
/// agent): `compact` once the session holds something to summarize.
pub fn available_commands(has_messages: bool) -> acp::SessionUpdate {
    let mut commands = Vec::new();
    if has_messages {
        commands.push(acp::AvailableCommand::new(
            "compact",
            "summarize the conversation so far to save context",
        ));
    }
    acp::SessionUpdate::AvailableCommandsUpdate(acp::AvailableCommandsUpdate::new(commands))
}

/// The session's title or mode changed.
pub fn session_title(title: &str) -> acp::SessionUpdate {
    acp::SessionUpdate::SessionInfoUpdate(acp::SessionInfoUpdate::new().title(title.to_string()))
}

pub fn current_mode(mode: &str) -> acp::SessionUpdate {
    acp::SessionUpdate::CurrentModeUpdate(acp::CurrentModeUpdate::new(mode.to_string()))
}

/// mia's own agent switched to `mode` (the user asked, or the next request
/// of a turn runs in a mode switched meanwhile): ACP's `current_mode_update`,
/// as an external agent announces its switch, with the mode it left in
/// `_meta.mia.previousModeId` (the chat's `User MiaModeChanged` carries it).
pub fn mode_switched(mode: &str, previous: &str) -> acp::SessionUpdate {
    acp::SessionUpdate::CurrentModeUpdate(
        acp::CurrentModeUpdate::new(mode.to_string()).meta(mia_meta(json!({ "previousModeId": previous }))),
    )
}

/// What one provider call cost: ACP's `usage_update` (tokens in the context,
/// the session's cost so far) with the call's own figures in `_meta.mia`.
pub fn usage(
    usage: &Usage,
    cost: &Cost,
    context_window: u64,
    session_cost_usd: f64,
    day_cost_usd: Option<f64>,
) -> acp::SessionUpdate {
    // Counts come from the server: saturate rather than overflow on hostile ones.
    let used = usage
        .input_tokens
        .saturating_add(usage.cache_read_tokens)
        .saturating_add(usage.cache_write_tokens)
        .saturating_add(usage.output_tokens);
    let mut u = acp::UsageUpdate::new(used, context_window);
    u.cost = Some(acp::Cost::new(session_cost_usd, "USD"));
    u.meta = Some(mia_meta(json!({
        "usage": usage,
        "cost": cost,
        "session_cost_usd": session_cost_usd,
        "day_cost_usd": day_cost_usd,
    })));
    acp::SessionUpdate::UsageUpdate(u)
}

/// The figures of an answer still streaming (`_meta.mia.live`): the
/// turn's usage and cost so far, this answer's output estimated from its
/// text where the provider has not reported it yet (`usage.estimated`).
/// Sent at most every ~333 ms; the next plain [`usage`] replaces them.
pub fn live_usage(
    usage: &Usage,
    cost: &Cost,
    used: u64,
    context_window: u64,
    session_cost_usd: f64,
) -> acp::SessionUpdate {
    let mut u = acp::UsageUpdate::new(used, context_window);
    u.cost = Some(acp::Cost::new(session_cost_usd, "USD"));
    u.meta = Some(mia_meta(json!({
        "live": true,
        "usage": usage,
        "cost": cost,
        "session_cost_usd": session_cost_usd,
    })));
    acp::SessionUpdate::UsageUpdate(u)
}

/// Why a prompt turn ended: ACP's stop reasons, plus `error` (where ACP
/// answers the prompt request with an error instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
    Error,
}

/// The end of a prompt turn (the answer to ACP's `session/prompt`), stored
/// in the log so a replay ends the turn the same way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    #[serde(rename = "stopReason")]
    pub stop: Stop,
    pub model: String,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub cost: Cost,
    /// Set when `stop` is `error`: the class (`rate_limit`, `budget_exceeded`…) and the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TurnError>,
    /// A note the turn ends with (e.g. it stopped at `max_turns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// The session's cost after this turn (not stored: it changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_cost_usd: Option<f64>,
    /// Nobody reported the turn's token counts (an external agent that sends
    /// none): `usage` holds zeros that were never measured.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub usage_unreported: bool,
}

impl TurnEnd {
    /// The chat's line under the answer: the model, the tokens and the cost
    /// ([`mia_cost::footer`]), or that the usage was not reported.
    pub fn footer(&self) -> String {
        if self.usage_unreported {
            mia_cost::footer_unreported(&self.model, &self.cost)
        } else {
            mia_cost::footer(&self.model, &self.usage, &self.cost)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnError {
    pub class: String,
    pub message: String,
}

/// One step of a replay: an update, or the end of a turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayItem {
    Update(Box<acp::SessionUpdate>),
    End(Box<TurnEnd>),
}

/// What a replay carries from row to row: the model of the turn, the plan
/// tool's calls (their results are not drawn), and the session-unique tool
/// call ids given so far and in the last round ([`super::tool_ids`]).
#[derive(Default)]
struct ReplayState {
    model: String,
    plans: Vec<String>,
    ids: super::tool_ids::ToolIds,
    round: super::tool_ids::Round,
}

/// The updates one stored row stands for, in the order they were sent live.
fn row_items(row: &MessageRow, st: &mut ReplayState, out: &mut Vec<ReplayItem>) {
    if let Some(end) = row.meta.get("turn_end") {
        if let Ok(end) = serde_json::from_value::<TurnEnd>(end.clone()) {
            out.push(ReplayItem::End(Box::new(end)));
        }
        return;
    }
    let parts: Vec<Part> = serde_json::from_value(row.parts.clone()).unwrap_or_default();
    if let MessageKind::Compaction { .. } = row.kind {
        let text: String = parts
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        out.push(ReplayItem::Update(Box::new(compaction(&row.id, &text))));
        return;
    }
    match row.role {
        Role::User => {
            if let Some(m) = row.meta.get("model").and_then(Value::as_str) {
                st.model = m.to_string();
            }
            let mentions: Vec<Value> = row
                .meta
                .get("mentions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            // With mentions, the parts after the first are theirs: the typed text is the first.
            let typed = if mentions.is_empty() { parts.len() } else { 1 };
            let text: String = parts
                .iter()
                .take(typed)
                .filter_map(|p| match p {
                    Part::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n\n");
            let rules: Vec<String> = row
                .meta
                .get("rules")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default();
            out.push(ReplayItem::Update(Box::new(user_chunk(
                &text, &st.model, &rules, &mentions,
            ))));
            for m in &mentions {
                out.push(ReplayItem::Update(Box::new(mention_chunk(m))));
            }
        }
        Role::Assistant => {
            st.round = Default::default();
            for p in &parts {
                match p {
                    Part::Reasoning {
                        text, redacted: false, ..
                    } if !text.is_empty() => out.push(ReplayItem::Update(Box::new(agent_thought(text)))),
                    Part::Text { text } if !text.is_empty() => out.push(ReplayItem::Update(Box::new(agent_text(text)))),
                    Part::ToolCall {
                        id, name, arguments, ..
                    } => {
                        let acp_id = st.ids.assign(id);
                        st.round.push(id, acp_id.clone());
                        if is_plan_tool(name) {
                            st.plans.push(acp_id);
                            if let Some(update) = plan(arguments) {
                                out.push(ReplayItem::Update(Box::new(update)));
                            }
                        } else {
                            out.push(ReplayItem::Update(Box::new(tool_call(&acp_id, name, arguments))));
                        }
                    }
                    _ => {}
                }
            }
        }
        Role::Tool => {
            for p in &parts {
                if let Part::ToolResult {
                    tool_call_id,
                    content,
                    is_error,
                } = p
                {
                    let acp_id = st.round.take(tool_call_id);
                    if st.plans.contains(&acp_id) {
                        continue;
                    }
                    // Outcomes are stored by ACP id (by the provider's before ids were made unique).
                    let tools = row.meta.get("tools");
                    let outcome = tools
                        .and_then(|t| t.get(&acp_id).or_else(|| t.get(tool_call_id)))
                        .and_then(|o| serde_json::from_value::<ToolOutcome>(o.clone()).ok())
                        .unwrap_or(ToolOutcome {
                            status: if *is_error {
                                ToolStatus::Failed
                            } else {
                                ToolStatus::Done
                            },
                            duration_ms: None,
                            summary: None,
                        });
                    out.push(ReplayItem::Update(Box::new(tool_finished(&acp_id, content, &outcome))));
                }
            }
        }
    }
}

/// Every row of a session's log as the updates and turn ends the chat
/// received live. A row still marked streaming (Neovim died mid-answer)
/// replays its text and ends as an interrupted turn.
pub fn replay(log: &[MessageRow]) -> Vec<ReplayItem> {
    let mut out = Vec::with_capacity(log.len() * 2);
    let mut st = ReplayState::default();
    for (i, row) in log.iter().enumerate() {
        row_items(row, &mut st, &mut out);
        let next_is_end = log.get(i + 1).is_some_and(|r| r.meta.get("turn_end").is_some());
        if row.state == MessageState::Streaming && !next_is_end {
            out.push(ReplayItem::End(Box::new(TurnEnd {
                stop: Stop::Cancelled,
                model: st.model.clone(),
                usage: Usage::default(),
                cost: Cost::default(),
                error: None,
                notice: Some("interrupted: Neovim closed while this answer streamed".into()),
                session_cost_usd: None,
                usage_unreported: false,
            })));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_have_the_protocol_shape() {
        let v = serde_json::to_value(agent_text("hi")).unwrap();
        assert_eq!(
            v,
            json!({ "sessionUpdate": "agent_message_chunk", "content": { "type": "text", "text": "hi" } })
        );
        let v = serde_json::to_value(tool_call("c1", "bash", &json!({ "command": "ls" }))).unwrap();
        assert_eq!(v["sessionUpdate"], "tool_call");
        assert_eq!(v["toolCallId"], "c1");
        assert_eq!(v["kind"], "execute");
        assert!(
            v.get("status").is_none() || v["status"] == "pending",
            "pending is the default: {v}"
        );
        assert_eq!(v["rawInput"]["command"], "ls");
        let outcome = ToolOutcome {
            status: ToolStatus::Rejected,
            duration_ms: None,
            summary: None,
        };
        let v = serde_json::to_value(tool_finished("c1", "no", &outcome)).unwrap();
        assert_eq!(v["status"], "failed");
        assert_eq!(v["_meta"]["mia"]["status"], "rejected");
        assert_eq!(v["content"][0]["content"]["text"], "no");
    }

    #[test]
    fn a_replay_gives_a_reused_provider_tool_id_the_session_unique_ids_of_the_live_turns() {
        let row = |id: &str, role, parts: Value| {
            crate::session::message_row("s", id.into(), role, parts, MessageState::Complete)
        };
        let call = json!([{ "type": "tool_call", "id": "call_0", "name": "bash", "arguments": {} }]);
        let result = |text: &str| json!([{ "type": "tool_result", "tool_call_id": "call_0", "content": text }]);
        let mut second_result = row("r2", Role::Tool, result("two"));
        second_result.meta = json!({ "tools": { "call_0#2": { "status": "rejected" } } });
        let log = vec![
            row("a1", Role::Assistant, call.clone()),
            row("r1", Role::Tool, result("one")),
            row("a2", Role::Assistant, call),
            second_result,
        ];
        let ids: Vec<(String, Value)> = replay(&log)
            .into_iter()
            .filter_map(|item| match item {
                ReplayItem::Update(u) => {
                    let v = serde_json::to_value(&u).unwrap();
                    Some((
                        v["toolCallId"].as_str()?.to_string(),
                        v["_meta"]["mia"]["status"].clone(),
                    ))
                }
                ReplayItem::End(_) => None,
            })
            .collect();
        let names: Vec<&str> = ids.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(names, ["call_0", "call_0", "call_0#2", "call_0#2"]);
        assert_eq!(ids[3].1, "rejected", "the outcome stored under the session-unique id");
        assert_eq!(crate::session::tool_ids::ids_of_row(&log, "a2"), ["call_0#2"]);
    }

    #[test]
    fn the_turn_end_round_trips_through_the_log() {
        let end = TurnEnd {
            stop: Stop::Error,
            model: "m/x".into(),
            usage: Usage::default(),
            cost: Cost::default(),
            error: Some(TurnError {
                class: "rate_limit".into(),
                message: "slow down".into(),
            }),
            notice: None,
            session_cost_usd: None,
            usage_unreported: false,
        };
        let mut row = crate::session::message_row("s", "s-1".into(), Role::Assistant, json!([]), MessageState::Error);
        row.meta = json!({ "turn_end": end });
        assert_eq!(replay(&[row]), vec![ReplayItem::End(Box::new(end))]);
    }
}
