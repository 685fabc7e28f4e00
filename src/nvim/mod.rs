//! The Lua module `mia_core`: the only code that knows mlua. It converts Lua
//! values to core types and back; the work happens in the core.
//!
//! Every function here runs on Neovim's main thread and returns at once:
//! none waits on the network, the disk or a contended lock.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod agent_api;
mod checkpoint_api;
mod config_api;
mod drain_json;
mod edit_api;
mod error;
mod mcp_api;
mod staleness;
mod store_api;
mod telemetry_api;

use mlua::prelude::*;
use mlua::serde::SerializeOptions;
use tokio_util::sync::CancellationToken;

use mia_engine::app::App;
use mia_engine::events::Event;
use mia_engine::stream_task;
use mia_llm::message::ChatRequest;
use mia_llm::providers::CoreConfig;
use mia_log::{self as logging, version};
use mia_proto::EditorCall;

use error::NvimError;

/// The editor's front-end: the one handle to its app, and what only the
/// editor keeps beside it.
pub(crate) struct Front {
    app: std::sync::Arc<App>,
    /// The write `exit_note` started, which `shutdown` lets finish (bounded).
    exit_note: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Finished exports whose chunks Lua has not taken yet (`store_api`).
    pub(crate) exports: std::sync::Mutex<store_api::Exports>,
}

/// This Neovim's front-end. A static, not mlua's app data:
/// `require("mia_core")` may run again over the same process (a
/// `package.loaded` reset) and must find the same runtime and event queue
/// (whose wake descriptor Neovim's loop watches), and the runtime's tasks
/// outlive any one borrow of the Lua state.
static FRONT: std::sync::OnceLock<Front> = std::sync::OnceLock::new();

/// This Neovim's front-end (built, starting nothing, on first use).
pub(crate) fn front() -> &'static Front {
    FRONT.get_or_init(|| Front {
        app: App::new(),
        exit_note: std::sync::Mutex::default(),
        exports: std::sync::Mutex::default(),
    })
}

/// This Neovim's app.
pub(crate) fn app() -> &'static std::sync::Arc<App> {
    &front().app
}

static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

/// A new stream id (unique in this process).
fn new_stream() -> u64 {
    NEXT_STREAM.fetch_add(1, Ordering::Relaxed)
}

/// Longest `shutdown` may wait for tasks, whatever Lua asks (`:qa` waits for it).
const MAX_SHUTDOWN: Duration = Duration::from_millis(100);

/// Runs `f`, turning a Rust panic into a Lua error instead of unwinding into Neovim.
fn guarded<T>(what: &str, f: impl FnOnce() -> LuaResult<T>) -> LuaResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => Err(NvimError::Internal { what: what.to_string() }.into()),
    }
}

fn to_lua<T: serde::Serialize>(lua: &Lua, value: &T) -> LuaResult<LuaValue> {
    lua.to_value_with(
        value,
        SerializeOptions::new()
            .serialize_none_to_null(false)
            .serialize_unit_to_null(false)
            .set_array_metatable(false),
    )
}

/// A path from Lua, byte for byte (a plugin directory's name need not be UTF-8).
#[cfg(unix)]
fn lua_path(s: &LuaString) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(&s.as_bytes()))
}

#[cfg(not(unix))]
fn lua_path(s: &LuaString) -> PathBuf {
    PathBuf::from(s.to_string_lossy())
}

/// A path for Lua, byte for byte where the platform allows.
#[cfg(unix)]
fn path_to_lua(lua: &Lua, path: &std::path::Path) -> LuaResult<LuaString> {
    use std::os::unix::ffi::OsStrExt;
    lua.create_string(path.as_os_str().as_bytes())
}

#[cfg(not(unix))]
fn path_to_lua(lua: &Lua, path: &std::path::Path) -> LuaResult<LuaString> {
    lua.create_string(path.to_string_lossy().as_bytes())
}

/// What `stream()` returns to Lua besides the id: cancelling it stops the stream.
pub(crate) struct StreamHandle {
    id: u64,
    cancel: CancellationToken,
}

impl LuaUserData for StreamHandle {
    fn add_fields<F: LuaUserDataFields<Self>>(fields: &mut F) {
        fields.add_field_method_get("id", |_, this| Ok(this.id));
    }

    fn add_methods<M: LuaUserDataMethods<Self>>(methods: &mut M) {
        methods.add_method("cancel", |_, this, ()| {
            this.cancel.cancel();
            Ok(())
        });
    }
}

/// `init({ log_file, log_level })` -> wake fd. Idempotent.
fn init(_: &Lua, opts: Option<LuaTable>) -> LuaResult<i64> {
    guarded("init", || {
        if let Some(opts) = opts {
            let file: Option<String> = opts.get("log_file")?;
            let level: Option<String> = opts.get("log_level")?;
            if let Some(file) = file {
                logging::init(&PathBuf::from(file), level.as_deref().unwrap_or("info"));
            }
        }
        let queue = app().queue().map_err(|e| NvimError::WakeFd(e.to_string()))?;
        Ok(i64::from(queue.fd()))
    })
}

/// `configure(config)`: providers and timeouts, as `setup()` validated them.
fn configure(lua: &Lua, config: LuaValue) -> LuaResult<()> {
    guarded("configure", || {
        let config: CoreConfig = lua.from_value(config).map_err(|e| NvimError::config("provider", e))?;
        app().configure(config);
        Ok(())
    })
}

/// `prewarm(model?)`: starts the runtime, which opens the store and
/// `model`'s HTTP client in the background (see `App::prewarm`).
fn prewarm(_: &Lua, model: Option<String>) -> LuaResult<()> {
    guarded("prewarm", || {
        app()
            .prewarm(model)
            .map_err(|e| LuaError::from(NvimError::Runtime(e.to_string())))
    })
}

fn runtime_and_queue() -> LuaResult<(tokio::runtime::Handle, std::sync::Arc<mia_engine::events::EventQueue>)> {
    app().runtime_and_queue().map_err(lua_error)
}

/// The second argument of `stream`/`send`: who the call is recorded under.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct RequestOpts {
    agent: Option<String>,
    session_id: Option<String>,
    utc_offset_s: i32,
}

/// Longest agent name a usage row takes from `opts.agent`.
const MAX_AGENT_NAME: usize = 64;

fn start_request(lua: &Lua, request: LuaValue, opts: LuaValue, streaming: bool) -> LuaResult<StreamHandle> {
    let what = if streaming { "mia.stream" } else { "mia.send" };
    let request: ChatRequest = lua
        .from_value(request)
        .map_err(|e| NvimError::argument(what, "request", e))?;
    let opts: RequestOpts = match opts {
        LuaValue::Nil => RequestOpts::default(),
        v => lua.from_value(v).map_err(|e| NvimError::argument(what, "opts", e))?,
    };
    let agent = match opts.agent.as_deref().map(str::trim) {
        None | Some("") => "api".to_string(),
        Some(name) if name.chars().count() <= MAX_AGENT_NAME => name.to_string(),
        Some(_) => {
            return Err(NvimError::AgentNameTooLong {
                func: what,
                max: MAX_AGENT_NAME,
            }
            .into())
        }
    };
    let api = stream_task::ApiCall {
        agent,
        utc_offset_s: opts.utc_offset_s.clamp(-86_400, 86_400),
        budgets: app().agent_settings().costs,
        session_id: opts.session_id.filter(|s| !s.is_empty()),
        hooks: app().hooks(),
        telemetry: app().telemetry(),
        ledger: app().store_slot().ledger(),
    };
    let (rt, queue) = runtime_and_queue()?;
    let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
    let cancel = CancellationToken::new();
    stream_task::spawn_stream(
        &rt,
        queue,
        app().providers(),
        app().calls(),
        app().store(),
        id,
        request,
        streaming,
        api,
        cancel.clone(),
    );
    Ok(StreamHandle { id, cancel })
}

/// `stream(request, opts?)` -> handle. Starts the runtime on first use.
fn stream(lua: &Lua, (request, opts): (LuaValue, LuaValue)) -> LuaResult<StreamHandle> {
    guarded("stream", || start_request(lua, request, opts, true))
}

/// `send(request, opts?)` -> handle: the same events over a non-streaming request.
fn send(lua: &Lua, (request, opts): (LuaValue, LuaValue)) -> LuaResult<StreamHandle> {
    guarded("send", || start_request(lua, request, opts, false))
}

/// `set_hooks(pre_request)`: whether model requests must go through Lua's
/// `pre_request` transform hooks first.
fn set_hooks(_: &Lua, pre_request: bool) -> LuaResult<()> {
    app().hooks().set(pre_request);
    Ok(())
}

/// Starts a one-shot job whose value arrives as one `result` event.
pub(crate) fn start_job<F, Fut>(what: &str, job: F) -> LuaResult<StreamHandle>
where
    F: FnOnce(std::sync::Arc<mia_llm::providers::Providers>) -> Fut,
    Fut: std::future::Future<Output = Result<serde_json::Value, mia_llm::error::LlmError>> + Send + 'static,
{
    guarded(what, || {
        let (rt, queue) = runtime_and_queue()?;
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        stream_task::spawn_job(&rt, queue, id, cancel.clone(), job(app().providers()));
        Ok(StreamHandle { id, cancel })
    })
}

/// `list_models(provider)` -> handle; its result is a list of model ids.
fn list_models(_: &Lua, provider: String) -> LuaResult<StreamHandle> {
    start_job("list_models", move |providers| async move {
        mia_llm::list_models(&providers, &provider)
            .await
            .map(|ids| serde_json::json!(ids))
    })
}

/// `health_check(provider)` -> handle; its result is `{ models = n }`.
fn health_check(_: &Lua, provider: String) -> LuaResult<StreamHandle> {
    start_job("health_check", move |providers| async move {
        mia_llm::health_check(&providers, &provider)
            .await
            .map(|h| serde_json::to_value(h).unwrap_or_default())
    })
}

/// A failure whose message says it all, as Lua sees it.
pub(super) fn lua_error(e: impl std::fmt::Display) -> LuaError {
    NvimError::Failed(e.to_string()).into()
}

/// `model_info("provider/model", pricing)` -> `{ context?, input, output }`
/// from the price table with the user's `pricing` overrides, or nil when
/// the model has no price: `:checkhealth` says what `:Mia context` and the
/// statusline's context fill can show. Starts nothing.
fn model_info(lua: &Lua, (model, pricing): (String, LuaValue)) -> LuaResult<LuaValue> {
    guarded("model_info", || {
        let Some((provider, id)) = model.split_once('/') else {
            return Ok(LuaValue::Nil);
        };
        let overrides = lua.from_value(pricing).unwrap_or_default();
        let registry = mia_cost::PricingRegistry::with_overrides(overrides)
            .unwrap_or_else(|_| mia_cost::PricingRegistry::builtin().clone());
        match registry.price(provider, id) {
            Some(p) => to_lua(
                lua,
                &serde_json::json!({ "context": p.context, "input": p.input, "output": p.output }),
            ),
            None => Ok(LuaValue::Nil),
        }
    })
}

/// `format_footer(turn_end)` -> the chat's footer line for a turn's totals
/// (`── model · 1,247 in · 832 out · $0.031 ──`): money and token formats are Rust's.
fn format_footer(lua: &Lua, end: LuaValue) -> LuaResult<String> {
    guarded("format_footer", || {
        let end: mia_engine::session::TurnEnd = lua.from_value(end).map_err(lua_error)?;
        Ok(end.footer())
    })
}

/// `run_tool(name, args, root, times?)` -> handle whose result is
/// `{ content, is_error, metadata, elapsed_us }`: runs one registered tool
/// directly (`times` times in a row, default 1), without a model or
/// permission checks: the caller is the user's own Lua. Used by scripts and
/// by the tool round-trip benchmark.
fn run_tool(lua: &Lua, (name, args, root, times): (String, LuaValue, String, Option<u32>)) -> LuaResult<StreamHandle> {
    let args: serde_json::Value = lua.from_value(args).unwrap_or(serde_json::Value::Null);
    guarded("run_tool", || {
        let (rt, queue) = runtime_and_queue()?;
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let settings = app().agent_settings();
        let env = mia_engine::tools::direct::DirectEnv {
            registry: app().registry(),
            limits: mia_engine::tools::ToolLimits {
                max_read_bytes: settings.max_read_bytes,
                output_cap_bytes: settings.output_cap_bytes,
                bash_timeout_ms: settings.bash_timeout_ms,
                ..mia_engine::tools::ToolLimits::default()
            },
            lua: mia_engine::calls::LuaBridge::new(queue.clone(), app().calls()),
            telemetry: app().telemetry(),
            stream: id,
            abort: cancel.clone(),
        };
        let run = mia_engine::tools::direct::DirectRun {
            name,
            args,
            root: PathBuf::from(root),
            times: times.unwrap_or(1),
        };
        stream_task::spawn_job(&rt, queue, id, cancel.clone(), async move {
            let out = mia_engine::tools::direct::run_direct(env, run).await.map_err(|e| {
                mia_llm::error::LlmError::new(mia_llm::error::ErrorClass::InvalidRequest, None, e.to_string())
            })?;
            Ok(serde_json::to_value(out).unwrap_or(serde_json::Value::Null))
        });
        Ok(StreamHandle { id, cancel })
    })
}

/// `reply(call, ok, value)`: Lua's answer to a call event.
fn reply(lua: &Lua, (call, ok, value): (u64, bool, LuaValue)) -> LuaResult<bool> {
    guarded("reply", || {
        let result = if ok {
            Ok(lua
                .from_value::<serde_json::Value>(value)
                .unwrap_or(serde_json::Value::Null))
        } else {
            Err(match value {
                LuaValue::String(s) => s.to_string_lossy(),
                other => format!("{other:?}"),
            })
        };
        Ok(app().calls().answer(call, result))
    })
}

/// `register_tool(spec, source)`: a Lua tool's metadata (its code stays in Lua).
fn register_tool(lua: &Lua, (spec, source): (LuaValue, String)) -> LuaResult<bool> {
    guarded("register_tool", || {
        let spec: mia_engine::tools::lua_tool::LuaToolSpec = lua
            .from_value(spec)
            .map_err(|e| NvimError::ToolSpec(e.to_string().trim_start_matches("deserialize error: ").to_string()))?;
        let source: mia_engine::tools::registry::ToolSource = lua
            .from_value(LuaValue::String(lua.create_string(&source)?))
            .map_err(|e| NvimError::bad("mia.register_tool", "source", e))?;
        let tool = std::sync::Arc::new(mia_engine::tools::lua_tool::LuaTool { spec });
        Ok(app().registry().register(tool, source))
    })
}

/// `unregister_tool(name, source)`.
fn unregister_tool(lua: &Lua, (name, source): (String, String)) -> LuaResult<()> {
    guarded("unregister_tool", || {
        let source: mia_engine::tools::registry::ToolSource = lua
            .from_value(LuaValue::String(lua.create_string(&source)?))
            .map_err(|e| NvimError::bad("mia", "tool source", e))?;
        app().registry().unregister(&name, source);
        Ok(())
    })
}

/// `watch_tools()` -> handle: a stream that never ends (until cancelled) of
/// `tool_change` events, one per change of what a tool name means.
fn watch_tools(_: &Lua, (): ()) -> LuaResult<StreamHandle> {
    guarded("watch_tools", || {
        let (rt, queue) = runtime_and_queue()?;
        let stream = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let mut changes = app().registry().subscribe();
        let stop = cancel.clone();
        rt.spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                let change = tokio::select! {
                    _ = stop.cancelled() => return,
                    c = changes.recv() => c,
                };
                match change {
                    Ok(c) => queue.push(mia_engine::events::Event::Mia {
                        stream,
                        event: mia_engine::events::MiaEvent::ToolChange {
                            name: c.name,
                            source: c.source,
                            registered: c.registered,
                        },
                    }),
                    Err(RecvError::Lagged(n)) => {
                        tracing::warn!("tool change events: {n} were dropped (listener behind)")
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
        Ok(StreamHandle { id: stream, cancel })
    })
}

/// `tools()` -> every registered tool `{ name, description, parameters, source, effect }`.
fn tools(lua: &Lua, (): ()) -> LuaResult<LuaValue> {
    guarded("tools", || to_lua(lua, &app().registry().list()))
}

/// `mcp_status(servers)` -> each of `servers` (as `configure_agent` takes
/// them) `{ name, state, tools?, resources?, prompts?, reason? }` (`state`: not_started, starting,
/// ready, failed). Never waits.
fn mcp_status(lua: &Lua, servers: LuaValue) -> LuaResult<LuaValue> {
    guarded("mcp_status", || {
        let specs: Vec<mia_engine::mcp::McpServerSpec> = match servers {
            LuaValue::Nil => Vec::new(),
            v => lua.from_value(v).map_err(|e| NvimError::bad("mia", "mcp servers", e))?,
        };
        let list: Vec<serde_json::Value> = mia_engine::mcp::status(&app().mcp(), &specs)
            .into_iter()
            .map(|(name, state)| {
                let mut v = serde_json::to_value(state).unwrap_or_default();
                v["name"] = serde_json::Value::from(name);
                v
            })
            .collect();
        to_lua(lua, &list)
    })
}

/// `configure_agent(settings)`: permissions, limits, data directory.
fn configure_agent(lua: &Lua, settings: LuaValue) -> LuaResult<()> {
    guarded("configure_agent", || {
        let settings: mia_engine::agent::AgentSettings =
            lua.from_value(settings).map_err(|e| NvimError::config("agent", e))?;
        app().configure_agent(settings);
        Ok(())
    })
}

/// `ack()` -> urgent: clears the wake fd (called from the poll watcher, a
/// fast event); true when a call into Lua waits in the queue.
fn ack(_: &Lua, (): ()) -> LuaResult<bool> {
    guarded("ack", || Ok(app().queue().map(|q| q.ack()).unwrap_or(false)))
}

/// What `drain` returns: the events (or one piece's text), the next
/// frame's wait, the piece's stream, the live figures beside it.
type Drained = (
    LuaValue,
    Option<u64>,
    Option<mia_engine::events::StreamId>,
    Option<LuaString>,
);

/// `drain()` -> list of `{ stream, kind = "delta"|"done"|"error", data }`,
/// and the milliseconds until the next frame's drain when streamed text
/// was just taken (nil otherwise): the caller must drain again then, as
/// until it does only urgent events wake it (`EventQueue::drain_paced`).
/// When the one event taken is a plain piece of the answer, the first value
/// is its text and a third names its stream: the caller wraps it as that
/// `agent_message_chunk` (see `drain_json::plain_answer_text`). That is
/// most frames of a stream, and it halves the drain's time on the main
/// thread (no JSON written and decoded; 50 Hz bench: median 90-99 µs a
/// drain before, 47-50 after). When that piece comes with the stream's
/// live figures (three times a second), a fourth value holds them as the
/// JSON of a one-event list for the caller to decode.
fn drain(lua: &Lua, (): ()) -> LuaResult<Drained> {
    guarded("drain", || {
        let queue = app().queue().map_err(|e| NvimError::Refused(e.to_string()))?;
        let (events, next) = queue.drain_paced(std::time::Instant::now());
        let next_ms = next.map(|d| u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX));
        if events.is_empty() {
            return Ok((LuaValue::Table(lua.create_table()?), next_ms, None, None));
        }
        if let Some((text, figures)) = drain_json::text_with_live_figures(&events) {
            if let Some(json) = drain_json::to_json(std::slice::from_ref(figures)) {
                return Ok((
                    LuaValue::String(lua.create_string(text)?),
                    next_ms,
                    Some(figures.stream()),
                    Some(lua.create_string(json)?),
                ));
            }
        }
        if let [event] = events.as_slice() {
            if let Some(text) = drain_json::plain_answer_text(event) {
                return Ok((
                    LuaValue::String(lua.create_string(text)?),
                    next_ms,
                    Some(event.stream()),
                    None,
                ));
            }
        }
        if let Some(out) = drain_json::events_table(lua, &events)? {
            return Ok((LuaValue::Table(out), next_ms, None, None));
        }
        let out = lua.create_table_with_capacity(events.len(), 0)?;
        for (i, event) in events.into_iter().enumerate() {
            let t = lua.create_table_with_capacity(0, 3)?;
            t.set("stream", event.stream())?;
            match &event {
                Event::Delta { delta, .. } => {
                    t.set("kind", "delta")?;
                    t.set("data", to_lua(lua, delta)?)?;
                }
                Event::Done { done, .. } => {
                    t.set("kind", "done")?;
                    t.set("data", to_lua(lua, done.as_ref())?)?;
                }
                Event::Error { error, .. } => {
                    t.set("kind", "error")?;
                    t.set("data", to_lua(lua, error)?)?;
                }
                Event::Result { value, .. } => {
                    t.set("kind", "result")?;
                    t.set("data", to_lua(lua, value)?)?;
                }
                Event::Call { call, request, .. } => {
                    t.set("kind", "call")?;
                    t.set("call", *call)?;
                    t.set("call_kind", request.kind())?;
                    let payload = request.payload();
                    if matches!(**request, EditorCall::Hook(_)) {
                        // The request comes back from Lua: empty lists must stay lists.
                        t.set(
                            "data",
                            lua.to_value_with(
                                &payload,
                                SerializeOptions::new()
                                    .serialize_none_to_null(false)
                                    .serialize_unit_to_null(false),
                            )?,
                        )?;
                    } else {
                        t.set("data", to_lua(lua, &payload)?)?;
                    }
                }
                Event::Abort { call, .. } => {
                    t.set("kind", "abort")?;
                    t.set("call", *call)?;
                }
                Event::Update { update, .. } => {
                    t.set("kind", "update")?;
                    t.set("data", to_lua(lua, update.as_ref())?)?;
                }
                Event::End { end, .. } => {
                    t.set("kind", "end")?;
                    t.set("data", to_lua(lua, end.as_ref())?)?;
                }
                Event::Mia { event, .. } => {
                    t.set("kind", "mia")?;
                    t.set("data", to_lua(lua, event)?)?;
                }
            }
            out.raw_set(i + 1, t)?;
        }
        Ok((LuaValue::Table(out), next_ms, None, None))
    })
}

/// The longest note `exit_note` keeps.
const MAX_EXIT_NOTE: usize = 8 * 1024;

/// How long `shutdown` waits for the exit note to be written.
const EXIT_NOTE_WAIT: Duration = Duration::from_millis(500);
/// How long leaving Neovim waits for the store's checkpoint (`App::checkpoint_store`).
const CHECKPOINT_AT_EXIT: Duration = Duration::from_millis(100);

/// `exit_note(path, text)`: logs `text` and leaves it in `path` for the next
/// start to show (the summary of a session Neovim is leaving). The write runs
/// on the runtime's blocking pool, which `shutdown` waits for (bounded), so
/// the main thread never waits on the disk.
fn exit_note(_: &Lua, (path, text): (String, String)) -> LuaResult<()> {
    guarded("exit_note", || {
        let (rt, _) = runtime_and_queue()?;
        let mut text = text;
        if text.len() > MAX_EXIT_NOTE {
            let mut cut = MAX_EXIT_NOTE;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let write = rt.spawn_blocking(move || {
            tracing::info!("{text}");
            let path = PathBuf::from(path);
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            let written = path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&tmp, text.as_bytes()))
                .and_then(|()| std::fs::rename(&tmp, &path));
            if let Err(e) = written {
                tracing::warn!(
                    "cannot keep the session summary for the next start in {}: {e}",
                    path.display()
                );
            }
        });
        *front().exit_note.lock().unwrap_or_else(|p| p.into_inner()) = Some(write);
        Ok(())
    })
}

/// `shutdown(ms)`: stops the runtime, waiting at most `min(ms, 100)` ms.
fn shutdown(_: &Lua, ms: Option<u64>) -> LuaResult<()> {
    guarded("shutdown", || {
        let wait = Duration::from_millis(ms.unwrap_or(100)).min(MAX_SHUTDOWN);
        // Leaving Neovim: the session summary's write gets a short bound to land.
        let note = front().exit_note.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let (Some(note), Ok(rt)) = (note, app().handle()) {
            // The timer is made inside the runtime: `timeout` built out here
            // panics (no reactor on the editor's thread) and loses the note.
            let _ = rt.block_on(async { tokio::time::timeout(EXIT_NOTE_WAIT, note).await });
        }
        app().shutdown(CHECKPOINT_AT_EXIT, wait);
        logging::flush();
        Ok(())
    })
}

/// `status()` -> `{ runtime_started, clients, providers }` for `:checkhealth` and tests.
fn status(lua: &Lua, (): ()) -> LuaResult<LuaTable> {
    guarded("status", || {
        let t = lua.create_table()?;
        t.set("runtime_started", app().started())?;
        let providers = app().providers();
        t.set("clients", providers.clients_built())?;
        t.set("providers", providers.names())?;
        t.set("store_error", app().store_error())?;
        t.set("store_unsaved", app().store_unsaved())?;
        Ok(t)
    })
}

/// `require("mia_core")`. Safe to run again over the same process (a
/// `package.loaded` reset): the app (runtime, queue...) and the logger are
/// process-wide statics that are reused, not rebuilt.
#[mlua::lua_module(name = "mia_core")]
fn mia_core(lua: &Lua) -> LuaResult<LuaTable> {
    let m = lua.create_table()?;
    m.set("version", version::VERSION)?;
    m.set("protocol", version::PROTOCOL)?;
    m.set("init", lua.create_function(init)?)?;
    m.set("configure", lua.create_function(configure)?)?;
    m.set("check_config", lua.create_function(config_api::check_config)?)?;
    m.set("stream", lua.create_function(stream)?)?;
    m.set("send", lua.create_function(send)?)?;
    m.set("edit_stream", lua.create_function(edit_api::edit_stream)?)?;
    m.set("set_hooks", lua.create_function(set_hooks)?)?;
    m.set("model_info", lua.create_function(model_info)?)?;
    m.set("format_footer", lua.create_function(format_footer)?)?;
    m.set("reply", lua.create_function(reply)?)?;
    m.set("run_tool", lua.create_function(run_tool)?)?;
    m.set("costs", lua.create_function(store_api::costs)?)?;
    m.set("costs_export", lua.create_function(store_api::costs_export)?)?;
    m.set("costs_export_take", lua.create_function(store_api::costs_export_take)?)?;
    m.set("costs_export_drop", lua.create_function(store_api::costs_export_drop)?)?;
    m.set("checkpoints", lua.create_function(checkpoint_api::checkpoints)?)?;
    m.set("checkpoint_undo", lua.create_function(checkpoint_api::checkpoint_undo)?)?;
    m.set("session_rename", lua.create_function(store_api::session_rename)?)?;
    m.set("session_delete", lua.create_function(store_api::session_delete)?)?;
    m.set("register_tool", lua.create_function(register_tool)?)?;
    m.set("unregister_tool", lua.create_function(unregister_tool)?)?;
    m.set("tools", lua.create_function(tools)?)?;
    m.set("watch_tools", lua.create_function(watch_tools)?)?;
    m.set("prewarm", lua.create_function(prewarm)?)?;
    m.set("configure_agent", lua.create_function(configure_agent)?)?;
    m.set("mcp_status", lua.create_function(mcp_status)?)?;
    m.set("mcp_start", lua.create_function(mcp_api::mcp_start)?)?;
    m.set("mcp_restart", lua.create_function(mcp_api::mcp_restart)?)?;
    m.set("mcp_read", lua.create_function(mcp_api::mcp_read)?)?;
    m.set("mcp_prompt", lua.create_function(mcp_api::mcp_prompt)?)?;
    m.set("list_models", lua.create_function(list_models)?)?;
    m.set("health_check", lua.create_function(health_check)?)?;
    m.set("ack", lua.create_function(ack)?)?;
    m.set("drain", lua.create_function(drain)?)?;
    m.set("shutdown", lua.create_function(shutdown)?)?;
    m.set("exit_note", lua.create_function(exit_note)?)?;
    m.set("status", lua.create_function(status)?)?;
    m.set(
        "telemetry_configure",
        lua.create_function(telemetry_api::telemetry_configure)?,
    )?;
    m.set(
        "telemetry_status",
        lua.create_function(telemetry_api::telemetry_status)?,
    )?;
    agent_api::register(lua, &m)?;

    /// `shared()` -> what Lua and the core must agree on (crates/engine/src/shared.rs):
    /// `{ providers, provider_kinds, modes, user_mode_permissions,
    /// default_mode, tool_precedence }` plus the formatters `format_usd(amount?)`,
    /// `format_tokens(n)` and `provider_views(providers?)` (the configured
    /// providers merged over the built-ins as the core uses them, no secrets).
    fn shared(lua: &Lua, (): ()) -> LuaResult<LuaValue> {
        guarded("shared", || {
            let value = to_lua(lua, &mia_engine::shared::Shared::get())?;
            let LuaValue::Table(t) = &value else {
                return Err(NvimError::Refused("shared() did not make a table".into()).into());
            };
            let usd =
                |_: &Lua, amount: Option<f64>| guarded("format_usd", || Ok(mia_engine::shared::format_usd(amount)));
            t.set("format_usd", lua.create_function(usd)?)?;
            let tokens = |_: &Lua, n: Option<f64>| {
                guarded("format_tokens", || {
                    Ok(mia_engine::shared::format_tokens(n.unwrap_or(0.0)))
                })
            };
            t.set("format_tokens", lua.create_function(tokens)?)?;
            let views = |lua: &Lua, providers: LuaValue| {
                guarded("provider_views", || {
                    let user = match providers {
                        LuaValue::Nil => Default::default(),
                        v => lua.from_value(v).map_err(|e| NvimError::config("provider", e))?,
                    };
                    to_lua(lua, &mia_engine::shared::provider_views(user))
                })
            };
            t.set("provider_views", lua.create_function(views)?)?;
            Ok(value)
        })
    }
    m.set("shared", lua.create_function(shared)?)?;

    /// `newest_source(root, lib)` -> mtime (seconds), path | nil: the newest
    /// source the in-tree library `lib` was built from (`staleness.rs`).
    /// Unlike the rest of this module it reads the disk (~0.25 ms, once, as
    /// the Lua loader did before it): the library is not used until it is
    /// known to be as new as its code.
    fn newest_source(lua: &Lua, (root, lib): (LuaString, LuaString)) -> LuaResult<(Option<u64>, Option<LuaString>)> {
        guarded("newest_source", || {
            let (root, lib) = (lua_path(&root), lua_path(&lib));
            Ok(match staleness::newest_source(&root, &lib) {
                Some((t, path)) => (Some(t), Some(path_to_lua(lua, &path)?)),
                None => (None, None),
            })
        })
    }
    m.set("newest_source", lua.create_function(newest_source)?)?;
    Ok(m)
}
