//! The agent loop behind `:Mia prompt`: request → stream → tool calls →
//! permission → results → next request, until the model stops or
//! `max_turns`. Context overflow triggers one compaction (older turns
//! summarized by the same model, the summary stored as a message of its own)
//! and a retry.

mod compaction;
pub mod record;
mod tool_round;

pub use compaction::compact;

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::calls::PendingCalls;
use crate::cost::Usage;
use crate::events::{Event, EventQueue, StreamId};
use crate::llm::delta::StreamDone;
use crate::llm::error::{ErrorClass, LlmError};
use crate::llm::message::{ChatRequest, Message, ToolDef};
use crate::llm::providers::Providers;
use crate::tools::permissions::{PermissionConfig, Remembered};
use crate::tools::registry::Registry;
use crate::tools::{AgentInfo, ToolLimits};

/// `setup()` options for the agent (`core.configure_agent`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct AgentSettings {
    pub permissions: PermissionConfig,
    /// Where remembered permissions are kept.
    pub data_dir: Option<PathBuf>,
    pub max_turns: u32,
    pub bash_timeout_ms: u64,
    pub max_read_bytes: u64,
    pub output_cap_bytes: usize,
    /// How long a permission question may wait for the user.
    pub ask_timeout_ms: u64,
    /// Extra system prompt per mode (e.g. architect's planning instructions).
    pub mode_prompts: std::collections::BTreeMap<String, String>,
    /// Cost warnings and limits (`setup({ costs = ... })`).
    pub costs: crate::cost::BudgetConfig,
    /// Modes that offer only some tools: mode -> tool names (other modes offer all they may run).
    pub mode_tools: std::collections::BTreeMap<String, Vec<String>>,
}

impl Default for AgentSettings {
    fn default() -> Self {
        let limits = ToolLimits::default();
        AgentSettings {
            permissions: PermissionConfig::default(),
            data_dir: None,
            max_turns: 25,
            bash_timeout_ms: limits.bash_timeout_ms,
            max_read_bytes: limits.max_read_bytes,
            output_cap_bytes: limits.output_cap_bytes,
            ask_timeout_ms: 600_000,
            mode_prompts: Default::default(),
            costs: Default::default(),
            mode_tools: Default::default(),
        }
    }
}

/// One `:Mia prompt` run, as Lua sends it.
#[derive(Debug, Clone, Deserialize)]
pub struct AgentRequest {
    pub model: String,
    #[serde(default)]
    pub system: Option<String>,
    pub messages: Vec<Message>,
    #[serde(default = "default_mode")]
    pub mode: String,
    /// Project root (default: the working directory).
    #[serde(default)]
    pub root: Option<String>,
    #[serde(default)]
    pub session_id: String,
    #[serde(default)]
    pub max_turns: Option<u32>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f64>,
    /// The session's title (stored with it).
    #[serde(default)]
    pub title: Option<String>,
    /// Local time's offset from UTC, for calendar-day budgets.
    #[serde(default)]
    pub utc_offset_s: i32,
}

fn default_mode() -> String {
    "ask".to_string()
}

/// What a run needs from the rest of the core.
#[derive(Clone)]
pub struct AgentDeps {
    pub providers: Arc<Providers>,
    pub registry: Arc<Registry>,
    pub queue: Arc<EventQueue>,
    pub calls: Arc<PendingCalls>,
    pub settings: AgentSettings,
}

/// Sends agent progress to Lua.
pub(crate) fn notify(queue: &EventQueue, stream: StreamId, value: serde_json::Value) {
    queue.push(Event::Agent { stream, value });
}

/// The system prompt with the tools the model may use and where it works.
fn system_prompt(parts: &[Option<&str>], tools: &[ToolDef], root: &std::path::Path) -> String {
    let mut s = parts.iter().flatten().copied().collect::<Vec<_>>().join("\n\n");
    s.push_str(&format!(
        "\n\nThe project root is {}. File paths are relative to it.",
        root.display()
    ));
    if !tools.is_empty() {
        s.push_str("\nTools you can call:\n");
        for t in tools {
            let first_line = t.description.lines().next().unwrap_or_default();
            s.push_str(&format!("- {}: {}\n", t.name, first_line));
        }
    }
    s
}

fn add_usage(total: &mut Usage, u: &Usage) {
    total.input_tokens += u.input_tokens;
    total.output_tokens += u.output_tokens;
    total.cache_read_tokens += u.cache_read_tokens;
    total.cache_write_tokens += u.cache_write_tokens;
    total.reasoning_tokens += u.reasoning_tokens;
    total.estimated |= u.estimated;
}

/// Runs the loop. Text deltas of every turn go to `stream` as they arrive;
/// tool progress and new history messages go as agent events. Returns the
/// last turn's answer with `usage` summed over the run.
pub async fn run(
    deps: AgentDeps,
    stream: StreamId,
    req: AgentRequest,
    cancel: CancellationToken,
) -> Result<StreamDone, LlmError> {
    let root = match &req.root {
        Some(r) => PathBuf::from(r),
        None => std::env::current_dir().map_err(|e| {
            LlmError::new(
                ErrorClass::InvalidRequest,
                None,
                format!("mia: no project root ({e}); pass `root`."),
            )
        })?,
    };
    let root = tokio::fs::canonicalize(&root).await.unwrap_or(root);
    let mut remembered = match &deps.settings.data_dir {
        Some(dir) => {
            let loaded = Remembered::load(dir).await;
            if let Some(warning) = loaded.warning {
                notify(&deps.queue, stream, json!({ "type": "warning", "text": warning }));
            }
            loaded.remembered.for_project(&root)
        }
        None => Vec::new(),
    };
    let mut agent = AgentInfo {
        name: "mia".into(),
        mode: req.mode.clone(),
    };
    let max_turns = req.max_turns.unwrap_or(deps.settings.max_turns).max(1);
    let mut history = req.messages.clone();
    let mut total = Usage::default();
    let mut total_cost = crate::cost::Cost {
        known: true,
        ..Default::default()
    };
    let mut recorder = record::Recorder::start(&deps, &req, &root).await;
    let mut compacted = false;
    let caller = crate::hooks::Caller {
        queue: deps.queue.clone(),
        calls: deps.calls.clone(),
        stream,
        cancel: cancel.clone(),
    };
    let mut turn = 0;
    let mut last: Option<StreamDone> = None;
    while turn < max_turns {
        turn += 1;
        // The mode may change while the run goes on (`set_mode`); each request uses the current one.
        agent.mode = crate::runtime::session_mode(&req.session_id).unwrap_or_else(|| req.mode.clone());
        let mut tools = deps.registry.available(&agent.mode, &deps.settings.permissions);
        if let Some(only) = deps.settings.mode_tools.get(&agent.mode) {
            tools.retain(|t| only.iter().any(|name| name == t.name()));
        }
        let defs: Vec<ToolDef> = tools
            .iter()
            .map(|t| ToolDef {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: t.parameters(),
            })
            .collect();
        let chat = ChatRequest {
            model: req.model.clone(),
            system: Some(system_prompt(
                &[
                    req.system.as_deref(),
                    deps.settings.mode_prompts.get(&agent.mode).map(String::as_str),
                ],
                &defs,
                &root,
            )),
            messages: history.clone(),
            tools: defs,
            max_tokens: req.max_tokens,
            temperature: req.temperature,
            extra_body: None,
        };
        recorder.gate(&deps, stream, &cancel).await?;
        notify(&deps.queue, stream, json!({ "type": "turn", "turn": turn }));
        let q = deps.queue.clone();
        let mut partial = recorder.partial();
        let started_ms = record::now_ms();
        let mut emit = |delta: crate::llm::delta::Delta| {
            if let crate::llm::delta::Delta::Text { text } = &delta {
                partial.push(text);
            }
            q.push(Event::Delta { stream, delta })
        };
        let result = tokio::select! {
            r = crate::hooks::call_model(&caller, &deps.providers, &chat, true, &mut emit) => r,
            _ = cancel.cancelled() => Err(LlmError::cancelled()),
        };
        let done = match result {
            Ok(done) => done,
            Err(e) if e.class == ErrorClass::ContextOverflow && !compacted => {
                compacted = true;
                turn -= 1;
                let started_ms = record::now_ms();
                let (compacted_history, summary) =
                    compaction::compact(&caller, &deps.providers, &req.model, &history, compaction::KEEP_RECENT)
                        .await?;
                recorder.usage(&deps, stream, &summary, "compaction", started_ms).await;
                if let Some(summary_message) = compacted_history.first() {
                    recorder.compaction(summary_message, compacted_history.len() - 1).await;
                }
                add_usage(&mut total, &summary.usage);
                add_cost(&mut total_cost, &summary.cost);
                history = compacted_history;
                notify(
                    &deps.queue,
                    stream,
                    json!({ "type": "notice", "text": "context compacted", "messages": history }),
                );
                continue;
            }
            Err(e) => {
                let state = if e.class == ErrorClass::Cancelled {
                    crate::store::MessageState::Cancelled
                } else {
                    crate::store::MessageState::Error
                };
                recorder.interrupted(&partial, state).await;
                return Err(e);
            }
        };
        recorder.usage(&deps, stream, &done, &agent.name, started_ms).await;
        add_usage(&mut total, &done.usage);
        add_cost(&mut total_cost, &done.cost);
        if !done.message.parts.is_empty() {
            recorder.message(&done.message).await;
            history.push(done.message.clone());
            notify(
                &deps.queue,
                stream,
                json!({ "type": "message", "message": done.message }),
            );
        }
        if done.tool_calls.is_empty() {
            return Ok(finish(done, total, total_cost, recorder.session_cost_usd));
        }
        let results = tool_round::run(
            &deps,
            stream,
            &agent,
            &root,
            &req.session_id,
            &done,
            &mut remembered,
            &cancel,
            &history,
        )
        .await;
        recorder.message(&results).await;
        history.push(results.clone());
        notify(&deps.queue, stream, json!({ "type": "message", "message": results }));
        if cancel.is_cancelled() {
            return Err(LlmError::cancelled());
        }
        last = Some(done);
    }
    notify(
        &deps.queue,
        stream,
        json!({ "type": "notice", "text": format!("stopped after {max_turns} turns (max_turns)") }),
    );
    let done = last.ok_or_else(LlmError::cancelled)?;
    Ok(finish(done, total, total_cost, recorder.session_cost_usd))
}

/// The last turn's answer with the run's totals and the chat footer.
fn finish(mut done: StreamDone, total: Usage, cost: crate::cost::Cost, session_cost_usd: f64) -> StreamDone {
    done.usage = total;
    done.cost = cost;
    done.footer = Some(crate::cost::footer(&done.model, &done.usage, &done.cost));
    done.session_cost_usd = Some(session_cost_usd);
    done
}

fn add_cost(total: &mut crate::cost::Cost, c: &crate::cost::Cost) {
    if !c.known {
        *total = crate::cost::Cost::default();
        return;
    }
    if !total.known {
        return;
    }
    let add = |a: Option<f64>, b: Option<f64>| Some(a.unwrap_or(0.0) + b.unwrap_or(0.0));
    total.total_usd = add(total.total_usd, c.total_usd);
    total.input_usd = add(total.input_usd, c.input_usd);
    total.output_usd = add(total.output_usd, c.output_usd);
    total.cache_read_usd = add(total.cache_read_usd, c.cache_read_usd);
    total.cache_write_usd = add(total.cache_write_usd, c.cache_write_usd);
}
