//! `afk-supervisor stop [--timeout S] [--force]`.

use std::time::Duration;

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::control::{self, StopOutcome};
use crate::exit_code;

#[derive(Debug, Clone, Args)]
pub struct StopArgs {
    /// Seconds to wait for the fleet to stop (default: stop grace + tick + 15).
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    /// SIGKILL the supervisor, every worker recorded in state.toon (pid and start time
    /// verified) and every other process of this repo's fleet, without a clean stop.
    #[arg(long)]
    pub force: bool,
    /// Stop only this slot's worker; the slot stays empty until `restart SLOT`.
    #[arg(long, value_name = "SLOT", conflicts_with = "force")]
    pub slot: Option<usize>,
    /// With --slot: drain-then-retire (the worker finishes its issue first) or hard-kill
    /// (stopped at once, its issue given back).
    #[arg(
        long,
        value_name = "MODE",
        default_value = "drain-then-retire",
        requires = "slot"
    )]
    pub shrink_mode: crate::lanes::state_file::ShrinkMode,
}

pub fn run(ctx: &Ctx, args: &StopArgs) -> Result<i32, Failure> {
    if let Some(slot) = args.slot {
        return crate::cli::restart::slot(
            ctx,
            slot,
            crate::lanes::slot_control::Action::Stop,
            args.shrink_mode,
            args.timeout,
        );
    }
    let config = ctx.config(Overrides::default())?;
    let t = &config.timing;
    let timeout = args.timeout.unwrap_or(t.stop_grace_s + t.tick_s + 15);
    let outcome = control::stop(&ctx.layout, Duration::from_secs(timeout), args.force)?;
    if args.force && matches!(outcome, StopOutcome::Stopped { .. }) {
        // Nobody else is left to keep the killed workers' work: keep it now.
        for r in control::rescue_killed(&ctx.layout, &config) {
            match r {
                Ok(r) => {
                    outln!("{}", r.message());
                    r.log(&ctx.layout, None, None);
                }
                Err(e) => eprintln!("afk-supervisor: {e}; the tree is kept"),
            }
        }
    }
    match outcome {
        StopOutcome::Stopped {
            pid: Some(pid),
            workers_killed,
        } => {
            if args.force {
                outln!("fleet stopped (supervisor pid={pid}, workers killed={workers_killed})");
            } else {
                outln!("fleet stopped (supervisor pid={pid})");
            }
            Ok(exit_code::OK)
        }
        StopOutcome::Stopped {
            pid: None,
            workers_killed,
        } => {
            outln!("fleet stopped (no supervisor, workers killed={workers_killed})");
            Ok(exit_code::OK)
        }
        StopOutcome::NothingRunning => {
            outln!("no fleet running");
            Ok(exit_code::OK)
        }
        StopOutcome::OrphanWorkers { live } => Err(Failure::failed(format!(
            "no supervisor running, but {live} processes of the fleet are live \
             (workers or what they started); `afk-supervisor stop --force` kills them"
        ))),
        StopOutcome::Incomplete {
            pid,
            supervisor_alive,
            alive,
        } => {
            let sup = pid.map_or("none".to_string(), |p| p.to_string());
            let what = if supervisor_alive {
                format!("supervisor pid={sup} still alive, ")
            } else {
                format!("supervisor pid={sup} gone, ")
            };
            Err(Failure::failed(format!(
                "fleet not stopped: {what}workers still alive: {alive:?}"
            )))
        }
        StopOutcome::TimedOut { pid } => Err(Failure::failed(format!(
            "fleet still stopping after {timeout}s (supervisor pid={pid}); \
             `afk-supervisor stop --force` kills it"
        ))),
    }
}
