//! The store at the scale of heavy long-term use (numbers for notes, not a
//! test): 1,000,000 usage rows over 90 days, 5 models, 3 providers and 2,000
//! sessions, then the medians of the queries the UI runs (`/costs weekly`,
//! a 90-day report, `:MiaCosts`' data, the 30-day chart, the per-request
//! budget check), the throughput of the async write API with the writer's
//! batching, and the disk cost of messages.
//!
//! Every report is timed twice in the same run: summed from the usage rows
//! (as all reports were before the usage rollup) and read from the rollup;
//! the run fails if the two answers differ.
//!
//! The usage rows are bulk-loaded through a plain connection in big
//! transactions (loading is not what is measured; the schema's trigger
//! keeps the rollup as they go in); every timed operation goes through
//! `Store`.
//!
//! Run: `cargo bench --bench store`.

use std::path::Path;
use std::time::{Duration, Instant};

use mia_cost::PricingRegistry;
use mia_llm::message::Role;
use mia_store::{
    CostQuery, CostScope, MessageKind, MessageRow, MessageState, ReportQuery, SessionRow, Store, UsageRow,
};
use serde_json::json;

const USAGE_ROWS: usize = 1_000_000;
const SESSIONS: usize = 2_000;
const DAYS: i64 = 90;
const DAY_MS: i64 = 86_400_000;
const MODELS: [(&str, &str); 5] = [
    ("anthropic", "claude-sonnet-4"),
    ("anthropic", "claude-haiku-4"),
    ("openai", "gpt-4.1"),
    ("openai", "gpt-4.1-mini"),
    ("gemini", "gemini-2.5-pro"),
];
const AGENTS: [&str; 3] = ["main", "explore", "title"];
const QUERY_RUNS: usize = 9;
const SPEND_RUNS: usize = 201;
const WRITE_ROWS: usize = 20_000;
const MESSAGES: usize = 10_000;

/// A small deterministic generator, so every run measures the same data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// A report's median summed from the rows, then from the rollup.
fn side_by_side(rows: Duration, rollup: Duration) -> String {
    format!("rows {} → rollup {}", ms(rows), ms(rollup))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Sessions and usage rows straight into the file, 100,000 rows per
/// transaction, in time order as real use would write them.
fn bulk_load(path: &Path, now: i64) -> rusqlite::Result<()> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute_batch("PRAGMA synchronous = OFF")?;
    let start = now - DAYS * DAY_MS;
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO sessions (id, cwd, title, mode, model, created_at_ms, updated_at_ms, meta)
             VALUES (?1, ?2, ?3, 'build', 'anthropic/claude-sonnet-4', ?4, ?5, '{}')",
        )?;
        for s in 0..SESSIONS as i64 {
            let created = start + s * (DAYS * DAY_MS / SESSIONS as i64);
            insert.execute(rusqlite::params![
                format!("session-{s:05}"),
                format!("/home/dev/project-{}", s % 20),
                format!("Session number {s}"),
                created,
                created + 3_600_000,
            ])?;
        }
    }
    tx.commit()?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let step = DAYS * DAY_MS / USAGE_ROWS as i64;
    for chunk in 0..USAGE_ROWS / 100_000 {
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare(
                "INSERT INTO usage (session_id, message_id, agent, provider, model, input_tokens, output_tokens,
                     cache_read_tokens, cache_write_tokens, reasoning_tokens, estimated, cost_known, input_usd,
                     output_usd, cache_read_usd, cache_write_usd, total_usd, started_at_ms, duration_ms,
                     created_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 0, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
            )?;
            for i in chunk * 100_000..(chunk + 1) * 100_000 {
                let at = start + i as i64 * step;
                // Sessions are busy for a stretch of time each, like real ones.
                let session = (i * SESSIONS / USAGE_ROWS + rng.below(3) as usize) % SESSIONS;
                let (provider, model) = MODELS[rng.below(5) as usize];
                let input = 500 + rng.below(20_000) as i64;
                let output = 50 + rng.below(2_000) as i64;
                let cache_read = rng.below(40_000) as i64;
                let cache_write = rng.below(2_000) as i64;
                let known = rng.below(50) != 0;
                let (iu, ou, cru, cwu) = (
                    input as f64 * 3e-6,
                    output as f64 * 15e-6,
                    cache_read as f64 * 0.3e-6,
                    cache_write as f64 * 3.75e-6,
                );
                insert.execute(rusqlite::params![
                    format!("session-{session:05}"),
                    format!("session-{session:05}-{}", i / 4),
                    AGENTS[rng.below(3) as usize],
                    provider,
                    model,
                    input,
                    output,
                    cache_read,
                    cache_write,
                    output / 4,
                    known,
                    iu,
                    ou,
                    cru,
                    cwu,
                    iu + ou + cru + cwu,
                    at - 4_000,
                    4_000,
                    at,
                ])?;
            }
        }
        tx.commit()?;
    }
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); ANALYZE;")?;
    Ok(())
}

async fn time_async<F, Fut, T>(runs: usize, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    f().await; // warm the page cache and statement caches
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        std::hint::black_box(f().await);
        samples.push(t.elapsed());
    }
    median(samples)
}

/// A priced call in one of the newest `active` sessions.
fn usage_row(i: usize, active: usize, now: i64) -> UsageRow {
    let (provider, model) = MODELS[i % MODELS.len()];
    UsageRow {
        session_id: Some(format!("session-{:05}", SESSIONS - 1 - i % active)),
        message_id: Some(format!("bench-{i}")),
        agent: "main".into(),
        provider: provider.into(),
        model: model.into(),
        input_tokens: 1200,
        output_tokens: 300,
        cache_read_tokens: 8000,
        cache_write_tokens: 0,
        reasoning_tokens: 0,
        estimated: false,
        cost_known: true,
        input_usd: 0.0036,
        output_usd: 0.0045,
        cache_read_usd: 0.0024,
        cache_write_usd: 0.0,
        total_usd: 0.0105,
        started_at_ms: now - 3000,
        duration_ms: 3000,
        created_at_ms: now,
        retries: 0,
        cost_source: Default::default(),
    }
}

/// A message of the kind a coding session stores: prose, and every fourth
/// one a tool call with its result, 1–2 KB of parts JSON.
fn realistic_message(i: usize, rng: &mut Rng, now: i64) -> MessageRow {
    const WORDS: &[&str] = &[
        "the",
        "function",
        "returns",
        "an",
        "error",
        "when",
        "parser",
        "reaches",
        "end",
        "of",
        "input",
        "so",
        "we",
        "should",
        "check",
        "buffer",
        "length",
        "before",
        "reading",
        "next",
        "token",
        "test",
        "fails",
        "because",
        "fn",
        "let",
        "mut",
        "self",
        "match",
        "Some(value)",
        "None",
        "=>",
        "struct",
        "impl",
        "src/lexer.rs",
        "{",
        "}",
    ];
    let mut text = String::new();
    let target = 900 + rng.below(1000) as usize;
    while text.len() < target {
        text.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
        text.push(if rng.below(12) == 0 { '\n' } else { ' ' });
    }
    let session = i / 50;
    let parts = if i % 4 == 3 {
        json!([
            { "type": "text", "text": &text[..text.len() / 3] },
            { "type": "tool_call", "id": format!("call_{i}"), "name": "read_file",
              "arguments": { "path": "src/lexer.rs", "offset": 120, "limit": 80 } },
            { "type": "tool_result", "tool_call_id": format!("call_{i}"), "content": &text[text.len() / 3..],
              "is_error": false }
        ])
    } else {
        json!([{ "type": "text", "text": text }])
    };
    MessageRow {
        id: format!("msg-{i:06}"),
        session_id: format!("msg-session-{session:04}"),
        seq: (i % 50) as i64,
        role: if i.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        },
        parts,
        state: MessageState::Complete,
        meta: json!({}),
        kind: MessageKind::Message,
        created_at_ms: now,
        updated_at_ms: now,
    }
}

async fn run() -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("mia.sqlite3");
    let now = now_ms();
    let mut rows: Vec<(String, String)> = Vec::new();

    // A file as the mia before the rollup left it (schema version 2), loaded
    // with a heavy history, then opened: the migration builds the rollup
    // from the rows, as it will for a user upgrading. What versions 3
    // (the rollup) and 4 (`cost_source`) added is taken out again.
    drop(Store::open(&path)?);
    rusqlite::Connection::open(&path)?.execute_batch(
        "DROP INDEX usage_gateway; ALTER TABLE usage DROP COLUMN cost_source;
         DROP TRIGGER usage_rollup; DROP TRIGGER usage_rows_are_kept; DROP TRIGGER usage_rows_are_final;
         DROP TABLE usage_hours; DROP TABLE usage_days; DROP TABLE usage_ids; DROP TABLE usage_id_hours; DROP TABLE usage_quarters;
         PRAGMA user_version = 2;",
    )?;
    let t = Instant::now();
    bulk_load(&path, now)?;
    rows.push((
        format!("bulk load {USAGE_ROWS} usage rows + {SESSIONS} sessions (schema 2)"),
        format!("{:.1} s", t.elapsed().as_secs_f64()),
    ));
    let size_before = file_size(&path);
    let t = Instant::now();
    let store = Store::open(&path)?;
    rows.push((
        "first open after the upgrade: migration builds the rollup from 1M rows".into(),
        format!("{:.1} s", t.elapsed().as_secs_f64()),
    ));
    store.checkpoint().await?;
    let rollup_rows: String = rusqlite::Connection::open(&path)?.query_row(
        "SELECT (SELECT count(*) FROM usage_hours) || ' hour, ' || (SELECT count(*) FROM usage_days) || ' day, '
                || (SELECT count(*) FROM usage_quarters) || ' quarter, ' || (SELECT count(*) FROM usage_ids) || ' id, '
                || (SELECT count(*) FROM usage_id_hours) || ' id-hour rows'",
        [],
        |r| r.get(0),
    )?;
    rows.push(("rollup size".into(), rollup_rows));
    rows.push((
        "file size with 1M usage rows: without → with the rollup".into(),
        format!("{} → {}", mib(size_before), mib(file_size(&path))),
    ));

    // The reports the UI runs, each timed summed from the rows (how every
    // report was read before the rollup) and from the rollup, side by
    // side; the two answers must be equal.
    let pricing = PricingRegistry::builtin();
    let cost = |scope: CostScope, utc_offset_s: i32| CostQuery {
        scope,
        session_id: Some("session-01999".into()),
        model: None,
        provider: None,
        utc_offset_s,
        system_tokens: Some(3000),
    };
    let reports = [
        ("`/costs weekly` at UTC+2 (cost_report)", cost(CostScope::Weekly, 7200)),
        (
            "`/costs weekly` at UTC+5:30 (cost_report)",
            cost(CostScope::Weekly, 19_800),
        ),
        (
            "90-day report at UTC+2 (cost_report, days 90)",
            cost(CostScope::Days(90), 7200),
        ),
        (
            "`:MiaCosts` session tab (cost_report, session)",
            cost(CostScope::Session, 7200),
        ),
        (
            "`:MiaCosts` models tab (cost_report, days 30)",
            cost(CostScope::Days(30), 7200),
        ),
    ];
    for (label, q) in &reports {
        let from_rows = store.cost_report_from_rows(q, pricing, now).await?;
        let from_rollup = store.cost_report(q, pricing, now).await?;
        if from_rows != from_rollup {
            return Err(format!("{label}: the rollup's report differs from the rows'").into());
        }
        let before = time_async(QUERY_RUNS, || store.cost_report_from_rows(q, pricing, now)).await;
        let after = time_async(QUERY_RUNS, || store.cost_report(q, pricing, now)).await;
        rows.push((
            format!("{label}, {} rows", from_rows.usage.totals.requests),
            side_by_side(before, after),
        ));
    }
    let week = ReportQuery {
        from_ms: Some(now - 7 * DAY_MS),
        ..ReportQuery::default()
    };
    let all = ReportQuery::default();
    for (label, q) in [
        ("usage_report, last 7 days", &week),
        ("usage_report, all time (90 days)", &all),
    ] {
        let from_rows = store.usage_report_from_rows(q).await?;
        if from_rows != store.usage_report(q).await? {
            return Err(format!("{label}: the rollup's report differs from the rows'").into());
        }
        let before = time_async(QUERY_RUNS, || store.usage_report_from_rows(q)).await;
        let after = time_async(QUERY_RUNS, || store.usage_report(q)).await;
        rows.push((
            format!("{label} ({} rows)", from_rows.totals.requests),
            side_by_side(before, after),
        ));
    }
    let before = time_async(QUERY_RUNS, || store.daily_costs_from_rows(now - 29 * DAY_MS, 30, 7200)).await;
    let after = time_async(QUERY_RUNS, || store.daily_costs(now - 29 * DAY_MS, 30, 7200)).await;
    rows.push(("daily_costs, 30 days".into(), side_by_side(before, after)));
    let one_session = ReportQuery {
        session_id: Some("session-01000".into()),
        ..ReportQuery::default()
    };
    let d = time_async(QUERY_RUNS, || store.usage_report(&one_session)).await;
    rows.push(("usage_report, one session".into(), ms(d)));
    let day_start = now - now.rem_euclid(DAY_MS);
    let d = time_async(SPEND_RUNS, || {
        store.spend("session-01999", day_start, day_start + DAY_MS)
    })
    .await;
    rows.push(("spend (session + today)".into(), ms(d)));
    let d = time_async(QUERY_RUNS, || {
        store.list_sessions(Some("/home/dev/project-7"), None, 50)
    })
    .await;
    rows.push(("list_sessions, first page of 50".into(), ms(d)));

    // Writes through the async API, all in flight at once so the writer
    // batches them. Realistic: the calls of 4 active sessions (a few
    // Neovims), whose index entries sit together. Worst case: every call in
    // a different one of the 2,000 sessions, so each batch dirties about a
    // thousand pages of `usage_by_session`.
    for (label, active) in [("4 active sessions", 4), ("spread over 2,000 sessions", SESSIONS)] {
        let t = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..WRITE_ROWS {
            let store = store.clone();
            let row = usage_row(i, active, now);
            tasks.spawn(async move { store.record_usage(row).await });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        let rate = WRITE_ROWS as f64 / t.elapsed().as_secs_f64();
        rows.push((
            format!("record_usage, 20,000 concurrent callers, {label}"),
            format!("{rate:.0} rows/s"),
        ));
    }
    let t = Instant::now();
    for i in 0..1000 {
        store.record_usage(usage_row(i, 1, now)).await?;
    }
    let per = t.elapsed() / 1000;
    rows.push((
        "record_usage, one caller awaiting each".into(),
        format!("{} per row", ms(per)),
    ));
    drop(store);

    // Messages in a fresh file, so its size is theirs alone.
    let msg_path = dir.path().join("messages.sqlite3");
    let store = Store::open(&msg_path)?;
    for s in 0..MESSAGES / 50 {
        store
            .upsert_session(SessionRow {
                id: format!("msg-session-{s:04}"),
                cwd: "/home/dev/project".into(),
                title: None,
                mode: "build".into(),
                model: "anthropic/claude-sonnet-4".into(),
                created_at_ms: now,
                updated_at_ms: now,
                meta: json!({}),
            })
            .await?;
    }
    store.checkpoint().await?;
    let before = file_size(&msg_path);
    let mut rng = Rng(42);
    let messages: Vec<MessageRow> = (0..MESSAGES).map(|i| realistic_message(i, &mut rng, now)).collect();
    let json_bytes: usize = messages.iter().map(|m| m.parts.to_string().len()).sum();
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for m in messages {
        let store = store.clone();
        tasks.spawn(async move { store.upsert_message(m).await });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let rate = MESSAGES as f64 / t.elapsed().as_secs_f64();
    rows.push((
        "upsert_message, 10,000 concurrent callers".into(),
        format!("{rate:.0} messages/s"),
    ));
    store.checkpoint().await?;
    let delta = file_size(&msg_path).saturating_sub(before);
    rows.push((
        format!("disk per 1,000 messages (avg parts JSON {} B)", json_bytes / MESSAGES),
        format!(
            "{:.2} MiB",
            delta as f64 / (MESSAGES as f64 / 1000.0) / (1024.0 * 1024.0)
        ),
    ));
    Ok(rows)
}

fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start a runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(rows) => {
            println!("| measurement | result |\n| --- | --- |");
            for (what, result) in rows {
                println!("| {what} | {result} |");
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("store bench failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
