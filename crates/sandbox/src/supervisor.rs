//! The supervisor: mia-acp run as `mia-acp --sandbox-run [policy] -- PROGRAM ARGS`.
//!
//! It makes itself a child subreaper, forks, and in the child applies the
//! Landlock ruleset and the seccomp filter and execs the command. Anything
//! the command starts whose parent dies is reparented to the supervisor
//! rather than to init, whatever it does (`setsid`, `nohup`, double forks,
//! daemons): so when the command ends, the supervisor kills every
//! descendant left, and exits with the command's status. SIGTERM, SIGINT,
//! SIGHUP or SIGQUIT to the supervisor (the bash tool's timeout or the
//! user's stop signal the process group) pass SIGTERM to every descendant,
//! then SIGKILL after the policy's grace.
//!
//! Single-threaded by construction (it runs before anything else in
//! mia-acp's `main`), so the child may run ordinary code between fork and
//! exec.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use landlock::{RestrictionStatus, RulesetStatus};

use crate::rules::{denied_paths, landlock_ruleset, seccomp_filter};
use crate::Policy;

/// Exit code of a sandbox that could not be set up (as `env`, `timeout` and
/// `nice` use 125 for their own failures).
pub const SETUP_FAILED: i32 = 125;

/// Runs the command the arguments name; returns the supervisor's exit code.
pub fn run(args: Vec<OsString>) -> i32 {
    let (policy, command) = match Policy::from_args(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("mia: the sandbox's supervisor was started with wrong arguments ({e})");
            return SETUP_FAILED;
        }
    };
    let deny = denied_paths(&policy);
    let hidden = !deny.is_empty()
        && deny.len() <= crate::namespaces::MAX_HIDDEN
        && !crate::probe::disabled("namespaces")
        && crate::namespaces::available();
    if hidden {
        if let Err(e) = crate::namespaces::hide(&deny) {
            eprintln!("mia: the sandbox could not be set up: {e}");
            return SETUP_FAILED;
        }
    }
    let ruleset = match landlock_ruleset(&policy, &deny, hidden) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mia: the sandbox could not be set up: {e}");
            return SETUP_FAILED;
        }
    };
    let filter = match (!policy.network).then(seccomp_filter).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("mia: the sandbox could not be set up: {e}");
            return SETUP_FAILED;
        }
    };
    let argv: Vec<CString> = match command.iter().map(|a| CString::new(a.as_bytes())).collect() {
        Ok(v) => v,
        Err(_) => {
            eprintln!("mia: the command has a NUL byte in an argument");
            return SETUP_FAILED;
        }
    };
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());

    let signals = stop_signals();
    let mut old_mask = empty_set();
    // SAFETY: plain libc calls on sets we own; the process is single-threaded.
    unsafe {
        libc::sigprocmask(libc::SIG_BLOCK, &signals, &mut old_mask);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    let me = std::process::id() as libc::pid_t;
    // SAFETY: single-threaded (see the module doc), so the child may run
    // ordinary code until exec.
    let child = unsafe { libc::fork() };
    if child < 0 {
        eprintln!(
            "mia: the sandbox could not start the command: {}",
            std::io::Error::last_os_error()
        );
        return SETUP_FAILED;
    }
    if child == 0 {
        // SAFETY: as above; in the child, until exec or _exit.
        unsafe {
            libc::sigprocmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != me {
                libc::_exit(SETUP_FAILED);
            }
        }
        match ruleset.restrict_self() {
            Ok(RestrictionStatus {
                ruleset: RulesetStatus::NotEnforced,
                ..
            }) => {
                eprintln!("mia: the sandbox could not be set up: Landlock is not enforced on this system");
                // SAFETY: leaving the child without running the parent's destructors.
                unsafe { libc::_exit(SETUP_FAILED) }
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("mia: the sandbox could not be set up: {e}");
                // SAFETY: as above.
                unsafe { libc::_exit(SETUP_FAILED) }
            }
        }
        if let Some(filter) = &filter {
            if let Err(e) = seccompiler::apply_filter(filter) {
                eprintln!("mia: the sandbox could not be set up: seccomp: {e}");
                // SAFETY: as above.
                unsafe { libc::_exit(SETUP_FAILED) }
            }
        }
        // SAFETY: argv_ptrs is a NULL-terminated array of C strings that outlive the call.
        unsafe { libc::execvp(argv_ptrs[0], argv_ptrs.as_ptr()) };
        eprintln!(
            "mia: {} could not be run: {}",
            command[0].to_string_lossy(),
            std::io::Error::last_os_error()
        );
        // SAFETY: as above.
        unsafe { libc::_exit(127) }
    }
    drop(ruleset);
    supervise(me, child, &signals, Duration::from_millis(policy.grace_ms))
}

/// Waits for the command, passing stop signals on; then kills what is left.
fn supervise(me: libc::pid_t, child: libc::pid_t, signals: &libc::sigset_t, grace: Duration) -> i32 {
    let mut status = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        reap(child, &mut status);
        if let Some(st) = status {
            sweep(me);
            return exit_code(st);
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            signal_all(me, libc::SIGKILL);
        }
        let wait = libc::timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        // SAFETY: waits for one of the blocked signals; no memory is shared.
        let sig = unsafe { libc::sigtimedwait(signals, std::ptr::null_mut(), &wait) };
        if sig > 0 && sig != libc::SIGCHLD && kill_at.is_none() {
            signal_all(me, libc::SIGTERM);
            kill_at = Some(Instant::now() + grace);
        }
    }
}

/// Reaps every child that ended; the command's status goes to `status`.
/// True when the supervisor has no child left at all.
fn reap(command: libc::pid_t, status: &mut Option<libc::c_int>) -> bool {
    loop {
        let mut st = 0;
        // SAFETY: waitpid writes only the status integer we pass.
        let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if pid == 0 {
            return false;
        }
        if pid < 0 {
            return std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD);
        }
        if pid == command {
            *status = Some(st);
        }
    }
}

/// Kills every descendant until none is left (each one killed hands its own
/// children to the supervisor, the next round kills those).
fn sweep(me: libc::pid_t) {
    let mut ignored = None;
    for _ in 0..10_000 {
        let left = signal_all(me, libc::SIGKILL);
        // -1 is nobody's pid: every child reaped here is an orphan.
        if reap(-1, &mut ignored) && left == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Sends `signal` to every process below `me`; returns how many it found.
fn signal_all(me: libc::pid_t, signal: libc::c_int) -> usize {
    let found = descendants(me);
    for pid in &found {
        // SAFETY: kill(2) on a pid read from /proc as our descendant just now.
        unsafe {
            libc::kill(*pid, signal);
        }
    }
    found.len()
}

/// Every process whose chain of parents leads to `me`, from /proc.
fn descendants(me: libc::pid_t) -> Vec<libc::pid_t> {
    let mut parent_of: Vec<(libc::pid_t, libc::pid_t)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<libc::pid_t>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            if let Some(ppid) = parent_in_stat(&stat) {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = vec![me];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// The parent pid in a `/proc/<pid>/stat` line (`pid (comm) state ppid …`;
/// comm may hold `)`).
fn parent_in_stat(stat: &str) -> Option<libc::pid_t> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The supervisor's exit: the command's code, or its death by the same signal.
fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        return libc::WEXITSTATUS(status);
    }
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: dies of the command's signal, without a core file, so the
        // caller sees the same end; falls through if the signal does not kill.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(sig, libc::SIG_DFL);
            let mut set = empty_set();
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(sig);
        }
        return 128 + sig;
    }
    SETUP_FAILED
}

fn empty_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set it is given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        set
    }
}

fn stop_signals() -> libc::sigset_t {
    let mut set = empty_set();
    for sig in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: adds to a set we own.
        unsafe {
            libc::sigaddset(&mut set, sig);
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_a_name_with_parentheses() {
        assert_eq!(parent_in_stat("12 (a) b) S 7 12 12"), Some(7));
        assert_eq!(parent_in_stat("nonsense"), None);
    }
}
