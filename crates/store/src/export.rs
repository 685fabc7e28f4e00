//! `:Mia costs export {csv|json} [since] [until]`: every usage row of a
//! time range as text for finance, one line per recorded request.
//!
//! - Rows are read in time order through `usage_by_time` and written straight
//!   into text chunks of [`CHUNK_ROWS`] lines, so the rows themselves are never
//!   held; Lua appends the chunks to a buffer one at a time.
//! - CSV follows RFC 4180: a header line, fields with a comma, quote, CR or
//!   LF quoted with quotes doubled. A text field that starts with `=`, `+`,
//!   `-`, `@`, a tab or a CR gets a leading `'`, so a spreadsheet shows it
//!   instead of running it as a formula.
//! - JSON is one array, one object per line.
//! - `mode` and `project` come from the row's session (its mode as last set
//!   and its working directory); both are empty for calls outside a session.
//!   A cost the model had no price for is empty (CSV) or `null` (JSON).

use std::fmt::Write as _;
use std::path::Path;

use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};

use super::error::{from_sqlite, StoreError};
use mia_cost::DAY_MS;

/// Lines per chunk handed to Lua (one buffer append each).
pub const CHUNK_ROWS: usize = 2000;

/// The columns, in order (the CSV header, the JSON keys).
pub const COLUMNS: [&str; 14] = [
    "time",
    "session_id",
    "provider",
    "model",
    "agent",
    "mode",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost_usd",
    "cost_source",
    "project",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExportFormat {
    Csv,
    Json,
}

/// What to export: rows recorded in `[from_ms, to_ms)` (open ends unbounded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportQuery {
    pub format: ExportFormat,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
}

/// The export as text chunks (each whole lines joined by `\n`, no trailing
/// newline) and the number of rows in it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Export {
    pub chunks: Vec<String>,
    pub rows: u64,
}

/// The start (ms) of local calendar day `date` (`YYYY-MM-DD`) at UTC +
/// `utc_offset_s`, or why the text is not such a date.
pub fn day_start(date: &str, utc_offset_s: i32) -> Result<i64, String> {
    let bad = || format!("`{date}` is not a date: use YYYY-MM-DD (e.g. 2026-01-31)");
    let b = date.as_bytes();
    let digits = b
        .iter()
        .enumerate()
        .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' || !digits {
        return Err(bad());
    }
    let num = |s: &str| s.parse::<u16>().map_err(|_| bad());
    let (y, m, d) = (num(&date[0..4])?, num(&date[5..7])?, num(&date[8..10])?);
    let month = u8::try_from(m)
        .ok()
        .and_then(|m| time::Month::try_from(m).ok())
        .ok_or_else(bad)?;
    let day =
        time::Date::from_calendar_date(i32::from(y), month, u8::try_from(d).map_err(|_| bad())?).map_err(|_| bad())?;
    // Julian day 2440588 is 1970-01-01.
    let days = i64::from(day.to_julian_day()) - 2_440_588;
    Ok(days * DAY_MS - i64::from(utc_offset_s) * 1000)
}

/// The range of `since` and `until` (inclusive local days; either may be
/// absent), or the error to show.
pub fn range(
    since: Option<&str>,
    until: Option<&str>,
    utc_offset_s: i32,
) -> Result<(Option<i64>, Option<i64>), String> {
    let from = since.map(|s| day_start(s, utc_offset_s)).transpose()?;
    let to = until
        .map(|s| day_start(s, utc_offset_s).map(|t| t + DAY_MS))
        .transpose()?;
    if let (Some(f), Some(t), Some(s), Some(u)) = (from, to, since, until) {
        if t <= f {
            return Err(format!("the range ends ({u}) before it starts ({s})"));
        }
    }
    Ok((from, to))
}

/// UTC ISO 8601 with milliseconds: `2026-01-31T09:05:00.250Z`.
pub fn iso_utc(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// One CSV text field: guarded against formulas, quoted when needed.
pub fn csv_text(out: &mut String, s: &str) {
    let guard = s.starts_with(['=', '+', '-', '@', '\t', '\r']);
    if guard || s.contains([',', '"', '\r', '\n']) {
        out.push('"');
        if guard {
            out.push('\'');
        }
        for c in s.chars() {
            if c == '"' {
                out.push('"');
            }
            out.push(c);
        }
        out.push('"');
    } else {
        out.push_str(s);
    }
}

/// One usage row as the export shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub created_at_ms: i64,
    pub session_id: Option<String>,
    pub provider: String,
    pub model: String,
    pub agent: String,
    pub mode: Option<String>,
    pub tokens: [i64; 5],
    pub cost_usd: Option<f64>,
    pub cost_source: String,
    pub project: Option<String>,
}

/// Appends `line` to `out` (no newline) in `format`.
pub fn write_line(out: &mut String, format: ExportFormat, line: &Line) {
    match format {
        ExportFormat::Csv => {
            out.push_str(&iso_utc(line.created_at_ms));
            for text in [
                line.session_id.as_deref().unwrap_or(""),
                &line.provider,
                &line.model,
                &line.agent,
                line.mode.as_deref().unwrap_or(""),
            ] {
                out.push(',');
                csv_text(out, text);
            }
            for n in line.tokens {
                let _ = write!(out, ",{n}");
            }
            out.push(',');
            if let Some(usd) = line.cost_usd {
                let _ = write!(out, "{usd}");
            }
            out.push(',');
            csv_text(out, &line.cost_source);
            out.push(',');
            csv_text(out, line.project.as_deref().unwrap_or(""));
        }
        ExportFormat::Json => {
            let t = line.tokens;
            let v = serde_json::json!({
                "time": iso_utc(line.created_at_ms),
                "session_id": line.session_id,
                "provider": line.provider,
                "model": line.model,
                "agent": line.agent,
                "mode": line.mode,
                "input_tokens": t[0],
                "output_tokens": t[1],
                "cache_read_tokens": t[2],
                "cache_write_tokens": t[3],
                "reasoning_tokens": t[4],
                "cost_usd": line.cost_usd,
                "cost_source": line.cost_source,
                "project": line.project,
            });
            out.push_str(&v.to_string());
        }
    }
}

/// Collects lines into chunks of [`CHUNK_ROWS`].
struct Chunks {
    format: ExportFormat,
    done: Vec<String>,
    current: String,
    in_current: usize,
    rows: u64,
}

impl Chunks {
    fn new(format: ExportFormat) -> Chunks {
        let mut c = Chunks {
            format,
            done: Vec::new(),
            current: String::new(),
            in_current: 0,
            rows: 0,
        };
        match format {
            ExportFormat::Csv => c.raw(&COLUMNS.join(",")),
            ExportFormat::Json => c.raw("["),
        }
        c
    }

    fn raw(&mut self, text: &str) {
        if self.in_current > 0 {
            self.current.push('\n');
        }
        self.current.push_str(text);
        self.in_current += 1;
        if self.in_current >= CHUNK_ROWS {
            self.done.push(std::mem::take(&mut self.current));
            self.in_current = 0;
        }
    }

    fn row(&mut self, line: &Line) {
        let mut text = String::with_capacity(160);
        if self.format == ExportFormat::Json && self.rows > 0 {
            // The separator closes the previous line; a line holds one object.
            self.comma();
        }
        write_line(&mut text, self.format, line);
        self.raw(&text);
        self.rows += 1;
    }

    /// Appends "," to the last line written.
    fn comma(&mut self) {
        if self.in_current > 0 {
            self.current.push(',');
        } else if let Some(last) = self.done.last_mut() {
            last.push(',');
        }
    }

    fn finish(mut self) -> Export {
        if self.format == ExportFormat::Json {
            self.raw("]");
        }
        if self.in_current > 0 {
            self.done.push(self.current);
        }
        Export {
            chunks: self.done,
            rows: self.rows,
        }
    }
}

/// The export of `q`, read on `conn` (blocking).
pub(crate) fn export(conn: &Connection, path: &Path, q: &ExportQuery) -> Result<Export, StoreError> {
    let err = |e: rusqlite::Error| from_sqlite(path, "exporting usage", &e);
    let mut stmt = conn
        .prepare_cached(
            "SELECT u.created_at_ms, u.session_id, u.provider, u.model, u.agent, s.mode,
                    u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens,
                    u.cost_known, u.total_usd, u.cost_source, s.cwd
             FROM usage AS u LEFT JOIN sessions AS s ON s.id = u.session_id
             WHERE u.created_at_ms >= ?1 AND u.created_at_ms < ?2
             ORDER BY u.created_at_ms, u.id",
        )
        .map_err(err)?;
    let mut rows = stmt
        .query(params![q.from_ms.unwrap_or(i64::MIN), q.to_ms.unwrap_or(i64::MAX)])
        .map_err(err)?;
    let mut chunks = Chunks::new(q.format);
    while let Some(r) = rows.next().map_err(err)? {
        let known: bool = r.get(11).map_err(err)?;
        let usd: f64 = r.get(12).map_err(err)?;
        let line = Line {
            created_at_ms: r.get(0).map_err(err)?,
            session_id: r.get(1).map_err(err)?,
            provider: r.get(2).map_err(err)?,
            model: r.get(3).map_err(err)?,
            agent: r.get(4).map_err(err)?,
            mode: r.get(5).map_err(err)?,
            tokens: [
                r.get(6).map_err(err)?,
                r.get(7).map_err(err)?,
                r.get(8).map_err(err)?,
                r.get(9).map_err(err)?,
                r.get(10).map_err(err)?,
            ],
            cost_usd: (known && usd.is_finite()).then_some(usd),
            cost_source: r.get(13).map_err(err)?,
            project: r.get(14).map_err(err)?,
        };
        chunks.row(&line);
    }
    Ok(chunks.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(model: &str) -> Line {
        Line {
            created_at_ms: 1_764_614_700_250,
            session_id: Some("s1".into()),
            provider: "scn".into(),
            model: model.into(),
            agent: "mia".into(),
            mode: Some("build".into()),
            tokens: [12, 3, 4, 0, 1],
            cost_usd: Some(0.000415),
            cost_source: "gateway".into(),
            project: Some("/work/a,b".into()),
        }
    }

    fn csv(l: &Line) -> String {
        let mut s = String::new();
        write_line(&mut s, ExportFormat::Csv, l);
        s
    }

    #[test]
    fn csv_rows_quote_per_rfc_4180_and_guard_formulas() {
        assert_eq!(
            csv(&line("echo")),
            "2025-12-01T18:45:00.250Z,s1,scn,echo,mia,build,12,3,4,0,1,0.000415,gateway,\"/work/a,b\""
        );
        let mut l = line("say \"hi\"\nnow");
        l.cost_usd = None;
        l.session_id = None;
        l.mode = None;
        l.project = None;
        assert_eq!(
            csv(&l),
            "2025-12-01T18:45:00.250Z,,scn,\"say \"\"hi\"\"\nnow\",mia,,12,3,4,0,1,,gateway,"
        );
        for (model, shown) in [
            ("=HYPERLINK(\"x\")", "\"'=HYPERLINK(\"\"x\"\")\""),
            ("+1", "\"'+1\""),
            ("-2+3", "\"'-2+3\""),
            ("@SUM(A1)", "\"'@SUM(A1)\""),
            ("\tx", "\"'\tx\""),
            ("a=b", "a=b"),
        ] {
            let row = csv(&line(model));
            assert!(row.contains(&format!(",{shown},")), "{model:?}: {row}");
        }
    }

    #[test]
    fn json_rows_are_one_object_per_line_and_parse() {
        let mut c = Chunks::new(ExportFormat::Json);
        for i in 0..(CHUNK_ROWS + 2) {
            let mut l = line(if i % 2 == 0 { "=x" } else { "m\"\n" });
            l.created_at_ms += i as i64;
            c.row(&l);
        }
        let out = c.finish();
        assert_eq!(out.rows, (CHUNK_ROWS + 2) as u64);
        assert_eq!(out.chunks.len(), 2);
        let text = out.chunks.join("\n");
        assert_eq!(text.lines().count(), CHUNK_ROWS + 4);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let rows = v.as_array().unwrap();
        assert_eq!(rows.len(), CHUNK_ROWS + 2);
        assert_eq!(rows[0]["model"], "=x", "JSON is not guarded: no spreadsheet reads it");
        assert_eq!(rows[1]["model"], "m\"\n");
        assert_eq!(rows[1]["time"], "2025-12-01T18:45:00.251Z");
        assert_eq!(rows[0]["cost_usd"], 0.000415);
        assert_eq!(rows[0]["project"], "/work/a,b");
    }

    #[test]
    fn an_empty_json_export_is_an_empty_array() {
        let out = Chunks::new(ExportFormat::Json).finish();
        let v: serde_json::Value = serde_json::from_str(&out.chunks.join("\n")).unwrap();
        assert_eq!(v, serde_json::json!([]));
        let out = Chunks::new(ExportFormat::Csv).finish();
        assert_eq!(out.chunks, vec![COLUMNS.join(",")]);
    }

    #[test]
    fn dates_are_inclusive_local_days() {
        assert_eq!(day_start("1970-01-01", 0), Ok(0));
        assert_eq!(day_start("2025-12-01", 0), Ok(1_764_547_200_000));
        // At UTC+2 a local day starts two hours before the UTC one.
        assert_eq!(day_start("2025-12-01", 7200), Ok(1_764_547_200_000 - 7_200_000));
        let (from, to) = range(Some("2025-12-01"), Some("2025-12-01"), 0).unwrap();
        assert_eq!((from, to), (Some(1_764_547_200_000), Some(1_764_547_200_000 + DAY_MS)));
        assert_eq!(range(None, None, 0), Ok((None, None)));
        for bad in [
            "2025-13-01",
            "2025-02-30",
            "25-12-01",
            "2025/12/01",
            "yesterday",
            "2025-12-1",
            "+025-12-01",
        ] {
            assert!(day_start(bad, 0).unwrap_err().contains("YYYY-MM-DD"), "{bad}");
        }
        assert!(range(Some("2025-12-02"), Some("2025-12-01"), 0)
            .unwrap_err()
            .contains("before it starts"));
    }

    #[test]
    fn iso_times_are_utc_with_milliseconds() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_utc(1_764_614_700_250), "2025-12-01T18:45:00.250Z");
    }
}
