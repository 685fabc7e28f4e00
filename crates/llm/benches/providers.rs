//! Provider pipeline benchmarks (numbers for closing notes, not tests):
//! - decode throughput of each wire decoder (OpenAI's Responses API's too)
//!   over the recorded real streams in ../shared/fixtures/recorded, fed in
//!   pseudo-random 1–64-byte chunks;
//! - live heap per active stream, with many streams in flight against the
//!   scenario server on loopback;
//! - time and resident memory to initialize one provider's HTTP client, and
//!   all four configured ones.
//!
//! Run: `cargo bench --bench providers` (starts scripts/scenario_server.py).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mia_llm::delta::{Accumulator, DecodeEvent};
use mia_llm::message::{ChatRequest, Message, Role};
use mia_llm::providers::{CoreConfig, ProviderConfig, ProviderKind, Providers};
use mia_llm::stream::{SseDecoder, SseEvent};
use mia_llm::wire::StreamDecoder;
use mia_llm::{anthropic, gemini, openai, responses};

/// Counts live heap bytes so a stream's footprint can be read directly.
struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[path = "../tests/common/mod.rs"]
mod common;
use common::XorShift;

/// The wire bytes of every recording in `dir` (JSON-lines files framed as SSE).
fn wire_bytes(dir: &Path, anthropic_events: bool) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if path.to_string_lossy().ends_with(".chunks.txt") {
            let mut wire = String::new();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                if anthropic_events {
                    if let Some(t) = serde_json::from_str::<serde_json::Value>(line)
                        .ok()
                        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string))
                    {
                        wire.push_str(&format!("event: {t}\n"));
                    }
                }
                wire.push_str(&format!("data: {line}\n\n"));
            }
            out.push(wire.into_bytes());
        } else if path.extension().is_some_and(|e| e == "txt" || e == "sse") {
            out.push(text.into_bytes());
        }
    }
    out
}

enum Dec {
    O(openai::OpenAiDecoder),
    A(anthropic::AnthropicDecoder),
    G(gemini::GeminiDecoder),
    R(responses::ResponsesDecoder),
    /// The decoder a provider of that kind gets: through the `WireFormat`
    /// registry, behind a `Box<dyn StreamDecoder>`.
    W(Box<dyn StreamDecoder>),
}

impl Dec {
    fn decode(&mut self, e: &SseEvent, out: &mut Vec<DecodeEvent>) {
        let _ = match self {
            Dec::O(d) => d.decode(e, out),
            Dec::A(d) => d.decode(e, out),
            Dec::G(d) => d.decode(e, out),
            Dec::R(d) => d.decode(e, out),
            Dec::W(d) => d.decode(e, out),
        };
    }
}

fn throughput(name: &str, streams: &[Vec<u8>], make: impl Fn() -> Dec) {
    if streams.is_empty() {
        println!("| {name} | (recordings not found) | |");
        return;
    }
    let total: usize = streams.iter().map(Vec::len).sum();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut bytes = 0usize;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        for s in streams {
            let mut sse = SseDecoder::new();
            let mut dec = make();
            let mut acc = Accumulator::default();
            let (mut events, mut out) = (Vec::new(), Vec::new());
            let mut i = 0;
            while i < s.len() {
                let end = (i + rng.next()).min(s.len());
                if sse.push(&s[i..end], &mut events).is_err() {
                    break; // a recorded event never passes the default limit
                }
                i = end;
                for e in events.drain(..) {
                    dec.decode(&e, &mut out);
                    out.drain(..).for_each(|d| acc.apply(&d));
                }
            }
            sse.finish(&mut events);
            std::hint::black_box(&acc);
            bytes += s.len();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "| {name} | {} files, {} KB | {:.0} MB/s |",
        streams.len(),
        total / 1024,
        bytes as f64 / secs / 1e6
    );
}

fn provider(kind: ProviderKind, base: &str) -> ProviderConfig {
    ProviderConfig {
        kind,
        base_url: Some(base.to_string()),
        api_key_env: None,
        api_key: Some("bench-key".into()),
        headers: Default::default(),
        models: vec![],
        prompt_caching: false,
        api_version: None,
        native_tools: true,
        api: None,
        local: None,
        api_key_cmd: None,
    }
}

fn four_providers(base: &str) -> CoreConfig {
    let mut c = CoreConfig::default();
    c.providers.insert("a".into(), provider(k("anthropic"), base));
    c.providers
        .insert("o".into(), provider(k("openai"), &format!("{base}/v1")));
    c.providers
        .insert("g".into(), provider(k("gemini"), &format!("{base}/v1beta")));
    c.providers
        .insert("c".into(), provider(k("openai_compatible"), &format!("{base}/v1")));
    c
}

fn init_cost() {
    let rss0 = rss_kib();
    let heap0 = LIVE.load(Ordering::Relaxed);
    let t = Instant::now();
    let providers = Providers::new(four_providers("http://127.0.0.1:9"));
    let configured = t.elapsed();
    let t = Instant::now();
    providers.client("a").expect("client");
    let one = t.elapsed();
    let (rss1, heap1) = (rss_kib(), LIVE.load(Ordering::Relaxed));
    let t = Instant::now();
    for name in ["o", "g", "c"] {
        providers.client(name).expect("client");
    }
    let three_more = t.elapsed();
    let (rss4, heap4) = (rss_kib(), LIVE.load(Ordering::Relaxed));
    println!("\n## Provider initialization\n");
    println!(
        "- configuring four providers (no client built): {:.1} µs",
        configured.as_secs_f64() * 1e6
    );
    println!(
        "- first provider's client: {:.2} ms, +{} KiB RSS, +{} KiB heap",
        one.as_secs_f64() * 1e3,
        rss1.saturating_sub(rss0),
        (heap1 - heap0) / 1024
    );
    println!(
        "- all four clients: {:.2} ms in all, +{} KiB RSS, +{} KiB heap in all",
        (one + three_more).as_secs_f64() * 1e3,
        rss4.saturating_sub(rss0),
        (heap4 - heap0) / 1024
    );
}

fn memory_per_stream(root: &Path) {
    let mut server = std::process::Command::new("python3")
        // `root` is crates/llm since the workspace split; the server is the project's
        .arg(root.join("../../scripts/scenario_server.py"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("scenario server starts");
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("port line");
    let port: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("LISTENING <port>");
    let mut config = CoreConfig::default();
    config.providers.insert(
        "s".into(),
        ProviderConfig {
            api_key: None,
            ..provider(k("openai_compatible"), &format!("http://127.0.0.1:{port}/v1"))
        },
    );
    let providers = Arc::new(Providers::new(config));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    const N: usize = 200;
    let report = rt.block_on(async {
        // one warm-up stream builds the client and pool
        let req = |text: &str| ChatRequest {
            model: "s/echo".into(),
            system: None,
            messages: vec![Message::text(Role::User, text)],
            ..ChatRequest::default()
        };
        let _ = mia_llm::stream_chat(&providers, &req("echo warm"), &mut |_| {}).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (heap0, rss0) = (LIVE.load(Ordering::Relaxed), rss_kib());
        let mut tasks = Vec::new();
        for _ in 0..N {
            let p = providers.clone();
            let r = req("slow 40 10");
            tasks.push(tokio::spawn(async move {
                let mut n = 0usize;
                let _ = mia_llm::stream_chat(&p, &r, &mut |_| n += 1).await;
                n
            }));
        }
        tokio::time::sleep(Duration::from_millis(2000)).await; // every stream mid-answer
        let (heap1, rss1) = (LIVE.load(Ordering::Relaxed), rss_kib());
        for t in tasks {
            let _ = t.await;
        }
        (heap1 - heap0, rss1.saturating_sub(rss0))
    });
    let _ = server.kill();
    let _ = server.wait();
    println!("\n## Memory per active stream ({N} streams in flight, mid-answer)\n");
    println!(
        "- live heap: {:.1} KiB per stream; RSS: {:.1} KiB per stream",
        report.0 as f64 / N as f64 / 1024.0,
        report.1 as f64 / N as f64
    );
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let rec = root.join("../../../shared/fixtures/recorded");
    println!("## Decode throughput (SSE framing + wire decoder + accumulator, 1–64-byte chunks)\n");
    println!("| decoder | input | throughput |\n|---|---|---|");
    let mut oa = wire_bytes(&rec.join("openai"), false);
    oa.extend(wire_bytes(&rec.join("openai-compatible"), false));
    throughput("OpenAI chat completions", &oa, || {
        Dec::O(openai::OpenAiDecoder::new("o"))
    });
    let mut an = wire_bytes(&rec.join("anthropic"), true);
    an.extend(wire_bytes(&rec.join("anthropic-sse"), false));
    throughput("Anthropic messages", &an, || {
        Dec::A(anthropic::AnthropicDecoder::new("a"))
    });
    let ge = wire_bytes(&rec.join("gemini"), false);
    throughput("Gemini streamGenerateContent", &ge, || {
        Dec::G(gemini::GeminiDecoder::new("g"))
    });
    // gpt-5's recorded streams (`event:` lines included), one of them failing
    let re = wire_bytes(&rec.join("openai-responses"), false);
    throughput("OpenAI Responses", &re, || {
        Dec::R(responses::ResponsesDecoder::new("r"))
    });
    // The same streams through the seam every request now takes.
    let seam = Providers::new(four_providers("http://127.0.0.1:1"));
    let through = |model: &str| {
        let (p, _) = seam.resolve(model).expect("a bench provider");
        move || Dec::W(p.format().decoder(&p))
    };
    throughput("OpenAI, via WireFormat", &oa, through("o/m"));
    throughput("Anthropic, via WireFormat", &an, through("a/m"));
    throughput("Gemini, via WireFormat", &ge, through("g/m"));
    // kind openai picks the Responses API for gpt-5
    throughput("OpenAI Responses, via WireFormat", &re, through("o/gpt-5"));
    init_cost();
    memory_per_stream(&root);
}

/// The registered wire format `name`.
fn k(name: &str) -> ProviderKind {
    ProviderKind::named(name).expect("a registered kind")
}
