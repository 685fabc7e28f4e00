//! Helpers shared by the recorded-stream tests and the provider benchmark.
#![allow(dead_code)]

use std::path::PathBuf;

/// The text of a recording under ../shared/fixtures/recorded, or None (with
/// a SKIP line) when ../shared is not beside the project. With
/// `MIA_REQUIRE_FIXTURES=1` (CI sets it) a missing recording fails instead:
/// the real streams are a requirement there, not an option.
pub fn recorded(rel: &str) -> Option<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/recorded")
        .join(rel);
    match std::fs::read_to_string(&path) {
        Ok(s) => Some(s),
        Err(e) if std::env::var("MIA_REQUIRE_FIXTURES").is_ok_and(|v| v == "1") => panic!(
            "{} cannot be read ({e}); MIA_REQUIRE_FIXTURES=1 makes the recorded streams required: \
             put the shared/ directory beside the project",
            path.display()
        ),
        Err(_) => {
            eprintln!("SKIP: {} not found (../shared is absent)", path.display());
            None
        }
    }
}

/// Small deterministic generator of chunk sizes 1..=64, so a failing
/// chunking can be replayed from its seed.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % 64) as usize + 1
    }
}

/// Feeds `wire` through the SSE parser in pseudo-random 1–64-byte chunks
/// (replayable from `seed`), hands every event to `decode`, and returns the
/// folded answer with every decoded event in order.
pub fn decode_chunked(
    wire: &[u8],
    seed: u64,
    mut decode: impl FnMut(&mia_llm::stream::SseEvent, &mut Vec<mia_llm::delta::DecodeEvent>),
) -> (mia_llm::delta::Accumulator, Vec<mia_llm::delta::DecodeEvent>) {
    let mut rng = XorShift(seed);
    let mut sse = mia_llm::stream::SseDecoder::new();
    let mut acc = mia_llm::delta::Accumulator::default();
    let (mut sse_events, mut out, mut events) = (Vec::new(), Vec::new(), Vec::new());
    let mut feed = |sse_events: &mut Vec<_>, out: &mut Vec<_>| {
        for e in sse_events.drain(..) {
            decode(&e, out);
            for d in out.drain(..) {
                acc.apply(&d);
                events.push(d);
            }
        }
    };
    let mut i = 0;
    while i < wire.len() {
        let end = (i + rng.next()).min(wire.len());
        sse.push(&wire[i..end], &mut sse_events)
            .expect("a recorded event fits the default limit");
        i = end;
        feed(&mut sse_events, &mut out);
    }
    sse.finish(&mut sse_events);
    feed(&mut sse_events, &mut out);
    (acc, events)
}
