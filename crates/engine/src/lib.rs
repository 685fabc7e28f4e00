//! mia's core: tools, sessions, the agent loop, MCP servers, external ACP
//! agents and mia-acp's server, checkpoints, hooks and telemetry. It stands
//! on the pure crates (`mia_cost`, `mia_llm`, `mia_store`, `mia_log`) and
//! knows nothing of Neovim: the `mia` crate (the cdylib Neovim loads) and
//! `mia-acp` are its two front-ends.
//!
//! Within this crate (top-level modules; `a → b` means `a` names `b`'s items):
//!
//! ```text
//! git         → (nothing: the one way mia runs git)
//! reaper      → (nothing: process groups mia started)
//! calls       → events
//! events      → session, tools
//! shared      → tools
//! hooks       → calls, events, telemetry
//! checkpoint  → git, session, tools
//! config      → acp (mia-acp's memory default), checkpoint, shared
//! edit        → agent, tools
//! tools       → calls, checkpoint, events, mcp, session, shared, telemetry
//! session     → agent, checkpoint, telemetry, tools
//! telemetry   → app, session, tools
//! mcp         → acp, agent, reaper, tools
//! agent       → acp, app, calls, checkpoint, events, hooks, mcp, session, telemetry, tools
//! stream_task → agent, calls, events, hooks, session
//! acp         → agent, app, calls, events, hooks, mcp, reaper, session, shared, stream_task, tools
//! app         → acp, agent, calls, events, hooks, reaper, session, stream_task, telemetry, tools
//! ```
//!
//! Inside one crate these are not enforced, and cycles remain (e.g. `tools`
//! ↔ `session`, `agent` ↔ `app`); the crates around it are.
//!
//! `app` holds what a front-end runs with (the tokio runtime, the event
//! queue, providers, settings, the tool registry, sessions, the store,
//! pending calls): each front-end builds one `App` and hands it, or the part
//! a task needs, to the core.

pub mod acp;
pub mod agent;
pub mod app;
pub mod calls;
pub mod checkpoint;
pub mod config;
pub mod edit;
pub mod events;
pub mod git;
pub mod hooks;
pub mod mcp;
pub mod reaper;
pub mod sandbox;
pub mod session;
pub mod shared;
pub mod stream_task;
pub mod telemetry;
pub mod tools;
