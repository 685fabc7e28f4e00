//! Whether and how the commands a model runs are sandboxed
//! (`setup({ sandbox = … })`, issue 48): the mechanism is `mia-sandbox`'s;
//! this module turns the options, the permission rules and the session into
//! its [`Policy`], and says what to do where the platform has no sandbox.
//!
//! What runs confined: the `bash` tool, external agents' `terminal/create`
//! commands, MCP stdio servers configured with `sandbox = true`. Lua tools
//! run inside Neovim and are not confined.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

pub use mia_sandbox::Policy;

/// `sandbox.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Sandboxed where the platform can; elsewhere as before, said once per chat.
    #[default]
    Auto,
    /// Never unsandboxed: a command is refused where the sandbox cannot run.
    On,
    /// Commands run as the user, unconfined.
    Off,
}

/// `setup({ sandbox = { mode, network, writable, readable_deny } })`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// True: commands may use the network (all of it: Landlock and seccomp
    /// cannot tell hosts apart).
    pub network: bool,
    /// More trees commands may write, besides the project root and the
    /// session's temporary directory (`~` is the home directory).
    #[serde(deserialize_with = "crate::config::vec_of")]
    pub writable: Vec<String>,
    /// More paths no command may read, besides the deny rules' and the
    /// default credentials (`~` is the home directory; relative paths are in
    /// the project).
    #[serde(deserialize_with = "crate::config::vec_of")]
    pub readable_deny: Vec<String>,
}

/// What a confined command needs besides the options: who runs it, where,
/// and what the rules deny. Built per tool round, cheap to clone.
#[derive(Clone)]
pub struct SandboxSetup {
    pub config: SandboxConfig,
    /// mia's data directory (the store, remembered permissions): never readable inside.
    pub data_dir: Option<PathBuf>,
    /// Paths (absolute, or relative to the project) the permission rules deny reading.
    pub rule_denied: Vec<String>,
    /// Globs (relative to the project) the permission rules deny reading.
    pub rule_hidden: Option<crate::tools::PathFilter>,
    pub session_id: String,
    /// What the sandbox remembers of the session (the App's).
    pub memory: Arc<SandboxMemory>,
}

impl std::fmt::Debug for SandboxSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxSetup")
            .field("config", &self.config)
            .field("rule_denied", &self.rule_denied)
            .finish_non_exhaustive()
    }
}

/// What to do with one command.
#[derive(Debug)]
pub enum Plan {
    /// Run it as `helper` with `policy`, the command after it; `tmp` is TMPDIR.
    Confined {
        helper: PathBuf,
        policy: Policy,
        tmp: PathBuf,
    },
    /// Run it as before (mode `off`, or `auto` without support: `note` says
    /// why, for the once-per-chat message).
    Unconfined { note: Option<String> },
    /// Do not run it (mode `on` without support): the message for the model and the user.
    Refused(String),
}

/// What the platform lacks for the sandbox, if anything (probed once per process).
pub fn missing() -> Option<String> {
    static MISSING: OnceLock<Option<String>> = OnceLock::new();
    MISSING
        .get_or_init(|| {
            if let Some(why) = mia_sandbox::Support::probe().missing() {
                return Some(why);
            }
            match mia_sandbox::helper_beside() {
                Some(_) => None,
                None => Some(
                    "mia-acp, which supervises sandboxed commands, is not beside mia's library (`:Mia install` or `cargo build --release` puts it there)"
                        .to_string(),
                ),
            }
        })
        .clone()
}

/// Whether commands run sandboxed under `config` on this system.
pub fn in_force(config: &SandboxConfig) -> bool {
    config.mode != SandboxMode::Off && missing().is_none()
}

/// Decides how a command runs in `root` under `setup`.
pub fn plan(setup: &SandboxSetup, root: &Path, grace_ms: u64) -> Plan {
    if setup.config.mode == SandboxMode::Off {
        return Plan::Unconfined { note: None };
    }
    let helper = match (missing(), mia_sandbox::helper_beside()) {
        (None, Some(h)) => h,
        (why, _) => {
            let why = why.unwrap_or_else(|| "mia-acp is not beside mia's library".into());
            return match setup.config.mode {
                SandboxMode::On => Plan::Refused(format!(
                    "mia did not run this command: sandbox.mode is \"on\" but commands cannot be sandboxed here: {why}. \
                     Ask the user to fix that or to set sandbox.mode = \"auto\" (see :h mia-sandbox)"
                )),
                _ => Plan::Unconfined {
                    note: Some(format!("commands are not sandboxed: {why} (see :h mia-sandbox)")),
                },
            };
        }
    };
    let tmp = match setup.memory.session_tmp(&setup.session_id) {
        Ok(t) => t,
        Err(e) => {
            return Plan::Refused(format!(
                "mia did not run this command: the sandbox's temporary directory could not be made ({e})"
            ))
        }
    };
    let home = home();
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(".config"));
    let mut writable = vec![root.to_path_buf(), tmp.clone()];
    writable.extend(setup.config.writable.iter().map(|p| expand(p, &home, root)));
    let mut extra: Vec<PathBuf> = setup.data_dir.iter().cloned().collect();
    extra.extend(setup.config.readable_deny.iter().map(|p| expand(p, &home, root)));
    extra.extend(setup.rule_denied.iter().map(|p| expand(p, &home, root)));
    if let Some(hidden) = &setup.rule_hidden {
        extra.extend(hidden_in_project(root, hidden));
    }
    let root_real = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut deny_read = mia_sandbox::default_denied_reads(&home, &config_home, &[]);
    // The project the user opened stays readable even where a default
    // credential path holds it (a project inside ~/.config/nvim, say).
    deny_read.retain(|d| {
        let d = d.canonicalize().unwrap_or_else(|_| d.clone());
        !root_real.starts_with(&d)
    });
    deny_read.extend(extra);
    let deny_inodes = setup.memory.remember_inodes(&setup.session_id, &deny_read, &writable);
    Plan::Confined {
        helper,
        policy: Policy {
            writable,
            deny_read,
            deny_inodes,
            network: setup.config.network,
            grace_ms,
        },
        tmp,
    }
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/nonexistent"))
}

/// `~/x` under the home directory, a relative path in the project.
fn expand(p: &str, home: &Path, root: &Path) -> PathBuf {
    if p == "~" {
        return home.to_path_buf();
    }
    if let Some(rest) = p.strip_prefix("~/") {
        return home.join(rest);
    }
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    }
}

/// Most project entries looked at for deny rules' globs per command.
const MAX_WALK: usize = 100_000;

/// The project's paths a deny rule's glob hides (a directory hidden whole
/// is not descended into); the walk stops after [`MAX_WALK`] entries.
fn hidden_in_project(root: &Path, hidden: &crate::tools::PathFilter) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    let mut seen = 0usize;
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK {
                return out;
            }
            let rel_path = rel.join(entry.file_name());
            let text = rel_path.to_string_lossy();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if hidden(&text) || (is_dir && hidden(&format!("{text}/"))) {
                out.push(root.join(&rel_path));
            } else if is_dir {
                stack.push(rel_path);
            }
        }
    }
    out
}

/// Most denied inodes a session remembers.
const MAX_REMEMBERED_INODES: usize = 20_000;

/// What the sandbox remembers for each session: the denied inodes it saw,
/// the session's private temporary directory, and whether the "commands are
/// not sandboxed" note was said. Owned by the [`crate::app::App`] (one per
/// front-end) and shared by everything that runs commands for it; an MCP
/// server's start has its own.
#[derive(Debug, Default)]
pub struct SandboxMemory {
    inodes: Mutex<HashMap<String, Vec<(u64, u64)>>>,
    dirs: Mutex<HashMap<String, PathBuf>>,
    said: Mutex<HashSet<String>>,
}

impl SandboxMemory {
    /// The inodes of the denied paths inside the writable trees (the only
    /// places a command could rename or link them from), added to what the
    /// session saw before: a denied file a command renamed stays denied in the
    /// next command, wherever in the writable trees it went.
    fn remember_inodes(&self, session_id: &str, deny: &[PathBuf], writable: &[PathBuf]) -> Vec<(u64, u64)> {
        let writable: Vec<PathBuf> = writable.iter().filter_map(|w| w.canonicalize().ok()).collect();
        let inside: Vec<PathBuf> = deny
            .iter()
            .filter_map(|d| d.canonicalize().ok())
            .filter(|d| writable.iter().any(|w| d.starts_with(w)))
            .collect();
        let now = mia_sandbox::inodes_under(&inside);
        let mut seen = self.inodes.lock().unwrap_or_else(|e| e.into_inner());
        let known = seen.entry(session_id.to_string()).or_default();
        known.extend(now);
        known.sort_unstable();
        known.dedup();
        known.truncate(MAX_REMEMBERED_INODES);
        known.clone()
    }

    /// The session's private temporary directory (mode 0700, made once per
    /// session): commands may write there, and TMPDIR names it.
    pub fn session_tmp(&self, session_id: &str) -> std::io::Result<PathBuf> {
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = dirs.get(session_id) {
            if d.is_dir() {
                return Ok(d.clone());
            }
        }
        let tag: String = session_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(32)
            .collect();
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let dir = std::env::temp_dir().join(format!(
            "mia-sandbox-{uid}-{}-{:016x}",
            if tag.is_empty() { "none" } else { &tag },
            fastrand::u64(..)
        ));
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        dirs.insert(session_id.to_string(), dir.clone());
        Ok(dir)
    }

    /// True the first time it is asked for `session_id`: the "commands are
    /// not sandboxed" message is said once per chat.
    pub fn first_note(&self, session_id: &str) -> bool {
        self.said
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session_id.to_string())
    }
}

/// What a failed sandboxed command's result adds for the model, when its
/// output looks like the sandbox refused something.
pub fn refusal_note(output: &str, policy: &Policy) -> Option<String> {
    if !mia_sandbox::looks_refused(output) {
        return None;
    }
    let writable: Vec<String> = policy.writable.iter().map(|p| p.display().to_string()).collect();
    let network = if policy.network {
        ""
    } else {
        " and it has no network (sandbox.network is off)"
    };
    Some(format!(
        "(this command ran in mia's sandbox: it may write only under {}; credentials and the paths deny rules name cannot be read{network}. \
         If the failure above comes from that, say so to the user; to run this exact command outside the sandbox, call bash again \
         with the same command and \"outside_sandbox\": true: the user is asked first.)",
        writable.join(", ")
    ))
}

/// A shareable setup (the tool context holds one).
pub type SharedSetup = Arc<SandboxSetup>;

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(config: SandboxConfig) -> SandboxSetup {
        SandboxSetup {
            config,
            data_dir: Some(PathBuf::from("/data/mia")),
            rule_denied: vec!["secrets/k".into(), "/etc/abs".into()],
            rule_hidden: None,
            session_id: "unit-test".into(),
            memory: Arc::default(),
        }
    }

    #[test]
    fn mode_off_runs_unconfined_without_a_note() {
        let s = setup(SandboxConfig {
            mode: SandboxMode::Off,
            ..Default::default()
        });
        assert!(matches!(
            plan(&s, Path::new("/tmp"), 10),
            Plan::Unconfined { note: None }
        ));
    }

    #[test]
    fn the_policy_writes_the_project_and_a_private_tmp_and_denies_rules_data_and_credentials() {
        if missing().is_some() {
            eprintln!("skipped: no sandbox here ({:?})", missing());
            return;
        }
        let project = tempfile::tempdir().unwrap();
        let s = setup(SandboxConfig {
            writable: vec!["~/.cache".into(), "build".into()],
            readable_deny: vec!["~/.extra".into()],
            ..Default::default()
        });
        let Plan::Confined { policy, tmp, .. } = plan(&s, project.path(), 10) else {
            panic!("not confined")
        };
        let home = home();
        assert_eq!(policy.writable[0], project.path());
        assert_eq!(policy.writable[1], tmp);
        assert!(
            policy.writable.contains(&home.join(".cache")) && policy.writable.contains(&project.path().join("build"))
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&tmp).unwrap().permissions().mode() & 0o777, 0o700);
        for denied in [
            project.path().join("secrets/k"),
            PathBuf::from("/etc/abs"),
            PathBuf::from("/data/mia"),
            home.join(".ssh"),
            home.join(".extra"),
        ] {
            assert!(
                policy.deny_read.contains(&denied),
                "{denied:?} in {:?}",
                policy.deny_read
            );
        }
        assert!(!policy.network && policy.grace_ms == 10);
        // The same session keeps its temporary directory.
        let Plan::Confined { tmp: again, .. } = plan(&s, project.path(), 10) else {
            panic!("not confined")
        };
        assert_eq!(again, tmp);
    }

    #[test]
    fn a_refusal_note_needs_a_refusal_in_the_output() {
        let policy = Policy::default();
        assert!(refusal_note("cat: x: Permission denied", &policy).is_some_and(|n| n.contains("outside_sandbox")));
        assert!(refusal_note("error: tests failed", &policy).is_none());
    }
}
