//! The cost an LLM gateway reports for a call (the LiteLLM proxy and
//! compatible ones), which mia records instead of its own price math:
//!
//! - the `x-litellm-response-cost` response header, a decimal number of USD;
//! - `usage.cost` in the response body or in the last streamed chunk
//!   (OpenAI-compatible streams), a JSON number (a numeric string is taken too).
//!
//! Both come from outside: anything but a finite, non-negative number below
//! [`MAX_USD`] is ignored (local price math applies) and logged once per
//! process, never an error.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use super::usage::{Cost, CostSource};

/// The response header a LiteLLM proxy puts its cost of the call in.
pub const HEADER: &str = "x-litellm-response-cost";

/// The most one call may cost by a gateway's word; a larger figure is taken
/// for garbage rather than recorded as money spent.
pub const MAX_USD: f64 = 1000.0;

/// Longest header or string value looked at (a real one is ~20 characters).
const MAX_TEXT: usize = 64;

static WARNED: AtomicBool = AtomicBool::new(false);

/// A gateway figure, or `None` (logged once) when it is not a sane cost.
fn checked(value: f64, what: &str, shown: &dyn std::fmt::Display) -> Option<f64> {
    if value.is_finite() && (0.0..MAX_USD).contains(&value) {
        return Some(value);
    }
    ignored(what, shown);
    None
}

fn ignored(what: &str, shown: &dyn std::fmt::Display) {
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "gateway cost ignored: {what} = {shown} is not a number of USD in [0, {MAX_USD}); \
             mia's own price table prices the call (logged once)"
        );
    }
}

fn parse_text(text: &str, what: &str) -> Option<f64> {
    let t = text.trim();
    if t.is_empty() || t.len() > MAX_TEXT {
        ignored(what, &format!("{} bytes of text", text.len()));
        return None;
    }
    match t.parse::<f64>() {
        Ok(v) => checked(v, what, &t.escape_debug()),
        Err(_) => {
            ignored(what, &t.escape_debug());
            None
        }
    }
}

/// The cost in a response header's raw bytes.
pub fn from_header(raw: &[u8]) -> Option<f64> {
    match std::str::from_utf8(raw) {
        Ok(text) => parse_text(text, HEADER),
        Err(_) => {
            ignored(HEADER, &"bytes that are not UTF-8");
            None
        }
    }
}

/// The cost in a `usage` object's `cost` field; `None` when there is none
/// (`null` counts as none: some gateways send it before they know).
pub fn from_usage(usage: &Value) -> Option<f64> {
    match usage.get("cost")? {
        Value::Null => None,
        Value::Number(n) => match n.as_f64() {
            Some(v) => checked(v, "usage.cost", &v),
            None => {
                ignored("usage.cost", &n);
                None
            }
        },
        Value::String(s) => parse_text(s, "usage.cost"),
        _ => {
            ignored("usage.cost", &"a value that is not a number");
            None
        }
    }
}

/// The call's cost as the gateway gave it: the total only (a gateway does
/// not split it into input, output and cache parts).
pub fn cost(total_usd: f64) -> Cost {
    Cost {
        known: true,
        total_usd: Some(total_usd),
        source: CostSource::Gateway,
        ..Cost::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn header_values_are_read_as_usd() {
        assert_eq!(from_header(b"0.000415"), Some(0.000415));
        assert_eq!(from_header(b" 1.5 "), Some(1.5));
        assert_eq!(from_header(b"0"), Some(0.0));
        assert_eq!(from_header(b"2.5e-05"), Some(2.5e-5));
    }

    #[test]
    fn hostile_header_values_are_ignored() {
        for raw in [
            &b""[..],
            b"NaN",
            b"nan",
            b"inf",
            b"-inf",
            b"Infinity",
            b"-0.01",
            b"1000",
            b"1e300",
            b"abc",
            b"0x10",
            b"1,5",
            b"\xff\xfe",
            b"$0.01",
        ] {
            assert_eq!(from_header(raw), None, "{:?}", String::from_utf8_lossy(raw));
        }
        assert_eq!(from_header("1".repeat(10_000).as_bytes()), None);
    }

    #[test]
    fn usage_cost_is_read_from_numbers_and_numeric_strings() {
        assert_eq!(from_usage(&json!({"prompt_tokens": 3, "cost": 0.0123})), Some(0.0123));
        assert_eq!(from_usage(&json!({"cost": 0})), Some(0.0));
        assert_eq!(from_usage(&json!({"cost": "0.5"})), Some(0.5));
        assert_eq!(from_usage(&json!({"prompt_tokens": 3})), None);
        assert_eq!(from_usage(&json!({"cost": null})), None);
    }

    #[test]
    fn hostile_usage_costs_are_ignored() {
        for v in [
            json!(-1),
            json!(-0.0001),
            json!(1000.0),
            json!(1e308),
            json!(u64::MAX),
            json!("NaN"),
            json!("inf"),
            json!("-3"),
            json!(true),
            json!([0.1]),
            json!({"usd": 0.1}),
            json!("x".repeat(100_000)),
        ] {
            assert_eq!(from_usage(&json!({ "cost": v.clone() })), None, "{v}");
        }
    }

    #[test]
    fn a_gateway_cost_is_a_known_total_marked_gateway() {
        let c = cost(0.25);
        assert!(c.known);
        assert_eq!(c.total_usd, Some(0.25));
        assert_eq!(c.input_usd, None);
        assert_eq!(serde_json::to_value(&c).unwrap()["source"], "gateway");
        assert!(serde_json::to_value(Cost::default()).unwrap().get("source").is_none());
    }
}
