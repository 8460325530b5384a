//! Following the event log for people (`logs`, `status`): a [`Tail`] that yields every
//! complete record of `supervisor.log.toonl` as it grows, across rotations (the file
//! replaced by a rename: same path, another inode), holding back a truncated last line
//! until it is complete; a [`Filter`] on slot, kind and age; each slot's last record. The
//! line follower underneath ([`LineTail`]) also follows the slot logs (`crate::slot_log_view`).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{FIELDS, MAX_READ_BYTES, Record, decode_events};
use crate::fsutil::{self, Links};
use crate::toonl;

/// Why a followed file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TailError {
    #[error("{path}: {source}")]
    Open {
        path: PathBuf,
        source: fsutil::SmallFileError,
    },
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: io::Error },
}

/// What a [`LineTail`] saw: a complete line (without its newline), or that the path now
/// names another file (rotated) or one cut short (truncated), read from its start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Line(Vec<u8>),
    NewFile,
}

/// Follows one file path line by line: reads what was appended since the last call,
/// holds back a last line without its newline, and notices when the file at the path is
/// another one (rotated by a rename: other inode) or shorter (truncated in place).
#[derive(Debug)]
pub struct LineTail {
    path: PathBuf,
    file: Option<(File, (u64, u64))>,
    offset: u64,
    partial: Vec<u8>,
}

impl LineTail {
    pub fn new(path: &Path) -> LineTail {
        LineTail {
            path: path.to_path_buf(),
            file: None,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// Everything new since the last call. A missing file is not an error (not yet
    /// written, or between a rotation's rename and the reopen).
    pub fn poll(&mut self) -> Result<Vec<Seen>, TailError> {
        let mut seen = Vec::new();
        let current = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if let Some((_, id)) = &self.file
            && current != Some(*id)
        {
            // Rotated: finish the old file (its writer may have appended before the
            // rename), then start the new one from its first byte.
            self.read_open(&mut seen)?;
            self.file = None;
            self.offset = 0;
            self.partial.clear();
            if current.is_some() {
                seen.push(Seen::NewFile);
            }
        }
        if self.file.is_none() && current.is_some() {
            let mut opts = std::fs::OpenOptions::new();
            opts.read(true);
            let opened =
                fsutil::open_regular(&self.path, opts, Links::Refuse).map_err(|source| {
                    TailError::Open {
                        path: self.path.clone(),
                        source,
                    }
                })?;
            if let Some(f) = opened {
                let m = f.metadata().map_err(|source| self.read_err(source))?;
                self.file = Some((f, (m.dev(), m.ino())));
            }
        }
        self.read_open(&mut seen)?;
        Ok(seen)
    }

    /// The last line read so far that has no newline yet.
    pub fn partial(&self) -> &[u8] {
        &self.partial
    }

    fn read_err(&self, source: io::Error) -> TailError {
        TailError::Read {
            path: self.path.clone(),
            source,
        }
    }

    fn read_open(&mut self, seen: &mut Vec<Seen>) -> Result<(), TailError> {
        let Some((file, _)) = self.file.as_mut() else {
            return Ok(());
        };
        let mut bytes = Vec::new();
        let read = file.metadata().and_then(|m| {
            if m.len() < self.offset {
                // Truncated in place: what was read is gone; read from the start again.
                self.offset = 0;
                self.partial.clear();
                seen.push(Seen::NewFile);
            }
            file.seek(SeekFrom::Start(self.offset))?;
            file.take(MAX_READ_BYTES).read_to_end(&mut bytes)
        });
        let n = read.map_err(|source| self.read_err(source))?;
        self.offset += n as u64;
        self.partial.extend_from_slice(&bytes);
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return Ok(());
        };
        let rest = self.partial.split_off(end + 1);
        let complete = std::mem::replace(&mut self.partial, rest);
        // `complete` ends with its newline: the lines are what it separates.
        let body = &complete[..complete.len() - 1];
        seen.extend(body.split(|b| *b == b'\n').map(|l| Seen::Line(l.to_vec())));
        Ok(())
    }
}

/// What a [`Tail`] read: records, and lines that were not records (reported, skipped).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub events: Vec<Record>,
    pub skipped: Vec<String>,
}

/// The records of a followed event log. A line torn by a crash (a bad line directly
/// followed by the header its successor wrote on reopening) is skipped silently; a
/// truncated last line waits for its newline.
#[derive(Debug)]
pub struct Tail {
    lines: LineTail,
    /// The header in force for the lines that follow.
    header: Option<String>,
    /// A complete line that did not decode, held until the next line shows whether it
    /// was torn (a header follows) or malformed.
    suspect: Option<String>,
}

impl Tail {
    pub fn new(path: &Path) -> Tail {
        Tail {
            lines: LineTail::new(path),
            header: None,
            suspect: None,
        }
    }

    /// Every record appended since the last call.
    pub fn poll(&mut self) -> Result<Batch, TailError> {
        let mut batch = Batch::default();
        for s in self.lines.poll()? {
            match s {
                Seen::NewFile => {
                    self.flush_suspect(&mut batch);
                    self.header = None;
                }
                Seen::Line(l) => self.line(&String::from_utf8_lossy(&l), &mut batch),
            }
        }
        Ok(batch)
    }

    /// The end of a one-off read: a malformed last line is reported now.
    pub fn finish(&mut self) -> Vec<String> {
        let mut batch = Batch::default();
        self.flush_suspect(&mut batch);
        batch.skipped
    }

    fn line(&mut self, line: &str, batch: &mut Batch) {
        if line.starts_with("[]{") && line.ends_with("}:") {
            // A bad line right before a header is a torn write: skipped without a word.
            self.suspect = None;
            self.header = Some(line.to_string());
            return;
        }
        self.flush_suspect(batch);
        let Some(header) = &self.header else {
            batch.skipped.push(line.to_string());
            return;
        };
        match decode_events(format!("{header}\n{line}\n").as_bytes()) {
            Ok(evs) => batch.events.extend(evs),
            Err(_) => self.suspect = Some(line.to_string()),
        }
    }

    fn flush_suspect(&mut self, batch: &mut Batch) {
        if let Some(s) = self.suspect.take() {
            batch.skipped.push(s);
        }
    }
}

/// Which records to show.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub slot: Option<u64>,
    /// A kind (`slot.exit`) or a dotted prefix of kinds (`slot`, `circuit`).
    pub kind: Option<String>,
    pub since: Option<SystemTime>,
    /// Only records at or before this time.
    pub until: Option<SystemTime>,
}

impl Filter {
    pub fn matches(&self, ev: &Record) -> bool {
        if self.slot.is_some() && ev.slot != self.slot {
            return false;
        }
        if let Some(k) = &self.kind
            && !ev.kind.is_under(k)
        {
            return false;
        }
        if let Some(until) = self.until
            && let Some(t) = crate::timeutil::parse_rfc3339(&ev.ts)
            && t > until
        {
            return false;
        }
        if let Some(since) = self.since {
            // A record without a readable time is shown rather than hidden.
            if let Some(t) = crate::timeutil::parse_rfc3339(&ev.ts)
                && t < since
            {
                return false;
            }
        }
        true
    }
}

/// Most bytes of the event log's end [`last_event_per_slot`] reads: thousands of records,
/// whatever the log's size.
pub const LAST_EVENTS_BYTES: u64 = 256 << 10;

/// Each slot's newest record among the last `max_bytes` of the event log. Only the end is
/// read (a slot with no record there has none), the file opened without following a link
/// or blocking on a FIFO; the first, cut line and any line that is not a record are
/// skipped. The log's lines all share one header ([`FIELDS`]), so a line read
/// without the header above it still decodes.
pub fn last_event_per_slot(
    log: &Path,
    max_bytes: u64,
) -> Result<std::collections::BTreeMap<u64, Record>, TailError> {
    let mut out = std::collections::BTreeMap::new();
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    let open_err = |source| TailError::Open {
        path: log.to_path_buf(),
        source,
    };
    let read_err = |source| TailError::Read {
        path: log.to_path_buf(),
        source,
    };
    let Some(mut f) = fsutil::open_regular(log, opts, Links::Refuse).map_err(open_err)? else {
        return Ok(out);
    };
    let len = f.metadata().map_err(read_err)?.len();
    let from = len.saturating_sub(max_bytes);
    let mut bytes = Vec::new();
    f.seek(SeekFrom::Start(from))
        .and_then(|_| f.take(max_bytes).read_to_end(&mut bytes))
        .map_err(read_err)?;
    let mut body = bytes.as_slice();
    if from > 0 {
        // The first line is (probably) cut: whatever precedes its newline goes.
        body = match body.iter().position(|b| *b == b'\n') {
            Some(i) => &body[i + 1..],
            None => &[],
        };
    }
    let header = toonl::header_line(&FIELDS);
    let complete = match body.iter().rposition(|b| *b == b'\n') {
        Some(i) => &body[..i],
        None => &[],
    };
    for line in complete.split(|b| *b == b'\n') {
        if line.is_empty() || line.starts_with(b"[]{") {
            continue;
        }
        let mut one = header.clone().into_bytes();
        one.extend_from_slice(line);
        one.push(b'\n');
        if let Ok(evs) = decode_events(&one) {
            for ev in evs {
                if let Some(slot) = ev.slot {
                    out.insert(slot, ev);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_log::{Kind, encode_row};

    #[test]
    fn kind_filter_takes_a_kind_or_a_dotted_prefix() {
        let f = Filter {
            kind: Some("slot".into()),
            ..Filter::default()
        };
        assert!(f.matches(&Record::now(Kind::SlotExit, "x")));
        assert!(!f.matches(&Record::now(Kind::read("slotted"), "x")));
        assert!(!f.matches(&Record::now(Kind::SupervisorTick, "x")));
    }

    #[test]
    fn each_slots_last_event_comes_from_the_logs_end_only() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("supervisor.log.toonl");
        let mut text = toonl::header_line(&FIELDS);
        let row = |ev: &Record| encode_row(ev);
        text.push_str(&row(&Record::now(Kind::SlotSpawn, "old of slot 3").slot(3)));
        // Far more than the bytes read, so slot 3's record is out of reach.
        for i in 0..4000 {
            text.push_str(&row(&Record::now(
                Kind::SupervisorTick,
                format!("tick {i}"),
            )));
        }
        text.push_str(&row(&Record::now(Kind::SlotSpawn, "first of 0").slot(0)));
        text.push_str(&row(
            &Record::now(Kind::SlotExit, "worker x exited 1").slot(1)
        ));
        text.push_str(&toonl::header_line(&FIELDS));
        text.push_str(&row(&Record::now(Kind::SlotSpawn, "second of 0").slot(0)));
        text.push_str("garbage line that is no record\n");
        text.push_str("[]{torn");
        std::fs::write(&log, &text).unwrap();
        assert!(text.len() as u64 > 4 * 4096);
        let got = last_event_per_slot(&log, 4096).unwrap();
        let msgs: Vec<(u64, &str)> = got.iter().map(|(k, v)| (*k, v.msg.as_str())).collect();
        assert_eq!(msgs, vec![(0, "second of 0"), (1, "worker x exited 1")]);
        // The whole file read: slot 3 too.
        let all = last_event_per_slot(&log, 1 << 30).unwrap();
        assert_eq!(all.len(), 3);
        assert!(
            last_event_per_slot(&dir.path().join("none"), 4096)
                .unwrap()
                .is_empty()
        );
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = last_event_per_slot(&fifo, 4096).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }
}
