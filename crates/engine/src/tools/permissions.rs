//! Permission rules: per mode, allow / ask / deny by what a tool does (read,
//! write, execute), refined by rules on the tool name and on the path or
//! command it acts on. "Allow always" answers are remembered per project in
//! a file under the data directory. Anything no rule allows is asked.
//!
//! A rule must hold for every spelling of what it names, so rules never see
//! the text a model wrote:
//! - a path is matched in its canonical form ([`crate::tools::paths::canonicalize`]):
//!   relative to the project root, `.`/`..`/duplicate slashes removed,
//!   symbolic links resolved. Deny rules also match the absolute path and
//!   the path as written (links not followed), so a rule naming a link holds
//!   too. A path outside the project is refused (or asked, for tools that
//!   say so) unless a rule with a pattern allows it.
//! - a shell command is parsed ([`crate::tools::shell`]); an allow rule
//!   allows it only when every simple command in it (across pipes, `;`,
//!   `&&`, `||`, `&`, newlines, substitutions) is allowed by some rule, it
//!   redirects output to no file, and the parser understood all of it.
//!   "Allow always" remembers the exact command and matches it literally.
//!
//! - a write to a repository control file (under any `.git` or `.mia`
//!   directory, or a `.git` file; [`crate::tools::control_files`]), and a
//!   command that writes or names one, is asked where it would be allowed,
//!   whatever rule or "allow always" allows it; a deny (by a rule or the
//!   mode) stays a deny.
//!
//! Rules are compiled once, when the configuration arrives; an invalid glob
//! or action is an error that names the rule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::control_files::{command_touches_control_file, control_path};
use super::paths::{canonicalize, read_regular, CanonicalPath, PathError};
use super::shell::{analyze, CommandLine};
use super::{OutsidePolicy, ToolEffect, ToolSubject};

/// What happens when a tool is about to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

impl Action {
    fn parse(text: &str) -> Option<Action> {
        match text {
            "allow" => Some(Action::Allow),
            "ask" => Some(Action::Ask),
            "deny" => Some(Action::Deny),
            _ => None,
        }
    }
}

/// One rule: a tool-name glob, an optional glob on the path or command, the
/// action, and optionally the only mode it applies to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// The default action of a mode for each kind of effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModePolicy {
    pub read: Action,
    pub write: Action,
    pub execute: Action,
}

impl ModePolicy {
    fn for_effect(&self, effect: ToolEffect) -> Action {
        match effect {
            ToolEffect::Read => self.read,
            ToolEffect::Write => self.write,
            ToolEffect::Execute => self.execute,
        }
    }
}

/// A configured rule with its globs compiled.
#[derive(Debug, Clone)]
struct CompiledRule {
    rule: Rule,
    tool: GlobMatcher,
    pattern: Option<GlobMatcher>,
}

impl CompiledRule {
    fn applies(&self, mode: &str, tool: &str) -> bool {
        self.rule.mode.as_deref().is_none_or(|m| m == mode) && self.tool.is_match(tool)
    }

    /// True when the rule has no pattern or its pattern matches `s` (exactly or as a glob).
    fn covers(&self, s: &str) -> bool {
        match (&self.pattern, &self.rule.pattern) {
            (Some(g), Some(p)) => p == s || g.is_match(s),
            _ => true,
        }
    }
}

/// A rule in `setup()` that cannot be used, named by its place in the list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mia: `permissions.rules[{index}]` {problem}")]
pub struct InvalidRule {
    /// 1-based, as Lua counts.
    pub index: usize,
    pub problem: String,
}

/// `setup({ permissions = ... })`: the modes' defaults and the rules, compiled.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawConfig")]
pub struct PermissionConfig {
    pub modes: BTreeMap<String, ModePolicy>,
    rules: Vec<CompiledRule>,
}

/// The configuration as Lua sends it, before its rules are checked.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RawConfig {
    modes: Option<BTreeMap<String, ModePolicy>>,
    rules: Vec<Value>,
}

impl TryFrom<RawConfig> for PermissionConfig {
    type Error = super::ToolError;

    fn try_from(raw: RawConfig) -> Result<Self, super::ToolError> {
        let rules = raw
            .rules
            .iter()
            .enumerate()
            .map(|(i, v)| compile_rule(i + 1, v))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PermissionConfig {
            modes: raw.modes.unwrap_or_else(default_modes),
            rules,
        })
    }
}

fn compile_glob(index: usize, key: &str, pattern: &str) -> Result<GlobMatcher, InvalidRule> {
    // `./src/**` means the same as `src/**`: subjects are never written with `./`.
    let mut text = pattern;
    while let Some(rest) = text.strip_prefix("./") {
        text = rest;
    }
    GlobBuilder::new(text)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| InvalidRule {
            index,
            problem: format!(
                "has an invalid glob in `{key}`: `{pattern}` ({}); fix the pattern (write `\\[` for a literal `[`) or remove the rule",
                e.kind()
            ),
        })
}

fn compile_rule(index: usize, value: &Value) -> Result<CompiledRule, InvalidRule> {
    let fail = |problem: String| InvalidRule { index, problem };
    let Value::Object(fields) = value else {
        return Err(fail(format!(
            "must be a table like {{ tool = \"bash\", pattern = \"git status\", action = \"allow\" }} (got {value})"
        )));
    };
    for key in fields.keys() {
        if !["tool", "pattern", "action", "mode"].contains(&key.as_str()) {
            return Err(fail(format!(
                "has an unknown key `{key}`; a rule has tool, pattern, action and mode"
            )));
        }
    }
    let text = |key: &str, required: bool| -> Result<Option<String>, InvalidRule> {
        match fields.get(key) {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            None | Some(Value::Null) if !required => Ok(None),
            None | Some(Value::Null) => Err(fail(format!("needs `{key}` (a string)"))),
            Some(other) => Err(fail(format!("has `{key}` = {other}; it must be a string"))),
        }
    };
    let tool = text("tool", true)?.unwrap_or_default();
    let pattern = text("pattern", false)?;
    let action_text = text("action", true)?.unwrap_or_default();
    let mode = text("mode", false)?;
    let action = Action::parse(&action_text).ok_or_else(|| {
        fail(format!(
            "has an unknown action `{action_text}`; use \"allow\", \"ask\" or \"deny\""
        ))
    })?;
    if tool.is_empty() {
        return Err(fail(
            "has an empty `tool`; name a tool or use \"*\" for every tool".into(),
        ));
    }
    let tool_glob = compile_glob(index, "tool", &tool)?;
    let pattern_glob = pattern
        .as_deref()
        .map(|p| compile_glob(index, "pattern", p))
        .transpose()?;
    Ok(CompiledRule {
        rule: Rule {
            tool,
            pattern,
            action,
            mode,
        },
        tool: tool_glob,
        pattern: pattern_glob,
    })
}

/// The built-in modes' policies (defined in [`crate::shared::builtin_modes`]).
fn default_modes() -> BTreeMap<String, ModePolicy> {
    crate::shared::builtin_modes()
        .into_iter()
        .map(|m| (m.id.to_string(), m.permissions))
        .collect()
}

impl Default for PermissionConfig {
    fn default() -> Self {
        PermissionConfig {
            modes: default_modes(),
            rules: Vec::new(),
        }
    }
}

/// Why a decision was made (shown when a call is denied).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub action: Action,
    pub because: String,
}

impl Decision {
    fn new(action: Action, because: impl Into<String>) -> Self {
        Decision {
            action,
            because: because.into(),
        }
    }
}

/// What a call acts on, in the form rules are checked against.
#[derive(Debug, Clone)]
pub enum Checked {
    /// The tool names no subject.
    None,
    /// A path, canonical.
    Path(CanonicalPath),
    /// A shell command line and what the parser found in it.
    Command { raw: String, line: CommandLine },
    /// Anything else, as written.
    Text(String),
}

impl Checked {
    /// Brings `subject` into checked form: paths resolved against `root`,
    /// commands parsed. Fails only when a path cannot be resolved at all.
    pub fn new(root: &Path, subject: Option<&ToolSubject>) -> Result<Checked, PathError> {
        Ok(match subject {
            None => Checked::None,
            Some(ToolSubject::Path(p)) => Checked::Path(canonicalize(root, p)?),
            Some(ToolSubject::Command(c)) => Checked::Command {
                raw: c.clone(),
                line: analyze(c),
            },
            Some(ToolSubject::Text(t)) => Checked::Text(t.clone()),
        })
    }

    /// How the subject is shown to the user: the canonical path, the command as written.
    pub fn shown(&self) -> Option<String> {
        match self {
            Checked::None => None,
            Checked::Path(p) => Some(p.subject.clone()),
            Checked::Command { raw, .. } => Some(raw.clone()),
            Checked::Text(t) => Some(t.clone()),
        }
    }

    /// The canonical path, for a path subject.
    pub fn path(&self) -> Option<&CanonicalPath> {
        match self {
            Checked::Path(p) => Some(p),
            _ => None,
        }
    }

    /// The physical path of a path subject that lies outside the project.
    pub fn outside_path(&self) -> Option<PathBuf> {
        match self {
            Checked::Path(p) if !p.inside => Some(p.physical.clone()),
            _ => None,
        }
    }
}

impl PermissionConfig {
    /// What a tool sees of the permissions in effect for it (`ctx.agent.permissions`):
    /// the mode's defaults, what they mean for this tool's effect, and the
    /// configured rules that apply to it in this mode, in order.
    pub fn effective(&self, mode: &str, tool: &str, effect: ToolEffect) -> Value {
        let rules: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| r.applies(mode, tool))
            .map(|r| &r.rule)
            .collect();
        serde_json::json!({
            "mode": self.modes.get(mode),
            "default": self.mode_default(mode, effect).action,
            "rules": rules,
        })
    }

    fn mode_default(&self, mode: &str, effect: ToolEffect) -> Decision {
        match self.modes.get(mode) {
            Some(policy) => Decision::new(
                policy.for_effect(effect),
                format!("{mode} mode's default for {}", effect_name(effect)),
            ),
            None => Decision::new(Action::Ask, format!("unknown mode `{mode}`")),
        }
    }

    /// The first rule for `tool` in `mode` (other than deny rules) that
    /// covers any of `forms`, as a decision.
    fn first_rule(&self, mode: &str, tool: &str, forms: &[&str]) -> Option<Decision> {
        self.rules
            .iter()
            .filter(|r| r.rule.action != Action::Deny && r.applies(mode, tool))
            .find(|r| match r.rule.pattern {
                None => true,
                Some(_) => forms.iter().any(|f| r.covers(f)),
            })
            .map(|r| Decision::new(r.rule.action, format!("the rule {}", describe(&r.rule))))
    }

    /// The first deny rule for `tool` in `mode` that covers any of `forms`
    /// (a deny rule without a pattern covers everything).
    fn deny_rule(&self, mode: &str, tool: &str, forms: &[&str]) -> Option<&Rule> {
        self.rules
            .iter()
            .filter(|r| r.rule.action == Action::Deny && r.applies(mode, tool))
            .find(|r| r.rule.pattern.is_none() || forms.iter().any(|f| r.covers(f)))
            .map(|r| &r.rule)
    }

    /// Decides for `tool` (with `effect`, acting on `subject`) in `mode`.
    /// Order: a configured deny rule; for a path outside the project, a rule
    /// with a pattern that names it, else `outside`; a remembered "allow
    /// always"; the first other configured rule; the mode's default for the
    /// effect; ask.
    pub fn decide(
        &self,
        mode: &str,
        tool: &str,
        effect: ToolEffect,
        subject: &Checked,
        remembered: &[Rule],
        outside: OutsidePolicy,
    ) -> Decision {
        let decision = match subject {
            Checked::None => self.decide_plain(mode, tool, effect, &[], remembered),
            Checked::Text(t) => self.decide_plain(mode, tool, effect, &[t.as_str()], remembered),
            Checked::Path(p) => self.decide_path(mode, tool, effect, p, remembered, outside),
            Checked::Command { raw, line } => self.decide_command(mode, tool, effect, raw, line, remembered),
        };
        if decision.action != Action::Allow {
            return decision;
        }
        // What would be allowed is still asked when it plants a control file.
        let control = match subject {
            Checked::Path(p) if effect == ToolEffect::Write => {
                control_path(p).map(|c| format!("writing `{c}`, a repository control file"))
            }
            Checked::Command { line, .. } => command_touches_control_file(line),
            _ => None,
        };
        match control {
            Some(what) => Decision::new(
                Action::Ask,
                format!("{what}: git or mia may run what it says, so this always asks"),
            ),
            None => decision,
        }
    }

    fn decide_plain(
        &self,
        mode: &str,
        tool: &str,
        effect: ToolEffect,
        forms: &[&str],
        remembered: &[Rule],
    ) -> Decision {
        if let Some(r) = self.deny_rule(mode, tool, forms) {
            return Decision::new(Action::Deny, format!("denied by the rule {}", describe(r)));
        }
        if remembered_allows(remembered, tool, forms.first().copied()) {
            return Decision::new(Action::Allow, "allowed always for this project");
        }
        if let Some(d) = self.first_rule(mode, tool, forms) {
            return d;
        }
        self.mode_default(mode, effect)
    }

    /// The deny rule for `tool` in `mode` that covers `path` in any of its
    /// spellings, described; nil when none does. Unlike [`Self::decide`]
    /// it asks nothing else (outside the project, the mode's default):
    /// for what the user starts by hand, such as `:Mia edit`, only a deny
    /// rule stops it.
    pub fn denying_rule(&self, mode: &str, tool: &str, path: &CanonicalPath) -> Option<String> {
        let spellings = every_spelling(path);
        let every_spelling: Vec<&str> = spellings.iter().map(String::as_str).collect();
        self.deny_rule(mode, tool, &every_spelling)
            .map(|r| format!("denied by the rule {}", describe(r)))
    }

    fn decide_path(
        &self,
        mode: &str,
        tool: &str,
        effect: ToolEffect,
        path: &CanonicalPath,
        remembered: &[Rule],
        outside: OutsidePolicy,
    ) -> Decision {
        let absolute = path.physical.to_string_lossy();
        let named = [path.subject.as_str(), absolute.as_ref()];
        let spellings = every_spelling(path);
        let every_spelling: Vec<&str> = spellings.iter().map(String::as_str).collect();
        if let Some(r) = self.deny_rule(mode, tool, &every_spelling) {
            return Decision::new(Action::Deny, format!("denied by the rule {}", describe(r)));
        }
        if !path.inside {
            let by_rule = self
                .rules
                .iter()
                .filter(|r| r.rule.action != Action::Deny && r.rule.pattern.is_some() && r.applies(mode, tool))
                .find(|r| named.iter().any(|f| r.covers(f)));
            return match (by_rule, outside) {
                (Some(r), _) => Decision::new(r.rule.action, format!("the rule {}", describe(&r.rule))),
                (None, OutsidePolicy::Ask) => Decision::new(Action::Ask, format!("`{}` is outside the project", path.subject)),
                (None, OutsidePolicy::Refuse) => Decision::new(
                    Action::Deny,
                    format!(
                        "`{}` is outside the project root; only a rule with a pattern naming it (e.g. {{ tool = \"{tool}\", pattern = \"{}\", action = \"allow\" }}) lets a tool reach it",
                        path.subject, path.subject
                    ),
                ),
            };
        }
        if remembered_allows(remembered, tool, None) {
            return Decision::new(Action::Allow, "allowed always for this project");
        }
        if let Some(d) = self.first_rule(mode, tool, &named) {
            return d;
        }
        self.mode_default(mode, effect)
    }

    fn decide_command(
        &self,
        mode: &str,
        tool: &str,
        effect: ToolEffect,
        raw: &str,
        line: &CommandLine,
        remembered: &[Rule],
    ) -> Decision {
        let mut forms: Vec<&str> = vec![raw];
        forms.extend(line.commands.iter().map(|c| c.text.as_str()));
        if let Some(r) = self.deny_rule(mode, tool, &forms) {
            return Decision::new(Action::Deny, format!("denied by the rule {}", describe(r)));
        }
        if remembered
            .iter()
            .any(|r| r.action == Action::Allow && r.tool == tool && r.pattern.as_deref() == Some(raw))
        {
            return Decision::new(Action::Allow, "this exact command was allowed always for this project");
        }
        // What vouches for the parts no pattern can: a rule without a
        // pattern for this tool, else the mode's default; but never more
        // than "ask" while a deny rule with a pattern could be hiding in them.
        let some_deny_pattern = self
            .rules
            .iter()
            .any(|r| r.rule.action == Action::Deny && r.rule.pattern.is_some() && r.applies(mode, tool));
        let unvouched = || {
            let d = self
                .rules
                .iter()
                .filter(|r| r.rule.action != Action::Deny && r.rule.pattern.is_none() && r.applies(mode, tool))
                .map(|r| Decision::new(r.rule.action, format!("the rule {}", describe(&r.rule))))
                .next()
                .unwrap_or_else(|| self.mode_default(mode, effect));
            if d.action == Action::Allow && some_deny_pattern {
                Decision::new(Action::Ask, "a deny rule could match a part mia cannot see")
            } else {
                d
            }
        };
        let mut verdicts: Vec<(Decision, String)> = Vec::new();
        for reason in &line.opaque {
            verdicts.push((unvouched(), format!("mia cannot fully check this command ({reason})")));
        }
        for c in &line.commands {
            let d = self
                .first_rule(mode, tool, &[c.text.as_str()])
                .unwrap_or_else(|| self.mode_default(mode, effect));
            let why = format!("`{}`: {}", c.text, d.because);
            verdicts.push((d, why));
            for target in &c.writes {
                verdicts.push((unvouched(), format!("`{}` writes to `{target}`", c.text)));
            }
        }
        if line.commands.is_empty() && line.opaque.is_empty() {
            verdicts.push((unvouched(), "an empty command".into()));
        }
        for wanted in [Action::Deny, Action::Ask] {
            if let Some((d, why)) = verdicts.iter().find(|(d, _)| d.action == wanted) {
                let because = if d.because.is_empty() {
                    why.clone()
                } else {
                    format!("{why} ({})", d.because)
                };
                return Decision::new(wanted, because);
            }
        }
        let because = match verdicts.as_slice() {
            [(d, _)] => d.because.clone(),
            _ => "every command in it is allowed".to_string(),
        };
        Decision::new(Action::Allow, because)
    }

    /// False when `mode` can never run `tool`: such tools are not even offered to the model.
    pub fn offered(&self, mode: &str, tool: &str, effect: ToolEffect) -> bool {
        let mode_denies = self
            .modes
            .get(mode)
            .is_some_and(|p| p.for_effect(effect) == Action::Deny);
        let some_rule_allows = self
            .rules
            .iter()
            .any(|r| r.rule.action != Action::Deny && r.applies(mode, tool));
        let denied_outright = self
            .rules
            .iter()
            .any(|r| r.rule.action == Action::Deny && r.rule.pattern.is_none() && r.applies(mode, tool));
        !denied_outright && (!mode_denies || some_rule_allows)
    }

    /// A test for paths (relative to the project root) that a deny rule
    /// with a pattern hides from `tool` in `mode`: directory walks skip them.
    pub fn hidden_paths(&self, mode: &str, tool: &str) -> super::PathFilter {
        let denying: Vec<CompiledRule> = self
            .rules
            .iter()
            .filter(|r| r.rule.action == Action::Deny && r.rule.pattern.is_some() && r.applies(mode, tool))
            .cloned()
            .collect();
        std::sync::Arc::new(move |rel: &str| denying.iter().any(|r| r.covers(rel)))
    }

    /// The patterns of the deny rules for `tool` in `mode`: the sandbox
    /// (`crate::sandbox`) keeps what they name for `read_file` unreadable
    /// by every program a command runs.
    pub fn deny_patterns(&self, mode: &str, tool: &str) -> Vec<String> {
        self.rules
            .iter()
            .filter(|r| r.rule.action == Action::Deny && r.applies(mode, tool))
            .filter_map(|r| r.rule.pattern.clone())
            .collect()
    }

    /// These rules with `mode`'s default for running commands turned to
    /// allow: how `code` mode decides on a command the sandbox confines.
    /// Deny rules, ask rules, control files and what the parser cannot see
    /// decide as before.
    pub fn executing_allowed(&self, mode: &str) -> PermissionConfig {
        let mut out = self.clone();
        if let Some(policy) = out.modes.get_mut(mode) {
            if policy.execute == Action::Ask {
                policy.execute = Action::Allow;
            }
        }
        out
    }

    /// The rules as configured (for `:checkhealth` and the tool context).
    pub fn rules(&self) -> Vec<Rule> {
        self.rules.iter().map(|r| r.rule.clone()).collect()
    }
}

/// A remembered "allow always": tool names and patterns compare literally.
fn remembered_allows(remembered: &[Rule], tool: &str, subject: Option<&str>) -> bool {
    remembered.iter().any(|r| {
        r.action == Action::Allow
            && r.tool == tool
            && match &r.pattern {
                None => true,
                Some(p) => Some(p.as_str()) == subject,
            }
    })
}

fn effect_name(effect: ToolEffect) -> &'static str {
    match effect {
        ToolEffect::Read => "reading",
        ToolEffect::Write => "writing",
        ToolEffect::Execute => "running commands",
    }
}

/// Every spelling of `path` a deny rule is tried against: as the model
/// named it, absolute (links resolved) and lexical, then each with a
/// trailing slash, since `secrets/**` denies the directory `secrets` itself
/// too (listing it would show what the rule hides).
fn every_spelling(path: &CanonicalPath) -> [String; 6] {
    let absolute = path.physical.to_string_lossy().into_owned();
    let as_dir = |s: &str| format!("{}/", s.trim_end_matches('/'));
    let dirs = [as_dir(&path.subject), as_dir(&absolute), as_dir(&path.lexical)];
    let [d0, d1, d2] = dirs;
    [path.subject.clone(), absolute, path.lexical.clone(), d0, d1, d2]
}

fn describe(r: &Rule) -> String {
    match &r.pattern {
        Some(p) => format!("`{}` on `{p}`", r.tool),
        None => format!("`{}`", r.tool),
    }
}

/// The rule an "allow always" answer adds: a command is remembered exactly
/// (and later matched literally, never as a glob), other tools for the whole
/// project (paths inside it only).
pub fn remembered_rule(tool: &str, subject: &Checked) -> Rule {
    Rule {
        tool: tool.to_string(),
        pattern: match subject {
            Checked::Command { raw, .. } => Some(raw.clone()),
            Checked::Text(t) => Some(t.clone()),
            Checked::None | Checked::Path(_) => None,
        },
        action: Action::Allow,
        mode: None,
    }
}

/// The remembered rules file (`data_dir/permissions.json`): project root -> rules.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Remembered {
    pub projects: BTreeMap<String, Vec<Rule>>,
}

/// What loading the remembered rules found.
#[derive(Debug, Default)]
pub struct Loaded {
    pub remembered: Remembered,
    /// Set when the file was corrupt: it was moved aside, and this says where
    /// (for one warning to the user).
    pub warning: Option<String>,
}

impl Remembered {
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join("permissions.json")
    }

    /// Reads the file (blocking: call it off the async threads). A missing
    /// file means nothing remembered. A file that cannot be read as
    /// remembered rules is moved aside to `permissions.json.bak` (or
    /// `.bak.N`), never overwritten, and [`Loaded::warning`] says so once.
    pub fn load(data_dir: &Path) -> Loaded {
        let path = Self::path(data_dir);
        let bytes = match read_regular(&path, MAX_REMEMBERED_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::default(),
            Err(e) => {
                return Loaded {
                    remembered: Remembered::default(),
                    warning: Some(format!(
                        "mia: cannot read {} ({e}); remembered permissions are ignored until it is readable",
                        path.display()
                    )),
                }
            }
        };
        match serde_json::from_slice::<Remembered>(&bytes) {
            Ok(remembered) => Loaded {
                remembered,
                warning: None,
            },
            Err(e) => {
                let warning = match move_aside(&path) {
                    Ok(bak) => format!(
                        "mia: {} was corrupt ({e}) and was moved to {}; remembered \"allow always\" answers start afresh (the old ones are in that file)",
                        path.display(),
                        bak.display()
                    ),
                    Err(move_err) => format!(
                        "mia: {} is corrupt ({e}) and could not be moved aside ({move_err}); fix or delete it",
                        path.display()
                    ),
                };
                tracing::warn!("{warning}");
                Loaded {
                    remembered: Remembered::default(),
                    warning: Some(warning),
                }
            }
        }
    }

    /// Adds `rule` for `root` and writes the file atomically (blocking). A
    /// corrupt file is moved aside first (by [`Remembered::load`]), never
    /// overwritten.
    pub fn remember(data_dir: &Path, root: &Path, rule: Rule) -> std::io::Result<()> {
        let loaded = Self::load(data_dir);
        if loaded.warning.is_some() && Self::path(data_dir).try_exists().unwrap_or(true) {
            return Err(std::io::Error::other(
                "permissions.json could not be read or moved aside; not overwriting it",
            ));
        }
        let mut all = loaded.remembered;
        let rules = all.projects.entry(root.display().to_string()).or_default();
        if !rules.contains(&rule) {
            rules.push(rule);
        }
        std::fs::create_dir_all(data_dir)?;
        let tmp = data_dir.join(format!(".permissions.json.{}", std::process::id()));
        let text = serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, Self::path(data_dir))
    }

    /// [`Remembered::remember`] on the blocking pool, for the async threads.
    /// A failure is logged: the rule still holds for the session.
    pub async fn save(data_dir: &Path, root: &Path, rule: Rule) {
        let (dir, root) = (data_dir.to_path_buf(), root.to_path_buf());
        let saved = tokio::task::spawn_blocking(move || Self::remember(&dir, &root, rule)).await;
        if let Err(e) = saved.map_err(std::io::Error::other).and_then(|r| r) {
            tracing::warn!("cannot save the permission: {e}");
        }
    }

    pub fn for_project(&self, root: &Path) -> Vec<Rule> {
        self.projects
            .get(&root.display().to_string())
            .cloned()
            .unwrap_or_default()
    }
}

/// Largest remembered-rules file read (mia writes a few KB; another
/// process could put anything there).
const MAX_REMEMBERED_BYTES: u64 = 16 << 20;

/// Renames `path` to `path.bak`, or `path.bak.N` for the first free N.
fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let base = path.as_os_str().to_owned();
    for n in 0..1000 {
        let mut name = base.clone();
        if n == 0 {
            name.push(".bak");
        } else {
            name.push(format!(".bak.{n}"));
        }
        let candidate = PathBuf::from(name);
        if !candidate.try_exists().unwrap_or(true) {
            std::fs::rename(path, &candidate)?;
            return Ok(candidate);
        }
    }
    Err(std::io::Error::other("too many backups already"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(rules: Value) -> PermissionConfig {
        serde_json::from_value(json!({ "rules": rules })).unwrap()
    }

    fn command(c: &str) -> Checked {
        Checked::new(Path::new("/"), Some(&ToolSubject::Command(c.into()))).unwrap()
    }

    fn text(t: &str) -> Checked {
        Checked::Text(t.into())
    }

    fn decide(c: &PermissionConfig, mode: &str, tool: &str, effect: ToolEffect, s: &Checked) -> Action {
        c.decide(mode, tool, effect, s, &[], OutsidePolicy::Refuse).action
    }

    #[test]
    fn modes_decide_by_effect() {
        let c = PermissionConfig::default();
        assert_eq!(
            decide(&c, "ask", "read_file", ToolEffect::Read, &text("a")),
            Action::Allow
        );
        assert_eq!(
            decide(&c, "ask", "write_file", ToolEffect::Write, &text("a")),
            Action::Ask
        );
        assert_eq!(
            decide(&c, "code", "write_file", ToolEffect::Write, &text("a")),
            Action::Allow
        );
        assert_eq!(
            decide(&c, "architect", "bash", ToolEffect::Execute, &command("ls")),
            Action::Deny
        );
        assert_eq!(
            decide(&c, "nope", "read_file", ToolEffect::Read, &Checked::None),
            Action::Ask
        );
    }

    #[test]
    fn invalid_globs_actions_and_keys_are_errors_naming_the_rule() {
        let bad = |rules: Value| {
            serde_json::from_value::<PermissionConfig>(json!({ "rules": rules }))
                .unwrap_err()
                .to_string()
        };
        let e = bad(
            json!([{ "tool": "bash", "action": "allow" }, { "tool": "read_file", "pattern": "secrets/[", "action": "deny" }]),
        );
        assert!(e.contains("`permissions.rules[2]`"), "{e}");
        assert!(e.contains("`secrets/[`"), "{e}");
        let e = bad(json!([{ "tool": "bash", "action": "alow" }]));
        assert!(e.contains("rules[1]") && e.contains("unknown action `alow`"), "{e}");
        let e = bad(json!([{ "tool": "bash", "patern": "x", "action": "allow" }]));
        assert!(e.contains("unknown key `patern`"), "{e}");
        let e = bad(json!([{ "tool": "{a,b", "action": "deny" }]));
        assert!(e.contains("rules[1]") && e.contains("`tool`"), "{e}");
        let e = bad(json!([{ "pattern": "x", "action": "deny" }]));
        assert!(e.contains("needs `tool`"), "{e}");
    }

    #[test]
    fn compound_commands_need_every_part_allowed() {
        let c = config(json!([{ "tool": "bash", "pattern": "git status*", "action": "allow" }]));
        let run = |cmd: &str| decide(&c, "ask", "bash", ToolEffect::Execute, &command(cmd));
        assert_eq!(run("git status -s"), Action::Allow);
        for bypass in [
            "git status; touch x",
            "git status | tee x",
            "git status $(touch x)",
            "git status\ntouch x",
            "git status `touch x`",
            "git status > x",
            "git status && touch x",
            "git status || touch x",
            "git status & touch x",
            "rm -rf /",
        ] {
            assert_eq!(run(bypass), Action::Ask, "{bypass:?}");
        }
    }

    #[test]
    fn a_deny_rule_catches_a_command_anywhere_in_the_line() {
        let c = config(json!([
            { "tool": "bash", "pattern": "rm *", "action": "deny" },
            { "tool": "bash", "action": "allow" },
        ]));
        let run = |cmd: &str| decide(&c, "ask", "bash", ToolEffect::Execute, &command(cmd));
        assert_eq!(run("ls"), Action::Allow);
        assert_eq!(run("ls; rm -rf x"), Action::Deny);
        assert_eq!(run("echo $(rm -rf x)"), Action::Deny);
        // What cannot be parsed is asked while a deny rule could hide in it.
        assert_eq!(run("ls 'unterminated"), Action::Ask);
    }

    #[test]
    fn remembered_commands_match_literally_never_as_globs() {
        let c = PermissionConfig::default();
        let remembered = vec![remembered_rule("bash", &command("make test*"))];
        let run = |cmd: &str| {
            c.decide(
                "ask",
                "bash",
                ToolEffect::Execute,
                &command(cmd),
                &remembered,
                OutsidePolicy::Refuse,
            )
            .action
        };
        assert_eq!(run("make test*"), Action::Allow);
        assert_eq!(run("make test; rm -rf x"), Action::Ask);
        assert_eq!(run("make tests"), Action::Ask);
    }

    #[test]
    fn remembered_allow_beats_the_mode_but_not_a_deny_rule() {
        let c = config(json!([{ "tool": "write_file", "pattern": "*.lock", "action": "deny" }]));
        let remembered = vec![remembered_rule("write_file", &Checked::None)];
        let d = |s: &str| {
            c.decide(
                "ask",
                "write_file",
                ToolEffect::Write,
                &text(s),
                &remembered,
                OutsidePolicy::Refuse,
            )
            .action
        };
        assert_eq!(d("src/b.rs"), Action::Allow);
        assert_eq!(d("x.lock"), Action::Deny);
    }

    #[test]
    fn architect_mode_is_not_offered_write_tools() {
        let c = PermissionConfig::default();
        assert!(!c.offered("architect", "write_file", ToolEffect::Write));
        assert!(!c.offered("architect", "bash", ToolEffect::Execute));
        assert!(c.offered("architect", "read_file", ToolEffect::Read));
        assert!(c.offered("ask", "bash", ToolEffect::Execute));
    }

    #[test]
    fn every_spelling_of_a_denied_path_is_denied_and_outside_paths_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap().join("p");
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("secrets/k"), "k").unwrap();
        std::os::unix::fs::symlink("secrets/k", root.join("innocent")).unwrap();
        let c = config(json!([{ "tool": "read_file", "pattern": "./secrets/**", "action": "deny" }]));
        let abs = format!("{}/secrets/k", root.display());
        for s in [
            "secrets/k",
            "./secrets/k",
            "secrets//k",
            "src/../secrets/k",
            abs.as_str(),
            "innocent",
        ] {
            let checked = Checked::new(&root, Some(&ToolSubject::Path(s.into()))).unwrap();
            assert_eq!(
                decide(&c, "ask", "read_file", ToolEffect::Read, &checked),
                Action::Deny,
                "{s:?}"
            );
        }
        let dir = Checked::new(&root, Some(&ToolSubject::Path("./secrets".into()))).unwrap();
        assert_eq!(decide(&c, "ask", "read_file", ToolEffect::Read, &dir), Action::Deny);
        let src = Checked::new(&root, Some(&ToolSubject::Path("src".into()))).unwrap();
        assert_eq!(decide(&c, "ask", "read_file", ToolEffect::Read, &src), Action::Allow);
        let outside = Checked::new(&root, Some(&ToolSubject::Path("/etc/passwd".into()))).unwrap();
        assert_eq!(
            decide(&c, "code", "read_file", ToolEffect::Read, &outside),
            Action::Deny
        );
        assert_eq!(
            c.decide(
                "code",
                "read_buffer",
                ToolEffect::Read,
                &outside,
                &[],
                OutsidePolicy::Ask
            )
            .action,
            Action::Ask
        );
        let allowing = config(json!([{ "tool": "read_file", "pattern": "/etc/**", "action": "allow" }]));
        assert_eq!(
            decide(&allowing, "ask", "read_file", ToolEffect::Read, &outside),
            Action::Allow
        );
        // A remembered "allow always" for the project never reaches outside it.
        let remembered = vec![remembered_rule("read_file", &Checked::None)];
        assert_eq!(
            c.decide(
                "ask",
                "read_file",
                ToolEffect::Read,
                &outside,
                &remembered,
                OutsidePolicy::Refuse
            )
            .action,
            Action::Deny
        );
    }

    #[test]
    fn writing_a_control_file_asks_in_every_mode_whatever_allows_it_but_a_deny_still_denies() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        let path = |s: &str| Checked::new(&root, Some(&ToolSubject::Path(s.into()))).unwrap();
        let allowing = config(json!([
            { "tool": "write_file", "pattern": ".git/**", "action": "allow" },
            { "tool": "bash", "action": "allow" },
        ]));
        let remembered = vec![remembered_rule("write_file", &Checked::None)];
        for c in [PermissionConfig::default(), allowing] {
            for mode in ["code", "ask"] {
                let d = c.decide(
                    mode,
                    "write_file",
                    ToolEffect::Write,
                    &path("./.git/config"),
                    &remembered,
                    OutsidePolicy::Refuse,
                );
                assert_eq!(d.action, Action::Ask, "{mode}: {d:?}");
                assert!(d.because.contains("`.git/config`, a repository control file"), "{d:?}");
            }
            assert_eq!(
                decide(&c, "code", "write_file", ToolEffect::Write, &path("src/a.rs")),
                Action::Allow
            );
            assert_eq!(
                decide(&c, "code", "read_file", ToolEffect::Read, &path(".git/config")),
                Action::Allow
            );
        }
        // A mode that denies writing still denies (it is never softened to a question).
        assert_eq!(
            decide(
                &PermissionConfig::default(),
                "architect",
                "write_file",
                ToolEffect::Write,
                &path(".git/config")
            ),
            Action::Deny
        );
        let bash = config(json!([{ "tool": "bash", "action": "allow" }]));
        let run = |cmd: &str| decide(&bash, "code", "bash", ToolEffect::Execute, &command(cmd));
        assert_eq!(run("ls"), Action::Allow);
        assert_eq!(run("echo '[core] fsmonitor = x' >> .git/config"), Action::Ask);
        assert_eq!(run("git config core.fsmonitor 'touch x'"), Action::Ask);
        let denying = config(json!([{ "tool": "write_file", "pattern": ".git/**", "action": "deny" }]));
        assert_eq!(
            decide(&denying, "code", "write_file", ToolEffect::Write, &path(".git/config")),
            Action::Deny
        );
    }

    #[test]
    fn a_fifo_or_an_oversized_file_is_refused_without_waiting_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let path = Remembered::path(dir);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer ever opens the FIFO: a blocking read would hang here.
        let loaded = Remembered::load(dir);
        let warning = loaded.warning.unwrap();
        assert!(
            warning.contains("not a regular file") && warning.contains("ignored"),
            "{warning}"
        );
        let ls = remembered_rule("bash", &command("ls"));
        assert!(Remembered::remember(dir, Path::new("/p"), ls.clone()).is_err());
        std::fs::remove_file(&path).unwrap();

        let big = std::fs::File::create(&path).unwrap();
        big.set_len(MAX_REMEMBERED_BYTES + 1).unwrap();
        let warning = Remembered::load(dir).warning.unwrap();
        assert!(warning.contains("more than the 16777216 mia reads"), "{warning}");
        assert!(Remembered::remember(dir, Path::new("/p"), ls).is_err());
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            MAX_REMEMBERED_BYTES + 1,
            "left as it was"
        );
    }

    #[test]
    fn remembered_rules_survive_a_reload_and_a_corrupt_file_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        {
            let ls = remembered_rule("bash", &command("ls"));
            Remembered::remember(dir, Path::new("/p"), ls.clone()).unwrap();
            Remembered::remember(dir, Path::new("/p"), ls.clone()).unwrap();
            let r = Remembered::load(dir);
            assert!(r.warning.is_none());
            assert_eq!(r.remembered.for_project(Path::new("/p")), vec![ls.clone()]);
            assert!(r.remembered.for_project(Path::new("/q")).is_empty());

            std::fs::write(Remembered::path(dir), b"{ not json").unwrap();
            let r = Remembered::load(dir);
            let warning = r.warning.unwrap();
            assert!(
                warning.contains("corrupt") && warning.contains("permissions.json.bak"),
                "{warning}"
            );
            assert_eq!(std::fs::read(dir.join("permissions.json.bak")).unwrap(), b"{ not json");
            assert!(Remembered::load(dir).warning.is_none(), "reported once");
            std::fs::write(Remembered::path(dir), b"[]").unwrap();
            Remembered::remember(dir, Path::new("/p"), ls.clone()).unwrap();
            assert_eq!(std::fs::read(dir.join("permissions.json.bak.1")).unwrap(), b"[]");
        }
    }
}
