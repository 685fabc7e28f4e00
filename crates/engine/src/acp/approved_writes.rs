//! Edits the user approved in an external agent's permission question, so
//! that the agent's own `fs/write_text_file` of exactly that edit lands
//! without a second review (Gemini CLI asks with a diff, then writes the file
//! through the client).
//!
//! An approval is narrow on purpose, since the agent is outside input: it
//! holds for one write of the same session, to the same file (the physical
//! path, resolved as the write's path is), with byte-for-byte the text the
//! user saw as the new side, while the file still holds byte-for-byte the
//! old side they saw; it is used up by that write, dropped when the turn
//! ends, and forgotten after [`APPROVAL_TTL`]. Only a diff shown whole (not
//! cut for the review, not a fragment of the file, inside the project)
//! becomes an approval. Anything else is reviewed as before.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::permission_diff;

/// How long an approval waits for the agent's write.
pub const APPROVAL_TTL: Duration = Duration::from_secs(300);
/// Most approvals held at once (the oldest goes first).
const MAX_APPROVALS: usize = 8;

/// One edit the user approved: the file, the text they saw it hold, and
/// the text they accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub session_id: String,
    /// The physical path, as the write's path resolves.
    pub path: PathBuf,
    /// The file's text shown as the old side (`None`: a new file).
    pub before: Option<Vec<u8>>,
    /// The text shown as the new side.
    pub after: Vec<u8>,
}

impl Approval {
    /// The approval a permission question's diff stands for, when the user
    /// saw all of it: `old_text` (`None`: the agent sent none) and
    /// `new_text` within the review's bounds, and the old side equal to the
    /// file `on_disk` holds now (`None`: missing). A diff of part of the
    /// file, or a cut one, approves nothing.
    pub fn from_diff(
        session_id: &str,
        path: PathBuf,
        old_text: Option<&str>,
        new_text: &str,
        on_disk: Option<&[u8]>,
    ) -> Option<Approval> {
        if permission_diff::cut(new_text).is_some() {
            return None;
        }
        let before = match (old_text, on_disk) {
            // No old side sent: the review showed the file.
            (None, disk) => disk.map(<[u8]>::to_vec),
            (Some(old), Some(disk)) if old.as_bytes() == disk => Some(disk.to_vec()),
            (Some(""), None) => None,
            // A fragment, or a file that changed since the agent looked.
            _ => return None,
        };
        if let Some(b) = &before {
            if permission_diff::cut(&String::from_utf8_lossy(b)).is_some() {
                return None;
            }
        }
        Some(Approval {
            session_id: session_id.to_string(),
            path,
            before,
            after: new_text.as_bytes().to_vec(),
        })
    }
}

/// The approvals not yet used, with when each was given.
#[derive(Debug, Default)]
pub struct ApprovedWrites {
    held: Vec<(Approval, Instant)>,
}

/// An empty file and a missing one show the same old side.
fn same_before(approved: &Option<Vec<u8>>, now: Option<&[u8]>) -> bool {
    approved.as_deref().unwrap_or_default() == now.unwrap_or_default()
}

impl ApprovedWrites {
    /// Holds `approval` (given at `at`), replacing one for the same file.
    pub fn approve(&mut self, approval: Approval, at: Instant) {
        self.held
            .retain(|(a, _)| !(a.session_id == approval.session_id && a.path == approval.path));
        if self.held.len() >= MAX_APPROVALS {
            self.held.remove(0);
        }
        self.held.push((approval, at));
    }

    /// True, and the approval used up, when a write of `content` to `path`
    /// in `session_id`, whose file now holds `before`, is exactly one the
    /// user approved within [`APPROVAL_TTL`] of `now`.
    pub fn take(&mut self, session_id: &str, path: &Path, before: Option<&[u8]>, content: &[u8], now: Instant) -> bool {
        self.held
            .retain(|(_, at)| now.saturating_duration_since(*at) <= APPROVAL_TTL);
        let found = self.held.iter().position(|(a, _)| {
            a.session_id == session_id && a.path == path && a.after == content && same_before(&a.before, before)
        });
        match found {
            Some(i) => {
                self.held.remove(i);
                true
            }
            None => false,
        }
    }

    /// Forgets every approval (the turn ended).
    pub fn clear(&mut self) {
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(before: Option<&str>, after: &str) -> Approval {
        Approval {
            session_id: "s".into(),
            path: PathBuf::from("/p/a.txt"),
            before: before.map(|b| b.as_bytes().to_vec()),
            after: after.as_bytes().to_vec(),
        }
    }

    #[test]
    fn the_exact_approved_write_passes_once() {
        let t = Instant::now();
        let mut w = ApprovedWrites::default();
        w.approve(approval(Some("old\n"), "new\n"), t);
        let p = Path::new("/p/a.txt");
        assert!(w.take("s", p, Some(b"old\n"), b"new\n", t));
        assert!(!w.take("s", p, Some(b"old\n"), b"new\n", t), "used up");
    }

    #[test]
    fn another_text_file_session_or_old_side_is_not_approved() {
        let t = Instant::now();
        let p = Path::new("/p/a.txt");
        let mut w = ApprovedWrites::default();
        w.approve(approval(Some("old\n"), "new\n"), t);
        assert!(!w.take("s", p, Some(b"old\n"), b"new\n\n", t));
        assert!(!w.take("s", p, Some(b"old\n"), b"new", t));
        assert!(!w.take("s", Path::new("/p/b.txt"), Some(b"old\n"), b"new\n", t));
        assert!(!w.take("other", p, Some(b"old\n"), b"new\n", t));
        assert!(!w.take("s", p, Some(b"changed since\n"), b"new\n", t));
        assert!(!w.take("s", p, None, b"new\n", t));
        // None of those used it up.
        assert!(w.take("s", p, Some(b"old\n"), b"new\n", t));
    }

    #[test]
    fn an_approval_expires_and_a_turn_end_forgets_it() {
        let t = Instant::now();
        let p = Path::new("/p/a.txt");
        let mut w = ApprovedWrites::default();
        w.approve(approval(None, "new\n"), t);
        assert!(!w.take("s", p, None, b"new\n", t + APPROVAL_TTL + Duration::from_secs(1)));
        w.approve(approval(None, "new\n"), t);
        w.clear();
        assert!(!w.take("s", p, None, b"new\n", t));
        // A new file: missing and empty read the same.
        w.approve(approval(Some(""), "new\n"), t);
        assert!(w.take("s", p, None, b"new\n", t));
    }

    #[test]
    fn at_most_a_few_approvals_are_held() {
        let t = Instant::now();
        let mut w = ApprovedWrites::default();
        for i in 0..MAX_APPROVALS + 3 {
            let mut a = approval(None, "x");
            a.path = PathBuf::from(format!("/p/{i}"));
            w.approve(a, t);
        }
        assert_eq!(w.held.len(), MAX_APPROVALS);
        assert!(!w.take("s", Path::new("/p/0"), None, b"x", t), "the oldest went first");
        assert!(w.take("s", Path::new(&format!("/p/{}", MAX_APPROVALS + 2)), None, b"x", t));
    }

    #[test]
    fn only_a_whole_diff_of_the_file_as_it_is_approves() {
        let p = PathBuf::from("/p/a.txt");
        let disk = Some(&b"one\ntwo\n"[..]);
        let a = Approval::from_diff("s", p.clone(), Some("one\ntwo\n"), "one\n", disk).expect("whole");
        assert_eq!(a.before.as_deref(), disk);
        assert!(Approval::from_diff("s", p.clone(), None, "one\n", disk).is_some());
        assert!(
            Approval::from_diff("s", p.clone(), Some("two\n"), "TWO\n", disk).is_none(),
            "fragment"
        );
        assert!(
            Approval::from_diff("s", p.clone(), Some(""), "x\n", None).is_some(),
            "new file"
        );
        assert!(Approval::from_diff("s", p.clone(), Some("gone\n"), "x\n", None).is_none());
        let big = "x\n".repeat(permission_diff::SHOWN_LINES + 1);
        assert!(
            Approval::from_diff("s", p.clone(), None, &big, None).is_none(),
            "cut in the review"
        );
        assert!(Approval::from_diff("s", p, None, "x\n", Some(big.as_bytes())).is_none());
    }
}
