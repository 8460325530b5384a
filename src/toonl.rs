//! The one TOONL codec, for the event log (`crate::event_log`, `docs/SPEC.md` §5) and every
//! other TOONL file (a worker's `liveness.toonl`, the attempt ledger): one encoder of rows
//! ([`encode_record`]), one appender ([`append_record`]), one reader of records
//! ([`decode_records`], [`last_record`]).
//!
//! Cells are decoded by `reddb-io-toon` (its streaming `ToonlRowReader`) and encoded by its
//! `ToonlEncoder`, or for the event log's own rows by `toon_doc::row`, which a property test
//! in `event_log` holds to it, so quoting follows TOON exactly. A record is one `write` of
//! whole lines, so a crash leaves at most a truncated last line, which the readers skip.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use reddb_io_toon::{ToonlEncoder, ToonlRowReader, Value};

use crate::fsutil::{Durability, open_append, read_small_file, sync_dir};

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
    #[error("{path}: cannot encode event: {source}")]
    Encode { path: PathBuf, source: CodecError },
    #[error("{path}:{}", .source)]
    Decode { path: PathBuf, source: DecodeError },
}

/// The first malformed record of a TOONL text that is not a torn write.
#[derive(Debug, thiserror::Error)]
#[error("{line}: {source}")]
pub struct DecodeError {
    /// 1-based.
    pub line: usize,
    pub source: CodecError,
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
    let row = encode_record(fields, json).map_err(|source| LogError::Encode {
        path: path.to_path_buf(),
        source,
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

/// Every complete record of any TOONL file's bytes, each decoded as a `T`. A line torn by a
/// crash mid-write (the last line without its newline, or a bad row directly followed by
/// the header a new writer wrote on reopening) is skipped; any other malformed line is an
/// error naming its line.
pub fn decode_records<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>, DecodeError> {
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
        let torn = lines.get(i + 1).is_some_and(|next| next.starts_with("[]{"));
        let parsed = match header {
            Some(h) => decode_row(h, line),
            None => Err(CodecError::NoHeader),
        };
        match parsed {
            Ok(ev) => events.push(ev),
            Err(_) if torn => {}
            Err(source) => {
                return Err(DecodeError {
                    line: i + 1,
                    source,
                });
            }
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
    /// a cached append (the event log's) syncs nothing.
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
        append_record(&p.with_file_name("log.toonl"), &["n"], json(3)).unwrap();
        assert_eq!(take_syncs(), []);
    }
}
