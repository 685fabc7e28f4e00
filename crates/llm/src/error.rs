//! One error model for every provider: a class the user (and the retry loop)
//! can act on, and a message that names the provider, the cause and the fix.

use serde::Serialize;
use thiserror::Error;

/// The advice ending a rate-limit message whose wait is short.
pub const RATE_LIMIT_ADVICE: &str = "Wait a moment or lower your request rate.";

/// What kind of failure this is; decides whether a retry can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    RateLimit,
    AuthFailure,
    ModelNotFound,
    ServerError,
    /// The provider is overloaded (Anthropic's `overloaded_error`, HTTP
    /// 529): retried with backoff, like a server error, but named apart.
    Overloaded,
    ContextOverflow,
    ContentFilter,
    InvalidRequest,
    NetworkError,
    Timeout,
    Cancelled,
    /// A cost limit stopped the request before it was sent.
    BudgetExceeded,
    /// A bug in mia itself (a panic caught at a task boundary).
    Internal,
    /// A stream whose content type names no framing mia reads.
    UnsupportedStreamFormat,
}

impl ErrorClass {
    /// The class name as Lua sees it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::RateLimit => "rate_limit",
            ErrorClass::AuthFailure => "auth_failure",
            ErrorClass::ModelNotFound => "model_not_found",
            ErrorClass::ServerError => "server_error",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::ContextOverflow => "context_overflow",
            ErrorClass::ContentFilter => "content_filter",
            ErrorClass::InvalidRequest => "invalid_request",
            ErrorClass::NetworkError => "network_error",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Cancelled => "cancelled",
            ErrorClass::BudgetExceeded => "budget_exceeded",
            ErrorClass::Internal => "internal",
            ErrorClass::UnsupportedStreamFormat => "unsupported_stream_format",
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
                | ErrorClass::Overloaded
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
            format!("{p}: rate limited ({said}). {RATE_LIMIT_ADVICE}"),
        ),
        413 => (
            ErrorClass::ContextOverflow,
            format!("{p}: the conversation is too long for `{}` ({said}). Start a new chat or shorten the context.", f.model),
        ),
        400 | 422 if is_context_overflow(&lower) => (
            ErrorClass::ContextOverflow,
            format!("{p}: the conversation is too long for `{}` ({said}). Start a new chat or shorten the context.", f.model),
        ),
        400 | 422 if lower.contains("content_filter") || lower.contains("content policy") || names_content_filter(f.body) => (
            ErrorClass::ContentFilter,
            format!("{p}: the request was blocked by the provider's content filter ({said}). Rephrase the prompt."),
        ),
        529 => (
            ErrorClass::Overloaded,
            format!("{p}: the provider is overloaded ({said}). It usually passes; try again shortly."),
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

/// A wire format's own error type names (Anthropic's `error.type`,
/// Gemini's `error.status`, OpenAI's `error.type`/`error.code`) and the
/// class each means. Each format module keeps its own table.
pub type ErrorTypes = &'static [(&'static str, ErrorClass)];

/// An error the provider names with its own type or status string, either
/// inside a 200 stream (Anthropic's `event: error`, an OpenAI `{"error":…}`
/// chunk, a Gemini `{"error":{"status":…}}` chunk) or in an error body.
/// `types` is the format's table; a type it does not name is a refused
/// request, unless the message says the context overflowed.
pub fn from_provider_error(
    provider: &str,
    types: ErrorTypes,
    error_type: &str,
    message: &str,
    retry_after_ms: Option<u64>,
) -> LlmError {
    let p = provider;
    let lower = message.to_lowercase();
    let named = types.iter().find(|(t, _)| *t == error_type).map(|(_, c)| *c);
    let class = match named {
        Some(c) => c,
        None if is_context_overflow(&lower) => ErrorClass::ContextOverflow,
        None => ErrorClass::InvalidRequest,
    };
    let text = match class {
        ErrorClass::RateLimit => format!("{p}: rate limited ({message}). {RATE_LIMIT_ADVICE}"),
        ErrorClass::ServerError => {
            format!("{p}: server error ({message}). The provider is having trouble; try again shortly.")
        }
        ErrorClass::Overloaded => {
            format!("{p}: the provider is overloaded ({message}). It usually passes; try again shortly.")
        }
        ErrorClass::Timeout => format!("{p}: the provider timed out ({message}). Try again."),
        ErrorClass::AuthFailure => {
            format!("{p}: authentication failed ({message}). Check the API key for {p}.")
        }
        ErrorClass::ModelNotFound => format!("{p}: not found ({message}). Check the model name."),
        ErrorClass::ContextOverflow => format!(
            "{p}: the conversation is too long for the model ({message}). Start a new chat or shorten the context."
        ),
        ErrorClass::ContentFilter => {
            format!("{p}: blocked by the provider's content filter ({message}). Rephrase the prompt.")
        }
        _ => format!("{p}: the request was refused ({message})."),
    };
    let mut err = LlmError::new(class, Some(p), text);
    err.retry_after_ms = retry_after_ms;
    err
}

/// Parses one stream payload as JSON; a payload that is not JSON is one
/// clear error naming the provider and quoting the start of the chunk.
pub fn parse_chunk(provider: &str, data: &str) -> Result<serde_json::Value, LlmError> {
    serde_json::from_str(data).map_err(|e| {
        let start: String = data.chars().take(80).collect();
        LlmError::new(
            ErrorClass::ServerError,
            Some(provider),
            format!("{provider}: the stream carried a malformed chunk ({e}): {start}"),
        )
    })
}

/// Whether an error body's own code says a content filter refused it:
/// OpenAI and Azure send `error.code = "content_filter"` (or
/// `content_policy_violation`) with a message that names no filter.
fn names_content_filter(body: &str) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(body) else {
        return false;
    };
    ["/error/code", "/error/type", "/error/innererror/code"]
        .iter()
        .filter_map(|p| v.pointer(p).and_then(|c| c.as_str()))
        .any(|c| {
            matches!(
                c,
                "content_filter" | "content_policy_violation" | "ResponsibleAIPolicyViolation"
            )
        })
}

fn is_context_overflow(lower: &str) -> bool {
    [
        "context_length_exceeded",
        "maximum context length",
        "prompt is too long",
        "context window",
        "too many tokens",
        "exceeds the maximum number of tokens",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}

/// The provider's own words from an error body (`error.message`, `message`,
/// or the body itself), shortened to one line.
pub fn provider_message(body: &str) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body).ok().and_then(|v| {
        let candidates = [v.pointer("/error/message"), v.pointer("/message"), v.pointer("/error")];
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

/// What a credential is replaced with.
const REDACTED: &str = "<redacted>";

/// Removes `secret` from `text`, so a server that echoes a credential back
/// cannot leak it into a message or the log: the key itself, any piece of it
/// of 8 characters or more, and a masked echo of it (OpenAI's
/// `sk-abc12****…wxyz`: a word with a run of `*`, `...` or `…` that starts
/// with the key's first characters or ends with its last ones).
pub fn redact(text: &str, secret: Option<&str>) -> String {
    let Some(secret) = secret.filter(|s| s.len() >= 4) else {
        return text.to_string();
    };
    let text = text.replace(secret, REDACTED);
    let is_word_char = |c: char| c.is_alphanumeric() || matches!(c, '-' | '_' | '*' | '.' | '…');
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find(is_word_char) {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(|c: char| !is_word_char(c)).unwrap_or(rest.len());
        // a sentence's full stop is not part of the word
        let word = rest[..end].trim_end_matches('.');
        if leaks(word, secret) {
            out.push_str(REDACTED);
        } else {
            out.push_str(word);
        }
        out.push_str(&rest[word.len()..end]);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Whether `word` gives away part of `secret` (see [`redact`]).
fn leaks(word: &str, secret: &str) -> bool {
    if word.chars().count() >= 8 && secret.contains(word) {
        return true;
    }
    let masks = ["**", "...", "…"];
    let Some(first) = masks.iter().filter_map(|m| word.find(m)).min() else {
        return false;
    };
    let head = &word[..first];
    let tail = word.trim_end_matches(|c| c != '*' && c != '.' && c != '…');
    let tail = &word[tail.len()..];
    (head.chars().count() >= 3 && secret.starts_with(head)) || (tail.chars().count() >= 3 && secret.ends_with(tail))
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
        let e = failure(401, r#"{"error":{"message":"Incorrect API key provided."}}"#);
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
        assert!(e.message.contains("HTTP 500: The server had an error"), "{}", e.message);
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
    fn provider_error_types_map_to_classes() {
        use crate::{anthropic, gemini};
        let c = |t: &str, m: &str| {
            let a = from_provider_error("p", anthropic::ERROR_TYPES, t, m, None).class;
            let g = from_provider_error("p", gemini::ERROR_TYPES, t, m, None).class;
            if a == ErrorClass::InvalidRequest {
                g
            } else {
                a
            }
        };
        assert_eq!(c("overloaded_error", "Overloaded"), ErrorClass::Overloaded);
        assert!(from_provider_error("p", anthropic::ERROR_TYPES, "overloaded_error", "Overloaded", None).retryable);
        assert_eq!(c("RESOURCE_EXHAUSTED", "quota"), ErrorClass::RateLimit);
        assert_eq!(
            c(
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum"
            ),
            ErrorClass::ContextOverflow
        );
        assert_eq!(
            c(
                "INVALID_ARGUMENT",
                "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
            ),
            ErrorClass::ContextOverflow
        );
        assert_eq!(
            c("INVALID_ARGUMENT", "Invalid JSON payload"),
            ErrorClass::InvalidRequest
        );
        assert_eq!(c("authentication_error", "invalid x-api-key"), ErrorClass::AuthFailure);
    }

    #[test]
    fn redact_removes_the_secret() {
        assert_eq!(
            redact("key sk-abcdef echoed", Some("sk-abcdef")),
            "key <redacted> echoed"
        );
    }

    #[test]
    fn redact_removes_a_masked_echo_of_the_key() {
        let key = Some("sk-proj-abcdef0123456789wxyz");
        assert_eq!(
            redact("Incorrect API key provided: sk-proj-************wxyz. See docs.", key),
            "Incorrect API key provided: <redacted>. See docs."
        );
        assert_eq!(redact("key sk-pro…wxyz here", key), "key <redacted> here");
        assert_eq!(redact("key sk-proj-abcdef01 cut", key), "key <redacted> cut");
        // words that share nothing with the key stay
        assert_eq!(redact("a ** b... wait… x-api-key", key), "a ** b... wait… x-api-key");
        assert_eq!(redact("no key at all", None), "no key at all");
    }
}
