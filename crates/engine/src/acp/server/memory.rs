//! mia-acp's memory bound (`acp.max_memory_mb`): what clients may make it
//! hold at once, whatever they send.
//!
//! Three bounds follow from the one number:
//! - a message from the client is read only up to [`MemoryBound::message_cap`]
//!   (a sixteenth of the bound; see [`super::super::guarded_lines`]);
//! - a turn carries its prompt and the conversation before it several times
//!   over while it runs (the request's parts, its JSON, the provider's
//!   body, the store's row): it is charged [`AMPLIFICATION`] times their
//!   text, from its start to its end;
//! - the conversations of idle sessions are charged once.
//!
//! A prompt whose charge would take the total past the bound is refused
//! with an error that says how much it needs, how much is taken and the
//! option to raise; one that could never fit says so instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How many times a turn holds its text while it runs. Measured (benches/
/// acp_memory.py): a 30 MB prompt to the echo model peaked at 415-443 MB,
/// 14.8 times, with the process's own ~19 MB.
pub const AMPLIFICATION: usize = 16;

/// How many times a message is held while it is read and parsed (the line,
/// the JSON value, the typed request); one large prompt is read at a time
/// (see [`MemoryBound::prompt_taken`]), so one such message is reserved.
const READING: usize = 3;

/// A prompt message larger than this is read one at a time.
pub const LARGE_MESSAGE: usize = MB;

/// What mia-acp holds before any client asks anything (the runtime, the
/// store's cache, the tables; ~19 MB measured), with room to spare.
pub const BASE_BYTES: usize = 48 * MB;

/// The default `acp.max_memory_mb`.
pub const DEFAULT_MB: u64 = 512;

const MB: usize = 1024 * 1024;

/// The bound and the turns charged against it.
#[derive(Debug)]
pub struct MemoryBound {
    limit: usize,
    running: Mutex<HashMap<u64, usize>>,
    /// Wakes the reader once the prompt it passed has been handled.
    taken: tokio::sync::Notify,
}

/// A running turn's share of the bound; dropping it gives the share back.
#[derive(Debug)]
pub struct Charge {
    bound: Arc<MemoryBound>,
    key: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.bound.lock().remove(&self.key);
    }
}

impl MemoryBound {
    pub fn new(limit_mb: u64) -> Arc<MemoryBound> {
        Arc::new(MemoryBound {
            limit: usize::try_from(limit_mb).unwrap_or(usize::MAX / MB).saturating_mul(MB),
            running: Mutex::default(),
            taken: tokio::sync::Notify::new(),
        })
    }

    /// What is set aside before any turn: the process and one message being read.
    fn reserved(&self) -> usize {
        BASE_BYTES + READING * self.message_cap()
    }

    /// A large prompt has reached its handler (admitted or refused): the
    /// reader may read the next one.
    pub fn prompt_taken(&self) {
        self.taken.notify_one();
    }

    /// Waits (at most a second: a prompt the SDK refuses never reaches its
    /// handler) until the large prompt just passed on has been handled, so
    /// that clients cannot queue many large messages at once.
    pub async fn wait_taken(&self) {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.taken.notified()).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, usize>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bound in MB, for messages and the log.
    pub fn limit_mb(&self) -> usize {
        self.limit / MB
    }

    /// Longest message read from the client.
    pub fn message_cap(&self) -> usize {
        (self.limit / 16).clamp(MB, 64 * MB)
    }

    /// Most text (prompt and conversation) one turn can carry.
    pub fn turn_cap(&self) -> usize {
        self.limit.saturating_sub(self.reserved()) / AMPLIFICATION
    }

    /// Charges turn `key` for `text` bytes (its prompt and the conversation
    /// it sends), `idle` being the text the idle sessions hold; the error
    /// says why it does not fit.
    pub fn admit(self: &Arc<Self>, key: u64, text: usize, idle: usize) -> Result<Charge, String> {
        let need = text.saturating_mul(AMPLIFICATION);
        if text > self.turn_cap() {
            return Err(format!(
                "mia-acp: this prompt and the conversation before it hold {} of text; within its memory bound \
                 (acp.max_memory_mb = {}) mia-acp runs a turn of at most {}. Send less (attach large files by \
                 link rather than by content), start a new session or /compact this one, or raise \
                 acp.max_memory_mb (see mia-acp-limits in doc/mia.txt).",
                mb(text),
                self.limit_mb(),
                mb(self.turn_cap())
            ));
        }
        let mut running = self.lock();
        let taken: usize = running.values().sum::<usize>() + idle + self.reserved();
        if taken.saturating_add(need) > self.limit {
            return Err(format!(
                "mia-acp: this turn needs {} of memory and {} of the {} MB bound (acp.max_memory_mb) are taken \
                 by {} running turn(s) and the sessions' conversations. Wait for a turn to end, or raise \
                 acp.max_memory_mb (see mia-acp-limits in doc/mia.txt).",
                mb(need),
                mb(taken),
                self.limit_mb(),
                running.len()
            ));
        }
        running.insert(key, need);
        Ok(Charge {
            bound: self.clone(),
            key,
        })
    }
}

fn mb(bytes: usize) -> String {
    format!("{:.1} MB", bytes as f64 / MB as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_are_admitted_until_the_bound_and_an_ended_one_gives_its_share_back() {
        let b = MemoryBound::new(512);
        assert_eq!(b.reserved(), 48 * MB + 96 * MB);
        let text = 7 * MB; // 112 MB charged each
        let one = b.admit(1, text, 0).expect("fits");
        let two = b.admit(2, text, 0).expect("fits");
        let three = b.admit(3, text, 0).expect("fits");
        let refused = b.admit(4, text, 0).expect_err("144 + 4 × 112 > 512");
        assert!(refused.contains("acp.max_memory_mb"), "{refused}");
        assert!(refused.contains("3 running turn(s)"), "{refused}");
        drop(two);
        let four = b.admit(4, text, 0).expect("room again");
        drop((one, three, four));
        assert!(b.lock().is_empty());
    }

    #[test]
    fn a_turn_that_could_never_fit_says_so_and_idle_conversations_count() {
        let b = MemoryBound::new(512);
        assert_eq!(b.turn_cap(), 23 * MB);
        let e = b.admit(1, 30 * MB, 0).expect_err("never fits");
        assert!(e.contains("30.0 MB of text"), "{e}");
        assert!(b.admit(1, 20 * MB, 50 * MB).is_err(), "144 + 50 + 320 > 512");
        assert!(b.admit(1, 20 * MB, 0).is_ok());
        assert_eq!(b.message_cap(), 32 * MB);
        assert_eq!(MemoryBound::new(8192).message_cap(), 64 * MB);
    }
}
