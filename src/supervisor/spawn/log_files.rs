//! The slot logs a supervisor keeps open between spawns.
//!
//! A slot appends every attempt of a day to one file, so a respawn need not open it again:
//! opening it was five system calls of every respawn (`openat` with `O_NONBLOCK`, a
//! `statx` to refuse anything but a regular file, two `fcntl`s to clear the flag again,
//! and the `close`). What is kept is checked against the path with one `lstat` before each
//! use: a log deleted, renamed away or replaced (by a symlink, a FIFO, another file) since
//! the last spawn is not the file at the path any more, and the path is opened anew, with
//! every refusal [`crate::fsutil::open_append`] makes. A new day's folder lets go of the
//! last day's files.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::fsutil::SmallFileError;

#[derive(Debug, Default)]
pub struct LogFiles {
    /// The folder of the files kept (the day's).
    folder: Option<PathBuf>,
    open: HashMap<PathBuf, Kept>,
    /// How many times a log was opened (not taken from the kept ones).
    opened: u64,
}

#[derive(Debug)]
struct Kept {
    file: fs::File,
    dev: u64,
    ino: u64,
}

impl LogFiles {
    pub fn new() -> LogFiles {
        LogFiles::default()
    }

    /// The log at `path`, open for appending (made, with its folder, when absent).
    pub fn open(&mut self, path: &Path) -> Result<&fs::File, SmallFileError> {
        let still = self.open.get(path).is_some_and(|k| {
            fs::symlink_metadata(path)
                .is_ok_and(|m| m.is_file() && m.dev() == k.dev && m.ino() == k.ino)
        });
        if !still {
            self.open.remove(path);
            let file = open_making_folder(path)?;
            let file = super::above_stdio(file)?;
            let m = file.metadata()?;
            self.opened += 1;
            if self.folder.as_deref() != path.parent() {
                self.open.clear();
                self.folder = path.parent().map(Path::to_path_buf);
            }
            let kept = Kept {
                file,
                dev: m.dev(),
                ino: m.ino(),
            };
            self.open.insert(path.to_path_buf(), kept);
        }
        self.open
            .get(path)
            .map(|k| &k.file)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound).into())
    }

    /// How many times a log had to be opened.
    pub fn opened(&self) -> u64 {
        self.opened
    }
}

/// Never through a symlink, into a FIFO (which would block) or anything but a file. The
/// day's folder is made only when the log cannot be opened without it: once a day.
fn open_making_folder(path: &Path) -> Result<fs::File, SmallFileError> {
    match crate::fsutil::open_append(path) {
        Err(SmallFileError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            crate::fsutil::open_append(path)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(logs: &mut LogFiles, path: &Path, text: &str) {
        let mut f = logs.open(path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn a_log_is_opened_once_while_it_stays_the_file_at_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("2026-12-03/slot-0.log");
        let mut logs = LogFiles::new();
        for n in 0..5 {
            append(&mut logs, &path, &format!("{n}\n"));
        }
        assert_eq!(logs.opened(), 1);
        assert_eq!(fs::read_to_string(&path).unwrap(), "0\n1\n2\n3\n4\n");
    }

    #[test]
    fn a_log_deleted_or_renamed_away_is_opened_anew_at_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slot-0.log");
        let mut logs = LogFiles::new();
        append(&mut logs, &path, "first\n");
        fs::remove_file(&path).unwrap();
        append(&mut logs, &path, "second\n");
        assert_eq!(fs::read_to_string(&path).unwrap(), "second\n");
        fs::rename(&path, dir.path().join("old.log")).unwrap();
        append(&mut logs, &path, "third\n");
        assert_eq!(fs::read_to_string(&path).unwrap(), "third\n");
        assert_eq!(logs.opened(), 3);
    }

    #[test]
    fn a_log_replaced_by_a_symlink_or_a_fifo_is_refused_and_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slot-0.log");
        let target = dir.path().join("target");
        fs::write(&target, "").unwrap();
        let mut logs = LogFiles::new();
        append(&mut logs, &path, "first\n");
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(matches!(logs.open(&path), Err(SmallFileError::Symlink)));
        assert_eq!(fs::read_to_string(&target).unwrap(), "");
        fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // Refused at once: a FIFO with no reader would block the open.
        assert!(logs.open(&path).is_err());
    }

    #[test]
    fn a_new_days_folder_lets_go_of_the_last_days_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut logs = LogFiles::new();
        let day1: Vec<PathBuf> = (0..3)
            .map(|s| dir.path().join(format!("d1/slot-{s}.log")))
            .collect();
        for p in &day1 {
            append(&mut logs, p, "x\n");
        }
        assert_eq!(logs.open.len(), 3);
        append(&mut logs, &dir.path().join("d2/slot-0.log"), "y\n");
        assert_eq!(logs.open.len(), 1);
        assert_eq!(logs.opened(), 4);
    }
}
