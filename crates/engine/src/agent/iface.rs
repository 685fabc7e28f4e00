//! One agent interface: mia's own agent and an external ACP agent answer the
//! same calls (start a session, prompt, set a mode, set a setting, load and
//! list sessions, say what they offer), so a front-end sends what the user
//! did to [`Agent`] and draws the ACP updates that come back, whichever
//! agent the chat talks to. Cancelling a turn is the same for both: the
//! `CancellationToken` its prompt was given.
//!
//! Both announce their modes the same way: [`Agent::info`] and a new
//! session's answer carry ACP's `SessionModeState` (`currentModeId`,
//! `availableModes`), and a switch arrives as a `current_mode_update`.
//! A choice neither offers is refused here (`choices`), with what it offers.
//!
//! What differs stays here: mia's own agent answers a mode switch at once
//! (its `current_mode_update` is returned); an external agent is asked over
//! ACP and announces the switch on its own stream, as it announces
//! everything else.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol_schema::v1 as acp;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::choices::{self, ChoiceError};
use super::listing::{self, ListQuery};
use super::AgentSettings;
use crate::acp::client::{AcpClientError, AgentProc, AgentPrompt, TurnDeps};
use crate::acp::client_sessions::Ask;
use crate::app::{App, AppError};
use crate::events::StreamId;
use crate::session::{Session, SessionError, SessionInfo};

/// What can go wrong asking an agent, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    App(#[from] AppError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    External(#[from] AcpClientError),
    #[error(transparent)]
    Choice(#[from] ChoiceError),
    #[error("mia: only an external agent has settings; switch to one with :Mia agent {{name}}")]
    NoSettings,
    #[error(
        "mia: @-mentions of files, buffers and images are sent by mia's own agent only; {agent} gets text. \
         Switch back with :Mia agent mia, or remove the mentions."
    )]
    Attachments { agent: String },
    /// What only mia's own agent does (`:Mia context`, `/compact`).
    #[error("{0}")]
    OwnOnly(&'static str),
    #[error("mia: the store is not available (see :checkhealth mia and the log); history and costs need it")]
    NoStore,
    #[error("mia: {0}")]
    Store(#[from] mia_store::StoreError),
    #[error("mia: cannot list the sessions of `{agent}`: {reason}")]
    CannotList { agent: String, reason: String },
}

/// A future an agent's call resolves to, run on the app's runtime.
pub type Pending<T> = Pin<Box<dyn Future<Output = Result<T, AgentError>> + Send>>;

/// What a mode switch did.
pub enum ModeSwitch {
    /// mia's own agent switched; this `current_mode_update` announces it.
    Announced(Box<acp::SessionUpdate>),
    /// An external agent was asked; it announces the switch on its stream.
    Asked(Pending<()>),
}

/// What mia's own agent keeps between a front-end's calls: the mode its
/// chat is in, which a session started next starts in (a chat switches
/// modes before it has a session, and keeps its mode when it is cleared).
#[derive(Debug, Default)]
pub struct OwnAgent {
    mode: Mutex<Option<String>>,
}

impl OwnAgent {
    /// The mode the chat is in: the last one set, else the configured one.
    pub fn mode(&self, settings: &AgentSettings) -> String {
        self.mode
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| settings.mode.clone())
    }

    /// The chat is in `mode` now ("": back to the configured one).
    fn set_mode(&self, mode: &str) {
        *self.mode.lock().unwrap_or_else(|p| p.into_inner()) = (!mode.is_empty()).then(|| mode.to_string());
    }
}

/// What a new chat session starts with.
#[derive(Debug, Clone, Deserialize)]
pub struct NewSession {
    pub cwd: String,
    /// The mode it starts in (the chat's mode when none).
    #[serde(default)]
    pub mode: Option<String>,
    pub model: String,
    #[serde(default)]
    pub title: Option<String>,
}

/// The agent the chat talks to.
pub enum Agent {
    /// mia's own: its sessions are the app's.
    Own(Arc<App>),
    /// An external ACP agent's process, with the app whose store and
    /// budgets its turns record into.
    External(Arc<App>, Arc<AgentProc>),
}

/// How long an external agent may take to list its sessions once it runs.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(5);

impl Agent {
    /// The agent's name as the user calls it: "mia", or the configured one.
    pub fn name(&self) -> &str {
        match self {
            Agent::Own(_) => "mia",
            Agent::External(_, agent) => &agent.spec.name,
        }
    }

    fn app(&self) -> &Arc<App> {
        match self {
            Agent::Own(app) | Agent::External(app, _) => app,
        }
    }

    /// What the agent said about itself, as an ACP agent says it:
    /// `{ agentInfo, modes, configOptions, capabilities, ... }` (an external
    /// agent's as it last said them; null before it started).
    pub fn info(&self) -> Value {
        match self {
            Agent::Own(app) => {
                let settings = app.agent_settings();
                json!({
                    "agentInfo": { "name": "mia", "title": "mia" },
                    "modes": {
                        "currentModeId": app.own_agent().mode(&settings),
                        "availableModes": settings.modes,
                    },
                    "configOptions": [],
                    "capabilities": { "listSessions": true, "loadSession": true },
                })
            }
            Agent::External(_, agent) => agent.info(),
        }
    }

    /// Starts the chat's session (the app's record its turns and usage are
    /// kept under; stored at its first prompt) and answers as ACP's
    /// `session/new` does: `{ sessionId, modes }`, the modes the agent
    /// offers and the one the session is in.
    pub fn new_session(&self, new: NewSession) -> Result<Value, AgentError> {
        let app = self.app();
        let settings = app.agent_settings();
        let mode = new.mode.unwrap_or_else(|| app.own_agent().mode(&settings));
        let id = crate::session::new_session_id();
        let info = SessionInfo {
            id: id.clone(),
            cwd: PathBuf::from(new.cwd),
            title: new.title,
            mode: mode.clone(),
            model: new.model,
            agent: "mia".into(),
            created_at_ms: crate::session::now_ms(),
        };
        app.sessions().insert(Session::new(info, None, app.telemetry()));
        let mut modes = self.info().get("modes").cloned().unwrap_or(Value::Null);
        if let (Agent::Own(_), Some(m)) = (self, modes.as_object_mut()) {
            m.insert("currentModeId".into(), json!(mode));
        }
        Ok(json!({ "sessionId": id, "modes": modes }))
    }

    /// Starts one prompt turn of the chat's session `session_id` on the
    /// stream `new_stream` gives: its updates and its `End` arrive as
    /// events. `cancel` stops it. mia's own agent takes the whole request
    /// (model, mode, attachments); an external agent takes the text, and
    /// refuses attachments.
    pub fn prompt(
        &self,
        session_id: String,
        prompt: super::Prompt,
        new_stream: impl FnOnce() -> StreamId,
        cancel: CancellationToken,
    ) -> Result<StreamId, AgentError> {
        match self {
            Agent::Own(app) => Ok(app.prompt(&session_id, prompt, new_stream, cancel)?),
            Agent::External(app, agent) => {
                if !prompt.attachments.is_empty() {
                    return Err(AgentError::Attachments {
                        agent: agent.spec.name.clone(),
                    });
                }
                let prompt = AgentPrompt {
                    content: prompt.content,
                    session_id: Some(session_id),
                    utc_offset_s: prompt.utc_offset_s,
                };
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
        }
    }

    /// Switches to `mode`, refused (with the modes there are) unless the
    /// agent offers it. mia's own agent switches the chat's session
    /// `session_id` (none yet: the chat's mode) and returns the
    /// announcement; an external agent is asked (`session/set_mode`).
    pub fn set_mode(&self, session_id: Option<&str>, mode: &str) -> Result<ModeSwitch, AgentError> {
        match self {
            Agent::Own(app) => {
                let settings = app.agent_settings();
                choices::check_own_mode(&settings.modes, mode)?;
                let own = app.own_agent();
                let update = match session_id {
                    Some(id) => app.session(id)?.switch_mode(mode),
                    None => crate::session::updates::mode_switched(mode, &own.mode(&settings)),
                };
                own.set_mode(mode);
                Ok(ModeSwitch::Announced(Box::new(update)))
            }
            Agent::External(_, agent) => {
                choices::check_mode(&agent.spec.name, &agent.info(), mode)?;
                let (agent, mode) = (agent.clone(), mode.to_string());
                Ok(ModeSwitch::Asked(Box::pin(
                    async move { Ok(agent.set_mode(mode).await?) },
                )))
            }
        }
    }

    /// Sets the setting `config_id` to `value` (`session/set_config_option`),
    /// refused (with the settings or values there are) unless the agent
    /// offers it; resolves to the agent's settings after the change. mia's
    /// own agent has none (its modes are its only choice).
    pub fn set_config_option(&self, config_id: &str, value: &str) -> Result<Pending<Value>, AgentError> {
        match self {
            Agent::Own(_) => Err(AgentError::NoSettings),
            Agent::External(_, agent) => {
                let wire = choices::check_setting(&agent.spec.name, &agent.info(), config_id, value)?;
                let (agent, id) = (agent.clone(), config_id.to_string());
                Ok(Box::pin(async move { Ok(agent.set_config_option(id, wire).await?) }))
            }
        }
    }

    /// Loads session `session_id`. mia's own agent reads it from the store
    /// and resolves to `{ session, items, cost_usd }` (every update it sent,
    /// in order: ACP's `session/load` replay), the session then being the
    /// app's and its mode the chat's; an external agent replays it on its
    /// own stream (`session/load` in `cwd`) and resolves to `{ sessionId }`.
    pub fn load(&self, session_id: String, cwd: Option<PathBuf>) -> Pending<Value> {
        match self {
            Agent::Own(app) => {
                let app = app.clone();
                Box::pin(async move {
                    let store = app.store().await.ok_or(SessionError::NoStore)?;
                    let session = Session::load(store, &session_id, app.telemetry()).await?;
                    let cost_usd = session.cost_usd().await;
                    let info = session.info();
                    let value = serde_json::json!({
                        "session": info,
                        "items": session.replay(),
                        "cost_usd": cost_usd,
                    });
                    app.own_agent().set_mode(&info.mode);
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

    /// The agent's sessions, as ACP's `session/list` answers. mia's own:
    /// one page from the store (`{ sessions, nextCursor? }`); an external
    /// agent's in its cwd, every page, the agent started if need be
    /// (`{ sessions }`), its answer bounded by `timeout`.
    pub fn list(&self, query: ListQuery, timeout: Duration) -> Pending<Value> {
        match self {
            Agent::Own(app) => {
                let app = app.clone();
                Box::pin(async move { listing::own_page(&app, query).await })
            }
            Agent::External(_, agent) => {
                let ask = Ask {
                    agent: agent.clone(),
                    start: true,
                };
                Box::pin(listing::external(ask, timeout))
            }
        }
    }

    /// What the chat session's next request would carry if `prompt` were
    /// sent now (`:Mia context`), as a job on the stream `new_stream`
    /// gives. Only mia's own agent's requests are known here.
    pub fn context(
        &self,
        session_id: &str,
        prompt: super::Prompt,
        new_stream: impl FnOnce() -> StreamId,
        cancel: CancellationToken,
    ) -> Result<StreamId, AgentError> {
        let Agent::Own(app) = self else {
            return Err(AgentError::OwnOnly(
                "mia: :Mia context counts mia's own requests; an external agent builds its own",
            ));
        };
        let session = app.session(session_id)?;
        let (rt, queue) = app.runtime_and_queue()?;
        let stream = new_stream();
        let deps = app.agent_deps(queue.clone());
        crate::stream_task::spawn_job(&rt, queue, stream, cancel, async move {
            let report = super::context::report(&deps, stream, &session, &prompt).await?;
            Ok(serde_json::to_value(report).unwrap_or(Value::Null))
        });
        Ok(stream)
    }

    /// `/compact` of the chat's session (see [`App::compact`]); an external
    /// agent keeps its own context.
    pub fn compact(
        &self,
        session_id: &str,
        new_stream: impl FnOnce() -> StreamId,
        cancel: CancellationToken,
    ) -> Result<StreamId, AgentError> {
        match self {
            Agent::Own(app) => Ok(app.compact(session_id, new_stream, cancel)?),
            Agent::External(..) => Err(AgentError::OwnOnly(
                "mia: /compact summarizes mia's own sessions; an external agent keeps its own context",
            )),
        }
    }
}

/// The picker's list of every agent's sessions (see [`listing::everywhere`]).
pub fn list_everywhere(app: Arc<App>, cwd: String, own: bool, ask: Vec<Ask>, timeout: Duration) -> Pending<Value> {
    Box::pin(listing::everywhere(app, cwd, own, ask, timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own() -> Agent {
        Agent::Own(App::new())
    }

    #[test]
    fn mias_own_agent_announces_its_modes_as_an_acp_agent_does() {
        let info = own().info();
        assert_eq!(info["modes"]["currentModeId"], "ask");
        let ids: Vec<&str> = info["modes"]["availableModes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str())
            .collect();
        assert_eq!(ids, ["ask", "architect", "code"]);
        assert!(info["modes"]["availableModes"][0]["name"].is_string());
    }

    #[test]
    fn a_mode_switch_before_a_session_is_announced_and_the_next_session_starts_in_it() {
        let agent = own();
        let ModeSwitch::Announced(update) = agent.set_mode(None, "code").expect("switched") else {
            panic!("mia's own agent announces at once");
        };
        let update = serde_json::to_value(*update).expect("json");
        assert_eq!(update["currentModeId"], "code");
        assert_eq!(update["_meta"]["mia"]["previousModeId"], "ask");
        let new = NewSession {
            cwd: "/p".into(),
            mode: None,
            model: "a/b".into(),
            title: None,
        };
        let started = agent.new_session(new).expect("session");
        assert_eq!(started["modes"]["currentModeId"], "code");
        let id = started["sessionId"].as_str().expect("id").to_string();
        assert_eq!(agent.app().session(&id).expect("kept").info().mode, "code");
    }

    #[test]
    fn mias_own_agent_refuses_a_mode_it_lacks_and_has_no_settings() {
        let agent = own();
        let err = agent.set_mode(None, "nope").err().expect("refused");
        assert_eq!(err.to_string(), "mia: unknown mode `nope`. Modes: ask, architect, code");
        assert_eq!(agent.info()["modes"]["currentModeId"], "ask", "nothing changed");
        assert!(matches!(
            agent.set_config_option("x", "y").err(),
            Some(AgentError::NoSettings)
        ));
    }
}
