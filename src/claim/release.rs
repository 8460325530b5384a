//! Releasing a dead worker's claims: which claim dirs name it, and removing one. The
//! supervisor ([`crate::supervisor::release_dead`]) gives the issue back on the tracker first,
//! so the claim, the record the issue is restored from, goes last.

use std::fs;
use std::path::Path;

use crate::fsutil::read_small_file;
use crate::layout::{Layout, start_file};
use crate::pidfile::{self, PidContent};
use crate::safe_delete::{DeleteError, DeleteRoot};

/// The dead worker whose claims are released.
#[derive(Debug, Clone)]
pub struct DeadWorker {
    pub slot: usize,
    pub pid: i32,
    pub start: u64,
    pub id: String,
    /// How its attempt ends in the issue's ledger once the issue is restored: `stalled`
    /// when the supervisor killed it for making no progress, `given-back` when a hard-kill
    /// shrink stopped it (the operator's action, not the issue's failure), `oom-killed`
    /// when the OOM killer ended a process of its cgroup (its restore comment says so),
    /// else `worker-died`.
    pub outcome: crate::ledger::Outcome,
}

/// Issues whose claim dir names `w` (pid, and start when the claim recorded one).
pub fn claims_of(layout: &Layout, w: &DeadWorker) -> Vec<u64> {
    let Ok(dir) = fs::read_dir(layout.claims()) else {
        return Vec::new();
    };
    let mut found: Vec<u64> = dir
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| super::issue_of(e.file_name().to_str()?))
        .filter(|n| holds(&layout.claim_pid(*n), w))
        .collect();
    found.sort_unstable();
    found
}

/// Whether any claim is there at all: one read of the claims folder that stops at the
/// first, where [`claims_of`] reads the pid file of every claim. The loop asks this; which
/// claims name a dead worker is read off the loop.
pub fn any_claims(layout: &Layout) -> bool {
    fs::read_dir(layout.claims()).is_ok_and(|mut dir| {
        dir.any(|e| e.is_ok_and(|e| e.file_name().to_str().and_then(super::issue_of).is_some()))
    })
}

/// Does this claim pid file name the dead worker? A start token that cannot be read proves
/// nothing, so the claim is left to the boot sweep.
fn holds(pid_file: &Path, w: &DeadWorker) -> bool {
    if !matches!(pidfile::read_pid_file(pid_file), Ok(PidContent::Pid(p)) if p == w.pid) {
        return false;
    }
    match read_small_file(&start_file(pid_file), pidfile::MAX_PID_FILE_BYTES) {
        Ok(None) => true,
        Ok(Some(bytes)) => pidfile::parse_start_token(&bytes).is_ok_and(|s| s == w.start),
        Err(_) => false,
    }
}

/// Removes the claim dir of `n` through the safe-delete root (nothing to do without
/// `.red/tmp`).
pub fn remove(layout: &Layout, n: u64) -> Result<(), DeleteError> {
    match DeleteRoot::open(layout)? {
        Some(root) => root
            .remove(&layout.claims().join(n.to_string()))
            .map(|_| ()),
        None => Ok(()),
    }
}
