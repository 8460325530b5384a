//! Attempt cap (seed BOOT-SWEEPS.md *Attempt Cap*): issues that never complete would leak
//! an attempt dir per retry forever, so per issue, across every worker dir of every
//! namespace, attempts older than the age cap are reclaimed, then all but the newest
//! `max_count` by attempt number.
//!
//! A live attempt (its `afk.state.json` names a live pid) is never counted nor removed.
//! Beyond the seed, nothing inside a live worker's dir (`worker.pid` live) is touched
//! either: a running worker owns its dir, and its older attempts are reclaimed on the first
//! boot after it stops. An attempt whose state file is corrupt cannot be judged: it is kept,
//! reported, and not counted against its issue's cap.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::attempt_state::AttemptState;
use crate::config::Sweeps;
use crate::layout::{Layout, parse_attempt_dir};
use crate::rescue::{Keeper, Rescued};
use crate::safe_delete::DeleteRoot;
use crate::sweeps::guard::{Guard, NotRemoved, recheck_attempt, rescue_first, rescue_note};
use crate::sweeps::orphans::fmt_dur;
use crate::sweeps::worker_tree::{self, Kind, age, entries};
use crate::sweeps::{Decision, Disposition, SweepName};

/// The two caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub max_age: Duration,
    pub max_count: usize,
}

impl Caps {
    pub fn from_config(s: &Sweeps) -> Self {
        Caps {
            max_age: Duration::from_secs(s.attempt_max_age_days.saturating_mul(86_400)),
            max_count: s.attempt_max_count,
        }
    }
}

/// What stops a pass: `.red/tmp` could not be opened, or a registered dir could not be read.
pub type CapError = super::worker_tree::TreeError;

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CapReport {
    pub reclaimed: usize,
    /// Attempts kept because they could not be judged (corrupt state file, failed removal),
    /// and worker dirs left alone because their `worker.pid` could not be judged.
    pub unjudged: usize,
    pub decisions: Vec<Decision>,
    /// The rescues made before reclaiming (`attempt.rescued`).
    #[serde(skip)]
    pub rescued: Vec<Rescued>,
}

/// The paths orphan cleanup removed (or, in a dry run, would have), from its decisions, so
/// a dry run of both sweeps lists what the cap would see after a real orphan pass.
pub fn gone_in_dry_run(layout: &Layout, decisions: &[Decision]) -> HashSet<PathBuf> {
    decisions
        .iter()
        .filter(|d| d.sweep == SweepName::Orphans)
        .filter(|d| {
            [
                Disposition::Remove,
                Disposition::Restore,
                Disposition::Release,
            ]
            .contains(&d.verdict)
        })
        .filter(|d| !d.subject.starts_with('#'))
        .map(|d| layout.repo().join(&d.subject))
        .collect()
}

struct Candidate {
    path: PathBuf,
    worker: PathBuf,
    issue: u64,
    attempt: u64,
    age: Duration,
}

/// Runs the cap. `already_gone` holds paths an earlier sweep of the same dry run decided
/// to remove: they and everything below them are treated as absent.
pub fn run(
    layout: &Layout,
    caps: Caps,
    now: SystemTime,
    dry_run: bool,
    already_gone: &HashSet<PathBuf>,
) -> Result<CapReport, CapError> {
    let keeper = Keeper::new(layout.repo(), crate::rescue::DEFAULT_MAX_FILE_BYTES, false);
    run_with(layout, caps, now, dry_run, already_gone, &keeper)
}

/// [`run`], rescuing each attempt's work with `keeper` before it is reclaimed.
pub fn run_with(
    layout: &Layout,
    caps: Caps,
    now: SystemTime,
    dry_run: bool,
    already_gone: &HashSet<PathBuf>,
    keeper: &Keeper,
) -> Result<CapReport, CapError> {
    let Some(root) = DeleteRoot::open(layout)? else {
        return Ok(CapReport::default());
    };
    let mut pass = Pass {
        layout,
        root,
        dry_run,
        report: CapReport::default(),
        worktrees_removed: false,
        keeper,
    };
    let gone = |p: &Path| p.ancestors().any(|a| already_gone.contains(a));
    let workers = worker_tree::worker_entries(layout)
        .map_err(|(path, source)| CapError::Read { path, source })?;
    let mut groups: BTreeMap<u64, Vec<Candidate>> = BTreeMap::new();
    for w in workers
        .iter()
        .filter(|w| w.kind == Kind::Dir && !gone(&w.path))
    {
        match Guard::of_worker(&w.path, now) {
            Guard::Live(pid) => {
                pass.decide(
                    &w.path,
                    None,
                    Disposition::Skip,
                    format!("worker live (pid {pid}): its dir is not touched"),
                );
                continue;
            }
            Guard::Unborn => {
                pass.decide(
                    &w.path,
                    None,
                    Disposition::Skip,
                    "no worker.pid yet in a dir created just now",
                );
                continue;
            }
            Guard::Unknown(reason) => {
                pass.report.unjudged += 1;
                pass.decide(
                    &w.path,
                    None,
                    Disposition::Keep,
                    format!("worker.pid cannot be judged: {reason}; its dir is not touched"),
                );
                continue;
            }
            Guard::Dead(_) => {}
        }
        let subs = entries(&w.path).map_err(|source| CapError::Read {
            path: w.path.clone(),
            source,
        })?;
        for sub in subs
            .into_iter()
            .filter(|s| s.kind == Kind::Dir && !gone(&s.path))
        {
            let Some((issue, attempt)) = parse_attempt_dir(&sub.name) else {
                continue;
            };
            match AttemptState::read(&sub.path) {
                Err(e) => {
                    pass.report.unjudged += 1;
                    pass.decide(
                        &sub.path,
                        Some(issue),
                        Disposition::Keep,
                        format!("cannot judge: {e}"),
                    );
                    continue;
                }
                Ok(Some(s)) if s.owner_is_live() => {
                    pass.decide(
                        &sub.path,
                        Some(issue),
                        Disposition::Skip,
                        "live attempt: not counted",
                    );
                    continue;
                }
                Ok(_) => {}
            }
            let dir_age = match age(&sub.path, now) {
                Ok(a) => a,
                Err(e) => {
                    pass.report.unjudged += 1;
                    pass.decide(
                        &sub.path,
                        Some(issue),
                        Disposition::Keep,
                        format!("cannot stat: {e}"),
                    );
                    continue;
                }
            };
            groups.entry(issue).or_default().push(Candidate {
                path: sub.path,
                worker: w.path.clone(),
                issue,
                attempt,
                age: dir_age,
            });
        }
    }
    for (_, group) in groups {
        pass.cap_group(group, caps);
    }
    if pass.worktrees_removed
        && let Some(why) = worker_tree::prune_worktree_records(layout)
    {
        pass.decide(
            Path::new("git worktree prune"),
            None,
            Disposition::Skip,
            why,
        );
    }
    Ok(pass.report)
}

struct Pass<'a> {
    layout: &'a Layout,
    root: DeleteRoot,
    dry_run: bool,
    report: CapReport,
    /// A reclaimed attempt held a linked git worktree: git's record is pruned at the end.
    worktrees_removed: bool,
    keeper: &'a Keeper,
}

impl Pass<'_> {
    fn decide(
        &mut self,
        path: &Path,
        issue: Option<u64>,
        verdict: Disposition,
        reason: impl Into<String>,
    ) {
        let subject = path
            .strip_prefix(self.layout.repo())
            .unwrap_or(path)
            .display()
            .to_string();
        self.report.decisions.push(Decision {
            sweep: SweepName::AttemptCap,
            subject,
            issue,
            state: None,
            verdict,
            reason: reason.into(),
        });
    }

    /// One issue's attempts: the age cap first, then the count cap over what is left,
    /// newest attempt number first (ties: the more recently modified one).
    fn cap_group(&mut self, mut group: Vec<Candidate>, caps: Caps) {
        group.sort_by(|a, b| {
            b.attempt
                .cmp(&a.attempt)
                .then(a.age.cmp(&b.age))
                .then(a.path.cmp(&b.path))
        });
        let mut rank = 0;
        for c in group {
            if c.age > caps.max_age {
                let why = format!(
                    "older than the age cap: {} > {}",
                    fmt_dur(c.age),
                    fmt_dur(caps.max_age)
                );
                self.reclaim(&c, why);
                continue;
            }
            rank += 1;
            if rank > caps.max_count {
                let why = format!(
                    "attempt {} of #{} is beyond the newest {} kept",
                    c.attempt, c.issue, caps.max_count
                );
                self.reclaim(&c, why);
            } else {
                let why = format!(
                    "within caps: newest #{rank} of its issue, age {}",
                    fmt_dur(c.age)
                );
                self.decide(&c.path, Some(c.issue), Disposition::Keep, why);
            }
        }
    }

    /// Removes one attempt after judging its worker and its own state again.
    fn reclaim(&mut self, c: &Candidate, why: String) {
        let linked = !self.dry_run && worker_tree::holds_linked_worktree(&c.path);
        let mut note = String::new();
        let result = recheck_attempt(&c.worker, &c.path).and_then(|()| {
            let rescued = rescue_first(self.keeper, &c.path, "attempt cap", self.dry_run)?;
            note = rescue_note(&rescued);
            if let Some(r) = rescued.filter(|r| !r.already) {
                self.report.rescued.push(r);
            }
            recheck_attempt(&c.worker, &c.path)?;
            if self.dry_run {
                self.root.check(&c.path).map_err(NotRemoved::from)
            } else {
                self.root
                    .remove(&c.path)
                    .map(|_| ())
                    .map_err(NotRemoved::from)
            }
        });
        match result {
            Ok(()) => {
                self.worktrees_removed |= linked;
                self.report.reclaimed += 1;
                let why = format!("{why}{note}");
                self.decide(&c.path, Some(c.issue), Disposition::Remove, why);
            }
            Err(e) => {
                self.report.unjudged += 1;
                self.decide(
                    &c.path,
                    Some(c.issue),
                    Disposition::Keep,
                    format!("{why}; not removed: {e}"),
                );
            }
        }
    }
}
