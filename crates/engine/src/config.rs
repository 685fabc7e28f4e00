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
//! The sections whose entries are checked in depth by the front-ends
//! (`providers`, `permissions`, `modes`, …) are kept as JSON objects here: the
//! type fixes their names and that they are tables, the front-ends their
//! content.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The default model, "provider/model".
pub const DEFAULT_MODEL: &str = "anthropic/claude-sonnet-4-5";

/// The system prompt when `system` is not set (Neovim's `:Mia prompt`, the
/// chat, and mia-acp's sessions): one prompt for both front-ends, so it
/// names no editor (mia-acp runs in Zed and others).
pub const DEFAULT_SYSTEM: &str =
    "You are mia, a concise and precise coding assistant inside the user's editor. Answer in Markdown.";

/// A JSON object whose entries a front-end checks (see the module doc).
pub type Section = Option<Map<String, Value>>;

/// Every option of `setup()` / `mia-acp --config`. Field names are the keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The default model, "provider/model".
    pub model: String,
    pub providers: Section,
    /// External ACP agents (Neovim only).
    pub agents: Section,
    pub timeouts: Section,
    pub retry: Section,
    pub http: Section,
    pub limits: Section,
    pub permissions: Section,
    pub tools: Section,
    pub costs: Section,
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
    pub review_keys: Section,
    pub checkpoints: CheckpointsConfig,
    pub mcp: Section,
    /// Project rules files: `false` turns them off, else an object.
    pub rules: Option<Value>,
    pub telemetry: Section,
    pub modes: Section,
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

fn page_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole_in(d, 1, 1000, "a whole number from 1 to 1000")
}

fn memory_mb<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole_in(d, 128, 65_536, "a whole number from 128 to 65536")
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

/// The known names closest to `name` (at most two edits away), sorted: the
/// "did you mean" of an unknown key, as `setup()` computes it.
pub fn closest<'a>(name: &str, known: &[&'a str]) -> Vec<&'a str> {
    let lower = name.to_lowercase();
    let mut out: Vec<&str> = known
        .iter()
        .copied()
        // Lengths 3 apart are never 2 edits apart: no distance over a long name.
        .filter(|k| lower.len().abs_diff(k.len()) <= 2 && strsim::levenshtein(&lower, k) <= 2)
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
        assert_eq!(keys.len(), 27);
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

    /// setup() fills its defaults without loading the core: its copy of the
    /// default model and system prompt (lua/mia/config.lua) is this type's.
    #[test]
    fn setups_default_model_and_system_prompt_are_the_types() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let lua = std::fs::read_to_string(root.join("lua/mia/config.lua")).unwrap();
        let body: String = lua
            .split("local function defaults()")
            .nth(1)
            .unwrap()
            .chars()
            .take(2000)
            .collect();
        assert!(
            body.contains(&format!("model = {DEFAULT_MODEL:?},")),
            "lua/mia/config.lua defaults().model"
        );
        assert!(
            body.contains(&format!("system = {DEFAULT_SYSTEM:?},")),
            "lua/mia/config.lua defaults().system"
        );
        assert!(
            body.contains("log_level = \"info\","),
            "lua/mia/config.lua defaults().log_level"
        );
        assert!(
            body.contains(
                "checkpoints = { max_age_days = 30, max_mb = 512, max_file_kb = 4096, max_scan_files = 20000 }"
            ),
            "lua/mia/config.lua defaults().checkpoints"
        );
        assert_eq!(CheckpointsConfig::default().max_scan_files, 20_000);
    }
}
