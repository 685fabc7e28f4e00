//! mia's configuration, defined once: the options of Neovim's `setup()`,
//! which are also the JSON keys of `mia-acp --config FILE`.
//!
//! [`Config`] owns the set of option names and the defaults of the options
//! the core gives a value to (the default model, the system prompt, the
//! starting mode, the log level, the review, the chat window, checkpoints and
//! mia-acp's own `acp` section). An unknown key is refused at every level the
//! type spells out, with the closest known names; a value of the wrong type is
//! refused naming its key path and what was expected.
//!
//! The sections are typed down to their keys (`providers.NAME.api_key_env`,
//! `permissions.rules[1].action`, `modes.NAME.tools`, …), so a misspelt key
//! is refused at any depth with its path. What a value means beyond its type
//! (a known provider kind, a valid glob, a mode that exists) the front-ends
//! check. `pricing` entries stay JSON objects (the price list owns them).

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The default model, "provider/model".
pub const DEFAULT_MODEL: &str = "anthropic/claude-sonnet-4-5";

/// The system prompt when `system` is not set (Neovim's `:Mia prompt`, the
/// chat, and mia-acp's sessions): one prompt for both front-ends, so it
/// names no editor (mia-acp runs in Zed and others).
pub const DEFAULT_SYSTEM: &str =
    "You are mia, a concise and precise coding assistant inside the user's editor. Answer in Markdown.";

/// A JSON object whose entries a front-end checks (see the module doc).
pub type Section = Option<Map<String, Value>>;

/// Entries by a name the user chooses (providers, agents, modes, …).
pub type Named<T> = Option<BTreeMap<String, T>>;

/// Every option of `setup()` / `mia-acp --config`. Field names are the keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The default model, "provider/model".
    pub model: String,
    pub providers: Named<ProviderEntry>,
    /// External ACP agents (Neovim only).
    pub agents: Named<AgentEntry>,
    pub timeouts: Option<TimeoutsConfig>,
    pub retry: Option<RetryOptions>,
    pub http: Option<HttpOptions>,
    pub limits: Option<LimitsConfig>,
    pub permissions: Option<PermissionsConfig>,
    pub tools: Option<ToolsConfig>,
    pub costs: Option<CostsConfig>,
    /// `false`: no cost warning or limit at all (they are on by default).
    pub budgets: Option<bool>,
    pub pricing: Section,
    /// Where mia keeps its data; `None`: the front-end's place for it.
    pub data_dir: Option<String>,
    /// The log file; `None`: the front-end's place for it.
    pub log_file: Option<String>,
    pub log_level: LogLevel,
    /// The system prompt.
    pub system: String,
    /// The chat window (Neovim only).
    pub chat: ChatConfig,
    /// The mode a session starts in.
    pub mode: String,
    /// How proposed edits are reviewed (Neovim only).
    pub review: Review,
    /// Keys of the review (Neovim only).
    pub review_keys: Option<ReviewKeys>,
    pub checkpoints: CheckpointsConfig,
    pub mcp: Option<McpConfig>,
    /// Project rules files: `false` turns them off.
    pub rules: Option<RulesOption>,
    pub telemetry: Option<TelemetryConfig>,
    pub modes: Named<ModeEntry>,
    /// The sandbox of the commands a model runs (`crate::sandbox`).
    pub sandbox: crate::sandbox::SandboxConfig,
    /// mia-acp's own options (`setup()` has none of them).
    pub acp: AcpOptions,
    /// A JSON schema reference an editor may put in mia-acp's file.
    #[serde(rename = "$schema", skip_serializing)]
    pub schema: Option<String>,
}

/// The keys only mia-acp's file has: not `setup()` options.
pub const ACP_ONLY_KEYS: [&str; 2] = ["acp", "$schema"];

impl Default for Config {
    fn default() -> Self {
        Config {
            model: DEFAULT_MODEL.to_string(),
            providers: None,
            agents: None,
            timeouts: None,
            retry: None,
            http: None,
            limits: None,
            permissions: None,
            tools: None,
            costs: None,
            budgets: None,
            pricing: None,
            data_dir: None,
            log_file: None,
            log_level: LogLevel::Info,
            system: DEFAULT_SYSTEM.to_string(),
            chat: ChatConfig::default(),
            mode: crate::shared::DEFAULT_MODE.to_string(),
            review: Review::Diff,
            review_keys: None,
            checkpoints: CheckpointsConfig::default(),
            mcp: None,
            rules: None,
            telemetry: None,
            modes: None,
            sandbox: Default::default(),
            acp: AcpOptions::default(),
            schema: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Review {
    /// A diff float.
    Diff,
    /// Pending hunks in the file's buffer.
    Hunks,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatPosition {
    Right,
    Left,
    Bottom,
    Top,
}

/// `chat`: the chat window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChatConfig {
    pub position: ChatPosition,
    /// Width (or height) of the split; 0 lets Neovim halve the window.
    pub size: u32,
    /// Syntax highlighting stops at this column of a line.
    pub synmaxcol: u32,
    /// The chat buffer's regex syntax.
    pub syntax: String,
}

impl Default for ChatConfig {
    fn default() -> Self {
        ChatConfig {
            position: ChatPosition::Right,
            size: 0,
            synmaxcol: 1000,
            syntax: "mia_chat".to_string(),
        }
    }
}

/// `checkpoints`: what `:Mia undo` keeps, in the user's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointsConfig {
    #[serde(deserialize_with = "positive")]
    pub max_age_days: u64,
    #[serde(deserialize_with = "positive")]
    pub max_mb: u64,
    #[serde(deserialize_with = "positive")]
    pub max_file_kb: u64,
    #[serde(deserialize_with = "positive")]
    pub max_scan_files: u64,
}

impl Default for CheckpointsConfig {
    fn default() -> Self {
        CheckpointsConfig {
            max_age_days: 30,
            max_mb: 512,
            max_file_kb: 4096,
            max_scan_files: 20_000,
        }
    }
}

impl From<CheckpointsConfig> for crate::checkpoint::CheckpointSettings {
    fn from(c: CheckpointsConfig) -> Self {
        // `positive` bounds each below 2^31: none of these overflows.
        crate::checkpoint::CheckpointSettings {
            max_age_days: u32::try_from(c.max_age_days).unwrap_or(u32::MAX),
            max_bytes: c.max_mb * 1024 * 1024,
            max_file_bytes: c.max_file_kb * 1024,
            max_scan_files: usize::try_from(c.max_scan_files).unwrap_or(usize::MAX),
        }
    }
}

/// `acp`: mia-acp's own options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AcpOptions {
    /// Sessions per `session/list` page.
    #[serde(deserialize_with = "page_size")]
    pub list_page_size: u64,
    /// See `acp::server::memory`.
    #[serde(deserialize_with = "memory_mb")]
    pub max_memory_mb: u64,
}

impl Default for AcpOptions {
    fn default() -> Self {
        AcpOptions {
            list_page_size: 50,
            max_memory_mb: crate::acp::server::memory::DEFAULT_MB,
        }
    }
}

/// A list. Lua has one kind of table, and an empty one reaches the core as
/// an empty object: that is an empty list too.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(transparent)]
pub struct List<T>(pub Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Items<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Items<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<List<T>, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = seq.next_element()? {
                    out.push(x);
                }
                Ok(List(out))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<List<T>, A::Error> {
                match map.next_key::<de::IgnoredAny>()? {
                    None => Ok(List(Vec::new())),
                    Some(_) => Err(de::Error::invalid_type(de::Unexpected::Map, &self)),
                }
            }
        }
        d.deserialize_any(Items(std::marker::PhantomData))
    }
}

/// A value that may be a secret (an API key, a header, an environment
/// variable): its `Debug` never shows it.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `providers.NAME`: which provider kinds exist and which need `base_url`
/// the front-ends check.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderEntry {
    pub kind: Option<String>,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub api_key: Option<Secret>,
    pub headers: Option<BTreeMap<String, Secret>>,
    pub models: Option<List<String>>,
    pub prompt_caching: Option<bool>,
    pub native_tools: Option<bool>,
    pub api_version: Option<String>,
    pub api_key_cmd: Option<List<String>>,
    pub local: Option<bool>,
    pub api: Option<String>,
}

/// `agents.NAME`: an external ACP agent (Neovim only).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentEntry {
    pub command: Option<List<String>>,
    pub env: Option<BTreeMap<String, Secret>>,
    pub cwd: Option<String>,
    pub mcp: Option<bool>,
}

/// `timeouts`, in milliseconds (the defaults are the HTTP client's).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutsConfig {
    #[serde(deserialize_with = "some_millis")]
    pub connect_ms: Option<u64>,
    #[serde(deserialize_with = "some_millis")]
    pub request_ms: Option<u64>,
    #[serde(deserialize_with = "some_millis")]
    pub stream_idle_ms: Option<u64>,
}

/// `retry`: how failed requests are retried.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryOptions {
    #[serde(deserialize_with = "some_whole")]
    pub max_retries: Option<u64>,
    #[serde(deserialize_with = "some_whole")]
    pub initial_delay_ms: Option<u64>,
    #[serde(deserialize_with = "some_whole")]
    pub max_delay_ms: Option<u64>,
    #[serde(deserialize_with = "some_multiplier")]
    pub multiplier: Option<f64>,
    /// true, false or a fraction from 0 to 1.
    #[serde(deserialize_with = "some_jitter")]
    pub jitter: Option<Value>,
    pub retry_on: Option<List<String>>,
    pub pacing: Option<bool>,
    #[serde(deserialize_with = "some_whole")]
    pub max_wait_ms: Option<u64>,
}

/// `http`: connection reuse; 0 turns a setting off.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpOptions {
    #[serde(deserialize_with = "some_whole")]
    pub pool_idle_timeout_ms: Option<u64>,
    #[serde(deserialize_with = "some_whole")]
    pub pool_max_idle_per_host: Option<u64>,
    #[serde(deserialize_with = "some_whole")]
    pub max_connections_per_host: Option<u64>,
    #[serde(deserialize_with = "some_whole")]
    pub tcp_keepalive_ms: Option<u64>,
}

/// `limits`: sizes a server's answer may not pass.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    #[serde(deserialize_with = "some_size")]
    pub max_event_bytes: Option<u64>,
}

/// What a tool may do without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

/// A mode's action per effect.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyEntry {
    pub read: Option<Action>,
    pub write: Option<Action>,
    pub execute: Option<Action>,
}

/// `permissions.rules[i]`: whether the tool names a known tool and the
/// globs are valid the front-ends check.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuleEntry {
    pub tool: Option<String>,
    pub pattern: Option<String>,
    pub action: Option<Action>,
    pub mode: Option<String>,
}

/// `permissions`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionsConfig {
    pub modes: Named<PolicyEntry>,
    pub rules: Option<List<RuleEntry>>,
}

/// `tools`: limits of the agent loop and the built-in tools.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    #[serde(deserialize_with = "some_count")]
    pub max_turns: Option<u64>,
    #[serde(deserialize_with = "some_count")]
    pub bash_timeout_ms: Option<u64>,
    #[serde(deserialize_with = "some_count")]
    pub max_read_bytes: Option<u64>,
    #[serde(deserialize_with = "some_count")]
    pub output_cap_bytes: Option<u64>,
}

/// `costs`: warnings and limits in US dollars.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CostsConfig {
    #[serde(deserialize_with = "some_usd")]
    pub session_warning_usd: Option<f64>,
    #[serde(deserialize_with = "some_usd")]
    pub session_limit_usd: Option<f64>,
    #[serde(deserialize_with = "some_usd")]
    pub daily_warning_usd: Option<f64>,
    #[serde(deserialize_with = "some_usd")]
    pub daily_limit_usd: Option<f64>,
    pub hard_limit: Option<bool>,
}

/// `review_keys`: each a key sequence, or `false` for none (Neovim only;
/// the defaults are the review's own).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReviewKeys {
    #[serde(deserialize_with = "some_key")]
    pub next_hunk: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub prev_hunk: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub accept_hunk: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub reject_hunk: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub accept_all: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub reject_all: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub accept: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub accept_file: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub accept_always: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub reject: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub edit: Option<Value>,
    #[serde(deserialize_with = "some_key")]
    pub dismiss: Option<Value>,
}

/// `mcp`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    pub servers: Named<McpServerEntry>,
}

/// `mcp.servers.NAME`: a server over stdio (`command`) or streamable HTTP (`url`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerEntry {
    pub command: Option<List<String>>,
    pub env: Option<BTreeMap<String, Secret>>,
    pub cwd: Option<String>,
    pub url: Option<String>,
    pub headers: Option<BTreeMap<String, Secret>>,
    #[serde(deserialize_with = "some_millis")]
    pub timeout_ms: Option<u64>,
    pub tool_prefix: Option<String>,
    pub tool_names: Option<BTreeMap<String, String>>,
    pub path_rules: Option<bool>,
    /// Run the stdio server in mia's sandbox (`crate::sandbox`).
    pub sandbox: Option<bool>,
}

/// `rules`: `false`, or which rules files go in the system prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum RulesOption {
    Off,
    On(RulesConfig),
}

/// `rules` when not `false`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RulesConfig {
    pub files: Option<List<String>>,
    /// A path, or `false` for none.
    #[serde(deserialize_with = "some_path_or_off")]
    pub user_file: Option<Value>,
    #[serde(deserialize_with = "some_kb")]
    pub max_kb: Option<u64>,
}

impl Serialize for RulesOption {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RulesOption::Off => s.serialize_bool(false),
            RulesOption::On(c) => c.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for RulesOption {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Rules;
        impl<'de> Visitor<'de> for Rules {
            type Value = RulesOption;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("false or an object { files, user_file, max_kb }")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RulesOption, E> {
                if v {
                    Err(E::custom(
                        "must be false or an object { files, user_file, max_kb } (got true)",
                    ))
                } else {
                    Ok(RulesOption::Off)
                }
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<RulesOption, A::Error> {
                // Through the map itself, so a wrong key inside keeps its path.
                RulesConfig::deserialize(de::value::MapAccessDeserializer::new(map)).map(RulesOption::On)
            }
        }
        d.deserialize_any(Rules)
    }
}

/// `telemetry`: OpenTelemetry export.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    pub otlp: Option<OtlpConfig>,
    pub log_prompts: Option<bool>,
    pub project: Option<String>,
}

/// `telemetry.otlp`: where exports go.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpConfig {
    pub endpoint: Option<String>,
    pub protocol: Option<String>,
    pub compression: Option<String>,
    pub headers: Option<BTreeMap<String, Secret>>,
    #[serde(deserialize_with = "some_interval")]
    pub interval_ms: Option<u64>,
}

/// `modes.NAME`: a user mode, or changes to a built-in one.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModeEntry {
    pub name: Option<String>,
    pub description: Option<String>,
    pub system: Option<String>,
    pub tools: Option<List<String>>,
    pub permissions: Option<PolicyEntry>,
    /// Whether the mode may propose leaving itself (`switch_mode`).
    pub switch_mode: Option<bool>,
}

/// A list (an empty Lua table crosses as `{}`, read as an empty list), for
/// fields typed `Vec` outside this module.
pub fn vec_of<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    List::<T>::deserialize(d).map(|l| l.0)
}

fn whole_in<'de, D: Deserializer<'de>>(d: D, lo: u64, hi: u64, what: &str) -> Result<u64, D::Error> {
    let v = Value::deserialize(d)?;
    match v.as_u64() {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(de::Error::custom(format!("must be {what} (got {})", shown(&v)))),
    }
}

fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole_in(d, 1, (1 << 31) - 1, "a positive whole number")
}

/// At most the store's own cap on a page ([`mia_store::MAX_PAGE`]): a
/// larger size would be cut to it anyway, unannounced.
fn page_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    const MAX: u64 = mia_store::MAX_PAGE as u64;
    whole_in(d, 1, MAX, &format!("a whole number from 1 to {MAX}"))
}

fn memory_mb<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole_in(d, 128, 65_536, "a whole number from 128 to 65536")
}

/// The largest whole number a Lua number holds exactly.
const MAX_EXACT: u64 = (1 << 53) - 1;

fn some_millis<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    whole_in(d, 1, MAX_EXACT, "a positive whole number of milliseconds").map(Some)
}

fn some_whole<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    whole_in(d, 0, MAX_EXACT, "a whole number >= 0").map(Some)
}

fn some_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    whole_in(d, 1, MAX_EXACT, "a positive whole number of bytes").map(Some)
}

fn some_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    whole_in(d, 1, MAX_EXACT, "a positive whole number").map(Some)
}

fn some_kb<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    whole_in(d, 1, 1024, "a whole number of KB from 1 to 1024").map(Some)
}

fn some_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    whole_in(d, 1000, MAX_EXACT, "a whole number of milliseconds, at least 1000").map(Some)
}

fn number_where<'de, D: Deserializer<'de>>(d: D, ok: fn(f64) -> bool, what: &str) -> Result<Option<f64>, D::Error> {
    let v = Value::deserialize(d)?;
    match v.as_f64() {
        Some(x) if ok(x) => Ok(Some(x)),
        _ => Err(de::Error::custom(format!("must be {what} (got {})", shown(&v)))),
    }
}

fn some_usd<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number_where(d, |x| x >= 0.0, "a number of US dollars >= 0")
}

fn some_multiplier<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    number_where(d, |x| x >= 1.0, "a number >= 1")
}

/// `retry.jitter`: true, false or a fraction from 0 to 1.
fn some_jitter<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    let v = Value::deserialize(d)?;
    match &v {
        Value::Bool(_) => Ok(Some(v)),
        Value::Number(n) if n.as_f64().is_some_and(|x| (0.0..=1.0).contains(&x)) => Ok(Some(v)),
        _ => Err(de::Error::custom(format!(
            "must be true, false or a fraction from 0 to 1 (got {})",
            shown(&v)
        ))),
    }
}

/// A review key: a key sequence, or false for none.
fn some_key<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    let v = Value::deserialize(d)?;
    match &v {
        Value::Bool(false) => Ok(Some(v)),
        Value::String(s) if !s.is_empty() => Ok(Some(v)),
        _ => Err(de::Error::custom(format!(
            "must be a key sequence such as \"]h\", or false for none (got {})",
            shown(&v)
        ))),
    }
}

/// A path, or false for none.
fn some_path_or_off<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    let v = Value::deserialize(d)?;
    match &v {
        Value::Bool(false) | Value::String(_) => Ok(Some(v)),
        _ => Err(de::Error::custom(format!(
            "must be a path, or false for none (got {})",
            shown(&v)
        ))),
    }
}

/// A value as an error shows it: short, and never more than 80 characters.
fn shown(v: &Value) -> String {
    match v {
        Value::Null => "nothing".to_string(),
        v => v.to_string().chars().take(80).collect(),
    }
}

/// A configuration that cannot be used: `path` is the key path at fault
/// (`checkpoints.max_mb`), the message what is wrong and what was expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{path}` {message}")]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl Config {
    /// Reads `value` (setup()'s table, or mia-acp's JSON). `null` is an unset
    /// option, as `nil` is in Lua.
    pub fn from_json(mut value: Value) -> Result<Config, ConfigError> {
        drop_nulls(&mut value);
        if !value.is_object() {
            return Err(ConfigError {
                path: "(top level)".into(),
                message: format!("must be an object of setup() options (got {})", shown(&value)),
            });
        }
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let err = explain(&path, &e.into_inner().to_string());
            // A key or value can be as long as the file: the message is one line.
            ConfigError {
                path: shorten(err.path, MAX_PATH_CHARS),
                message: shorten(err.message, MAX_MESSAGE_CHARS),
            }
        })
    }

    /// The option names, in the order of the type (`$schema` last).
    pub fn keys() -> &'static [&'static str] {
        fields_of::<Config>()
    }
}

/// Removes `null` entries of objects, at every depth.
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// The names between backticks in `text`.
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The known names closest to `name` (at most two edits away, or starting
/// with it: `daily_limit` for `daily_limit_usd`), sorted: the "did you mean"
/// of an unknown key.
pub fn closest<'a>(name: &str, known: &[&'a str]) -> Vec<&'a str> {
    let lower = name.to_lowercase();
    let mut out: Vec<&str> = known
        .iter()
        .copied()
        // Lengths 3 apart are never 2 edits apart: no distance over a long name.
        .filter(|k| {
            (lower.len().abs_diff(k.len()) <= 2 && strsim::levenshtein(&lower, k) <= 2)
                || (lower.len() >= 4 && k.starts_with(&lower))
        })
        .collect();
    out.sort_unstable();
    out
}

/// Longest key path and message a [`ConfigError`] shows, in characters.
const MAX_PATH_CHARS: usize = 120;
const MAX_MESSAGE_CHARS: usize = 600;

/// `s` cut to `max` characters, an ellipsis marking the cut.
fn shorten(s: String, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s,
    }
}

/// Turns serde's message at `path` into the user's: an unknown key or value
/// gets the closest known ones.
fn explain(path: &str, message: &str) -> ConfigError {
    let at = |p: &str| {
        if p.is_empty() || p == "." {
            String::new()
        } else {
            p.to_string()
        }
    };
    let join = |parent: &str, name: &str| {
        if parent.is_empty() {
            name.to_string()
        } else {
            format!("{parent}.{name}")
        }
    };
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let names = quoted(rest);
        if let Some((name, known)) = names.split_first() {
            // The path may or may not end with the unknown key itself.
            let parent = at(path);
            let parent = parent
                .strip_suffix(name)
                .map(|p| p.trim_end_matches('.').to_string())
                .unwrap_or(parent);
            let full = join(&parent, name);
            let close = closest(name, known);
            let message = if close.is_empty() {
                let known: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
                format!("is not an option (known: {})", known.join(", "))
            } else {
                let close: Vec<String> = close.iter().map(|k| format!("`{k}`")).collect();
                format!("is not an option; did you mean {}?", close.join(", "))
            };
            return ConfigError { path: full, message };
        }
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let names = quoted(rest);
        if let Some((got, known)) = names.split_first() {
            let close = closest(got, known);
            let mut message = format!("must be one of {} (got \"{got}\")", known.join(", "));
            if !close.is_empty() {
                message.push_str(&format!("; did you mean \"{}\"?", close.join("\", \"")));
            }
            return ConfigError {
                path: at(path),
                message,
            };
        }
    }
    let message = match message.split_once(" at line ") {
        Some((m, _)) => m,
        None => message,
    };
    // serde names the Rust type ("expected struct AgentEntry"): the user's word is an object.
    let message = &match message.split_once("expected struct ") {
        Some((head, _)) => format!("{head}expected an object"),
        None => message.to_string(),
    };
    let message = if message.starts_with("must ") {
        message.to_string()
    } else {
        format!("is wrong: {message}")
    };
    ConfigError {
        path: if at(path).is_empty() {
            "(top level)".into()
        } else {
            at(path)
        },
        message,
    }
}

/// The field names of a struct `T` derives `Deserialize` for: serde hands
/// them to `deserialize_struct`, which this deserializer only records.
fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Fields<'a>(&'a mut &'static [&'static str]);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> Deserializer<'de> for Fields<'_> {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            *self.0 = fields;
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    let mut out: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut out));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::SandboxConfig;
    use serde_json::json;

    fn err(v: Value) -> String {
        Config::from_json(v).unwrap_err().to_string()
    }

    #[test]
    fn an_empty_table_gives_the_defaults() {
        let c = Config::from_json(json!({})).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.model, DEFAULT_MODEL);
        assert_eq!(c.system, DEFAULT_SYSTEM);
        assert_eq!(c.mode, "ask");
        assert_eq!(c.log_level, LogLevel::Info);
        assert_eq!(c.checkpoints.max_mb, 512);
        assert_eq!(c.acp.list_page_size, 50);
        let cp: crate::checkpoint::CheckpointSettings = c.checkpoints.into();
        assert_eq!(cp.max_bytes, 512 * 1024 * 1024);
        assert_eq!(cp.max_file_bytes, 4096 * 1024);
    }

    #[test]
    fn null_is_an_unset_option() {
        let c = Config::from_json(json!({ "model": null, "checkpoints": { "max_mb": null } })).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn a_key_as_long_as_the_file_is_shown_cut_to_one_line() {
        let long = "x".repeat(200_000);
        let e = Config::from_json(json!({ long.clone(): 1 })).unwrap_err();
        assert!(e.path.starts_with("xxxx") && e.path.ends_with('…'), "{}", e.path);
        assert_eq!(e.path.chars().count(), MAX_PATH_CHARS + 1);
        let e = Config::from_json(json!({ "log_level": long })).unwrap_err();
        assert_eq!(e.path, "log_level");
        assert!(
            e.message.chars().count() <= MAX_MESSAGE_CHARS + 1,
            "{}",
            e.message.len()
        );
    }

    #[test]
    fn an_unknown_key_names_its_path_and_the_closest_known_ones() {
        assert_eq!(
            err(json!({ "modle": "a/b" })),
            "`modle` is not an option; did you mean `mode`, `model`, `modes`?"
        );
        assert_eq!(
            err(json!({ "checkpoints": { "max_mbb": 3 } })),
            "`checkpoints.max_mbb` is not an option; did you mean `max_mb`?"
        );
        assert_eq!(
            err(json!({ "acp": { "page": 3 } })),
            "`acp.page` is not an option (known: `list_page_size`, `max_memory_mb`)"
        );
        assert!(err(json!({ "colour": true })).starts_with("`colour` is not an option (known: `model`"));
    }

    #[test]
    fn an_unknown_key_in_a_section_is_refused_with_its_path() {
        assert_eq!(
            err(json!({ "providers": { "openai": { "api_kye": "X" } } })),
            "`providers.openai.api_kye` is not an option; did you mean `api_key`?"
        );
        assert_eq!(
            err(json!({ "providers": { "openai": { "api_key_evn": "X" } } })),
            "`providers.openai.api_key_evn` is not an option; did you mean `api_key_env`?"
        );
        assert_eq!(
            err(json!({ "costs": { "daily_limit": 3 } })),
            "`costs.daily_limit` is not an option; did you mean `daily_limit_usd`?"
        );
        assert_eq!(
            err(json!({ "permissions": { "rules": [{ "tool": "bash", "actoin": "allow" }] } })),
            "`permissions.rules[0].actoin` is not an option; did you mean `action`?"
        );
        assert_eq!(
            err(json!({ "permissions": { "modes": { "ask": { "wirte": "deny" } } } })),
            "`permissions.modes.ask.wirte` is not an option; did you mean `write`?"
        );
        assert_eq!(
            err(json!({ "modes": { "review": { "tool": ["grep"] } } })),
            "`modes.review.tool` is not an option; did you mean `tools`?"
        );
        assert_eq!(
            err(json!({ "mcp": { "servers": { "git": { "comand": ["x"] } } } })),
            "`mcp.servers.git.comand` is not an option; did you mean `command`?"
        );
        assert_eq!(
            err(json!({ "rules": { "file": ["AGENTS.md"] } })),
            "`rules.file` is not an option; did you mean `files`?"
        );
        assert_eq!(
            err(json!({ "telemetry": { "otlp": { "endpont": "http://x" } } })),
            "`telemetry.otlp.endpont` is not an option; did you mean `endpoint`?"
        );
        for (section, key) in [
            ("timeouts", "connect"),
            ("retry", "retries"),
            ("http", "pool"),
            ("limits", "max_event"),
            ("tools", "turns"),
            ("review_keys", "acept"),
        ] {
            let e = err(json!({ section: { key: 1 } }));
            assert!(e.starts_with(&format!("`{section}.{key}` is not an option")), "{e}");
        }
        assert_eq!(
            err(json!({ "agents": { "claude": { "comand": ["x"] } } })),
            "`agents.claude.comand` is not an option; did you mean `command`?"
        );
        assert_eq!(
            err(json!({ "agents": { "claude": 1 } })),
            "`agents.claude` is wrong: invalid type: integer `1`, expected an object"
        );
    }

    #[test]
    fn a_section_takes_what_setup_takes() {
        let c = Config::from_json(json!({
            "providers": { "x": { "kind": "ollama", "models": {}, "headers": { "A": "b" }, "api_key": "k" } },
            "permissions": { "rules": {}, "modes": { "ask": { "write": "deny" } } },
            "retry": { "jitter": true, "multiplier": 1.5, "retry_on": ["timeout"] },
            "rules": false,
            "review_keys": { "accept": false, "reject": "R" },
            "modes": { "review": { "tools": ["grep"], "permissions": { "read": "allow" }, "switch_mode": true } },
        }))
        .unwrap();
        let x = &c.providers.as_ref().unwrap()["x"];
        assert_eq!(x.models, Some(List(Vec::new())));
        assert!(format!("{x:?}").contains("<redacted>"));
        assert!(!format!("{x:?}").contains("\"k\""), "the key is not in Debug");
        assert_eq!(c.rules, Some(RulesOption::Off));
        let c =
            Config::from_json(json!({ "rules": { "files": ["AGENTS.md"], "user_file": false, "max_kb": 8 } })).unwrap();
        assert!(matches!(
            c.rules,
            Some(RulesOption::On(RulesConfig { max_kb: Some(8), .. }))
        ));
        assert!(err(json!({ "rules": true })).starts_with("`rules` must be false or an object"));
        assert_eq!(
            err(json!({ "rules": { "max_kb": 0 } })),
            "`rules.max_kb` must be a whole number of KB from 1 to 1024 (got 0)"
        );
        assert_eq!(
            err(json!({ "costs": { "daily_limit_usd": "ten" } })),
            "`costs.daily_limit_usd` must be a number of US dollars >= 0 (got \"ten\")"
        );
        assert_eq!(
            err(json!({ "permissions": { "rules": [{ "tool": "bash", "action": "maybe" }] } })),
            "`permissions.rules[0].action` must be one of allow, ask, deny (got \"maybe\")"
        );
        assert_eq!(
            err(json!({ "providers": { "x": { "models": { "a": 1 } } } })),
            "`providers.x.models` is wrong: invalid type: map, expected a list"
        );
    }

    #[test]
    fn a_wrong_type_or_value_names_its_path_and_what_was_expected() {
        let e = err(json!({ "model": 3 }));
        assert!(
            e.starts_with("`model` is wrong: invalid type: integer `3`, expected a string"),
            "{e}"
        );
        let e = err(json!({ "checkpoints": { "max_mb": -1 } }));
        assert_eq!(e, "`checkpoints.max_mb` must be a positive whole number (got -1)");
        let e = err(json!({ "acp": { "max_memory_mb": 64 } }));
        assert_eq!(
            e,
            "`acp.max_memory_mb` must be a whole number from 128 to 65536 (got 64)"
        );
        let e = err(json!({ "log_level": "debgu" }));
        assert_eq!(
            e,
            "`log_level` must be one of error, warn, info, debug, trace (got \"debgu\"); did you mean \"debug\"?"
        );
        let e = err(json!({ "chat": { "position": "middle" } }));
        assert!(
            e.starts_with("`chat.position` must be one of right, left, bottom, top"),
            "{e}"
        );
        let e = err(json!({ "providers": [] }));
        assert!(
            e.starts_with("`providers` is wrong: invalid type: sequence, expected a map"),
            "{e}"
        );
        assert!(err(json!([1])).starts_with("`(top level)` must be an object"));
    }

    #[test]
    fn the_keys_are_the_fields() {
        let keys = Config::keys();
        assert_eq!(keys.first(), Some(&"model"));
        assert_eq!(keys.last(), Some(&"$schema"));
        assert_eq!(keys.len(), 28);
    }

    /// The LuaCATS `@field`s of `mia.Config` (lua/mia/config.lua) and the
    /// options `:h mia-config` lists (doc/mia.txt) are the type's keys, but
    /// for mia-acp's own.
    #[test]
    fn the_luacats_fields_the_doc_and_the_type_name_the_same_keys() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let lua = std::fs::read_to_string(root.join("lua/mia/config.lua")).unwrap();
        let mut luacats: Vec<&str> = lua
            .lines()
            .skip_while(|l| *l != "--- @class mia.Config")
            .skip(1)
            .map_while(|l| l.strip_prefix("--- @field "))
            .map(|l| {
                l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or("")
            })
            .collect();
        let doc = std::fs::read_to_string(root.join("doc/mia.txt")).unwrap();
        let mut documented: Vec<&str> = doc
            .lines()
            .skip_while(|l| !l.contains("*mia-config*"))
            .skip(1)
            .take_while(|l| !(l.len() > 3 && l.chars().all(|c| c == '=')))
            .filter_map(|l| {
                let name = l.strip_prefix("    ")?;
                let (name, rest) = name.split_once("  ")?;
                let _ = rest;
                (!name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')).then_some(name)
            })
            .collect();
        let mut keys: Vec<&str> = Config::keys()
            .iter()
            .copied()
            .filter(|k| !ACP_ONLY_KEYS.contains(k))
            .collect();
        keys.sort_unstable();
        luacats.sort_unstable();
        documented.sort_unstable();
        assert_eq!(luacats, keys, "LuaCATS @field of mia.Config vs the Rust type");
        assert_eq!(documented, keys, "options in :h mia-config vs the Rust type");
    }

    /// The `--- @field` names of `--- @class NAME` in lua/mia/config.lua.
    fn luacats_class(lua: &str, class: &str) -> Vec<String> {
        let head = format!("--- @class {class}");
        let mut out: Vec<String> = lua
            .lines()
            .skip_while(|l| *l != head && !l.starts_with(&format!("{head} ")))
            .skip(1)
            .take_while(|l| l.starts_with("---"))
            .filter_map(|l| l.strip_prefix("--- @field "))
            .map(|l| {
                l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Each typed section's keys, at every depth: the LuaCATS class that
    /// annotates it has the same fields, and its entry in `:h mia-config`
    /// names each of them.
    #[test]
    fn the_luacats_classes_the_doc_and_the_types_name_the_same_nested_keys() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let lua = std::fs::read_to_string(root.join("lua/mia/config.lua")).unwrap();
        let doc = std::fs::read_to_string(root.join("doc/mia.txt")).unwrap();
        let sections: [(&str, &str, &[&str]); 21] = [
            ("providers", "mia.ProviderConfig", fields_of::<ProviderEntry>()),
            ("agents", "mia.AgentConfig", fields_of::<AgentEntry>()),
            ("timeouts", "mia.Timeouts", fields_of::<TimeoutsConfig>()),
            ("retry", "mia.RetryConfig", fields_of::<RetryOptions>()),
            ("http", "mia.HttpConfig", fields_of::<HttpOptions>()),
            ("limits", "mia.Limits", fields_of::<LimitsConfig>()),
            ("permissions", "mia.PermissionConfig", fields_of::<PermissionsConfig>()),
            ("permissions", "mia.PermissionRule", fields_of::<RuleEntry>()),
            ("permissions", "mia.ModePolicy", fields_of::<PolicyEntry>()),
            ("tools", "mia.ToolsConfig", fields_of::<ToolsConfig>()),
            ("costs", "mia.CostsConfig", fields_of::<CostsConfig>()),
            ("chat", "mia.ChatConfig", fields_of::<ChatConfig>()),
            ("review_keys", "mia.ReviewKeys", fields_of::<ReviewKeys>()),
            ("checkpoints", "mia.CheckpointsConfig", fields_of::<CheckpointsConfig>()),
            ("mcp", "mia.McpConfig", fields_of::<McpConfig>()),
            ("mcp", "mia.McpServerConfig", fields_of::<McpServerEntry>()),
            ("rules", "mia.RulesConfig", fields_of::<RulesConfig>()),
            ("telemetry", "mia.TelemetryConfig", fields_of::<TelemetryConfig>()),
            ("telemetry", "mia.OtlpConfig", fields_of::<OtlpConfig>()),
            ("modes", "mia.ModeConfig", fields_of::<ModeEntry>()),
            ("sandbox", "mia.SandboxConfig", fields_of::<SandboxConfig>()),
        ];
        for (option, class, fields) in sections {
            assert!(!fields.is_empty(), "{class}: no fields read from the type");
            let mut keys: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
            keys.sort_unstable();
            assert_eq!(
                luacats_class(&lua, class),
                keys,
                "LuaCATS @field of {class} vs the Rust type"
            );
            // The option's entry: from its line to its *mia-config-OPTION* tag.
            let start = doc
                .find(&format!("\n    {option}  "))
                .unwrap_or_else(|| panic!(":h mia-config has no entry for {option}"));
            let tag = format!("*mia-config-{option}*");
            let end = start + doc[start..].find(&tag).unwrap_or_else(|| panic!("no {tag}"));
            let words: Vec<&str> = doc[start..end]
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .collect();
            for key in &keys {
                assert!(
                    words.contains(&key.as_str()),
                    ":h mia-config's {option} does not name `{key}` ({class})"
                );
            }
        }
    }
}
