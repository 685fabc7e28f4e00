//! Token counts before anything is sent: the provider's own counting
//! endpoint where it has one (Anthropic `messages/count_tokens`, Gemini
//! `countTokens`), and an estimate everywhere else.
//!
//! The estimate ([`estimate_tokens`]) models how byte-pair tokenizers cut
//! text: a token covers about four and a half letters or digits of a word,
//! punctuation goes in clusters of one or two characters, whitespace mostly
//! rides along with the next word, and a character outside ASCII is about
//! one token. Against real tokenizers it stays within
//! [`ESTIMATE_ERROR_PERCENT`] for English prose, code and JSON; text in
//! other scripts can be off by more.

use serde_json::Value;

use super::error::{ErrorClass, LlmError};
use super::http::{self, WireRequest};
use super::message::{ChatRequest, Message, Part};
use super::providers::Providers;

/// How far (in percent, either way) an estimate may be from the provider's
/// count for English prose, code and JSON. `doc/mia.txt` states it.
pub const ESTIMATE_ERROR_PERCENT: u64 = 25;

/// About how many tokens `text` is (see the module's notes).
pub fn estimate_tokens(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    estimate_tenths(text).div_ceil(10).max(1)
}

/// [`estimate_tokens`] in tenths of a token, so that the estimates of a
/// streamed answer's pieces add up without rounding each one.
pub fn estimate_tenths(text: &str) -> u64 {
    let (mut word, mut punct, mut wide) = (0u64, 0u64, 0u64);
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            word += 1;
        } else if c.is_whitespace() {
        } else if c.is_ascii() {
            punct += 1;
        } else {
            wide += 1;
        }
    }
    // 4.5 word characters or 1.6 punctuation characters make a token.
    word * 100 / 45 + punct * 100 / 16 + wide * 10
}

/// The text of one message as the model reads it (tool calls as their
/// JSON arguments, results whole); images are not counted here.
pub fn message_text(m: &Message) -> String {
    let mut out = String::new();
    for p in &m.parts {
        match p {
            Part::Text { text } | Part::Reasoning { text, .. } => out.push_str(text),
            Part::ToolCall { name, arguments, .. } => {
                out.push_str(name);
                out.push(' ');
                out.push_str(&arguments.to_string());
            }
            Part::ToolResult { content, .. } => out.push_str(content),
            // Opaque to mia; the provider counts it (its usage reports it).
            Part::EncryptedReasoning { .. } => {}
            Part::Image { .. } => {}
        }
        out.push('\n');
    }
    out
}

/// Where `req` is counted: the provider's counting endpoint, or nowhere
/// (`Ok(None)`: estimate it). A failing endpoint is an error; the caller
/// falls back to the estimate and says why.
pub async fn count_tokens(providers: &Providers, req: &ChatRequest) -> Result<Option<u64>, LlmError> {
    let (provider, model) = providers.keyed(&req.model, false).await?;
    let Some(count) = provider.format().count_request(&provider, &model, req) else {
        return Ok(None);
    };
    let field = count.field;
    let client = providers.client(&provider.name)?;
    let wire = WireRequest {
        url: count.url,
        headers: provider.format().headers(&provider),
        body: Some(count.body),
    };
    let response = http::send(
        &client,
        &provider,
        &model,
        wire,
        &providers.config.timeouts,
        &providers.rate_limits,
    )
    .await?;
    let bytes = super::read_body(&provider, response, providers.config.limits.max_event_bytes).await?;
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    answer.get(field).and_then(Value::as_u64).map(Some).ok_or_else(|| {
        LlmError::new(
            ErrorClass::ServerError,
            Some(&provider.name),
            format!("{}: the token count answer has no `{field}` number.", provider.name),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_grow_with_text_and_weigh_punctuation_more_than_letters() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        let prose = estimate_tokens("The quick brown fox jumps over the lazy dog.");
        assert!((8..=12).contains(&prose), "{prose}");
        let json = estimate_tokens(r#"{"type": "object", "properties": {}}"#);
        assert!(
            json > r#"{"type": "object", "properties": {}}"#.len() as u64 / 4,
            "{json}"
        );
        assert_eq!(estimate_tokens("日本語"), 3);
    }
}
