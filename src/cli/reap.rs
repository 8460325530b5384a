//! `afk-supervisor reap [--dry-run]`: branch hygiene on demand, exactly the boot suite's
//! branch reaper and nothing else (no worker, no claim, no other sweep).

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::exit_code;
use crate::git::Git;
use crate::sweeps::base_fetch::BaseFetch;
use crate::sweeps::branch_reaper;
use crate::tracker::select;

#[derive(Debug, Clone, clap::Args)]
pub struct ReapArgs {
    /// Print what would be reaped (`would reap (…)` lines); delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(ctx: &Ctx, args: &ReapArgs) -> Result<i32, Failure> {
    let config = ctx.config(Overrides::default())?;
    let selected = select::open(&config, &ctx.layout).map_err(crate::cli::select_failure)?;
    eprintln!("{}", selected.reason);
    let git = Git::new(ctx.layout.repo());
    let report = branch_reaper::run(
        &git,
        selected.tracker.as_ref(),
        &config.fleet.base,
        args.dry_run,
        &BaseFetch::default(),
    )?;
    if let Some(e) = &report.tracker_error {
        eprintln!("afk-supervisor: warning: tracker failed, every afk branch spared: {e}");
    }
    outln!("{}", report.counts_line());
    for d in &report.decisions {
        outln!("{}", d.line(args.dry_run));
    }
    match report.delete_error() {
        Some(e) => Err(Failure::failed(e)),
        None => Ok(exit_code::OK),
    }
}
