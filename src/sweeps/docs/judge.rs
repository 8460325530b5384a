//! Whether a flagged doc is really stranded, and what the sweep does about the lot.
//!
//! A doc is judged by three versions of it: the work tree's (*ours*), the base's
//! (`origin/<base>`, *theirs*) and the one at the fork point (`merge-base HEAD
//! origin/<base>`). Comparing blob ids keeps the sweep idempotent (a doc landed by an
//! earlier run is visible on the base even though the primary checkout, which the sweep
//! never touches, still shows it as untracked) and keeps it from overwriting a change
//! someone else landed on the base since the checkout forked.

use std::fmt;

use super::classify::{Candidate, Precedent};
use crate::sweeps::{Decision, Disposition, SweepName};

/// The work-tree side of a doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkState {
    /// Not in the work tree (deleted).
    Absent,
    /// A regular file, with the blob id git would store for it.
    File(String),
    /// Present but not something the sweep copies: a symlink (never followed; it could
    /// point out of the repo) or not a regular file. Carries what it is.
    Unpublishable(&'static str),
}

/// All three versions of one doc, as blob ids (`None`: no such path there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub work: WorkState,
    pub origin: Option<String>,
    pub fork: Option<String>,
    /// Whether the work-tree blob was the content of this path at some commit of the
    /// base: then the local copy is an old version, not a new one.
    pub seen_on_origin: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Stranded: the base lacks this version and never had it.
    Land,
    /// Stranded but not copyable (see [`WorkState::Unpublishable`]); reported, not landed.
    Skip(&'static str),
    /// The base already has exactly this version.
    Visible,
    /// The local copy is older than the base's; nothing to land.
    Stale,
    /// Changed here and, differently, on the base since the fork: landing would overwrite
    /// someone else's change.
    Diverged,
}

/// The verdict table. Order matters: "base unchanged since the fork" is tested before
/// "seen on the base" so that deliberately restoring an old version still lands.
pub fn verdict(o: &Observed) -> Verdict {
    let ours = match &o.work {
        WorkState::Unpublishable(what) => return Verdict::Skip(what),
        WorkState::Absent => None,
        WorkState::File(oid) => Some(oid),
    };
    if ours == o.origin.as_ref() {
        return Verdict::Visible;
    }
    if o.fork == o.origin {
        return Verdict::Land;
    }
    if ours == o.fork.as_ref() {
        return Verdict::Stale;
    }
    if ours.is_some() && o.seen_on_origin {
        return Verdict::Stale;
    }
    Verdict::Diverged
}

/// Why the boot halts. The text is part of the halt message other tools show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaltReason {
    /// `origin/<base>` could not be fetched, so nothing can be judged.
    OriginUnreachable,
    /// An ignored doc of a class with no tracked file on the base.
    ZeroPrecedent,
    /// A doc changed both here and on the base since the fork.
    Diverged,
    /// The worktree, commit, push, PR or merge failed.
    LandingFailed,
}

impl HaltReason {
    pub fn as_str(self) -> &'static str {
        match self {
            HaltReason::OriginUnreachable => "origin-unreachable",
            HaltReason::ZeroPrecedent => "zero-precedent",
            HaltReason::Diverged => "diverged",
            HaltReason::LandingFailed => "landing-failed",
        }
    }
}

impl fmt::Display for HaltReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A boot halt: the reason and the relative paths a person must look at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct Halt {
    pub reason: HaltReason,
    pub paths: Vec<String>,
    /// What failed (git or tracker stderr), for the decision record; not in the message.
    pub detail: Option<String>,
}

impl Halt {
    pub fn new(reason: HaltReason, paths: Vec<String>) -> Self {
        Halt {
            reason,
            paths,
            detail: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// `Docs Sweep halted (<reason>): <paths, comma-separated>`; an empty list (a fetch
    /// failure with nothing flagged locally) reads `(none)` so the line never ends in `: `.
    pub fn message(&self) -> String {
        let list = if self.paths.is_empty() {
            "(none)".to_string()
        } else {
            let n = self.paths.len();
            crate::text::clip(crate::text::escape(&self.paths.join(", ")), n, "paths")
        };
        format!("Docs Sweep halted ({}): {list}", self.reason)
    }
}

/// One judged candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub candidate: Candidate,
    pub verdict: Verdict,
    /// The work tree no longer has it: landing means deleting it on the base.
    pub deleted: bool,
    /// The base has some version of it.
    pub on_base: bool,
}

impl Judged {
    /// What landing it does to the base.
    pub fn change(&self) -> Change {
        match (self.deleted, self.on_base) {
            (true, _) => Change::Delete,
            (false, true) => Change::Update,
            (false, false) => Change::Add,
        }
    }
}

/// What landing a path does to the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Add,
    Update,
    Delete,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Add => "add",
            Change::Update => "update",
            Change::Delete => "delete",
        }
    }
}

/// One path to land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandItem {
    pub path: String,
    pub change: Change,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    Clean,
    Land(Vec<LandItem>),
    Halt(Halt),
}

/// Decides the sweep from the judged candidates. Halts come first, in the order a person
/// must resolve them: an ignored doc without precedent (does it belong in the repo at
/// all?) before a divergence (which version wins?).
pub fn plan(judged: &[Judged], precedent: Precedent) -> Plan {
    let zero: Vec<String> = judged
        .iter()
        .filter(|j| {
            j.verdict == Verdict::Land
                && j.candidate.is_ignored()
                && !precedent.has(j.candidate.class)
        })
        .map(|j| j.candidate.path.clone())
        .collect();
    if !zero.is_empty() {
        return Plan::Halt(Halt::new(HaltReason::ZeroPrecedent, zero));
    }
    let diverged: Vec<String> = judged
        .iter()
        .filter(|j| j.verdict == Verdict::Diverged)
        .map(|j| j.candidate.path.clone())
        .collect();
    if !diverged.is_empty() {
        return Plan::Halt(Halt::new(HaltReason::Diverged, diverged));
    }
    let items: Vec<LandItem> = judged
        .iter()
        .filter(|j| j.verdict == Verdict::Land)
        .map(|j| LandItem {
            path: j.candidate.path.clone(),
            change: j.change(),
        })
        .collect();
    if items.is_empty() {
        Plan::Clean
    } else {
        Plan::Land(items)
    }
}

/// How the plan ended, for the per-path decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending<'a> {
    Landed,
    WouldLand,
    Halted(&'a Halt),
}

/// One decision per doc whose local version differs from the base's (every path a person
/// might ask about); docs already visible on the base are not listed.
pub fn decisions(judged: &[Judged], base: &str, ending: Option<Ending<'_>>) -> Vec<Decision> {
    judged
        .iter()
        .filter(|j| j.verdict != Verdict::Visible)
        .map(|j| {
            let path = &j.candidate.path;
            let (verdict, reason) = match (&j.verdict, ending) {
                (Verdict::Skip(what), _) => (
                    Disposition::Skip,
                    format!("{what}: the sweep copies regular files only; land it by hand"),
                ),
                (Verdict::Stale, _) => (
                    Disposition::Keep,
                    format!("local copy is an older version than origin/{base}"),
                ),
                (_, Some(Ending::Halted(h))) if h.paths.contains(path) => {
                    (Disposition::Halt, halt_reason_text(h, j, base))
                }
                (_, Some(Ending::Halted(h))) => (
                    Disposition::Halt,
                    format!("not landed: the sweep halted ({})", h.reason),
                ),
                (_, Some(Ending::WouldLand)) => (
                    Disposition::Land,
                    format!("{} (dry run: nothing changed)", land_text(j, base)),
                ),
                _ => (Disposition::Land, land_text(j, base)),
            };
            Decision {
                sweep: SweepName::DocsSweep,
                subject: path.clone(),
                issue: None,
                state: Some(j.candidate.signal_label()),
                verdict,
                reason,
            }
        })
        .collect()
}

fn land_text(j: &Judged, base: &str) -> String {
    match j.change() {
        Change::Delete => format!("deleted here; deleting it on origin/{base}"),
        Change::Update => format!("changed here; updating it on origin/{base}"),
        Change::Add => format!("missing on origin/{base}; adding it"),
    }
}

fn halt_reason_text(h: &Halt, j: &Judged, base: &str) -> String {
    let text = match h.reason {
        HaltReason::OriginUnreachable => format!("origin/{base} could not be fetched"),
        HaltReason::ZeroPrecedent => format!(
            "ignored, and no {} doc is tracked on origin/{base}: a person decides whether such docs belong in the repo",
            j.candidate.class
        ),
        HaltReason::Diverged => {
            format!("changed here and differently on origin/{base} since the fork")
        }
        HaltReason::LandingFailed => "landing failed".to_string(),
    };
    match &h.detail {
        Some(d) => format!("{text}: {d}"),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweeps::docs::classify::{Signal, collect};

    fn obs(work: WorkState, origin: Option<&str>, fork: Option<&str>, seen: bool) -> Observed {
        Observed {
            work,
            origin: origin.map(String::from),
            fork: fork.map(String::from),
            seen_on_origin: seen,
        }
    }

    fn file(oid: &str) -> WorkState {
        WorkState::File(oid.into())
    }

    #[test]
    fn verdict_table() {
        use Verdict::*;
        use WorkState::Absent;
        let cases = [
            // Same as the base: visible, whatever the fork had.
            (obs(file("a"), Some("a"), None, true), Visible),
            (obs(Absent, None, Some("f"), false), Visible),
            // Base unchanged since the fork: ours lands (new, changed, deleted, restored).
            (obs(file("a"), None, None, false), Land),
            (obs(file("b"), Some("a"), Some("a"), false), Land),
            (obs(Absent, Some("a"), Some("a"), false), Land),
            (obs(file("old"), Some("a"), Some("a"), true), Land),
            // Base moved on, ours is the fork's or an older base version: stale.
            (obs(file("f"), Some("a"), Some("f"), true), Stale),
            (obs(file("old"), Some("new"), None, true), Stale),
            // Both changed: diverged.
            (obs(file("b"), Some("a"), Some("f"), false), Diverged),
            (obs(file("b"), Some("a"), None, false), Diverged),
            (obs(Absent, Some("a"), Some("f"), false), Diverged),
            (obs(Absent, Some("a"), Some("f"), true), Diverged),
            (obs(Absent, None, None, false), Visible),
            (
                obs(WorkState::Unpublishable("symlink"), None, None, false),
                Skip("symlink"),
            ),
        ];
        for (o, want) in cases {
            assert_eq!(verdict(&o), want, "{o:?}");
        }
    }

    #[test]
    fn halt_message_format() {
        let h = Halt::new(
            HaltReason::ZeroPrecedent,
            vec![".red/adr/1.md".into(), ".red/adr/2.md".into()],
        );
        assert_eq!(
            h.message(),
            "Docs Sweep halted (zero-precedent): .red/adr/1.md, .red/adr/2.md"
        );
        assert_eq!(h.to_string(), h.message());
        assert_eq!(
            Halt::new(HaltReason::OriginUnreachable, vec![]).message(),
            "Docs Sweep halted (origin-unreachable): (none)"
        );
    }

    fn judged(path: &str, signals: &[Signal], verdict: Verdict, deleted: bool) -> Judged {
        let mut c = collect(signals.iter().map(|s| (path.to_string(), *s)));
        assert_eq!(c.len(), 1, "{path} must be a doc");
        Judged {
            candidate: c.remove(0),
            verdict,
            deleted,
            on_base: deleted || signals.contains(&Signal::Modified),
        }
    }

    #[test]
    fn plan_clean_when_nothing_differs() {
        let j = vec![
            judged(
                ".red/adr/1.md",
                &[Signal::Untracked],
                Verdict::Visible,
                false,
            ),
            judged(
                ".red/CONTEXT.md",
                &[Signal::Modified],
                Verdict::Stale,
                false,
            ),
            judged(
                ".red/adr/2.md",
                &[Signal::Untracked],
                Verdict::Skip("symlink"),
                false,
            ),
        ];
        assert_eq!(plan(&j, Precedent::default()), Plan::Clean);
        assert_eq!(plan(&[], Precedent::default()), Plan::Clean);
    }

    #[test]
    fn plan_lands_stranded_paths_including_deletions() {
        let j = vec![
            judged(".red/CONTEXT.md", &[Signal::Deleted], Verdict::Land, true),
            judged(".red/adr/1.md", &[Signal::Untracked], Verdict::Land, false),
            judged(
                ".red/adr/2.md",
                &[Signal::Untracked],
                Verdict::Visible,
                false,
            ),
        ];
        assert_eq!(
            plan(&j, Precedent::default()),
            Plan::Land(vec![
                LandItem {
                    path: ".red/CONTEXT.md".into(),
                    change: Change::Delete,
                },
                LandItem {
                    path: ".red/adr/1.md".into(),
                    change: Change::Add,
                },
            ])
        );
    }

    #[test]
    fn zero_precedent_only_for_ignored_docs_of_a_class_without_precedent() {
        let adr_only = Precedent {
            glossary: false,
            adr: true,
        };
        let j = vec![
            judged(".red/adr/1.md", &[Signal::Ignored], Verdict::Land, false),
            judged(".red/CONTEXT.md", &[Signal::Ignored], Verdict::Land, false),
            judged(
                ".red/contexts/a.md",
                &[Signal::Untracked],
                Verdict::Land,
                false,
            ),
            judged(
                ".red/contexts/b.md",
                &[Signal::Ignored],
                Verdict::Visible,
                false,
            ),
        ];
        assert_eq!(
            plan(&j, adr_only),
            Plan::Halt(Halt::new(
                HaltReason::ZeroPrecedent,
                vec![".red/CONTEXT.md".into()]
            ))
        );
        let both = Precedent {
            glossary: true,
            adr: true,
        };
        assert!(matches!(plan(&j, both), Plan::Land(items) if items.len() == 3));
        // An untracked (not ignored) doc never needs precedent.
        let j = vec![judged(
            ".red/adr/1.md",
            &[Signal::Untracked],
            Verdict::Land,
            false,
        )];
        assert!(matches!(plan(&j, Precedent::default()), Plan::Land(_)));
    }

    #[test]
    fn zero_precedent_before_divergence() {
        let j = vec![
            judged(
                ".red/adr/1.md",
                &[Signal::Modified],
                Verdict::Diverged,
                false,
            ),
            judged(".red/CONTEXT.md", &[Signal::Ignored], Verdict::Land, false),
        ];
        let p = Precedent {
            glossary: false,
            adr: true,
        };
        assert!(matches!(plan(&j, p), Plan::Halt(h) if h.reason == HaltReason::ZeroPrecedent));
        let p = Precedent {
            glossary: true,
            adr: true,
        };
        assert_eq!(
            plan(&j, p),
            Plan::Halt(Halt::new(
                HaltReason::Diverged,
                vec![".red/adr/1.md".into()]
            ))
        );
    }

    #[test]
    fn decisions_name_signal_and_verdict() {
        let j = vec![
            judged(".red/adr/1.md", &[Signal::Ignored], Verdict::Land, false),
            judged(
                ".red/adr/2.md",
                &[Signal::Modified, Signal::Ahead],
                Verdict::Land,
                false,
            ),
            judged(
                ".red/adr/3.md",
                &[Signal::Untracked],
                Verdict::Visible,
                false,
            ),
            judged(
                ".red/adr/4.md",
                &[Signal::Untracked],
                Verdict::Skip("symlink"),
                false,
            ),
        ];
        let d = decisions(&j, "main", Some(Ending::Landed));
        let rows: Vec<(&str, Option<&str>, &str)> = d
            .iter()
            .map(|d| (d.subject.as_str(), d.state.as_deref(), d.verdict.as_str()))
            .collect();
        assert_eq!(
            rows,
            vec![
                (".red/adr/1.md", Some("ignored"), "land"),
                (".red/adr/2.md", Some("modified+ahead"), "land"),
                (".red/adr/4.md", Some("untracked"), "skip"),
            ]
        );
        assert!(d.iter().all(|d| d.sweep == SweepName::DocsSweep));
        let dry = decisions(&j, "main", Some(Ending::WouldLand));
        assert!(dry[0].reason.contains("dry run"));

        let h = Halt::new(HaltReason::ZeroPrecedent, vec![".red/adr/1.md".into()]).with_detail("x");
        let d = decisions(&j, "main", Some(Ending::Halted(&h)));
        assert_eq!(d[0].verdict, "halt");
        assert!(
            d[0].reason.contains("no ADR doc is tracked on origin/main"),
            "{}",
            d[0].reason
        );
        assert!(d[0].reason.ends_with(": x"));
        assert_eq!(d[1].verdict, "halt");
        assert!(d[1].reason.contains("not landed"));
    }
}
