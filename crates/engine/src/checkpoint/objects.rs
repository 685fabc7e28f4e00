//! Content-addressed snapshots: a file's bytes stored once under the
//! SHA-256 of its content, whatever session or path they came from.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

/// A blob of the repository holding `path` (`git cat-file`, which checks it).
fn git_blob(blob: &str, path: &std::path::Path) -> io::Result<Vec<u8>> {
    if !(blob.len() == 40 || blob.len() == 64) || !blob.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a git blob id"));
    }
    let dir = path.parent().unwrap_or(path);
    // The file's directory may be gone (the command removed it): the nearest existing one.
    let dir = dir.ancestors().find(|d| d.is_dir()).unwrap_or(dir);
    let out = crate::git::command(dir)
        .map_err(io::Error::other)?
        .args(["cat-file", "blob", blob])
        .stderr(std::process::Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "git no longer has the file's blob",
        ));
    }
    Ok(out.stdout)
}

/// The object directory (`checkpoints/objects`).
#[derive(Debug, Clone)]
pub struct Objects {
    dir: PathBuf,
}

/// The hex SHA-256 of `bytes`.
pub fn name_of(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest.iter() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn valid_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl Objects {
    pub fn new(dir: PathBuf) -> Objects {
        Objects { dir }
    }

    fn path(&self, name: &str) -> Option<PathBuf> {
        valid_name(name).then(|| self.dir.join(&name[..2]).join(&name[2..]))
    }

    /// Stores `bytes` (once) and returns their name. An object already there
    /// gets a fresh time, so pruning by age keeps what is still in use.
    pub fn put(&self, bytes: &[u8]) -> io::Result<String> {
        let name = name_of(bytes);
        let path = self.path(&name).ok_or_else(|| io::Error::other("bad object name"))?;
        match fs::OpenOptions::new().write(true).open(&path) {
            Ok(file) => {
                let _ = file.set_modified(SystemTime::now());
                return Ok(name);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        crate::tools::atomic_write_unsynced(&path, bytes)?;
        Ok(name)
    }

    /// The bytes stored under `name`, checked against it; `git:<blob>`
    /// names are read from the repository that holds `path`.
    pub fn get(&self, name: &str, path: &std::path::Path) -> io::Result<Vec<u8>> {
        if let Some(blob) = name.strip_prefix("git:") {
            return git_blob(blob, path);
        }
        let path = self
            .path(name)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an object name"))?;
        let bytes = fs::read(path)?;
        if name_of(&bytes) != name {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the snapshot is damaged"));
        }
        Ok(bytes)
    }

    /// The size of every object together (what `max_bytes` bounds).
    pub fn total_bytes(&self) -> u64 {
        self.all().iter().map(|o| o.2).sum()
    }

    /// Every object: (name, path, size, time).
    pub fn all(&self) -> Vec<(String, PathBuf, u64, SystemTime)> {
        let mut out = Vec::new();
        let Ok(top) = fs::read_dir(&self.dir) else {
            return out;
        };
        for prefix in top.flatten() {
            let Ok(inner) = fs::read_dir(prefix.path()) else {
                continue;
            };
            let head = prefix.file_name().to_string_lossy().into_owned();
            for obj in inner.flatten() {
                let Ok(meta) = obj.metadata() else { continue };
                if !meta.is_file() {
                    continue;
                }
                let name = format!("{head}{}", obj.file_name().to_string_lossy());
                out.push((
                    name,
                    obj.path(),
                    meta.len(),
                    meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                ));
            }
        }
        out
    }
}
