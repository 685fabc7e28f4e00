//! What a sandboxed command may do, and how that travels to the supervisor:
//! as arguments (paths are bytes, and argv carries any byte but NUL).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The first argument of mia-acp run as the supervisor.
pub const RUN_FLAG: &str = "--sandbox-run";

/// What a confined command may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Trees the command may write (create, change, remove, link and rename
    /// within): the project root, the session's temporary directory,
    /// `sandbox.writable`. Absolute.
    pub writable: Vec<PathBuf>,
    /// Files and trees no program inside may read (deny rules,
    /// `sandbox.readable_deny`, [`default_denied_reads`]). Absolute; missing
    /// ones are skipped.
    pub deny_read: Vec<PathBuf>,
    /// The files and directories (device, inode) of the denied paths as
    /// earlier commands saw them: wherever one is found in a writable tree
    /// (renamed or hard-linked there), it is denied too.
    pub deny_inodes: Vec<(u64, u64)>,
    /// False: no TCP (Landlock, ABI 4+) and no socket but Unix and netlink (seccomp).
    pub network: bool,
    /// How long descendants get between SIGTERM and SIGKILL when the
    /// supervisor is told to stop.
    pub grace_ms: u64,
}

/// Arguments the supervisor cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("`{0}` needs a value")]
    MissingValue(String),
    #[error("unknown argument `{0}`")]
    Unknown(String),
    #[error("`{0}` is not an absolute path")]
    Relative(String),
    #[error("no command after `--`")]
    NoCommand,
    #[error("`--deny-inode` must be DEVICE:INODE (got `{0}`)")]
    Inode(String),
    #[error("`--grace-ms` must be a whole number (got `{0}`)")]
    Grace(String),
}

impl Policy {
    /// The supervisor's arguments for this policy, up to and including
    /// `--`, after which the command's own program and arguments go.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![RUN_FLAG.into()];
        for p in &self.writable {
            out.push("--write".into());
            out.push(p.clone().into_os_string());
        }
        for p in &self.deny_read {
            out.push("--deny-read".into());
            out.push(p.clone().into_os_string());
        }
        for (dev, ino) in &self.deny_inodes {
            out.push("--deny-inode".into());
            out.push(format!("{dev}:{ino}").into());
        }
        if self.network {
            out.push("--network".into());
        }
        out.push("--grace-ms".into());
        out.push(self.grace_ms.to_string().into());
        out.push("--".into());
        out
    }

    /// The program and arguments that run `program args…` under `helper`
    /// (mia-acp) with this policy.
    pub fn command_line(&self, helper: &Path, program: &OsStr, args: &[OsString]) -> (OsString, Vec<OsString>) {
        let mut all = self.to_args();
        all.push(program.to_os_string());
        all.extend(args.iter().cloned());
        (helper.as_os_str().to_os_string(), all)
    }

    /// Reads the arguments after [`RUN_FLAG`]: the policy and the command.
    pub fn from_args(args: Vec<OsString>) -> Result<(Policy, Vec<OsString>), PolicyError> {
        let mut policy = Policy {
            grace_ms: 2_000,
            ..Policy::default()
        };
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let text = arg.to_string_lossy().into_owned();
            let mut value = |name: &str| it.next().ok_or_else(|| PolicyError::MissingValue(name.to_string()));
            match text.as_str() {
                "--write" | "--deny-read" => {
                    let v = PathBuf::from(value(&text)?);
                    if !v.is_absolute() {
                        return Err(PolicyError::Relative(v.display().to_string()));
                    }
                    if text == "--write" {
                        policy.writable.push(v);
                    } else {
                        policy.deny_read.push(v);
                    }
                }
                "--deny-inode" => {
                    let v = value(&text)?;
                    let s = v.to_string_lossy();
                    let parsed = s
                        .split_once(':')
                        .and_then(|(d, i)| Some((d.parse().ok()?, i.parse().ok()?)));
                    policy
                        .deny_inodes
                        .push(parsed.ok_or_else(|| PolicyError::Inode(s.into_owned()))?);
                }
                "--network" => policy.network = true,
                "--grace-ms" => {
                    let v = value(&text)?;
                    let s = v.to_string_lossy();
                    policy.grace_ms = s.parse().map_err(|_| PolicyError::Grace(s.into_owned()))?;
                }
                "--" => {
                    let command: Vec<OsString> = it.collect();
                    if command.is_empty() {
                        return Err(PolicyError::NoCommand);
                    }
                    return Ok((policy, command));
                }
                _ => return Err(PolicyError::Unknown(text)),
            }
        }
        Err(PolicyError::NoCommand)
    }
}

/// Most entries [`inodes_under`] looks at per path.
const MAX_INODES_PER_PATH: usize = 10_000;

/// The (device, inode) of each path and of everything under it (links not
/// followed, at most 10,000 entries per path): what the denied paths are,
/// whatever they are renamed or linked to later.
pub fn inodes_under(paths: &[PathBuf]) -> Vec<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for root in paths {
        let mut stack = vec![root.clone()];
        let mut seen = 0usize;
        while let Some(p) = stack.pop() {
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            seen += 1;
            if seen > MAX_INODES_PER_PATH {
                break;
            }
            out.push((meta.dev(), meta.ino()));
            if meta.is_dir() {
                if let Ok(entries) = std::fs::read_dir(&p) {
                    stack.extend(entries.flatten().map(|e| e.path()));
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Credentials no sandboxed command may read, whatever the rules say: keys
/// of ssh, gpg, cloud and package registry CLIs, git's stored passwords,
/// and mia's own files that may hold keys or transcripts (Neovim's config,
/// where `setup()` may carry an `api_key`, and `extra`: mia's data
/// directory, mia-acp's config file). Relative entries are under `home`.
pub fn default_denied_reads(home: &Path, config_home: &Path, extra: &[PathBuf]) -> Vec<PathBuf> {
    const IN_HOME: [&str; 24] = [
        ".ssh",
        ".gnupg",
        ".aws",
        ".azure",
        ".kube",
        ".docker",
        ".oci",
        ".netrc",
        ".git-credentials",
        ".npmrc",
        ".pypirc",
        ".gem/credentials",
        ".cargo/credentials",
        ".cargo/credentials.toml",
        ".vault-token",
        ".terraform.d/credentials.tfrc.json",
        ".password-store",
        ".local/share/keyrings",
        ".mozilla",
        ".config/google-chrome",
        ".config/chromium",
        ".pgpass",
        ".my.cnf",
        ".authinfo.gpg",
    ];
    const IN_CONFIG: [&str; 7] = ["gcloud", "gh", "hub", "doctl", "op", "rclone", "nvim"];
    let mut out: Vec<PathBuf> = IN_HOME.iter().map(|p| home.join(p)).collect();
    out.extend(IN_CONFIG.iter().map(|p| config_home.join(p)));
    out.extend(extra.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn a_policy_survives_its_arguments_even_with_non_utf8_paths() {
        let odd = PathBuf::from(OsString::from_vec(b"/tmp/\xffodd".to_vec()));
        let policy = Policy {
            writable: vec![PathBuf::from("/p"), odd.clone()],
            deny_read: vec![PathBuf::from("/p/secrets")],
            deny_inodes: vec![(1, 2), (3, 4)],
            network: true,
            grace_ms: 7,
        };
        let mut args = policy.to_args();
        args.remove(0);
        args.push("bash".into());
        args.push("-c".into());
        let (back, command) = Policy::from_args(args).unwrap();
        assert_eq!(back, policy);
        assert_eq!(command, vec![OsString::from("bash"), OsString::from("-c")]);
    }

    #[test]
    fn bad_arguments_are_named() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            Policy::from_args(args(&["--write", "rel", "--", "x"])),
            Err(PolicyError::Relative("rel".into()))
        );
        assert_eq!(
            Policy::from_args(args(&["--write"])),
            Err(PolicyError::MissingValue("--write".into()))
        );
        assert_eq!(Policy::from_args(args(&["--"])), Err(PolicyError::NoCommand));
        assert_eq!(
            Policy::from_args(args(&["--nope"])),
            Err(PolicyError::Unknown("--nope".into()))
        );
    }
}
