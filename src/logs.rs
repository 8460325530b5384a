//! Reading the event log for people: a [`Tail`] that yields every complete record of
//! `supervisor.log.toonl` as it grows, across rotations (the file replaced by a rename:
//! same path, another inode), holding back a truncated last line until it is complete,
//! and a [`Filter`] on slot, kind and age.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::event_log::{self, Record};
use crate::fsutil::{self, Links};
use crate::layout::Layout;
use crate::toonl;

#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error("{path}: {source}")]
    Open {
        path: PathBuf,
        source: fsutil::SmallFileError,
    },
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{0}: not a duration (e.g. 90s, 15m, 2h, 1d)")]
    Duration(String),
    #[error("no worker output for slot {slot} under {dir}")]
    NoSlotLog { slot: usize, dir: PathBuf },
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
    pub fn poll(&mut self) -> Result<Vec<Seen>, LogsError> {
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
                    LogsError::Open {
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

    fn read_err(&self, source: io::Error) -> LogsError {
        LogsError::Read {
            path: self.path.clone(),
            source,
        }
    }

    fn read_open(&mut self, seen: &mut Vec<Seen>) -> Result<(), LogsError> {
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
            file.take(event_log::MAX_READ_BYTES).read_to_end(&mut bytes)
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
    pub fn poll(&mut self) -> Result<Batch, LogsError> {
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
        match event_log::decode_events(format!("{header}\n{line}\n").as_bytes()) {
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

/// `90`, `90s`, `15m`, `2h`, `1d`.
pub fn parse_duration(s: &str) -> Result<Duration, LogsError> {
    let bad = || LogsError::Duration(s.to_string());
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(secs).map(Duration::from_secs).ok_or_else(bad)
}

/// The slot's newest slot log: the one in the latest `logs/<yyyy-mm-dd>/` folder that
/// has one.
pub fn newest_slot_log(layout: &Layout, slot: usize) -> Result<PathBuf, LogsError> {
    let dir = layout.logs();
    let none = || LogsError::NoSlotLog {
        slot,
        dir: dir.clone(),
    };
    let mut days: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|_| none())?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|d| is_day(d))
        .collect();
    days.sort();
    days.iter()
        .rev()
        .map(|d| layout.slot_log(d, slot))
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .ok_or_else(none)
}

/// Most bytes of the event log's end [`last_event_per_slot`] reads: thousands of records,
/// whatever the log's size.
pub const LAST_EVENTS_BYTES: u64 = 256 << 10;

/// Each slot's newest record among the last `max_bytes` of the event log. Only the end is
/// read (a slot with no record there has none), the file opened without following a link
/// or blocking on a FIFO; the first, cut line and any line that is not a record are
/// skipped. The log's lines all share one header ([`event_log::FIELDS`]), so a line read
/// without the header above it still decodes.
pub fn last_event_per_slot(
    log: &Path,
    max_bytes: u64,
) -> Result<std::collections::BTreeMap<u64, Record>, LogsError> {
    let mut out = std::collections::BTreeMap::new();
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    let open_err = |source| LogsError::Open {
        path: log.to_path_buf(),
        source,
    };
    let read_err = |source| LogsError::Read {
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
    let header = toonl::header_line(&event_log::FIELDS);
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
        if let Ok(evs) = event_log::decode_events(&one) {
            for ev in evs {
                if let Some(slot) = ev.slot {
                    out.insert(slot, ev);
                }
            }
        }
    }
    Ok(out)
}

/// Follows one slot's worker output across the per-day folders: a worker writes to the
/// folder of the day it started in, so when a newer day's log of the slot appears (the
/// slot's next worker after midnight), the rest of the current one is read and the newer
/// one is followed from its start.
#[derive(Debug)]
pub struct SlotLogFollower {
    layout: Layout,
    slot: usize,
    current: PathBuf,
    tail: LineTail,
}

/// What [`SlotLogFollower::poll`] read: lines, and the path it moved to, if it did.
#[derive(Debug, Default)]
pub struct SlotLogLines {
    pub lines: Vec<Vec<u8>>,
    pub switched_to: Option<PathBuf>,
}

impl SlotLogFollower {
    /// Starts at the slot's newest log.
    pub fn new(layout: &Layout, slot: usize) -> Result<SlotLogFollower, LogsError> {
        let current = newest_slot_log(layout, slot)?;
        Ok(SlotLogFollower {
            layout: layout.clone(),
            slot,
            tail: LineTail::new(&current),
            current,
        })
    }

    pub fn current(&self) -> &Path {
        &self.current
    }

    /// The last line read so far that has no newline yet.
    pub fn partial(&self) -> &[u8] {
        self.tail.partial()
    }

    /// Everything new: the current file's growth, then, when a newer day's log exists,
    /// that file from its start.
    pub fn poll(&mut self) -> Result<SlotLogLines, LogsError> {
        let mut out = SlotLogLines::default();
        self.drain(&mut out.lines)?;
        if let Ok(newest) = newest_slot_log(&self.layout, self.slot)
            && newest != self.current
            && newest.parent() > self.current.parent()
        {
            // A torn last line of the old file is shown as it is: nothing appends to it
            // once its worker is gone.
            if !self.tail.partial().is_empty() {
                out.lines.push(self.tail.partial().to_vec());
            }
            self.tail = LineTail::new(&newest);
            self.current = newest.clone();
            out.switched_to = Some(newest);
            self.drain(&mut out.lines)?;
        }
        Ok(out)
    }

    fn drain(&mut self, lines: &mut Vec<Vec<u8>>) -> Result<(), LogsError> {
        for s in self.tail.poll()? {
            if let Seen::Line(l) = s {
                lines.push(l);
            }
        }
        Ok(())
    }
}

/// `yyyy-mm-dd`.
pub fn is_day(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_log::Kind;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert!(parse_duration("1w").is_err());
        assert!(parse_duration("m").is_err());
    }

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
        let mut text = toonl::header_line(&event_log::FIELDS);
        let row = |ev: &Record| event_log::encode_row(ev);
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
        text.push_str(&toonl::header_line(&event_log::FIELDS));
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

    #[test]
    fn days() {
        assert!(is_day("2026-12-01"));
        assert!(!is_day("2026-12-1"));
        assert!(!is_day("notadaydir"));
    }
}
