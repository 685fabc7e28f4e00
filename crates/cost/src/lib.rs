//! What mia's provider calls cost, and what to do about it: prices
//! ([`pricing`]), the arithmetic ([`math`]), limits and warnings
//! ([`budget`]), display ([`format`]), savings advice ([`suggest`]), the
//! local calendar days budgets and reports count ([`calendar`]), and what
//! this process has spent, which the budgets count when the store cannot
//! be read ([`ledger`]). Everything here is plain functions over plain
//! data; the only inputs that are not arguments are the price table
//! embedded at build time, the clock read by [`calendar::now_ms`] and the
//! ledger's record.
//!
//! Dependencies: none inside the crate. `cost` is a leaf: the quantities it
//! works on, token counts ([`Usage`]) and dollars ([`Cost`]), are defined
//! here, and `llm` (which reports usage and prices each answer), `store`,
//! `agent` and the rest depend on `cost`, never the other way round.

pub mod budget;
pub mod calendar;
pub mod format;
pub mod gateway;
pub mod ledger;
pub mod math;
mod model_id;
pub mod pricing;
pub mod suggest;
pub mod usage;

pub use budget::{crossed_warnings, gate, BudgetConfig, Gate, Spend, Warning, WarningKind};
pub use calendar::{local_day, now_ms, DAY_MS};
pub use format::{footer, footer_unreported, tokens, tokens_short, usd};
pub use math::{cost, cost_at, cost_of, prompt_tokens, rates, CostBreakdown, Rates};
pub use pricing::{Price, PricingError, PricingRegistry, Resolved, Tier};
pub use suggest::{suggest, ModelStats, SessionStats, Suggestion, SuggestionKind};
pub use usage::{Cost, CostSource, Usage};
