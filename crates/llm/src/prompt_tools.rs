//! Tools for a provider with no native tool field (`providers.NAME.native_tools
//! = false`: a server or model that refuses `tools`). The tools go into the
//! system prompt instead, each with its full description and its parameters'
//! JSON Schema; the model calls one by writing
//! `<tool_call>{"name": …, "arguments": {…}}</tool_call>` in its answer, and
//! [`CallExtractor`] turns that text back into the same tool-call events a
//! native call gives. Earlier calls and results in the history are written in
//! the same tags, so the conversation reads the same to the model.

use serde_json::{json, Value};

use super::delta::{DecodeEvent, Delta, MAX_TOOL_CALLS};
use super::message::{ChatRequest, Message, Part, Role, StopReason};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// Most bytes one written call may take before it is given up as text.
const MAX_CALL_BYTES: usize = 1 << 20;

/// `req` for a provider without native tools: no `tools` field, the tools
/// and the calling protocol in the system prompt, tool calls and results
/// in the history as tagged text. A request without tools is unchanged.
pub fn into_prompt(req: &ChatRequest) -> ChatRequest {
    let mut out = req.clone();
    if req.tools.is_empty() && !has_tool_parts(&req.messages) {
        return out;
    }
    let mut section = String::from(
        "You can call tools. To call one, write exactly\n\
         <tool_call>{\"name\": \"TOOL\", \"arguments\": {…}}</tool_call>\n\
         with the arguments as JSON matching the tool's parameters, one block per call, \
         and then stop: the results come back in <tool_result> blocks.\n\nTools:\n",
    );
    for t in &req.tools {
        section.push_str(&format!(
            "\n## {}\n{}\nParameters (JSON Schema): {}\n",
            t.name,
            t.description.trim(),
            t.parameters
        ));
    }
    out.system = Some(match &req.system {
        Some(s) if !s.is_empty() => format!("{s}\n\n{section}"),
        _ => section,
    });
    out.tools.clear();
    out.messages = req.messages.iter().map(as_text).collect();
    out
}

fn has_tool_parts(messages: &[Message]) -> bool {
    messages
        .iter()
        .flat_map(|m| &m.parts)
        .any(|p| matches!(p, Part::ToolCall { .. } | Part::ToolResult { .. }))
}

/// A message with its tool calls and results written as tagged text (tool
/// results come from the user, as the model sees them).
fn as_text(m: &Message) -> Message {
    let parts = m
        .parts
        .iter()
        .map(|p| match p {
            Part::ToolCall { name, arguments, .. } => Part::Text {
                // Written by hand so that "name" comes first, as the system
                // prompt shows, whatever map order serde_json was built with.
                text: format!(
                    "{OPEN}{{\"name\":{},\"arguments\":{arguments}}}{CLOSE}",
                    Value::from(name.as_str())
                ),
            },
            Part::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => Part::Text {
                text: format!(
                    "<tool_result id=\"{}\"{}>\n{content}\n</tool_result>",
                    tool_call_id.replace('"', "'"),
                    if *is_error { " error=\"true\"" } else { "" }
                ),
            },
            other => other.clone(),
        })
        .collect();
    let role = if m.role == Role::Tool { Role::User } else { m.role };
    Message { role, parts }
}

/// Finds `<tool_call>` blocks in an answer's text as it streams: text
/// outside them passes on (a possible start of a tag is held back until it
/// is known), each block becomes a tool call, and a block that is not a
/// call (bad JSON, no name, too long, never closed) is passed on as the
/// text it was, so nothing the model wrote is lost.
#[derive(Debug)]
pub struct CallExtractor {
    id_prefix: String,
    /// Text not yet passed on: a partial opening tag, or an open block.
    pending: String,
    inside: bool,
    /// How much of an open block's `pending` is known to hold no closing
    /// tag: each chunk is searched once, not the whole block again.
    scanned: usize,
    calls: usize,
}

impl CallExtractor {
    /// An extractor whose call ids start with `id_prefix` (unique per answer).
    pub fn new(id_prefix: &str) -> Self {
        CallExtractor {
            id_prefix: id_prefix.to_string(),
            pending: String::new(),
            inside: false,
            scanned: 0,
            calls: 0,
        }
    }

    /// Passes `event` on as the events it stands for.
    pub fn feed(&mut self, event: DecodeEvent, out: &mut Vec<DecodeEvent>) {
        match event {
            DecodeEvent::Delta(Delta::Text { text }) => self.text(&text, out),
            DecodeEvent::Finish(reason) => {
                self.flush(out);
                let reason = match reason {
                    StopReason::EndTurn | StopReason::StopSequence if self.calls > 0 => StopReason::ToolUse,
                    r => r,
                };
                out.push(DecodeEvent::Finish(reason));
            }
            DecodeEvent::Terminal => {
                self.flush(out);
                out.push(DecodeEvent::Terminal);
            }
            other => out.push(other),
        }
    }

    /// Passes on whatever is held back (an unclosed block as its text).
    pub fn flush(&mut self, out: &mut Vec<DecodeEvent>) {
        self.inside = false;
        self.scanned = 0;
        if !self.pending.is_empty() {
            let text = std::mem::take(&mut self.pending);
            out.push(DecodeEvent::Delta(Delta::Text { text }));
        }
    }

    fn text(&mut self, text: &str, out: &mut Vec<DecodeEvent>) {
        self.pending.push_str(text);
        loop {
            if self.inside {
                // Search only what arrived since the last look (with room
                // for a tag split across chunks).
                let mut from = self.scanned.saturating_sub(CLOSE.len() - 1).max(OPEN.len());
                while !self.pending.is_char_boundary(from) {
                    from -= 1;
                }
                let Some(end) = self.pending[from..].find(CLOSE).map(|i| from + i) else {
                    self.scanned = self.pending.len();
                    if self.pending.len() > MAX_CALL_BYTES {
                        self.flush(out);
                    }
                    return;
                };
                let block: String = self.pending.drain(..end + CLOSE.len()).collect();
                self.inside = false;
                self.scanned = 0;
                let body = &block[OPEN.len()..block.len() - CLOSE.len()];
                if !self.call(body, out) {
                    out.push(DecodeEvent::Delta(Delta::Text { text: block }));
                }
                continue;
            }
            match self.pending.find(OPEN) {
                Some(start) => {
                    if start > 0 {
                        let before: String = self.pending.drain(..start).collect();
                        out.push(DecodeEvent::Delta(Delta::Text { text: before }));
                    }
                    self.inside = true;
                    self.scanned = 0;
                }
                None => {
                    // Hold back a tail that could still become "<tool_call>".
                    let keep = partial_open_len(&self.pending);
                    let cut = self.pending.len() - keep;
                    if cut > 0 {
                        let before: String = self.pending.drain(..cut).collect();
                        out.push(DecodeEvent::Delta(Delta::Text { text: before }));
                    }
                    return;
                }
            }
        }
    }

    /// Emits the call `body` writes, if it is one.
    fn call(&mut self, body: &str, out: &mut Vec<DecodeEvent>) -> bool {
        let Ok(Value::Object(mut call)) = serde_json::from_str::<Value>(body.trim()) else {
            return false;
        };
        let Some(Value::String(name)) = call.remove("name") else {
            return false;
        };
        if name.is_empty() || self.calls >= MAX_TOOL_CALLS {
            return false;
        }
        let arguments = match call.remove("arguments") {
            Some(v @ Value::Object(_)) => v,
            None | Some(Value::Null) => json!({}),
            // arguments written as a JSON string holding the object
            Some(Value::String(s)) => match serde_json::from_str::<Value>(&s) {
                Ok(v @ Value::Object(_)) => v,
                _ => return false,
            },
            Some(_) => return false,
        };
        let id = format!("{}{}", self.id_prefix, self.calls);
        self.calls += 1;
        out.push(DecodeEvent::Delta(Delta::ToolCallStart { id: id.clone(), name }));
        out.push(DecodeEvent::Delta(Delta::ToolCallDelta {
            id: id.clone(),
            arguments_delta: arguments.to_string(),
        }));
        out.push(DecodeEvent::Delta(Delta::ToolCallEnd { id, arguments }));
        true
    }
}

/// How many bytes at the end of `s` are a proper prefix of the opening tag.
fn partial_open_len(s: &str) -> usize {
    (1..OPEN.len())
        .rev()
        .find(|&n| s.len() >= n && s.is_char_boundary(s.len() - n) && OPEN.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolDef;

    fn run(pieces: &[&str]) -> Vec<DecodeEvent> {
        let mut x = CallExtractor::new("c_");
        let mut out = Vec::new();
        for p in pieces {
            x.feed(DecodeEvent::Delta(Delta::Text { text: p.to_string() }), &mut out);
        }
        x.feed(DecodeEvent::Finish(StopReason::EndTurn), &mut out);
        x.feed(DecodeEvent::Terminal, &mut out);
        out
    }

    fn text_of(events: &[DecodeEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                DecodeEvent::Delta(Delta::Text { text }) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn calls_of(events: &[DecodeEvent]) -> Vec<(String, Value)> {
        events
            .iter()
            .filter_map(|e| match e {
                DecodeEvent::Delta(Delta::ToolCallEnd { id, arguments }) => Some((id.clone(), arguments.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_written_call_becomes_a_tool_call_at_every_split() {
        let answer =
            "Let me look.\n<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.rs\"}}</tool_call>";
        for cut in 1..answer.len() {
            if !answer.is_char_boundary(cut) {
                continue;
            }
            let out = run(&[&answer[..cut], &answer[cut..]]);
            assert_eq!(text_of(&out), "Let me look.\n", "cut at {cut}");
            assert_eq!(calls_of(&out), vec![("c_0".to_string(), json!({ "path": "a.rs" }))]);
            assert!(out.contains(&DecodeEvent::Finish(StopReason::ToolUse)));
        }
        // one byte at a time
        let bytes: Vec<String> = answer.chars().map(String::from).collect();
        let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(calls_of(&run(&refs)).len(), 1);
    }

    #[test]
    fn what_is_not_a_call_stays_text_and_the_answer_ends_normally() {
        for answer in [
            "a < b and <tool_ca",
            "<tool_call>not json</tool_call> after",
            "<tool_call>{\"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": \"x\", \"arguments\": [1]}</tool_call>",
            "<tool_call>{\"name\": \"x\"",
            "日本語 <tool_call",
        ] {
            let out = run(&[answer]);
            assert_eq!(text_of(&out), answer);
            assert!(calls_of(&out).is_empty(), "{answer}");
            assert!(out.contains(&DecodeEvent::Finish(StopReason::EndTurn)), "{answer}");
        }
    }

    #[test]
    fn two_calls_get_distinct_ids_and_string_arguments_are_read() {
        let out = run(&[
            "<tool_call>{\"name\": \"a\"}</tool_call> and ",
            "<tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"k\\\": 1}\"}</tool_call>",
        ]);
        assert_eq!(
            calls_of(&out),
            vec![("c_0".into(), json!({})), ("c_1".into(), json!({ "k": 1 }))]
        );
        assert_eq!(text_of(&out), " and ");
    }

    #[test]
    fn a_block_in_tiny_pieces_is_found_once_its_tag_closes() {
        let mut x = CallExtractor::new("c_");
        let mut out = Vec::new();
        let arg = "é".repeat(2000);
        let answer = format!("<tool_call>{{\"name\": \"n\", \"arguments\": {{\"a\": \"{arg}\"}}}}</tool_call>");
        for ch in answer.chars() {
            x.feed(DecodeEvent::Delta(Delta::Text { text: ch.to_string() }), &mut out);
        }
        assert!(x.scanned == 0 && x.pending.is_empty());
        assert_eq!(calls_of(&out), vec![("c_0".to_string(), json!({ "a": arg }))]);
    }

    #[test]
    fn an_endless_block_is_given_up_as_text() {
        let mut x = CallExtractor::new("c_");
        let mut out = Vec::new();
        x.feed(DecodeEvent::Delta(Delta::Text { text: OPEN.into() }), &mut out);
        let chunk = "x".repeat(64 * 1024);
        for _ in 0..20 {
            x.feed(DecodeEvent::Delta(Delta::Text { text: chunk.clone() }), &mut out);
        }
        assert!(x.pending.len() <= MAX_CALL_BYTES + chunk.len());
        assert!(!text_of(&out).is_empty());
    }

    #[test]
    fn the_request_carries_the_tools_in_the_system_prompt_and_the_history_as_text() {
        let req = ChatRequest {
            model: "p/m".into(),
            system: Some("Be brief.".into()),
            tools: vec![ToolDef {
                name: "read_file".into(),
                description: "Read a file.\nUse it before editing.".into(),
                parameters: json!({ "type": "object", "properties": { "path": { "type": "string" } } }),
            }],
            messages: vec![
                Message::text(Role::User, "look"),
                Message {
                    role: Role::Assistant,
                    parts: vec![Part::ToolCall {
                        id: "c1".into(),
                        name: "read_file".into(),
                        arguments: json!({ "path": "a" }),
                        signature: None,
                    }],
                },
                Message {
                    role: Role::Tool,
                    parts: vec![Part::ToolResult {
                        tool_call_id: "c1".into(),
                        content: "fn main() {}".into(),
                        is_error: false,
                    }],
                },
            ],
            ..ChatRequest::default()
        };
        let out = into_prompt(&req);
        assert!(out.tools.is_empty());
        let system = out.system.unwrap();
        assert!(system.starts_with("Be brief.\n\nYou can call tools."));
        // The schema is written as serde_json writes it: key order depends on
        // whether another crate of the build turns on `preserve_order`.
        let schema = req.tools[0].parameters.to_string();
        let section = format!("## read_file\nRead a file.\nUse it before editing.\nParameters (JSON Schema): {schema}");
        assert!(system.contains(&section), "{system}");
        assert_eq!(
            out.messages[1].plain_text(),
            "<tool_call>{\"name\":\"read_file\",\"arguments\":{\"path\":\"a\"}}</tool_call>"
        );
        assert_eq!(out.messages[2].role, Role::User);
        assert_eq!(
            out.messages[2].plain_text(),
            "<tool_result id=\"c1\">\nfn main() {}\n</tool_result>"
        );
        let plain = ChatRequest {
            model: "p/m".into(),
            messages: vec![Message::text(Role::User, "hi")],
            ..ChatRequest::default()
        };
        assert_eq!(into_prompt(&plain), plain);
    }
}
