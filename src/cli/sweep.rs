//! `afk-supervisor sweep [--only a,b] [--dry-run] [--json]`: the boot sweep suite by hand,
//! so an operator can see (and with `--dry-run`, preview) what the supervisor's boot does.

use clap::Args;

use crate::boot::{self, BootError, BootReport};
use crate::cli::Ctx;
use crate::config::Overrides;
use crate::exit::{self, Failure};
use crate::git::Git;
use crate::sweeps::{Decision, SweepCtx, SweepName};

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

fn parse_only(s: &str) -> Result<SweepList, String> {
    SweepName::parse_list(s).map(SweepList)
}

pub fn run(ctx: &Ctx, args: &SweepArgs) -> Result<i32, Failure> {
    let config = ctx.config(Overrides::default())?;
    let selected = crate::tracker::open(&config, &ctx.layout)
        .map_err(|e| Failure::failed(format!("issue tracker: {e}")))?;
    let git = Git::new(ctx.layout.repo());
    let sweep_ctx = SweepCtx {
        layout: &ctx.layout,
        config: &config,
        tracker: selected.tracker.as_ref(),
        git: &git,
        dry_run: args.dry_run,
    };
    let only = args
        .only
        .as_ref()
        .map_or_else(|| SweepName::ALL.to_vec(), |l| l.0.clone());
    match boot::run_suite(&sweep_ctx, &only) {
        Ok(report) => {
            print_report(&report, args);
            Ok(exit::OK)
        }
        Err(BootError::Halted(msg)) => Err(Failure::new(exit::BOOT_HALTED, msg)),
        Err(e @ BootError::Failed(_)) => Err(Failure::failed(e.to_string())),
    }
}

fn print_report(report: &BootReport, args: &SweepArgs) {
    if args.json {
        let doc = serde_json::json!({
            "dry_run": args.dry_run,
            "summary": report.summary(),
            "report": report,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        );
        return;
    }
    if args.dry_run {
        println!("dry run: nothing is changed");
    }
    for d in &report.decisions {
        println!("{}", decision_line(d));
    }
    println!("{}", report.summary());
}

/// `orphans remove .red/tmp/workers/w1/5-a1 #5 [CLOSED]: issue closed`.
pub fn decision_line(d: &Decision) -> String {
    let mut line = format!("{} {} {}", d.sweep, d.verdict, d.subject);
    if let Some(n) = d.issue
        && !d.subject.starts_with('#')
    {
        line.push_str(&format!(" #{n}"));
    }
    if let Some(s) = &d.state {
        line.push_str(&format!(" [{s}]"));
    }
    line.push_str(": ");
    line.push_str(&d.reason);
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_lines() {
        let mut d = Decision {
            sweep: SweepName::Orphans,
            subject: ".red/tmp/workers/w1/5-a1".into(),
            issue: Some(5),
            state: Some("CLOSED".into()),
            verdict: "remove".into(),
            reason: "issue closed".into(),
        };
        assert_eq!(
            decision_line(&d),
            "orphans remove .red/tmp/workers/w1/5-a1 #5 [CLOSED]: issue closed"
        );
        d.subject = "#5".into();
        d.state = None;
        d.sweep = SweepName::AttemptCap;
        assert_eq!(decision_line(&d), "attempt-cap remove #5: issue closed");
    }
}
