//! HTTP: client construction, sending a request, and turning transport
//! failures into the error model. Nothing here knows a wire format.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::error::{classify_http, redact, ErrorClass, HttpFailure, LlmError};
use super::providers::{HttpConfig, ResolvedProvider, Timeouts};
use super::ratelimit::{self, RateLimits};

/// A request a wire format wants sent: where, with which headers, what body
/// (`None` sends a GET). Credentials are only ever in `headers`, never in `url`.
pub struct WireRequest {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<serde_json::Value>,
}

/// One pooled client with mia's connect timeout and the shared TLS
/// configuration ([`super::tls`]: the system's roots are loaded once, when
/// first needed, so building a client touches no disk). Installs the ring
/// crypto provider for rustls once per process (it builds faster than aws-lc-rs).
pub fn build_client(timeouts: &Timeouts, http: &HttpConfig) -> reqwest::Result<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ms = |v: u64| (v > 0).then(|| Duration::from_millis(v));
    super::tls::client_builder()
        .connect_timeout(Duration::from_millis(timeouts.connect_ms))
        .tcp_nodelay(true)
        .pool_idle_timeout(ms(http.pool_idle_timeout_ms))
        .pool_max_idle_per_host(http.pool_max_idle_per_host)
        .tcp_keepalive(ms(http.tcp_keepalive_ms))
        .user_agent(concat!("mia/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Sends `wire` and waits for the response headers (bounded by `request_ms`).
/// A non-success status becomes a classified error carrying the provider's own words.
pub async fn send(
    client: &reqwest::Client,
    provider: &ResolvedProvider,
    model: &str,
    wire: WireRequest,
    timeouts: &Timeouts,
    limits: &RateLimits,
) -> Result<reqwest::Response, LlmError> {
    let mut headers = HeaderMap::new();
    for (k, v) in provider
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(wire.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| bad_header(provider, k))?;
        let mut value = HeaderValue::from_str(v).map_err(|_| bad_header(provider, k))?;
        if is_secret_header(k) {
            value.set_sensitive(true);
        }
        headers.insert(name, value);
    }
    let request = match &wire.body {
        Some(body) => client.post(&wire.url).headers(headers).json(body),
        None => client.get(&wire.url).headers(headers),
    }
    .send();
    limits.sent(&provider.name);
    let response = match tokio::time::timeout(Duration::from_millis(timeouts.request_ms), request).await {
        Err(_) => {
            limits.unanswered(&provider.name);
            return Err(LlmError::new(
                ErrorClass::Timeout,
                Some(&provider.name),
                format!(
                    "{}: no response within {} ms (timeouts.request_ms). The server may be overloaded; try again.",
                    provider.name, timeouts.request_ms
                ),
            ));
        }
        Ok(Err(e)) => {
            limits.unanswered(&provider.name);
            return Err(transport_error(provider, &e, timeouts.connect_ms));
        }
        Ok(Ok(r)) => r,
    };
    let format = provider.format();
    limits.observe(&provider.name, response.headers(), format.rate_limit_headers());
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let mut retry_after = retry_after_ms(response.headers());
    let should_retry = should_retry(response.headers());
    let body = tokio::time::timeout(
        Duration::from_millis(timeouts.stream_idle_ms),
        error_body(response, MAX_ERROR_BODY),
    )
    .await
    .unwrap_or_default();
    let body = provider
        .secrets()
        .into_iter()
        .fold(body, |body, secret| redact(&body, Some(secret)));
    if retry_after.is_none() {
        retry_after = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|json| format.retry_delay_ms(&json));
    }
    let mut err = classify_http(&HttpFailure {
        provider: &provider.name,
        model,
        status: status.as_u16(),
        body: &body,
        api_key_env: provider.api_key_env.as_deref(),
        retry_after_ms: retry_after,
    });
    if let Some(retry) = should_retry {
        err.retryable = retry;
    }
    Err(err)
}

/// The most of an error body read: enough for any provider's JSON error, and
/// a hostile server streaming an endless "error" cannot fill memory.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Up to `limit` bytes of an error response's body, as text (invalid UTF-8
/// replaced); a body broken off midway gives what arrived.
async fn error_body(mut response: reqwest::Response, limit: usize) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = limit - bytes.len();
                bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The provider's own verdict on retrying (`x-should-retry: true|false`).
fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

pub(crate) fn is_secret_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "authorization" || n.contains("api-key") || n.contains("token")
}

fn bad_header(provider: &ResolvedProvider, name: &str) -> LlmError {
    LlmError::new(
        ErrorClass::InvalidRequest,
        Some(&provider.name),
        format!(
            "{}: header `{name}` has an invalid name or value: check providers.{}.headers and the API key",
            provider.name, provider.name
        ),
    )
}

/// `retry-after-ms`, then `retry-after` in seconds or as an HTTP date.
/// Unreadable values (negative, NaN, garbage, not UTF-8) are ignored; huge
/// ones saturate, and the retry loop refuses waits beyond `retry.max_wait_ms`.
fn retry_after_ms(headers: &HeaderMap) -> Option<u64> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let from_ms = get("retry-after-ms")
        .and_then(ratelimit::parse_number)
        .and_then(|ms| ratelimit::wait_from_secs(ms / 1000.0));
    let wait = from_ms.or_else(|| {
        let text = get("retry-after")?;
        ratelimit::parse_seconds(text).or_else(|| ratelimit::until_http_date(text, SystemTime::now()))
    })?;
    Some(ratelimit::duration_ms(wait))
}

/// A failure below HTTP (refused, reset, TLS, timeout) as one clear error.
/// The URL is left out of the cause: reqwest would print it, and URLs end up in logs.
pub fn transport_error(provider: &ResolvedProvider, e: &reqwest::Error, connect_ms: u64) -> LlmError {
    let cause = root_cause(e);
    let p = &provider.name;
    if e.is_connect() && e.is_timeout() {
        return LlmError::new(
            ErrorClass::Timeout,
            Some(p),
            format!(
                "{p}: no connection to {} within {connect_ms} ms (timeouts.connect_ms). Check that the server is \
                 reachable and providers.{p}.base_url is right.",
                provider.base_url
            ),
        );
    }
    if e.is_timeout() {
        return LlmError::new(
            ErrorClass::Timeout,
            Some(p),
            format!("{p}: the connection timed out ({cause})."),
        );
    }
    if let Some(tls) = tls_failure(e) {
        let fix = match tls {
            rustls::Error::InvalidCertificate(_) => format!(
                " If the server's certificate comes from a private certificate authority, add that authority \
                 to the system's trust store or point SSL_CERT_FILE at it; otherwise check providers.{p}.base_url."
            ),
            // The verifier's own sentence already names the cause and the fix (tls.rs).
            rustls::Error::General(_) => String::new(),
            _ => format!(
                " Check that the server speaks HTTPS there (providers.{p}.base_url; http:// for a plain server)."
            ),
        };
        return LlmError::new(
            ErrorClass::NetworkError,
            Some(p),
            format!("{p}: the TLS handshake with {} failed: {tls}.{fix}", provider.base_url),
        );
    }
    if e.is_connect() {
        return LlmError::new(
            ErrorClass::NetworkError,
            Some(p),
            format!(
                "{p}: cannot connect to {} ({cause}). Check that the server is running and providers.{p}.base_url is right.",
                provider.base_url
            ),
        );
    }
    LlmError::new(
        ErrorClass::NetworkError,
        Some(p),
        format!("{p}: the connection failed ({cause})."),
    )
}

/// A transport failure after the answer started: the partial text is kept by the caller.
pub fn interrupted_error(provider: &str, e: &reqwest::Error) -> LlmError {
    let cause = root_cause(e);
    LlmError::new(
        ErrorClass::NetworkError,
        Some(provider),
        format!("{provider}: the connection broke during the answer ({cause}); the partial answer is kept."),
    )
}

/// The TLS error under a transport failure, if the handshake is what failed
/// (rustls' error travels inside the connector's `io::Error`).
fn tls_failure<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        // An io::Error's `source()` skips the error it wraps: step into it.
        next = match err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_prefers_milliseconds() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after_ms(&h), Some(2000));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after_ms(&h), Some(150));
    }

    #[test]
    fn absurd_retry_after_values_are_bounded_or_ignored() {
        let longest = ratelimit::duration_ms(ratelimit::LONGEST_WAIT);
        let cases: &[(&str, &[u8], Option<u64>)] = &[
            ("retry-after", b"2", Some(2_000)),
            ("retry-after", b"0.25", Some(250)),
            ("retry-after", b"99999999999999999999", Some(longest)),
            ("retry-after", b"1e308", Some(longest)),
            ("retry-after", b"-5", None),
            ("retry-after", b"NaN", None),
            ("retry-after", b"inf", None),
            ("retry-after", b"", None),
            ("retry-after", b"soon", None),
            ("retry-after", b"\xff\xfe", None),
            ("retry-after", b"Thu, 01 Jan 1970 00:00:00 GMT", Some(0)),
            ("retry-after-ms", b"150", Some(150)),
            ("retry-after-ms", b"1e308", Some(longest)),
            ("retry-after-ms", b"-1", None),
            ("retry-after-ms", b"NaN", None),
        ];
        for (name, value, want) in cases {
            let mut h = HeaderMap::new();
            h.insert(*name, HeaderValue::from_bytes(value).unwrap());
            assert_eq!(
                retry_after_ms(&h),
                *want,
                "{name}: {:?}",
                String::from_utf8_lossy(value)
            );
        }
        // A garbage retry-after-ms falls back to a readable retry-after.
        let mut h = HeaderMap::new();
        h.insert("retry-after-ms", HeaderValue::from_static("soon"));
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after_ms(&h), Some(3_000));
    }
}
