//! Orphan cleanup (seed BOOT-SWEEPS.md *Orphan Cleanup*, SPEC §1–§3, §7).
//!
//! Four passes, in this order: legacy flat `work-<N>` dirs of dead processes; attempt dirs
//! of dead workers, each decided by its issue's tracker state; stale claims of dead
//! holders; dead worker shells left empty. Everything that is removed goes through
//! [`Lane`], liveness is judged again right before each removal, and a dir that cannot be
//! judged (unreadable, corrupt state file) is kept and counted, never removed on a guess.
//!
//! Choices where the brief is silent, made on the side of keeping:
//! - an attempt whose own `afk.state.json` names a live process is kept even when its
//!   worker's `worker.pid` is dead;
//! - an issue number the batch listing lacks gets one `view`; `NotFound` from it means the
//!   issue does not exist and the dir falls under "any other state" (removed);
//! - a worker dir or claim with *no* pid file that was modified less than
//!   [`CREATION_GRACE`] ago is left alone: its owner may be between `mkdir` and writing
//!   the pid;
//! - a legacy `work-<N>` whose `afk.pid` is corrupt is kept and counted (it names no
//!   process, so it cannot be proven dead);
//! - a restore whose comment fails after the label edit succeeded keeps the dir; the
//!   label transition stands and is counted.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::attempt_state::AttemptState;
use crate::boot::OrphanCounts;
use crate::layout::{Layout, parse_attempt_dir, parse_legacy_work_dir};
use crate::pidfile::{DeadReason, Liveness, MissingStart, liveness};
use crate::sweeps::issue_book::{IssueBook, IssueFacts};
use crate::sweeps::lane::{Lane, LaneError};
use crate::sweeps::worker_tree::{self, Entry, Kind, age, entries, is_empty_dir};
use crate::sweeps::{Decision, SweepName};
use crate::tracker::{Tracker, labels};

/// The SPEC §7 restore comment, verbatim.
pub const RESTORE_COMMENT: &str = "🤖 /afk orchestrator died mid-issue; restoring ready-for-agent.";

const DAY: Duration = Duration::from_secs(86_400);

/// `ready-for-human` with the envelope posted: the issue thread holds the record.
pub const TTL_HUMAN_POSTED: Duration = DAY;
/// `ready-for-human` without a posted envelope: the dir is the only copy.
pub const TTL_HUMAN_UNPOSTED: Duration = Duration::from_secs(7 * 86_400);
/// Tracker unavailable, dir with a state file.
pub const TTL_FALLBACK_WITH_STATE: Duration = Duration::from_secs(7 * 86_400);
/// Tracker unavailable, dir without a state file.
pub const TTL_FALLBACK_NO_STATE: Duration = DAY;
/// A dir in an attempt's place whose name gives no issue number.
pub const TTL_UNNUMBERED: Duration = DAY;
/// A worker dir or claim without a pid file younger than this may still be being created.
pub const CREATION_GRACE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum OrphanError {
    #[error("{0}")]
    Lane(#[from] LaneError),
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The result of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OrphanReport {
    /// `removed` counts attempt dirs removed (those of restored issues included),
    /// `restored` issues put back to `ready-for-agent`, `kept` dirs judged and kept.
    pub counts: OrphanCounts,
    pub shells_removed: usize,
    /// Tracker calls made: reads (list, view) and writes (label edit, comment).
    pub tracker_reads: usize,
    pub tracker_writes: usize,
    pub decisions: Vec<Decision>,
}

/// Runs the four passes. In a dry run every decision is made and reported the same way,
/// but nothing is removed and the tracker is only read.
pub fn run(
    layout: &Layout,
    tracker: &dyn Tracker,
    now: SystemTime,
    dry_run: bool,
) -> Result<OrphanReport, OrphanError> {
    let Some(lane) = Lane::open(layout)? else {
        return Ok(OrphanReport::default());
    };
    let mut pass = Pass {
        layout,
        lane,
        book: IssueBook::new(tracker),
        now,
        dry_run,
        report: OrphanReport::default(),
    };
    pass.legacy()?;
    let dead = pass.attempts()?;
    pass.claims()?;
    for worker in dead {
        pass.shell(worker);
    }
    pass.report.tracker_reads = pass.book.reads();
    Ok(pass.report)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Remove,
    Keep,
    /// Restore `ready-for-agent` on the issue, then remove the dir.
    Restore,
    /// Not this sweep's to judge (live, manual, not yet born): untouched and not counted.
    Skip,
    /// A dead holder's claim, removed.
    Release,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Remove => "remove",
            Verdict::Keep => "keep",
            Verdict::Restore => "restore",
            Verdict::Skip => "skip",
            Verdict::Release => "release",
        }
    }
}

/// What the fate table says about one numbered attempt dir of a dead worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    Remove(String),
    Keep(String),
    /// The issue is `running` and its claim is not held: restore, then remove.
    Restore,
}

/// The fate table. `state` is the attempt's state file (`None`: no file), `age` the dir's
/// age by mtime, `claim_live` whether issue's claim is held by a live process.
pub fn fate(
    facts: &IssueFacts,
    state: Option<&AttemptState>,
    age: Duration,
    claim_live: impl FnOnce() -> Option<i32>,
) -> Fate {
    match facts {
        IssueFacts::Unavailable(e) => {
            let (ttl, what) = match state {
                Some(_) => (TTL_FALLBACK_WITH_STATE, "with state file"),
                None => (TTL_FALLBACK_NO_STATE, "without state file"),
            };
            ttl_fate(
                age,
                ttl,
                &format!("tracker {} ({}), mtime TTL {what}", e.kind, e.command),
            )
        }
        f if f.is_closed() => Fate::Remove("issue closed".into()),
        f if f.has_label(labels::READY_FOR_HUMAN) => {
            if state.is_some_and(AttemptState::envelope_posted) {
                ttl_fate(age, TTL_HUMAN_POSTED, "ready-for-human, envelope posted")
            } else {
                ttl_fate(
                    age,
                    TTL_HUMAN_UNPOSTED,
                    "ready-for-human, envelope not posted",
                )
            }
        }
        f if f.has_label(labels::RUNNING) => match claim_live() {
            Some(pid) => Fate::Remove(format!("running, claim held by live pid {pid}")),
            None => Fate::Restore,
        },
        IssueFacts::NotFound => Fate::Remove("issue does not exist".into()),
        _ => Fate::Remove("issue neither running nor ready-for-human".into()),
    }
}

fn ttl_fate(age: Duration, ttl: Duration, why: &str) -> Fate {
    match ttl_check(age, ttl, why) {
        (true, why) => Fate::Remove(why),
        (false, why) => Fate::Keep(why),
    }
}

/// Whether a dir of this age has outlived `ttl` (strictly older), with the reason text.
fn ttl_check(age: Duration, ttl: Duration, why: &str) -> (bool, String) {
    let expired = age > ttl;
    let cmp = if expired { ">" } else { "<=" };
    (
        expired,
        format!("{why}: age {} {cmp} TTL {}", fmt_dur(age), fmt_dur(ttl)),
    )
}

/// `3d4h5m`, `2h0m7s`: readable at a glance in a dry-run listing.
pub fn fmt_dur(d: Duration) -> String {
    let s = d.as_secs();
    let (days, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if days > 0 {
        format!("{days}d{h}h{m}m")
    } else {
        format!("{h}h{m}m{sec}s")
    }
}

/// A dead worker found in the attempts pass, for the shells pass.
struct DeadWorker {
    path: PathBuf,
    /// Subdirs removed (or, in a dry run, that would be).
    gone: HashSet<PathBuf>,
    /// Subdirs kept by a decision, with the index of that decision.
    kept: Vec<(PathBuf, usize)>,
}

struct Pass<'a> {
    layout: &'a Layout,
    lane: Lane,
    book: IssueBook<'a>,
    now: SystemTime,
    dry_run: bool,
    report: OrphanReport,
}

impl Pass<'_> {
    fn decide(
        &mut self,
        path: &Path,
        issue: Option<u64>,
        state: Option<String>,
        verdict: Verdict,
        reason: impl Into<String>,
    ) -> usize {
        let subject = path
            .strip_prefix(self.layout.repo())
            .unwrap_or(path)
            .display()
            .to_string();
        self.report.decisions.push(Decision {
            sweep: SweepName::Orphans,
            subject,
            issue,
            state,
            verdict: verdict.as_str().to_string(),
            reason: reason.into(),
        });
        self.report.decisions.len() - 1
    }

    /// Removes `path` unless `still_dead` (judged right now) says otherwise; in a dry run
    /// only checks that the lane would allow it.
    fn remove(
        &self,
        path: &Path,
        still_dead: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        still_dead()?;
        if self.dry_run {
            self.lane.check(path).map_err(|e| e.to_string())
        } else {
            self.lane
                .remove(path)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    }

    fn young(&self, path: &Path) -> bool {
        age(path, self.now).is_ok_and(|a| a < CREATION_GRACE)
    }

    // ---- pass 1: legacy flat work dirs ----

    fn legacy(&mut self) -> Result<(), OrphanError> {
        let tmp = self.lane.tmp().to_path_buf();
        let list = entries(&tmp).map_err(|source| OrphanError::Read { path: tmp, source })?;
        for e in list.into_iter().filter(|e| e.name.starts_with("work-")) {
            let Some(n) = parse_legacy_work_dir(&e.name) else {
                self.decide(
                    &e.path,
                    None,
                    None,
                    Verdict::Skip,
                    "slug-named manual worktree",
                );
                continue;
            };
            if e.kind != Kind::Dir {
                self.decide(
                    &e.path,
                    Some(n),
                    None,
                    Verdict::Skip,
                    "not a real directory",
                );
                continue;
            }
            let pid_file = e.path.join("afk.pid");
            match liveness(&pid_file, MissingStart::ExistenceDecides) {
                Liveness::Live { pid, .. } => {
                    self.decide(
                        &e.path,
                        Some(n),
                        None,
                        Verdict::Skip,
                        format!("afk.pid {pid} is live"),
                    );
                }
                Liveness::Dead {
                    reason: DeadReason::Missing,
                } => {
                    self.decide(&e.path, Some(n), None, Verdict::Skip, "no afk.pid");
                }
                Liveness::Dead {
                    reason: reason @ DeadReason::Corrupt(_),
                } => {
                    self.report.counts.kept += 1;
                    self.decide(
                        &e.path,
                        Some(n),
                        None,
                        Verdict::Keep,
                        format!("afk.pid {reason}: cannot prove it dead"),
                    );
                }
                Liveness::Dead { reason } => {
                    let recheck = || match liveness(&pid_file, MissingStart::ExistenceDecides) {
                        Liveness::Live { pid, .. } => Err(format!("afk.pid {pid} became live")),
                        _ => Ok(()),
                    };
                    match self.remove(&e.path, recheck) {
                        Ok(()) => {
                            self.report.counts.legacy_removed += 1;
                            self.decide(
                                &e.path,
                                Some(n),
                                None,
                                Verdict::Remove,
                                format!("legacy dir, afk.pid: {reason}"),
                            );
                        }
                        Err(why) => {
                            self.report.counts.kept += 1;
                            self.decide(&e.path, Some(n), None, Verdict::Keep, why);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    // ---- pass 2: attempt dirs of dead workers ----

    fn attempts(&mut self) -> Result<Vec<DeadWorker>, OrphanError> {
        let workers = worker_tree::worker_entries(self.layout)
            .map_err(|(path, source)| OrphanError::Read { path, source })?;
        let mut dead = Vec::new();
        for w in workers {
            match w.kind {
                Kind::File => continue,
                Kind::Symlink => {
                    self.decide(
                        &w.path,
                        None,
                        None,
                        Verdict::Skip,
                        "symlink in place of a worker dir: not walked",
                    );
                    continue;
                }
                Kind::Dir => {}
            }
            let pid_file = worker_tree::worker_pid(&w.path);
            match liveness(&pid_file, MissingStart::ExistenceDecides) {
                Liveness::Live { pid, .. } => {
                    self.decide(
                        &w.path,
                        None,
                        None,
                        Verdict::Skip,
                        format!("worker live (pid {pid})"),
                    );
                }
                Liveness::Dead {
                    reason: DeadReason::Missing,
                } if self.young(&w.path) => {
                    self.decide(
                        &w.path,
                        None,
                        None,
                        Verdict::Skip,
                        "no worker.pid yet in a dir created just now",
                    );
                }
                Liveness::Dead { reason } => dead.push(self.dead_worker(&w, &reason)),
            }
        }
        Ok(dead)
    }

    fn dead_worker(&mut self, w: &Entry, reason: &DeadReason) -> DeadWorker {
        let mut out = DeadWorker {
            path: w.path.clone(),
            gone: HashSet::new(),
            kept: Vec::new(),
        };
        let subs = match entries(&w.path) {
            Ok(s) => s,
            Err(e) => {
                self.report.counts.kept += 1;
                let i = self.decide(
                    &w.path,
                    None,
                    None,
                    Verdict::Keep,
                    format!("cannot read dead worker dir: {e}"),
                );
                out.kept.push((w.path.clone(), i));
                return out;
            }
        };
        for sub in subs.iter().filter(|s| s.kind == Kind::Dir) {
            let kept = self.attempt(&w.path, sub, reason);
            match kept {
                Some(i) => out.kept.push((sub.path.clone(), i)),
                None => {
                    out.gone.insert(sub.path.clone());
                }
            }
        }
        out
    }

    /// Decides and acts on one subdir of a dead worker; returns the decision index when the
    /// dir was kept.
    fn attempt(&mut self, worker: &Path, sub: &Entry, worker_dead: &DeadReason) -> Option<usize> {
        let path = &sub.path;
        let keep = |pass: &mut Self, issue, state, why: String| {
            pass.report.counts.kept += 1;
            Some(pass.decide(path, issue, state, Verdict::Keep, why))
        };
        let dir_age = match age(path, self.now) {
            Ok(a) => a,
            Err(e) => return keep(self, None, None, format!("cannot stat: {e}")),
        };
        let Some((n, _)) = parse_attempt_dir(&sub.name) else {
            let (expired, why) = ttl_check(dir_age, TTL_UNNUMBERED, "no issue number in name");
            return if expired {
                self.remove_attempt(worker, path, None, None, Verdict::Remove, why)
            } else {
                keep(self, None, None, why)
            };
        };
        let state = match AttemptState::read(path) {
            Ok(s) => s,
            Err(e) => return keep(self, Some(n), None, format!("cannot judge: {e}")),
        };
        if let Some(Liveness::Live { pid, .. }) =
            state.as_ref().and_then(AttemptState::owner_liveness)
        {
            return keep(
                self,
                Some(n),
                None,
                format!("state file names live pid {pid}"),
            );
        }
        let facts = self.book.facts(n);
        let desc = Some(facts.describe());
        let layout = self.layout;
        let claim = || live_claim(layout, n);
        match fate(&facts, state.as_ref(), dir_age, claim) {
            Fate::Keep(why) => keep(self, Some(n), desc, why),
            Fate::Remove(why) => {
                let why = format!("{why}; worker {worker_dead}");
                self.remove_attempt(worker, path, Some(n), desc, Verdict::Remove, why)
            }
            Fate::Restore => match self.restore(n) {
                Ok(RestoreOutcome::Done) => self.remove_attempt(
                    worker,
                    path,
                    Some(n),
                    desc,
                    Verdict::Restore,
                    format!(
                        "running with no live claim: ready-for-agent restored; worker {worker_dead}"
                    ),
                ),
                Ok(RestoreOutcome::ClaimLive(pid)) => self.remove_attempt(
                    worker,
                    path,
                    Some(n),
                    desc,
                    Verdict::Remove,
                    format!("running, claim taken meanwhile by live pid {pid}"),
                ),
                Err(why) => keep(self, Some(n), desc, why),
            },
        }
    }

    /// Removes an attempt dir after re-checking that neither its worker nor its own state
    /// names a live process; counts and records the outcome.
    fn remove_attempt(
        &mut self,
        worker: &Path,
        path: &Path,
        issue: Option<u64>,
        state: Option<String>,
        verdict: Verdict,
        why: String,
    ) -> Option<usize> {
        let pid_file = worker_tree::worker_pid(worker);
        let recheck = || {
            if let Liveness::Live { pid, .. } = liveness(&pid_file, MissingStart::ExistenceDecides)
            {
                return Err(format!("worker.pid {pid} became live"));
            }
            match AttemptState::read(path) {
                Ok(Some(s)) if s.owner_is_live() => Err("state file now names a live pid".into()),
                Err(e) => Err(format!("cannot judge: {e}")),
                _ => Ok(()),
            }
        };
        match self.remove(path, recheck) {
            Ok(()) => {
                self.report.counts.removed += 1;
                self.decide(path, issue, state, verdict, why);
                None
            }
            Err(e) => {
                self.report.counts.kept += 1;
                Some(self.decide(
                    path,
                    issue,
                    state,
                    Verdict::Keep,
                    format!("{why}; not removed: {e}"),
                ))
            }
        }
    }

    /// Puts `ready-for-agent` back in place of `running` and posts the SPEC §7 comment,
    /// unless a live process holds the claim by now. Any tracker error stops here: the
    /// caller keeps the dir.
    fn restore(&mut self, n: u64) -> Result<RestoreOutcome, String> {
        if let Some(pid) = live_claim(self.layout, n) {
            return Ok(RestoreOutcome::ClaimLive(pid));
        }
        let add = [labels::READY_FOR_AGENT];
        let remove = [labels::RUNNING];
        if !self.dry_run {
            let tracker = self.book.tracker();
            self.report.tracker_writes += 1;
            tracker
                .edit_labels(n, &add, &remove)
                .map_err(|e| format!("restore failed, nothing changed: {e}"))?;
        }
        self.book.record_labels(n, &add, &remove);
        self.report.counts.restored += 1;
        if !self.dry_run {
            let tracker = self.book.tracker();
            self.report.tracker_writes += 1;
            tracker
                .comment(n, RESTORE_COMMENT)
                .map_err(|e| format!("ready-for-agent restored but the comment failed: {e}"))?;
        }
        Ok(RestoreOutcome::Done)
    }

    // ---- pass 3: stale claims ----

    fn claims(&mut self) -> Result<(), OrphanError> {
        let dir = self.layout.claims();
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
            self.decide(
                &dir,
                None,
                None,
                Verdict::Skip,
                "symlink in place of claims/: not walked",
            );
            return Ok(());
        }
        let list = entries(&dir).map_err(|source| OrphanError::Read { path: dir, source })?;
        for e in list {
            let Some(n) = worker_tree::parse_issue_number(&e.name) else {
                continue;
            };
            if e.kind != Kind::Dir {
                self.decide(
                    &e.path,
                    Some(n),
                    None,
                    Verdict::Skip,
                    "claim is not a real directory",
                );
                continue;
            }
            let pid_file = self.layout.claim_pid(n);
            let reason = match liveness(&pid_file, MissingStart::ExistenceDecides) {
                Liveness::Live { pid, .. } => {
                    self.decide(
                        &e.path,
                        Some(n),
                        None,
                        Verdict::Skip,
                        format!("claim held by live pid {pid}"),
                    );
                    continue;
                }
                Liveness::Dead {
                    reason: DeadReason::Missing,
                } if self.young(&e.path) => {
                    self.decide(
                        &e.path,
                        Some(n),
                        None,
                        Verdict::Skip,
                        "no pid yet in a claim made just now",
                    );
                    continue;
                }
                Liveness::Dead { reason } => reason,
            };
            let recheck = || match liveness(&pid_file, MissingStart::ExistenceDecides) {
                Liveness::Live { pid, .. } => Err(format!("claim pid {pid} became live")),
                _ => Ok(()),
            };
            match self.remove(&e.path, recheck) {
                Ok(()) => {
                    self.report.counts.claims_released += 1;
                    self.decide(
                        &e.path,
                        Some(n),
                        None,
                        Verdict::Release,
                        format!("claim holder dead: {reason}"),
                    );
                }
                Err(why) => {
                    self.decide(&e.path, Some(n), None, Verdict::Skip, why);
                    continue;
                }
            }
            let facts = self.book.facts(n);
            if facts.is_closed() || !facts.has_label(labels::RUNNING) {
                continue;
            }
            let issue_subject = PathBuf::from(format!("#{n}"));
            let desc = Some(facts.describe());
            match self.restore(n) {
                Ok(RestoreOutcome::Done) => {
                    self.decide(
                        &issue_subject,
                        Some(n),
                        desc,
                        Verdict::Restore,
                        "running with a dead claim: ready-for-agent restored",
                    );
                }
                Ok(RestoreOutcome::ClaimLive(pid)) => {
                    self.decide(
                        &issue_subject,
                        Some(n),
                        desc,
                        Verdict::Skip,
                        format!("claim taken meanwhile by live pid {pid}"),
                    );
                }
                Err(why) => {
                    self.decide(&issue_subject, Some(n), desc, Verdict::Keep, why);
                }
            }
        }
        Ok(())
    }

    // ---- pass 4: dead empty worker shells ----

    fn shell(&mut self, w: DeadWorker) {
        let pid_file = worker_tree::worker_pid(&w.path);
        let listing = match entries(&w.path) {
            Ok(l) => l,
            Err(e) => {
                self.decide(
                    &w.path,
                    None,
                    None,
                    Verdict::Keep,
                    format!("cannot read dead worker dir: {e}"),
                );
                return;
            }
        };
        let remaining: Vec<&Entry> = listing
            .iter()
            .filter(|e| e.kind == Kind::Dir && !w.gone.contains(&e.path))
            .collect();
        let mut empty_kept = Vec::new();
        let mut holding = 0;
        for e in &remaining {
            if is_empty_dir(&e.path).unwrap_or(false) {
                if let Some((_, i)) = w.kept.iter().find(|(p, _)| p == &e.path) {
                    empty_kept.push(*i);
                }
            } else {
                holding += 1;
            }
        }
        if holding > 0 {
            self.decide(
                &w.path,
                None,
                None,
                Verdict::Skip,
                format!("dead worker still holds {holding} kept dir(s)"),
            );
            return;
        }
        let recheck = || {
            if let Liveness::Live { pid, .. } = liveness(&pid_file, MissingStart::ExistenceDecides)
            {
                return Err(format!("worker.pid {pid} became live"));
            }
            // A dir that gained content since the listing is not empty any more.
            if !self.dry_run {
                for e in &remaining {
                    if !is_empty_dir(&e.path).unwrap_or(false) {
                        return Err(format!("{} is no longer empty", e.name));
                    }
                }
            }
            Ok(())
        };
        let why = match liveness(&pid_file, MissingStart::ExistenceDecides) {
            Liveness::Dead { reason } => format!("dead empty worker shell: worker.pid {reason}"),
            Liveness::Live { .. } => "dead empty worker shell".to_string(),
        };
        match self.remove(&w.path, recheck) {
            Ok(()) => {
                self.report.shells_removed += 1;
                self.decide(&w.path, None, None, Verdict::Remove, why);
                // Kept dirs that were empty went with the shell: count them as removed.
                for i in empty_kept {
                    self.report.counts.kept -= 1;
                    self.report.counts.removed += 1;
                    let d = &mut self.report.decisions[i];
                    d.verdict = Verdict::Remove.as_str().to_string();
                    d.reason = format!("{}; empty, removed with its dead worker shell", d.reason);
                }
            }
            Err(why) => {
                self.decide(&w.path, None, None, Verdict::Skip, why);
            }
        }
    }
}

enum RestoreOutcome {
    Done,
    ClaimLive(i32),
}

/// The pid holding issue `n`'s claim, when that process is live.
fn live_claim(layout: &Layout, n: u64) -> Option<i32> {
    liveness(&layout.claim_pid(n), MissingStart::ExistenceDecides).pid()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::{ErrorKind, IssueState, TrackerError};

    fn open(labels: &[&str]) -> IssueFacts {
        IssueFacts::Known {
            state: IssueState::Open,
            labels: labels.iter().map(|l| l.to_string()).collect(),
        }
    }

    fn posted(p: Option<bool>) -> AttemptState {
        AttemptState {
            envelope: p.map(|posted| crate::attempt_state::Envelope {
                posted: Some(posted),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn removes(f: &Fate) -> bool {
        matches!(f, Fate::Remove(_))
    }

    const H: Duration = Duration::from_secs(3600);
    const NO_CLAIM: fn() -> Option<i32> = || None;

    #[test]
    fn closed_and_other_states_remove() {
        let closed = IssueFacts::Known {
            state: IssueState::Closed,
            labels: vec!["running".into(), "ready-for-human".into()],
        };
        assert!(removes(&fate(&closed, None, H, NO_CLAIM)));
        assert!(removes(&fate(
            &open(&["ready-for-agent"]),
            None,
            H,
            NO_CLAIM
        )));
        assert!(removes(&fate(&open(&[]), None, H, NO_CLAIM)));
        assert!(removes(&fate(&IssueFacts::NotFound, None, H, NO_CLAIM)));
    }

    #[test]
    fn ready_for_human_splits_on_the_envelope() {
        let f = open(&["ready-for-human"]);
        let cases = [
            (Some(posted(Some(true))), TTL_HUMAN_POSTED),
            (Some(posted(Some(false))), TTL_HUMAN_UNPOSTED),
            (Some(posted(None)), TTL_HUMAN_UNPOSTED),
            (None, TTL_HUMAN_UNPOSTED),
        ];
        for (state, ttl) in cases {
            let s = state.as_ref();
            assert!(!removes(&fate(&f, s, ttl - H, NO_CLAIM)));
            assert!(!removes(&fate(&f, s, ttl, NO_CLAIM)));
            assert!(removes(&fate(&f, s, ttl + H, NO_CLAIM)));
        }
    }

    #[test]
    fn running_restores_unless_the_claim_is_live() {
        let f = open(&["running"]);
        assert_eq!(fate(&f, None, H, NO_CLAIM), Fate::Restore);
        let held = fate(&f, None, H, || Some(42));
        assert!(removes(&held), "{held:?}");
        // ready-for-human wins over running.
        let both = open(&["running", "ready-for-human"]);
        assert!(matches!(fate(&both, None, H, NO_CLAIM), Fate::Keep(_)));
    }

    #[test]
    fn tracker_failure_falls_back_to_mtime() {
        for kind in [ErrorKind::Transient, ErrorKind::Failed] {
            let f = IssueFacts::Unavailable(TrackerError::new(kind, "gh issue list", "boom"));
            let st = posted(Some(true));
            let with = Some(&st);
            assert!(!removes(&fate(&f, with, 7 * DAY - H, NO_CLAIM)));
            assert!(removes(&fate(&f, with, 7 * DAY + H, NO_CLAIM)));
            assert!(!removes(&fate(&f, None, DAY - H, NO_CLAIM)));
            assert!(removes(&fate(&f, None, DAY + H, NO_CLAIM)));
            // Never a restore, whatever the labels would have been.
            let claim_asked = std::cell::Cell::new(false);
            let _ = fate(&f, None, H, || {
                claim_asked.set(true);
                None
            });
            assert!(!claim_asked.get());
        }
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_dur(Duration::from_secs(7)), "0h0m7s");
        assert_eq!(fmt_dur(DAY + 2 * H + Duration::from_secs(61)), "1d2h1m");
    }
}
