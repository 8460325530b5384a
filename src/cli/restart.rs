//! `afk-supervisor restart <slot>` and `afk-supervisor stop --slot <slot>`: one slot's
//! worker through the control path (`slot-control.toon`, SPEC §4.3).

use std::time::Duration;

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::control::operator::{self, OperatorError, SlotOutcome, Via};
use crate::exit_code;
use crate::lanes::slot_control::Action;
use crate::lanes::state_file::ShrinkMode;

#[derive(Debug, Clone, Args)]
pub struct RestartArgs {
    /// The slot whose worker restarts (a stopped or parked slot starts again).
    #[arg(value_name = "SLOT")]
    pub slot: usize,
    /// How its worker goes: drain-then-retire (finishes its issue first) or hard-kill
    /// (stopped at once, its issue given back).
    // A restart shrinks nothing: `--mode`; the old `--shrink-mode` is still taken, unlisted.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "hard-kill",
        alias = "shrink-mode"
    )]
    pub mode: ShrinkMode,
    /// Seconds to wait for the supervisor's acknowledgement (default: three ticks, at
    /// least 10).
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
}

pub fn run(ctx: &Ctx, args: &RestartArgs) -> Result<i32, Failure> {
    slot(ctx, args.slot, Action::Restart, args.mode, args.timeout)
}

/// Asks the running supervisor to stop or restart `slot` and waits for its answer.
pub fn slot(
    ctx: &Ctx,
    slot: usize,
    action: Action,
    mode: ShrinkMode,
    timeout: Option<u64>,
) -> Result<i32, Failure> {
    let config = ctx.config(Overrides::default())?;
    let timeout = timeout.unwrap_or_else(|| (3 * config.timing.tick_s).max(10));
    match operator::slot_act(
        &ctx.layout,
        slot,
        action,
        mode,
        Via::Cli,
        Duration::from_secs(timeout),
    ) {
        Ok(SlotOutcome::Done { pid, message }) => {
            outln!("{message} (supervisor pid={pid})");
            Ok(exit_code::OK)
        }
        Ok(SlotOutcome::Pending { pid }) => Err(Failure::failed(format!(
            "{action} slot {slot}: no answer from the supervisor (pid={pid}) within {timeout}s; \
             the request stays in the lane and is acted on at its next tick"
        ))),
        Err(e @ OperatorError::OutOfRange { .. }) => Err(Failure::of(exit_code::USAGE, &e)),
        Err(e) => Err(Failure::of(exit_code::FAILED, &e)),
    }
}
