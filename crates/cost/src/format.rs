//! Money and token counts as the chat footer and the cost reports show them.

use super::usage::{Cost, CostSource, Usage};

/// Most decimals a dollar figure gets; smaller amounts round to this.
const MAX_DECIMALS: i32 = 10;

/// A dollar amount, readable at both ends of the scale.
///
/// Rule: from $1 up, two decimals (`$1.47`); below $1, three significant
/// digits with trailing zeros dropped but at least two decimals (`$0.031`,
/// `$0.0004`, `$0.50`), so a cheap call never shows as `$0.00`. Zero is
/// `$0.00`; a negative amount gets a leading `-`.
pub fn usd(amount: f64) -> String {
    if amount < 0.0 {
        return format!("-{}", usd(-amount));
    }
    if amount == 0.0 || amount >= 1.0 || !amount.is_finite() {
        return format!("${amount:.2}");
    }
    let decimals = (2 - amount.log10().floor() as i32).clamp(2, MAX_DECIMALS) as usize;
    let text = format!("{amount:.decimals$}");
    let (whole, fraction) = text.split_once('.').unwrap_or((text.as_str(), ""));
    let kept = fraction.trim_end_matches('0');
    format!("${whole}.{kept:0<2}")
}

/// A token count with thousands separators: `1,247`.
pub fn tokens(count: u64) -> String {
    let digits = count.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A token count in at most four characters plus a unit, for tight spaces:
/// `999`, `3.2K`, `48K`, `1.5M`, `2B` (one decimal, dropped when it is 0).
pub fn tokens_short(count: u64) -> String {
    const UNITS: [(f64, &str); 3] = [(1e3, "K"), (1e6, "M"), (1e9, "B")];
    if count < 1000 {
        return count.to_string();
    }
    let n = count as f64;
    for (i, (scale, unit)) in UNITS.iter().enumerate() {
        let rounded = (n / scale * 10.0).round() / 10.0;
        // 999,960 rounds to 1000.0K: show it in the next unit instead.
        if rounded < 1000.0 || i == UNITS.len() - 1 {
            let text = format!("{rounded:.1}");
            return format!("{}{unit}", text.strip_suffix(".0").unwrap_or(&text));
        }
    }
    count.to_string()
}

/// What follows a dollar amount to say who priced it: nothing for mia's
/// own price table, " (gateway)" for an LLM gateway's figure, " (partly
/// gateway)" for a sum of both.
pub fn source_mark(source: CostSource) -> &'static str {
    match source {
        CostSource::Local => "",
        CostSource::Gateway => " (gateway)",
        CostSource::Mixed => " (partly gateway)",
    }
}

/// The line under an answer in the chat:
/// `── claude-sonnet-4-5 · 1,247 in · 832 out · 3.2K cached · $0.031 ──`.
///
/// "in" is the uncached input, "cached" (shown only when there were cache
/// reads) the tokens read from the prompt cache. Counts the server did not
/// send are estimates and carry a `~`; a model without a price shows the
/// $0.00 reports count for it with a note that says so and how to add one
/// (a bare $0.00 would read as free); a cost an LLM gateway gave is marked ([`source_mark`]).
pub fn footer(model: &str, usage: &Usage, cost: &Cost) -> String {
    let approx = if usage.estimated { "~" } else { "" };
    let mut parts = vec![
        model.to_string(),
        format!("{approx}{} in", tokens(usage.input_tokens)),
        format!("{approx}{} out", tokens(usage.output_tokens)),
    ];
    if usage.cache_read_tokens > 0 {
        parts.push(format!("{approx}{} cached", tokens_short(usage.cache_read_tokens)));
    }
    parts.push(match cost.total_usd {
        Some(total) if cost.known => format!("{}{}", usd(total), source_mark(cost.source)),
        _ => format!("$0.00 (no price for {model}: add it to setup's `pricing`)"),
    });
    format!("── {} ──", parts.join(" · "))
}

/// The line under an answer whose token counts nobody reported (an
/// external agent that sends no usage): says so rather than showing zeros
/// that were never measured; a cost the agent reported still shows.
/// `── gemini · usage not reported ──`, `── claude · tokens not reported · $0.031 ──`.
pub fn footer_unreported(model: &str, cost: &Cost) -> String {
    match cost.total_usd {
        Some(total) if cost.known => format!(
            "── {model} · tokens not reported · {}{} ──",
            usd(total),
            source_mark(cost.source)
        ),
        _ => format!("── {model} · usage not reported ──"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_round_at_the_edges_of_the_rule() {
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(0.1), "$0.10");
        assert_eq!(usd(0.12345), "$0.123");
        assert_eq!(usd(0.9999), "$1.00");
        assert_eq!(usd(12.345), "$12.35");
        assert_eq!(usd(-0.42), "-$0.42");
        assert_eq!(usd(1e-15), "$0.00");
    }

    #[test]
    fn short_counts_roll_over_to_the_next_unit() {
        assert_eq!(tokens_short(999), "999");
        assert_eq!(tokens_short(1000), "1K");
        assert_eq!(tokens_short(48_000), "48K");
        assert_eq!(tokens_short(999_960), "1M");
        assert_eq!(tokens_short(2_000_000_000), "2B");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(tokens(0), "0");
        assert_eq!(tokens(999), "999");
        assert_eq!(tokens(1000), "1,000");
        assert_eq!(tokens(1_234_567), "1,234,567");
    }
}
