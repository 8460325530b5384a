//! `slot-control.toon` and its acknowledgement: one slot's stop or restart, asked by
//! `stop --slot N` / `restart N` (or `afk-supervisor mcp`), read by the running supervisor
//! at its next tick or SIGUSR1 (`docs/SPEC.md` §4.3). A request carries an id the asker
//! made; the supervisor answers each id once in `slot-control.ack.toon`, so an asker waits
//! for its own answer, never an older one.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::{atomic_write, read_small_text};
use crate::lanes::state_file::ShrinkMode;
use crate::layout::Layout;
use crate::text::clip_quoted;

/// Largest request or acknowledgement read: a few lines.
const MAX_BYTES: u64 = 16 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// The slot's worker goes (drained or killed) and the slot stays empty until a restart.
    Stop,
    /// The slot's worker goes and a fresh one starts; a stopped or parked slot starts again.
    Restart,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Action::Stop => "stop",
            Action::Restart => "restart",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub id: String,
    pub slot: usize,
    pub action: Action,
    #[serde(default)]
    pub shrink_mode: ShrinkMode,
    /// Who asked: `cli` or `mcp`.
    #[serde(default)]
    pub via: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub id: String,
    pub ok: bool,
    /// What was done, or why not (one line).
    pub message: String,
}

pub fn request_path(layout: &Layout) -> PathBuf {
    layout.supervisor_lane().join("slot-control.toon")
}

pub fn ack_path(layout: &Layout) -> PathBuf {
    layout.supervisor_lane().join("slot-control.ack.toon")
}

fn write_toon<T: Serialize>(path: &Path, v: &T) -> io::Result<()> {
    let text = reddb_io_toon::to_string(v).map_err(|e| io::Error::other(e.to_string()))?;
    atomic_write(path, format!("{text}\n").as_bytes())
}

pub fn write_request(layout: &Layout, r: &Request) -> io::Result<()> {
    write_toon(&request_path(layout), r)
}

pub fn write_ack(layout: &Layout, a: &Ack) -> io::Result<()> {
    write_toon(&ack_path(layout), a)
}

/// What the lane holds: nothing, a request, or a file that is not one (why, one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found<T> {
    None,
    Some(T),
    Corrupt(String),
}

fn read_toon<T: serde::de::DeserializeOwned>(path: &Path) -> Found<T> {
    match read_small_text(path, MAX_BYTES) {
        Ok(None) => Found::None,
        Err(e) => Found::Corrupt(format!("{}: not read: {e}", path.display())),
        Ok(Some(text)) => match reddb_io_toon::from_str::<T>(&text) {
            Ok(v) => Found::Some(v),
            Err(e) => Found::Corrupt(format!(
                "{}: {}",
                path.display(),
                clip_quoted(&e.to_string())
            )),
        },
    }
}

pub fn read_request(layout: &Layout) -> Found<Request> {
    read_toon(&request_path(layout))
}

pub fn read_ack(layout: &Layout) -> Found<Ack> {
    read_toon(&ack_path(layout))
}

/// A request id no earlier asker on this host used: pid and the time in nanoseconds.
pub fn new_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_acks_round_trip_and_garbage_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.supervisor_lane()).unwrap();
        assert_eq!(read_request(&layout), Found::None);
        let r = Request {
            id: new_id(),
            slot: 2,
            action: Action::Restart,
            shrink_mode: ShrinkMode::HardKill,
            via: "cli".into(),
        };
        write_request(&layout, &r).unwrap();
        assert_eq!(read_request(&layout), Found::Some(r));
        std::fs::write(request_path(&layout), "slot: x\n").unwrap();
        match read_request(&layout) {
            Found::Corrupt(why) => assert!(why.contains("slot-control.toon"), "{why}"),
            other => panic!("{other:?}"),
        }
        let a = Ack {
            id: "1".into(),
            ok: false,
            message: "slot 9 is not in the fleet".into(),
        };
        write_ack(&layout, &a).unwrap();
        assert_eq!(read_ack(&layout), Found::Some(a));
    }
}
