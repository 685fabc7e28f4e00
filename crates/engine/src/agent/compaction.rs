//! Compaction: when the conversation no longer fits the model's context, the
//! older turns are summarized by the same model and replaced by the summary.

use mia_llm::error::LlmError;
use mia_llm::message::{ChatRequest, Message, Part, Role};
use mia_llm::providers::Providers;

/// How many of the latest messages an automatic compaction keeps verbatim.
pub const KEEP_RECENT: usize = 2;

fn transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool",
        };
        for p in &m.parts {
            let text = match p {
                Part::Text { text } => text.clone(),
                Part::ToolCall { name, arguments, .. } => format!("[called {name} with {arguments}]"),
                Part::ToolResult { content, .. } => {
                    let short: String = content.chars().take(2000).collect();
                    format!("[tool result: {short}]")
                }
                Part::Image { .. } => "[image]".to_string(),
                Part::Reasoning { .. } | Part::EncryptedReasoning { .. } => continue,
            };
            out.push_str(&format!("{who}: {text}\n"));
        }
    }
    out
}

/// The history with everything but the latest `keep_recent` messages
/// replaced by a summary, and the summarizing call's answer (whose usage is
/// recorded like any other call's). The summarizing request goes through
/// the transform hooks like every other model call.
pub async fn compact(
    caller: &crate::hooks::Caller,
    providers: &Providers,
    model: &str,
    history: &[Message],
    keep_recent: usize,
) -> Result<(Vec<Message>, mia_llm::delta::StreamDone), LlmError> {
    let mut split = history.len().saturating_sub(keep_recent);
    // Never separate tool results from the call that asked for them.
    while split > 0 && history.get(split).is_some_and(|m| m.role == Role::Tool) {
        split -= 1;
    }
    let (older, recent) = history.split_at(split);
    if older.is_empty() {
        return Err(LlmError::new(
            mia_llm::error::ErrorClass::ContextOverflow,
            None,
            "the latest messages alone are too long for the model; nothing older can be compacted. Start a new chat with a shorter prompt.",
        ));
    }
    let req = ChatRequest {
        model: model.to_string(),
        system: Some(
            "You compress conversations between a user and a coding assistant. Keep every decision, file name, \
             code fact and open task; drop pleasantries. Answer with the summary only."
                .into(),
        ),
        messages: vec![Message::text(
            Role::User,
            format!("Summarize the conversation so far:\n\n{}", transcript(older)),
        )],
        ..ChatRequest::default()
    };
    let done = crate::hooks::call_model(caller, providers, &req, false, &mut |_| {}).await?;
    let mut out = vec![Message::text(
        Role::User,
        format!("(Summary of the earlier conversation)\n{}", done.text),
    )];
    out.extend_from_slice(recent);
    Ok((out, done))
}
