//! OpenTelemetry export (issue 18) against a loopback OTLP/HTTP sink that
//! decodes what arrived with `opentelemetry-proto`: names, units,
//! attributes, delta temporality, resource attributes and headers from the
//! OTEL_* variables, no prompt text by default, a flush at shutdown, and a
//! dead collector that stays harmless.
//!
//! Each test builds its own app, whose telemetry is its own: they run in
//! parallel, and none touches the process's environment.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mia_engine::app::App;
use mia_engine::telemetry::{OtlpConfig, TelemetryConfig};
use mia_store::UsageRow;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, AggregationTemporality};
use prost::Message;

#[derive(Clone, Debug)]
struct Received {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// A minimal HTTP/1.1 server: every POST is kept and answered 200.
struct Sink {
    port: u16,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Sink {
    fn start() -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let keep = got.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let keep = keep.clone();
                std::thread::spawn(move || serve(conn, keep));
            }
        });
        Sink { port, got }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn take(&self, path: &str) -> Vec<Received> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}

fn serve(conn: TcpStream, keep: Arc<Mutex<Vec<Received>>>) {
    let mut out = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        keep.lock().unwrap().push(Received { path, headers, body });
        let _ = out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
    }
}

fn config(endpoint: String, dir: &std::path::Path) -> TelemetryConfig {
    let mut headers = std::collections::BTreeMap::new();
    headers.insert("x-team-token".to_string(), "from-setup".to_string());
    TelemetryConfig {
        otlp: Some(OtlpConfig {
            endpoint: Some(endpoint),
            protocol: Some("http/protobuf".into()),
            compression: None,
            headers,
            interval_ms: Some(60_000),
        }),
        log_prompts: false,
        project: Some("webshop".into()),
        data_dir: Some(dir.to_path_buf()),
    }
}

fn row(session: &str) -> UsageRow {
    UsageRow {
        session_id: Some(session.into()),
        agent: "mia".into(),
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        input_tokens: 1200,
        output_tokens: 300,
        cache_read_tokens: 800,
        cache_write_tokens: 0,
        reasoning_tokens: 40,
        cost_known: true,
        total_usd: 0.0125,
        duration_ms: 1500,
        retries: 2,
        ..UsageRow::default()
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn s(v: Option<&any_value::Value>) -> String {
    match v {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// Everything a recorded prompt does, once.
fn one_prompt(app: &App, session: &str) {
    let telemetry = app.telemetry();
    telemetry.session_started(session, "anthropic/claude-sonnet-4-5", "code", "mia");
    telemetry.user_prompt(Some(session), "PROMPT-TEXT-THAT-MUST-NOT-LEAVE");
    telemetry.tool_decision(Some(session), "edit_file", true, "user");
    telemetry.tool_result(Some(session), "edit_file", true, 12);
    telemetry.edit_decision(Some(session), "edit_file", true, "user", 5, 2);
    telemetry.edit_decision(Some(session), "write_file", false, "user", 0, 0);
    telemetry.usage(&row(session));
    telemetry.api_error(Some(session), "anthropic", "claude-sonnet-4-5", "rate_limit", Some(429));
}

/// What most tests start with: an app of their own, a collector and a data directory.
fn one_sink() -> (Arc<App>, Sink, tempfile::TempDir) {
    (App::new(), Sink::start(), tempfile::tempdir().unwrap())
}

#[test]
fn metrics_and_events_reach_the_collector_with_the_issue_names() {
    let (app, sink, dir) = one_sink();
    let env = |k: &str| match k {
        "OTEL_RESOURCE_ATTRIBUTES" => Some("team.id=payments,cost_center=cc-42".to_string()),
        "OTEL_EXPORTER_OTLP_HEADERS" => Some("x-honeycomb-team=env-secret".to_string()),
        _ => None,
    };
    let state = app
        .telemetry()
        .configure_with_env(&|| app.handle(), config(sink.endpoint(), dir.path()), &env)
        .unwrap();
    assert!(state.starts_with("on:"), "{state}");
    assert!(!state.contains("secret") && !state.contains("from-setup"), "{state}");

    one_prompt(&app, "s-1");
    // Nothing is sent before the interval: the shutdown's flush sends it.
    let started = Instant::now();
    app.telemetry().shutdown(Duration::from_millis(500));
    let took = started.elapsed();
    eprintln!("flush at shutdown: {} ms", took.as_millis());
    assert!(!app.telemetry().enabled());

    let metrics = sink.take("/v1/metrics");
    let logs = sink.take("/v1/logs");
    assert!(!metrics.is_empty(), "no metrics export arrived");
    assert!(!logs.is_empty(), "no logs export arrived");
    for r in metrics.iter().chain(&logs) {
        assert_eq!(
            r.headers.get("content-type").map(String::as_str),
            Some("application/x-protobuf")
        );
        assert_eq!(r.headers.get("x-team-token").map(String::as_str), Some("from-setup"));
        assert_eq!(
            r.headers.get("x-honeycomb-team").map(String::as_str),
            Some("env-secret")
        );
        let text = String::from_utf8_lossy(&r.body);
        assert!(!text.contains("PROMPT-TEXT"), "prompt text was exported");
    }
    let bytes: usize = metrics.iter().chain(&logs).map(|r| r.body.len()).sum();
    eprintln!("bytes exported for one prompt: {bytes}");

    // Metrics: names, units, temporality, attributes.
    let mut seen: HashMap<String, (String, Vec<Vec<KeyValue>>, i32)> = HashMap::new();
    for r in &metrics {
        let req = ExportMetricsServiceRequest::decode(r.body.as_slice()).unwrap();
        for rm in &req.resource_metrics {
            let res = &rm.resource.as_ref().unwrap().attributes;
            assert_eq!(s(attr(res, "team.id")), "payments");
            assert_eq!(s(attr(res, "cost_center")), "cc-42");
            assert_eq!(s(attr(res, "service.name")), "mia");
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    let (points, temporality): (Vec<Vec<KeyValue>>, i32) = match m.data.as_ref().unwrap() {
                        metric::Data::Sum(sum) => (
                            sum.data_points.iter().map(|p| p.attributes.clone()).collect(),
                            sum.aggregation_temporality,
                        ),
                        metric::Data::Histogram(h) => (
                            h.data_points.iter().map(|p| p.attributes.clone()).collect(),
                            h.aggregation_temporality,
                        ),
                        other => panic!("unexpected kind for {}: {other:?}", m.name),
                    };
                    seen.insert(m.name.clone(), (m.unit.clone(), points, temporality));
                }
            }
        }
    }
    let expect = [
        ("mia.cost.usage", "USD"),
        ("mia.token.usage", "tokens"),
        ("mia.session.count", "count"),
        ("mia.lines_of_code.count", "count"),
        ("mia.code_edit_tool.decision", "count"),
        ("gen_ai.client.token.usage", "{token}"),
        ("gen_ai.client.operation.duration", "s"),
    ];
    for (name, unit) in expect {
        let (u, points, temporality) = seen
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing: {:?}", seen.keys()));
        assert_eq!(u, unit, "{name}");
        assert_eq!(
            *temporality,
            AggregationTemporality::Delta as i32,
            "{name} is not delta"
        );
        for p in points {
            assert_eq!(s(attr(p, "session.id")), "s-1", "{name}");
            assert_eq!(s(attr(p, "user.id")).len(), 32, "{name}");
            assert_eq!(s(attr(p, "model")), "claude-sonnet-4-5", "{name}");
            assert_eq!(s(attr(p, "provider")), "anthropic", "{name}");
            assert_eq!(s(attr(p, "agent")), "mia", "{name}");
            assert_eq!(s(attr(p, "mode")), "code", "{name}");
            assert_eq!(s(attr(p, "project")), "webshop", "{name}");
        }
    }
    let types: Vec<String> = seen["mia.token.usage"].1.iter().map(|p| s(attr(p, "type"))).collect();
    for t in ["input", "output", "cache_read", "reasoning"] {
        assert!(types.contains(&t.to_string()), "{types:?}");
    }
    let lines: Vec<String> = seen["mia.lines_of_code.count"]
        .1
        .iter()
        .map(|p| s(attr(p, "type")))
        .collect();
    assert!(
        lines.contains(&"added".into()) && lines.contains(&"removed".into()),
        "{lines:?}"
    );
    let decisions: Vec<String> = seen["mia.code_edit_tool.decision"]
        .1
        .iter()
        .map(|p| s(attr(p, "decision")))
        .collect();
    assert!(decisions.contains(&"accept".into()) && decisions.contains(&"reject".into()));
    for p in &seen["gen_ai.client.token.usage"].1 {
        assert_eq!(s(attr(p, "gen_ai.operation.name")), "chat");
        assert_eq!(s(attr(p, "gen_ai.provider.name")), "anthropic");
        assert_eq!(s(attr(p, "gen_ai.request.model")), "claude-sonnet-4-5");
        assert!(["input", "output"].contains(&s(attr(p, "gen_ai.token.type")).as_str()));
    }

    // Events: the four the issue names (and the prompt's length, no text).
    let mut events: HashMap<String, Vec<KeyValue>> = HashMap::new();
    for r in &logs {
        let req = ExportLogsServiceRequest::decode(r.body.as_slice()).unwrap();
        for rl in &req.resource_logs {
            assert_eq!(
                s(attr(&rl.resource.as_ref().unwrap().attributes, "team.id")),
                "payments"
            );
            for sl in &rl.scope_logs {
                for lr in &sl.log_records {
                    events.insert(lr.event_name.clone(), lr.attributes.clone());
                }
            }
        }
    }
    let api = &events["mia.api_request"];
    assert_eq!(attr(api, "cost_usd"), Some(&any_value::Value::DoubleValue(0.0125)));
    assert_eq!(attr(api, "input_tokens"), Some(&any_value::Value::IntValue(1200)));
    assert_eq!(attr(api, "duration_ms"), Some(&any_value::Value::IntValue(1500)));
    assert_eq!(s(attr(api, "model")), "claude-sonnet-4-5");
    assert_eq!(s(attr(api, "status")), "ok");
    assert_eq!(s(attr(api, "cost_source")), "local");
    assert_eq!(attr(api, "retries"), Some(&any_value::Value::IntValue(2)));
    assert_eq!(s(attr(&events["mia.api_error"], "class")), "rate_limit");
    let tool = &events["mia.tool_result"];
    assert_eq!(s(attr(tool, "tool_name")), "edit_file");
    assert_eq!(s(attr(tool, "status")), "ok");
    assert_eq!(s(attr(&events["mia.tool_decision"], "decision")), "accept");
    let prompt = &events["mia.user_prompt"];
    assert!(attr(prompt, "prompt").is_none());
    assert_eq!(attr(prompt, "prompt_length"), Some(&any_value::Value::IntValue(31)));

    // The anonymous id is kept per install.
    let id = std::fs::read_to_string(dir.path().join("telemetry-id")).unwrap();
    assert_eq!(s(attr(&seen["mia.cost.usage"].1[0], "user.id")), id.trim());
}

#[test]
fn prompts_are_exported_only_when_asked() {
    let (app, sink, dir) = one_sink();
    let mut c = config(sink.endpoint(), dir.path());
    c.log_prompts = true;
    app.configure_telemetry(c).unwrap();
    app.telemetry().user_prompt(Some("s-2"), "please refactor");
    app.telemetry().shutdown(Duration::from_millis(500));
    let text: String = sink
        .take("/v1/logs")
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert!(text.contains("please refactor"));
}

#[test]
fn gzip_bodies_are_marked_and_decode() {
    let (app, sink, dir) = one_sink();
    let mut c = config(sink.endpoint(), dir.path());
    c.otlp.as_mut().unwrap().compression = Some("gzip".into());
    let state = app.configure_telemetry(c).unwrap();
    assert!(state.contains("(http/protobuf, gzip)"), "{state}");
    one_prompt(&app, "s-gzip");
    app.telemetry().shutdown(Duration::from_millis(500));
    let got = sink.take("/v1/metrics");
    assert!(!got.is_empty());
    for r in &got {
        assert_eq!(r.headers.get("content-encoding").map(String::as_str), Some("gzip"));
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&r.body[..]).read_to_end(&mut raw).unwrap();
        assert!(raw.len() > r.body.len());
        let req = ExportMetricsServiceRequest::decode(&raw[..]).unwrap();
        let names: Vec<&str> = req.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert!(names.contains(&"mia.cost.usage"), "{names:?}");
    }
    let logs = sink.take("/v1/logs");
    assert!(!logs.is_empty());
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&logs[0].body[..])
        .read_to_end(&mut raw)
        .unwrap();
    ExportLogsServiceRequest::decode(&raw[..]).unwrap();
}

#[test]
fn a_dead_collector_is_harmless_and_bounded() {
    let app = App::new();
    // A port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    app.configure_telemetry(config(format!("http://127.0.0.1:{port}"), dir.path()))
        .unwrap();
    let started = Instant::now();
    for i in 0..2_000 {
        one_prompt(&app, &format!("s-{}", i % 20));
    }
    let per = started.elapsed() / 2_000;
    eprintln!("recording one prompt's telemetry: {} µs", per.as_micros());
    for _ in 0..5 {
        app.telemetry().flush();
    }
    let st = app.telemetry().status().unwrap();
    assert!(st.enabled);
    assert!(st.exports_failed > 0, "{st:?}");
    assert_eq!(st.last_ok, Some(false));
    assert!(st.backlog_bytes <= 4 * 1024 * 1024, "{st:?}");
    let started = Instant::now();
    app.telemetry().shutdown(Duration::from_millis(500));
    eprintln!("shutdown with the collector down: {} ms", started.elapsed().as_millis());
    // The bound holds (with room for a loaded machine): the flush never
    // keeps Neovim from quitting.
    assert!(started.elapsed() < Duration::from_secs(3));
    let st = app.telemetry().status().unwrap();
    assert!(!st.enabled);
    assert!(st.last_result.unwrap().contains("connect"));
}

#[test]
fn the_backlog_is_sent_once_the_collector_answers() {
    let app = App::new();
    // Down first: take a free port, then start the sink on it later.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    app.configure_telemetry(config(format!("http://127.0.0.1:{port}"), dir.path()))
        .unwrap();
    one_prompt(&app, "early");
    app.telemetry().flush();
    let st = app.telemetry().status().unwrap();
    assert!(st.backlog > 0, "{st:?}");
    // The collector comes up on the same port.
    let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) else {
        eprintln!("port {port} was taken meanwhile; skipping the recovery half");
        app.telemetry().shutdown(Duration::from_millis(500));
        return;
    };
    let got: Arc<Mutex<Vec<Received>>> = Arc::default();
    let keep = got.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let keep = keep.clone();
            std::thread::spawn(move || serve(conn, keep));
        }
    });
    one_prompt(&app, "late");
    app.telemetry().shutdown(Duration::from_millis(500));
    let sessions: String = got
        .lock()
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert!(sessions.contains("early"), "the backlog was not sent again");
    assert!(sessions.contains("late"));
    let st = app.telemetry().status().unwrap();
    assert_eq!(st.backlog, 0, "{st:?}");
}

fn cpu_time() -> Duration {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// The numbers for the issue's closing note (prints them; asserts only the
/// bounds that hold on any machine): `cargo test --release --test telemetry
/// -- --ignored --nocapture`.
#[test]
#[ignore]
fn numbers_for_the_closing_note() {
    let app = App::new();
    let hub = app.telemetry();
    let dir = tempfile::tempdir().unwrap();
    // Off: what a hook costs when nothing is configured.
    let n = 1_000_000;
    let r = row("off");
    let (t0, c0) = (Instant::now(), cpu_time());
    for _ in 0..n {
        hub.usage(std::hint::black_box(&r));
    }
    eprintln!(
        "off: usage() {:.1} ns wall, {:.1} ns CPU per call",
        t0.elapsed().as_nanos() as f64 / n as f64,
        (cpu_time() - c0).as_nanos() as f64 / n as f64
    );

    // On, against a sink: CPU per recorded request, bytes per request.
    let sink = Sink::start();
    app.configure_telemetry(config(sink.endpoint(), dir.path())).unwrap();
    let requests = 10_000;
    let (t0, c0) = (Instant::now(), cpu_time());
    for i in 0..requests {
        app.telemetry().usage(&row(&format!("s-{}", i % 10)));
    }
    let record_wall = t0.elapsed();
    app.telemetry().flush();
    let cpu = cpu_time() - c0;
    eprintln!(
        "on: usage() {:.2} µs wall per request (the caller's thread); {:.2} µs CPU per request, all threads, export included",
        record_wall.as_nanos() as f64 / 1e3 / requests as f64,
        cpu.as_nanos() as f64 / 1e3 / requests as f64
    );
    let t0 = Instant::now();
    app.telemetry().shutdown(Duration::from_millis(500));
    eprintln!("shutdown flush (after a flush): {} ms", t0.elapsed().as_millis());
    let sent: usize = sink.take("/v1/logs").iter().map(|r| r.body.len()).sum();
    eprintln!("events: {:.0} bytes per request", sent as f64 / requests as f64);

    // One request per 60 s interval: what one interval's metrics export weighs.
    let sink = Sink::start();
    app.configure_telemetry(config(sink.endpoint(), dir.path())).unwrap();
    app.telemetry()
        .session_started("s-x", "anthropic/claude-sonnet-4-5", "code", "mia");
    app.telemetry().usage(&row("s-x"));
    let t0 = Instant::now();
    app.telemetry().shutdown(Duration::from_millis(500));
    eprintln!(
        "shutdown flush with one request pending: {} ms",
        t0.elapsed().as_millis()
    );
    let m: usize = sink.take("/v1/metrics").iter().map(|r| r.body.len()).sum();
    let l: usize = sink.take("/v1/logs").iter().map(|r| r.body.len()).sum();
    eprintln!("one request alone: metrics {m} bytes, events {l} bytes");

    // An hour with the collector down: a request every 5 s in 20 sessions
    // (720), with tools and edits, and a metrics export every minute (60).
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    app.configure_telemetry(config(format!("http://127.0.0.1:{port}"), dir.path()))
        .unwrap();
    let before = rss_kb();
    for minute in 0..60 {
        for i in 0..12 {
            one_prompt(&app, &format!("s-{}", (minute * 12 + i) % 20));
        }
        app.telemetry().flush();
    }
    let st = app.telemetry().status().unwrap();
    let after = rss_kb();
    eprintln!(
        "an hour down: RSS {before} -> {after} kB; backlog {} posts, {} bytes; dropped {}; failed exports {}",
        st.backlog, st.backlog_bytes, st.dropped, st.exports_failed
    );
    assert!(st.backlog_bytes <= 4 * 1024 * 1024);
    let t0 = Instant::now();
    app.telemetry().shutdown(Duration::from_millis(500));
    eprintln!("shutdown with the collector down: {} ms", t0.elapsed().as_millis());
}
