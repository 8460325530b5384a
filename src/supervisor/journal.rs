//! The supervisor's event log with an echo on stderr for an operator watching the
//! foreground. A failed append is never fatal: losing a log line must not take the fleet
//! down. Each failure episode (a full disk) is reported once when it begins and once when
//! the log is writable again, with the count of records lost, in the log too; a record
//! torn part-way is cut off (`event_log::EventLog::append`).
//!
//! Rotation by size: once the file has reached `max_bytes`, the next write first renames
//! `.N-1` to `.N` … `.1` to `.2` and the log to `.1` (the oldest beyond `keep` is replaced),
//! then opens a new file, which starts with the TOONL header. Renames only: a reader
//! following the file keeps its descriptor on the old one and finds the new one by its
//! inode; nothing is ever copied and truncated.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::event_log::{self, EventLog, Kind, Record};
use crate::toonl::LogError;

/// When the event log rotates and how many generations stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    pub max_bytes: u64,
    pub keep: usize,
}

/// Where the echo goes: stderr, unless diagnostics own it (`--log-format json`), when the
/// echo moves to stdout so stderr stays one JSON object per line for `jq` or a collector.
static ECHO_ON_STDOUT: AtomicBool = AtomicBool::new(false);

/// Sends every journal's echo to stdout (`true`) or stderr (`false`, the default).
pub fn echo_on_stdout(yes: bool) {
    ECHO_ON_STDOUT.store(yes, Ordering::Relaxed);
}

/// One line for the operator watching the foreground, where the echo goes (stdout under
/// `--log-format json`, else stderr); not recorded in the event log.
pub fn echo_line(line: &str) {
    let _ = echo(line.to_string());
}

/// `line` and its newline in one `write` (stderr is unbuffered: `writeln!` would make it
/// two system calls, on every record).
fn echo(mut line: String) -> io::Result<()> {
    line.push('\n');
    if ECHO_ON_STDOUT.load(Ordering::Relaxed) {
        io::stdout().lock().write_all(line.as_bytes())
    } else {
        io::stderr().lock().write_all(line.as_bytes())
    }
}

#[derive(Debug)]
pub struct Journal {
    log: EventLog,
    echo: bool,
    /// Records lost in the current failure episode (0: the log is writable).
    lost: u64,
    /// The error that began the current episode.
    failing: Option<String>,
    rotation: Option<Rotation>,
    /// After a failed rotation, the size at which the next one is tried (not every write).
    rotate_at: u64,
    /// Records held for one write ([`Journal::hold`]).
    held: Vec<Record>,
    holding: bool,
}

/// The most records a hold keeps before it writes them anyway.
const MAX_HELD: usize = 32;

/// Nothing held is lost when the journal goes (a return or an unwinding panic out of the
/// loop).
impl Drop for Journal {
    fn drop(&mut self) {
        self.flush();
    }
}

impl Journal {
    /// A journal that never rotates.
    pub fn open(path: &Path, echo: bool) -> Result<Self, LogError> {
        Ok(Journal {
            log: EventLog::open(path)?,
            echo,
            lost: 0,
            failing: None,
            rotation: None,
            rotate_at: u64::MAX,
            held: Vec::new(),
            holding: false,
        })
    }

    /// Holds every record from now until [`Journal::flush`] (`true`; up to [`MAX_HELD`]),
    /// or writes each as it comes (`false`, the default; what is held is written first).
    /// The supervisor's loop
    /// holds and flushes once a turn, before it sleeps: a respawn's two or three records
    /// then cost one write to the log and one to the echo instead of one each, and nobody
    /// reading the log can tell (a turn takes well under a millisecond, and the records keep
    /// their own times and order).
    pub fn hold(&mut self, yes: bool) {
        self.holding = yes;
        if !yes {
            self.flush();
        }
    }

    /// Rotates by `rotation` from now on.
    pub fn rotating(mut self, rotation: Rotation) -> Self {
        self.rotation = Some(rotation);
        self.rotate_at = rotation.max_bytes;
        self
    }

    pub fn write(&mut self, ev: Record) {
        self.held.push(ev);
        // A long turn (a resize to hundreds of workers spawns them all in one) writes as it
        // goes, so a SIGKILL mid-turn loses at most this many records, never the turn's.
        if !self.holding || self.held.len() >= MAX_HELD {
            self.flush();
        }
    }

    /// Writes what is held: the echo in one write, the records in one append.
    pub fn flush(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        // A terminal that went away (a tmux session killed, an ssh link dropped) must not
        // end the supervisor mid-stop: the echo is dropped once stderr fails, the log stays.
        if self.echo {
            let mut lines = String::with_capacity(128 * held.len());
            for ev in &held {
                if !lines.is_empty() {
                    lines.push('\n');
                }
                lines.push_str(&ev.human_line());
            }
            if echo(lines).is_err() {
                self.echo = false;
            }
        }
        if self.log.size() >= self.rotate_at
            && let Err(e) = self.rotate()
        {
            self.report(&format!("afk-supervisor: event log: rotating: {e}"));
            let step = self.rotation.map_or(u64::MAX, |r| r.max_bytes);
            self.rotate_at = self.log.size().saturating_add(step);
        }
        match self.log.append_all(&held) {
            Err(e) => {
                if self.lost == 0 {
                    self.report(&format!("afk-supervisor: event log: {e}"));
                    self.failing = Some(e.to_string());
                }
                self.lost += held.len() as u64;
            }
            Ok(()) if self.lost > 0 => {
                // The episode is over: said once on stderr and once in the log itself, so
                // the next failure is reported again.
                let line = format!(
                    "event log: writable again; {} record(s) lost ({})",
                    self.lost,
                    self.failing.take().unwrap_or_default()
                );
                self.lost = 0;
                self.report(&format!("afk-supervisor: {line}"));
                let note = Record::now(Kind::SupervisorError, line);
                if self.log.append(&note).is_err() {
                    self.lost = 1;
                }
            }
            Ok(()) => {}
        }
    }

    /// A problem of the log itself, on stderr (where else), never a panic.
    fn report(&self, line: &str) {
        let _ = writeln!(io::stderr(), "{line}");
    }

    fn rotate(&mut self) -> Result<(), LogError> {
        let Some(r) = self.rotation else {
            return Ok(());
        };
        let path = self.log.path().to_path_buf();
        let io_err = |path: PathBuf| move |source| LogError::Io { path, source };
        for i in (1..r.keep).rev() {
            let from = event_log::rotated(&path, i);
            match std::fs::rename(&from, event_log::rotated(&path, i + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(from)(e)),
                _ => {}
            }
        }
        if r.keep == 0 {
            std::fs::remove_file(&path).map_err(io_err(path.clone()))?;
        } else {
            std::fs::rename(&path, event_log::rotated(&path, 1)).map_err(io_err(path.clone()))?;
        }
        self.log = EventLog::open(&path)?;
        self.rotate_at = r.max_bytes;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn records(path: &Path) -> Vec<String> {
        let bytes = std::fs::read(path).unwrap();
        event_log::decode_events(&bytes)
            .unwrap()
            .into_iter()
            .map(|e| e.msg)
            .collect()
    }

    /// Held records reach the file together, in order, at the flush; letting go of the
    /// hold, or of the journal, writes what is held; unheld ones go at once.
    #[test]
    fn held_records_are_written_together_at_the_flush_and_never_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("supervisor.log.toonl");
        let mut j = Journal::open(&path, false).unwrap();
        j.write(Record::now(Kind::SlotExit, "one"));
        assert_eq!(records(&path), ["one"]);
        j.hold(true);
        j.write(Record::now(Kind::SlotExit, "two"));
        j.write(Record::now(Kind::SlotSpawn, "three"));
        assert_eq!(records(&path), ["one"], "held until the flush");
        let size = std::fs::metadata(&path).unwrap().len();
        j.flush();
        assert_eq!(records(&path), ["one", "two", "three"]);
        assert!(std::fs::metadata(&path).unwrap().len() > size);
        j.write(Record::now(Kind::SlotExit, "four"));
        j.hold(false);
        assert_eq!(records(&path), ["one", "two", "three", "four"]);
        j.write(Record::now(Kind::SlotExit, "five"));
        assert_eq!(records(&path).len(), 5, "written at once again");
        j.hold(true);
        j.write(Record::now(Kind::SupervisorStop, "six"));
        drop(j);
        assert_eq!(records(&path).last().map(String::as_str), Some("six"));
        // A long turn writes every MAX_HELD records as it goes.
        let mut j = Journal::open(&path, false).unwrap();
        j.hold(true);
        for i in 0..MAX_HELD + 3 {
            j.write(Record::now(Kind::SlotSpawn, format!("spawn {i}")));
        }
        assert_eq!(records(&path).len(), 6 + MAX_HELD);
        j.flush();
        assert_eq!(records(&path).len(), 6 + MAX_HELD + 3);
    }

    #[test]
    fn rotates_by_rename_keeps_n_and_every_file_starts_with_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("supervisor.log.toonl");
        let rotation = Rotation {
            max_bytes: 200,
            keep: 2,
        };
        let mut j = Journal::open(&path, false).unwrap().rotating(rotation);
        let ino = |p: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(p).unwrap().ino()
        };
        let mut written = Vec::new();
        let mut rotations = 0;
        for i in 0..40 {
            let ev = Record::now(Kind::SupervisorTick, format!("tick number {i}"));
            written.push(ev.clone());
            let before = ino(&path);
            j.write(ev);
            if ino(&path) != before {
                // Renamed, not copied: the old file lives on as `.1`.
                assert_eq!(ino(&event_log::rotated(&path, 1)), before);
                rotations += 1;
            }
        }
        assert!(rotations >= 3, "{rotations}");
        assert_eq!(
            names(dir.path()),
            [
                "supervisor.log.toonl",
                "supervisor.log.toonl.1",
                "supervisor.log.toonl.2"
            ]
        );
        // Renamed, not copied: the first file lives on under another name.
        let mut read = Vec::new();
        for p in [
            event_log::rotated(&path, 2),
            event_log::rotated(&path, 1),
            path.clone(),
        ] {
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(
                text.starts_with("[]{ts,kind,slot,pid,issue,msg}:\n"),
                "{text}"
            );
            assert!(
                text.len() < 200 + 100,
                "{} is {} bytes",
                p.display(),
                text.len()
            );
            read.extend(event_log::read_events(&p).unwrap());
        }
        // The newest records, in order, with none lost between the files.
        assert_eq!(read, written[written.len() - read.len()..]);
        assert!(read.len() < written.len());
    }

    #[test]
    fn keep_zero_starts_over_and_a_failed_rotation_keeps_logging() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("supervisor.log.toonl");
        let mut j = Journal::open(&path, false).unwrap().rotating(Rotation {
            max_bytes: 100,
            keep: 0,
        });
        for i in 0..10 {
            j.write(Record::now(Kind::SupervisorTick, format!("t{i}")));
        }
        assert_eq!(names(dir.path()), ["supervisor.log.toonl"]);
        let last = event_log::read_events(&path).unwrap();
        assert_eq!(last.last().map(|e| e.msg.as_str()), Some("t9"));

        // A directory where `.1` goes: the rename fails, the records still land.
        let path = dir.path().join("other.toonl");
        std::fs::create_dir_all(event_log::rotated(&path, 1).join("x")).unwrap();
        let mut j = Journal::open(&path, false).unwrap().rotating(Rotation {
            max_bytes: 100,
            keep: 1,
        });
        for i in 0..10 {
            j.write(Record::now(Kind::SupervisorTick, format!("t{i}")));
        }
        let evs = event_log::read_events(&path).unwrap();
        assert_eq!(evs.len(), 10);
    }
}
