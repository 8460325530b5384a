//! `afk-supervisor worker`: the built-in worker a supervisor spawns per slot. Its exit code
//! says how it ended (`docs/SPEC.md` §6, §9): the supervisor parks the slot on 78, idles
//! it without a death on 69 and 75, holds the fleet on 76 (agent paused), and counts anything else but 0 and a signal a death.

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::{self, Overrides};
use crate::exit_code;
use crate::tracker;
use crate::worker::{self, WorkerEnv, WorkerError, WorkerOpts, WorkerOutcome};

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
    let end = worker::run(
        &ctx.layout,
        &config,
        selected.tracker.as_ref(),
        &wenv,
        &opts,
    );
    end.map(outcome_code).map_err(failure)
}

/// An outcome's exit code; none prints a line (the worker logged what happened).
pub fn outcome_code(o: WorkerOutcome) -> i32 {
    match o {
        WorkerOutcome::Done | WorkerOutcome::NoWork | WorkerOutcome::Retired => exit_code::OK,
        WorkerOutcome::AgentFailed => exit_code::FAILED,
        WorkerOutcome::Interrupted { signal } => exit_code::signalled(signal),
        WorkerOutcome::AgentPaused => exit_code::AGENT_PAUSED,
    }
}

/// An error's exit code and its one line.
pub fn failure(e: WorkerError) -> Failure {
    let code = match &e {
        WorkerError::Config(_) => exit_code::CONFIG,
        WorkerError::BootHalted(_) => exit_code::BOOT_HALTED,
        WorkerError::RateLimited(_) | WorkerError::ClusterLost(_) => exit_code::RATE_LIMITED,
        WorkerError::TrackerUnavailable(_) => exit_code::TRACKER_UNAVAILABLE,
        WorkerError::Tracker(_)
        | WorkerError::Signals(_)
        | WorkerError::Bootstrap(_)
        | WorkerError::File { .. }
        | WorkerError::Git(_)
        | WorkerError::AttemptState(_)
        | WorkerError::Agent(_) => exit_code::FAILED,
    };
    Failure::of(code, &e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::{ErrorKind, TrackerError};

    /// Each way a tracker call fails reaches the supervisor as its own code: a transient
    /// failure 69 and a rate limit 75 (neither a death), anything else 1 (a death).
    #[test]
    fn tracker_failures_exit_by_their_kind() {
        let code = |kind| {
            failure(WorkerError::from(&TrackerError::new(
                kind,
                "gh issue list",
                "x",
            )))
        };
        let unavailable = code(ErrorKind::Transient);
        assert_eq!(unavailable.code, exit_code::TRACKER_UNAVAILABLE);
        assert_eq!(unavailable.code, 69);
        assert_eq!(unavailable.message, "gh issue list: transient: x");
        assert_eq!(code(ErrorKind::RateLimited).code, exit_code::RATE_LIMITED);
        assert_eq!(code(ErrorKind::Failed).code, exit_code::FAILED);
        assert_eq!(code(ErrorKind::NotFound).code, exit_code::FAILED);
    }

    #[test]
    fn outcomes_and_host_errors_keep_the_spec_codes() {
        assert_eq!(outcome_code(WorkerOutcome::Done), 0);
        assert_eq!(outcome_code(WorkerOutcome::NoWork), 0);
        assert_eq!(outcome_code(WorkerOutcome::Retired), 0);
        assert_eq!(outcome_code(WorkerOutcome::AgentFailed), 1);
        assert_eq!(outcome_code(WorkerOutcome::AgentPaused), 76);
        assert_eq!(outcome_code(WorkerOutcome::Interrupted { signal: 15 }), 143);
        assert_eq!(outcome_code(WorkerOutcome::Interrupted { signal: 1 }), 129);
        assert_eq!(failure(WorkerError::Config("no agent".into())).code, 78);
        let halted = failure(WorkerError::BootHalted("docs".into()));
        assert_eq!(
            (halted.code, halted.message.as_str()),
            (4, "boot sweeps halted: docs")
        );
    }
}
