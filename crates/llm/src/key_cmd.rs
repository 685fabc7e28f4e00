//! `api_key_cmd`: a provider key printed by a program the user names, such
//! as a password manager (`{ "pass", "show", "openai" }`).
//!
//! The program runs on the runtime, never on Neovim's main thread. What it
//! prints is the key: the first line, trimmed. It is never logged, and an
//! error says only how the program failed (not found, its exit status,
//! nothing printed, too slow), never what it wrote. Callers cache the key
//! for the process and run the program again only when the provider refuses
//! the key (see [`crate::providers::Providers::keyed`]).
//!
//! The program and its arguments are the user's own configuration; where it
//! runs is not trusted. So it starts in the user's home directory (not the
//! project's, whose files may be planted: a `.envrc`, a config the program
//! reads from its working directory), is looked up only in PATH's absolute
//! directories (a `.` in PATH cannot make a project file run), has stdin
//! closed and stderr dropped, does not inherit the variables mia reads
//! other keys from ([`crate::secret_env`]), and is bounded in time
//! ([`TIMEOUT`]) and output ([`MAX_OUTPUT`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

/// Longest a key command may run (a password manager may ask for a
/// passphrase through its own agent first).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Most bytes read from a key command's output.
pub const MAX_OUTPUT: u64 = 64 * 1024;

/// Why a key command gave no key. Its text never holds the program's output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyCmdError {
    #[error("api_key_cmd is empty: give the program and its arguments, e.g. {{ \"pass\", \"show\", \"openai\" }}")]
    Empty,
    #[error("`{0}` was not found in PATH's absolute directories")]
    NotFound(String),
    #[error("`{program}` could not start: {why}")]
    Start { program: String, why: String },
    #[error("`{program}` exited with {status} and no key")]
    Failed { program: String, status: String },
    #[error("`{0}` printed no key on its first line")]
    NoKey(String),
    #[error("`{0}` printed more than 64 KiB: that is not a key")]
    TooLong(String),
    #[error("`{0}` did not finish within 30 s")]
    TimedOut(String),
}

/// `program` as a path to run: itself when it names a path (it has a `/`),
/// else the first executable file of that name in PATH's absolute directories.
fn find_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where the program starts: the user's home directory, else `/`.
fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h.is_dir())
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// Runs `argv` (see the module doc) and returns the first line it printed, trimmed.
pub async fn run(argv: &[String]) -> Result<String, KeyCmdError> {
    let Some((program, args)) = argv.split_first().filter(|(p, _)| !p.is_empty()) else {
        return Err(KeyCmdError::Empty);
    };
    let path = find_program(program).ok_or_else(|| KeyCmdError::NotFound(program.clone()))?;
    let mut cmd = tokio::process::Command::new(&path);
    cmd.args(args)
        .current_dir(home())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    for name in crate::secret_env::names() {
        cmd.env_remove(name);
    }
    let mut child = cmd.spawn().map_err(|e| KeyCmdError::Start {
        program: program.clone(),
        why: e.kind().to_string(),
    })?;
    let Some(stdout) = child.stdout.take() else {
        return Err(KeyCmdError::NoKey(program.clone()));
    };
    let work = async {
        let mut out = Vec::new();
        let read = stdout.take(MAX_OUTPUT + 1).read_to_end(&mut out).await;
        let status = child.wait().await;
        (read, status, out)
    };
    let (read, status, out) = tokio::time::timeout(TIMEOUT, work)
        .await
        .map_err(|_| KeyCmdError::TimedOut(program.clone()))?;
    if out.len() as u64 > MAX_OUTPUT {
        return Err(KeyCmdError::TooLong(program.clone()));
    }
    let status = status.map_err(|e| KeyCmdError::Start {
        program: program.clone(),
        why: e.kind().to_string(),
    })?;
    if !status.success() {
        return Err(KeyCmdError::Failed {
            program: program.clone(),
            status: status.to_string(),
        });
    }
    if read.is_err() {
        return Err(KeyCmdError::NoKey(program.clone()));
    }
    let text = String::from_utf8_lossy(&out);
    let key = text.lines().next().unwrap_or("").trim();
    if key.is_empty() {
        return Err(KeyCmdError::NoKey(program.clone()));
    }
    Ok(key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[tokio::test]
    async fn the_first_line_trimmed_is_the_key() {
        let key = run(&argv(&["printf", "  sk-one \\nmetadata: x\\n"])).await;
        assert_eq!(key, Ok("sk-one".to_string()));
    }

    #[tokio::test]
    async fn failures_name_the_program_never_its_output() {
        let e = run(&argv(&["sh", "-c", "echo sk-secret; exit 3"])).await.unwrap_err();
        assert!(matches!(e, KeyCmdError::Failed { .. }), "{e}");
        assert!(!e.to_string().contains("sk-secret"), "{e}");
        assert_eq!(run(&argv(&["true"])).await, Err(KeyCmdError::NoKey("true".into())));
        assert_eq!(run(&[]).await, Err(KeyCmdError::Empty));
        assert!(matches!(
            run(&argv(&["mia-no-such-program-xyz"])).await,
            Err(KeyCmdError::NotFound(_))
        ));
    }
}
