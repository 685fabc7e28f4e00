//! Money over time: per-day cost buckets for the chart, and the spend that
//! budgets check before every request.
//!
//! Like reports, these filter on `usage.created_at_ms` and add up only rows
//! with `cost_known`. The chart reads the usage rollup (hours and days, see
//! [`super::rollup`]) and sums nano-dollars like reports; the spend that
//! budgets check runs on the `usage_by_time` and `usage_by_session`
//! covering indexes without reading the table.

use std::path::Path;

use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};

use super::error::{from_sqlite, StoreError};
use super::reports::{count, usd};
use super::rollup::window_cost;
use super::schema::nusd;

/// One local calendar day of [`crate::Store::daily_costs`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DayCost {
    /// `YYYY-MM-DD` in the caller's local time.
    pub day: String,
    /// Known cost recorded that day.
    pub cost_usd: f64,
    /// Every call recorded that day, priced or not.
    pub requests: u64,
}

/// What has been spent so far, for budget checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    /// Known cost of every call made for the session, ever.
    pub session_usd: f64,
    /// Known cost of every call in `[day_start_ms, day_end_ms)`, in every
    /// session and by every process sharing the file.
    pub day_usd: f64,
}

const DAY_MS: i64 = 86_400_000;

/// Most days one `daily_costs` call returns (a century); beyond that the
/// caller almost certainly passed a bad number.
pub const MAX_DAYS: u32 = 36_600;

/// The window of `days` local calendar days starting with the day that
/// contains `from_ms`, as `(start_ms, first_day_index)`: `start_ms` is that
/// day's local midnight in UTC milliseconds, `first_day_index` its number of
/// days since 1970-01-01 (local).
pub(crate) fn day_window(from_ms: i64, tz_offset_s: i32) -> (i64, i64) {
    let tz_ms = i64::from(tz_offset_s) * 1000;
    let first_day = from_ms.saturating_add(tz_ms).div_euclid(DAY_MS);
    (first_day * DAY_MS - tz_ms, first_day)
}

/// `YYYY-MM-DD` of a day counted from 1970-01-01.
pub(crate) fn day_label(days_since_epoch: i64) -> String {
    const UNIX_EPOCH_JULIAN_DAY: i64 = 2_440_588;
    i32::try_from(days_since_epoch + UNIX_EPOCH_JULIAN_DAY)
        .ok()
        .and_then(|jd| time::Date::from_julian_day(jd).ok())
        .map(|d| format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day()))
        .unwrap_or_else(|| format!("day {days_since_epoch}"))
}

/// Where [`daily_costs`] reads its sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The usage rollup: hours and days (what the UI uses).
    Rollup,
    /// The usage rows alone: what the rollup must equal, for tests and benches.
    Rows,
}

pub(crate) fn daily_costs(
    conn: &Connection,
    path: &Path,
    from_ms: i64,
    days: u32,
    tz_offset_s: i32,
    source: Source,
) -> Result<Vec<DayCost>, StoreError> {
    if days > MAX_DAYS {
        return Err(StoreError::InvalidInput {
            detail: format!("daily_costs for {days} days; at most {MAX_DAYS} are supported"),
        });
    }
    let err = |e: rusqlite::Error| from_sqlite(path, "summing daily costs", &e);
    let (start_ms, first_day) = day_window(from_ms, tz_offset_s);
    // One read transaction, so every day sees the same rows.
    let tx = conn.unchecked_transaction().map_err(err)?;
    let mut out = Vec::with_capacity(days as usize);
    for i in 0..i64::from(days) {
        let from = start_ms.saturating_add(i * DAY_MS);
        let to = from.saturating_add(DAY_MS);
        let (nusd, requests) = match source {
            Source::Rollup => window_cost(&tx, from, to).map_err(err)?,
            Source::Rows => {
                // One range query per day over `usage_by_time`: each is an
                // index range scan with no sort, where a single GROUP BY over
                // the window would sort every row.
                let (cost, requests): (Option<i64>, i64) = tx
                    .prepare_cached(concat!(
                        "SELECT sum(CASE WHEN cost_known THEN ",
                        nusd!("total_usd"),
                        " END), count(*) FROM usage WHERE created_at_ms >= ?1 AND created_at_ms < ?2"
                    ))
                    .and_then(|mut s| s.query_row(params![from, to], |r| Ok((r.get(0)?, r.get(1)?))))
                    .map_err(err)?;
                (i128::from(cost.unwrap_or(0)), count(requests))
            }
        };
        out.push(DayCost {
            day: day_label(first_day + i),
            cost_usd: usd(nusd),
            requests,
        });
    }
    Ok(out)
}

pub(crate) fn spend(
    conn: &Connection,
    path: &Path,
    session_id: &str,
    day_start_ms: i64,
    day_end_ms: i64,
) -> Result<Spend, StoreError> {
    let err = |e: rusqlite::Error| from_sqlite(path, "reading spend", &e);
    let session_usd = conn
        .prepare_cached("SELECT total(total_usd) FROM usage WHERE session_id = ?1 AND cost_known = 1")
        .and_then(|mut s| s.query_row([session_id], |r| r.get(0)))
        .map_err(err)?;
    let day_usd = conn
        .prepare_cached(
            "SELECT total(total_usd) FROM usage WHERE created_at_ms >= ?1 AND created_at_ms < ?2 AND cost_known = 1",
        )
        .and_then(|mut s| s.query_row([day_start_ms, day_end_ms], |r| r.get(0)))
        .map_err(err)?;
    Ok(Spend { session_usd, day_usd })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_window_starts_at_local_midnight() {
        // 2024-03-10T23:30:00Z is 2024-03-11 01:30 at UTC+2: that day starts 2024-03-10T22:00Z.
        let t = 1_710_113_400_000;
        let (start, day) = day_window(t, 7200);
        assert_eq!(start, 1_710_108_000_000);
        assert_eq!(day_label(day), "2024-03-11");
        // At UTC-5 the same instant is 2024-03-10 18:30, a day starting 05:00Z.
        let (start, day) = day_window(t, -18_000);
        assert_eq!(start, 1_710_046_800_000);
        assert_eq!(day_label(day), "2024-03-10");
    }

    #[test]
    fn day_labels_cross_months_leap_days_and_the_epoch() {
        assert_eq!(day_label(0), "1970-01-01");
        assert_eq!(day_label(-1), "1969-12-31");
        assert_eq!(day_label(19_782), "2024-02-29");
        assert_eq!(day_label(19_783), "2024-03-01");
    }
}
