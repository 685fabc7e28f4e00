//! Permission rules: per mode, allow / ask / deny by what a tool does (read,
//! write, execute), refined by rules on the tool name and on the path or
//! command it acts on. "Allow always" answers are remembered per project in
//! a file under the data directory. Anything no rule allows is asked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use serde::{Deserialize, Serialize};

use super::ToolEffect;

/// What happens when a tool is about to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    Ask,
    Deny,
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

/// `setup({ permissions = ... })`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct PermissionConfig {
    pub modes: BTreeMap<String, ModePolicy>,
    pub rules: Vec<Rule>,
}

impl Default for PermissionConfig {
    fn default() -> Self {
        use Action::*;
        let modes = BTreeMap::from([
            (
                "ask".to_string(),
                ModePolicy {
                    read: Allow,
                    write: Ask,
                    execute: Ask,
                },
            ),
            (
                "architect".to_string(),
                ModePolicy {
                    read: Allow,
                    write: Deny,
                    execute: Deny,
                },
            ),
            (
                "code".to_string(),
                ModePolicy {
                    read: Allow,
                    write: Allow,
                    execute: Ask,
                },
            ),
        ]);
        PermissionConfig {
            modes,
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

fn glob(pattern: &str) -> Option<GlobMatcher> {
    Glob::new(pattern).ok().map(|g| g.compile_matcher())
}

fn rule_matches(rule: &Rule, mode: &str, tool: &str, subject: Option<&str>) -> bool {
    if rule.mode.as_deref().is_some_and(|m| m != mode) {
        return false;
    }
    if !glob(&rule.tool).is_some_and(|g| g.is_match(tool)) {
        return false;
    }
    match (&rule.pattern, subject) {
        (None, _) => true,
        (Some(p), Some(s)) => p == s || glob(p).is_some_and(|g| g.is_match(s)),
        (Some(_), None) => false,
    }
}

impl PermissionConfig {
    /// Decides for `tool` (with `effect`, acting on `subject`) in `mode`.
    /// Order: a configured deny rule; a remembered "allow always"; the first
    /// other configured rule; the mode's default for the effect; ask.
    pub fn decide(
        &self,
        mode: &str,
        tool: &str,
        effect: ToolEffect,
        subject: Option<&str>,
        remembered: &[Rule],
    ) -> Decision {
        if let Some(r) = self
            .rules
            .iter()
            .find(|r| r.action == Action::Deny && rule_matches(r, mode, tool, subject))
        {
            return Decision {
                action: Action::Deny,
                because: format!("denied by the rule {}", describe(r)),
            };
        }
        if remembered
            .iter()
            .any(|r| r.action == Action::Allow && rule_matches(r, mode, tool, subject))
        {
            return Decision {
                action: Action::Allow,
                because: "allowed always for this project".into(),
            };
        }
        if let Some(r) = self.rules.iter().find(|r| rule_matches(r, mode, tool, subject)) {
            return Decision {
                action: r.action,
                because: format!("the rule {}", describe(r)),
            };
        }
        match self.modes.get(mode) {
            Some(policy) => Decision {
                action: policy.for_effect(effect),
                because: format!("{mode} mode's default for {}", effect_name(effect)),
            },
            None => Decision {
                action: Action::Ask,
                because: format!("unknown mode `{mode}`"),
            },
        }
    }

    /// False when `mode` can never run `tool`: such tools are not even offered to the model.
    pub fn offered(&self, mode: &str, tool: &str, effect: ToolEffect) -> bool {
        let mode_denies = self
            .modes
            .get(mode)
            .is_some_and(|p| p.for_effect(effect) == Action::Deny);
        let some_rule_allows = self.rules.iter().any(|r| {
            r.action != Action::Deny
                && r.mode.as_deref().is_none_or(|m| m == mode)
                && glob(&r.tool).is_some_and(|g| g.is_match(tool))
        });
        let denied_outright = self
            .rules
            .iter()
            .any(|r| r.action == Action::Deny && r.pattern.is_none() && rule_matches(r, mode, tool, None));
        !denied_outright && (!mode_denies || some_rule_allows)
    }
}

fn effect_name(effect: ToolEffect) -> &'static str {
    match effect {
        ToolEffect::Read => "reading",
        ToolEffect::Write => "writing",
        ToolEffect::Execute => "running commands",
    }
}

fn describe(r: &Rule) -> String {
    match &r.pattern {
        Some(p) => format!("`{}` on `{p}`", r.tool),
        None => format!("`{}`", r.tool),
    }
}

/// The rule an "allow always" answer adds: a command is remembered exactly,
/// file tools for the whole project.
pub fn remembered_rule(tool: &str, effect: ToolEffect, subject: Option<&str>) -> Rule {
    Rule {
        tool: tool.to_string(),
        pattern: if effect == ToolEffect::Execute {
            subject.map(str::to_string)
        } else {
            None
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

impl Remembered {
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join("permissions.json")
    }

    /// Reads the file (missing or unreadable means nothing remembered).
    pub async fn load(data_dir: &Path) -> Remembered {
        match tokio::fs::read(Self::path(data_dir)).await {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
            Err(_) => Remembered::default(),
        }
    }

    /// Adds `rule` for `root` and writes the file atomically.
    pub async fn remember(data_dir: &Path, root: &Path, rule: Rule) -> std::io::Result<()> {
        let mut all = Self::load(data_dir).await;
        let rules = all.projects.entry(root.display().to_string()).or_default();
        if !rules.contains(&rule) {
            rules.push(rule);
        }
        tokio::fs::create_dir_all(data_dir).await?;
        let tmp = data_dir.join(format!(".permissions.json.{}", std::process::id()));
        let text = serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?;
        tokio::fs::write(&tmp, text).await?;
        tokio::fs::rename(&tmp, Self::path(data_dir)).await
    }

    pub fn for_project(&self, root: &Path) -> Vec<Rule> {
        self.projects
            .get(&root.display().to_string())
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(tool: &str, pattern: Option<&str>, action: Action) -> Rule {
        Rule {
            tool: tool.into(),
            pattern: pattern.map(Into::into),
            action,
            mode: None,
        }
    }

    #[test]
    fn modes_decide_by_effect() {
        let c = PermissionConfig::default();
        assert_eq!(
            c.decide("ask", "read_file", ToolEffect::Read, Some("a"), &[]).action,
            Action::Allow
        );
        assert_eq!(
            c.decide("ask", "write_file", ToolEffect::Write, Some("a"), &[]).action,
            Action::Ask
        );
        assert_eq!(
            c.decide("code", "write_file", ToolEffect::Write, Some("a"), &[]).action,
            Action::Allow
        );
        assert_eq!(
            c.decide("architect", "bash", ToolEffect::Execute, Some("ls"), &[])
                .action,
            Action::Deny
        );
        assert_eq!(
            c.decide("nope", "read_file", ToolEffect::Read, None, &[]).action,
            Action::Ask
        );
    }

    #[test]
    fn command_patterns_and_deny_rules() {
        let c = PermissionConfig {
            rules: vec![
                rule("bash", Some("git status*"), Action::Allow),
                rule("write_file", Some("*.lock"), Action::Deny),
            ],
            ..PermissionConfig::default()
        };
        assert_eq!(
            c.decide("ask", "bash", ToolEffect::Execute, Some("git status -s"), &[])
                .action,
            Action::Allow
        );
        assert_eq!(
            c.decide("ask", "bash", ToolEffect::Execute, Some("rm -rf /"), &[])
                .action,
            Action::Ask
        );
        let d = c.decide("code", "write_file", ToolEffect::Write, Some("Cargo.lock"), &[]);
        assert_eq!(d.action, Action::Deny);
        assert_eq!(d.because, "denied by the rule `write_file` on `*.lock`");
    }

    #[test]
    fn remembered_allow_beats_the_mode_but_not_a_deny_rule() {
        let mut c = PermissionConfig::default();
        let remembered = vec![remembered_rule("write_file", ToolEffect::Write, Some("src/a.rs"))];
        assert_eq!(
            c.decide("ask", "write_file", ToolEffect::Write, Some("src/b.rs"), &remembered)
                .action,
            Action::Allow
        );
        c.rules = vec![rule("write_file", Some("*.lock"), Action::Deny)];
        assert_eq!(
            c.decide("ask", "write_file", ToolEffect::Write, Some("x.lock"), &remembered)
                .action,
            Action::Deny
        );
        let bash = vec![remembered_rule("bash", ToolEffect::Execute, Some("make test"))];
        assert_eq!(
            c.decide("ask", "bash", ToolEffect::Execute, Some("make test"), &bash)
                .action,
            Action::Allow
        );
        assert_eq!(
            c.decide("ask", "bash", ToolEffect::Execute, Some("make clean"), &bash)
                .action,
            Action::Ask
        );
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
    fn remembered_rules_survive_a_reload() {
        let dir = std::env::temp_dir().join(format!("mia-perm-test-{}", std::process::id()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            Remembered::remember(&dir, Path::new("/p"), rule("bash", Some("ls"), Action::Allow))
                .await
                .unwrap();
            Remembered::remember(&dir, Path::new("/p"), rule("bash", Some("ls"), Action::Allow))
                .await
                .unwrap();
            let r = Remembered::load(&dir).await;
            assert_eq!(
                r.for_project(Path::new("/p")),
                vec![rule("bash", Some("ls"), Action::Allow)]
            );
            assert!(r.for_project(Path::new("/q")).is_empty());
        });
        let _ = std::fs::remove_dir_all(dir);
    }
}
