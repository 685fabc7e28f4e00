//! The seam between mia and a provider's wire format. Everything that
//! differs from one format to the next lives behind [`WireFormat`]: where a
//! request goes and with which headers, its body, how the answer is framed
//! and decoded, how models are listed and tokens counted, the waits and
//! windows its errors and headers announce. Everything else (retries,
//! pacing, timeouts, limits, costs) is shared and never names a format.
//!
//! Adding a provider is one file implementing [`WireFormat`] and one line in
//! [`FORMATS`]; the Lua side learns the new `kind` from `mia_core.shared()`.

use serde_json::Value;

use super::delta::DecodeEvent;
use super::error::LlmError;
use super::message::ChatRequest;
use super::providers::ResolvedProvider;
use super::ratelimit::WindowHeaders;
use super::stream::SseEvent;

/// Every wire format mia speaks, by `providers.NAME.kind`. One line each.
pub static FORMATS: &[&dyn WireFormat] = &[
    &super::anthropic::Anthropic,
    &super::openai::OPENAI,
    &super::gemini::Gemini,
    &super::openai::COMPATIBLE,
    &super::azure::Azure,
    &super::ollama::Ollama,
];

/// The format `providers.NAME.kind = kind` names.
pub fn lookup(kind: &str) -> Option<&'static dyn WireFormat> {
    FORMATS.iter().copied().find(|f| f.kind() == kind)
}

/// Turns one framed payload (an SSE event, an NDJSON line, a JSON-array
/// element) into decoded events; one decoder per response.
pub trait StreamDecoder: Send {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<DecodeEvent>) -> Result<(), LlmError>;
}

/// A provider mia knows without configuration, served in this format.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    pub name: &'static str,
    pub base_url: &'static str,
    /// The environment variable holding its key (`None`: it needs none).
    pub api_key_env: Option<&'static str>,
}

/// Where and how a format counts a request's input tokens.
pub struct CountRequest {
    pub url: String,
    pub body: Value,
    /// The number's field in the answer.
    pub field: &'static str,
}

/// One wire format. See the module docs.
pub trait WireFormat: Send + Sync {
    /// The `kind` naming this format in `setup({ providers = … })`.
    fn kind(&self) -> &'static str;

    /// The provider of this format that works without configuration.
    fn builtin(&self) -> Option<Builtin> {
        None
    }

    /// Whether a provider of this kind with no key variable configured may
    /// still be called (local servers); one that names a variable always
    /// needs it set.
    fn key_optional(&self) -> bool {
        false
    }

    /// Whether a provider of this kind runs on the user's machine unless its
    /// `local` option says otherwise: its calls then cost a known $0.00.
    fn local(&self) -> bool {
        false
    }

    /// Whether `base_url` must be configured (there is no usual address).
    fn needs_base_url(&self) -> bool {
        self.builtin().is_none()
    }

    /// The credential and protocol headers of every request (the key never
    /// goes into a URL). `p.api_key` may be absent (model listing of a
    /// local server).
    fn headers(&self, p: &ResolvedProvider) -> Vec<(String, String)>;

    /// Where a chat request for `model` goes.
    fn chat_url(&self, p: &ResolvedProvider, model: &str, stream: bool) -> String;

    /// Whether this kind also serves OpenAI's Responses API
    /// (`providers.NAME.api = "responses"`, [`super::responses`]).
    fn speaks_responses(&self) -> bool {
        false
    }

    /// Where a Responses API request goes, for a kind that
    /// [speaks it](WireFormat::speaks_responses): `{base}/responses` unless
    /// the kind addresses it otherwise.
    fn responses_url(&self, p: &ResolvedProvider) -> String {
        url(p, "/responses")
    }

    /// The body of a chat request (before `extra_body` is merged in).
    fn request_body(&self, p: &ResolvedProvider, model: &str, req: &ChatRequest, stream: bool) -> Value;

    /// A fresh decoder for one streamed answer.
    fn decoder(&self, p: &ResolvedProvider) -> Box<dyn StreamDecoder>;

    /// A whole (non-streamed) answer as the events a stream would give.
    fn parse_response(&self, provider: &str, json: &Value) -> Result<Vec<DecodeEvent>, LlmError>;

    /// Where the model list is.
    fn models_url(&self, p: &ResolvedProvider) -> String;

    /// The model ids in a model-list answer.
    fn model_ids(&self, json: &Value) -> Vec<String>;

    /// The provider's own token counting, if it has one (else mia estimates).
    fn count_request(&self, _p: &ResolvedProvider, _model: &str, _req: &ChatRequest) -> Option<CountRequest> {
        None
    }

    /// A wait an error body asks for beyond `retry-after` (Gemini's
    /// `RetryInfo`), already bounded.
    fn retry_delay_ms(&self, _error_body: &Value) -> Option<u64> {
        None
    }

    /// Rate-limit header families of this format beyond the generic
    /// `x-ratelimit-*` ones every format reads.
    fn rate_limit_headers(&self) -> &'static [WindowHeaders] {
        &[]
    }
}

/// `{base}{path}` with `base` as configured (its trailing `/` already trimmed).
pub fn url(p: &ResolvedProvider, path: &str) -> String {
    format!("{}{path}", p.base_url)
}

/// A bearer-token credential header, the usual one.
pub fn bearer(p: &ResolvedProvider) -> Vec<(String, String)> {
    p.api_key
        .as_ref()
        .map(|key| vec![("authorization".to_string(), format!("Bearer {key}"))])
        .unwrap_or_default()
}

/// A prefix for generated tool-call ids (formats whose calls carry none),
/// unique across answers and restarts.
pub fn unique_call_prefix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    format!("call_{millis:x}{:x}_", COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_registered_once_and_found_by_name() {
        let mut kinds: Vec<&str> = FORMATS.iter().map(|f| f.kind()).collect();
        for k in &kinds {
            assert_eq!(lookup(k).map(|f| f.kind()), Some(*k));
        }
        let n = kinds.len();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), n, "a kind is registered twice");
        assert!(lookup("OpenAI").is_none(), "kinds are matched exactly");
    }

    #[test]
    fn builtins_have_distinct_names() {
        let mut names: Vec<&str> = FORMATS.iter().filter_map(|f| f.builtin()).map(|b| b.name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
    }
}
