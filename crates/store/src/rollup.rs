//! Reports read from the usage rollup (schema version 3) instead of the rows.
//!
//! The rollup sums usage per UTC hour and per UTC day (see `schema::V3`). A
//! time window `[from, to)` is cut into the pieces that cover it exactly
//! ([`split`]): whole days where it can, whole hours at the edges of those
//! days, and the rows of a partial hour at either end (a local midnight is
//! a whole hour in UTC for most offsets, so there are usually none). The
//! distinct messages and sessions since `from` come from `usage_ids` and
//! `usage_id_hours`; the daily chart's days from quarter hours. Every sum is an integer, so the answer equals the one
//! summed from the rows, exactly; tests check that it always does.

use std::path::Path;

use rusqlite::{params, Connection};

use super::error::{from_sqlite, StoreError};
use super::reports::{assemble, count, Accumulator, ReportQuery, UsageReport, ROW_COLUMNS};
use super::schema::nusd;

pub(crate) const HOUR_MS: i64 = 3_600_000;
const HOURS_PER_DAY: i128 = 24;

/// One part of a time window and where its usage is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Usage rows with `from <= created_at_ms <= last` (inclusive, so the
    /// last millisecond there is can be named).
    Rows { from: i64, last: i64 },
    /// `usage_hours` buckets `from..to` (hour numbers since the epoch).
    Hours { from: i64, to: i64 },
    /// `usage_days` buckets `from..to` (day numbers since the epoch).
    Days { from: i64, to: i64 },
}

fn ceil_div(a: i128, b: i128) -> i128 {
    -(-a).div_euclid(b)
}

/// A bucket number or a row bound that may lie past `i64` (only at the
/// ends of time, where there is no usage): clamped, which keeps it exact.
fn clamp(x: i128) -> i64 {
    x.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The pieces that cover `[from, to)` exactly once (`None`: unbounded),
/// fewest rows first: whole days, then whole hours, then rows.
pub(crate) fn split(from: Option<i64>, to: Option<i64>) -> Vec<Piece> {
    let h = i128::from(HOUR_MS);
    // The whole hours inside the window: `lo_h..hi_h`.
    let lo_h = from.map(|a| ceil_div(i128::from(a), h));
    let hi_h = to.map(|b| i128::from(b).div_euclid(h));
    let mut pieces = Vec::new();
    let rows = |pieces: &mut Vec<Piece>, from: i128, end: i128| {
        // Rows in [from, end): no usage row lies outside i64, so clamping is exact.
        if from < end && end > i128::from(i64::MIN) && from <= i128::from(i64::MAX) {
            pieces.push(Piece::Rows {
                from: clamp(from),
                last: clamp(end - 1),
            });
        }
    };
    if let (Some(a), Some(b), Some(l), Some(u)) = (from, to, lo_h, hi_h) {
        if l >= u {
            rows(&mut pieces, i128::from(a), i128::from(b));
            return pieces;
        }
    }
    // The whole days inside those hours: `lo_d..hi_d`.
    let lo_d = lo_h.map(|l| ceil_div(l, HOURS_PER_DAY));
    let hi_d = hi_h.map(|u| u.div_euclid(HOURS_PER_DAY));
    if let (Some(a), Some(l)) = (from, lo_h) {
        rows(&mut pieces, i128::from(a), l * h);
    }
    let days = match (lo_d, hi_d) {
        (Some(l), Some(u)) => l < u,
        _ => true,
    };
    if days {
        if let (Some(l), Some(d)) = (lo_h, lo_d) {
            if l < d * HOURS_PER_DAY {
                pieces.push(Piece::Hours {
                    from: clamp(l),
                    to: clamp(d * HOURS_PER_DAY),
                });
            }
        }
        pieces.push(Piece::Days {
            from: lo_d.map_or(i64::MIN, clamp),
            to: hi_d.map_or(i64::MAX, clamp),
        });
        if let (Some(d), Some(u)) = (hi_d, hi_h) {
            if d * HOURS_PER_DAY < u {
                pieces.push(Piece::Hours {
                    from: clamp(d * HOURS_PER_DAY),
                    to: clamp(u),
                });
            }
        }
    } else {
        pieces.push(Piece::Hours {
            from: lo_h.map_or(i64::MIN, clamp),
            to: hi_h.map_or(i64::MAX, clamp),
        });
    }
    if let (Some(b), Some(u)) = (to, hi_h) {
        rows(&mut pieces, u * h, i128::from(b));
    }
    pieces
}

/// What a rollup bucket query selects, in [`Accumulator::add_bucket`]'s order.
const BUCKET_COLUMNS: &str = "agent, provider, model, cost_known, requests, input_tokens, output_tokens,
    max_output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, input_nusd, output_nusd,
    cache_read_nusd, cache_write_nusd, total_nusd, duration_ms, first_at_ms, last_at_ms";

/// The report for an open-ended `q` without a session (the caller checks),
/// from the rollup, in one read transaction so every piece sees the same rows.
pub(crate) fn usage_report(conn: &Connection, path: &Path, q: &ReportQuery) -> Result<UsageReport, StoreError> {
    let err = |e: rusqlite::Error| from_sqlite(path, "building a usage report", &e);
    debug_assert!(q.session_id.is_none() && q.to_ms.is_none());
    let tx = conn.unchecked_transaction().map_err(err)?;
    let (provider, model) = (q.provider.as_deref(), q.model.as_deref());
    let mut acc = Accumulator::new(false);
    for piece in split(q.from_ms, None) {
        let (sql, from, to) = match piece {
            Piece::Rows { from, last } => (
                format!(
                    "SELECT {ROW_COLUMNS} FROM usage WHERE created_at_ms BETWEEN ?1 AND ?2
                     AND (?3 IS NULL OR provider = ?3) AND (?4 IS NULL OR model = ?4)"
                ),
                from,
                last,
            ),
            Piece::Hours { from, to } => (
                format!(
                    "SELECT {BUCKET_COLUMNS} FROM usage_hours WHERE hour >= ?1 AND hour < ?2
                     AND (?3 IS NULL OR provider = ?3) AND (?4 IS NULL OR model = ?4)"
                ),
                from,
                to,
            ),
            Piece::Days { from, to } => (
                format!(
                    "SELECT {BUCKET_COLUMNS} FROM usage_days WHERE day >= ?1 AND day < ?2
                     AND (?3 IS NULL OR provider = ?3) AND (?4 IS NULL OR model = ?4)"
                ),
                from,
                to,
            ),
        };
        let mut stmt = tx.prepare_cached(&sql).map_err(err)?;
        let mut rows = stmt.query(params![from, to, provider, model]).map_err(err)?;
        while let Some(row) = rows.next().map_err(err)? {
            match piece {
                Piece::Rows { .. } => acc.add_row(row),
                _ => acc.add_bucket(row),
            }
            .map_err(err)?;
        }
    }
    let (groups, mut distinct) = acc.finish();
    distinct.messages = ids_since(&tx, q, 0).map_err(err)?;
    distinct.sessions = ids_since(&tx, q, 1).map_err(err)?;
    Ok(assemble(&groups, distinct))
}

/// How many distinct message (`kind` 0) or session (1) ids the rows
/// matching `q` from `q.from_ms` on name: the ids whose last matching row is
/// that late. Those in the hour `from_ms` falls in are counted one by one;
/// whole hours after it are added up.
fn ids_since(conn: &Connection, q: &ReportQuery, kind: i64) -> rusqlite::Result<u64> {
    let shape = i64::from(q.provider.is_some()) | (i64::from(q.model.is_some()) << 1);
    let provider = q.provider.as_deref().unwrap_or("");
    let model = q.model.as_deref().unwrap_or("");
    let (edge, first_hour) = match q.from_ms {
        None => (0, i64::MIN),
        Some(from) => {
            let next_hour = ceil_div(i128::from(from), i128::from(HOUR_MS));
            let last = clamp(next_hour * i128::from(HOUR_MS) - 1);
            let edge: i64 = conn
                .prepare_cached(
                    "SELECT count(*) FROM usage_ids
                     WHERE kind = ?1 AND shape = ?2 AND provider = ?3 AND model = ?4 AND last_ms BETWEEN ?5 AND ?6",
                )?
                .query_row(params![kind, shape, provider, model, from, last], |r| r.get(0))?;
            (edge, clamp(next_hour))
        }
    };
    let hours: i64 = conn
        .prepare_cached(
            "SELECT coalesce(sum(n), 0) FROM usage_id_hours
             WHERE kind = ?1 AND shape = ?2 AND provider = ?3 AND model = ?4 AND hour >= ?5",
        )?
        .query_row(params![kind, shape, provider, model, first_hour], |r| r.get(0))?;
    Ok(count(edge) + count(hours))
}

const QUARTER_MS: i64 = 900_000;

/// Known cost (nano-dollars) and requests in `[from, to)` (a day of the
/// chart), from `usage_quarters`, plus the rows of a partial quarter hour at
/// either end (none at any UTC offset in use).
pub(crate) fn window_cost(conn: &Connection, from: i64, to: i64) -> rusqlite::Result<(i128, u64)> {
    let q = i128::from(QUARTER_MS);
    let lo = ceil_div(i128::from(from), q);
    let hi = i128::from(to).div_euclid(q);
    let mut rows = Vec::new();
    let mut quarters = None;
    if lo >= hi {
        rows.push((i128::from(from), i128::from(to)));
    } else {
        rows.push((i128::from(from), lo * q));
        quarters = Some((clamp(lo), clamp(hi)));
        rows.push((hi * q, i128::from(to)));
    }
    let mut nusd: i128 = 0;
    let mut requests: u64 = 0;
    let mut add = |(cost, n): (Option<i64>, Option<i64>)| {
        nusd += i128::from(cost.unwrap_or(0));
        requests += count(n.unwrap_or(0));
    };
    if let Some((a, b)) = quarters {
        add(conn
            .prepare_cached(
                "SELECT sum(known_nusd), sum(requests) FROM usage_quarters WHERE quarter >= ?1 AND quarter < ?2",
            )?
            .query_row(params![a, b], |r| Ok((r.get(0)?, r.get(1)?)))?);
    }
    for (a, b) in rows {
        if a < b {
            add(conn
                .prepare_cached(concat!(
                    "SELECT sum(CASE WHEN cost_known THEN ",
                    nusd!("total_usd"),
                    " END), count(*) FROM usage WHERE created_at_ms BETWEEN ?1 AND ?2"
                ))?
                .query_row(params![clamp(a), clamp(b - 1)], |r| Ok((r.get(0)?, r.get(1)?)))?);
        }
    }
    Ok((nusd, requests))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = HOUR_MS;
    const D: i64 = 24 * HOUR_MS;

    /// The set of milliseconds a piece covers, as `[start, end)` in ms.
    fn span(p: Piece) -> (i128, i128) {
        let (h, d) = (i128::from(H), i128::from(D));
        match p {
            Piece::Rows { from, last } => (i128::from(from), i128::from(last) + 1),
            Piece::Hours { from, to } => (i128::from(from) * h, i128::from(to) * h),
            Piece::Days { from, to } => (i128::from(from) * d, i128::from(to) * d),
        }
    }

    /// The pieces tile `[from, to)` in order, without gap or overlap.
    fn assert_tiles(from: i64, to: i64) {
        let pieces = split(Some(from), Some(to));
        let mut at = i128::from(from);
        for p in &pieces {
            let (a, b) = span(*p);
            assert!(a < b, "{from}..{to}: empty piece {p:?} in {pieces:?}");
            assert_eq!(a, at, "{from}..{to}: gap or overlap at {p:?} in {pieces:?}");
            at = b;
        }
        assert_eq!(at, i128::from(to), "{from}..{to}: {pieces:?}");
    }

    #[test]
    fn a_local_day_reads_whole_hours_and_a_week_whole_days() {
        // UTC+2: the local day starts at 22:00 UTC the day before.
        let midnight = 20_000 * D - 2 * H;
        assert_eq!(
            split(Some(midnight), Some(midnight + D)),
            [Piece::Hours {
                from: 20_000 * 24 - 2,
                to: 20_000 * 24 + 22
            }]
        );
        assert_eq!(
            split(Some(midnight), None),
            [
                Piece::Hours {
                    from: 20_000 * 24 - 2,
                    to: 20_000 * 24
                },
                Piece::Days {
                    from: 20_000,
                    to: i64::MAX
                }
            ]
        );
        // UTC+5:30: half an hour of rows first.
        let midnight = 20_000 * D - 5 * H - H / 2;
        assert_eq!(
            split(Some(midnight), None)[0],
            Piece::Rows {
                from: midnight,
                last: midnight + H / 2 - 1
            }
        );
        assert_eq!(
            split(None, None),
            [Piece::Days {
                from: i64::MIN,
                to: i64::MAX
            }]
        );
    }

    #[test]
    fn pieces_tile_any_window_exactly() {
        let points = [
            -3 * D - 7,
            -D,
            -1,
            0,
            1,
            H - 1,
            H,
            H + 1,
            5 * H + 1_800_000,
            D - 1,
            D,
            D + 1,
            3 * D + 17,
            40 * D + 5 * H,
        ];
        for &a in &points {
            for &b in &points {
                if a < b {
                    assert_tiles(a, b);
                }
            }
        }
        assert!(split(Some(5), Some(5)).is_empty());
        assert_tiles(i64::MIN, i64::MAX);
        assert_tiles(i64::MAX - 10, i64::MAX);
        assert_tiles(i64::MIN, i64::MIN + 10);
    }

    /// A file written by a version-2 mia (no rollup), with calls across
    /// days, hours, models and ids, then migrated: the backfilled rollup
    /// answers like the rows, and keeps doing so as calls are added.
    #[test]
    fn migrating_an_existing_store_backfills_the_rollup_from_its_rows() {
        use super::super::reports::usage_report_from_rows;
        use super::super::schema::{migrate, MIGRATIONS};
        use super::super::spend::{daily_costs, Source};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.sqlite3");
        let conn = Connection::open(&path).unwrap();
        migrate(&conn, &path, &MIGRATIONS[..2]).unwrap();
        let t0: i64 = 1_710_028_800_000;
        let insert = |conn: &Connection, i: i64| {
            let at = t0 - 10 * D + (i * 7_919_993) % (12 * D);
            conn.execute(
                "INSERT INTO usage (session_id, message_id, agent, provider, model, input_tokens, output_tokens,
                     cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_known, input_usd, output_usd,
                     total_usd, started_at_ms, duration_ms, created_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 3, 4, 5, ?8, ?9, ?10, ?11, ?12, ?13, ?12)",
                params![
                    (i % 9 != 0).then(|| format!("s{}", i % 7)),
                    (i % 11 != 0).then(|| format!("m{}", i % 40)),
                    ["main", "title"][(i % 2) as usize],
                    ["anthropic", "openai"][(i % 3 % 2) as usize],
                    ["claude", "gpt", "mini"][(i % 5 % 3) as usize],
                    100 + i,
                    (i * 37) % 1000 - 3,
                    i % 13 != 0,
                    i as f64 * 1.1e-5,
                    i as f64 * 0.7e-5,
                    i as f64 * 1.8e-5,
                    at,
                    (i % 7) * 1000 - 500,
                ],
            )
            .unwrap();
        };
        for i in 0..600 {
            insert(&conn, i);
        }
        migrate(&conn, &path, MIGRATIONS).unwrap();

        let check = |conn: &Connection| {
            for from_ms in [
                None,
                Some(t0),
                Some(t0 - 6 * D - 2 * H),
                Some(t0 - 3 * D - 5 * H - H / 2 + 17),
            ] {
                for (provider, model) in [
                    (None, None),
                    (Some("openai"), None),
                    (None, Some("gpt")),
                    (Some("anthropic"), Some("mini")),
                ] {
                    let q = ReportQuery {
                        from_ms,
                        provider: provider.map(Into::into),
                        model: model.map(Into::into),
                        ..ReportQuery::default()
                    };
                    let rollup = usage_report(conn, &path, &q).unwrap();
                    assert_eq!(rollup, usage_report_from_rows(conn, &path, &q).unwrap(), "{q:?}");
                    assert!(rollup.totals.requests > 0 && rollup.totals.messages > 0, "{q:?}");
                }
            }
            for tz in [0, 7200, 19_800] {
                let from = t0 - 11 * D;
                assert_eq!(
                    daily_costs(conn, &path, from, 14, tz, Source::Rollup).unwrap(),
                    daily_costs(conn, &path, from, 14, tz, Source::Rows).unwrap()
                );
            }
        };
        check(&conn);
        for i in 600..800 {
            insert(&conn, i);
        }
        check(&conn);
    }
}
