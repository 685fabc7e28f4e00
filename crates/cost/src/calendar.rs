//! Days as budgets and reports count them: local calendar days, given the
//! user's offset from UTC (Lua knows the time zone; the core only gets the
//! offset).

use std::time::{SystemTime, UNIX_EPOCH};

/// One day in milliseconds.
pub const DAY_MS: i64 = 86_400_000;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Start and end (ms since the epoch) of the local calendar day containing `now_ms`.
pub fn local_day(now_ms: i64, utc_offset_s: i32) -> (i64, i64) {
    let local_s = now_ms.div_euclid(1000) + i64::from(utc_offset_s);
    let start = local_s.div_euclid(86_400) * 86_400 - i64::from(utc_offset_s);
    (start * 1000, (start + 86_400) * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_day_starts_at_local_midnight() {
        // 2024-03-10T02:00Z is 07:30 on 2024-03-10 at UTC+5:30; that day began at 2024-03-09T18:30Z.
        let t = 1_710_036_000_000;
        let (start, end) = local_day(t, 5 * 3600 + 1800);
        assert_eq!(start, 1_710_009_000_000);
        assert_eq!(end - start, DAY_MS);
        assert_eq!(
            local_day(start, 5 * 3600 + 1800).0,
            start,
            "midnight belongs to its own day"
        );
    }
}
