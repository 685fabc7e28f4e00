//! Checking one tool call's arguments against the tool's JSON Schema, the
//! old way (the schema compiled for every call) against the schema compiled
//! once when the tool is registered (numbers for notes, not a test): median
//! µs per call over many rounds, for the built-in `edit_file` and
//! `read_file` with typical arguments, alone and through the registry
//! lookup the agent's tool round makes.
//!
//! Run: `cargo bench --bench tool_schema`.

use std::hint::black_box;
use std::time::Instant;

use mia_engine::tools::registry::Registry;
use mia_engine::tools::schema;
use serde_json::{json, Value};

const ROUNDS: usize = 301;
const CALLS_PER_ROUND: usize = 100;

/// Median µs per call of `f` over [`ROUNDS`] rounds of [`CALLS_PER_ROUND`] calls.
fn median_us(mut f: impl FnMut()) -> f64 {
    for _ in 0..CALLS_PER_ROUND {
        f();
    }
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..CALLS_PER_ROUND {
                f();
            }
            start.elapsed().as_secs_f64() * 1e6 / CALLS_PER_ROUND as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

fn main() {
    let registry = Registry::with_builtins();
    let cases: [(&str, Value); 2] = [
        (
            "edit_file",
            json!({
                "path": "src/tools/schema.rs",
                "old_string": "let validator = match jsonschema::validator_for(schema) {\n        Ok(v) => v,",
                "new_string": "let validator = match &compiled.0 {\n        Ok(v) => v,",
            }),
        ),
        (
            "read_file",
            json!({ "path": "src/lib.rs", "offset": 120, "limit": 200 }),
        ),
    ];
    println!(
        "{:<10} {:<28} {:>16} {:>14} {:>8}",
        "tool", "what is timed", "compile per call", "precompiled", "ratio"
    );
    for (name, args) in &cases {
        let tool = registry.get(name).expect("a built-in tool");
        let params = tool.parameters();
        let (_, compiled) = registry.get_checked(name).expect("a built-in tool");
        assert_eq!(
            schema::validate(name, &params, args),
            Ok(()),
            "{name}'s arguments must be valid"
        );
        assert_eq!(schema::check(name, &compiled, args), Ok(()));

        let old = median_us(|| {
            black_box(schema::validate(name, &params, black_box(args))).ok();
        });
        let new = median_us(|| {
            black_box(schema::check(name, &compiled, black_box(args))).ok();
        });
        println!(
            "{name:<10} {:<28} {old:>13.2} µs {new:>11.2} µs {:>7.0}x",
            "validate only",
            old / new
        );

        // What the tool round does per call: find the tool, then check.
        let old = median_us(|| {
            let tool = registry.get(black_box(name)).expect("tool");
            black_box(schema::validate(name, &tool.parameters(), black_box(args))).ok();
        });
        let new = median_us(|| {
            let (_, compiled) = registry.get_checked(black_box(name)).expect("tool");
            black_box(schema::check(name, &compiled, black_box(args))).ok();
        });
        println!(
            "{name:<10} {:<28} {old:>13.2} µs {new:>11.2} µs {:>7.0}x",
            "registry lookup + validate",
            old / new
        );
    }
    println!("\nmedian of {ROUNDS} rounds of {CALLS_PER_ROUND} calls each, release build");
}
