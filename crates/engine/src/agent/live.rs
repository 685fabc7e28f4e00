//! Live cost while an answer streams: the footer and the statusline climb
//! with the text. The provider's own usage is used as soon as it reports
//! some (Anthropic at the start, Gemini with every chunk); what streamed
//! since its last report is estimated from the text and marked estimated.
//! Updates leave at most one per [`EVERY`], so the editor redraws the
//! footer at most that often whatever the stream's rate.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_client_protocol_schema::v1::SessionUpdate;

use crate::session::updates;
use mia_cost::{Cost, Usage};
use mia_llm::count::{estimate_tenths, estimate_tokens, message_text};
use mia_llm::delta::Delta;
use mia_llm::message::ChatRequest;
use mia_llm::providers::Providers;

/// Shortest time between two live updates: three a second. Each one costs
/// the editor's main thread a frame several times a plain text frame's
/// work (the figures' JSON and its decoding, the live line, its extmark:
/// 150-250 µs against 40-55, cold caches every time). At ten a second,
/// mia's own share of a 4 s, 50 Hz answer was 17-20 ms over Neovim
/// drawing the same text; at five, 9-15 ms; going from five to three took
/// mia's own frame work over that answer from 13.4-21.0 ms to 11.0-17.4
/// (stream_bench.py, issue 16's closing notes).
pub const EVERY: Duration = Duration::from_millis(333);

/// The running figures of one request of a turn.
pub struct LiveMeter {
    providers: Arc<Providers>,
    provider: String,
    model: String,
    window: u64,
    last: Option<Instant>,
    /// What the provider reported of this request so far.
    reported: Option<Usage>,
    /// Tenths of tokens streamed since the last report.
    tenths: u64,
    input_estimate: u64,
    /// The turn's earlier requests.
    before: Usage,
    before_cost: Cost,
    session_cost_usd: f64,
}

impl LiveMeter {
    /// A meter for `req`, after the turn's `before` usage and cost; `None`
    /// when the model names no known provider (the request fails anyway).
    pub fn new(
        providers: &Arc<Providers>,
        req: &ChatRequest,
        before: Usage,
        before_cost: &Cost,
        session_cost_usd: f64,
    ) -> Option<LiveMeter> {
        let (provider, model) = providers.resolve(&req.model).ok()?;
        let window = providers
            .pricing()
            .price(&provider.name, &model)
            .and_then(|p| p.context)
            .unwrap_or(0);
        let input_estimate = req.system.as_deref().map(estimate_tokens).unwrap_or(0)
            + req
                .messages
                .iter()
                .map(|m| estimate_tokens(&message_text(m)))
                .sum::<u64>()
            + req
                .tools
                .iter()
                .map(|t| estimate_tokens(&t.description) + estimate_tokens(&t.parameters.to_string()))
                .sum::<u64>();
        Some(LiveMeter {
            providers: providers.clone(),
            provider: provider.name,
            model,
            window,
            last: None,
            reported: None,
            tenths: 0,
            input_estimate,
            before,
            before_cost: before_cost.clone(),
            session_cost_usd,
        })
    }

    /// Takes one delta; returns the update to send when one is due.
    pub fn on_delta(&mut self, delta: &Delta) -> Option<SessionUpdate> {
        match delta {
            Delta::Text { text } | Delta::Reasoning { text } => self.tenths += estimate_tenths(text),
            Delta::ToolCallDelta { arguments_delta, .. } => self.tenths += estimate_tenths(arguments_delta),
            Delta::Usage { usage } => {
                self.reported = Some(*usage);
                self.tenths = 0;
            }
            _ => return None,
        }
        if self.last.is_some_and(|t| t.elapsed() < EVERY) {
            return None;
        }
        self.last = Some(Instant::now());
        Some(self.update())
    }

    /// This request's usage as far as known.
    fn current(&self) -> Usage {
        let mut u = self.reported.unwrap_or_default();
        if u.input_tokens == 0 && u.cache_read_tokens == 0 && u.cache_write_tokens == 0 {
            u.input_tokens = self.input_estimate;
            u.estimated = true;
        }
        if self.tenths > 0 {
            u.output_tokens = u.output_tokens.saturating_add(self.tenths.div_ceil(10));
            u.estimated = true;
        }
        u
    }

    fn update(&self) -> SessionUpdate {
        let now = self.current();
        let cost = self.providers.cost_of(&self.provider, &self.model, &now);
        let mut usage = self.before;
        super::add_usage(&mut usage, &now);
        let mut total = self.before_cost.clone();
        super::add_cost(&mut total, &cost);
        let used = now
            .input_tokens
            .saturating_add(now.cache_read_tokens)
            .saturating_add(now.cache_write_tokens)
            .saturating_add(now.output_tokens);
        let session = self.session_cost_usd + cost.total_usd.unwrap_or(0.0);
        updates::live_usage(&usage, &total, used, self.window, session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mia_llm::message::{Message, Role};
    use mia_llm::providers::CoreConfig;

    fn meter() -> LiveMeter {
        let config: CoreConfig = serde_json::from_value(serde_json::json!({
            "providers": { "scn": { "kind": "openai_compatible", "base_url": "http://127.0.0.1:9/v1" } },
            "pricing": { "scn/echo": { "input": 3.0, "output": 15.0, "context": 1000 } },
        }))
        .unwrap();
        let providers = Arc::new(Providers::new(config));
        let req = ChatRequest {
            model: "scn/echo".into(),
            system: Some("You are helpful.".into()),
            messages: vec![Message::text(Role::User, "hello there")],
            ..ChatRequest::default()
        };
        let turn_so_far = Cost {
            known: true,
            ..Cost::default()
        };
        LiveMeter::new(&providers, &req, Usage::default(), &turn_so_far, 0.0).unwrap()
    }

    fn mia(update: SessionUpdate) -> serde_json::Value {
        let SessionUpdate::UsageUpdate(u) = update else {
            panic!("not a usage update")
        };
        u.meta.unwrap()["mia"].clone()
    }

    #[test]
    fn the_first_delta_shows_at_once_and_later_ones_wait_their_turn() {
        let mut m = meter();
        let first = m.on_delta(&Delta::Text {
            text: "Hello world".into(),
        });
        let usage = &mia(first.expect("the first delta is shown"))["usage"];
        assert_eq!(usage["output_tokens"], 3);
        assert_eq!(usage["estimated"], true);
        assert!(
            usage["input_tokens"].as_u64().unwrap() > 0,
            "the input is estimated too"
        );
        assert!(
            m.on_delta(&Delta::Text { text: " again".into() }).is_none(),
            "throttled"
        );
        m.last = Some(Instant::now() - EVERY);
        let usage = &mia(m.on_delta(&Delta::Text { text: "!".into() }).unwrap())["usage"];
        assert_eq!(usage["output_tokens"], 4, "what was throttled still counts, unrounded");
    }

    #[test]
    fn reported_usage_replaces_the_estimate_and_only_later_text_is_estimated() {
        let mut m = meter();
        m.on_delta(&Delta::Text {
            text: "some text".into(),
        });
        let real = Usage {
            input_tokens: 1234,
            output_tokens: 7,
            ..Usage::default()
        };
        m.last = None;
        let shown = mia(m.on_delta(&Delta::Usage { usage: real }).unwrap());
        assert_eq!(shown["usage"]["input_tokens"], 1234);
        assert_eq!(shown["usage"]["output_tokens"], 7);
        assert_eq!(shown["usage"]["estimated"], false);
        assert_eq!(shown["cost"]["known"], true);
        m.last = None;
        let shown = mia(m.on_delta(&Delta::Text { text: "more".into() }).unwrap());
        assert_eq!(shown["usage"]["output_tokens"], 8);
        assert_eq!(shown["usage"]["estimated"], true);
    }
}
