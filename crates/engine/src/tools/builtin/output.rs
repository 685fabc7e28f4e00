//! Command output kept within a byte cap: the beginning and the end survive,
//! the middle is dropped and counted. Build logs put the command's own
//! header first and the error last, so both ends matter more than the middle.

use std::collections::VecDeque;

/// Output collected up to a cap, keeping its head and tail.
pub(super) struct CappedOutput {
    cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    /// Bytes pushed in all, kept or not.
    total: usize,
}

impl CappedOutput {
    pub(super) fn new(cap: usize) -> Self {
        CappedOutput {
            cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    fn head_cap(&self) -> usize {
        self.cap / 2
    }

    fn tail_cap(&self) -> usize {
        self.cap - self.head_cap()
    }

    pub(super) fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len();
        let room = self.head_cap().saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        self.tail.extend(rest);
        let excess = self.tail.len().saturating_sub(self.tail_cap());
        self.tail.drain(..excess);
    }

    /// The text: whole if it fit, else head, a note of the bytes cut, and
    /// tail. Invalid UTF-8 is replaced; characters split by the cut are
    /// dropped rather than shown as garbage.
    pub(super) fn finish(self) -> String {
        let kept = self.head.len() + self.tail.len();
        let tail_bytes: Vec<u8> = self.tail.into_iter().collect();
        if kept == self.total {
            let mut all = self.head;
            all.extend_from_slice(&tail_bytes);
            return String::from_utf8_lossy(&all).into_owned();
        }
        let cut = self.total - kept;
        let head = String::from_utf8_lossy(without_partial_end(&self.head)).into_owned();
        let tail = String::from_utf8_lossy(without_partial_start(&tail_bytes)).into_owned();
        format!("{head}\n[… {cut} bytes of output cut …]\n{tail}")
    }
}

/// `bytes` without an incomplete UTF-8 sequence at its end.
fn without_partial_end(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        Err(e) if e.error_len().is_none() => &bytes[..e.valid_up_to()],
        _ => bytes,
    }
}

/// `bytes` without UTF-8 continuation bytes at its start (the rest of a
/// character whose beginning was cut).
fn without_partial_start(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
        .count();
    &bytes[skip..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut out = CappedOutput::new(100);
        out.push(b"hello ");
        out.push(b"world");
        assert_eq!(out.finish(), "hello world");
    }

    #[test]
    fn large_output_keeps_head_and_tail_and_counts_the_cut() {
        let mut out = CappedOutput::new(10);
        for chunk in [&b"0123"[..], b"456789", b"abcdefghij"] {
            out.push(chunk);
        }
        assert_eq!(out.finish(), "01234\n[… 10 bytes of output cut …]\nfghij");
    }

    #[test]
    fn characters_split_by_the_cut_are_dropped() {
        let mut out = CappedOutput::new(6);
        // The 3-byte head ends in the first byte of é; the 3-byte tail starts
        // with the last byte of another.
        out.push("aaé".as_bytes());
        out.push("xxxxéé".as_bytes());
        assert_eq!(out.finish(), "aa\n[… 6 bytes of output cut …]\né");
    }
}
