//! The app: everything one front-end (the Neovim cdylib, or mia-acp) runs
//! with, in one value instead of process-wide statics. Its tokio runtime,
//! the event queue, providers, agent settings, the tool registry, the open
//! sessions, the store and the calls waiting for the UI. Each front-end
//! builds one `Arc<App>` and hands it (or the part a task needs) to the
//! core; a test builds its own.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

use crate::agent::{AgentDeps, AgentSettings};
use crate::calls::PendingCalls;
use crate::events::EventQueue;
use crate::events::StreamId;
use crate::hooks::HookSwitch;
use crate::session::{Session, SessionError, Sessions};
use crate::telemetry::Hub;
use crate::tools::registry::Registry;
use mia_llm::providers::{CoreConfig, Providers};
use tokio_util::sync::CancellationToken;

/// Why a front-end's request could not start.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("mia: cannot start the runtime: {0}")]
    Runtime(io::Error),
    #[error("mia: cannot create the wake descriptor: {0}")]
    Queue(io::Error),
    #[error("{0}")]
    Session(#[from] SessionError),
}

/// One front-end's core. Everything in it is built on first use, so
/// building an `App` is cheap and starts nothing.
pub struct App {
    runtime: Mutex<Option<Runtime>>,
    queue: OnceLock<Arc<EventQueue>>,
    providers: RwLock<Option<Arc<Providers>>>,
    agent: SettingsCell,
    registry: OnceLock<Arc<Registry>>,
    sessions: Arc<Sessions>,
    store: Arc<StoreSlot>,
    calls: Arc<PendingCalls>,
    hooks: HookSwitch,
    agents: crate::acp::client::Agents,
    telemetry: Arc<Hub>,
    /// The MCP servers started for this app.
    mcp: Arc<crate::mcp::McpServers>,
    /// What mia's own agent keeps between a front-end's calls (its mode).
    own: crate::agent::iface::OwnAgent,
    /// What the sandbox of commands remembers of each session.
    sandbox: Arc<crate::sandbox::SandboxMemory>,
}

/// The agent settings in force, shared with what reads them later (an
/// external agent's requests); `None` until configured (the defaults).
pub type SettingsCell = Arc<RwLock<Option<AgentSettings>>>;

/// The settings in `cell` (the defaults until configured).
pub fn settings_in(cell: &SettingsCell) -> AgentSettings {
    cell.read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default()
}

impl App {
    /// A new app: nothing started, built-in providers, default settings.
    pub fn new() -> Arc<App> {
        let telemetry = Arc::new(Hub::default());
        Arc::new(App {
            runtime: Mutex::default(),
            queue: OnceLock::new(),
            providers: RwLock::default(),
            agent: SettingsCell::default(),
            registry: OnceLock::new(),
            sessions: Arc::default(),
            store: Arc::new(StoreSlot::new(telemetry.clone())),
            calls: Arc::default(),
            hooks: HookSwitch::default(),
            agents: Mutex::default(),
            telemetry,
            mcp: Arc::default(),
            own: Default::default(),
            sandbox: Arc::default(),
        })
    }

    /// What mia's own agent keeps between a front-end's calls.
    pub fn own_agent(&self) -> &crate::agent::iface::OwnAgent {
        &self.own
    }

    /// What the sandbox of commands remembers of this app's sessions.
    pub fn sandbox_memory(&self) -> Arc<crate::sandbox::SandboxMemory> {
        self.sandbox.clone()
    }

    /// The MCP servers this app started (`setup()`'s and every mia-acp session's).
    pub fn mcp(&self) -> Arc<crate::mcp::McpServers> {
        self.mcp.clone()
    }

    /// Where this app's metrics and events go (off until configured).
    pub fn telemetry(&self) -> Arc<Hub> {
        self.telemetry.clone()
    }

    /// Starts (or restarts, or stops) telemetry export from `config`; the
    /// state line `:checkhealth` shows, or an error naming the setting to
    /// fix. Starts the runtime only when export is on.
    pub fn configure_telemetry(&self, config: crate::telemetry::TelemetryConfig) -> Result<String, String> {
        self.telemetry.configure(&|| self.handle(), config)
    }

    /// The runtime's handle, building the runtime on first call. Two worker
    /// threads: the work is I/O-bound and the editor needs the cores more.
    pub fn handle(&self) -> io::Result<Handle> {
        let mut slot = self.runtime.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rt) = slot.as_ref() {
            return Ok(rt.handle().clone());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("mia-runtime")
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        *slot = Some(rt);
        Ok(handle)
    }

    /// True once the runtime exists (for `:checkhealth` and tests of laziness).
    pub fn started(&self) -> bool {
        self.runtime.lock().map(|s| s.is_some()).unwrap_or(false)
    }

    /// Stops every task and joins the runtime's threads, waiting at most
    /// `timeout`. Idempotent; a later `handle()` builds a new runtime.
    pub fn stop_runtime(&self, timeout: Duration) {
        let rt = self.runtime.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(rt) = rt {
            rt.shutdown_timeout(timeout);
        }
    }

    /// Leaving: the store's checkpoint (bounded by `checkpoint`), the
    /// processes mia started, pending telemetry (its own bound), then the
    /// runtime (at most `wait`). The one shutdown order of both front-ends.
    pub fn shutdown(&self, checkpoint: Duration, wait: Duration) {
        self.checkpoint_store(checkpoint);
        crate::reaper::kill_all();
        // Pending metrics and events get their own bound (on a thread; the runtime still runs).
        self.telemetry.shutdown(crate::telemetry::FLUSH_AT_EXIT);
        self.stop_runtime(wait);
    }

    /// The event queue (created once; the UI drains it).
    pub fn queue(&self) -> io::Result<Arc<EventQueue>> {
        if let Some(q) = self.queue.get() {
            return Ok(q.clone());
        }
        let q = Arc::new(EventQueue::new()?);
        Ok(self.queue.get_or_init(|| q).clone())
    }

    /// Replaces the provider configuration. Streams already running keep the
    /// configuration they started with.
    pub fn configure(&self, config: CoreConfig) {
        let providers = Arc::new(Providers::new(config));
        *self.providers.write().unwrap_or_else(|p| p.into_inner()) = Some(providers);
    }

    /// The current providers (built-ins only until `configure` is called).
    pub fn providers(&self) -> Arc<Providers> {
        if let Some(p) = self.providers.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return p.clone();
        }
        let mut slot = self.providers.write().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert_with(|| Arc::new(Providers::new(CoreConfig::default())))
            .clone()
    }

    /// Replaces the agent settings (permissions, limits, data directory).
    /// The store opens in the data directory in force at its first use.
    pub fn configure_agent(&self, settings: AgentSettings) {
        self.store.set_data_dir(settings.data_dir.clone());
        *self.agent.write().unwrap_or_else(|p| p.into_inner()) = Some(settings);
    }

    /// The agent settings in force.
    pub fn agent_settings(&self) -> AgentSettings {
        settings_in(&self.agent)
    }

    /// The agent settings as they will be: for what reads them later.
    pub fn settings_cell(&self) -> SettingsCell {
        self.agent.clone()
    }

    /// The external agents (ACP) this app started, by name.
    pub fn agents(&self) -> &crate::acp::client::Agents {
        &self.agents
    }

    /// The tool registry (built-in tools registered on first use). [`Self::prewarm`]
    /// builds it off the main thread, which otherwise builds it at its first
    /// `register_tool`. Whoever finds it missing builds it outside the lock
    /// and only stores it under the lock, so the main thread never waits for
    /// a build running elsewhere. Two racing builds make the same registry;
    /// the first stored is kept.
    pub fn registry(&self) -> Arc<Registry> {
        if let Some(r) = self.registry.get() {
            return r.clone();
        }
        let built = Arc::new(Registry::with_builtins());
        self.registry.get_or_init(|| built).clone()
    }

    /// The chat sessions this front-end has open.
    pub fn sessions(&self) -> Arc<Sessions> {
        self.sessions.clone()
    }

    /// The calls waiting for the UI's answer.
    pub fn calls(&self) -> Arc<PendingCalls> {
        self.calls.clone()
    }

    /// Whether requests go through Lua's `pre_request` hooks.
    pub fn hooks(&self) -> HookSwitch {
        self.hooks.clone()
    }

    /// The store, opened on first use (see [`StoreSlot`]).
    pub fn store_slot(&self) -> Arc<StoreSlot> {
        self.store.clone()
    }

    /// The store in `data_dir/mia.sqlite3`, opened on first use; `None`
    /// when there is no data directory or the file cannot be opened.
    pub async fn store(&self) -> Option<Arc<mia_store::Store>> {
        self.store.get().await
    }

    /// Why [`Self::store`] gave `None` although a data directory is configured.
    pub fn store_error(&self) -> Option<String> {
        self.store.error()
    }

    /// Where the store's saving stands when it is not all saved, for `:checkhealth`.
    pub fn store_unsaved(&self) -> Option<String> {
        self.store.unsaved()
    }

    /// Moves the store's write-ahead log into the main file and empties it,
    /// if this app opened the store, waiting at most `wait` (SQLite leaves
    /// the file consistent if the process ends before it is done). For
    /// leaving: the store's connections are never closed, so without this
    /// the log outlived every process and the next one's first open read all
    /// of it back (up to SQLite's 4 MB automatic checkpoint) on the way to
    /// its first request. Call it from outside the runtime.
    pub fn checkpoint_store(&self, wait: Duration) {
        let Some(store) = self.store.opened() else {
            return;
        };
        let Ok(rt) = self.handle() else { return };
        if let Ok(Err(e)) = rt.block_on(async { tokio::time::timeout(wait, store.checkpoint()).await }) {
            tracing::warn!("store: checkpoint at exit failed: {e}");
        }
        // Writes still kept in memory end with this process (the checkpoint tried them once more).
        if let Some(text) = store.unsaved().describe() {
            tracing::error!("store: leaving with writes that could not be saved: {text}");
        }
    }

    /// What a run needs, with `queue` for its events.
    pub fn agent_deps(&self, queue: Arc<EventQueue>) -> AgentDeps {
        AgentDeps {
            providers: self.providers(),
            registry: self.registry(),
            queue,
            calls: self.calls(),
            settings: self.agent_settings(),
            hooks: self.hooks(),
            store: self.store_slot(),
            telemetry: self.telemetry(),
            mcp: self.mcp(),
            sandbox: self.sandbox_memory(),
        }
    }

    /// The open session `id`.
    pub fn session(&self, id: &str) -> Result<Arc<Session>, SessionError> {
        self.sessions
            .get(id)
            .ok_or_else(|| SessionError::NotFound(id.to_string()))
    }

    /// The runtime and the event queue a request runs with.
    pub fn runtime_and_queue(&self) -> Result<(Handle, Arc<EventQueue>), AppError> {
        let rt = self.handle().map_err(AppError::Runtime)?;
        let queue = self.queue().map_err(AppError::Queue)?;
        Ok((rt, queue))
    }

    /// Starts one prompt turn of session `id` on the stream `new_stream`
    /// gives: its updates and its end arrive as events, and the turn
    /// records itself in the store (opened if need be). Refused while the
    /// session has a turn in flight. `cancel` stops it.
    pub fn prompt(
        &self,
        id: &str,
        prompt: crate::agent::Prompt,
        new_stream: impl FnOnce() -> StreamId,
        cancel: CancellationToken,
    ) -> Result<StreamId, AppError> {
        let session = self.session(id)?;
        let (rt, queue) = self.runtime_and_queue()?;
        let stream = new_stream();
        let turn = session.begin(cancel.clone())?;
        crate::stream_task::spawn_turn(&rt, self.agent_deps(queue), stream, session, turn, prompt, cancel);
        Ok(stream)
    }

    /// Starts `/compact` of session `id` on the stream `new_stream` gives:
    /// its `compaction_update` arrives as an event, then an empty result.
    /// Refused while a turn runs.
    pub fn compact(
        &self,
        id: &str,
        new_stream: impl FnOnce() -> StreamId,
        cancel: CancellationToken,
    ) -> Result<StreamId, AppError> {
        let session = self.session(id)?;
        let (rt, queue) = self.runtime_and_queue()?;
        let stream = new_stream();
        let turn = session.begin(cancel.clone())?;
        let deps = self.agent_deps(queue.clone());
        let token = cancel.clone();
        crate::stream_task::spawn_job(&rt, queue, stream, cancel, async move {
            let result = crate::agent::compact_session(&deps, stream, session, token, turn).await;
            result.map(|()| serde_json::Value::Null)
        });
        Ok(stream)
    }

    /// Starts the runtime and, on it, what the first request will need and
    /// would otherwise wait for. Called by the first command that loads the
    /// core, so this overlaps the rest of that command's work on the main
    /// thread. Two tasks on the blocking pool, each on its own thread:
    /// - the store, first: a turn's end waits for it (its prompt and answer
    ///   are stored before the end is told), and opening it takes milliseconds
    ///   (the write-ahead log's first frame waits for the disk). It is opened on
    ///   that thread itself, not handed on to a third one, and at once: only a
    ///   line it logs waits for the logger the same command is starting
    ///   (`logging::wait_ready`). Waiting before the opening started it
    ///   0.5-4.7 ms after this call in 7 traced first turns; now 0.4-2.2 in 8;
    /// - the tool registry, the HTTP client of `model`'s provider, the price
    ///   table and, when that provider is reached over TLS, the system's root
    ///   certificates (reading them takes milliseconds; a plain-HTTP provider
    ///   such as a local server never waits for them).
    ///
    /// Failures are left for the request to report.
    pub fn prewarm(self: &Arc<Self>, model: Option<String>) -> io::Result<()> {
        let rt = self.handle()?;
        let on = rt.clone();
        let store = self.store_slot();
        rt.spawn_blocking(move || {
            on.block_on(store.open_here());
        });
        let app = self.clone();
        rt.spawn_blocking(move || {
            // Needed first: the main thread registers the editor's tools next.
            app.registry();
            let providers = app.providers();
            let provider = model.and_then(|m| providers.resolve(&m).ok()).map(|(p, _)| p);
            if let Some(p) = &provider {
                let _ = providers.client(&p.name);
            }
            // Every request prices itself before it is sent.
            providers.pricing();
            if provider.is_some_and(|p| needs_tls(&p.base_url)) {
                let _ = mia_llm::tls::load_roots();
            }
        });
        Ok(())
    }
}

/// Whether a provider's base URL is reached over TLS: every URL whose
/// parsed scheme is not `http` (the parser lowercases it and trims the
/// blanks around the URL). One that does not parse fails later, with its own error.
fn needs_tls(base_url: &str) -> bool {
    reqwest::Url::parse(base_url).map_or(true, |url| url.scheme() != "http")
}

/// The store in `data_dir/mia.sqlite3`, opened once, at first use, in the
/// data directory configured then. What a run needs of the app to record
/// itself.
pub struct StoreSlot {
    data_dir: RwLock<Option<PathBuf>>,
    store: tokio::sync::OnceCell<Option<Arc<mia_store::Store>>>,
    /// Why the store could not be opened (the message names the file and the fix).
    error: OnceLock<String>,
    /// Whether a turn has told the user that chats are not saved.
    warned: std::sync::atomic::AtomicBool,
    /// Where the usage the store records is exported too.
    telemetry: Arc<Hub>,
    /// What this app has spent, for when the store cannot be read.
    ledger: Arc<mia_cost::ledger::Ledger>,
}

impl StoreSlot {
    fn new(telemetry: Arc<Hub>) -> StoreSlot {
        StoreSlot {
            data_dir: RwLock::default(),
            store: tokio::sync::OnceCell::new(),
            error: OnceLock::new(),
            warned: Default::default(),
            telemetry,
            ledger: Arc::default(),
        }
    }

    fn set_data_dir(&self, dir: Option<PathBuf>) {
        *self.data_dir.write().unwrap_or_else(|p| p.into_inner()) = dir;
    }

    /// The store, opened on first use (on the runtime's blocking pool:
    /// opening touches the disk) unless [`App::prewarm`] opened it already.
    /// `None` when no data directory is configured or the file cannot be
    /// opened (logged; mia then works without history or reports rather
    /// than not at all).
    pub async fn get(self: &Arc<Self>) -> Option<Arc<mia_store::Store>> {
        let me = self.clone();
        self.store
            .get_or_init(|| async move {
                let opener = me.clone();
                tokio::task::spawn_blocking(move || opener.open())
                    .await
                    .unwrap_or_else(|e| {
                        tracing::error!("cannot open the store: {e}");
                        let _ = me.error.set(format!("opening the store failed: {e}"));
                        None
                    })
            })
            .await
            .clone()
    }

    /// Opens the store on this thread unless it is open (for `prewarm`'s blocking task).
    async fn open_here(&self) {
        self.store.get_or_init(|| async { self.open() }).await;
    }

    /// What this app has spent, kept beside the store: the budgets' figures
    /// when the store cannot be read.
    pub fn ledger(&self) -> Arc<mia_cost::ledger::Ledger> {
        self.ledger.clone()
    }

    /// The store if it was opened already.
    pub fn opened(&self) -> Option<Arc<mia_store::Store>> {
        self.store.get().cloned().flatten()
    }

    /// Why [`Self::get`] gave `None` although a data directory is configured.
    pub fn error(&self) -> Option<String> {
        self.error.get().cloned()
    }

    /// [`Self::error`] the first time only: a turn tells the user once.
    pub fn unsaved_warning(&self) -> Option<String> {
        let why = self.error()?;
        (!self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)).then_some(why)
    }

    /// Where the store's saving stands when it is not all saved (writes fail
    /// and wait in memory, or some were lost), for `:checkhealth`.
    pub fn unsaved(&self) -> Option<String> {
        self.opened()?.unsaved().describe()
    }

    /// Opens the configured store on this thread (blocking: it touches the disk).
    fn open(&self) -> Option<Arc<mia_store::Store>> {
        let dir = self.data_dir.read().unwrap_or_else(|p| p.into_inner()).clone();
        let path = dir?.join("mia.sqlite3");
        match mia_store::Store::open(&path) {
            Ok(store) => {
                let telemetry = self.telemetry.clone();
                store.observe_usage(Box::new(move |row| telemetry.usage(row)));
                Some(Arc::new(store))
            }
            Err(e) => {
                mia_log::wait_ready();
                tracing::error!("cannot open the store: {e}");
                let _ = self.error.set(e.to_string());
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::{needs_tls, App};

    /// Sets its flag when dropped: tells that a task's future was dropped.
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn pending_task(rt: &tokio::runtime::Handle) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        let guard = Dropped(flag.clone());
        rt.spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await
        });
        flag
    }

    #[test]
    fn tasks_run_on_the_runtime_threads_until_the_app_stops_them() {
        let app = App::new();
        assert!(!app.started());
        let rt = app.handle().unwrap();
        assert!(app.started());
        let threads: Vec<_> = (0..8)
            .map(|_| rt.spawn(async { std::thread::current().name().map(str::to_string) }))
            .collect();
        let names: Vec<_> = rt.block_on(async {
            let mut names = Vec::new();
            for t in threads {
                tokio::time::sleep(Duration::from_millis(1)).await;
                names.push(t.await.unwrap());
            }
            names
        });
        assert!(names.iter().all(|n| n.as_deref() == Some("mia-runtime")), "{names:?}");
        let blocking = rt
            .block_on(rt.spawn_blocking(|| std::thread::current().name().map(str::to_string)))
            .unwrap();
        assert_eq!(blocking.as_deref(), Some("mia-runtime"), "the blocking pool's threads");

        let dropped = pending_task(&rt);
        app.stop_runtime(Duration::from_secs(5));
        assert!(!app.started());
        assert!(
            dropped.load(Ordering::SeqCst),
            "stop_runtime returns once the tasks are dropped"
        );

        // A later call starts a new runtime that works.
        let again = app.handle().unwrap();
        assert_eq!(again.block_on(again.spawn(async { 7 })).unwrap(), 7);
        app.stop_runtime(Duration::from_secs(5));
    }

    #[test]
    fn an_app_dropped_without_a_stop_ends_its_runtime() {
        let app = App::new();
        let rt = app.handle().unwrap();
        let dropped = pending_task(&rt);
        drop(app);
        assert!(dropped.load(Ordering::SeqCst), "the runtime outlived its app");
    }

    #[test]
    fn only_plain_http_skips_the_tls_roots() {
        for url in [
            "http://127.0.0.1:11434",
            "HTTP://gpu-box:11434/v1",
            "Http://x",
            " http://x",
            "\thttp://x\n",
            // Parsed (by reqwest too) as http://x: sent without TLS.
            "http:/x",
        ] {
            assert!(!needs_tls(url), "{url}");
        }
        for url in ["https://api.openai.com/v1", "HTTPS://x", "", "httpx://y", "ftp://z"] {
            assert!(needs_tls(url), "{url}");
        }
    }
}
