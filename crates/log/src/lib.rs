//! The log file (under Neovim's `stdpath("log")`) and the panic hook. Logging
//! goes through a background writer so no thread waits on the disk. Nothing
//! logged contains a credential: keys only ever live in request headers,
//! which are marked sensitive and never logged.

pub mod version;

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, Once, OnceLock};
use std::time::Duration;

use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Lines waiting for the log's writer thread; more are dropped (the
/// default), and the log says how many ([`Counted`]). The queue is
/// allocated whole up front: tracing-appender's default of 128,000 lines
/// took 4 MB, and its page faults most of the 3-6 ms the logger took to
/// build, on a core the first command needs.
const LOG_QUEUE_LINES: usize = 8_192;

static INIT: Once = Once::new();
static GUARD: Mutex<Option<WorkerGuard>> = Mutex::new(None);

/// Starts logging to `file` at `level` ("error", "warn", "info", "debug",
/// "trace"). Only the first call in a process takes effect. The logger is
/// built on a thread of its own (the first command need not wait for it);
/// lines logged before it is in place are dropped, unless their code waits
/// for it first ([`wait_ready`]).
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

/// The longest [`wait_ready`] waits.
const READY_WAIT: Duration = Duration::from_millis(200);

/// Waits (at most 200 ms) for the logger [`init`] started, so that a line
/// logged right after is not dropped. Called just before such a line, on a
/// path that runs while the first command may still be starting the logger
/// (the store's opening), not before the work: the usual path, which logs
/// nothing, then never waits. Never on the editor's thread.
pub fn wait_ready() {
    if !INIT.is_completed() {
        return;
    }
    let (done, changed) = &READY;
    let guard = done.lock().unwrap_or_else(|p| p.into_inner());
    let _ = changed.wait_timeout_while(guard, READY_WAIT, |done| !*done);
}

fn install(file: &Path, level: &str) {
    // The file is created and opened by the writer's own thread, on the
    // first line written.
    let dropped = Arc::new(OnceLock::new());
    let (writer, guard) = NonBlockingBuilder::default()
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .finish(Counted::new(LazyFile::new(file), dropped.clone()));
    let _ = dropped.set(writer.error_counter());
    let installed = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .finish()
        .with(filter(level))
        .try_init()
        .is_ok();
    if installed {
        *GUARD.lock().unwrap_or_else(|p| p.into_inner()) = Some(guard);
    }
    tracing::info!(version = crate::version::VERSION, "mia core loaded");
}

/// mia's own lines at `level` and above, in any case (an unknown level
/// reads as "info").
/// A target filter, not an `EnvFilter`: that one parses its directives with
/// regular expressions, for a directive that is always this one.
fn filter(level: &str) -> Targets {
    let level = match level.trim().to_ascii_lowercase().as_str() {
        "error" => LevelFilter::ERROR,
        "warn" => LevelFilter::WARN,
        "debug" => LevelFilter::DEBUG,
        "trace" => LevelFilter::TRACE,
        _ => LevelFilter::INFO,
    };
    CRATES.iter().fold(Targets::new(), |t, c| t.with_target(*c, level))
}

/// The crates whose events reach the log (tracing's target is the module
/// path, which starts with the crate's name). Other crates' events (the
/// HTTP stack, the SDKs) are left out.
const CRATES: [&str; 7] = [
    "mia_core",
    "mia_engine",
    "mia_llm",
    "mia_store",
    "mia_cost",
    "mia_log",
    "mia_acp",
];

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

/// The log's writer, which first says how many lines the full queue dropped
/// since the last line it wrote: logging never makes a thread wait, but
/// what it leaves out is counted, not silent.
struct Counted<W> {
    inner: W,
    /// The queue's count of dropped lines (set once the queue exists).
    dropped: Arc<OnceLock<ErrorCounter>>,
    reported: usize,
}

impl<W: Write> Counted<W> {
    fn new(inner: W, dropped: Arc<OnceLock<ErrorCounter>>) -> Self {
        Counted {
            inner,
            dropped,
            reported: 0,
        }
    }

    /// The line that reports `n` dropped lines, in the log's own format.
    fn notice(n: usize) -> String {
        let now = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        format!(
            "{now}  WARN mia_log: {n} log line(s) were dropped: more than {LOG_QUEUE_LINES} were waiting \
             to be written\n"
        )
    }
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    /// The queue's worker writes each line with one `write_all`.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let dropped = self.dropped.get().map_or(0, ErrorCounter::dropped_lines);
        if dropped > self.reported {
            self.inner.write_all(Self::notice(dropped - self.reported).as_bytes())?;
            self.reported = dropped;
        }
        self.inner.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Flushes what is buffered (called at shutdown).
pub fn flush() {
    GUARD.lock().unwrap_or_else(|p| p.into_inner()).take();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use tracing::Level;

    /// A file that takes its first line only when released, so that the
    /// queue behind it fills up.
    struct Held {
        out: Arc<Mutex<Vec<u8>>>,
        entered: mpsc::Sender<()>,
        release: mpsc::Receiver<()>,
        held: bool,
    }

    impl Write for Held {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if !self.held {
                self.held = true;
                let _ = self.entered.send(());
                let _ = self.release.recv();
            }
            self.out.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_a_full_queue_drops_are_counted_in_the_log() {
        let out = Arc::new(Mutex::new(Vec::new()));
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let held = Held {
            out: out.clone(),
            entered: entered_tx,
            release: release_rx,
            held: false,
        };
        let dropped = Arc::new(OnceLock::new());
        let (mut writer, guard) = NonBlockingBuilder::default()
            .buffered_lines_limit(2)
            .finish(Counted::new(held, dropped.clone()));
        let _ = dropped.set(writer.error_counter());
        writer.write_all(b"first\n").unwrap();
        entered.recv().unwrap(); // the writer holds "first"; the queue is empty
        for i in 0..5 {
            writer.write_all(format!("line {i}\n").as_bytes()).unwrap(); // two fit, three do not
        }
        release.send(()).unwrap();
        // Once the queue is written out, the next line fits again.
        for _ in 0..5000 {
            if String::from_utf8_lossy(&out.lock().unwrap()).contains("line 1\n") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        writer.write_all(b"last\n").unwrap();
        drop(guard); // waits for what is queued to be written
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert_eq!(lines[0], "first");
        assert!(
            lines[1].ends_with("WARN mia_log: 3 log line(s) were dropped: more than 8192 were waiting to be written"),
            "{text}"
        );
        assert_eq!(lines[2..], ["line 0", "line 1", "last"]);
    }

    #[test]
    fn the_filter_keeps_mia_lines_at_the_level_and_above() {
        let debug = filter("debug");
        assert!(debug.would_enable("mia_core", &Level::DEBUG));
        assert!(debug.would_enable("mia_llm::http", &Level::ERROR));
        assert!(!debug.would_enable("mia_store", &Level::TRACE));
        assert!(debug.would_enable("mia_engine::agent", &Level::DEBUG));
        assert!(!debug.would_enable("rustls", &Level::ERROR));
        // Other crates' lines (hyper, rustls, ...) stay out at every level.
        assert!(!filter("trace").would_enable("hyper", &Level::ERROR));
        assert!(filter("trace").would_enable("mia_core", &Level::TRACE));
        assert!(!filter("error").would_enable("mia_core", &Level::WARN));
        // Any spelling of a level's name, as the EnvFilter before it read them.
        assert!(filter(" DEBUG ").would_enable("mia_core", &Level::DEBUG));
        assert!(!filter("Warn").would_enable("mia_core", &Level::INFO));
    }

    #[test]
    fn an_unknown_level_reads_as_info() {
        for level in ["", "loud", "0", "5", "mia_core=trace", "info"] {
            let f = filter(level);
            assert!(f.would_enable("mia_core", &Level::INFO), "{level:?}");
            assert!(!f.would_enable("mia_core", &Level::DEBUG), "{level:?}");
        }
    }
}
