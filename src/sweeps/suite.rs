//! The boot sweep suite: every sweep once, in order, with one summary line (`docs/SPEC.md` §5).
//!
//! The supervisor calls [`run_suite`] exactly once per lifetime before spawning workers;
//! `afk-supervisor sweep` calls it for a solo run. A halt (docs sweep or probe) means no
//! worker may start; a failure is logged and the fleet starts anyway.

use crate::host_lock as lock;
use crate::lanes::state_file::BootSuite;
use crate::rescue::{Keeper, Rescued};
use crate::sweeps::attempt_cap::{self, Caps};
use crate::sweeps::branch_reaper::{self, BranchCounts};
use crate::sweeps::docs::{self, DocsCounts};
use crate::sweeps::orphans::{self, OrphanCounts};
use crate::sweeps::stragglers::{self, StragglerCounts};
use crate::sweeps::unblock_sweep;
use crate::sweeps::{Decision, SweepCtx, SweepName};

/// Counters of one suite run; a sweep that did not run leaves zeros.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BootReport {
    pub orphans: OrphanCounts,
    pub attempt_cap_reclaimed: usize,
    pub branches: BranchCounts,
    pub docs: DocsCounts,
    pub unblocked: usize,
    pub stragglers: StragglerCounts,
    /// Every decision, in the order made.
    pub decisions: Vec<Decision>,
    /// The rescues the sweeps made, each logged as `attempt.rescued`.
    #[serde(skip)]
    pub rescued: Vec<Rescued>,
}

/// The rescuer the sweeps of `ctx` share: its git, the config's size limit.
fn keeper(ctx: &SweepCtx<'_>, push: bool) -> Keeper {
    Keeper {
        git: ctx.git.clone(),
        max_file_bytes: ctx.config.rescue.max_file_bytes,
        push,
    }
}

impl BootReport {
    /// The fixed `docs/SPEC.md` §5 summary line.
    pub fn summary(&self) -> String {
        let o = &self.orphans;
        let b = &self.branches;
        let s = &self.stragglers;
        format!(
            "boot sweeps complete: orphans removed={} restored={} kept={} | attempt-cap reclaimed={} | branches remote={} local={} spared={} | docs-sweep {} files={} | unblocked={} | stragglers unlabeled={} triage={} info={}",
            o.removed,
            o.restored,
            o.kept,
            self.attempt_cap_reclaimed,
            b.remote,
            b.local,
            b.spared,
            self.docs.outcome.as_str(),
            self.docs.files,
            self.unblocked,
            s.unlabeled,
            s.triage,
            s.info
        )
    }
}

/// Why the suite did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootError {
    /// No worker may start (exit 4). The text is the halt message, e.g.
    /// `Docs Sweep halted (zero-precedent): .red/adr/0001.md`.
    #[error("{0}")]
    Halted(String),
    /// A sweep failed; workers start anyway and run their own checks.
    #[error("{0}")]
    Failed(String),
    /// A check the suite needs before touching anything failed (the text names it, e.g.
    /// `git: ... is not a git work tree`); no sweep ran, workers start and check for
    /// themselves.
    #[error("precheck failed ({0})")]
    Precheck(String),
}

impl BootError {
    /// The event-log text for this outcome (`docs/SPEC.md` §5).
    pub fn log_message(&self) -> String {
        match self {
            BootError::Halted(msg) => format!("boot sweeps halted: {msg}"),
            BootError::Failed(msg) => {
                format!("boot sweeps failed: {msg} — spawning workers anyway")
            }
            BootError::Precheck(check) => format!(
                "boot sweeps: precheck FAILED ({check}) — workers will run their own precheck"
            ),
        }
    }
}

/// One suite run: what it did, and how it ended. The report is kept when the suite halts
/// or a sweep fails too, so every decision made (and every deletion done) before that is
/// still shown to the operator and written to the log.
#[derive(Debug)]
pub struct SuiteRun {
    pub report: BootReport,
    pub end: Result<(), BootError>,
}

impl SuiteRun {
    /// A suite whose precheck failed: nothing ran.
    pub fn precheck_failed(check: impl Into<String>) -> Self {
        SuiteRun {
            report: BootReport::default(),
            end: Err(BootError::Precheck(check.into())),
        }
    }

    /// A suite that could not run at all.
    pub fn failed(msg: impl Into<String>) -> Self {
        SuiteRun {
            report: BootReport::default(),
            end: Err(BootError::Failed(msg.into())),
        }
    }

    pub fn into_result(self) -> Result<BootReport, BootError> {
        self.end.map(|()| self.report)
    }

    pub fn is_halted(&self) -> bool {
        matches!(self.end, Err(BootError::Halted(_)))
    }

    /// The event-log text for how the suite ended (`docs/SPEC.md` §5).
    pub fn log_message(&self) -> String {
        match &self.end {
            Ok(()) => self.report.summary(),
            Err(e) => e.log_message(),
        }
    }
}

/// Runs the selected sweeps in suite order. A halt stops the suite at once; a failed sweep
/// does not stop the ones after it (a broken branch reaper must not starve the unblock
/// sweep), and the suite then reports every failure together.
pub fn run_suite(ctx: &SweepCtx<'_>, only: &[SweepName]) -> SuiteRun {
    run_suite_with(ctx, only, &mut |_| {})
}

/// Where the suite is: told before each sweep starts and after it ends, so a boot that
/// takes minutes shows which sweep it is in (stderr, systemd's `STATUS=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Started {
        sweep: SweepName,
        index: usize,
        of: usize,
    },
    Finished {
        sweep: SweepName,
        index: usize,
        of: usize,
        elapsed: std::time::Duration,
        failed: bool,
    },
}

impl Progress {
    /// `boot sweeps: 2/6 attempt-cap started`, `boot sweeps: 2/6 attempt-cap done in 0.3s`.
    pub fn line(&self) -> String {
        match self {
            Progress::Started { sweep, index, of } => {
                format!("boot sweeps: {index}/{of} {} started", sweep.as_str())
            }
            Progress::Finished {
                sweep,
                index,
                of,
                elapsed,
                failed,
            } => format!(
                "boot sweeps: {index}/{of} {} {} in {:.1}s",
                sweep.as_str(),
                if *failed { "failed" } else { "done" },
                elapsed.as_secs_f64()
            ),
        }
    }
}

/// [`run_suite`], telling `progress` as each sweep starts and ends.
pub fn run_suite_with(
    ctx: &SweepCtx<'_>,
    only: &[SweepName],
    progress: &mut dyn FnMut(Progress),
) -> SuiteRun {
    if let Err(check) = precheck(ctx) {
        return SuiteRun::precheck_failed(check.to_string());
    }
    let mut report = BootReport::default();
    let mut failures = Vec::new();
    let selected: Vec<SweepName> = SweepName::ALL
        .into_iter()
        .filter(|n| only.contains(n))
        .collect();
    let of = selected.len();
    for (i, name) in selected.into_iter().enumerate() {
        let index = i + 1;
        progress(Progress::Started {
            sweep: name,
            index,
            of,
        });
        let began = std::time::Instant::now();
        let result = run_one(ctx, name, &mut report);
        progress(Progress::Finished {
            sweep: name,
            index,
            of,
            elapsed: began.elapsed(),
            failed: result.is_err(),
        });
        match result {
            Ok(()) => {}
            Err(halt @ BootError::Halted(_)) => {
                return SuiteRun {
                    report,
                    end: Err(halt),
                };
            }
            Err(BootError::Failed(msg) | BootError::Precheck(msg)) => failures.push(msg),
        }
    }
    let end = if failures.is_empty() {
        Ok(())
    } else {
        Err(BootError::Failed(failures.join("; ")))
    };
    SuiteRun { report, end }
}

/// What every sweep takes for granted: the repo is a git work tree that git can read.
/// (The tracker is checked where it is opened: a supervisor without one reports its own
/// precheck failure.)
fn precheck(ctx: &SweepCtx<'_>) -> Result<(), PrecheckFailed> {
    match ctx.git.run(&["rev-parse", "--is-inside-work-tree"]) {
        Ok(out) if out.trim() == "true" => Ok(()),
        Ok(_) => Err(PrecheckFailed::NotAWorkTree(
            ctx.layout.repo().to_path_buf(),
        )),
        Err(e) => Err(PrecheckFailed::Git(e)),
    }
}

/// The check [`precheck`] failed; the text is what [`BootError::Precheck`] names.
#[derive(Debug, thiserror::Error)]
enum PrecheckFailed {
    #[error("git: {} is not a git work tree", .0.display())]
    NotAWorkTree(std::path::PathBuf),
    #[error("git: {0}")]
    Git(crate::git::GitError),
}

/// One sweep, its report folded into the suite's. A sweep whose report carries a failure
/// after it acted (a failed delete or write) has its counts and decisions kept and then
/// fails.
fn run_one(ctx: &SweepCtx<'_>, name: SweepName, report: &mut BootReport) -> Result<(), BootError> {
    let failed = |what: &str, e: &dyn std::fmt::Display| BootError::Failed(format!("{what}{e}"));
    match name {
        SweepName::Orphans => {
            let now = std::time::SystemTime::now();
            let keeper = keeper(ctx, ctx.tracker.shared_across_checkouts());
            let r = orphans::run_with(ctx.layout, ctx.tracker, now, ctx.dry_run, &keeper)
                .map_err(|e| failed("orphan cleanup: ", &e))?;
            report.orphans = r.counts;
            report.rescued.extend(r.rescued);
            report.decisions.extend(r.decisions);
        }
        SweepName::AttemptCap => {
            let now = std::time::SystemTime::now();
            let gone = attempt_cap::gone_in_dry_run(ctx.layout, &report.decisions);
            let caps = Caps::from_config(&ctx.config.sweeps);
            let keeper = keeper(ctx, ctx.tracker.shared_across_checkouts());
            let r = attempt_cap::run_with(ctx.layout, caps, now, ctx.dry_run, &gone, &keeper)
                .map_err(|e| failed("attempt cap: ", &e))?;
            report.attempt_cap_reclaimed = r.reclaimed;
            report.rescued.extend(r.rescued);
            report.decisions.extend(r.decisions);
        }
        SweepName::Branches => {
            let r = branch_reaper::run(
                ctx.git,
                ctx.tracker,
                &ctx.config.fleet.base,
                ctx.dry_run,
                &ctx.base_fetch,
            )
            .map_err(|e| failed("", &e))?;
            report.branches = r.counts();
            report.decisions.extend(r.suite_decisions());
            if let Some(e) = r.delete_error() {
                return Err(BootError::Failed(e));
            }
        }
        SweepName::DocsSweep => {
            let r = docs::run(ctx).map_err(|e| failed("docs-sweep: ", &e))?;
            report.docs = r.counts;
            report.decisions.extend(r.decisions);
            if let Some(halt) = r.halt {
                return Err(BootError::Halted(halt.message()));
            }
        }
        SweepName::Unblock => {
            let label = ctx.layout.repo().display().to_string();
            let r = unblock_sweep::exclusive_pass(
                ctx.tracker,
                ctx.dry_run,
                &lock::runtime_dir(),
                &label,
            )
            .map_err(|e| failed("", &e))?;
            report.unblocked = r.unblocked();
            report.decisions.extend(r.decisions());
            if let Some(e) = r.write_error() {
                return Err(failed("", e));
            }
        }
        SweepName::Stragglers => {
            let r = stragglers::run(ctx.tracker).map_err(|e| failed("straggler check: ", &e))?;
            report.stragglers = r.counts();
            report.decisions.extend(r.decisions());
        }
    }
    Ok(())
}

impl SuiteRun {
    /// The run's end as the heartbeat shows it (`docs/SPEC.md` §4).
    pub fn shown(&self, elapsed: std::time::Duration) -> BootSuite {
        let result = match &self.end {
            Ok(()) => "clean".to_string(),
            Err(BootError::Halted(m)) => format!("halted: {m}"),
            Err(BootError::Failed(m)) => format!("failed: {m}"),
            Err(BootError::Precheck(c)) => format!("precheck failed: {c}"),
        };
        BootSuite {
            result: crate::text::one_line(&result),
            elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweeps::docs::DocsOutcome;

    #[test]
    fn summary_line_is_exact() {
        let mut r = BootReport::default();
        r.orphans.removed = 3;
        r.docs = DocsCounts {
            outcome: DocsOutcome::Land,
            files: 2,
        };
        r.stragglers.info = 1;
        assert_eq!(
            r.summary(),
            "boot sweeps complete: orphans removed=3 restored=0 kept=0 | attempt-cap reclaimed=0 | branches remote=0 local=0 spared=0 | docs-sweep land files=2 | unblocked=0 | stragglers unlabeled=0 triage=0 info=1"
        );
        assert_eq!(
            BootError::Failed("x".into()).log_message(),
            "boot sweeps failed: x — spawning workers anyway"
        );
    }
}
