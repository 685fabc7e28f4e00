//! The log file (under Neovim's `stdpath("log")`) and the panic hook. Logging
//! goes through a background writer so no thread waits on the disk. Nothing
//! logged contains a credential: keys only ever live in request headers,
//! which are marked sensitive and never logged.

use std::path::Path;
use std::sync::{Mutex, Once};

use tracing_appender::non_blocking::WorkerGuard;

static INIT: Once = Once::new();
static GUARD: Mutex<Option<WorkerGuard>> = Mutex::new(None);

/// Starts logging to `file` at `level` ("error", "warn", "info", "debug",
/// "trace"). Only the first call in a process takes effect.
pub fn init(file: &Path, level: &str) {
    INIT.call_once(|| {
        let dir = file.parent().unwrap_or_else(|| Path::new("."));
        let name = file
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_else(|| "mia.log".into());
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let appender = tracing_appender::rolling::never(dir, name);
        let (writer, guard) = tracing_appender::non_blocking(appender);
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
        // A panic message belongs in the log, never on Neovim's stderr.
        std::panic::set_hook(Box::new(|info| {
            tracing::error!("panic: {info}");
        }));
        tracing::info!(version = crate::version::VERSION, "mia core loaded");
    });
}

/// Flushes what is buffered (called at shutdown).
pub fn flush() {
    GUARD.lock().unwrap_or_else(|p| p.into_inner()).take();
}
