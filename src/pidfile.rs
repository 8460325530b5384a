//! Pid files and process identity (`docs/SPEC.md` §2).
//!
//! A pid alone is not an identity: pids are reused. Where this tool writes a pid file it
//! also writes `<file>.start` with the process start time (field 22 of `/proc/<pid>/stat`),
//! and a pid only counts as live when that start time still matches.
//!
//! Three judgements, not two: a pid file whose *content* is corrupt names no process and
//! is dead (`docs/SPEC.md` §2), but a *file* that cannot be read safely (a directory, a FIFO, a
//! symlink, an unreadable file) or a start token that cannot be read proves nothing either
//! way, so it is [`Liveness::Unknown`] and callers keep what it guards and signal nothing.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::fsutil::{SmallFileError, atomic_write, read_small_file, remove_file_if_exists};
use crate::layout::start_file;
use crate::text::excerpt;

/// What a pid file holds, before any liveness judgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidContent {
    Missing,
    /// Empty, non-numeric, zero, negative or out of range: reported, never acted on as a pid.
    Corrupt(String),
    Pid(i32),
}

/// How to treat a pid file that has no `<file>.start` beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingStart {
    /// Files written by other tools (worker.pid, afk.pid, claims): existence alone decides.
    ExistenceDecides,
    /// `afk-supervisor.pid`: this tool always writes `.start`, so without it the pid is dead.
    Dead,
}

/// A pid file or start token longer than this is not one (a pid has at most 7 digits, a
/// start time at most 20).
pub const MAX_PID_FILE_BYTES: u64 = 64;

/// The judgement on one pid file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    Live {
        pid: i32,
        start: Option<u64>,
    },
    Dead {
        reason: DeadReason,
    },
    /// The pid file or its start token cannot be read safely or parsed: nothing may be
    /// removed or signalled on its account.
    Unknown {
        reason: String,
    },
}

/// Why a pid file does not name a verified live process: it is dead, or cannot be judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotLive {
    Dead(DeadReason),
    Unknown(String),
}

impl std::fmt::Display for NotLive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotLive::Dead(r) => r.fmt(f),
            NotLive::Unknown(why) => write!(f, "pid file cannot be judged: {why}"),
        }
    }
}

impl std::error::Error for NotLive {}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadReason {
    Missing,
    Corrupt(String),
    /// The process does not exist (or is a zombie).
    Gone(i32),
    /// A process with this pid exists but started at another time: the pid was reused.
    Reused(i32),
    /// Supervisor pid file without its `.start`.
    NoStartToken(i32),
}

impl Liveness {
    pub fn is_live(&self) -> bool {
        matches!(self, Liveness::Live { .. })
    }

    pub fn pid(&self) -> Option<i32> {
        match self {
            Liveness::Live { pid, .. } => Some(*pid),
            _ => None,
        }
    }
}

impl std::fmt::Display for DeadReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeadReason::Missing => write!(f, "pid file missing"),
            DeadReason::Corrupt(why) => write!(f, "pid file corrupt ({why})"),
            DeadReason::Gone(pid) => write!(f, "pid {pid} is not running"),
            DeadReason::Reused(pid) => write!(f, "pid {pid} was reused by another process"),
            DeadReason::NoStartToken(pid) => write!(f, "pid {pid} has no start token"),
        }
    }
}

/// Parses pid file text the way other readers do (`Number(text.trim())`), but strictly:
/// only a positive decimal that fits a pid is a pid.
pub fn parse_pid(text: &str) -> Result<i32, BadNumber> {
    let t = text.trim();
    if t.is_empty() {
        return Err(BadNumber::Empty);
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BadNumber::NotANumber(excerpt(t)));
    }
    match t.parse::<i32>() {
        Ok(0) => Err(BadNumber::Zero),
        Ok(pid) if pid > 0 && i64::from(pid) <= max_pid() => Ok(pid),
        _ => Err(BadNumber::OutOfRange(excerpt(t))),
    }
}

/// Why a pid file's or start file's text is not its number (the text excerpted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadNumber {
    #[error("empty")]
    Empty,
    #[error("not a number: {0:?}")]
    NotANumber(String),
    #[error("zero")]
    Zero,
    #[error("out of range: {0}")]
    OutOfRange(String),
}

/// The kernel's pid ceiling; 2^22 when it cannot be read.
fn max_pid() -> i64 {
    fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 22)
}

/// Reads a pid file safely (see [`read_small_file`]). Content too long to be a pid is
/// corrupt content; a file that is not a regular file, or cannot be read, is an error.
pub fn read_pid_file(path: &Path) -> Result<PidContent, SmallFileError> {
    match read_small_file(path, MAX_PID_FILE_BYTES) {
        Ok(Some(bytes)) => {
            let text = String::from_utf8_lossy(&bytes);
            Ok(match parse_pid(&text) {
                Ok(pid) => PidContent::Pid(pid),
                Err(why) => PidContent::Corrupt(why.to_string()),
            })
        }
        Ok(None) => Ok(PidContent::Missing),
        Err(e @ SmallFileError::TooLarge(_)) => Ok(PidContent::Corrupt(e.to_string())),
        Err(e) => Err(e),
    }
}

/// The start time of a running, non-zombie process.
pub fn process_start_time(pid: i32) -> Option<u64> {
    crate::process::read(pid)
        .filter(|p| !p.is_zombie())
        .map(|p| p.start)
}

/// Is `pid` live, and (when `start` is given) is it the same process that was recorded?
pub fn judge_pid(pid: i32, start: Option<u64>) -> Liveness {
    match process_start_time(pid) {
        None => Liveness::Dead {
            reason: DeadReason::Gone(pid),
        },
        Some(actual) => match start {
            Some(expected) if expected != actual => Liveness::Dead {
                reason: DeadReason::Reused(pid),
            },
            _ => Liveness::Live {
                pid,
                start: Some(actual),
            },
        },
    }
}

/// Why a `.start` file proves nothing: it cannot be read safely, or is not a number.
#[derive(Debug, thiserror::Error)]
pub enum StartTokenError {
    #[error("start token {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: SmallFileError,
    },
    #[error("start token {} {why}", path.display())]
    Bad { path: PathBuf, why: BadNumber },
}

/// Reads `<file>.start`: `Ok(None)` when absent.
fn read_start_file(pid_file: &Path) -> Result<Option<u64>, StartTokenError> {
    let path = start_file(pid_file);
    let bytes = match read_small_file(&path, MAX_PID_FILE_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(source) => return Err(StartTokenError::Unreadable { path, source }),
    };
    parse_start_token(&bytes)
        .map(Some)
        .map_err(|why| StartTokenError::Bad { path, why })
}

/// Parses a `.start` file's content: the start time in clock ticks, a decimal (surrounding
/// whitespace tolerated).
pub fn parse_start_token(bytes: &[u8]) -> Result<u64, BadNumber> {
    let text = String::from_utf8_lossy(bytes);
    text.trim()
        .parse::<u64>()
        .map_err(|_| BadNumber::NotANumber(excerpt(text.trim())))
}

/// Judges a pid file, with its `.start` where one exists (`docs/SPEC.md` §2). Corrupt content is
/// dead; a file that cannot be read safely, or a start token that cannot be read or parsed
/// (identity can be neither proven nor disproven), is unknown.
pub fn liveness(pid_file: &Path, missing_start: MissingStart) -> Liveness {
    let pid = match read_pid_file(pid_file) {
        Ok(PidContent::Pid(pid)) => pid,
        Ok(PidContent::Missing) => {
            return Liveness::Dead {
                reason: DeadReason::Missing,
            };
        }
        Ok(PidContent::Corrupt(why)) => {
            return Liveness::Dead {
                reason: DeadReason::Corrupt(why),
            };
        }
        Err(e) => {
            return Liveness::Unknown {
                reason: format!("{}: {e}", pid_file.display()),
            };
        }
    };
    match read_start_file(pid_file) {
        Ok(Some(start)) => judge_pid(pid, Some(start)),
        Ok(None) => match missing_start {
            MissingStart::ExistenceDecides => judge_pid(pid, None),
            MissingStart::Dead => Liveness::Dead {
                reason: DeadReason::NoStartToken(pid),
            },
        },
        Err(e) => Liveness::Unknown {
            reason: e.to_string(),
        },
    }
}

/// Writes `pid` and its start token atomically. Fails when the process does not exist.
pub fn write_pid_file(pid_file: &Path, pid: i32) -> io::Result<u64> {
    let start = process_start_time(pid).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("process {pid} does not exist"),
        )
    })?;
    let token = start_file(pid_file);
    atomic_write(&token, format!("{start}\n").as_bytes())?;
    if let Err(e) = atomic_write(pid_file, format!("{pid}\n").as_bytes()) {
        // A token without its pid file (say a directory sits there) would outlive us.
        let _ = remove_file_if_exists(&token);
        return Err(e);
    }
    Ok(start)
}

/// Removes a pid file and its start token.
pub fn remove_pid_file(pid_file: &Path) -> io::Result<()> {
    remove_file_if_exists(pid_file)?;
    remove_file_if_exists(&start_file(pid_file))
}

/// The pid files of one pid file's family, for deletion accounting.
pub fn pid_file_family(pid_file: &Path) -> [PathBuf; 2] {
    [pid_file.to_path_buf(), start_file(pid_file)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_pid_rules() {
        assert_eq!(parse_pid("123"), Ok(123));
        assert_eq!(parse_pid(" 123\n"), Ok(123));
        for bad in [
            "",
            "  \n",
            "abc",
            "-5",
            "0",
            "12x",
            "99999999999999999999",
            "1.5",
            "+4",
        ] {
            assert!(parse_pid(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn own_process_is_live_and_reuse_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.pid");
        let me = std::process::id() as i32;
        let start = write_pid_file(&f, me).unwrap();
        assert_eq!(
            liveness(&f, MissingStart::Dead),
            Liveness::Live {
                pid: me,
                start: Some(start)
            }
        );
        fs::write(start_file(&f), format!("{}", start + 1)).unwrap();
        assert_eq!(
            liveness(&f, MissingStart::ExistenceDecides),
            Liveness::Dead {
                reason: DeadReason::Reused(me)
            }
        );
        remove_file_if_exists(&start_file(&f)).unwrap();
        assert!(liveness(&f, MissingStart::ExistenceDecides).is_live());
        assert_eq!(
            liveness(&f, MissingStart::Dead),
            Liveness::Dead {
                reason: DeadReason::NoStartToken(me)
            }
        );
        fs::write(&f, "garbage").unwrap();
        assert!(matches!(
            liveness(&f, MissingStart::ExistenceDecides),
            Liveness::Dead {
                reason: DeadReason::Corrupt(_)
            }
        ));
        remove_pid_file(&f).unwrap();
        assert_eq!(
            liveness(&f, MissingStart::ExistenceDecides),
            Liveness::Dead {
                reason: DeadReason::Missing
            }
        );
    }

    fn unknown(l: Liveness) -> String {
        match l {
            Liveness::Unknown { reason } => reason,
            other => panic!("expected Unknown, got {other:?}"),
        }
    }

    #[test]
    fn unreadable_files_and_start_tokens_are_unknown_never_dead() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("worker.pid");
        let me = std::process::id() as i32;
        // A directory in the pid file's place.
        fs::create_dir(&f).unwrap();
        let why = unknown(liveness(&f, MissingStart::ExistenceDecides));
        assert!(why.contains("not a regular file"), "{why}");
        fs::remove_dir(&f).unwrap();
        // A FIFO: judged at once, without waiting for a writer.
        nix::unistd::mkfifo(&f, nix::sys::stat::Mode::S_IRWXU).unwrap();
        unknown(liveness(&f, MissingStart::ExistenceDecides));
        fs::remove_file(&f).unwrap();
        // A symlink, even to a file holding a live pid, or to an endless device.
        let real = dir.path().join("real.pid");
        fs::write(&real, me.to_string()).unwrap();
        std::os::unix::fs::symlink(&real, &f).unwrap();
        let why = unknown(liveness(&f, MissingStart::ExistenceDecides));
        assert!(why.contains("symlink"), "{why}");
        fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &f).unwrap();
        unknown(liveness(&f, MissingStart::ExistenceDecides));
        fs::remove_file(&f).unwrap();
        // A corrupt start token proves nothing about identity.
        fs::write(&f, me.to_string()).unwrap();
        fs::write(start_file(&f), "soon").unwrap();
        let why = unknown(liveness(&f, MissingStart::ExistenceDecides));
        assert!(why.contains("not a number"), "{why}");
        fs::remove_file(start_file(&f)).unwrap();
        fs::create_dir(start_file(&f)).unwrap();
        unknown(liveness(&f, MissingStart::Dead));
    }

    #[test]
    fn corrupt_content_is_dead_whatever_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("worker.pid");
        fs::write(&f, "1".repeat(1 << 20)).unwrap();
        assert!(matches!(
            liveness(&f, MissingStart::ExistenceDecides),
            Liveness::Dead {
                reason: DeadReason::Corrupt(_)
            }
        ));
    }

    #[test]
    fn exited_child_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(!judge_pid(pid, None).is_live());
    }
}
