//! Calls from the runtime into Lua: a Lua tool to run, a question for the
//! user. The runtime queues an [`Event::Call`] and awaits a oneshot that the
//! main thread completes by answering with the call's id; nothing on the
//! runtime ever touches Lua.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;

use crate::events::{Event, EventQueue, StreamId};
use mia_proto::reply::Reply;
use mia_proto::EditorCall;

/// How a call ended on the Lua side.
pub type CallResult = Result<Value, String>;

/// Calls waiting for their answer from the main thread.
#[derive(Debug, Default)]
pub struct PendingCalls {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<CallResult>>>,
}

/// Why a call got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("no answer within {0} ms")]
    TimedOut(u64),
    #[error("cancelled")]
    Cancelled,
    #[error("Neovim is shutting down")]
    Gone,
}

impl PendingCalls {
    /// Asks Lua to do `request` for `stream` and waits for the
    /// answer, at most `timeout`, or until `cancel` fires. On timeout or
    /// cancellation Lua is told to abort the call.
    pub async fn call(
        &self,
        queue: &EventQueue,
        stream: StreamId,
        request: EditorCall,
        timeout: Duration,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<CallResult, CallError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(id, tx);
        queue.push(Event::Call {
            stream,
            call: id,
            request: Box::new(request),
        });
        let outcome = tokio::select! {
            r = rx => r.map_err(|_| CallError::Gone),
            _ = tokio::time::sleep(timeout) => Err(CallError::TimedOut(timeout.as_millis() as u64)),
            _ = cancel.cancelled() => Err(CallError::Cancelled),
        };
        if outcome.is_err() {
            self.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            queue.push(Event::Abort { stream, call: id });
        }
        outcome
    }

    /// [`PendingCalls::call`] with the editor's answer read as the typed
    /// reply `R` (leniently, see [`mia_proto::reply`]); an error Lua gave
    /// stays the error message.
    pub async fn call_for<R: Reply>(
        &self,
        queue: &EventQueue,
        stream: StreamId,
        request: EditorCall,
        timeout: Duration,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Result<R, String>, CallError> {
        Ok(self
            .call(queue, stream, request, timeout, cancel)
            .await?
            .map(R::from_reply))
    }

    /// Completes call `id` (from the main thread). False if nobody waits for it any more.
    pub fn answer(&self, id: u64, result: CallResult) -> bool {
        let sender = self.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        match sender {
            Some(tx) => tx.send(result).is_ok(),
            None => false,
        }
    }
}

/// The way from the runtime to Neovim's main thread: the queue a call is
/// pushed on and the calls waiting for their answer. Whoever starts work that
/// may call into Lua (an agent run, a direct tool run) hands one in; nothing
/// below `nvim/` reaches for the process-wide ones.
#[derive(Debug, Clone)]
pub struct LuaBridge {
    pub queue: Arc<EventQueue>,
    pub calls: Arc<PendingCalls>,
    /// Neovim answers ACP's client-side `fs/read_text_file` (unsaved
    /// buffers): set for agent runs, where a chat is there to answer.
    pub editor_fs: bool,
}

impl LuaBridge {
    pub fn new(queue: Arc<EventQueue>, calls: Arc<PendingCalls>) -> Self {
        LuaBridge {
            queue,
            calls,
            editor_fs: false,
        }
    }

    /// This bridge, with file reads offered to the editor first.
    pub fn with_editor_fs(mut self) -> Self {
        self.editor_fs = true;
        self
    }

    /// [`PendingCalls::call`] on this bridge's queue.
    pub async fn call(
        &self,
        stream: StreamId,
        request: EditorCall,
        timeout: Duration,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<CallResult, CallError> {
        self.calls.call(&self.queue, stream, request, timeout, cancel).await
    }

    /// [`PendingCalls::call_for`] on this bridge's queue.
    pub async fn call_for<R: Reply>(
        &self,
        stream: StreamId,
        request: EditorCall,
        timeout: Duration,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Result<R, String>, CallError> {
        self.calls.call_for(&self.queue, stream, request, timeout, cancel).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn an_answer_completes_the_call() {
        let q = Arc::new(EventQueue::new().unwrap());
        let calls = Arc::new(PendingCalls::default());
        let (q2, c2) = (q.clone(), calls.clone());
        let answered = std::thread::spawn(move || loop {
            for e in q2.drain() {
                if let Event::Call { call, request, .. } = e {
                    let EditorCall::Hook(payload) = *request else {
                        panic!("not the hook call: {request:?}");
                    };
                    c2.answer(call, Ok(payload));
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        });
        let got = rt().block_on(calls.call(
            &q,
            1,
            EditorCall::Hook(serde_json::json!({"x": 1})),
            Duration::from_secs(5),
            &CancellationToken::new(),
        ));
        answered.join().unwrap();
        assert_eq!(got, Ok(Ok(serde_json::json!({"x": 1}))));
    }

    #[test]
    fn a_call_without_answer_times_out_and_tells_lua_to_abort() {
        let q = EventQueue::new().unwrap();
        let calls = PendingCalls::default();
        let got = rt().block_on(calls.call(
            &q,
            7,
            EditorCall::Hook(Value::Null),
            Duration::from_millis(20),
            &CancellationToken::new(),
        ));
        assert_eq!(got, Err(CallError::TimedOut(20)));
        let events = q.drain();
        assert!(matches!(events.last(), Some(Event::Abort { stream: 7, call: 1 })));
        assert!(!calls.answer(1, Ok(Value::Null)), "a late answer finds nobody waiting");
    }
}
