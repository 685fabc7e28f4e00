//! `mia-acp --config FILE`: the options of Neovim's `setup()`, as JSON, turned
//! into what the core takes ([`CoreConfig`], [`AgentSettings`]) the way
//! `lua/mia/settings.lua` turns them for the plugin. Keys come from the
//! environment only: a key written in the file is refused (it would sit in a
//! config file other editors read).
//!
//! Every error names the option at fault and says what it must be.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::agent::AgentSettings;
use crate::checkpoint::CheckpointSettings;
use crate::config::Config;
use crate::shared::{builtin_modes, USER_MODE_PERMISSIONS};
use mia_llm::providers::CoreConfig;

/// setup() options mia-acp has no use for and cannot ignore silently
/// (its MCP servers are the ones the client sends).
const NOT_IN_ACP: [&str; 4] = ["http", "mcp", "rules", "telemetry"];

/// A mode as the client lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModeInfo {
    pub id: String,
    pub name: String,
    pub description: String,
}

/// Everything mia-acp runs with.
#[derive(Debug, Clone)]
pub struct AcpConfig {
    pub core: CoreConfig,
    pub agent: AgentSettings,
    /// The default model, "provider/model".
    pub model: String,
    /// The mode a new session starts in.
    pub mode: String,
    pub modes: Vec<ModeInfo>,
    pub system: String,
    pub log_file: Option<PathBuf>,
    pub log_level: String,
    /// Sessions per `session/list` page.
    pub page_size: usize,
    /// `acp.max_memory_mb`: see [`super::memory`].
    pub max_memory_mb: u64,
}

/// A configuration that cannot be used: the message names the option.
#[derive(Debug, thiserror::Error)]
#[error("mia-acp: {0}")]
pub struct ConfigError(pub String);

fn fail(path: &str, what: &str, got: &Value) -> ConfigError {
    let shown = match got {
        Value::Null => "nothing".to_string(),
        v => v.to_string().chars().take(80).collect(),
    };
    ConfigError(format!("`{path}` {what} (got {shown})"))
}

fn string_opt(v: &Map<String, Value>, key: &str, path: &str) -> Result<Option<String>, ConfigError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(fail(path, "must be a string", other)),
    }
}

fn object<'a>(v: &'a Map<String, Value>, key: &str) -> Result<Option<&'a Map<String, Value>>, ConfigError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(other) => Err(fail(key, "must be an object", other)),
    }
}

/// Where Neovim's mia keeps its data (`stdpath("data") .. "/mia"`): mia-acp
/// shares the store, so sessions started in one show up in the other.
fn default_data_dir() -> Option<PathBuf> {
    xdg("XDG_DATA_HOME", ".local/share").map(|d| d.join("nvim").join("mia"))
}

fn default_log_file() -> Option<PathBuf> {
    xdg("XDG_STATE_HOME", ".local/state").map(|d| d.join("nvim").join("mia-acp.log"))
}

fn xdg(var: &str, fallback: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(fallback)),
    }
}

/// Largest `--config` file read.
const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

impl AcpConfig {
    /// Reads and checks `file` (a regular file of at most 4 MiB).
    pub fn from_file(file: &Path) -> Result<AcpConfig, ConfigError> {
        // A regular file of bounded size: a FIFO or device named by mistake
        // fails at once instead of blocking or filling memory.
        let bytes = crate::tools::paths::read_regular(file, MAX_CONFIG_BYTES)
            .map_err(|e| ConfigError(format!("cannot read the configuration file {}: {e}", file.display())))?;
        let text =
            String::from_utf8(bytes).map_err(|_| ConfigError(format!("{} is not UTF-8 text", file.display())))?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| ConfigError(format!("{} is not valid JSON: {e}", file.display())))?;
        AcpConfig::from_value(value)
    }

    /// The defaults (no `--config`).
    pub fn defaults() -> Result<AcpConfig, ConfigError> {
        AcpConfig::from_value(json!({}))
    }

    /// Checks `value` (the JSON of `setup()`'s options) and builds the configuration.
    pub fn from_value(value: Value) -> Result<AcpConfig, ConfigError> {
        // The type checks the names and types of every option and gives the
        // defaults; what follows checks the sections' content. The options
        // that only matter inside Neovim (chat, review, review_keys, agents)
        // are accepted and ignored; the ones mia-acp does not implement are
        // refused, not ignored: the user would think them in force.
        let config = Config::from_json(value.clone()).map_err(|e| ConfigError(e.to_string()))?;
        let Value::Object(opts) = value else {
            return Err(fail("(top level)", "must be a JSON object of setup() options", &value));
        };
        for key in NOT_IN_ACP {
            if opts.contains_key(key) {
                return Err(ConfigError(format!(
                    "`{key}` is a setup() option mia-acp does not support (see :h mia-acp); remove it from the file"
                )));
            }
        }
        let model = config.model.clone();
        match model.split_once('/') {
            Some((p, m)) if !p.is_empty() && !m.is_empty() => {}
            _ => {
                return Err(fail(
                    "model",
                    "must be \"provider/model\", e.g. \"openai/gpt-4.1\"",
                    &json!(model),
                ))
            }
        }
        let providers = providers(&opts)?;
        let modes_json = object(&opts, "modes")?.cloned().unwrap_or_default();
        let (modes, policies, prompts, mode_tools, switching) = modes(&modes_json)?;
        let mode = config.mode.clone();
        if !modes.iter().any(|m| m.id == mode) {
            let ids: Vec<&str> = modes.iter().map(|m| m.id.as_str()).collect();
            return Err(fail(
                "mode",
                &format!("must be one of {}", ids.join(", ")),
                &json!(mode),
            ));
        }
        let permissions = object(&opts, "permissions")?.cloned().unwrap_or_default();
        let mut policies = policies;
        if let Some(user) = permissions.get("modes") {
            let Value::Object(user) = user else {
                return Err(fail("permissions.modes", "must be an object", user));
            };
            for (id, p) in user {
                let path = format!("permissions.modes.{id}");
                let Value::Object(p) = p else {
                    return Err(fail(&path, "must be an object { read, write, execute }", p));
                };
                let entry = policies
                    .entry(id.clone())
                    .or_insert_with(|| json!(USER_MODE_PERMISSIONS));
                for effect in ["read", "write", "execute"] {
                    match p.get(effect) {
                        None => {}
                        Some(Value::String(a)) if ["allow", "ask", "deny"].contains(&a.as_str()) => {
                            entry[effect] = json!(a);
                        }
                        Some(other) => {
                            return Err(fail(&format!("{path}.{effect}"), "must be allow, ask or deny", other))
                        }
                    }
                }
            }
        }
        let mut rules = match permissions.get("rules") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(r)) => r.clone(),
            Some(other) => return Err(fail("permissions.rules", "must be a list of rules", other)),
        };
        // switch_mode belongs to the modes that propose leaving themselves (architect).
        for m in &modes {
            if !switching.contains(&m.id) {
                rules.push(json!({ "tool": "switch_mode", "action": "deny", "mode": m.id }));
            }
        }
        let mut costs = object(&opts, "costs")?.cloned().unwrap_or_default();
        for (key, v) in &costs {
            let path = format!("costs.{key}");
            match key.as_str() {
                "hard_limit" if !v.is_boolean() => return Err(fail(&path, "must be true or false", v)),
                "hard_limit" => {}
                "session_warning_usd" | "session_limit_usd" | "daily_warning_usd" | "daily_limit_usd" => {
                    if !v.as_f64().is_some_and(|x| x >= 0.0) {
                        return Err(fail(&path, "must be a number of US dollars >= 0", v));
                    }
                }
                _ => {
                    return Err(fail(
                        &path,
                        "is not a cost option (session_warning_usd, session_limit_usd, daily_warning_usd, daily_limit_usd, hard_limit)",
                        v,
                    ))
                }
            }
        }
        if config.budgets == Some(false) {
            costs.insert("enabled".into(), json!(false));
        }
        let tools = object(&opts, "tools")?.cloned().unwrap_or_default();
        for (key, v) in &tools {
            if !matches!(v.as_u64(), Some(n) if n > 0) {
                return Err(fail(&format!("tools.{key}"), "must be a positive whole number", v));
            }
        }
        let checkpoints: CheckpointSettings = config.checkpoints.into();
        let data_dir = match config.data_dir.clone() {
            Some(d) if d.is_empty() => return Err(fail("data_dir", "must be a directory", &json!(d))),
            Some(d) => Some(PathBuf::from(d)),
            None => default_data_dir(),
        };
        let log_level = config.log_level.name().to_string();
        let log_file = config.log_file.clone().map(PathBuf::from).or_else(default_log_file);
        let system = config.system.clone();
        let page_size = usize::try_from(config.acp.list_page_size).unwrap_or(usize::MAX);
        let max_memory_mb = config.acp.max_memory_mb;
        for key in ["timeouts", "retry", "limits", "pricing"] {
            object(&opts, key)?;
        }

        let core = json!({
            "providers": providers,
            "timeouts": opts.get("timeouts").cloned().unwrap_or(json!({})),
            "retry": opts.get("retry").cloned().unwrap_or(json!({})),
            "limits": opts.get("limits").cloned().unwrap_or(json!({})),
            "pricing": opts.get("pricing").cloned().unwrap_or(json!({})),
        });
        let core: CoreConfig = serde_json::from_value(core).map_err(|e| {
            ConfigError(format!(
                "invalid provider, timeout, retry, limit or pricing option: {e}"
            ))
        })?;
        let mut agent = json!({
            "permissions": { "modes": policies, "rules": rules },
            "mode_prompts": prompts,
            "mode_tools": mode_tools,
            "sandbox": config.sandbox,
            "costs": costs,
            "data_dir": data_dir,
            "checkpoints": {
                "max_age_days": checkpoints.max_age_days,
                "max_bytes": checkpoints.max_bytes,
                "max_file_bytes": checkpoints.max_file_bytes,
                "max_scan_files": checkpoints.max_scan_files,
            },
        });
        for (key, v) in &tools {
            agent[key.as_str()] = v.clone();
        }
        let agent: AgentSettings = serde_json::from_value(agent)
            .map_err(|e| ConfigError(format!("invalid permissions, tools or costs option: {e}")))?;
        Ok(AcpConfig {
            core,
            agent,
            model,
            mode,
            modes,
            system,
            log_file,
            log_level,
            page_size,
            max_memory_mb,
        })
    }
}

/// `providers`: checked like `setup()` does, keys refused.
fn providers(opts: &Map<String, Value>) -> Result<Value, ConfigError> {
    let Some(user) = object(opts, "providers")? else {
        return Ok(json!({}));
    };
    let builtins = mia_llm::providers::builtin_providers();
    let all = mia_llm::providers::ProviderKind::all();
    let kinds: Vec<&str> = all.iter().map(|k| k.name()).collect();
    let mut out = Map::new();
    for (name, p) in user {
        let path = format!("providers.{name}");
        let Value::Object(p) = p else {
            return Err(fail(&path, "must be an object", p));
        };
        for key in p.keys() {
            if ![
                "kind",
                "base_url",
                "api_key_env",
                "api_key",
                "headers",
                "models",
                "prompt_caching",
                "api_version",
                "native_tools",
                "api",
            ]
            .contains(&key.as_str())
            {
                return Err(ConfigError(format!(
                    "`{path}.{key}` is not a provider option (kind, base_url, api_key_env, headers, models, prompt_caching, api_version, native_tools, api)"
                )));
            }
        }
        if p.contains_key("api_key") {
            // Never echo it.
            return Err(ConfigError(format!(
                "`{path}.api_key`: mia-acp reads keys from the environment only; remove the key from the file \
                 and name its variable instead, e.g. \"api_key_env\": \"OPENAI_API_KEY\""
            )));
        }
        let kind = match p.get("kind") {
            None | Some(Value::Null) if builtins.contains_key(name) => None,
            Some(Value::String(k)) if kinds.contains(&k.as_str()) => Some(k.clone()),
            other => {
                return Err(fail(
                    &format!("{path}.kind"),
                    &format!("must be one of {}", kinds.join(", ")),
                    other.unwrap_or(&Value::Null),
                ))
            }
        };
        let base_url = string_opt(p, "base_url", &format!("{path}.base_url"))?;
        if let Some(api) = string_opt(p, "api", &format!("{path}.api"))? {
            let named = kind.as_deref().or_else(|| builtins.get(name).map(|b| b.kind.name()));
            let speaks = named
                .and_then(mia_llm::providers::ProviderKind::named)
                .is_some_and(|k| k.format().speaks_responses());
            if api != "chat" && api != "responses" {
                return Err(fail(
                    &format!("{path}.api"),
                    "must be \"chat\" or \"responses\"",
                    &json!(api),
                ));
            }
            if !speaks {
                return Err(fail(
                    &format!("{path}.api"),
                    "is for kinds openai, azure_openai and openai_compatible",
                    &json!(api),
                ));
            }
        }
        let needs_url = kind
            .as_deref()
            .and_then(mia_llm::providers::ProviderKind::named)
            .is_some_and(|k| k.format().needs_base_url());
        if needs_url && base_url.is_none() {
            return Err(ConfigError(format!(
                "`{path}.base_url` is required for a provider of kind {}",
                kind.as_deref().unwrap_or_default()
            )));
        }
        if let Some(env) = string_opt(p, "api_key_env", &format!("{path}.api_key_env"))? {
            let valid = env.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !env.starts_with("AIza");
            if !valid {
                return Err(ConfigError(format!(
                    "`{path}.api_key_env` must be the name of an environment variable (letters, digits and _), \
                     not the key itself: put the key in that variable, e.g. \"api_key_env\": \"OPENAI_API_KEY\""
                )));
            }
        }
        let mut entry = p.clone();
        match kind {
            Some(k) => {
                entry.insert("kind".into(), json!(k));
            }
            None => {
                let k = builtins.get(name).map(|b| json!(b.kind)).unwrap_or(Value::Null);
                entry.insert("kind".into(), k);
            }
        }
        out.insert(name.clone(), Value::Object(entry));
    }
    Ok(Value::Object(out))
}

type Modes = (
    Vec<ModeInfo>,
    BTreeMap<String, Value>,
    BTreeMap<String, String>,
    BTreeMap<String, Value>,
    Vec<String>,
);

/// The built-in modes, then the user's (`modes`), with their policies,
/// prompts, tool lists and which may switch mode.
fn modes(user: &Map<String, Value>) -> Result<Modes, ConfigError> {
    let mut list = Vec::new();
    let mut policies = BTreeMap::new();
    let mut prompts = BTreeMap::new();
    let mut tools = BTreeMap::new();
    let mut switching = Vec::new();
    for m in builtin_modes() {
        list.push(ModeInfo {
            id: m.id.into(),
            name: m.name.into(),
            description: m.description.into(),
        });
        policies.insert(m.id.to_string(), json!(m.permissions));
        if let Some(s) = m.system {
            prompts.insert(m.id.to_string(), s.to_string());
        }
        if m.switch_mode {
            switching.push(m.id.to_string());
        }
    }
    for (id, m) in user {
        let path = format!("modes.{id}");
        let Value::Object(m) = m else {
            return Err(fail(&path, "must be an object", m));
        };
        let name = string_opt(m, "name", &format!("{path}.name"))?;
        let description = string_opt(m, "description", &format!("{path}.description"))?;
        match list.iter_mut().find(|x| &x.id == id) {
            Some(existing) => {
                if let Some(n) = name {
                    existing.name = n;
                }
                if let Some(d) = description {
                    existing.description = d;
                }
            }
            None => list.push(ModeInfo {
                id: id.clone(),
                name: name.unwrap_or_else(|| id.clone()),
                description: description.unwrap_or_default(),
            }),
        }
        let entry = policies
            .entry(id.clone())
            .or_insert_with(|| json!(USER_MODE_PERMISSIONS));
        if let Some(p) = m.get("permissions") {
            let Value::Object(p) = p else {
                return Err(fail(&format!("{path}.permissions"), "must be an object", p));
            };
            for (k, v) in p {
                entry[k.as_str()] = v.clone();
            }
        }
        if let Some(s) = string_opt(m, "system", &format!("{path}.system"))? {
            prompts.insert(id.clone(), s);
        }
        match m.get("tools") {
            None | Some(Value::Null) => {}
            Some(Value::Array(t)) if t.iter().all(Value::is_string) => {
                tools.insert(id.clone(), Value::Array(t.clone()));
            }
            Some(other) => return Err(fail(&format!("{path}.tools"), "must be a list of tool names", other)),
        }
        if m.get("switch_mode").and_then(Value::as_bool) == Some(true) && !switching.contains(id) {
            switching.push(id.clone());
        }
    }
    Ok((list, policies, prompts, tools, switching))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(v: Value) -> String {
        AcpConfig::from_value(v).unwrap_err().to_string()
    }

    #[test]
    fn the_defaults_are_valid_and_offer_the_three_modes() {
        let c = AcpConfig::defaults().unwrap();
        let ids: Vec<_> = c.modes.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, vec!["ask", "architect", "code"]);
        assert_eq!(c.mode, "ask");
        assert_eq!(c.page_size, 50);
        assert_eq!(c.max_memory_mb, super::super::memory::DEFAULT_MB);
    }

    #[test]
    fn errors_name_the_option_at_fault() {
        assert!(err(json!({ "model": "gpt" })).contains("`model` must be \"provider/model\""));
        assert!(
            err(json!({ "modle": "a/b" })).contains("`modle` is not an option; did you mean `mode`, `model`, `modes`?")
        );
        assert!(err(json!({ "providers": { "x": { "kind": "olama" } } })).contains(
            "`providers.x.kind` must be one of anthropic, openai, gemini, openai_compatible, azure_openai, ollama"
        ));
        assert!(err(json!({ "providers": { "x": { "kind": "openai_compatible" } } }))
            .contains("`providers.x.base_url` is required"));
        assert!(err(json!({ "costs": { "daily_limit_usd": -1 } })).contains("`costs.daily_limit_usd`"));
        assert!(err(json!({ "mode": "yolo" })).contains("`mode` must be one of ask, architect, code"));
        assert!(err(json!({ "acp": { "list_page_size": 0 } })).contains("`acp.list_page_size`"));
        // The store cuts pages at 500: a larger size is refused, not silently cut.
        assert!(err(json!({ "acp": { "list_page_size": 501 } })).contains("a whole number from 1 to 500"));
        assert!(err(json!({ "mcp": { "servers": {} } })).contains("`mcp` is a setup() option mia-acp does not support"));
        assert!(AcpConfig::from_value(json!({ "chat": { "size": 40 }, "review": "hunks" })).is_ok());
        assert!(err(json!({ "acp": { "max_memory_mb": 64 } })).contains("`acp.max_memory_mb` must be a whole number"));
        let c = AcpConfig::from_value(json!({ "acp": { "max_memory_mb": 2048 } })).unwrap();
        assert_eq!(c.max_memory_mb, 2048);
    }

    #[test]
    fn every_registered_kind_is_accepted_and_only_kinds_without_a_usual_address_need_base_url() {
        let c = AcpConfig::from_value(json!({
            "model": "gpu/qwen3:8b",
            "providers": {
                "gpu": { "kind": "ollama", "base_url": "http://127.0.0.1:11434" },
                "ollama": { "models": ["llama3.2:latest"] },
                "local": { "kind": "ollama" },
            },
        }))
        .unwrap();
        for name in ["gpu", "ollama", "local"] {
            assert_eq!(c.core.providers[name].kind.name(), "ollama", "{name}");
        }
        assert!(err(json!({ "providers": { "x": { "kind": "openai_compatible" } } }))
            .contains("`providers.x.base_url` is required for a provider of kind openai_compatible"));
    }

    #[test]
    fn api_is_chat_or_responses_and_only_for_openais_kinds() {
        let c = AcpConfig::from_value(json!({ "providers": { "openai": { "api": "responses" } } })).unwrap();
        assert_eq!(c.core.providers["openai"].api, Some(mia_llm::providers::Api::Responses));
        assert!(err(json!({ "providers": { "openai": { "api": "completions" } } }))
            .contains("`providers.openai.api` must be \"chat\" or \"responses\""));
        assert!(err(json!({ "providers": { "anthropic": { "api": "responses" } } }))
            .contains("`providers.anthropic.api` is for kinds openai, azure_openai and openai_compatible"));
    }

    #[test]
    fn a_key_in_the_file_is_refused_without_being_repeated() {
        let e = err(json!({ "providers": { "openai": { "api_key": "sk-secret-123" } } }));
        assert!(e.contains("environment only"), "{e}");
        assert!(!e.contains("sk-secret-123"), "{e}");
        let e = err(json!({ "providers": { "openai": { "api_key_env": "sk-secret-123" } } }));
        assert!(!e.contains("sk-secret-123"), "{e}");
    }

    #[test]
    fn only_architect_may_call_switch_mode_and_user_options_reach_the_core() {
        let c = AcpConfig::from_value(json!({
            "model": "scn/echo",
            "providers": { "scn": { "kind": "openai_compatible", "base_url": "http://127.0.0.1:1/v1" } },
            "tools": { "max_turns": 3 },
            "permissions": { "modes": { "ask": { "read": "allow", "write": "deny", "execute": "deny" } } },
        }))
        .unwrap();
        assert_eq!(c.agent.max_turns, 3);
        assert!(c.core.providers.contains_key("scn"));
        let p = &c.agent.permissions;
        assert!(!p.offered("ask", "switch_mode", crate::tools::ToolEffect::Read));
        assert!(p.offered("architect", "switch_mode", crate::tools::ToolEffect::Read));
        assert!(!p.offered("ask", "write_file", crate::tools::ToolEffect::Write));
    }
}
