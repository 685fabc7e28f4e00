//! Costs as a user sees them: what a call cost with the built-in prices,
//! how a model finds its price, the footer, budget gates and warnings, and
//! savings advice. Every expected figure is worked out by hand in the test
//! from the provider's published price per million tokens.

use std::collections::HashMap;

use mia_cost::{
    cost, cost_of, crossed_warnings, footer, footer_unreported, gate, suggest, tokens, tokens_short, usd, BudgetConfig,
    Cost, Gate, ModelStats, Price, PricingRegistry, SessionStats, Spend, SuggestionKind, Usage, WarningKind,
};

fn builtin() -> &'static PricingRegistry {
    PricingRegistry::builtin()
}

#[track_caller]
fn assert_usd(actual: f64, expected: f64) {
    assert!((actual - expected).abs() < 1e-12, "expected ${expected}, got ${actual}");
}

#[track_caller]
fn assert_some_usd(actual: Option<f64>, expected: f64) {
    match actual {
        Some(v) => assert_usd(v, expected),
        None => panic!("expected ${expected}, got no figure"),
    }
}

fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
        ..Usage::default()
    }
}

fn price(input: f64, output: f64) -> Price {
    Price {
        input,
        output,
        cache_read: None,
        cache_write: None,
        tiers: Vec::new(),
        ..Price::default()
    }
}

// ---- what a call costs -------------------------------------------------

#[test]
fn a_million_sonnet_input_tokens_cost_three_dollars() {
    // claude-sonnet-4-5: $3 per million input tokens.
    let c = cost_of(builtin(), "anthropic", "claude-sonnet-4-5", &usage(1_000_000, 0, 0, 0));
    assert!(c.known);
    assert_some_usd(c.input_usd, 3.0);
    assert_some_usd(c.total_usd, 3.0);
}

#[test]
fn anthropic_cache_reads_and_writes_are_billed_on_top_of_input() {
    // claude-sonnet-4-5: input $3, output $15, cache read $0.30, cache write $3.75 per million.
    // Anthropic's input_tokens exclude the cache, so each class is billed once:
    //   2,000 × 3    / 1e6 = 0.006
    // 100,000 × 0.30 / 1e6 = 0.030
    //  10,000 × 3.75 / 1e6 = 0.0375
    //   1,000 × 15   / 1e6 = 0.015      total 0.0885
    let c = cost_of(
        builtin(),
        "anthropic",
        "claude-sonnet-4-5",
        &usage(2_000, 1_000, 100_000, 10_000),
    );
    assert!(c.known);
    assert_some_usd(c.input_usd, 0.006);
    assert_some_usd(c.cache_read_usd, 0.03);
    assert_some_usd(c.cache_write_usd, 0.0375);
    assert_some_usd(c.output_usd, 0.015);
    assert_some_usd(c.total_usd, 0.0885);
}

#[test]
fn openai_cached_prompt_tokens_are_billed_at_the_cached_price() {
    // gpt-4.1: input $2, cached input $0.50, output $8 per million.
    // The wire said prompt_tokens 10,000 of which cached_tokens 8,000; the
    // decoder hands over input 2,000 + cache read 8,000:
    //  2,000 × 2   / 1e6 = 0.004
    //  8,000 × 0.5 / 1e6 = 0.004
    //    500 × 8   / 1e6 = 0.004      total 0.012
    let c = cost_of(builtin(), "openai", "gpt-4.1", &usage(2_000, 500, 8_000, 0));
    assert_some_usd(c.input_usd, 0.004);
    assert_some_usd(c.cache_read_usd, 0.004);
    assert_some_usd(c.cache_write_usd, 0.0);
    assert_some_usd(c.output_usd, 0.004);
    assert_some_usd(c.total_usd, 0.012);
}

#[test]
fn gemini_2_5_pro_at_exactly_200k_prompt_tokens_uses_base_prices() {
    // gemini-2.5-pro up to 200k prompt tokens: input $1.25, cached $0.125, output $10.
    // Prompt 150,000 + 50,000 cached = 200,000: not above the tier.
    //  150,000 × 1.25  / 1e6 = 0.1875
    //   50,000 × 0.125 / 1e6 = 0.00625
    //    2,000 × 10    / 1e6 = 0.02     total 0.21375
    let c = cost_of(builtin(), "gemini", "gemini-2.5-pro", &usage(150_000, 2_000, 50_000, 0));
    assert_some_usd(c.input_usd, 0.1875);
    assert_some_usd(c.cache_read_usd, 0.00625);
    assert_some_usd(c.output_usd, 0.02);
    assert_some_usd(c.total_usd, 0.21375);
}

#[test]
fn gemini_2_5_pro_above_200k_prompt_tokens_uses_long_context_prices_for_everything() {
    // Above 200k prompt tokens: input $2.50, cached $0.25, output $15.
    // Prompt 150,001 + 50,000 cached = 200,001. Output 2,000 already
    // includes 1,500 thinking tokens (billed as output, not again):
    //  150,001 × 2.5  / 1e6 = 0.3750025
    //   50,000 × 0.25 / 1e6 = 0.0125
    //    2,000 × 15   / 1e6 = 0.03      total 0.4175025
    let thinking = Usage {
        reasoning_tokens: 1_500,
        ..usage(150_001, 2_000, 50_000, 0)
    };
    let c = cost_of(builtin(), "gemini", "gemini-2.5-pro", &thinking);
    assert_some_usd(c.input_usd, 0.3750025);
    assert_some_usd(c.cache_read_usd, 0.0125);
    assert_some_usd(c.output_usd, 0.03);
    assert_some_usd(c.total_usd, 0.4175025);
}

#[test]
fn a_model_without_a_price_has_an_unknown_cost_not_zero() {
    // gemma-4-31b-it is in the catalogue without a price.
    let c = cost_of(builtin(), "gemini", "gemma-4-31b-it", &usage(1_000, 1_000, 0, 0));
    assert_eq!(c, Cost::default());
    assert!(!c.known);
    assert_eq!(c.total_usd, None);
    let c = cost_of(builtin(), "openai", "gpt-17-ultra", &usage(1_000, 1_000, 0, 0));
    assert!(!c.known);
    assert_eq!(serde_json::to_value(&c).unwrap(), serde_json::json!({ "known": false }));
}

#[test]
fn cache_tokens_of_a_model_without_cache_prices_cost_nothing() {
    // gpt-4o-2024-05-13 lists no cached-input price: 1M cached tokens cost 0, not its $5 input price.
    let c = cost_of(builtin(), "openai", "gpt-4o-2024-05-13", &usage(0, 0, 1_000_000, 0));
    assert_some_usd(c.cache_read_usd, 0.0);
}

// ---- how a model finds its price ---------------------------------------

#[test]
fn a_user_override_beats_the_builtin_price() {
    let registry = PricingRegistry::with_overrides(HashMap::from([(
        "anthropic/claude-sonnet-4-5".to_string(),
        price(1.0, 2.0),
    )]))
    .unwrap();
    // 1M in × $1 + 1M out × $2 = $3 (the built-in price would give $18).
    let c = cost_of(
        &registry,
        "anthropic",
        "claude-sonnet-4-5",
        &usage(1_000_000, 1_000_000, 0, 0),
    );
    assert_some_usd(c.total_usd, 3.0);
    // Other models keep their built-in price.
    assert_eq!(registry.price("openai", "gpt-4.1").map(|p| p.input), Some(2.0));
}

#[test]
fn overrides_may_use_mias_provider_names_and_add_unknown_models() {
    let registry = PricingRegistry::with_overrides(HashMap::from([
        ("gemini/gemini-2.5-pro".to_string(), price(9.0, 9.0)),
        ("myproxy/house-model".to_string(), price(0.2, 0.4)),
    ]))
    .unwrap();
    assert_eq!(registry.price("gemini", "gemini-2.5-pro"), Some(&price(9.0, 9.0)));
    assert_eq!(registry.price("myproxy", "house-model"), Some(&price(0.2, 0.4)));
}

#[test]
fn gemini_is_the_catalogues_google() {
    let via_mia = builtin().price("gemini", "gemini-2.5-flash").unwrap();
    assert_eq!(Some(via_mia), builtin().price("google", "gemini-2.5-flash"));
    assert_eq!(via_mia.input, 0.3);
    assert_eq!(via_mia.output, 2.5);
}

#[test]
fn dated_and_undated_aliases_find_each_other_within_a_provider() {
    let reg = builtin();
    // Exact ids answer for themselves.
    let r = reg.resolve("anthropic", "claude-sonnet-4-5-20250929").unwrap();
    assert_eq!(r.model, "claude-sonnet-4-5-20250929");
    // A snapshot the catalogue does not list yet → its undated alias.
    let r = reg.resolve("anthropic", "claude-sonnet-4-5-20260101").unwrap();
    assert_eq!(
        (r.provider, r.model, r.price.input),
        ("anthropic", "claude-sonnet-4-5", 3.0)
    );
    let r = reg.resolve("openai", "gpt-4o-mini-2024-07-18").unwrap();
    assert_eq!((r.model, r.price.input), ("gpt-4o-mini", 0.15));
    // An undated id the catalogue only lists dated → the dated entry.
    let r = reg.resolve("anthropic", "claude-opus-4").unwrap();
    assert_eq!((r.model, r.price.input), ("claude-opus-4-20250514", 15.0));
    // `-latest` with two equally priced snapshots (3.5 Sonnet June and October).
    let r = reg.resolve("anthropic", "claude-3-5-sonnet-latest").unwrap();
    assert_eq!((r.price.input, r.price.output), (3.0, 15.0));
}

#[test]
fn a_builtin_provider_never_borrows_another_providers_price() {
    assert_eq!(builtin().price("openai", "claude-sonnet-4-5"), None);
    assert_eq!(builtin().price("anthropic", "gpt-4.1"), None);
    assert_eq!(builtin().price("gemini", "claude-sonnet-4-5"), None);
}

#[test]
fn an_openai_compatible_server_gets_the_price_of_the_only_provider_with_that_model() {
    let r = builtin().resolve("myproxy", "gpt-4.1-mini").unwrap();
    assert_eq!((r.provider, r.model, r.price.input), ("openai", "gpt-4.1-mini", 0.4));
    let r = builtin().resolve("myproxy", "llama-3.3-70b-versatile").unwrap();
    assert_eq!(r.provider, "groq");
    assert_eq!(builtin().price("myproxy", "my-finetune-7b"), None);
}

#[test]
fn an_openai_compatible_server_gets_no_price_when_two_providers_have_the_model() {
    let registry = PricingRegistry::with_overrides(HashMap::from([(
        "otherproxy/gpt-4.1-mini".to_string(),
        price(0.3, 1.0),
    )]))
    .unwrap();
    assert_eq!(registry.price("myproxy", "gpt-4.1-mini"), None);
    // Each named provider still has its own.
    assert_eq!(registry.price("otherproxy", "gpt-4.1-mini"), Some(&price(0.3, 1.0)));
    assert_eq!(registry.price("openai", "gpt-4.1-mini").map(|p| p.input), Some(0.4));
}

#[test]
fn the_largest_matching_tier_applies_to_a_user_priced_model() {
    let tiered: Price = serde_json::from_value(serde_json::json!({
        "input": 1.0, "output": 2.0,
        "tiers": [
            { "above_input_tokens": 100, "input": 10.0, "output": 20.0 },
            { "above_input_tokens": 1000, "input": 100.0, "output": 200.0 }
        ]
    }))
    .unwrap();
    // 2,000 prompt tokens > 1,000: the second tier. 2,000 × 100 / 1e6 + 10 × 200 / 1e6 = 0.202
    assert_usd(cost(&tiered, &usage(2_000, 10, 0, 0)).total_usd, 0.202);
    // 500 prompt tokens: only the first. 500 × 10 / 1e6 + 10 × 20 / 1e6 = 0.0052
    assert_usd(cost(&tiered, &usage(500, 10, 0, 0)).total_usd, 0.0052);
}

// ---- formatting ---------------------------------------------------------

#[test]
fn dollars_have_two_decimals_from_one_dollar_and_three_significant_digits_below() {
    assert_eq!(usd(0.031), "$0.031");
    assert_eq!(usd(1.4712), "$1.47");
    assert_eq!(usd(0.0004), "$0.0004");
    assert_eq!(usd(10.0), "$10.00");
    assert_eq!(usd(0.5), "$0.50");
    assert_eq!(usd(0.000_123_4), "$0.000123");
}

#[test]
fn token_counts_read_at_a_glance() {
    assert_eq!(tokens(1247), "1,247");
    assert_eq!(tokens_short(3200), "3.2K");
    assert_eq!(tokens_short(1_500_000), "1.5M");
    assert_eq!(tokens_short(640), "640");
}

fn known(total: f64) -> Cost {
    Cost {
        known: true,
        total_usd: Some(total),
        ..Cost::default()
    }
}

#[test]
fn footer_shows_model_tokens_cache_and_cost() {
    let u = usage(1247, 832, 3200, 0);
    assert_eq!(
        footer("claude-sonnet-4-5", &u, &known(0.031)),
        "── claude-sonnet-4-5 · 1,247 in · 832 out · 3.2K cached · $0.031 ──"
    );
}

#[test]
fn footer_leaves_out_cache_when_nothing_was_read_from_it() {
    let u = usage(1247, 832, 0, 5000);
    assert_eq!(
        footer("gpt-4.1", &u, &known(1.4712)),
        "── gpt-4.1 · 1,247 in · 832 out · $1.47 ──"
    );
}

#[test]
fn footer_says_a_model_has_no_price_and_marks_estimated_counts() {
    let u = Usage {
        estimated: true,
        ..usage(1247, 832, 0, 0)
    };
    assert_eq!(
        footer("myproxy/house", &u, &Cost::default()),
        "── myproxy/house · ~1,247 in · ~832 out · $0.00 (no price for myproxy/house: add it to setup's `pricing`) ──"
    );
}

#[test]
fn footer_of_unreported_usage_says_so_and_keeps_a_reported_cost() {
    assert_eq!(
        footer_unreported("gemini", &Cost::default()),
        "── gemini · usage not reported ──"
    );
    assert_eq!(
        footer_unreported("claude", &known(0.031)),
        "── claude · tokens not reported · $0.031 ──"
    );
}

// ---- budget -------------------------------------------------------------

fn limits(hard: bool) -> BudgetConfig {
    BudgetConfig {
        session_limit_usd: Some(10.0),
        daily_limit_usd: Some(50.0),
        hard_limit: hard,
        ..BudgetConfig::default()
    }
}

fn spend(session: f64, day: f64) -> Spend {
    Spend {
        session_usd: session,
        day_usd: day,
    }
}

#[test]
fn below_every_limit_the_request_proceeds() {
    assert_eq!(gate(&limits(false), spend(9.99, 49.99)), Gate::Proceed);
}

#[test]
fn a_soft_session_limit_asks_before_sending() {
    assert_eq!(
        gate(&limits(false), spend(10.0, 12.0)),
        Gate::Confirm {
            reason: "Session cost limit reached ($10.00).".to_string()
        }
    );
}

#[test]
fn a_soft_daily_limit_asks_before_sending() {
    assert_eq!(
        gate(&limits(false), spend(2.0, 50.5)),
        Gate::Confirm {
            reason: "Daily cost limit reached ($50.00).".to_string()
        }
    );
}

#[test]
fn the_session_limit_is_checked_before_the_daily_one() {
    let Gate::Confirm { reason: message } = gate(&limits(false), spend(11.0, 60.0)) else {
        panic!("expected a confirmation");
    };
    assert!(message.starts_with("Session cost limit reached"), "{message}");
    let Gate::Refuse { message } = gate(&limits(true), spend(11.0, 60.0)) else {
        panic!("expected a refusal");
    };
    assert!(message.contains("costs.session_limit_usd"), "{message}");
}

#[test]
fn a_hard_limit_refuses_and_says_how_to_raise_it() {
    let Gate::Refuse { message } = gate(&limits(true), spend(10.5, 0.0)) else {
        panic!("expected a refusal");
    };
    assert!(message.contains("$10.00 session limit"), "{message}");
    assert!(message.contains("`costs.session_limit_usd` in setup()"), "{message}");
    let Gate::Refuse { message } = gate(&limits(true), spend(0.0, 50.0)) else {
        panic!("expected a refusal");
    };
    assert!(message.contains("$50.00 daily limit"), "{message}");
    assert!(message.contains("`costs.daily_limit_usd` in setup()"), "{message}");
}

fn warnings_at(session: f64, daily: f64) -> BudgetConfig {
    BudgetConfig {
        session_warning_usd: Some(session),
        daily_warning_usd: Some(daily),
        session_limit_usd: None,
        daily_limit_usd: None,
        ..BudgetConfig::default()
    }
}

#[test]
fn a_warning_names_the_limit_it_approaches() {
    let w = crossed_warnings(&BudgetConfig::default(), spend(2.9, 19.9), spend(3.12, 20.12));
    assert_eq!(
        w[0].message,
        "mia: this session has cost $3.12 — approaching your $10.00 session limit"
    );
    assert_eq!(
        w[1].message,
        "mia: today's requests have cost $20.12 — approaching your $50.00 daily limit"
    );
}

#[test]
fn a_warning_fires_on_the_request_that_crosses_it() {
    let w = crossed_warnings(&warnings_at(3.0, 100.0), spend(2.9, 20.0), spend(3.02, 20.12));
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].kind, WarningKind::Session);
    assert_eq!(
        w[0].message,
        "mia: this session has cost $3.02, past your $3.00 warning"
    );
}

#[test]
fn landing_exactly_on_a_warning_counts_as_crossing_it() {
    let w = crossed_warnings(&warnings_at(3.0, 100.0), spend(2.5, 0.0), spend(3.0, 0.0));
    assert_eq!(w.len(), 1);
}

#[test]
fn a_warning_already_passed_does_not_fire_again() {
    assert!(crossed_warnings(&warnings_at(3.0, 10.0), spend(3.02, 11.0), spend(3.5, 11.5)).is_empty());
    assert!(crossed_warnings(&warnings_at(3.0, 10.0), spend(3.0, 10.0), spend(3.5, 11.5)).is_empty());
    assert!(crossed_warnings(&warnings_at(3.0, 10.0), spend(1.0, 2.0), spend(2.0, 3.0)).is_empty());
}

#[test]
fn session_and_daily_warnings_crossed_together_both_fire_session_first() {
    let w = crossed_warnings(&warnings_at(3.0, 10.0), spend(2.9, 9.9), spend(3.1, 10.1));
    let kinds: Vec<_> = w.iter().map(|w| w.kind).collect();
    assert_eq!(kinds, vec![WarningKind::Session, WarningKind::Daily]);
    assert_eq!(
        w[1].message,
        "mia: today's requests have cost $10.10, past your $10.00 daily warning"
    );
}

// ---- suggestions --------------------------------------------------------

fn stats(models: Vec<ModelStats>) -> SessionStats {
    SessionStats { per_model: models }
}

#[test]
fn short_sonnet_turns_suggest_haiku_with_the_saving() {
    // 10 requests, 20,000 in, 2,000 out (avg 200).
    // Sonnet 4.5 ($3/$15): 20,000 × 3 / 1e6 + 2,000 × 15 / 1e6 = 0.06 + 0.03 = 0.09
    // Haiku 4.5  ($1/$5):  20,000 × 1 / 1e6 + 2,000 × 5  / 1e6 = 0.02 + 0.01 = 0.03
    // Saving 0.06.
    let s = suggest(
        builtin(),
        &stats(vec![ModelStats {
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5".into(),
            requests: 10,
            input_tokens: 20_000,
            output_tokens: 2_000,
            cost_usd: 0.09,
            max_output_tokens_seen: 300,
            avg_output_tokens: 200.0,
            ..ModelStats::default()
        }]),
    );
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0].kind, SuggestionKind::CheaperModel);
    assert_usd(s[0].savings_usd, 0.06);
    assert_eq!(s[0].current_model, "anthropic/claude-sonnet-4-5");
    assert_eq!(s[0].suggested_model.as_deref(), Some("anthropic/claude-haiku-4-5"));
    assert!(
        (s[0].savings_percent - 200.0 / 3.0).abs() < 1e-6,
        "{}",
        s[0].savings_percent
    );
    assert_eq!(
        s[0].text,
        "anthropic/claude-sonnet-4-5: answers averaged 200 output tokens; anthropic/claude-haiku-4-5 would have \
         cost $0.03 instead of $0.09, saving ≈ $0.06 this session."
    );
}

#[test]
fn short_gpt_4_1_turns_suggest_the_cheapest_4_1_sibling() {
    // gpt-4.1 ($2/$8): 100,000 × 2 / 1e6 + 5,000 × 8 / 1e6 = 0.2 + 0.04 = 0.24
    // gpt-4.1-mini ($0.40/$1.60) would cost 0.048; gpt-4.1-nano ($0.10/$0.40):
    // 100,000 × 0.1 / 1e6 + 5,000 × 0.4 / 1e6 = 0.01 + 0.002 = 0.012 → saving 0.228.
    let s = suggest(
        builtin(),
        &stats(vec![ModelStats {
            provider: "openai".into(),
            model: "gpt-4.1".into(),
            requests: 20,
            input_tokens: 100_000,
            output_tokens: 5_000,
            cost_usd: 0.24,
            max_output_tokens_seen: 400,
            avg_output_tokens: 250.0,
            ..ModelStats::default()
        }]),
    );
    assert_eq!(s.len(), 1, "{s:?}");
    assert!(s[0].text.contains("openai/gpt-4.1-nano"), "{}", s[0].text);
    assert!(s[0].text.ends_with("saving ≈ $0.228 this session."), "{}", s[0].text);
    assert_usd(s[0].savings_usd, 0.228);
}

#[test]
fn long_turns_or_a_tiny_saving_suggest_no_cheaper_model() {
    let sonnet = |output: u64, avg: f64, cost: f64, input: u64| ModelStats {
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        requests: 1,
        input_tokens: input,
        output_tokens: output,
        cost_usd: cost,
        max_output_tokens_seen: output,
        avg_output_tokens: avg,
        ..ModelStats::default()
    };
    // Average 450 output tokens: not short.
    assert!(suggest(builtin(), &stats(vec![sonnet(450, 450.0, 0.00975, 1_000)])).is_empty());
    // 100 in, 50 out: Sonnet 0.0003 + 0.00075 = 0.00105, Haiku 0.0001 + 0.00025 = 0.00035;
    // saving 0.0007 is not above $0.001.
    assert!(suggest(builtin(), &stats(vec![sonnet(50, 50.0, 0.00105, 100)])).is_empty());
}

#[test]
fn a_repeated_large_system_prompt_without_cache_reads_suggests_caching() {
    // Sonnet 4.5: input $3, cache read $0.30, cache write $3.75.
    // 10 requests with a 5,000-token system prompt:
    //   reads saved   9 × 5,000 × (3 − 0.30) / 1e6 = 0.1215
    //   write premium     5,000 × (3.75 − 3) / 1e6 = 0.00375
    //   saving                                        0.11775
    let s = suggest(
        builtin(),
        &stats(vec![ModelStats {
            provider: "anthropic".into(),
            model: "claude-sonnet-4-5".into(),
            requests: 10,
            input_tokens: 60_000,
            output_tokens: 8_000,
            cost_usd: 0.30,
            max_output_tokens_seen: 1_000,
            avg_output_tokens: 800.0,
            system_prompt_tokens_per_request: Some(5_000),
            ..ModelStats::default()
        }]),
    );
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0].kind, SuggestionKind::PromptCaching);
    assert_usd(s[0].savings_usd, 0.11775);
    assert!(s[0].text.contains("`prompt_caching = true`"), "{}", s[0].text);
    assert!(s[0].text.ends_with("saving ≈ $0.118 this session."), "{}", s[0].text);
}

#[test]
fn caching_on_openai_has_no_write_premium() {
    // gpt-4.1: input $2, cached $0.50, no cache-write charge.
    // 4 × 2,000 × (2 − 0.5) / 1e6 = 0.012
    let s = suggest(
        builtin(),
        &stats(vec![ModelStats {
            provider: "openai".into(),
            model: "gpt-4.1".into(),
            requests: 5,
            input_tokens: 15_000,
            output_tokens: 5_000,
            cost_usd: 0.07,
            max_output_tokens_seen: 1_200,
            avg_output_tokens: 1_000.0,
            system_prompt_tokens_per_request: Some(2_000),
            ..ModelStats::default()
        }]),
    );
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0].kind, SuggestionKind::PromptCaching);
    assert_usd(s[0].savings_usd, 0.012);
}

#[test]
fn caching_is_not_suggested_when_the_cache_is_already_read_or_the_prompt_is_small() {
    let base = ModelStats {
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        requests: 10,
        input_tokens: 60_000,
        output_tokens: 8_000,
        cost_usd: 0.30,
        max_output_tokens_seen: 1_000,
        avg_output_tokens: 800.0,
        system_prompt_tokens_per_request: Some(5_000),
        ..ModelStats::default()
    };
    let cached = ModelStats {
        cache_read_tokens: 45_000,
        ..base.clone()
    };
    let small = ModelStats {
        system_prompt_tokens_per_request: Some(1_000),
        ..base.clone()
    };
    let few = ModelStats {
        requests: 2,
        ..base.clone()
    };
    for m in [cached, small, few] {
        assert!(suggest(builtin(), &stats(vec![m.clone()])).is_empty(), "{m:?}");
    }
}

#[test]
fn a_runaway_answer_suggests_a_max_tokens_cap_with_no_claimed_saving() {
    // Longest 4,000 > 4 × average 500. Worst case at gpt-4.1's $8 output: 4,000 × 8 / 1e6 = $0.032.
    let s = suggest(
        builtin(),
        &stats(vec![ModelStats {
            provider: "openai".into(),
            model: "gpt-4.1".into(),
            requests: 10,
            input_tokens: 50_000,
            output_tokens: 5_000,
            cost_usd: 0.14,
            max_output_tokens_seen: 4_000,
            avg_output_tokens: 500.0,
            ..ModelStats::default()
        }]),
    );
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0].kind, SuggestionKind::CapMaxTokens);
    assert_eq!(s[0].savings_usd, 0.0);
    assert_eq!(
        s[0].text,
        "openai/gpt-4.1: the longest answer (4,000 tokens, $0.032) was over 4× the average (500); a lower \
         max_tokens bounds such worst cases (saving ≈ $0.00 this session)."
    );
}

#[test]
fn an_answer_at_four_times_the_average_is_not_an_outlier() {
    let s = suggest(
        builtin(),
        &stats(vec![ModelStats {
            provider: "openai".into(),
            model: "gpt-4.1".into(),
            requests: 10,
            input_tokens: 50_000,
            output_tokens: 5_000,
            cost_usd: 0.14,
            max_output_tokens_seen: 2_000,
            avg_output_tokens: 500.0,
            ..ModelStats::default()
        }]),
    );
    assert!(s.is_empty(), "{s:?}");
}

#[test]
fn suggestions_come_largest_saving_first() {
    let short_sonnet = ModelStats {
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        requests: 10,
        input_tokens: 20_000,
        output_tokens: 2_000,
        cost_usd: 0.09,
        max_output_tokens_seen: 300,
        avg_output_tokens: 200.0,
        ..ModelStats::default()
    };
    let short_gpt = ModelStats {
        provider: "openai".into(),
        model: "gpt-4.1".into(),
        requests: 20,
        input_tokens: 100_000,
        output_tokens: 5_000,
        cost_usd: 0.24,
        max_output_tokens_seen: 400,
        avg_output_tokens: 250.0,
        ..ModelStats::default()
    };
    let s = suggest(builtin(), &stats(vec![short_sonnet, short_gpt]));
    let savings: Vec<f64> = s.iter().map(|s| (s.savings_usd * 1000.0).round() / 1000.0).collect();
    assert_eq!(savings, vec![0.228, 0.06]);
}
