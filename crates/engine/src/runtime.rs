//! The tokio runtime the core runs on: created on first use, owned by the
//! library, shut down within a bound when Neovim exits.

use std::io;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

use crate::agent::AgentSettings;
use crate::events::EventQueue;
use crate::tools::registry::Registry;
use mia_llm::providers::{CoreConfig, Providers};

static RUNTIME: Mutex<Option<Runtime>> = Mutex::new(None);
static QUEUE: OnceLock<Arc<EventQueue>> = OnceLock::new();
static PROVIDERS: RwLock<Option<Arc<Providers>>> = RwLock::new(None);
static AGENT: RwLock<Option<AgentSettings>> = RwLock::new(None);
static REGISTRY: OnceLock<Arc<Registry>> = OnceLock::new();

/// The runtime's handle, building the runtime on first call. Two worker
/// threads: the work is I/O-bound and the editor needs the cores more.
pub fn handle() -> io::Result<Handle> {
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
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
pub fn started() -> bool {
    RUNTIME.lock().map(|s| s.is_some()).unwrap_or(false)
}

/// Stops every task and joins the runtime's threads, waiting at most `timeout`.
/// Idempotent; a later `handle()` builds a new runtime.
pub fn shutdown(timeout: Duration) {
    let rt = RUNTIME.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(rt) = rt {
        rt.shutdown_timeout(timeout);
    }
}

/// The process-wide event queue (created once; survives re-`require`).
pub fn queue() -> io::Result<Arc<EventQueue>> {
    if let Some(q) = QUEUE.get() {
        return Ok(q.clone());
    }
    let q = Arc::new(EventQueue::new()?);
    // Only the main thread creates the queue, so a lost race is impossible;
    // get_or_init keeps it correct anyway.
    Ok(QUEUE.get_or_init(|| q).clone())
}

/// Replaces the provider configuration. Streams already running keep the
/// configuration they started with.
pub fn configure(config: CoreConfig) {
    let providers = Arc::new(Providers::new(config));
    *PROVIDERS.write().unwrap_or_else(|p| p.into_inner()) = Some(providers);
}

/// The current providers (built-ins only until `configure` is called).
pub fn providers() -> Arc<Providers> {
    if let Some(p) = PROVIDERS.read().unwrap_or_else(|p| p.into_inner()).as_ref() {
        return p.clone();
    }
    let mut slot = PROVIDERS.write().unwrap_or_else(|p| p.into_inner());
    slot.get_or_insert_with(|| Arc::new(Providers::new(CoreConfig::default())))
        .clone()
}

/// Replaces the agent settings (permissions, limits, data directory).
pub fn configure_agent(settings: AgentSettings) {
    *AGENT.write().unwrap_or_else(|p| p.into_inner()) = Some(settings);
}

/// The agent settings in force.
pub fn agent_settings() -> AgentSettings {
    AGENT
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default()
}

/// The process-wide tool registry (built-in tools registered on first use).
/// [`prewarm`] builds it off the main thread, which otherwise builds it at
/// its first `register_tool`. Whoever finds it missing builds it outside the
/// lock and only stores it under the lock, so the main thread never waits
/// for a build running elsewhere. Two racing builds make the same registry;
/// the first stored is kept.
pub fn registry() -> Arc<Registry> {
    if let Some(r) = REGISTRY.get() {
        return r.clone();
    }
    let built = Arc::new(Registry::with_builtins());
    REGISTRY.get_or_init(|| built).clone()
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
pub fn prewarm(model: Option<String>) -> io::Result<()> {
    let rt = handle()?;
    let on = rt.clone();
    rt.spawn_blocking(move || {
        on.block_on(STORE.get_or_init(|| async { open_store() }));
    });
    rt.spawn_blocking(move || {
        // Needed first: the main thread registers the editor's tools next.
        registry();
        let providers = providers();
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

/// Whether a provider's base URL is reached over TLS: every URL whose
/// parsed scheme is not `http` (the parser lowercases it and trims the
/// blanks around the URL). One that does not parse fails later, with its own error.
fn needs_tls(base_url: &str) -> bool {
    reqwest::Url::parse(base_url).map_or(true, |url| url.scheme() != "http")
}

static SESSIONS: OnceLock<Arc<crate::session::Sessions>> = OnceLock::new();

/// The chat sessions this Neovim has open.
pub fn sessions() -> Arc<crate::session::Sessions> {
    SESSIONS.get_or_init(Default::default).clone()
}

static STORE: tokio::sync::OnceCell<Option<Arc<mia_store::Store>>> = tokio::sync::OnceCell::const_new();
/// Why the store could not be opened (the message names the file and the fix).
static STORE_ERROR: OnceLock<String> = OnceLock::new();

/// Why [`store`] gave `None` although a data directory is configured.
pub fn store_error() -> Option<String> {
    STORE_ERROR.get().cloned()
}

/// Where the store's saving stands when it is not all saved (writes fail
/// and wait in memory, or some were lost), for `:checkhealth`.
pub fn store_unsaved() -> Option<String> {
    STORE.get().cloned().flatten()?.unsaved().describe()
}

/// Moves the store's write-ahead log into the main file and empties it,
/// if this process opened the store, waiting at most `wait` (SQLite leaves
/// the file consistent if the process ends before it is done). For leaving:
/// the store's connections live as long as the process and are never
/// closed, so without this the log outlived every process and the next
/// one's first open read all of it back (up to SQLite's 4 MB automatic
/// checkpoint) on the way to its first request. Call it from outside the
/// runtime.
pub fn checkpoint_store(wait: Duration) {
    let Some(store) = STORE.get().cloned().flatten() else {
        return;
    };
    let Ok(rt) = handle() else { return };
    if let Ok(Err(e)) = rt.block_on(async { tokio::time::timeout(wait, store.checkpoint()).await }) {
        tracing::warn!("store: checkpoint at exit failed: {e}");
    }
    // Writes still kept in memory end with this process (the checkpoint tried them once more).
    if let Some(text) = store.unsaved().describe() {
        tracing::error!("store: leaving with writes that could not be saved: {text}");
    }
}

/// The store in `data_dir/mia.sqlite3`, opened on first use (on the
/// runtime's blocking pool: opening touches the disk) unless [`prewarm`]
/// opened it already. `None` when no data directory is configured or the
/// file cannot be opened (logged; mia then works without history or
/// reports rather than not at all).
pub async fn store() -> Option<Arc<mia_store::Store>> {
    STORE
        .get_or_init(|| async {
            tokio::task::spawn_blocking(open_store).await.unwrap_or_else(|e| {
                tracing::error!("cannot open the store: {e}");
                let _ = STORE_ERROR.set(format!("opening the store failed: {e}"));
                None
            })
        })
        .await
        .clone()
}

/// Opens the configured store on this thread (blocking: it touches the disk).
fn open_store() -> Option<Arc<mia_store::Store>> {
    let path = agent_settings().data_dir?.join("mia.sqlite3");
    match mia_store::Store::open(&path) {
        Ok(store) => {
            store.observe_usage(Box::new(crate::telemetry::usage));
            Some(Arc::new(store))
        }
        Err(e) => {
            mia_log::wait_ready();
            tracing::error!("cannot open the store: {e}");
            let _ = STORE_ERROR.set(e.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::needs_tls;

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
