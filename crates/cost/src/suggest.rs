//! Ways to spend less, worked out from a session's own numbers.
//!
//! Each suggestion states what it would have saved in this session, priced
//! with the same table as the session itself, so the user can judge it
//! against what actually happened rather than against a generic tip.

use serde::{Deserialize, Serialize};

use super::format::{tokens, usd};
use super::math::{cost_at, rates, Rates};
use super::model_id;
use super::pricing::{Price, PricingRegistry};
use super::usage::Usage;

/// Turns averaging fewer output tokens than this are "short": a smaller
/// model of the same generation usually answers them as well.
pub const SHORT_TURN_OUTPUT_TOKENS: f64 = 400.0;
/// The smallest prompt prefix providers cache (Anthropic's and OpenAI's minimum).
pub const MIN_CACHEABLE_TOKENS: u64 = 1024;
/// A system prompt must be sent at least this often for caching to pay.
pub const MIN_REQUESTS_FOR_CACHING: u64 = 3;
/// The longest answer must exceed the average by this factor to suggest a cap.
pub const OUTLIER_FACTOR: f64 = 4.0;
/// Savings at or below this are noise, not advice.
pub const MIN_SAVING_USD: f64 = 0.001;

/// Words in an id that mark a model that is not a chat model (speech,
/// images, embeddings, research agents), and so is never a replacement.
const NOT_CHAT: &[&str] = &[
    "embed",
    "tts",
    "image",
    "audio",
    "whisper",
    "transcribe",
    "realtime",
    "search",
    "research",
    "moderation",
];

/// A session's usage of one model, summed over its requests.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ModelStats {
    /// mia's provider name, as in `"provider/model"`.
    pub provider: String,
    pub model: String,
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
    pub max_output_tokens_seen: u64,
    pub avg_output_tokens: f64,
    /// The size of the system prompt sent with every request, when known.
    #[serde(default)]
    pub system_prompt_tokens_per_request: Option<u64>,
}

/// A session's usage, by model.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SessionStats {
    pub per_model: Vec<ModelStats>,
}

/// Which kind of change a suggestion proposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuggestionKind {
    CheaperModel,
    PromptCaching,
    CapMaxTokens,
}

/// One suggestion: what to change, and what it would have saved this session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suggestion {
    pub kind: SuggestionKind,
    pub text: String,
    /// The model it is about, `provider/model`.
    pub current_model: String,
    /// The model to switch to (a cheaper-model suggestion only), `provider/model`.
    pub suggested_model: Option<String>,
    /// What it would have saved this session, in USD and as a share of what
    /// the model cost (0 when that cost is unknown or zero).
    pub savings_usd: f64,
    pub savings_percent: f64,
}

impl Suggestion {
    fn new(kind: SuggestionKind, m: &ModelStats, text: String, savings_usd: f64) -> Self {
        let savings_percent = if m.cost_usd > 0.0 {
            (savings_usd / m.cost_usd * 100.0).clamp(0.0, 100.0)
        } else {
            0.0
        };
        Suggestion {
            kind,
            text,
            current_model: format!("{}/{}", m.provider, m.model),
            suggested_model: None,
            savings_usd,
            savings_percent,
        }
    }
}

/// The suggestions for a session, largest saving first.
///
/// 1. **Cheaper model**: for a model whose answers average under 400 output
///    tokens, the session's tokens priced at the cheapest chat model of the
///    same catalogue provider and family (same product line and version,
///    e.g. claude-sonnet-4-5 → claude-haiku-4-5, gpt-4.1 → gpt-4.1-nano).
/// 2. **Prompt caching**: a system prompt of at least 1,024 tokens sent with
///    3 or more requests and never read from the cache: every request after
///    the first could have read it at the cache price, minus the one-time
///    cache-write premium.
/// 3. **max_tokens cap**: when the longest answer is over 4× the average.
///    Its saving is $0.00, since the cap only bounds the worst case.
///
/// Suggestions 1 and 2 appear only when they save more than $0.001; models
/// without a price get no suggestion but 3.
pub fn suggest(registry: &PricingRegistry, stats: &SessionStats) -> Vec<Suggestion> {
    let mut out = Vec::new();
    for m in stats.per_model.iter().filter(|m| m.requests > 0) {
        let priced = registry.resolve(&m.provider, &m.model);
        if let Some(found) = priced {
            let current = rates(found.price, average_prompt(m));
            out.extend(cheaper_model(registry, m, found.provider, found.model));
            out.extend(prompt_caching(m, found.provider, current));
        }
        out.extend(cap_max_tokens(m, priced.map(|f| rates(f.price, average_prompt(m)))));
    }
    out.sort_by(|a, b| b.savings_usd.total_cmp(&a.savings_usd));
    out
}

/// The session's token totals as one usage record.
fn totals(m: &ModelStats) -> Usage {
    Usage {
        input_tokens: m.input_tokens,
        output_tokens: m.output_tokens,
        cache_read_tokens: m.cache_read_tokens,
        cache_write_tokens: m.cache_write_tokens,
        ..Usage::default()
    }
}

/// The average request's prompt, which picks the long-context tier when a
/// whole session is priced at once.
fn average_prompt(m: &ModelStats) -> u64 {
    let prompt = m
        .input_tokens
        .saturating_add(m.cache_read_tokens)
        .saturating_add(m.cache_write_tokens);
    prompt / m.requests.max(1)
}

/// What the session would have cost on `price`.
fn session_cost(price: &Price, m: &ModelStats) -> f64 {
    cost_at(rates(price, average_prompt(m)), &totals(m)).total_usd
}

fn cheaper_model(
    registry: &PricingRegistry,
    m: &ModelStats,
    catalogue_provider: &str,
    catalogue_model: &str,
) -> Option<Suggestion> {
    if m.avg_output_tokens >= SHORT_TURN_OUTPUT_TOKENS {
        return None;
    }
    let family = model_id::family(catalogue_model);
    let (candidate, would_cost) = registry
        .models_of(catalogue_provider)
        .filter(|(id, price)| {
            *id != catalogue_model
                && !NOT_CHAT.iter().any(|word| id.contains(word))
                && (price.input > 0.0 || price.output > 0.0)
                && model_id::family(id) == family
        })
        .map(|(id, price)| (id, session_cost(price, m)))
        .min_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)))?;
    let saving = m.cost_usd - would_cost;
    (saving > MIN_SAVING_USD).then(|| Suggestion {
        suggested_model: Some(format!("{}/{candidate}", m.provider)),
        ..Suggestion::new(
            SuggestionKind::CheaperModel,
            m,
            format!(
                "{p}/{model}: answers averaged {avg} output tokens; {p}/{candidate} would have cost {would} \
             instead of {cost}, saving ≈ {saving} this session.",
                p = m.provider,
                model = m.model,
                avg = tokens(m.avg_output_tokens.round() as u64),
                would = usd(would_cost),
                cost = usd(m.cost_usd),
                saving = usd(saving),
            ),
            saving,
        )
    })
}

fn prompt_caching(m: &ModelStats, catalogue_provider: &str, rates: Rates) -> Option<Suggestion> {
    let system = m.system_prompt_tokens_per_request?;
    if system < MIN_CACHEABLE_TOKENS || m.requests < MIN_REQUESTS_FOR_CACHING || m.cache_read_tokens > 0 {
        return None;
    }
    let system_usd = |per_million: f64| system as f64 * per_million / 1_000_000.0;
    let reads_saved = (m.requests - 1) as f64 * system_usd(rates.input - rates.cache_read);
    let write_premium = system_usd(rates.cache_write - rates.input).max(0.0);
    let saving = reads_saved - write_premium;
    let how = if catalogue_provider == "anthropic" {
        format!(
            "set `prompt_caching = true` for the `{}` provider in setup()",
            m.provider
        )
    } else {
        "keep the system prompt identical at the start of every request so the provider's automatic cache \
         can match it"
            .to_string()
    };
    (saving > MIN_SAVING_USD).then(|| {
        Suggestion::new(
            SuggestionKind::PromptCaching,
            m,
            format!(
                "{}/{}: a {}-token system prompt went out with {} requests and was never read from the cache; \
             {how}, saving ≈ {} this session.",
                m.provider,
                m.model,
                tokens(system),
                m.requests,
                usd(saving),
            ),
            saving,
        )
    })
}

fn cap_max_tokens(m: &ModelStats, rates: Option<Rates>) -> Option<Suggestion> {
    if m.avg_output_tokens <= 0.0 || (m.max_output_tokens_seen as f64) <= OUTLIER_FACTOR * m.avg_output_tokens {
        return None;
    }
    let worst = rates
        .map(|r| format!(", {}", usd(m.max_output_tokens_seen as f64 * r.output / 1_000_000.0)))
        .unwrap_or_default();
    Some(Suggestion::new(
        SuggestionKind::CapMaxTokens,
        m,
        format!(
            "{}/{}: the longest answer ({} tokens{worst}) was over {OUTLIER_FACTOR}× the average ({}); \
             a lower max_tokens bounds such worst cases (saving ≈ {} this session).",
            m.provider,
            m.model,
            tokens(m.max_output_tokens_seen),
            tokens(m.avg_output_tokens.round() as u64),
            usd(0.0),
        ),
        0.0,
    ))
}
