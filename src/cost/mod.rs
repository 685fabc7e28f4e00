//! What mia's provider calls cost, and what to do about it: prices
//! ([`pricing`]), the arithmetic ([`math`]), limits and warnings
//! ([`budget`]), display ([`format`]) and savings advice ([`suggest`]).
//! Everything here is plain functions over plain data; the only input that
//! is not an argument is the price table embedded at build time.

pub mod budget;
pub mod format;
pub mod math;
mod model_id;
pub mod pricing;
pub mod suggest;

pub use budget::{crossed_warnings, gate, BudgetConfig, Gate, Spend, Warning, WarningKind};
pub use format::{footer, tokens, tokens_short, usd};
pub use math::{cost, cost_at, cost_of, prompt_tokens, rates, CostBreakdown, Rates};
pub use pricing::{Price, PricingError, PricingRegistry, Resolved, Tier};
pub use suggest::{suggest, ModelStats, SessionStats, Suggestion, SuggestionKind};
