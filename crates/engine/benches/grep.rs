//! The `grep` tool against ripgrep on a generated 10,000-file project
//! (numbers for notes, not a test): median wall time of 5 warm runs each, and
//! a check that both count the same matching lines.
//!
//! The tree has nested directories, 2–20 KB of varied text per file, and a
//! `.gitignore` that excludes one subtree; both searchers must skip it.
//! Needs `rg` on PATH for the comparison (`apt-get install -y ripgrep`);
//! without it only the tool's times are printed.
//!
//! Run: `cargo bench --bench grep`.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mia_engine::calls::LuaBridge;
use mia_engine::events::EventQueue;
use mia_engine::tools::{builtin, AgentInfo, SharedTool, ToolContext};
use serde_json::json;

const FILES: usize = 10_000;
const RUNS: usize = 5;

/// A search to time: the tool's arguments and the matching rg flags.
struct Case {
    label: &'static str,
    pattern: &'static str,
    case_insensitive: bool,
}

const CASES: &[Case] = &[
    Case {
        label: "rare literal",
        pattern: "needle",
        case_insensitive: false,
    },
    Case {
        label: "alternation",
        pattern: "TODO|FIXME",
        case_insensitive: false,
    },
    Case {
        label: "regex with classes",
        pattern: r"fn\s+[a-z_]+_handler\(",
        case_insensitive: false,
    },
    Case {
        label: "frequent, case-insensitive",
        pattern: "error",
        case_insensitive: true,
    },
];

fn main() -> ExitCode {
    let tmp = match tempfile::tempdir() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot create a temporary directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let root = tmp.path();
    let started = Instant::now();
    let bytes = match generate(root) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cannot generate the project: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "generated {FILES} files, {:.1} MB, in {:.1} s ({}; `ignored/` is excluded by .gitignore)",
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64(),
        root.display()
    );

    let rg = Command::new("rg").arg("--version").output().is_ok();
    if !rg {
        println!("rg is not installed: timing the tool only (apt-get install -y ripgrep to compare)");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start a tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(grep) = builtin::all().into_iter().find(|t| t.name() == "grep") else {
        eprintln!("no grep tool among the built-ins");
        return ExitCode::FAILURE;
    };

    let mut table = String::from(
        "| search | pattern | matching lines (tool / rg) | tool median | rg median | tool ÷ rg |\n|---|---|---|---|---|---|\n",
    );
    let mut all_agree = true;
    for case in CASES {
        let (tool_lines, tool_time) = median_of(|| run_tool(&runtime, &grep, root, case));
        let (rg_lines, rg_time) = if rg {
            let (lines, time) = median_of(|| run_rg(root, case));
            (Some(lines), Some(time))
        } else {
            (None, None)
        };
        let agree = rg_lines.is_none_or(|n| n == tool_lines);
        all_agree &= agree;
        let counts = match rg_lines {
            Some(n) if agree => format!("{tool_lines} / {n}"),
            Some(n) => format!("**{tool_lines} / {n} (differ)**"),
            None => format!("{tool_lines} / –"),
        };
        let (rg_cell, ratio) = match rg_time {
            Some(t) => (ms(t), format!("{:.2}×", tool_time.as_secs_f64() / t.as_secs_f64())),
            None => ("–".to_string(), "–".to_string()),
        };
        let flags = if case.case_insensitive { " (-i)" } else { "" };
        let _ = writeln!(
            table,
            "| {} | `{}`{flags} | {counts} | {} | {rg_cell} | {ratio} |",
            case.label,
            case.pattern.replace('|', "\\|"),
            ms(tool_time)
        );
    }
    println!("\nmedian of {RUNS} warm runs each\n\n{table}");
    if all_agree {
        ExitCode::SUCCESS
    } else {
        println!("the tool and rg disagree on the number of matching lines");
        ExitCode::FAILURE
    }
}

/// Runs `f` once to warm the cache, then `RUNS` times; the median time and
/// the (last) count.
fn median_of(mut f: impl FnMut() -> (u64, Duration)) -> (u64, Duration) {
    let (mut count, _) = f();
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let (c, t) = f();
        count = c;
        times.push(t);
    }
    times.sort();
    (count, times[RUNS / 2])
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// One call of the tool; the matching-line count comes from its summary
/// ("🔎 1234 matches in 56 files").
fn run_tool(runtime: &tokio::runtime::Runtime, grep: &SharedTool, root: &Path, case: &Case) -> (u64, Duration) {
    let agent = AgentInfo {
        name: "bench".into(),
        mode: "build".into(),
    };
    let lua = LuaBridge::new(Arc::new(EventQueue::new().unwrap()), Arc::default());
    let ctx = ToolContext::new(0, root.to_path_buf(), agent, lua);
    let args = json!({"pattern": case.pattern, "case_insensitive": case.case_insensitive});
    let started = Instant::now();
    let out = runtime.block_on(grep.call(args, ctx));
    let elapsed = started.elapsed();
    let summary = out.metadata["summary"].as_str().unwrap_or_default();
    let count = summary
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (count, elapsed)
}

/// One `rg --count` run over the same tree; .gitignore applies although the
/// tree is not a git repository, as it does for the tool.
fn run_rg(root: &Path, case: &Case) -> (u64, Duration) {
    let mut cmd = Command::new("rg");
    cmd.args(["--count", "--no-require-git", "--no-messages"]);
    if case.case_insensitive {
        cmd.arg("--ignore-case");
    }
    cmd.arg("--regexp").arg(case.pattern).arg(".").current_dir(root);
    cmd.stdin(Stdio::null()).stderr(Stdio::null());
    let started = Instant::now();
    let output = cmd.output();
    let elapsed = started.elapsed();
    let count = output
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.rsplit(':').next()?.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    (count, elapsed)
}

/// Writes the tree: 10 × 10 × 10 directories of 10 files each; the last top
/// directory is `ignored/`, listed in .gitignore. Returns the bytes written.
fn generate(root: &Path) -> std::io::Result<u64> {
    fs::write(root.join(".gitignore"), "ignored/\n")?;
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut total = 0u64;
    for i in 0..FILES {
        let top = match i / 1000 {
            9 => "ignored".to_string(),
            n => format!("pkg{n}"),
        };
        let dir = root
            .join(top)
            .join(format!("mod{}", i / 100 % 10))
            .join(format!("sub{}", i / 10 % 10));
        fs::create_dir_all(&dir)?;
        let size = 2_000 + rng.below(18_001) as usize;
        let text = file_text(&mut rng, size);
        total += text.len() as u64;
        fs::write(dir.join(format!("file{i:05}.txt")), text)?;
    }
    Ok(total)
}

const WORDS: &[&str] = &[
    "let", "value", "return", "config", "buffer", "stream", "parse", "token", "window", "cursor", "request", "result",
    "handle", "option", "string", "vector", "index", "offset", "length", "state", "event", "message", "client",
    "server", "update", "render", "module", "import", "export", "async", "await", "match", "struct", "impl", "self",
];

/// About `size` bytes of code-like text with a sprinkling of what the
/// patterns look for, at different frequencies.
fn file_text(rng: &mut XorShift, size: usize) -> String {
    let mut text = String::with_capacity(size + 128);
    while text.len() < size {
        let indent = rng.below(4) as usize * 4;
        text.extend(std::iter::repeat_n(' ', indent));
        match rng.below(1000) {
            0..=1 => text.push_str("// the needle is somewhere here"),
            2..=9 => text.push_str("// TODO: handle this case"),
            10..=12 => text.push_str("// FIXME: off by one"),
            13..=30 => {
                let _ = write!(text, "fn {}_handler(", WORDS[rng.below(WORDS.len() as u64) as usize]);
            }
            31..=70 => text.push_str(if rng.below(2) == 0 {
                "return Err(Error::Invalid);"
            } else {
                "log::error!(\"failed\");"
            }),
            _ => {
                let words = 3 + rng.below(12);
                for w in 0..words {
                    if w > 0 {
                        text.push(' ');
                    }
                    text.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
                }
            }
        }
        text.push('\n');
    }
    text
}

/// A small deterministic generator, so every run searches the same tree.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
