//! `update_plan`: the model's plan for the task, as ACP's `plan` update. It
//! changes nothing on disk; the agent loop turns each call into a `plan`
//! session update that the chat draws as a checklist.

use agent_client_protocol_schema::v1 as acp;
use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::object_schema;
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutput};

/// Records the model's plan.
pub struct UpdatePlan;

pub const NAME: &str = "update_plan";
/// Most steps a plan may have, and longest step text (characters).
const MAX_STEPS: usize = 50;
const MAX_STEP_CHARS: usize = 500;

impl Tool for UpdatePlan {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Record your plan for a task of several steps, and keep it current: send the whole list each time, with \
         each step's status (pending, in_progress, completed). The user sees it in the chat."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "entries": {
                    "type": "array",
                    "maxItems": MAX_STEPS,
                    "description": "Every step of the plan, in order.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": { "type": "string", "minLength": 1, "maxLength": MAX_STEP_CHARS },
                            "status": { "type": "string", "enum": ["pending", "in_progress", "completed"] },
                            "priority": { "type": "string", "enum": ["high", "medium", "low"] },
                        },
                        "required": ["content", "status"],
                        "additionalProperties": false,
                    },
                },
            }),
            &["entries"],
        )
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Read
    }

    fn call(&self, args: Value, _ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            match plan_of(&args) {
                Some(plan) => {
                    let done = plan
                        .entries
                        .iter()
                        .filter(|e| e.status == acp::PlanEntryStatus::Completed)
                        .count();
                    let n = plan.entries.len();
                    ToolOutput::ok(format!("Plan recorded: {n} steps, {done} completed."))
                        .with_summary(format!("📋 plan: {done}/{n} done"))
                }
                None => ToolOutput::error("`entries` must be a list of { content, status, priority? } steps"),
            }
        })
    }
}

/// The ACP plan a call's arguments describe (`None` for arguments that are not one).
pub fn plan_of(args: &Value) -> Option<acp::Plan> {
    let entries = args.get("entries")?.as_array()?;
    if entries.len() > MAX_STEPS {
        return None;
    }
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let content = e.get("content")?.as_str()?;
        if content.is_empty() || content.chars().count() > MAX_STEP_CHARS {
            return None;
        }
        let status = match e.get("status")?.as_str()? {
            "pending" => acp::PlanEntryStatus::Pending,
            "in_progress" => acp::PlanEntryStatus::InProgress,
            "completed" => acp::PlanEntryStatus::Completed,
            _ => return None,
        };
        let priority = match e.get("priority").and_then(Value::as_str).unwrap_or("medium") {
            "high" => acp::PlanEntryPriority::High,
            "low" => acp::PlanEntryPriority::Low,
            _ => acp::PlanEntryPriority::Medium,
        };
        out.push(acp::PlanEntry::new(content.to_string(), priority, status));
    }
    Some(acp::Plan::new(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_read_from_its_arguments_and_bad_ones_are_refused() {
        let plan = plan_of(&json!({ "entries": [
            { "content": "read the code", "status": "completed" },
            { "content": "write the fix", "status": "in_progress", "priority": "high" },
        ] }))
        .unwrap();
        let v = serde_json::to_value(acp::SessionUpdate::Plan(plan)).unwrap();
        assert_eq!(v["sessionUpdate"], "plan");
        assert_eq!(v["entries"][1]["status"], "in_progress");
        assert_eq!(v["entries"][1]["priority"], "high");
        assert!(plan_of(&json!({ "entries": [{ "content": "", "status": "pending" }] })).is_none());
        assert!(plan_of(&json!({ "entries": [{ "content": "x", "status": "maybe" }] })).is_none());
        let many: Vec<Value> = (0..51)
            .map(|_| json!({ "content": "x", "status": "pending" }))
            .collect();
        assert!(plan_of(&json!({ "entries": many })).is_none());
    }
}
