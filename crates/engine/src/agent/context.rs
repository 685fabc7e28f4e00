//! `:Mia context`: what the next request of a session will carry, part by
//! part, before it is sent. The request is built by the same code as the
//! agent loop's ([`super::RequestBase`]) and counted in one call to the
//! provider's counting endpoint where it has one; each part's share is its
//! estimate scaled to that count, so the parts always add up to the total.
//! Without an endpoint (or when it fails) every figure is an estimate
//! ([`mia_llm::count::estimate_tokens`]) and says so.
//!
//! A new kind of part (attachments, say) is one more entry in
//! [`Estimates`]: the prompt table is the same one `agent_prompt` takes.

use serde::Serialize;

use super::{mentions, rules, tool_defs, tool_line, turn_files, turn_mentions, AgentDeps, Prompt, RequestBase};
use crate::events::StreamId;
use crate::session::Session;
use crate::tools::AgentInfo;
use mia_llm::count::{count_tokens, estimate_tokens, message_text, ESTIMATE_ERROR_PERCENT};
use mia_llm::error::LlmError;
use mia_llm::message::{Message, Part, Role, ToolDef};

/// How many of the largest tools the report names one by one.
const LARGEST_TOOLS: usize = 3;

/// What an attached image is estimated at: about a megapixel, as providers
/// count it (Anthropic: width × height / 750 tokens).
const IMAGE_ESTIMATE: u64 = 1_600;

/// One line of the report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ContextPart {
    /// `system`, `rules`, `tools`, `tool`, `history` or `prompt`.
    pub kind: &'static str,
    pub name: String,
    pub tokens: u64,
    /// Share of the model's context window, when the window is known.
    pub percent: Option<f64>,
    /// Price at the model's input rate, when the price is known.
    pub usd: Option<f64>,
    /// A detail of the part above it (one of the largest tools): not added to the total.
    pub detail: bool,
}

/// What `:Mia context` shows.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ContextReport {
    pub model: String,
    pub mode: String,
    pub parts: Vec<ContextPart>,
    pub total: u64,
    pub percent: Option<f64>,
    pub usd: Option<f64>,
    /// The model's context window in tokens, if the price table knows it.
    pub window: Option<u64>,
    /// Input price per million tokens, if known.
    pub input_per_million: Option<f64>,
    /// True when the total is the provider's own count; false: estimated.
    pub counted: bool,
    /// How far an estimate may be off, in percent either way.
    pub error_percent: u64,
    /// Why the count is an estimate although the provider could count (its endpoint failed).
    pub note: Option<String>,
}

/// The unscaled estimate of each part, in report order.
struct Estimates(Vec<(ContextPart, u64)>);

impl Estimates {
    fn push(&mut self, kind: &'static str, name: impl Into<String>, estimate: u64, detail: bool) {
        let part = ContextPart {
            kind,
            name: name.into(),
            tokens: 0,
            percent: None,
            usd: None,
            detail,
        };
        self.0.push((part, estimate));
    }

    fn sum(&self) -> u64 {
        self.0.iter().filter(|(p, _)| !p.detail).map(|(_, e)| e).sum()
    }

    /// The parts with their tokens: estimates scaled so that the top-level
    /// parts add up to `total` exactly (the rounding left over goes to the
    /// largest part).
    fn scaled(self, total: u64) -> Vec<ContextPart> {
        let sum = self.sum().max(1);
        let scale = |e: u64| ((e as u128 * total as u128 + sum as u128 / 2) / sum as u128) as u64;
        let mut parts: Vec<ContextPart> = self
            .0
            .into_iter()
            .map(|(mut p, e)| {
                p.tokens = scale(e);
                p
            })
            .collect();
        let given: u64 = parts.iter().filter(|p| !p.detail).map(|p| p.tokens).sum();
        if let Some(largest) = parts.iter_mut().filter(|p| !p.detail).max_by_key(|p| p.tokens) {
            largest.tokens = (largest.tokens + total).saturating_sub(given);
        }
        parts
    }
}

/// A tool's estimate: its line in the system prompt and its definition.
fn tool_estimate(t: &ToolDef) -> u64 {
    estimate_tokens(&tool_line(t))
        + estimate_tokens(&t.name)
        + estimate_tokens(&t.description)
        + estimate_tokens(&t.parameters.to_string())
}

/// The report for `session`'s next request if `prompt` were sent now.
/// Nothing is sent to the model and nothing is stored; MCP servers the
/// turn would use are started (their tools are part of the request).
pub async fn report(
    deps: &AgentDeps,
    stream: StreamId,
    session: &Session,
    prompt: &Prompt,
) -> Result<ContextReport, LlmError> {
    let info = session.info();
    let mode = prompt.mode.clone().filter(|m| !m.is_empty()).unwrap_or(info.mode);
    let model = prompt.model.clone().filter(|m| !m.is_empty()).unwrap_or(info.model);
    let (provider, wire_model) = deps.providers.resolve(&model)?;
    let files = turn_files(deps, &info.cwd, &mode, prompt.focus.as_deref(), false).await;
    let (root, rules) = (files.root, files.rules);
    let agent = AgentInfo {
        name: info.agent,
        mode: mode.clone(),
    };
    super::start_mcp(deps, stream).await;
    let defs = tool_defs(deps, &mode);
    let history = session.request_messages();
    // The mentions as the turn would read them (refusals are the same error).
    let attached = turn_mentions(deps, session, &root, &agent, prompt).await?;
    let mut messages = history.clone();
    let mut user = Vec::new();
    if !prompt.content.is_empty() {
        user.push(Part::Text {
            text: prompt.content.clone(),
        });
    }
    user.extend(attached.parts.iter().cloned());
    if !user.is_empty() {
        messages.push(Message {
            role: Role::User,
            parts: user,
        });
    }
    let base = RequestBase {
        deps,
        prompt,
        mode: &mode,
        model: &model,
        root: &root,
        rules: &rules,
    };
    let estimates = estimate_parts(&base, &defs, &history, prompt, &attached);
    let request = base.request(defs, messages);
    let (total, counted, note) = match count_tokens(&deps.providers, &request).await {
        Ok(Some(n)) => (n, true, None),
        Ok(None) => (estimates.sum(), false, None),
        Err(e) => (
            estimates.sum(),
            false,
            Some(format!("{} The figures are estimates.", e.message)),
        ),
    };
    let price = deps.providers.pricing().price(&provider.name, &wire_model);
    let window = price.and_then(|p| p.context).filter(|w| *w > 0);
    let input = price.map(|p| p.input);
    let percent = |n: u64| window.map(|w| n as f64 * 100.0 / w as f64);
    let usd = |n: u64| input.map(|rate| n as f64 * rate / 1e6);
    let parts = estimates
        .scaled(total)
        .into_iter()
        .map(|mut p| {
            p.percent = percent(p.tokens);
            p.usd = usd(p.tokens);
            p
        })
        .collect();
    Ok(ContextReport {
        model,
        mode,
        parts,
        total,
        percent: percent(total),
        usd: usd(total),
        window,
        input_per_million: input,
        counted,
        error_percent: ESTIMATE_ERROR_PERCENT,
        note,
    })
}

/// Each part's estimate: the system prompt (with the rules' heading), each
/// rules file, the tools (and the largest few), the history, the prompt.
fn estimate_parts(
    base: &RequestBase,
    defs: &[ToolDef],
    history: &[Message],
    prompt: &Prompt,
    attached: &mentions::Resolved,
) -> Estimates {
    let mut e = Estimates(Vec::new());
    let no_rules = rules::Rules::default();
    let bare = RequestBase {
        rules: &no_rules,
        ..*base
    };
    let own = super::system_prompt(&bare.system_parts(), &[], base.root);
    let mut system = estimate_tokens(&own);
    if !base.rules.sections.is_empty() {
        system += estimate_tokens(rules::RULES_HEADER);
    }
    e.push("system", "system prompt", system, false);
    for (file, section) in base.rules.files.iter().zip(&base.rules.sections) {
        e.push("rules", file.clone(), estimate_tokens(section), false);
    }
    if !defs.is_empty() {
        let mut each: Vec<(&ToolDef, u64)> = defs.iter().map(|t| (t, tool_estimate(t))).collect();
        let all = each.iter().map(|(_, n)| n).sum::<u64>() + estimate_tokens("Tools you can call:");
        e.push("tools", format!("tool definitions ({})", defs.len()), all, false);
        each.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.name.cmp(&b.0.name)));
        for (t, n) in each.into_iter().take(LARGEST_TOOLS) {
            e.push("tool", t.name.clone(), n, true);
        }
    }
    if !history.is_empty() {
        let n: u64 = history.iter().map(|m| estimate_tokens(&message_text(m))).sum();
        e.push("history", format!("history ({} messages)", history.len()), n, false);
    }
    e.push("prompt", "prompt", estimate_tokens(&prompt.content), false);
    for (part, record) in attached.parts.iter().zip(&attached.records) {
        let tokens = match part {
            Part::Text { text } => estimate_tokens(text),
            Part::Image { .. } => IMAGE_ESTIMATE,
            _ => 0,
        };
        let label = record["label"].as_str().unwrap_or("attachment");
        e.push("mention", format!("@{}", label.trim_start_matches('@')), tokens, false);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimates() -> Estimates {
        let mut e = Estimates(Vec::new());
        e.push("system", "system prompt", 100, false);
        e.push("tools", "tool definitions (2)", 300, false);
        e.push("tool", "big", 200, true);
        e.push("prompt", "prompt", 1, false);
        e
    }

    #[test]
    fn scaled_parts_add_up_to_the_counted_total_and_details_stay_out() {
        let parts = estimates().scaled(1000);
        let sum: u64 = parts.iter().filter(|p| !p.detail).map(|p| p.tokens).sum();
        assert_eq!(sum, 1000);
        assert_eq!(parts[1].tokens, 749, "{parts:?}");
        assert_eq!(parts[2].tokens, 499);
        let unscaled = estimates().scaled(401);
        assert_eq!(
            unscaled.iter().map(|p| p.tokens).collect::<Vec<_>>(),
            vec![100, 300, 200, 1]
        );
    }
}
