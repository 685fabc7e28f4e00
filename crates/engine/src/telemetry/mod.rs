//! OpenTelemetry export (issue 18): metrics and events (OTLP logs) to the
//! team's collector over OTLP/HTTP with protobuf bodies, or OTLP/gRPC
//! (feature `grpc`). Off by default.
//!
//! Every hook here (`usage`, `tool_result`, ...) is called from the core's
//! tasks, never from Lua; when export is off it costs one atomic load. When
//! it is on, a hook adds to in-memory instruments or queues one log record;
//! the SDK's own threads (the periodic metric reader, the batch log
//! processor) encode and post, through [`client::Client`] on mia's runtime.
//! A dead collector keeps a bounded backlog there (oldest dropped, counted).

mod client;
mod config;
#[cfg(feature = "grpc")]
mod grpc;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::logs::{BatchConfigBuilder, BatchLogProcessor, SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::Resource;

pub use client::ExportStatus;
pub use config::{OtlpConfig, Protocol, Settings, TelemetryConfig};

use mia_store::UsageRow;

/// One app's telemetry: the exporter in force, if any. Every hook is a
/// method; when export is off a hook reads one atomic and returns.
#[derive(Default)]
pub struct Hub {
    /// True while an exporter is configured: the only thing a hook reads when off.
    on: AtomicBool,
    active: RwLock<Option<Arc<Telemetry>>>,
    /// The last configuration's status, kept after `shutdown` for `:checkhealth`.
    last: Mutex<Option<Arc<client::Status>>>,
}

/// How many sessions' attributes are remembered (model, mode...) for the
/// events that do not carry them; cleared when full.
const MAX_SESSIONS: usize = 256;
/// Longest prompt text exported with `log_prompts = true`.
const MAX_PROMPT_CHARS: usize = 8 * 1024;
/// Log records waiting for the batch processor; more are dropped by the SDK.
const LOG_QUEUE: usize = 2048;
/// How long Neovim's exit waits for the last export.
pub const FLUSH_AT_EXIT: Duration = Duration::from_millis(500);

/// What a session's metrics carry besides `session.id`.
#[derive(Debug, Clone, Default)]
struct SessionCtx {
    model: String,
    provider: String,
    agent: String,
    mode: String,
}

struct Instruments {
    cost: Counter<f64>,
    tokens: Counter<u64>,
    sessions: Counter<u64>,
    lines: Counter<u64>,
    edit_decisions: Counter<u64>,
    genai_tokens: Histogram<u64>,
    genai_duration: Histogram<f64>,
}

struct Telemetry {
    meters: Option<SdkMeterProvider>,
    instruments: Option<Instruments>,
    logs: Option<SdkLoggerProvider>,
    logger: Option<SdkLogger>,
    /// Read from `data_dir` off the main thread ([`Telemetry::user_id`]).
    user_id: OnceLock<String>,
    data_dir: Option<std::path::PathBuf>,
    project: Option<String>,
    log_prompts: bool,
    sessions: Mutex<HashMap<String, SessionCtx>>,
    status: Arc<client::Status>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("on", &self.enabled()).finish()
    }
}

impl Hub {
    /// Starts (or restarts, or stops) export from `config`, the `telemetry`
    /// section of `setup()` merged with the `OTEL_*` variables. Returns the
    /// state line `:checkhealth` shows. An error names the setting to fix.
    ///
    /// Called on Neovim's main thread, so it touches neither disk nor network:
    /// the install id is read, and the HTTP client or gRPC channel built, off
    /// it (first export); an exporter being replaced flushes on a thread of its
    /// own.
    pub fn configure(
        &self,
        runtime: &dyn Fn() -> std::io::Result<tokio::runtime::Handle>,
        config: TelemetryConfig,
    ) -> Result<String, String> {
        self.configure_with_env(runtime, config, &|k| std::env::var(k).ok())
    }

    /// [`Self::configure`] with the `OTEL_*` variables read from `env`
    /// (the process's environment is the only one in use; tests give their own).
    pub fn configure_with_env(
        &self,
        runtime: &dyn Fn() -> std::io::Result<tokio::runtime::Handle>,
        config: TelemetryConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, String> {
        let settings = config::resolve(config, env)?;
        self.stop(Duration::from_millis(500), false);
        let Some(settings) = settings else {
            return Ok("off".into());
        };
        let rt = runtime().map_err(|e| format!("mia: telemetry: cannot start the runtime: {e}"))?;
        let state = settings.describe();
        let telemetry = Arc::new(start(settings, rt.clone())?);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(telemetry.status.clone());
        *self.active.write().unwrap_or_else(|p| p.into_inner()) = Some(telemetry.clone());
        self.on.store(true, Ordering::Release);
        // The install id is ready before the first metric needs it.
        rt.spawn_blocking(move || {
            telemetry.user_id();
        });
        tracing::info!("telemetry: {state}");
        Ok(state)
    }
}

fn start(s: Settings, rt: tokio::runtime::Handle) -> Result<Telemetry, String> {
    let status = Arc::new(client::Status::new(s.describe()));
    // One client per signal: with gRPC each calls its own service.
    let client_for = |_service: &'static str| -> Result<Arc<dyn opentelemetry_http::HttpClient>, String> {
        let grpc: Option<client::GrpcTarget> = match s.protocol {
            Protocol::HttpProtobuf => None,
            #[cfg(feature = "grpc")]
            Protocol::Grpc => {
                let (endpoint, service) = if _service == "metrics" {
                    (s.metrics.as_deref(), grpc::Service::Metrics)
                } else {
                    (s.logs.as_deref(), grpc::Service::Logs)
                };
                let target = grpc::Target::new(endpoint.unwrap_or_default(), service, s.gzip, rt.clone())
                    .map_err(|e| format!("mia: telemetry: {e}"))?;
                Some(Arc::new(target))
            }
            #[cfg(not(feature = "grpc"))]
            Protocol::Grpc => return Err("mia: telemetry: gRPC is not built into this mia".into()),
        };
        Ok(Arc::new(client::Client::new(rt.clone(), status.clone(), grpc)))
    };
    // The SDK's OTLP/HTTP exporters encode; for gRPC the URL only names the
    // signal in the status line (the call goes to the service).
    let sdk_endpoint = |e: &str, path: &str| match s.protocol {
        Protocol::HttpProtobuf => e.to_string(),
        Protocol::Grpc => format!("{e}{path}"),
    };
    let http_gzip = s.gzip && s.protocol == Protocol::HttpProtobuf;
    let mut attrs = vec![
        KeyValue::new("service.name", "mia"),
        KeyValue::new("service.version", mia_log::version::VERSION),
    ];
    for (k, v) in &s.resource {
        attrs.push(KeyValue::new(k.clone(), v.clone()));
    }
    // The builder also reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME;
    // the pairs resolved here come first so they win on a clash.
    let resource = Resource::builder().with_attributes(attrs).build();
    let bad = |e: opentelemetry_otlp::ExporterBuildError| format!("mia: telemetry: {e}");
    let (meters, instruments) = if let Some(endpoint) = &s.metrics {
        let mut exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_endpoint(sdk_endpoint(endpoint, "/v1/metrics"))
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(client::REQUEST_TIMEOUT)
            .with_headers(s.headers.iter().cloned().collect())
            .with_shared_http_client(client_for("metrics")?);
        if http_gzip {
            exporter = exporter.with_compression(opentelemetry_otlp::Compression::Gzip);
        }
        let exporter = exporter.with_temporality(Temporality::Delta).build().map_err(bad)?;
        let reader = PeriodicReader::builder(exporter)
            .with_interval(Duration::from_millis(s.interval_ms))
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource.clone())
            .build();
        let meter = provider.meter("mia");
        let instruments = Instruments {
            cost: meter
                .f64_counter("mia.cost.usage")
                .with_unit("USD")
                .with_description("Cost of model calls")
                .build(),
            tokens: meter
                .u64_counter("mia.token.usage")
                .with_unit("tokens")
                .with_description("Tokens used, by type")
                .build(),
            sessions: meter
                .u64_counter("mia.session.count")
                .with_unit("count")
                .with_description("Chat sessions started")
                .build(),
            lines: meter
                .u64_counter("mia.lines_of_code.count")
                .with_unit("count")
                .with_description("Lines added or removed by accepted edits")
                .build(),
            edit_decisions: meter
                .u64_counter("mia.code_edit_tool.decision")
                .with_unit("count")
                .with_description("Proposed edits accepted or rejected")
                .build(),
            genai_tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Measures number of input and output tokens used")
                .with_boundaries(vec![
                    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
                    16777216.0, 67108864.0,
                ])
                .build(),
            genai_duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description("GenAI operation duration")
                .with_boundaries(vec![
                    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
                ])
                .build(),
        };
        (Some(provider), Some(instruments))
    } else {
        (None, None)
    };
    let (logs, logger) = if let Some(endpoint) = &s.logs {
        let mut exporter = opentelemetry_otlp::LogExporter::builder()
            .with_http()
            .with_endpoint(sdk_endpoint(endpoint, "/v1/logs"))
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(client::REQUEST_TIMEOUT)
            .with_headers(s.headers.iter().cloned().collect())
            .with_shared_http_client(client_for("logs")?);
        if http_gzip {
            exporter = exporter.with_compression(opentelemetry_otlp::Compression::Gzip);
        }
        let exporter = exporter.build().map_err(bad)?;
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(LOG_QUEUE)
            .with_scheduled_delay(Duration::from_millis(s.interval_ms.min(5_000)))
            .build();
        let processor = BatchLogProcessor::builder(exporter).with_batch_config(batch).build();
        let provider = SdkLoggerProvider::builder()
            .with_log_processor(processor)
            .with_resource(resource)
            .build();
        let logger = provider.logger("mia");
        (Some(provider), Some(logger))
    } else {
        (None, None)
    };
    Ok(Telemetry {
        meters,
        instruments,
        logs,
        logger,
        user_id: OnceLock::new(),
        data_dir: s.data_dir,
        project: s.project,
        log_prompts: s.log_prompts,
        sessions: Mutex::new(HashMap::new()),
        status,
    })
}

impl Hub {
    fn active(&self) -> Option<Arc<Telemetry>> {
        if !self.on.load(Ordering::Acquire) {
            return None;
        }
        self.active.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// True when export is configured (one atomic load).
    pub fn enabled(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Flushes what is pending and stops export, waiting at most `bound`
    /// (the SDK's shutdown blocks, so it runs on a thread of its own; its
    /// errors are logged, never raised). For Neovim's exit and reconfiguration.
    pub fn shutdown(&self, bound: Duration) {
        self.stop(bound, true);
    }

    /// Stops the running exporter. Its flush runs on a thread of its own,
    /// bounded by `bound`; only Neovim's exit (`wait`) waits for it.
    fn stop(&self, bound: Duration, wait: bool) {
        self.on.store(false, Ordering::Release);
        let Some(t) = self.active.write().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        let started = std::time::Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("mia-telemetry-flush".into())
            .spawn(move || {
                t.status.set_deadline(started + bound);
                let half = bound / 2;
                if let Some(m) = &t.meters {
                    if let Err(e) = m.shutdown_with_timeout(half) {
                        tracing::warn!("telemetry: metrics flush at exit: {e}");
                    }
                }
                if let Some(l) = &t.logs {
                    if let Err(e) = l.shutdown_with_timeout(half) {
                        tracing::warn!("telemetry: events flush at exit: {e}");
                    }
                }
                let _ = tx.send(());
            });
        if !wait {
            tracing::info!("telemetry: the previous exporter flushes in the background");
            return;
        }
        if spawned.is_ok() && rx.recv_timeout(bound).is_err() {
            tracing::warn!(
                "telemetry: the flush at exit took longer than {} ms; left behind",
                bound.as_millis()
            );
        }
        tracing::info!("telemetry: stopped in {} ms", started.elapsed().as_millis());
    }

    /// What `:checkhealth mia` shows: whether export is on, where to (no
    /// header values), and the last export's result.
    pub fn status(&self) -> Option<ExportStatus> {
        let s = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        Some(s.snapshot(self.enabled()))
    }
}

impl Telemetry {
    /// The anonymous per-install id (read or made once; never on the main
    /// thread: hooks run on the core's tasks, and `configure` warms it on a
    /// blocking task).
    fn user_id(&self) -> &str {
        self.user_id.get_or_init(|| config::user_id(self.data_dir.as_deref()))
    }

    fn ctx(&self, session: Option<&str>) -> SessionCtx {
        let Some(id) = session else {
            return SessionCtx::default();
        };
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
            .unwrap_or_default()
    }

    fn remember(&self, id: &str, f: impl FnOnce(&mut SessionCtx)) {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_SESSIONS && !map.contains_key(id) {
            map.clear();
        }
        f(map.entry(id.to_string()).or_default());
    }

    /// `session.id`, `user.id`, `model`, `provider`, `agent`, `mode` and
    /// the project when one is configured.
    fn common(&self, session: Option<&str>, c: &SessionCtx) -> Vec<KeyValue> {
        let mut v = Vec::with_capacity(8);
        v.push(KeyValue::new("session.id", session.unwrap_or("").to_string()));
        v.push(KeyValue::new("user.id", self.user_id().to_string()));
        v.push(KeyValue::new("model", c.model.clone()));
        v.push(KeyValue::new("provider", c.provider.clone()));
        v.push(KeyValue::new("agent", c.agent.clone()));
        v.push(KeyValue::new("mode", c.mode.clone()));
        if let Some(p) = &self.project {
            v.push(KeyValue::new("project", p.clone()));
        }
        v
    }

    fn event(&self, name: &'static str, attrs: Vec<(&'static str, AnyValue)>, common: &[KeyValue]) {
        let Some(logger) = &self.logger else { return };
        let mut rec = logger.create_log_record();
        rec.set_event_name(name);
        rec.set_body(AnyValue::from(name));
        rec.set_severity_number(Severity::Info);
        rec.set_timestamp(std::time::SystemTime::now());
        for kv in common {
            rec.add_attribute(kv.key.clone(), AnyValue::from(kv.value.to_string()));
        }
        rec.add_attribute("event.name", AnyValue::from(name));
        for (k, v) in attrs {
            rec.add_attribute(k, v);
        }
        logger.emit(rec);
    }
}

impl Hub {
    /// A session started (or was opened) with this model and mode.
    pub fn session_started(&self, session: &str, model_spec: &str, mode: &str, agent: &str) {
        let Some(t) = self.active() else { return };
        let (provider, model) = model_spec.split_once('/').unwrap_or(("", model_spec));
        t.remember(session, |c| {
            c.provider = provider.to_string();
            c.model = model.to_string();
            c.mode = mode.to_string();
            c.agent = agent.to_string();
        });
        let c = t.ctx(Some(session));
        if let Some(i) = &t.instruments {
            i.sessions.add(1, &t.common(Some(session), &c));
        }
    }

    /// The session's mode changed (later metrics carry the new one).
    pub fn session_mode(&self, session: &str, mode: &str) {
        let Some(t) = self.active() else { return };
        t.remember(session, |c| c.mode = mode.to_string());
    }

    /// One provider call's usage row, as the store records it: cost, tokens,
    /// the GenAI metrics and a `mia.api_request` event. Whatever cost the row
    /// carries is exported (local price math or a gateway's own figure).
    pub fn usage(&self, row: &UsageRow) {
        let Some(t) = self.active() else { return };
        let session = row.session_id.as_deref();
        if let Some(id) = session {
            t.remember(id, |c| {
                c.model = row.model.clone();
                c.provider = row.provider.clone();
                c.agent = row.agent.clone();
            });
        }
        let mut c = t.ctx(session);
        c.model = row.model.clone();
        c.provider = row.provider.clone();
        c.agent = row.agent.clone();
        let common = t.common(session, &c);
        let types = [
            ("input", row.input_tokens),
            ("output", row.output_tokens),
            ("cache_read", row.cache_read_tokens),
            ("cache_write", row.cache_write_tokens),
            ("reasoning", row.reasoning_tokens),
        ];
        if let Some(i) = &t.instruments {
            if row.cost_known {
                // `source`: "gateway" when an LLM gateway priced the call, else "local".
                let mut a = common.clone();
                a.push(KeyValue::new("source", row.cost_source.as_str()));
                i.cost.add(row.total_usd.max(0.0), &a);
            }
            for (kind, n) in types {
                if n == 0 {
                    continue;
                }
                let mut a = common.clone();
                a.push(KeyValue::new("type", kind));
                i.tokens.add(n, &a);
            }
            let genai = |extra: Option<&'static str>| {
                let mut a = vec![
                    KeyValue::new("gen_ai.operation.name", "chat"),
                    KeyValue::new("gen_ai.provider.name", row.provider.clone()),
                    KeyValue::new("gen_ai.request.model", row.model.clone()),
                ];
                if let Some(kind) = extra {
                    a.push(KeyValue::new("gen_ai.token.type", kind));
                }
                a.extend(common.iter().cloned());
                a
            };
            // The convention's token types are input and output; cache reads and
            // writes are input the provider billed apart, so they count as input.
            let input = row.input_tokens + row.cache_read_tokens + row.cache_write_tokens;
            i.genai_tokens.record(input, &genai(Some("input")));
            i.genai_tokens.record(row.output_tokens, &genai(Some("output")));
            i.genai_duration
                .record(row.duration_ms.max(0) as f64 / 1000.0, &genai(None));
        }
        let n = |v: u64| AnyValue::Int(v.min(i64::MAX as u64) as i64);
        let mut attrs = vec![
            (
                "cost_usd",
                AnyValue::Double(if row.cost_known { row.total_usd } else { 0.0 }),
            ),
            ("cost_known", AnyValue::Boolean(row.cost_known)),
            ("cost_source", AnyValue::from(row.cost_source.as_str())),
            ("input_tokens", n(row.input_tokens)),
            ("output_tokens", n(row.output_tokens)),
            ("cache_read_tokens", n(row.cache_read_tokens)),
            ("cache_write_tokens", n(row.cache_write_tokens)),
            ("reasoning_tokens", n(row.reasoning_tokens)),
            ("duration_ms", AnyValue::Int(row.duration_ms.max(0))),
            ("retries", AnyValue::Int(i64::from(row.retries))),
            ("status", AnyValue::from("ok")),
        ];
        if row.estimated {
            attrs.push(("estimated", AnyValue::Boolean(true)));
        }
        t.event("mia.api_request", attrs, &common);
    }

    /// A provider call failed (after mia's retries) with this error class.
    pub fn api_error(&self, session: Option<&str>, provider: &str, model: &str, class: &str, status: Option<u16>) {
        let Some(t) = self.active() else { return };
        let mut c = t.ctx(session);
        if !provider.is_empty() {
            c.provider = provider.to_string();
        }
        if !model.is_empty() {
            c.model = model.to_string();
        }
        let common = t.common(session, &c);
        let mut attrs = vec![("class", AnyValue::from(class.to_string()))];
        if let Some(s) = status {
            attrs.push(("status_code", AnyValue::Int(i64::from(s))));
        }
        t.event("mia.api_error", attrs, &common);
    }

    /// A tool finished: its name, `ok`/`error`, how long it ran. No content.
    pub fn tool_result(&self, session: Option<&str>, name: &str, ok: bool, duration_ms: u64) {
        let Some(t) = self.active() else { return };
        let c = t.ctx(session);
        let common = t.common(session, &c);
        let attrs = vec![
            ("tool_name", AnyValue::from(name.to_string())),
            ("status", AnyValue::from(if ok { "ok" } else { "error" })),
            ("duration_ms", AnyValue::Int(duration_ms.min(i64::MAX as u64) as i64)),
        ];
        t.event("mia.tool_result", attrs, &common);
    }

    /// A permission decision on a tool call: `accept` or `reject`, and who
    /// decided (`config` for a rule, `user` for an answer).
    pub fn tool_decision(&self, session: Option<&str>, name: &str, accept: bool, source: &str) {
        let Some(t) = self.active() else { return };
        let c = t.ctx(session);
        let common = t.common(session, &c);
        let decision = if accept { "accept" } else { "reject" };
        let attrs = vec![
            ("tool_name", AnyValue::from(name.to_string())),
            ("decision", AnyValue::from(decision)),
            ("source", AnyValue::from(source.to_string())),
        ];
        t.event("mia.tool_decision", attrs, &common);
    }

    /// A proposed edit was accepted or rejected, by the user (`source` =
    /// `user`, in a review) or by the rules (`config`); accepted edits count
    /// their added and removed lines.
    pub fn edit_decision(
        &self,
        session: Option<&str>,
        tool: &str,
        accept: bool,
        source: &str,
        added: u64,
        removed: u64,
    ) {
        let Some(t) = self.active() else { return };
        let c = t.ctx(session);
        let common = t.common(session, &c);
        if let Some(i) = &t.instruments {
            let mut a = common.clone();
            a.push(KeyValue::new("tool_name", tool.to_string()));
            a.push(KeyValue::new("decision", if accept { "accept" } else { "reject" }));
            a.push(KeyValue::new("source", source.to_string()));
            i.edit_decisions.add(1, &a);
            if accept {
                for (kind, n) in [("added", added), ("removed", removed)] {
                    if n > 0 {
                        let mut a = common.clone();
                        a.push(KeyValue::new("type", kind));
                        i.lines.add(n, &a);
                    }
                }
            }
        }
    }

    /// The user sent a prompt: its length always, its text only with
    /// `log_prompts = true` (bounded).
    pub fn user_prompt(&self, session: Option<&str>, text: &str) {
        let Some(t) = self.active() else { return };
        let c = t.ctx(session);
        let common = t.common(session, &c);
        let mut attrs = vec![("prompt_length", AnyValue::Int(text.chars().count() as i64))];
        if t.log_prompts {
            let cut: String = text.chars().take(MAX_PROMPT_CHARS).collect();
            attrs.push(("prompt", AnyValue::from(cut)));
        }
        t.event("mia.user_prompt", attrs, &common);
    }

    /// Forces the pending metrics and events out now (tests, benchmarks).
    pub fn flush(&self) {
        let Some(t) = self.active() else { return };
        if let Some(m) = &t.meters {
            let _ = m.force_flush();
        }
        if let Some(l) = &t.logs {
            let _ = l.force_flush();
        }
    }
}
