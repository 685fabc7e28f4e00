//! Helpers shared by the recorded-stream tests and the provider benchmark.
#![allow(dead_code)]

use std::path::PathBuf;

/// The text of a recording under ../shared/fixtures/recorded, or None (with
/// a SKIP line) when ../shared is not beside the project.
pub fn recorded(rel: &str) -> Option<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/recorded")
        .join(rel);
    match std::fs::read_to_string(&path) {
        Ok(s) => Some(s),
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
