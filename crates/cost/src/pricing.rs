//! Model prices and how a `"provider/model"` finds its price.
//!
//! The built-in prices come from `data/pricing.json`, generated from the
//! models.dev catalogue by `scripts/gen_pricing.py` and embedded in the
//! library, so pricing needs no file or network at run time. Users add or
//! correct prices with `setup({ pricing = { ["provider/model"] = {...} } })`.
//!
//! A lookup never guesses: a model that matches none of the rules below has
//! no price, and its cost is reported as unknown rather than as $0.00.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::model_id;

/// The embedded catalogue prices (see `scripts/gen_pricing.py`).
const BUILTIN_JSON: &str = include_str!("../../../data/pricing.json");

/// How mia's built-in provider names map to the catalogue's. Providers not
/// listed (`openai`, `anthropic`, `deepseek`, `groq`, `xai`, `mistral`) use
/// the same name in both.
const PROVIDER_ALIASES: &[(&str, &str)] = &[("gemini", "google")];

/// The prices of one model, in USD per million tokens.
///
/// `cache_read` and `cache_write` are `None` when the catalogue lists no
/// separate price; such tokens then cost 0 (see
/// [`super::math::rates`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    /// Long-context prices, applied to a whole request whose prompt is above
    /// a tier's threshold (Gemini 2.5 Pro above 200k tokens, for instance).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<Tier>,
    /// The model's context window in tokens, where the catalogue knows it.
    /// Not a price: read by `:Mia context` and the statusline's fill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<u64>,
    /// Whether the model takes images (the catalogue's `attachment`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<bool>,
}

/// The prices that replace a model's base prices for a large prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// The tier applies when input + cache read + cache write tokens exceed this.
    pub above_input_tokens: u64,
    pub input: f64,
    pub output: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

/// Why a price table could not be built.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PricingError {
    #[error("mia: the price table is not valid JSON of the expected shape: {reason}")]
    InvalidTable { reason: String },
    #[error("mia: pricing key `{key}` must be \"provider/model\", e.g. \"openai/gpt-4.1\"")]
    OverrideKey { key: String },
    #[error("mia: pricing[\"{key}\"]: {field} must be a finite number of USD per million tokens, not below 0")]
    InvalidPrice { key: String, field: &'static str },
}

/// Where a lookup found its price: the catalogue's provider and model id,
/// which differ from the requested ones after a provider mapping or an alias.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resolved<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub price: &'a Price,
}

/// One provider's prices by model id.
type Models = BTreeMap<String, Price>;

/// A lookup rule applied within one provider's models (see [`PricingRegistry::price`]).
type Rule = for<'a> fn(&'a String, &'a Models, &str) -> Option<Resolved<'a>>;

/// Prices by catalogue provider, then model id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PricingRegistry {
    providers: BTreeMap<String, Models>,
}

/// The shape of `data/pricing.json`.
#[derive(Deserialize)]
struct PricingFile {
    models: BTreeMap<String, Price>,
}

impl PricingRegistry {
    /// The prices embedded in the library, parsed on first use.
    ///
    /// The embedded file is checked by a unit test; should it ever fail to
    /// parse anyway, every model is unknown (and the failure is logged)
    /// rather than the plugin failing to load.
    pub fn builtin() -> &'static PricingRegistry {
        static BUILTIN: OnceLock<PricingRegistry> = OnceLock::new();
        BUILTIN.get_or_init(|| {
            PricingRegistry::from_json(BUILTIN_JSON).unwrap_or_else(|e| {
                tracing::error!("{e}");
                PricingRegistry::default()
            })
        })
    }

    /// The built-in prices with the user's `setup({ pricing = ... })` on
    /// top: an override replaces the built-in price of the same model and
    /// adds models the catalogue lacks. Keys are `"provider/model"` with
    /// mia's provider names (`gemini/...`) or the catalogue's (`google/...`).
    pub fn with_overrides(overrides: HashMap<String, Price>) -> Result<PricingRegistry, PricingError> {
        PricingRegistry::builtin().clone().overridden(overrides)
    }

    /// This table with `overrides` applied (see [`PricingRegistry::with_overrides`]).
    pub fn overridden(mut self, overrides: HashMap<String, Price>) -> Result<PricingRegistry, PricingError> {
        for (key, price) in overrides {
            let Some((provider, model)) = key.split_once('/').filter(|(p, m)| !p.is_empty() && !m.is_empty()) else {
                return Err(PricingError::OverrideKey { key });
            };
            validate(&key, &price)?;
            let provider = catalogue_provider(provider).to_string();
            let model = model.to_string();
            self.providers.entry(provider).or_default().insert(model, price);
        }
        Ok(self)
    }

    /// A table from JSON of `data/pricing.json`'s shape:
    /// `{ "models": { "provider/model": { "input": .., "output": .., ... } } }`.
    pub fn from_json(text: &str) -> Result<PricingRegistry, PricingError> {
        let file: PricingFile =
            serde_json::from_str(text).map_err(|e| PricingError::InvalidTable { reason: e.to_string() })?;
        PricingRegistry::default().overridden(file.models.into_iter().collect())
    }

    /// The price of `model` as served by `provider` (mia's provider name).
    ///
    /// Rules, first match wins:
    /// 1. the exact `provider/model`, with `provider` as written and then
    ///    mapped to the catalogue's name (`gemini` → `google`);
    /// 2. a dated id's undated alias under the same provider
    ///    (`claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`, or the
    ///    `-latest` alias Mistral uses), and the other way round: an undated
    ///    id's `-latest` alias, or its dated variants when they all agree on
    ///    the price (one dated variant, or several with equal prices);
    /// 3. for a provider that is not one of mia's built-ins (a user-named
    ///    OpenAI-compatible server such as `myproxy`), the model id alone
    ///    when exactly one provider has it (by rule 1, else by rule 2).
    ///    Such a server may charge differently; an override for
    ///    `myproxy/model` states its real price and wins by rule 1.
    ///
    /// Otherwise `None`: the price is unknown.
    pub fn price(&self, provider: &str, model: &str) -> Option<&Price> {
        self.resolve(provider, model).map(|r| r.price)
    }

    /// Like [`PricingRegistry::price`], also saying which catalogue entry answered.
    pub fn resolve(&self, provider: &str, model: &str) -> Option<Resolved<'_>> {
        let mapped = catalogue_provider(provider);
        let names: &[&str] = if mapped == provider {
            &[provider]
        } else {
            &[provider, mapped]
        };
        let known = names
            .iter()
            .filter_map(|name| self.providers.get_key_value(*name))
            .collect::<Vec<_>>();
        for (name, models) in &known {
            if let Some(found) = exact(name, models, model) {
                return Some(found);
            }
        }
        for (name, models) in &known {
            if let Some(found) = by_alias(name, models, model) {
                return Some(found);
            }
        }
        if is_builtin_provider(provider) {
            return None;
        }
        self.unique_elsewhere(model)
    }

    /// The models the table prices for a catalogue provider (`google`, not
    /// `gemini`), in id order.
    pub fn models_of(&self, catalogue_provider: &str) -> impl Iterator<Item = (&str, &Price)> {
        self.providers
            .get(catalogue_provider)
            .into_iter()
            .flat_map(|models| models.iter().map(|(m, p)| (m.as_str(), p)))
    }

    /// Rule 3: the single provider that has `model`, exactly or by alias.
    fn unique_elsewhere(&self, model: &str) -> Option<Resolved<'_>> {
        let rules: [Rule; 2] = [exact, by_alias];
        for rule in rules {
            let mut hits = self
                .providers
                .iter()
                .filter_map(|(name, models)| rule(name, models, model));
            match (hits.next(), hits.next()) {
                (Some(only), None) => return Some(only),
                (Some(_), Some(_)) => return None,
                _ => {}
            }
        }
        None
    }
}

/// The catalogue's name for one of mia's provider names.
pub(crate) fn catalogue_provider(provider: &str) -> &str {
    PROVIDER_ALIASES
        .iter()
        .find(|(mia, _)| *mia == provider)
        .map_or(provider, |(_, catalogue)| catalogue)
}

/// mia's built-in provider names: a model they do not price is unknown,
/// never borrowed from another provider.
fn is_builtin_provider(provider: &str) -> bool {
    matches!(
        catalogue_provider(provider),
        "openai" | "anthropic" | "google" | "deepseek" | "groq" | "xai" | "mistral"
    )
}

fn exact<'a>(provider: &'a String, models: &'a Models, model: &str) -> Option<Resolved<'a>> {
    models.get_key_value(model).map(|(m, price)| Resolved {
        provider,
        model: m,
        price,
    })
}

/// Rule 2 within one provider.
fn by_alias<'a>(provider: &'a String, models: &'a Models, model: &str) -> Option<Resolved<'a>> {
    let base = match model_id::undated(model) {
        // Dated: the undated id, then its `-latest` alias.
        Some(base) if model_id::has_date(model) => {
            return exact(provider, models, base).or_else(|| exact(provider, models, &format!("{base}-latest")));
        }
        // `x-latest`: the plain `x`, then x's dated variants.
        Some(base) => {
            if let Some(found) = exact(provider, models, base) {
                return Some(found);
            }
            base
        }
        // Undated: `x-latest`, then x's dated variants.
        None => {
            if let Some(found) = exact(provider, models, &format!("{model}-latest")) {
                return Some(found);
            }
            model
        }
    };
    let mut variants = models
        .iter()
        .filter(|(id, _)| model_id::has_date(id) && model_id::undated(id) == Some(base));
    let (first_id, first_price) = variants.next()?;
    if variants.all(|(_, price)| same_prices(price, first_price)) {
        Some(Resolved {
            provider,
            model: first_id,
            price: first_price,
        })
    } else {
        None
    }
}

/// Whether two entries bill alike (their context window or image support may differ).
fn same_prices(a: &Price, b: &Price) -> bool {
    a.input == b.input
        && a.output == b.output
        && a.cache_read == b.cache_read
        && a.cache_write == b.cache_write
        && a.tiers == b.tiers
}

fn validate(key: &str, price: &Price) -> Result<(), PricingError> {
    let check = |field: &'static str, value: Option<f64>| match value {
        Some(v) if !v.is_finite() || v < 0.0 => Err(PricingError::InvalidPrice {
            key: key.to_string(),
            field,
        }),
        _ => Ok(()),
    };
    check("input", Some(price.input))?;
    check("output", Some(price.output))?;
    check("cache_read", price.cache_read)?;
    check("cache_write", price.cache_write)?;
    for tier in &price.tiers {
        check("tiers[].input", Some(tier.input))?;
        check("tiers[].output", Some(tier.output))?;
        check("tiers[].cache_read", tier.cache_read)?;
        check("tiers[].cache_write", tier.cache_write)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(input: f64, output: f64) -> Price {
        Price {
            input,
            output,
            cache_read: None,
            cache_write: None,
            tiers: Vec::new(),
            ..Price::default()
        }
    }

    #[test]
    fn embedded_price_table_parses() {
        let table = PricingRegistry::from_json(BUILTIN_JSON).unwrap();
        assert!(table.models_of("anthropic").count() > 10);
        assert!(table.models_of("google").count() > 10);
        assert_eq!(PricingRegistry::builtin(), &table);
    }

    #[test]
    fn undated_id_with_differently_priced_dated_variants_is_unknown() {
        let table = PricingRegistry::default()
            .overridden(HashMap::from([
                ("openai/gpt-9-2030-01-01".to_string(), flat(1.0, 2.0)),
                ("openai/gpt-9-2030-06-01".to_string(), flat(3.0, 4.0)),
            ]))
            .unwrap();
        assert_eq!(table.price("openai", "gpt-9"), None);
    }

    #[test]
    fn undated_id_with_equally_priced_dated_variants_has_their_price() {
        let table = PricingRegistry::default()
            .overridden(HashMap::from([
                ("openai/gpt-9-2030-01-01".to_string(), flat(1.0, 2.0)),
                ("openai/gpt-9-2030-06-01".to_string(), flat(1.0, 2.0)),
            ]))
            .unwrap();
        assert_eq!(table.price("openai", "gpt-9"), Some(&flat(1.0, 2.0)));
    }

    #[test]
    fn dated_id_falls_back_to_the_latest_alias() {
        let table = PricingRegistry::default()
            .overridden(HashMap::from([(
                "mistral/mistral-large-latest".to_string(),
                flat(0.5, 1.5),
            )]))
            .unwrap();
        assert_eq!(table.price("mistral", "mistral-large-2607"), Some(&flat(0.5, 1.5)));
        assert_eq!(table.price("mistral", "mistral-large"), Some(&flat(0.5, 1.5)));
    }

    #[test]
    fn malformed_override_keys_and_prices_are_refused() {
        let err = PricingRegistry::with_overrides(HashMap::from([("gpt-4.1".to_string(), flat(1.0, 1.0))]));
        assert_eq!(
            err.unwrap_err(),
            PricingError::OverrideKey {
                key: "gpt-4.1".to_string()
            }
        );
        let err = PricingRegistry::with_overrides(HashMap::from([("openai/x".to_string(), flat(-1.0, 1.0))]));
        assert!(matches!(err, Err(PricingError::InvalidPrice { field: "input", .. })));
    }
}
