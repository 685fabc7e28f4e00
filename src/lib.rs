//! The Lua module `mia_core` that Neovim loads: the only crate that knows
//! mlua. Lua values come in, calls go to the core (`mia_engine`), Lua values
//! go out. The layer map of the crates below is in CONTRIBUTING.md and the
//! workspace's Cargo.toml.

mod nvim;
