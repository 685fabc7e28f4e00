//! One error model for every provider: a class the user (and the retry loop)
//! can act on, and a message that names the provider, the cause and the fix.

use serde::Serialize;
use thiserror::Error;

/// What kind of failure this is; decides whether a retry can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    RateLimit,
    AuthFailure,
    ModelNotFound,
    ServerError,
    ContextOverflow,
    ContentFilter,
    InvalidRequest,
    NetworkError,
    Timeout,
    Cancelled,
    /// A bug in mia itself (a panic caught at a task boundary).
    Internal,
}

impl ErrorClass {
    /// The class name as Lua sees it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::RateLimit => "rate_limit",
            ErrorClass::AuthFailure => "auth_failure",
            ErrorClass::ModelNotFound => "model_not_found",
            ErrorClass::ServerError => "server_error",
            ErrorClass::ContextOverflow => "context_overflow",
            ErrorClass::ContentFilter => "content_filter",
            ErrorClass::InvalidRequest => "invalid_request",
            ErrorClass::NetworkError => "network_error",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Cancelled => "cancelled",
            ErrorClass::Internal => "internal",
        }
    }
}

/// A failed provider call, in the shape Lua's `on_error` receives.
#[derive(Debug, Clone, PartialEq, Error, Serialize)]
#[error("{message}")]
pub struct LlmError {
    pub class: ErrorClass,
    pub message: String,
    pub retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl LlmError {
    /// An error of `class` with a ready-made message.
    pub fn new(class: ErrorClass, provider: Option<&str>, message: impl Into<String>) -> Self {
        let retryable = matches!(
            class,
            ErrorClass::RateLimit
                | ErrorClass::ServerError
                | ErrorClass::NetworkError
                | ErrorClass::Timeout
        );
        LlmError {
            class,
            message: message.into(),
            retryable,
            provider: provider.map(str::to_string),
            status: None,
            retry_after_ms: None,
        }
    }

    /// The user stopped the answer.
    pub fn cancelled() -> Self {
        LlmError::new(ErrorClass::Cancelled, None, "cancelled by the user")
    }
}

/// What the caller knows when a provider answers with an error status.
pub struct HttpFailure<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub status: u16,
    pub body: &'a str,
    /// The environment variable holding this provider's key, if it uses one.
    pub api_key_env: Option<&'a str>,
    pub retry_after_ms: Option<u64>,
}

/// Turns an HTTP error status and body into one clear error.
pub fn classify_http(f: &HttpFailure<'_>) -> LlmError {
    let detail = provider_message(f.body);
    let lower = detail.to_lowercase();
    let said = if detail.is_empty() {
        format!("HTTP {}", f.status)
    } else {
        format!("HTTP {}: {}", f.status, detail)
    };
    let p = f.provider;
    let (class, message) = match f.status {
        401 | 403 => {
            let fix = match f.api_key_env {
                Some(var) => format!("Set {var} to a valid API key for {p}."),
                None => format!("Check providers.{p}.api_key in your mia setup()."),
            };
            (ErrorClass::AuthFailure, format!("{p}: authentication failed ({said}). {fix}"))
        }
        404 => (
            ErrorClass::ModelNotFound,
            format!(
                "{p}: model `{}` not found ({said}). Pick a model this provider serves (`model = \"{p}/<model>\"` in setup()).",
                f.model
            ),
        ),
        429 => (
            ErrorClass::RateLimit,
            format!("{p}: rate limited ({said}). Wait a moment or lower your request rate."),
        ),
        413 => (
            ErrorClass::ContextOverflow,
            format!("{p}: the conversation is too long for `{}` ({said}). Start a new chat or shorten the context.", f.model),
        ),
        400 | 422 if is_context_overflow(&lower) => (
            ErrorClass::ContextOverflow,
            format!("{p}: the conversation is too long for `{}` ({said}). Start a new chat or shorten the context.", f.model),
        ),
        400 | 422 if lower.contains("content_filter") || lower.contains("content policy") => (
            ErrorClass::ContentFilter,
            format!("{p}: the request was blocked by the provider's content filter ({said}). Rephrase the prompt."),
        ),
        s if s >= 500 => (
            ErrorClass::ServerError,
            format!("{p}: server error ({said}). The provider is having trouble; try again shortly."),
        ),
        _ => (
            ErrorClass::InvalidRequest,
            format!("{p}: the request was refused ({said})."),
        ),
    };
    let mut err = LlmError::new(class, Some(p), message);
    err.status = Some(f.status);
    err.retry_after_ms = f.retry_after_ms;
    err
}

fn is_context_overflow(lower: &str) -> bool {
    [
        "context_length_exceeded",
        "maximum context length",
        "prompt is too long",
        "context window",
        "too many tokens",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}

/// The provider's own words from an error body (`error.message`, `message`,
/// or the body itself), shortened to one line.
pub fn provider_message(body: &str) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let candidates = [
                v.pointer("/error/message"),
                v.pointer("/message"),
                v.pointer("/error"),
            ];
            candidates
                .into_iter()
                .flatten()
                .find_map(|m| m.as_str().map(str::to_string))
        });
    let text = from_json.unwrap_or_else(|| body.to_string());
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate_chars(&one_line, 300)
}

fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Removes every occurrence of `secret` from `text`, so a server that echoes
/// a credential back cannot leak it into a message or the log.
pub fn redact(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) if s.len() >= 4 => text.replace(s, "<redacted>"),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(status: u16, body: &str) -> LlmError {
        classify_http(&HttpFailure {
            provider: "openai",
            model: "gpt-x",
            status,
            body,
            api_key_env: Some("OPENAI_API_KEY"),
            retry_after_ms: None,
        })
    }

    #[test]
    fn auth_failure_names_the_env_var() {
        let e = failure(
            401,
            r#"{"error":{"message":"Incorrect API key provided."}}"#,
        );
        assert_eq!(e.class, ErrorClass::AuthFailure);
        assert!(!e.retryable);
        assert_eq!(
            e.message,
            "openai: authentication failed (HTTP 401: Incorrect API key provided.). Set OPENAI_API_KEY to a valid API key for openai."
        );
    }

    #[test]
    fn server_error_is_retryable_and_quotes_the_provider() {
        let e = failure(500, r#"{"error":{"message":"The server had an error"}}"#);
        assert_eq!(e.class, ErrorClass::ServerError);
        assert!(e.retryable);
        assert_eq!(e.status, Some(500));
        assert!(
            e.message.contains("HTTP 500: The server had an error"),
            "{}",
            e.message
        );
    }

    #[test]
    fn context_overflow_is_recognised_in_a_400() {
        let e = failure(
            400,
            r#"{"error":{"code":"context_length_exceeded","message":"This model's maximum context length is 128000 tokens."}}"#,
        );
        assert_eq!(e.class, ErrorClass::ContextOverflow);
    }

    #[test]
    fn non_json_body_is_shortened_to_one_line() {
        let body = format!("<html>\n{}\n</html>", "x".repeat(1000));
        let e = failure(502, &body);
        assert_eq!(e.class, ErrorClass::ServerError);
        assert!(e.message.len() < 500);
        assert!(!e.message.contains('\n'));
    }

    #[test]
    fn redact_removes_the_secret() {
        assert_eq!(
            redact("key sk-abcdef echoed", Some("sk-abcdef")),
            "key <redacted> echoed"
        );
    }
}
