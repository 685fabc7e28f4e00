//! The built-in tools, called through `Tool::call` the way the agent calls
//! them, over a throwaway project directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mia_engine::calls::LuaBridge;
use mia_engine::events::EventQueue;
use mia_engine::tools::{builtin, AgentInfo, SharedTool, ToolContext, ToolOutput};
use serde_json::{json, Value};
use tempfile::TempDir;

/// A temporary project: `root` is inside `dir`, so tests can place files
/// outside the project next to it.
struct Project {
    dir: TempDir,
    root: PathBuf,
}

impl Project {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap().join("project");
        fs::create_dir(&root).unwrap();
        Project { dir, root }
    }

    fn outside(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, content).unwrap();
        path
    }

    fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.root.join(rel)).unwrap()
    }

    fn ctx(&self) -> ToolContext {
        let agent = AgentInfo {
            name: "build".into(),
            mode: "build".into(),
        };
        let lua = LuaBridge::new(Arc::new(EventQueue::new().unwrap()), Arc::default());
        ToolContext {
            session_id: "s".into(),
            message_id: "m".into(),
            call_id: "c".into(),
            ..ToolContext::new(0, self.root.clone(), agent, lua)
        }
    }

    async fn call(&self, tool: &str, args: Value) -> ToolOutput {
        call_with(tool, args, self.ctx()).await
    }
}

fn tool(name: &str) -> SharedTool {
    builtin::all()
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no built-in tool {name}"))
}

async fn call_with(name: &str, args: Value, ctx: ToolContext) -> ToolOutput {
    tool(name).call(args, ctx).await
}

fn summary(out: &ToolOutput) -> &str {
    out.metadata["summary"]
        .as_str()
        .unwrap_or_else(|| panic!("no summary in {out:?}"))
}

/// Whether `pid` no longer runs. A zombie counts as gone: it has exited and
/// only waits for its (re)parent to reap it, which some container inits never do.
fn is_gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return true;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit(')').next().unwrap().trim_start().starts_with('Z'),
        Err(_) => true,
    }
}

/// Waits until `path` holds a pid (the command under test wrote it).
async fn pid_from(path: &Path) -> i32 {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(Instant::now() < until, "{} was never written", path.display());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------- read_file

#[tokio::test]
async fn read_file_numbers_lines_like_cat_n() {
    let p = Project::new();
    p.write("src/a.rs", "fn main() {\n    println!(\"hi\");\n}\n");
    let out = p.call("read_file", json!({"path": "src/a.rs"})).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        out.content,
        "     1\tfn main() {\n     2\t    println!(\"hi\");\n     3\t}"
    );
    assert_eq!(summary(&out), "📖 read src/a.rs (3 lines)");
}

#[tokio::test]
async fn read_file_returns_the_requested_line_range() {
    let p = Project::new();
    let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
    p.write("big.txt", text);
    let out = p
        .call("read_file", json!({"path": "big.txt", "offset": 10, "limit": 3}))
        .await;
    assert_eq!(out.content, "    10\tline 10\n    11\tline 11\n    12\tline 12");
    assert_eq!(summary(&out), "📖 read big.txt (lines 10–12)");

    let past = p.call("read_file", json!({"path": "big.txt", "offset": 101})).await;
    assert!(past.is_error);
    assert!(past.content.contains("has 100 lines"), "{}", past.content);
}

#[tokio::test]
async fn read_file_refuses_a_file_over_the_size_limit_unless_given_a_range() {
    let p = Project::new();
    p.write("big.txt", "0123456789\n".repeat(100));
    let mut ctx = p.ctx();
    ctx.limits.max_read_bytes = 500;
    let out = call_with("read_file", json!({"path": "big.txt"}), ctx.clone()).await;
    assert!(out.is_error);
    assert!(out.content.contains("pass `offset` and `limit`"), "{}", out.content);

    let ranged = call_with("read_file", json!({"path": "big.txt", "offset": 50, "limit": 2}), ctx).await;
    assert!(!ranged.is_error, "{ranged:?}");
    assert_eq!(ranged.content, "    50\t0123456789\n    51\t0123456789");
}

#[tokio::test]
async fn read_file_refuses_binary_files() {
    let p = Project::new();
    p.write("logo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    let out = p.call("read_file", json!({"path": "logo.png"})).await;
    assert!(out.is_error);
    assert!(out.content.contains("binary file"), "{}", out.content);
}

#[tokio::test]
async fn read_file_decodes_invalid_utf8_lossily() {
    let p = Project::new();
    p.write("latin1.txt", b"caf\xe9\n");
    let out = p.call("read_file", json!({"path": "latin1.txt"})).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.content, "     1\tcaf\u{fffd}");
}

#[tokio::test]
async fn read_file_on_a_directory_or_missing_file_says_what_to_do() {
    let p = Project::new();
    fs::create_dir(p.root.join("src")).unwrap();
    let dir = p.call("read_file", json!({"path": "src"})).await;
    assert!(dir.is_error);
    assert!(dir.content.contains("use list_dir"), "{}", dir.content);
    let missing = p.call("read_file", json!({"path": "nope.rs"})).await;
    assert!(missing.is_error);
    assert!(
        missing.content.contains("`nope.rs` does not exist"),
        "{}",
        missing.content
    );
    assert!(summary(&missing).starts_with("⚠ read_file: "), "{}", summary(&missing));
}

// ------------------------------------------------------------- write_file

#[tokio::test]
async fn write_file_creates_parent_directories() {
    let p = Project::new();
    let out = p
        .call(
            "write_file",
            json!({"path": "docs/guide/intro.md", "content": "# Intro\n"}),
        )
        .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(p.read("docs/guide/intro.md"), "# Intro\n");
    assert!(
        out.content.starts_with("Created `docs/guide/intro.md` (8 bytes"),
        "{}",
        out.content
    );
    assert_eq!(summary(&out), "✏ created docs/guide/intro.md (8 B)");
}

#[tokio::test]
async fn write_file_overwrites_atomically_and_leaves_no_temp_files() {
    let p = Project::new();
    p.write("src/auth.rs", "old");
    let content = "x".repeat(4200);
    let out = p
        .call("write_file", json!({"path": "src/auth.rs", "content": content}))
        .await;
    assert!(!out.is_error, "{out:?}");
    assert!(
        out.content.starts_with("Overwrote `src/auth.rs` (4200 bytes"),
        "{}",
        out.content
    );
    assert_eq!(summary(&out), "✏ wrote 4.1 KB to src/auth.rs");
    assert_eq!(p.read("src/auth.rs"), content);
    let names: Vec<String> = fs::read_dir(p.root.join("src"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["auth.rs"]);
}

// --------------------------------------------------------------- edit_file

#[tokio::test]
async fn edit_file_replaces_a_unique_exact_match() {
    let p = Project::new();
    p.write("src/a.rs", "fn a() {\n    1\n}\n\nfn b() {\n    2\n}\n");
    let out = p
        .call(
            "edit_file",
            json!({"path": "src/a.rs", "old_string": "    2\n", "new_string": "    let x = 2;\n    x\n"}),
        )
        .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        p.read("src/a.rs"),
        "fn a() {\n    1\n}\n\nfn b() {\n    let x = 2;\n    x\n}\n"
    );
    assert_eq!(summary(&out), "✏ edited src/a.rs (+2 −1 lines)");
    assert!(out.content.contains("     6\t    let x = 2;"), "{}", out.content);
}

#[tokio::test]
async fn edit_file_refuses_an_ambiguous_match_and_says_how_many() {
    let p = Project::new();
    p.write("a.txt", "x = 1\nx = 1\nx = 1\n");
    let out = p
        .call(
            "edit_file",
            json!({"path": "a.txt", "old_string": "x = 1", "new_string": "x = 2"}),
        )
        .await;
    assert!(out.is_error);
    assert!(out.content.contains("occurs 3 times"), "{}", out.content);
    assert!(out.content.contains("more surrounding lines"), "{}", out.content);
    assert_eq!(p.read("a.txt"), "x = 1\nx = 1\nx = 1\n");
}

#[tokio::test]
async fn edit_file_replace_all_changes_every_occurrence() {
    let p = Project::new();
    p.write("a.txt", "x = 1\nx = 1\nx = 1\n");
    let out = p
        .call(
            "edit_file",
            json!({"path": "a.txt", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true}),
        )
        .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(p.read("a.txt"), "x = 2\nx = 2\nx = 2\n");
    assert!(out.content.contains("replaced 3 occurrences"), "{}", out.content);
    assert_eq!(summary(&out), "✏ edited a.txt (+3 −3 lines)");
}

#[tokio::test]
async fn edit_file_reports_a_missing_match_with_a_whitespace_hint() {
    let p = Project::new();
    p.write("a.py", "def f():\n    return 1\n");
    let near = p
        .call(
            "edit_file",
            json!({"path": "a.py", "old_string": "def f():\n  return 1", "new_string": "def f():\n  return 2"}),
        )
        .await;
    assert!(near.is_error);
    assert!(near.content.contains("was not found in `a.py`"), "{}", near.content);
    assert!(near.content.contains("differs only in whitespace"), "{}", near.content);

    let absent = p
        .call(
            "edit_file",
            json!({"path": "a.py", "old_string": "def g()", "new_string": "def h()"}),
        )
        .await;
    assert!(absent.is_error);
    assert!(!absent.content.contains("whitespace ("), "{}", absent.content);
    assert_eq!(p.read("a.py"), "def f():\n    return 1\n");
}

#[tokio::test]
async fn edit_file_refuses_identical_strings() {
    let p = Project::new();
    p.write("a.txt", "same\n");
    let out = p
        .call(
            "edit_file",
            json!({"path": "a.txt", "old_string": "same", "new_string": "same"}),
        )
        .await;
    assert!(out.is_error);
    assert!(out.content.contains("identical"), "{}", out.content);
}

#[tokio::test]
async fn edit_file_keeps_bytes_outside_the_edit_even_when_not_utf8() {
    let p = Project::new();
    p.write("latin1.txt", b"caf\xe9 = old\n");
    let out = p
        .call(
            "edit_file",
            json!({"path": "latin1.txt", "old_string": "old", "new_string": "new"}),
        )
        .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(fs::read(p.root.join("latin1.txt")).unwrap(), b"caf\xe9 = new\n");
}

// ------------------------------------------------------- list_dir and glob

/// A project with a .gitignore, an ignored build directory and a dotfile.
fn project_with_ignores() -> Project {
    let p = Project::new();
    p.write(".gitignore", "target/\n*.log\n");
    p.write(".env", "SECRET=1\n");
    p.write("src/main.rs", "fn main() { let needle = 1; }\n");
    p.write("src/lib/util.rs", "// needle helper\n");
    p.write("target/debug/out.rs", "needle in a build artefact\n");
    p.write("debug.log", "needle in a log\n");
    p.write("README.md", "A project without the word.\n");
    p
}

#[tokio::test]
async fn list_dir_respects_gitignore_and_hides_dotfiles() {
    let p = project_with_ignores();
    let out = p.call("list_dir", json!({})).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.content, "README.md\nsrc/");
    assert_eq!(summary(&out), "📂 listed . (2 entries)");

    let deep = p.call("list_dir", json!({"path": ".", "depth": 3})).await;
    assert_eq!(deep.content, "README.md\nsrc/\nsrc/lib/\nsrc/lib/util.rs\nsrc/main.rs");

    let sub = p.call("list_dir", json!({"path": "src"})).await;
    assert_eq!(sub.content, "lib/\nmain.rs");
}

#[tokio::test]
async fn list_dir_caps_its_output_and_counts_what_was_left_out() {
    let p = Project::new();
    for i in 0..100 {
        p.write(&format!("file{i:03}.txt"), "");
    }
    let mut ctx = p.ctx();
    ctx.limits.output_cap_bytes = 120;
    let out = call_with("list_dir", json!({}), ctx).await;
    assert!(!out.is_error);
    assert!(out.content.starts_with("file000.txt\nfile001.txt\n"), "{}", out.content);
    assert!(out.content.contains("(90 more entries not shown"), "{}", out.content);
}

#[tokio::test]
async fn glob_respects_gitignore_and_lists_newest_first() {
    let p = project_with_ignores();
    let old = SystemTime::now() - Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(p.root.join("src/main.rs"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let out = p.call("glob", json!({"pattern": "**/*.rs"})).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.content, "src/lib/util.rs\nsrc/main.rs");
    assert_eq!(summary(&out), "🗂 2 files match **/*.rs");

    let in_dir = p.call("glob", json!({"pattern": "*.rs", "path": "src/lib"})).await;
    assert_eq!(in_dir.content, "src/lib/util.rs");

    let none = p.call("glob", json!({"pattern": "*.log"})).await;
    assert!(!none.is_error);
    assert!(none.content.starts_with("No files match `*.log`"), "{}", none.content);
}

// --------------------------------------------------------------------- grep

#[tokio::test]
async fn grep_finds_matching_lines_and_respects_gitignore() {
    let p = project_with_ignores();
    let out = p.call("grep", json!({"pattern": "needle"})).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        out.content,
        "src/lib/util.rs:1:// needle helper\nsrc/main.rs:1:fn main() { let needle = 1; }"
    );
    assert_eq!(summary(&out), "🔎 2 matches in 2 files");
}

#[tokio::test]
async fn grep_filters_by_glob_and_ignores_case_on_request() {
    let p = project_with_ignores();
    p.write("src/notes.md", "NEEDLE in capitals\n");
    let sensitive = p.call("grep", json!({"pattern": "needle", "glob": "*.md"})).await;
    assert!(sensitive.content.starts_with("No matches"), "{}", sensitive.content);
    let insensitive = p
        .call(
            "grep",
            json!({"pattern": "needle", "glob": "*.md", "case_insensitive": true}),
        )
        .await;
    assert_eq!(insensitive.content, "src/notes.md:1:NEEDLE in capitals");
    let scoped = p.call("grep", json!({"pattern": "needle", "path": "src/lib"})).await;
    assert_eq!(scoped.content, "src/lib/util.rs:1:// needle helper");
}

#[tokio::test]
async fn grep_caps_results_and_says_what_was_cut() {
    let p = Project::new();
    for f in 0..5 {
        p.write(&format!("f{f}.txt"), "hit\n".repeat(10));
    }
    let out = p.call("grep", json!({"pattern": "hit", "max_results": 12})).await;
    assert!(!out.is_error);
    let lines: Vec<&str> = out.content.lines().collect();
    assert_eq!(lines.len(), 13, "{}", out.content);
    assert_eq!(lines[0], "f0.txt:1:hit");
    assert_eq!(lines[11], "f1.txt:2:hit");
    assert!(
        lines[12].starts_with("(showing 12 of 50 matching lines in 5 files: max_results is 12"),
        "{}",
        lines[12]
    );

    let mut ctx = p.ctx();
    ctx.limits.output_cap_bytes = 100;
    let capped = call_with("grep", json!({"pattern": "hit"}), ctx).await;
    assert!(capped.content.len() < 300, "{}", capped.content);
    assert!(
        capped.content.contains("output is capped at 100 B"),
        "{}",
        capped.content
    );
}

#[tokio::test]
async fn grep_shows_the_same_sorted_lines_when_the_keep_budget_runs_out() {
    let p = Project::new();
    for f in 0..40 {
        p.write(&format!("d{}/f{f:02}.txt", f % 4), "match this line\n".repeat(50));
    }
    let mut small = p.ctx();
    small.limits.output_cap_bytes = 256; // keeps at most 1 KB of lines in the first pass
    let big_cap = call_with("grep", json!({"pattern": "match", "max_results": 5}), p.ctx()).await;
    let expected: Vec<&str> = big_cap.content.lines().take(5).collect();
    let out = call_with("grep", json!({"pattern": "match", "max_results": 5}), small).await;
    let got: Vec<&str> = out.content.lines().take(5).collect();
    assert_eq!(got, expected);
    assert_eq!(got[0], "d0/f00.txt:1:match this line");
    assert!(
        out.content.contains("of 2000 matching lines in 40 files"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn grep_rejects_an_invalid_regex_clearly() {
    let p = Project::new();
    p.write("a.txt", "(x\n");
    let out = p.call("grep", json!({"pattern": "(x"})).await;
    assert!(out.is_error);
    assert!(
        out.content.starts_with("`(x` is not a valid regular expression"),
        "{}",
        out.content
    );
    assert!(out.content.contains("escape"), "{}", out.content);
}

#[tokio::test]
async fn grep_stops_and_says_so_when_aborted() {
    let p = project_with_ignores();
    let ctx = p.ctx();
    ctx.abort.cancel();
    let out = call_with("grep", json!({"pattern": "needle"}), ctx).await;
    assert!(!out.is_error, "{out:?}");
    assert!(out.content.contains("cancelled"), "{}", out.content);
}

// ------------------------------------------------------------ confinement

#[tokio::test]
async fn path_traversal_is_refused_for_read_write_and_edit() {
    let p = Project::new();
    fs::write(p.outside().join("x"), "outside\n").unwrap();
    let attempts = [
        ("read_file", json!({"path": "../x"})),
        ("write_file", json!({"path": "../x", "content": "pwned"})),
        (
            "edit_file",
            json!({"path": "../x", "old_string": "outside", "new_string": "pwned"}),
        ),
        ("read_file", json!({"path": p.outside().join("x").to_str().unwrap()})),
        ("list_dir", json!({"path": ".."})),
        ("grep", json!({"pattern": "outside", "path": ".."})),
    ];
    for (name, args) in attempts {
        let out = p.call(name, args.clone()).await;
        assert!(out.is_error, "{name} {args}: {out:?}");
        assert!(
            out.content.contains("is outside the project root"),
            "{name}: {}",
            out.content
        );
    }
    assert_eq!(fs::read_to_string(p.outside().join("x")).unwrap(), "outside\n");
}

#[tokio::test]
async fn symlink_escape_is_refused_for_read_write_and_edit() {
    let p = Project::new();
    let secret = p.outside().join("secret");
    fs::write(&secret, "outside\n").unwrap();
    std::os::unix::fs::symlink(&secret, p.root.join("link")).unwrap();
    std::os::unix::fs::symlink(p.outside(), p.root.join("linkdir")).unwrap();
    let attempts = [
        ("read_file", json!({"path": "link"})),
        ("write_file", json!({"path": "link", "content": "pwned"})),
        (
            "edit_file",
            json!({"path": "link", "old_string": "outside", "new_string": "pwned"}),
        ),
        ("read_file", json!({"path": "linkdir/secret"})),
        ("write_file", json!({"path": "linkdir/new.txt", "content": "pwned"})),
    ];
    for (name, args) in attempts {
        let out = p.call(name, args.clone()).await;
        assert!(out.is_error, "{name} {args}: {out:?}");
        assert!(
            out.content.contains("through a symbolic link"),
            "{name}: {}",
            out.content
        );
    }
    assert_eq!(fs::read_to_string(&secret).unwrap(), "outside\n");
    assert!(!p.outside().join("new.txt").exists());
}

#[test]
fn subjects_are_the_path_or_the_command() {
    use mia_engine::tools::ToolSubject;
    assert_eq!(
        tool("read_file").subject(&json!({"path": "src/a.rs"})),
        Some(ToolSubject::Path("src/a.rs".into()))
    );
    assert_eq!(
        tool("edit_file").subject(&json!({"path": "b.rs"})),
        Some(ToolSubject::Path("b.rs".into()))
    );
    assert_eq!(
        tool("list_dir").subject(&json!({})),
        Some(ToolSubject::Path(".".into()))
    );
    assert_eq!(
        tool("bash").subject(&json!({"command": "cargo test"})),
        Some(ToolSubject::Command("cargo test".into()))
    );
}

// --------------------------------------------------------------------- bash

#[tokio::test]
async fn bash_runs_in_the_project_root_and_reports_output_and_exit_code() {
    let p = Project::new();
    let out = p.call("bash", json!({"command": "pwd; echo oops >&2; exit 3"})).await;
    assert!(
        !out.is_error,
        "a failing command is output for the model, not a tool error"
    );
    assert_eq!(out.content, format!("{}\noops\n\n(exit code 3)", p.root.display()));
    assert_eq!(summary(&out), "⚙ ran `pwd; echo oops >&2; exit 3` (exit code 3)");
}

#[tokio::test]
async fn bash_keeps_stdout_and_stderr_in_order_and_has_no_stdin() {
    let p = Project::new();
    let out = p
        .call(
            "bash",
            json!({"command": "echo 1; sleep 0.05; echo 2 >&2; sleep 0.05; echo 3; cat; echo done"}),
        )
        .await;
    assert_eq!(out.content, "1\n2\n3\ndone\n\n(exit code 0)");
}

#[tokio::test]
async fn bash_caps_long_output_keeping_head_and_tail() {
    let p = Project::new();
    let mut ctx = p.ctx();
    ctx.limits.output_cap_bytes = 1000;
    let out = call_with("bash", json!({"command": "seq 1 100000"}), ctx).await;
    assert!(out.content.starts_with("1\n2\n3\n"), "{}", &out.content[..50]);
    assert!(out.content.contains("bytes of output cut"), "{}", out.content);
    assert!(
        out.content.ends_with("99999\n100000\n\n(exit code 0)"),
        "{}",
        out.content
    );
    assert!(out.content.len() < 1200);
}

#[tokio::test]
async fn bash_times_out_and_kills_the_whole_process_group() {
    let p = Project::new();
    let started = Instant::now();
    let out = p
        .call(
            "bash",
            json!({"command": "echo started; sleep 30 & echo $! > gc.pid; sleep 30; wait", "timeout_ms": 1000}),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(out.is_error, "{out:?}");
    assert!(out.content.starts_with("started\n"), "{}", out.content);
    assert!(out.content.contains("(timed out after 1000 ms"), "{}", out.content);
    assert_eq!(
        summary(&out),
        "⚙ `echo started; sleep 30 & echo $! > gc.pid; sleep 30; wait` timed out after 1000 ms"
    );
    let grandchild = pid_from(&p.root.join("gc.pid")).await;
    assert!(
        is_gone(grandchild),
        "background process {grandchild} survived the timeout"
    );
}

#[tokio::test]
async fn bash_abort_kills_background_processes_of_the_command() {
    let p = Project::new();
    let ctx = p.ctx();
    let abort = ctx.abort.clone();
    let call = tokio::spawn(call_with(
        "bash",
        json!({"command": "sleep 30 & echo $! > gc.pid; echo $$ > shell.pid; sleep 30; wait"}),
        ctx,
    ));
    let grandchild = pid_from(&p.root.join("gc.pid")).await;
    let shell = pid_from(&p.root.join("shell.pid")).await;
    assert!(
        !is_gone(grandchild),
        "the background sleep should be running before the abort"
    );

    let started = Instant::now();
    abort.cancel();
    let out = call.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert!(!out.is_error, "{out:?}");
    assert!(out.content.ends_with("(cancelled)"), "{}", out.content);
    assert!(
        is_gone(grandchild),
        "background process {grandchild} survived the abort"
    );
    assert!(is_gone(shell), "shell {shell} survived the abort");
}

#[tokio::test]
async fn bash_kills_processes_that_ignore_sigterm_after_the_grace_period() {
    let p = Project::new();
    let mut ctx = p.ctx();
    ctx.limits.kill_grace_ms = 200;
    let started = Instant::now();
    let out = call_with(
        "bash",
        json!({"command": "trap '' TERM; sleep 30 & echo $! > gc.pid; sleep 30", "timeout_ms": 1000}),
        ctx,
    )
    .await;
    assert!(out.content.contains("timed out"), "{}", out.content);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let grandchild = pid_from(&p.root.join("gc.pid")).await;
    assert!(is_gone(grandchild), "TERM-ignoring process {grandchild} survived");
}

#[tokio::test]
async fn bash_call_dropped_midway_kills_its_process_group() {
    let p = Project::new();
    let call = call_with(
        "bash",
        json!({"command": "sleep 30 & echo $! > gc.pid; sleep 30; wait"}),
        p.ctx(),
    );
    let gc_file = p.root.join("gc.pid");
    let dropped = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            _ = call => {}
            _ = pid_from(&gc_file) => {}
        }
    })
    .await;
    assert!(dropped.is_ok(), "the command never started");
    let grandchild = pid_from(&gc_file).await;
    let until = Instant::now() + Duration::from_secs(2);
    while !is_gone(grandchild) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        is_gone(grandchild),
        "background process {grandchild} outlived the dropped call"
    );
}

#[tokio::test]
async fn bash_does_not_start_a_command_after_an_abort() {
    let p = Project::new();
    let ctx = p.ctx();
    ctx.abort.cancel();
    let out = call_with("bash", json!({"command": "touch ran"}), ctx).await;
    assert!(out.content.contains("cancelled"), "{}", out.content);
    assert!(!p.root.join("ran").exists());
}
