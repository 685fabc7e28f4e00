//! What one provider call used (token counts, as the `llm/` decoders report
//! them) and what it cost: the two quantities everything else in `cost/`
//! works on. They live here, not in `llm/`, so that `cost/` needs nothing
//! from the rest of the crate.

use serde::{Deserialize, Serialize};

/// Token counts of one provider call, normalized: `input_tokens` excludes
/// cache reads and writes, which are counted in their own fields; reasoning
/// tokens are part of `output_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    /// True when the server sent no usage and these counts are an estimate.
    pub estimated: bool,
}

/// The cost of one answer; `known == false` (and no figures) when the model has no price.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cost {
    pub known: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write_usd: Option<f64>,
    /// Who priced it: mia's own price table, or the LLM gateway the request
    /// went through (see [`crate::gateway`]). Left out of the JSON
    /// when local, so the shapes Lua and the store already read stay the same.
    #[serde(skip_serializing_if = "CostSource::is_local")]
    pub source: CostSource,
}

/// Who priced a call (or a sum of calls): `local` (mia's price table),
/// `gateway` (the gateway's own figure), or `mixed` for a sum of both.
/// The store keeps `local` or `gateway` per row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostSource {
    #[default]
    Local,
    Gateway,
    Mixed,
}

impl Cost {
    /// A known $0.00: a call to a model on the user's own machine.
    pub fn free() -> Cost {
        Cost {
            known: true,
            total_usd: Some(0.0),
            input_usd: Some(0.0),
            output_usd: Some(0.0),
            cache_read_usd: Some(0.0),
            cache_write_usd: Some(0.0),
            source: CostSource::Local,
        }
    }
}

impl CostSource {
    pub fn is_local(&self) -> bool {
        *self == CostSource::Local
    }

    /// The text stored in `usage.cost_source` (a sum is never stored).
    pub fn as_str(self) -> &'static str {
        match self {
            CostSource::Local => "local",
            CostSource::Gateway => "gateway",
            CostSource::Mixed => "mixed",
        }
    }

    /// The source of a sum of `self` and `other`.
    pub fn join(self, other: CostSource) -> CostSource {
        if self == other {
            self
        } else {
            CostSource::Mixed
        }
    }
}
