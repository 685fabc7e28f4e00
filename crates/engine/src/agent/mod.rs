//! The agent loop behind `:Mia prompt`: request → stream → tool calls →
//! permission → results → next request, until the model stops or
//! `max_turns`. Context overflow triggers one compaction (older turns
//! summarized by the same model, the summary stored as a message of its own)
//! and a retry.

pub mod choices;
mod compaction;
pub mod context;
pub mod iface;
pub mod listing;
mod live;
pub mod mentions;
pub mod record;
pub mod rules;
mod tool_round;

pub use compaction::compact;

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::calls::PendingCalls;
use crate::checkpoint::TurnCheckpoint;
use crate::events::{Event, EventQueue, MiaEvent, StreamId};
use crate::session::{updates, Session, Stop, TurnEnd};
use crate::tools::landing::EditScope;
use crate::tools::permissions::{PermissionConfig, Remembered};
use crate::tools::registry::Registry;
use crate::tools::{AgentInfo, ToolLimits};
use mia_cost::{Cost, Usage};
use mia_llm::error::{ErrorClass, LlmError};
use mia_llm::message::{ChatRequest, ToolDef};
use mia_llm::providers::Providers;

/// `setup()` options for the agent (`core.configure_agent`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct AgentSettings {
    pub permissions: PermissionConfig,
    /// Where remembered permissions are kept.
    pub data_dir: Option<PathBuf>,
    pub max_turns: u32,
    pub bash_timeout_ms: u64,
    pub max_read_bytes: u64,
    pub output_cap_bytes: usize,
    /// How long a permission question may wait for the user.
    pub ask_timeout_ms: u64,
    /// Extra system prompt per mode (e.g. architect's planning instructions).
    pub mode_prompts: std::collections::BTreeMap<String, String>,
    /// Cost warnings and limits (`setup({ costs = ... })`).
    pub costs: mia_cost::BudgetConfig,
    /// Modes that offer only some tools: mode -> tool names (other modes offer all they may run).
    pub mode_tools: std::collections::BTreeMap<String, Vec<String>>,
    /// Snapshot limits (`setup({ checkpoints = ... })`).
    pub checkpoints: crate::checkpoint::CheckpointSettings,
    /// MCP servers (`setup({ mcp = { servers = ... } })`), started on a turn's first need of tools.
    pub mcp: Vec<crate::mcp::McpServerSpec>,
    /// Project rules files (`setup({ rules = ... })`), read at every turn's start.
    pub rules: rules::RulesSettings,
    /// The modes mia's own agent offers, in order (built-in ones, then the
    /// user's): what it announces, as ACP's `availableModes`.
    pub modes: Vec<ModeInfo>,
    /// The mode a new chat starts in (`setup({ mode })`).
    pub mode: String,
    /// The sandbox of the commands a model runs (`setup({ sandbox = … })`).
    pub sandbox: crate::sandbox::SandboxConfig,
    /// Whose `mcp` servers these are ([`crate::mcp::ensure_started_in`]): "" for
    /// `setup()`'s, a mia-acp session's id for the servers its client sent.
    #[serde(skip)]
    pub mcp_scope: String,
}

impl Default for AgentSettings {
    fn default() -> Self {
        let limits = ToolLimits::default();
        AgentSettings {
            permissions: PermissionConfig::default(),
            data_dir: None,
            max_turns: 25,
            bash_timeout_ms: limits.bash_timeout_ms,
            max_read_bytes: limits.max_read_bytes,
            output_cap_bytes: limits.output_cap_bytes,
            ask_timeout_ms: 600_000,
            mode_prompts: Default::default(),
            costs: Default::default(),
            mode_tools: Default::default(),
            checkpoints: Default::default(),
            mcp: Vec::new(),
            rules: Default::default(),
            modes: crate::shared::builtin_modes()
                .into_iter()
                .map(|m| ModeInfo {
                    id: m.id.into(),
                    name: m.name.into(),
                    description: m.description.into(),
                })
                .collect(),
            mode: crate::shared::DEFAULT_MODE.into(),
            sandbox: Default::default(),
            mcp_scope: String::new(),
        }
    }
}

/// One mode as an agent announces it (ACP's `SessionMode`).
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
pub struct ModeInfo {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
}

/// What the user adds to a session: one prompt, and the settings it
/// changes (mode, model). Lua never sends the history: the session has it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Prompt {
    pub content: String,
    pub model: Option<String>,
    pub mode: Option<String>,
    pub system: Option<String>,
    pub max_turns: Option<u32>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    /// The session's title, if it has none yet.
    pub title: Option<String>,
    /// Local time's offset from UTC, for calendar-day budgets.
    pub utc_offset_s: i32,
    /// The file being discussed (the editor's current file): rules files
    /// nested on its path apply.
    pub focus: Option<String>,
    /// What the prompt's @-mentions attach ([`mentions::Attachment`]).
    pub attachments: Vec<mentions::Attachment>,
}

/// What a run needs from the rest of the core.
#[derive(Clone)]
pub struct AgentDeps {
    pub providers: Arc<Providers>,
    pub registry: Arc<Registry>,
    pub queue: Arc<EventQueue>,
    pub calls: Arc<PendingCalls>,
    pub settings: AgentSettings,
    /// Whether requests go through the `pre_request` transform hooks.
    pub hooks: crate::hooks::HookSwitch,
    /// Where the run records itself (opened at its first use).
    pub store: Arc<crate::app::StoreSlot>,
    /// Where the run's metrics and events go.
    pub telemetry: Arc<crate::telemetry::Hub>,
    /// The app's MCP servers (the run starts the configured ones).
    pub mcp: Arc<crate::mcp::McpServers>,
    /// What the sandbox of commands remembers of each session.
    pub sandbox: Arc<crate::sandbox::SandboxMemory>,
}

/// Sends one ACP `session/update` to the UI.
pub(crate) fn update(queue: &EventQueue, stream: StreamId, update: agent_client_protocol_schema::v1::SessionUpdate) {
    queue.push(Event::Update {
        stream,
        update: Box::new(update),
    });
}

/// Sends one of mia's own events to the UI.
pub(crate) fn mia_event(queue: &EventQueue, stream: StreamId, event: MiaEvent) {
    queue.push(Event::Mia { stream, event });
}

/// The system prompt with the tools the model may use and where it works.
/// A tool's description is given whole, continuation lines indented.
fn system_prompt(parts: &[Option<&str>], tools: &[ToolDef], root: &std::path::Path) -> String {
    let mut s = parts.iter().flatten().copied().collect::<Vec<_>>().join("\n\n");
    s.push_str(&format!(
        "\n\nThe project root is {}. File paths are relative to it.",
        root.display()
    ));
    if !tools.is_empty() {
        s.push_str("\nTools you can call:\n");
        for t in tools {
            s.push_str(&tool_line(t));
        }
    }
    s
}

/// One tool's line in the system prompt: the whole description (later
/// lines say when, or when not, to use it).
fn tool_line(t: &ToolDef) -> String {
    let described = t.description.trim().replace('\n', "\n  ");
    format!("- {}: {}\n", t.name, described)
}

/// The tools offered to the model in `mode`, as it sees them.
fn tool_defs(deps: &AgentDeps, mode: &str) -> Vec<ToolDef> {
    let mut tools = deps.registry.available(mode, &deps.settings.permissions);
    if let Some(only) = deps.settings.mode_tools.get(mode) {
        tools.retain(|t| only.iter().any(|name| name == t.name()));
    }
    tools
        .iter()
        .map(|t| ToolDef {
            name: t.name().to_string(),
            description: t.description().to_string(),
            parameters: t.parameters(),
        })
        .collect()
}

/// What a request is built from besides the history: the prompt's
/// settings, the mode, model and project, and the turn's rules.
struct RequestBase<'a> {
    deps: &'a AgentDeps,
    prompt: &'a Prompt,
    mode: &'a str,
    model: &'a str,
    root: &'a std::path::Path,
    rules: &'a rules::Rules,
}

impl RequestBase<'_> {
    /// The system prompt's own parts (the prompt's `system`, the mode's
    /// prompt, the rules), in order.
    fn system_parts(&self) -> [Option<&str>; 3] {
        [
            self.prompt.system.as_deref(),
            self.deps.settings.mode_prompts.get(self.mode).map(String::as_str),
            Some(self.rules.text.as_str()).filter(|t| !t.is_empty()),
        ]
    }

    /// The request the model receives, over `messages` (the session's
    /// history, the new prompt last). The agent loop sends it;
    /// `:Mia context` counts it.
    fn request(&self, defs: Vec<ToolDef>, messages: Vec<mia_llm::message::Message>) -> ChatRequest {
        ChatRequest {
            model: self.model.to_string(),
            system: Some(system_prompt(&self.system_parts(), &defs, self.root)),
            messages,
            tools: defs,
            max_tokens: self.prompt.max_tokens,
            temperature: self.prompt.temperature,
            ..ChatRequest::default()
        }
    }
}

/// Starts the configured MCP servers a turn needs (warnings go to the UI).
async fn start_mcp(deps: &AgentDeps, stream: StreamId) {
    if !deps.settings.mcp.is_empty() {
        let scope = &deps.settings.mcp_scope;
        for text in crate::mcp::ensure_started_in(&deps.mcp, scope, &deps.registry, &deps.settings.mcp).await {
            mia_event(&deps.queue, stream, MiaEvent::Warning { text });
        }
    }
}

/// What a turn reads from disk before its request.
struct TurnFiles {
    /// The session's directory, canonical (as given when that fails).
    root: PathBuf,
    /// The remembered permissions for `root`, when asked for and a data
    /// directory is configured, with a warning when their file was corrupt.
    remembered: Option<(Vec<crate::tools::permissions::Rule>, Option<String>)>,
    /// This turn's rules files; deny rules on reading a path and configured
    /// keys keep a file out.
    rules: rules::Rules,
}

/// Reads [`TurnFiles`] in one trip to the blocking pool: each trip is a
/// hand-off to another thread, and on the first turn of a Neovim often the
/// start of one, on cores the editor is busy with. (The three trips this
/// replaced took 1.4-1.8 ms of the first turn, medians of two runs; one
/// trip took 0.8-1.7.)
async fn turn_files(
    deps: &AgentDeps,
    cwd: &std::path::Path,
    mode: &str,
    focus: Option<&str>,
    remembered: bool,
) -> TurnFiles {
    let settings = deps.settings.rules.clone();
    let hidden = settings
        .enabled
        .then(|| deps.settings.permissions.hidden_paths(mode, "read_file"));
    let secrets = deps.providers.secrets();
    let data_dir = deps.settings.data_dir.clone().filter(|_| remembered);
    let cwd = cwd.to_path_buf();
    let focus = focus.map(PathBuf::from);
    let fallback = cwd.clone();
    tokio::task::spawn_blocking(move || {
        let root = std::fs::canonicalize(&cwd).unwrap_or(cwd);
        let remembered = data_dir.map(|dir| {
            let loaded = Remembered::load(&dir);
            (loaded.remembered.for_project(&root), loaded.warning)
        });
        let rules = match &hidden {
            Some(hidden) => rules::load(
                &root,
                focus.as_deref(),
                &settings,
                &rules::Guard {
                    hidden: hidden.as_ref(),
                    secrets: &secrets,
                },
            ),
            None => rules::Rules::default(),
        };
        TurnFiles {
            root,
            remembered,
            rules,
        }
    })
    .await
    .unwrap_or_else(|e| {
        // Nothing remembered only means more questions, never fewer.
        tracing::error!("reading the turn's files failed: {e}");
        TurnFiles {
            root: fallback,
            remembered: None,
            rules: rules::Rules::default(),
        }
    })
}

/// Reads the prompt's attachments off the async threads. A refused one (a
/// deny rule, outside the project, too large, an image for a model that
/// takes none) fails the turn before anything is recorded or sent.
async fn turn_mentions(
    deps: &AgentDeps,
    session: &Session,
    root: &std::path::Path,
    agent: &AgentInfo,
    prompt: &Prompt,
) -> Result<mentions::Resolved, LlmError> {
    if prompt.attachments.is_empty() {
        return Ok(mentions::Resolved::default());
    }
    let (seen, turn) = session.mentions_seen();
    let attachments = prompt.attachments.clone();
    let permissions = deps.settings.permissions.clone();
    let secrets = deps.providers.secrets();
    let root = root.to_path_buf();
    let mode = agent.mode.clone();
    let resolved = tokio::task::spawn_blocking(move || {
        let cx = mentions::Context {
            root: &root,
            permissions: &permissions,
            mode: &mode,
            secrets: &secrets,
            seen: &seen,
            turn,
        };
        mentions::resolve(&attachments, &cx)
    })
    .await
    .map_err(|e| {
        LlmError::new(
            ErrorClass::Internal,
            None,
            format!("mia: reading the mentions failed: {e}"),
        )
    })?
    .map_err(|e| LlmError::new(ErrorClass::InvalidRequest, None, e.to_string()))?;
    let images = resolved.image_names();
    if let Some(name) = images.first() {
        let model = prompt.model.clone().unwrap_or_else(|| session.info().model);
        if let Ok((provider, id)) = deps.providers.resolve(&model) {
            if deps
                .providers
                .pricing()
                .price(&provider.name, &id)
                .and_then(|p| p.images)
                == Some(false)
            {
                let e = mentions::MentionError::NoImages {
                    model,
                    name: name.clone(),
                };
                return Err(LlmError::new(
                    ErrorClass::InvalidRequest,
                    Some(&provider.name),
                    e.to_string(),
                ));
            }
        }
    }
    Ok(resolved)
}

/// `work`'s result, or `cancelled` as soon as `cancel` fires, whatever
/// `work` waits on. For the steps of a turn that hold nothing to store or
/// undo when dropped: a read on the blocking pool that is dropped leaves
/// its thread to finish alone, and the turn ends at once.
async fn unless_cancelled<T>(
    cancel: &CancellationToken,
    work: impl std::future::Future<Output = T>,
) -> Result<T, LlmError> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(LlmError::cancelled()),
        r = work => Ok(r),
    }
}

/// Prunes old checkpoints once per process, in the background.
fn prune_once(store: &crate::checkpoint::Checkpoints) {
    static PRUNED: std::sync::Once = std::sync::Once::new();
    PRUNED.call_once(|| {
        let store = store.clone();
        tokio::task::spawn_blocking(move || match store.prune() {
            Ok(r) => tracing::debug!(?r, "checkpoints pruned"),
            Err(e) => tracing::warn!("checkpoints could not be pruned: {e}"),
        });
    });
}

fn add_usage(total: &mut Usage, u: &Usage) {
    // Counts come from the server: a hostile one cannot overflow them.
    total.input_tokens = total.input_tokens.saturating_add(u.input_tokens);
    total.output_tokens = total.output_tokens.saturating_add(u.output_tokens);
    total.cache_read_tokens = total.cache_read_tokens.saturating_add(u.cache_read_tokens);
    total.cache_write_tokens = total.cache_write_tokens.saturating_add(u.cache_write_tokens);
    total.reasoning_tokens = total.reasoning_tokens.saturating_add(u.reasoning_tokens);
    total.estimated |= u.estimated;
}

/// Runs one prompt turn of `session`: the prompt is appended to its log
/// (and stored beside the first request, see [`record::Recorder`]), then
/// request → stream → tool calls → permission → results → next request,
/// until the model stops or `max_turns`. Every step reaches the UI
/// as an ACP update; the returned [`TurnEnd`] (or the error) ends the turn,
/// and [`record_end`] stores it.
pub async fn run(
    deps: AgentDeps,
    stream: StreamId,
    session: Arc<Session>,
    prompt: Prompt,
    cancel: CancellationToken,
) -> Result<TurnEnd, LlmError> {
    let info = session.info();
    deps.telemetry.user_prompt(Some(&info.id), &prompt.content);
    // Until the prompt is recorded, a step may wait on the project's files
    // (another process can hold a read up): `:Mia stop` ends the turn all the same.
    let files = unless_cancelled(
        &cancel,
        turn_files(&deps, &info.cwd, &info.mode, prompt.focus.as_deref(), true),
    )
    .await?;
    let root = files.root;
    let mut remembered = match files.remembered {
        Some((rules, warning)) => {
            if let Some(text) = warning {
                mia_event(&deps.queue, stream, MiaEvent::Warning { text });
            }
            rules
        }
        None => Vec::new(),
    };
    let mut agent = AgentInfo {
        name: info.agent.clone(),
        mode: info.mode.clone(),
    };
    let max_turns = prompt.max_turns.unwrap_or(deps.settings.max_turns).max(1);
    let mut total = Usage::default();
    let mut total_cost = mia_cost::Cost {
        known: true,
        ..Default::default()
    };
    let attached = unless_cancelled(&cancel, turn_mentions(&deps, &session, &root, &agent, &prompt)).await??;
    let rules = files.rules;
    let mut recorder = record::Recorder::start(&deps, stream, session.clone(), &prompt, &rules.files, attached).await;
    // Whatever ends the run, the prompt is stored before the turn's end is
    // (see record::Recorder).
    let result: Result<TurnEnd, LlmError> = async {
        // Edits of this turn: the session's file ledger and a checkpoint taken at the first change.
        let scope = Arc::new(EditScope {
            ledger: session.files.clone(),
            checkpoint: deps.settings.data_dir.as_ref().map(|dir| {
                let store = crate::checkpoint::Checkpoints::new(dir, deps.settings.checkpoints)
                    .with_secrets(deps.providers.secrets());
                prune_once(&store);
                Arc::new(TurnCheckpoint::new(
                    store,
                    &info.id,
                    &crate::session::new_message_id(&info.id),
                    &prompt.content,
                    session.scan_cache.clone(),
                ))
            }),
            data_dir: deps.settings.data_dir.clone(),
            ask_timeout: std::time::Duration::from_millis(deps.settings.ask_timeout_ms),
        });
        let mut compacted = false;
        let caller = crate::hooks::Caller {
            queue: deps.queue.clone(),
            calls: deps.calls.clone(),
            stream,
            cancel: cancel.clone(),
            hooks: deps.hooks.clone(),
            session: Some(session.id()),
            telemetry: deps.telemetry.clone(),
        };
        let mut turn = 0;
        // The model as the provider named it in its last answer (the footer shows it).
        let mut answered_by = session.info().model;
        // "server error, retried successfully": said once, at the turn's end.
        let mut retried_note: Option<String> = None;
        while turn < max_turns {
            turn += 1;
            // The mode and model may change while the run goes on (`agent_set_session`, a mode switch); each request uses the current ones.
            let info = session.info();
            if info.mode != agent.mode {
                update(&deps.queue, stream, updates::mode_switched(&info.mode, &agent.mode));
            }
            agent.mode = info.mode.clone();
            let model = info.model.clone();
            // A server that is slow to start must not hold a stop: the start
            // goes on by itself (the next turn finds it started or starting).
            let starting = {
                let deps = deps.clone();
                tokio::spawn(async move { start_mcp(&deps, stream).await })
            };
            let _ = unless_cancelled(&cancel, starting).await?;
            let base = RequestBase {
                deps: &deps,
                prompt: &prompt,
                mode: &agent.mode,
                model: &model,
                root: &root,
                rules: &rules,
            };
            let chat = base.request(tool_defs(&deps, &agent.mode), session.request_messages());
            recorder.gate(&deps, stream, &cancel).await?;
            let q = deps.queue.clone();
            let mut partial = recorder.partial();
            let started_ms = record::now_ms();
            let mut live = live::LiveMeter::new(&deps.providers, &chat, total, &total_cost, recorder.session_cost_usd);
            let mut retried_for: Option<ErrorClass> = None;
            let mut on_delta = |delta: mia_llm::delta::Delta| match delta {
                mia_llm::delta::Delta::Text { text } => {
                    partial.push(&text);
                    update(&q, stream, updates::agent_text(&text));
                }
                mia_llm::delta::Delta::Reasoning { text } => {
                    partial.push_reasoning(&text);
                    update(&q, stream, updates::agent_thought(&text));
                }
                mia_llm::delta::Delta::Retry {
                    attempt,
                    max_retries,
                    delay_ms,
                    class,
                    message,
                } => {
                    retried_for = Some(class);
                    mia_event(
                        &q,
                        stream,
                        MiaEvent::Retry {
                            attempt,
                            max_retries,
                            delay_ms,
                            class,
                            message,
                        },
                    )
                }
                _ => {}
            };
            let mut emit = |delta: mia_llm::delta::Delta| {
                if let Some(u) = live.as_mut().and_then(|l| l.on_delta(&delta)) {
                    update(&q, stream, u);
                }
                on_delta(delta)
            };
            let result = tokio::select! {
                r = crate::hooks::call_model(&caller, &deps.providers, &chat, true, &mut emit) => r,
                _ = cancel.cancelled() => Err(LlmError::cancelled()),
            };
            let done = match result {
                Ok(done) => done,
                Err(e) if e.class == ErrorClass::ContextOverflow && !compacted => {
                    compacted = true;
                    turn -= 1;
                    let started_ms = record::now_ms();
                    let (compacted_history, summary) = compaction::compact(
                        &caller,
                        &deps.providers,
                        &model,
                        &chat.messages,
                        compaction::KEEP_RECENT,
                    )
                    .await?;
                    recorder.usage(&deps, stream, &summary, "compaction", started_ms).await;
                    if let Some(summary_message) = compacted_history.first() {
                        let row = recorder.compaction(summary_message, compacted_history.len() - 1).await;
                        update(
                            &deps.queue,
                            stream,
                            updates::compaction(&row.id, &summary_message.plain_text()),
                        );
                    }
                    add_usage(&mut total, &summary.usage);
                    add_cost(&mut total_cost, &summary.cost);
                    continue;
                }
                Err(e) => {
                    let state = if e.class == ErrorClass::Cancelled {
                        mia_store::MessageState::Cancelled
                    } else {
                        mia_store::MessageState::Error
                    };
                    recorder.interrupted(&partial, state).await;
                    return Err(e);
                }
            };
            recorder.usage(&deps, stream, &done, &agent.name, started_ms).await;
            if let Some(class) = retried_for.filter(|_| done.retries > 0) {
                retried_note = Some(format!("{}, retried successfully", retry_words(class)));
            }
            answered_by = done.model.clone();
            add_usage(&mut total, &done.usage);
            add_cost(&mut total_cost, &done.cost);
            // The answer's stored id: its tool calls see it as `ctx.message_id`.
            let message_id = if done.message.parts.is_empty() {
                String::new()
            } else {
                recorder.message(&done.message, json!({})).await
            };
            let stop = match done.stop_reason {
                mia_llm::message::StopReason::MaxTokens => Stop::MaxTokens,
                mia_llm::message::StopReason::ContentFilter => Stop::Refusal,
                _ => Stop::EndTurn,
            };
            if done.tool_calls.is_empty() {
                return Ok(finish(
                    &answered_by,
                    total,
                    total_cost,
                    recorder.session_cost_usd,
                    stop,
                    retried_note,
                ));
            }
            let acp_ids = session.tool_call_ids(&message_id);
            let (results, outcomes) = tool_round::run(
                &deps,
                stream,
                &agent,
                &root,
                &info.id,
                &message_id,
                &done,
                &acp_ids,
                &mut remembered,
                &cancel,
                &chat.messages,
                Some(&scope),
            )
            .await;
            recorder.message(&results, json!({ "tools": outcomes })).await;
            if cancel.is_cancelled() {
                return Err(LlmError::cancelled());
            }
        }
        Ok(finish(
            &answered_by,
            total,
            total_cost,
            recorder.session_cost_usd,
            Stop::MaxTurnRequests,
            Some(match retried_note {
                Some(note) => format!("{note}; stopped after {max_turns} turns (max_turns)"),
                None => format!("stopped after {max_turns} turns (max_turns)"),
            }),
        ))
    }
    .await;
    recorder.settle().await;
    result
}

/// What a retried failure was, in the words of the chat's retry notice.
fn retry_words(class: ErrorClass) -> &'static str {
    match class {
        ErrorClass::RateLimit => "rate limited",
        ErrorClass::ServerError => "server error",
        ErrorClass::Overloaded => "provider overloaded",
        ErrorClass::NetworkError => "connection failed",
        ErrorClass::Timeout => "timed out",
        other => other.as_str(),
    }
}

/// The turn's end: totals over every request of the turn.
fn finish(model: &str, usage: Usage, cost: Cost, session_cost_usd: f64, stop: Stop, notice: Option<String>) -> TurnEnd {
    TurnEnd {
        stop,
        model: model.to_string(),
        usage,
        cost,
        error: None,
        notice,
        session_cost_usd: Some(session_cost_usd),
        usage_unreported: false,
    }
}

/// The end of a turn that failed or was cancelled.
pub fn failed_end(model: &str, error: &LlmError) -> TurnEnd {
    let cancelled = error.class == ErrorClass::Cancelled;
    TurnEnd {
        stop: if cancelled { Stop::Cancelled } else { Stop::Error },
        model: model.to_string(),
        usage: Usage::default(),
        cost: Cost::default(),
        error: (!cancelled).then(|| updates::TurnError {
            class: error.class.as_str().to_string(),
            message: error.message.clone(),
        }),
        notice: None,
        session_cost_usd: None,
        usage_unreported: false,
    }
}

/// Stores the end of a turn in the session's log, so a replay ends it the same way.
pub async fn record_end(session: &Session, end: &TurnEnd) {
    let id = session.id();
    let state = match end.stop {
        Stop::Cancelled => mia_store::MessageState::Cancelled,
        Stop::Error => mia_store::MessageState::Error,
        _ => mia_store::MessageState::Complete,
    };
    let mut stored = end.clone();
    stored.session_cost_usd = None;
    let mut row = crate::session::message_row(
        &id,
        crate::session::new_message_id(&id),
        mia_llm::message::Role::Assistant,
        json!([]),
        state,
    );
    row.meta = json!({ "turn_end": stored });
    session.append(row).await;
}

fn add_cost(total: &mut Cost, c: &Cost) {
    if !c.known {
        *total = mia_cost::Cost::default();
        return;
    }
    if !total.known {
        return;
    }
    // The turn's first priced call says who priced it; a later call priced
    // by the other makes the sum `mixed`.
    total.source = match total.total_usd {
        None => c.source,
        Some(_) => total.source.join(c.source),
    };
    let add = |a: Option<f64>, b: Option<f64>| Some(a.unwrap_or(0.0) + b.unwrap_or(0.0));
    total.total_usd = add(total.total_usd, c.total_usd);
    total.input_usd = add(total.input_usd, c.input_usd);
    total.output_usd = add(total.output_usd, c.output_usd);
    total.cache_read_usd = add(total.cache_read_usd, c.cache_read_usd);
    total.cache_write_usd = add(total.cache_write_usd, c.cache_write_usd);
}

/// `/compact`: the model of the session summarizes everything the next
/// request would send; the summary is stored as a compaction that covers
/// it all, and the UI gets a `compaction_update`. `turn` (the session's
/// [`crate::session::Turn`]) keeps any prompt out meanwhile; it ends before
/// the update is sent, so a prompt sent on seeing the note is not refused.
pub async fn compact_session(
    deps: &AgentDeps,
    stream: StreamId,
    session: Arc<Session>,
    cancel: CancellationToken,
    turn: crate::session::Turn,
) -> Result<(), LlmError> {
    // The store may still be opening: the compaction is recorded once it is.
    session.attach_store(deps.store.get().await);
    let history = session.request_messages();
    if history.is_empty() {
        return Err(LlmError::new(
            ErrorClass::InvalidRequest,
            None,
            "mia: nothing to compact: the chat is empty",
        ));
    }
    let caller = crate::hooks::Caller {
        queue: deps.queue.clone(),
        calls: deps.calls.clone(),
        stream,
        cancel,
        hooks: deps.hooks.clone(),
        session: Some(session.id()),
        telemetry: deps.telemetry.clone(),
    };
    let model = session.info().model;
    let id = session.id();
    let started_ms = record::now_ms();
    let (messages, summary) = compaction::compact(&caller, &deps.providers, &model, &history, 0).await?;
    let message_id = crate::session::new_message_id(&id);
    let row = record::usage_row(Some(&id), Some(message_id.clone()), "compaction", &summary, started_ms);
    record::record_usage(session.store().as_deref(), &deps.store.ledger(), row).await;
    if let Some(summary_message) = messages.first() {
        let parts = serde_json::to_value(&summary_message.parts).unwrap_or(json!([]));
        let row = crate::session::message_row(
            &id,
            message_id,
            summary_message.role,
            parts,
            mia_store::MessageState::Complete,
        );
        let row = session.append_compaction(row, 0).await;
        drop(turn);
        update(
            &deps.queue,
            stream,
            updates::compaction(&row.id, &summary_message.plain_text()),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancelled_step_ends_at_once_though_its_read_still_waits() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let cancel = CancellationToken::new();
        let path = fifo.clone();
        // A read that waits for a writer, as a plain open of a FIFO does.
        let read = rt.spawn_blocking(move || std::fs::read(path).map(|b| b.len()));
        let step = rt.spawn({
            let cancel = cancel.clone();
            async move { unless_cancelled(&cancel, read).await }
        });
        cancel.cancel();
        let ended = rt.block_on(step).unwrap().unwrap_err();
        assert_eq!(ended.class, ErrorClass::Cancelled);
        // The blocked thread is let go so the runtime can shut down.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
    }
}
