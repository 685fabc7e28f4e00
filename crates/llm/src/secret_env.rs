//! The environment variables mia reads keys from, kept from the programs it
//! starts.
//!
//! Redacting a key's literal value from a command's output is not enough:
//! `printenv OPENAI_API_KEY | rev` or `| base64` hands it over in another
//! spelling. So a command the model runs (`bash`), a terminal an external
//! agent opens, an MCP server and an external agent do not inherit any
//! variable named here, unless the user's config for that server or agent
//! passes it explicitly (its `env` table): that is how one is passed on
//! purpose.
//!
//! The names are the built-in providers' key variables, every
//! `api_key_env` any configuration has named in this process (added by
//! [`crate::providers::Providers::new`], never removed: a variable
//! that once held a key stays hidden), and the OpenTelemetry header
//! variables (they carry the telemetry endpoint's credentials).

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};

/// Key variables hidden even before any configuration names them.
pub const DEFAULT: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
];

fn configured() -> &'static Mutex<BTreeSet<String>> {
    static NAMES: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    NAMES.get_or_init(Mutex::default)
}

/// Adds the variables a configuration reads keys from.
pub fn register<I, S>(names: I)
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut set = configured().lock().unwrap_or_else(|p| p.into_inner());
    set.extend(names.into_iter().map(Into::into).filter(|n| !n.is_empty()));
}

/// Every variable mia reads keys from, sorted.
pub fn names() -> Vec<String> {
    let set = configured().lock().unwrap_or_else(|p| p.into_inner());
    let mut all: BTreeSet<String> = set.clone();
    all.extend(DEFAULT.iter().map(|s| s.to_string()));
    all.into_iter().collect()
}

/// The variables a program must not inherit: [`names`] minus those its own
/// config passes on purpose (`passed`).
pub fn hidden_from(passed: impl Fn(&str) -> bool) -> Vec<String> {
    names().into_iter().filter(|n| !passed(n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_key_variables_join_the_defaults_and_explicit_ones_pass() {
        register(["MIA_TEST_SECRET_ENV_KEY", ""]);
        let all = names();
        assert!(all.contains(&"MIA_TEST_SECRET_ENV_KEY".to_string()));
        assert!(all.contains(&"OPENAI_API_KEY".to_string()));
        assert!(!all.contains(&String::new()));
        let hidden = hidden_from(|n| n == "OPENAI_API_KEY");
        assert!(!hidden.contains(&"OPENAI_API_KEY".to_string()));
        assert!(hidden.contains(&"MIA_TEST_SECRET_ENV_KEY".to_string()));
    }
}
