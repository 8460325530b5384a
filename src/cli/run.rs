//! `afk-supervisor run` (and the bare `afk-supervisor --workers N`).

use std::sync::Arc;

use clap::Args;

use crate::cli::Ctx;
use crate::config::Overrides;
use crate::exit::Failure;
use crate::supervisor::run::{self as sup_run, TrackerOpener};
use crate::tracker::select;

#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// Number of worker slots (overrides fleet.workers and RED_AFK_TARGET).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub workers: Option<u16>,
}

pub fn run(ctx: &Ctx, args: &RunArgs) -> Result<i32, Failure> {
    let config = ctx.config(Overrides {
        workers: args.workers.map(usize::from),
        ..Overrides::default()
    })?;
    sup_run::run(&ctx.layout, config, tracker_opener())
}

/// The configured backend (`tracker.kind`, `--tracker`), with the reason it was chosen.
fn tracker_opener() -> TrackerOpener {
    Box::new(|config, layout| {
        let selected = select::open(config, layout).map_err(|e| e.to_string())?;
        Ok((Arc::from(selected.tracker), selected.reason))
    })
}
