//! Configured providers and `"provider/model"` resolution. The built-in
//! providers work out of the box when their usual environment variable is
//! set; `setup({ providers = ... })` adds OpenAI-compatible servers or
//! overrides the built-ins.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::error::{ErrorClass, LlmError};
use super::wire::WireFormat;

/// The wire format a provider speaks: `providers.NAME.kind`, one of the
/// registered [`super::wire::FORMATS`].
#[derive(Clone, Copy)]
pub struct ProviderKind(&'static dyn WireFormat);

impl ProviderKind {
    /// The kind named `name`, if a format by that name is registered.
    pub fn named(name: &str) -> Option<ProviderKind> {
        super::wire::lookup(name).map(ProviderKind)
    }

    /// Every kind, as `setup()` accepts them.
    pub fn all() -> Vec<ProviderKind> {
        super::wire::FORMATS.iter().map(|f| ProviderKind(*f)).collect()
    }

    /// Its name (`"openai_compatible"`).
    pub fn name(self) -> &'static str {
        self.0.kind()
    }

    /// What the format does on the wire.
    pub fn format(self) -> &'static dyn WireFormat {
        self.0
    }
}

impl PartialEq for ProviderKind {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for ProviderKind {}

impl std::fmt::Debug for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for ProviderKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for ProviderKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        ProviderKind::named(&name).ok_or_else(|| {
            let known: Vec<&str> = super::wire::FORMATS.iter().map(|f| f.kind()).collect();
            serde::de::Error::custom(format!(
                "unknown provider kind `{}`: expected one of {}",
                name.escape_debug(),
                known.join(", ")
            ))
        })
    }
}

/// One entry of `setup({ providers = { NAME = {...} } })`. Its `Debug`
/// leaves out the key and header values, so a log line can never carry them.
#[derive(Clone, PartialEq, Deserialize)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    #[serde(default)]
    pub base_url: Option<String>,
    /// Name of the environment variable holding the key (preferred over `api_key`).
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub api_key: Option<String>,
    /// A program and its arguments that print the key (a password manager:
    /// `["pass", "show", "openai"]`), run off Neovim's main thread, cached
    /// for the process, run again once when the provider refuses the key
    /// ([`crate::key_cmd`]). Used before `api_key_env`.
    #[serde(default)]
    pub api_key_cmd: Option<Vec<String>>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub models: Vec<String>,
    /// Anthropic only: mark the system prompt and the last user turn with
    /// `cache_control`, so a repeated long prefix is billed at cache prices.
    #[serde(default)]
    pub prompt_caching: bool,
    /// Azure OpenAI only: the `api-version` query parameter.
    #[serde(default)]
    pub api_version: Option<String>,
    /// `false` for a server or model that refuses the `tools` field: tools
    /// then travel in the system prompt ([`super::prompt_tools`]).
    #[serde(default = "yes")]
    pub native_tools: bool,
    /// Whether the models run on the user's machine, so a call costs a
    /// known $0.00 when no price is set (default: the kind's, true for
    /// `ollama`).
    #[serde(default)]
    pub local: Option<bool>,
    /// Which of OpenAI's APIs a provider of kind `openai`, `azure_openai` or
    /// `openai_compatible` speaks; unset, kind `openai` picks per model
    /// ([`super::responses::prefers_responses`]) and the others use Chat
    /// Completions.
    #[serde(default)]
    pub api: Option<Api>,
}

/// OpenAI's two chat APIs: `providers.NAME.api`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// Chat Completions (`/chat/completions`).
    Chat,
    /// The Responses API (`/responses`, [`super::responses`]).
    Responses,
}

fn yes() -> bool {
    true
}

impl ProviderConfig {
    /// Whether its calls are free when no price says otherwise (see `local`).
    pub fn is_local(&self) -> bool {
        self.local.unwrap_or_else(|| self.kind.format().local())
    }
}

/// How failed requests are retried: exponential backoff with jitter, or the
/// wait the provider asked for (`retry-after`, Gemini's `RetryInfo`).
///
/// Defaults follow the seed: 3 retries, delays from 1 s doubling up to a
/// 60 s cap, ±10% jitter inside the cap.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct RetryConfig {
    pub max_retries: u32,
    pub initial_delay_ms: u64,
    pub max_delay_ms: u64,
    pub multiplier: f32,
    pub jitter: Jitter,
    /// A provider asking to wait longer than this gets an error instead.
    pub max_wait_ms: u64,
    /// The classes that are retried (a subset of the retryable ones).
    pub retry_on: Vec<ErrorClass>,
    /// Spread the requests left in a provider's window that is running low
    /// until it resets, instead of sending them at once into 429s.
    pub pacing: bool,
}

/// How much each backoff delay is randomized: a fraction of it either way
/// (`true` is the default ±10%, `false` none).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Jitter {
    On(bool),
    Fraction(f64),
}

impl Jitter {
    /// The fraction, within 0..=1.
    pub fn fraction(self) -> f64 {
        match self {
            Jitter::On(true) => DEFAULT_JITTER,
            Jitter::On(false) => 0.0,
            Jitter::Fraction(f) if f.is_finite() => f.clamp(0.0, 1.0),
            Jitter::Fraction(_) => 0.0,
        }
    }
}

/// The seed's jitter: ±10% of each delay.
pub const DEFAULT_JITTER: f64 = 0.1;

/// The classes a retry can help with; `retry.retry_on` picks among them.
pub const RETRYABLE_CLASSES: [ErrorClass; 5] = [
    ErrorClass::RateLimit,
    ErrorClass::ServerError,
    ErrorClass::Overloaded,
    ErrorClass::NetworkError,
    ErrorClass::Timeout,
];

/// A timed-out request is retried with its time limits this much longer
/// each time ...
pub const TIMEOUT_GROWTH: f64 = 1.5;
/// ... up to this many times the configured limits.
pub const TIMEOUT_GROWTH_CAP: f64 = 3.0;

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_retries: 3,
            initial_delay_ms: 1000,
            max_delay_ms: 60_000,
            multiplier: 2.0,
            jitter: Jitter::Fraction(DEFAULT_JITTER),
            max_wait_ms: 120_000,
            retry_on: RETRYABLE_CLASSES.to_vec(),
            pacing: true,
        }
    }
}

impl RetryConfig {
    /// The backoff delays, in order: the `backon` crate's exponential
    /// schedule (capped at `max_delay_ms`), each moved by up to ±`jitter`
    /// of itself and kept within the cap.
    pub fn delays(&self) -> impl Iterator<Item = std::time::Duration> {
        use backon::BackoffBuilder;
        let cap = std::time::Duration::from_millis(self.max_delay_ms);
        let fraction = self.jitter.fraction();
        backon::ExponentialBuilder::default()
            .with_min_delay(std::time::Duration::from_millis(self.initial_delay_ms))
            .with_max_delay(cap)
            .with_factor(self.multiplier)
            .with_max_times(self.max_retries as usize)
            .build()
            .map(move |d| {
                if fraction == 0.0 {
                    return d.min(cap);
                }
                let moved = d.as_secs_f64() * (1.0 + fraction * (fastrand::f64() * 2.0 - 1.0));
                std::time::Duration::from_secs_f64(moved.max(0.0)).min(cap)
            })
    }

    /// Whether a failure of this kind is retried.
    pub fn retries(&self, err: &LlmError) -> bool {
        err.retryable && self.retry_on.contains(&err.class)
    }
}

/// Network time limits, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Timeouts {
    /// Establishing the TCP/TLS connection.
    pub connect_ms: u64,
    /// From sending the request to receiving the response headers.
    pub request_ms: u64,
    /// Longest silence allowed between two pieces of a streamed answer.
    pub stream_idle_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_ms: 10_000,
            request_ms: 120_000,
            stream_idle_ms: 90_000,
        }
    }
}

impl Timeouts {
    /// The response limits `factor` times longer (a retry after a timeout);
    /// connecting keeps its limit (the client holds it).
    pub fn stretched(self, factor: f64) -> Timeouts {
        let longer = |ms: u64| (ms as f64 * factor).min(u64::MAX as f64) as u64;
        Timeouts {
            request_ms: longer(self.request_ms),
            stream_idle_ms: longer(self.stream_idle_ms),
            ..self
        }
    }
}

/// Sizes a server's answer may not pass (`setup({ limits = {...} })`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// The largest single streamed event (an SSE event, an NDJSON line, a
    /// JSON-array element) or whole non-streamed response, in bytes.
    pub max_event_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_event_bytes: super::stream::DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

/// How connections to providers are kept for reuse (`setup({ http = {...} })`).
/// One connection serves request after request; idle ones are closed after
/// `pool_idle_timeout_ms`. 0 turns a setting off (no idle timeout, no idle
/// connections kept, no TCP keep-alive, no cap on connections).
///
/// The defaults are the provider contract's: at most 6 connections per
/// host (`max_connections_per_host`: a 7th request at once waits for a
/// free one, as browsers do) and 30 s idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct HttpConfig {
    pub pool_idle_timeout_ms: u64,
    pub pool_max_idle_per_host: usize,
    pub max_connections_per_host: usize,
    pub tcp_keepalive_ms: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            pool_idle_timeout_ms: 30_000,
            pool_max_idle_per_host: 6,
            max_connections_per_host: 6,
            tcp_keepalive_ms: 60_000,
        }
    }
}

/// The part of the Lua config the core needs.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CoreConfig {
    pub providers: BTreeMap<String, ProviderConfig>,
    pub timeouts: Timeouts,
    pub retry: RetryConfig,
    pub limits: Limits,
    pub http: HttpConfig,
    /// `setup({ pricing = { ["provider/model"] = { input, output, cache_read, cache_write } } })`.
    pub pricing: HashMap<String, mia_cost::Price>,
}

/// A provider ready to be called: its URL, credentials and headers. Its
/// `Debug` leaves out the key and header values.
#[derive(Clone)]
pub struct ResolvedProvider {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: String,
    pub api_key: Option<String>,
    pub api_key_env: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub prompt_caching: bool,
    pub models: Vec<String>,
    pub api_version: Option<String>,
    pub native_tools: bool,
    /// The API this request speaks: the configured `api`, else the kind's
    /// choice for the model.
    pub api: Api,
}

impl ResolvedProvider {
    /// The wire format of this provider's chat requests: its kind's own,
    /// or the Responses API when `api` says so.
    pub fn format(&self) -> &'static dyn WireFormat {
        match self.api {
            Api::Responses => &super::responses::Responses,
            Api::Chat => self.kind.format(),
        }
    }
}

/// `<redacted>` for a set secret, for `Debug` output.
fn hidden(secret: &Option<String>) -> Option<&'static str> {
    secret.as_ref().map(|_| "<redacted>")
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key_env", &self.api_key_env)
            .field("api_key", &hidden(&self.api_key))
            .field("api_key_cmd", &self.api_key_cmd)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("models", &self.models)
            .field("prompt_caching", &self.prompt_caching)
            .field("api_version", &self.api_version)
            .field("native_tools", &self.native_tools)
            .field("api", &self.api)
            .finish()
    }
}

impl std::fmt::Debug for ResolvedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedProvider")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key_env", &self.api_key_env)
            .field("api_key", &hidden(&self.api_key))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("prompt_caching", &self.prompt_caching)
            .field("models", &self.models)
            .field("api_version", &self.api_version)
            .field("native_tools", &self.native_tools)
            .field("api", &self.api)
            .finish()
    }
}

/// The credential in a secret header's value (`Bearer KEY` -> `KEY`), if the
/// header is one (authorization, *api-key*, *token*).
fn header_secret<'a>(name: &str, value: &'a str) -> Option<&'a str> {
    if !super::http::is_secret_header(name) {
        return None;
    }
    value.split_whitespace().last()
}

impl ResolvedProvider {
    /// Every credential of this provider: the API key and the values of
    /// secret headers set in `providers.NAME.headers`.
    pub fn secrets(&self) -> Vec<&str> {
        let headers = self.headers.iter().filter_map(|(k, v)| header_secret(k, v));
        self.api_key.as_deref().into_iter().chain(headers).collect()
    }
}

/// The providers mia knows without any configuration: one per wire format
/// that declares one ([`WireFormat::builtin`]).
pub fn builtin_providers() -> BTreeMap<String, ProviderConfig> {
    ProviderKind::all()
        .into_iter()
        .filter_map(|kind| {
            let b = kind.format().builtin()?;
            let entry = ProviderConfig {
                kind,
                base_url: Some(b.base_url.to_string()),
                api_key_env: b.api_key_env.map(str::to_string),
                api_key: None,
                api_key_cmd: None,
                headers: BTreeMap::new(),
                models: Vec::new(),
                prompt_caching: false,
                api_version: None,
                native_tools: true,
                api: None,
                local: None,
            };
            Some((b.name.to_string(), entry))
        })
        .collect()
}

/// The built-in providers with the user's entries merged over them, field
/// by field: an entry named like a built-in keeps the built-in's URL and key
/// variable unless it sets its own (a key given as `api_key` replaces the
/// variable). Any other entry without a URL gets its kind's usual address
/// (a second `ollama`-kind provider is at localhost:11434 unless told
/// otherwise). What `Providers::new` uses and `:checkhealth` shows.
pub fn merged_with_builtins(user: BTreeMap<String, ProviderConfig>) -> BTreeMap<String, ProviderConfig> {
    let mut all = builtin_providers();
    for (name, mut entry) in user {
        if let Some(builtin) = all.get(&name) {
            entry.base_url = entry.base_url.or_else(|| builtin.base_url.clone());
            if entry.api_key.is_none() {
                entry.api_key_env = entry.api_key_env.or_else(|| builtin.api_key_env.clone());
            }
        } else if entry.base_url.is_none() {
            entry.base_url = entry.kind.format().builtin().map(|b| b.base_url.to_string());
        }
        all.insert(name, entry);
    }
    all
}

/// Every configured provider plus one lazily built HTTP client each.
#[derive(Debug)]
pub struct Providers {
    pub config: CoreConfig,
    /// Built-in prices with the user's overrides, built on first use (see [`Providers::pricing`]).
    pricing: std::sync::OnceLock<mia_cost::PricingRegistry>,
    pub rate_limits: super::ratelimit::RateLimits,
    clients: Mutex<HashMap<String, reqwest::Client>>,
    /// One slot per connection a provider's requests may hold at once
    /// (`http.max_connections_per_host`), by provider: each provider has
    /// its own client, so its own connections.
    slots: Mutex<HashMap<String, std::sync::Arc<tokio::sync::Semaphore>>>,
    /// The keys `api_key_cmd` printed, by provider, for the process.
    command_keys: tokio::sync::Mutex<HashMap<String, String>>,
}

impl Providers {
    /// Merges the user's providers over the built-ins. No client is built yet:
    /// an unused provider costs nothing.
    pub fn new(mut config: CoreConfig) -> Self {
        config.providers = merged_with_builtins(std::mem::take(&mut config.providers));
        // Programs mia starts must not inherit these (see crate::secret_env).
        crate::secret_env::register(config.providers.values().filter_map(|p| p.api_key_env.clone()));
        Providers {
            config,
            pricing: std::sync::OnceLock::new(),
            rate_limits: Default::default(),
            clients: Mutex::new(HashMap::new()),
            command_keys: Default::default(),
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// The built-in prices with the user's overrides. Built on first use:
    /// parsing the built-in table is most of `configure`'s time on a cold
    /// start (~0.3 ms), and the first use is usually a request's, on the runtime.
    pub fn pricing(&self) -> &mia_cost::PricingRegistry {
        self.pricing.get_or_init(|| {
            mia_cost::PricingRegistry::with_overrides(self.config.pricing.clone()).unwrap_or_else(|e| {
                tracing::warn!("ignoring the pricing overrides: {e}");
                mia_cost::PricingRegistry::builtin().clone()
            })
        })
    }

    /// What one call of `model` on `provider` cost ([`mia_cost::cost_of`]),
    /// except that a local provider's model without a price is a known
    /// $0.00 rather than unknown.
    pub fn cost_of(&self, provider: &str, model: &str, usage: &mia_cost::Usage) -> mia_cost::Cost {
        let pricing = self.pricing();
        let local = self
            .config
            .providers
            .get(provider)
            .is_some_and(ProviderConfig::is_local);
        if local && pricing.price(provider, model).is_none() {
            return mia_cost::Cost::free();
        }
        mia_cost::cost_of(pricing, provider, model, usage)
    }

    /// Splits `"provider/model"` at the first `/` (so `openrouter/anthropic/x`
    /// is model `anthropic/x` of `openrouter`) and finds the provider.
    pub fn resolve(&self, model: &str) -> Result<(ResolvedProvider, String), LlmError> {
        let Some((name, model_id)) = model.split_once('/').filter(|(p, m)| !p.is_empty() && !m.is_empty()) else {
            return Err(LlmError::new(
                ErrorClass::InvalidRequest,
                None,
                format!("model `{model}` must be written \"provider/model\", e.g. \"openai/gpt-4.1\""),
            ));
        };
        let Some(cfg) = self.config.providers.get(name) else {
            let known: Vec<&str> = self.config.providers.keys().map(String::as_str).collect();
            return Err(LlmError::new(
                ErrorClass::InvalidRequest,
                Some(name),
                format!(
                    "unknown provider `{name}` in model `{model}`. Configured providers: {}. Add it under `providers` in setup().",
                    known.join(", ")
                ),
            ));
        };
        let Some(base_url) = cfg.base_url.clone() else {
            return Err(LlmError::new(
                ErrorClass::InvalidRequest,
                Some(name),
                format!("provider `{name}` has no base_url: set providers.{name}.base_url in setup()"),
            ));
        };
        let api_key = match (&cfg.api_key, &cfg.api_key_env) {
            (Some(key), _) => Some(key.clone()),
            (None, Some(var)) => std::env::var(var).ok().filter(|v| !v.is_empty()),
            (None, None) => None,
        };
        let api = match cfg.api {
            Some(Api::Responses) if !cfg.kind.format().speaks_responses() => {
                return Err(LlmError::new(
                    ErrorClass::InvalidRequest,
                    Some(name),
                    format!(
                        "providers.{name}.api = \"responses\" needs kind openai, azure_openai or openai_compatible (it is {}); remove `api` or change the kind.",
                        cfg.kind.name()
                    ),
                ));
            }
            Some(api) => api,
            None if cfg.kind.name() == "openai" && super::responses::prefers_responses(model_id) => Api::Responses,
            None => Api::Chat,
        };
        let needs_key = !cfg.kind.format().key_optional() || cfg.api_key_env.is_some();
        // A key command runs later, off this thread ([`Providers::keyed`]).
        let by_command = cfg.api_key.is_none() && cfg.api_key_cmd.is_some();
        if needs_key && api_key.is_none() && !by_command {
            let fix = match &cfg.api_key_env {
                Some(var) => format!("Set {var} in the environment Neovim starts from"),
                None => format!("Set providers.{name}.api_key_env in setup()"),
            };
            return Err(LlmError::new(
                ErrorClass::AuthFailure,
                Some(name),
                format!("{name}: no API key. {fix}."),
            ));
        }
        Ok((
            ResolvedProvider {
                name: name.to_string(),
                kind: cfg.kind,
                base_url: base_url.trim_end_matches('/').to_string(),
                api_key,
                api_key_env: cfg.api_key_env.clone(),
                headers: cfg.headers.clone(),
                prompt_caching: cfg.prompt_caching,
                models: cfg.models.clone(),
                api_version: cfg.api_version.clone(),
                native_tools: cfg.native_tools,
                api,
            },
            model_id.to_string(),
        ))
    }

    /// [`Providers::resolve`] with the key read for the request: from
    /// `api_key_cmd` (run once per process, cached) before `api_key_env`.
    /// With `fresh` (after the provider refused the key) the command runs
    /// again and the variable is read again. Runs on the runtime only.
    pub async fn keyed(&self, model: &str, fresh: bool) -> Result<(ResolvedProvider, String), LlmError> {
        let (mut provider, model) = self.resolve(model)?;
        let Some(cfg) = self.config.providers.get(&provider.name) else {
            return Ok((provider, model));
        };
        if cfg.api_key.is_some() {
            return Ok((provider, model));
        }
        if let Some(argv) = &cfg.api_key_cmd {
            let mut keys = self.command_keys.lock().await;
            if fresh {
                keys.remove(&provider.name);
            }
            if let Some(key) = keys.get(&provider.name) {
                provider.api_key = Some(key.clone());
                return Ok((provider, model));
            }
            match super::key_cmd::run(argv).await {
                Ok(key) => {
                    keys.insert(provider.name.clone(), key.clone());
                    provider.api_key = Some(key);
                    return Ok((provider, model));
                }
                // The variable, if there is one, is the fallback.
                Err(_) if provider.api_key.is_some() => return Ok((provider, model)),
                Err(e) => {
                    let name = &provider.name;
                    return Err(LlmError::new(
                        ErrorClass::AuthFailure,
                        Some(name),
                        format!("{name}: no API key: providers.{name}.api_key_cmd failed: {e}."),
                    ));
                }
            }
        }
        Ok((provider, model))
    }

    /// What to check when `provider` refused a key that was read twice:
    /// both places a key can come from, the ones configured named first
    /// ("the key `pass show openai` prints (providers.openai.api_key_cmd)
    /// and $OPENAI_API_KEY (providers.openai.api_key_env)"). None for a key
    /// written in the config, which nothing reads again.
    pub fn key_sources(&self, provider: &str) -> Option<String> {
        let cfg = self.config.providers.get(provider)?;
        if cfg.api_key.is_some() || (cfg.api_key_cmd.is_none() && cfg.api_key_env.is_none()) {
            return None;
        }
        let p = provider;
        let cmd = match &cfg.api_key_cmd {
            Some(argv) => format!("the key `{}` prints (providers.{p}.api_key_cmd)", argv.join(" ")),
            None => format!(
                "providers.{p}.api_key_cmd (a command that prints the key, e.g. {{ \"pass\", \"show\", \"{p}\" }})"
            ),
        };
        let env = match &cfg.api_key_env {
            Some(var) => format!("${var} (providers.{p}.api_key_env)"),
            None => format!("providers.{p}.api_key_env (a variable that holds it)"),
        };
        Some(if cfg.api_key_env.is_some() && cfg.api_key_cmd.is_none() {
            format!("{env}, or set {cmd}")
        } else if cfg.api_key_env.is_some() {
            format!("{cmd} and {env}")
        } else {
            format!("{cmd}, or set {env}")
        })
    }

    /// A connection slot of `provider`, held for one request (sending it and
    /// reading its answer): at most `http.max_connections_per_host` requests
    /// of a provider are in flight, the others wait here. None without a cap.
    pub async fn connection_slot(&self, provider: &str) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let max = self.config.http.max_connections_per_host;
        if max == 0 {
            return None;
        }
        let slots = {
            let mut all = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            all.entry(provider.to_string())
                .or_insert_with(|| std::sync::Arc::new(tokio::sync::Semaphore::new(max)))
                .clone()
        };
        slots.acquire_owned().await.ok()
    }

    /// The pooled client of `provider`, built on first use (on the runtime,
    /// never on Neovim's main thread: building one loads the TLS roots).
    pub fn client(&self, provider: &str) -> Result<reqwest::Client, LlmError> {
        let mut clients = self.clients.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(c) = clients.get(provider) {
            return Ok(c.clone());
        }
        let client = super::http::build_client(&self.config.timeouts, &self.config.http).map_err(|e| {
            LlmError::new(
                ErrorClass::Internal,
                Some(provider),
                format!("{provider}: cannot create an HTTP client: {e}"),
            )
        })?;
        clients.insert(provider.to_string(), client.clone());
        Ok(client)
    }

    /// The API keys (and secret header values) of every configured provider
    /// that are 8 or more characters long (shorter ones are placeholders for
    /// local servers), read from the environment now: what must never leave
    /// in a tool result.
    pub fn secrets(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .config
            .providers
            .values()
            .flat_map(|cfg| {
                let key = match (&cfg.api_key, &cfg.api_key_env) {
                    (Some(key), _) => Some(key.clone()),
                    (None, Some(var)) => std::env::var(var).ok(),
                    (None, None) => None,
                };
                let headers = cfg
                    .headers
                    .iter()
                    .filter_map(|(k, v)| header_secret(k, v).map(str::to_string));
                key.into_iter().chain(headers).collect::<Vec<_>>()
            })
            .chain(
                self.command_keys
                    .try_lock()
                    .map(|keys| keys.values().cloned().collect::<Vec<_>>())
                    .unwrap_or_default(),
            )
            .filter(|key| key.len() >= 8)
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// The names of every configured provider.
    pub fn names(&self) -> Vec<String> {
        self.config.providers.keys().cloned().collect()
    }

    /// How many HTTP clients exist (one per provider actually used).
    pub fn clients_built(&self) -> usize {
        self.clients.lock().map(|c| c.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(json: serde_json::Value) -> RetryConfig {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn default_retry_policy_is_the_seeds() {
        let r = RetryConfig::default();
        assert_eq!((r.max_retries, r.max_delay_ms), (3, 60_000));
        assert_eq!(r.jitter.fraction(), 0.1);
        assert_eq!(r.retry_on, RETRYABLE_CLASSES.to_vec());
    }

    #[test]
    fn without_jitter_the_delays_double_up_to_the_cap() {
        let r = retry(serde_json::json!({
            "max_retries": 5, "initial_delay_ms": 1000, "max_delay_ms": 5000, "jitter": false
        }));
        let ms: Vec<u128> = r.delays().map(|d| d.as_millis()).collect();
        assert_eq!(ms, vec![1000, 2000, 4000, 5000, 5000]);
    }

    #[test]
    fn jitter_moves_each_delay_by_at_most_its_fraction_and_never_past_the_cap() {
        let r = retry(serde_json::json!({
            "max_retries": 6, "initial_delay_ms": 1000, "max_delay_ms": 4000, "jitter": 0.25
        }));
        let bases = [1000.0, 2000.0, 4000.0, 4000.0, 4000.0, 4000.0];
        let mut moved = false;
        for _ in 0..200 {
            for (d, base) in r.delays().zip(bases) {
                let ms = d.as_secs_f64() * 1000.0;
                assert!(
                    ms >= base * 0.75 - 1e-6 && ms <= (base * 1.25).min(4000.0) + 1e-6,
                    "{ms} from {base}"
                );
                moved |= (ms - base).abs() > 1.0;
            }
        }
        assert!(moved, "jitter never changed a delay");
        assert_eq!(retry(serde_json::json!({ "jitter": true })).jitter.fraction(), 0.1);
        assert_eq!(retry(serde_json::json!({ "jitter": 7.0 })).jitter.fraction(), 1.0);
    }

    #[test]
    fn retry_on_narrows_what_is_retried_and_never_widens_it() {
        let r = retry(serde_json::json!({ "retry_on": ["rate_limit"] }));
        let err = |class| LlmError::new(class, None, "x");
        assert!(r.retries(&err(ErrorClass::RateLimit)));
        assert!(!r.retries(&err(ErrorClass::Timeout)));
        let all = RetryConfig::default();
        assert!(all.retries(&err(ErrorClass::Timeout)));
        let mut told_not_to = err(ErrorClass::ServerError);
        told_not_to.retryable = false; // x-should-retry: false, a malformed chunk
        assert!(!all.retries(&told_not_to));
        assert!(
            !retry(serde_json::json!({ "retry_on": ["invalid_request"] })).retries(&err(ErrorClass::InvalidRequest))
        );
    }

    #[test]
    fn a_stretched_timeout_leaves_connecting_alone() {
        let t = Timeouts::default().stretched(1.5);
        assert_eq!(t.request_ms, 180_000);
        assert_eq!(t.stream_idle_ms, 135_000);
        assert_eq!(t.connect_ms, 10_000);
    }

    #[test]
    fn debug_output_never_shows_a_key_or_header_value() {
        let config: ProviderConfig = serde_json::from_value(serde_json::json!({
            "kind": "openai", "api_key": "sk-debug-canary", "headers": { "Authorization": "Bearer sk-header-canary" }
        }))
        .unwrap();
        let shown = format!("{config:?}");
        assert!(!shown.contains("canary"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("Authorization"),
            "{shown}"
        );
    }

    fn providers_with(extra: &[(&str, ProviderConfig)]) -> Providers {
        let mut config = CoreConfig::default();
        for (name, cfg) in extra {
            config.providers.insert(name.to_string(), cfg.clone());
        }
        Providers::new(config)
    }

    #[test]
    fn model_splits_at_the_first_slash() {
        let local = ProviderConfig {
            kind: ProviderKind::named("openai_compatible").unwrap(),
            base_url: Some("http://127.0.0.1:1/v1/".into()),
            api_key_env: None,
            api_key: None,
            headers: BTreeMap::new(),
            models: vec![],
            prompt_caching: false,
            api_version: None,
            native_tools: true,
            api: None,
            local: None,
            api_key_cmd: None,
        };
        let p = providers_with(&[("openrouter", local)]);
        let (resolved, model) = p.resolve("openrouter/anthropic/claude").unwrap();
        assert_eq!(resolved.name, "openrouter");
        assert_eq!(model, "anthropic/claude");
        assert_eq!(resolved.base_url, "http://127.0.0.1:1/v1");
        assert_eq!(resolved.api_key, None);
    }

    #[test]
    fn unknown_provider_lists_the_configured_ones() {
        let err = providers_with(&[]).resolve("nope/x").unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidRequest);
        assert!(
            err.message
                .contains("Configured providers: anthropic, gemini, ollama, openai"),
            "{}",
            err.message
        );
    }

    #[test]
    fn missing_key_names_the_env_var() {
        let mut cfg = builtin_providers().remove("openai").unwrap();
        cfg.api_key_env = Some("MIA_TEST_SURELY_UNSET_KEY".into());
        let err = providers_with(&[("openai", cfg)]).resolve("openai/gpt").unwrap_err();
        assert_eq!(err.class, ErrorClass::AuthFailure);
        assert_eq!(
            err.message,
            "openai: no API key. Set MIA_TEST_SURELY_UNSET_KEY in the environment Neovim starts from."
        );
    }

    #[test]
    fn a_provider_without_base_url_gets_its_kinds_usual_address() {
        let local: ProviderConfig = serde_json::from_value(serde_json::json!({ "kind": "ollama" })).unwrap();
        let (resolved, model) = providers_with(&[("local", local)]).resolve("local/qwen3:8b").unwrap();
        assert_eq!(
            (resolved.base_url.as_str(), model.as_str()),
            ("http://localhost:11434", "qwen3:8b")
        );
        // A kind with no usual address still needs one.
        let bare: ProviderConfig = serde_json::from_value(serde_json::json!({ "kind": "openai_compatible" })).unwrap();
        let err = providers_with(&[("bare", bare)]).resolve("bare/m").unwrap_err();
        assert!(err.message.contains("set providers.bare.base_url"), "{}", err.message);
    }

    #[test]
    fn model_without_provider_is_refused() {
        let err = providers_with(&[]).resolve("gpt-4.1").unwrap_err();
        assert!(err.message.contains("\"provider/model\""));
    }
}
