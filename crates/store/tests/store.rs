//! The session/message/usage store against real SQLite files in temp dirs:
//! migrations, round trips, pagination under concurrent inserts, reports,
//! and several writers (threads and processes) sharing one file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mia_llm::message::Role;
use mia_store::{
    MessageKind, MessageRow, MessageState, ReportQuery, SessionRow, Store, StoreError, UsageRow, SCHEMA_VERSION,
};
use serde_json::json;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// 2024-03-10T00:00:00Z.
const T0: i64 = 1_710_028_800_000;

fn db_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("nested").join("dir").join("mia.sqlite3")
}

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(&db_path(dir)).unwrap()
}

fn session(id: &str, cwd: &str, updated_at_ms: i64) -> SessionRow {
    SessionRow {
        id: id.into(),
        cwd: cwd.into(),
        title: None,
        mode: "build".into(),
        model: "anthropic/claude-sonnet-4".into(),
        created_at_ms: updated_at_ms,
        updated_at_ms,
        meta: json!({}),
    }
}

fn message(id: &str, session_id: &str, seq: i64, state: MessageState, text: &str, at: i64) -> MessageRow {
    MessageRow {
        id: id.into(),
        session_id: session_id.into(),
        seq,
        role: Role::Assistant,
        parts: json!([{ "type": "text", "text": text }]),
        state,
        meta: json!({}),
        kind: MessageKind::Message,
        created_at_ms: at,
        updated_at_ms: at,
    }
}

fn usage(
    session: &str,
    message: &str,
    agent: &str,
    provider: &str,
    model: &str,
    usd: Option<f64>,
    at: i64,
) -> UsageRow {
    UsageRow {
        session_id: Some(session.into()),
        message_id: Some(message.into()),
        agent: agent.into(),
        provider: provider.into(),
        model: model.into(),
        input_tokens: 1000,
        output_tokens: 100,
        cache_read_tokens: 10,
        cache_write_tokens: 1,
        reasoning_tokens: 5,
        estimated: false,
        cost_known: usd.is_some(),
        // Input 40%, output 60% of every priced row.
        input_usd: usd.unwrap_or(0.0) * 0.4,
        output_usd: usd.unwrap_or(0.0) * 0.6,
        total_usd: usd.unwrap_or(0.0),
        started_at_ms: at - 1500,
        duration_ms: 1500,
        created_at_ms: at,
        retries: 0,
        ..UsageRow::default()
    }
}

fn raw(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

fn assert_close(actual: f64, expected: f64) {
    assert!((actual - expected).abs() < 1e-9, "expected {expected}, got {actual}");
}

// ---- opening and migrations ----

#[tokio::test]
async fn empty_file_is_migrated_to_the_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"").unwrap();

    let store = Store::open(&path).unwrap();
    store.upsert_session(session("s1", "/p", T0)).await.unwrap();

    let conn = raw(&path);
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    for table in ["sessions", "messages", "usage"] {
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1, "table {table} missing");
    }
}

#[tokio::test]
async fn missing_directories_are_created_and_reopening_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(&dir);
        store.upsert_session(session("s1", "/p", T0)).await.unwrap();
    }
    let store = open(&dir);
    assert_eq!(store.session("s1").await.unwrap().unwrap().cwd, "/p");
}

#[test]
fn file_from_a_newer_mia_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    drop(Store::open(&path).unwrap());
    raw(&path)
        .pragma_update(None, "user_version", SCHEMA_VERSION + 7)
        .unwrap();

    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found, supported, .. } if found == SCHEMA_VERSION + 7 && supported == SCHEMA_VERSION),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!("schema version {}", SCHEMA_VERSION + 7)),
        "{text}"
    );
    assert!(text.contains(&format!("up to {SCHEMA_VERSION}")), "{text}");
    assert!(text.contains("update mia"), "{text}");
}

#[test]
fn garbage_file_is_reported_as_corrupt_with_its_path_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mia.sqlite3");
    std::fs::write(&path, "this is not a database, it is a shopping list\n".repeat(200)).unwrap();

    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("move it away"), "{text}");
}

#[test]
fn unwritable_location_names_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "").unwrap();
    let err = Store::open(&blocker.join("sub").join("mia.sqlite3")).unwrap_err();
    assert!(matches!(err, StoreError::CreateDir { .. }), "{err:?}");
    assert!(err.to_string().contains("data_dir"), "{err}");
}

// ---- sessions and messages ----

#[tokio::test]
async fn session_and_messages_round_trip_in_seq_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut row = session("s1", "/proj", T0);
    row.title = Some("Fix the parser".into());
    row.meta = json!({ "pinned": true, "tags": ["a"] });
    store.upsert_session(row.clone()).await.unwrap();

    let mut user = message("m1", "s1", 1, MessageState::Complete, "hi", T0 + 1);
    user.role = Role::User;
    let mut tool = message("m3", "s1", 3, MessageState::Complete, "", T0 + 3);
    tool.role = Role::Tool;
    tool.parts = json!([{ "type": "tool_result", "tool_call_id": "c1", "content": "ok", "is_error": false }]);
    let mut call = message("m2", "s1", 2, MessageState::Complete, "", T0 + 2);
    call.parts = json!([{ "type": "tool_call", "id": "c1", "name": "read_file", "arguments": { "path": "a.rs" } }]);
    call.meta = json!({ "stop_reason": "tool_use" });
    for m in [tool.clone(), user.clone(), call.clone()] {
        store.upsert_message(m).await.unwrap();
    }

    assert_eq!(store.session("s1").await.unwrap(), Some(row));
    assert_eq!(store.messages("s1").await.unwrap(), vec![user, call, tool]);
    assert_eq!(store.session("nope").await.unwrap(), None);
    assert!(store.messages("nope").await.unwrap().is_empty());
}

#[tokio::test]
async fn streaming_message_is_checkpointed_then_completed_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.upsert_session(session("s1", "/p", T0)).await.unwrap();

    store
        .upsert_message(message("m1", "s1", 1, MessageState::Streaming, "Hel", T0 + 1000))
        .await
        .unwrap();
    let first = store.messages("s1").await.unwrap();
    assert_eq!(first[0].state, MessageState::Streaming);
    assert_eq!(first[0].parts[0]["text"], "Hel");

    let mut second = message("m1", "s1", 1, MessageState::Streaming, "Hello, wor", T0 + 2000);
    second.created_at_ms = T0 + 2000; // a careless caller: the first timestamp must survive
    store.upsert_message(second).await.unwrap();
    let mut done = message("m1", "s1", 1, MessageState::Complete, "Hello, world.", T0 + 2500);
    done.created_at_ms = T0 + 2500;
    store.upsert_message(done).await.unwrap();

    let got = store.messages("s1").await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].state, MessageState::Complete);
    assert_eq!(got[0].parts, json!([{ "type": "text", "text": "Hello, world." }]));
    assert_eq!(got[0].created_at_ms, T0 + 1000);
    assert_eq!(got[0].updated_at_ms, T0 + 2500);
}

#[tokio::test]
async fn late_checkpoints_never_overwrite_newer_or_finished_text() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.upsert_session(session("s1", "/p", T0)).await.unwrap();
    let checkpoint = |text: &str, at: i64| message("m1", "s1", 1, MessageState::Streaming, text, at);

    store.upsert_message(checkpoint("Hello, wor", T0 + 2000)).await.unwrap();
    store.upsert_message(checkpoint("Hel", T0 + 1000)).await.unwrap(); // arrived out of order
    assert_eq!(store.messages("s1").await.unwrap()[0].parts[0]["text"], "Hello, wor");

    store
        .upsert_message(message("m1", "s1", 1, MessageState::Cancelled, "Hello, wo", T0 + 2500))
        .await
        .unwrap();
    store
        .upsert_message(checkpoint("Hello, world", T0 + 3000))
        .await
        .unwrap(); // after the end
    let got = &store.messages("s1").await.unwrap()[0];
    assert_eq!(got.state, MessageState::Cancelled);
    assert_eq!(got.parts[0]["text"], "Hello, wo");
}

#[tokio::test]
async fn resaving_a_session_without_a_title_keeps_the_users_title() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.upsert_session(session("s1", "/p", T0)).await.unwrap();
    store.rename_session("s1", Some("Mine")).await.unwrap();
    let mut again = session("s1", "/p", T0 + 99);
    again.mode = "plan".into();
    store.upsert_session(again).await.unwrap();
    let got = store.session("s1").await.unwrap().unwrap();
    assert_eq!((got.title.as_deref(), got.mode.as_str()), (Some("Mine"), "plan"));
    assert_eq!((got.created_at_ms, got.updated_at_ms), (T0, T0 + 99));
    store.rename_session("s1", None).await.unwrap();
    assert_eq!(store.session("s1").await.unwrap().unwrap().title, None);
}

#[tokio::test]
async fn message_for_a_missing_session_or_a_taken_seq_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.upsert_session(session("s1", "/p", T0)).await.unwrap();
    store
        .upsert_message(message("m1", "s1", 1, MessageState::Complete, "a", T0))
        .await
        .unwrap();

    let err = store
        .upsert_message(message("m2", "ghost", 1, MessageState::Complete, "b", T0))
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::SessionNotFound { id: "ghost".into() });

    let err = store
        .upsert_message(message("m2", "s1", 1, MessageState::Complete, "b", T0))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::SeqTaken { seq: 1, .. }), "{err:?}");
    // The first message is untouched by the refused one.
    assert_eq!(store.messages("s1").await.unwrap()[0].parts[0]["text"], "a");

    let mut bad = message("m3", "s1", 3, MessageState::Complete, "c", T0);
    bad.parts = json!({ "type": "text" });
    assert!(matches!(
        store.upsert_message(bad).await,
        Err(StoreError::InvalidInput { .. })
    ));
}

#[tokio::test]
async fn rename_and_touch_change_only_their_field() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.upsert_session(session("s1", "/p", T0)).await.unwrap();

    store.rename_session("s1", Some("Parser work")).await.unwrap();
    store.touch_session("s1", T0 + 50).await.unwrap();
    store.touch_session("s1", T0 + 10).await.unwrap(); // late, older touch: ignored
    let got = store.session("s1").await.unwrap().unwrap();
    assert_eq!(got.title.as_deref(), Some("Parser work"));
    assert_eq!(got.updated_at_ms, T0 + 50);
    assert_eq!(got.created_at_ms, T0);

    let missing = StoreError::SessionNotFound { id: "nope".into() };
    assert_eq!(store.rename_session("nope", Some("x")).await.unwrap_err(), missing);
    assert_eq!(store.touch_session("nope", T0).await.unwrap_err(), missing);
}

#[tokio::test]
async fn deleting_a_session_removes_its_messages_but_keeps_spend() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for id in ["s1", "s2"] {
        store.upsert_session(session(id, "/p", T0)).await.unwrap();
        for seq in 1..=3 {
            let m = message(&format!("{id}-m{seq}"), id, seq, MessageState::Complete, "x", T0);
            store.upsert_message(m).await.unwrap();
        }
        store
            .record_usage(usage(id, &format!("{id}-m3"), "main", "openai", "gpt", Some(0.5), T0))
            .await
            .unwrap();
    }

    store.delete_session("s1").await.unwrap();
    store.delete_session("s1").await.unwrap(); // already gone: still fine

    assert_eq!(store.session("s1").await.unwrap(), None);
    assert!(store.messages("s1").await.unwrap().is_empty());
    assert_eq!(store.messages("s2").await.unwrap().len(), 3);
    let conn = raw(store.path());
    let orphans: i64 = conn
        .query_row("SELECT count(*) FROM messages WHERE session_id = 's1'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(orphans, 0);
    let spend = store.spend("s1", T0, T0 + DAY_MS).await.unwrap();
    assert_close(spend.session_usd, 0.5);
    assert_close(spend.day_usd, 1.0);
}

// ---- listing ----

#[tokio::test]
async fn pagination_visits_every_session_once_in_order_while_new_ones_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    // 250 sessions in /a interleaved with 120 in /b; every third /a session
    // shares its timestamp with the next one so ties are broken by id.
    let mut expected = Vec::new();
    for i in 0..250i64 {
        let id = format!("a-{i:03}");
        store
            .upsert_session(session(&id, "/a", T0 + (i / 3) * 1000))
            .await
            .unwrap();
        expected.push((T0 + (i / 3) * 1000, id));
    }
    for i in 0..120i64 {
        store
            .upsert_session(session(&format!("b-{i:03}"), "/b", T0 + i * 1000 + 500))
            .await
            .unwrap();
    }
    expected.sort_by(|x, y| y.cmp(x));
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = store.list_sessions(Some("/a"), cursor.as_deref(), 7).await.unwrap();
        assert!(page.sessions.len() <= 7);
        assert!(page.sessions.iter().all(|s| s.cwd == "/a"));
        seen.extend(page.sessions.iter().map(|s| s.id.clone()));
        pages += 1;
        // Between pages, another instance starts sessions in both projects.
        for cwd in ["/a", "/b"] {
            let id = format!("new-{cwd}-{pages}");
            store
                .upsert_session(session(&id, cwd, T0 + 10_000_000 + pages))
                .await
                .unwrap();
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, expected);
    assert_eq!(pages, 36); // ceil(250 / 7)

    // The newly created ones are at the top of a fresh listing.
    let fresh = store.list_sessions(Some("/a"), None, 1).await.unwrap();
    assert_eq!(fresh.sessions[0].id, format!("new-/a-{pages}"));
}

#[tokio::test]
async fn unfiltered_listing_and_an_exact_last_page_end_without_a_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for i in 0..10 {
        let cwd = if i % 2 == 0 { "/a" } else { "/b" };
        store
            .upsert_session(session(&format!("s{i}"), cwd, T0 + i))
            .await
            .unwrap();
    }
    let first = store.list_sessions(None, None, 5).await.unwrap();
    let ids: Vec<&str> = first.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["s9", "s8", "s7", "s6", "s5"]);
    let second = store
        .list_sessions(None, first.next_cursor.as_deref(), 5)
        .await
        .unwrap();
    assert_eq!(second.sessions.len(), 5);
    assert_eq!(second.next_cursor, None);
    let empty = store.list_sessions(Some("/nowhere"), None, 5).await.unwrap();
    assert!(empty.sessions.is_empty() && empty.next_cursor.is_none());
}

#[tokio::test]
async fn invalid_tampered_and_foreign_cursors_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for i in 0..5 {
        store
            .upsert_session(session(&format!("s{i}"), "/a", T0 + i))
            .await
            .unwrap();
    }
    let page = store.list_sessions(Some("/a"), None, 2).await.unwrap();
    let good = page.next_cursor.unwrap();

    let mut tampered = good.clone().into_bytes();
    let last = tampered.len() - 10;
    tampered[last] = if tampered[last] == b'f' { b'e' } else { b'f' };
    let tampered = String::from_utf8(tampered).unwrap();
    let cases = [
        ("garbage", "not a cursor!".to_string(), None),
        ("truncated", good[..good.len() - 2].to_string(), Some("/a")),
        ("tampered", tampered, Some("/a")),
        ("other cwd", good.clone(), Some("/b")),
        ("no filter", good.clone(), None),
    ];
    for (name, cursor, cwd) in cases {
        let err = store.list_sessions(cwd, Some(&cursor), 2).await.unwrap_err();
        assert!(matches!(err, StoreError::InvalidCursor { .. }), "{name}: {err:?}");
        assert!(err.to_string().contains("first page"), "{name}: {err}");
    }
    assert_eq!(
        store
            .list_sessions(Some("/a"), Some(&good), 2)
            .await
            .unwrap()
            .sessions
            .len(),
        2
    );
}

#[tokio::test]
async fn summaries_count_messages_and_known_cost() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.upsert_session(session("s1", "/p", T0)).await.unwrap();
    store.upsert_session(session("s2", "/p", T0 + 1)).await.unwrap();
    for seq in 1..=4 {
        let m = message(&format!("m{seq}"), "s1", seq, MessageState::Complete, "x", T0);
        store.upsert_message(m).await.unwrap();
    }
    for usd in [Some(0.25), Some(1.5), None] {
        store
            .record_usage(usage("s1", "m4", "main", "openai", "gpt", usd, T0))
            .await
            .unwrap();
    }
    let page = store.list_sessions(Some("/p"), None, 10).await.unwrap();
    let s1 = page.sessions.iter().find(|s| s.id == "s1").unwrap();
    let s2 = page.sessions.iter().find(|s| s.id == "s2").unwrap();
    assert_eq!((s1.message_count, s2.message_count), (4, 0));
    assert_close(s1.cost_usd, 1.75);
    assert_close(s2.cost_usd, 0.0);
}

// ---- reports ----

/// Seven calls over two sessions, three agents, three models, two
/// providers; one has no price and one falls outside the default window.
async fn seeded_report_store(dir: &tempfile::TempDir) -> Store {
    let store = open(dir);
    let rows = [
        usage("s1", "m1", "main", "anthropic", "claude", Some(1.00), T0 + HOUR_MS),
        usage("s1", "m1", "main", "anthropic", "claude", Some(2.00), T0 + 2 * HOUR_MS),
        usage("s1", "m2", "explore", "openai", "gpt", Some(0.50), T0 + 3 * HOUR_MS),
        usage("s2", "m3", "main", "openai", "gpt", Some(0.50), T0 + 4 * HOUR_MS),
        usage("s2", "m4", "title", "openai", "mini", Some(0.00), T0 + 5 * HOUR_MS),
        usage("s2", "m5", "main", "openai", "mystery", None, T0 + 6 * HOUR_MS),
        usage("s3", "m9", "main", "anthropic", "claude", Some(100.0), T0 + 3 * DAY_MS),
    ];
    for row in rows {
        store.record_usage(row).await.unwrap();
    }
    store
}

#[tokio::test]
async fn report_totals_breakdowns_and_percentages_match_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let store = seeded_report_store(&dir).await;
    let report = store
        .usage_report(&ReportQuery {
            from_ms: Some(T0),
            to_ms: Some(T0 + DAY_MS),
            ..ReportQuery::default()
        })
        .await
        .unwrap();

    let t = &report.totals;
    assert_close(t.cost_usd, 4.0); // 1 + 2 + 0.5 + 0.5 + 0; the unpriced row adds nothing
    assert_eq!(t.requests, 6);
    assert_eq!(t.messages, 5);
    assert_eq!(t.sessions, 2);
    assert_eq!(
        (
            t.input_tokens,
            t.output_tokens,
            t.cache_read_tokens,
            t.cache_write_tokens,
            t.reasoning_tokens
        ),
        (6000, 600, 60, 6, 30)
    );
    assert_eq!(t.duration_ms, 9000);
    assert_eq!(
        (t.first_at_ms, t.last_at_ms),
        (Some(T0 + HOUR_MS), Some(T0 + 6 * HOUR_MS))
    );
    assert_eq!(t.unknown_cost_requests, 1);
    assert_eq!((t.unknown_cost_input_tokens, t.unknown_cost_output_tokens), (1000, 100));

    let models: Vec<(&str, u64, u64)> = report
        .by_model
        .iter()
        .map(|b| (b.key.as_str(), b.requests, b.unknown_cost_requests))
        .collect();
    assert_eq!(
        models,
        [("claude", 2, 0), ("gpt", 2, 0), ("mini", 1, 0), ("mystery", 1, 1)]
    );
    for (b, (cost, pct)) in report
        .by_model
        .iter()
        .zip([(3.0, 75.0), (1.0, 25.0), (0.0, 0.0), (0.0, 0.0)])
    {
        assert_close(b.cost_usd, cost);
        assert_close(b.percent, pct);
    }
    let providers: Vec<(&str, u64)> = report
        .by_provider
        .iter()
        .map(|b| (b.key.as_str(), b.requests))
        .collect();
    assert_eq!(providers, [("anthropic", 2), ("openai", 4)]);
    assert_close(report.by_provider[0].percent, 75.0);
    assert_close(report.by_provider[1].percent, 25.0);
    let agents: Vec<&str> = report.by_agent.iter().map(|b| b.key.as_str()).collect();
    assert_eq!(agents, ["main", "explore", "title"]);
    assert_close(report.by_agent[0].percent, 87.5); // (1 + 2 + 0.5) / 4
    assert_eq!(report.by_agent[0].input_tokens, 4000);

    let c = &report.by_cost_type;
    assert_close(c.input_usd, 1.6);
    assert_close(c.output_usd, 2.4);
    assert_close(c.input_percent, 40.0);
    assert_close(c.output_percent, 60.0);
    assert_close(c.cache_read_percent, 0.0);
}

#[tokio::test]
async fn report_filters_narrow_by_session_model_and_provider() {
    let dir = tempfile::tempdir().unwrap();
    let store = seeded_report_store(&dir).await;

    let all = store.usage_report(&ReportQuery::default()).await.unwrap();
    assert_close(all.totals.cost_usd, 104.0);
    assert_eq!(all.totals.sessions, 3);

    let s1 = ReportQuery {
        session_id: Some("s1".into()),
        ..ReportQuery::default()
    };
    let r = store.usage_report(&s1).await.unwrap();
    assert_close(r.totals.cost_usd, 3.5);
    assert_eq!(r.totals.requests, 3);

    let openai_gpt = ReportQuery {
        provider: Some("openai".into()),
        model: Some("gpt".into()),
        ..ReportQuery::default()
    };
    let r = store.usage_report(&openai_gpt).await.unwrap();
    assert_eq!((r.totals.requests, r.totals.sessions), (2, 2));
    assert_close(r.by_model[0].percent, 100.0);

    let nothing = ReportQuery {
        from_ms: Some(T0 + 10 * DAY_MS),
        ..ReportQuery::default()
    };
    let r = store.usage_report(&nothing).await.unwrap();
    assert_eq!(r.totals.requests, 0);
    assert_eq!(r.totals.first_at_ms, None);
    assert!(r.by_agent.is_empty());
    assert_eq!(r.by_cost_type.input_percent, 0.0);
}

#[tokio::test]
async fn daily_costs_bucket_by_local_midnight_including_empty_days() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    // Local time is UTC+5:30. Local midnight of 2024-03-10 is 2024-03-09T18:30Z.
    let tz = 5 * 3600 + 1800;
    let midnight = T0 - 5 * HOUR_MS - HOUR_MS / 2;
    let at = |offset: i64| midnight + offset;
    let rows = [
        (at(-HOUR_MS / 2), 1.0),          // 2024-03-09 23:30 local
        (at(HOUR_MS / 2), 2.0),           // 2024-03-10 00:30 local
        (at(DAY_MS - 1), 4.0),            // 2024-03-10 23:59:59.999
        (at(DAY_MS), 8.0),                // 2024-03-11 00:00:00.000
        (at(3 * DAY_MS + HOUR_MS), 16.0), // 2024-03-13 01:00
    ];
    for (i, (t, usd)) in rows.into_iter().enumerate() {
        store
            .record_usage(usage("s", &format!("m{i}"), "main", "openai", "gpt", Some(usd), t))
            .await
            .unwrap();
    }
    store
        .record_usage(usage("s", "mx", "main", "openai", "mystery", None, at(HOUR_MS)))
        .await
        .unwrap();

    // Asked from the middle of 2024-03-09 local: that whole day is the first bucket.
    let days = store.daily_costs(at(-12 * HOUR_MS), 5, tz).await.unwrap();
    let got: Vec<(&str, f64, u64)> = days.iter().map(|d| (d.day.as_str(), d.cost_usd, d.requests)).collect();
    assert_eq!(
        got,
        [
            ("2024-03-09", 1.0, 1),
            ("2024-03-10", 6.0, 3),
            ("2024-03-11", 8.0, 1),
            ("2024-03-12", 0.0, 0),
            ("2024-03-13", 16.0, 1),
        ]
    );

    // In UTC the 23:30 and 00:30 local rows both fall on 2024-03-09.
    let utc = store.daily_costs(T0 - DAY_MS, 2, 0).await.unwrap();
    assert_eq!(utc[0].day, "2024-03-09");
    assert_close(utc[0].cost_usd, 3.0);
    assert!(store.daily_costs(T0, 40_000, 0).await.is_err());
}

#[tokio::test]
async fn spend_counts_the_session_forever_and_the_day_across_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let store = seeded_report_store(&dir).await;
    let spend = store.spend("s1", T0, T0 + DAY_MS).await.unwrap();
    assert_close(spend.session_usd, 3.5);
    assert_close(spend.day_usd, 4.0);
    let later = store.spend("s3", T0 + DAY_MS, T0 + 2 * DAY_MS).await.unwrap();
    assert_close(later.session_usd, 100.0);
    assert_close(later.day_usd, 0.0);
}

#[tokio::test]
async fn usage_with_a_non_finite_price_is_kept_as_unpriced() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let mut row = usage("s", "m", "main", "openai", "gpt", Some(1.0), T0);
    row.total_usd = f64::NAN;
    store.record_usage(row).await.unwrap();
    let r = store.usage_report(&ReportQuery::default()).await.unwrap();
    assert_eq!(r.totals.requests, 1);
    assert_eq!(r.totals.unknown_cost_requests, 1);
    assert_close(r.totals.cost_usd, 0.0);
}

// ---- several writers on one file ----

/// Records `n` usage rows for `session` through a fresh `Store` on `path`,
/// many in flight at once so the writer batches them.
fn write_many(path: &Path, session: &str, n: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Store::open(path).unwrap();
        store
            .upsert_session(self::session(session, "/shared", T0))
            .await
            .unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..n {
            let store = store.clone();
            let row = usage(
                session,
                &format!("{session}-{i}"),
                "main",
                "openai",
                "gpt",
                Some(0.001),
                T0 + i as i64,
            );
            tasks.spawn(async move { store.record_usage(row).await });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap().unwrap();
        }
        // Messages go through the same writer; a few interleave with usage.
        for seq in 0..50 {
            let m = message(
                &format!("{session}-msg{seq}"),
                session,
                seq,
                MessageState::Complete,
                "x",
                T0,
            );
            store.upsert_message(m).await.unwrap();
        }
    });
}

fn count_usage(path: &Path, session: &str) -> i64 {
    raw(path)
        .query_row("SELECT count(*) FROM usage WHERE session_id = ?1", [session], |r| {
            r.get(0)
        })
        .unwrap()
}

#[test]
fn two_stores_on_one_file_writing_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    drop(Store::open(&path).unwrap());
    let handles: Vec<_> = ["left", "right"]
        .into_iter()
        .map(|name| {
            let path = path.clone();
            std::thread::spawn(move || write_many(&path, name, 2000))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(count_usage(&path, "left"), 2000);
    assert_eq!(count_usage(&path, "right"), 2000);
    let messages: i64 = raw(&path)
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(messages, 100);
}

#[tokio::test]
async fn a_write_waits_out_another_connections_lock_then_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let other = raw(store.path());
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        other.execute_batch("COMMIT").unwrap();
    });
    let started = std::time::Instant::now();
    store
        .record_usage(usage("s", "m", "main", "openai", "gpt", Some(0.1), T0))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(250),
        "did not wait for the lock"
    );
    releaser.join().unwrap();
    assert_eq!(count_usage(store.path(), "s"), 1);
}

const CHILD_DB_ENV: &str = "MIA_STORE_TEST_CHILD_DB";

/// Not a test on its own: the body of the child process that
/// `another_process_writing_at_once_loses_nothing` starts.
#[test]
#[ignore = "run by another_process_writing_at_once_loses_nothing in a child process"]
fn child_process_writer() {
    let path = std::env::var_os(CHILD_DB_ENV).expect("started without the database path");
    write_many(Path::new(&path), "child", 2000);
}

#[test]
fn another_process_writing_at_once_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    drop(Store::open(&path).unwrap());
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_process_writer",
            "--exact",
            "--ignored",
            "--quiet",
            "--test-threads=1",
        ])
        .env(CHILD_DB_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    write_many(&path, "parent", 2000);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "child writer failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(count_usage(&path, "parent"), 2000);
    assert_eq!(count_usage(&path, "child"), 2000);
}

#[tokio::test]
async fn gateway_costs_are_stored_with_their_source_and_exported() {
    use mia_cost::CostSource;
    use mia_store::export::{ExportFormat, ExportQuery};
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.upsert_session(session("s1", "/proj,a", T0)).await.unwrap();
    let mut gw = usage("s1", "m1", "mia", "lite", "=cmd", Some(0.25), T0);
    gw.input_usd = 0.0;
    gw.output_usd = 0.0;
    gw.cost_source = CostSource::Gateway;
    store.record_usage(gw).await.unwrap();
    store
        .record_usage(usage("s1", "m2", "mia", "lite", "echo", Some(0.5), T0 + 1000))
        .await
        .unwrap();
    // A gateway source without a known cost is stored as local: there is no gateway figure.
    let mut unknown = usage("s2", "m3", "mia", "lite", "echo", None, T0 + 2000);
    unknown.cost_source = CostSource::Gateway;
    store.record_usage(unknown).await.unwrap();
    let conn = raw(&db_path(&dir));
    let sources: Vec<(String, String)> = conn
        .prepare("SELECT model, cost_source FROM usage ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        sources,
        [("=cmd", "gateway"), ("echo", "local"), ("echo", "local")].map(|(a, b)| (a.to_string(), b.to_string()))
    );
    // The schema refuses any other source.
    let bad = conn.execute(
        "INSERT INTO usage (agent, provider, model, cost_known, started_at_ms, duration_ms, created_at_ms, cost_source)
         VALUES ('a', 'p', 'm', 1, 0, 0, 0, 'vendor')",
        [],
    );
    assert!(bad.is_err());
    // Reports still add the gateway's total in.
    let report = store.usage_report(&ReportQuery::default()).await.unwrap();
    assert_close(report.totals.cost_usd, 0.75);

    let all = |format| ExportQuery {
        format,
        from_ms: None,
        to_ms: None,
    };
    let csv = store.export_usage(all(ExportFormat::Csv)).await.unwrap();
    assert_eq!(csv.rows, 3);
    let lines: Vec<&str> = csv.chunks.iter().flat_map(|c| c.split('\n')).collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("time,session_id,provider,model,agent,mode,input_tokens"));
    assert!(
        lines[1].ends_with(",s1,lite,\"'=cmd\",mia,build,1000,100,10,1,5,0.25,gateway,\"/proj,a\""),
        "{}",
        lines[1]
    );
    assert!(lines[2].contains(",0.5,local,"), "{}", lines[2]);
    // No session row: mode and project empty; no price: cost empty.
    assert!(
        lines[3].ends_with(",s2,lite,echo,mia,,1000,100,10,1,5,,local,"),
        "{}",
        lines[3]
    );

    // The range is [from, to): the middle row only.
    let mid = store
        .export_usage(ExportQuery {
            format: ExportFormat::Json,
            from_ms: Some(T0 + 1),
            to_ms: Some(T0 + 2000),
        })
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&mid.chunks.join("\n")).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["model"], "echo");
    assert_eq!(v[0]["cost_source"], "local");
    assert_eq!(v[0]["project"], "/proj,a");
}

// ---- a full disk ----

/// A small tmpfs mounted for one test (root only), unmounted on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount() -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { dir })
    }

    /// Fills it to its last byte with one file.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.dir.path().join("filler")).unwrap();
        let mut size = 1 << 20;
        while size >= 1 {
            if f.write_all(&vec![0u8; size]).is_err() {
                size /= 2;
            }
        }
    }

    fn free(&self) {
        std::fs::remove_file(self.dir.path().join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_a_full_disk_refuses_are_kept_counted_in_spend_and_written_when_space_returns() {
    let Some(disk) = SmallDisk::mount() else {
        eprintln!("skipped: cannot mount a tmpfs here (the test needs root)");
        return;
    };
    let path = disk.dir.path().join("mia.sqlite3");
    let store = Store::open(&path).unwrap();
    store.upsert_session(session("s", "/p", T0)).await.unwrap();
    disk.fill();
    let big = "x".repeat(64 * 1024);
    for i in 0..5 {
        let err = store
            .append_message(message(&format!("m{i}"), "s", 0, MessageState::Complete, &big, T0 + i))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::DiskFull { .. }), "{err:?}");
        store
            .record_usage(usage("s", &format!("m{i}"), "chat", "p", "m", Some(0.5), T0 + i))
            .await
            .unwrap_err();
    }
    // A streaming answer's checkpoints are kept as one write.
    for n in 1..50 {
        let _ = store
            .append_message(message("a", "s", 0, MessageState::Streaming, &"y".repeat(n), T0 + 10))
            .await;
    }
    let unsaved = store.unsaved();
    assert_eq!(unsaved.held, 11, "{unsaved:?}");
    assert!(
        unsaved.describe().unwrap().starts_with("not saving: the disk holding"),
        "{unsaved:?}"
    );
    let news = store.take_saving_news();
    assert_eq!(news.len(), 1, "{news:?}");
    assert!(news[0].message().contains("is full"), "{news:?}");
    // The budgets count what the file could not take.
    let spend = store.spend("s", T0, T0 + DAY_MS).await.unwrap();
    assert_close(spend.session_usd, 2.5);
    assert_close(spend.day_usd, 2.5);
    assert!(store.messages("s").await.unwrap().is_empty());

    disk.free();
    // Kept writes are tried again on their own (a guard, not a timing).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store.unsaved().held > 0 {
        assert!(std::time::Instant::now() < deadline, "{:?}", store.unsaved());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let ids: Vec<String> = store.messages("s").await.unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(ids, ["m0", "m1", "m2", "m3", "m4", "a"]);
    let stored: i64 = raw(&path)
        .query_row("SELECT count(*) FROM usage", [], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, 5);
    // Counted once, now from the file.
    assert_close(store.spend("s", T0, T0 + DAY_MS).await.unwrap().session_usd, 2.5);
    let news = store.take_saving_news();
    assert_eq!(news.len(), 1, "{news:?}");
    assert!(
        news[0].message().contains("saving works again: the 11 writes"),
        "{news:?}"
    );
    assert_eq!(store.unsaved().describe(), None);
}
