//! Orphan cleanup (seed BOOT-SWEEPS.md *Orphan Cleanup*, `docs/SPEC.md` §1–§3, §7).
//!
//! Four passes, in this order: legacy flat `work-<N>` dirs of dead processes; attempt dirs
//! of dead workers, each decided by its issue's tracker state; stale claims of dead
//! holders; dead worker shells left empty (only pid files, `*.tmp` and empty dirs: any
//! other file or link in it was judged by no pass and keeps it). Everything that is removed goes through
//! [`DeleteRoot`], liveness is judged again right before each removal, and a dir that cannot be
//! judged (unreadable, corrupt state file) is kept and counted, never removed on a guess.
//!
//! Choices where the brief is silent, made on the side of keeping:
//! - an attempt whose own `afk.state.json` names a live process is kept even when its
//!   worker's `worker.pid` is dead;
//! - an issue number the batch listing lacks gets one `view`; `NotFound` from it cannot be
//!   judged by state (the store may be empty or the wrong one), so the dir falls back to
//!   the mtime TTL exactly like a failed call, and a stale claim's issue is not restored;
//! - a worker dir or claim with *no* pid file that was modified less than
//!   [`CREATION_GRACE`] ago is left alone: its owner may be between `mkdir` and writing
//!   the pid;
//! - a legacy `work-<N>` whose `afk.pid` is corrupt is kept and counted (it names no
//!   process, so it cannot be proven dead);
//! - a pid file that cannot be judged ([`Liveness::Unknown`]: not a regular file, a `.start`
//!   that is not a number) keeps what it guards: the worker dir, the legacy dir, the claim,
//!   and the restore of a `running` issue whose claim it is;
//! - a restore posts its comment first and changes the label second
//!   ([`crate::sweeps::transition`]); any failure keeps the dir and the claim (the records
//!   it can be restored from), so the next pass does it again without a second comment;
//! - a stale claim is removed only once its issue is restored or read as not `running`:
//!   a read that fails or says "not found" keeps it, counted as kept, for the next pass.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::attempt_state::AttemptState;
use crate::layout::{Layout, parse_attempt_dir, parse_legacy_work_dir};
use crate::pidfile::{DeadReason, Liveness, MissingStart, liveness};
use crate::rescue::{Keeper, Rescued};
use crate::safe_delete::DeleteRoot;
use crate::sweeps::guard::{
    Guard, NotRemoved, recheck_attempt, recheck_pid_file, rescue_first, rescue_note,
};
use crate::sweeps::issue_book::{IssueBook, IssueFacts};
use crate::sweeps::transition;
use crate::sweeps::worker_tree::{self, Entry, Kind, age, entries, is_empty_dir};
use crate::sweeps::{Decision, Disposition, SweepName};
use crate::tracker::{Tracker, labels};

pub use crate::claim::marks::RESTORE_COMMENT;

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
pub use crate::sweeps::guard::CREATION_GRACE;

/// What stops a pass: `.red/tmp` could not be opened, or a registered dir could not be read.
pub type OrphanError = super::worker_tree::TreeError;

/// The boot summary's `orphans removed=N restored=N kept=N`, and what else the pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OrphanCounts {
    pub removed: usize,
    pub restored: usize,
    pub kept: usize,
    pub legacy_removed: usize,
    pub claims_released: usize,
}

/// Why a `running` issue was not restored; the text is the decision's reason.
#[derive(Debug, thiserror::Error)]
enum NotRestored {
    #[error("claim cannot be judged, not restored: {0}")]
    ClaimUnjudgeable(String),
    #[error("restore not finished: {0}")]
    Unfinished(transition::TransitionError),
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
    /// The rescues this pass made before restoring or removing (`attempt.rescued`).
    #[serde(skip)]
    pub rescued: Vec<Rescued>,
}

/// Runs the four passes. In a dry run every decision is made and reported the same way,
/// but nothing is removed and the tracker is only read.
pub fn run(
    layout: &Layout,
    tracker: &dyn Tracker,
    now: SystemTime,
    dry_run: bool,
) -> Result<OrphanReport, OrphanError> {
    let keeper = Keeper::new(
        layout.repo(),
        crate::rescue::DEFAULT_MAX_FILE_BYTES,
        tracker.shared_across_checkouts(),
    );
    run_with(layout, tracker, now, dry_run, &keeper)
}

/// [`run`], rescuing with `keeper` (the config's size limit) before every restore and
/// every removal of an attempt dir.
pub fn run_with(
    layout: &Layout,
    tracker: &dyn Tracker,
    now: SystemTime,
    dry_run: bool,
    keeper: &Keeper,
) -> Result<OrphanReport, OrphanError> {
    let Some(root) = DeleteRoot::open(layout)? else {
        return Ok(OrphanReport::default());
    };
    let mut pass = Pass {
        layout,
        root,
        book: IssueBook::new(tracker),
        now,
        dry_run,
        report: OrphanReport::default(),
        unfinished: HashSet::new(),
        worktrees_removed: false,
        keeper,
    };
    pass.legacy()?;
    let dead = pass.attempts()?;
    pass.claims()?;
    for worker in dead {
        pass.shell(worker);
    }
    pass.report.tracker_reads = pass.book.reads();
    if pass.worktrees_removed
        && let Some(why) = worker_tree::prune_worktree_records(layout)
    {
        pass.decide(
            Path::new("git worktree prune"),
            None,
            None,
            Disposition::Skip,
            why,
        );
    }
    Ok(pass.report)
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
/// age by mtime, `claim` judges the issue's claim (asked only for a `running` issue).
pub fn fate(
    facts: &IssueFacts,
    state: Option<&AttemptState>,
    age: Duration,
    claim: impl FnOnce() -> Liveness,
) -> Fate {
    let fallback = |why: String| {
        let (ttl, what) = match state {
            Some(_) => (TTL_FALLBACK_WITH_STATE, "with state file"),
            None => (TTL_FALLBACK_NO_STATE, "without state file"),
        };
        ttl_fate(age, ttl, &format!("{why}, mtime TTL {what}"))
    };
    match facts {
        IssueFacts::Unavailable(e) => fallback(format!("tracker {} ({})", e.kind, e.command)),
        // Not a state: a store that is empty or the wrong one (e.g. `auto` fell back to
        // `local` because gh is missing) says "not found" for every issue, and a dir
        // waiting for a human must not go on that word.
        IssueFacts::NotFound => fallback("issue not found by the tracker".into()),
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
        f if f.has_label(labels::RUNNING) => match claim() {
            Liveness::Live { pid, .. } => {
                Fate::Remove(format!("running, claim held by live pid {pid}"))
            }
            // The holder may be alive: neither restore the issue nor drop the dir.
            Liveness::Unknown { reason } => {
                Fate::Keep(format!("running, claim cannot be judged: {reason}"))
            }
            Liveness::Dead { .. } => Fate::Restore,
        },
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
    root: DeleteRoot,
    book: IssueBook<'a>,
    now: SystemTime,
    dry_run: bool,
    report: OrphanReport,
    /// Issues whose restore failed in this pass: their claims are kept, not retried.
    unfinished: HashSet<u64>,
    /// An attempt dir removed held a linked git worktree: git's record is pruned at the end.
    worktrees_removed: bool,
    keeper: &'a Keeper,
}

impl Pass<'_> {
    /// Rescue BEFORE restore: the restore comment and the ledger name the work, and the
    /// next attempt resumes from it. A failed rescue still restores the issue; the dir is
    /// then kept (by the removal's own rescue).
    fn rescue_and_restore(&mut self, n: u64, path: &Path) -> Result<RestoreOutcome, NotRestored> {
        let rescued = self.rescue(path, "orchestrator died").ok().flatten();
        self.restore(n, Some(path), rescued.as_ref())
    }

    /// The attempt's work rescued before its issue is restored or its dir removed; a
    /// fresh rescue is reported.
    fn rescue(&mut self, path: &Path, why: &str) -> Result<Option<Rescued>, NotRemoved> {
        let r = rescue_first(self.keeper, path, why, self.dry_run)?;
        if let Some(fresh) = r.as_ref().filter(|r| !r.already) {
            self.report.rescued.push(fresh.clone());
        }
        Ok(r)
    }

    fn decide(
        &mut self,
        path: &Path,
        issue: Option<u64>,
        state: Option<String>,
        verdict: Disposition,
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
            verdict,
            reason: reason.into(),
        });
        self.report.decisions.len() - 1
    }

    /// Records a `keep` and counts it: a dir judged (or unjudgeable) and kept.
    fn keep(
        &mut self,
        path: &Path,
        issue: Option<u64>,
        state: Option<String>,
        why: impl Into<String>,
    ) -> usize {
        self.report.counts.kept += 1;
        self.decide(path, issue, state, Disposition::Keep, why)
    }

    /// Removes `path` unless `still_dead` (judged right now) says otherwise; in a dry run
    /// only checks that the delete root would allow it.
    fn remove(
        &self,
        path: &Path,
        still_dead: impl FnOnce() -> Result<(), NotRemoved>,
    ) -> Result<(), NotRemoved> {
        still_dead()?;
        if self.dry_run {
            self.root.check(path)?;
        } else {
            self.root.remove(path)?;
        }
        Ok(())
    }

    // ---- pass 1: legacy flat work dirs ----

    fn legacy(&mut self) -> Result<(), OrphanError> {
        let tmp = self.root.tmp().to_path_buf();
        let list = entries(&tmp).map_err(|source| OrphanError::Read { path: tmp, source })?;
        for e in list.into_iter().filter(|e| e.name.starts_with("work-")) {
            let Some(n) = parse_legacy_work_dir(&e.name) else {
                self.decide(
                    &e.path,
                    None,
                    None,
                    Disposition::Skip,
                    "slug-named manual worktree",
                );
                continue;
            };
            if e.kind != Kind::Dir {
                self.decide(
                    &e.path,
                    Some(n),
                    None,
                    Disposition::Skip,
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
                        Disposition::Skip,
                        format!("afk.pid {pid} is live"),
                    );
                }
                Liveness::Dead {
                    reason: DeadReason::Missing,
                } => {
                    self.decide(&e.path, Some(n), None, Disposition::Skip, "no afk.pid");
                }
                Liveness::Dead {
                    reason: reason @ DeadReason::Corrupt(_),
                } => {
                    let why = format!("afk.pid {reason}: cannot prove it dead");
                    self.keep(&e.path, Some(n), None, why);
                }
                Liveness::Unknown { reason } => {
                    let why = format!("afk.pid cannot be judged: {reason}");
                    self.keep(&e.path, Some(n), None, why);
                }
                Liveness::Dead { reason } => {
                    let recheck = || recheck_pid_file(&pid_file, "afk.pid");
                    match self.remove(&e.path, recheck) {
                        Ok(()) => {
                            self.report.counts.legacy_removed += 1;
                            self.decide(
                                &e.path,
                                Some(n),
                                None,
                                Disposition::Remove,
                                format!("legacy dir, afk.pid: {reason}"),
                            );
                        }
                        Err(why) => {
                            self.keep(&e.path, Some(n), None, why.to_string());
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
                        Disposition::Skip,
                        "symlink in place of a worker dir: not walked",
                    );
                    continue;
                }
                Kind::Dir => {}
            }
            match Guard::of_worker(&w.path, self.now) {
                Guard::Live(pid) => {
                    self.decide(
                        &w.path,
                        None,
                        None,
                        Disposition::Skip,
                        format!("worker live (pid {pid})"),
                    );
                }
                Guard::Unborn => {
                    self.decide(
                        &w.path,
                        None,
                        None,
                        Disposition::Skip,
                        "no worker.pid yet in a dir created just now",
                    );
                }
                Guard::Unknown(reason) => {
                    self.keep(
                        &w.path,
                        None,
                        None,
                        format!("worker.pid cannot be judged: {reason}; its dir is kept"),
                    );
                }
                Guard::Dead(reason) => dead.push(self.dead_worker(&w, &reason)),
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
                let i = self.keep(
                    &w.path,
                    None,
                    None,
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
        let keep =
            |pass: &mut Self, issue, state, why: String| Some(pass.keep(path, issue, state, why));
        let dir_age = match age(path, self.now) {
            Ok(a) => a,
            Err(e) => return keep(self, None, None, format!("cannot stat: {e}")),
        };
        let Some((n, _)) = parse_attempt_dir(&sub.name) else {
            let (expired, why) = ttl_check(dir_age, TTL_UNNUMBERED, "no issue number in name");
            return if expired {
                self.remove_attempt(worker, path, None, None, Disposition::Remove, why)
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
        let claim = || crate::claim::liveness(layout, n);
        match fate(&facts, state.as_ref(), dir_age, claim) {
            Fate::Keep(why) => keep(self, Some(n), desc, why),
            Fate::Remove(why) => {
                let why = format!("{why}; worker {worker_dead}");
                self.remove_attempt(worker, path, Some(n), desc, Disposition::Remove, why)
            }
            Fate::Restore => match self.rescue_and_restore(n, path) {
                Ok(RestoreOutcome::Done) => self.remove_attempt(
                    worker,
                    path,
                    Some(n),
                    desc,
                    Disposition::Restore,
                    format!(
                        "running with no live claim: ready-for-agent restored; worker {worker_dead}"
                    ),
                ),
                Ok(RestoreOutcome::ClaimLive(pid)) => self.remove_attempt(
                    worker,
                    path,
                    Some(n),
                    desc,
                    Disposition::Remove,
                    format!("running, claim taken meanwhile by live pid {pid}"),
                ),
                Ok(RestoreOutcome::HeldElsewhere(h)) => self.remove_attempt(
                    worker,
                    path,
                    Some(n),
                    desc,
                    Disposition::Remove,
                    format!("running, held by {h} of another checkout: not restored"),
                ),
                Err(why) => keep(self, Some(n), desc, why.to_string()),
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
        verdict: Disposition,
        why: String,
    ) -> Option<usize> {
        let linked = !self.dry_run && worker_tree::holds_linked_worktree(path);
        let rescued = match recheck_attempt(worker, path).and_then(|()| self.rescue(path, "swept"))
        {
            Ok(r) => r,
            Err(e) => {
                return Some(self.keep(path, issue, state, format!("{why}; not removed: {e}")));
            }
        };
        let why = format!("{why}{}", rescue_note(&rescued));
        match self.remove(path, || recheck_attempt(worker, path)) {
            Ok(()) => {
                self.worktrees_removed |= linked;
                self.report.counts.removed += 1;
                self.decide(path, issue, state, verdict, why);
                None
            }
            Err(e) => Some(self.keep(path, issue, state, format!("{why}; not removed: {e}"))),
        }
    }

    /// Posts the `docs/SPEC.md` §7 comment and puts `ready-for-agent` back in place of `running`
    /// ([`transition::restore`]), unless a live process holds the claim by now. Any tracker
    /// error stops here: the caller keeps the records (`attempt` and the claim) it could be
    /// restored from, and the issue is not tried again in this pass.
    fn restore(
        &mut self,
        n: u64,
        attempt: Option<&Path>,
        rescued: Option<&Rescued>,
    ) -> Result<RestoreOutcome, NotRestored> {
        match crate::claim::liveness(self.layout, n) {
            Liveness::Live { pid, .. } => return Ok(RestoreOutcome::ClaimLive(pid)),
            Liveness::Unknown { reason } => return Err(NotRestored::ClaimUnjudgeable(reason)),
            Liveness::Dead { .. } => {}
        }
        if !self.dry_run {
            let tracker = self.book.tracker();
            let writes = &mut self.report.tracker_writes;
            let died = crate::ledger::Outcome::WorkerDied;
            match transition::restore_rescued(
                tracker,
                self.layout,
                n,
                attempt,
                writes,
                died,
                rescued,
            ) {
                Ok(transition::Restored::Done) => {}
                Ok(transition::Restored::HeldElsewhere(h)) => {
                    return Ok(RestoreOutcome::HeldElsewhere(h.to_string()));
                }
                Err(e) => {
                    self.unfinished.insert(n);
                    return Err(NotRestored::Unfinished(e));
                }
            }
        }
        self.book
            .record_labels(n, &[labels::READY_FOR_AGENT], &[labels::RUNNING]);
        self.report.counts.restored += 1;
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
                Disposition::Skip,
                "symlink in place of claims/: not walked",
            );
            return Ok(());
        }
        let list = entries(&dir).map_err(|source| OrphanError::Read { path: dir, source })?;
        for e in list {
            let Some(n) = crate::claim::issue_of(&e.name) else {
                continue;
            };
            if e.kind != Kind::Dir {
                self.decide(
                    &e.path,
                    Some(n),
                    None,
                    Disposition::Skip,
                    "claim is not a real directory",
                );
                continue;
            }
            let pid_file = self.layout.claim_pid(n);
            let reason = match Guard::of(&pid_file, &e.path, self.now) {
                Guard::Live(pid) => {
                    self.decide(
                        &e.path,
                        Some(n),
                        None,
                        Disposition::Skip,
                        format!("claim held by live pid {pid}"),
                    );
                    continue;
                }
                Guard::Unborn => {
                    self.decide(
                        &e.path,
                        Some(n),
                        None,
                        Disposition::Skip,
                        "no pid yet in a claim made just now",
                    );
                    continue;
                }
                Guard::Unknown(reason) => {
                    let why = format!("claim pid cannot be judged: {reason}");
                    self.keep(&e.path, Some(n), None, why);
                    continue;
                }
                Guard::Dead(reason) => reason,
            };
            // The claim is the last record to restore a `running` issue from: it goes only
            // once the issue is restored or read as not running.
            let facts = self.book.facts(n);
            let issue_subject = PathBuf::from(format!("#{n}"));
            let desc = Some(facts.describe());
            let why = match &facts {
                // "Not found" is no state either (an empty or wrong store says it of
                // every issue): the issue may be running where the claim was made.
                IssueFacts::Unavailable(_) | IssueFacts::NotFound => {
                    let why = format!(
                        "claim holder dead ({reason}), but the tracker cannot say the issue \
                         is running: not restored, claim kept for the next pass"
                    );
                    self.keep(&e.path, Some(n), desc, why);
                    continue;
                }
                _ if self.unfinished.contains(&n) => {
                    let why = format!(
                        "claim holder dead ({reason}), the restore is unfinished: claim kept \
                         for the next pass"
                    );
                    self.keep(&e.path, Some(n), desc, why);
                    continue;
                }
                f if f.is_closed() || !f.has_label(labels::RUNNING) => {
                    format!("claim holder dead: {reason}")
                }
                _ => match self.restore(n, None, None) {
                    Ok(RestoreOutcome::Done) => {
                        self.decide(
                            &issue_subject,
                            Some(n),
                            desc,
                            Disposition::Restore,
                            "running with a dead claim: ready-for-agent restored",
                        );
                        format!("claim holder dead: {reason}; issue restored")
                    }
                    Ok(RestoreOutcome::ClaimLive(pid)) => {
                        self.decide(
                            &issue_subject,
                            Some(n),
                            desc,
                            Disposition::Skip,
                            format!("claim taken meanwhile by live pid {pid}"),
                        );
                        continue;
                    }
                    Ok(RestoreOutcome::HeldElsewhere(h)) => {
                        format!(
                            "claim holder dead: {reason}; {h} of another checkout holds the issue"
                        )
                    }
                    Err(why) => {
                        let why = format!("{why}; claim kept for the next pass");
                        self.keep(&e.path, Some(n), desc, why);
                        continue;
                    }
                },
            };
            let recheck = || recheck_pid_file(&pid_file, "claim pid");
            match self.remove(&e.path, recheck) {
                Ok(()) => {
                    self.report.counts.claims_released += 1;
                    self.decide(&e.path, Some(n), None, Disposition::Release, why);
                }
                Err(why) => {
                    self.decide(&e.path, Some(n), None, Disposition::Skip, why.to_string());
                }
            }
        }
        Ok(())
    }

    // ---- pass 4: dead empty worker shells ----

    fn shell(&mut self, w: DeadWorker) {
        let pid_file = worker_tree::worker_pid(&w.path);
        let survey = match ShellSurvey::of(&w.path, &w.gone) {
            Ok(s) => s,
            Err(e) => {
                self.decide(
                    &w.path,
                    None,
                    None,
                    Disposition::Keep,
                    format!("cannot read dead worker dir: {e}"),
                );
                return;
            }
        };
        if !survey.foreign.is_empty() {
            // Files nobody judged: removing the shell would delete them unseen.
            let mut why = format!(
                "dead worker shell kept: holds {}",
                survey.foreign.join(", ")
            );
            if survey.holding > 0 {
                why.push_str(&format!(" and {} kept dir(s)", survey.holding));
            }
            self.keep(&w.path, None, None, why);
            return;
        }
        if survey.holding > 0 {
            self.decide(
                &w.path,
                None,
                None,
                Disposition::Skip,
                format!("dead worker still holds {} kept dir(s)", survey.holding),
            );
            return;
        }
        let empty_kept: Vec<usize> = survey
            .empty
            .iter()
            .filter_map(|p| w.kept.iter().find(|(k, _)| k == p).map(|(_, i)| *i))
            .collect();
        let recheck = || {
            recheck_pid_file(&pid_file, "worker.pid")?;
            // Content that appeared since the survey keeps the shell.
            if !self.dry_run {
                let now = ShellSurvey::of(&w.path, &w.gone).map_err(NotRemoved::Survey)?;
                if !now.foreign.is_empty() || now.holding > 0 {
                    return Err(NotRemoved::ShellChanged);
                }
            }
            Ok(())
        };
        let why = match liveness(&pid_file, MissingStart::ExistenceDecides) {
            Liveness::Dead { reason } => format!("dead empty worker shell: worker.pid {reason}"),
            _ => "dead empty worker shell".to_string(),
        };
        match self.remove(&w.path, recheck) {
            Ok(()) => {
                self.report.shells_removed += 1;
                self.decide(&w.path, None, None, Disposition::Remove, why);
                // Kept dirs that were empty went with the shell: count them as removed.
                for i in empty_kept {
                    self.report.counts.kept -= 1;
                    self.report.counts.removed += 1;
                    let d = &mut self.report.decisions[i];
                    d.verdict = Disposition::Remove;
                    d.reason = format!("{}; empty, removed with its dead worker shell", d.reason);
                }
            }
            Err(why) => {
                self.decide(&w.path, None, None, Disposition::Skip, why.to_string());
            }
        }
    }
}

/// What a dead worker dir holds, for the shells pass.
struct ShellSurvey {
    /// Entries that are neither the worker's pid files, a `*.tmp` left by an atomic write,
    /// nor a dir: nobody judged them, so they keep the shell.
    foreign: Vec<String>,
    /// Non-empty subdirs still present (kept by a decision, or new).
    holding: usize,
    /// Empty subdirs, which go with the shell.
    empty: Vec<PathBuf>,
}

impl ShellSurvey {
    /// `gone` holds the subdirs removed already (or, in a dry run, that would have been).
    fn of(worker: &Path, gone: &HashSet<PathBuf>) -> std::io::Result<ShellSurvey> {
        let mut s = ShellSurvey {
            foreign: Vec::new(),
            holding: 0,
            empty: Vec::new(),
        };
        for e in entries(worker)? {
            match e.kind {
                Kind::Dir if gone.contains(&e.path) => {}
                Kind::Dir if is_empty_dir(&e.path).unwrap_or(false) => s.empty.push(e.path),
                Kind::Dir => s.holding += 1,
                Kind::File if is_shell_file(&e.name) => {}
                Kind::File => s.foreign.push(e.name),
                Kind::Symlink => s.foreign.push(format!("{} (symlink)", e.name)),
            }
        }
        Ok(s)
    }
}

/// The files a worker leaves in its own dir: its pid file, the start token, and the
/// staging files of an atomic write.
fn is_shell_file(name: &str) -> bool {
    name == worker_tree::WORKER_PID
        || name == format!("{}.start", worker_tree::WORKER_PID)
        || name.ends_with(".tmp")
}

enum RestoreOutcome {
    Done,
    ClaimLive(i32),
    /// Another checkout's claim mark holds the issue (SPEC §11.5).
    HeldElsewhere(String),
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
    const NO_CLAIM: fn() -> Liveness = || Liveness::Dead {
        reason: DeadReason::Missing,
    };

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
        let held = fate(&f, None, H, || Liveness::Live {
            pid: 42,
            start: None,
        });
        assert!(removes(&held), "{held:?}");
        let unjudged = fate(&f, None, H, || Liveness::Unknown {
            reason: "claims/7/pid: not a regular file".into(),
        });
        assert!(matches!(unjudged, Fate::Keep(_)), "{unjudged:?}");
        // ready-for-human wins over running.
        let both = open(&["running", "ready-for-human"]);
        assert!(matches!(fate(&both, None, H, NO_CLAIM), Fate::Keep(_)));
    }

    #[test]
    fn tracker_failure_and_not_found_fall_back_to_mtime() {
        let failures = [ErrorKind::Transient, ErrorKind::Failed]
            .map(|kind| IssueFacts::Unavailable(TrackerError::new(kind, "gh issue list", "boom")));
        for f in failures.into_iter().chain([IssueFacts::NotFound]) {
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
                NO_CLAIM()
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
