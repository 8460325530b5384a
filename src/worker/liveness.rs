//! The worker's `liveness.toonl` in the attempt dir: a record when the agent starts and one
//! whenever its worktree moves, so a hung agent goes quiet and the supervisor's stall check
//! (which reads `ts`) can flag and kill it.

use std::path::Path;

use serde_json::json;

use crate::git::Git;
use crate::timeutil;
use crate::toonl;

/// Fields of a worker's `liveness.toonl`; the supervisor's stall check reads `ts`.
pub const LIVENESS_FIELDS: [&str; 4] = ["ts", "pid", "issue", "stage"];

/// What the agent has done to its worktree so far: HEAD plus the porcelain status.
/// `None` when git cannot tell (then no progress is claimed).
pub(super) fn worktree_fingerprint(wt: &Git) -> Option<String> {
    let head = wt.run(&["rev-parse", "HEAD"]).ok()?;
    let status = wt.run(&["status", "--porcelain=v1", "-z"]).ok()?;
    Some(format!("{}\n{status}", head.trim()))
}

pub(super) fn append_liveness(path: &Path, issue: u64, stage: &str) {
    let record = json!({
        "ts": timeutil::now_rfc3339_millis(),
        "pid": std::process::id(),
        "issue": issue,
        "stage": stage,
    });
    // A refused or failed write leaves the stall check to fall back on the slot log.
    let _ = toonl::append_record(path, &LIVENESS_FIELDS, record);
}
