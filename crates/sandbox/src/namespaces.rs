//! Denied paths hidden by mounts, where this user may create namespaces.
//!
//! Landlock only allows, so without namespaces a denied path is left out by
//! allowing its siblings ([`crate::rules`]), which leaves files created
//! during a command in the directories on the way unreadable until the next
//! one. Where an unprivileged user may create a user and a mount namespace
//! (most systems; not Ubuntu 24.04 by default), the supervisor does instead:
//! a mount namespace of its own (mounts private, nothing seen outside), a
//! read-only empty tmpfs of mode 000 over each denied directory and
//! `/dev/null` over each denied file; Landlock then allows reading from `/`
//! whole. The command cannot undo the mounts: Landlock forbids a sandboxed
//! process to mount or unmount, and a path with a mount on it cannot be
//! renamed or linked. `/proc/PID/root` of a process outside stays refused
//! (Landlock's ptrace scope).

use std::path::PathBuf;

/// Most denied paths hidden by mounts (one mount each; the kernel's default
/// limit is 100,000 per namespace). Past it Landlock alone holds them, and
/// refuses as many as it cannot (a planted project with more files a deny
/// glob names is refused with a message, not mounted over for minutes).
pub const MAX_HIDDEN: usize = 50_000;

/// Whether this user can set up the namespaces and mounts [`hide`] needs:
/// tried in a throwaway child, since a half-made namespace cannot be left.
pub fn available() -> bool {
    // SAFETY: the supervisor is single-threaded; the child only makes system
    // calls and leaves with _exit.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let ok = enter().is_ok() && mount_tmpfs(c"/tmp".as_ptr()) == 0;
            libc::_exit(if ok { 0 } else { 1 });
        }
        if pid < 0 {
            return false;
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

/// Enters a new user and mount namespace, maps this user to itself and
/// makes every mount private. Other users' ids are not mapped: root's
/// commands lose their power over other users' files (they act as
/// `nobody`'s there), ordinary users lose nothing.
fn enter() -> std::io::Result<()> {
    // SAFETY: plain system calls.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Only this user's own ids can be mapped from inside (for root too: its
    // capabilities do not reach the parent namespace once it has left it).
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    // SAFETY: remounts `/` and below as private in this new namespace only.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

unsafe fn mount_tmpfs(target: *const libc::c_char) -> libc::c_int {
    libc::mount(
        c"none".as_ptr(),
        target,
        c"tmpfs".as_ptr(),
        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        c"size=4k,mode=000".as_ptr().cast(),
    )
}

/// Enters the namespaces and mounts over every path of `deny` (absolute,
/// links resolved). An error leaves the supervisor in a namespace with
/// some mounts: the caller must not run the command then.
pub fn hide(deny: &[PathBuf]) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    enter()?;
    for path in deny {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
        // SAFETY: mounts in this process's own private namespace.
        let rc = unsafe {
            if meta.is_dir() {
                mount_tmpfs(c.as_ptr())
            } else {
                libc::mount(
                    c"/dev/null".as_ptr(),
                    c.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            }
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(std::io::Error::new(e.kind(), format!("hiding {}: {e}", path.display())));
        }
    }
    Ok(())
}
