//! Atomic file replacement for `write_file` and `edit_file`: the new content
//! goes to a temporary file beside the target, which is then renamed over it.
//! Readers (Neovim, a compiler, a file watcher) see either the old file or the
//! new one, never half of it, and a failed write leaves the old file intact.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes temporary files of concurrent writes within this process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `content` to `path` atomically, creating missing parent
/// directories. An existing file keeps its permission bits (a script stays
/// executable). Returns whether the file already existed.
pub(crate) fn write_atomically(path: &Path, content: &[u8]) -> io::Result<bool> {
    write_with(path, content, true)
}

/// As [`write_atomically`], without waiting for the data to reach the disk:
/// for checkpoint snapshots, which are checked against their content name
/// when read back (a crash right after one shows as a damaged snapshot,
/// never as a wrong restore), and of which a command's scan writes many.
pub(crate) fn write_atomically_unsynced(path: &Path, content: &[u8]) -> io::Result<bool> {
    write_with(path, content, false)
}

fn write_with(path: &Path, content: &[u8], sync: bool) -> io::Result<bool> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no parent directory"))?;
    fs::create_dir_all(dir)?;
    let existing = match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(io::Error::new(io::ErrorKind::IsADirectory, "it is a directory"));
        }
        Ok(meta) => Some(meta.permissions()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };

    let (tmp_path, mut file) = create_temp_beside(dir, path)?;
    let written = (|| {
        file.write_all(content)?;
        if let Some(permissions) = &existing {
            file.set_permissions(permissions.clone())?;
        }
        if sync {
            file.sync_data()?;
        }
        drop(file);
        fs::rename(&tmp_path, path)
    })();
    if let Err(e) = written {
        // Best effort: the write already failed, and a leftover temp file is
        // only clutter.
        let _ = fs::remove_file(&tmp_path);
        return Err(e);
    }
    Ok(existing.is_some())
}

/// Creates a new, empty, hidden file in `dir` named after `target`.
fn create_temp_beside(dir: &Path, target: &Path) -> io::Result<(PathBuf, File)> {
    let stem = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let candidate = dir.join(format!(".{stem}.mia-{}-{n}.tmp", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&candidate) {
            Ok(file) => return Ok((candidate, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn overwrite_keeps_permissions_and_leaves_no_temp_file() {
        let tmp = tempfile::tempdir().unwrap();
        let script = tmp.path().join("run.sh");
        fs::write(&script, "old").unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(write_atomically(&script, b"new").unwrap());
        assert_eq!(fs::read_to_string(&script).unwrap(), "new");
        assert_eq!(fs::metadata(&script).unwrap().permissions().mode() & 0o777, 0o755);
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn writing_over_a_directory_fails_and_leaves_no_temp_file() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("d")).unwrap();
        assert!(write_atomically(&tmp.path().join("d"), b"x").is_err());
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 1);
    }
}
