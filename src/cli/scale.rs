//! `afk-supervisor scale N [--shrink-mode drain-then-retire|hard-kill] [--timeout S]`.

use std::time::Duration;

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::control::{self, ScaleOutcome};
use crate::exit_code;
use crate::lanes::scale_directive::MAX_TARGET;
use crate::lanes::state_file::ShrinkMode;

#[derive(Debug, Clone, Args)]
pub struct ScaleArgs {
    /// The new number of worker slots.
    #[arg(value_name = "N")]
    pub target: usize,
    /// How surplus workers go when shrinking: drain-then-retire (each finishes its current
    /// issue, then is not replaced) or hard-kill (stopped at once, their issues given back).
    #[arg(long, value_name = "MODE", default_value = "drain-then-retire")]
    pub shrink_mode: ShrinkMode,
    /// Seconds to wait for the supervisor's heartbeat to show the new target
    /// (default: three ticks, at least 10).
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
}

pub fn run(ctx: &Ctx, args: &ScaleArgs) -> Result<i32, Failure> {
    if args.target > MAX_TARGET {
        return Err(Failure::usage(format!(
            "scale {}: at most {MAX_TARGET} workers",
            args.target
        )));
    }
    let config = ctx.config(Overrides::default())?;
    let timeout = args
        .timeout
        .unwrap_or_else(|| (3 * config.timing.tick_s).max(10));
    let outcome = control::scale(
        &ctx.layout,
        args.target,
        args.shrink_mode,
        Duration::from_secs(timeout),
    )?;
    outln!("{outcome}");
    if matches!(outcome, ScaleOutcome::Applied { .. })
        && let Some(p) = crate::lanes::pause_file::operator_active(&ctx.layout.state())
    {
        outln!(
            "the fleet is paused by the operator {}: new slots start when it resumes",
            p.describe()
        );
    }
    Ok(match outcome {
        ScaleOutcome::Applied { .. } => exit_code::OK,
        ScaleOutcome::Pending { .. } => exit_code::FAILED,
    })
}
