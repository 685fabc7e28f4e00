//! One agent interface: mia's own agent and an external ACP agent answer the
//! same calls (prompt, set a mode, set a setting, load a session), so a
//! front-end sends what the user did to [`Agent`] and draws the ACP updates
//! that come back, whichever agent the chat talks to. Cancelling a turn is
//! the same for both: the `CancellationToken` its prompt was given.
//!
//! What differs stays here: mia's own agent answers a mode switch at once
//! (its `current_mode_update` is returned); an external agent is asked over
//! ACP and announces the switch on its own stream, as it announces
//! everything else.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use agent_client_protocol_schema::v1 as acp;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::acp::client::{AcpClientError, AgentProc, AgentPrompt, TurnDeps};
use crate::app::{App, AppError};
use crate::events::StreamId;
use crate::session::{Session, SessionError};

/// What can go wrong asking an agent, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    App(#[from] AppError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    External(#[from] AcpClientError),
    #[error("mia: only an external agent has settings; switch to one with :Mia agent {{name}}")]
    NoSettings,
    #[error("mia: this prompt is for {expected}'s agent; the chat talks to another one")]
    WrongPrompt { expected: &'static str },
}

/// A future an agent's call resolves to, run on the app's runtime.
pub type Pending<T> = Pin<Box<dyn Future<Output = Result<T, AgentError>> + Send>>;

/// What the user sent. mia's own agent takes the whole request (model,
/// mode, attachments, its session); an external agent takes the text.
pub enum Prompt {
    Own {
        session_id: String,
        prompt: Box<crate::agent::Prompt>,
    },
    External(AgentPrompt),
}

/// What a mode switch did.
pub enum ModeSwitch {
    /// mia's own agent switched; this `current_mode_update` announces it.
    Announced(Box<acp::SessionUpdate>),
    /// An external agent was asked; it announces the switch on its stream.
    Asked(Pending<()>),
}

/// The agent the chat talks to.
pub enum Agent {
    /// mia's own: its sessions are the app's.
    Own(Arc<App>),
    /// An external ACP agent's process, with the app whose store and
    /// budgets its turns record into.
    External(Arc<App>, Arc<AgentProc>),
}

impl Agent {
    /// Starts one prompt turn on the stream `new_stream` gives: its updates
    /// and its `End` arrive as events. `cancel` stops it.
    pub fn prompt(
        &self,
        prompt: Prompt,
        new_stream: impl FnOnce() -> StreamId,
        cancel: CancellationToken,
    ) -> Result<StreamId, AgentError> {
        match (self, prompt) {
            (Agent::Own(app), Prompt::Own { session_id, prompt }) => {
                Ok(app.prompt(&session_id, *prompt, new_stream, cancel)?)
            }
            (Agent::External(app, agent), Prompt::External(prompt)) => {
                let (rt, _) = app.runtime_and_queue()?;
                let stream = new_stream();
                let budgets = app.agent_settings().costs;
                let (app, agent) = (app.clone(), agent.clone());
                rt.spawn(async move {
                    let deps = TurnDeps {
                        store: app.store().await,
                        ledger: app.store_slot().ledger(),
                        budgets,
                    };
                    agent.prompt(deps, stream, prompt, cancel).await;
                });
                Ok(stream)
            }
            (Agent::Own(_), Prompt::External(_)) => Err(AgentError::WrongPrompt {
                expected: "an external",
            }),
            (Agent::External(..), Prompt::Own { .. }) => Err(AgentError::WrongPrompt { expected: "mia" }),
        }
    }

    /// Switches to `mode`. mia's own agent switches session `session_id`
    /// (none yet: nothing was sent, and `previous` is the chat's mode) and
    /// returns the announcement; an external agent is asked (`session/set_mode`).
    pub fn set_mode(&self, session_id: Option<&str>, mode: &str, previous: &str) -> Result<ModeSwitch, AgentError> {
        match self {
            Agent::Own(app) => Ok(ModeSwitch::Announced(Box::new(match session_id {
                Some(id) => app.session(id)?.switch_mode(mode),
                None => crate::session::updates::mode_switched(mode, previous),
            }))),
            Agent::External(_, agent) => {
                let (agent, mode) = (agent.clone(), mode.to_string());
                Ok(ModeSwitch::Asked(Box::pin(
                    async move { Ok(agent.set_mode(mode).await?) },
                )))
            }
        }
    }

    /// Sets the setting `config_id` to `value` (`session/set_config_option`);
    /// resolves to the agent's settings after the change. mia's own agent
    /// has none (its modes are its only choice).
    pub fn set_config_option(&self, config_id: String, value: Value) -> Pending<Value> {
        match self {
            Agent::Own(_) => Box::pin(async { Err(AgentError::NoSettings) }),
            Agent::External(_, agent) => {
                let agent = agent.clone();
                Box::pin(async move { Ok(agent.set_config_option(config_id, value).await?) })
            }
        }
    }

    /// Loads session `session_id`. mia's own agent reads it from the store
    /// and resolves to `{ session, items, cost_usd }` (every update it sent,
    /// in order: ACP's `session/load` replay), the session then being the
    /// app's; an external agent replays it on its own stream (`session/load`
    /// in `cwd`) and resolves to `{ sessionId }`.
    pub fn load(&self, session_id: String, cwd: Option<PathBuf>) -> Pending<Value> {
        match self {
            Agent::Own(app) => {
                let app = app.clone();
                Box::pin(async move {
                    let store = app.store().await.ok_or(SessionError::NoStore)?;
                    let session = Session::load(store, &session_id, app.telemetry()).await?;
                    let cost_usd = session.cost_usd().await;
                    let value = serde_json::json!({
                        "session": session.info(),
                        "items": session.replay(),
                        "cost_usd": cost_usd,
                    });
                    app.sessions().insert(session);
                    Ok(value)
                })
            }
            Agent::External(_, agent) => {
                let agent = agent.clone();
                Box::pin(async move { Ok(agent.load_session(session_id, cwd).await?) })
            }
        }
    }
}
