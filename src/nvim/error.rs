//! The one error type of the Lua boundary: every failure a `mia_core`
//! function raises is one of these, turned into the `mlua::Error` Lua sees.
//!
//! Lua sees each as a `RuntimeError` (raised as a plain string, which
//! `pcall` returns and `:messages` shows): the message is the whole
//! contract, and the functional tests match on it, so each variant's text
//! is exactly what the ad-hoc strings said before.

use mlua::prelude::LuaError;

/// Why a `mia_core` function failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvimError {
    /// A Rust panic caught at the boundary (`guarded`).
    #[error("mia: internal error in {what} (see the log file named by :checkhealth mia)")]
    Internal { what: String },
    /// The wake descriptor (eventfd or pipe) could not be made.
    #[error("mia: cannot create the wake descriptor: {0}")]
    WakeFd(String),
    /// The tokio runtime could not be started.
    #[error("mia: cannot start the runtime: {0}")]
    Runtime(String),
    /// A configuration table that does not deserialize (`what`: provider, agent, telemetry).
    #[error("mia: invalid {what} configuration: {detail}")]
    InvalidConfig { what: &'static str, detail: String },
    /// An argument of `func` that does not deserialize.
    #[error("{func}: invalid {arg}: {detail}")]
    InvalidArgument {
        func: &'static str,
        arg: &'static str,
        detail: String,
    },
    /// An argument of `func` that is not one the core knows (a tool source, MCP servers).
    #[error("{func}: bad {arg}: {detail}")]
    BadArgument {
        func: &'static str,
        arg: &'static str,
        detail: String,
    },
    /// A Lua tool's spec that does not deserialize.
    #[error("mia.register_tool: {0}")]
    ToolSpec(String),
    /// `opts.agent` of `stream`/`send` is too long for a usage row.
    #[error("{func}: opts.agent is longer than {max} characters; give a short name")]
    AgentNameTooLong { func: &'static str, max: usize },
    /// The core refused or could not do what was asked; the text names
    /// the cause and the fix.
    #[error("mia: {0}")]
    Refused(String),
    /// A failure whose own message already says it all (the core's typed
    /// errors: a session not found, a turn already running, a telemetry setting).
    #[error("{0}")]
    Failed(String),
}

impl NvimError {
    /// `what`'s configuration, from serde's error without its "deserialize error: " prefix.
    pub fn config(what: &'static str, e: impl std::fmt::Display) -> Self {
        NvimError::InvalidConfig {
            what,
            detail: deserialize_detail(e),
        }
    }

    /// Argument `arg` of `func`, from serde's error without its prefix.
    pub fn argument(func: &'static str, arg: &'static str, e: impl std::fmt::Display) -> Self {
        NvimError::InvalidArgument {
            func,
            arg,
            detail: deserialize_detail(e),
        }
    }

    /// Argument `arg` of `func`, with the error's whole text.
    pub fn argument_raw(func: &'static str, arg: &'static str, e: impl std::fmt::Display) -> Self {
        NvimError::InvalidArgument {
            func,
            arg,
            detail: e.to_string(),
        }
    }

    /// An unknown value `arg` of `func`, with the error's whole text.
    pub fn bad(func: &'static str, arg: &'static str, e: impl std::fmt::Display) -> Self {
        NvimError::BadArgument {
            func,
            arg,
            detail: e.to_string(),
        }
    }
}

/// serde's message for a Lua value, without mlua's "deserialize error: " prefix.
fn deserialize_detail(e: impl std::fmt::Display) -> String {
    e.to_string().trim_start_matches("deserialize error: ").to_string()
}

impl From<NvimError> for LuaError {
    fn from(e: NvimError) -> Self {
        LuaError::RuntimeError(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua_sees(e: NvimError) -> String {
        match LuaError::from(e) {
            LuaError::RuntimeError(m) => m,
            other => panic!("not a runtime error: {other:?}"),
        }
    }

    #[test]
    fn every_variant_reaches_lua_as_a_runtime_error_with_its_message() {
        let cases = [
            (
                NvimError::Internal { what: "drain".into() },
                "mia: internal error in drain (see the log file named by :checkhealth mia)",
            ),
            (
                NvimError::WakeFd("too many open files".into()),
                "mia: cannot create the wake descriptor: too many open files",
            ),
            (
                NvimError::Runtime("no threads".into()),
                "mia: cannot start the runtime: no threads",
            ),
            (
                NvimError::config("provider", "deserialize error: missing field `kind`"),
                "mia: invalid provider configuration: missing field `kind`",
            ),
            (
                NvimError::argument("mia.stream", "request", "deserialize error: missing field `model`"),
                "mia.stream: invalid request: missing field `model`",
            ),
            (
                NvimError::argument_raw("mia.costs", "query", "deserialize error: bad"),
                "mia.costs: invalid query: deserialize error: bad",
            ),
            (
                NvimError::bad("mia.register_tool", "source", "unknown variant `x`"),
                "mia.register_tool: bad source: unknown variant `x`",
            ),
            (
                NvimError::ToolSpec("missing field `name`".into()),
                "mia.register_tool: missing field `name`",
            ),
            (
                NvimError::AgentNameTooLong {
                    func: "mia.send",
                    max: 64,
                },
                "mia.send: opts.agent is longer than 64 characters; give a short name",
            ),
            (
                NvimError::Refused("unknown export format `x`; use csv or json".into()),
                "mia: unknown export format `x`; use csv or json",
            ),
            (
                NvimError::Failed("a turn is already running".into()),
                "a turn is already running",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(lua_sees(error), message);
        }
    }
}
