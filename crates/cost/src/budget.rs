//! Spending limits and warnings (`setup({ costs = { ... } })`).
//!
//! Limits are checked before a request ([`gate`]): a soft limit asks the user,
//! a hard one refuses. Warnings are checked after a request
//! ([`crossed_warnings`]) and fire only when that request crossed the
//! threshold, so each shows once instead of after every later answer.

use serde::{Deserialize, Serialize};

use super::format::usd;

/// The user's cost thresholds, in USD. A threshold left out of the
/// configuration takes the cost contract's default ([`BudgetConfig::default`]);
/// `enabled = false` (`setup({ budgets = false })`) turns them all off.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default)]
pub struct BudgetConfig {
    pub session_warning_usd: Option<f64>,
    pub session_limit_usd: Option<f64>,
    pub daily_warning_usd: Option<f64>,
    pub daily_limit_usd: Option<f64>,
    /// `true`: a reached limit refuses further requests. `false` (default):
    /// it asks for confirmation, so a long task is not cut off unasked.
    pub hard_limit: bool,
    /// `false`: no warning and no limit at all.
    pub enabled: bool,
}

/// The cost contract's thresholds: a session warns at $3 and asks at $10,
/// a day warns at $20 and asks at $50 (soft limits).
impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            session_warning_usd: Some(3.0),
            session_limit_usd: Some(10.0),
            daily_warning_usd: Some(20.0),
            daily_limit_usd: Some(50.0),
            hard_limit: false,
            enabled: true,
        }
    }
}

impl BudgetConfig {
    /// No thresholds at all (`budgets = false`).
    pub fn off() -> Self {
        BudgetConfig {
            enabled: false,
            ..BudgetConfig::default()
        }
    }

    /// Whether a limit is set: without one, every request proceeds and
    /// the gate needs no spend.
    pub fn has_limit(&self) -> bool {
        self.enabled && (self.session_limit_usd.is_some() || self.daily_limit_usd.is_some())
    }

    /// Whether a warning threshold is set: without one, nothing needs the
    /// spend before a request to see what it crossed.
    pub fn has_warning(&self) -> bool {
        self.enabled && (self.session_warning_usd.is_some() || self.daily_warning_usd.is_some())
    }
}

/// What has been spent so far: in this chat session, and today (local day).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub session_usd: f64,
    pub day_usd: f64,
}

/// Whether a request may be sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Gate {
    Proceed,
    /// A soft limit is reached: send only if the user, told `reason`, answers yes.
    Confirm {
        reason: String,
    },
    /// A hard limit is reached: do not send; show `message`.
    Refuse {
        message: String,
    },
}

/// Which threshold a warning is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    Session,
    Daily,
}

/// A threshold the last request crossed, with the notification to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    pub kind: WarningKind,
    pub message: String,
}

/// Decides, before a request, whether a limit stands in the way.
///
/// A limit is reached when the spend is at or above it. The session limit is
/// checked first: it is the narrower one, and the one a new session resets.
/// The caller owns what a confirmation means (e.g. not asking again for the
/// rest of the session).
pub fn gate(cfg: &BudgetConfig, spend: Spend) -> Gate {
    if !cfg.enabled {
        return Gate::Proceed;
    }
    let reached = |limit: Option<f64>, spent: f64| limit.filter(|l| spent >= *l);
    if let Some(limit) = reached(cfg.session_limit_usd, spend.session_usd) {
        return if cfg.hard_limit {
            Gate::Refuse {
                message: format!(
                    "mia: this session has cost {}, reaching your {} session limit. \
                     Raise `costs.session_limit_usd` in setup() or start a new session to continue.",
                    usd(spend.session_usd),
                    usd(limit)
                ),
            }
        } else {
            Gate::Confirm {
                reason: format!("Session cost limit reached ({}).", usd(limit)),
            }
        };
    }
    if let Some(limit) = reached(cfg.daily_limit_usd, spend.day_usd) {
        return if cfg.hard_limit {
            Gate::Refuse {
                message: format!(
                    "mia: today's requests have cost {}, reaching your {} daily limit. \
                     Raise `costs.daily_limit_usd` in setup() to continue today.",
                    usd(spend.day_usd),
                    usd(limit)
                ),
            }
        } else {
            Gate::Confirm {
                reason: format!("Daily cost limit reached ({}).", usd(limit)),
            }
        };
    }
    Gate::Proceed
}

/// The warnings whose threshold lies between the spend `before` a request
/// (exclusive) and `after` it (inclusive), session first. A warning names
/// the limit it approaches ("$3.12 — approaching your $10.00 session
/// limit"), or the warning threshold when no limit is set above it.
pub fn crossed_warnings(cfg: &BudgetConfig, before: Spend, after: Spend) -> Vec<Warning> {
    if !cfg.enabled {
        return Vec::new();
    }
    let crossed = |threshold: Option<f64>, from: f64, to: f64| threshold.filter(|t| from < *t && *t <= to);
    let ahead = |limit: Option<f64>, spent: f64| limit.filter(|l| spent < *l);
    let mut warnings = Vec::new();
    if let Some(t) = crossed(cfg.session_warning_usd, before.session_usd, after.session_usd) {
        let spent = usd(after.session_usd);
        let message = match ahead(cfg.session_limit_usd, after.session_usd) {
            Some(l) => format!(
                "mia: this session has cost {spent} — approaching your {} session limit",
                usd(l)
            ),
            None => format!("mia: this session has cost {spent}, past your {} warning", usd(t)),
        };
        warnings.push(Warning {
            kind: WarningKind::Session,
            message,
        });
    }
    if let Some(t) = crossed(cfg.daily_warning_usd, before.day_usd, after.day_usd) {
        let spent = usd(after.day_usd);
        let message = match ahead(cfg.daily_limit_usd, after.day_usd) {
            Some(l) => format!(
                "mia: today's requests have cost {spent} — approaching your {} daily limit",
                usd(l)
            ),
            None => format!(
                "mia: today's requests have cost {spent}, past your {} daily warning",
                usd(t)
            ),
        };
        warnings.push(Warning {
            kind: WarningKind::Daily,
            message,
        });
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_left_out_take_the_contract_defaults_and_are_soft() {
        let cfg: BudgetConfig = serde_json::from_str(r#"{ "session_limit_usd": 5 }"#).unwrap();
        assert_eq!((cfg.session_warning_usd, cfg.session_limit_usd), (Some(3.0), Some(5.0)));
        assert_eq!((cfg.daily_warning_usd, cfg.daily_limit_usd), (Some(20.0), Some(50.0)));
        assert!(!cfg.hard_limit && cfg.enabled);
    }

    #[test]
    fn budgets_off_always_proceed_and_never_warn() {
        let spend = Spend {
            session_usd: 1e6,
            day_usd: 1e6,
        };
        assert_eq!(gate(&BudgetConfig::off(), spend), Gate::Proceed);
        assert!(crossed_warnings(&BudgetConfig::off(), Spend::default(), spend).is_empty());
        assert!(!BudgetConfig::off().has_limit() && !BudgetConfig::off().has_warning());
    }
}
