//! mia's native core. Everything below `nvim/` is plain Rust, usable and
//! testable without Neovim; `nvim/` is the only module that knows mlua.

pub mod agent;
pub mod calls;
pub mod cost;
pub mod events;
pub mod hooks;
pub mod llm;
pub mod logging;
pub mod runtime;
pub mod session;
pub mod shared;
pub mod store;
pub mod stream_task;
pub mod tools;
pub mod version;

#[cfg(feature = "nvim")]
mod nvim;
