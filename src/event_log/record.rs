//! The record and its row: the one format of `supervisor.log.toonl` (`docs/SPEC.md` §5).

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Kind;
use crate::fsutil::read_small_file;
use crate::toonl::{self, DecodeError, LogError};

/// Largest log [`read_events`] reads (the supervisor only appends).
pub const MAX_READ_BYTES: u64 = 256 << 20;

/// Header fields, in order.
pub const FIELDS: [&str; 6] = ["ts", "kind", "slot", "pid", "issue", "msg"];

/// One event-log record: a row of the log, in [`FIELDS`]' order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Record {
    pub ts: String,
    pub kind: Kind,
    pub slot: Option<u64>,
    pub pid: Option<i64>,
    pub issue: Option<u64>,
    pub msg: String,
}

impl Record {
    /// A record stamped now.
    pub fn now(kind: Kind, msg: impl Into<String>) -> Self {
        Record {
            ts: crate::timeutil::now_rfc3339_millis(),
            kind,
            slot: None,
            pid: None,
            issue: None,
            msg: msg.into(),
        }
    }

    /// One line for people: `ts kind [slot=S] [pid=P] [issue=N]: msg`, every part with
    /// control characters escaped.
    pub fn human_line(&self) -> String {
        let mut line = format!("{} {}", self.ts, self.kind);
        if let Some(s) = self.slot {
            line.push_str(&format!(" slot={s}"));
        }
        if let Some(p) = self.pid {
            line.push_str(&format!(" pid={p}"));
        }
        if let Some(i) = self.issue {
            line.push_str(&format!(" issue={i}"));
        }
        crate::text::escape(&format!("{line}: {}", self.msg))
    }

    pub fn slot(mut self, slot: usize) -> Self {
        self.slot = Some(slot as u64);
        self
    }

    pub fn pid(mut self, pid: i32) -> Self {
        self.pid = Some(i64::from(pid));
        self
    }

    pub fn issue(mut self, issue: u64) -> Self {
        self.issue = Some(issue);
        self
    }
}

/// Encodes one record as a row line (with its newline), without header or trailer: the
/// cells in [`FIELDS`]' order, written by [`crate::toon_doc::row`] (a property test holds
/// it to [`toonl::encode_record`], the general encoder's row).
pub fn encode_row(event: &Record) -> String {
    use crate::toon_doc::Cell;
    let opt_u64 = |v: Option<u64>| v.map_or(Cell::Null, Cell::U64);
    crate::toon_doc::row([
        Cell::Str(&event.ts),
        Cell::Str(event.kind.as_str()),
        opt_u64(event.slot),
        event.pid.map_or(Cell::Null, Cell::I64),
        opt_u64(event.issue),
        Cell::Str(&event.msg),
    ])
}

/// Reads every complete record of a log file. A line torn by a crash mid-write (the last line without
/// its newline, or a bad row directly followed by the header a new writer wrote on
/// reopening) is skipped; any other malformed line is an error naming its line.
pub fn read_events(path: &Path) -> Result<Vec<Record>, LogError> {
    let bytes = read_small_file(path, MAX_READ_BYTES)
        .map_err(|e| LogError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?
        .ok_or_else(|| LogError::Io {
            path: path.to_path_buf(),
            source: io::ErrorKind::NotFound.into(),
        })?;
    decode_events(&bytes).map_err(|source| LogError::Decode {
        path: path.to_path_buf(),
        source,
    })
}

/// Every complete record of a log's bytes ([`read_events`] without the file): the
/// records, or the first malformed one that is not a torn write.
pub fn decode_events(bytes: &[u8]) -> Result<Vec<Record>, DecodeError> {
    toonl::decode_records(bytes)
}
