//! The vocabulary the core and its front-ends (Neovim's Lua, mia-acp's
//! client) share, with no upward dependency: what the core asks of the
//! editor ([`EditorCall`]), and the small types those questions and the
//! core's events carry ([`AskOptions`], [`ToolSource`]).
//!
//! Each kind of call is spelled here once: Rust code builds and matches the
//! enum, never a kind string. The JSON the editor receives keeps the shape
//! it always had (`call_kind` beside `data`, see [`EditorCall::kind`] and
//! [`EditorCall::payload`]), so `lua/mia/bridge.lua`'s handlers read it
//! unchanged.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

pub mod reply;

/// What the core asks of the editor. The editor answers with a JSON value
/// (the reply each variant documents) or an error message.
///
/// On the wire: `{ "call_kind": <kind>, "data": <payload> }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call_kind", content = "data")]
pub enum EditorCall {
    /// Run a Lua tool. Reply: its result (`{ content, … }`,
    /// or `{ proposal = { content, message? } }` for an editing tool;
    /// [`reply::ToolReply`]).
    #[serde(rename = "tool")]
    Tool(ToolRun),
    /// Compute a Lua tool's subject with its subject function. Reply:
    /// `nil`, a path, or `{ path | command | text = … }` ([`reply::SubjectReply`]).
    #[serde(rename = "subject")]
    Subject(SubjectRequest),
    /// Ask the user a question (`ctx.ask`). Reply: the answer string, or
    /// anything else for none ([`reply::AskReply`]).
    #[serde(rename = "ask")]
    Ask(Question),
    /// A yes/no question of the core's own (a budget to cross). Reply: `true`
    /// to go on ([`reply::ConfirmReply`]).
    #[serde(rename = "confirm")]
    Confirm(Confirm),
    /// Run the `pre_request` transform hooks on a model request. Reply: the
    /// request as the hooks leave it (read by the core's `HookReply`, which
    /// knows the request's type). Its empty lists must stay lists.
    #[serde(rename = "hook")]
    Hook(Value),
    /// ACP's `session/request_permission` (with mia's `_meta.mia`: a
    /// review's diff, the agent). Reply: ACP's `RequestPermissionResponse`
    /// ([`reply::PermissionReply`]).
    #[serde(rename = "session/request_permission")]
    Permission(Value),
    /// ACP's `fs/read_text_file`, for an open buffer's text. Reply:
    /// `{ content, _meta.mia = { modified, fileformat, … } }`, or `nil`
    /// when no buffer holds the file ([`reply::ReadReply`]).
    #[serde(rename = "fs/read_text_file")]
    ReadTextFile(Value),
    /// ACP's `fs/write_text_file`, landing a change in an open buffer.
    /// Reply: `{ written = true }`, `{ rejected = true, reason }`, or `nil`
    /// when no buffer holds the file ([`reply::WriteReply`]).
    #[serde(rename = "fs/write_text_file")]
    WriteTextFile(Value),
    /// ACP's `terminal/create` for an external agent. Reply: ACP's `CreateTerminalResponse`.
    #[serde(rename = "terminal/create")]
    TerminalCreate(Value),
    /// ACP's `terminal/output`. Reply: ACP's `TerminalOutputResponse`.
    #[serde(rename = "terminal/output")]
    TerminalOutput(Value),
    /// ACP's `terminal/wait_for_exit`. Reply: ACP's `WaitForTerminalExitResponse`.
    #[serde(rename = "terminal/wait_for_exit")]
    TerminalWaitForExit(Value),
    /// ACP's `terminal/kill`. Reply: ACP's `KillTerminalResponse`.
    #[serde(rename = "terminal/kill")]
    TerminalKill(Value),
    /// ACP's `terminal/release`. Reply: ACP's `ReleaseTerminalResponse`.
    #[serde(rename = "terminal/release")]
    TerminalRelease(Value),
}

impl EditorCall {
    /// The kind as the editor reads it (`call_kind`); the same string serde
    /// writes (a unit test holds the two together).
    pub fn kind(&self) -> &'static str {
        match self {
            EditorCall::Tool(_) => "tool",
            EditorCall::Subject(_) => "subject",
            EditorCall::Ask(_) => "ask",
            EditorCall::Confirm(_) => "confirm",
            EditorCall::Hook(_) => "hook",
            EditorCall::Permission(_) => "session/request_permission",
            EditorCall::ReadTextFile(_) => "fs/read_text_file",
            EditorCall::WriteTextFile(_) => "fs/write_text_file",
            EditorCall::TerminalCreate(_) => "terminal/create",
            EditorCall::TerminalOutput(_) => "terminal/output",
            EditorCall::TerminalWaitForExit(_) => "terminal/wait_for_exit",
            EditorCall::TerminalKill(_) => "terminal/kill",
            EditorCall::TerminalRelease(_) => "terminal/release",
        }
    }

    /// The call's `data`, serialized without the tag (the editor reads the
    /// kind and the payload as two fields of the event).
    pub fn payload(&self) -> Payload<'_> {
        Payload(self)
    }
}

/// [`EditorCall`]'s payload alone, for serializing (see [`EditorCall::payload`]).
#[derive(Debug, Clone, Copy)]
pub struct Payload<'a>(&'a EditorCall);

impl Serialize for Payload<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            EditorCall::Tool(t) => t.serialize(s),
            EditorCall::Subject(r) => r.serialize(s),
            EditorCall::Ask(q) => q.serialize(s),
            EditorCall::Confirm(c) => c.serialize(s),
            EditorCall::Hook(v)
            | EditorCall::Permission(v)
            | EditorCall::ReadTextFile(v)
            | EditorCall::WriteTextFile(v)
            | EditorCall::TerminalCreate(v)
            | EditorCall::TerminalOutput(v)
            | EditorCall::TerminalWaitForExit(v)
            | EditorCall::TerminalKill(v)
            | EditorCall::TerminalRelease(v) => v.serialize(s),
        }
    }
}

/// A Lua tool's run: its name, the model's arguments and the call's context
/// (`ctx` as Lua's tool function receives it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRun {
    pub name: String,
    pub arguments: Value,
    pub ctx: Value,
}

/// The call of Lua tool `name` whose subject is asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubjectRequest {
    pub name: String,
    pub arguments: Value,
}

/// A question for the user and how to ask it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub question: String,
    pub opts: AskOptions,
}

/// Options of a question, as Lua's `ctx.ask` takes them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AskOptions {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Milliseconds before the default answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    pub allow_freeform: bool,
}

/// The core's own yes/no questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Confirm {
    /// A request would cross a budget that asks first; `reason` says which.
    Budget { reason: String },
}

/// Where a tool was registered from, in override order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolSource {
    Builtin,
    /// A Model Context Protocol server's tool (`server__tool`).
    Mcp,
    Plugin,
    User,
    Project,
}

impl ToolSource {
    /// Every source from weakest to strongest: a registry keeps a tool
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// One call of every kind, with the exact JSON the editor receives for it.
    fn every_kind() -> Vec<(EditorCall, Value)> {
        let acp = json!({ "sessionId": "s1", "path": "/p/a.txt", "_meta": { "mia": { "loaded": true } } });
        vec![
            (
                EditorCall::Tool(ToolRun {
                    name: "wc".into(),
                    arguments: json!({ "path": "a" }),
                    ctx: json!({ "session_id": "s1", "call_id": "c1" }),
                }),
                json!({ "call_kind": "tool", "data": {
                    "name": "wc", "arguments": { "path": "a" }, "ctx": { "session_id": "s1", "call_id": "c1" } } }),
            ),
            (
                EditorCall::Subject(SubjectRequest {
                    name: "wc".into(),
                    arguments: json!({ "path": "a" }),
                }),
                json!({ "call_kind": "subject", "data": { "name": "wc", "arguments": { "path": "a" } } }),
            ),
            (
                EditorCall::Ask(Question {
                    question: "Proceed?".into(),
                    opts: AskOptions {
                        choices: vec!["yes".into(), "no".into()],
                        default: Some("no".into()),
                        timeout: Some(500),
                        allow_freeform: false,
                    },
                }),
                json!({ "call_kind": "ask", "data": { "question": "Proceed?", "opts": {
                    "choices": ["yes", "no"], "default": "no", "timeout": 500, "allow_freeform": false } } }),
            ),
            (
                EditorCall::Ask(Question {
                    question: "Name?".into(),
                    opts: AskOptions {
                        allow_freeform: true,
                        ..AskOptions::default()
                    },
                }),
                json!({ "call_kind": "ask", "data": { "question": "Name?", "opts": { "allow_freeform": true } } }),
            ),
            (
                EditorCall::Confirm(Confirm::Budget {
                    reason: "Today's budget is crossed.".into(),
                }),
                json!({ "call_kind": "confirm", "data": { "kind": "budget", "reason": "Today's budget is crossed." } }),
            ),
            (
                EditorCall::Hook(json!({ "model": "m", "messages": [], "tools": [] })),
                json!({ "call_kind": "hook", "data": { "model": "m", "messages": [], "tools": [] } }),
            ),
            (
                EditorCall::Permission(json!({ "sessionId": "s1", "options": [] })),
                json!({ "call_kind": "session/request_permission", "data": { "sessionId": "s1", "options": [] } }),
            ),
            (
                EditorCall::ReadTextFile(acp.clone()),
                json!({ "call_kind": "fs/read_text_file", "data": acp }),
            ),
            (
                EditorCall::WriteTextFile(json!({ "path": "/p/a.txt", "content": "x" })),
                json!({ "call_kind": "fs/write_text_file", "data": { "path": "/p/a.txt", "content": "x" } }),
            ),
            (
                EditorCall::TerminalCreate(json!({ "command": "ls" })),
                json!({ "call_kind": "terminal/create", "data": { "command": "ls" } }),
            ),
            (
                EditorCall::TerminalOutput(json!({ "terminalId": "t" })),
                json!({ "call_kind": "terminal/output", "data": { "terminalId": "t" } }),
            ),
            (
                EditorCall::TerminalWaitForExit(json!({ "terminalId": "t" })),
                json!({ "call_kind": "terminal/wait_for_exit", "data": { "terminalId": "t" } }),
            ),
            (
                EditorCall::TerminalKill(json!({ "terminalId": "t" })),
                json!({ "call_kind": "terminal/kill", "data": { "terminalId": "t" } }),
            ),
            (
                EditorCall::TerminalRelease(json!({ "terminalId": "t" })),
                json!({ "call_kind": "terminal/release", "data": { "terminalId": "t" } }),
            ),
        ]
    }

    #[test]
    fn every_kind_has_its_pinned_wire_shape_and_reads_back_the_same() {
        for (call, wire) in every_kind() {
            assert_eq!(serde_json::to_value(&call).unwrap(), wire, "{call:?}");
            let back: EditorCall = serde_json::from_value(wire.clone()).unwrap();
            assert_eq!(back, call, "{wire}");
        }
    }

    #[test]
    fn kind_and_payload_are_the_two_halves_of_the_wire_shape() {
        for (call, wire) in every_kind() {
            assert_eq!(call.kind(), wire["call_kind"], "{call:?}");
            assert_eq!(serde_json::to_value(call.payload()).unwrap(), wire["data"], "{call:?}");
        }
    }

    #[test]
    fn an_unknown_kind_is_refused() {
        let err = serde_json::from_value::<EditorCall>(json!({ "call_kind": "nope", "data": {} })).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn tool_sources_serialize_snake_case_in_precedence_order() {
        let names: Vec<Value> = ToolSource::PRECEDENCE
            .iter()
            .map(|s| serde_json::to_value(s).unwrap())
            .collect();
        assert_eq!(
            names,
            vec![
                json!("builtin"),
                json!("mcp"),
                json!("plugin"),
                json!("user"),
                json!("project")
            ]
        );
        assert!(ToolSource::PRECEDENCE.iter().enumerate().all(|(i, s)| s.rank() == i));
    }
}
