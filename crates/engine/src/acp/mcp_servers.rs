//! MCP servers across ACP (issue 13). As the client, mia passes the user's
//! configured servers (`setup({ mcp })`) to an external agent in
//! `session/new` and `session/load` ([`to_acp`]). As mia-acp, it takes the
//! `mcpServers` an editor sends and runs them for that session's agent loop
//! ([`from_acp`]): what comes from outside is bounded and checked, and a bad
//! entry is refused with a message naming it and the rule.
//!
//! Env values and header values are secrets: no message here shows them.

use std::collections::BTreeMap;
use std::path::Path;

use agent_client_protocol::v1::schema as s;
use serde_json::{json, Value};

use crate::mcp::McpServerSpec;

/// Most servers one `session/new` or `session/load` may bring.
pub const MAX_SERVERS: usize = 32;
/// Longest server name (it prefixes its tools' names: `name__tool`).
const MAX_NAME: usize = 64;
/// Longest command path and URL.
const MAX_PATH: usize = 4096;
/// Most arguments, env variables or headers of one server.
const MAX_ENTRIES: usize = 256;
/// Longest argument, env or header value.
const MAX_VALUE: usize = 32 * 1024;
/// Longest env variable or header name.
const MAX_KEY: usize = 256;

/// The servers of `specs` as ACP's `mcpServers` for an agent, and one line
/// per server left out saying why: a streamable-HTTP server goes only to an
/// agent whose `initialize` offers `mcpCapabilities.http`. A stdio server's
/// `cwd` and any `timeout_ms` have no field in ACP (the agent starts the
/// server in the session's cwd, with its own timeouts).
pub fn to_acp(specs: &[McpServerSpec], http: bool) -> (Vec<s::McpServer>, Vec<String>) {
    let mut out = Vec::new();
    let mut left_out = Vec::new();
    for spec in specs {
        let pairs = |m: &BTreeMap<String, String>| -> Vec<Value> {
            m.iter().map(|(k, v)| json!({ "name": k, "value": v })).collect()
        };
        let v = match (&spec.url, spec.command.split_first()) {
            (Some(url), _) if http => json!({
                "type": "http", "name": spec.name, "url": url, "headers": pairs(&spec.headers),
            }),
            (Some(_), _) => {
                left_out.push(format!(
                    "`{}` (a streamable-HTTP server: the agent's `initialize` does not offer `mcpCapabilities.http`)",
                    spec.name
                ));
                continue;
            }
            (None, Some((program, args))) => json!({
                "name": spec.name, "command": program, "args": args, "env": pairs(&spec.env),
            }),
            (None, None) => continue,
        };
        match serde_json::from_value::<s::McpServer>(v) {
            Ok(server) => out.push(server),
            // Not reachable with the shapes above; never shows the value (it holds secrets).
            Err(_) => left_out.push(format!("`{}` (it cannot be written in ACP's shape)", spec.name)),
        }
    }
    (out, left_out)
}

/// The warning for the servers [`to_acp`] left out of `agent`'s sessions.
pub fn left_out_warning(agent: &str, left_out: &[String]) -> String {
    format!(
        "mia: MCP servers not passed to the agent `{agent}`: {}. The others are passed; \
         agents.{agent}.mcp = false passes none (and says nothing).",
        left_out.join("; ")
    )
}

fn bad(i: usize, name: &str, what: impl std::fmt::Display) -> String {
    if name.is_empty() {
        format!("mia-acp: mcpServers[{i}] {what}")
    } else {
        format!("mia-acp: mcpServers[{i}] (`{name}`) {what}")
    }
}

/// A server name mia can prefix tools with: letters, digits, `-` and
/// single `_`, starting with a letter or digit, at most 64 bytes.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.contains("__")
}

/// Checks name/value pairs (env variables or headers): counts, sizes, no
/// NUL nor line breaks in names, no NUL in values. Never shows a value.
fn pairs(
    i: usize,
    server: &str,
    field: &str,
    items: impl ExactSizeIterator<Item = (String, String)>,
    header: bool,
) -> Result<BTreeMap<String, String>, String> {
    if items.len() > MAX_ENTRIES {
        return Err(bad(
            i,
            server,
            format!("has {} {field} entries (at most {MAX_ENTRIES})", items.len()),
        ));
    }
    let mut out = BTreeMap::new();
    for (k, v) in items {
        let key_ok = !k.is_empty()
            && k.len() <= MAX_KEY
            && if header {
                k.bytes().all(|b| b.is_ascii_graphic() && b != b':')
            } else {
                !k.contains(['=', '\0'])
            };
        if !key_ok {
            let shown: String = k.chars().take(40).collect();
            return Err(bad(
                i,
                server,
                format!("has a bad {field} name {shown:?} (1 to {MAX_KEY} bytes, no `=`, `:` or control characters)"),
            ));
        }
        if v.len() > MAX_VALUE || v.contains('\0') || (header && v.contains(['\r', '\n'])) {
            return Err(bad(
                i,
                server,
                format!("has a bad value for {field} `{k}` (at most {MAX_VALUE} bytes, no NUL or line breaks)"),
            ));
        }
        out.insert(k, v);
    }
    Ok(out)
}

/// The specs of a client's `mcpServers`, or the first bad entry as a
/// message (for a JSON-RPC invalid-params error). Stdio servers start in
/// `cwd` (the session's); HTTP ones need an `http://` or `https://` URL;
/// SSE is refused (mia-acp does not offer it).
pub fn from_acp(servers: &[s::McpServer], cwd: &Path) -> Result<Vec<McpServerSpec>, String> {
    if servers.len() > MAX_SERVERS {
        return Err(format!(
            "mia-acp: {} mcpServers in one session (at most {MAX_SERVERS})",
            servers.len()
        ));
    }
    let mut out: Vec<McpServerSpec> = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let name = match server {
            s::McpServer::Stdio(x) => x.name.as_str(),
            s::McpServer::Http(x) => x.name.as_str(),
            s::McpServer::Sse(x) => x.name.as_str(),
            _ => "",
        };
        let shown: String = name.chars().take(MAX_NAME).collect();
        if !valid_name(name) {
            return Err(bad(
                i,
                &shown,
                "has a name mia cannot use: letters, digits, `-` and single `_`, at most 64 (its tools are named NAME__tool)",
            ));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(bad(i, name, "repeats a name another server has"));
        }
        let spec =
            match server {
                s::McpServer::Stdio(x) => {
                    let command = x.command.to_string_lossy().into_owned();
                    if command.is_empty() || command.len() > MAX_PATH || command.contains('\0') {
                        return Err(bad(i, name, format!("needs a command of 1 to {MAX_PATH} bytes")));
                    }
                    if x.args.len() > MAX_ENTRIES {
                        return Err(bad(
                            i,
                            name,
                            format!("has {} args (at most {MAX_ENTRIES})", x.args.len()),
                        ));
                    }
                    if let Some(n) = x.args.iter().position(|a| a.len() > MAX_VALUE || a.contains('\0')) {
                        return Err(bad(
                            i,
                            name,
                            format!("has a bad args[{n}] (at most {MAX_VALUE} bytes, no NUL)"),
                        ));
                    }
                    let env = pairs(
                        i,
                        name,
                        "env",
                        x.env.iter().map(|e| (e.name.clone(), e.value.clone())),
                        false,
                    )?;
                    McpServerSpec {
                        name: name.to_string(),
                        command: std::iter::once(command).chain(x.args.iter().cloned()).collect(),
                        env,
                        cwd: Some(cwd.to_path_buf()),
                        url: None,
                        headers: BTreeMap::new(),
                        timeout_ms: DEFAULT_TIMEOUT_MS,
                        tool_prefix: None,
                        tool_names: BTreeMap::new(),
                        path_rules: true,
                        sandbox: None,
                    }
                }
                s::McpServer::Http(x) => {
                    let scheme_ok = x.url.starts_with("http://") || x.url.starts_with("https://");
                    if !scheme_ok || x.url.len() > MAX_PATH || x.url.chars().any(char::is_control) {
                        return Err(bad(
                            i,
                            name,
                            format!("needs an http:// or https:// url of at most {MAX_PATH} bytes"),
                        ));
                    }
                    let headers = pairs(
                        i,
                        name,
                        "headers",
                        x.headers.iter().map(|h| (h.name.clone(), h.value.clone())),
                        true,
                    )?;
                    McpServerSpec {
                        name: name.to_string(),
                        command: Vec::new(),
                        env: BTreeMap::new(),
                        cwd: None,
                        url: Some(x.url.clone()),
                        headers,
                        timeout_ms: DEFAULT_TIMEOUT_MS,
                        tool_prefix: None,
                        tool_names: BTreeMap::new(),
                        path_rules: true,
                        sandbox: None,
                    }
                }
                s::McpServer::Sse(_) => return Err(bad(
                    i,
                    name,
                    "uses SSE, which mia-acp does not offer (its `initialize` offers stdio and `mcpCapabilities.http`)",
                )),
                _ => return Err(bad(i, name, "uses a transport mia-acp does not offer (stdio and http)")),
            };
        out.push(spec);
    }
    Ok(out)
}

/// How long a client's server may take to start, list its tools, or answer a call.
const DEFAULT_TIMEOUT_MS: u64 = 30_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: Value) -> McpServerSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn configured_servers_take_acps_shape_and_http_needs_the_capability() {
        let specs = vec![
            spec(
                json!({ "name": "everything", "command": ["/bin/srv", "stdio"], "env": { "K": "secret-env" }, "cwd": "/x" }),
            ),
            spec(
                json!({ "name": "remote", "url": "https://example.test/mcp", "headers": { "Authorization": "Bearer secret-h" } }),
            ),
        ];
        let (servers, left) = to_acp(&specs, true);
        assert!(left.is_empty());
        let v = serde_json::to_value(&servers).unwrap();
        assert_eq!(
            v,
            json!([
                { "name": "everything", "command": "/bin/srv", "args": ["stdio"], "env": [{ "name": "K", "value": "secret-env" }] },
                { "type": "http", "name": "remote", "url": "https://example.test/mcp",
                  "headers": [{ "name": "Authorization", "value": "Bearer secret-h" }] },
            ])
        );
        let (servers, left) = to_acp(&specs, false);
        assert_eq!(servers.len(), 1);
        assert_eq!(left.len(), 1);
        assert!(left[0].starts_with("`remote` (a streamable-HTTP server"), "{left:?}");
        let w = left_out_warning("claude", &left);
        assert!(
            w.contains("agent `claude`") && w.contains("agents.claude.mcp = false"),
            "{w}"
        );
        assert!(!w.contains("secret"));
    }

    fn parse(v: Value) -> Result<Vec<McpServerSpec>, String> {
        let servers: Vec<s::McpServer> = serde_json::from_value(v).unwrap();
        from_acp(&servers, Path::new("/proj"))
    }

    #[test]
    fn a_clients_servers_become_specs_started_in_the_sessions_cwd() {
        let specs = parse(json!([
            { "name": "everything", "command": "/bin/srv", "args": ["stdio"], "env": [{ "name": "K", "value": "v" }] },
            { "type": "http", "name": "remote", "url": "http://127.0.0.1:1/mcp", "headers": [{ "name": "X-Key", "value": "k" }] },
        ]))
        .unwrap();
        assert_eq!(specs[0].command, vec!["/bin/srv", "stdio"]);
        assert_eq!(specs[0].cwd.as_deref(), Some(Path::new("/proj")));
        assert_eq!(specs[0].env.get("K").map(String::as_str), Some("v"));
        assert_eq!(specs[1].url.as_deref(), Some("http://127.0.0.1:1/mcp"));
        assert_eq!(specs[1].headers.get("X-Key").map(String::as_str), Some("k"));
    }

    #[test]
    fn bad_entries_are_refused_by_index_and_name_without_their_secrets() {
        let stdio = |name: &str| json!({ "name": name, "command": "/bin/srv", "args": [], "env": [] });
        let err = |v: Value| parse(v).unwrap_err();
        assert!(err(json!([stdio("a b")])).starts_with("mia-acp: mcpServers[0] (`a b`) has a name"));
        assert!(err(json!([stdio("a__b")])).contains("single `_`"));
        assert!(err(json!([stdio("x"), stdio("x")])).contains("mcpServers[1] (`x`) repeats a name"));
        let many: Vec<Value> = (0..33).map(|i| stdio(&format!("s{i}"))).collect();
        assert_eq!(err(json!(many)), "mia-acp: 33 mcpServers in one session (at most 32)");
        assert!(err(json!([{ "name": "x", "command": "", "args": [], "env": [] }])).contains("needs a command"));
        let e = err(
            json!([{ "name": "x", "command": "/c", "args": [], "env": [{ "name": "K", "value": "sec\u{0}ret" }] }]),
        );
        assert!(e.contains("bad value for env `K`") && !e.contains("sec"), "{e}");
        let e = err(json!([{ "type": "http", "name": "h", "url": "ftp://x", "headers": [] }]));
        assert!(e.contains("http:// or https://"), "{e}");
        let e = err(
            json!([{ "type": "http", "name": "h", "url": "http://x", "headers": [{ "name": "A", "value": "s\r\necret" }] }]),
        );
        assert!(e.contains("headers `A`") && !e.contains("ecret"), "{e}");
        let e = err(json!([{ "type": "sse", "name": "s", "url": "http://x", "headers": [] }]));
        assert!(e.contains("uses SSE"), "{e}");
        let long = "a".repeat(MAX_VALUE + 1);
        assert!(err(json!([{ "name": "x", "command": "/c", "args": [long], "env": [] }])).contains("args[0]"));
    }
}
