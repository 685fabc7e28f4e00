//! An MCP server's resources and prompts as mia keeps them (issue 13):
//! what `resources/list` and `prompts/list` name, and how a read resource
//! or a prompt's messages become text for the model. Plain data and pure
//! functions; everything from the server is bounded here.

use serde::Serialize;
use serde_json::Value;

use super::cut;

/// Most list pages read from one server (`resources/list`, `prompts/list`).
pub const MAX_PAGES: usize = 20;
/// Most resources, and most prompts, taken from one server.
pub const MAX_ITEMS: usize = 1000;
/// Longest resource URI kept (a longer one is left out: a cut URI reads nothing).
const MAX_URI: usize = 2048;
/// Longest prompt name kept (a longer one is left out).
const MAX_NAME: usize = 200;
/// Longest description (and resource name) kept; longer ones are cut.
const MAX_TEXT: usize = 500;
/// Most arguments kept of one prompt.
const MAX_ARGS: usize = 32;
/// Most bytes of one resource's text attached to a message.
pub const RESOURCE_CAP_BYTES: usize = 64 * 1024;
/// Most bytes of a prompt's messages sent as the user's message.
pub const PROMPT_CAP_BYTES: usize = 64 * 1024;

/// One resource as a server lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpResourceDef {
    pub uri: String,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mime_type: String,
}

fn text_of(v: &Value, key: &str) -> String {
    let mut s = v.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    cut(&mut s, MAX_TEXT);
    s
}

impl McpResourceDef {
    /// Reads one resource of `resources/list`; `None` without a usable URI.
    pub fn from_json(v: &Value) -> Option<McpResourceDef> {
        let uri = v.get("uri")?.as_str()?;
        if uri.is_empty() || uri.len() > MAX_URI || uri.chars().any(char::is_whitespace) {
            return None;
        }
        let mut name = text_of(v, "name");
        if name.is_empty() {
            name = text_of(v, "title");
        }
        Some(McpResourceDef {
            uri: uri.to_string(),
            name,
            description: text_of(v, "description"),
            mime_type: text_of(v, "mimeType"),
        })
    }
}

/// One argument of a prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpPromptArg {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub required: bool,
}

/// One prompt as a server lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpPromptDef {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub arguments: Vec<McpPromptArg>,
}

/// A name a slash command and a `key=value` argument can carry.
fn plain_name(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.chars().all(|c| c.is_alphanumeric() || "_-.".contains(c))
}

impl McpPromptDef {
    /// Reads one prompt of `prompts/list`; `None` when its name cannot be
    /// typed as a slash command (empty, too long, spaces or punctuation).
    /// Arguments with such names are left out too.
    pub fn from_json(v: &Value) -> Option<McpPromptDef> {
        let name = v.get("name")?.as_str()?;
        if !plain_name(name, MAX_NAME) {
            return None;
        }
        let mut description = text_of(v, "description");
        if description.is_empty() {
            description = text_of(v, "title");
        }
        let arguments = v
            .get("arguments")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|arg| {
                        let name = arg.get("name")?.as_str()?;
                        plain_name(name, MAX_NAME).then(|| McpPromptArg {
                            name: name.to_string(),
                            description: text_of(arg, "description"),
                            required: arg.get("required").and_then(Value::as_bool).unwrap_or(false),
                        })
                    })
                    .take(MAX_ARGS)
                    .collect()
            })
            .unwrap_or_default();
        Some(McpPromptDef {
            name: name.to_string(),
            description,
            arguments,
        })
    }
}

/// Escapes `"` in an attribute value.
fn attr(s: &str) -> String {
    s.replace('"', "&quot;")
}

/// A resource read for a message: each content as text between
/// `<resource …>` and `</resource>` lines naming the server and the URI;
/// a binary content is described (type, size), never passed; text past
/// [`RESOURCE_CAP_BYTES`] in all is cut, and says so.
pub fn resource_attachment(server: &str, uri: &str, contents: &[Value]) -> String {
    let mut out = Vec::new();
    let mut budget = RESOURCE_CAP_BYTES;
    if contents.is_empty() {
        out.push(format!(
            "<resource server=\"{}\" uri=\"{}\">\n[empty]\n</resource>",
            attr(server),
            attr(uri)
        ));
    }
    for c in contents {
        let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
        let this_uri = if s("uri").is_empty() { uri } else { s("uri") };
        let mut this_uri = this_uri.to_string();
        cut(&mut this_uri, MAX_URI);
        let mime = s("mimeType");
        let head = format!(
            "<resource server=\"{}\" uri=\"{}\"{}>",
            attr(server),
            attr(&this_uri),
            if mime.is_empty() {
                String::new()
            } else {
                format!(" mimeType=\"{}\"", attr(mime))
            }
        );
        let body = if let Some(text) = c.get("text").and_then(Value::as_str) {
            let mut t = text.to_string();
            if t.len() > budget {
                cut(&mut t, budget);
                t.push_str("\n[resource truncated]");
            }
            budget = budget.saturating_sub(t.len());
            t
        } else if let Some(blob) = c.get("blob").and_then(Value::as_str) {
            format!(
                "[binary content of type {}, about {} bytes: not attached]",
                if mime.is_empty() { "unknown" } else { mime },
                blob.len() / 4 * 3
            )
        } else {
            "[content without text]".to_string()
        };
        out.push(format!("{head}\n{body}\n</resource>"));
    }
    out.join("\n")
}

/// A prompt's messages as the user's message: the text of each, embedded
/// resources as text, images and audio described. A lone user message is
/// passed as it is; several are each headed by their role. Cut past
/// [`PROMPT_CAP_BYTES`].
pub fn prompt_text(messages: &[Value]) -> String {
    let parts: Vec<(String, String)> = messages
        .iter()
        .map(|m| {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("user").to_string();
            let c = m.get("content").cloned().unwrap_or_default();
            let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            let text = match s("type").as_str() {
                "text" => s("text"),
                "image" | "audio" => format!("[{} of type {}, not attached]", s("type"), s("mimeType")),
                "resource" => {
                    let r = c.get("resource").cloned().unwrap_or_default();
                    let uri = r.get("uri").and_then(Value::as_str).unwrap_or_default().to_string();
                    resource_attachment("", &uri, &[r]).replace(" server=\"\"", "")
                }
                "resource_link" => format!("[resource link {} ({})]", s("uri"), s("name")),
                other => format!("[{other} content]"),
            };
            (role, text)
        })
        .collect();
    let mut text = if parts.len() == 1 && parts[0].0 == "user" {
        parts[0].1.clone()
    } else {
        parts
            .iter()
            .map(|(role, text)| format!("[{role}]\n{text}"))
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    if text.len() > PROMPT_CAP_BYTES {
        cut(&mut text, PROMPT_CAP_BYTES);
        text.push_str("\n[prompt truncated]");
    }
    text
}

/// Checks `args` against the prompt's arguments: each required one is
/// given, and no unknown one is. The error names the argument.
pub fn check_prompt_args(def: &McpPromptDef, args: &serde_json::Map<String, Value>) -> Result<(), String> {
    for a in &def.arguments {
        if a.required && args.get(&a.name).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(format!("prompt `{}` needs the argument `{}`", def.name, a.name));
        }
    }
    for k in args.keys() {
        if !def.arguments.iter().any(|a| &a.name == k) {
            let known: Vec<&str> = def.arguments.iter().map(|a| a.name.as_str()).collect();
            return Err(format!(
                "prompt `{}` has no argument `{k}` (it takes: {})",
                def.name,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resources_without_a_usable_uri_are_left_out() {
        let r =
            McpResourceDef::from_json(&json!({ "uri": "demo://a", "name": "a", "mimeType": "text/plain" })).unwrap();
        assert_eq!(r.name, "a");
        assert_eq!(r.mime_type, "text/plain");
        assert!(McpResourceDef::from_json(&json!({ "name": "x" })).is_none());
        assert!(McpResourceDef::from_json(&json!({ "uri": "a b" })).is_none());
        assert!(McpResourceDef::from_json(&json!({ "uri": "x".repeat(MAX_URI + 1) })).is_none());
        let long = McpResourceDef::from_json(&json!({ "uri": "u://1", "description": "é".repeat(MAX_TEXT) })).unwrap();
        assert!(long.description.len() <= MAX_TEXT);
    }

    #[test]
    fn prompts_keep_their_arguments_and_required_flags() {
        let p = McpPromptDef::from_json(&json!({
            "name": "args-prompt",
            "description": "two args",
            "arguments": [
                { "name": "city", "required": true },
                { "name": "state" },
                { "name": "bad name" }
            ]
        }))
        .unwrap();
        assert_eq!(p.arguments.len(), 2);
        assert!(p.arguments[0].required && !p.arguments[1].required);
        assert!(McpPromptDef::from_json(&json!({ "name": "has space" })).is_none());
        assert!(McpPromptDef::from_json(&json!({ "name": "" })).is_none());
    }

    #[test]
    fn a_missing_required_argument_is_named() {
        let p = McpPromptDef::from_json(&json!({
            "name": "p", "arguments": [{ "name": "city", "required": true }, { "name": "state" }]
        }))
        .unwrap();
        let args = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            check_prompt_args(&p, &args(json!({ "state": "x" }))).unwrap_err(),
            "prompt `p` needs the argument `city`"
        );
        assert!(check_prompt_args(&p, &args(json!({ "city": "Paris" }))).is_ok());
        assert!(check_prompt_args(&p, &args(json!({ "city": "P", "zip": "1" })))
            .unwrap_err()
            .contains("no argument `zip`"));
    }

    #[test]
    fn a_resource_is_attached_as_delimited_text_and_binaries_are_described() {
        let a = resource_attachment(
            "everything",
            "demo://a",
            &[
                json!({ "uri": "demo://a", "mimeType": "text/plain", "text": "hello" }),
                json!({ "uri": "demo://b", "mimeType": "image/png", "blob": "AAAA" }),
            ],
        );
        assert_eq!(
            a,
            "<resource server=\"everything\" uri=\"demo://a\" mimeType=\"text/plain\">\nhello\n</resource>\n\
             <resource server=\"everything\" uri=\"demo://b\" mimeType=\"image/png\">\n\
             [binary content of type image/png, about 3 bytes: not attached]\n</resource>"
        );
        let big = resource_attachment("s", "u://x", &[json!({ "text": "x".repeat(RESOURCE_CAP_BYTES + 5) })]);
        assert!(big.contains("\n[resource truncated]\n</resource>"));
        assert!(big.len() < RESOURCE_CAP_BYTES + 200);
    }

    #[test]
    fn prompt_messages_become_one_user_message() {
        let one = prompt_text(&[json!({ "role": "user", "content": { "type": "text", "text": "Hi" } })]);
        assert_eq!(one, "Hi");
        let many = prompt_text(&[
            json!({ "role": "user", "content": { "type": "text", "text": "Q" } }),
            json!({ "role": "assistant", "content": { "type": "image", "mimeType": "image/png", "data": "AA" } }),
            json!({ "role": "user", "content": { "type": "resource", "resource": { "uri": "u://r", "text": "R" } } }),
        ]);
        assert_eq!(
            many,
            "[user]\nQ\n\n[assistant]\n[image of type image/png, not attached]\n\n[user]\n<resource uri=\"u://r\">\nR\n</resource>"
        );
    }
}
