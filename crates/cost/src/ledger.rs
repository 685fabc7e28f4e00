//! What this process has spent, kept in memory beside the store: the
//! figures the budgets check when the store cannot be read (it could not
//! be opened, or a read failed), so that a limit still holds. It knows only
//! the calls this process recorded since it started, so it can only say
//! less than the store would; a limit it shows reached is reached.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::budget::Spend;

/// Priced calls kept for the day's figure, newest last; older ones are
/// dropped first (a heavy day is a few thousand calls).
const MAX_CALLS: usize = 100_000;
/// Sessions whose totals are kept (one per chat session and per
/// `session_id` given to `mia.stream`/`mia.send`).
const MAX_SESSIONS: usize = 10_000;
/// Longest session id kept as it is; a longer one (`mia.stream`'s
/// `session_id` is the caller's) is kept as its SHA-256.
const MAX_ID: usize = 128;

#[derive(Default)]
struct Ledger {
    /// `(created_at_ms, usd)` of each priced call.
    calls: VecDeque<(i64, f64)>,
    /// Session key ([`key`]) → its calls' total.
    sessions: HashMap<Vec<u8>, f64>,
}

/// How a session id is kept: itself, or the SHA-256 of one too long to
/// keep (ids come from the caller's Lua too).
fn key(id: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    if id.len() <= MAX_ID {
        return id.as_bytes().to_vec();
    }
    // Longer than any id kept as it is: the two kinds cannot meet.
    let mut out = vec![0u8; MAX_ID + 1];
    out.extend_from_slice(&Sha256::digest(id.as_bytes()));
    out
}

fn ledger() -> MutexGuard<'static, Ledger> {
    static LEDGER: OnceLock<Mutex<Ledger>> = OnceLock::new();
    // Each change is one push or one addition: a panic cannot leave it half made.
    LEDGER
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Counts a priced call of `usd` made at `created_at_ms`, for `session` if
/// it belongs to one. A figure that is not a finite amount ≥ 0 counts as 0.
pub fn record(session: Option<&str>, created_at_ms: i64, usd: f64) {
    let usd = if usd.is_finite() && usd > 0.0 { usd } else { 0.0 };
    let mut l = ledger();
    if l.calls.len() == MAX_CALLS {
        l.calls.pop_front();
    }
    l.calls.push_back((created_at_ms, usd));
    if let Some(id) = session.filter(|s| !s.is_empty()).map(key) {
        if !l.sessions.contains_key(&id) && l.sessions.len() >= MAX_SESSIONS {
            // Full (ten thousand sessions in one process): some other
            // session's total goes, most likely one long over.
            if let Some(other) = l.sessions.keys().next().cloned() {
                l.sessions.remove(&other);
            }
        }
        *l.sessions.entry(id).or_insert(0.0) += usd;
    }
}

/// What this process has spent on `session` (0 for `""`) and in
/// `[day_start_ms, day_end_ms)`.
pub fn spend(session: &str, day_start_ms: i64, day_end_ms: i64) -> Spend {
    let l = ledger();
    let day_usd = l
        .calls
        .iter()
        .filter(|(at, _)| (day_start_ms..day_end_ms).contains(at))
        .map(|(_, usd)| usd)
        .sum();
    let session_usd = if session.is_empty() {
        0.0
    } else {
        l.sessions.get(&key(session)).copied().unwrap_or(0.0)
    };
    Spend { session_usd, day_usd }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The ledger is one per process and tests run in parallel: each test
    // uses its own sessions and days far from the others'.

    #[test]
    fn sessions_and_days_add_up_apart() {
        let day = 1_000 * crate::DAY_MS;
        record(Some("ledger-a"), day + 10, 0.25);
        record(Some("ledger-a"), day + 20, 0.5);
        record(Some("ledger-b"), day + 30, 1.0);
        record(None, day + 40, 2.0);
        record(Some("ledger-a"), day - 1, 4.0); // the day before
        let s = spend("ledger-a", day, day + crate::DAY_MS);
        assert_eq!(s.session_usd, 4.75);
        assert_eq!(s.day_usd, 3.75);
        assert_eq!(spend("", day, day + crate::DAY_MS).session_usd, 0.0);
        assert_eq!(spend("ledger-unknown", day, day + 1).session_usd, 0.0);
    }

    #[test]
    fn a_long_session_id_is_kept_as_its_hash_and_still_adds_up() {
        let day = 3_000 * crate::DAY_MS;
        let long = "s".repeat(1_000_000);
        record(Some(&long), day, 0.5);
        record(Some(&long), day, 0.25);
        assert_eq!(spend(&long, day, day + 1).session_usd, 0.75);
        assert_eq!(key(&long).len(), MAX_ID + 1 + 32);
        let mut other = long.clone();
        other.push('t');
        assert_eq!(spend(&other, day, day + 1).session_usd, 0.0);
    }

    #[test]
    fn figures_from_outside_that_are_no_amount_count_nothing() {
        let day = 2_000 * crate::DAY_MS;
        for usd in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -3.0] {
            record(Some("ledger-c"), day, usd);
        }
        record(Some("ledger-c"), day, 0.125);
        let s = spend("ledger-c", day, day + 1);
        assert_eq!((s.session_usd, s.day_usd), (0.125, 0.125));
    }
}
