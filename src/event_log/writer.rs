//! Appending to the event log: the supervisor's own writer ([`EventLog`], one per file, kept
//! open), the one line another process adds ([`append_event`]), and the rotated
//! generations' names. Records are written whole lines at a time (one `write` for one
//! record, or for the records of one turn of the supervisor's loop), so a crash leaves at
//! most a truncated last line, which the readers skip.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{FIELDS, Record, encode_row};
use crate::fsutil::open_append;
use crate::toonl::{self, LogError};

/// Appends events to one log file. There is one writer per file (the supervisor holds the
/// lane lock), so no cross-process locking is needed here.
#[derive(Debug)]
pub struct EventLog {
    path: PathBuf,
    file: File,
    /// Bytes in the file as this writer knows it (what was there, the header, its rows).
    size: u64,
    /// A torn record could not be cut off: the next one starts with a newline.
    torn: bool,
}

impl EventLog {
    /// Opens for appending and writes the header line, as every opening must.
    pub fn open(path: &Path) -> Result<Self, LogError> {
        let io_err = |source| LogError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_err)?;
        }
        // Never a symlink, FIFO or directory: appending to one would write elsewhere or
        // block the supervisor for good.
        let mut file = open_append(path).map_err(|e| io_err(e.into()))?;
        // A previous writer may have died mid-line; start the header on a fresh line.
        let len = file.metadata().map_err(io_err)?.len();
        let mut header = String::new();
        if len > 0 && !ends_with_newline(path, len).map_err(io_err)? {
            header.push('\n');
        }
        header.push_str(&toonl::header_line(&FIELDS));
        file.write_all(header.as_bytes()).map_err(io_err)?;
        Ok(EventLog {
            path: path.to_path_buf(),
            file,
            size: len + header.len() as u64,
            torn: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's size as this writer left it.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn append(&mut self, event: &Record) -> Result<(), LogError> {
        self.append_all(std::slice::from_ref(event))
    }

    /// Appends `events` in one `write`: the records of one turn of the supervisor's loop
    /// (a respawn's exit, spawn and figures) cost one system call, not one each. A write
    /// that fails part-way is cut back to the last whole record before them, so either all
    /// of them are in the file or none is.
    pub fn append_all(&mut self, events: &[Record]) -> Result<(), LogError> {
        if events.is_empty() {
            return Ok(());
        }
        // After a torn write that could not be cut off, the next record starts on a fresh
        // line, so it is never glued onto the torn one.
        let mut text = String::with_capacity(128 * events.len());
        if self.torn {
            text.push('\n');
        }
        for event in events {
            text.push_str(&encode_row(event));
        }
        if let Err(source) = self.file.write_all(text.as_bytes()) {
            self.cut_torn();
            return Err(LogError::Io {
                path: self.path.clone(),
                source,
            });
        }
        self.torn = false;
        self.size += text.len() as u64;
        Ok(())
    }

    /// A write that failed part-way (a full disk) may have left part of a record: the file
    /// is cut back to the last whole record; where even that fails, the next record starts
    /// on a fresh line.
    fn cut_torn(&mut self) {
        let len = self.file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        if len == self.size {
            return;
        }
        if self.file.set_len(self.size).is_err() {
            self.torn = true;
            self.size = len;
        }
    }
}

/// The `i`th rotated generation of a log: `supervisor.log.toonl.<i>` (`.1` the newest).
pub fn rotated(log: &Path, i: usize) -> PathBuf {
    let mut name = log.as_os_str().to_os_string();
    name.push(format!(".{i}"));
    PathBuf::from(name)
}

/// The rotated logs, oldest first (`.N` … `.1`), then the live one.
pub fn generations(log: &Path, keep: usize) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = (1..=keep)
        .rev()
        .map(|i| rotated(log, i))
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .collect();
    out.push(log.to_path_buf());
    out
}

/// Whether the log's last byte is a newline, read through a safe open of the same file.
fn ends_with_newline(path: &Path, len: u64) -> io::Result<bool> {
    let mut opts = fs::OpenOptions::new();
    opts.read(true);
    let f = crate::fsutil::open_regular(path, opts, crate::fsutil::Links::Refuse)?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, len - 1)?;
    Ok(b[0] == b'\n')
}

/// Appends one record to the fleet's event log (`log`, the layout's `event_log()`) from a
/// process (or thread) that is not the log's writer: the CLI and MCP recording an operator's request, the built-in worker and
/// the claims belt recording a rescue. The supervisor is the log's usual writer; this is
/// one `write` of one line through [`toonl::append_record`], which the readers (and the
/// writer's rotation) take like any record, so no lock is needed. Callers warn on an
/// error and go on: a log that cannot be written never fails the act it records.
pub fn append_event(log: &Path, ev: &Record) -> Result<(), LogError> {
    let json = serde_json::to_value(ev).map_err(|e| LogError::Encode {
        path: log.to_path_buf(),
        source: e.into(),
    })?;
    if let Some(parent) = log.parent() {
        std::fs::create_dir_all(parent).map_err(|source| LogError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    toonl::append_record(log, &FIELDS, json)
}
