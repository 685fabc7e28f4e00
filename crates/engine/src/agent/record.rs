//! What an agent run leaves behind: the session row, every message (a
//! streaming answer checkpointed about once a second, so a killed Neovim
//! loses at most the last second of text), one usage row per provider call
//! with its cost, and the budget checks before each request.
//!
//! Message numbers (`seq`) come from the store, which appends each message
//! after the session's last one; the caller's history length plays no part,
//! so a history shortened by compaction can never overwrite stored messages.
//! A compaction is stored as a message of its own that covers the older
//! messages (which stay stored); see [`mia_store::MessageKind`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{mia_event, update, AgentDeps, Prompt};
use crate::events::MiaEvent;
use crate::events::StreamId;
use crate::session::{message_row, updates, Session};
use mia_cost::budget::{self, BudgetConfig, Gate, Spend};
use mia_llm::delta::StreamDone;
use mia_llm::error::{ErrorClass, LlmError};
use mia_llm::message::{Message, Part, Role};
use mia_store::{MessageRow, MessageState, UsageRow};

/// How often a streaming answer is written to the store.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

pub use crate::session::new_message_id;
pub use mia_cost::calendar::{local_day, now_ms};

/// The parts of an answer interrupted after `reasoning` and `text` arrived.
fn partial_parts(reasoning: &str, text: &str) -> serde_json::Value {
    let mut parts = Vec::new();
    if !reasoning.is_empty() {
        parts.push(Part::Reasoning {
            text: reasoning.to_string(),
            signature: None,
            redacted: false,
        });
    }
    if !text.is_empty() {
        parts.push(Part::Text { text: text.to_string() });
    }
    serde_json::to_value(parts).unwrap_or(json!([]))
}

/// Writes a streaming answer to the store at most once per second, once
/// the prompt before it is stored (so the answer is numbered after it).
#[derive(Clone)]
pub struct Checkpointer {
    session: Arc<Session>,
    recorded: Arc<AtomicBool>,
    row: MessageRow,
}

impl Checkpointer {
    pub fn save(&self, reasoning: &str, text: &str) {
        if !self.recorded.load(Ordering::Acquire) {
            return;
        }
        let Some(store) = self.session.store() else { return };
        let mut row = self.row.clone();
        row.parts = partial_parts(reasoning, text);
        row.updated_at_ms = now_ms();
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
    pub reasoning: String,
    last: Instant,
    cp: Checkpointer,
}

impl Partial {
    pub fn push(&mut self, text: &str) {
        self.text.push_str(text);
        self.tick();
    }

    pub fn push_reasoning(&mut self, text: &str) {
        self.reasoning.push_str(text);
        self.tick();
    }

    fn tick(&mut self) {
        if self.last.elapsed() >= CHECKPOINT_EVERY {
            self.cp.save(&self.reasoning, &self.text);
            self.last = Instant::now();
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
        cost_source: c.source,
        started_at_ms: started_ms,
        duration_ms: now_ms() - started_ms,
        created_at_ms: now_ms(),
        retries: done.retries,
    }
}

/// What the budgets count: the store's figures for `session` (none: `""`)
/// and the local day `[day_start_ms, day_end_ms)`, and true; or, when there
/// is no store or it cannot be read, what this app has spent, from `ledger`
/// ([`mia_cost::ledger`]), and false. Budgets never go unchecked for
/// want of the store.
pub async fn spend_now(
    store: Option<&mia_store::Store>,
    ledger: &mia_cost::ledger::Ledger,
    session: &str,
    day_start_ms: i64,
    day_end_ms: i64,
) -> (Spend, bool) {
    if let Some(store) = store {
        // A store another process holds is not waited on (up to its 5 s busy
        // timeout) before every request: past a second, the ledger answers.
        let read = tokio::time::timeout(SPEND_WAIT, store.spend(session, day_start_ms, day_end_ms)).await;
        let Ok(read) = read else {
            tracing::warn!("reading the spend took over a second: budgets count this Neovim's calls only");
            return (ledger.spend(session, day_start_ms, day_end_ms), false);
        };
        match read {
            Ok(s) => {
                let spend = Spend {
                    session_usd: if session.is_empty() { 0.0 } else { s.session_usd },
                    day_usd: s.day_usd,
                };
                return (spend, true);
            }
            Err(e) => tracing::warn!("reading the spend failed ({e}): budgets count this Neovim's calls only"),
        }
    }
    (ledger.spend(session, day_start_ms, day_end_ms), false)
}

/// Longest wait for the store's spend before a request ([`spend_now`]).
const SPEND_WAIT: Duration = Duration::from_secs(1);

/// Records one call's usage row in the store, if there is one, and in this
/// app's ledger, which the budgets fall back on ([`spend_now`]).
pub async fn record_usage(store: Option<&mia_store::Store>, ledger: &mia_cost::ledger::Ledger, row: UsageRow) {
    if row.cost_known {
        ledger.record(row.session_id.as_deref(), row.created_at_ms, row.total_usd);
    }
    if let Some(store) = store {
        let agent = row.agent.clone();
        if let Err(e) = store.record_usage(row).await {
            tracing::warn!("cannot record the usage of a {agent} call: {e}");
        }
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
        Gate::Confirm { reason } => {
            let answer = calls
                .call_for::<mia_proto::reply::ConfirmReply>(
                    queue,
                    stream,
                    mia_proto::EditorCall::Confirm(mia_proto::Confirm::Budget { reason: reason.clone() }),
                    Duration::from_secs(3600),
                    cancel,
                )
                .await;
            match answer {
                Ok(Ok(mia_proto::reply::ConfirmReply { go_on: true })) => Ok(()),
                Err(crate::calls::CallError::Cancelled) => Err(LlmError::cancelled()),
                _ => Err(LlmError::new(
                    ErrorClass::BudgetExceeded,
                    None,
                    format!("{reason} Not sent: you answered no."),
                )),
            }
        }
    }
}

/// Says once per app that chats are not saved because the store could
/// not be opened (its error names the file and what to do); without a data
/// directory there is nothing to say.
fn warn_unsaved(store: &crate::app::StoreSlot, queue: &crate::events::EventQueue, stream: StreamId) {
    if let Some(why) = store.unsaved_warning() {
        let text = format!("mia: chats and costs are not being saved: {why} (then restart Neovim)");
        mia_event(queue, stream, MiaEvent::Warning { text });
    }
}

/// Tells the user, on `stream`, each change in the store's saving not told
/// yet (saving stopped and why, writes being lost, saving works again; see
/// [`mia_store::SavingNews`]). Each is told once, on whichever stream
/// comes first after it.
pub fn tell_saving(store: Option<&mia_store::Store>, queue: &crate::events::EventQueue, stream: StreamId) {
    let Some(store) = store else { return };
    for news in store.take_saving_news() {
        mia_event(queue, stream, MiaEvent::Warning { text: news.message() });
    }
}

/// The store side of one run: everything goes through the session, which
/// keeps its log in memory and in the store.
///
/// The prompt is stored beside the first request rather than before it:
/// the store may still be opening when a turn starts (the first prompt
/// after Neovim starts), and its first write takes a transaction. Every
/// later step that touches the store or the log waits for that write
/// first ([`Recorder::settle`]), so the store numbers the prompt before
/// anything the turn adds, and a run settles before it returns.
pub struct Recorder {
    session: Arc<Session>,
    /// The app's spend in memory, for when the store cannot be read.
    ledger: Arc<mia_cost::ledger::Ledger>,
    /// Storing the session row and the prompt (and, for a session that was
    /// stored before, reading what it has cost): until [`Recorder::settle`].
    pending: Option<tokio::task::JoinHandle<f64>>,
    /// Set once the prompt is stored: checkpoints of the answer wait for it.
    recorded: Arc<AtomicBool>,
    session_id: String,
    /// The id the run's next message (answer or tool results) is stored
    /// under; its checkpoints and its usage row use it too.
    next_id: String,
    offset_s: i32,
    budgets: BudgetConfig,
    pub session_cost_usd: f64,
}

impl Recorder {
    /// Adds the new user message to the log and shows the prompt; the
    /// session row and the message are stored in the background until
    /// [`Recorder::settle`] (at once for a session stored before).
    pub async fn start(
        deps: &AgentDeps,
        stream: StreamId,
        session: Arc<Session>,
        prompt: &Prompt,
        rules: &[String],
        attached: super::mentions::Resolved,
    ) -> Recorder {
        session.update_info(prompt.mode.as_deref(), prompt.model.as_deref(), None);
        let new_title = match (session.info().title, prompt.title.as_deref()) {
            (None, Some(title)) if !title.is_empty() => Some(title.to_string()),
            _ => None,
        };
        if let Some(title) = &new_title {
            session.update_info(None, None, Some(title));
        }
        let session_id = session.id();
        let mut r = Recorder {
            session: session.clone(),
            pending: None,
            recorded: Arc::new(AtomicBool::new(false)),
            next_id: new_message_id(&session_id),
            session_id,
            offset_s: prompt.utc_offset_s,
            budgets: deps.settings.costs,
            ledger: deps.store.ledger(),
            session_cost_usd: 0.0,
        };
        let new = session.is_new();
        let model = session.info().model;
        let mut parts = vec![Part::Text {
            text: prompt.content.clone(),
        }];
        parts.extend(attached.parts);
        let mut row = message_row(
            &r.session_id,
            new_message_id(&r.session_id),
            Role::User,
            serde_json::to_value(&parts).unwrap_or(json!([])),
            MessageState::Complete,
        );
        row.meta = json!({ "model": model });
        if !rules.is_empty() {
            row.meta["rules"] = json!(rules);
        }
        if !attached.records.is_empty() {
            row.meta["mentions"] = json!(attached.records);
        }
        // In the log at once (the request carries it); stored beside it.
        let row = session.append_local(row);
        let (stored, recorded, queue) = (session.clone(), r.recorded.clone(), deps.queue.clone());
        let slot = deps.store.clone();
        r.pending = Some(tokio::spawn(async move {
            if stored.store().is_none() {
                stored.attach_store(slot.get().await);
                if stored.store().is_none() {
                    warn_unsaved(&slot, &queue, stream);
                }
            }
            // Both writes are queued before either is awaited: the store's
            // writer takes them in this order, usually in one transaction.
            tokio::join!(stored.persist(), stored.store_row(row));
            recorded.store(true, Ordering::Release);
            tell_saving(stored.store().as_deref(), &queue, stream);
            // A session that was never stored has spent nothing yet: no need to ask the store.
            if new {
                0.0
            } else {
                stored.cost_usd().await
            }
        }));
        update(
            &deps.queue,
            stream,
            updates::user_chunk(&prompt.content, &model, rules, &attached.records),
        );
        for m in &attached.records {
            update(&deps.queue, stream, updates::mention_chunk(m));
        }
        if let Some(title) = new_title {
            update(&deps.queue, stream, updates::session_title(&title));
        }
        // A stored session's spend so far goes into the live cost the
        // first request shows; its store is open already (it was loaded).
        if !new {
            r.settle().await;
        }
        r
    }

    /// Waits until the prompt is stored (see [`Recorder`]); at once after
    /// the first time.
    pub async fn settle(&mut self) {
        let Some(pending) = self.pending.take() else { return };
        match pending.await {
            Ok(cost) => self.session_cost_usd = cost,
            Err(e) => {
                tracing::warn!("recording the prompt failed: {e}");
                self.recorded.store(true, Ordering::Release);
            }
        }
    }

    /// Moves on to a new id for the next message.
    fn take_id(&mut self) -> String {
        std::mem::replace(&mut self.next_id, new_message_id(&self.session_id))
    }

    /// A partial-text holder for the next assistant message, checkpointed to the store.
    pub fn partial(&self) -> Partial {
        let cp = Checkpointer {
            session: self.session.clone(),
            recorded: self.recorded.clone(),
            row: message_row(
                &self.session_id,
                self.next_id.clone(),
                Role::Assistant,
                json!([]),
                MessageState::Streaming,
            ),
        };
        Partial {
            text: String::new(),
            reasoning: String::new(),
            last: Instant::now(),
            cp,
        }
    }

    /// Stores a finished message (assistant answer or tool results) at the
    /// next position, with `meta` (e.g. how each tool call ended); its id.
    pub async fn message(&mut self, message: &Message, meta: serde_json::Value) -> String {
        self.settle().await;
        let id = self.take_id();
        let parts = serde_json::to_value(&message.parts).unwrap_or(json!([]));
        let mut row = message_row(
            &self.session_id,
            id.clone(),
            message.role,
            parts,
            MessageState::Complete,
        );
        row.meta = meta;
        self.session.append(row).await;
        id
    }

    /// Tells the user what changed in the store's saving ([`tell_saving`]).
    pub fn tell_saving(&self, deps: &AgentDeps, stream: StreamId) {
        tell_saving(self.session.store().as_deref(), &deps.queue, stream);
    }

    /// Stores the summary of an automatic compaction that kept the latest
    /// `keep_last` messages verbatim.
    pub async fn compaction(&mut self, summary: &Message, keep_last: usize) -> MessageRow {
        self.settle().await;
        let id = self.take_id();
        let parts = serde_json::to_value(&summary.parts).unwrap_or(json!([]));
        let row = message_row(&self.session_id, id, summary.role, parts, MessageState::Complete);
        self.session.append_compaction(row, keep_last).await
    }

    /// Stores what an interrupted answer had produced.
    pub async fn interrupted(&mut self, partial: &Partial, state: MessageState) {
        self.settle().await;
        if partial.text.is_empty() && partial.reasoning.is_empty() {
            return;
        }
        let id = self.take_id();
        let row = message_row(
            &self.session_id,
            id,
            Role::Assistant,
            partial_parts(&partial.reasoning, &partial.text),
            state,
        );
        self.session.append(row).await;
    }

    /// The session's and the day's spend (see [`spend_now`]), and whether
    /// the store said so.
    async fn spend(&self) -> (Spend, bool) {
        let (start, end) = local_day(now_ms(), self.offset_s);
        spend_now(
            self.session.store().as_deref(),
            &self.ledger,
            &self.session_id,
            start,
            end,
        )
        .await
    }

    /// Checks the budgets before a request; a reached limit asks the user
    /// (soft) or refuses (hard). Refusing sends nothing to the provider.
    pub async fn gate(
        &mut self,
        deps: &AgentDeps,
        stream: StreamId,
        cancel: &CancellationToken,
    ) -> Result<(), LlmError> {
        if !self.budgets.has_limit() {
            return Ok(());
        }
        // Not settled first: budgets are on by default, and a store still
        // opening (another Neovim holds its lock) must not hold back the
        // request; the spend then comes from this app's ledger.
        let (spend, _) = self.spend().await;
        gate_spend(&self.budgets, spend, &deps.calls, &deps.queue, stream, cancel).await
    }

    /// Records one provider call and tells the UI the new totals; warns
    /// once when a warning threshold is crossed.
    pub async fn usage(&mut self, deps: &AgentDeps, stream: StreamId, done: &StreamDone, agent: &str, started_ms: i64) {
        self.settle().await;
        let before = if self.budgets.has_warning() {
            Some(self.spend().await.0)
        } else {
            None
        };
        let row = usage_row(
            Some(&self.session_id),
            Some(self.next_id.clone()),
            agent,
            done,
            started_ms,
        );
        record_usage(self.session.store().as_deref(), &self.ledger, row).await;
        self.tell_saving(deps, stream);
        let (after, stored) = self.spend().await;
        if stored {
            self.session_cost_usd = after.session_usd;
        } else if let Some(total) = done.cost.total_usd {
            self.session_cost_usd += total;
        }
        let window = deps
            .providers
            .pricing()
            .price(&done.provider, &done.model)
            .and_then(|p| p.context)
            .unwrap_or(0);
        update(
            &deps.queue,
            stream,
            updates::usage(
                &done.usage,
                &done.cost,
                window,
                self.session_cost_usd,
                // Only the store knows every Neovim's day.
                stored.then_some(after.day_usd),
            ),
        );
        if let Some(b) = before {
            for w in budget::crossed_warnings(&self.budgets, b, after) {
                mia_event(&deps.queue, stream, MiaEvent::Warning { text: w.message });
            }
        }
        let budgeted = self.budgets.has_limit() || self.budgets.has_warning();
        if budgeted && !done.cost.known && !self.session.unpriced_told.swap(true, Ordering::Relaxed) {
            let text = format!(
                "mia: {}/{} has no price, so your budgets do not count its calls: add it to setup's `pricing` (:h mia-config-pricing)",
                done.provider, done.model
            );
            mia_event(&deps.queue, stream, MiaEvent::Warning { text });
        }
    }
}
