//! The tool registry: every tool by name, with where it came from. Sources
//! register in the order built-in, mcp, plugin, user, project; a tool registered
//! under an existing name replaces it unless it comes from an earlier source.

use std::collections::BTreeMap;
use std::sync::RwLock;

use serde::Serialize;
use serde_json::Value;

use super::permissions::PermissionConfig;
use super::schema::{self, Compiled};
use super::{SharedTool, ToolEffect};

/// Where a tool was registered from, in override order (`register` keeps a
/// tool against a weaker source's and lets a stronger one replace it).
pub use mia_proto::ToolSource;

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

/// A registered tool, where it came from, and its parameter schema compiled
/// when it was registered (a call only checks its arguments against it).
#[derive(Clone)]
struct Entry {
    tool: SharedTool,
    source: ToolSource,
    schema: Compiled,
}

pub struct Registry {
    /// The tool each name means now: the one from the latest source.
    tools: RwLock<BTreeMap<String, Entry>>,
    /// The ones it hides, by name: when it goes, the latest of them comes
    /// back (a user's `read_file` unregistered brings the built-in back).
    beneath: RwLock<BTreeMap<String, Vec<Entry>>>,
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
    /// Its parameter schema is compiled once, on the first call checked against it.
    pub fn register(&self, tool: SharedTool, source: ToolSource) -> bool {
        let entry = Entry {
            schema: schema::compile(&tool.parameters()),
            tool,
            source,
        };
        let mut tools = self.tools.write().unwrap_or_else(|p| p.into_inner());
        let mut beneath = self.beneath.write().unwrap_or_else(|p| p.into_inner());
        let name = entry.tool.name().to_string();
        let layers = beneath.entry(name.clone()).or_default();
        layers.retain(|e| e.source != source);
        let front = match tools.get(&name).map(|e| e.source) {
            Some(existing) if existing.rank() > source.rank() => {
                layers.push(entry);
                false
            }
            Some(existing) if existing == source => {
                tools.insert(name.clone(), entry);
                true
            }
            Some(_) => {
                if let Some(old) = tools.insert(name.clone(), entry) {
                    layers.push(old);
                }
                true
            }
            None => {
                tools.insert(name.clone(), entry);
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
        let left = tools.get(name).is_some_and(|e| e.source == source);
        if left {
            tools.remove(name);
            if let Some(layers) = beneath.get_mut(name) {
                if let Some(i) = (0..layers.len()).max_by_key(|&i| layers[i].source.rank()) {
                    let entry = layers.swap_remove(i);
                    back = Some(entry.source);
                    tools.insert(name.to_string(), entry);
                }
            }
        } else if let Some(layers) = beneath.get_mut(name) {
            layers.retain(|e| e.source != source);
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
            .map(|e| ToolInfo {
                name: e.tool.name().to_string(),
                description: e.tool.description().to_string(),
                parameters: e.tool.parameters(),
                source: e.source,
                effect: e.tool.effect(),
            })
            .collect();
        out.sort_by(|a, b| (a.source, &a.name).cmp(&(b.source, &b.name)));
        out
    }

    pub fn get(&self, name: &str) -> Result<SharedTool, ToolNotFound> {
        self.get_checked(name).map(|(tool, _)| tool)
    }

    /// The tool `name` with its parameter schema compiled at registration,
    /// for [`schema::check`]ing a call's arguments.
    pub fn get_checked(&self, name: &str) -> Result<(SharedTool, Compiled), ToolNotFound> {
        let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
        tools
            .get(name)
            .map(|e| (e.tool.clone(), e.schema.clone()))
            .ok_or_else(|| ToolNotFound {
                name: name.to_string(),
                known: tools.keys().cloned().collect::<Vec<_>>().join(", "),
            })
    }

    /// The tools `mode` may be offered under `permissions`.
    pub fn available(&self, mode: &str, permissions: &PermissionConfig) -> Vec<SharedTool> {
        let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
        tools
            .values()
            .filter(|e| permissions.offered(mode, e.tool.name(), e.tool.effect()))
            .map(|e| e.tool.clone())
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

    /// A tool whose schema is whatever it was registered with.
    struct Shaped(Value);
    impl Tool for Shaped {
        fn name(&self) -> &str {
            "shaped"
        }
        fn description(&self) -> &str {
            ""
        }
        fn parameters(&self) -> Value {
            self.0.clone()
        }
        fn effect(&self) -> ToolEffect {
            ToolEffect::Read
        }
        fn call(&self, _: Value, _: ToolContext) -> BoxFuture<'static, ToolOutput> {
            Box::pin(async { ToolOutput::ok("") })
        }
    }

    #[test]
    fn a_tool_registered_again_is_checked_against_its_new_schema() {
        let r = Registry::default();
        let needs = |key: &str| serde_json::json!({"type": "object", "required": [key]});
        let check = |args: Value| {
            let (_, compiled) = r.get_checked("shaped").unwrap();
            schema::check("shaped", &compiled, &args)
        };
        r.register(Arc::new(Shaped(needs("path"))), ToolSource::User);
        assert_eq!(check(serde_json::json!({"path": "a"})), Ok(()));
        assert!(check(serde_json::json!({"query": "a"})).is_err());
        r.register(Arc::new(Shaped(needs("query"))), ToolSource::User);
        assert_eq!(check(serde_json::json!({"query": "a"})), Ok(()));
        let err = check(serde_json::json!({"path": "a"})).unwrap_err().to_string();
        assert!(err.contains("\"query\" is a required property"), "{err}");
        // Back to the one it hid: that one's schema again.
        r.register(Arc::new(Shaped(needs("path"))), ToolSource::Project);
        assert_eq!(check(serde_json::json!({"path": "a"})), Ok(()));
        r.unregister("shaped", ToolSource::Project);
        assert_eq!(check(serde_json::json!({"query": "a"})), Ok(()));
    }

    #[test]
    fn a_lua_tool_registered_again_gets_a_fresh_validator() {
        use crate::tools::lua_tool::{LuaTool, LuaToolSpec};
        let r = Registry::default();
        let lua = |parameters: Value| {
            let spec: LuaToolSpec =
                serde_json::from_value(serde_json::json!({"name": "lt", "parameters": parameters})).unwrap();
            Arc::new(LuaTool { spec })
        };
        let typed = |ty: &str| serde_json::json!({"type": "object", "properties": {"n": {"type": ty}}});
        let check = |args: Value| {
            let (_, compiled) = r.get_checked("lt").unwrap();
            schema::check("lt", &compiled, &args)
        };
        r.register(lua(typed("string")), ToolSource::User);
        assert_eq!(check(serde_json::json!({"n": "x"})), Ok(()));
        assert!(check(serde_json::json!({"n": 1})).is_err());
        r.register(lua(typed("integer")), ToolSource::User);
        assert_eq!(check(serde_json::json!({"n": 1})), Ok(()));
        assert!(check(serde_json::json!({"n": "x"})).is_err());
        // A schema that does not compile is reported at the call, as before.
        r.register(lua(typed("nonsense")), ToolSource::User);
        let err = check(serde_json::json!({"n": 1})).unwrap_err();
        assert!(matches!(err, crate::tools::ToolError::InvalidSchema(_)), "{err:?}");
        assert!(
            err.to_string().starts_with("`lt` has an invalid parameter schema"),
            "{err}"
        );
    }
}
