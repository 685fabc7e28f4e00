//! Checkpoint cost for a turn that touches 100 files (numbers for notes, not
//! a test), side by side with the same edits made without checkpoints.
//!
//! A generated project of 2,000 files (4 KiB each, 20 directories, a
//! `.gitignore`d build directory). Each case runs 5 times with a fresh data
//! directory; medians are printed.
//! - edit tools: `before_change` on 100 files then the writes, against the
//!   writes alone;
//! - a command (`bash`): the scan before (first command of a session: every
//!   file is read and stored; next command: only changed files), the
//!   command's 100 writes, the scan after;
//! - `:Mia undo` of those 100 files;
//! - disk: bytes added under `data_dir/checkpoints`.
//!
//! Run: `cargo bench --bench checkpoints`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mia_engine::checkpoint::{Change, CheckpointSettings, Checkpoints, TurnCheckpoint};

const FILES: usize = 2_000;
const TOUCHED: usize = 100;
const FILE_BYTES: usize = 4096;
const RUNS: usize = 5;

fn make_project(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    fs::write(root.join(".gitignore"), "build/\n").unwrap();
    fs::create_dir_all(root.join("build")).unwrap();
    for i in 0..200 {
        fs::write(root.join("build").join(format!("o{i}.bin")), vec![b'x'; FILE_BYTES]).unwrap();
    }
    for i in 0..FILES {
        let dir = root.join(format!("src{}", i % 20));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("f{i}.rs"));
        let line = format!("// file {i}: some text that differs per file\n");
        let body: String = line.repeat(FILE_BYTES / line.len() + 1)[..FILE_BYTES].to_string();
        fs::write(&path, body).unwrap();
        files.push(path);
    }
    files
}

fn dir_bytes(path: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = fs::read_dir(path) {
        for e in rd.flatten() {
            let m = e.metadata().unwrap();
            total += if m.is_dir() { dir_bytes(&e.path()) } else { m.len() };
        }
    }
    total
}

fn edit(files: &[PathBuf], round: usize) {
    for f in &files[..TOUCHED] {
        let mut text = fs::read_to_string(f).unwrap();
        text.push_str(&format!("// edited in round {round}\n"));
        mia_engine::tools::atomic_write(f, text.as_bytes()).unwrap();
    }
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

fn git(root: &Path, args: &[&str]) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The command case in a git repository: unchanged tracked files are kept as git's blobs.
fn command_in_git(root: &Path, files: &[PathBuf], round: &mut usize) -> Option<(f64, f64, f64)> {
    if !(git(root, &["init", "-q"]) && git(root, &["add", "."]) && git(root, &["commit", "-qm", "base"])) {
        return None;
    }
    let (mut cold, mut disk, mut undo) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        git(root, &["add", "."]);
        git(root, &["commit", "-qm", "round"]);
        let data = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(data.path(), CheckpointSettings::default());
        let turn = TurnCheckpoint::new(store.clone(), "bench3", "t1", "sed", Arc::default());
        let t = Instant::now();
        let before = turn.scan(root, &|| false);
        cold.push(t.elapsed());
        *round += 1;
        edit(files, *round);
        assert_eq!(turn.after_scan(root, &before, "bash").unwrap().recorded.len(), TOUCHED);
        disk.push(dir_bytes(&data.path().join("checkpoints")));
        let t = Instant::now();
        assert_eq!(store.undo("bench3").unwrap().restored.len(), TOUCHED);
        undo.push(t.elapsed());
    }
    disk.sort();
    Some((
        median(cold),
        disk[disk.len() / 2] as f64 / 1024.0 / 1024.0,
        median(undo),
    ))
}

fn main() {
    let project = tempfile::tempdir().unwrap();
    let root = project.path().canonicalize().unwrap();
    let files = make_project(&root);
    let mut plain = Vec::new();
    let mut with_cp = Vec::new();
    let mut cp_only = Vec::new();
    let mut disk_edit = Vec::new();
    let mut scan_cold = Vec::new();
    let mut scan_warm = Vec::new();
    let mut after = Vec::new();
    let mut undo = Vec::new();
    let mut disk_cmd = Vec::new();
    let mut round = 0;
    for _ in 0..RUNS {
        // The edits alone.
        round += 1;
        let t = Instant::now();
        edit(&files, round);
        plain.push(t.elapsed());

        // The same edits, each file kept first (the edit tools' path).
        let data = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(data.path(), CheckpointSettings::default());
        let turn = TurnCheckpoint::new(store.clone(), "bench", "t1", "edit", Arc::default());
        round += 1;
        let t = Instant::now();
        for f in &files[..TOUCHED] {
            turn.before_change(f, "edit_file", Change::Modified).unwrap();
        }
        cp_only.push(t.elapsed());
        edit(&files, round);
        with_cp.push(t.elapsed());
        disk_edit.push(dir_bytes(&data.path().join("checkpoints")));

        // A command that changes 100 files: scans around it.
        let data = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(data.path(), CheckpointSettings::default());
        let cache = Arc::default();
        let turn = TurnCheckpoint::new(store.clone(), "bench2", "t1", "sed", Arc::clone(&cache));
        let t = Instant::now();
        let before = turn.scan(&root, &|| false);
        scan_cold.push(t.elapsed());
        round += 1;
        edit(&files, round);
        let t = Instant::now();
        let changed = turn.after_scan(&root, &before, "bash").unwrap();
        after.push(t.elapsed());
        assert_eq!(changed.recorded.len(), TOUCHED);
        disk_cmd.push(dir_bytes(&data.path().join("checkpoints")));
        // The session's next command: only changed files are read again.
        let turn2 = TurnCheckpoint::new(store.clone(), "bench2", "t2", "sed again", cache);
        let t = Instant::now();
        let _ = turn2.scan(&root, &|| false);
        scan_warm.push(t.elapsed());

        let t = Instant::now();
        let r = store.undo("bench2").unwrap();
        undo.push(t.elapsed());
        assert_eq!(r.restored.len(), TOUCHED);
    }
    let mb = |v: &Vec<u64>| {
        let mut v = v.clone();
        v.sort();
        v[v.len() / 2] as f64 / 1024.0 / 1024.0
    };
    println!(
        "checkpoints: project {FILES} files × {} KiB, a turn touching {TOUCHED}; medians of {RUNS}",
        FILE_BYTES / 1024
    );
    println!(
        "  edit tools  | edits alone {:>7.2} ms | with checkpoints {:>7.2} ms (keeping: {:.2} ms) | disk {:.2} MiB",
        median(plain),
        median(with_cp),
        median(cp_only),
        mb(&disk_edit)
    );
    println!("  bash        | scan before, first command {:>7.2} ms | next command {:>7.2} ms | scan after {:>7.2} ms | disk {:.2} MiB",
        median(scan_cold), median(scan_warm), median(after), mb(&disk_cmd));
    println!("  :Mia undo   | 100 files {:>7.2} ms", median(undo));
    match command_in_git(&root, &files, &mut round) {
        Some((cold, disk, undo)) => println!(
            "  bash in git | scan before, first command {cold:>7.2} ms | disk {disk:.2} MiB | :Mia undo of 100 files {undo:>7.2} ms"
        ),
        None => println!("  bash in git | skipped: git is not installed"),
    }
}
