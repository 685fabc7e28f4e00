//! Supervised streaming tasks: whatever happens inside (success, provider
//! error, cancellation, panic), the stream ends with exactly one done or
//! error event on the queue.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use crate::events::{Event, EventQueue, StreamId};
use mia_llm::delta::StreamDone;
use mia_llm::error::{ErrorClass, LlmError};
use mia_llm::message::ChatRequest;
use mia_llm::providers::Providers;
use mia_store::Store;

/// Who a `mia.stream`/`mia.send` call is recorded under, and the budgets
/// it must respect.
#[derive(Debug, Clone)]
pub struct ApiCall {
    /// The usage row's agent: `"api"` unless the caller names itself.
    pub agent: String,
    /// Local time's offset from UTC, for the calendar-day budget.
    pub utc_offset_s: i32,
    pub budgets: mia_cost::BudgetConfig,
    /// The chat session the call is part of (`opts.session_id`): its usage
    /// counts toward that session and the session limit applies. `None`:
    /// the call belongs to no session and only the daily limit applies.
    pub session_id: Option<String>,
    /// Whether the request goes through the `pre_request` transform hooks.
    pub hooks: crate::hooks::HookSwitch,
    /// Where a failed request is counted.
    pub telemetry: Arc<crate::telemetry::Hub>,
    /// The app's spend in memory, for when the store cannot be read.
    pub ledger: Arc<mia_cost::ledger::Ledger>,
}

/// Starts streaming `req` on `rt` (or sending it whole when `streaming` is
/// false); events for `stream` go to `queue`. Cancelling `cancel` ends it
/// with a `cancelled` error event. The budgets are checked first (a reached
/// hard limit sends nothing), the transform hooks run over the request, and
/// the call's usage and cost are stored under `api.agent`, in the store
/// `store` resolves to. Without one, the budgets count what this app
/// has spent ([`mia_cost::ledger`]).
#[allow(clippy::too_many_arguments)]
pub fn spawn_stream(
    rt: &Handle,
    queue: Arc<EventQueue>,
    providers: Arc<Providers>,
    calls: Arc<crate::calls::PendingCalls>,
    store: impl Future<Output = Option<Arc<Store>>> + Send + 'static,
    stream: StreamId,
    req: ChatRequest,
    streaming: bool,
    api: ApiCall,
    cancel: CancellationToken,
) {
    spawn_prepared_stream(
        rt,
        queue,
        providers,
        calls,
        store,
        stream,
        std::future::ready(Ok(req)),
        streaming,
        api,
        cancel,
    );
}

/// [`spawn_stream`] of a request that is made first by `prepare` (e.g.
/// `:Mia edit`'s, which reads the rules files and checks the deny rules off
/// the editor's thread). A failed `prepare` ends the stream with its error:
/// nothing is sent, nothing counted.
#[allow(clippy::too_many_arguments)]
pub fn spawn_prepared_stream(
    rt: &Handle,
    queue: Arc<EventQueue>,
    providers: Arc<Providers>,
    calls: Arc<crate::calls::PendingCalls>,
    store: impl Future<Output = Option<Arc<Store>>> + Send + 'static,
    stream: StreamId,
    prepare: impl Future<Output = Result<ChatRequest, LlmError>> + Send + 'static,
    streaming: bool,
    api: ApiCall,
    cancel: CancellationToken,
) {
    rt.spawn(async move {
        let caller = crate::hooks::Caller {
            queue: queue.clone(),
            calls,
            stream,
            cancel: cancel.clone(),
            hooks: api.hooks.clone(),
            session: api.session_id.clone(),
            telemetry: api.telemetry.clone(),
        };
        let work = async move {
            let req = prepare.await?;
            api_call(caller, providers, store.await, req, streaming, api).await
        };
        match supervise(work, &cancel).await {
            Ok(done) => queue.push(Event::Done {
                stream,
                done: Box::new(done),
            }),
            Err(error) => push_error(&queue, stream, error),
        }
    });
}

/// One `mia.stream`/`mia.send` call: budget gate, hooks, the request, its usage row.
async fn api_call(
    caller: crate::hooks::Caller,
    providers: Arc<Providers>,
    store: Option<Arc<Store>>,
    req: ChatRequest,
    streaming: bool,
    api: ApiCall,
) -> Result<StreamDone, LlmError> {
    use crate::agent::record;
    let (day_start, day_end) = record::local_day(record::now_ms(), api.utc_offset_s);
    // Without a session the session spend reads 0: only the daily limit applies.
    let session = api.session_id.as_deref().unwrap_or("");
    let store = store.as_deref();
    if api.budgets.has_limit() {
        let (spend, _) = record::spend_now(store, &api.ledger, session, day_start, day_end).await;
        record::gate_spend(
            &api.budgets,
            spend,
            &caller.calls,
            &caller.queue,
            caller.stream,
            &caller.cancel,
        )
        .await?;
    }
    let started_ms = record::now_ms();
    let q = caller.queue.clone();
    let stream = caller.stream;
    let mut emit = |delta| q.push(Event::Delta { stream, delta });
    let done = crate::hooks::call_model(&caller, &providers, &req, streaming, &mut emit).await?;
    // The spend before and after the row tells which warning the call
    // crossed; with no warning set nothing reads it.
    let warn = api.budgets.has_warning();
    let before = if warn {
        Some(
            record::spend_now(store, &api.ledger, session, day_start, day_end)
                .await
                .0,
        )
    } else {
        None
    };
    let row = record::usage_row(api.session_id.as_deref(), None, &api.agent, &done, started_ms);
    record::record_usage(store, &api.ledger, row).await;
    record::tell_saving(store, &caller.queue, stream);
    if let Some(b) = before {
        let (after, _) = record::spend_now(store, &api.ledger, session, day_start, day_end).await;
        for w in mia_cost::budget::crossed_warnings(&api.budgets, b, after) {
            let event = crate::events::MiaEvent::Warning { text: w.message };
            caller.queue.push(Event::Mia { stream, event });
        }
    }
    Ok(done)
}

/// Starts one prompt turn of a chat session (`:Mia prompt`). Unlike a
/// plain stream it is not dropped on cancellation: the loop sees `cancel`,
/// lets running tools return their partial results, and then ends with
/// `cancelled`. However it ends (a panic included), the end is stored in
/// the session's log and sent as one `End` event.
pub fn spawn_turn(
    rt: &Handle,
    deps: crate::agent::AgentDeps,
    stream: StreamId,
    session: Arc<crate::session::Session>,
    turn: crate::session::Turn,
    prompt: crate::agent::Prompt,
    cancel: CancellationToken,
) {
    rt.spawn(async move {
        let queue = deps.queue.clone();
        let deps_store = deps.store.clone();
        // The store may still be opening: the run records its prompt once it is.
        let work = crate::agent::run(deps, stream, session.clone(), prompt, cancel);
        let outcome = match AssertUnwindSafe(work).catch_unwind().await {
            Ok(r) => r,
            Err(panic) => Err(panic_error(panic)),
        };
        let end = match outcome {
            Ok(end) => end,
            Err(error) => {
                if error.class != ErrorClass::Cancelled {
                    tracing::warn!(stream, class = error.class.as_str(), "turn failed: {}", error.message);
                }
                crate::agent::failed_end(&session.info().model, &error)
            }
        };
        // A run refused before it recorded anything stores its end all the same.
        if session.store().is_none() {
            session.attach_store(deps_store.get().await);
        }
        crate::agent::record_end(&session, &end).await;
        crate::agent::record::tell_saving(session.store().as_deref(), &queue, stream);
        drop(turn);
        queue.push(Event::Update {
            stream,
            update: Box::new(crate::session::updates::available_commands(session.has_messages())),
        });
        queue.push(Event::End {
            stream,
            end: Box::new(end),
        });
    });
}

/// Runs a one-shot job (a model list, a health check) whose value ends in
/// one `Result` event, or one error event.
pub fn spawn_job<F>(rt: &Handle, queue: Arc<EventQueue>, stream: StreamId, cancel: CancellationToken, job: F)
where
    F: std::future::Future<Output = Result<serde_json::Value, LlmError>> + Send + 'static,
{
    rt.spawn(async move {
        match supervise(job, &cancel).await {
            Ok(value) => queue.push(Event::Result { stream, value }),
            Err(error) => push_error(&queue, stream, error),
        }
    });
}

fn push_error(queue: &EventQueue, stream: StreamId, error: LlmError) {
    if error.class != ErrorClass::Cancelled {
        tracing::warn!(
            stream,
            class = error.class.as_str(),
            "request failed: {}",
            error.message
        );
    }
    queue.push(Event::Error { stream, error })
}

/// Runs `work` to its end, unless `cancel` fires first; a panic inside it
/// becomes an `internal` error instead of unwinding through the runtime.
pub async fn supervise<T>(
    work: impl std::future::Future<Output = Result<T, LlmError>>,
    cancel: &CancellationToken,
) -> Result<T, LlmError> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(LlmError::cancelled()),
        result = AssertUnwindSafe(work).catch_unwind() => match result {
            Ok(r) => r,
            Err(panic) => Err(panic_error(panic)),
        },
    }
}

fn panic_error(panic: Box<dyn std::any::Any + Send>) -> LlmError {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    tracing::error!("stream task panicked: {what}");
    LlmError::new(
        ErrorClass::Internal,
        None,
        format!("mia hit an internal error ({what}). Please report it with the log file from :checkhealth mia."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_panic_in_the_work_becomes_an_internal_error() {
        let cancel = CancellationToken::new();
        let err = block_on(supervise(
            async {
                if cancel.is_cancelled() {
                    return Ok(());
                }
                panic!("decoder exploded")
            },
            &cancel,
        ))
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::Internal);
        assert!(err.message.contains("decoder exploded"), "{}", err.message);
    }

    #[test]
    fn cancelling_ends_pending_work_as_cancelled() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = block_on(supervise(std::future::pending::<Result<(), LlmError>>(), &cancel)).unwrap_err();
        assert_eq!(err.class, ErrorClass::Cancelled);
    }
}
