//! The bootstrap every worker and the supervisor run at start (`docs/BOOT-SWEEPS.md`, *Fleet
//! mode*: "it ensures its dirs/gitignore/`worker.pid`"): `.red/tmp/` and `.red/state/`
//! exist, and the repo's `.gitignore` carries the lines `.red/tmp/` and `.red/state/`.
//!
//! The `.gitignore` is only ever appended to, and only with the lines it lacks: nothing in
//! it is reordered or rewritten, a last line without its newline gets one before the
//! additions, and a `.gitignore` that is a symlink or not a regular file is left alone (the
//! caller prints the note). Appends happen under an `flock` of the file, re-reading it
//! first, so workers bootstrapping together never add a line twice.

use std::fs;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::fsutil::{Links, SmallFileError, open_regular};
use crate::layout::Layout;

/// The lines the bootstrap makes sure of, in the order they are added.
pub const IGNORE_LINES: [&str; 2] = [".red/tmp/", ".red/state/"];

/// Largest `.gitignore` read; a bigger one is left alone.
pub const MAX_GITIGNORE_BYTES: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("{path}: cannot create directory: {source}")]
    Dir { path: PathBuf, source: io::Error },
}

/// What was done to `.gitignore`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gitignore {
    /// Both lines were already there.
    Unchanged,
    /// These lines were appended (the file was created when `created`).
    Added {
        lines: Vec<&'static str>,
        created: bool,
    },
    /// Not touched; the one-line note says why (a symlink, not a regular file, unreadable).
    LeftAlone(String),
}

impl Gitignore {
    /// A line worth printing, or `None` when nothing happened.
    pub fn note(&self) -> Option<String> {
        match self {
            Gitignore::Unchanged => None,
            Gitignore::Added { lines, created } => Some(format!(
                ".gitignore: {} {}",
                if *created { "created with" } else { "added" },
                lines.join(" ")
            )),
            Gitignore::LeftAlone(why) => Some(why.clone()),
        }
    }
}

/// Creates `.red/tmp/` and `.red/state/` and ensures the `.gitignore` lines.
pub fn ensure(layout: &Layout) -> Result<Gitignore, BootstrapError> {
    for dir in [layout.tmp(), layout.state()] {
        fs::create_dir_all(&dir).map_err(|source| BootstrapError::Dir { path: dir, source })?;
    }
    Ok(ensure_gitignore(&layout.repo().join(".gitignore")))
}

/// The `.gitignore` lines, once `.red/` exists: for commands that create it as a side
/// effect (`issue new`'s local store), so `git status` never shows `?? .red/` because a
/// command ran before the first supervisor did. `None` when there is no `.red/`.
pub fn ignore_if_present(layout: &Layout) -> Option<Gitignore> {
    fs::symlink_metadata(layout.red())
        .is_ok_and(|m| m.is_dir())
        .then(|| ensure_gitignore(&layout.repo().join(".gitignore")))
}

/// Appends the [`IGNORE_LINES`] that `path` lacks (creating it when absent).
pub fn ensure_gitignore(path: &Path) -> Gitignore {
    let left_alone = |why: String| {
        Gitignore::LeftAlone(format!(
            "{}: {why}; left alone (add the lines {} yourself)",
            path.display(),
            IGNORE_LINES.join(" ")
        ))
    };
    let existed = fs::symlink_metadata(path).is_ok();
    let mut opts = fs::OpenOptions::new();
    opts.read(true).append(true).create(true);
    let mut file = match open_regular(path, opts, Links::Refuse) {
        Ok(Some(f)) => f,
        Ok(None) => return left_alone("vanished while opening".into()),
        Err(SmallFileError::Symlink) => return left_alone("is a symlink".into()),
        Err(e) => return left_alone(e.to_string()),
    };
    if let Err(e) = file.lock() {
        return left_alone(format!("cannot lock: {e}"));
    }
    let mut bytes = Vec::new();
    let read = file.rewind().and_then(|()| {
        (&mut file)
            .take(MAX_GITIGNORE_BYTES + 1)
            .read_to_end(&mut bytes)
    });
    if let Err(e) = read {
        return left_alone(format!("cannot read: {e}"));
    }
    if bytes.len() as u64 > MAX_GITIGNORE_BYTES {
        return left_alone(format!("larger than {MAX_GITIGNORE_BYTES} bytes"));
    }
    let missing = missing_lines(&bytes);
    if missing.is_empty() {
        return Gitignore::Unchanged;
    }
    let mut add = String::new();
    if bytes.last().is_some_and(|b| *b != b'\n') {
        add.push('\n');
    }
    for l in &missing {
        add.push_str(l);
        add.push('\n');
    }
    // Appended with one write; O_APPEND puts it at the end whatever was read.
    if let Err(e) = file.write_all(add.as_bytes()) {
        return left_alone(format!("cannot append: {e}"));
    }
    Gitignore::Added {
        lines: missing,
        created: !existed,
    }
}

/// The [`IGNORE_LINES`] not present as a whole line (a trailing `\r` tolerated).
fn missing_lines(text: &[u8]) -> Vec<&'static str> {
    let present: Vec<&[u8]> = text
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .collect();
    IGNORE_LINES
        .into_iter()
        .filter(|want| !present.contains(&want.as_bytes()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_on(content: Option<&str>) -> (Gitignore, String) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(".gitignore");
        if let Some(c) = content {
            fs::write(&p, c).unwrap();
        }
        let r = ensure_gitignore(&p);
        (r, fs::read_to_string(&p).unwrap())
    }

    #[test]
    fn absent_file_is_created_with_both_lines() {
        let (r, text) = run_on(None);
        assert_eq!(text, ".red/tmp/\n.red/state/\n");
        assert_eq!(
            r,
            Gitignore::Added {
                lines: vec![".red/tmp/", ".red/state/"],
                created: true
            }
        );
    }

    #[test]
    fn empty_file_gets_both_lines() {
        let (_, text) = run_on(Some(""));
        assert_eq!(text, ".red/tmp/\n.red/state/\n");
    }

    #[test]
    fn existing_content_is_kept_in_order_and_lines_appended() {
        let (r, text) = run_on(Some("target/\n# comment\n*.log\n"));
        assert_eq!(text, "target/\n# comment\n*.log\n.red/tmp/\n.red/state/\n");
        assert!(matches!(r, Gitignore::Added { created: false, .. }));
    }

    #[test]
    fn a_file_without_a_final_newline_gets_one_first() {
        let (_, text) = run_on(Some("target/"));
        assert_eq!(text, "target/\n.red/tmp/\n.red/state/\n");
    }

    #[test]
    fn only_the_missing_line_is_added() {
        let (r, text) = run_on(Some(".red/state/\nbuild/\n"));
        assert_eq!(text, ".red/state/\nbuild/\n.red/tmp/\n");
        assert_eq!(
            r,
            Gitignore::Added {
                lines: vec![".red/tmp/"],
                created: false
            }
        );
    }

    #[test]
    fn both_present_changes_nothing_crlf_included() {
        let original = "x\r\n.red/tmp/\r\n.red/state/";
        let (r, text) = run_on(Some(original));
        assert_eq!(r, Gitignore::Unchanged);
        assert_eq!(text, original);
    }

    #[test]
    fn twice_adds_nothing_the_second_time() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(".gitignore");
        fs::write(&p, "a\n").unwrap();
        assert!(matches!(ensure_gitignore(&p), Gitignore::Added { .. }));
        assert_eq!(ensure_gitignore(&p), Gitignore::Unchanged);
        assert_eq!(
            fs::read_to_string(&p).unwrap(),
            "a\n.red/tmp/\n.red/state/\n"
        );
    }

    #[test]
    fn lookalike_lines_do_not_count() {
        let (_, text) = run_on(Some("# .red/tmp/\n.red/tmp\n/.red/state/ \n"));
        assert_eq!(
            text,
            "# .red/tmp/\n.red/tmp\n/.red/state/ \n.red/tmp/\n.red/state/\n"
        );
    }

    #[test]
    fn a_symlink_is_left_alone_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("real-ignore");
        fs::write(&target, "x\n").unwrap();
        let p = dir.path().join(".gitignore");
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let r = ensure_gitignore(&p);
        let note = r.note().unwrap();
        assert!(matches!(r, Gitignore::LeftAlone(_)));
        assert!(
            note.contains("is a symlink") && !note.contains('\n'),
            "{note}"
        );
        assert_eq!(fs::read_to_string(&target).unwrap(), "x\n");
    }

    #[test]
    fn a_directory_or_fifo_is_left_alone_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(".gitignore");
        fs::create_dir(&p).unwrap();
        let r = ensure_gitignore(&p);
        assert!(
            matches!(&r, Gitignore::LeftAlone(n) if n.contains("directory")),
            "{r:?}"
        );
        fs::remove_dir(&p).unwrap();
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let r = ensure_gitignore(&p);
        assert!(
            matches!(&r, Gitignore::LeftAlone(n) if n.contains("FIFO")),
            "{r:?}"
        );
    }

    #[test]
    fn ensure_makes_the_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        ensure(&layout).unwrap();
        assert!(layout.tmp().is_dir() && layout.state().is_dir());
        assert_eq!(
            fs::read_to_string(dir.path().join(".gitignore")).unwrap(),
            ".red/tmp/\n.red/state/\n"
        );
    }
}
