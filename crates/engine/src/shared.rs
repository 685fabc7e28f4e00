//! What the Lua side and the core must agree on, defined once, here: the
//! built-in providers, the built-in modes and their policies, the order in
//! which tool sources override each other, and how money and token counts
//! are written. Lua reads it through `mia_core.shared()` instead of keeping
//! copies that drift apart.
//!
//! Everything here is plain data (serde-serializable) or a pure function;
//! the core itself uses the same definitions: `Providers::new` merges over
//! [`mia_llm::providers::builtin_providers`], the permission defaults
//! come from [`builtin_modes`], the registry orders sources by
//! [`crate::tools::registry::ToolSource::PRECEDENCE`].

use std::collections::BTreeMap;

use serde::Serialize;

use crate::tools::permissions::{Action, ModePolicy};
use crate::tools::registry::ToolSource;
use mia_llm::providers::{builtin_providers, merged_with_builtins, ProviderConfig, ProviderKind};

/// A built-in provider as the user may override it field by field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderDefaults {
    pub kind: ProviderKind,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
}

/// A provider as the core will use it, without its secrets: whether a key
/// is set in `setup()` is a flag, never the key; header values stay out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderView {
    pub kind: ProviderKind,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    /// True when `setup()` holds the key itself (`api_key`).
    pub api_key_set: bool,
    pub builtin: bool,
}

/// A built-in mode: its label, its default action per effect, the extra
/// system prompt it adds, and whether it may offer `switch_mode`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModeDefaults {
    pub id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub permissions: ModePolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<&'static str>,
    /// Only this mode may call `switch_mode` (it proposes leaving itself).
    pub switch_mode: bool,
}

/// Everything `mia_core.shared()` hands Lua, as data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shared {
    /// Built-in providers by name.
    pub providers: BTreeMap<String, ProviderDefaults>,
    /// The wire formats a provider may speak (`providers.NAME.kind`).
    pub provider_kinds: Vec<ProviderKind>,
    /// The kinds with no usual address: their providers must set `base_url`.
    pub base_url_required: Vec<ProviderKind>,
    /// Built-in modes, in the order they are listed to the user.
    pub modes: Vec<ModeDefaults>,
    /// The policy of a user mode that sets none and names no built-in mode.
    pub user_mode_permissions: ModePolicy,
    /// The mode a chat starts in.
    pub default_mode: &'static str,
    /// Tool sources from weakest to strongest: a later one replaces an
    /// earlier one's tool of the same name, never the reverse.
    pub tool_precedence: Vec<ToolSource>,
    /// setup()'s option names (`crate::config::Config`'s keys but
    /// mia-acp's own).
    pub config_keys: Vec<&'static str>,
    /// The configuration's defaults (`crate::config::Config::default`).
    pub config_defaults: crate::config::Config,
}

const ARCHITECT_SYSTEM: &str =
    "You are in architect mode: study the code with the read-only tools and produce a concrete plan. \
When the plan is ready, call switch_mode with the plan so the user can approve it.";

/// The built-in modes, in display order. The permission defaults of the
/// core (`PermissionConfig::default`) are these policies.
pub fn builtin_modes() -> Vec<ModeDefaults> {
    use Action::*;
    vec![
        ModeDefaults {
            id: "ask",
            name: "Ask",
            description: "Asks before any change to files or any command",
            permissions: ModePolicy {
                read: Allow,
                write: Ask,
                execute: Ask,
            },
            system: None,
            switch_mode: false,
        },
        ModeDefaults {
            id: "architect",
            name: "Architect",
            description: "Plans and designs with read-only tools; proposes switching mode when the plan is ready",
            permissions: ModePolicy {
                read: Allow,
                write: Deny,
                execute: Deny,
            },
            system: Some(ARCHITECT_SYSTEM),
            switch_mode: true,
        },
        ModeDefaults {
            id: "code",
            name: "Code",
            description: "Full tool access; file changes inside the project are accepted without asking",
            permissions: ModePolicy {
                read: Allow,
                write: Allow,
                execute: Ask,
            },
            system: None,
            switch_mode: false,
        },
    ]
}

/// The policy of a user-defined mode that sets no permissions of its own.
pub const USER_MODE_PERMISSIONS: ModePolicy = ModePolicy {
    read: Action::Allow,
    write: Action::Ask,
    execute: Action::Ask,
};

/// The mode a chat starts in when `setup()` names none.
pub const DEFAULT_MODE: &str = "ask";

impl Shared {
    /// The shared facts, built from the definitions the core uses.
    pub fn get() -> Shared {
        let providers = builtin_providers()
            .into_iter()
            .map(|(name, p)| {
                (
                    name,
                    ProviderDefaults {
                        kind: p.kind,
                        base_url: p.base_url,
                        api_key_env: p.api_key_env,
                    },
                )
            })
            .collect();
        Shared {
            providers,
            provider_kinds: ProviderKind::all(),
            base_url_required: ProviderKind::all()
                .into_iter()
                .filter(|k| k.format().needs_base_url())
                .collect(),
            modes: builtin_modes(),
            user_mode_permissions: USER_MODE_PERMISSIONS,
            default_mode: DEFAULT_MODE,
            tool_precedence: ToolSource::PRECEDENCE.to_vec(),
            config_keys: crate::config::Config::keys()
                .iter()
                .copied()
                .filter(|k| !crate::config::ACP_ONLY_KEYS.contains(k))
                .collect(),
            config_defaults: crate::config::Config::default(),
        }
    }
}

/// The providers the core would use for `user` (the `providers` of
/// `setup()`): each entry merged field by field over the built-in of the
/// same name, exactly as `Providers::new` merges them, without secrets.
pub fn provider_views(user: BTreeMap<String, ProviderConfig>) -> BTreeMap<String, ProviderView> {
    let builtins = builtin_providers();
    merged_with_builtins(user)
        .into_iter()
        .map(|(name, p)| {
            let view = ProviderView {
                kind: p.kind,
                base_url: p.base_url,
                api_key_env: p.api_key_env,
                api_key_set: p.api_key.is_some(),
                builtin: builtins.contains_key(&name),
            };
            (name, view)
        })
        .collect()
}

/// A dollar amount as mia writes it everywhere ([`mia_cost::format::usd`]);
/// no amount at all is "cost unknown", never a misleading `$0.00`.
pub fn format_usd(amount: Option<f64>) -> String {
    match amount {
        Some(v) => mia_cost::format::usd(v),
        None => "cost unknown".to_string(),
    }
}

/// A token count with thousands separators, from whatever number Lua holds:
/// fractions are dropped, negative or not-a-number counts are 0.
pub fn format_tokens(count: f64) -> String {
    // `as` saturates: NaN becomes 0, a huge count u64::MAX.
    mia_cost::format::tokens(count.max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_amounts_say_so_and_odd_token_counts_never_panic() {
        assert_eq!(format_usd(None), "cost unknown");
        assert_eq!(format_usd(Some(0.5)), "$0.50");
        assert_eq!(format_tokens(-3.0), "0");
        assert_eq!(format_tokens(f64::NAN), "0");
        assert_eq!(format_tokens(1234.9), "1,234");
        assert_eq!(format_tokens(f64::INFINITY), "18,446,744,073,709,551,615");
    }

    #[test]
    fn the_default_mode_is_a_builtin_one() {
        assert!(builtin_modes().iter().any(|m| m.id == DEFAULT_MODE));
    }

    #[test]
    fn only_architect_may_switch_mode() {
        let switching: Vec<_> = builtin_modes()
            .into_iter()
            .filter(|m| m.switch_mode)
            .map(|m| m.id)
            .collect();
        assert_eq!(switching, vec!["architect"]);
    }
}
