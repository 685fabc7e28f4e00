//! What the store could not write yet, and what the user is told about it.
//!
//! When a whole batch fails (a full disk, a read-only file, a lock held past
//! every retry), its writes are not dropped: the writer thread keeps them, in
//! order, in a bounded queue ([`Held`]) and tries them again, with what was
//! written meanwhile behind them, [`RETRY_EVERY`] after a failure, then less
//! often (up to [`MAX_RETRY_PAUSE`]: each try is a transaction over all of
//! them) until they commit. Past the bound, what
//! fails is lost and counted. Money spent on calls whose usage rows are held
//! or lost still counts toward the budgets ([`Shared::unwritten_spend`]).
//!
//! Each change the user must hear of becomes one [`SavingNews`]: saving
//! stopped (and why), memory for unwritten rows is full (from now on they are
//! lost), saving works again (and how much was lost). Whoever shows the
//! user mia's warnings takes them with [`crate::Store::take_saving_news`].

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::error::StoreError;
use super::rows::MessageState;
use super::writer::Job;

/// Most writes kept while the store cannot be written.
pub(crate) const MAX_HELD_JOBS: usize = 10_000;
/// Most bytes of rows kept while the store cannot be written: a long
/// session's messages, with room to spare, in little memory.
pub(crate) const MAX_HELD_BYTES: usize = 64 * 1024 * 1024;
/// How long after a failure kept writes are first tried again; each
/// failed try doubles it, up to [`MAX_RETRY_PAUSE`].
pub(crate) const RETRY_EVERY: Duration = Duration::from_secs(2);
/// Longest wait between two tries: how long saving may lag after space returns.
pub(crate) const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);
/// Most lost priced calls whose cost the budgets keep counting.
const MAX_LOST_CALLS: usize = 100_000;
/// Most pieces of news waiting to be told.
const MAX_NEWS: usize = 16;

/// What could not be kept: gone from the store for good.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lost {
    pub messages: u64,
    pub usage_rows: u64,
    /// Other writes: session rows, titles, deletions.
    pub other: u64,
    /// Known cost of the lost usage rows.
    pub usd: f64,
    /// Size of everything lost, in bytes (about).
    pub bytes: u64,
}

impl Lost {
    fn is_empty(&self) -> bool {
        self.messages + self.usage_rows + self.other == 0
    }

    /// "3 messages, 2 usage rows ($0.0123) and 1 other write (40 KB)".
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        if self.messages > 0 {
            parts.push(plural(self.messages, "message", "messages"));
        }
        if self.usage_rows > 0 {
            parts.push(format!(
                "{} (${:.4})",
                plural(self.usage_rows, "usage row", "usage rows"),
                self.usd
            ));
        }
        if self.other > 0 {
            parts.push(plural(self.other, "other write", "other writes"));
        }
        let list = match parts.len() {
            0 => String::from("nothing"),
            1 => parts.remove(0),
            _ => {
                let last = parts.pop().unwrap_or_default();
                format!("{} and {last}", parts.join(", "))
            }
        };
        format!("{list} ({})", human_bytes(self.bytes))
    }
}

fn human_bytes(n: u64) -> String {
    if n >= 1024 * 1024 {
        format!("{:.1} MB", n as f64 / (1024.0 * 1024.0))
    } else if n >= 1024 {
        format!("{} KB", n / 1024)
    } else {
        format!("{n} bytes")
    }
}

/// One change in the store's saving the user is told of, once.
#[derive(Debug, Clone, PartialEq)]
pub enum SavingNews {
    /// Writes fail; `why` names the file and the fix. What fails is kept.
    Stopped { why: String },
    /// The memory kept for unwritten rows is full: from now on they are lost.
    Losing { kept_rows: usize, kept_bytes: usize },
    /// Writes work again: `written` kept writes are in the file now; `lost`
    /// could not be kept meanwhile.
    Resumed { written: usize, lost: Lost },
}

impl SavingNews {
    /// The sentence the user reads.
    pub fn message(&self) -> String {
        match self {
            SavingNews::Stopped { why } => format!(
                "mia: this chat and its costs are not being saved: {why}. mia keeps what it could not write in \
                 memory and writes it once it can (:checkhealth mia shows how much waits)."
            ),
            SavingNews::Losing { kept_rows, kept_bytes } => format!(
                "mia: the store still cannot be written and the memory mia keeps for it is full ({kept_rows} \
                 writes, {}): what cannot be written from now on is lost (this chat still shows it, and budgets \
                 still count its cost).",
                human_bytes(*kept_bytes as u64)
            ),
            SavingNews::Resumed { written: 0, lost } => format!(
                "mia: saving works again; {} could not be kept and are lost.",
                lost.describe()
            ),
            SavingNews::Resumed { written, lost } if lost.is_empty() => {
                format!("mia: saving works again: the {written} writes kept meanwhile are in the store now.")
            }
            SavingNews::Resumed { written, lost } => format!(
                "mia: saving works again: the {written} writes kept meanwhile are in the store now; {} could not \
                 be kept and are lost.",
                lost.describe()
            ),
        }
    }
}

/// Where the store's saving stands, for `:checkhealth`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Unsaved {
    /// Why writes fail now; `None` while they work.
    pub why: Option<String>,
    /// Writes kept in memory until they can be written.
    pub held: usize,
    pub held_bytes: usize,
    /// Everything lost since this store was opened.
    pub lost: Lost,
}

impl Unsaved {
    /// One line for `:checkhealth`, or `None` when all is saved.
    pub fn describe(&self) -> Option<String> {
        if self.why.is_none() && self.held == 0 && self.lost.is_empty() {
            return None;
        }
        let mut s = match &self.why {
            Some(why) => format!(
                "not saving: {why}; {} writes ({}) wait in memory",
                self.held,
                human_bytes(self.held_bytes as u64)
            ),
            None => "saving works".to_string(),
        };
        if !self.lost.is_empty() {
            s.push_str(&format!("; lost so far: {}", self.lost.describe()));
        }
        Some(s)
    }
}

/// A priced call whose usage row is not in the file.
#[derive(Debug, Clone)]
struct Unwritten {
    session: Option<String>,
    at_ms: i64,
    usd: f64,
}

#[derive(Default)]
struct State {
    why: Option<String>,
    held: usize,
    held_bytes: usize,
    held_calls: Vec<Unwritten>,
    lost_calls: VecDeque<Unwritten>,
    lost: Lost,
    /// Lost since saving last stopped (told when it resumes).
    lost_now: Lost,
    losing_told: bool,
    news: VecDeque<SavingNews>,
}

/// The state the writer thread and every handle on the store share.
#[derive(Default)]
pub(crate) struct Shared(Mutex<State>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Each change is a few assignments: a panic cannot leave it half made.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Known cost of the calls whose usage rows are held or lost: for
    /// `session` (none: `""`) and in `[day_start_ms, day_end_ms)`.
    pub(crate) fn unwritten_spend(&self, session: &str, day_start_ms: i64, day_end_ms: i64) -> (f64, f64) {
        let s = self.lock();
        let (mut session_usd, mut day_usd) = (0.0, 0.0);
        for call in s.held_calls.iter().chain(s.lost_calls.iter()) {
            if !session.is_empty() && call.session.as_deref() == Some(session) {
                session_usd += call.usd;
            }
            if (day_start_ms..day_end_ms).contains(&call.at_ms) {
                day_usd += call.usd;
            }
        }
        (session_usd, day_usd)
    }

    pub(crate) fn unsaved(&self) -> Unsaved {
        let s = self.lock();
        Unsaved {
            why: s.why.clone(),
            held: s.held,
            held_bytes: s.held_bytes,
            lost: s.lost.clone(),
        }
    }

    pub(crate) fn take_news(&self) -> Vec<SavingNews> {
        self.lock().news.drain(..).collect()
    }
}

fn push_news(s: &mut State, news: SavingNews) {
    if s.news.len() == MAX_NEWS {
        s.news.pop_front();
    }
    s.news.push_back(news);
}

/// A job's size in memory, about: what the bound counts.
fn job_bytes(job: &Job) -> usize {
    let row_bytes = |r: &super::rows::MessageRow| {
        r.id.len() + r.session_id.len() + r.parts.to_string().len() + r.meta.to_string().len() + 64
    };
    match job {
        Job::AppendMessage(r) | Job::UpsertMessage(r) | Job::AppendCompaction { row: r, .. } => row_bytes(r),
        Job::UpsertSession(r) => {
            r.id.len() + r.cwd.len() + r.title.as_ref().map_or(0, String::len) + r.meta.to_string().len() + 64
        }
        Job::RecordUsage(r) => {
            r.agent.len() + r.provider.len() + r.model.len() + r.session_id.as_ref().map_or(0, String::len) + 160
        }
        Job::TouchSession { id, .. } | Job::DeleteSession { id } => id.len() + 16,
        Job::RenameSession { id, title } => id.len() + title.as_ref().map_or(0, String::len) + 16,
        Job::Checkpoint => 0,
    }
}

fn priced(job: &Job) -> Option<Unwritten> {
    match job {
        Job::RecordUsage(r) if r.cost_known && r.total_usd.is_finite() && r.total_usd > 0.0 => Some(Unwritten {
            session: r.session_id.clone(),
            at_ms: r.created_at_ms,
            usd: r.total_usd,
        }),
        _ => None,
    }
}

/// The message row of a job that writes one by id (a later write of the
/// same id replaces it in place, as the store would).
fn message_of(job: &Job) -> Option<&super::rows::MessageRow> {
    match job {
        Job::AppendMessage(r) | Job::UpsertMessage(r) => Some(r),
        _ => None,
    }
}

/// The writes the writer thread keeps, in the order they were made.
pub(crate) struct Held {
    jobs: Vec<(Job, usize)>,
    bytes: usize,
    /// When the kept writes last failed, and why.
    failed: Option<(Instant, StoreError)>,
    /// How long after `failed` they are tried again.
    pause: Duration,
    shared: std::sync::Arc<Shared>,
}

impl Held {
    pub(crate) fn new(shared: std::sync::Arc<Shared>) -> Held {
        Held {
            jobs: Vec::new(),
            bytes: 0,
            failed: None,
            pause: RETRY_EVERY,
            shared,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.jobs.len()
    }

    /// The kept writes, oldest first: tried again before anything newer.
    pub(crate) fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.iter().map(|(job, _)| job)
    }

    /// How long until the kept writes are tried again; `None` when none are kept.
    pub(crate) fn next_try(&self) -> Option<Duration> {
        if self.jobs.is_empty() {
            return None;
        }
        let since = self.failed.as_ref().map_or(self.pause, |(at, _)| at.elapsed());
        Some(self.pause.saturating_sub(since))
    }

    /// Why the kept writes failed, while it is too soon to try them again:
    /// a write made meanwhile is kept behind them without trying (it would
    /// meet the same failure, and trying costs a transaction over them all).
    pub(crate) fn failing(&self) -> Option<StoreError> {
        match (&self.failed, self.next_try()) {
            (Some((_, err)), Some(wait)) if !wait.is_zero() => Some(err.clone()),
            _ => None,
        }
    }

    /// The next write tries the kept ones at once (the store is closing).
    pub(crate) fn try_now(&mut self) {
        self.failed = None;
    }

    /// The batch with the kept writes failed with `err` (its writes are kept by [`Held::hold`]).
    pub(crate) fn failed(&mut self, err: &StoreError) {
        if self.failed.is_some() {
            self.pause = (self.pause * 2).min(MAX_RETRY_PAUSE);
        }
        self.failed = Some((Instant::now(), err.clone()));
    }

    /// The kept writes ([`Held::jobs`]), `written` of them, committed with
    /// whatever came after them: saving works again.
    pub(crate) fn written(&mut self, written: usize) {
        self.jobs.clear();
        self.bytes = 0;
        self.failed = None;
        self.pause = RETRY_EVERY;
        let mut s = self.shared.lock();
        if self.jobs.is_empty() && s.why.is_some() {
            s.why = None;
            s.losing_told = false;
            let lost = std::mem::take(&mut s.lost_now);
            push_news(&mut s, SavingNews::Resumed { written, lost });
        }
        drop(s);
        self.sync();
    }

    /// Keeps `job`, which failed with `err` because the whole batch did, to
    /// try it again later; past the bound it is lost and counted.
    pub(crate) fn hold(&mut self, job: Job, err: &StoreError) {
        {
            let mut s = self.shared.lock();
            if s.why.is_none() {
                s.why = Some(err.to_string());
                push_news(&mut s, SavingNews::Stopped { why: err.to_string() });
            }
        }
        if matches!(job, Job::Checkpoint) {
            return;
        }
        let size = job_bytes(&job);
        if let Some(new) = message_of(&job) {
            let same = self.jobs.iter().position(|(held, _)| {
                message_of(held).is_some_and(|old| {
                    old.id == new.id
                        && old.session_id == new.session_id
                        && std::mem::discriminant(held) == std::mem::discriminant(&job)
                })
            });
            if let Some(i) = same {
                let old_streaming = message_of(&self.jobs[i].0).is_some_and(|r| r.state == MessageState::Streaming);
                // A streaming checkpoint never replaces a finished message (the store's own rule).
                if new.state != MessageState::Streaming || old_streaming {
                    self.bytes = self.bytes - self.jobs[i].1 + size;
                    self.jobs[i] = (job, size);
                    self.sync();
                }
                return;
            }
        }
        if self.jobs.len() >= MAX_HELD_JOBS || self.bytes + size > MAX_HELD_BYTES {
            self.lose(&job, size);
            return;
        }
        self.bytes += size;
        self.jobs.push((job, size));
        self.sync();
    }

    /// Counts `job` as lost, and tells the user once per stop that losing began.
    fn lose(&mut self, job: &Job, size: usize) {
        let mut guard = self.shared.lock();
        let s = &mut *guard;
        let call = priced(job);
        for lost in [&mut s.lost, &mut s.lost_now] {
            match job {
                Job::AppendMessage(_) | Job::UpsertMessage(_) | Job::AppendCompaction { .. } => lost.messages += 1,
                Job::RecordUsage(_) => lost.usage_rows += 1,
                _ => lost.other += 1,
            }
            lost.bytes += size as u64;
            lost.usd += call.as_ref().map_or(0.0, |c| c.usd);
        }
        if let Some(call) = call {
            if s.lost_calls.len() == MAX_LOST_CALLS {
                s.lost_calls.pop_front();
            }
            s.lost_calls.push_back(call);
        }
        tracing::warn!(size, "store: a write that cannot be kept in memory is lost");
        if !s.losing_told {
            s.losing_told = true;
            let news = SavingNews::Losing {
                kept_rows: self.jobs.len(),
                kept_bytes: self.bytes,
            };
            push_news(s, news);
        }
    }

    /// What every handle sees: how much is kept, and which calls' cost.
    fn sync(&self) {
        let calls: Vec<Unwritten> = self.jobs.iter().filter_map(|(job, _)| priced(job)).collect();
        let mut s = self.shared.lock();
        s.held = self.jobs.len();
        s.held_bytes = self.bytes;
        s.held_calls = calls;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MessageRow, UsageRow};
    use std::sync::Arc;

    fn full() -> StoreError {
        StoreError::DiskFull {
            path: "/d/mia.sqlite3".into(),
        }
    }

    fn message(id: &str, state: MessageState, text: &str) -> Job {
        Job::AppendMessage(MessageRow {
            id: id.into(),
            session_id: "s".into(),
            seq: 0,
            role: mia_llm::message::Role::Assistant,
            parts: serde_json::json!([{ "type": "text", "text": text }]),
            state,
            meta: serde_json::json!({}),
            created_at_ms: 0,
            updated_at_ms: 0,
            kind: Default::default(),
        })
    }

    fn usage(usd: f64) -> Job {
        Job::RecordUsage(UsageRow {
            session_id: Some("s".into()),
            cost_known: true,
            total_usd: usd,
            created_at_ms: 1_000,
            ..Default::default()
        })
    }

    #[test]
    fn a_stop_is_told_once_and_the_resumption_with_what_was_lost() {
        let shared = Arc::new(Shared::default());
        let mut held = Held::new(shared.clone());
        held.hold(message("a", MessageState::Complete, "hello"), &full());
        held.hold(usage(0.5), &full());
        let news = shared.take_news();
        assert_eq!(news.len(), 1, "{news:?}");
        assert!(
            news[0].message().contains("the disk holding /d/mia.sqlite3 is full"),
            "{news:?}"
        );
        assert_eq!(shared.unwritten_spend("s", 0, 2_000), (0.5, 0.5));
        assert_eq!(shared.unsaved().held, 2);
        // A later write fails too: kept behind them, nothing new to tell.
        held.failed(&full());
        assert!(held.failing().is_some(), "too soon to try again");
        held.hold(message("b", MessageState::Complete, "later"), &full());
        assert!(shared.take_news().is_empty());
        assert_eq!(held.len(), 3);
        held.written(3);
        let news = shared.take_news();
        assert_eq!(
            news,
            vec![SavingNews::Resumed {
                written: 3,
                lost: Lost::default()
            }]
        );
        assert_eq!(shared.unwritten_spend("s", 0, 2_000), (0.0, 0.0));
        assert_eq!(shared.unsaved().describe(), None);
    }

    #[test]
    fn streaming_checkpoints_of_one_answer_are_kept_once_and_never_replace_its_end() {
        let shared = Arc::new(Shared::default());
        let mut held = Held::new(shared.clone());
        for i in 0..100 {
            held.hold(message("a", MessageState::Streaming, &"x".repeat(i)), &full());
        }
        held.hold(message("a", MessageState::Complete, "done"), &full());
        held.hold(message("a", MessageState::Streaming, "late"), &full());
        let jobs: Vec<&Job> = held.jobs().collect();
        assert_eq!(jobs.len(), 1);
        assert!(matches!(jobs[0], Job::AppendMessage(r) if r.state == MessageState::Complete));
    }

    #[test]
    fn past_the_bound_writes_are_lost_counted_and_their_cost_still_counts() {
        let shared = Arc::new(Shared::default());
        let mut held = Held::new(shared.clone());
        let big = "y".repeat(MAX_HELD_BYTES / 2);
        held.hold(message("a", MessageState::Complete, &big), &full());
        held.hold(message("b", MessageState::Complete, &big), &full());
        held.hold(usage(0.25), &full());
        // Held: one message, one priced call and these, up to the bound.
        for _ in 0..MAX_HELD_JOBS - 2 {
            held.hold(usage(0.0), &full());
        }
        held.hold(usage(1.0), &full());
        let news = shared.take_news();
        assert_eq!(news.len(), 2, "{news:?}");
        assert!(matches!(news[1], SavingNews::Losing { .. }), "{news:?}");
        let lost = shared.unsaved().lost;
        assert_eq!(lost.messages, 1);
        assert_eq!(lost.usage_rows, 1, "{lost:?}");
        assert_eq!(lost.usd, 1.0);
        // Held and lost calls both count toward the budgets.
        assert_eq!(shared.unwritten_spend("s", 0, 2_000), (1.25, 1.25));
        held.written(MAX_HELD_JOBS);
        let news = shared.take_news();
        let text = news[0].message();
        assert!(
            text.contains("1 message and 1 usage row ($1.0000)") && text.contains("are lost"),
            "{text}"
        );
        assert!(shared.unsaved().describe().unwrap().contains("lost so far"));
    }
}
