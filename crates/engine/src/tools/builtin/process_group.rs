//! The process group a `bash` command runs in: signalling all of it, telling
//! whether any of it still runs, and killing it if the call is abandoned.

use std::io;

use tokio::process::Child;

/// A command's process group (its id is the shell's pid, as the shell was
/// started with `process_group(0)`). Dropped while armed, which happens when
/// the call's future is dropped mid-run, it kills the whole group so nothing
/// outlives an abandoned call.
pub(super) struct ProcessGroup {
    pgid: Option<libc::pid_t>,
}

impl ProcessGroup {
    pub(super) fn of(child: &Child) -> Self {
        ProcessGroup {
            pgid: child.id().and_then(|id| libc::pid_t::try_from(id).ok()),
        }
    }

    /// Stops addressing the group: after the command ended on its own, what
    /// it left in the background is the user's, and the id may be reused.
    pub(super) fn disarm(&mut self) {
        self.pgid = None;
    }

    pub(super) fn signal(&self, signal: libc::c_int) {
        if let Some(pgid) = self.pgid {
            // SAFETY: kill(2) has no memory-safety preconditions; the negative
            // pid addresses the group created for the command and nothing else.
            unsafe {
                libc::kill(-pgid, signal);
            }
        }
    }

    /// Whether a member of the group is still running. Zombies do not count:
    /// a dead grandchild is reparented to init, and an init that never reaps
    /// (common in containers) would otherwise keep the group "alive" forever.
    pub(super) fn has_live_members(&self) -> bool {
        let Some(pgid) = self.pgid else { return false };
        if !group_exists(pgid) {
            return false;
        }
        live_members_from_proc(pgid).unwrap_or(true)
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// Whether any process, zombies included, has process group `pgid`.
fn group_exists(pgid: libc::pid_t) -> bool {
    // SAFETY: as in `ProcessGroup::signal`; signal 0 only checks existence.
    let rc = unsafe { libc::kill(-pgid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Whether a non-zombie process of group `pgid` is listed in `/proc`; `None`
/// where `/proc` cannot tell (not Linux, or not mounted).
fn live_members_from_proc(pgid: libc::pid_t) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // Processes may exit while we look; a missing stat file is one that did.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((state, group)) = state_and_group(&stat) {
            if group == pgid && state != 'Z' && state != 'X' {
                return Some(true);
            }
        }
    }
    Some(false)
}

/// The state letter and process group from a `/proc/<pid>/stat` line:
/// `pid (comm) state ppid pgrp …`, where comm may itself contain `)`.
fn state_and_group(stat: &str) -> Option<(char, libc::pid_t)> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let group = fields.next()?.parse().ok()?;
    Some((state, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_parentheses_in_the_name() {
        let stat = "4242 (we (ird) name) Z 1 4240 4240 0 -1 4194308 0";
        assert_eq!(state_and_group(stat), Some(('Z', 4240)));
        assert_eq!(state_and_group("garbage"), None);
    }
}
