//! Repository control files: what a write there can make run later.
//!
//! A write under a `.git` directory (its `config`, `hooks/`,
//! `info/attributes`, at any depth: a nested repository's too), to a `.git`
//! *file* (a gitdir pointer that moves the repository elsewhere), or under
//! mia's own `.mia/` (project tools) plants a command that git or mia runs
//! later, outside any question: `core.fsmonitor` runs on the next `git
//! status`, a hook on the next commit. So such a write always asks, in
//! every mode and whatever rule or "allow always" would allow it; only a
//! deny rule is stronger.
//!
//! A repository under another name (a bare `x.git`, a `--separate-git-dir`
//! target) is recognised as git does, by its `HEAD`, `objects/` and `refs/`.
//!
//! The test is on path components, ASCII case ignored (`.GIT` is `.git` on
//! a case-insensitive file system), and is applied to every form of the
//! path the permission check has ([`CanonicalPath`]): the physical one
//! (links resolved, so a link into `.git` is caught) and the one as written
//! (so a `.git` that is itself a link elsewhere is caught).

use super::paths::CanonicalPath;
use super::shell::CommandLine;

/// Directory names whose contents are control files.
const CONTROL_DIRS: &[&str] = &[".git", ".mia"];

/// True when a component of `path` (split on `/`) is a control directory
/// name.
pub fn names_control_file(path: &str) -> bool {
    path.split('/')
        .any(|part| CONTROL_DIRS.iter().any(|d| part.eq_ignore_ascii_case(d)))
}

/// The control file a write to `path` would touch, as shown to the user,
/// or `None`.
pub fn control_path(path: &CanonicalPath) -> Option<&str> {
    // Inside the project both forms are relative to it, so a project that
    // itself lies under some `.git` or `.mia` directory is not all control files.
    [path.subject.as_str(), path.lexical.as_str()]
        .into_iter()
        .find(|form| names_control_file(form))
        .or_else(|| in_git_dir(path).then_some(path.subject.as_str()))
}

/// True when a directory holding `path` (up to the project root, or up to
/// [`MAX_ANCESTORS`] outside it) is a repository under another name: a
/// bare `x.git`, or the directory `--separate-git-dir` names. Git's own
/// test: a `HEAD` file beside `objects/` and `refs/`.
fn in_git_dir(path: &CanonicalPath) -> bool {
    let depth = if path.inside {
        std::path::Path::new(&path.subject).components().count()
    } else {
        MAX_ANCESTORS
    };
    path.physical
        .ancestors()
        .skip(1)
        .take(depth.min(MAX_ANCESTORS))
        .any(|d| d.join("HEAD").is_file() && d.join("objects").is_dir() && d.join("refs").is_dir())
}

/// Most directories [`in_git_dir`] looks at.
const MAX_ANCESTORS: usize = 64;

/// Why a shell command line touches a control file, or `None`: a
/// redirection into one, a word naming one (`tee .git/config`, `cp x
/// .mia/tools/t.lua`), or `git config` (which writes `.git/config`).
pub fn command_touches_control_file(line: &CommandLine) -> Option<String> {
    for c in &line.commands {
        if let Some(target) = c.writes.iter().find(|t| names_control_file(t)) {
            return Some(format!("`{}` writes to `{target}`, a repository control file", c.text));
        }
        let words: Vec<&str> = c.text.split_whitespace().collect();
        if let Some(word) = words.iter().find(|w| {
            let w = w.trim_matches(|ch| ch == '\'' || ch == '"');
            // `--git-dir=.git`, `GIT_DIR=.git`: the value after `=` too.
            w.split('=').any(names_control_file)
        }) {
            return Some(format!("`{}` names `{word}`, a repository control file", c.text));
        }
        let program = words.iter().find(|w| !w.contains('='));
        if program.is_some_and(|p| *p == "git" || p.ends_with("/git")) && words.contains(&"config") {
            return Some(format!("`{}` may change the repository's `.git/config`", c.text));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::paths::canonicalize;
    use crate::tools::shell::analyze;
    use proptest::prelude::*;

    #[test]
    fn components_not_substrings_name_control_files() {
        for yes in [
            ".git",
            ".git/config",
            "sub/.git/hooks/x",
            ".GIT/config",
            ".mia/tools/t.lua",
            "/abs/.git",
        ] {
            assert!(names_control_file(yes), "{yes}");
        }
        for no in [
            ".gitignore",
            ".github/workflows/x",
            "a.git",
            "my.git/x",
            ".miarc",
            "src/git/config",
        ] {
            assert!(!names_control_file(no), "{no}");
        }
    }

    #[test]
    fn commands_that_write_or_name_control_files_or_configure_git_are_caught() {
        for yes in [
            "echo x > .git/config",
            "echo x >> ./.git/hooks/pre-commit",
            "ls && cat > sub/.git/config",
            "tee .git/config",
            "cp evil .mia/tools/t.lua",
            "git config core.fsmonitor 'touch x'",
            "/usr/bin/git -C . config --add core.fsmonitor x",
            "git --git-dir=.git status",
            "echo $(cat > .git/info/attributes)",
        ] {
            assert!(command_touches_control_file(&analyze(yes)).is_some(), "{yes}");
        }
        for no in ["git status", "echo .gitignore > x", "cat .github/x", "make config"] {
            assert!(command_touches_control_file(&analyze(no)).is_none(), "{no}");
        }
    }

    /// A project with a repository, a nested one, `.mia/`, a link to `.git`
    /// and a `.git` that is itself a link.
    fn project() -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap().join("p");
        for dir in [".git/hooks", ".git/info", "sub/.git", ".mia/tools", "src", "elsewhere"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        // A repository under another name (`git init --separate-git-dir=vendor/gitstuff`).
        for dir in [
            "vendor/gitstuff/objects",
            "vendor/gitstuff/refs",
            "vendor/gitstuff/hooks",
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("vendor/gitstuff/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::os::unix::fs::symlink(".git", root.join("innocent")).unwrap();
        std::os::unix::fs::symlink("../.git/hooks", root.join("src/hooks")).unwrap();
        std::os::unix::fs::symlink("elsewhere", root.join("sub2")).unwrap();
        std::fs::create_dir_all(root.join("nested")).unwrap();
        std::os::unix::fs::symlink("../elsewhere", root.join("nested/.git")).unwrap();
        (d, root)
    }

    const TARGETS: &[&str] = &[
        ".git/config",
        ".git/hooks/pre-commit",
        ".git/info/attributes",
        ".git",
        "sub/.git/config",
        ".mia/tools/t.lua",
        "innocent/config",
        "src/hooks/post-checkout",
        "nested/.git/config",
        ".GIT/config",
        "vendor/gitstuff/config",
        "vendor/gitstuff/hooks/pre-commit",
    ];

    fn spelling() -> impl Strategy<Value = (usize, String, String, bool, bool)> {
        (
            0..TARGETS.len(),
            prop::sample::select(vec!["", "./", "src/../", "./src/./../", "elsewhere/../"]),
            prop::sample::select(vec!["/", "//", "/./"]),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(i, prefix, sep, absolute, trailing)| {
                (i, prefix.to_string(), sep.to_string(), absolute, trailing)
            })
    }

    proptest! {
        // Each case builds a project on disk: fewer cases, still every target and form.
        #![proptest_config(ProptestConfig::with_cases(96))]
        #[test]
        fn every_spelling_of_a_control_file_is_one((i, prefix, sep, absolute, trailing) in spelling()) {
            let (_d, root) = project();
            let mut written = format!("{prefix}{}", TARGETS[i].replace('/', &sep));
            if trailing {
                written.push('/');
            }
            if absolute {
                written = format!("{}/{written}", root.display());
            }
            let path = canonicalize(&root, &written).unwrap();
            prop_assert!(control_path(&path).is_some(), "{written:?} → {path:?}");
        }
    }

    #[test]
    fn ordinary_files_even_through_links_are_not_control_files() {
        let (_d, root) = project();
        for s in [
            "src/a.rs",
            "./src//a.rs",
            "sub2/x",
            ".gitignore",
            ".github/ci.yml",
            "vendor/HEAD",
            "vendor/x",
        ] {
            let path = canonicalize(&root, s).unwrap();
            assert!(control_path(&path).is_none(), "{s}");
        }
    }
}
