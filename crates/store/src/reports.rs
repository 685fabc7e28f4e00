//! The cost and token report over the usage table (`:Mia costs`).
//!
//! Every time filter is on `usage.created_at_ms` (when the call was
//! recorded), half-open: `from_ms <= t < to_ms`. Only rows with
//! `cost_known` contribute money; rows without a price still count as
//! requests and tokens, and are also counted apart so the UI can say how much
//! of the usage has no price.
//!
//! Money is summed in whole nano-dollars (each row's USD rounded once, see
//! `schema::nusd!`), so sums are exact whatever order they are added in.
//!
//! A report over an open-ended window (no `to_ms`, no session) reads the
//! rollup ([`super::rollup`]): hours and days, plus the rows of a partial
//! hour at its start. Any other report reads the matching rows once
//! ([`usage_report_from_rows`]); a session has few rows and its own index.
//! Both give per-`(agent, provider, model, cost_known)` sums; turning groups
//! into totals, breakdowns and percentages is the pure [`assemble`], tested
//! without a database.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use rusqlite::{params_from_iter, Connection, ToSql};
use serde::{Deserialize, Serialize};

use super::error::{from_sqlite, StoreError};
use super::schema::nusd;

/// What to report on; every field narrows the rows, `None` means "all".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReportQuery {
    /// Inclusive lower bound on `created_at_ms`.
    pub from_ms: Option<i64>,
    /// Exclusive upper bound on `created_at_ms`.
    pub to_ms: Option<i64>,
    pub session_id: Option<String>,
    /// Exact model name as recorded (without the provider prefix).
    pub model: Option<String>,
    pub provider: Option<String>,
}

/// The answer to a [`ReportQuery`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    pub totals: Totals,
    pub by_agent: Vec<Breakdown>,
    pub by_model: Vec<Breakdown>,
    pub by_provider: Vec<Breakdown>,
    pub by_cost_type: CostTypes,
}

/// Sums over every matching row. Token counts include rows without a known
/// price; `cost_usd` does not (see `unknown_cost_*`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Sum of `total_usd` over rows with `cost_known`.
    pub cost_usd: f64,
    /// Rows, i.e. provider calls.
    pub requests: u64,
    /// Distinct non-null `message_id`s.
    pub messages: u64,
    /// Distinct non-null `session_id`s.
    pub sessions: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    /// Sum of call durations (time spent waiting on providers).
    pub duration_ms: u64,
    /// Earliest and latest `created_at_ms`; `None` when nothing matched.
    pub first_at_ms: Option<i64>,
    pub last_at_ms: Option<i64>,
    /// Calls recorded without a price (a model missing from the price
    /// table), and what they consumed; included in the counts above.
    pub unknown_cost_requests: u64,
    pub unknown_cost_input_tokens: u64,
    pub unknown_cost_output_tokens: u64,
    pub unknown_cost_cache_read_tokens: u64,
    pub unknown_cost_cache_write_tokens: u64,
}

/// One agent, model or provider's share.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    pub key: String,
    pub cost_usd: f64,
    pub requests: u64,
    /// Of `requests`, how many had no known price.
    pub unknown_cost_requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The longest single answer (output tokens of one call), for the max_tokens suggestion.
    pub max_output_tokens: u64,
    /// Share of the report's known cost, 0–100; 0 when that cost is 0.
    pub percent: f64,
}

/// Known cost split by what was paid for. Percentages are of the report's
/// known total, so they add up to 100 when each row's `total_usd` is the sum
/// of its four parts (as the pricing code writes them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CostTypes {
    pub input_usd: f64,
    pub output_usd: f64,
    pub cache_read_usd: f64,
    pub cache_write_usd: f64,
    pub input_percent: f64,
    pub output_percent: f64,
    pub cache_read_percent: f64,
    pub cache_write_percent: f64,
}

/// Sums for one `(agent, provider, model, cost_known)` group.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GroupSums {
    pub agent: String,
    pub provider: String,
    pub model: String,
    pub cost_known: bool,
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub max_output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub reasoning_tokens: u64,
    /// Money in nano-dollars (i128: no sum of i64 bucket sums can overflow it).
    pub input_nusd: i128,
    pub output_nusd: i128,
    pub cache_read_nusd: i128,
    pub cache_write_nusd: i128,
    pub total_nusd: i128,
    pub duration_ms: u64,
}

/// The figures that cannot be summed per group.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Distinct {
    pub messages: u64,
    pub sessions: u64,
    pub first_at_ms: Option<i64>,
    pub last_at_ms: Option<i64>,
}

/// The WHERE clause and its arguments for a report query.
fn filter(q: &ReportQuery) -> (String, Vec<&dyn ToSql>) {
    let mut clauses = Vec::new();
    let mut args: Vec<&dyn ToSql> = Vec::new();
    if let Some(from) = &q.from_ms {
        clauses.push("created_at_ms >= ?");
        args.push(from);
    }
    if let Some(to) = &q.to_ms {
        clauses.push("created_at_ms < ?");
        args.push(to);
    }
    if let Some(session) = &q.session_id {
        clauses.push("session_id = ?");
        args.push(session);
    }
    if let Some(model) = &q.model {
        clauses.push("model = ?");
        args.push(model);
    }
    if let Some(provider) = &q.provider {
        clauses.push("provider = ?");
        args.push(provider);
    }
    if clauses.is_empty() {
        (String::new(), args)
    } else {
        (format!("WHERE {}", clauses.join(" AND ")), args)
    }
}

/// How many of `q`'s rows a gateway priced, and what they cost in all (USD,
/// summed in nano-dollars like every report). The partial index
/// `usage_gateway` holds only such rows: nothing to read for users
/// without a gateway.
pub(crate) fn gateway_share(conn: &Connection, path: &Path, q: &ReportQuery) -> Result<(u64, f64), StoreError> {
    let (where_clause, args) = filter(q);
    let cond = if where_clause.is_empty() {
        "WHERE cost_source = 'gateway'".to_string()
    } else {
        format!("{where_clause} AND cost_source = 'gateway'")
    };
    let sql = format!(
        "SELECT count(*), coalesce(sum({}), 0) FROM usage {cond}",
        nusd!("total_usd")
    );
    let err = |e: rusqlite::Error| from_sqlite(path, "counting gateway-priced calls", &e);
    let mut stmt = conn.prepare_cached(&sql).map_err(err)?;
    let (n, nanos): (i64, i64) = stmt
        .query_row(params_from_iter(&args), |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(err)?;
    Ok((count(n), usd(i128::from(nanos))))
}

/// How many sessions used each model in the report's rows, most first
/// (then by name): `(provider/model, sessions)`. Calls made outside a
/// session (mia.stream) are not counted.
pub(crate) fn sessions_by_model(
    conn: &Connection,
    path: &Path,
    q: &ReportQuery,
) -> Result<Vec<(String, u64)>, StoreError> {
    let (where_clause, args) = filter(q);
    let cond = if where_clause.is_empty() {
        "WHERE session_id IS NOT NULL".to_string()
    } else {
        format!("{where_clause} AND session_id IS NOT NULL")
    };
    let sql = format!(
        "SELECT provider || '/' || model, count(DISTINCT session_id) AS n FROM usage {cond} \
         GROUP BY provider, model ORDER BY n DESC, 1"
    );
    let err = |e: rusqlite::Error| from_sqlite(path, "counting sessions per model", &e);
    let mut stmt = conn.prepare_cached(&sql).map_err(err)?;
    let rows = stmt
        .query_map(params_from_iter(&args), |r| {
            Ok((r.get::<_, String>(0)?, count(r.get(1)?)))
        })
        .map_err(err)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(err)
}

/// Each agent of the report's rows and the models it called
/// (`provider/model`), by agent then model.
pub(crate) fn agent_models(
    conn: &Connection,
    path: &Path,
    q: &ReportQuery,
) -> Result<Vec<(String, String)>, StoreError> {
    let (where_clause, args) = filter(q);
    let sql =
        format!("SELECT DISTINCT agent, provider || '/' || model FROM usage {where_clause} ORDER BY 1, 2 LIMIT 100");
    let err = |e: rusqlite::Error| from_sqlite(path, "listing the models of agents", &e);
    let mut stmt = conn.prepare_cached(&sql).map_err(err)?;
    let rows = stmt
        .query_map(params_from_iter(&args), |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(err)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(err)
}

pub(crate) fn count(v: i64) -> u64 {
    v.max(0) as u64
}

/// The columns of one usage row that a report reads, in the order
/// [`Accumulator::add_row`] takes them; money converted as the rollup does.
pub(crate) const ROW_COLUMNS: &str = concat!(
    "agent, provider, model, cost_known, input_tokens, output_tokens, cache_read_tokens,
     cache_write_tokens, reasoning_tokens, ",
    nusd!("input_usd"),
    ", ",
    nusd!("output_usd"),
    ", ",
    nusd!("cache_read_usd"),
    ", ",
    nusd!("cache_write_usd"),
    ", ",
    nusd!("total_usd"),
    ", duration_ms, created_at_ms, message_id, session_id"
);

/// The report for `q`: from the rollup when the window is open-ended and
/// no session is named (every report the UI runs over days), from the rows
/// otherwise. Both give the same answer; the rollup reads days, not rows.
pub(crate) fn usage_report(conn: &Connection, path: &Path, q: &ReportQuery) -> Result<UsageReport, StoreError> {
    if q.session_id.is_none() && q.to_ms.is_none() {
        super::rollup::usage_report(conn, path, q)
    } else {
        usage_report_from_rows(conn, path, q)
    }
}

/// The report for `q` summed from the matching usage rows alone: what the
/// rollup must always equal, and how session reports are answered.
pub(crate) fn usage_report_from_rows(
    conn: &Connection,
    path: &Path,
    q: &ReportQuery,
) -> Result<UsageReport, StoreError> {
    let err = |e: rusqlite::Error| from_sqlite(path, "building a usage report", &e);
    let (where_clause, args) = filter(q);
    // One pass over the matching rows, summed here rather than with GROUP BY
    // and COUNT(DISTINCT): SQLite would sort the rows three times for those
    // (measured 98 ms against 40 ms for a 78k-row week).
    let sql = format!("SELECT {ROW_COLUMNS} FROM usage {where_clause}");
    let mut stmt = conn.prepare_cached(&sql).map_err(err)?;
    let mut rows = stmt.query(params_from_iter(&args)).map_err(err)?;
    let mut acc = Accumulator::new(true);
    while let Some(row) = rows.next().map_err(err)? {
        acc.add_row(row).map_err(err)?;
    }
    let (groups, distinct) = acc.finish();
    Ok(assemble(&groups, distinct))
}

/// Per-group sums and the distinct counts, built row by row or bucket by
/// bucket.
pub(crate) struct Accumulator {
    groups: Vec<GroupSums>,
    /// Whether rows feed the distinct sets (the rollup counts ids itself).
    count_ids: bool,
    messages: HashSet<String>,
    sessions: HashSet<String>,
    first_at_ms: Option<i64>,
    last_at_ms: Option<i64>,
}

impl Accumulator {
    pub(crate) fn new(count_ids: bool) -> Accumulator {
        Accumulator {
            groups: Vec::new(),
            count_ids,
            messages: HashSet::new(),
            sessions: HashSet::new(),
            first_at_ms: None,
            last_at_ms: None,
        }
    }

    /// The group of `(agent, provider, model, cost_known)` in columns 0–3.
    fn group(&mut self, r: &rusqlite::Row<'_>) -> rusqlite::Result<&mut GroupSums> {
        let text = |i: usize| -> rusqlite::Result<&str> { r.get_ref(i)?.as_str().map_err(Into::into) };
        let (agent, provider, model) = (text(0)?, text(1)?, text(2)?);
        let cost_known: bool = r.get(3)?;
        // A report holds a few dozen groups at most: a linear search beats
        // allocating an owned key per row.
        let found = self
            .groups
            .iter()
            .position(|g| g.cost_known == cost_known && g.model == model && g.agent == agent && g.provider == provider);
        let index = match found {
            Some(i) => i,
            None => {
                self.groups.push(GroupSums {
                    agent: agent.to_string(),
                    provider: provider.to_string(),
                    model: model.to_string(),
                    cost_known,
                    ..GroupSums::default()
                });
                self.groups.len() - 1
            }
        };
        Ok(&mut self.groups[index])
    }

    fn span(&mut self, first: i64, last: i64) {
        self.first_at_ms = Some(self.first_at_ms.map_or(first, |f| f.min(first)));
        self.last_at_ms = Some(self.last_at_ms.map_or(last, |l| l.max(last)));
    }

    /// Adds one usage row ([`ROW_COLUMNS`]).
    pub(crate) fn add_row(&mut self, r: &rusqlite::Row<'_>) -> rusqlite::Result<()> {
        let n = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)?.max(0) as u64) };
        let nusd = |i: usize| -> rusqlite::Result<i128> { Ok(i128::from(r.get::<_, i64>(i)?)) };
        let g = self.group(r)?;
        g.requests += 1;
        g.input_tokens += n(4)?;
        let output = n(5)?;
        g.output_tokens += output;
        g.max_output_tokens = g.max_output_tokens.max(output);
        g.cache_read_tokens += n(6)?;
        g.cache_write_tokens += n(7)?;
        g.reasoning_tokens += n(8)?;
        g.input_nusd += nusd(9)?;
        g.output_nusd += nusd(10)?;
        g.cache_read_nusd += nusd(11)?;
        g.cache_write_nusd += nusd(12)?;
        g.total_nusd += nusd(13)?;
        g.duration_ms += n(14)?;
        let at: i64 = r.get(15)?;
        self.span(at, at);
        if self.count_ids {
            for (set, column) in [(&mut self.messages, 16), (&mut self.sessions, 17)] {
                if let Some(id) = r.get_ref(column)?.as_str_or_null()? {
                    if !set.contains(id) {
                        set.insert(id.to_string());
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds one rollup bucket (`agent, provider, model, cost_known` and then
    /// the rollup's summed columns, in the schema's order).
    pub(crate) fn add_bucket(&mut self, r: &rusqlite::Row<'_>) -> rusqlite::Result<()> {
        let n = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i)?.max(0) as u64) };
        let nusd = |i: usize| -> rusqlite::Result<i128> { Ok(i128::from(r.get::<_, i64>(i)?)) };
        let g = self.group(r)?;
        g.requests += n(4)?;
        g.input_tokens += n(5)?;
        g.output_tokens += n(6)?;
        g.max_output_tokens = g.max_output_tokens.max(n(7)?);
        g.cache_read_tokens += n(8)?;
        g.cache_write_tokens += n(9)?;
        g.reasoning_tokens += n(10)?;
        g.input_nusd += nusd(11)?;
        g.output_nusd += nusd(12)?;
        g.cache_read_nusd += nusd(13)?;
        g.cache_write_nusd += nusd(14)?;
        g.total_nusd += nusd(15)?;
        g.duration_ms += n(16)?;
        let (first, last): (i64, i64) = (r.get(17)?, r.get(18)?);
        self.span(first, last);
        Ok(())
    }

    /// The groups, and the distinct figures counted from rows (the ids are
    /// 0 when `count_ids` was off; the caller fills them in).
    pub(crate) fn finish(self) -> (Vec<GroupSums>, Distinct) {
        let distinct = Distinct {
            messages: self.messages.len() as u64,
            sessions: self.sessions.len() as u64,
            first_at_ms: self.first_at_ms,
            last_at_ms: self.last_at_ms,
        };
        (self.groups, distinct)
    }
}

/// Nano-dollars as dollars.
pub(crate) fn usd(nanos: i128) -> f64 {
    nanos as f64 / 1e9
}

/// Builds the report from per-group sums: totals, the three breakdowns
/// (sorted by cost, then requests, then key, so equal rows keep a stable
/// order) and the cost-type split.
pub(crate) fn assemble(groups: &[GroupSums], distinct: Distinct) -> UsageReport {
    let mut totals = Totals {
        messages: distinct.messages,
        sessions: distinct.sessions,
        first_at_ms: distinct.first_at_ms,
        last_at_ms: distinct.last_at_ms,
        ..Totals::default()
    };
    let mut types = CostTypes::default();
    // Money is added up in nano-dollars and turned into dollars once.
    let mut cost: i128 = 0;
    let mut parts: [i128; 4] = [0; 4];
    let mut agents: HashMap<&str, (Breakdown, i128)> = HashMap::new();
    let mut models: HashMap<&str, (Breakdown, i128)> = HashMap::new();
    let mut providers: HashMap<&str, (Breakdown, i128)> = HashMap::new();
    for g in groups {
        totals.requests += g.requests;
        totals.input_tokens += g.input_tokens;
        totals.output_tokens += g.output_tokens;
        totals.cache_read_tokens += g.cache_read_tokens;
        totals.cache_write_tokens += g.cache_write_tokens;
        totals.reasoning_tokens += g.reasoning_tokens;
        totals.duration_ms += g.duration_ms;
        if g.cost_known {
            cost += g.total_nusd;
            parts[0] += g.input_nusd;
            parts[1] += g.output_nusd;
            parts[2] += g.cache_read_nusd;
            parts[3] += g.cache_write_nusd;
        } else {
            totals.unknown_cost_requests += g.requests;
            totals.unknown_cost_input_tokens += g.input_tokens;
            totals.unknown_cost_output_tokens += g.output_tokens;
            totals.unknown_cost_cache_read_tokens += g.cache_read_tokens;
            totals.unknown_cost_cache_write_tokens += g.cache_write_tokens;
        }
        for (map, key) in [
            (&mut agents, g.agent.as_str()),
            (&mut models, g.model.as_str()),
            (&mut providers, g.provider.as_str()),
        ] {
            let (b, nusd) = map.entry(key).or_insert_with(|| {
                let b = Breakdown {
                    key: key.to_string(),
                    ..Breakdown::default()
                };
                (b, 0)
            });
            b.requests += g.requests;
            b.input_tokens += g.input_tokens;
            b.output_tokens += g.output_tokens;
            b.max_output_tokens = b.max_output_tokens.max(g.max_output_tokens);
            if g.cost_known {
                *nusd += g.total_nusd;
            } else {
                b.unknown_cost_requests += g.requests;
            }
        }
    }
    totals.cost_usd = usd(cost);
    types.input_usd = usd(parts[0]);
    types.output_usd = usd(parts[1]);
    types.cache_read_usd = usd(parts[2]);
    types.cache_write_usd = usd(parts[3]);
    let total = totals.cost_usd;
    types.input_percent = percent(types.input_usd, total);
    types.output_percent = percent(types.output_usd, total);
    types.cache_read_percent = percent(types.cache_read_usd, total);
    types.cache_write_percent = percent(types.cache_write_usd, total);
    UsageReport {
        totals,
        by_agent: ranked(agents, total),
        by_model: ranked(models, total),
        by_provider: ranked(providers, total),
        by_cost_type: types,
    }
}

/// `part` as a percentage of `whole`; 0 when there is nothing to divide.
pub(crate) fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole * 100.0
    } else {
        0.0
    }
}

fn ranked(map: HashMap<&str, (Breakdown, i128)>, total: f64) -> Vec<Breakdown> {
    let mut rows: Vec<Breakdown> = map
        .into_values()
        .map(|(mut b, nusd)| {
            b.cost_usd = usd(nusd);
            b.percent = percent(b.cost_usd, total);
            b
        })
        .collect();
    rows.sort_by(|a, b| {
        b.cost_usd
            .total_cmp(&a.cost_usd)
            .then(b.requests.cmp(&a.requests))
            .then_with(|| a.key.cmp(&b.key))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(agent: &str, provider: &str, model: &str, known: bool, requests: u64, usd: f64) -> GroupSums {
        GroupSums {
            agent: agent.into(),
            provider: provider.into(),
            model: model.into(),
            cost_known: known,
            requests,
            input_tokens: 100 * requests,
            output_tokens: 10 * requests,
            input_nusd: (usd * 0.25e9) as i128,
            output_nusd: (usd * 0.75e9) as i128,
            total_nusd: (usd * 1e9) as i128,
            ..GroupSums::default()
        }
    }

    #[test]
    fn breakdowns_merge_groups_and_rank_by_cost() {
        let groups = [
            group("main", "openai", "gpt", true, 2, 3.0),
            group("main", "anthropic", "claude", true, 1, 1.0),
            group("title", "openai", "gpt", true, 5, 0.0),
            group("main", "local", "llama", false, 4, 0.0),
        ];
        let r = assemble(&groups, Distinct::default());
        assert_eq!(r.totals.cost_usd, 4.0);
        assert_eq!(r.totals.requests, 12);
        assert_eq!(r.totals.unknown_cost_requests, 4);
        assert_eq!(r.totals.unknown_cost_input_tokens, 400);
        let models: Vec<(&str, f64, u64)> = r
            .by_model
            .iter()
            .map(|b| (b.key.as_str(), b.percent, b.requests))
            .collect();
        assert_eq!(models, [("gpt", 75.0, 7), ("claude", 25.0, 1), ("llama", 0.0, 4)]);
        assert_eq!(r.by_agent[0].key, "main");
        assert_eq!(r.by_agent[0].unknown_cost_requests, 4);
        assert_eq!(r.by_agent[1].key, "title");
        assert_eq!(r.by_cost_type.input_percent, 25.0);
        assert_eq!(r.by_cost_type.output_percent, 75.0);
    }

    #[test]
    fn zero_cost_gives_zero_percentages() {
        let r = assemble(&[group("main", "local", "llama", false, 3, 0.0)], Distinct::default());
        assert_eq!(r.by_model[0].percent, 0.0);
        assert_eq!(r.by_cost_type.input_percent, 0.0);
        assert!(assemble(&[], Distinct::default()).by_agent.is_empty());
    }
}
