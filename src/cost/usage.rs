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
}
