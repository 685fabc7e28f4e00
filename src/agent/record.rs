//! What an agent run leaves behind: the session row, every message (a
//! streaming answer checkpointed about once a second, so a killed Neovim
//! loses at most the last second of text), one usage row per provider call
//! with its cost, and the budget checks before each request.
//!
//! Message numbers (`seq`) come from the store, which appends each message
//! after the session's last one; the caller's history length plays no part,
//! so a history shortened by compaction can never overwrite stored messages.
//! A compaction is stored as a message of its own that covers the older
//! messages (which stay stored); see [`crate::store::MessageKind`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{notify, AgentDeps, AgentRequest};
use crate::cost::budget::{self, BudgetConfig, Gate, Spend};
use crate::events::StreamId;
use crate::llm::delta::StreamDone;
use crate::llm::error::{ErrorClass, LlmError};
use crate::llm::message::{Message, Part, Role};
use crate::store::{MessageKind, MessageRow, MessageState, SessionRow, Store, UsageRow};

/// How often a streaming answer is written to the store.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

pub use crate::cost::calendar::{local_day, now_ms};

/// A new message id, unique across the processes sharing the store: the
/// session, the time, the process and a per-process counter. Ids only name
/// rows; their order is the store's `seq`.
pub fn new_message_id(session_id: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{session_id}-m{:x}-{:x}-{n:x}", now_ms(), std::process::id())
}

/// A message row for [`Store::append_message`] (which assigns its `seq`).
fn message_row(id: String, session_id: &str, role: Role, parts: serde_json::Value, state: MessageState) -> MessageRow {
    let now = now_ms();
    MessageRow {
        id,
        session_id: session_id.to_string(),
        seq: 0,
        role,
        parts,
        state,
        meta: json!({}),
        kind: MessageKind::Message,
        created_at_ms: now,
        updated_at_ms: now,
    }
}

/// Stores a compaction summary under `id`: the summary message stands for
/// every message of the session but its latest `keep_last` (which the
/// compacted history kept verbatim). Failures are logged, never fatal: the
/// conversation goes on with the summary either way.
pub async fn record_compaction(store: &Store, session_id: &str, id: String, summary: &Message, keep_last: usize) {
    let parts = serde_json::to_value(&summary.parts).unwrap_or(json!([]));
    let row = message_row(id, session_id, summary.role, parts, MessageState::Complete);
    let keep_last = u32::try_from(keep_last).unwrap_or(u32::MAX);
    if let Err(e) = store.append_compaction(row, keep_last).await {
        tracing::warn!("cannot record the compaction: {e}");
    }
}

/// Writes a streaming answer to the store at most once per second.
#[derive(Clone)]
pub struct Checkpointer {
    store: Arc<Store>,
    row: MessageRow,
}

impl Checkpointer {
    pub fn save(&self, text: &str) {
        let mut row = self.row.clone();
        row.parts = json!([{ "type": "text", "text": text }]);
        row.updated_at_ms = now_ms();
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.append_message(row).await {
                tracing::warn!("checkpoint failed: {e}");
            }
        });
    }
}

/// Throttles checkpoints of the text streamed so far.
pub struct Partial {
    pub text: String,
    last: Instant,
    cp: Option<Checkpointer>,
}

impl Partial {
    pub fn push(&mut self, text: &str) {
        self.text.push_str(text);
        if let Some(cp) = &self.cp {
            if self.last.elapsed() >= CHECKPOINT_EVERY {
                cp.save(&self.text);
                self.last = Instant::now();
            }
        }
    }
}

/// The usage row of one provider call that ended with `done`.
pub fn usage_row(
    session_id: Option<&str>,
    message_id: Option<String>,
    agent: &str,
    done: &StreamDone,
    started_ms: i64,
) -> UsageRow {
    let c = &done.cost;
    UsageRow {
        session_id: session_id.map(str::to_string),
        message_id,
        agent: agent.to_string(),
        provider: done.provider.clone(),
        model: done.model.clone(),
        input_tokens: done.usage.input_tokens,
        output_tokens: done.usage.output_tokens,
        cache_read_tokens: done.usage.cache_read_tokens,
        cache_write_tokens: done.usage.cache_write_tokens,
        reasoning_tokens: done.usage.reasoning_tokens,
        estimated: done.usage.estimated,
        cost_known: c.known,
        input_usd: c.input_usd.unwrap_or(0.0),
        output_usd: c.output_usd.unwrap_or(0.0),
        cache_read_usd: c.cache_read_usd.unwrap_or(0.0),
        cache_write_usd: c.cache_write_usd.unwrap_or(0.0),
        total_usd: c.total_usd.unwrap_or(0.0),
        started_at_ms: started_ms,
        duration_ms: now_ms() - started_ms,
        created_at_ms: now_ms(),
    }
}

/// Checks `budgets` against `spend` before a request: a reached hard limit
/// refuses (class `budget_exceeded`), a soft one asks the user through a
/// `confirm` call. The agent loop and `mia.stream`/`mia.send` share it.
pub async fn gate_spend(
    budgets: &BudgetConfig,
    spend: Spend,
    calls: &crate::calls::PendingCalls,
    queue: &crate::events::EventQueue,
    stream: StreamId,
    cancel: &CancellationToken,
) -> Result<(), LlmError> {
    match budget::gate(budgets, spend) {
        Gate::Proceed => Ok(()),
        Gate::Refuse { message } => Err(LlmError::new(ErrorClass::BudgetExceeded, None, message)),
        Gate::Confirm { message } => {
            let answer = calls
                .call(
                    queue,
                    stream,
                    "confirm",
                    json!({ "message": message }),
                    Duration::from_secs(3600),
                    cancel,
                )
                .await;
            match answer {
                Ok(Ok(serde_json::Value::Bool(true))) => Ok(()),
                Err(crate::calls::CallError::Cancelled) => Err(LlmError::cancelled()),
                _ => Err(LlmError::new(
                    ErrorClass::BudgetExceeded,
                    None,
                    format!(
                        "{} Not sent: you answered no.",
                        message.trim_end_matches(" Continue? [y/N]")
                    ),
                )),
            }
        }
    }
}

/// The store side of one run.
pub struct Recorder {
    store: Option<Arc<Store>>,
    session_id: String,
    /// The id the run's next message (answer or tool results) is stored
    /// under; its checkpoints and its usage row use it too.
    next_id: String,
    offset_s: i32,
    budgets: BudgetConfig,
    pub session_cost_usd: f64,
}

impl Recorder {
    /// Opens the store, records the session and the new user message.
    /// Without a session id (a bare `mia.agent` call) nothing is stored.
    pub async fn start(deps: &AgentDeps, req: &AgentRequest, root: &std::path::Path) -> Recorder {
        let store = if req.session_id.is_empty() {
            None
        } else {
            crate::runtime::store().await
        };
        let mut r = Recorder {
            store,
            session_id: req.session_id.clone(),
            next_id: new_message_id(&req.session_id),
            offset_s: req.utc_offset_s,
            budgets: deps.settings.costs,
            session_cost_usd: 0.0,
        };
        let Some(store) = r.store.clone() else { return r };
        let now = now_ms();
        let session = SessionRow {
            id: req.session_id.clone(),
            cwd: root.display().to_string(),
            title: req.title.clone(),
            mode: req.mode.clone(),
            model: req.model.clone(),
            created_at_ms: now,
            updated_at_ms: now,
            meta: json!({}),
        };
        if let Err(e) = store.upsert_session(session).await {
            tracing::warn!("cannot record the session: {e}");
        }
        if let Some(last) = req.messages.last() {
            r.write(last, new_message_id(&r.session_id), MessageState::Complete)
                .await;
        }
        if let Ok(spend) = store.spend(&r.session_id, 0, 0).await {
            r.session_cost_usd = spend.session_usd;
        }
        r
    }

    async fn write(&self, message: &Message, id: String, state: MessageState) {
        let Some(store) = &self.store else { return };
        let parts = serde_json::to_value(&message.parts).unwrap_or(json!([]));
        let row = message_row(id, &self.session_id, message.role, parts, state);
        if let Err(e) = store.append_message(row).await {
            tracing::warn!("cannot record a message: {e}");
        }
    }

    /// Moves on to a new id for the next message.
    fn take_id(&mut self) -> String {
        std::mem::replace(&mut self.next_id, new_message_id(&self.session_id))
    }

    /// A partial-text holder for the next assistant message, checkpointed to the store.
    pub fn partial(&self) -> Partial {
        let cp = self.store.clone().map(|store| Checkpointer {
            store,
            row: message_row(
                self.next_id.clone(),
                &self.session_id,
                Role::Assistant,
                json!([]),
                MessageState::Streaming,
            ),
        });
        Partial {
            text: String::new(),
            last: Instant::now(),
            cp,
        }
    }

    /// Stores a finished message (assistant answer or tool results) at the next position.
    pub async fn message(&mut self, message: &Message) {
        let id = self.take_id();
        self.write(message, id, MessageState::Complete).await;
    }

    /// Stores the summary of an automatic compaction that kept the latest
    /// `keep_last` messages verbatim (see [`record_compaction`]).
    pub async fn compaction(&mut self, summary: &Message, keep_last: usize) {
        let id = self.take_id();
        if let Some(store) = &self.store {
            record_compaction(store, &self.session_id, id, summary, keep_last).await;
        }
    }

    /// Stores what an interrupted answer had produced.
    pub async fn interrupted(&mut self, partial: &Partial, state: MessageState) {
        if partial.text.is_empty() {
            return;
        }
        let message = Message {
            role: Role::Assistant,
            parts: vec![Part::Text {
                text: partial.text.clone(),
            }],
        };
        let id = self.take_id();
        self.write(&message, id, state).await;
    }

    async fn spend(&self) -> Option<Spend> {
        let store = self.store.as_ref()?;
        let (start, end) = local_day(now_ms(), self.offset_s);
        let s = store.spend(&self.session_id, start, end).await.ok()?;
        Some(Spend {
            session_usd: s.session_usd,
            day_usd: s.day_usd,
        })
    }

    /// Checks the budgets before a request; a reached limit asks the user
    /// (soft) or refuses (hard). Refusing sends nothing to the provider.
    pub async fn gate(&self, deps: &AgentDeps, stream: StreamId, cancel: &CancellationToken) -> Result<(), LlmError> {
        let Some(spend) = self.spend().await else { return Ok(()) };
        gate_spend(&self.budgets, spend, &deps.calls, &deps.queue, stream, cancel).await
    }

    /// Records one provider call and tells Lua about the new totals; warns
    /// once when a warning threshold is crossed.
    pub async fn usage(&mut self, deps: &AgentDeps, stream: StreamId, done: &StreamDone, agent: &str, started_ms: i64) {
        let before = self.spend().await;
        if let Some(store) = &self.store {
            let row = usage_row(
                Some(&self.session_id),
                Some(self.next_id.clone()),
                agent,
                done,
                started_ms,
            );
            if let Err(e) = store.record_usage(row).await {
                tracing::warn!("cannot record usage: {e}");
            }
        }
        let after = self.spend().await;
        if let Some(a) = after {
            self.session_cost_usd = a.session_usd;
        } else if let Some(total) = done.cost.total_usd {
            self.session_cost_usd += total;
        }
        notify(
            &deps.queue,
            stream,
            json!({
                "type": "usage",
                "usage": done.usage,
                "cost": done.cost,
                "session_cost_usd": self.session_cost_usd,
                "day_cost_usd": after.map(|a| a.day_usd),
            }),
        );
        if let (Some(b), Some(a)) = (before, after) {
            for w in budget::crossed_warnings(&self.budgets, b, a) {
                notify(&deps.queue, stream, json!({ "type": "warning", "text": w.message }));
            }
        }
    }
}
