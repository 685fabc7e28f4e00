//! A chat session as the core owns it: who it is (id, project, title, mode,
//! model, agent) and its append-only message log, persisted by the store.
//!
//! The UI never sends the history back: it adds a prompt, changes the mode
//! or the model, or cancels. Requests to the model are built here from the
//! log (the latest compaction's summary in place of what it covers, see
//! [`mia_store::request_rows`]); the log itself keeps every message for
//! display and resume. Message numbers come from the store (max + 1), never
//! from a list length.
//!
//! Besides messages, the log holds the end of every prompt turn (how it
//! stopped, what it cost, which error) as a row with no parts: requests
//! skip it, and a replay (`session/load`) draws it exactly as it was drawn
//! live. See [`updates`] for the event shapes.

pub mod tool_ids;
pub mod updates;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use mia_llm::message::{Message, Part, Role};
use mia_store::{MessageKind, MessageRow, MessageState, SessionRow, Store, StoreError};
pub use updates::{ReplayItem, Stop, ToolOutcome, ToolStatus, TurnEnd};

/// What went wrong with a session request, in the session layer's terms.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("mia: no session `{0}`")]
    NotFound(String),
    #[error("mia: an answer is still streaming in this session. Stop it with :Mia stop (or <C-c> in the chat) first.")]
    Busy,
    #[error("mia: sessions need the store, and it could not be opened (see :checkhealth mia)")]
    NoStore,
    #[error("mia: {0}")]
    Store(#[from] StoreError),
    #[error("mia: the stored session `{id}` cannot be read: {detail}")]
    Corrupt { id: String, detail: String },
}

/// Who the session is: what `session/new` sets and `session_info_update`
/// changes. `cwd` is the project the agent works in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionInfo {
    #[serde(rename = "sessionId")]
    pub id: String,
    pub cwd: PathBuf,
    pub title: Option<String>,
    pub mode: String,
    pub model: String,
    pub agent: String,
    pub created_at_ms: i64,
}

#[derive(Debug)]
struct State {
    info: SessionInfo,
    /// Every stored row in `seq` order (finished messages, compactions and
    /// turn ends; never a streaming checkpoint).
    log: Vec<MessageRow>,
    /// Cancels the turn in flight, if any.
    running: Option<CancellationToken>,
    /// The session row was written (it is, at the first prompt).
    persisted: bool,
}

/// One session. Its lock is only ever held to read or push in memory,
/// never across an await.
#[derive(Debug)]
pub struct Session {
    /// Set once the store is open (it opens on the runtime, after the session exists).
    store: OnceLock<Arc<Store>>,
    /// The app's telemetry (a mode change is remembered there).
    telemetry: Arc<crate::telemetry::Hub>,
    state: Mutex<State>,
    /// What the model read and wrote, and the files the user accepted every edit to.
    pub files: Arc<crate::tools::landing::FileLedger>,
    /// Stored contents of the project's files, shared by the session's checkpoint scans.
    pub scan_cache: Arc<Mutex<crate::checkpoint::ScanCache>>,
    /// Set once the user was told that budgets cannot count this session's
    /// calls to models without a price (said once per session).
    pub unpriced_told: std::sync::atomic::AtomicBool,
}

/// While alive, the session has a turn in flight; dropping it ends the turn.
pub struct Turn {
    session: Arc<Session>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.session.lock().running = None;
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A new session id: the UTC time and 48 bits that differ between two
/// Neovims started in the same second (process, clock, counter, hashed).
pub fn new_session_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_i64(now_ms());
    let secs = now_ms().div_euclid(1000);
    let t = time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}-{:012x}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        h.finish() & 0xffff_ffff_ffff
    )
}

/// A new message id, unique across the processes sharing the store. Ids
/// only name rows; their order is the store's `seq`.
pub fn new_message_id(session_id: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{session_id}-m{:x}-{:x}-{n:x}", now_ms(), std::process::id())
}

/// A message row for [`Session::append`] (which has the store assign its `seq`).
pub fn message_row(
    session_id: &str,
    id: String,
    role: Role,
    parts: serde_json::Value,
    state: MessageState,
) -> MessageRow {
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

fn has_parts(row: &MessageRow) -> bool {
    row.parts.as_array().is_some_and(|p| !p.is_empty())
}

/// A stored row as a message for the model, if it is one.
fn as_message(row: &MessageRow) -> Option<Message> {
    let parts: Vec<Part> = serde_json::from_value(row.parts.clone()).ok()?;
    if parts.is_empty() {
        return None;
    }
    // A compaction summary is sent as what the user said before.
    let role = if matches!(row.kind, MessageKind::Compaction { .. }) {
        Role::User
    } else {
        row.role
    };
    Some(Message { role, parts })
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new, empty session (stored at its first prompt).
    pub fn new(info: SessionInfo, store: Option<Arc<Store>>, telemetry: Arc<crate::telemetry::Hub>) -> Arc<Session> {
        telemetry.session_started(&info.id, &info.model, &info.mode, &info.agent);
        let cell = OnceLock::new();
        if let Some(store) = store {
            let _ = cell.set(store);
        }
        Arc::new(Session {
            store: cell,
            telemetry,
            files: Arc::default(),
            scan_cache: Arc::default(),
            unpriced_told: Default::default(),
            state: Mutex::new(State {
                info,
                log: Vec::new(),
                running: None,
                persisted: false,
            }),
        })
    }

    /// A stored session with its whole log (`session/load`).
    pub async fn load(
        store: Arc<Store>,
        id: &str,
        telemetry: Arc<crate::telemetry::Hub>,
    ) -> Result<Arc<Session>, SessionError> {
        let row = store
            .session(id)
            .await?
            .ok_or_else(|| SessionError::NotFound(id.to_string()))?;
        let log = store.messages(id).await?;
        let info = SessionInfo {
            id: row.id,
            cwd: PathBuf::from(row.cwd),
            title: row.title,
            mode: row.mode,
            model: row.model,
            agent: "mia".into(),
            created_at_ms: row.created_at_ms,
        };
        let cell = OnceLock::new();
        let _ = cell.set(store);
        Ok(Arc::new(Session {
            store: cell,
            telemetry,
            files: Arc::default(),
            scan_cache: Arc::default(),
            unpriced_told: Default::default(),
            state: Mutex::new(State {
                info,
                log: log
                    .into_iter()
                    .filter(|r| r.state != MessageState::Streaming || has_parts(r))
                    .collect(),
                running: None,
                persisted: true,
            }),
        }))
    }

    pub fn id(&self) -> String {
        self.lock().info.id.clone()
    }

    pub fn info(&self) -> SessionInfo {
        self.lock().info.clone()
    }

    pub fn store(&self) -> Option<Arc<Store>> {
        self.store.get().cloned()
    }

    /// Gives a session made before the store was open its store (once).
    pub fn attach_store(&self, store: Option<Arc<Store>>) {
        if let Some(store) = store {
            let _ = self.store.set(store);
        }
    }

    /// Changes what later requests use; `None` leaves a field as it is.
    pub fn update_info(&self, mode: Option<&str>, model: Option<&str>, title: Option<&str>) {
        let mut s = self.lock();
        if let Some(mode) = mode.filter(|m| !m.is_empty()) {
            self.telemetry.session_mode(&s.info.id, mode);
            s.info.mode = mode.to_string();
        }
        if let Some(model) = model.filter(|m| !m.is_empty()) {
            s.info.model = model.to_string();
        }
        if let Some(title) = title.filter(|t| !t.is_empty()) {
            s.info.title = Some(title.to_string());
        }
    }

    /// Switches the session to `mode` (from its next request, the turn in
    /// flight included) and returns the `current_mode_update` that
    /// announces it, naming the mode it left. A switch to the mode it is in
    /// is announced too: the user asked for it.
    pub fn switch_mode(&self, mode: &str) -> agent_client_protocol_schema::v1::SessionUpdate {
        let previous = self.info().mode;
        self.update_info(Some(mode), None, None);
        updates::mode_switched(mode, &previous)
    }

    /// Marks a turn in flight; refused while another one runs.
    pub fn begin(self: &Arc<Self>, cancel: CancellationToken) -> Result<Turn, SessionError> {
        let mut s = self.lock();
        if s.running.is_some() {
            return Err(SessionError::Busy);
        }
        s.running = Some(cancel);
        Ok(Turn { session: self.clone() })
    }

    pub fn is_running(&self) -> bool {
        self.lock().running.is_some()
    }

    /// Cancels the turn in flight, if any.
    pub fn cancel(&self) {
        if let Some(c) = &self.lock().running {
            c.cancel();
        }
    }

    /// Writes the session row (who it is, when it was last used).
    pub async fn persist(&self) {
        let Some(store) = self.store() else { return };
        let info = self.info();
        let now = now_ms();
        let row = SessionRow {
            id: info.id,
            cwd: info.cwd.display().to_string(),
            title: info.title,
            mode: info.mode,
            model: info.model,
            created_at_ms: info.created_at_ms,
            updated_at_ms: now,
            meta: json!({}),
        };
        match store.upsert_session(row).await {
            Ok(()) => self.lock().persisted = true,
            Err(e) => tracing::warn!("cannot record the session: {e}"),
        }
    }

    /// Appends `row` to the log (the store numbers it; without a store the
    /// log does). A failed write is logged: the conversation goes on.
    pub async fn append(&self, mut row: MessageRow) -> MessageRow {
        if let Some(store) = self.store() {
            match store.append_message(row.clone()).await {
                Ok(seq) => row.seq = seq,
                Err(e) => tracing::warn!("cannot record a message: {e}"),
            }
        }
        self.push(row.clone());
        row
    }

    /// Adds `row` to the log in memory only, numbered after the last row,
    /// so that the next request carries it at once. [`Session::store_row`]
    /// stores it afterwards and takes the store's number.
    pub fn append_local(&self, row: MessageRow) -> MessageRow {
        let mut row = row;
        row.seq = 0;
        self.push(row.clone());
        let s = self.lock();
        s.log.iter().find(|r| r.id == row.id).cloned().unwrap_or(row)
    }

    /// Stores a row [`Session::append_local`] added, and keeps the number
    /// the store gave it. Without a store, or when the write fails
    /// (logged), the row stays in memory as it is.
    pub async fn store_row(&self, row: MessageRow) {
        let Some(store) = self.store() else { return };
        match store.append_message(row.clone()).await {
            Ok(seq) => {
                // The store's number as it is (0 included: `push` reads 0 as "unnumbered").
                let mut s = self.lock();
                if let Some(r) = s.log.iter_mut().find(|r| r.id == row.id) {
                    r.seq = seq;
                }
                s.log.sort_by_key(|r| r.seq);
            }
            Err(e) => tracing::warn!("cannot record a message: {e}"),
        }
    }

    /// Appends a compaction summary that stands for every message but the
    /// latest `keep_last` ones that requests send.
    pub async fn append_compaction(&self, mut row: MessageRow, keep_last: usize) -> MessageRow {
        let keep = u32::try_from(keep_last).unwrap_or(u32::MAX);
        let stored = match self.store() {
            Some(store) => match store.append_compaction(row.clone(), keep).await {
                Ok(seq) => Some(seq),
                Err(e) => {
                    tracing::warn!("cannot record the compaction: {e}");
                    None
                }
            },
            None => None,
        };
        // The same range in memory: from the first row to the last message
        // before the kept ones.
        let (from, to) = {
            let s = self.lock();
            let messages: Vec<&MessageRow> = s
                .log
                .iter()
                .filter(|r| r.kind == MessageKind::Message && has_parts(r))
                .collect();
            let first = s.log.first().map(|r| r.seq).unwrap_or(1);
            let last = messages
                .len()
                .checked_sub(keep_last + 1)
                .and_then(|i| messages.get(i))
                .map(|r| r.seq)
                .unwrap_or(first);
            (first, last)
        };
        row.kind = MessageKind::Compaction {
            covers_from: from,
            covers_to: to.max(from),
        };
        if let Some(seq) = stored {
            row.seq = seq;
        }
        self.push(row.clone());
        row
    }

    fn push(&self, mut row: MessageRow) {
        let mut s = self.lock();
        if self.store.get().is_none() || row.seq == 0 {
            row.seq = s.log.last().map(|r| r.seq + 1).unwrap_or(1);
        }
        if let Some(i) = s.log.iter().position(|r| r.id == row.id) {
            s.log[i] = row;
            return;
        }
        let at = s.log.partition_point(|r| r.seq <= row.seq);
        s.log.insert(at, row);
    }

    /// The session-unique ids ([`tool_ids`]) of the tool calls in the
    /// stored message `message_id`, in order.
    pub fn tool_call_ids(&self, message_id: &str) -> Vec<String> {
        tool_ids::ids_of_row(&self.lock().log, message_id)
    }

    /// What the next request to the model sends.
    pub fn request_messages(&self) -> Vec<Message> {
        let s = self.lock();
        mia_store::request_rows(&s.log)
            .into_iter()
            .filter_map(as_message)
            .collect()
    }

    /// What the model has seen of each mentioned file in the messages the
    /// next request sends, and the number the next user turn will have.
    pub fn mentions_seen(&self) -> (HashMap<String, crate::agent::mentions::Seen>, usize) {
        let s = self.lock();
        let turn = s
            .log
            .iter()
            .filter(|r| r.role == Role::User && r.kind == MessageKind::Message && r.meta.get("model").is_some())
            .count()
            + 1;
        let rows = mia_store::request_rows(&s.log);
        (crate::agent::mentions::seen_in(&rows, turn), turn)
    }

    /// The text the log holds in memory, in bytes (the strings of its
    /// messages' parts): what mia-acp's memory bound charges a session.
    pub fn text_bytes(&self) -> usize {
        fn strings(v: &serde_json::Value) -> usize {
            match v {
                serde_json::Value::String(s) => s.len(),
                serde_json::Value::Array(a) => a.iter().map(strings).sum(),
                serde_json::Value::Object(m) => m.iter().map(|(k, v)| k.len() + strings(v)).sum(),
                _ => 8,
            }
        }
        self.lock().log.iter().map(|r| strings(&r.parts)).sum()
    }

    /// How many rows the log holds (for tests and `:checkhealth`).
    pub fn len(&self) -> usize {
        self.lock().log.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once a request would send something (the chat's `/compact` checks it).
    /// Whether the session was never stored and has no message: nothing
    /// can have been spent in it yet.
    pub fn is_new(&self) -> bool {
        let s = self.lock();
        !s.persisted && s.log.is_empty()
    }

    pub fn has_messages(&self) -> bool {
        self.lock()
            .log
            .iter()
            .any(|r| r.kind == MessageKind::Message && has_parts(r))
    }

    /// The session drawn again: every stored row as the updates the chat
    /// received when it happened.
    pub fn replay(&self) -> Vec<ReplayItem> {
        let mut items = {
            let s = self.lock();
            updates::replay(&s.log)
        };
        items.push(ReplayItem::Update(Box::new(updates::available_commands(
            self.has_messages(),
        ))));
        items
    }

    /// What the session has cost, from the store (0 without one).
    pub async fn cost_usd(&self) -> f64 {
        let Some(store) = self.store() else { return 0.0 };
        let id = self.id();
        store.spend(&id, 0, 0).await.map(|s| s.session_usd).unwrap_or(0.0)
    }
}

/// The sessions this Neovim has open, by id.
#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.lock().get(id).cloned()
    }

    pub fn insert(&self, session: Arc<Session>) {
        self.lock().insert(session.id(), session);
    }

    /// Every open session.
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.lock().values().cloned().collect()
    }

    /// Forgets `id` (after `:Mia clear`); a turn in flight is cancelled.
    pub fn close(&self, id: &str) {
        if let Some(s) = self.lock().remove(id) {
            s.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str) -> SessionInfo {
        SessionInfo {
            id: id.into(),
            cwd: "/p".into(),
            title: None,
            mode: "ask".into(),
            model: "m/x".into(),
            agent: "mia".into(),
            created_at_ms: 0,
        }
    }

    fn text_row(s: &Session, role: Role, text: &str) -> MessageRow {
        message_row(
            &s.id(),
            new_message_id(&s.id()),
            role,
            json!([{ "type": "text", "text": text }]),
            MessageState::Complete,
        )
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn requests_use_the_summary_and_the_log_keeps_everything() {
        let s = Session::new(info("s1"), None, Arc::default());
        block_on(async {
            for (role, t) in [
                (Role::User, "alpha?"),
                (Role::Assistant, "alpha answer"),
                (Role::User, "beta?"),
                (Role::Assistant, "beta answer"),
            ] {
                s.append(text_row(&s, role, t)).await;
            }
            let summary = text_row(&s, Role::User, "(summary) alpha and beta");
            s.append_compaction(summary, 0).await;
            s.append(text_row(&s, Role::User, "gamma?")).await;
        });
        let sent: Vec<String> = s.request_messages().iter().map(Message::plain_text).collect();
        assert_eq!(sent, vec!["(summary) alpha and beta", "gamma?"]);
        assert_eq!(s.len(), 6, "the covered messages stay in the log");
    }

    #[test]
    fn a_prompt_is_sent_before_it_is_stored_and_takes_the_stores_number() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("mia.sqlite3")).unwrap());
        let s = Session::new(info("s4"), None, Arc::default());
        let texts = |s: &Session| -> Vec<String> { s.request_messages().iter().map(Message::plain_text).collect() };
        let prompt = s.append_local(text_row(&s, Role::User, "first?"));
        // The next request carries it before any store is there.
        assert_eq!(texts(&s), ["first?"]);
        s.attach_store(Some(store.clone()));
        block_on(async {
            s.persist().await;
            s.store_row(prompt).await;
            s.append(text_row(&s, Role::Assistant, "answer")).await;
            s.append(text_row(&s, Role::User, "second?")).await;
        });
        assert_eq!(texts(&s), ["first?", "answer", "second?"]);
        // The log in memory is numbered as the store numbered it, from 0.
        let stored: Vec<i64> = block_on(store.messages("s4")).unwrap().iter().map(|r| r.seq).collect();
        let in_memory: Vec<i64> = s.lock().log.iter().map(|r| r.seq).collect();
        assert_eq!(stored, [0, 1, 2]);
        assert_eq!(in_memory, stored);
    }

    #[test]
    fn a_second_turn_is_refused_while_one_runs() {
        let s = Session::new(info("s2"), None, Arc::default());
        let turn = s.begin(CancellationToken::new()).unwrap();
        assert!(matches!(s.begin(CancellationToken::new()), Err(SessionError::Busy)));
        drop(turn);
        assert!(s.begin(CancellationToken::new()).is_ok());
    }

    #[test]
    fn rows_without_parts_are_never_sent() {
        let s = Session::new(info("s3"), None, Arc::default());
        block_on(async {
            s.append(text_row(&s, Role::User, "q")).await;
            let mut end = message_row(
                "s3",
                new_message_id("s3"),
                Role::Assistant,
                json!([]),
                MessageState::Error,
            );
            end.meta = json!({ "turn_end": { "stop": "error" } });
            s.append(end).await;
        });
        assert_eq!(s.request_messages().len(), 1);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn session_ids_differ_and_sort_by_time() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), "20261130T120000-".len() + 12, "{a}");
    }
}
