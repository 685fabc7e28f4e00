//! Argument validation: a tool only runs with arguments that match its JSON
//! Schema; anything else goes back to the model as a tool error it can fix.

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use super::ToolError;

/// A tool's parameter schema, compiled once: on the first call checked
/// against it (see [`super::registry::Registry::get_checked`]), on the
/// runtime rather than at registration, which happens on Neovim's main
/// thread (the built-in tools' schemas cost ~1.5 ms there before the first
/// prompt could go out). A call is only checked, never compiled again. A
/// schema that does not compile keeps its error, reported at each call.
#[derive(Debug, Clone)]
pub struct Compiled(Arc<Lazy>);

#[derive(Debug)]
struct Lazy {
    schema: Value,
    validator: OnceLock<Result<jsonschema::Validator, String>>,
}

impl Compiled {
    fn validator(&self) -> &Result<jsonschema::Validator, String> {
        self.0
            .validator
            .get_or_init(|| jsonschema::validator_for(&self.0.schema).map_err(|e| e.to_string()))
    }
}

/// Holds `schema` for [`check`], which compiles it on first use.
pub fn compile(schema: &Value) -> Compiled {
    Compiled(Arc::new(Lazy {
        schema: schema.clone(),
        validator: OnceLock::new(),
    }))
}

/// Checks `args` against `schema`; the error lists every problem in one
/// message written for the model ("`path`: … is a required property").
/// Compiles the schema each time: a registered tool's calls use [`check`].
pub fn validate(tool: &str, schema: &Value, args: &Value) -> Result<(), ToolError> {
    check(tool, &compile(schema), args)
}

/// [`validate`] against a schema compiled beforehand.
pub fn check(tool: &str, compiled: &Compiled, args: &Value) -> Result<(), ToolError> {
    if let Value::String(raw) = args {
        let start: String = raw.chars().take(200).collect();
        return Err(ToolError::InvalidArguments(format!(
            "Invalid arguments for `{tool}`: they are not valid JSON ({start}). Call `{tool}` again with a JSON object."
        )));
    }
    let validator = match compiled.validator() {
        Ok(v) => v,
        Err(e) => {
            return Err(ToolError::InvalidSchema(format!(
                "`{tool}` has an invalid parameter schema ({e}); it cannot be called."
            )))
        }
    };
    let problems: Vec<String> = validator
        .iter_errors(args)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("`{at}`: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ToolError::InvalidArguments(format!(
            "Invalid arguments for `{tool}`: {}. Fix the arguments and call `{tool}` again.",
            problems.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
               "required": ["path"], "additionalProperties": false})
    }

    #[test]
    fn valid_arguments_pass() {
        assert_eq!(
            validate("read_file", &schema(), &json!({"path": "a", "limit": 3})),
            Ok(())
        );
    }

    #[test]
    fn every_problem_is_named_for_the_model() {
        let err = validate("read_file", &schema(), &json!({"limit": "x", "nope": 1}))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("Invalid arguments for `read_file`: "), "{err}");
        assert!(err.contains("\"path\" is a required property"), "{err}");
        assert!(err.contains("`/limit`"), "{err}");
        assert!(err.ends_with("Fix the arguments and call `read_file` again."), "{err}");
    }

    #[test]
    fn unparseable_arguments_are_refused() {
        let err = validate("read_file", &schema(), &Value::String("{\"path\":".into()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not valid JSON"), "{err}");
    }

    #[test]
    fn a_precompiled_schema_gives_the_same_answers() {
        let compiled = compile(&schema());
        for args in [
            json!({"path": "a"}),
            json!({"limit": "x", "nope": 1}),
            Value::String("{".into()),
        ] {
            assert_eq!(
                check("read_file", &compiled, &args),
                validate("read_file", &schema(), &args)
            );
        }
    }

    #[test]
    fn an_invalid_schema_is_reported_at_each_call() {
        let bad = json!({"type": "object", "properties": {"path": {"type": "nonsense"}}});
        let compiled = compile(&bad);
        let err = check("t", &compiled, &json!({})).unwrap_err();
        assert!(matches!(err, ToolError::InvalidSchema(_)), "{err:?}");
        assert_eq!(err, validate("t", &bad, &json!({})).unwrap_err());
        assert!(
            err.to_string().starts_with("`t` has an invalid parameter schema (")
                && err.to_string().ends_with("); it cannot be called."),
            "{err}"
        );
    }
}
