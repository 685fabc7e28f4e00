//! What a provider call cost: token counts times prices.
//!
//! The counts are mia's normalized [`Usage`], so every provider is priced the
//! same way here; the provider differences are settled by the decoders in
//! `llm/`:
//!
//! - **Anthropic** reports `input_tokens` without the cache:
//!   `cache_read_input_tokens` and `cache_creation_input_tokens` come on top
//!   and are billed at their own prices (reads ≈ 0.1×, writes ≈ 1.25× input).
//! - **OpenAI** (and OpenAI-compatible servers such as DeepSeek, Groq, xAI,
//!   Mistral) count cached tokens *inside* `prompt_tokens`; the decoder moves
//!   them to `cache_read_tokens`, so `input_tokens` is the uncached rest.
//!   Cache writes are not billed separately. Reasoning tokens are part of
//!   `completion_tokens`, i.e. of `output_tokens`.
//! - **Gemini** likewise counts `cachedContentTokenCount` inside
//!   `promptTokenCount` (the decoder splits it out), and bills thinking
//!   (`thoughtsTokenCount`) as output; the decoder has already added the
//!   thoughts to `output_tokens`.
//!
//! So `reasoning_tokens` is never priced on its own: it is already in
//! `output_tokens`, and adding it again would bill thinking twice.

use serde::Serialize;

use super::pricing::{Price, PricingRegistry};
use super::usage::{Cost, Usage};

const PER_MILLION: f64 = 1_000_000.0;

/// One call's cost in USD, by token class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CostBreakdown {
    pub input_usd: f64,
    pub output_usd: f64,
    pub cache_read_usd: f64,
    pub cache_write_usd: f64,
    pub total_usd: f64,
}

/// The USD-per-million prices that apply to one request, after choosing a
/// long-context tier and filling in missing cache prices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// The prompt size that decides the tier: every token the model read,
/// cached or not (providers tier on the full context).
pub fn prompt_tokens(usage: &Usage) -> u64 {
    usage
        .input_tokens
        .saturating_add(usage.cache_read_tokens)
        .saturating_add(usage.cache_write_tokens)
}

/// The rates for a request whose prompt has `prompt_tokens` tokens.
///
/// A tier applies when the prompt is strictly above its `above_input_tokens`
/// (Google: "prompts > 200k tokens"), and then to the whole request, output
/// included; with several tiers the largest matching threshold wins. A model
/// (or tier) without a cache read or cache write price bills those tokens at
/// 0, as the cost contract sets: a provider that lists no cache price does
/// not bill cache reads or writes apart.
pub fn rates(price: &Price, prompt_tokens: u64) -> Rates {
    let tier = price
        .tiers
        .iter()
        .filter(|t| prompt_tokens > t.above_input_tokens)
        .max_by_key(|t| t.above_input_tokens);
    let (input, output, cache_read, cache_write) = match tier {
        Some(t) => (t.input, t.output, t.cache_read, t.cache_write),
        None => (price.input, price.output, price.cache_read, price.cache_write),
    };
    Rates {
        input,
        output,
        cache_read: cache_read.unwrap_or(0.0),
        cache_write: cache_write.unwrap_or(0.0),
    }
}

/// The cost of `usage` at fixed `rates` (no tier choice).
pub fn cost_at(rates: Rates, usage: &Usage) -> CostBreakdown {
    let usd = |tokens: u64, per_million: f64| tokens as f64 * per_million / PER_MILLION;
    let input_usd = usd(usage.input_tokens, rates.input);
    let output_usd = usd(usage.output_tokens, rates.output);
    let cache_read_usd = usd(usage.cache_read_tokens, rates.cache_read);
    let cache_write_usd = usd(usage.cache_write_tokens, rates.cache_write);
    CostBreakdown {
        input_usd,
        output_usd,
        cache_read_usd,
        cache_write_usd,
        total_usd: input_usd + output_usd + cache_read_usd + cache_write_usd,
    }
}

/// The cost of one provider call: each token class times its price, with the
/// tier chosen by this call's prompt size (see [`rates`]).
pub fn cost(price: &Price, usage: &Usage) -> CostBreakdown {
    cost_at(rates(price, prompt_tokens(usage)), usage)
}

/// The cost of one call of `model` on `provider`, as the chat and the store
/// receive it. Without a price the cost is unknown (`known: false`, no
/// figures), never $0.00, so totals can say how many calls they miss.
pub fn cost_of(registry: &PricingRegistry, provider: &str, model: &str, usage: &Usage) -> Cost {
    let Some(price) = registry.price(provider, model) else {
        return Cost::default();
    };
    let c = cost(price, usage);
    Cost {
        known: true,
        total_usd: Some(c.total_usd),
        input_usd: Some(c.input_usd),
        output_usd: Some(c.output_usd),
        cache_read_usd: Some(c.cache_read_usd),
        cache_write_usd: Some(c.cache_write_usd),
        source: super::CostSource::Local,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pricing::Tier;

    fn two_tiers() -> Price {
        let tier = |above: u64, input: f64| Tier {
            above_input_tokens: above,
            input,
            output: input * 10.0,
            cache_read: None,
            cache_write: None,
        };
        Price {
            input: 1.0,
            output: 10.0,
            cache_read: Some(0.1),
            cache_write: None,
            tiers: vec![tier(500_000, 4.0), tier(100_000, 2.0)],
            ..Price::default()
        }
    }

    #[test]
    fn largest_matching_tier_wins_whatever_the_order() {
        assert_eq!(rates(&two_tiers(), 100_000).input, 1.0);
        assert_eq!(rates(&two_tiers(), 100_001).input, 2.0);
        assert_eq!(rates(&two_tiers(), 600_000).input, 4.0);
    }

    #[test]
    fn missing_cache_prices_count_as_zero_at_the_chosen_level() {
        let base = rates(&two_tiers(), 10);
        assert_eq!((base.cache_read, base.cache_write), (0.1, 0.0));
        let tiered = rates(&two_tiers(), 200_000);
        assert_eq!((tiered.cache_read, tiered.cache_write), (0.0, 0.0));
    }

    #[test]
    fn reasoning_tokens_are_not_billed_twice() {
        let usage = Usage {
            output_tokens: 1_000_000,
            reasoning_tokens: 600_000,
            ..Usage::default()
        };
        assert_eq!(cost(&two_tiers(), &usage).total_usd, 10.0);
    }
}
