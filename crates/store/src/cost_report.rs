//! The whole `mia.costs` / `:Mia costs` report: the usage report for a
//! scope, the last 30 days' costs, and (for a session) ways to spend less.
//! The window is worked out from the scope and the user's local day; the
//! sums come from [`super::reports`] and [`super::spend`], the advice from
//! [`mia_cost::suggest`].

use serde::Serialize;

use super::error::StoreError;
use super::reports::{ReportQuery, UsageReport};
use super::spend::DayCost;
use super::Store;
use mia_cost::{local_day, suggest, ModelStats, PricingRegistry, SessionStats, Suggestion, DAY_MS};

/// How many days the `daily` chart covers.
pub const CHART_DAYS: u32 = 30;

/// Which calls a cost report covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostScope {
    /// One session, all time (the session named in the query).
    Session,
    /// Today (local day).
    Daily,
    /// Today and the six days before it.
    Weekly,
    /// Today and the `n - 1` days before it (at least today).
    Days(u32),
}

impl CostScope {
    /// The scope as Lua names it (`session`, `daily`, `weekly`, `days`).
    pub fn name(self) -> &'static str {
        match self {
            CostScope::Session => "session",
            CostScope::Daily => "daily",
            CostScope::Weekly => "weekly",
            CostScope::Days(_) => "days",
        }
    }
}

/// A cost report request.
#[derive(Debug, Clone, PartialEq)]
pub struct CostQuery {
    pub scope: CostScope,
    /// The session of a [`CostScope::Session`] report (ignored otherwise).
    pub session_id: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    /// Local time's offset from UTC, for the calendar days.
    pub utc_offset_s: i32,
    /// Estimated tokens of the system prompt sent with every request (for the caching suggestion).
    pub system_tokens: Option<u64>,
}

/// What `mia.costs` returns: the usage report's fields, plus the scope, the
/// last [`CHART_DAYS`] days and the suggestions (only for a session).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostReport {
    #[serde(flatten)]
    pub usage: UsageReport,
    pub scope: &'static str,
    pub daily: Vec<DayCost>,
    pub suggestions: Vec<Suggestion>,
    /// How many of the report's calls an LLM gateway priced
    /// (`cost_source = "gateway"`), and their cost (part of the totals).
    pub gateway_requests: u64,
    pub gateway_usd: f64,
    /// The first day the report covers, local `YYYY-MM-DD` (none for a session's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    /// How many sessions used each model (`provider/model`), most first.
    pub sessions_by_model: Vec<ModelSessions>,
    /// Each agent and the models it called (`provider/model`).
    pub agent_models: Vec<AgentModel>,
}

/// An agent and one model it called.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentModel {
    pub agent: String,
    pub model: String,
}

/// One model's share of a report's sessions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSessions {
    pub model: String,
    pub sessions: u64,
}

impl Store {
    /// The report for `q` as of `now_ms`, suggestions priced with `pricing`.
    pub async fn cost_report(
        &self,
        q: &CostQuery,
        pricing: &PricingRegistry,
        now_ms: i64,
    ) -> Result<CostReport, StoreError> {
        self.cost_report_from(q, pricing, now_ms, false).await
    }

    /// [`Store::cost_report`] summed from the usage rows alone, without the
    /// rollup (see [`Store::usage_report_from_rows`]).
    #[doc(hidden)]
    pub async fn cost_report_from_rows(
        &self,
        q: &CostQuery,
        pricing: &PricingRegistry,
        now_ms: i64,
    ) -> Result<CostReport, StoreError> {
        self.cost_report_from(q, pricing, now_ms, true).await
    }

    async fn cost_report_from(
        &self,
        q: &CostQuery,
        pricing: &PricingRegistry,
        now_ms: i64,
        from_rows: bool,
    ) -> Result<CostReport, StoreError> {
        let (today, _) = local_day(now_ms, q.utc_offset_s);
        let from_ms = match q.scope {
            CostScope::Session => None,
            CostScope::Daily => Some(today),
            CostScope::Weekly => Some(today - 6 * DAY_MS),
            CostScope::Days(n) => Some(today - i64::from(n.max(1) - 1) * DAY_MS),
        };
        let session_id = match q.scope {
            CostScope::Session => q.session_id.clone(),
            _ => None,
        };
        let query = ReportQuery {
            from_ms,
            to_ms: None,
            session_id: session_id.clone(),
            model: q.model.clone(),
            provider: q.provider.clone(),
        };
        let chart_from = today - i64::from(CHART_DAYS - 1) * DAY_MS;
        let (usage, daily) = if from_rows {
            (
                self.usage_report_from_rows(&query).await?,
                self.daily_costs_from_rows(chart_from, CHART_DAYS, q.utc_offset_s)
                    .await?,
            )
        } else {
            (
                self.usage_report(&query).await?,
                self.daily_costs(chart_from, CHART_DAYS, q.utc_offset_s).await?,
            )
        };
        let suggestions = match session_id {
            Some(session) => suggest(pricing, &self.session_stats(&session, &usage, q.system_tokens).await?),
            None => Vec::new(),
        };
        let (gateway_requests, gateway_usd) = {
            let query = query.clone();
            self.read(move |c, p| super::reports::gateway_share(c, p, &query))
                .await?
        };
        let sessions_by_model = {
            let query = query.clone();
            self.read(move |c, p| super::reports::sessions_by_model(c, p, &query))
                .await?
                .into_iter()
                .map(|(model, sessions)| ModelSessions { model, sessions })
                .collect()
        };
        let agent_models = {
            let query = query.clone();
            self.read(move |c, p| super::reports::agent_models(c, p, &query))
                .await?
                .into_iter()
                .map(|(agent, model)| AgentModel { agent, model })
                .collect()
        };
        let date = from_ms.map(|ms| super::spend::day_label(super::spend::day_window(ms, q.utc_offset_s).1));
        Ok(CostReport {
            date,
            sessions_by_model,
            agent_models,
            gateway_requests,
            gateway_usd,
            usage,
            scope: q.scope.name(),
            daily,
            suggestions,
        })
    }

    /// Per-model numbers of `session` for the suggestions, one query per
    /// model of its report.
    async fn session_stats(
        &self,
        session: &str,
        report: &UsageReport,
        system_tokens: Option<u64>,
    ) -> Result<SessionStats, StoreError> {
        let mut stats = SessionStats::default();
        for m in &report.by_model {
            let one = ReportQuery {
                session_id: Some(session.to_string()),
                model: Some(m.key.clone()),
                ..Default::default()
            };
            let r = self.usage_report(&one).await?;
            let requests = r.totals.requests.max(1);
            stats.per_model.push(ModelStats {
                provider: r.by_provider.first().map(|p| p.key.clone()).unwrap_or_default(),
                model: m.key.clone(),
                requests: r.totals.requests,
                input_tokens: r.totals.input_tokens,
                output_tokens: r.totals.output_tokens,
                cache_read_tokens: r.totals.cache_read_tokens,
                cache_write_tokens: r.totals.cache_write_tokens,
                cost_usd: r.totals.cost_usd,
                max_output_tokens_seen: m.max_output_tokens,
                avg_output_tokens: r.totals.output_tokens as f64 / requests as f64,
                system_prompt_tokens_per_request: system_tokens,
            });
        }
        Ok(stats)
    }
}
