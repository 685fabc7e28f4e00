//! The real recorded OpenAI-format streams in ../shared/fixtures/recorded
//! decode to the right text, reasoning, stop reason and usage, whatever the
//! network chunking. Expected values were written by hand from reading the
//! recordings. Skips (with a message) when ../shared is not beside the project.

mod common;

use common::{decode_chunked, recorded};

use mia_cost::Usage;
use mia_llm::delta::Accumulator;
use mia_llm::message::StopReason;
use mia_llm::openai::OpenAiDecoder;
use mia_llm::providers::{CoreConfig, Providers};

/// Frames each recorded JSON line as an SSE event, feeds it in random chunks.
fn decode(lines: &str, seed: u64) -> Accumulator {
    let mut wire = String::new();
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        wire.push_str("data: ");
        wire.push_str(line);
        wire.push_str("\r\n\r\n");
    }
    wire.push_str("data: [DONE]\n\n");
    let mut dec = OpenAiDecoder::new("recorded");
    let (acc, _) = decode_chunked(wire.as_bytes(), seed, |e, out| {
        dec.decode(e, out).expect("recorded stream decodes")
    });
    acc
}

#[test]
fn openai_text_stream_decodes() {
    let Some(s) = recorded("openai/openai-text.chunks.txt") else {
        return;
    };
    for seed in [1, 7, 42] {
        let acc = decode(&s, seed);
        assert!(acc
            .text
            .starts_with("**Holiday Name:** Harmony Day\n\n**Date:** Celebrated annually"));
        assert!(acc.text.ends_with("ed human experiences and mutual respect."));
        assert_eq!(acc.text.chars().count(), 1724);
        assert_eq!(acc.stop_reason, Some(StopReason::EndTurn));
        assert!(acc.terminal);
        assert_eq!(
            acc.usage,
            Some(Usage {
                input_tokens: 16,
                output_tokens: 300,
                ..Usage::default()
            })
        );
    }
}

#[test]
fn groq_text_stream_decodes_with_top_level_usage() {
    let Some(s) = recorded("openai-compatible/groq-text.chunks.txt") else {
        return;
    };
    let acc = decode(&s, 3);
    assert!(acc
        .text
        .starts_with("Introducing \"Luminaria\" - a new holiday that celebrates the "));
    assert!(acc.text.ends_with("per appreciation for the magic of light."));
    assert_eq!(acc.text.chars().count(), 3189);
    let usage = acc.usage.expect("groq sends usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (45, 662));
}

#[test]
fn azure_router_stream_decodes_with_reasoning_tokens() {
    let Some(s) = recorded("openai/azure-model-router.1.chunks.txt") else {
        return;
    };
    let want = Some(Usage {
        input_tokens: 15,
        output_tokens: 78,
        reasoning_tokens: 64,
        ..Usage::default()
    });
    let acc = decode(&s, 5);
    assert_eq!(acc.text, "Capital of Denmark.");
    assert_eq!(acc.usage, want);
    // and through the `azure_openai` wire format's own decoder, as a provider
    // of that kind reads it (the prompt-filter preamble with no choices included)
    let mut config = CoreConfig::default();
    config.providers.insert(
        "az".into(),
        serde_json::from_value(serde_json::json!({
            "kind": "azure_openai", "base_url": "https://res.openai.azure.com", "api_key": "k"
        }))
        .expect("an azure provider"),
    );
    let (provider, _) = Providers::new(config).resolve("az/router").expect("resolves");
    let mut dec = provider.kind.format().decoder(&provider);
    let mut wire = String::new();
    for line in s.lines().filter(|l| !l.trim().is_empty()) {
        wire.push_str(&format!("data: {line}\n\n"));
    }
    wire.push_str("data: [DONE]\n\n");
    let (acc, _) = decode_chunked(wire.as_bytes(), 11, |e, out| {
        dec.decode(e, out).expect("recorded stream decodes")
    });
    assert_eq!(acc.text, "Capital of Denmark.");
    assert_eq!(acc.usage, want);
    assert!(acc.terminal);
}

#[test]
fn deepseek_reasoning_is_kept_apart_from_the_answer() {
    let Some(s) = recorded("openai-compatible/deepseek-reasoning.chunks.txt") else {
        return;
    };
    let acc = decode(&s, 9);
    assert_eq!(acc.text, "The word \"strawberry\" contains three \"r\"s.");
    assert!(acc.reasoning.starts_with("We need to count the number of the lette"));
    assert_eq!(acc.reasoning.chars().count(), 606);
    let usage = acc.usage.expect("deepseek sends usage");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.reasoning_tokens),
        (18, 219, 205)
    );
}
