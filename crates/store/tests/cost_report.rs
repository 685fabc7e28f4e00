//! The whole `mia.costs` report as the store builds it: which calls a scope
//! covers in the user's local time, the 30-day chart, and the suggestions a
//! session report carries.

use mia_cost::{PricingRegistry, SuggestionKind};
use mia_store::{CostQuery, CostScope, Store, UsageRow, CHART_DAYS};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// 2024-03-10T12:00:00Z, "now" for every report here.
const NOW: i64 = 1_710_072_000_000;

fn usage(session: &str, model: &str, usd: f64, at: i64) -> UsageRow {
    UsageRow {
        session_id: Some(session.into()),
        message_id: Some(format!("{session}-{at}")),
        agent: "main".into(),
        provider: "anthropic".into(),
        model: model.into(),
        input_tokens: 3000,
        output_tokens: 120,
        cost_known: true,
        input_usd: usd / 2.0,
        output_usd: usd / 2.0,
        total_usd: usd,
        created_at_ms: at,
        retries: 0,
        ..UsageRow::default()
    }
}

fn query(scope: CostScope) -> CostQuery {
    CostQuery {
        scope,
        session_id: None,
        model: None,
        provider: None,
        utc_offset_s: 0,
        system_tokens: None,
    }
}

/// Calls now, at 01:00 UTC six days ago, 8 days ago (all session s1) and
/// 40 days ago (s2).
async fn seeded(dir: &tempfile::TempDir) -> Store {
    let store = Store::open(&dir.path().join("mia.sqlite3")).unwrap();
    for row in [
        usage("s1", "claude-sonnet-4-5", 1.0, NOW),
        usage("s1", "claude-sonnet-4-5", 2.0, NOW - 6 * DAY_MS - 11 * HOUR_MS),
        usage("s1", "claude-sonnet-4-5", 4.0, NOW - 8 * DAY_MS),
        usage("s2", "claude-sonnet-4-5", 8.0, NOW - 40 * DAY_MS),
    ] {
        store.record_usage(row).await.unwrap();
    }
    store
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[tokio::test]
async fn daily_weekly_and_days_scopes_cover_the_local_days_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = seeded(&dir).await;
    let pricing = PricingRegistry::builtin();
    let total = |r: &mia_store::CostReport| r.usage.totals.cost_usd;

    let daily = store.cost_report(&query(CostScope::Daily), pricing, NOW).await.unwrap();
    assert!(close(total(&daily), 1.0), "{}", total(&daily));
    let weekly = store
        .cost_report(&query(CostScope::Weekly), pricing, NOW)
        .await
        .unwrap();
    assert!(close(total(&weekly), 3.0), "{}", total(&weekly));
    let nine = store
        .cost_report(&query(CostScope::Days(9)), pricing, NOW)
        .await
        .unwrap();
    assert!(close(total(&nine), 7.0), "{}", total(&nine));
    let zero = store
        .cost_report(&query(CostScope::Days(0)), pricing, NOW)
        .await
        .unwrap();
    assert!(close(total(&zero), 1.0), "a report of 0 days still covers today");

    // At UTC-2 the week starts at 02:00 UTC six days ago: the 01:00 UTC call falls out of it.
    let west = CostQuery {
        utc_offset_s: -2 * 3600,
        ..query(CostScope::Weekly)
    };
    let r = store.cost_report(&west, pricing, NOW).await.unwrap();
    assert!(close(total(&r), 1.0), "{}", total(&r));

    assert_eq!(weekly.scope, "weekly");
    assert_eq!(weekly.daily.len(), CHART_DAYS as usize);
    assert_eq!(weekly.daily.last().unwrap().day, "2024-03-10");
    assert!(weekly.suggestions.is_empty(), "only a session report suggests");
}

#[tokio::test]
async fn a_session_report_covers_that_session_forever_and_suggests_savings() {
    let dir = tempfile::tempdir().unwrap();
    let store = seeded(&dir).await;
    let q = CostQuery {
        session_id: Some("s1".into()),
        system_tokens: Some(2000),
        ..query(CostScope::Session)
    };
    let r = store.cost_report(&q, PricingRegistry::builtin(), NOW).await.unwrap();
    assert_eq!(r.scope, "session");
    assert_eq!(r.usage.totals.requests, 3);
    assert!(close(r.usage.totals.cost_usd, 7.0));
    let kinds: Vec<SuggestionKind> = r.suggestions.iter().map(|s| s.kind).collect();
    assert!(kinds.contains(&SuggestionKind::PromptCaching), "{:?}", r.suggestions);

    let value = serde_json::to_value(&r).unwrap();
    for key in ["totals", "by_model", "scope", "daily", "suggestions"] {
        assert!(value.get(key).is_some(), "`{key}` missing from {value}");
    }
}
