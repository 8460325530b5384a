//! The TOONL event log `supervisor.log.toonl` (`docs/SPEC.md` §5), and the one TOONL codec
//! for every other TOONL file (a worker's `liveness.toonl`, the attempt ledger): one
//! encoder of rows ([`encode_record`]), one appender ([`append_record`], [`EventLog`]), one
//! reader of records ([`decode_records`], [`last_record`]).
//!
//! Cells are decoded by `reddb-io-toon` (its streaming `ToonlRowReader`) and encoded by its
//! `ToonlEncoder`, or for the event log's own rows by `toon_doc::row`, which a property test
//! holds to it, so quoting follows TOON exactly. Records are written whole lines at a time
//! (one `write` for one record, or for the records of one turn of the supervisor's loop),
//! so a crash leaves at most a truncated last line, which the readers skip.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use reddb_io_toon::{ToonlEncoder, ToonlRowReader, Value};
use serde::{Deserialize, Serialize};

use crate::fsutil::{Durability, open_append, read_small_file, sync_dir};

/// Largest log [`read_events`] reads (the supervisor only appends).
pub const MAX_READ_BYTES: u64 = 256 << 20;

/// Header fields, in order.
pub const FIELDS: [&str; 6] = ["ts", "kind", "slot", "pid", "issue", "msg"];

/// One event-log record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Event {
    pub ts: String,
    pub kind: String,
    pub slot: Option<u64>,
    pub pid: Option<i64>,
    pub issue: Option<u64>,
    pub msg: String,
}

impl Event {
    /// An event stamped now.
    pub fn now(kind: &str, msg: impl Into<String>) -> Self {
        Event {
            ts: crate::timeutil::now_rfc3339_millis(),
            kind: kind.to_string(),
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

/// Why one record could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("{0}")]
    Toon(#[from] reddb_io_toon::ToonlError),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("encoder produced no row")]
    NoRow,
    #[error("encoder produced a malformed row")]
    MalformedRow,
    #[error("record before any header")]
    NoHeader,
    #[error("no record")]
    NoRecord,
    #[error("record does not match the header: {0}")]
    Mismatch(serde_json::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// `msg` is a [`CodecError`]'s text (the attempt ledger builds one from its own).
    #[error("{path}: cannot encode event: {msg}")]
    Encode { path: PathBuf, msg: String },
    #[error("{path}:{line}: {msg}")]
    Decode {
        path: PathBuf,
        line: usize,
        msg: String,
    },
}

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
        header.push_str(&header_line(&FIELDS));
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

    pub fn append(&mut self, event: &Event) -> Result<(), LogError> {
        self.append_all(std::slice::from_ref(event))
    }

    /// Appends `events` in one `write`: the records of one turn of the supervisor's loop
    /// (a respawn's exit, spawn and figures) cost one system call, not one each. A write
    /// that fails part-way is cut back to the last whole record before them, so either all
    /// of them are in the file or none is.
    pub fn append_all(&mut self, events: &[Event]) -> Result<(), LogError> {
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

/// Encodes one event as a row line (with its newline), without header or trailer: the
/// cells in [`FIELDS`]' order, written by [`crate::toon_doc::row`] (a property test holds
/// it to [`encode_record`], the general encoder's row).
pub fn encode_row(event: &Event) -> String {
    use crate::toon_doc::Cell;
    let opt_u64 = |v: Option<u64>| v.map_or(Cell::Null, Cell::U64);
    crate::toon_doc::row([
        Cell::Str(&event.ts),
        Cell::Str(&event.kind),
        opt_u64(event.slot),
        event.pid.map_or(Cell::Null, Cell::I64),
        opt_u64(event.issue),
        Cell::Str(&event.msg),
    ])
}

/// The header line (with its newline) of a TOONL segment with these fields.
pub fn header_line(fields: &[&str]) -> String {
    format!("[]{{{}}}:\n", fields.join(","))
}

/// Encodes any record whose keys are `fields` as one row line (with its newline), so other
/// TOONL files (e.g. a worker's `liveness.toonl`) quote cells exactly like the event log.
pub fn encode_record(fields: &[&str], json: serde_json::Value) -> Result<String, CodecError> {
    let value = Value::from_json_value(json);
    let mut enc = ToonlEncoder::new(',', fields)?;
    enc.push_value_row(&value)?;
    let text = enc.finish();
    // finish() yields "header\nrow\n[=1]\n"; the log keeps the header per opening and
    // never closes a segment, so only the row line is taken.
    let row = text.lines().nth(1).ok_or(CodecError::NoRow)?;
    if row.contains('\n') || row.is_empty() {
        return Err(CodecError::MalformedRow);
    }
    Ok(format!("{row}\n"))
}

/// Appends one event to the fleet's event log (`log`, the layout's `event_log()`) from a process (or thread) that is not the
/// log's writer: the CLI and MCP recording an operator's request, the built-in worker and
/// the claims belt recording a rescue. The supervisor is the log's usual writer; this is
/// one `write` of one line through [`append_record`], which the readers (and the
/// writer's rotation) take like any record, so no lock is needed. Callers warn on an
/// error and go on: a log that cannot be written never fails the act it records.
pub fn append_event(log: &Path, ev: &Event) -> Result<(), LogError> {
    let json = serde_json::to_value(ev).map_err(|e| LogError::Encode {
        path: log.to_path_buf(),
        msg: e.to_string(),
    })?;
    if let Some(parent) = log.parent() {
        std::fs::create_dir_all(parent).map_err(|source| LogError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    append_record(log, &FIELDS, json)
}

/// Appends one record to a TOONL file that several processes may append to: one
/// `write` of the row (with the header first when the file is new), through
/// [`open_append`], so a symlink, FIFO or directory at the path is refused, never written
/// through or waited on. Two writers creating the file at once may both write a header;
/// readers accept a header repeated.
pub fn append_record(
    path: &Path,
    fields: &[&str],
    json: serde_json::Value,
) -> Result<(), LogError> {
    append_under_header(path, fields, json, None, Durability::Cached)
}

/// [`append_record`] to a file whose fields may have grown since it was created: when the
/// file's newest header is not `fields`' own, the row goes under a fresh copy of the current
/// header (readers take each row under the header above it), so an older file keeps its
/// old rows readable and gains the new fields. The file is read up to `max_bytes` to find
/// its header; one bigger gets the header repeated, which readers accept. With
/// [`Durability::Synced`] the record is on the disk when this returns (and the file's
/// directory entry, when the record started the file).
pub fn append_record_current(
    path: &Path,
    fields: &[&str],
    json: serde_json::Value,
    max_bytes: u64,
    durability: Durability,
) -> Result<(), LogError> {
    let header = header_line(fields);
    // `Some(torn)` when the header must be written again; `torn` when the file does not
    // end with a whole line (a dead writer's), which must not swallow the header.
    let stale = match read_small_file(path, max_bytes) {
        Ok(Some(bytes)) if !bytes.is_empty() => {
            let text = String::from_utf8_lossy(&bytes);
            let newest = text
                .lines()
                .rfind(|l| l.starts_with("[]{") && l.ends_with("}:"));
            (newest != Some(header.trim_end())).then_some(!text.ends_with('\n'))
        }
        _ => None,
    };
    append_under_header(path, fields, json, stale, durability)
}

/// One `write` of the row: after the header when the file is new, or when `reheader` is
/// `Some(torn)` (after a newline first when `torn`).
fn append_under_header(
    path: &Path,
    fields: &[&str],
    json: serde_json::Value,
    reheader: Option<bool>,
    durability: Durability,
) -> Result<(), LogError> {
    let io_err = |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    };
    let row = encode_record(fields, json).map_err(|e| LogError::Encode {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })?;
    let mut f = open_append(path).map_err(|e| io_err(e.into()))?;
    let fresh = f.metadata().map_err(io_err)?.len() == 0;
    let text = match (fresh, reheader) {
        (true, _) => format!("{}{row}", header_line(fields)),
        (false, Some(torn)) => {
            let nl = if torn { "\n" } else { "" };
            format!("{nl}{}{row}", header_line(fields))
        }
        (false, None) => row,
    };
    f.write_all(text.as_bytes()).map_err(io_err)?;
    if durability == Durability::Synced {
        crate::fsutil::sync_data(&f, path).map_err(io_err)?;
        if fresh && let Some(dir) = path.parent() {
            sync_dir(dir).map_err(|source| LogError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
    }
    Ok(())
}

/// Reads every complete record. A line torn by a crash mid-write (the last line without
/// its newline, or a bad row directly followed by the header a new writer wrote on
/// reopening) is skipped; any other malformed line is an error naming its line.
pub fn read_events(path: &Path) -> Result<Vec<Event>, LogError> {
    let bytes = read_small_file(path, MAX_READ_BYTES)
        .map_err(|e| LogError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?
        .ok_or_else(|| LogError::Io {
            path: path.to_path_buf(),
            source: io::ErrorKind::NotFound.into(),
        })?;
    decode_events(&bytes).map_err(|(line, msg)| LogError::Decode {
        path: path.to_path_buf(),
        line,
        msg,
    })
}

/// Every complete record of a TOONL log's bytes ([`read_events`] without the file): the
/// events, or the 1-based line of the first malformed record that is not a torn write and
/// why.
pub fn decode_events(bytes: &[u8]) -> Result<Vec<Event>, (usize, String)> {
    decode_records(bytes)
}

/// Every complete record of any TOONL file's bytes, each decoded as a `T` (the rules of
/// [`decode_events`]: a torn write is skipped, another malformed line is an error).
pub fn decode_records<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<Vec<T>, (usize, String)> {
    let text = String::from_utf8_lossy(bytes);
    let complete = match text.rfind('\n') {
        Some(i) => &text[..i],
        None => "",
    };
    let lines: Vec<&str> = if complete.is_empty() {
        Vec::new()
    } else {
        complete.split('\n').collect()
    };
    let mut header: Option<&str> = None;
    let mut events = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("[]{") && line.ends_with("}:") {
            header = Some(line);
            continue;
        }
        let decode = |msg: String| (i + 1, msg);
        let torn = lines.get(i + 1).is_some_and(|next| next.starts_with("[]{"));
        let parsed = match header {
            Some(h) => decode_row(h, line),
            None => Err(CodecError::NoHeader),
        };
        match parsed {
            Ok(ev) => events.push(ev),
            Err(_) if torn => {}
            Err(e) => return Err(decode(e.to_string())),
        }
    }
    Ok(events)
}

/// The last complete record of a TOONL text, as JSON (a trailer `[=N]` line is no record);
/// `None` when there is none or it does not decode, so a reader falls back on something
/// else (the stall check on the file's modification time).
pub fn last_record(text: &str) -> Option<serde_json::Value> {
    let complete = &text[..text.rfind('\n')?];
    let mut header = None;
    let mut last = None;
    for line in complete.lines() {
        if line.starts_with("[]{") && line.ends_with("}:") {
            header = Some(line);
        } else if !line.is_empty() && !line.starts_with("[=") {
            last = header.map(|h| (h, line));
        }
    }
    let (h, line) = last?;
    decode_row(h, line).ok()
}

/// One row under its header, through the crate's streaming row reader.
fn decode_row<T: serde::de::DeserializeOwned>(header: &str, line: &str) -> Result<T, CodecError> {
    let doc = format!("{header}\n{line}\n");
    let mut reader = ToonlRowReader::new(io::Cursor::new(doc.into_bytes()));
    let value = reader.next().ok_or(CodecError::NoRecord)??;
    serde_json::from_value(value.to_json_value()).map_err(CodecError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9/ .:_,=|-]{0,16}",
            any::<String>(),
            prop::sample::select(crate::toon_doc::TRICKY_TEXTS.to_vec()).prop_map(str::to_string),
        ]
    }

    fn event() -> impl Strategy<Value = Event> {
        (
            text(),
            text(),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<i64>()),
            proptest::option::of(any::<u64>()),
            text(),
        )
            .prop_map(|(ts, kind, slot, pid, issue, msg)| Event {
                ts,
                kind,
                slot,
                pid,
                issue,
                msg,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        /// The event log's own row writer writes what the general encoder does, and what
        /// it writes reads back as the same event.
        #[test]
        fn an_event_row_is_the_general_encoders_row(ev in event()) {
            let general = encode_record(&FIELDS, serde_json::to_value(&ev).unwrap()).unwrap();
            let fast = encode_row(&ev);
            prop_assert_eq!(&fast, &general);
            let text = format!("{}{fast}", header_line(&FIELDS));
            let back: Vec<Event> = decode_records(text.as_bytes()).unwrap();
            prop_assert_eq!(back, vec![ev]);
        }
    }

    #[test]
    fn roundtrip_with_reopen_and_truncated_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lane/supervisor.log.toonl");
        let tricky = Event::now(
            "supervisor.boot-sweep",
            "boot sweeps complete: orphans removed=1 restored=0 kept=2 | x, \"q\" | docs-sweep clean files=0",
        );
        let num_like = Event::now("slot.exit", "123").slot(3).pid(4242).issue(17);
        {
            let mut log = EventLog::open(&p).unwrap();
            log.append(&tricky).unwrap();
        }
        {
            let mut log = EventLog::open(&p).unwrap();
            log.append(&num_like).unwrap();
        }
        // A crash mid-write leaves a partial line.
        let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"\"2026-01-01T00:00:00.000Z\",slot.sp")
            .unwrap();
        let events = read_events(&p).unwrap();
        assert_eq!(events, vec![tricky, num_like]);
        // Reopening after the torn line still yields a readable log.
        let mut log = EventLog::open(&p).unwrap();
        let after = Event::now("supervisor.tick", "tick: slots=1");
        log.append(&after).unwrap();
        assert_eq!(read_events(&p).unwrap().last(), Some(&after));
        let text = fs::read_to_string(&p).unwrap();
        assert!(
            text.starts_with("[]{ts,kind,slot,pid,issue,msg}:\n"),
            "{text}"
        );
    }

    #[test]
    fn a_log_that_is_not_a_regular_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("supervisor.log.toonl");
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = EventLog::open(&p).unwrap_err().to_string();
        assert!(
            err.contains("supervisor.log.toonl: not a regular file (a FIFO)"),
            "{err}"
        );
        fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
        let err = EventLog::open(&p).unwrap_err().to_string();
        assert!(err.contains("supervisor.log.toonl: is a symlink"), "{err}");
    }

    #[test]
    fn malformed_line_is_reported_with_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.toonl");
        fs::write(&p, "[]{ts,kind,slot,pid,issue,msg}:\n\"unterminated,x\n").unwrap();
        let err = read_events(&p).unwrap_err().to_string();
        assert!(err.contains("log.toonl:"), "{err}");
    }

    /// The last complete record wins, whichever header it follows; a torn tail and a
    /// trailer line are no record; a malformed last record is `None`, never an older one.
    #[test]
    fn last_record_is_the_newest_complete_one() {
        let fields = ["ts", "stage"];
        let row = |ts: &str| {
            encode_record(&fields, serde_json::json!({"ts": ts, "stage": "agent"})).unwrap()
        };
        let text = format!(
            "{}{}{}{}[=2]\n{{torn",
            header_line(&fields),
            row("a"),
            header_line(&fields),
            row("b, with a comma")
        );
        let last = last_record(&text).unwrap();
        assert_eq!(last["ts"], "b, with a comma");
        assert_eq!(last_record(&format!("{}\"bad\n", text)), None);
        assert_eq!(last_record(""), None);
        assert_eq!(last_record(&header_line(&fields)), None);
    }

    /// A synced append syncs its row, and the directory too when the row started the file;
    /// the event log's cached appends sync nothing.
    #[test]
    fn a_synced_append_syncs_its_row_and_a_new_file_its_directory() {
        use crate::fsutil::{SyncSeen, take_syncs};
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("records.toonl");
        let json = |n: u64| serde_json::json!({"n": n});
        take_syncs();
        append_record_current(&p, &["n"], json(1), 1 << 20, Durability::Synced).unwrap();
        assert_eq!(
            take_syncs(),
            [
                SyncSeen::Data(p.clone()),
                SyncSeen::Dir(dir.path().to_path_buf())
            ]
        );
        append_record_current(&p, &["n"], json(2), 1 << 20, Durability::Synced).unwrap();
        assert_eq!(take_syncs(), [SyncSeen::Data(p.clone())]);
        append_event(&p.with_file_name("log.toonl"), &Event::now("k", "m")).unwrap();
        assert_eq!(take_syncs(), []);
    }
}
