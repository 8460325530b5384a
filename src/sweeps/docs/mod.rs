//! The docs sweep (seed BOOT-SWEEPS.md, *Docs Sweep*): source-of-truth docs under `.red/`
//! must be visible from the freshly fetched base before any worker starts, because workers
//! branch from the base and would otherwise work without (or against) the glossary and
//! ADRs a person wrote by hand.
//!
//! Fetch `origin/<base>`, find the doc paths the three signals flag, judge each against the
//! base, then report `clean`, land the stranded ones in an isolated worktree (`land`), or
//! halt the boot with the paths a person must look at.

pub mod classify;
pub mod fsops;
pub mod judge;
pub mod land;
pub mod probe;
pub mod scan;

use crate::sweeps::base_fetch::BaseFetchError;
use crate::sweeps::{Decision, Disposition, SweepCtx, SweepName};

use judge::{Ending, Halt, HaltReason, Plan};
pub use land::{LandError, Landed};
pub use scan::ScanError;

/// How the sweep ended, as the boot summary's `docs-sweep <outcome>` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DocsOutcome {
    #[default]
    Clean,
    Land,
    Halt,
}

impl DocsOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            DocsOutcome::Clean => "clean",
            DocsOutcome::Land => "land",
            DocsOutcome::Halt => "halt",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DocsCounts {
    pub outcome: DocsOutcome,
    pub files: usize,
}

/// What one run of the sweep did or, in a dry run, would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocsReport {
    pub counts: DocsCounts,
    /// One per doc whose local version differs from the base's.
    pub decisions: Vec<Decision>,
    /// Set when the boot must halt; `counts.outcome` is then `Halt`.
    pub halt: Option<Halt>,
    /// Set after a real landing.
    pub landed: Option<Landed>,
}

impl DocsReport {
    fn clean(decisions: Vec<Decision>) -> Self {
        DocsReport {
            counts: DocsCounts {
                outcome: DocsOutcome::Clean,
                files: 0,
            },
            decisions,
            halt: None,
            landed: None,
        }
    }

    fn halted(halt: Halt, decisions: Vec<Decision>) -> Self {
        DocsReport {
            counts: DocsCounts {
                outcome: DocsOutcome::Halt,
                files: halt.paths.len(),
            },
            decisions,
            halt: Some(halt),
            landed: None,
        }
    }
}

/// Runs the sweep. `Err` only when the local repo cannot be inspected at all; every
/// outcome the issue names (including the halts) is an `Ok` report.
pub fn run(ctx: &SweepCtx<'_>) -> Result<DocsReport, ScanError> {
    let git = ctx.git;
    let base = ctx.config.fleet.base.as_str();
    let base_ref = format!("refs/remotes/origin/{base}");

    // Fetching is needed to judge anything and changes nothing a person works with, so a
    // dry run fetches too. A repo with no `origin` at all (a local-only checkout on the
    // embedded tracker) has no shared base for docs to be invisible from: workers branch
    // from this very checkout. That is not an unreachable origin, so it does not halt.
    // The suite's reap has usually fetched the base already; then this costs no git call.
    match ctx.base_fetch.fetch(git, base) {
        Ok(true) => {}
        Ok(false) => {
            return Ok(DocsReport::clean(vec![Decision {
                sweep: SweepName::DocsSweep,
                subject: ".red".into(),
                issue: None,
                state: None,
                verdict: Disposition::Skip,
                reason: "no `origin` remote: there is no shared base to land docs into".into(),
            }]));
        }
        Err(BaseFetchError::Fetch(e)) => {
            return Ok(origin_unreachable(ctx, &base_ref, &e.to_string()));
        }
        Err(BaseFetchError::Remotes(e)) => return Err(e.into()),
    }
    let fork = scan::fork_point(git, &base_ref)?;
    let (found, not_utf8) = scan::candidates(git, Some(&base_ref), fork.as_deref())?;
    let (judged, precedent) =
        scan::judge_all(git, ctx.layout.repo(), &base_ref, fork.as_deref(), found)?;
    let report = judge_and_land(ctx, &judged, precedent)?;
    Ok(with_not_utf8(report, &not_utf8))
}

/// The report with a `skip` decision for each doc path that is not UTF-8; the outcome and
/// counts are those of the other docs.
fn with_not_utf8(mut report: DocsReport, paths: &[Vec<u8>]) -> DocsReport {
    report.decisions.extend(scan::not_utf8_decisions(paths));
    report
}

/// Plans from the judged docs and, unless a dry run, lands.
fn judge_and_land(
    ctx: &SweepCtx<'_>,
    judged: &[judge::Judged],
    precedent: classify::Precedent,
) -> Result<DocsReport, ScanError> {
    let git = ctx.git;
    let base = ctx.config.fleet.base.as_str();
    match judge::plan(judged, precedent) {
        Plan::Clean => Ok(DocsReport::clean(judge::decisions(judged, base, None))),
        Plan::Halt(h) => {
            let d = judge::decisions(judged, base, Some(Ending::Halted(&h)));
            Ok(DocsReport::halted(h, d))
        }
        Plan::Land(items) if ctx.dry_run => Ok(DocsReport {
            counts: DocsCounts {
                outcome: DocsOutcome::Land,
                files: items.len(),
            },
            decisions: judge::decisions(judged, base, Some(Ending::WouldLand)),
            halt: None,
            landed: None,
        }),
        Plan::Land(items) => {
            let landing = land::LandCtx {
                git,
                layout: ctx.layout,
                tracker: ctx.tracker,
                base,
            };
            match land::land(&landing, &items) {
                Ok(None) => {
                    let mut d = judge::decisions(judged, base, Some(Ending::Landed));
                    for x in d.iter_mut().filter(|x| x.verdict == Disposition::Land) {
                        x.verdict = Disposition::Keep;
                        x.reason = format!(
                            "identical to origin/{base} once git's filters apply; nothing to land"
                        );
                    }
                    Ok(DocsReport::clean(d))
                }
                Ok(Some(landed)) => Ok(DocsReport {
                    counts: DocsCounts {
                        outcome: DocsOutcome::Land,
                        files: items.len(),
                    },
                    decisions: judge::decisions(judged, base, Some(Ending::Landed)),
                    halt: None,
                    landed: Some(landed),
                }),
                Err(e) => {
                    let paths = items.iter().map(|i| i.path.clone()).collect();
                    let h = Halt::new(HaltReason::LandingFailed, paths).with_detail(e.to_string());
                    let d = judge::decisions(judged, base, Some(Ending::Halted(&h)));
                    Ok(DocsReport::halted(h, d))
                }
            }
        }
    }
}

/// The fetch failed: nothing can be judged, so the halt lists what the work tree (and the
/// last fetched base, if any) flag locally. Best effort: a failing local scan leaves the
/// list empty rather than hiding the fetch failure behind another error.
fn origin_unreachable(ctx: &SweepCtx<'_>, base_ref: &str, detail: &str) -> DocsReport {
    let git = ctx.git;
    let known = git.rev_parse(base_ref).ok().flatten().map(|_| base_ref);
    let fork = known.and_then(|r| scan::fork_point(git, r).ok().flatten());
    let (found, not_utf8) = scan::candidates(git, known, fork.as_deref()).unwrap_or_default();
    let reason = format!(
        "origin/{} could not be fetched: {detail}",
        ctx.config.fleet.base
    );
    let decisions = found
        .iter()
        .map(|c| Decision {
            sweep: SweepName::DocsSweep,
            subject: c.path.clone(),
            issue: None,
            state: Some(c.signal_label()),
            verdict: Disposition::Halt,
            reason: reason.clone(),
        })
        .collect();
    let paths = found.into_iter().map(|c| c.path).collect();
    let report = DocsReport::halted(
        Halt::new(HaltReason::OriginUnreachable, paths).with_detail(detail),
        decisions,
    );
    with_not_utf8(report, &not_utf8)
}
