//! The log file (under Neovim's `stdpath("log")`) and the panic hook. Logging
//! goes through a background writer so no thread waits on the disk. Nothing
//! logged contains a credential: keys only ever live in request headers,
//! which are marked sensitive and never logged.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::time::Duration;

use tracing_appender::non_blocking::WorkerGuard;

static INIT: Once = Once::new();
static GUARD: Mutex<Option<WorkerGuard>> = Mutex::new(None);

/// Starts logging to `file` at `level` ("error", "warn", "info", "debug",
/// "trace"). Only the first call in a process takes effect. The logger is
/// built on a thread of its own (building it takes 2–6 ms, which the first
/// command would otherwise wait for); lines logged before it is in place
/// are dropped, and the runtime's first tasks wait for it ([`wait_ready`]).
pub fn init(file: &Path, level: &str) {
    INIT.call_once(|| {
        // A panic message belongs in the log, never on Neovim's stderr.
        std::panic::set_hook(Box::new(|info| {
            tracing::error!("panic: {info}");
        }));
        let (file, level) = (file.to_path_buf(), level.to_string());
        let build = move || {
            install(&file, &level);
            let (done, changed) = &READY;
            *done.lock().unwrap_or_else(|p| p.into_inner()) = true;
            changed.notify_all();
        };
        // The closure moves into the thread only when it starts; if no thread
        // can be had, the logger is built here instead.
        let slot = Arc::new(Mutex::new(Some(build)));
        let theirs = slot.clone();
        let spawned = std::thread::Builder::new().name("mia-log".into()).spawn(move || {
            if let Some(build) = theirs.lock().unwrap_or_else(|p| p.into_inner()).take() {
                build();
            }
        });
        if spawned.is_err() {
            if let Some(build) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
                build();
            }
        }
    });
}

/// Set once the logger is in place (or could not be).
static READY: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// Waits (at most `max`) for the logger [`init`] started. For the runtime's
/// first tasks, so what they log is not dropped. Never on the editor's thread.
pub fn wait_ready(max: Duration) {
    if !INIT.is_completed() {
        return;
    }
    let (done, changed) = &READY;
    let guard = done.lock().unwrap_or_else(|p| p.into_inner());
    let _ = changed.wait_timeout_while(guard, max, |done| !*done);
}

fn install(file: &Path, level: &str) {
    // The file is created and opened by the writer's own thread, on the
    // first line written.
    let (writer, guard) = tracing_appender::non_blocking(LazyFile::new(file));
    let filter = tracing_subscriber::EnvFilter::try_new(format!("mia_core={level}"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("mia_core=info"));
    let installed = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init()
        .is_ok();
    if installed {
        *GUARD.lock().unwrap_or_else(|p| p.into_inner()) = Some(guard);
    }
    tracing::info!(version = crate::version::VERSION, "mia core loaded");
}

/// The log file, created (with its directory) and opened for appending on
/// the first write. If that fails, lines are dropped: mia works without a log.
struct LazyFile {
    path: PathBuf,
    file: Option<File>,
    failed: bool,
}

impl LazyFile {
    fn new(path: &Path) -> Self {
        LazyFile {
            path: path.to_path_buf(),
            file: None,
            failed: false,
        }
    }

    fn open(&mut self) -> Option<&mut File> {
        if self.file.is_none() && !self.failed {
            let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
            let opened =
                std::fs::create_dir_all(dir).and_then(|()| File::options().create(true).append(true).open(&self.path));
            match opened {
                Ok(f) => self.file = Some(f),
                Err(_) => self.failed = true,
            }
        }
        self.file.as_mut()
    }
}

impl Write for LazyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.open() {
            Some(f) => f.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

/// Flushes what is buffered (called at shutdown).
pub fn flush() {
    GUARD.lock().unwrap_or_else(|p| p.into_inner()).take();
}
