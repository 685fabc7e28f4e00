//! What the user asks of a server beside its tools: restarting it
//! (`:Mia mcp restart`), reading resources for `@server:uri` mentions, and
//! getting a prompt for a `/server:prompt` slash command.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::catalog::{check_prompt_args, prompt_text, resource_attachment};
use super::{client_for, ensure_started, start_these, McpServerSpec, McpServers, ServerState, Slot};
use crate::tools::registry::{Registry, ToolSource};

/// Longest wait for a stopped server's process to exit.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// Most resources one message may mention.
pub const MAX_MENTIONS: usize = 16;

fn spec_of<'a>(specs: &'a [McpServerSpec], server: &str) -> Result<&'a McpServerSpec, String> {
    specs.iter().find(|s| s.name == server).ok_or_else(|| {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        format!(
            "no MCP server named `{server}` (configured: {})",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )
    })
}

/// Stops server `name` (its process ends), starts it again and registers
/// its tools anew. Answers the new state, or why it did not start.
pub async fn restart(
    servers: &Arc<McpServers>,
    registry: &Arc<Registry>,
    specs: &[McpServerSpec],
    name: &str,
) -> Result<ServerState, String> {
    let spec = spec_of(specs, name)?.clone();
    let _one = servers.starting.lock().await;
    let old = servers.lock().remove(name);
    if let Some(slot) = old {
        if let ServerState::Ready { tools, .. } = &slot.state {
            for t in tools {
                registry.unregister(t, ToolSource::Mcp);
            }
        }
        if let Some(client) = slot.client {
            client.shut_down(STOP_WAIT).await;
        }
    }
    servers.lock().insert(
        name.to_string(),
        Slot {
            spec: spec.clone(),
            state: ServerState::Starting,
            client: None,
        },
    );
    start_these(servers, "", registry, vec![spec]).await;
    let state = servers.lock().get(name).map(|s| s.state.clone());
    match state {
        Some(ServerState::Failed { reason }) => Err(reason),
        Some(state) => Ok(state),
        None => Err("it was removed while starting".into()),
    }
}

/// Starts the configured servers not started yet, then answers `server`'s
/// state: an error when it failed to start.
async fn ready(
    servers: &Arc<McpServers>,
    registry: &Arc<Registry>,
    specs: &[McpServerSpec],
    server: &str,
) -> Result<ServerState, String> {
    spec_of(specs, server)?;
    ensure_started(servers, registry, specs).await;
    let state = servers.lock().get(server).map(|s| s.state.clone());
    match state {
        Some(ServerState::Failed { reason }) => Err(format!("MCP server `{server}` did not start: {reason}")),
        Some(state @ ServerState::Ready { .. }) => Ok(state),
        _ => Err(format!("MCP server `{server}` is not ready")),
    }
}

/// Reads each `(server, uri)` mention and answers their text, ready to be
/// attached to a message ([`resource_attachment`]). The first that cannot
/// be read fails them all, naming it.
pub async fn read_resource(
    servers: &Arc<McpServers>,
    registry: &Arc<Registry>,
    specs: &[McpServerSpec],
    mentions: &[(String, String)],
) -> Result<String, String> {
    if mentions.len() > MAX_MENTIONS {
        return Err(format!(
            "a message may mention at most {MAX_MENTIONS} resources ({} given)",
            mentions.len()
        ));
    }
    let mut parts = Vec::new();
    for (server, uri) in mentions {
        let read = async {
            ready(servers, registry, specs, server).await?;
            let client = client_for(servers, server, server, &Arc::downgrade(registry)).await?;
            client.read_resource(uri).await
        };
        let contents = read.await.map_err(|e| format!("cannot read @{server}:{uri}: {e}"))?;
        parts.push(resource_attachment(server, uri, &contents));
    }
    Ok(parts.join("\n\n"))
}

/// Gets prompt `name` of `server` with `args` (its required arguments
/// checked first) and answers its messages as one user message ([`prompt_text`]).
pub async fn get_prompt(
    servers: &Arc<McpServers>,
    registry: &Arc<Registry>,
    specs: &[McpServerSpec],
    server: &str,
    name: &str,
    args: Map<String, Value>,
) -> Result<String, String> {
    let ServerState::Ready { prompts, .. } = ready(servers, registry, specs, server).await? else {
        return Err(format!("MCP server `{server}` is not ready"));
    };
    let def = prompts
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| format!("MCP server `{server}` has no prompt `{name}`"))?;
    check_prompt_args(def, &args).map_err(|e| format!("/{server}:{name}: {e}"))?;
    let client = client_for(servers, server, server, &Arc::downgrade(registry)).await?;
    let messages = client.get_prompt(name, args).await?;
    let text = prompt_text(&messages);
    if text.trim().is_empty() {
        return Err(format!("MCP server `{server}`: prompt `{name}` gave no text"));
    }
    Ok(text)
}
