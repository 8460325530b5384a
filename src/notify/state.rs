//! What the notifier keeps across supervisor restarts, `.red/state/notify.json`
//! (`docs/SPEC.md` §11.21): its cursor on the event log, what the classes remember, and per
//! sink the coalescing state and the messages not yet delivered. Written atomically
//! (`fsutil::atomic_write`) after every change that matters: a message taken in, delivered
//! or given up; never for a record that means nothing (a tick), whose re-reading after a
//! restart means nothing either. So a restart resumes exactly: nothing read before is
//! offered again, nothing delivered is sent again, nothing pending is lost.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::classes::Memory;
use super::coalesce::{Coalescer, Message};
use crate::fsutil;

pub const FILE_NAME: &str = "notify.json";

/// Why the state file was not read or written; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: fsutil::SmallFileError,
    },
    #[error("{}: {source}", .path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{0}")]
    Encode(#[source] serde_json::Error),
    #[error("{}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The largest state file read (a full outbox of large messages is well under it).
const MAX_BYTES: u64 = 4 << 20;

/// A message waiting for its sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    pub message: Message,
    /// When it was first tried (epoch ms): its retries end `retry_for_s` after.
    pub first_try_ms: Option<u64>,
    /// Not before (epoch ms).
    pub next_try_ms: u64,
    pub tries: u32,
    pub last_error: Option<String>,
}

impl Pending {
    pub fn new(message: Message) -> Pending {
        Pending {
            message,
            first_try_ms: None,
            next_try_ms: 0,
            tries: 0,
            last_error: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SinkState {
    pub coalescer: Coalescer,
    pub outbox: VecDeque<Pending>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Just past the last record read (`afk-supervisor events`' cursor); `None`: start at
    /// the log's end.
    pub cursor: Option<String>,
    #[serde(default)]
    pub memory: Memory,
    #[serde(default)]
    pub sinks: BTreeMap<String, SinkState>,
}

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE_NAME)
}

/// The state, `None` when there is none yet; an unreadable file is an error (the caller
/// starts afresh at the log's end and says so).
pub fn read(file: &Path) -> Result<Option<State>, StateError> {
    let path = || file.to_path_buf();
    match fsutil::read_small_text(file, MAX_BYTES) {
        Ok(None) => Ok(None),
        Ok(Some(text)) => {
            serde_json::from_str(&text)
                .map(Some)
                .map_err(|source| StateError::Parse {
                    path: path(),
                    source,
                })
        }
        Err(source) => Err(StateError::Read {
            path: path(),
            source,
        }),
    }
}

pub fn write(file: &Path, state: &State) -> Result<(), StateError> {
    let text = serde_json::to_string(state).map_err(StateError::Encode)?;
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    fsutil::atomic_write(file, format!("{text}\n").as_bytes()).map_err(|source| StateError::Write {
        path: file.to_path_buf(),
        source,
    })
}
