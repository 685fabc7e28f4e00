//! The usage rollup (per-hour and per-day sums the store keeps beside the
//! usage rows) always gives the report the rows give: after many random
//! calls across days, hours, providers, models, agents, sessions and
//! messages, every report the UI can ask for, read from the rollup, equals
//! the same report summed from the rows, to the last bit.

use mia_cost::PricingRegistry;
use mia_store::{CostQuery, CostScope, ReportQuery, Store, UsageRow};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// 2024-03-10T00:00:00Z.
const T0: i64 = 1_710_028_800_000;
const PROVIDERS: [&str; 3] = ["anthropic", "openai", ""];
const MODELS: [&str; 4] = ["claude", "gpt", "mini", "shared-name"];
const AGENTS: [&str; 3] = ["main", "explore", "title"];
/// UTC offsets a user can have (whole hours, half and quarter hours), and
/// one no zone uses, so that a day starts inside a quarter hour.
const OFFSETS_S: [i32; 7] = [0, 7200, -18_000, 19_800, 20_700, -34_200, 12_345];

/// xorshift: the same calls every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// One call at a random time in the 20 days before `T0` (or just after it),
/// often reusing a session or message across hours, days and models; some
/// unpriced, some without ids, some with odd prices.
fn random_row(rng: &mut Rng) -> UsageRow {
    let at = T0 - 20 * DAY_MS + rng.below(21 * DAY_MS as u64) as i64;
    let known = rng.below(8) != 0;
    let usd = |rng: &mut Rng| rng.below(1_000_000) as f64 * 1e-7 / 3.0;
    let (input_usd, output_usd, cache_read_usd, cache_write_usd) = (usd(rng), usd(rng), usd(rng), usd(rng));
    UsageRow {
        session_id: (rng.below(10) != 0).then(|| format!("s{}", rng.below(12))),
        message_id: (rng.below(10) != 0).then(|| format!("m{}", rng.below(150))),
        agent: rng.pick(&AGENTS).into(),
        provider: rng.pick(&PROVIDERS).into(),
        model: rng.pick(&MODELS).into(),
        input_tokens: rng.below(20_000),
        output_tokens: rng.below(4_000),
        cache_read_tokens: rng.below(30_000),
        cache_write_tokens: rng.below(2_000),
        reasoning_tokens: rng.below(500),
        estimated: rng.below(5) == 0,
        cost_known: known,
        input_usd,
        output_usd,
        cache_read_usd,
        cache_write_usd,
        total_usd: if rng.below(20) == 0 {
            f64::INFINITY
        } else {
            input_usd + output_usd + cache_read_usd + cache_write_usd
        },
        // Some priced by a gateway (a total without parts): the rollup sums them like any other row.
        cost_source: if rng.below(6) == 0 {
            mia_cost::CostSource::Gateway
        } else {
            mia_cost::CostSource::Local
        },
        started_at_ms: at - 2000,
        duration_ms: rng.below(9000) as i64 - 100,
        created_at_ms: at,
        retries: 0,
    }
}

/// Every window start a report can have: local midnights at several
/// offsets (as the UI asks), odd instants, hour and day boundaries, and
/// all time.
fn starts(rng: &mut Rng) -> Vec<Option<i64>> {
    let mut out = vec![
        None,
        Some(T0),
        Some(T0 - 7 * DAY_MS),
        Some(T0 + HOUR_MS),
        Some(T0 + 30 * DAY_MS),
    ];
    for tz in OFFSETS_S {
        for days in [0, 6, 13, 29, 89] {
            out.push(Some(T0 - days * DAY_MS - i64::from(tz) * 1000));
        }
    }
    for _ in 0..10 {
        out.push(Some(T0 - 21 * DAY_MS + rng.below(22 * DAY_MS as u64) as i64));
    }
    out
}

/// Every filter a report can have.
fn filters() -> Vec<(Option<String>, Option<String>)> {
    let mut out = vec![(None, None)];
    for p in PROVIDERS {
        out.push((Some(p.into()), None));
        for m in MODELS {
            out.push((Some(p.into()), Some(m.into())));
        }
    }
    for m in MODELS.into_iter().chain(["nowhere"]) {
        out.push((None, Some(m.into())));
    }
    out
}

async fn assert_rollup_equals_rows(store: &Store, rng: &mut Rng) {
    let mut checked_ids = false;
    for from_ms in starts(rng) {
        for (provider, model) in filters() {
            let q = ReportQuery {
                from_ms,
                provider,
                model,
                ..ReportQuery::default()
            };
            let rollup = store.usage_report(&q).await.unwrap();
            let rows = store.usage_report_from_rows(&q).await.unwrap();
            assert_eq!(rollup, rows, "{q:?}");
            checked_ids |= rows.totals.messages > 1 && rows.totals.sessions > 1;
        }
    }
    assert!(checked_ids, "no report counted several messages and sessions");
    for tz in OFFSETS_S {
        let from = T0 - 25 * DAY_MS + rng.below(DAY_MS as u64) as i64;
        let rollup = store.daily_costs(from, 30, tz).await.unwrap();
        let rows = store.daily_costs_from_rows(from, 30, tz).await.unwrap();
        assert_eq!(rollup, rows, "daily costs from {from} at UTC{tz:+}s");
        assert!(rows.iter().filter(|d| d.requests > 0).count() > 15);
    }
}

#[tokio::test]
async fn reports_from_the_rollup_equal_reports_from_the_rows_after_random_calls() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("mia.sqlite3")).unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    // In rounds, so the rollup is checked as it grows (and with calls
    // arriving out of time order, as several Neovims write them).
    for _round in 0..3 {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..700 {
            let store = store.clone();
            let row = random_row(&mut rng);
            tasks.spawn(async move { store.record_usage(row).await });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap().unwrap();
        }
        assert_rollup_equals_rows(&store, &mut rng).await;
    }
    // A call an hour later than every other of its message and session,
    // and one earlier than all: the distinct counts move with them.
    let mut late = random_row(&mut rng);
    late.created_at_ms = T0 + 3 * DAY_MS + 5;
    let mut early = late.clone();
    early.created_at_ms = T0 - 40 * DAY_MS;
    store.record_usage(late).await.unwrap();
    store.record_usage(early).await.unwrap();
    assert_rollup_equals_rows(&store, &mut rng).await;
}

#[tokio::test]
async fn cost_reports_from_the_rollup_equal_those_from_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("mia.sqlite3")).unwrap();
    let mut rng = Rng(77);
    for _ in 0..1500 {
        store.record_usage(random_row(&mut rng)).await.unwrap();
    }
    let pricing = PricingRegistry::builtin();
    let now = T0 + 13 * HOUR_MS + 17;
    for scope in [
        CostScope::Session,
        CostScope::Daily,
        CostScope::Weekly,
        CostScope::Days(30),
        CostScope::Days(90),
    ] {
        for tz in OFFSETS_S {
            for (provider, model) in [(None, None), (Some("openai"), None), (Some("openai"), Some("gpt"))] {
                let q = CostQuery {
                    scope,
                    session_id: Some("s3".into()),
                    model: model.map(Into::into),
                    provider: provider.map(Into::into),
                    utc_offset_s: tz,
                    system_tokens: Some(2000),
                };
                let rollup = store.cost_report(&q, pricing, now).await.unwrap();
                let rows = store.cost_report_from_rows(&q, pricing, now).await.unwrap();
                assert_eq!(rollup, rows, "{q:?}");
                assert!(rows.usage.totals.requests > 0, "{q:?}");
            }
        }
    }
}

#[tokio::test]
async fn deleting_a_session_keeps_its_usage_and_the_rollup_while_usage_rows_cannot_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mia.sqlite3");
    let store = Store::open(&path).unwrap();
    let mut rng = Rng(5);
    for _ in 0..300 {
        store.record_usage(random_row(&mut rng)).await.unwrap();
    }
    let all = ReportQuery::default();
    let before = store.usage_report(&all).await.unwrap();
    store.delete_session("s3").await.unwrap();
    assert_eq!(store.usage_report(&all).await.unwrap(), before);
    assert_rollup_equals_rows(&store, &mut rng).await;

    // The rollup could not follow a deleted or rewritten row: both are refused,
    // and the file is unchanged.
    let conn = rusqlite::Connection::open(&path).unwrap();
    for sql in [
        "DELETE FROM usage WHERE session_id = 's3'",
        "UPDATE usage SET total_usd = 0",
    ] {
        let err = conn.execute(sql, []).unwrap_err().to_string();
        assert!(err.contains("usage rows are never"), "{sql}: {err}");
    }
    assert_eq!(store.usage_report(&all).await.unwrap(), before);
}
