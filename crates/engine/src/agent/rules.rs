//! Project rules files (`AGENTS.md`, `CLAUDE.md`, `.cursor/rules/*.mdc`, …):
//! read at the start of every turn (an edit counts from the next turn on),
//! put in the system prompt, and named in the chat.
//!
//! What is read is bounded and stays in the project: a rules file is a
//! project file like any other, so one that leads outside the project (a
//! symbolic link to `~/.ssh/…`), that a deny rule hides, or that holds a
//! configured API key is skipped, never sent. Each file is cut at
//! `max_bytes` with a visible note, and at most [`MAX_FILES`] files count.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What the rules text starts with, before the files' sections.
pub const RULES_HEADER: &str = "Rules for this project, from its rules files (follow them):\n\n";

/// Most rules files in one turn.
pub const MAX_FILES: usize = 20;
/// Most files one pattern (`.cursor/rules/*.mdc`) may name.
const MAX_PER_PATTERN: usize = 50;

/// `setup({ rules = … })`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct RulesSettings {
    pub enabled: bool,
    /// Project files, relative to the project root. A bare name
    /// (`AGENTS.md`) is also looked for in every directory from the root
    /// down to the file being discussed; a name with `*` is a pattern over
    /// one directory (`.cursor/rules/*.mdc`).
    pub files: Vec<String>,
    /// The user's own rules file (e.g. `stdpath("config")/mia/rules.md`).
    pub user_file: Option<PathBuf>,
    /// Longest part of one file that is sent (bytes).
    pub max_bytes: usize,
}

impl Default for RulesSettings {
    fn default() -> Self {
        RulesSettings {
            enabled: true,
            files: [
                "AGENTS.md",
                "CLAUDE.md",
                "GEMINI.md",
                ".github/copilot-instructions.md",
                ".cursorrules",
                ".cursor/rules/*.mdc",
            ]
            .map(String::from)
            .to_vec(),
            user_file: None,
            max_bytes: 32 * 1024,
        }
    }
}

/// The rules of one turn: the text for the system prompt, and the files it
/// came from as the chat names them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rules {
    pub text: String,
    pub files: Vec<String>,
    /// Each file's section of `text`, in the order of `files` (`:Mia context` counts them apart).
    pub sections: Vec<String>,
}

/// What may stop a project file from being sent: a deny rule on reading
/// it (given the path relative to the root), or a secret in it.
pub struct Guard<'a> {
    pub hidden: &'a (dyn Fn(&str) -> bool + Send + Sync),
    pub secrets: &'a [String],
}

/// Reads the rules for a turn in `root` about `focus` (the file being
/// discussed, if any). Blocking: run it off the async threads.
pub fn load(root: &Path, focus: Option<&Path>, settings: &RulesSettings, guard: &Guard) -> Rules {
    let mut rules = Rules::default();
    if !settings.enabled {
        return rules;
    }
    let Ok(root) = root.canonicalize() else {
        return rules;
    };
    let focus = focus
        .and_then(|f| f.canonicalize().ok())
        .and_then(|f| f.strip_prefix(&root).ok().map(Path::to_path_buf));
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut parts: Vec<String> = Vec::new();
    if let Some(user) = &settings.user_file {
        if let Some((text, _)) = read_capped(user, settings.max_bytes) {
            if !text.trim().is_empty() {
                parts.push(section("your rules", &text));
                rules.files.push("your rules".into());
            }
        }
    }
    for entry in &settings.files {
        for candidate in candidates(&root, focus.as_deref(), entry) {
            if rules.files.len() >= MAX_FILES {
                break;
            }
            let Some(physical) = inside(&root, &candidate) else {
                continue;
            };
            if !seen.insert(physical.clone()) {
                continue; // CLAUDE.md is often a link to AGENTS.md
            }
            let shown = candidate
                .strip_prefix(&root)
                .unwrap_or(&candidate)
                .to_string_lossy()
                .into_owned();
            let real = physical
                .strip_prefix(&root)
                .unwrap_or(&physical)
                .to_string_lossy()
                .into_owned();
            if (guard.hidden)(&shown) || (guard.hidden)(&real) {
                continue;
            }
            let Some((mut text, note)) = read_capped(&physical, settings.max_bytes) else {
                continue;
            };
            if guard.secrets.iter().any(|s| !s.is_empty() && text.contains(s.as_str())) {
                tracing::warn!("rules file {shown} holds a configured API key: it is not sent");
                continue;
            }
            if shown.ends_with(".mdc") {
                match cursor_rule(&text, focus.as_deref()) {
                    Some(body) => text = body,
                    None => continue,
                }
            }
            if text.trim().is_empty() {
                continue;
            }
            text.push_str(&note);
            parts.push(section(&shown, &text));
            rules.files.push(shown);
        }
    }
    if !parts.is_empty() {
        rules.text = format!("{RULES_HEADER}{}", parts.join("\n\n"));
    }
    rules.sections = parts;
    rules
}

fn section(name: &str, text: &str) -> String {
    format!("<rules file=\"{name}\">\n{}\n</rules>", text.trim_end())
}

/// The paths `entry` names: the file at the root and, for a bare name, in
/// each directory down to `focus`; for a pattern, the matching files of
/// its directory (sorted, at most [`MAX_PER_PATTERN`]).
fn candidates(root: &Path, focus: Option<&Path>, entry: &str) -> Vec<PathBuf> {
    let entry = entry.trim_start_matches("./");
    if entry.is_empty() || Path::new(entry).is_absolute() || entry.split('/').any(|c| c == "..") {
        return Vec::new();
    }
    if entry.contains('*') {
        let (dir, pattern) = entry.rsplit_once('/').unwrap_or(("", entry));
        let Ok(glob) = globset::Glob::new(pattern).map(|g| g.compile_matcher()) else {
            return Vec::new();
        };
        let Ok(read) = std::fs::read_dir(root.join(dir)) else {
            return Vec::new();
        };
        let mut found: Vec<PathBuf> = read
            .filter_map(Result::ok)
            .take(10 * MAX_PER_PATTERN)
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| glob.is_match(n)))
            .collect();
        found.sort();
        found.truncate(MAX_PER_PATTERN);
        return found;
    }
    let mut out = vec![root.join(entry)];
    if !entry.contains('/') {
        if let Some(parent) = focus.and_then(Path::parent) {
            let mut dir = root.to_path_buf();
            for part in parent.components() {
                dir.push(part);
                out.push(dir.join(entry));
            }
        }
    }
    out
}

/// The physical path of `path` when it is a regular file inside `root`
/// (links followed): a rules file that leads out of the project is not read.
fn inside(root: &Path, path: &Path) -> Option<PathBuf> {
    let physical = path.canonicalize().ok()?;
    (physical.starts_with(root) && physical.is_file()).then_some(physical)
}

/// At most `max` bytes of the file (cut on a character boundary), and the
/// note to add when it was cut; `None` when it cannot be read.
fn read_capped(path: &Path, max: usize) -> Option<(String, String)> {
    let (file, size) = crate::tools::paths::open_regular(path).ok()?;
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes).ok()?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if bytes.len() > max {
        crate::mcp::cut(&mut text, max);
        let note = format!("\n[mia: this rules file is cut here: {max} of its {size} bytes are sent]");
        return Some((text, note));
    }
    Some((text, String::new()))
}

/// A Cursor rule (`.mdc`): its body when it applies, `None` when not. It
/// applies when its front matter says `alwaysApply: true`, or when one of
/// its `globs` matches the file being discussed. A rule without front
/// matter applies always; one the agent would pick by its description
/// alone does not.
fn cursor_rule(text: &str, focus: Option<&Path>) -> Option<String> {
    let Some(rest) = text.strip_prefix("---") else {
        return Some(text.to_string());
    };
    let end = rest.find("\n---")?;
    let front = &rest[..end];
    let body = rest[end + 4..].trim_start_matches(['-', '\r', '\n']).to_string();
    let mut always = false;
    let mut globs: Vec<String> = Vec::new();
    let mut in_list = false;
    for line in front.lines() {
        let trimmed = line.trim();
        if in_list {
            if let Some(item) = trimmed.strip_prefix("- ") {
                globs.push(unquote(item).to_string());
                continue;
            }
            in_list = false;
        }
        if let Some(v) = trimmed.strip_prefix("alwaysApply:") {
            always = v.trim().eq_ignore_ascii_case("true");
        } else if let Some(v) = trimmed.strip_prefix("globs:") {
            let v = v.trim();
            if v.is_empty() {
                in_list = true;
            } else {
                let v = v.trim_start_matches('[').trim_end_matches(']');
                globs.extend(
                    v.split(',')
                        .map(|g| unquote(g.trim()).to_string())
                        .filter(|g| !g.is_empty()),
                );
            }
        }
    }
    if always {
        return Some(body);
    }
    let focus = focus?;
    let matched = globs.iter().any(|g| {
        let pattern = if g.contains('/') { g.clone() } else { format!("**/{g}") };
        globset::GlobBuilder::new(&pattern)
            .literal_separator(true)
            .build()
            .is_ok_and(|glob| glob.compile_matcher().is_match(focus))
    });
    matched.then_some(body)
}

fn unquote(s: &str) -> &str {
    s.trim().trim_matches(|c| c == '"' || c == '\'')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nothing_hidden(_: &str) -> bool {
        false
    }

    fn load_in(root: &Path, focus: Option<&str>, settings: &RulesSettings, secrets: &[String]) -> Rules {
        let guard = Guard {
            hidden: &nothing_hidden,
            secrets,
        };
        load(root, focus.map(|f| root.join(f)).as_deref(), settings, &guard)
    }

    #[test]
    fn nested_agents_files_apply_on_the_path_to_the_focus_and_links_are_read_once() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        std::fs::create_dir_all(root.join("other")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "top rule").unwrap();
        std::fs::write(root.join("src/AGENTS.md"), "src rule").unwrap();
        std::fs::write(root.join("other/AGENTS.md"), "other rule").unwrap();
        std::fs::write(root.join("src/deep/x.rs"), "").unwrap();
        std::os::unix::fs::symlink(root.join("AGENTS.md"), root.join("CLAUDE.md")).unwrap();
        let r = load_in(root, Some("src/deep/x.rs"), &RulesSettings::default(), &[]);
        assert_eq!(r.files, vec!["AGENTS.md", "src/AGENTS.md"]);
        assert!(r.text.contains("top rule") && r.text.contains("src rule") && !r.text.contains("other rule"));
        let none = load_in(root, None, &RulesSettings::default(), &[]);
        assert_eq!(none.files, vec!["AGENTS.md"]);
    }

    #[test]
    fn files_leading_outside_holding_a_key_or_hidden_are_not_sent() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("p");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(tmp.path().join("secret"), "ssh key").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), root.join("AGENTS.md")).unwrap();
        std::fs::write(root.join("CLAUDE.md"), "use key sk-test-123").unwrap();
        std::fs::write(root.join("GEMINI.md"), "gemini rule").unwrap();
        let r = load_in(&root, None, &RulesSettings::default(), &["sk-test-123".into()]);
        assert_eq!(r.files, vec!["GEMINI.md"]);
        let hide = |p: &str| p == "GEMINI.md";
        let guard = Guard {
            hidden: &hide,
            secrets: &[],
        };
        // Without the key configured, CLAUDE.md is sent; GEMINI.md is hidden by the rule.
        assert_eq!(
            load(&root, None, &RulesSettings::default(), &guard).files,
            vec!["CLAUDE.md"]
        );
    }

    #[test]
    fn a_long_file_is_cut_with_a_note_and_disabled_rules_read_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("AGENTS.md"), "é".repeat(100)).unwrap();
        let settings = RulesSettings {
            max_bytes: 51,
            ..Default::default()
        };
        let r = load_in(tmp.path(), None, &settings, &[]);
        assert!(
            r.text.contains(&"é".repeat(25)) && !r.text.contains(&"é".repeat(26)),
            "{}",
            r.text
        );
        assert!(r.text.contains("cut here: 51 of its 200 bytes"), "{}", r.text);
        let off = RulesSettings {
            enabled: false,
            ..Default::default()
        };
        assert_eq!(load_in(tmp.path(), None, &off, &[]), Rules::default());
    }

    #[test]
    fn cursor_rules_apply_always_or_by_glob() {
        let always = "---\ndescription: x\nalwaysApply: true\n---\nalways body";
        assert_eq!(cursor_rule(always, None).as_deref(), Some("always body"));
        let by_glob = "---\nglobs: *.rs, src/**/*.toml\nalwaysApply: false\n---\nrust body";
        assert_eq!(
            cursor_rule(by_glob, Some(Path::new("src/a/b.rs"))).as_deref(),
            Some("rust body")
        );
        assert_eq!(
            cursor_rule(by_glob, Some(Path::new("src/x/c.toml"))).as_deref(),
            Some("rust body")
        );
        assert_eq!(cursor_rule(by_glob, Some(Path::new("a.py"))), None);
        assert_eq!(cursor_rule(by_glob, None), None);
        let list = "---\nglobs:\n  - \"*.py\"\n---\npy body";
        assert_eq!(cursor_rule(list, Some(Path::new("t/a.py"))).as_deref(), Some("py body"));
        let described = "---\ndescription: only when asked\n---\nbody";
        assert_eq!(cursor_rule(described, Some(Path::new("a.rs"))), None);
        assert_eq!(cursor_rule("plain", None).as_deref(), Some("plain"));
    }
}
