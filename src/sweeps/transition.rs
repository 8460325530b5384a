//! Tracker transitions that carry a comment: the restore (orphan cleanup and the
//! supervisor's release of a dead worker's claims) and the unblock promotion.
//!
//! Each is made **comment first, label change second**. The label is what tells a later
//! pass that the transition is still needed, so it changes last: a pass interrupted after
//! the comment (a transient failure, a rate limit, a crash) leaves the issue looking
//! untouched, and the next pass does the transition again. The comment is not posted twice:
//! before posting, the transition asks whether this transition's comment is already there.
//!
//! - A restore keeps its local record (the dead claim `claims/<N>/`, or the attempt dir)
//!   until the label is changed, and the first of those that exists gets a marker file,
//!   [`RESTORE_MARKER`], once the comment is posted. The marker answers the question without
//!   a tracker call, and a claim is made once per episode (a new claim is a new `mkdir`, so
//!   a later death of a worker on the same issue gets its own comment).
//! - An unblock has no local record: it reads the issue's comments
//!   ([`Tracker::comments`]) and skips posting when the newest one is this transition's
//!   text.
//!
//! What is left: a comment call that fails *after* GitHub stored it (a timeout) looks
//! failed, so the next pass posts it once more; and a restore whose marker cannot be
//! written (the record vanished) may be posted again by the next pass. Both cost at most
//! one duplicate per such failure and never lose a comment.

use std::fs;
use std::path::{Path, PathBuf};

use crate::claim::marks::Holder;
use crate::claim::marks::RESTORE_COMMENT;
use crate::layout::Layout;
use crate::rescue::Rescued;
use crate::tracker::{Tracker, TrackerError, labels};

/// The file a restore leaves in its record once the `docs/SPEC.md` §7 restore comment is posted.
pub const RESTORE_MARKER: &str = "restore-commented";

/// One transition: a comment, then a label change on the same issue.
#[derive(Debug, Clone, Copy)]
pub struct Transition<'a> {
    pub issue: u64,
    pub comment: &'a str,
    pub add: &'a [&'a str],
    pub remove: &'a [&'a str],
}

/// How a transition tells that its comment is already posted.
#[derive(Debug, Clone, Copy)]
pub enum Posted<'a> {
    /// A [`RESTORE_MARKER`] in any of these dirs; a newly posted comment marks the first
    /// one that is a real dir.
    Marker(&'a [PathBuf]),
    /// The issue's newest comment is this transition's text.
    Newest,
}

/// Where a transition stopped. Every variant leaves the label unchanged, so the next pass
/// sees the transition as still needed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("reading the comments failed, nothing changed: {0}")]
    Check(TrackerError),
    #[error("the comment failed, nothing changed: {0}")]
    Comment(TrackerError),
    #[error("comment posted but the label change failed, the next pass makes it: {0}")]
    Labels(TrackerError),
}

/// How a restore ended when nothing failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    Done,
    /// Another checkout's claim mark holds the issue (SPEC §11.5): nothing was changed.
    HeldElsewhere(Holder),
}

impl TransitionError {
    /// The tracker failure behind it.
    pub fn tracker_error(&self) -> &TrackerError {
        match self {
            TransitionError::Check(e)
            | TransitionError::Comment(e)
            | TransitionError::Labels(e) => e,
        }
    }
}

/// Makes `t`: its comment unless `posted` says it is there, then its label change. `writes`
/// counts the write calls made (comment, edit).
pub fn make(
    tracker: &dyn Tracker,
    t: &Transition<'_>,
    posted: Posted<'_>,
    writes: &mut usize,
) -> Result<(), TransitionError> {
    let already = match posted {
        Posted::Marker(dirs) => dirs.iter().any(|d| is_file(&d.join(RESTORE_MARKER))),
        Posted::Newest => tracker
            .comments(t.issue)
            .map_err(TransitionError::Check)?
            .last()
            .is_some_and(|c| c.trim() == t.comment.trim()),
    };
    if !already {
        *writes += 1;
        tracker
            .comment(t.issue, t.comment)
            .map_err(TransitionError::Comment)?;
        if let Posted::Marker(dirs) = posted
            && let Some(d) = dirs.iter().find(|d| is_real_dir(d))
        {
            // Best effort: without the marker the next pass may post once more.
            let _ = fs::write(d.join(RESTORE_MARKER), format!("{}\n", t.issue));
        }
    }
    *writes += 1;
    tracker
        .edit_labels(t.issue, t.add, t.remove)
        .map_err(TransitionError::Labels)
}

/// The `docs/SPEC.md` §7 restore of issue `n`: the restore comment, then `ready-for-agent` in place
/// of `running`. Its records are the claim dir and, when given, the attempt dir being
/// judged; the caller removes them only once this succeeded. On a tracker several
/// checkouts share, the issue's claim marks are read first (one call) and an issue another
/// checkout holds is left alone ([`Restored::HeldElsewhere`]).
pub fn restore(
    tracker: &dyn Tracker,
    layout: &Layout,
    n: u64,
    attempt: Option<&Path>,
    writes: &mut usize,
) -> Result<Restored, TransitionError> {
    restore_as(
        tracker,
        layout,
        n,
        attempt,
        writes,
        crate::ledger::Outcome::WorkerDied,
    )
}

/// [`restore`], ending the attempt in the ledger with `outcome` (the supervisor's stall
/// kill records `stalled`).
pub fn restore_as(
    tracker: &dyn Tracker,
    layout: &Layout,
    n: u64,
    attempt: Option<&Path>,
    writes: &mut usize,
    outcome: crate::ledger::Outcome,
) -> Result<Restored, TransitionError> {
    restore_rescued(tracker, layout, n, attempt, writes, outcome, None)
}

/// The line of a restore comment whose attempt the OOM killer ended (SPEC §11.16): a person
/// reading the issue learns why it is back in the queue without the supervisor's log.
pub const OOM_KILLED_LINE: &str =
    "the attempt was ended by the OOM killer (its cgroup's memory.events oom_kill)";

/// The restore comment: the §7 text, after the line saying the OOM killer ended the attempt
/// when `outcome` is `oom-killed` and the line naming where the attempt's work was rescued
/// when it was (the restore line stays last: it is the mark, SPEC §11.5).
pub fn restore_comment(outcome: crate::ledger::Outcome, rescued: Option<&Rescued>) -> String {
    let mut lines = Vec::new();
    if outcome == crate::ledger::Outcome::OomKilled {
        lines.push(OOM_KILLED_LINE.to_string());
    }
    if let Some(r) = rescued {
        lines.push(r.comment_line());
    }
    lines.push(RESTORE_COMMENT.to_string());
    lines.join("\n\n")
}

/// [`restore_as`] of an attempt whose work was rescued first ([`crate::rescue`]): the
/// comment names the rescue and the ledger record carries it, so the next attempt resumes
/// from it.
pub fn restore_rescued(
    tracker: &dyn Tracker,
    layout: &Layout,
    n: u64,
    attempt: Option<&Path>,
    writes: &mut usize,
    outcome: crate::ledger::Outcome,
    rescued: Option<&Rescued>,
) -> Result<Restored, TransitionError> {
    let host = crate::claim::tracked::this_host(layout);
    if let Some(h) =
        crate::claim::tracked::held_elsewhere(tracker, n, &host).map_err(TransitionError::Check)?
    {
        return Ok(Restored::HeldElsewhere(h));
    }
    let mut records = vec![layout.claims().join(n.to_string())];
    records.extend(attempt.map(Path::to_path_buf));
    let comment = restore_comment(outcome, rescued);
    let t = Transition {
        issue: n,
        comment: &comment,
        add: &[labels::READY_FOR_AGENT],
        remove: &[labels::RUNNING],
    };
    make(tracker, &t, Posted::Marker(&records), writes)?;
    // The dead worker's attempt ends in the ledger once the issue is back in the queue.
    let mut record = died_record(attempt, outcome);
    if let Some(r) = rescued {
        record = record.rescued_to(&r.reference, &r.sha);
    }
    if let Err(e) = crate::ledger::append(layout, n, &record) {
        eprintln!("afk-supervisor: #{n}: attempt ledger: {e}");
    }
    Ok(Restored::Done)
}

/// The `worker-died` ledger record of a restore: the worker and start time from the
/// attempt's state file where there is one.
fn died_record(attempt: Option<&Path>, outcome: crate::ledger::Outcome) -> crate::ledger::Record {
    let state = attempt.and_then(|a| crate::attempt_state::AttemptState::read(a).ok().flatten());
    let worker = state.as_ref().and_then(|s| s.worker_id.clone());
    let start = state.as_ref().and_then(|s| s.started_at.clone());
    crate::ledger::Record::now(worker.as_deref(), start.as_deref(), outcome)
}

fn is_file(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
}

fn is_real_dir(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::marks::Mark;
    use crate::ledger::Outcome;

    fn rescued() -> Rescued {
        Rescued {
            issue: 7,
            attempt: 2,
            reference: "afk/7-a2".into(),
            sha: "0123456789abcdef0123456789abcdef01234567".into(),
            wip: None,
            left_out: Vec::new(),
            problems: Vec::new(),
            already: false,
        }
    }

    #[test]
    fn an_oom_killed_attempt_says_so_above_the_restore_line() {
        let r = rescued();
        assert_eq!(restore_comment(Outcome::WorkerDied, None), RESTORE_COMMENT);
        assert_eq!(
            restore_comment(Outcome::OomKilled, None),
            format!(
                "the attempt was ended by the OOM killer (its cgroup's memory.events oom_kill)\n\n{RESTORE_COMMENT}"
            )
        );
        assert_eq!(
            restore_comment(Outcome::OomKilled, Some(&r)),
            format!(
                "{OOM_KILLED_LINE}\n\nwork rescued to afk/7-a2 at {}\n\n{RESTORE_COMMENT}",
                r.sha
            )
        );
        assert_eq!(
            restore_comment(Outcome::Stalled, Some(&r)),
            format!("work rescued to afk/7-a2 at {}\n\n{RESTORE_COMMENT}", r.sha)
        );
        // The restore line stays the last: every variant is still the restore mark.
        for outcome in [
            Outcome::WorkerDied,
            Outcome::OomKilled,
            Outcome::Stalled,
            Outcome::GivenBack,
        ] {
            for rescue in [None, Some(&r)] {
                let body = restore_comment(outcome, rescue);
                assert_eq!(Mark::parse(&body), Some(Mark::Restore), "{body}");
                assert_eq!(body.lines().last(), Some(RESTORE_COMMENT), "{body}");
            }
        }
        // The OOM line alone is no mark.
        assert_eq!(Mark::parse(OOM_KILLED_LINE), None);
    }
}
