//! mia's sandbox for the commands a model runs (the `bash` tool, external
//! agents' terminals, MCP servers that ask for it): what the kernel enforces
//! once a command runs, whatever the command turns out to do.
//!
//! The mechanism works for an unprivileged user and needs no user namespace
//! (Ubuntu 24.04 restricts those), no setuid helper and no daemon:
//! - **Landlock** (Linux 5.13+) confines the file system: writes only under
//!   the paths the [`Policy`] lists (the project root, the session's private
//!   temporary directory, `sandbox.writable`); reads everywhere except the
//!   denied paths. Landlock only allows, so the denied paths are left out by
//!   allowing their siblings ([`rules`]). Links and renames from one
//!   directory to another need Landlock's "refer" right, granted only inside
//!   the writable paths: a hard link or a move cannot bring a file out of, or
//!   a denied file into, reach. A symbolic link is followed to where it
//!   points, and that place's rules apply. From ABI 4 Landlock also refuses
//!   TCP connect and bind, from ABI 6 signals to and abstract Unix sockets of
//!   processes outside the sandbox.
//! - **seccomp** refuses sockets of every family but Unix and netlink while
//!   the network is off (UDP and raw sockets, which Landlock does not
//!   cover), and io_uring, which could open sockets past the filter.
//! - **a supervisor** ([`supervisor`]): mia-acp run as
//!   `mia-acp --sandbox-run … -- PROGRAM ARGS`, a child subreaper
//!   (`PR_SET_CHILD_SUBREAPER`) that applies the confinement in its child and
//!   execs the command there. Whatever the command starts is reparented to the
//!   supervisor when its parent dies, `setsid`, `nohup` and double forks
//!   included; when the command ends (or the supervisor is told to stop),
//!   it kills every descendant left. The supervisor itself is not confined
//!   and Landlock's signal scope keeps the command from killing it.
//!
//! Neovim itself is never made a subreaper or confined: the library only
//! spawns the supervisor ([`Policy::command_line`]).

#[cfg(target_os = "linux")]
pub mod namespaces;
pub mod policy;
pub mod probe;
#[cfg(target_os = "linux")]
pub mod rules;
#[cfg(target_os = "linux")]
pub mod supervisor;

pub use policy::{default_denied_reads, inodes_under, Policy, PolicyError, RUN_FLAG};
pub use probe::{helper_beside, Support};

/// The argument that makes mia-acp print what the platform offers
/// ([`Support::report`]) and exit: `:checkhealth mia` runs it.
pub const PROBE_FLAG: &str = "--sandbox-probe";

/// What mia-acp's `main` calls first: when it was started as the supervisor
/// (`--sandbox-run`) or the probe (`--sandbox-probe`), runs that and returns
/// the exit code; otherwise `None` and mia-acp goes on as itself.
pub fn main_if_helper() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    let first = args.next()?;
    if first == PROBE_FLAG {
        print!("{}", Support::probe().report());
        return Some(0);
    }
    if first != RUN_FLAG {
        return None;
    }
    #[cfg(target_os = "linux")]
    {
        Some(supervisor::run(args.collect()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("mia: the sandbox needs Linux (Landlock); set sandbox.mode = \"off\" to run commands unconfined");
        Some(125)
    }
}

/// Whether a failed command's output looks like the sandbox refused it
/// something (a path, a socket): the tool then tells the model why.
pub fn looks_refused(output: &str) -> bool {
    const SIGNS: [&str; 6] = [
        "Permission denied",
        "Operation not permitted",
        "Read-only file system",
        "Invalid cross-device link",
        "PermissionError",
        "EACCES",
    ];
    SIGNS.iter().any(|s| output.contains(s))
}
