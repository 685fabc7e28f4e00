//! Confinement of file tools to the project root.
//!
//! Every path a model passes to a file tool goes through [`resolve_in_root`],
//! which refuses paths that leave the root, whether lexically (`../x`,
//! `/etc/passwd`) or physically (a symbolic link inside the project that
//! points outside it). The check also works for paths that do not exist yet,
//! so `write_file` cannot create a file through a link that leads elsewhere.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use thiserror::Error;

/// Opens `path` for reading when it is a regular file, and gives its size.
/// Opened without blocking, then checked on the open file: a FIFO put in
/// its place (even between a check and the read) fails here rather than
/// waiting for a writer that never comes, and so does a device or socket.
pub(crate) fn open_regular(path: &Path) -> io::Result<(std::fs::File, u64)> {
    open_regular_with(path, libc::O_NONBLOCK)
}

/// [`open_regular`] that also refuses a symbolic link in `path`'s last
/// component (`O_NOFOLLOW`): checkpoints keep the project's files, never
/// what a link in the project points to (`/proc/self/environ`, `~/.ssh/…`).
pub(crate) fn open_regular_nofollow(path: &Path) -> io::Result<(std::fs::File, u64)> {
    open_regular_with(path, libc::O_NONBLOCK | libc::O_NOFOLLOW)
}

fn open_regular_with(path: &Path, flags: i32) -> io::Result<(std::fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok((file, meta.len()))
}

/// The bytes of `path` when it is a regular file ([`open_regular`]) of at
/// most `max` bytes, however it grows while it is read.
pub(crate) fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    read_opened(open_regular(path)?, max)
}

/// [`read_regular`] through [`open_regular_nofollow`].
pub(crate) fn read_regular_nofollow(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    read_opened(open_regular_nofollow(path)?, max)
}

fn read_opened((file, len): (std::fs::File, u64), max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    if len > max {
        return Err(io::Error::other(format!("{len} bytes, more than the {max} mia reads")));
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::other(format!("more than the {max} bytes mia reads")));
    }
    Ok(bytes)
}

/// How many symbolic links one resolution may follow before it is taken to be
/// a loop (the same bound Linux uses, `MAXSYMLINKS`).
const MAX_LINK_HOPS: usize = 40;

/// Why a requested path was refused. Each message is one sentence naming the
/// path, the root and what to do instead; tools hand it to the model as is.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PathError {
    /// The path names a place outside the root (`..` past it, or an absolute
    /// path elsewhere).
    #[error("`{requested}` is outside the project root {}; file tools only work inside the project", root.display())]
    OutsideRoot { requested: String, root: PathBuf },

    /// The path is inside the root by name but a symbolic link on the way
    /// leads outside it.
    #[error(
        "`{requested}` leads outside the project root {} through a symbolic link (it resolves to {}); file tools only work inside the project",
        root.display(),
        resolved.display()
    )]
    SymlinkEscape {
        requested: String,
        root: PathBuf,
        resolved: PathBuf,
    },

    /// The root itself cannot be resolved (deleted, or not readable).
    #[error("the project root {} cannot be opened ({reason}); restart mia from an existing project directory", root.display())]
    RootUnavailable { root: PathBuf, reason: String },

    /// Resolving the path failed for a reason other than "it does not exist"
    /// (a link loop, a permission problem).
    #[error("`{requested}` cannot be resolved inside the project root {} ({reason}); check the path and its symbolic links", root.display())]
    Unresolvable {
        requested: String,
        root: PathBuf,
        reason: String,
    },
}

/// One file as permission rules see it: every spelling of the same file
/// (`./a`, `a//b/../a`, an absolute path, a symbolic link to it) gives the
/// same [`CanonicalPath::subject`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalPath {
    /// Where the path really leads: every symbolic link resolved.
    pub physical: PathBuf,
    /// What rules match: `physical` relative to the root ("." for the root
    /// itself) when inside the project, else the absolute physical path.
    pub subject: String,
    /// The path as written, with `.`, `..` and duplicate slashes removed but
    /// links not followed, in the same relative-or-absolute form. Deny rules
    /// match it too, so a rule naming a link's own name still holds.
    pub lexical: String,
    /// True when the physical path is inside the project root.
    pub inside: bool,
}

/// The canonical form of `requested`, resolved against `root`. Unlike
/// [`resolve_in_root`], paths outside the project are not an error here:
/// they come back with `inside == false` so that a rule can still allow
/// them. Only an unusable root or an unresolvable path (a link loop) fails.
pub fn canonicalize(root: &Path, requested: &str) -> Result<CanonicalPath, PathError> {
    let physical_root = root.canonicalize().map_err(|e| PathError::RootUnavailable {
        root: root.to_path_buf(),
        reason: e.to_string(),
    })?;
    let asked = Path::new(requested);
    let joined = if asked.is_absolute() {
        asked.to_path_buf()
    } else {
        physical_root.join(asked)
    };
    let lexical = normalize_lexically(&joined).unwrap_or_else(|| PathBuf::from("/"));
    let physical = resolve_physically(&lexical).map_err(|e| PathError::Unresolvable {
        requested: requested.to_string(),
        root: root.to_path_buf(),
        reason: e.to_string(),
    })?;
    let inside = physical.starts_with(&physical_root);
    let relative_or_absolute = |p: &Path| -> String {
        let rel = p
            .strip_prefix(&physical_root)
            .ok()
            .or_else(|| p.strip_prefix(root).ok());
        match rel {
            Some(r) if r.as_os_str().is_empty() => ".".to_string(),
            Some(r) => r.to_string_lossy().into_owned(),
            None => p.to_string_lossy().into_owned(),
        }
    };
    Ok(CanonicalPath {
        subject: if inside {
            relative_or_absolute(&physical)
        } else {
            physical.to_string_lossy().into_owned()
        },
        lexical: relative_or_absolute(&lexical),
        physical,
        inside,
    })
}

/// Resolves `requested` against `root` and checks that it stays inside.
///
/// Relative paths are relative to `root`; absolute paths are accepted only
/// when they lead inside it. The result is the physical path: every symbolic
/// link on the way is resolved, so opening it cannot be redirected outside
/// the root by a link the check did not see. The path itself need not exist
/// (missing trailing components are kept as given), which is what
/// `write_file` needs. A root that is itself a symbolic link is fine.
pub fn resolve_in_root(root: &Path, requested: &str) -> Result<PathBuf, PathError> {
    let physical_root = root.canonicalize().map_err(|e| PathError::RootUnavailable {
        root: root.to_path_buf(),
        reason: e.to_string(),
    })?;
    let outside = || PathError::OutsideRoot {
        requested: requested.to_string(),
        root: root.to_path_buf(),
    };

    let asked = Path::new(requested);
    let lexical = if asked.is_absolute() {
        normalize_lexically(asked).ok_or_else(outside)?
    } else {
        // `..` may not climb above the root even if a later component comes back in.
        let inner = normalize_lexically(asked).ok_or_else(outside)?;
        physical_root.join(inner)
    };

    let physical = resolve_physically(&lexical).map_err(|e| PathError::Unresolvable {
        requested: requested.to_string(),
        root: root.to_path_buf(),
        reason: e.to_string(),
    })?;
    if physical.starts_with(&physical_root) {
        return Ok(physical);
    }
    if lexical.starts_with(root) || lexical.starts_with(&physical_root) {
        Err(PathError::SymlinkEscape {
            requested: requested.to_string(),
            root: root.to_path_buf(),
            resolved: physical,
        })
    } else {
        Err(outside())
    }
}

/// `path` relative to `root`, for messages and summaries ("src/a.rs"); the
/// root itself is ".". Falls back to the full path when it is elsewhere.
pub fn display_relative(root: &Path, path: &Path) -> String {
    let physical_root = root.canonicalize().ok();
    let relative = path
        .strip_prefix(root)
        .ok()
        .or_else(|| physical_root.as_deref().and_then(|r| path.strip_prefix(r).ok()));
    match relative {
        Some(r) if r.as_os_str().is_empty() => ".".to_string(),
        Some(r) => r.display().to_string(),
        None => path.display().to_string(),
    }
}

/// Removes `.` and resolves `..` by name. A relative path whose `..` climbs
/// above its start gives `None`; for absolute paths `..` stops at `/`.
fn normalize_lexically(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth > 0 {
                    out.pop();
                    depth -= 1;
                } else if !path.is_absolute() {
                    return None;
                }
            }
            Component::Normal(name) => {
                out.push(name);
                depth += 1;
            }
        }
    }
    Some(out)
}

/// Like `realpath`, but components that do not exist are kept as given
/// instead of failing. A dangling link is followed to where it points, so a
/// file created through it is checked at its real location.
fn resolve_physically(path: &Path) -> io::Result<PathBuf> {
    // Components still to visit, last one first; links push their target's.
    let mut pending: Vec<OsString> = Vec::new();
    if path.is_relative() {
        push_components(&mut pending, path);
        push_components(&mut pending, &std::env::current_dir()?);
    } else {
        push_components(&mut pending, path);
    }
    let mut out = PathBuf::from("/");
    let mut hops = 0;
    while let Some(name) = pending.pop() {
        if name == "/" {
            out = PathBuf::from("/");
            continue;
        }
        if name == ".." {
            out.pop();
            continue;
        }
        out.push(&name);
        let is_link = match std::fs::symlink_metadata(&out) {
            Ok(meta) => meta.file_type().is_symlink(),
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory => false,
            Err(e) => return Err(e),
        };
        if is_link {
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return Err(io::Error::other("too many levels of symbolic links"));
            }
            let target = std::fs::read_link(&out)?;
            out.pop();
            push_components(&mut pending, &target);
        }
    }
    Ok(out)
}

/// Pushes `path`'s components onto `pending` so that the first one is popped
/// first. The root directory is pushed as "/"; `.` is dropped.
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let names: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Prefix(_) | Component::RootDir => Some(OsString::from("/")),
            Component::CurDir => None,
            Component::ParentDir => Some(OsString::from("..")),
            Component::Normal(name) => Some(name.to_os_string()),
        })
        .collect();
    pending.extend(names.into_iter().rev());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn only_a_regular_file_is_opened_and_read_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer ever opens it: a blocking open would hang here.
        let e = open_regular(&fifo).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        // A link to a device is followed, and refused the same way.
        symlink("/dev/zero", dir.path().join("zero")).unwrap();
        assert!(read_regular(&dir.path().join("zero"), 16).is_err());
        let file = dir.path().join("f");
        fs::write(&file, b"0123456789").unwrap();
        assert_eq!(read_regular(&file, 10).unwrap(), b"0123456789");
        let e = read_regular(&file, 9).unwrap_err();
        assert_eq!(e.to_string(), "10 bytes, more than the 9 mia reads");
    }

    /// A project root (canonical, so expected paths compare equal) and a
    /// sibling directory outside it.
    struct Fixture {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let root = base.join("project");
        let outside = base.join("elsewhere");
        fs::create_dir_all(root.join("src/nested")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(root.join("src/a.rs"), "a").unwrap();
        fs::write(root.join("src/nested/b.rs"), "b").unwrap();
        fs::write(outside.join("secret"), "s").unwrap();
        Fixture {
            _tmp: tmp,
            root,
            outside,
        }
    }

    #[test]
    fn plain_relative_path_resolves_under_root() {
        let f = fixture();
        assert_eq!(resolve_in_root(&f.root, "src/a.rs").unwrap(), f.root.join("src/a.rs"));
    }

    #[test]
    fn nested_path_with_dots_that_stays_inside_is_allowed() {
        let f = fixture();
        assert_eq!(
            resolve_in_root(&f.root, "./src/nested/../nested/b.rs").unwrap(),
            f.root.join("src/nested/b.rs")
        );
        assert_eq!(resolve_in_root(&f.root, "").unwrap(), f.root);
        assert_eq!(resolve_in_root(&f.root, ".").unwrap(), f.root);
    }

    #[test]
    fn dotdot_escape_is_refused_with_a_sentence_naming_path_and_root() {
        let f = fixture();
        let err = resolve_in_root(&f.root, "../etc/passwd").unwrap_err();
        assert!(matches!(err, PathError::OutsideRoot { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "`../etc/passwd` is outside the project root {}; file tools only work inside the project",
                f.root.display()
            )
        );
        // Climbing out and back in is still an escape by name.
        assert!(resolve_in_root(&f.root, "src/../../project/src/a.rs").is_err());
    }

    #[test]
    fn absolute_path_inside_root_is_allowed_and_outside_is_refused() {
        let f = fixture();
        let inside = f.root.join("src/a.rs");
        assert_eq!(resolve_in_root(&f.root, inside.to_str().unwrap()).unwrap(), inside);
        let err = resolve_in_root(&f.root, "/etc/passwd").unwrap_err();
        assert!(matches!(err, PathError::OutsideRoot { .. }), "{err:?}");
        let sneaky = format!("{}/../elsewhere/secret", f.root.display());
        assert!(matches!(
            resolve_in_root(&f.root, &sneaky),
            Err(PathError::OutsideRoot { .. })
        ));
    }

    #[test]
    fn symlinked_file_pointing_outside_is_refused() {
        let f = fixture();
        symlink(f.outside.join("secret"), f.root.join("link")).unwrap();
        let err = resolve_in_root(&f.root, "link").unwrap_err();
        assert!(matches!(err, PathError::SymlinkEscape { .. }), "{err:?}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }

    #[test]
    fn symlinked_directory_pointing_outside_is_refused_for_existing_and_new_files() {
        let f = fixture();
        symlink(&f.outside, f.root.join("src/out")).unwrap();
        assert!(matches!(
            resolve_in_root(&f.root, "src/out/secret"),
            Err(PathError::SymlinkEscape { .. })
        ));
        assert!(matches!(
            resolve_in_root(&f.root, "src/out/new/file.txt"),
            Err(PathError::SymlinkEscape { .. })
        ));
    }

    #[test]
    fn dangling_symlink_pointing_outside_is_refused() {
        let f = fixture();
        symlink(f.outside.join("not-yet"), f.root.join("dangling")).unwrap();
        assert!(matches!(
            resolve_in_root(&f.root, "dangling"),
            Err(PathError::SymlinkEscape { .. })
        ));
    }

    #[test]
    fn symlink_staying_inside_resolves_to_its_target() {
        let f = fixture();
        symlink("src/nested", f.root.join("short")).unwrap();
        assert_eq!(
            resolve_in_root(&f.root, "short/b.rs").unwrap(),
            f.root.join("src/nested/b.rs")
        );
    }

    #[test]
    fn new_file_in_existing_directory_is_allowed() {
        let f = fixture();
        assert_eq!(
            resolve_in_root(&f.root, "src/new.rs").unwrap(),
            f.root.join("src/new.rs")
        );
    }

    #[test]
    fn new_file_in_new_directories_is_allowed() {
        let f = fixture();
        assert_eq!(
            resolve_in_root(&f.root, "docs/guide/intro.md").unwrap(),
            f.root.join("docs/guide/intro.md")
        );
    }

    #[test]
    fn root_that_is_itself_a_symlink_is_allowed() {
        let f = fixture();
        let link_root = f.root.parent().unwrap().join("project-link");
        symlink(&f.root, &link_root).unwrap();
        assert_eq!(
            resolve_in_root(&link_root, "src/a.rs").unwrap(),
            f.root.join("src/a.rs")
        );
        let via_link = format!("{}/src/a.rs", link_root.display());
        assert_eq!(resolve_in_root(&link_root, &via_link).unwrap(), f.root.join("src/a.rs"));
        assert!(resolve_in_root(&link_root, "../elsewhere/secret").is_err());
    }

    #[test]
    fn missing_root_is_reported() {
        let f = fixture();
        let err = resolve_in_root(&f.root.join("gone"), "a").unwrap_err();
        assert!(matches!(err, PathError::RootUnavailable { .. }), "{err:?}");
    }

    #[test]
    fn link_loop_is_reported_not_followed_forever() {
        let f = fixture();
        symlink("loop2", f.root.join("loop1")).unwrap();
        symlink("loop1", f.root.join("loop2")).unwrap();
        assert!(matches!(
            resolve_in_root(&f.root, "loop1/x"),
            Err(PathError::Unresolvable { .. })
        ));
    }

    #[test]
    fn every_spelling_of_a_file_has_one_canonical_subject() {
        let f = fixture();
        fs::create_dir_all(f.root.join("secrets")).unwrap();
        fs::write(f.root.join("secrets/k"), "key").unwrap();
        symlink("secrets", f.root.join("alias")).unwrap();
        let abs = format!("{}/secrets/k", f.root.display());
        let spellings = [
            "secrets/k",
            "./secrets/k",
            "secrets//k",
            "src/../secrets/k",
            "./src/nested/../../secrets/./k",
            abs.as_str(),
            "alias/k",
            "secrets/k/",
        ];
        for s in spellings {
            let c = canonicalize(&f.root, s).unwrap();
            assert_eq!(c.subject, "secrets/k", "spelling {s:?}");
            assert!(c.inside, "spelling {s:?}");
            assert_eq!(c.physical, f.root.join("secrets/k"), "spelling {s:?}");
        }
        assert_eq!(canonicalize(&f.root, "alias/k").unwrap().lexical, "alias/k");
        assert_eq!(canonicalize(&f.root, ".").unwrap().subject, ".");
    }

    #[test]
    fn paths_outside_the_root_are_absolute_and_marked_outside() {
        let f = fixture();
        let secret = f.outside.join("secret");
        let climbing = format!("../../../../../../..{}", secret.display());
        for s in ["../elsewhere/secret", climbing.as_str(), secret.to_str().unwrap()] {
            let c = canonicalize(&f.root, s).unwrap();
            assert!(!c.inside, "{s:?}");
            assert_eq!(c.subject, secret.display().to_string(), "{s:?}");
        }
        symlink(&secret, f.root.join("out")).unwrap();
        let c = canonicalize(&f.root, "out").unwrap();
        assert!(!c.inside);
        assert_eq!(c.subject, secret.display().to_string());
        assert_eq!(c.lexical, "out");
    }

    #[test]
    fn display_relative_strips_the_root() {
        let f = fixture();
        assert_eq!(display_relative(&f.root, &f.root.join("src/a.rs")), "src/a.rs");
        assert_eq!(display_relative(&f.root, &f.root), ".");
    }
}
