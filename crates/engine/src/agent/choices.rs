//! What an agent lets the user choose, as it announced it in ACP's shapes
//! (its `modes` and its `configOptions`), and the check of a choice
//! against that: a choice the agent does not offer is refused here, at
//! once, with one message naming what it does offer. The same rules hold
//! for mia's own agent and an external one.

use serde_json::Value;

use super::ModeInfo;

/// A choice the agent does not offer, with what it offers instead.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChoiceError {
    #[error("mia: unknown mode `{mode}`. Modes: {modes}")]
    UnknownOwnMode { mode: String, modes: String },
    /// `tail` lists its modes and its settings (or says it has none).
    #[error("mia: the agent `{agent}` has no mode `{mode}`{tail}")]
    NoMode { agent: String, mode: String, tail: String },
    /// `tail` lists its settings (or says it has none).
    #[error("mia: the agent `{agent}` has no setting `{id}`{tail}")]
    NoSetting { agent: String, id: String, tail: String },
    #[error("mia: `{value}` is not a value of {agent}'s setting `{id}`. Values: {values}")]
    NoValue {
        agent: String,
        id: String,
        value: String,
        values: String,
    },
}

/// The ids of the modes `info` (an agent's `{ modes, configOptions }`) lists.
pub fn mode_ids(info: &Value) -> Vec<String> {
    info.pointer("/modes/availableModes")
        .and_then(Value::as_array)
        .map(|modes| {
            modes
                .iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The settings `info` lists that a user can set: selects and booleans with an id.
pub fn settings(info: &Value) -> Vec<&Value> {
    info.get("configOptions")
        .and_then(Value::as_array)
        .map(|options| {
            options
                .iter()
                .filter(|o| o.get("id").is_some_and(Value::is_string))
                .filter(|o| matches!(o.get("type").and_then(Value::as_str), Some("select" | "boolean")))
                .collect()
        })
        .unwrap_or_default()
}

fn setting_id(option: &Value) -> &str {
    option.get("id").and_then(Value::as_str).unwrap_or_default()
}

/// A value as Lua's `tostring` writes it (a select's values may be numbers).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A setting's values: a boolean's `true` and `false`, a select's options
/// (its groups flattened), in order.
pub fn setting_values(option: &Value) -> Vec<String> {
    if option.get("type").and_then(Value::as_str) == Some("boolean") {
        return vec!["true".into(), "false".into()];
    }
    let mut out = Vec::new();
    let mut add = |o: &Value| {
        if let Some(v) = o.get("value").filter(|v| !v.is_null()) {
            out.push(text(v));
        }
    };
    for o in option.get("options").and_then(Value::as_array).into_iter().flatten() {
        match o.get("options").and_then(Value::as_array) {
            Some(group) => group.iter().for_each(&mut add),
            None => add(o),
        }
    }
    out
}

/// Refuses `mode` unless mia's own agent offers it (`modes`).
pub fn check_own_mode(modes: &[ModeInfo], mode: &str) -> Result<(), ChoiceError> {
    if modes.iter().any(|m| m.id == mode) {
        return Ok(());
    }
    let ids: Vec<&str> = modes.iter().map(|m| m.id.as_str()).collect();
    Err(ChoiceError::UnknownOwnMode {
        mode: mode.to_string(),
        modes: ids.join(", "),
    })
}

/// Refuses `mode` unless the agent `agent` listed it in `info`.
pub fn check_mode(agent: &str, info: &Value, mode: &str) -> Result<(), ChoiceError> {
    let known = mode_ids(info);
    if known.iter().any(|m| m == mode) {
        return Ok(());
    }
    let mut tail = if known.is_empty() {
        " (it lists no modes)".to_string()
    } else {
        format!(". Its modes: {}", known.join(", "))
    };
    let ids: Vec<&str> = settings(info).into_iter().map(setting_id).collect();
    if !ids.is_empty() {
        tail.push_str(&format!(
            ". Its settings (:Mia mode {{setting}} {{value}}): {}",
            ids.join(", ")
        ));
    }
    Err(ChoiceError::NoMode {
        agent: agent.to_string(),
        mode: mode.to_string(),
        tail,
    })
}

/// What `session/set_config_option` sends for setting `id` = `value` (a
/// boolean's `true`/`false` as JSON booleans), or the refusal naming the
/// settings or values the agent `agent` listed in `info`.
pub fn check_setting(agent: &str, info: &Value, id: &str, value: &str) -> Result<Value, ChoiceError> {
    let listed = settings(info);
    let Some(option) = listed.iter().find(|o| setting_id(o) == id) else {
        let ids: Vec<&str> = listed.iter().map(|o| setting_id(o)).collect();
        return Err(ChoiceError::NoSetting {
            agent: agent.to_string(),
            id: id.to_string(),
            tail: if ids.is_empty() {
                " (it lists no settings)".to_string()
            } else {
                format!(". Its settings: {}", ids.join(", "))
            },
        });
    };
    let values = setting_values(option);
    if !values.iter().any(|v| v == value) {
        return Err(ChoiceError::NoValue {
            agent: agent.to_string(),
            id: id.to_string(),
            value: value.to_string(),
            values: values.join(", "),
        });
    }
    Ok(if option.get("type").and_then(Value::as_str) == Some("boolean") {
        Value::Bool(value == "true")
    } else {
        Value::String(value.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info() -> Value {
        json!({
            "modes": { "currentModeId": "careful", "availableModes": [
                { "id": "careful", "name": "Careful" }, { "id": "bold", "name": "Bold" } ] },
            "configOptions": [
                { "id": "model", "name": "Model", "type": "select", "currentValue": "fast",
                  "options": [ { "value": "fast", "name": "Fast" }, { "group": "g", "name": "G",
                               "options": [ { "value": "smart", "name": "Smart" } ] } ] },
                { "id": "think", "name": "Think", "type": "boolean", "currentValue": false },
                { "id": "odd", "type": "text" },
            ],
        })
    }

    #[test]
    fn a_listed_mode_passes_and_another_is_refused_naming_modes_and_settings() {
        assert_eq!(check_mode("tools", &info(), "bold"), Ok(()));
        assert_eq!(
            check_mode("tools", &info(), "nosuch").unwrap_err().to_string(),
            "mia: the agent `tools` has no mode `nosuch`. Its modes: careful, bold. \
             Its settings (:Mia mode {setting} {value}): model, think"
        );
        assert_eq!(
            check_mode("x", &json!({}), "a").unwrap_err().to_string(),
            "mia: the agent `x` has no mode `a` (it lists no modes)"
        );
    }

    #[test]
    fn a_setting_takes_only_its_values_and_a_boolean_is_sent_as_one() {
        assert_eq!(check_setting("t", &info(), "model", "smart"), Ok(json!("smart")));
        assert_eq!(check_setting("t", &info(), "think", "true"), Ok(json!(true)));
        assert_eq!(
            check_setting("t", &info(), "model", "turbo").unwrap_err().to_string(),
            "mia: `turbo` is not a value of t's setting `model`. Values: fast, smart"
        );
        assert_eq!(
            check_setting("t", &info(), "odd", "1").unwrap_err().to_string(),
            "mia: the agent `t` has no setting `odd`. Its settings: model, think"
        );
        assert_eq!(
            check_setting("t", &json!({}), "a", "1").unwrap_err().to_string(),
            "mia: the agent `t` has no setting `a` (it lists no settings)"
        );
    }

    #[test]
    fn mias_own_modes_refuse_an_unknown_one_listing_them() {
        let modes = crate::agent::AgentSettings::default().modes;
        assert_eq!(check_own_mode(&modes, "code"), Ok(()));
        assert_eq!(
            check_own_mode(&modes, "nope").unwrap_err().to_string(),
            "mia: unknown mode `nope`. Modes: ask, architect, code"
        );
    }
}
