//! The Landlock ruleset and seccomp filter of a [`Policy`].
//!
//! Landlock only allows. Reading is allowed from `/` down, except on the
//! denied paths: a directory that holds no denied path is allowed whole; a
//! directory on the way to one is allowed to be listed (its names are not
//! secret, and `ls` or `git status` need them) and each of its entries is
//! treated the same way, the denied ones left out. Rules attach to the file
//! (the inode), not its name: a denied file renamed or reached through
//! another name stays denied. Symbolic links among the entries get no rule
//! (Landlock would follow them to their target); what they point to has its
//! own. The limit of the approach: a file created during the command
//! directly in a directory on the way to a denied path (the project root,
//! when a rule denies `secrets/k`) has no read rule until the next command.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use landlock::{
    make_bitflags, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

use crate::Policy;

/// Most rules one command gets (directories along the denied paths have
/// one rule per entry; a directory of many thousands is not worth it).
const MAX_RULES: usize = 20_000;

/// Why a ruleset or filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("Landlock refused the ruleset: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("the seccomp filter could not be built: {0}")]
    Seccomp(#[from] seccompiler::BackendError),
    #[error("the seccomp filter could not be compiled: {0}")]
    SeccompCompile(#[from] seccompiler::Error),
    #[error("more than {MAX_RULES} entries lie beside the denied paths; deny fewer paths or deeper ones")]
    TooMany,
}

fn read_access() -> BitFlags<AccessFs> {
    AccessFs::from_read(ABI::V1)
}

/// What a writable tree grants: every change, links and renames within
/// (refer), truncation. Not ioctl on devices, which stays unhandled.
fn write_access() -> BitFlags<AccessFs> {
    AccessFs::from_write(ABI::V4)
}

/// The read rules: trees readable whole, and directories only listable.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReadRules {
    pub whole: Vec<PathBuf>,
    pub list_only: Vec<PathBuf>,
}

/// Splits `/` around `deny` (absolute paths, links resolved by the caller).
/// Each lookup is a search in a sorted set: a project planted with tens of
/// thousands of files a deny glob names stays cheap (a scan of the list
/// per entry took 66 s for 30,000).
pub fn read_rules(deny: &[PathBuf]) -> Result<ReadRules, RulesError> {
    let deny: BTreeSet<&Path> = deny.iter().map(PathBuf::as_path).collect();
    let mut out = ReadRules::default();
    expand(Path::new("/"), &deny, &mut out)?;
    Ok(out)
}

/// Whether `dir` is denied or holds a denied path: paths order by their
/// components, so whatever lies below `dir` comes right after it.
fn holds_denied(deny: &BTreeSet<&Path>, dir: &Path) -> bool {
    deny.range(dir..).next().is_some_and(|d| d.starts_with(dir))
}

fn expand(dir: &Path, deny: &BTreeSet<&Path>, out: &mut ReadRules) -> Result<(), RulesError> {
    if deny.contains(dir) {
        return Ok(());
    }
    if !holds_denied(deny, dir) {
        out.whole.push(dir.to_path_buf());
        return Ok(());
    }
    out.list_only.push(dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        if out.whole.len() + out.list_only.len() > MAX_RULES {
            return Err(RulesError::TooMany);
        }
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_symlink() {
            continue;
        }
        let path = entry.path();
        if kind.is_dir() {
            expand(&path, deny, out)?;
        } else if !deny.contains(path.as_path()) {
            out.whole.push(path);
        }
    }
    Ok(())
}

/// Most entries of the writable trees [`find_inodes`] looks at.
const MAX_FIND: usize = 200_000;

/// The paths in `trees` (links not followed, denied paths not entered)
/// whose (device, inode) is one of `inodes`: a denied file or directory a
/// command renamed or hard-linked somewhere it could.
fn find_inodes(trees: &[PathBuf], inodes: &[(u64, u64)], skip: &[PathBuf]) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let wanted: std::collections::HashSet<(u64, u64)> = inodes.iter().copied().collect();
    let skip: std::collections::HashSet<&Path> = skip.iter().map(PathBuf::as_path).collect();
    let mut out = Vec::new();
    let mut seen = 0usize;
    let mut stack: Vec<PathBuf> = trees.iter().filter_map(|t| t.canonicalize().ok()).collect();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_FIND {
                return out;
            }
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if wanted.contains(&(meta.dev(), meta.ino())) {
                out.push(path);
            } else if meta.is_dir() && !skip.contains(path.as_path()) {
                stack.push(path);
            }
        }
    }
    out
}

/// The denied paths as the kernel sees them: links resolved, missing ones dropped.
pub fn resolve(deny: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = deny.iter().filter_map(|p| p.canonicalize().ok()).collect();
    out.sort();
    out.dedup();
    out
}

/// The paths to deny: the policy's, links resolved, and where the denied
/// inodes turned up in the writable trees.
pub fn denied_paths(policy: &Policy) -> Vec<PathBuf> {
    let mut deny = resolve(&policy.deny_read);
    if !policy.deny_inodes.is_empty() {
        let found = find_inodes(&policy.writable, &policy.deny_inodes, &deny);
        deny.extend(found);
    }
    deny
}

/// The Landlock ruleset of `policy`, created (an open ruleset descriptor),
/// to be applied with `restrict_self` in the child that execs the command.
/// `hidden`: mounts already cover the `deny` paths ([`crate::namespaces`]),
/// so reading is allowed from `/` whole.
pub fn landlock_ruleset(policy: &Policy, deny: &[PathBuf], hidden: bool) -> Result<RulesetCreated, RulesError> {
    let reads = if hidden {
        ReadRules {
            whole: vec![PathBuf::from("/")],
            list_only: Vec::new(),
        }
    } else {
        read_rules(deny)?
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(read_access() | write_access())?;
    if !policy.network {
        ruleset = ruleset.handle_access(AccessNet::from_all(ABI::V4))?;
    }
    // Signals to, and abstract sockets of, processes outside (ABI 6).
    ruleset = ruleset.scope(Scope::from_all(ABI::V6))?;
    let mut rules: Vec<PathBeneath<PathFd>> = Vec::new();
    let mut add = |path: &Path, access: BitFlags<AccessFs>| {
        // A path that vanished since it was listed gets no rule: fine, it is gone.
        let Ok(fd) = PathFd::new(path) else { return };
        let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
        let access = if is_dir { access } else { access & file_access() };
        if !access.is_empty() {
            rules.push(PathBeneath::new(fd, access));
        }
    };
    for p in &reads.whole {
        add(p, read_access());
    }
    for p in &reads.list_only {
        add(p, make_bitflags!(AccessFs::{ReadDir}));
    }
    for p in &policy.writable {
        add(p, write_access());
    }
    for dev in ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"] {
        add(Path::new(dev), make_bitflags!(AccessFs::{WriteFile | Truncate}));
    }
    let created = ruleset
        .create()?
        .add_rules(rules.into_iter().map(Ok::<_, landlock::RulesetError>))?;
    Ok(created)
}

/// The rights that make sense on a file (not a directory).
fn file_access() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{Execute | ReadFile | WriteFile | Truncate})
}

/// The seccomp filter while the network is off: `socket()` of any family
/// but Unix and netlink, and io_uring, fail with EACCES.
pub fn seccomp_filter() -> Result<BpfProgram, RulesError> {
    let other_family = SeccompRule::new(vec![
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?,
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, libc::AF_NETLINK as u64)?,
    ])?;
    let rules = [
        (libc::SYS_socket, vec![other_family]),
        (libc::SYS_io_uring_setup, vec![]),
    ]
    .into_iter()
    .collect();
    let arch = std::env::consts::ARCH.try_into().map_err(seccompiler::Error::Backend)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )?;
    Ok(filter.try_into()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_path_is_left_out_and_its_siblings_and_parents_listable() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        std::fs::write(root.join("secrets/k"), "key").unwrap();
        std::fs::write(root.join("secrets/other"), "x").unwrap();
        std::fs::write(root.join("a.txt"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("secrets"), root.join("link")).unwrap();
        let rules = read_rules(&[root.join("secrets/k")]).unwrap();
        assert!(rules.whole.contains(&root.join("secrets/other")));
        assert!(rules.whole.contains(&root.join("a.txt")));
        assert!(!rules.whole.iter().any(|p| p.starts_with(root.join("secrets/k"))));
        assert!(
            !rules.whole.contains(&root.join("link")),
            "a link gets no rule of its own"
        );
        assert!(rules.list_only.contains(&root) && rules.list_only.contains(&root.join("secrets")));
        assert!(rules.list_only.contains(&PathBuf::from("/")));
        assert!(!rules.whole.contains(&PathBuf::from("/")));
    }

    #[test]
    fn a_directory_of_more_entries_than_rules_allowed_is_refused_not_walked_whole() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for i in 0..MAX_RULES + 10 {
            std::fs::write(root.join(format!("f{i}")), "").unwrap();
        }
        let deny = [root.join("f1")];
        assert!(matches!(read_rules(&deny), Err(RulesError::TooMany)));
        // The same directory holding no denied path is one rule.
        let rules = read_rules(&[PathBuf::from("/nonexistent-mia-test/x")]).unwrap();
        assert!(rules.whole.contains(&root) || rules.whole.iter().any(|w| root.starts_with(w)));
    }

    #[test]
    fn only_what_lies_below_a_directory_counts_as_held_by_it() {
        let deny = [PathBuf::from("/p/secrets/k"), PathBuf::from("/p/z")];
        let set: BTreeSet<&Path> = deny.iter().map(PathBuf::as_path).collect();
        assert!(holds_denied(&set, Path::new("/p")));
        assert!(holds_denied(&set, Path::new("/p/secrets")));
        assert!(
            !holds_denied(&set, Path::new("/p/sec")),
            "a name's prefix is not a parent"
        );
        assert!(!holds_denied(&set, Path::new("/p/secrets2")));
        assert!(!holds_denied(&set, Path::new("/q")));
        assert!(holds_denied(&set, Path::new("/")));
    }
}
