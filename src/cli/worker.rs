//! `afk-supervisor worker`: the built-in worker a supervisor spawns per slot.

use clap::Args;

use crate::cli::Ctx;
use crate::config::{self, Overrides};
use crate::exit::Failure;
use crate::tracker;
use crate::worker::{self, WorkerEnv, WorkerOpts};

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Work at most one issue, then exit (what the supervisor runs).
    #[arg(long)]
    pub once: bool,
    /// Bootstrap (and run the sweeps, unless supervisor-owned), then exit without claiming.
    #[arg(long)]
    pub boot_only: bool,
}

pub fn run(ctx: &Ctx, args: WorkerArgs) -> Result<i32, Failure> {
    let config = ctx.config(Overrides::default())?;
    let selected = tracker::open(&config, &ctx.layout).map_err(crate::cli::select_failure)?;
    eprintln!("{}", selected.reason);
    let wenv =
        WorkerEnv::from_env(&config::process_env(), &config).map_err(|e| Failure::config(e.0))?;
    let opts = WorkerOpts {
        once: args.once,
        boot_only: args.boot_only,
    };
    worker::run(
        &ctx.layout,
        &config,
        selected.tracker.as_ref(),
        &wenv,
        &opts,
    )
}
