//! The `telemetry` section of `setup()` and the standard `OTEL_*`
//! variables, resolved into what the exporter needs. The setup values win
//! over the variables, and a signal's own variable
//! (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, `..._LOGS_COMPRESSION`) over the
//! general one; `OTEL_METRICS_EXPORTER`/`OTEL_LOGS_EXPORTER` = `none` turn a
//! signal off (the SDK does not read them).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// As Lua passes it (lua/mia/config.lua validated it already).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TelemetryConfig {
    pub otlp: Option<OtlpConfig>,
    pub log_prompts: bool,
    pub project: Option<String>,
    /// Where the anonymous per-install id is kept (`data_dir`).
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct OtlpConfig {
    pub endpoint: Option<String>,
    pub protocol: Option<String>,
    pub compression: Option<String>,
    pub headers: std::collections::BTreeMap<String, String>,
    pub interval_ms: Option<u64>,
}

/// How the exports travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (collectors serve it on port 4318).
    HttpProtobuf,
    /// OTLP/gRPC (port 4317), built with the `grpc` feature.
    Grpc,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::Grpc => "grpc",
        }
    }
}

/// Resolved settings of a running exporter.
#[derive(Debug, Clone)]
pub struct Settings {
    pub protocol: Protocol,
    /// Where metrics go, `None` when they are off: the whole URL for
    /// http/protobuf (`.../v1/metrics`), the collector's address for gRPC.
    pub metrics: Option<String>,
    /// Where events go, `None` when they are off (as `metrics`).
    pub logs: Option<String>,
    /// Bodies gzip-compressed.
    pub gzip: bool,
    /// Secret values: never logged or shown.
    pub headers: Vec<(String, String)>,
    pub interval_ms: u64,
    pub log_prompts: bool,
    pub project: Option<String>,
    /// Where the anonymous per-install id is kept ([`user_id`], read
    /// off the main thread).
    pub data_dir: Option<PathBuf>,
    /// `OTEL_RESOURCE_ATTRIBUTES` pairs (also read by the SDK itself).
    pub resource: Vec<(String, String)>,
}

impl Settings {
    /// One line for the log and `:checkhealth`: endpoint, signals, interval,
    /// how many headers (never their values).
    pub fn describe(&self) -> String {
        let whither = match (&self.metrics, &self.logs) {
            (Some(m), Some(l)) if m.trim_end_matches("/v1/metrics") == l.trim_end_matches("/v1/logs") => {
                format!("metrics and events to {}", m.trim_end_matches("/v1/metrics"))
            }
            (Some(m), Some(l)) => format!("metrics to {m} and events to {l}"),
            (Some(m), None) => format!("metrics to {m}"),
            (None, Some(l)) => format!("events to {l}"),
            (None, None) => "nothing".into(),
        };
        format!(
            "on: {whither} ({}{}), every {} ms, {} header(s){}",
            self.protocol.name(),
            if self.gzip { ", gzip" } else { "" },
            self.interval_ms,
            self.headers.len(),
            if self.log_prompts { ", prompts included" } else { "" }
        )
    }
}

const MIN_INTERVAL_MS: u64 = 1_000;
const DEFAULT_INTERVAL_MS: u64 = 60_000;

/// `None` when export is off: no endpoint in the setup or the environment,
/// or both signals set to `none`.
pub fn resolve(c: TelemetryConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Settings>, String> {
    let otlp = c.otlp.clone().unwrap_or_default();
    let env_nonempty = |k: &str| env(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let protocol = match otlp.protocol.clone() {
        Some(p) => Some((p, "telemetry.otlp.protocol")),
        None => env_nonempty("OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| (p, "OTEL_EXPORTER_OTLP_PROTOCOL")),
    };
    let protocol = match protocol {
        None => Protocol::HttpProtobuf,
        Some((p, _)) if p == "http/protobuf" => Protocol::HttpProtobuf,
        Some((p, _)) if p == "grpc" && cfg!(feature = "grpc") => Protocol::Grpc,
        Some((p, from)) if p == "grpc" => {
            return Err(format!(
                "mia: {from} \"grpc\" is not built into this mia (cargo feature `grpc`); use \"http/protobuf\" (collectors serve it on port 4318)"
            ))
        }
        Some((p, from)) => {
            return Err(format!(
                "mia: {from} must be \"http/protobuf\" or \"grpc\" (got {p:?})"
            ))
        }
    };
    let signal_on = |var: &str| -> Result<bool, String> {
        match env_nonempty(var).as_deref() {
            None | Some("otlp") => Ok(true),
            Some("none") => Ok(false),
            Some(other) => Err(format!("mia: {var} must be \"otlp\" or \"none\" (got {other:?})")),
        }
    };
    // The setup's endpoint serves both signals; else a signal's own
    // variable, used as it is; else the general one, with the signal's path
    // added for OTLP/HTTP (gRPC names the service, not a path).
    let setup_endpoint = otlp.endpoint.clone().filter(|e| !e.is_empty());
    let endpoint = |signal: &str, path: &str| -> Result<Option<String>, String> {
        let (raw, from, whole) = if let Some(e) = &setup_endpoint {
            (e.clone(), "telemetry.otlp.endpoint".to_string(), false)
        } else if let Some(e) = env_nonempty(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")) {
            (e, format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"), true)
        } else if let Some(e) = env_nonempty("OTEL_EXPORTER_OTLP_ENDPOINT") {
            (e, "OTEL_EXPORTER_OTLP_ENDPOINT".to_string(), false)
        } else {
            return Ok(None);
        };
        if !(raw.starts_with("http://") || raw.starts_with("https://")) || reqwest::Url::parse(&raw).is_err() {
            return Err(format!(
                "mia: {from} must be an http:// or https:// address (got {raw:?}), e.g. \"http://localhost:{}\"",
                if protocol == Protocol::Grpc { 4317 } else { 4318 }
            ));
        }
        Ok(Some(match protocol {
            Protocol::HttpProtobuf if whole => raw,
            Protocol::HttpProtobuf => format!("{}{path}", raw.trim_end_matches('/')),
            Protocol::Grpc => raw.trim_end_matches('/').to_string(),
        }))
    };
    let metrics = if signal_on("OTEL_METRICS_EXPORTER")? {
        endpoint("METRICS", "/v1/metrics")?
    } else {
        None
    };
    let logs = if signal_on("OTEL_LOGS_EXPORTER")? {
        endpoint("LOGS", "/v1/logs")?
    } else {
        None
    };
    if metrics.is_none() && logs.is_none() {
        return Ok(None);
    }
    // Compression: the setup's, else a signal's own variable, else the
    // general one (one setting for both signals: gzip if either asks).
    let compression = |var: &str, from: &str| -> Result<bool, String> {
        match var.to_ascii_lowercase().as_str() {
            "gzip" => Ok(true),
            "none" => Ok(false),
            _ => Err(format!("mia: {from} must be \"gzip\" or \"none\" (got {var:?})")),
        }
    };
    let gzip = match &otlp.compression {
        Some(c) => compression(c, "telemetry.otlp.compression")?,
        None => {
            let mut any = false;
            for signal in ["METRICS", "LOGS"] {
                for var in [
                    format!("OTEL_EXPORTER_OTLP_{signal}_COMPRESSION"),
                    "OTEL_EXPORTER_OTLP_COMPRESSION".into(),
                ] {
                    if let Some(v) = env_nonempty(&var) {
                        any |= compression(&v, &var)?;
                        break;
                    }
                }
            }
            any
        }
    };
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Some(raw) = env("OTEL_EXPORTER_OTLP_HEADERS") {
        headers.extend(parse_pairs(&raw));
    }
    for (k, v) in &otlp.headers {
        headers.retain(|(hk, _)| !hk.eq_ignore_ascii_case(k));
        headers.push((k.clone(), v.clone()));
    }
    for (k, v) in &headers {
        if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err()
            || reqwest::header::HeaderValue::from_str(v).is_err()
        {
            // The value is a secret: only the name is shown.
            return Err(format!("mia: telemetry: the header {k:?} has an invalid name or value"));
        }
    }
    let interval_ms = otlp.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS).max(MIN_INTERVAL_MS);
    let resource = env("OTEL_RESOURCE_ATTRIBUTES")
        .map(|r| parse_pairs(&r))
        .unwrap_or_default();
    Ok(Some(Settings {
        protocol,
        metrics,
        logs,
        gzip,
        headers,
        interval_ms,
        log_prompts: c.log_prompts,
        project: c.project.filter(|p| !p.is_empty()),
        data_dir: c.data_dir,
        resource,
    }))
}

/// `k=v,k2=v2` as the OTEL variables write it (values percent-decoded).
pub fn parse_pairs(raw: &str) -> Vec<(String, String)> {
    raw.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_string(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The anonymous per-install id: kept in `data_dir/telemetry-id` (made on
/// first use), or a random one for this run without a `data_dir`. Reads
/// and may write a file: never call it on the main thread.
pub fn user_id(data_dir: Option<&Path>) -> String {
    data_dir.map(install_id).unwrap_or_else(random_id)
}

/// A random 128-bit id in hex.
fn random_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// The anonymous per-install id in `data_dir/telemetry-id`, made on first use.
/// Random, so it says nothing about the user or the machine.
fn install_id(dir: &Path) -> String {
    let path = dir.join("telemetry-id");
    if let Ok(bytes) = crate::tools::paths::read_regular(&path, 64) {
        let s = String::from_utf8_lossy(&bytes);
        let s = s.trim();
        if s.len() == 32 && s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return s.to_string();
        }
    }
    let id = random_id();
    let _ = std::fs::create_dir_all(dir);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if let Err(e) = std::fs::write(&tmp, &id).and_then(|()| std::fs::rename(&tmp, &path)) {
        tracing::warn!("telemetry: cannot keep the install id in {}: {e}", path.display());
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn off_without_an_endpoint() {
        assert!(resolve(TelemetryConfig::default(), &env_of(&[])).unwrap().is_none());
    }

    #[test]
    fn env_turns_it_on_and_setup_wins() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s%3Dcret,Other=1"),
            ("OTEL_RESOURCE_ATTRIBUTES", "team.id=core,cost_center=42"),
        ]);
        let s = resolve(TelemetryConfig::default(), &env).unwrap().unwrap();
        assert_eq!(s.metrics.as_deref(), Some("http://env:4318/v1/metrics"));
        assert_eq!(s.logs.as_deref(), Some("http://env:4318/v1/logs"));
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert!(!s.gzip);
        assert!(s.headers.contains(&("x-api-key".into(), "s=cret".into())));
        assert_eq!(
            s.resource,
            vec![("team.id".into(), "core".into()), ("cost_center".into(), "42".into())]
        );
        assert!(!s.describe().contains("cret"), "{}", s.describe());
        let mut headers = std::collections::BTreeMap::new();
        headers.insert("X-Api-Key".to_string(), "mine".to_string());
        let c = TelemetryConfig {
            otlp: Some(OtlpConfig {
                endpoint: Some("https://setup:4318".into()),
                headers,
                ..OtlpConfig::default()
            }),
            ..TelemetryConfig::default()
        };
        let s = resolve(c, &env).unwrap().unwrap();
        assert_eq!(s.metrics.as_deref(), Some("https://setup:4318/v1/metrics"));
        assert_eq!(
            s.headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("x-api-key"))
                .count(),
            1
        );
    }

    #[test]
    fn signals_and_protocol() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ]);
        let s = resolve(TelemetryConfig::default(), &env).unwrap().unwrap();
        assert!(s.metrics.is_none() && s.logs.is_some());
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_LOGS_EXPORTER", "none"),
        ]);
        assert!(resolve(TelemetryConfig::default(), &env).unwrap().is_none());
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317/"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        if cfg!(feature = "grpc") {
            let s = resolve(TelemetryConfig::default(), &env).unwrap().unwrap();
            assert_eq!(s.protocol, Protocol::Grpc);
            // gRPC names the service, not a path.
            assert_eq!(s.metrics.as_deref(), Some("http://env:4317"));
            assert!(s.describe().contains("(grpc)"), "{}", s.describe());
        } else {
            let e = resolve(TelemetryConfig::default(), &env).unwrap_err();
            assert!(
                e.contains("http/protobuf") && e.contains("OTEL_EXPORTER_OTLP_PROTOCOL"),
                "{e}"
            );
        }
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ]);
        let e = resolve(TelemetryConfig::default(), &env).unwrap_err();
        assert!(
            e.contains("\"http/protobuf\" or \"grpc\"") && e.contains("http/json"),
            "{e}"
        );
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]);
        assert!(resolve(TelemetryConfig::default(), &env)
            .unwrap_err()
            .contains("http://"));
    }

    #[test]
    fn a_signals_own_endpoint_is_used_as_it_is_and_wins() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://all:4318"),
            ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "https://logs.example/ingest/otlp"),
        ]);
        let s = resolve(TelemetryConfig::default(), &env).unwrap().unwrap();
        assert_eq!(s.metrics.as_deref(), Some("http://all:4318/v1/metrics"));
        assert_eq!(s.logs.as_deref(), Some("https://logs.example/ingest/otlp"));
        assert!(
            s.describe()
                .contains("metrics to http://all:4318/v1/metrics and events to https://logs.example/ingest/otlp"),
            "{}",
            s.describe()
        );
        // One signal's endpoint alone turns on that signal only.
        let env = env_of(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:4318/v1/metrics")]);
        let s = resolve(TelemetryConfig::default(), &env).unwrap().unwrap();
        assert_eq!(s.metrics.as_deref(), Some("http://m:4318/v1/metrics"));
        assert!(s.logs.is_none());
        // The setup's endpoint wins over every variable.
        let c = TelemetryConfig {
            otlp: Some(OtlpConfig {
                endpoint: Some("http://setup:4318".into()),
                ..OtlpConfig::default()
            }),
            ..TelemetryConfig::default()
        };
        let s = resolve(c, &env).unwrap().unwrap();
        assert_eq!(s.metrics.as_deref(), Some("http://setup:4318/v1/metrics"));
        assert_eq!(s.logs.as_deref(), Some("http://setup:4318/v1/logs"));
        let env = env_of(&[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "logs:4318")]);
        let e = resolve(TelemetryConfig::default(), &env).unwrap_err();
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") && e.contains("http://"),
            "{e}"
        );
    }

    #[test]
    fn compression_from_the_setup_or_the_variables() {
        let on = |pairs: &'static [(&'static str, &'static str)], setup: Option<&str>| {
            let c = TelemetryConfig {
                otlp: Some(OtlpConfig {
                    compression: setup.map(String::from),
                    ..OtlpConfig::default()
                }),
                ..TelemetryConfig::default()
            };
            resolve(c, &env_of(pairs)).map(|s| s.unwrap().gzip)
        };
        const E: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert_eq!(on(&[E], None), Ok(false));
        assert_eq!(on(&[E, ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")], None), Ok(true));
        assert_eq!(on(&[E, ("OTEL_EXPORTER_OTLP_COMPRESSION", "GZIP")], None), Ok(true));
        assert_eq!(
            on(&[E, ("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "gzip")], None),
            Ok(true)
        );
        assert_eq!(
            on(&[E, ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")], Some("none")),
            Ok(false)
        );
        assert_eq!(on(&[E], Some("gzip")), Ok(true));
        let e = on(&[E, ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd")], None).unwrap_err();
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_COMPRESSION") && e.contains("gzip"),
            "{e}"
        );
        assert!(resolve(
            TelemetryConfig::default(),
            &env_of(&[E, ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")])
        )
        .unwrap()
        .unwrap()
        .describe()
        .contains("(http/protobuf, gzip)"));
    }

    #[test]
    fn install_id_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = install_id(dir.path());
        let b = install_id(dir.path());
        assert_eq!(a, b);
        assert_eq!(a.len(), 32);
    }
}
