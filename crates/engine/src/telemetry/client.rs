//! The exporter's HTTP client: mia's own reqwest client (no second HTTP
//! stack), each post run on mia's runtime and awaited from the SDK's
//! threads, which have no reactor. A post that fails for a reason that may
//! pass (no connection, timeout, 429, 5xx) is kept in a bounded backlog and
//! sent again after the next post that succeeds; when the backlog is full
//! the oldest body is dropped and counted. The first failure is logged
//! once, and so is the recovery. With `protocol = "grpc"` the same bodies
//! go as gRPC calls ([`super::grpc`]) and share the backlog.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use serde::Serialize;

/// Longest one post may take (connect included).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of failed posts kept to send again.
pub const MAX_BACKLOG_BYTES: usize = 4 * 1024 * 1024;
/// Longest error text kept for `:checkhealth`.
const MAX_ERROR: usize = 300;
/// The most of a collector's response body that is read.
const MAX_RESPONSE: usize = 64 * 1024;

/// Where a gRPC export goes; without the `grpc` feature there is none.
#[cfg(feature = "grpc")]
pub type GrpcTarget = Arc<super::grpc::Target>;
#[cfg(not(feature = "grpc"))]
#[derive(Clone)]
pub enum GrpcTarget {}

struct Pending {
    uri: String,
    headers: reqwest::header::HeaderMap,
    body: Bytes,
    /// Sent as a gRPC call rather than posted.
    grpc: Option<GrpcTarget>,
}

/// Counters and the last result, shared with `:checkhealth`.
pub struct Status {
    state: String,
    backlog: Mutex<VecDeque<Pending>>,
    backlog_bytes: AtomicU64,
    dropped: AtomicU64,
    exports_ok: AtomicU64,
    exports_failed: AtomicU64,
    bytes_sent: AtomicU64,
    last: Mutex<Option<(i64, Result<String, String>)>>,
    down: AtomicBool,
    /// Set at exit: no post outlives it.
    deadline: Mutex<Option<Instant>>,
}

/// What `:checkhealth mia` shows.
#[derive(Debug, Clone, Serialize)]
pub struct ExportStatus {
    pub enabled: bool,
    pub state: String,
    pub exports_ok: u64,
    pub exports_failed: u64,
    pub bytes_sent: u64,
    pub backlog: u64,
    pub backlog_bytes: u64,
    pub dropped: u64,
    pub last_at_ms: Option<i64>,
    pub last_ok: Option<bool>,
    pub last_result: Option<String>,
}

impl Status {
    pub fn new(state: String) -> Self {
        Status {
            state,
            backlog: Mutex::new(VecDeque::new()),
            backlog_bytes: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            exports_ok: AtomicU64::new(0),
            exports_failed: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            last: Mutex::new(None),
            down: AtomicBool::new(false),
            deadline: Mutex::new(None),
        }
    }

    pub fn set_deadline(&self, at: Instant) {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
    }

    fn timeout(&self) -> Option<Duration> {
        match *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                (!left.is_zero()).then_some(left.min(REQUEST_TIMEOUT))
            }
            None => Some(REQUEST_TIMEOUT),
        }
    }

    pub fn snapshot(&self, enabled: bool) -> ExportStatus {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        ExportStatus {
            enabled,
            state: if enabled { self.state.clone() } else { "off".into() },
            exports_ok: self.exports_ok.load(Ordering::Relaxed),
            exports_failed: self.exports_failed.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            backlog: self.backlog.lock().map(|b| b.len() as u64).unwrap_or(0),
            backlog_bytes: self.backlog_bytes.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            last_at_ms: last.as_ref().map(|(t, _)| *t),
            last_ok: last.as_ref().map(|(_, r)| r.is_ok()),
            last_result: last.map(|(_, r)| r.unwrap_or_else(|e| e)),
        }
    }

    fn ok(&self, what: String, bytes: usize) {
        self.exports_ok.fetch_add(1, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((crate::session::now_ms(), Ok(what)));
        if self.down.swap(false, Ordering::Relaxed) {
            tracing::info!("telemetry: the collector answers again");
        }
    }

    fn failed(&self, why: String) {
        self.exports_failed.fetch_add(1, Ordering::Relaxed);
        if !self.down.swap(true, Ordering::Relaxed) {
            tracing::warn!("telemetry: export failed, keeping a bounded backlog until the collector answers: {why}");
        }
        let mut why = why;
        if why.len() > MAX_ERROR {
            let mut cut = MAX_ERROR;
            while !why.is_char_boundary(cut) {
                cut -= 1;
            }
            why.truncate(cut);
        }
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((crate::session::now_ms(), Err(why)));
    }

    /// Keeps a failed body, dropping the oldest while over the bound.
    fn keep(&self, p: Pending) {
        let mut q = self.backlog.lock().unwrap_or_else(|p| p.into_inner());
        let mut bytes = self.backlog_bytes.load(Ordering::Relaxed) as usize + p.body.len();
        q.push_back(p);
        while bytes > MAX_BACKLOG_BYTES {
            let Some(old) = q.pop_front() else { break };
            bytes -= old.body.len();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.backlog_bytes.store(bytes as u64, Ordering::Relaxed);
    }

    fn take_one(&self) -> Option<Pending> {
        let mut q = self.backlog.lock().unwrap_or_else(|p| p.into_inner());
        let p = q.pop_front()?;
        self.backlog_bytes.fetch_sub(p.body.len() as u64, Ordering::Relaxed);
        Some(p)
    }

    fn put_back(&self, p: Pending) {
        let mut q = self.backlog.lock().unwrap_or_else(|p| p.into_inner());
        self.backlog_bytes.fetch_add(p.body.len() as u64, Ordering::Relaxed);
        q.push_front(p);
    }
}

pub struct Client {
    /// Built on the first post, on the exporter's thread (the TLS roots
    /// take milliseconds), not when export is configured on the main thread.
    http: OnceLock<Result<reqwest::Client, String>>,
    rt: tokio::runtime::Handle,
    status: Arc<Status>,
    grpc: Option<GrpcTarget>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the headers: they hold the collector's key.
        f.write_str("mia telemetry client")
    }
}

enum Outcome {
    /// The answer, and what it was for the status line ("HTTP 200", "gRPC OK").
    Ok(reqwest::StatusCode, Bytes, String),
    /// May pass: keep the body and try again later.
    Retry(String),
    /// Will not pass (a 4xx): the body is dropped.
    Refused(reqwest::StatusCode, String),
}

impl Client {
    /// Posts over OTLP/HTTP, or sends gRPC calls to `grpc`. Cheap: nothing
    /// is built until the first export.
    pub fn new(rt: tokio::runtime::Handle, status: Arc<Status>, grpc: Option<GrpcTarget>) -> Self {
        Client {
            http: OnceLock::new(),
            rt,
            status,
            grpc,
        }
    }

    fn http(&self) -> Result<reqwest::Client, String> {
        self.http
            .get_or_init(|| {
                mia_llm::http::build_client(
                    &mia_llm::providers::Timeouts {
                        connect_ms: 5_000,
                        ..Default::default()
                    },
                    &mia_llm::providers::HttpConfig::default(),
                )
                .map_err(|e| format!("cannot build the HTTP client: {e}"))
            })
            .clone()
    }

    /// Sends on mia's runtime and waits for the outcome (works from any thread).
    async fn post(&self, p: &Pending) -> Outcome {
        let Some(timeout) = self.status.timeout() else {
            return Outcome::Retry("no time left before exit".into());
        };
        if let Some(target) = &p.grpc {
            return self.call(target, p, timeout).await;
        }
        let http = match self.http() {
            Ok(h) => h,
            Err(e) => return Outcome::Refused(reqwest::StatusCode::BAD_REQUEST, e),
        };
        let req = http
            .post(&p.uri)
            .headers(p.headers.clone())
            .body(p.body.clone())
            .timeout(timeout);
        let task = self.rt.spawn(async move {
            let resp = req.send().await.map_err(|e| describe(&e))?;
            let code = resp.status();
            // A collector's answer is a few bytes; read at most MAX_RESPONSE
            // of it (the rest is dropped with the connection).
            let mut resp = resp;
            let mut body = Vec::new();
            while let Ok(Some(chunk)) = resp.chunk().await {
                let room = MAX_RESPONSE - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if body.len() == MAX_RESPONSE {
                    break;
                }
            }
            Ok::<_, String>((code, Bytes::from(body)))
        });
        match task.await {
            Ok(Ok((code, body))) if code.is_success() => Outcome::Ok(code, body, format!("HTTP {}", code.as_u16())),
            Ok(Ok((code, body))) if code.as_u16() == 429 || code.is_server_error() => {
                Outcome::Retry(format!("HTTP {code}: {}", snippet(&body)))
            }
            Ok(Ok((code, body))) => Outcome::Refused(code, format!("HTTP {code}: {}", snippet(&body))),
            Ok(Err(e)) => Outcome::Retry(e),
            Err(_) => Outcome::Retry("mia's runtime stopped".into()),
        }
    }

    #[cfg(feature = "grpc")]
    async fn call(&self, target: &GrpcTarget, p: &Pending, timeout: Duration) -> Outcome {
        let target = target.clone();
        let body = p.body.clone();
        let headers = p.headers.clone();
        let gzipped = headers
            .get(reqwest::header::CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let task = self
            .rt
            .spawn(async move { target.export(body, gzipped, &headers, timeout).await });
        match task.await {
            Ok(Ok(())) => Outcome::Ok(reqwest::StatusCode::OK, Bytes::new(), "gRPC OK".into()),
            Ok(Err(f)) if f.retry => Outcome::Retry(f.why),
            Ok(Err(f)) => Outcome::Refused(reqwest::StatusCode::BAD_REQUEST, f.why),
            Err(_) => Outcome::Retry("mia's runtime stopped".into()),
        }
    }

    #[cfg(not(feature = "grpc"))]
    async fn call(&self, target: &GrpcTarget, _: &Pending, _: Duration) -> Outcome {
        match *target {}
    }
}

fn describe(e: &reqwest::Error) -> String {
    use std::error::Error;
    let mut s = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        "request failed".to_string()
    };
    // The innermost cause names what happened (refused, DNS...); the URL
    // has no credentials (headers hold them), so it may be shown.
    let mut cause: Option<&dyn Error> = e.source();
    let mut last = None;
    while let Some(c) = cause {
        last = Some(c.to_string());
        cause = c.source();
    }
    if let Some(l) = last {
        s.push_str(": ");
        s.push_str(&l);
    }
    s
}

fn snippet(body: &[u8]) -> String {
    let t = String::from_utf8_lossy(&body[..body.len().min(200)]);
    t.chars().filter(|c| !c.is_control()).collect()
}

fn path_of(uri: &str) -> &str {
    uri.rsplit_once("/v1/").map_or("", |(_, p)| p)
}

#[async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let mut headers = parts.headers;
        for v in headers.values_mut() {
            v.set_sensitive(true);
        }
        let p = Pending {
            uri: parts.uri.to_string(),
            headers,
            body,
            grpc: self.grpc.clone(),
        };
        let len = p.body.len();
        match self.post(&p).await {
            Outcome::Ok(code, body, what) => {
                self.status
                    .ok(format!("{} sent, {len} bytes, {what}", path_of(&p.uri)), len);
                // The collector answers: send what it missed, oldest first.
                while let Some(old) = self.status.take_one() {
                    match self.post(&old).await {
                        Outcome::Ok(..) => self.status.ok(
                            format!("{} sent again from the backlog", path_of(&old.uri)),
                            old.body.len(),
                        ),
                        Outcome::Refused(_, why) => self.status.failed(why),
                        Outcome::Retry(why) => {
                            self.status.failed(why);
                            self.status.put_back(old);
                            break;
                        }
                    }
                }
                let mut resp = Response::new(body);
                *resp.status_mut() = code;
                Ok(resp)
            }
            Outcome::Retry(why) => {
                self.status.failed(format!("{}: {why}", path_of(&p.uri)));
                self.status.keep(p);
                Err(why.into())
            }
            Outcome::Refused(code, why) => {
                self.status.failed(format!("{}: {why}", path_of(&p.uri)));
                let mut resp = Response::new(Bytes::new());
                *resp.status_mut() = code;
                Ok(resp)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_drops_the_oldest_and_counts() {
        let s = Status::new("on".into());
        let body = Bytes::from(vec![0u8; MAX_BACKLOG_BYTES / 3]);
        for i in 0..5 {
            s.keep(Pending {
                uri: format!("http://x/v1/logs?{i}"),
                headers: Default::default(),
                body: body.clone(),
                grpc: None,
            });
        }
        let snap = s.snapshot(true);
        assert_eq!(snap.backlog, 3);
        assert_eq!(snap.dropped, 2);
        assert!(snap.backlog_bytes as usize <= MAX_BACKLOG_BYTES);
        assert_eq!(s.take_one().unwrap().uri, "http://x/v1/logs?2");
    }
}
