//! Ends a child's whole process group when this process dies, however it
//! dies: a normal quit, a crash or SIGKILL.
//!
//! An external agent runs in a process group of its own, and its own
//! children (an agent's bundled CLI) run in that group too. mia ends the
//! group when it stops the agent and when Neovim quits cleanly; when Neovim
//! is killed, nothing in it runs any more, and without this the agent and
//! its children would live on, orphaned.
//!
//! How: this process holds the only write end of a pipe. The child, between
//! fork and exec, forks a small watcher into its group that waits on the
//! pipe's read end. The read returns end of file only once every write end
//! is closed, which is when this process has gone. The agent's stdin has
//! closed then too, and an agent ends by itself on that, after writing what
//! it must (its session's transcript); so the watcher waits [`GRACE_MS`],
//! sends its group SIGTERM, waits again, then kills it (the agent, its
//! children, and itself) with SIGKILL. When mia ends the group itself, the
//! watcher goes with it.
//!
//! Everything between fork and exec is async-signal-safe: fork, close,
//! read, kill, waitpid, sigaction, nanosleep, prctl and `_exit`; nothing
//! allocates.

use std::io;
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::OnceLock;

/// How long the watcher waits before SIGTERM, and again before SIGKILL.
pub const GRACE_MS: u64 = 1000;

/// The pipe's (read, write) ends, both close-on-exec: programs this
/// process starts never hold them, only the watchers (which do not exec).
fn pipe_fds() -> io::Result<(RawFd, RawFd)> {
    static PIPE: OnceLock<Result<(RawFd, RawFd), i32>> = OnceLock::new();
    let fds = PIPE.get_or_init(|| {
        // std's pipe is close-on-exec on every platform (pipe2 where there is one).
        match io::pipe() {
            Ok((read, write)) => Ok((read.into_raw_fd(), write.into_raw_fd())),
            Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    });
    fds.map_err(io::Error::from_raw_os_error)
}

/// Makes `cmd`'s process group end when this process dies. `cmd` must start
/// in a group of its own (`process_group(0)`), which std sets up before the
/// hook below runs.
pub fn end_group_with_this_process(cmd: &mut tokio::process::Command) -> io::Result<()> {
    let (read, write) = pipe_fds()?;
    // SAFETY: the hook runs in the child between fork and exec and only
    // makes async-signal-safe calls (see `watch`); it captures two integers.
    unsafe {
        cmd.pre_exec(move || {
            fork_watcher(read, write);
            Ok(())
        });
    }
    Ok(())
}

/// Process groups of the programs this process started (ACP agents, MCP
/// servers): each runs in a group of its own, so that its children (an
/// agent's bundled CLI, `npx`'s node) end with it. When Neovim quits, a
/// watched group (see [`watch_group`]) ends after a grace; [`kill_all`] ends
/// the others at once. `(pgid, watched)`.
static GROUPS: std::sync::Mutex<Vec<(i32, bool)>> = std::sync::Mutex::new(Vec::new());

/// Records the group led by the child `pid` (started with
/// `process_group(0)`); its pgid, for [`end_group`].
pub fn track_group(pid: Option<u32>, watched: bool) -> Option<i32> {
    let pid = i32::try_from(pid?).ok().filter(|p| *p > 0)?;
    GROUPS.lock().unwrap_or_else(|p| p.into_inner()).push((pid, watched));
    Some(pid)
}

/// Ends the group `pgid` ([`track_group`]'s answer) with SIGKILL.
pub fn end_group(pgid: Option<i32>) {
    let Some(pgid) = pgid else { return };
    let mut groups = GROUPS.lock().unwrap_or_else(|p| p.into_inner());
    let ours = groups.iter().any(|(g, _)| *g == pgid);
    groups.retain(|(g, _)| *g != pgid);
    drop(groups);
    if ours {
        // SAFETY: killpg only sends a signal, to a group this process created
        // and has not ended yet.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}

/// Makes `cmd`'s group end with this process, even when Neovim is killed;
/// a program that cannot be watched still starts. Whether it is watched.
pub fn watch_group(cmd: &mut tokio::process::Command) -> bool {
    match end_group_with_this_process(cmd) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("a program mia starts will not be ended if Neovim is killed: {e}");
            false
        }
    }
}

/// Ends its process group when dropped.
pub struct GroupGuard(pub Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        end_group(self.0.take());
    }
}

/// Neovim is quitting: ends every unwatched process group at once. A
/// watched one first sees its stdin close when Neovim exits, which lets the
/// program finish what it writes (an agent's session transcript) and exit
/// by itself; its watcher ends whatever is left after a grace.
pub fn kill_all() {
    let groups = std::mem::take(&mut *GROUPS.lock().unwrap_or_else(|p| p.into_inner()));
    for (pgid, _) in groups.into_iter().filter(|(_, watched)| !watched) {
        // SAFETY: as in end_group.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}

/// In the child before exec: forks an intermediate that forks the watcher
/// and exits at once, so the watcher is nobody's child here (init reaps it)
/// and the agent never sees an unknown child. Failures leave the agent
/// unwatched rather than failing its start.
fn fork_watcher(read: RawFd, write: RawFd) {
    // SAFETY: fork, waitpid and _exit are async-signal-safe; the child of
    // the first fork only forks again and exits.
    unsafe {
        let middle = libc::fork();
        if middle == 0 {
            if libc::fork() == 0 {
                watch(read, write);
            }
            libc::_exit(0);
        }
        if middle > 0 {
            let mut status = 0;
            while libc::waitpid(middle, &mut status, 0) < 0 && errno() == libc::EINTR {}
        }
    }
}

/// The watcher: holds nothing but the pipe's read end, waits for end of
/// file, then kills its own process group. Never returns.
unsafe fn watch(read: RawFd, write: RawFd) -> ! {
    #[cfg(target_os = "linux")]
    libc::prctl(libc::PR_SET_NAME, c"mia-reaper".as_ptr() as libc::c_ulong, 0, 0, 0);
    // The SIGTERM it sends its group is for the others.
    let mut ignore: libc::sigaction = std::mem::zeroed();
    ignore.sa_sigaction = libc::SIG_IGN;
    libc::sigaction(libc::SIGTERM, &ignore, std::ptr::null_mut());
    libc::close(write);
    close_all_but(read);
    let mut byte = 0u8;
    loop {
        let n = libc::read(read, (&mut byte as *mut u8).cast(), 1);
        if n == 0 {
            // Every write end is closed: the process that started the agent is gone.
            sleep_ms(GRACE_MS);
            libc::kill(0, libc::SIGTERM);
            sleep_ms(GRACE_MS);
            libc::kill(0, libc::SIGKILL);
            libc::_exit(0);
        }
        if n < 0 && errno() != libc::EINTR {
            // The pipe is unusable: leave the group alone rather than kill it by mistake.
            libc::_exit(1);
        }
    }
}

/// Closes every descriptor but `keep` (the agent's stdio included, so its
/// pipes report end of file when the agent exits).
unsafe fn close_all_but(keep: RawFd) {
    #[cfg(target_os = "linux")]
    {
        let below = libc::syscall(libc::SYS_close_range, 0 as libc::c_uint, (keep - 1) as libc::c_uint, 0);
        let above = libc::syscall(libc::SYS_close_range, (keep + 1) as libc::c_uint, libc::c_uint::MAX, 0);
        if (keep == 0 || below == 0) && above == 0 {
            return;
        }
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
        limit.rlim_cur.min(65_536) as RawFd
    } else {
        1024
    };
    for fd in 0..max {
        if fd != keep {
            libc::close(fd);
        }
    }
}

/// Sleeps `ms` milliseconds, through interruptions.
unsafe fn sleep_ms(ms: u64) {
    let mut left = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    while libc::nanosleep(&left, &mut left) < 0 && errno() == libc::EINTR {}
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn alive(pid: i32) -> bool {
        // Zombies count as gone: their group was killed.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let state = stat.rsplit(')').next().and_then(|s| s.split_whitespace().next());
                !matches!(state, Some("Z") | Some("X"))
            }
            Err(_) => false,
        }
    }

    fn wait_gone(pid: i32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !alive(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// A middle process (a stand-in for Neovim) starts a watched group with a
    /// grandchild in it, then is killed with SIGKILL: the whole group ends.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_watched_group_ends_when_the_process_that_started_it_is_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("pids");
        // The stand-in is this test binary run as a helper (see `helper_main`).
        let exe = std::env::current_exe().expect("exe");
        let mut stand_in = std::process::Command::new(exe)
            .args([
                "--exact",
                "reaper::tests::helper_main",
                "--nocapture",
                "--include-ignored",
            ])
            .env("MIA_REAPER_HELPER_PIDS", &pids)
            .spawn()
            .expect("spawn the stand-in");
        let deadline = Instant::now() + Duration::from_secs(20);
        let text = loop {
            if let Ok(t) = std::fs::read_to_string(&pids) {
                if t.lines().count() >= 2 {
                    break t;
                }
            }
            assert!(Instant::now() < deadline, "the watched group never started");
            std::thread::sleep(Duration::from_millis(20));
        };
        let group: Vec<i32> = text.lines().map(|l| l.trim().parse().expect("pid")).collect();
        assert!(
            group.iter().all(|p| alive(*p)),
            "{group:?} should run while the stand-in lives"
        );
        stand_in.kill().expect("SIGKILL the stand-in");
        let _ = stand_in.wait();
        for pid in &group {
            assert!(wait_gone(*pid), "process {pid} outlived the process that started it");
        }
    }

    /// Run only as the stand-in above: starts `sh`, which starts a `sleep`
    /// in its group, writes both pids, and waits.
    #[test]
    #[ignore = "a helper process for the test above"]
    fn helper_main() {
        let Ok(pids) = std::env::var("MIA_REAPER_HELPER_PIDS") else {
            return;
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let mut cmd = tokio::process::Command::new("sh");
            cmd.arg("-c")
                .arg(format!(
                    "sleep 1000 & echo $$ > '{p}.tmp'; echo $! >> '{p}.tmp'; mv '{p}.tmp' '{p}'; wait",
                    p = pids
                ))
                .process_group(0);
            end_group_with_this_process(&mut cmd).expect("watch");
            let mut child = cmd.spawn().expect("spawn sh");
            let _ = child.wait().await;
        });
    }
}
