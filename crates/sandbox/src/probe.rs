//! What this system offers the sandbox, and where the supervisor is.

use std::path::{Path, PathBuf};

/// The variable that makes mia act as if a mechanism were missing
/// (`MIA_SANDBOX_DISABLE=landlock`): to see what `sandbox.mode = "on"` and
/// `"auto"` do on a system without it, and to test that.
pub const DISABLE_VAR: &str = "MIA_SANDBOX_DISABLE";

/// The Landlock ABI this system offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// `Some(n)`: Landlock ABI `n`; `None`: why there is none.
    pub landlock: Result<i32, String>,
}

impl Support {
    /// Asks the kernel (one system call, no process; safe in Neovim's process).
    pub fn probe() -> Support {
        if disabled("landlock") {
            return Support {
                landlock: Err(format!("Landlock is turned off by {DISABLE_VAR}")),
            };
        }
        Support {
            landlock: landlock_abi(),
        }
    }

    /// What is missing for the sandbox, as a sentence; `None` when it can run.
    pub fn missing(&self) -> Option<String> {
        self.landlock.as_ref().err().cloned()
    }

    /// `key=value` lines for `:checkhealth mia` (run in the helper, which
    /// may fork to test user namespaces).
    pub fn report(&self) -> String {
        let landlock = match &self.landlock {
            Ok(abi) => format!("landlock_abi={abi}\n"),
            Err(why) => format!("landlock_abi=0\nlandlock_missing={why}\n"),
        };
        let bwrap = find_in_path("bwrap")
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        format!(
            "{landlock}user_namespaces={}\nbubblewrap={bwrap}\nseccomp={}\n",
            user_namespaces(),
            cfg!(target_os = "linux")
        )
    }
}

/// Whether [`DISABLE_VAR`] names `mechanism` ("landlock", "namespaces").
pub fn disabled(mechanism: &str) -> bool {
    std::env::var(DISABLE_VAR).is_ok_and(|v| v.split(',').any(|w| w.trim() == mechanism))
}

#[cfg(target_os = "linux")]
fn landlock_abi() -> Result<i32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the
    // call only returns the ABI version (or an error); it touches no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v > 0 {
        return Ok(v as i32);
    }
    Err(match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => {
            "Landlock is built into this kernel but not enabled (add landlock to the lsm= boot parameter)".into()
        }
        _ => "this kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK is needed)".into(),
    })
}

#[cfg(not(target_os = "linux"))]
fn landlock_abi() -> Result<i32, String> {
    Err("mia's sandbox needs Linux's Landlock; this system has none (macOS's Seatbelt is not supported yet)".into())
}

/// Whether the supervisor can hide denied paths with a user and a mount
/// namespace ([`crate::namespaces`]; where it cannot, Landlock alone holds
/// them). Forks: call only in a single-threaded helper.
#[cfg(target_os = "linux")]
fn user_namespaces() -> bool {
    !disabled("namespaces") && crate::namespaces::available()
}

#[cfg(not(target_os = "linux"))]
fn user_namespaces() -> bool {
    false
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// mia-acp, the supervisor: the running executable when it is mia-acp,
/// else `mia-acp` beside the library this code is linked into (the plugin
/// and `scripts/dist` put them in one directory).
pub fn helper_beside() -> Option<PathBuf> {
    let object = own_object()?;
    let name = if cfg!(windows) { "mia-acp.exe" } else { "mia-acp" };
    let candidate = if object.file_name().is_some_and(|n| n == name) {
        object
    } else {
        object.parent()?.join(name)
    };
    candidate.is_file().then_some(candidate)
}

/// The file this code was loaded from: the library, or the executable.
#[cfg(unix)]
fn own_object() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = own_object as fn() -> Option<PathBuf> as *const libc::c_void;
    // SAFETY: dladdr only reads the loader's tables for an address of our own code.
    let found = unsafe { libc::dladdr(addr, &mut info) } != 0;
    if found && !info.dli_fname.is_null() {
        // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
        let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
        let path = Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
        if path.is_absolute() && matches!(path.extension().and_then(|e| e.to_str()), Some("so" | "dylib")) {
            return path.canonicalize().ok();
        }
    }
    std::env::current_exe().ok()
}

#[cfg(not(unix))]
fn own_object() -> Option<PathBuf> {
    std::env::current_exe().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disable_variable_hides_landlock_and_says_so() {
        // Only this test sets it, in its own process's environment.
        std::env::set_var(DISABLE_VAR, "landlock");
        let s = Support::probe();
        std::env::remove_var(DISABLE_VAR);
        assert!(s.missing().is_some_and(|m| m.contains(DISABLE_VAR)), "{s:?}");
    }
}
