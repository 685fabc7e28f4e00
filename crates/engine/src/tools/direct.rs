//! Running one registered tool directly, without a model and without
//! permission checks: the caller is the user's own Lua (`mia_core.run_tool`,
//! scripts, the tool round-trip benchmark). `nvim/` only converts the Lua
//! arguments and hands the result back.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::registry::Registry;
use super::{schema, AgentInfo, ToolContext, ToolError, ToolLimits, ToolOutput};
use crate::calls::LuaBridge;

/// Most runs one direct call may ask for (`times`); more are clamped to it.
pub const MAX_RUNS: u32 = 1_000_000;

/// One direct run: which tool, with what, where, how many times in a row.
#[derive(Debug, Clone)]
pub struct DirectRun {
    pub name: String,
    pub args: Value,
    /// The project root the tool works in.
    pub root: PathBuf,
    /// Runs in a row (the result is the last one's); 0 counts as 1, more
    /// than [`MAX_RUNS`] as [`MAX_RUNS`].
    pub times: u32,
}

/// What a direct run returns: the last run's output and, when the tool ran,
/// the time all runs took together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectOutput {
    #[serde(flatten)]
    pub output: ToolOutput,
    /// Microseconds for all `times` runs; absent when the arguments were refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_us: Option<u64>,
}

/// Where a direct run happens: the tools it may name, the limits of the
/// built-in tools, the way to Neovim (for Lua tools), and what stops it.
#[derive(Clone)]
pub struct DirectEnv {
    pub registry: Arc<Registry>,
    pub limits: ToolLimits,
    pub lua: LuaBridge,
    /// Where edit decisions are counted.
    pub telemetry: Arc<crate::telemetry::Hub>,
    /// The id the run's calls into Neovim are made under.
    pub stream: u64,
    pub abort: CancellationToken,
}

/// Runs `run.name` `run.times` times in a row. Arguments that do not match
/// the tool's schema come back as a tool error (the tool does not run), as
/// the model would see them; an unknown tool is an error.
pub async fn run_direct(env: DirectEnv, run: DirectRun) -> Result<DirectOutput, ToolError> {
    let (tool, compiled) = env.registry.get_checked(&run.name)?;
    if let Err(problem) = schema::check(&run.name, &compiled, &run.args) {
        return Ok(DirectOutput {
            output: ToolOutput::from(problem),
            elapsed_us: None,
        });
    }
    let agent = AgentInfo {
        name: "mia".into(),
        mode: "script".into(),
    };
    let ctx = ToolContext {
        call_id: format!("run-{}", env.stream),
        abort: env.abort,
        limits: env.limits,
        telemetry: env.telemetry,
        ..ToolContext::new(env.stream, run.root, agent, env.lua)
    };
    let started = Instant::now();
    let mut out = tool.call(run.args.clone(), ctx.clone()).await;
    for _ in 1..run.times.clamp(1, MAX_RUNS) {
        out = tool.call(run.args.clone(), ctx.clone()).await;
    }
    let elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    Ok(DirectOutput {
        output: out,
        elapsed_us: Some(elapsed_us),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventQueue;
    use crate::tools::registry::ToolSource;
    use crate::tools::Tool;
    use futures_util::future::BoxFuture;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Counts its calls; `{ "n": integer }` is its only argument.
    struct Counter(Arc<AtomicU32>);
    impl Tool for Counter {
        fn name(&self) -> &str {
            "count"
        }
        fn description(&self) -> &str {
            "counts"
        }
        fn parameters(&self) -> Value {
            serde_json::json!({ "type": "object", "properties": { "n": { "type": "integer" } }, "required": ["n"] })
        }
        fn effect(&self) -> super::super::ToolEffect {
            super::super::ToolEffect::Read
        }
        fn call(&self, _: Value, _: ToolContext) -> BoxFuture<'static, ToolOutput> {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move { ToolOutput::ok(format!("call {n}")) })
        }
    }

    fn env(registry: Registry) -> DirectEnv {
        DirectEnv {
            telemetry: Arc::default(),
            registry: Arc::new(registry),
            limits: ToolLimits::default(),
            lua: LuaBridge::new(Arc::new(EventQueue::new().unwrap()), Arc::default()),
            stream: 1,
            abort: CancellationToken::new(),
        }
    }

    fn run(name: &str, args: Value, times: u32) -> DirectRun {
        DirectRun {
            name: name.into(),
            args,
            root: std::env::temp_dir(),
            times,
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn counting_registry() -> (Registry, Arc<AtomicU32>) {
        let calls = Arc::new(AtomicU32::new(0));
        let registry = Registry::default();
        registry.register(Arc::new(Counter(calls.clone())), ToolSource::User);
        (registry, calls)
    }

    #[test]
    fn runs_the_tool_times_in_a_row_and_returns_the_last_output() {
        let (registry, calls) = counting_registry();
        let out = block_on(run_direct(
            env(registry),
            run("count", serde_json::json!({ "n": 1 }), 3),
        ))
        .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(out.output.content, "call 3");
        assert!(!out.output.is_error);
        assert!(out.elapsed_us.is_some());
    }

    #[test]
    fn zero_times_still_runs_once() {
        let (registry, calls) = counting_registry();
        block_on(run_direct(
            env(registry),
            run("count", serde_json::json!({ "n": 1 }), 0),
        ))
        .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn arguments_that_miss_the_schema_come_back_as_a_tool_error_without_running() {
        let (registry, calls) = counting_registry();
        let out = block_on(run_direct(env(registry), run("count", serde_json::json!({}), 1))).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        assert!(out.output.is_error);
        assert!(
            out.output.content.contains("Invalid arguments for `count`"),
            "{}",
            out.output.content
        );
        assert_eq!(out.elapsed_us, None);
    }

    #[test]
    fn an_unknown_tool_is_an_error_that_lists_the_known_ones() {
        let (registry, _) = counting_registry();
        let err = block_on(run_direct(env(registry), run("nope", Value::Null, 1))).unwrap_err();
        assert_eq!(err.to_string(), "no tool named `nope`; available tools: count");
    }

    #[test]
    fn the_result_has_the_shape_lua_reads() {
        let (registry, _) = counting_registry();
        let out = block_on(run_direct(
            env(registry),
            run("count", serde_json::json!({ "n": 1 }), 1),
        ))
        .unwrap();
        let value = serde_json::to_value(&out).unwrap();
        assert_eq!(value["content"], "call 1");
        assert_eq!(value["is_error"], false);
        assert!(value["elapsed_us"].is_u64(), "{value}");
    }
}
