//! The drained events as one JSON text that Neovim's own decoder turns into
//! Lua tables. mlua builds tables field by field, and on LuaJIT each field,
//! string and table costs a protected call (two fresh C closures, two
//! registry writes and a `pcall`) because Neovim, not mlua, owns the Lua
//! state: with one small update per frame that was most of a drain's time
//! (`perf` on a 50 Hz stream). Serialising in Rust and decoding with
//! `vim.json.decode` is one string and one call.

use std::io::Write;

use mlua::prelude::*;
use serde::Serialize;

use agent_client_protocol_schema::v1::{ContentBlock, SessionUpdate};
use mia_engine::events::{is_live_usage, Event};
use mia_proto::EditorCall;

/// `vim.json.decode` bound to the options that give the tables mlua would
/// build: JSON null (a `None`, a unit) becomes nil, in objects and arrays.
const DECODER: &str = r#"
local decode = vim and vim.json and vim.json.decode
if not decode then
  return nil
end
local opts = { luanil = { object = true, array = true } }
return function(text)
  return decode(text, opts)
end
"#;

/// The decoder, loaded on the first drain (None outside Neovim).
struct Decoder(Option<LuaFunction>);

/// The events as `drain` returns them, or None where this path would not
/// build the same tables: a transform hook's request (its empty lists must
/// come back to Rust as lists, which only mlua's array marker keeps), a
/// host without `vim.json`, or a text the decoder refuses (nesting deeper
/// than its limit: values parsed from outside stop at serde_json's 128).
pub(super) fn events_table(lua: &Lua, events: &[Event]) -> LuaResult<Option<LuaTable>> {
    if events
        .iter()
        .any(|e| matches!(e, Event::Call { request, .. } if matches!(**request, EditorCall::Hook(_))))
    {
        return Ok(None);
    }
    let decode = match lua.app_data_ref::<Decoder>() {
        Some(d) => d.0.clone(),
        None => {
            let f = lua
                .load(DECODER)
                .set_name("=mia_core.drain")
                .eval::<Option<LuaFunction>>()?;
            lua.set_app_data(Decoder(f.clone()));
            f
        }
    };
    let (Some(decode), Some(text)) = (decode, to_json(events)) else {
        return Ok(None);
    };
    match decode.call::<LuaTable>(lua.create_string(&text)?) {
        Ok(table) => Ok(Some(table)),
        Err(e) => {
            // The events are still here: mlua builds them instead.
            tracing::warn!("drain: vim.json.decode refused the events ({e}); building them field by field");
            Ok(None)
        }
    }
}

/// The text of `event` when it is a plain piece of the answer (an
/// `agent_message_chunk` of text with no id, annotations or `_meta`): most
/// frames of a stream carry just that one, and `drain` hands it over as a
/// string for Lua to wrap, with no JSON to write and decode.
pub(super) fn plain_answer_text(event: &Event) -> Option<&str> {
    let Event::Update { update, .. } = event else {
        return None;
    };
    let SessionUpdate::AgentMessageChunk(chunk) = update.as_ref() else {
        return None;
    };
    match &chunk.content {
        ContentBlock::Text(t)
            if chunk.message_id.is_none() && chunk.meta.is_none() && t.annotations.is_none() && t.meta.is_none() =>
        {
            Some(&t.text)
        }
        _ => None,
    }
}

/// A plain piece of the answer and its stream's live figures, when they are
/// all the frame took (either order: the chat draws the text, then the
/// figures, which are redrawn whole each time). Three frames a second of a
/// streaming answer; `drain` hands the text over as a string and only the
/// figures as JSON.
pub(super) fn text_with_live_figures(events: &[Event]) -> Option<(&str, &Event)> {
    let [a, b] = events else {
        return None;
    };
    if a.stream() != b.stream() {
        return None;
    }
    match (plain_answer_text(a), plain_answer_text(b)) {
        (Some(text), None) if is_live_usage(b) => Some((text, b)),
        (None, Some(text)) if is_live_usage(a) => Some((text, a)),
        _ => None,
    }
}

/// `[{ "stream": .., "kind": .., "data": .. }, ..]`, the shape of `drain`'s list.
pub(super) fn to_json(events: &[Event]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(128 * events.len() + 2);
    out.push(b'[');
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write!(out, "{{\"stream\":{},", event.stream()).ok()?;
        match event {
            Event::Delta { delta, .. } => kind_data(&mut out, "delta", delta)?,
            Event::Done { done, .. } => kind_data(&mut out, "done", done.as_ref())?,
            Event::Error { error, .. } => kind_data(&mut out, "error", error)?,
            Event::Result { value, .. } => kind_data(&mut out, "result", value)?,
            Event::Call { call, request, .. } => {
                write!(out, "\"call\":{call},\"call_kind\":").ok()?;
                serde_json::to_writer(&mut out, request.kind()).ok()?;
                out.push(b',');
                kind_data(&mut out, "call", &request.payload())?;
            }
            Event::Abort { call, .. } => write!(out, "\"kind\":\"abort\",\"call\":{call}").ok()?,
            Event::Update { update, .. } => kind_data(&mut out, "update", update.as_ref())?,
            Event::End { end, .. } => kind_data(&mut out, "end", end.as_ref())?,
            Event::Mia { event, .. } => kind_data(&mut out, "mia", event)?,
        }
        out.push(b'}');
    }
    out.push(b']');
    Some(out)
}

fn kind_data<T: Serialize + ?Sized>(out: &mut Vec<u8>, kind: &str, data: &T) -> Option<()> {
    write!(out, "\"kind\":\"{kind}\",\"data\":").ok()?;
    serde_json::to_writer(&mut *out, data).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol_schema::v1 as acp;
    use mia_engine::session::updates;

    #[test]
    fn a_piece_with_its_streams_live_figures_is_handed_over_as_text_and_figures() {
        let piece = |stream| Event::Update {
            stream,
            update: Box::new(acp::SessionUpdate::AgentMessageChunk(text_chunk("w00001 "))),
        };
        let figures = |stream, live| Event::Update {
            stream,
            update: Box::new(if live {
                updates::live_usage(&Default::default(), &Default::default(), 1, 2, 0.5)
            } else {
                updates::usage(&Default::default(), &Default::default(), 2, 0.5, None)
            }),
        };
        let thought = Event::Update {
            stream: 7,
            update: Box::new(acp::SessionUpdate::AgentThoughtChunk(text_chunk("t"))),
        };
        for (events, want) in [
            (vec![piece(7), figures(7, true)], true),
            (vec![figures(7, true), piece(7)], true),
            (vec![piece(7), figures(8, true)], false),
            (vec![piece(7), figures(7, false)], false),
            (vec![thought, figures(7, true)], false),
            (vec![piece(7), figures(7, true), piece(7)], false),
            (vec![figures(7, true)], false),
            (vec![piece(7), piece(7)], false),
        ] {
            match text_with_live_figures(&events) {
                Some((text, figures)) => {
                    assert!(want, "{events:?}");
                    assert_eq!(text, "w00001 ");
                    assert!(is_live_usage(figures));
                }
                None => assert!(!want, "{events:?}"),
            }
        }
    }

    fn update(update: acp::SessionUpdate) -> Event {
        Event::Update {
            stream: 7,
            update: Box::new(update),
        }
    }

    fn text_chunk(text: &str) -> acp::ContentChunk {
        acp::ContentChunk::new(acp::ContentBlock::Text(acp::TextContent::new(text)))
    }

    /// Lua wraps a plain piece's text as `{ stream, kind = "update", data = {
    /// sessionUpdate = "agent_message_chunk", content = { type = "text", text } } }`
    /// (lua/mia/bridge.lua): that must be exactly what the JSON path gives,
    /// so a piece takes the short path only when nothing else is in it.
    #[test]
    fn only_a_piece_the_bridge_rebuilds_exactly_is_handed_over_as_text() {
        let meta: acp::Meta = serde_json::from_value(serde_json::json!({ "mia": { "x": 1 } })).unwrap();
        let cases = [
            (
                update(acp::SessionUpdate::AgentMessageChunk(text_chunk("w00001 \"é\"\n"))),
                true,
            ),
            (update(acp::SessionUpdate::AgentMessageChunk(text_chunk(""))), true),
            (
                update(acp::SessionUpdate::AgentMessageChunk(text_chunk("a").message_id("m1"))),
                false,
            ),
            (
                update(acp::SessionUpdate::AgentMessageChunk(
                    text_chunk("a").meta(meta.clone()),
                )),
                false,
            ),
            (
                update(acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(
                    acp::ContentBlock::Text(
                        acp::TextContent::new("a")
                            .annotations(acp::Annotations::new().last_modified("now".to_string())),
                    ),
                ))),
                false,
            ),
            (
                update(acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(
                    acp::ContentBlock::Text(acp::TextContent::new("a").meta(meta)),
                ))),
                false,
            ),
            (update(acp::SessionUpdate::AgentThoughtChunk(text_chunk("a"))), false),
            (update(acp::SessionUpdate::UserMessageChunk(text_chunk("a"))), false),
            (
                Event::Delta {
                    stream: 7,
                    delta: mia_llm::delta::Delta::Text { text: "a".into() },
                },
                false,
            ),
        ];
        for (event, plain) in &cases {
            let json: serde_json::Value =
                serde_json::from_slice(&to_json(std::slice::from_ref(event)).unwrap()).unwrap();
            match plain_answer_text(event) {
                Some(text) => {
                    assert!(plain, "{json}");
                    let rebuilt = serde_json::json!([{ "stream": 7, "kind": "update", "data": {
                        "sessionUpdate": "agent_message_chunk", "content": { "type": "text", "text": text } } }]);
                    assert_eq!(json, rebuilt);
                }
                None => assert!(!plain, "{json}"),
            }
        }
    }
}
