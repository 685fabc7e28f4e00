//! The road from the core to the client: the agent loop's events (on an
//! [`EventQueue`], as for Neovim) become `session/update` notifications,
//! its calls (`session/request_permission`, `fs/*`, a budget question)
//! become requests to the client whose answers complete the calls, and the
//! end of a turn answers its `session/prompt`.

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol::v1::schema as acp;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{from_json, lock, rpc_error, Cx, Responder, Server};

/// How long mia-acp waits for the client to write a file.
const CLIENT_WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
use crate::events::{Event, EventQueue, MiaEvent, StreamId};
use crate::session::{updates, Stop, TurnEnd};
use mia_proto::{Confirm, EditorCall};

impl Server {
    /// One event of the core: updates become notifications, calls become
    /// requests to the client, a turn's end answers its prompt.
    pub(super) fn on_event(self: &Arc<Self>, event: Event, cx: &Cx) {
        match event {
            Event::Update { stream, update } => {
                let Some(id) = lock(&self.streams).get(&stream).cloned() else {
                    return;
                };
                let update = match *update {
                    acp::SessionUpdate::AvailableCommandsUpdate(_) => match self.sessions.get(&id) {
                        Some(s) => self.commands(&s),
                        None => return,
                    },
                    u => u,
                };
                Self::notify(cx, &id, update);
            }
            Event::End { stream, end } => {
                lock(&self.streams).remove(&stream);
                let Some(pending) = lock(&self.pending).remove(&stream) else {
                    return;
                };
                if let Some(s) = self.sessions.get(&pending.session_id) {
                    Self::notify(cx, &pending.session_id, self.commands(&s));
                }
                self.answer_prompt(pending.responder, &end);
            }
            Event::Call { stream, call, request } => self.on_call(stream, call, *request, cx),
            Event::Mia {
                stream,
                event: MiaEvent::Warning { text },
            } => {
                if let Some(id) = lock(&self.streams).get(&stream).cloned() {
                    let text = super::for_client(&text);
                    Self::notify(cx, &id, updates::agent_text(&format!("\n\n> ⚠ {text}\n\n")));
                }
            }
            Event::Mia {
                event: MiaEvent::Retry { attempt, message, .. },
                ..
            } => tracing::info!(attempt, "mia-acp: retrying: {message}"),
            _ => {}
        }
    }

    fn answer_prompt(&self, responder: Responder<acp::PromptResponse>, end: &TurnEnd) {
        let stop = match end.stop {
            Stop::EndTurn => "end_turn",
            Stop::MaxTokens => "max_tokens",
            Stop::MaxTurnRequests => "max_turn_requests",
            Stop::Refusal => "refusal",
            Stop::Cancelled => "cancelled",
            Stop::Error => {
                let (class, message) = end
                    .error
                    .as_ref()
                    .map(|e| (e.class.clone(), e.message.clone()))
                    .unwrap_or_else(|| ("internal".into(), "the turn failed".into()));
                let error = rpc_error(-32603, super::for_client(&message)).data(json!({ "mia": { "class": class } }));
                let _ = responder.respond_with_error(error);
                return;
            }
        };
        let mut meta = serde_json::to_value(end).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut meta {
            m.remove("stopReason");
        }
        match from_json::<acp::PromptResponse>(json!({ "stopReason": stop, "_meta": { "mia": meta } })) {
            Ok(r) => {
                let _ = responder.respond(r);
            }
            Err(e) => {
                let _ = responder.respond_with_error(e);
            }
        }
    }

    /// A call of the core for its UI, answered through the client (or here).
    fn on_call(self: &Arc<Self>, stream: StreamId, call: u64, request: EditorCall, cx: &Cx) {
        let calls = self.deps.calls.clone();
        let (can_read, can_write) = *lock(&self.client_fs);
        let session_id = lock(&self.streams).get(&stream).cloned().unwrap_or_default();
        let cx2 = cx.clone();
        let task = async move {
            let answer: Result<Value, String> = match request {
                EditorCall::Permission(payload) => {
                    match serde_json::from_value::<acp::RequestPermissionRequest>(payload) {
                        Ok(req) => match cx2.send_request(req).block_task().await {
                            Ok(r) => Ok(serde_json::to_value(r).unwrap_or(Value::Null)),
                            Err(e) => Err(format!("the client could not ask: {e}")),
                        },
                        Err(e) => Err(format!("mia-acp: bad permission request: {e}")),
                    }
                }
                EditorCall::Confirm(Confirm::Budget { reason }) => {
                    let req: Result<acp::RequestPermissionRequest, _> = serde_json::from_value(json!({
                        "sessionId": session_id,
                        "toolCall": { "toolCallId": format!("mia-confirm-{call}"), "title": reason, "kind": "other", "status": "pending" },
                        "options": [
                            { "optionId": "allow_once", "name": "Continue", "kind": "allow_once" },
                            { "optionId": "reject_once", "name": "Stop", "kind": "reject_once" },
                        ],
                    }));
                    match req {
                        Ok(req) => match cx2.send_request(req).block_task().await {
                            Ok(r) => Ok(Value::Bool(matches!(
                                &r.outcome,
                                acp::RequestPermissionOutcome::Selected(s) if &*s.option_id.0 == "allow_once"
                            ))),
                            Err(_) => Ok(Value::Bool(false)),
                        },
                        Err(_) => Ok(Value::Bool(false)),
                    }
                }
                EditorCall::ReadTextFile(payload) if can_read => {
                    let path = payload.get("path").and_then(Value::as_str).unwrap_or_default();
                    let req = acp::ReadTextFileRequest::new(session_id.clone(), PathBuf::from(path));
                    match cx2.send_request(req).block_task().await {
                        Ok(r) => Ok(json!({ "content": r.content })),
                        // The client has no such file: the tool reads the disk and says why.
                        Err(_) => Ok(Value::Null),
                    }
                }
                EditorCall::WriteTextFile(payload) if can_write => {
                    let path = payload.get("path").and_then(Value::as_str).unwrap_or_default();
                    let content = payload.get("content").and_then(Value::as_str).unwrap_or_default();
                    let req =
                        acp::WriteTextFileRequest::new(session_id.clone(), PathBuf::from(path), content.to_string());
                    // A client that never answers must not hold the turn: the
                    // core's own wait is long, for Neovim's review.
                    match tokio::time::timeout(CLIENT_WRITE_WAIT, cx2.send_request(req).block_task()).await {
                        Ok(Ok(_)) => Ok(json!({ "written": true })),
                        Ok(Err(e)) => Err(format!("the client could not write the file: {e}")),
                        Err(_) => {
                            tracing::warn!("mia-acp: the client did not answer fs/write_text_file for {path} in time");
                            Err(format!(
                                "the client did not answer fs/write_text_file within {} s; the file may not have \
                                 been written: read it before trying again",
                                CLIENT_WRITE_WAIT.as_secs()
                            ))
                        }
                    }
                }
                // Without the client's fs: the core reads and writes the disk itself (confined to cwd).
                EditorCall::ReadTextFile(_) | EditorCall::WriteTextFile(_) => Ok(Value::Null),
                other => Err(format!(
                    "mia-acp cannot answer `{}`: it needs the editor (Neovim's mia)",
                    other.kind()
                )),
            };
            calls.answer(call, answer);
            Ok(())
        };
        if let Err(e) = cx.spawn(task) {
            tracing::warn!("mia-acp: cannot answer a call: {e}");
        }
    }
}

/// Moves the core's events from its queue (a wake fd) to the async side.
pub(super) fn pump(queue: Arc<EventQueue>, tx: mpsc::UnboundedSender<Event>) {
    std::thread::Builder::new()
        .name("mia-acp-events".into())
        .spawn(move || loop {
            let mut p = libc::pollfd {
                fd: queue.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd; a bounded wait so a closed channel is noticed.
            unsafe { libc::poll(&mut p, 1, 200) };
            queue.ack();
            for event in queue.drain() {
                if tx.send(event).is_err() {
                    return;
                }
            }
            if tx.is_closed() {
                return;
            }
        })
        .map(|_| ())
        .unwrap_or_else(|e| tracing::error!("mia-acp: cannot start the event thread: {e}"));
}
