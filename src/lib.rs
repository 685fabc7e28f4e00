//! mia's native core. Everything below `nvim/` is plain Rust, usable and
//! testable without Neovim; `nvim/` is the only module that knows mlua.
//!
//! Who imports whom (top-level modules; `a → b` means `a` names `b`'s items):
//!
//! ```text
//! cost        → (nothing: token counts, prices, dollars, calendar days)
//! git         → (nothing: the one way mia runs git)
//! secret_env  → (nothing: the variables mia reads keys from)
//! llm         → cost, secret_env
//! store       → cost, llm
//! events      → llm
//! calls       → events
//! tools       → calls, llm, secret_env
//! hooks       → calls, events, llm
//! acp         → agent, calls, cost, events, secret_env, session, store, tools (external ACP agents)
//! agent       → calls, cost, events, hooks, llm, runtime, store, tools
//! stream_task → agent, calls, cost, events, hooks, llm, store
//! runtime     → agent, events, llm, store, tools
//! nvim        → everything (the boundary: Lua values in, core calls, Lua values out)
//! ```
//!
//! `runtime` holds the process-wide state (the tokio runtime, the event
//! queue, providers, settings, the tool registry, the store); only `nvim/`
//! should reach into it and hand what a task needs to the core. `cost`,
//! `llm`, `store`, `tools` and `stream_task` do not import `runtime`;
//! `agent` still does (session modes, the store), which is the one cycle
//! left (`agent` ↔ `runtime`).

pub mod acp;
pub mod agent;
pub mod calls;
pub mod checkpoint;
pub mod cost;
pub mod events;
pub mod git;
pub mod hooks;
pub mod llm;
pub mod logging;
pub mod mcp;
pub mod reaper;
pub mod runtime;
pub mod secret_env;
pub mod session;
pub mod shared;
pub mod store;
pub mod stream_task;
pub mod telemetry;
pub mod tools;
pub mod version;

#[cfg(feature = "nvim")]
mod nvim;
