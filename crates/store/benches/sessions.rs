//! Session benchmarks (numbers for closing notes, not tests):
//! - `list_sessions` latency over a store with 10,000 sessions: the first
//!   page and a deep page (page 150 of 200), in the core and through Lua;
//! - resuming a 2,000-message session in Neovim until its chat buffer holds
//!   the whole transcript (`mia.sessions.load`, then a redraw); the session
//!   ends with a compaction covering all but its last 100 messages.
//!
//! Run: `cargo bench --bench sessions` (needs Neovim: $MIA_NVIM or .venv/bin/nvim).
//!
//! With `MIA_BENCH_BASELINE_LIB=/path/to/an/older/libmia_core.so` (built
//! before the schema-2 session log) and `MIA_BENCH_BASELINE_ROOT` (a checkout
//! of the same commit's `lua/` and `benches/`), the resume is also timed with
//! that library and Lua, alternating with this one, on a schema-1 copy of the
//! same store (the same 2,000 messages, without the compaction row), and
//! this build once more on that copy (migrated on first open).

use std::path::PathBuf;
use std::time::Instant;

use mia_llm::message::Role;
use mia_store::{MessageKind, MessageRow, MessageState, SessionRow, Store};
use serde_json::json;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."); // the workspace
    let tmp = tempfile::tempdir().expect("temp dir");
    let data = tmp.path().join("nvim").join("mia");
    let store = Store::open(&data.join("mia.sqlite3")).expect("store opens");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cwd = "/bench/project";
    rt.block_on(async {
        let base = 1_790_000_000_000i64;
        let mut pending = Vec::new();
        for i in 0..10_000i64 {
            let row = SessionRow {
                id: format!("s{i:05}"),
                cwd: if i % 10 == 0 { "/elsewhere".into() } else { cwd.into() },
                title: Some(format!("session {i}")),
                mode: "ask".into(),
                model: "anthropic/claude-sonnet-4-5".into(),
                created_at_ms: base + i * 1000,
                updated_at_ms: base + i * 1000,
                meta: json!({}),
            };
            pending.push(store.upsert_session(row));
            if pending.len() == 500 {
                for p in pending.drain(..) {
                    p.await.expect("insert");
                }
            }
        }
        for p in pending {
            p.await.expect("insert");
        }
        // the session to resume: 2,000 messages of realistic size
        let mut pending = Vec::new();
        for seq in 0..2000i64 {
            let role = if seq % 2 == 0 { Role::User } else { Role::Assistant };
            let text = format!(
                "{} {}",
                if seq % 2 == 0 { "question" } else { "answer" },
                "lorem ipsum dolor sit amet ".repeat(20)
            );
            pending.push(store.upsert_message(MessageRow {
                id: format!("s09999-{seq}"),
                session_id: "s09999".into(),
                seq,
                role,
                parts: json!([{ "type": "text", "text": text }]),
                state: MessageState::Complete,
                meta: json!({}),
                kind: MessageKind::Message,
                created_at_ms: base,
                updated_at_ms: base,
            }));
            if pending.len() == 500 {
                for p in pending.drain(..) {
                    p.await.expect("insert");
                }
            }
        }
        for p in pending {
            p.await.expect("insert");
        }
        let summary = MessageRow {
            id: "s09999-compaction".into(),
            session_id: "s09999".into(),
            seq: 0,
            role: Role::User,
            parts: json!([{ "type": "text", "text": format!("(Summary of the earlier conversation)\n{}", "summary ".repeat(200)) }]),
            state: MessageState::Complete,
            meta: json!({}),
            kind: MessageKind::Message,
            created_at_ms: base,
            updated_at_ms: base,
        };
        store.append_compaction(summary, 100).await.expect("compaction");
    });
    // Timed outside the insert block, on the runtime, as the Lua API uses it.
    let mut cursor = None;
    let mut deep_cursor = None;
    for page in 0..180 {
        let p = rt
            .block_on(store.list_sessions(Some(cwd), cursor.as_deref(), 50))
            .expect("page");
        cursor = p.next_cursor;
        if page == 149 {
            deep_cursor = cursor.clone();
        }
    }
    let time = |c: Option<String>| {
        median(
            (0..30)
                .map(|_| {
                    let t = Instant::now();
                    rt.block_on(store.list_sessions(Some(cwd), c.as_deref(), 50))
                        .expect("page");
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect(),
        )
    };
    println!("## Sessions (10,000 in the store, 9,000 in this cwd, pages of 50)\n");
    println!(
        "- core `list_sessions`, first page: {:.2} ms (median of 30)",
        time(None)
    );
    println!(
        "- core `list_sessions`, page 151: {:.2} ms (median of 30)",
        time(deep_cursor.clone())
    );
    rt.block_on(store.checkpoint()).expect("checkpoint");
    drop(store);

    let baseline = std::env::var("MIA_BENCH_BASELINE_LIB").ok().map(|lib| {
        // A schema-1 copy of the store for the older library.
        let home = tmp.path().join("baseline");
        let dir = home.join("nvim").join("mia");
        std::fs::create_dir_all(&dir).expect("baseline dir");
        std::fs::copy(data.join("mia.sqlite3"), dir.join("mia.sqlite3")).expect("store copy");
        let conn = rusqlite::Connection::open(dir.join("mia.sqlite3")).expect("copy opens");
        conn.execute_batch(
            "DELETE FROM messages WHERE kind = 'compaction';
             DROP INDEX messages_compactions;
             ALTER TABLE messages DROP COLUMN covers_to;
             ALTER TABLE messages DROP COLUMN covers_from;
             ALTER TABLE messages DROP COLUMN kind;
             PRAGMA user_version = 1;",
        )
        .expect("schema-1 copy");
        let copy = tmp.path().join("libmia_core-baseline.so");
        std::fs::copy(lib, &copy).expect("the baseline library exists");
        (home, copy)
    });

    // A snapshot of the library, so edits during a run do not trip the loader's staleness check.
    let lib = tmp.path().join("libmia_core.so");
    std::fs::copy(root.join("target/release/libmia_core.so"), &lib)
        .expect("the library is built (cargo build --release)");
    let nvim = std::env::var("MIA_NVIM").unwrap_or_else(|_| root.join(".venv/bin/nvim").display().to_string());
    let run = |label: &str, home: &std::path::Path, lib: &std::path::Path, code: &std::path::Path| {
        if !label.is_empty() {
            println!("{label}:");
        }
        let out = std::process::Command::new(&nvim)
            .args(["--headless", "--clean", "-l"])
            .arg(code.join("benches/resume.lua"))
            .env("XDG_DATA_HOME", home)
            .env("MIA_CORE_PATH", lib)
            .env("MIA_BENCH_CURSOR", deep_cursor.clone().unwrap_or_default())
            .output()
            .expect("nvim runs");
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    };
    match &baseline {
        Some((home, old)) => {
            let old_code = std::env::var("MIA_BENCH_BASELINE_ROOT").map_or_else(|_| root.clone(), PathBuf::from);
            // The schema-1 store once more, for this build to migrate: the same 2,000 messages, no compaction.
            let plain = tmp.path().join("plain");
            std::fs::create_dir_all(plain.join("nvim").join("mia")).expect("plain dir");
            std::fs::copy(
                home.join("nvim").join("mia").join("mia.sqlite3"),
                plain.join("nvim").join("mia").join("mia.sqlite3"),
            )
            .expect("plain copy");
            for _ in 0..3 {
                run(
                    "baseline (library and Lua), schema 1, 2,000 messages",
                    home,
                    old,
                    &old_code,
                );
                run(
                    "this build, schema 2, 2,000 messages + 1 compaction",
                    tmp.path(),
                    &lib,
                    &root,
                );
                run(
                    "this build, schema 2, 2,000 messages (no compaction)",
                    &plain,
                    &lib,
                    &root,
                );
            }
        }
        None => run("", tmp.path(), &lib, &root),
    }
}
