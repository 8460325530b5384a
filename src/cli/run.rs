//! `afk-supervisor run` (and the bare `afk-supervisor --workers N`).
//!
//! Before the supervisor takes its lane, everything an operator must fix is checked, each
//! refusal one line with its exit code (`docs/SPEC.md` §9, §11.6), and nothing is created:
//! the agent the built-in worker would run (exit 78) and the tracker (exit 78 when `gh` is
//! not logged in for a GitHub project). Then the fleet, whose start-up includes the
//! bootstrap (`.red/tmp/`, `.red/state/`, their `.gitignore` lines; `crate::bootstrap`).

use std::sync::Arc;

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::exit_code;
use crate::supervisor::main_loop::{self as sup_run, RunEnd, RunError, TrackerOpener};
use crate::tracker::select::{self, SelectError, Selected};

#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// Number of worker slots (overrides fleet.workers and RED_AFK_TARGET); 0 starts an
    /// empty fleet, grown later with `scale`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub workers: Option<u16>,
}

/// The config `run` (and `start`) would run with, refused (exit 78) when the built-in
/// worker has no agent it can run, before anything exists.
pub fn checked_config(
    ctx: &Ctx,
    args: &RunArgs,
) -> Result<(crate::config::Config, crate::config::Sources), Failure> {
    let (config, sources) = ctx.config_with_sources(Overrides {
        workers: args.workers.map(usize::from),
        ..Overrides::default()
    })?;
    // A sink that could not authenticate would only fail at the first thing worth telling.
    let env = |v: &str| std::env::var(v).ok();
    if let Some(missing) = config
        .notify
        .iter()
        .flat_map(|s| s.missing_env(&env))
        .next()
    {
        return Err(Failure::config(missing));
    }
    if config.worker.command.is_none() {
        // The built-in worker would exit 78 on every slot: refuse before anything exists.
        crate::program::check_agent(&config, &ctx.layout)?;
        // Nor run agents unconfined where the sandbox asked for cannot be had (which one
        // is in force is the supervisor's first `supervisor.isolation` line).
        sandbox_in_force(&config, &sources)?;
    }
    Ok((config, sources))
}

/// The sandbox the built-in worker's agents will run in (`docs/SPEC.md` §11.19), or the
/// one-line refusal (exit 78) when `agent.sandbox = "bwrap"` cannot be had here.
pub fn sandbox_in_force(
    config: &crate::config::Config,
    sources: &crate::config::Sources,
) -> Result<crate::sandbox::InForce, Failure> {
    crate::sandbox::probe(
        config.agent.sandbox,
        std::env::var_os("PATH").as_deref(),
        config.agent.network,
        &sources.describe("agent.sandbox"),
    )
    .map_err(Failure::from)
}

pub fn run(ctx: &Ctx, args: &RunArgs) -> Result<i32, Failure> {
    let (config, sources) = checked_config(ctx, args)?;
    let opener = match select::open(&config, &ctx.layout) {
        Ok(selected) => tracker_opener(Ok(selected)),
        Err(e) if e.is_config() => return Err(crate::cli::select_failure(e)),
        // Anything else (a transient gh failure) is the supervisor's to log and live with.
        Err(e) => tracker_opener(Err(e)),
    };
    if config.fleet.workers == 0 {
        eprintln!(
            "afk-supervisor: warning: fleet.workers = 0 ({}): the fleet starts with no worker; grow it with `afk-supervisor scale N`",
            sources.describe("fleet.workers")
        );
    }
    match sup_run::run(&ctx.layout, config, opener) {
        Ok(RunEnd::Stopped(code)) => Ok(code),
        Ok(RunEnd::BootHalted) => Ok(exit_code::BOOT_HALTED),
        Err(e) => Err(run_failure(e)),
    }
}

/// A supervisor that could not run: 78 when the config names no worker it can start, else 1.
fn run_failure(e: RunError) -> Failure {
    match e {
        // A host without the cgroup subtree the config requires will not grow one on a
        // restart: a configuration error, like a missing worker command.
        RunError::NoWorkerCommand(_) | RunError::Isolation(_) => Failure::of(exit_code::CONFIG, &e),
        RunError::EventLoop(_)
        | RunError::Signals(_)
        | RunError::Lock(_)
        | RunError::Log(_)
        | RunError::StateFile(_) => Failure::of(exit_code::FAILED, &e),
    }
}

/// Hands the supervisor the backend chosen above (`tracker.kind`, `--tracker`) with the
/// reason it was chosen, or the error to log.
fn tracker_opener(chosen: Result<Selected, SelectError>) -> TrackerOpener {
    Box::new(move |_config, _layout| {
        let selected = chosen?;
        Ok((Arc::from(selected.tracker), selected.reason))
    })
}
