//! `afk-supervisor sweep [--only a,b] [--dry-run] [--json]`: the boot sweep suite by hand,
//! so an operator can see (and with `--dry-run`, preview) what the supervisor's boot does.

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::exit_code;
use crate::git::Git;
use crate::sweeps::suite::{self, BootError, SuiteRun};
use crate::sweeps::{SweepCtx, SweepName};

#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    /// Run only these sweeps, comma-separated: orphans, attempt-cap, branches, docs-sweep,
    /// unblock, stragglers (default: all, in suite order).
    #[arg(long, value_name = "LIST", value_parser = parse_only)]
    pub only: Option<SweepList>,
    /// Decide and print every decision; change nothing (no deletion, no tracker write).
    #[arg(long)]
    pub dry_run: bool,
    /// Print the decisions and counts as one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The sweeps named by `--only`, in suite order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepList(pub Vec<SweepName>);

fn parse_only(s: &str) -> Result<SweepList, crate::sweeps::SweepNameError> {
    SweepName::parse_list(s).map(SweepList)
}

pub fn run(ctx: &Ctx, args: &SweepArgs) -> Result<i32, Failure> {
    let config = ctx.config(Overrides::default())?;
    let selected =
        crate::tracker::open(&config, &ctx.layout).map_err(crate::cli::select_failure)?;
    // Which store the fates below rest on: an empty local store chosen by `auto` must be
    // visible at a glance.
    eprintln!("{}", selected.reason);
    let git = Git::new(ctx.layout.repo());
    let sweep_ctx = SweepCtx::new(
        &ctx.layout,
        &config,
        selected.tracker.as_ref(),
        &git,
        args.dry_run,
    );
    let only = args
        .only
        .as_ref()
        .map_or_else(|| SweepName::ALL.to_vec(), |l| l.0.clone());
    let run = suite::run_suite(&sweep_ctx, &only);
    print_run(&run, args);
    match run.end {
        Ok(()) => Ok(exit_code::OK),
        Err(BootError::Halted(msg)) => Err(Failure::new(exit_code::BOOT_HALTED, msg)),
        Err(e @ BootError::Failed(_)) => Err(Failure::of(exit_code::FAILED, &e)),
        Err(e @ BootError::Precheck(_)) => Err(Failure::failed(e.log_message())),
    }
}

/// Every decision, then the summary line when the suite completed; a halt or failure is
/// reported once, by the caller, on stderr.
fn print_run(run: &SuiteRun, args: &SweepArgs) {
    let report = &run.report;
    if args.json {
        let (outcome, error) = match &run.end {
            Ok(()) => ("complete", None),
            Err(BootError::Halted(m)) => ("halted", Some(m.clone())),
            Err(BootError::Failed(m)) => ("failed", Some(m.clone())),
            Err(e @ BootError::Precheck(_)) => ("precheck-failed", Some(e.log_message())),
        };
        let doc = serde_json::json!({
            "dry_run": args.dry_run,
            "outcome": outcome,
            "error": error,
            "summary": run.log_message(),
            "report": report,
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        );
        return;
    }
    if args.dry_run {
        outln!("dry run: nothing is changed");
    }
    for d in &report.decisions {
        outln!("{}", d.line());
    }
    if run.end.is_ok() {
        outln!("{}", report.summary());
    }
}
