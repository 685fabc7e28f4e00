//! Model Context Protocol servers (issue 13): their tools in mia's registry.
//!
//! Servers are configured in `setup({ mcp = { servers = … } })` and reach the
//! core in [`crate::agent::AgentSettings::mcp`]. Nothing starts until an
//! agent turn first needs the tool list ([`ensure_started`]); then each
//! server is started on the runtime, its `tools/list` read, and its tools
//! registered with source `mcp` as `server__tool`. [`client`] is the only
//! file that touches the SDK.

pub mod catalog;
pub mod client;
mod manage;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use catalog::{McpPromptDef, McpResourceDef};
pub use client::McpClient;
pub use manage::{get_prompt, read_resource, restart};

use crate::tools::registry::{Registry, ToolSource};
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutput};

/// Separates a server's name from its tool's name in the registry.
pub const SEPARATOR: &str = "__";
/// Most bytes of a tool result's text passed on to the model.
const RESULT_CAP_BYTES: usize = 64 * 1024;

/// One configured server, as `setup()` gives it (already validated in Lua).
/// Its `Debug` names env variables and headers without their values (keys
/// and `Authorization` live there).
#[derive(Clone, PartialEq, Deserialize, Serialize)]
pub struct McpServerSpec {
    pub name: String,
    /// The program and its arguments (stdio servers).
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// A streamable-HTTP server's address (instead of `command`).
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// How long the handshake, `tools/list` and each call may take.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
}

fn default_timeout() -> u64 {
    30_000
}

impl std::fmt::Debug for McpServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerSpec")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// One tool as a server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolDef {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub read_only: bool,
    /// `destructiveHint` as given (absent means destructive, per MCP).
    pub destructive: Option<bool>,
}

impl McpToolDef {
    /// Reads a tool of `tools/list`'s answer; `None` without a name.
    pub fn from_json(v: &Value) -> Option<McpToolDef> {
        let name = v.get("name")?.as_str()?.to_string();
        let hint = |k: &str| v.get("annotations").and_then(|a| a.get(k)).and_then(Value::as_bool);
        let mut input_schema = v.get("inputSchema").cloned().unwrap_or_else(|| json!({}));
        if !input_schema.is_object() {
            input_schema = json!({});
        }
        if input_schema.get("type").is_none() {
            input_schema["type"] = json!("object");
        }
        Some(McpToolDef {
            description: v
                .get("description")
                .and_then(Value::as_str)
                .or_else(|| v.get("title").and_then(Value::as_str))
                .unwrap_or_default()
                .to_string(),
            input_schema,
            read_only: hint("readOnlyHint").unwrap_or(false),
            destructive: hint("destructiveHint"),
            name,
        })
    }

    /// The effect permission rules see: a read-only tool reads; one that
    /// says it is not destructive writes; any other (MCP's default is
    /// destructive, and the server runs code of its own) executes.
    pub fn effect(&self) -> ToolEffect {
        if self.read_only {
            ToolEffect::Read
        } else if self.destructive == Some(false) {
            ToolEffect::Write
        } else {
            ToolEffect::Execute
        }
    }
}

/// The registry's name of `server`'s tool `tool`.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{server}{SEPARATOR}{tool}")
}

/// A `tools/call` result as the model sees it: the text blocks joined, any
/// other block described in a line; the blocks themselves and the
/// structured content kept in the metadata.
pub fn output_of_result(server: &str, result: &Value) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for b in &blocks {
        let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or_default();
        match s("type") {
            "text" => parts.push(s("text").to_string()),
            "image" | "audio" => parts.push(format!(
                "[{} of type {}, {} bytes of base64]",
                s("type"),
                s("mimeType"),
                s("data").len()
            )),
            "resource" => {
                let r = b.get("resource").cloned().unwrap_or_default();
                let uri = r.get("uri").and_then(Value::as_str).unwrap_or_default();
                match r.get("text").and_then(Value::as_str) {
                    Some(text) => parts.push(format!("[resource {uri}]\n{text}")),
                    None => parts.push(format!(
                        "[resource {uri} of type {}, binary]",
                        r.get("mimeType").and_then(Value::as_str).unwrap_or("unknown")
                    )),
                }
            }
            "resource_link" => parts.push(format!("[resource link {} ({})]", s("uri"), s("name"))),
            other => parts.push(format!("[{other} content]")),
        }
    }
    let structured = result.get("structuredContent").filter(|v| !v.is_null()).cloned();
    if let Some(sc) = &structured {
        if parts.is_empty() {
            parts.push(sc.to_string());
        }
    }
    let mut text = parts.join("\n");
    if text.len() > RESULT_CAP_BYTES {
        cut(&mut text, RESULT_CAP_BYTES);
        text.push_str("\n[result truncated]");
    }
    let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
    let mut out = if is_error {
        ToolOutput::error(text)
    } else {
        ToolOutput::ok(text)
    };
    let mut meta = json!({ "mcp": { "server": server, "content": blocks } });
    if let Some(sc) = structured {
        meta["mcp"]["structuredContent"] = sc;
    }
    out.metadata = meta;
    out
}

/// Shortens `s` to at most `max` bytes, on a character boundary.
pub(crate) fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// Where a server stands, for `:Mia mcp` and `:checkhealth`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    NotStarted,
    Starting,
    /// Its tools' registry names, and what it lists of resources and prompts.
    Ready {
        tools: Vec<String>,
        resources: Vec<McpResourceDef>,
        prompts: Vec<McpPromptDef>,
    },
    Failed {
        reason: String,
    },
}

struct Slot {
    spec: McpServerSpec,
    state: ServerState,
    client: Option<Arc<McpClient>>,
}

fn servers() -> &'static Mutex<BTreeMap<String, Slot>> {
    static S: std::sync::OnceLock<Mutex<BTreeMap<String, Slot>>> = std::sync::OnceLock::new();
    S.get_or_init(Default::default)
}

fn lock() -> std::sync::MutexGuard<'static, BTreeMap<String, Slot>> {
    servers().lock().unwrap_or_else(|p| p.into_inner())
}

/// One at a time: two turns starting together start each server once.
static STARTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Each configured server's state, by name.
pub fn status(specs: &[McpServerSpec]) -> Vec<(String, ServerState)> {
    let slots = lock();
    specs
        .iter()
        .map(|s| {
            let state = slots
                .get(&s.name)
                .filter(|slot| slot.spec == s.clone())
                .map(|slot| slot.state.clone())
                .unwrap_or(ServerState::NotStarted);
            (s.name.clone(), state)
        })
        .collect()
}

/// Starts every configured server not started yet and registers its tools;
/// answers one warning per server that failed to start now (its tools are
/// missing; the turn goes on). Servers no longer configured are dropped.
pub async fn ensure_started(registry: &Registry, specs: &[McpServerSpec]) -> Vec<String> {
    let _one = STARTING.lock().await;
    let todo: Vec<McpServerSpec> = {
        let mut slots = lock();
        let gone: Vec<String> = slots
            .iter()
            .filter(|(name, slot)| !specs.iter().any(|s| &s.name == *name && s == &slot.spec))
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            if let Some(slot) = slots.remove(&name) {
                if let ServerState::Ready { tools, .. } = slot.state {
                    for t in tools {
                        registry.unregister(&t, ToolSource::Mcp);
                    }
                }
            }
        }
        let todo: Vec<McpServerSpec> = specs.iter().filter(|s| !slots.contains_key(&s.name)).cloned().collect();
        for s in &todo {
            slots.insert(
                s.name.clone(),
                Slot {
                    spec: s.clone(),
                    state: ServerState::Starting,
                    client: None,
                },
            );
        }
        todo
    };
    start_these(registry, todo).await
}

/// Starts `todo` (their slots already say `Starting`), registers their
/// tools and sets their slots' state; one warning per server that failed.
async fn start_these(registry: &Registry, todo: Vec<McpServerSpec>) -> Vec<String> {
    let started = futures_util::future::join_all(todo.iter().map(start)).await;
    let mut warnings = Vec::new();
    for (spec, outcome) in todo.into_iter().zip(started) {
        let state = match outcome {
            Ok((client, defs, resources, prompts)) => {
                let mut names = Vec::new();
                for def in defs {
                    let tool = McpTool {
                        name: tool_name(&spec.name, &def.name),
                        server: spec.name.clone(),
                        effect: def.effect(),
                        def,
                    };
                    names.push(tool.name.clone());
                    registry.register(Arc::new(tool), ToolSource::Mcp);
                }
                if let Some(slot) = lock().get_mut(&spec.name) {
                    slot.client = Some(Arc::new(client));
                }
                ServerState::Ready {
                    tools: names,
                    resources,
                    prompts,
                }
            }
            Err(reason) => {
                warnings.push(format!(
                    "MCP server `{}` did not start, its tools are missing: {reason}. Fix `mcp.servers.{}` in setup().",
                    spec.name, spec.name
                ));
                ServerState::Failed { reason }
            }
        };
        if let Some(slot) = lock().get_mut(&spec.name) {
            slot.state = state;
        }
    }
    warnings
}

/// A started server: its client, tools, resources and prompts.
type Started = (McpClient, Vec<McpToolDef>, Vec<McpResourceDef>, Vec<McpPromptDef>);

/// Connects and lists what the server offers. Resources and prompts are
/// asked for only when the server advertises them; a failure to list them
/// is logged and leaves them empty (the tools still work).
async fn start(spec: &McpServerSpec) -> Result<Started, String> {
    let client = McpClient::connect(spec).await?;
    let tools = client.list_tools().await?;
    let (has_resources, has_prompts) = client.offers();
    let resources = if has_resources {
        client.list_resources().await.unwrap_or_else(|e| {
            tracing::warn!("{e}");
            Vec::new()
        })
    } else {
        Vec::new()
    };
    let prompts = if has_prompts {
        client.list_prompts().await.unwrap_or_else(|e| {
            tracing::warn!("{e}");
            Vec::new()
        })
    } else {
        Vec::new()
    };
    Ok((client, tools, resources, prompts))
}

/// The live client of `server`, restarting it when its process is gone.
async fn client_for(server: &str) -> Result<Arc<McpClient>, String> {
    let (client, spec) = {
        let slots = lock();
        let slot = slots
            .get(server)
            .ok_or_else(|| format!("MCP server `{server}` is no longer configured"))?;
        (slot.client.clone(), slot.spec.clone())
    };
    if let Some(c) = client.filter(|c| !c.is_closed()) {
        return Ok(c);
    }
    let c = Arc::new(
        McpClient::connect(&spec)
            .await
            .map_err(|e| format!("MCP server `{server}` could not be restarted: {e}"))?,
    );
    if let Some(slot) = lock().get_mut(server) {
        slot.client = Some(c.clone());
    }
    Ok(c)
}

/// One of a server's tools in the registry.
pub struct McpTool {
    name: String,
    server: String,
    effect: ToolEffect,
    def: McpToolDef,
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.def.description
    }
    fn parameters(&self) -> Value {
        self.def.input_schema.clone()
    }
    fn effect(&self) -> ToolEffect {
        self.effect
    }
    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let server = self.server.clone();
        let tool = self.def.name.clone();
        Box::pin(async move {
            let timeout = {
                let slots = lock();
                slots
                    .get(&server)
                    .map(|s| s.spec.timeout_ms)
                    .unwrap_or_else(default_timeout)
            };
            let client = match client_for(&server).await {
                Ok(c) => c,
                Err(e) => return ToolOutput::error(e),
            };
            let call = client.call_tool(&tool, args, Duration::from_millis(timeout));
            let answer = tokio::select! {
                a = call => a,
                _ = ctx.abort.cancelled() => return ToolOutput::error("stopped by the user"),
            };
            match answer {
                Ok(result) => output_of_result(&server, &result),
                Err(e) => {
                    let crashed = client.is_closed();
                    if crashed {
                        if let Some(slot) = lock().get_mut(&server) {
                            slot.client = None;
                        }
                        ToolOutput::error(format!(
                            "MCP server `{server}` exited during `{tool}` (it restarts on next use): {e}"
                        ))
                    } else {
                        ToolOutput::error(format!("MCP server `{server}`, tool `{tool}`: {e}"))
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_named_server_then_tool() {
        assert_eq!(tool_name("everything", "echo"), "everything__echo");
    }

    #[test]
    fn annotations_map_to_effects() {
        let def = |ann: Value| McpToolDef::from_json(&json!({ "name": "t", "annotations": ann })).unwrap();
        assert_eq!(def(json!({ "readOnlyHint": true })).effect(), ToolEffect::Read);
        assert_eq!(
            def(json!({ "readOnlyHint": true, "destructiveHint": true })).effect(),
            ToolEffect::Read
        );
        assert_eq!(def(json!({ "destructiveHint": false })).effect(), ToolEffect::Write);
        assert_eq!(def(json!({ "destructiveHint": true })).effect(), ToolEffect::Execute);
        assert_eq!(def(json!(null)).effect(), ToolEffect::Execute);
    }

    #[test]
    fn a_tool_without_a_schema_takes_an_object() {
        let d = McpToolDef::from_json(&json!({ "name": "t", "title": "T" })).unwrap();
        assert_eq!(d.input_schema, json!({ "type": "object" }));
        assert_eq!(d.description, "T");
        assert!(McpToolDef::from_json(&json!({ "description": "no name" })).is_none());
    }

    #[test]
    fn results_pass_text_and_describe_the_rest() {
        let r = json!({
            "content": [
                { "type": "text", "text": "Echo: hi" },
                { "type": "image", "data": "AAAA", "mimeType": "image/png" },
                { "type": "resource", "resource": { "uri": "test://1", "text": "body" } }
            ],
            "structuredContent": { "n": 1 }
        });
        let out = output_of_result("everything", &r);
        assert!(!out.is_error);
        assert_eq!(
            out.content,
            "Echo: hi\n[image of type image/png, 4 bytes of base64]\n[resource test://1]\nbody"
        );
        assert_eq!(out.metadata["mcp"]["structuredContent"], json!({ "n": 1 }));
        assert_eq!(out.metadata["mcp"]["content"].as_array().unwrap().len(), 3);
        let err = output_of_result(
            "s",
            &json!({ "content": [{ "type": "text", "text": "bad" }], "isError": true }),
        );
        assert!(err.is_error);
        assert_eq!(err.content, "bad");
    }

    #[test]
    fn long_results_are_cut_on_a_character_boundary() {
        let mut s = "é".repeat(10);
        cut(&mut s, 5);
        assert_eq!(s, "éé");
        let out = output_of_result(
            "s",
            &json!({ "content": [{ "type": "text", "text": "x".repeat(RESULT_CAP_BYTES + 10) }] }),
        );
        assert!(out.content.ends_with("\n[result truncated]"));
        assert_eq!(out.content.len(), RESULT_CAP_BYTES + "\n[result truncated]".len());
    }

    #[test]
    fn structured_content_alone_reaches_the_model() {
        let out = output_of_result("s", &json!({ "structuredContent": { "a": 2 } }));
        assert_eq!(out.content, r#"{"a":2}"#);
    }
}
