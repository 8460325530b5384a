//! Giving a dead worker's issues back: the tracker first, then the claim
//! ([`crate::claim::release`]), one event per issue.
//!
//! A worker that is killed (a crash, a signal, a stall kill, a hard-kill shrink) cannot
//! undo its claim: `.red/tmp/claims/<N>/` and the `running` label would otherwise stay until
//! the next supervisor's boot sweep, hiding the issue from every other worker for the whole
//! life of this one. Once the worker's process group is confirmed gone, each claim whose pid
//! file names that worker (pid and, when recorded, start time) is released here: a `running`
//! issue gets the `docs/SPEC.md` §7 comment and then `ready-for-agent` back
//! ([`transition::restore`]), and only then the claim dir goes.
//!
//! Runs on a short-lived thread (tracker calls are slow). A tracker failure at any step
//! keeps the claim: the next boot's orphan cleanup finishes the restore from it (without
//! posting the comment twice).

use crate::event_log::Kind;
use crate::event_log::Record;
use crate::layout::Layout;
use crate::pidfile;
use crate::rescue::Keeper;
use crate::sweeps::transition;
use crate::tracker::{IssueState, Tracker, labels};

use crate::claim::release::{DeadWorker, claims_of};

/// Releases every claim of `w` ([`release_rescuing`] with the default size limit).
pub fn release(layout: &Layout, tracker: &dyn Tracker, w: &DeadWorker) -> Vec<Record> {
    let keeper = Keeper::new(
        layout.repo(),
        crate::rescue::DEFAULT_MAX_FILE_BYTES,
        tracker.shared_across_checkouts(),
    );
    release_rescuing(layout, tracker, w, &keeper)
}

/// Releases every claim of `w`, its attempt's work rescued first ([`crate::rescue`]);
/// returns the events of each issue handled.
pub fn release_rescuing(
    layout: &Layout,
    tracker: &dyn Tracker,
    w: &DeadWorker,
    keeper: &Keeper,
) -> Vec<Record> {
    let ev =
        |n: u64, kind: Kind, msg: String| Record::now(kind, msg).slot(w.slot).pid(w.pid).issue(n);
    let mut out = Vec::new();
    for n in claims_of(layout, w) {
        // Re-checked just before acting: the pid must still be dead (it was when the
        // group was confirmed gone; a reused pid has another start time).
        if pidfile::judge_pid(w.pid, Some(w.start)).is_live() {
            continue;
        }
        // Local git work, before any tracker call: a tracker that fails keeps the claim
        // for the boot sweep, but the work is safe on a ref already.
        let rescued = match keeper.rescue_newest(layout, &w.id, n, rescue_why(w.outcome)) {
            Ok(r) => r,
            Err(e) => {
                out.push(ev(
                    n,
                    Kind::SupervisorError,
                    format!("{e}; the worktree is kept"),
                ));
                None
            }
        };
        if let Some(r) = rescued.as_ref().filter(|r| !r.already) {
            out.push(r.event().slot(w.slot).pid(w.pid));
        }
        let view = match tracker.view(n) {
            Ok(v) => v,
            Err(e) => {
                out.push(ev(
                    n,
                    Kind::SupervisorError,
                    left_for_boot(n, w, &e.to_string()),
                ));
                continue;
            }
        };
        let mut restore = view.state == IssueState::Open && view.has_label(labels::RUNNING);
        // The claim is the record the issue is restored from: it goes only once the
        // restore (comment, then labels) is complete or the issue is not running. An issue
        // another checkout holds by its claim marks is not ours to give back.
        let mut elsewhere = None;
        if restore {
            let attempt = crate::rescue::newest_attempt_dir(layout, &w.id, n);
            match transition::restore_rescued(
                tracker,
                layout,
                n,
                attempt.as_deref(),
                &mut 0,
                w.outcome,
                rescued.as_ref(),
            ) {
                Ok(transition::Restored::Done) => {}
                Ok(transition::Restored::HeldElsewhere(h)) => {
                    restore = false;
                    elsewhere = Some(h);
                }
                Err(e) => {
                    out.push(ev(
                        n,
                        Kind::SupervisorError,
                        left_for_boot(n, w, &e.to_string()),
                    ));
                    continue;
                }
            }
        }
        let claim = match crate::claim::release::remove(layout, n) {
            Ok(()) => "claim removed".to_string(),
            Err(e) => format!("claim not removed: {e}"),
        };
        let msg = if restore {
            format!(
                "worker {} died holding #{n}: running -> ready-for-agent, {claim}",
                w.id
            )
        } else if let Some(h) = elsewhere {
            format!(
                "worker {} died holding #{n} (held by {h} of another checkout): {claim}",
                w.id
            )
        } else {
            format!(
                "worker {} died holding #{n} (not running any more): {claim}",
                w.id
            )
        };
        out.push(ev(n, Kind::SlotRestore, msg));
    }
    out
}

/// The `(<why>)` of a rescue commit, from how the attempt ends.
fn rescue_why(outcome: crate::ledger::Outcome) -> &'static str {
    match outcome {
        crate::ledger::Outcome::Stalled => "stall kill",
        crate::ledger::Outcome::GivenBack => "stopped by a hard-kill shrink",
        _ => "worker died",
    }
}

fn left_for_boot(n: u64, w: &DeadWorker, e: &str) -> String {
    format!(
        "worker {} died holding #{n}; tracker failed ({e}): claim left for the next boot's orphan cleanup",
        w.id
    )
}
