//! What an app has spent, kept in memory beside the store: the figures the
//! budgets check when the store cannot be read (it could not be opened, or
//! a read failed), so that a limit still holds. It knows only the calls it
//! recorded since it was made, so it can only say less than the store
//! would; a limit it shows reached is reached. The app that owns the store
//! owns one ([`Ledger`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

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
struct Figures {
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

/// One app's spend in memory (see the module's doc).
#[derive(Default)]
pub struct Ledger(Mutex<Figures>);

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").finish_non_exhaustive()
    }
}

impl Ledger {
    fn figures(&self) -> MutexGuard<'_, Figures> {
        // Each change is one push or one addition: a panic cannot leave it half made.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a priced call of `usd` made at `created_at_ms`, for `session` if
    /// it belongs to one. A figure that is not a finite amount ≥ 0 counts as 0.
    pub fn record(&self, session: Option<&str>, created_at_ms: i64, usd: f64) {
        let usd = if usd.is_finite() && usd > 0.0 { usd } else { 0.0 };
        let mut l = self.figures();
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

    /// What this ledger's app has spent on `session` (0 for `""`) and in
    /// `[day_start_ms, day_end_ms)`.
    pub fn spend(&self, session: &str, day_start_ms: i64, day_end_ms: i64) -> Spend {
        let l = self.figures();
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_and_days_add_up_apart() {
        let l = Ledger::default();
        let day = 1_000 * crate::DAY_MS;
        l.record(Some("ledger-a"), day + 10, 0.25);
        l.record(Some("ledger-a"), day + 20, 0.5);
        l.record(Some("ledger-b"), day + 30, 1.0);
        l.record(None, day + 40, 2.0);
        l.record(Some("ledger-a"), day - 1, 4.0); // the day before
        let s = l.spend("ledger-a", day, day + crate::DAY_MS);
        assert_eq!(s.session_usd, 4.75);
        assert_eq!(s.day_usd, 3.75);
        assert_eq!(l.spend("", day, day + crate::DAY_MS).session_usd, 0.0);
        assert_eq!(l.spend("ledger-unknown", day, day + 1).session_usd, 0.0);
    }

    #[test]
    fn a_long_session_id_is_kept_as_its_hash_and_still_adds_up() {
        let l = Ledger::default();
        let day = 3_000 * crate::DAY_MS;
        let long = "s".repeat(1_000_000);
        l.record(Some(&long), day, 0.5);
        l.record(Some(&long), day, 0.25);
        assert_eq!(l.spend(&long, day, day + 1).session_usd, 0.75);
        assert_eq!(key(&long).len(), MAX_ID + 1 + 32);
        let mut other = long.clone();
        other.push('t');
        assert_eq!(l.spend(&other, day, day + 1).session_usd, 0.0);
    }

    #[test]
    fn figures_from_outside_that_are_no_amount_count_nothing() {
        let l = Ledger::default();
        let day = 2_000 * crate::DAY_MS;
        for usd in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -3.0] {
            l.record(Some("ledger-c"), day, usd);
        }
        l.record(Some("ledger-c"), day, 0.125);
        let s = l.spend("ledger-c", day, day + 1);
        assert_eq!((s.session_usd, s.day_usd), (0.125, 0.125));
    }
}
