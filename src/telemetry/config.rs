//! The `telemetry` section of `setup()` and the standard `OTEL_*`
//! variables, resolved into what the exporter needs. The setup values win
//! over the variables; `OTEL_METRICS_EXPORTER`/`OTEL_LOGS_EXPORTER` = `none`
//! turn a signal off (the SDK does not read them).

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
    pub headers: std::collections::BTreeMap<String, String>,
    pub interval_ms: Option<u64>,
}

/// Resolved settings of a running exporter.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Base URL, without a trailing slash (`/v1/metrics` is appended).
    pub endpoint: String,
    /// Secret values: never logged or shown.
    pub headers: Vec<(String, String)>,
    pub interval_ms: u64,
    pub metrics: bool,
    pub logs: bool,
    pub log_prompts: bool,
    pub project: Option<String>,
    pub user_id: String,
    /// `OTEL_RESOURCE_ATTRIBUTES` pairs (also read by the SDK itself).
    pub resource: Vec<(String, String)>,
}

impl Settings {
    /// One line for the log and `:checkhealth`: endpoint, signals, interval,
    /// how many headers (never their values).
    pub fn describe(&self) -> String {
        let mut signals = Vec::new();
        if self.metrics {
            signals.push("metrics");
        }
        if self.logs {
            signals.push("events");
        }
        format!(
            "on: {} to {} (http/protobuf), every {} ms, {} header(s){}",
            signals.join(" and "),
            self.endpoint,
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
    let endpoint = match otlp.endpoint.clone().filter(|e| !e.is_empty()) {
        Some(e) => e,
        None => match env_nonempty("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Some(e) => e,
            None => return Ok(None),
        },
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(format!(
            "mia: telemetry.otlp.endpoint must start with http:// or https:// (got {endpoint:?}), e.g. \"http://localhost:4318\""
        ));
    }
    let protocol = otlp
        .protocol
        .clone()
        .or_else(|| env_nonempty("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    match protocol.as_str() {
        "http/protobuf" => {}
        "grpc" => {
            return Err("mia: telemetry.otlp.protocol \"grpc\" is not built into this mia; use \"http/protobuf\" (collectors serve it on port 4318)".into())
        }
        other => {
            return Err(format!(
                "mia: telemetry.otlp.protocol must be \"http/protobuf\" (got {other:?})"
            ))
        }
    }
    let signal = |var: &str| -> Result<bool, String> {
        match env_nonempty(var).as_deref() {
            None | Some("otlp") => Ok(true),
            Some("none") => Ok(false),
            Some(other) => Err(format!("mia: {var} must be \"otlp\" or \"none\" (got {other:?})")),
        }
    };
    let metrics = signal("OTEL_METRICS_EXPORTER")?;
    let logs = signal("OTEL_LOGS_EXPORTER")?;
    if !metrics && !logs {
        return Ok(None);
    }
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
    let user_id = c.data_dir.as_deref().map(install_id).unwrap_or_else(random_id);
    Ok(Some(Settings {
        endpoint: endpoint.trim_end_matches('/').to_string(),
        headers,
        interval_ms,
        metrics,
        logs,
        log_prompts: c.log_prompts,
        project: c.project.filter(|p| !p.is_empty()),
        user_id,
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

/// A random 128-bit id in hex.
fn random_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// The anonymous per-install id in `data_dir/telemetry-id`, made on first use.
/// Random, so it says nothing about the user or the machine.
fn install_id(dir: &Path) -> String {
    let path = dir.join("telemetry-id");
    if let Ok(s) = std::fs::read_to_string(&path) {
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
        assert_eq!(s.endpoint, "http://env:4318");
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
        assert_eq!(s.endpoint, "https://setup:4318");
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
        assert!(!s.metrics && s.logs);
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_LOGS_EXPORTER", "none"),
        ]);
        assert!(resolve(TelemetryConfig::default(), &env).unwrap().is_none());
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        let e = resolve(TelemetryConfig::default(), &env).unwrap_err();
        assert!(e.contains("http/protobuf"), "{e}");
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]);
        assert!(resolve(TelemetryConfig::default(), &env)
            .unwrap_err()
            .contains("http://"));
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
