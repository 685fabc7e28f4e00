//! What `mia_core.shared()` hands Lua is what the core itself uses: the
//! built-in providers `Providers::new` merges over, the permission defaults
//! of each mode, the order in which the registry lets tool sources replace
//! each other, the mode a run starts in, and the money format.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use mia_engine::shared::{format_tokens, format_usd, provider_views, Shared};
use mia_engine::tools::permissions::PermissionConfig;
use mia_engine::tools::registry::Registry;
use mia_engine::tools::{Tool, ToolContext, ToolEffect, ToolOutput};
use mia_llm::providers::{CoreConfig, ProviderConfig, Providers};

fn provider(value: Value) -> ProviderConfig {
    serde_json::from_value(value).unwrap()
}

#[test]
fn providers_new_merges_over_exactly_the_exposed_builtins() {
    let shared = Shared::get();
    let core = Providers::new(CoreConfig::default());
    let used: BTreeMap<String, Value> = core
        .config
        .providers
        .iter()
        .map(|(name, p)| {
            (
                name.clone(),
                json!({ "kind": p.kind, "base_url": p.base_url, "api_key_env": p.api_key_env }),
            )
        })
        .collect();
    let exposed: BTreeMap<String, Value> = shared
        .providers
        .iter()
        .map(|(name, p)| (name.clone(), serde_json::to_value(p).unwrap()))
        .collect();
    assert_eq!(used, exposed);
    assert_eq!(exposed.len(), 4, "{exposed:?}");
}

#[test]
fn an_override_of_a_builtin_is_shown_as_the_core_merges_it() {
    let user = BTreeMap::from([
        // only the URL: the kind comes from Lua (the built-in's), the key variable from the built-in
        (
            "openai".to_string(),
            provider(json!({ "kind": "openai", "base_url": "http://127.0.0.1:9/v1" })),
        ),
        // a key in setup() replaces the variable
        (
            "anthropic".to_string(),
            provider(json!({ "kind": "anthropic", "api_key": "sk-never-shown" })),
        ),
    ]);
    let views = provider_views(user.clone());
    let core = Providers::new(CoreConfig {
        providers: user,
        ..Default::default()
    });
    for (name, used) in &core.config.providers {
        let view = &views[name];
        assert_eq!(
            (view.kind, &view.base_url, &view.api_key_env),
            (used.kind, &used.base_url, &used.api_key_env),
            "{name}"
        );
        assert_eq!(view.api_key_set, used.api_key.is_some(), "{name}");
    }
    assert_eq!(views["openai"].api_key_env.as_deref(), Some("OPENAI_API_KEY"));
    assert_eq!(views["openai"].base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
    assert!(views["anthropic"].api_key_set && views["anthropic"].api_key_env.is_none());
    let shown = serde_json::to_string(&views).unwrap();
    assert!(!shown.contains("sk-never-shown"), "{shown}");
}

#[test]
fn permission_defaults_are_the_exposed_mode_policies() {
    let exposed: BTreeMap<String, _> = Shared::get()
        .modes
        .into_iter()
        .map(|m| (m.id.to_string(), m.permissions))
        .collect();
    assert_eq!(PermissionConfig::default().modes, exposed);
    // a configuration that names no modes gets the same defaults
    let from_lua: PermissionConfig = serde_json::from_value(json!({ "rules": [] })).unwrap();
    assert_eq!(from_lua.modes, exposed);
    assert_eq!(
        exposed.keys().map(String::as_str).collect::<Vec<_>>(),
        ["architect", "ask", "code"]
    );
}

struct Named(&'static str);

impl Tool for Named {
    fn name(&self) -> &str {
        "clash"
    }
    fn description(&self) -> &str {
        self.0
    }
    fn parameters(&self) -> Value {
        json!({ "type": "object" })
    }
    fn effect(&self) -> ToolEffect {
        ToolEffect::Read
    }
    fn call(&self, _: Value, _: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async { ToolOutput::ok("") })
    }
}

#[test]
fn the_registry_lets_sources_replace_each_other_in_the_exposed_order() {
    let order = Shared::get().tool_precedence;
    assert_eq!(
        serde_json::to_value(&order).unwrap(),
        json!(["builtin", "mcp", "plugin", "user", "project"])
    );
    for (i, weak) in order.iter().enumerate() {
        for strong in &order[i + 1..] {
            let r = Registry::default();
            assert!(r.register(Arc::new(Named("weak")), *weak));
            assert!(
                r.register(Arc::new(Named("strong")), *strong),
                "{strong:?} over {weak:?}"
            );
            assert!(
                !r.register(Arc::new(Named("weak again")), *weak),
                "{weak:?} over {strong:?}"
            );
            assert_eq!(r.get("clash").unwrap().description(), "strong");
        }
    }
}

#[test]
fn money_and_token_counts_are_written_by_the_cost_rules() {
    for amount in [0.0, 0.5, 0.031, 0.0004, 1.0, 12.345, -0.42, 1e-15] {
        assert_eq!(format_usd(Some(amount)), mia_cost::usd(amount));
    }
    assert_eq!(format_usd(Some(0.5)), "$0.50");
    assert_eq!(format_usd(None), "cost unknown");
    assert_eq!(format_tokens(1_247.0), mia_cost::tokens(1_247));
}

#[test]
fn lua_gets_plain_names_and_tables() {
    let value = serde_json::to_value(Shared::get()).unwrap();
    assert_eq!(value["providers"]["openai"]["kind"], "openai");
    // every registered wire format, by the name `kind` takes
    let kinds: Vec<&str> = mia_llm::wire::FORMATS.iter().map(|f| f.kind()).collect();
    assert_eq!(value["provider_kinds"], json!(kinds));
    for k in [
        "anthropic",
        "openai",
        "gemini",
        "openai_compatible",
        "azure_openai",
        "ollama",
    ] {
        assert!(kinds.contains(&k), "{k}");
    }
    // the kinds without a usual address are exactly those without a built-in provider
    let required = value["base_url_required"].as_array().unwrap();
    assert!(required.contains(&json!("openai_compatible")) && required.contains(&json!("azure_openai")));
    assert!(!required.contains(&json!("openai")) && !required.contains(&json!("ollama")));
    assert_eq!(value["modes"][1]["id"], "architect");
    assert_eq!(value["modes"][1]["switch_mode"], true);
    assert_eq!(
        value["modes"][1]["permissions"],
        json!({ "read": "allow", "write": "deny", "execute": "deny" })
    );
    assert_eq!(
        value["user_mode_permissions"],
        json!({ "read": "allow", "write": "ask", "execute": "ask" })
    );
    assert_eq!(value["default_mode"], "ask");
}

#[test]
fn options_lua_leaves_unset_get_the_cores_defaults() {
    // Lua no longer keeps its own copy of these defaults: it sends only what the user set.
    let config: CoreConfig =
        serde_json::from_value(json!({ "timeouts": { "connect_ms": 5 }, "retry": { "max_retries": 1 } })).unwrap();
    let timeouts = mia_llm::providers::Timeouts::default();
    assert_eq!(config.timeouts.connect_ms, 5);
    assert_eq!(config.timeouts.request_ms, timeouts.request_ms);
    assert_eq!(config.timeouts.stream_idle_ms, timeouts.stream_idle_ms);
    assert_eq!(config.retry.max_retries, 1);
    assert_eq!(
        config.retry.max_wait_ms,
        mia_llm::providers::RetryConfig::default().max_wait_ms
    );
    assert_eq!(config.limits, mia_llm::providers::Limits::default());
    let agent: mia_engine::agent::AgentSettings = serde_json::from_value(json!({ "max_turns": 3 })).unwrap();
    let defaults = mia_engine::tools::ToolLimits::default();
    assert_eq!(agent.max_turns, 3);
    assert_eq!(
        (agent.bash_timeout_ms, agent.max_read_bytes, agent.output_cap_bytes),
        (
            defaults.bash_timeout_ms,
            defaults.max_read_bytes,
            defaults.output_cap_bytes
        )
    );
}
