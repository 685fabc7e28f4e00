//! The version contract between the native library and the Lua side.
//!
//! `lua/mia/version.lua` holds the same string; `build.rs` refuses to build
//! when the two differ, and the Lua loader refuses a library whose version
//! differs from its own, so a stale build is named instead of misbehaving.

/// The crate version, equal to `lua/mia/version.lua`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Bumped whenever the shape of the functions or events crossing into Lua changes.
pub const PROTOCOL: u32 = 1;
