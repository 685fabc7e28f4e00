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
    /// What comes before `__tool` in the registry's names (the server's
    /// name when absent; empty: the tools keep their own names).
    #[serde(default)]
    pub tool_prefix: Option<String>,
    /// The registry's name of some of the server's tools, by their own name.
    #[serde(default)]
    pub tool_names: BTreeMap<String, String>,
    /// Whether mia's path rules apply to the tools' path arguments
    /// ([`PATH_KEYS`]); on unless the setup turns it off.
    #[serde(default = "yes")]
    pub path_rules: bool,
    /// Runs a stdio server in the sandbox (`crate::sandbox`; `setup()`'s
    /// `sandbox = true`); never unconfined then.
    #[serde(default)]
    pub sandbox: Option<McpSandbox>,
}

/// How a sandboxed MCP server is confined: writes in its `cwd` (else
/// Neovim's working directory) and a temporary directory of its own, no
/// network, the default credentials and mia's data directory unreadable.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct McpSandbox {
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

/// The arguments of an MCP tool that name files (a string, or a list of
/// them): mia's path rules hold for them as for its own tools, whatever the
/// server allows (`@modelcontextprotocol/server-filesystem` names them so).
pub const PATH_KEYS: &[&str] = &[
    "path",
    "paths",
    "source",
    "destination",
    "file",
    "files",
    "file_path",
    "filePath",
    "filename",
    "directory",
    "dir",
];
/// Most path arguments of one call that are checked; a call with more is refused.
const MAX_PATH_ARGS: usize = 1000;

/// Where a path argument is: its key, and its index when the key holds a list.
type PathPlace = (&'static str, Option<usize>);

/// Every path `args` names under [`PATH_KEYS`], each with its place; `Err`
/// when there are more than [`MAX_PATH_ARGS`].
fn path_args(args: &Value) -> Result<Vec<(PathPlace, String)>, String> {
    let mut out = Vec::new();
    for key in PATH_KEYS {
        match args.get(*key) {
            Some(Value::String(p)) => out.push(((*key, None), p.clone())),
            Some(Value::Array(list)) => out.extend(
                list.iter()
                    .enumerate()
                    .filter_map(|(i, v)| Some(((*key, Some(i)), v.as_str()?.to_string()))),
            ),
            _ => {}
        }
        if out.len() > MAX_PATH_ARGS {
            return Err(format!("the call names more than {MAX_PATH_ARGS} paths"));
        }
    }
    Ok(out)
}

/// Checks every path `args` names and answers the arguments the server
/// gets: each path as mia checked it, absolute (a server resolves a
/// relative path against a directory of its own, not the project). Refused:
/// a path outside the project (other than one a rule allowed for this
/// call), or one a deny rule hides, in any spelling.
fn checked_paths(mut args: Value, ctx: &ToolContext) -> Result<Value, String> {
    for ((key, index), p) in path_args(&args)? {
        let path = crate::tools::paths::canonicalize(&ctx.root, &p).map_err(|e| e.to_string())?;
        if !path.inside && ctx.outside_allowed.as_deref() != Some(path.physical.as_path()) {
            return Err(format!(
                "`{p}` is outside the project; mia's rules refuse it for MCP tools as for its own (allow it with a rule)"
            ));
        }
        if let Some(hidden) = &ctx.hidden {
            let absolute = path.physical.to_string_lossy();
            if [path.subject.as_str(), path.lexical.as_str(), absolute.as_ref()]
                .iter()
                .any(|s| hidden(s))
            {
                return Err(format!("`{p}` is denied by a rule"));
            }
        }
        let absolute = Value::String(path.physical.to_string_lossy().into_owned());
        match index {
            None => args[key] = absolute,
            Some(i) => args[key][i] = absolute,
        }
    }
    Ok(args)
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
            .field("tool_prefix", &self.tool_prefix)
            .field("tool_names", &self.tool_names)
            .field("path_rules", &self.path_rules)
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

/// The registry's name of `spec`'s tool `tool`: as configured in
/// `tool_names`, else with `tool_prefix` (the server's name by default).
pub fn registered_name(spec: &McpServerSpec, tool: &str) -> String {
    if let Some(name) = spec.tool_names.get(tool) {
        return name.clone();
    }
    match spec.tool_prefix.as_deref() {
        Some("") => tool.to_string(),
        Some(prefix) => tool_name(prefix, tool),
        None => tool_name(&spec.name, tool),
    }
}

/// True for a name every provider takes for a tool: letters, digits, `_`
/// and `-`, 1 to 64 of them. A server's tool whose name is not is left out.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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
    // Images go to the model as images (the agent loop attaches them).
    let images: Vec<Value> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("image"))
        .filter_map(|b| Some(json!({ "media_type": b.get("mimeType")?.as_str()?, "data": b.get("data")?.as_str()? })))
        .collect();
    let mut meta = json!({ "mcp": { "server": server, "content": blocks } });
    if !images.is_empty() {
        meta["images"] = Value::Array(images);
    }
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
    /// Its tools' registry names, the tools it left out (each with the
    /// reason), and what it lists of resources and prompts.
    Ready {
        tools: Vec<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        skipped: Vec<String>,
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

/// An app's MCP servers: each server's slot by its map key ([`slot_key`]),
/// `setup()`'s and every scope's.
#[derive(Default)]
pub struct McpServers {
    slots: Mutex<BTreeMap<String, Slot>>,
    /// One at a time: two turns starting together start each server once.
    starting: tokio::sync::Mutex<()>,
}

impl McpServers {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Each configured server's state, by name.
pub fn status(servers: &McpServers, specs: &[McpServerSpec]) -> Vec<(String, ServerState)> {
    let slots = servers.lock();
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

/// Separates a scope from a server's name in the servers' map: the key of
/// a scoped server (one of a mia-acp session's) is `scope`, this, `name`.
const SCOPE_SEPARATOR: char = '\u{1f}';

/// The servers' map key of `name` in `scope` ("" for `setup()`'s servers: the name itself).
fn slot_key(scope: &str, name: &str) -> String {
    if scope.is_empty() {
        name.to_string()
    } else {
        format!("{scope}{SCOPE_SEPARATOR}{name}")
    }
}

/// The scope of a servers' map key.
fn scope_of(key: &str) -> &str {
    key.rsplit_once(SCOPE_SEPARATOR).map_or("", |(scope, _)| scope)
}

/// Starts every configured server not started yet and registers its tools;
/// answers one warning per server that failed to start now (its tools are
/// missing; the turn goes on). Servers no longer configured are dropped.
pub async fn ensure_started(
    servers: &Arc<McpServers>,
    registry: &Arc<Registry>,
    specs: &[McpServerSpec],
) -> Vec<String> {
    ensure_started_in(servers, "", registry, specs).await
}

/// [`ensure_started`] for the servers of one `scope` (a mia-acp session,
/// whose client sent them): they are kept apart from `setup()`'s servers
/// and from other scopes' (two sessions may each have an `everything` of
/// their own), and only servers of `scope` that `specs` no longer holds are
/// dropped. `registry` is the scope's own.
pub async fn ensure_started_in(
    servers: &Arc<McpServers>,
    scope: &str,
    registry: &Arc<Registry>,
    specs: &[McpServerSpec],
) -> Vec<String> {
    let _one = servers.starting.lock().await;
    let todo: Vec<McpServerSpec> = {
        let mut slots = servers.lock();
        let gone: Vec<String> = slots
            .iter()
            .filter(|(key, slot)| {
                scope_of(key) == scope && !specs.iter().any(|s| s.name == slot.spec.name && s == &slot.spec)
            })
            .map(|(key, _)| key.clone())
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
        let todo: Vec<McpServerSpec> = specs
            .iter()
            .filter(|s| !slots.contains_key(&slot_key(scope, &s.name)))
            .cloned()
            .collect();
        for s in &todo {
            slots.insert(
                slot_key(scope, &s.name),
                Slot {
                    spec: s.clone(),
                    state: ServerState::Starting,
                    client: None,
                },
            );
        }
        todo
    };
    start_these(servers, scope, registry, todo).await
}

/// Starts `todo` (their slots already say `Starting`), registers their
/// tools and sets their slots' state; one warning per server that failed.
async fn start_these(
    servers: &Arc<McpServers>,
    scope: &str,
    registry: &Arc<Registry>,
    todo: Vec<McpServerSpec>,
) -> Vec<String> {
    let started = futures_util::future::join_all(todo.iter().map(start)).await;
    let mut warnings = Vec::new();
    for (spec, outcome) in todo.into_iter().zip(started) {
        let state = match outcome {
            Ok((client, defs, resources, prompts)) => {
                let client = Arc::new(client);
                let key = slot_key(scope, &spec.name);
                follow_tool_changes(servers, registry, &key, &client);
                if let Some(slot) = servers.lock().get_mut(&key) {
                    slot.client = Some(client);
                }
                let (tools, skipped) = register_tools(servers, registry, &key, &spec, defs);
                ServerState::Ready {
                    tools,
                    skipped,
                    resources,
                    prompts,
                }
            }
            Err(reason) => {
                let fix = if scope.is_empty() {
                    format!("Fix `mcp.servers.{}` in setup().", spec.name)
                } else {
                    "Fix it in the MCP servers the editor passes (its MCP or context server settings).".to_string()
                };
                warnings.push(format!(
                    "MCP server `{}` did not start, its tools are missing: {reason}. {fix}",
                    spec.name
                ));
                ServerState::Failed { reason }
            }
        };
        if let Some(slot) = servers.lock().get_mut(&slot_key(scope, &spec.name)) {
            slot.state = state;
        }
    }
    warnings
}

/// Puts `spec`'s tools `defs` in the registry, in place of the ones it had
/// (`key` is its servers' map key), and in its slot's state when ready;
/// answers the registered names and the tools left out. A tool whose name
/// is not valid, or that another server of the same scope already holds,
/// is left out, with the reason.
fn register_tools(
    servers: &Arc<McpServers>,
    registry: &Arc<Registry>,
    key: &str,
    spec: &McpServerSpec,
    defs: Vec<McpToolDef>,
) -> (Vec<String>, Vec<String>) {
    let mut slots = servers.lock();
    let taken: std::collections::BTreeSet<String> = slots
        .iter()
        .filter(|(other, _)| *other != key && scope_of(other) == scope_of(key))
        .filter_map(|(_, slot)| match &slot.state {
            ServerState::Ready { tools, .. } => Some(tools.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let mut names = Vec::new();
    let mut skipped = Vec::new();
    for def in defs {
        let name = registered_name(spec, &def.name);
        if !valid_tool_name(&name) {
            let mut shown = name.clone();
            cut(&mut shown, 80);
            skipped.push(format!(
                "`{shown}`: not a valid tool name (letters, digits, _ and -, at most 64); rename it in `tool_names`"
            ));
            continue;
        }
        if taken.contains(&name) || names.contains(&name) {
            skipped.push(format!(
                "`{name}`: another MCP tool has this name; rename it in `tool_names`"
            ));
            continue;
        }
        let tool = McpTool {
            name: name.clone(),
            server: spec.name.clone(),
            key: key.to_string(),
            effect: def.effect(),
            def,
            registry: Arc::downgrade(registry),
            servers: servers.clone(),
            path_rules: spec.path_rules,
        };
        registry.register(Arc::new(tool), ToolSource::Mcp);
        names.push(name);
    }
    if let Some(ServerState::Ready { tools, .. }) = slots.get(key).map(|s| &s.state) {
        for old in tools.iter().filter(|t| !names.contains(t)) {
            registry.unregister(old, ToolSource::Mcp);
        }
    }
    if let Some(ServerState::Ready {
        tools,
        skipped: left_out,
        ..
    }) = slots.get_mut(key).map(|s| &mut s.state)
    {
        tools.clone_from(&names);
        left_out.clone_from(&skipped);
    }
    (names, skipped)
}

/// Reads the server's tool list again each time it says it changed, for as
/// long as `client` lives, and puts the new list in the registry (`key` is
/// the server's map key).
fn follow_tool_changes(servers: &Arc<McpServers>, registry: &Arc<Registry>, key: &str, client: &Arc<McpClient>) {
    let servers = servers.clone();
    let changed = client.tools_changed();
    let weak = Arc::downgrade(client);
    let registry = registry.clone();
    let key = key.to_string();
    tokio::spawn(async move {
        loop {
            changed.notified().await;
            let Some(client) = weak.upgrade() else { return };
            if client.is_closed() {
                return;
            }
            let listed = client.list_tools().await;
            let spec = {
                let slots = servers.lock();
                match slots.get(&key) {
                    // Only the slot's own client speaks for the server.
                    Some(slot) if slot.client.as_ref().is_some_and(|c| Arc::ptr_eq(c, &client)) => slot.spec.clone(),
                    _ => return,
                }
            };
            drop(client);
            let server = &spec.name;
            match listed {
                Ok(defs) => {
                    register_tools(&servers, &registry, &key, &spec, defs);
                    tracing::info!("MCP server `{server}` changed its tools");
                }
                Err(e) => tracing::warn!("MCP server `{server}` changed its tools, but reading them failed: {e}"),
            }
        }
    });
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

/// The live client of `server` (its map key is `key`), restarting it when its process is gone.
async fn client_for(
    servers: &Arc<McpServers>,
    server: &str,
    key: &str,
    registry: &std::sync::Weak<Registry>,
) -> Result<Arc<McpClient>, String> {
    let (client, spec) = {
        let slots = servers.lock();
        let slot = slots
            .get(key)
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
    if let Some(registry) = registry.upgrade() {
        follow_tool_changes(servers, &registry, key, &c);
    }
    if let Some(slot) = servers.lock().get_mut(key) {
        slot.client = Some(c.clone());
    }
    Ok(c)
}

/// One of a server's tools in the registry.
pub struct McpTool {
    name: String,
    server: String,
    /// Its server's key in the servers' map (the name, or scope and name).
    key: String,
    effect: ToolEffect,
    def: McpToolDef,
    /// The registry it is in: a restarted server's changes go there.
    registry: std::sync::Weak<Registry>,
    /// The servers it is one of.
    servers: Arc<McpServers>,
    path_rules: bool,
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
    /// The first path argument: rules on paths match it, and asking names it.
    fn subject(&self, args: &Value) -> Option<crate::tools::ToolSubject> {
        if !self.path_rules {
            return None;
        }
        let (_, first) = path_args(args).ok()?.into_iter().next()?;
        Some(crate::tools::ToolSubject::Path(first))
    }
    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let args = if self.path_rules {
            match checked_paths(args, &ctx) {
                Ok(args) => args,
                Err(e) => return Box::pin(async move { ToolOutput::error(e) }),
            }
        } else {
            args
        };
        let server = self.server.clone();
        let key = self.key.clone();
        let tool = self.def.name.clone();
        let registry = self.registry.clone();
        let servers = self.servers.clone();
        Box::pin(async move {
            let timeout = {
                let slots = servers.lock();
                slots
                    .get(&key)
                    .map(|s| s.spec.timeout_ms)
                    .unwrap_or_else(default_timeout)
            };
            let client = match client_for(&servers, &server, &key, &registry).await {
                Ok(c) => c,
                Err(e) => return ToolOutput::error(e),
            };
            let report = ctx.metadata.clone();
            let progress: client::ProgressSink = Arc::new(move |p: client::Progress| {
                report(json!({ "progress": { "progress": p.progress, "total": p.total, "message": p.message } }));
            });
            let call = client.call_tool(&tool, args, Duration::from_millis(timeout), Some(progress));
            let answer = tokio::select! {
                a = call => a,
                _ = ctx.abort.cancelled() => return ToolOutput::error("stopped by the user"),
            };
            match answer {
                Ok(result) => output_of_result(&server, &result),
                Err(e) => {
                    let crashed = client.is_closed();
                    if crashed {
                        if let Some(slot) = servers.lock().get_mut(&key) {
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
    fn names_follow_the_configuration_and_bad_names_are_caught() {
        let mut spec: McpServerSpec = serde_json::from_value(json!({ "name": "fs", "command": ["x"] })).unwrap();
        assert!(spec.path_rules, "path rules are on unless turned off");
        assert_eq!(registered_name(&spec, "read"), "fs__read");
        spec.tool_prefix = Some(String::new());
        assert_eq!(registered_name(&spec, "read"), "read");
        spec.tool_prefix = Some("files".into());
        spec.tool_names.insert("read".into(), "cat".into());
        assert_eq!(registered_name(&spec, "read"), "cat");
        assert_eq!(registered_name(&spec, "write"), "files__write");
        assert!(valid_tool_name("files__write-2"));
        for bad in ["", "bad name", "ünïcode", "a/b", &"x".repeat(65)] {
            assert!(!valid_tool_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn path_arguments_are_found_in_strings_and_lists_and_bounded() {
        let found = path_args(&json!({ "path": "a", "paths": ["b", 3, "c"], "content": "d" })).unwrap();
        let places: Vec<_> = found.iter().map(|((k, i), p)| (*k, *i, p.as_str())).collect();
        assert_eq!(
            places,
            vec![("path", None, "a"), ("paths", Some(0), "b"), ("paths", Some(2), "c")]
        );
        let many: Vec<String> = (0..=MAX_PATH_ARGS).map(|i| i.to_string()).collect();
        assert!(path_args(&json!({ "paths": many })).is_err());
    }

    #[test]
    fn scoped_servers_are_kept_apart_from_setups_and_each_other() {
        assert_eq!(slot_key("", "everything"), "everything");
        assert_eq!(scope_of("everything"), "");
        let a = slot_key("sess-a", "everything");
        assert_ne!(a, slot_key("sess-b", "everything"));
        assert_eq!(scope_of(&a), "sess-a");
    }

    #[tokio::test]
    async fn a_scope_drops_only_its_own_servers() {
        let broken = |name: &str| -> McpServerSpec {
            serde_json::from_value(json!({ "name": name, "command": ["/nonexistent/mcp-scope-test"] })).unwrap()
        };
        let r = Arc::new(Registry::default());
        let servers = Arc::new(McpServers::default());
        ensure_started_in(&servers, "scope-test-a", &r, &[broken("scopetest")]).await;
        ensure_started_in(&servers, "scope-test-b", &r, &[broken("scopetest")]).await;
        // b's list changes (nothing now): a's server stays.
        ensure_started_in(&servers, "scope-test-b", &r, &[]).await;
        let keys: Vec<String> = servers
            .lock()
            .keys()
            .filter(|k| k.contains("scope-test-"))
            .cloned()
            .collect();
        assert_eq!(keys, vec![slot_key("scope-test-a", "scopetest")]);
        ensure_started_in(&servers, "scope-test-a", &r, &[]).await;
        assert!(!servers.lock().keys().any(|k| k.contains("scope-test-")));
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
        assert_eq!(
            out.metadata["images"],
            json!([{ "media_type": "image/png", "data": "AAAA" }])
        );
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
