//! The one door every model request goes through: chat and agent turns,
//! compaction (automatic and `/compact`), `mia.stream` and `mia.send`.
//! [`call_model`] runs the user's `pre_request` transform hooks (Lua, on
//! the main thread, through a call event) over the request, then sends it.
//! When no hook is registered nothing crosses to Lua.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::calls::{CallError, PendingCalls};
use crate::events::{EventQueue, StreamId};
use mia_llm::delta::{Delta, StreamDone};
use mia_llm::error::{ErrorClass, LlmError};
use mia_llm::message::ChatRequest;
use mia_llm::providers::Providers;

/// Whether `pre_request` hooks are registered: Lua sets it (`set_hooks`),
/// every [`Caller`] reads it when it sends a request. Passed in, never read
/// from a global by the agent loop or the API path.
#[derive(Debug, Clone, Default)]
pub struct HookSwitch(Arc<AtomicBool>);

impl HookSwitch {
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::SeqCst);
    }

    pub fn is_on(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Longest the hooks of one request may take on the main thread.
const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Who is asking: where a hook call is queued and what stops it.
#[derive(Clone)]
pub struct Caller {
    pub queue: Arc<EventQueue>,
    pub calls: Arc<PendingCalls>,
    pub stream: StreamId,
    pub cancel: CancellationToken,
    /// Whether the request goes through Lua's `pre_request` hooks first.
    pub hooks: HookSwitch,
    /// The chat session the request belongs to, if any (named in telemetry).
    pub session: Option<String>,
    /// Where a failed request is counted.
    pub telemetry: Arc<crate::telemetry::Hub>,
}

/// The call event's payload for a request.
pub fn hook_payload(req: &ChatRequest) -> serde_json::Value {
    json!({ "phase": "pre_request", "request": req })
}

/// The reply to a `hook` call: the request as the hooks left it, or why
/// the answer is not one (serde's message). Typed here rather than in
/// mia-proto, which does not know the request's type.
#[derive(Debug, Clone, PartialEq)]
pub struct HookReply(pub Result<ChatRequest, String>);

impl mia_proto::reply::Reply for HookReply {
    fn from_reply(answer: serde_json::Value) -> Self {
        HookReply(serde_json::from_value(answer).map_err(|e| e.to_string()))
    }
}

/// What the hooks' answer means for the request.
pub fn hooked_request(answer: Result<Result<HookReply, String>, CallError>) -> Result<ChatRequest, LlmError> {
    let reply = match answer {
        Ok(Ok(HookReply(reply))) => reply,
        Ok(Err(message)) => return Err(LlmError::new(ErrorClass::InvalidRequest, None, message)),
        Err(CallError::Cancelled) | Err(CallError::Gone) => return Err(LlmError::cancelled()),
        Err(CallError::TimedOut(ms)) => {
            return Err(LlmError::new(
                ErrorClass::Timeout,
                None,
                format!(
                    "mia: the pre_request transform hooks did not return within {} s; nothing was sent. \
                     Make the hooks return at once (they run on Neovim's main thread).",
                    ms / 1000
                ),
            ))
        }
    };
    reply.map_err(|e| {
        LlmError::new(
            ErrorClass::InvalidRequest,
            None,
            format!(
                "mia: a pre_request transform hook returned an invalid request ({e}); nothing was sent. \
                 Return the request table (or nil to leave it as it was)."
            ),
        )
    })
}

/// `req` as the `pre_request` hooks leave it (itself when there are none).
pub async fn apply(caller: &Caller, req: &ChatRequest) -> Result<ChatRequest, LlmError> {
    if !caller.hooks.is_on() {
        return Ok(req.clone());
    }
    let answer = caller
        .calls
        .call_for::<HookReply>(
            &caller.queue,
            caller.stream,
            mia_proto::EditorCall::Hook(hook_payload(req)),
            HOOK_TIMEOUT,
            &caller.cancel,
        )
        .await;
    hooked_request(answer)
}

/// Sends one request to its model, after the transform hooks: streamed, or
/// whole when `streaming` is false. Every model call of mia comes here.
pub async fn call_model(
    caller: &Caller,
    providers: &Providers,
    req: &ChatRequest,
    streaming: bool,
    emit: &mut (dyn FnMut(Delta) + Send),
) -> Result<StreamDone, LlmError> {
    let req = apply(caller, req).await?;
    let result = if streaming {
        mia_llm::stream_chat(providers, &req, emit).await
    } else {
        mia_llm::send_chat(providers, &req, emit).await
    };
    if let Err(e) = &result {
        if e.class != mia_llm::error::ErrorClass::Cancelled {
            let model = req.model.split_once('/').map_or(req.model.as_str(), |(_, m)| m);
            let provider = e
                .provider
                .as_deref()
                .unwrap_or_else(|| req.model.split('/').next().unwrap_or(""));
            caller
                .telemetry
                .api_error(caller.session.as_deref(), provider, model, e.class.as_str(), e.status);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use mia_llm::message::{Message, Role};
    use mia_proto::reply::Reply;

    fn request() -> ChatRequest {
        ChatRequest {
            model: "scn/echo".into(),
            system: None,
            messages: vec![Message::text(Role::User, "hi")],
            ..ChatRequest::default()
        }
    }

    #[test]
    fn a_hook_answer_becomes_the_request_sent() {
        let mut value = hook_payload(&request())["request"].clone();
        value["extra_body"] = json!({ "reasoning_effort": "low" });
        let req = hooked_request(Ok(Ok(HookReply::from_reply(value)))).unwrap();
        assert_eq!(req.extra_body, Some(json!({ "reasoning_effort": "low" })));
        assert_eq!(req.messages, request().messages);
    }

    #[test]
    fn a_failing_hook_stops_the_request_with_its_message() {
        let err = hooked_request(Ok(Err("mia: transform hook `x` (pre_request) failed: boom".into()))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidRequest);
        assert!(err.message.contains("boom"), "{}", err.message);
    }

    #[test]
    fn a_hook_returning_garbage_names_the_fix() {
        let err = hooked_request(Ok(Ok(HookReply::from_reply(json!("nope"))))).unwrap_err();
        assert_eq!(err.class, ErrorClass::InvalidRequest);
        assert!(err.message.contains("Return the request table"), "{}", err.message);
    }

    #[test]
    fn a_hook_that_never_returns_times_out_with_a_fix() {
        let err = hooked_request(Err(CallError::TimedOut(30_000))).unwrap_err();
        assert_eq!(err.class, ErrorClass::Timeout);
        assert!(err.message.contains("30 s"), "{}", err.message);
    }
}
