//! How many spellings of a denied path and forms of a compound command the
//! permission rules were tried with, and how many were refused or asked.
//! Not a timed test: a census of the decisions, printed as a table, for the
//! closing note. `cargo bench --bench permission_forms`.
//!
//! Paths: every combination of a prefix (`./`, `src/../`, the absolute
//! root, a link to the root, …) and a way to name `secrets/k` (duplicate
//! slashes, `.`, a linked directory, a linked file, …), against the rule
//! `{ tool = "read_file", pattern = "secrets/**", action = "deny" }`, and
//! spellings of a file outside the project with no rule allowing it.
//! Commands: the allowed `git status` joined with `touch x` by every
//! separator, substitution, redirection and grouping, against
//! `{ tool = "bash", pattern = "git status*", action = "allow" }`.

use std::path::Path;

use mia_engine::tools::permissions::{Action, Checked, PermissionConfig};
use mia_engine::tools::{OutsidePolicy, ToolEffect, ToolSubject};

fn decide(config: &PermissionConfig, root: &Path, tool: &str, effect: ToolEffect, subject: ToolSubject) -> Action {
    match Checked::new(root, Some(&subject)) {
        Ok(checked) => {
            config
                .decide("ask", tool, effect, &checked, &[], OutsidePolicy::Refuse)
                .action
        }
        // An unresolvable path never reaches a tool: the call is refused.
        Err(_) => Action::Deny,
    }
}

fn path_spellings(root: &Path) -> Vec<String> {
    let abs = root.display().to_string();
    let prefixes = [
        String::new(),
        "./".into(),
        "././".into(),
        ".//".into(),
        "src/../".into(),
        "src/nested/../../".into(),
        "docs/./../".into(),
        "self/".into(),
        "self/src/../".into(),
        format!("{abs}/"),
        format!("{abs}//"),
        format!("{abs}/./"),
        format!("{abs}/src/../"),
        format!("{abs}/../project/"),
    ];
    let names = [
        "secrets/k",
        "secrets//k",
        "secrets/./k",
        "secrets///./k",
        "secrets/../secrets/k",
        "src/../secrets/k",
        "alias/k",
        "alias//k",
        "link",
        "secrets/sub/../k",
    ];
    let mut out = Vec::new();
    for p in &prefixes {
        for n in names {
            out.push(format!("{p}{n}"));
        }
    }
    out
}

fn outside_spellings(root: &Path) -> Vec<String> {
    let abs = root.display().to_string();
    vec![
        "../outside/f".into(),
        "../../outside/f".into(),
        "src/../../outside/f".into(),
        "./../outside/./f".into(),
        format!("{abs}/../outside/f"),
        format!("{abs}/src/../../outside/f"),
        "out/f".into(),
        "outfile".into(),
        "/etc/hosts".into(),
        "/etc/../etc/hosts".into(),
        "//etc//hosts".into(),
        "self/../outside/f".into(),
    ]
}

fn command_forms() -> Vec<String> {
    let mut out = Vec::new();
    for sep in [
        ";", " ; ", "&&", " && ", "||", "&", " & ", "|", " | ", "|&", "\n", ";\n", "\n\n", " ;; ",
    ] {
        out.push(format!("git status{sep}touch x"));
        out.push(format!("touch x{sep}git status"));
    }
    for sub in [
        "$(touch x)",
        "`touch x`",
        "\"$(touch x)\"",
        "\"`touch x`\"",
        "<(touch x)",
        ">(touch x)",
        "$( (touch x) )",
        "${X:-$(touch x)}",
        "$((1+$(touch x)))",
        "\"${X:-`touch x`}\"",
        "x$(touch x)y",
        "--git-dir=$(touch x)",
    ] {
        out.push(format!("git status {sub}"));
    }
    for redir in [
        "> x", ">> x", ">| x", "&> x", "&>> x", "2> x", ">x", "1>x", "> x 2>&1", "<> x",
    ] {
        out.push(format!("git status {redir}"));
        out.push(format!("{redir} git status"));
    }
    for other in [
        "(git status; touch x)",
        "{ git status; touch x; }",
        "git status; (touch x)",
        "if git status; then touch x; fi",
        "for i in 1; do touch x; done",
        "while false; do :; done; touch x",
        "case a in a) touch x;; esac",
        "f() { touch x; }; f",
        "git status \\\n; touch x",
        "X=1 git status",
        "GIT_PAGER='touch x' git status",
        "$CMD status",
        "eval 'touch x'",
        "git status 'unterminated",
        "git status; touch x #",
        "git status <<EOF\n$(touch x)\nEOF",
        "exec touch x",
        "git status & disown; touch x",
        "coproc touch x",
        "time touch x",
        "! touch x",
    ] {
        out.push(other.to_string());
    }
    out
}

/// Forms that are only `git status` to a shell: allowing them is correct.
const BENIGN: &[&str] = &[
    "git status",
    "git status -s",
    "git status # ; touch x",
    "git  status",
    "'git' \"status\"",
];

fn main() {
    let tmp = std::env::temp_dir().join(format!("mia-permission-forms-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let root = tmp.join("project");
    let make = |r: std::io::Result<()>| r.expect("cannot build the benchmark project");
    make(std::fs::create_dir_all(root.join("secrets/sub")));
    make(std::fs::create_dir_all(root.join("src/nested")));
    make(std::fs::create_dir_all(root.join("docs")));
    make(std::fs::create_dir_all(tmp.join("outside")));
    make(std::fs::write(root.join("secrets/k"), "key"));
    make(std::fs::write(tmp.join("outside/f"), "out"));
    make(std::os::unix::fs::symlink("secrets", root.join("alias")));
    make(std::os::unix::fs::symlink("secrets/k", root.join("link")));
    make(std::os::unix::fs::symlink(".", root.join("self")));
    make(std::os::unix::fs::symlink(tmp.join("outside"), root.join("out")));
    make(std::os::unix::fs::symlink(tmp.join("outside/f"), root.join("outfile")));
    let root = root.canonicalize().expect("root");

    let rules = |json: serde_json::Value| -> PermissionConfig {
        serde_json::from_value(serde_json::json!({ "rules": json })).expect("valid rules")
    };
    let deny_secrets = rules(serde_json::json!([{ "tool": "read_file", "pattern": "secrets/**", "action": "deny" }]));
    let allow_git = rules(serde_json::json!([{ "tool": "bash", "pattern": "git status*", "action": "allow" }]));

    let mut rows: Vec<(String, usize, usize, usize, usize)> = Vec::new();
    let mut leaks: Vec<String> = Vec::new();

    let count = |subjects: &[ToolSubject], config: &PermissionConfig, tool: &str, effect: ToolEffect| {
        let (mut deny, mut ask, mut allow) = (0, 0, 0);
        let mut allowed = Vec::new();
        for s in subjects {
            match decide(config, &root, tool, effect, s.clone()) {
                Action::Deny => deny += 1,
                Action::Ask => ask += 1,
                Action::Allow => {
                    allow += 1;
                    // A path is opened at the physical place mia resolved, so an
                    // allowed spelling got past a rule only if that place is outside
                    // the project or is the denied file.
                    let escaped = match Checked::new(&root, Some(s)) {
                        Ok(Checked::Path(p)) => !p.inside || p.physical.starts_with(root.join("secrets")),
                        _ => true,
                    };
                    if escaped {
                        allowed.push(s.as_str().to_string());
                    }
                }
            }
        }
        (subjects.len(), deny, ask, allow, allowed)
    };

    let spellings: Vec<ToolSubject> = path_spellings(&root).into_iter().map(ToolSubject::Path).collect();
    let (n, d, a, al, allowed) = count(&spellings, &deny_secrets, "read_file", ToolEffect::Read);
    rows.push(("spellings of secrets/k (deny rule)".into(), n, d, a, al));
    leaks.extend(allowed);

    let outside: Vec<ToolSubject> = outside_spellings(&root).into_iter().map(ToolSubject::Path).collect();
    let (n, d, a, al, allowed) = count(&outside, &PermissionConfig::default(), "read_file", ToolEffect::Read);
    rows.push(("spellings of paths outside the project".into(), n, d, a, al));
    leaks.extend(allowed);

    let forms: Vec<ToolSubject> = command_forms().into_iter().map(ToolSubject::Command).collect();
    let (n, d, a, al, allowed) = count(&forms, &allow_git, "bash", ToolEffect::Execute);
    rows.push(("compound command forms (git status* allowed)".into(), n, d, a, al));
    leaks.extend(allowed);

    let benign: Vec<ToolSubject> = BENIGN.iter().map(|c| ToolSubject::Command(c.to_string())).collect();
    let (n, d, a, al, _) = count(&benign, &allow_git, "bash", ToolEffect::Execute);
    rows.push(("plain `git status` forms (should be allowed)".into(), n, d, a, al));

    println!(
        "{:<48} {:>6} {:>8} {:>6} {:>8}",
        "subjects", "tried", "refused", "asked", "allowed"
    );
    for (name, n, d, a, al) in &rows {
        println!("{name:<48} {n:>6} {d:>8} {a:>6} {al:>8}");
    }
    if leaks.is_empty() {
        println!("\nno spelling or form got past a rule");
    } else {
        println!("\nGOT PAST A RULE ({}):", leaks.len());
        for l in &leaks {
            println!("  {l:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
