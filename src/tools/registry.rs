//! The tool registry: every tool by name, with where it came from. Sources
//! register in the order built-in, mcp, plugin, user, project; a tool registered
//! under an existing name replaces it unless it comes from an earlier source.

use std::collections::BTreeMap;
use std::sync::RwLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::permissions::PermissionConfig;
use super::{SharedTool, ToolEffect};

/// Where a tool was registered from, in override order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolSource {
    Builtin,
    /// A Model Context Protocol server's tool (`server__tool`, see `crate::mcp`).
    Mcp,
    Plugin,
    User,
    Project,
}

impl ToolSource {
    /// Every source from weakest to strongest: `register` keeps a tool
    /// against one from an earlier source in this list and lets a later one
    /// replace it. Lua reads it through `mia_core.shared()`.
    pub const PRECEDENCE: [ToolSource; 5] = [
        ToolSource::Builtin,
        ToolSource::Mcp,
        ToolSource::Plugin,
        ToolSource::User,
        ToolSource::Project,
    ];

    /// This source's place in [`ToolSource::PRECEDENCE`].
    pub fn rank(self) -> usize {
        Self::PRECEDENCE.iter().position(|s| *s == self).unwrap_or(0)
    }
}

/// What `list()` shows of a tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub source: ToolSource,
    pub effect: ToolEffect,
}

/// A tool that came to the front of its name or left it (what the model
/// can call changed). Lua turns MCP tools' changes into `MiaToolRegistered`
/// and `MiaToolDeregistered` (Lua tools and built-ins announce themselves).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolChange {
    pub name: String,
    pub source: ToolSource,
    pub registered: bool,
}

/// How many changes a slow listener may fall behind before it loses the
/// oldest (it is told how many).
const CHANGE_BACKLOG: usize = 1024;

/// No tool of that name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("no tool named `{name}`; available tools: {known}")]
pub struct ToolNotFound {
    pub name: String,
    pub known: String,
}

pub struct Registry {
    /// The tool each name means now: the one from the latest source.
    tools: RwLock<BTreeMap<String, (SharedTool, ToolSource)>>,
    /// The ones it hides, by name: when it goes, the latest of them comes
    /// back (a user's `read_file` unregistered brings the built-in back).
    beneath: RwLock<BTreeMap<String, Vec<(SharedTool, ToolSource)>>>,
    /// Every change of what a name means, to whoever listens.
    changes: tokio::sync::broadcast::Sender<ToolChange>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            tools: RwLock::default(),
            beneath: RwLock::default(),
            changes: tokio::sync::broadcast::channel(CHANGE_BACKLOG).0,
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("tools", &self.names()).finish()
    }
}

impl Registry {
    /// A registry holding the built-in tools.
    pub fn with_builtins() -> Self {
        let r = Registry::default();
        for tool in super::builtin::all() {
            r.register(tool, ToolSource::Builtin);
        }
        r
    }

    /// The changes from now on (see [`ToolChange`]).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ToolChange> {
        self.changes.subscribe()
    }

    fn announce(&self, name: &str, source: ToolSource, registered: bool) {
        // No listener is fine: nobody asked.
        let _ = self.changes.send(ToolChange {
            name: name.to_string(),
            source,
            registered,
        });
    }

    /// Adds `tool` (in place of one from the same source). Returns false
    /// when a tool of that name from a later source stays in front: `tool`
    /// is then kept beneath it, and comes forward when that one goes.
    pub fn register(&self, tool: SharedTool, source: ToolSource) -> bool {
        let mut tools = self.tools.write().unwrap_or_else(|p| p.into_inner());
        let mut beneath = self.beneath.write().unwrap_or_else(|p| p.into_inner());
        let name = tool.name().to_string();
        let layers = beneath.entry(name.clone()).or_default();
        layers.retain(|(_, s)| *s != source);
        let front = match tools.get(&name) {
            Some((_, existing)) if existing.rank() > source.rank() => {
                layers.push((tool, source));
                false
            }
            Some((_, existing)) if *existing == source => {
                tools.insert(name.clone(), (tool, source));
                true
            }
            Some(_) => {
                if let Some(old) = tools.insert(name.clone(), (tool, source)) {
                    layers.push(old);
                }
                true
            }
            None => {
                tools.insert(name.clone(), (tool, source));
                true
            }
        };
        if beneath.get(&name).is_some_and(Vec::is_empty) {
            beneath.remove(&name);
        }
        drop((tools, beneath));
        if front {
            self.announce(&name, source, true);
        }
        front
    }

    /// Removes the tool `name` registered from `source` (e.g. project tools
    /// when leaving a project); the latest one it hid comes back.
    pub fn unregister(&self, name: &str, source: ToolSource) {
        let mut tools = self.tools.write().unwrap_or_else(|p| p.into_inner());
        let mut beneath = self.beneath.write().unwrap_or_else(|p| p.into_inner());
        let mut back = None;
        let left = tools.get(name).is_some_and(|(_, s)| *s == source);
        if left {
            tools.remove(name);
            if let Some(layers) = beneath.get_mut(name) {
                if let Some(i) = (0..layers.len()).max_by_key(|&i| layers[i].1.rank()) {
                    let (tool, from) = layers.swap_remove(i);
                    back = Some(from);
                    tools.insert(name.to_string(), (tool, from));
                }
            }
        } else if let Some(layers) = beneath.get_mut(name) {
            layers.retain(|(_, s)| *s != source);
        }
        if beneath.get(name).is_some_and(Vec::is_empty) {
            beneath.remove(name);
        }
        drop((tools, beneath));
        if left {
            self.announce(name, source, false);
        }
        if let Some(from) = back {
            self.announce(name, from, true);
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.tools
            .read()
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every tool, sorted by source then name.
    pub fn list(&self) -> Vec<ToolInfo> {
        let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<ToolInfo> = tools
            .values()
            .map(|(t, source)| ToolInfo {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: t.parameters(),
                source: *source,
                effect: t.effect(),
            })
            .collect();
        out.sort_by(|a, b| (a.source, &a.name).cmp(&(b.source, &b.name)));
        out
    }

    pub fn get(&self, name: &str) -> Result<SharedTool, ToolNotFound> {
        let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
        tools.get(name).map(|(t, _)| t.clone()).ok_or_else(|| ToolNotFound {
            name: name.to_string(),
            known: tools.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    /// The tools `mode` may be offered under `permissions`.
    pub fn available(&self, mode: &str, permissions: &PermissionConfig) -> Vec<SharedTool> {
        let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
        tools
            .values()
            .filter(|(t, _)| permissions.offered(mode, t.name(), t.effect()))
            .map(|(t, _)| t.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Tool, ToolContext, ToolOutput};
    use futures_util::future::BoxFuture;
    use std::sync::Arc;

    struct Fake(&'static str, &'static str, ToolEffect);
    impl Tool for Fake {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            self.1
        }
        fn parameters(&self) -> Value {
            serde_json::json!({"type": "object"})
        }
        fn effect(&self) -> ToolEffect {
            self.2
        }
        fn call(&self, _: Value, _: ToolContext) -> BoxFuture<'static, ToolOutput> {
            Box::pin(async { ToolOutput::ok("") })
        }
    }

    #[test]
    fn later_sources_override_earlier_ones_and_not_the_reverse() {
        let r = Registry::default();
        assert!(r.register(Arc::new(Fake("t", "builtin", ToolEffect::Read)), ToolSource::Builtin));
        assert!(r.register(Arc::new(Fake("t", "user", ToolEffect::Read)), ToolSource::User));
        assert!(!r.register(Arc::new(Fake("t", "plugin", ToolEffect::Read)), ToolSource::Plugin));
        assert!(r.register(Arc::new(Fake("t", "project", ToolEffect::Read)), ToolSource::Project));
        assert_eq!(r.get("t").unwrap().description(), "project");
        assert_eq!(r.list()[0].source, ToolSource::Project);
        // Each one going brings back the latest it hid.
        r.unregister("t", ToolSource::Project);
        assert_eq!(r.get("t").unwrap().description(), "user");
        r.unregister("t", ToolSource::Plugin); // beneath: goes quietly
        r.unregister("t", ToolSource::User);
        assert_eq!(r.get("t").unwrap().description(), "builtin");
        assert!(r.register(Arc::new(Fake("t", "builtin 2", ToolEffect::Read)), ToolSource::Builtin));
        assert_eq!(r.get("t").unwrap().description(), "builtin 2");
        r.unregister("t", ToolSource::Builtin);
        assert!(r.get("t").is_err() && r.beneath.read().unwrap().is_empty());
    }

    #[test]
    fn changes_of_what_a_name_means_are_announced() {
        let r = Registry::default();
        let mut rx = r.subscribe();
        let change = |name: &str, source, registered| ToolChange {
            name: name.to_string(),
            source,
            registered,
        };
        r.register(Arc::new(Fake("t", "", ToolEffect::Read)), ToolSource::Builtin);
        r.register(Arc::new(Fake("t", "", ToolEffect::Read)), ToolSource::Mcp);
        r.register(Arc::new(Fake("t", "", ToolEffect::Read)), ToolSource::Builtin); // beneath: silent
        r.unregister("t", ToolSource::Mcp);
        r.unregister("nothing", ToolSource::Mcp); // silent
        let seen: Vec<ToolChange> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(
            seen,
            vec![
                change("t", ToolSource::Builtin, true),
                change("t", ToolSource::Mcp, true),
                change("t", ToolSource::Mcp, false),
                change("t", ToolSource::Builtin, true),
            ]
        );
    }

    #[test]
    fn unknown_tool_lists_the_known_ones() {
        let r = Registry::default();
        r.register(Arc::new(Fake("a", "", ToolEffect::Read)), ToolSource::User);
        let err = r.get("b").err().unwrap();
        assert_eq!(err.to_string(), "no tool named `b`; available tools: a");
    }

    #[test]
    fn available_filters_by_mode() {
        let r = Registry::default();
        r.register(Arc::new(Fake("read", "", ToolEffect::Read)), ToolSource::Builtin);
        r.register(Arc::new(Fake("write", "", ToolEffect::Write)), ToolSource::Builtin);
        let p = PermissionConfig::default();
        let names = |mode| {
            r.available(mode, &p)
                .iter()
                .map(|t| t.name().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("architect"), vec!["read"]);
        assert_eq!(names("ask"), vec!["read", "write"]);
    }
}
