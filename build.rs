//! Keeps the Lua side's version and the crate version in step: a library built
//! from one and loaded by the other would be refused at run time anyway, so
//! catching the mismatch at build time saves a confusing round trip.
//!
//! Also packs the library's relative relocations where that is safe (see
//! `pack_relative_relocs`).

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=lua/mia/version.lua");
    let crate_version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let lua = fs::read_to_string("lua/mia/version.lua").expect("lua/mia/version.lua is part of the crate");
    let quoted = format!("\"{crate_version}\"");
    if !lua.contains(&quoted) {
        panic!("lua/mia/version.lua does not hold version {quoted} from Cargo.toml: update one of them");
    }
    pack_relative_relocs();
}

/// Links the library with `-z pack-relative-relocs` (DT_RELR): its ~66,000
/// relative relocations then take 1.6 MB less (25.54 -> 23.96 MB), and
/// loading it in Neovim 1.28 -> 1.23 ms. Only when building on and for glibc ≥ 2.36 (the first to
/// load DT_RELR; GNU ld makes such a library require it by a symbol version)
/// with a linker that takes the option without a word. Elsewhere, e.g. a
/// newer binutils beside glibc 2.35 (Ubuntu 22.04), the library is linked as
/// before, since it would not load where it was built.
///
/// Never with `MIA_PORTABLE=1` (set by `scripts/dist`): the release
/// artifacts must load on glibc 2.28, which has no DT_RELR.
fn pack_relative_relocs() {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    println!("cargo:rerun-if-env-changed=MIA_PORTABLE");
    if var("MIA_PORTABLE") == "1" {
        // The target's libgcc_s.so.1, named by scripts/dist: linking it as a
        // file makes the unwinder the system's (NEEDED libgcc_s.so.1, as in
        // a plain cargo build) instead of zig's static libunwind, whose
        // unwinding state the system unwinder LuaJIT raises errors with does
        // not share: a Lua error raised by the library crashed Neovim.
        println!("cargo:rerun-if-env-changed=MIA_PORTABLE_LIBGCC_S");
        let gcc_s = var("MIA_PORTABLE_LIBGCC_S");
        if !gcc_s.is_empty() {
            println!("cargo:rustc-cdylib-link-arg={gcc_s}");
        }
        return;
    }
    if var("TARGET") != var("HOST") || var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    if host_glibc().is_none_or(|v| v < (2, 36)) {
        return;
    }
    let linker = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".into());
    let out = Path::new(&var("OUT_DIR")).join("relr-probe.so");
    // An empty C file linked into a shared object. A linker that does not
    // know the option only warns that it ignores it (even GNU ld's
    // --fatal-warnings lets that pass), so any output counts as a refusal.
    let accepted = Command::new(&linker)
        .args(["-shared", "-x", "c", "-", "-o"])
        .arg(&out)
        .arg("-Wl,-z,pack-relative-relocs")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.is_empty() && o.stderr.is_empty());
    let _ = fs::remove_file(&out);
    if accepted {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,pack-relative-relocs");
    }
}

/// The version of the glibc this build script runs on (the host's; with
/// TARGET equal to HOST, the one the library links against).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn host_glibc() -> Option<(u32, u32)> {
    extern "C" {
        fn gnu_get_libc_version() -> *const std::ffi::c_char;
    }
    // SAFETY: glibc returns a pointer to a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) }
        .to_str()
        .ok()?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn host_glibc() -> Option<(u32, u32)> {
    None
}
