//! The branch reaper (seed *On-Demand Branch Reaper*, `docs/SPEC.md` §8): deletes `afk/*` branches
//! whose issue is done, on `origin` and locally, and spares everything it cannot be sure of.
//!
//! The work is split so the rules can be read and tested apart from git and the tracker:
//! [`parse_branch`] reads an issue number from a name, [`Classification`] turns ONE batch
//! tracker listing into a verdict per issue, and [`decide`] maps an [`Inventory`] of branches
//! to [`BranchDecision`]s. [`run`] gathers the inventory with a fixed number of git calls
//! (independent of how many branches there are), decides, and deletes in one call per side.
//!
//! Rules, in the order they are applied to each branch:
//! - a name that is not UTF-8 is spared (`name is not UTF-8`): it is never decoded lossily
//!   into a name git does not have, so it is neither deleted by mistake nor reported reaped;
//! - a name that is not `afk/<N>-<slug>` or `afk/<worker>/<N>-<slug>` is spared (unrecognised);
//! - a local branch checked out by any worktree is spared, whatever its issue;
//! - an open issue, or one the tracker could not answer for (unclassified), spares its branches;
//! - a closed issue's branches are reaped on both sides;
//! - an issue missing from the batch listing (not found) spares its remote branches; its local
//!   branches are reaped only when already merged into `origin/<base>`.
//!
//! "Not found" is read from the batch alone, without a per-issue `view`: an issue beyond the
//! listing's limit looks not found, and that can only ever spare a branch, never reap one
//! that an open issue needs (the only not-found deletion is of a local branch whose commits
//! are already on the base).

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use crate::git::{Git, GitError};
use crate::layout::parse_positive;
use crate::sweeps::base_fetch::{BaseFetch, BaseFetchError};
use crate::sweeps::{Decision, Disposition, SweepName};
use crate::text;
use crate::tracker::{
    DEFAULT_LIST_LIMIT, IssueState, IssueSummary, Tracker, TrackerError, TrackerResult,
};

/// The prefix of every AFK branch.
pub const PREFIX: &str = "afk/";

/// The issue number of an AFK branch name (`afk/<N>-<slug>` or `afk/<worker>/<N>-<slug>`,
/// N a positive decimal without sign or leading zero, slug and worker non-empty); `None` for
/// anything else, which the reaper spares as unrecognised.
pub fn parse_branch(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(PREFIX)?;
    let mut parts = rest.split('/');
    let first = parts.next()?;
    let leaf = match (parts.next(), parts.next()) {
        (None, _) => first,
        (Some(leaf), None) if !first.is_empty() => leaf,
        _ => return None,
    };
    let (number, slug) = leaf.split_once('-')?;
    if slug.is_empty() {
        return None;
    }
    parse_positive(number)
}

/// What the tracker says about one issue, for the reaper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueClass {
    Open,
    Closed,
    /// Absent from a successful batch listing.
    NotFound,
    /// The listing failed, so nothing is known.
    Unclassified,
}

impl IssueClass {
    /// The `state` recorded in a [`Decision`].
    pub fn as_str(self) -> &'static str {
        match self {
            IssueClass::Open => "OPEN",
            IssueClass::Closed => "CLOSED",
            IssueClass::NotFound => "not found",
            IssueClass::Unclassified => "unclassified",
        }
    }
}

/// Every issue's class, from one batch listing.
#[derive(Debug, Clone)]
pub struct Classification {
    batch: Result<HashMap<u64, IssueState>, TrackerError>,
}

impl Classification {
    pub fn from_batch(batch: TrackerResult<Vec<IssueSummary>>) -> Self {
        Classification {
            batch: batch.map(|rows| rows.into_iter().map(|i| (i.number, i.state)).collect()),
        }
    }

    pub fn of(&self, issue: u64) -> IssueClass {
        match &self.batch {
            Err(_) => IssueClass::Unclassified,
            Ok(states) => match states.get(&issue) {
                Some(IssueState::Open) => IssueClass::Open,
                Some(IssueState::Closed) => IssueClass::Closed,
                None => IssueClass::NotFound,
            },
        }
    }

    /// The listing's failure, when every issue is unclassified.
    pub fn error(&self) -> Option<&TrackerError> {
        self.batch.as_ref().err()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    Remote,
    Local,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Remote => "remote",
            Side::Local => "local",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Reap,
    Spare,
    /// Judged reapable, but the delete failed and the branch is still there.
    NotReaped,
}

/// The reaper's verdict on one branch on one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchDecision {
    pub side: Side,
    /// The branch name without `refs/heads/` or `origin/`, e.g. `afk/12-fix-login`.
    pub branch: String,
    pub issue: Option<u64>,
    /// `None` for unrecognised names.
    pub class: Option<IssueClass>,
    pub action: Action,
    pub reason: String,
}

impl BranchDecision {
    /// The `docs/SPEC.md` §8 line: `reaped (remote): <branch> #<N> — <reason>` or
    /// `spared (local): <branch> — <reason>`. A dry run says `would reap` instead of `reaped`.
    pub fn line(&self, dry_run: bool) -> String {
        let side = self.side.as_str();
        let (branch, reason) = (text::escape(&self.branch), text::escape(&self.reason));
        match (self.action, self.issue) {
            (Action::Reap, Some(n)) => {
                let verb = if dry_run { "would reap" } else { "reaped" };
                format!("{verb} ({side}): {branch} #{n} — {reason}")
            }
            (Action::NotReaped, Some(n)) => {
                format!("not reaped ({side}): {branch} #{n} — {reason}")
            }
            _ => format!("spared ({side}): {branch} — {reason}"),
        }
    }

    /// The same decision in the suite-wide record; a remote branch's subject is
    /// `origin/<branch>` so the two sides stay apart.
    pub fn to_decision(&self) -> Decision {
        Decision {
            sweep: SweepName::Branches,
            subject: match self.side {
                Side::Remote => format!("origin/{}", self.branch),
                Side::Local => self.branch.clone(),
            },
            issue: self.issue,
            state: self.class.map(|c| c.as_str().to_string()),
            verdict: match self.action {
                Action::Reap => Disposition::Reap,
                Action::Spare => Disposition::Spare,
                Action::NotReaped => Disposition::Failed,
            },
            reason: self.reason.clone(),
        }
    }
}

impl fmt::Display for BranchDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line(false))
    }
}

/// The branches the reaper judges, as git reported them.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    /// `afk/*` branches on `origin`.
    pub remote: Vec<String>,
    /// Local `afk/*` branches.
    pub local: Vec<String>,
    /// `afk/*` branches on `origin` whose names are not UTF-8, as bytes: always spared.
    pub remote_not_utf8: Vec<Vec<u8>>,
    /// Local `afk/*` branches whose names are not UTF-8, as bytes: always spared.
    pub local_not_utf8: Vec<Vec<u8>>,
    /// Branches checked out by any worktree of the repo.
    pub worktrees: BTreeSet<String>,
    /// Local branches already merged into [`Inventory::base_ref`]. Only the branches
    /// [`merge_candidates`] names need to be asked about.
    pub merged: BTreeSet<String>,
    /// `origin/<base>`, for reasons.
    pub base_ref: String,
}

/// The local branches whose fate depends on being merged: recognised, not checked out, and
/// of an issue the tracker does not know. Asking git about only these keeps the merge check
/// one call over a short list.
pub fn merge_candidates(
    local: &[String],
    worktrees: &BTreeSet<String>,
    class: &Classification,
) -> Vec<String> {
    local
        .iter()
        .filter(|b| !worktrees.contains(*b))
        .filter(|b| parse_branch(b).is_some_and(|n| class.of(n) == IssueClass::NotFound))
        .cloned()
        .collect()
}

/// Judges every branch: remote side first, then local, each in name order.
pub fn decide(inv: &Inventory, class: &Classification) -> Vec<BranchDecision> {
    let mut out = Vec::with_capacity(inv.remote.len() + inv.local.len());
    let sides = [
        (Side::Remote, &inv.remote, &inv.remote_not_utf8),
        (Side::Local, &inv.local, &inv.local_not_utf8),
    ];
    for (side, names, not_utf8) in sides {
        let mut names: Vec<&String> = names.iter().collect();
        names.sort();
        names.dedup();
        out.extend(names.into_iter().map(|b| decide_one(side, b, inv, class)));
        let mut odd: Vec<&Vec<u8>> = not_utf8.iter().collect();
        odd.sort();
        odd.dedup();
        out.extend(odd.into_iter().map(|raw| BranchDecision {
            side,
            branch: text::escape_bytes(raw),
            issue: None,
            class: None,
            action: Action::Spare,
            reason: "name is not UTF-8".into(),
        }));
    }
    out
}

fn decide_one(side: Side, branch: &str, inv: &Inventory, class: &Classification) -> BranchDecision {
    let spare = |issue: Option<u64>, c: Option<IssueClass>, reason: String| BranchDecision {
        side,
        branch: branch.to_string(),
        issue,
        class: c,
        action: Action::Spare,
        reason,
    };
    let Some(n) = parse_branch(branch) else {
        return spare(None, None, "unrecognised branch name".into());
    };
    let c = class.of(n);
    if side == Side::Local && inv.worktrees.contains(branch) {
        return spare(
            Some(n),
            Some(c),
            format!("checked out in a worktree (issue #{n} {})", describe(c)),
        );
    }
    let reap = |reason: String| BranchDecision {
        side,
        branch: branch.to_string(),
        issue: Some(n),
        class: Some(c),
        action: Action::Reap,
        reason,
    };
    match c {
        IssueClass::Closed => reap("issue closed".into()),
        IssueClass::Open => spare(Some(n), Some(c), format!("issue #{n} open")),
        IssueClass::Unclassified => spare(
            Some(n),
            Some(c),
            format!("issue #{n} unclassified (tracker failed)"),
        ),
        IssueClass::NotFound if side == Side::Local && inv.merged.contains(branch) => {
            reap(format!("merged into {} (issue not found)", inv.base_ref))
        }
        IssueClass::NotFound if side == Side::Local => spare(
            Some(n),
            Some(c),
            format!("issue #{n} not found, not merged into {}", inv.base_ref),
        ),
        IssueClass::NotFound => spare(Some(n), Some(c), format!("issue #{n} not found")),
    }
}

/// The boot summary's `branches remote=N local=N spared=N`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BranchCounts {
    pub remote: usize,
    pub local: usize,
    pub spared: usize,
}

/// What one reaper run saw and did.
#[derive(Debug)]
pub struct ReapReport {
    /// `afk/*` branches on `origin` before the run (`remote-afk=N`).
    pub remote_afk: usize,
    /// Local `afk/*` branches before the run (`local-afk=N`).
    pub local_afk: usize,
    /// Remote side first, then local, each in name order.
    pub decisions: Vec<BranchDecision>,
    /// Why every issue is unclassified, when the tracker listing failed.
    pub tracker_error: Option<TrackerError>,
    /// Deletes that failed, per side; the branches still present are `NotReaped`.
    pub delete_errors: Vec<(Side, GitError)>,
    /// Tracker calls made (0 or 1).
    pub tracker_calls: usize,
}

impl ReapReport {
    /// `afk branch counts: remote-afk=N local-afk=N` (`docs/SPEC.md` §8).
    pub fn counts_line(&self) -> String {
        format!(
            "afk branch counts: remote-afk={} local-afk={}",
            self.remote_afk, self.local_afk
        )
    }

    /// The boot summary's `branches remote=N local=N spared=N`: reaped per side (in a dry
    /// run, reapable), and spared on both sides.
    pub fn counts(&self) -> BranchCounts {
        let n = |side: Side, action: Action| {
            self.decisions
                .iter()
                .filter(|d| d.side == side && d.action == action)
                .count()
        };
        BranchCounts {
            remote: n(Side::Remote, Action::Reap),
            local: n(Side::Local, Action::Reap),
            spared: n(Side::Remote, Action::Spare) + n(Side::Local, Action::Spare),
        }
    }

    /// All delete failures in one line, when there were any.
    pub fn delete_error(&self) -> Option<String> {
        if self.delete_errors.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .delete_errors
            .iter()
            .map(|(side, e)| format!("deleting {} branches failed: {e}", side.as_str()))
            .collect();
        Some(format!("branch reaper: {}", parts.join("; ")))
    }
}

/// A git call the reaper cannot do without.
#[derive(Debug, thiserror::Error)]
#[error("branch reaper: {what}: {source}")]
pub struct ReapError {
    pub what: &'static str,
    #[source]
    pub source: GitError,
}

/// Gathers the inventory, classifies from one tracker listing, decides and (unless
/// `dry_run`) deletes. Git calls: the remote listing and the fetch of the base, `ls-remote`,
/// local branch list, rescue-ref list, worktree list, one merge check (only when a local
/// branch's fate depends on it), and one delete per side with anything to reap: at most 9,
/// however many branches there are (the git layer splits a delete only past its argv
/// budget, tens of thousands of names, and re-lists a side only when its delete failed).
/// Tracker calls: one `list_all`, skipped when no branch names an issue. The listing and
/// the fetch are `fetched`'s: none when this suite run has already fetched the base.
pub fn run(
    git: &Git,
    tracker: &dyn Tracker,
    base: &str,
    dry_run: bool,
    fetched: &BaseFetch,
) -> Result<ReapReport, ReapError> {
    let need = |what| move |source| ReapError { what, source };
    // A local-only checkout (no `origin` at all) has no remote side; its local branches are
    // judged against the local base instead of `origin/<base>`.
    let has_origin = fetched.fetch(git, base).map_err(|e| match e {
        BaseFetchError::Fetch(e) => need("fetching the base from origin")(e),
        BaseFetchError::Remotes(e) => need("listing remotes")(e),
    })?;
    let remote = if has_origin {
        git.remote_afk_listing()
            .map_err(need("listing afk/* branches on origin"))?
    } else {
        Default::default()
    };
    let local = git
        .local_afk_listing()
        .map_err(need("listing local afk/* branches"))?;
    let worktrees = git.worktree_branches().map_err(need("listing worktrees"))?;
    let rescues: Vec<String> = git
        .refs_under(crate::rescue::RESCUE_REFS)
        .map_err(need("listing refs/afk/rescue/*"))?
        .into_iter()
        .map(|(name, _)| name)
        .collect();

    let names_an_issue = remote
        .utf8
        .iter()
        .chain(&local.utf8)
        .any(|b| parse_branch(b).is_some())
        || !rescues.is_empty();
    let (class, tracker_calls) = if names_an_issue {
        (
            Classification::from_batch(tracker.list_all(DEFAULT_LIST_LIMIT)),
            1,
        )
    } else {
        (Classification::from_batch(Ok(Vec::new())), 0)
    };

    let base_ref = if has_origin {
        format!("origin/{base}")
    } else {
        base.to_string()
    };
    let candidates = merge_candidates(&local.utf8, &worktrees, &class);
    let merged = if candidates.is_empty() {
        BTreeSet::new()
    } else {
        git.merged_into(&base_ref, &candidates)
            .map_err(need("checking which branches are merged"))?
    };
    let inv = Inventory {
        remote: remote.utf8,
        local: local.utf8,
        remote_not_utf8: remote.not_utf8,
        local_not_utf8: local.not_utf8,
        worktrees,
        merged,
        base_ref,
    };
    let mut report = ReapReport {
        remote_afk: inv.remote.len() + inv.remote_not_utf8.len(),
        local_afk: inv.local.len() + inv.local_not_utf8.len(),
        decisions: decide(&inv, &class),
        tracker_error: class.error().cloned(),
        delete_errors: Vec::new(),
        tracker_calls,
    };
    if !dry_run {
        delete_side(git, &mut report, Side::Remote);
        delete_side(git, &mut report, Side::Local);
    }
    reap_rescues(git, &mut report, &rescues, &class, dry_run);
    Ok(report)
}

/// The rescue refs (`refs/afk/rescue/<N>/a<K>`, [`crate::rescue`]) are judged like local
/// `afk/*` branches of their issue: reaped once it is closed, spared while it is open, not
/// found or unclassified. Recorded on the local side under their full names.
fn reap_rescues(
    git: &Git,
    report: &mut ReapReport,
    refs: &[String],
    class: &Classification,
    dry_run: bool,
) {
    for r in refs {
        let issue = crate::rescue::issue_of_ref(r);
        let c = issue.map(|n| class.of(n));
        let (action, reason) = match (issue, c) {
            (Some(_), Some(IssueClass::Closed)) if dry_run => (Action::Reap, "issue closed".into()),
            (Some(_), Some(IssueClass::Closed)) => match git.delete_refs(std::slice::from_ref(r)) {
                Ok(()) => (Action::Reap, "issue closed".to_string()),
                Err(e) => {
                    let why = format!("issue closed; delete failed: {e}");
                    report.delete_errors.push((Side::Local, e));
                    (Action::NotReaped, why)
                }
            },
            (Some(n), Some(c)) => (
                Action::Spare,
                format!("rescued work of issue #{n} {}", describe(c)),
            ),
            _ => (Action::Spare, "unrecognised rescue ref".to_string()),
        };
        report.decisions.push(BranchDecision {
            side: Side::Local,
            branch: r.clone(),
            issue,
            class: c,
            action,
            reason,
        });
    }
}

/// Deletes one side's reaped branches (one git call for any usual count). When the delete
/// fails, the branches git reports still present are marked `NotReaped`; when git cannot
/// say which, none is claimed as reaped.
fn delete_side(git: &Git, report: &mut ReapReport, side: Side) {
    let doomed: Vec<String> = report
        .decisions
        .iter()
        .filter(|d| d.side == side && d.action == Action::Reap)
        .map(|d| d.branch.clone())
        .collect();
    if doomed.is_empty() {
        return;
    }
    let result = match side {
        Side::Remote => git.delete_remote_branches(&doomed),
        Side::Local => git.delete_local_branches(&doomed),
    };
    let Err(error) = result else {
        return;
    };
    let remaining: Option<BTreeSet<&String>> = match &error {
        GitError::PartialDelete { remaining, .. } => Some(remaining.iter().collect()),
        _ => None,
    };
    for d in report
        .decisions
        .iter_mut()
        .filter(|d| d.side == side && d.action == Action::Reap)
    {
        if remaining.as_ref().is_none_or(|r| r.contains(&d.branch)) {
            d.action = Action::NotReaped;
            d.reason = format!("{}; delete failed", d.reason);
        }
    }
    report.delete_errors.push((side, error));
}

impl ReapReport {
    /// The decisions the boot suite records: a tracker failure (which only spares, every
    /// issue unclassified) as one `warn`, then one per branch.
    pub fn suite_decisions(&self) -> Vec<Decision> {
        let warn = self.tracker_error.as_ref().map(|e| Decision {
            sweep: SweepName::Branches,
            subject: "afk/*".into(),
            issue: None,
            state: Some(IssueClass::Unclassified.as_str().into()),
            verdict: Disposition::Warn,
            reason: format!("tracker failed, every branch spared: {e}"),
        });
        warn.into_iter()
            .chain(self.decisions.iter().map(BranchDecision::to_decision))
            .collect()
    }
}

fn describe(c: IssueClass) -> &'static str {
    match c {
        IssueClass::Open => "open",
        IssueClass::Closed => "closed",
        IssueClass::NotFound => "not found",
        IssueClass::Unclassified => "unclassified",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::ErrorKind;

    #[test]
    fn parses_both_shapes_strictly() {
        assert_eq!(parse_branch("afk/12-fix-login"), Some(12));
        assert_eq!(parse_branch("afk/w3/7-x"), Some(7));
        assert_eq!(parse_branch("afk/worker-a/1-a-b-c"), Some(1));
        for bad in [
            "afk/",
            "afk/12",
            "afk/12-",
            "afk/0-x",
            "afk/012-x",
            "afk/-12-x",
            "afk/+12-x",
            "afk/x-12",
            "afk/12x-y",
            "afk//12-x",
            "afk/w/12",
            "afk/a/b/12-x",
            "afk/w/0-x",
            "afk/99999999999999999999999-x",
            "feature/12-x",
            "afk12-x",
            "12-x",
        ] {
            assert_eq!(parse_branch(bad), None, "{bad}");
        }
    }

    fn batch(rows: &[(u64, IssueState)]) -> Classification {
        Classification::from_batch(Ok(rows
            .iter()
            .map(|&(number, state)| IssueSummary {
                number,
                state,
                labels: vec![],
                closed_at: None,
            })
            .collect()))
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn classification_from_one_batch() {
        let c = batch(&[(1, IssueState::Open), (2, IssueState::Closed)]);
        assert_eq!(c.of(1), IssueClass::Open);
        assert_eq!(c.of(2), IssueClass::Closed);
        assert_eq!(c.of(3), IssueClass::NotFound);
        assert!(c.error().is_none());
        let failed = Classification::from_batch(Err(TrackerError::new(
            ErrorKind::Transient,
            "gh issue list",
            "timeout",
        )));
        for n in [1, 2, 3] {
            assert_eq!(failed.of(n), IssueClass::Unclassified);
        }
        assert!(failed.error().is_some());
    }

    fn fixture() -> Inventory {
        Inventory {
            remote: names(&[
                "afk/2-closed",
                "afk/1-open",
                "afk/3-gone",
                "afk/w/2-closed-too",
                "afk/odd",
            ]),
            local: names(&[
                "afk/1-open",
                "afk/2-closed",
                "afk/w/2-in-tree",
                "afk/3-gone",
                "afk/4-gone-unmerged",
                "afk/1-merged-but-open",
                "afk/odd",
            ]),
            worktrees: ["afk/w/2-in-tree".to_string(), "main".to_string()].into(),
            merged: [
                "afk/3-gone".to_string(),
                "afk/1-merged-but-open".to_string(),
            ]
            .into(),
            base_ref: "origin/main".into(),
            ..Inventory::default()
        }
    }

    #[test]
    fn decides_each_rule() {
        let c = batch(&[(1, IssueState::Open), (2, IssueState::Closed)]);
        let lines: Vec<String> = decide(&fixture(), &c)
            .iter()
            .map(|d| d.line(false))
            .collect();
        assert_eq!(
            lines,
            vec![
                "spared (remote): afk/1-open — issue #1 open",
                "reaped (remote): afk/2-closed #2 — issue closed",
                "spared (remote): afk/3-gone — issue #3 not found",
                "spared (remote): afk/odd — unrecognised branch name",
                "reaped (remote): afk/w/2-closed-too #2 — issue closed",
                "spared (local): afk/1-merged-but-open — issue #1 open",
                "spared (local): afk/1-open — issue #1 open",
                "reaped (local): afk/2-closed #2 — issue closed",
                "reaped (local): afk/3-gone #3 — merged into origin/main (issue not found)",
                "spared (local): afk/4-gone-unmerged — issue #4 not found, not merged into origin/main",
                "spared (local): afk/odd — unrecognised branch name",
                "spared (local): afk/w/2-in-tree — checked out in a worktree (issue #2 closed)",
            ]
        );
    }

    #[test]
    fn tracker_failure_reaps_nothing() {
        let c = Classification::from_batch(Err(TrackerError::new(
            ErrorKind::Transient,
            "gh issue list",
            "HTTP 502",
        )));
        let d = decide(&fixture(), &c);
        assert!(d.iter().all(|d| d.action == Action::Spare), "{d:#?}");
        assert!(d.iter().any(|d| d.line(false)
            == "spared (remote): afk/2-closed — issue #2 unclassified (tracker failed)"));
        assert!(merge_candidates(&fixture().local, &fixture().worktrees, &c).is_empty());
    }

    #[test]
    fn merge_candidates_are_only_not_found_and_free() {
        let c = batch(&[(1, IssueState::Open), (2, IssueState::Closed)]);
        let inv = fixture();
        assert_eq!(
            merge_candidates(&inv.local, &inv.worktrees, &c),
            names(&["afk/3-gone", "afk/4-gone-unmerged"])
        );
    }

    /// A name that is not UTF-8 is spared on both sides with one line saying so; nothing
    /// reaps (or reports reaping) its lossily decoded look-alike.
    #[test]
    fn names_that_are_not_utf8_are_spared() {
        let c = batch(&[(2, IssueState::Closed)]);
        let inv = Inventory {
            remote_not_utf8: vec![b"afk/2-\xff".to_vec()],
            local_not_utf8: vec![b"afk/2-\xff\x1b".to_vec()],
            ..Inventory::default()
        };
        let lines: Vec<String> = decide(&inv, &c).iter().map(|d| d.line(false)).collect();
        assert_eq!(
            lines,
            vec![
                "spared (remote): afk/2-\\xff — name is not UTF-8",
                "spared (local): afk/2-\\xff\\e — name is not UTF-8",
            ]
        );
    }

    #[test]
    fn dry_run_wording_and_record() {
        let c = batch(&[(2, IssueState::Closed)]);
        let d = decide(
            &Inventory {
                remote: names(&["afk/2-x"]),
                ..Inventory::default()
            },
            &c,
        );
        assert_eq!(
            d[0].line(true),
            "would reap (remote): afk/2-x #2 — issue closed"
        );
        let rec = d[0].to_decision();
        assert_eq!(rec.subject, "origin/afk/2-x");
        assert_eq!(rec.issue, Some(2));
        assert_eq!(rec.state.as_deref(), Some("CLOSED"));
        assert_eq!(rec.verdict, "reap");
    }
}
