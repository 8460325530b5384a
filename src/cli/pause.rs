//! `afk-supervisor pause [--until TIME] [--reason TEXT]` and `afk-supervisor resume`: the
//! operator pause (`crate::lanes::pause_file`, SPEC §11.17).

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::control::operator::{self, PauseOutcome, Via};
use crate::exit_code;

#[derive(Debug, Clone, Args)]
pub struct PauseArgs {
    /// When the fleet resumes by itself: an RFC 3339 time (2026-12-01T18:00:00Z) or a
    /// span from now (90m, 2h, 1d). Default: until `afk-supervisor resume`.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Why, shown in `status` and the event log.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

pub fn pause(ctx: &Ctx, args: &PauseArgs) -> Result<i32, Failure> {
    let until = args
        .until
        .as_deref()
        .map(operator::parse_until)
        .transpose()?;
    let out = operator::pause(&ctx.layout, args.reason.as_deref(), until, Via::Cli, false)?;
    print_outcome("fleet paused", &out);
    Ok(exit_code::OK)
}

pub fn resume(ctx: &Ctx) -> Result<i32, Failure> {
    let out = operator::resume(&ctx.layout, Via::Cli, false)?;
    match &out.pause {
        Some(_) => print_outcome("fleet resumed; the operator pause was", &out),
        None => outln!("no operator pause was in force"),
    }
    Ok(exit_code::OK)
}

fn print_outcome(what: &str, out: &PauseOutcome) {
    let pause = out.pause.as_ref().map(|p| p.describe()).unwrap_or_default();
    match out.supervisor {
        Some(pid) => outln!("{what} {pause} (supervisor pid={pid})"),
        None => outln!("{what} {pause} (no fleet running: it holds for the next start)"),
    }
}
