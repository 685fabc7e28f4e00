//! Every `git` mia runs, run so that the repository cannot make it execute
//! anything.
//!
//! A project's `.git/config` (and `.git/info/attributes`, `.gitattributes`)
//! is hostile input: a model, a cloned repository or a script may have
//! written it. Git runs programs named there: `core.fsmonitor` on almost
//! any command that reads the work tree (`ls-files`, `status`,
//! `diff-files`), `filter.<driver>.clean` when it re-hashes a racily clean
//! file, hooks, pagers, diff drivers, credential helpers, `core.sshCommand`
//! or a remote helper when a partial clone fetches a missing object
//! lazily. [`command`] gives a `git` whose every such key is overridden at
//! command scope (which beats the repository's, the global and the system
//! config and anything they include) and whose environment forbids prompts,
//! index rewrites (so no `post-index-change` hook) and lazy fetches.
//!
//! Filter and diff drivers have names the repository chooses, so they are
//! found with `git config --get-regexp` (which executes nothing) and
//! emptied one by one: an empty `clean`/`smudge`/`process`/`command`/
//! `driver` means "no program"; a `textconv` becomes `cat` (git would try
//! to run an empty one).
//!
//! The Lua side (`lua/mia/mention_files.lua`) runs only `git ls-files`
//! (which applies no filter) with the same fixed overrides, from
//! [`FIXED`].

use std::path::Path;
use std::process::{Command, Stdio};

/// Config keys overridden on every git mia runs, with their safe values.
/// Each names a program git would otherwise run (or a way to reach one).
pub const FIXED: &[(&str, &str)] = &[
    // A command or hook run on nearly every work-tree read.
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    // Hooks (post-index-change, reference-transaction, …): nowhere.
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("core.sshCommand", "false"),
    ("core.gitProxy", ""),
    ("core.alternateRefsCommand", ""),
    ("diff.external", ""),
    ("gpg.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    // No transport at all (a partial clone's lazy fetch, `ext::` remotes).
    ("protocol.allow", "never"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
];

/// Environment set on every git mia runs: no prompt, no optional index
/// write, no lazy fetch, no pager.
pub const ENV: &[(&str, &str)] = &[
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_OPTIONAL_LOCKS", "0"),
    ("GIT_NO_LAZY_FETCH", "1"),
    ("GIT_PAGER", "cat"),
    ("GIT_ASKPASS", ""),
    ("SSH_ASKPASS", ""),
];

/// Environment variables through which mia's own environment could name a
/// program for git; removed.
const UNSET: &[&str] = &[
    "GIT_EXTERNAL_DIFF",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_CONFIG_PARAMETERS",
];

/// At most this many repository-named drivers are emptied; a config naming
/// more is not worked with at all (git is then not run).
const MAX_DRIVERS: usize = 512;

/// Why mia did not run git.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(
        "the repository's config names more than {MAX_DRIVERS} filter or diff drivers; mia does not run git in it"
    )]
    TooManyDrivers,
}

/// The base command: `git -C dir --no-pager` with [`FIXED`] and [`ENV`], stdin closed.
fn base(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir).arg("--no-pager");
    for (key, value) in FIXED {
        cmd.arg("-c").arg(format!("{key}={value}"));
    }
    for (key, value) in ENV {
        cmd.env(key, value);
    }
    for key in UNSET {
        cmd.env_remove(key);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// The config keys in `dir`'s repository that name a filter, diff or merge
/// driver program (their subsections chosen by the repository).
fn driver_keys(dir: &Path) -> Result<Vec<Vec<u8>>, GitError> {
    let out = base(dir)
        .args([
            "config",
            "-z",
            "--name-only",
            "--get-regexp",
            r"^(filter|diff|merge)\..*\.(clean|smudge|process|textconv|command|driver)$",
        ])
        .stderr(Stdio::null())
        .output();
    let Ok(out) = out else { return Ok(Vec::new()) };
    let keys: Vec<Vec<u8>> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|k| !k.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if keys.len() > MAX_DRIVERS {
        return Err(GitError::TooManyDrivers);
    }
    Ok(keys)
}

/// A `git` command in `dir` that the repository's configuration cannot make
/// execute anything (see the module doc): add the subcommand and its
/// arguments, then run it. Stdin is closed; stdout and stderr are the
/// caller's to set. Runs `git config` once to find the repository's
/// drivers.
pub fn command(dir: &Path) -> Result<Command, GitError> {
    use std::os::unix::ffi::OsStrExt;
    let keys = driver_keys(dir)?;
    let mut cmd = base(dir);
    // Given through the environment (key and value apart): a subsection may hold `=`.
    cmd.env("GIT_CONFIG_COUNT", keys.len().to_string());
    for (i, key) in keys.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), std::ffi::OsStr::from_bytes(key));
        // An empty textconv would be run as a command named ""; `cat` changes nothing.
        let value = if key.ends_with(b".textconv") { "cat" } else { "" };
        cmd.env(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn sh(dir: &Path, args: &[&str]) -> bool {
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    const FILES: [&str; 3] = ["a.txt", "b.txt", "c.txt"];

    /// Makes every file racily clean: its content must be hashed again, through its filter.
    fn touch_all(root: &Path) {
        for f in FILES {
            fs::write(root.join(f), "a\n").unwrap();
        }
    }

    /// A repository with committed files and config that runs `touch
    /// <marker>` from every place git takes a program.
    fn planted() -> Option<tempfile::TempDir> {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        if !sh(root, &["init", "-q"]) {
            eprintln!("skipped: git is not installed");
            return None;
        }
        for f in FILES {
            fs::write(root.join(f), "a\n").unwrap();
        }
        fs::write(
            root.join(".gitattributes"),
            "a.txt filter=evil diff=evil\nb.txt filter=proc\nc.txt filter=a=b\n",
        )
        .unwrap();
        assert!(sh(root, &["add", "a.txt", "b.txt", "c.txt"]));
        assert!(sh(root, &["commit", "-qm", "x"]));
        let marker = |what: &str| format!("touch '{}/PWNED-{what}'; false", root.display());
        let mut config = fs::read_to_string(root.join(".git/config")).unwrap();
        config.push_str(&format!(
            "[core]\n\tfsmonitor = \"{}\"\n\tpager = \"{}\"\n\thooksPath = hooks\n\
             [filter \"evil\"]\n\tclean = \"{}\"\n\tsmudge = \"{}\"\n\
             [filter \"a=b\"]\n\tclean = \"{}\"\n\
             [filter \"proc\"]\n\tprocess = \"{}\"\n\
             [diff \"evil\"]\n\ttextconv = \"{}\"\n\tcommand = \"{}\"\n\
             [diff]\n\texternal = \"{}\"\n",
            marker("fsmonitor"),
            marker("pager"),
            marker("clean"),
            marker("smudge"),
            marker("clean2"),
            marker("process"),
            marker("textconv"),
            marker("command"),
            marker("external"),
        ));
        fs::write(root.join(".git/config"), config).unwrap();
        fs::create_dir(root.join("hooks")).unwrap();
        let hook = root.join("hooks/post-index-change");
        fs::write(&hook, format!("#!/bin/sh\n{}\n", marker("hook"))).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
        Some(d)
    }

    fn pwned(root: &Path) -> Vec<String> {
        fs::read_dir(root)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("PWNED"))
            .collect()
    }

    #[test]
    fn the_lua_side_overrides_the_same_keys_and_sets_the_same_environment() {
        let lua = include_str!("../../../lua/mia/mention_files.lua");
        for (key, value) in FIXED {
            assert!(
                lua.contains(&format!("\"{key}={value}\",")),
                "{key} missing in mention_files.lua"
            );
        }
        for (key, value) in ENV {
            assert!(
                lua.contains(&format!("{key} = \"{value}\",")),
                "{key} missing in mention_files.lua"
            );
        }
    }

    #[test]
    fn plain_git_runs_the_planted_programs_so_the_repository_is_really_hostile() {
        let Some(d) = planted() else { return };
        let root = d.path();
        touch_all(root);
        let _ = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["status", "--short"])
            .output();
        let _ = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["log", "-p", "-1"])
            .output();
        let seen = pwned(root);
        for what in ["clean", "fsmonitor", "process", "textconv"] {
            assert!(seen.contains(&format!("PWNED-{what}")), "{what} did not run: {seen:?}");
        }
    }

    #[test]
    fn git_from_mia_runs_no_fsmonitor_filter_hook_pager_or_diff_driver_the_repository_names() {
        let Some(d) = planted() else { return };
        let root = d.path();
        for args in [
            &["status", "--short"][..],
            &["ls-files", "--cached", "--others", "--exclude-standard"],
            &["diff-files", "--name-only"],
            &["diff", "HEAD"],
            &["log", "-p", "-1"],
            &["add", "a.txt", "b.txt", "c.txt"],
            &["cat-file", "-p", "HEAD:a.txt"],
            &["rev-parse", "--show-toplevel"],
        ] {
            touch_all(root);
            let out = command(root).unwrap().args(args).output().unwrap();
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(pwned(root), Vec::<String>::new(), "after git {args:?}");
        }
    }
}
