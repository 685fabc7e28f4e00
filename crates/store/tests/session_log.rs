//! The session log in the store: message numbers come from the store (never
//! from a caller's history length), compaction is a message of its own, and
//! the history a request is built from puts the latest summary in place of
//! what it covers while the transcript keeps every message.

use std::path::PathBuf;

use mia_llm::message::Role;
use mia_store::{request_rows, MessageKind, MessageRow, MessageState, SessionRow, Store, StoreError};
use serde_json::json;

const T0: i64 = 1_790_000_000_000;

fn db_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("mia.sqlite3")
}

fn session(id: &str) -> SessionRow {
    SessionRow {
        id: id.into(),
        cwd: "/p".into(),
        title: None,
        mode: "ask".into(),
        model: "openai/gpt-4o".into(),
        created_at_ms: T0,
        updated_at_ms: T0,
        meta: json!({}),
    }
}

fn msg(id: &str, session_id: &str, role: Role, text: &str, state: MessageState) -> MessageRow {
    MessageRow {
        id: id.into(),
        session_id: session_id.into(),
        // Ignored by append_message: the store numbers messages.
        seq: 999,
        role,
        parts: json!([{ "type": "text", "text": text }]),
        state,
        meta: json!({}),
        kind: MessageKind::Message,
        created_at_ms: T0,
        updated_at_ms: T0,
    }
}

fn text(row: &MessageRow) -> &str {
    row.parts[0]["text"].as_str().unwrap_or_default()
}

fn texts(rows: &[&MessageRow]) -> Vec<String> {
    rows.iter().map(|r| text(r).to_string()).collect()
}

#[tokio::test]
async fn appended_messages_are_numbered_by_the_store_and_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db_path(&dir)).unwrap();
    store.upsert_session(session("s")).await.unwrap();
    let mut seqs = Vec::new();
    for (i, t) in ["alpha?", "alpha answer", "beta?", "beta answer"].iter().enumerate() {
        let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
        seqs.push(
            store
                .append_message(msg(&format!("m{i}"), "s", role, t, MessageState::Complete))
                .await
                .unwrap(),
        );
    }
    assert_eq!(seqs, vec![0, 1, 2, 3]);
    // A caller whose history shrank (after a compaction) appends after the
    // last message, whatever it believes the position is.
    let seq = store
        .append_message(msg("m4", "s", Role::User, "gamma?", MessageState::Complete))
        .await
        .unwrap();
    assert_eq!(seq, 4);
    let rows = store.messages("s").await.unwrap();
    let all: Vec<&MessageRow> = rows.iter().collect();
    assert_eq!(
        texts(&all),
        ["alpha?", "alpha answer", "beta?", "beta answer", "gamma?"]
    );
    // Another session starts at 0 on its own.
    store.upsert_session(session("other")).await.unwrap();
    let seq = store
        .append_message(msg("o0", "other", Role::User, "hi", MessageState::Complete))
        .await
        .unwrap();
    assert_eq!(seq, 0);
}

#[tokio::test]
async fn checkpoints_of_one_answer_keep_its_number_and_late_ones_never_replace_the_final_text() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db_path(&dir)).unwrap();
    store.upsert_session(session("s")).await.unwrap();
    store
        .append_message(msg("q", "s", Role::User, "question", MessageState::Complete))
        .await
        .unwrap();
    let mut cp = msg("a", "s", Role::Assistant, "partial", MessageState::Streaming);
    cp.updated_at_ms = T0 + 1;
    assert_eq!(store.append_message(cp.clone()).await.unwrap(), 1);
    let mut fin = msg("a", "s", Role::Assistant, "the whole answer", MessageState::Complete);
    fin.updated_at_ms = T0 + 2;
    assert_eq!(store.append_message(fin).await.unwrap(), 1);
    // A checkpoint that arrives after the final text changes nothing.
    cp.updated_at_ms = T0 + 3;
    assert_eq!(store.append_message(cp).await.unwrap(), 1);
    let rows = store.messages("s").await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(text(&rows[1]), "the whole answer");
    assert_eq!(rows[1].state, MessageState::Complete);
}

#[tokio::test]
async fn an_id_of_another_session_or_a_missing_session_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db_path(&dir)).unwrap();
    store.upsert_session(session("s")).await.unwrap();
    store.upsert_session(session("t")).await.unwrap();
    store
        .append_message(msg("x", "s", Role::User, "mine", MessageState::Complete))
        .await
        .unwrap();
    let err = store
        .append_message(msg("x", "t", Role::User, "theirs", MessageState::Complete))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput { .. }), "{err}");
    assert_eq!(text(&store.messages("s").await.unwrap()[0]), "mine");
    let err = store
        .append_message(msg("y", "nope", Role::User, "lost", MessageState::Complete))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::SessionNotFound { .. }), "{err}");
}

#[tokio::test]
async fn two_writers_on_one_file_never_take_the_same_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    // Two stores: two connections and two writer threads, as two Neovims have.
    let a = Store::open(&path).unwrap();
    let b = Store::open(&path).unwrap();
    a.upsert_session(session("s")).await.unwrap();
    let mut pending = Vec::new();
    for i in 0..200 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let row = msg(
            &format!("m{i}"),
            "s",
            Role::User,
            &format!("{i}"),
            MessageState::Complete,
        );
        pending.push(tokio::spawn(async move { store.append_message(row).await }));
    }
    let mut seqs = Vec::new();
    for p in pending {
        seqs.push(p.await.unwrap().unwrap());
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (0..200).collect::<Vec<i64>>());
    assert_eq!(a.messages("s").await.unwrap().len(), 200);
}

async fn four_messages(store: &Store) {
    store.upsert_session(session("s")).await.unwrap();
    for (i, t) in ["alpha?", "alpha answer", "beta?", "beta answer"].iter().enumerate() {
        let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
        store
            .append_message(msg(&format!("m{i}"), "s", role, t, MessageState::Complete))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn compaction_is_stored_with_its_range_and_requests_use_it_in_place_of_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db_path(&dir)).unwrap();
    four_messages(&store).await;
    let seq = store
        .append_compaction(msg("c", "s", Role::User, "SUMMARY", MessageState::Complete), 0)
        .await
        .unwrap();
    assert_eq!(seq, 4);
    for (i, t) in ["gamma?", "gamma answer"].iter().enumerate() {
        let role = if i == 0 { Role::User } else { Role::Assistant };
        store
            .append_message(msg(&format!("g{i}"), "s", role, t, MessageState::Complete))
            .await
            .unwrap();
    }
    let rows = store.messages("s").await.unwrap();
    let all: Vec<&MessageRow> = rows.iter().collect();
    // The transcript keeps every message, and the compaction at its place.
    assert_eq!(
        texts(&all),
        [
            "alpha?",
            "alpha answer",
            "beta?",
            "beta answer",
            "SUMMARY",
            "gamma?",
            "gamma answer"
        ]
    );
    assert_eq!(
        rows[4].kind,
        MessageKind::Compaction {
            covers_from: 0,
            covers_to: 3
        }
    );
    assert_eq!(rows[5].kind, MessageKind::Message);
    // What the model gets: the summary, then what came after.
    assert_eq!(texts(&request_rows(&rows)), ["SUMMARY", "gamma?", "gamma answer"]);
    // The picker counts prompts and answers, not the compaction.
    let page = store.list_sessions(None, None, 10).await.unwrap();
    assert_eq!(page.sessions[0].message_count, 6);
}

#[tokio::test]
async fn automatic_compaction_keeps_the_latest_messages_after_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db_path(&dir)).unwrap();
    four_messages(&store).await;
    store
        .append_message(msg("m4", "s", Role::User, "gamma?", MessageState::Complete))
        .await
        .unwrap();
    // The run kept the last two messages (beta answer, gamma?) verbatim.
    store
        .append_compaction(msg("c", "s", Role::User, "SUMMARY", MessageState::Complete), 2)
        .await
        .unwrap();
    store
        .append_message(msg("m6", "s", Role::Assistant, "gamma answer", MessageState::Complete))
        .await
        .unwrap();
    let rows = store.messages("s").await.unwrap();
    assert_eq!(
        rows[5].kind,
        MessageKind::Compaction {
            covers_from: 0,
            covers_to: 2
        }
    );
    assert_eq!(
        texts(&request_rows(&rows)),
        ["SUMMARY", "beta answer", "gamma?", "gamma answer"]
    );
    // A second compaction supersedes the first: it summarizes the summary too.
    store
        .append_compaction(msg("c2", "s", Role::User, "SUMMARY 2", MessageState::Complete), 0)
        .await
        .unwrap();
    let rows = store.messages("s").await.unwrap();
    assert_eq!(
        rows[7].kind,
        MessageKind::Compaction {
            covers_from: 0,
            covers_to: 6
        }
    );
    assert_eq!(texts(&request_rows(&rows)), ["SUMMARY 2"]);
}

#[tokio::test]
async fn compacting_with_nothing_older_than_the_kept_messages_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db_path(&dir)).unwrap();
    store.upsert_session(session("s")).await.unwrap();
    store
        .append_message(msg("m0", "s", Role::User, "only", MessageState::Complete))
        .await
        .unwrap();
    let err = store
        .append_compaction(msg("c", "s", Role::User, "SUMMARY", MessageState::Complete), 1)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput { .. }), "{err}");
    assert_eq!(store.messages("s").await.unwrap().len(), 1);
}

#[test]
fn a_compaction_row_without_its_range_is_refused_by_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    drop(Store::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO sessions (id, cwd, mode, model, created_at_ms, updated_at_ms) VALUES ('s', '/p', 'ask', 'm', 0, 0)",
        [],
    )
    .unwrap();
    let bad = conn.execute(
        "INSERT INTO messages (id, session_id, seq, role, parts, state, created_at_ms, updated_at_ms, kind)
         VALUES ('c', 's', 0, 'user', '[]', 'complete', 0, 0, 'compaction')",
        [],
    );
    assert!(bad.is_err(), "a compaction without covers_from/covers_to was stored");
    let bad = conn.execute(
        "INSERT INTO messages (id, session_id, seq, role, parts, state, created_at_ms, updated_at_ms, covers_from, covers_to)
         VALUES ('m', 's', 0, 'user', '[]', 'complete', 0, 0, 0, 1)",
        [],
    );
    assert!(bad.is_err(), "a plain message with a range was stored");
}

/// The version-1 layout of the tables the migrations touch (sessions,
/// messages, and usage, which version 3 rolls up), with one spent call.
const V1_TABLES: &str = "
CREATE TABLE sessions (
    id TEXT PRIMARY KEY NOT NULL, cwd TEXT NOT NULL, title TEXT, mode TEXT NOT NULL, model TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL, meta TEXT NOT NULL DEFAULT '{}'
) STRICT;
CREATE TABLE messages (
    id TEXT PRIMARY KEY NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, role TEXT NOT NULL, parts TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('streaming', 'complete', 'cancelled', 'error')),
    meta TEXT NOT NULL DEFAULT '{}', created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL,
    UNIQUE (session_id, seq)
) STRICT;
CREATE TABLE usage (
    id INTEGER PRIMARY KEY, session_id TEXT, message_id TEXT, agent TEXT NOT NULL, provider TEXT NOT NULL,
    model TEXT NOT NULL, input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0, cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0, estimated INTEGER NOT NULL DEFAULT 0,
    cost_known INTEGER NOT NULL, input_usd REAL NOT NULL DEFAULT 0, output_usd REAL NOT NULL DEFAULT 0,
    cache_read_usd REAL NOT NULL DEFAULT 0, cache_write_usd REAL NOT NULL DEFAULT 0,
    total_usd REAL NOT NULL DEFAULT 0, started_at_ms INTEGER NOT NULL, duration_ms INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL
) STRICT;
INSERT INTO usage (session_id, message_id, agent, provider, model, output_tokens, cost_known, total_usd,
                   started_at_ms, duration_ms, created_at_ms)
VALUES ('old', 'old-1', 'mia', 'p', 'm', 7, 1, 0.25, 0, 10, 1000);
INSERT INTO sessions VALUES ('old', '/p', NULL, 'ask', 'm', 0, 0, '{}');
INSERT INTO messages VALUES ('old-0', 'old', 0, 'user', '[{\"type\":\"text\",\"text\":\"before\"}]', 'complete', '{}', 0, 0);
INSERT INTO messages VALUES ('old-1', 'old', 1, 'assistant', '[{\"type\":\"text\",\"text\":\"answer\"}]', 'complete', '{}', 0, 0);
PRAGMA user_version = 1;
";

#[tokio::test]
async fn a_version_1_file_is_migrated_and_its_messages_read_as_plain_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(V1_TABLES)
        .unwrap();
    let store = Store::open(&path).unwrap();
    let rows = store.messages("old").await.unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.kind == MessageKind::Message));
    // New messages continue after the old ones.
    let seq = store
        .append_message(msg("new", "old", Role::User, "after", MessageState::Complete))
        .await
        .unwrap();
    assert_eq!(seq, 2);
}
