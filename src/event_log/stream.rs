//! The event log as a stream with a cursor (`afk-supervisor events`, the MCP server's
//! `tail_events`): every record comes with an opaque cursor naming the log generation it is
//! in and the byte just past it, so a consumer that restarts with its last cursor gets each
//! later record exactly once, across rotations (`docs/SPEC.md` §11.18).
//!
//! A generation is named by its file's inode, which a rotation's rename keeps, checked by a
//! fingerprint of the file's first bytes, so a new file that happens to reuse a dropped
//! generation's inode is never taken for it.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{MAX_READ_BYTES, Record, decode_events};
use crate::fsutil::{self, Links};

/// Bytes of a generation's start its fingerprint covers.
const FINGERPRINT_BYTES: u64 = 256;

/// Most bytes read from one generation per poll (a generation is at most `log.max_bytes`).
const MAX_POLL_BYTES: u64 = MAX_READ_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("{0:?}: not a cursor of `afk-supervisor events` (use one it printed, start or end)")]
    BadCursor(String),
    #[error("{path}: {source}")]
    Read { path: PathBuf, source: io::Error },
}

/// Where in the log: generation (inode and fingerprint) and the byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    ino: u64,
    fp: u64,
    offset: u64,
}

impl Cursor {
    /// `e1-<inode>-<fingerprint>-<offset>`, hex: opaque to consumers.
    pub fn encode(&self) -> String {
        format!("e1-{:x}-{:x}-{:x}", self.ino, self.fp, self.offset)
    }

    pub fn parse(s: &str) -> Result<Cursor, EventsError> {
        let bad = || EventsError::BadCursor(crate::text::excerpt(s));
        let mut parts = s.trim().split('-');
        if parts.next() != Some("e1") {
            return Err(bad());
        }
        let mut num = || {
            parts
                .next()
                .and_then(|p| u64::from_str_radix(p, 16).ok())
                .ok_or_else(bad)
        };
        let (ino, fp, offset) = (num()?, num()?, num()?);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Cursor { ino, fp, offset })
    }
}

/// Where a stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The oldest generation kept.
    Beginning,
    /// Just after the record this cursor came with.
    After(Cursor),
    /// Only what is written from now on.
    End,
}

impl Start {
    /// `start`, `end`, or a cursor.
    pub fn parse(s: &str) -> Result<Start, EventsError> {
        match s.trim() {
            "start" | "0" | "" => Ok(Start::Beginning),
            "end" => Ok(Start::End),
            c => Cursor::parse(c).map(Start::After),
        }
    }
}

/// One record and the cursor that resumes after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Positioned {
    pub cursor: String,
    pub event: Record,
}

/// What one poll read.
#[derive(Debug, Default)]
pub struct Batch {
    pub events: Vec<Positioned>,
    /// Things a consumer should know: a cursor whose generation was rotated away (events
    /// may be missing), lines that are not records.
    pub notes: Vec<String>,
}

/// One generation present now.
struct Generation {
    path: PathBuf,
    ino: u64,
    len: u64,
}

/// Follows the event log (its live file and the rotated `.1`…`.keep`) from a [`Start`].
#[derive(Debug)]
pub struct EventStream {
    log: PathBuf,
    keep: usize,
    /// Where the next read begins; `None` before any generation was seen.
    pos: Option<Cursor>,
    /// Resolved on the first poll.
    start: Option<Start>,
    /// The header in force at `pos` (`None`: scan the generation's start for it).
    header: Option<String>,
}

impl EventStream {
    pub fn new(log: &Path, keep: usize, start: Start) -> EventStream {
        EventStream {
            log: log.to_path_buf(),
            keep,
            pos: None,
            start: Some(start),
            header: None,
        }
    }

    /// The cursor at which the stream stands: what resumes after everything read so far.
    /// `None` while no generation exists yet.
    pub fn position(&self) -> Option<String> {
        self.pos.map(|c| c.encode())
    }

    fn generations(&self) -> Vec<Generation> {
        super::generations(&self.log, self.keep)
            .into_iter()
            .filter_map(|path| {
                let m = std::fs::symlink_metadata(&path).ok()?;
                m.is_file().then(|| Generation {
                    path,
                    ino: m.ino(),
                    len: m.len(),
                })
            })
            .collect()
    }

    /// Every record appended since the last poll (at most [`MAX_POLL_BYTES`] of one
    /// generation per call; the rest comes with the next).
    pub fn poll(&mut self) -> Result<Batch, EventsError> {
        let mut batch = Batch::default();
        // A generation is moved past once, so this ends; the bound guards a log
        // rotating faster than it is read.
        for _ in 0..=self.keep + 2 {
            let gens = self.generations();
            if gens.is_empty() {
                return Ok(batch);
            }
            if let Some(start) = self.start.take() {
                self.resolve(start, &gens)?;
            }
            let Some(pos) = self.pos else {
                return Ok(batch);
            };
            let found = gens
                .iter()
                .position(|g| g.ino == pos.ino && fingerprint(&g.path, pos.offset) == Some(pos.fp));
            let Some(i) = found else {
                batch.notes.push(format!(
                    "cursor {}: its log generation was rotated away; reading from the oldest kept (events between may be missing)",
                    pos.encode()
                ));
                self.pos = Some(begin(&gens[0]));
                self.header = None;
                continue;
            };
            let g = &gens[i];
            let end_of_file = self.read_from(g, &mut batch)?;
            if i + 1 < gens.len() && end_of_file {
                // A newer generation exists, so this one is complete: go on to it.
                self.pos = Some(begin(&gens[i + 1]));
                self.header = None;
                continue;
            }
            return Ok(batch);
        }
        Ok(batch)
    }

    fn resolve(&mut self, start: Start, gens: &[Generation]) -> Result<(), EventsError> {
        match start {
            Start::Beginning => self.pos = Some(begin(&gens[0])),
            Start::After(c) => self.pos = Some(c),
            Start::End => {
                let Some(live) = gens.last() else {
                    return Ok(());
                };
                // The end of the last complete line: a torn tail is read once it is whole.
                let pos =
                    complete_end(&live.path, live.len).map_err(|source| EventsError::Read {
                        path: live.path.clone(),
                        source,
                    })?;
                self.pos = Some(Cursor {
                    ino: live.ino,
                    fp: fingerprint(&live.path, pos).unwrap_or(0),
                    offset: pos,
                });
            }
        }
        Ok(())
    }

    /// Reads `g` from the stream's offset; whether it reached the file's end (nothing held
    /// back but a line that never ended, which a complete generation cannot finish).
    fn read_from(&mut self, g: &Generation, batch: &mut Batch) -> Result<bool, EventsError> {
        let Some(pos) = self.pos else {
            return Ok(true);
        };
        let err = |source: io::Error| EventsError::Read {
            path: g.path.clone(),
            source,
        };
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true);
        let Some(mut f) =
            fsutil::open_regular(&g.path, opts, Links::Refuse).map_err(|e| err(e.into()))?
        else {
            return Ok(true);
        };
        if self.header.is_none() && pos.offset > 0 {
            self.header = header_before(&mut f, pos.offset).map_err(err)?;
        }
        let mut bytes = Vec::new();
        f.seek(SeekFrom::Start(pos.offset))
            .and_then(|_| (&mut f).take(MAX_POLL_BYTES).read_to_end(&mut bytes))
            .map_err(err)?;
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let mut at = pos.offset;
        for line in bytes[..complete].split_inclusive(|b| *b == b'\n') {
            at += line.len() as u64;
            let text = String::from_utf8_lossy(&line[..line.len() - 1]);
            if text.starts_with("[]{") && text.ends_with("}:") {
                self.header = Some(text.into_owned());
                continue;
            }
            if text.is_empty() {
                continue;
            }
            let decoded = self.header.as_ref().and_then(|h| {
                decode_events(format!("{h}\n{text}\n").as_bytes())
                    .ok()
                    .and_then(|mut v| v.pop())
            });
            let cursor = Cursor {
                ino: g.ino,
                fp: fingerprint(&g.path, at).unwrap_or(0),
                offset: at,
            };
            match decoded {
                Some(event) => batch.events.push(Positioned {
                    cursor: cursor.encode(),
                    event,
                }),
                None => batch.notes.push(format!(
                    "{}: skipped a line that is not a record: {}",
                    g.path.display(),
                    crate::text::clip_quoted(&text)
                )),
            }
        }
        self.pos = Some(Cursor {
            ino: g.ino,
            fp: fingerprint(&g.path, at).unwrap_or(0),
            offset: at,
        });
        let read_all = (bytes.len() as u64) < MAX_POLL_BYTES;
        Ok(read_all)
    }
}

/// A generation's first byte.
fn begin(g: &Generation) -> Cursor {
    Cursor {
        ino: g.ino,
        fp: fingerprint(&g.path, 0).unwrap_or(0),
        offset: 0,
    }
}

/// FNV-1a of the file's first `min(offset, FINGERPRINT_BYTES)` bytes; `None` when the file
/// is shorter than that (it cannot be the generation a cursor at `offset` was made in).
fn fingerprint(path: &Path, offset: u64) -> Option<u64> {
    let n = offset.min(FINGERPRINT_BYTES);
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    let f = fsutil::open_regular(path, opts, Links::Refuse).ok()??;
    let mut buf = Vec::new();
    f.take(n).read_to_end(&mut buf).ok()?;
    if (buf.len() as u64) < n {
        return None;
    }
    Some(buf.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    }))
}

/// The last header line before `offset` (a stream resumed mid-file needs it).
fn header_before(f: &mut File, offset: u64) -> io::Result<Option<String>> {
    let mut bytes = Vec::new();
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.take(offset.min(MAX_POLL_BYTES)).read_to_end(&mut bytes))?;
    let text = String::from_utf8_lossy(&bytes);
    Ok(text
        .lines()
        .rev()
        .find(|l| l.starts_with("[]{") && l.ends_with("}:"))
        .map(str::to_string))
}

/// The offset just past the last newline within the file's first `len` bytes.
fn complete_end(path: &Path, len: u64) -> io::Result<u64> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    let Some(mut f) = fsutil::open_regular(path, opts, Links::Refuse).map_err(io::Error::from)?
    else {
        return Ok(0);
    };
    let back = len.min(64 << 10);
    let mut tail = Vec::new();
    f.seek(SeekFrom::Start(len - back))
        .and_then(|_| f.take(back).read_to_end(&mut tail))?;
    Ok(match tail.iter().rposition(|b| *b == b'\n') {
        Some(i) => len - back + i as u64 + 1,
        None if back == len => 0,
        // A last line over 64 KiB long: resume at its end anyway.
        None => len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_log::{EventLog, Kind, rotated};

    fn msgs(b: &Batch) -> Vec<String> {
        b.events.iter().map(|p| p.event.msg.clone()).collect()
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let c = Cursor {
            ino: 77,
            fp: 0xdead,
            offset: 12,
        };
        assert_eq!(Cursor::parse(&c.encode()).unwrap(), c);
        for bad in ["e2-1-2-3", "e1-1-2", "e1-x-2-3", "e1-1-2-3-4", "hello"] {
            assert!(Start::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Start::parse("end").unwrap(), Start::End);
    }

    #[test]
    fn a_resumed_stream_gets_every_record_once_across_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("supervisor.log.toonl");
        let mut w = EventLog::open(&log).unwrap();
        for i in 0..3 {
            w.append(&Record::now(Kind::SlotSpawn, format!("m{i}")))
                .unwrap();
        }
        let mut s = EventStream::new(&log, 3, Start::Beginning);
        let b = s.poll().unwrap();
        assert_eq!(msgs(&b), ["m0", "m1", "m2"]);
        let after_m1 = b.events[1].cursor.clone();
        // A rotation, then more records in the new file.
        std::fs::rename(&log, rotated(&log, 1)).unwrap();
        drop(w);
        let mut w = EventLog::open(&log).unwrap();
        w.append(&Record::now(Kind::SlotExit, "m3")).unwrap();
        assert_eq!(msgs(&s.poll().unwrap()), ["m3"]);
        // A consumer restarting with the cursor after m1 gets m2 and m3, once.
        let mut r = EventStream::new(&log, 3, Start::parse(&after_m1).unwrap());
        let b = r.poll().unwrap();
        assert_eq!(msgs(&b), ["m2", "m3"]);
        assert!(r.poll().unwrap().events.is_empty());
        // From the end: only what comes next.
        let mut e = EventStream::new(&log, 3, Start::End);
        assert!(e.poll().unwrap().events.is_empty());
        w.append(&Record::now(Kind::SlotExit, "m4")).unwrap();
        assert_eq!(msgs(&e.poll().unwrap()), ["m4"]);
        // A cursor whose generation is gone says so and reads from the oldest kept.
        let mut gone = EventStream::new(
            &log,
            3,
            Start::After(Cursor {
                ino: 1,
                fp: 2,
                offset: 3,
            }),
        );
        let b = gone.poll().unwrap();
        assert!(b.notes[0].contains("rotated away"), "{:?}", b.notes);
        assert_eq!(msgs(&b), ["m0", "m1", "m2", "m3", "m4"]);
    }
}
