//! The built-in AFK worker: `afk-supervisor worker [--once] [--boot-only]`.
//!
//! One worker process claims `ready-for-agent` issues one at a time and runs the configured
//! agent on each in an isolated git worktree. Under a supervisor (`RED_AFK_SWEEPS_DONE=1`)
//! its boot is bootstrap + claim only; solo it runs the whole boot sweep suite first
//! (`docs/SPEC.md` §6).
//!
//! The steps, one file each: [`home`] (its dir and pid file), [`signals`], [`queue`] (the
//! claim), [`lifecycle`] (one issue from claim to hand-off), [`agent`] (running and
//! stopping the agent), [`checks`] (the project's checks after each round, in the agent's
//! sandbox), [`landing`] (the hand-off: the push and the pull request, `docs/SPEC.md`
//! §11.22), [`liveness`], [`attempt`] (the attempt dir's state file), [`texts`].
//! It ends in a [`WorkerOutcome`] or a [`WorkerError`]; `src/cli/worker.rs` turns either
//! into the exit code the supervisor reads (SPEC §6, §9).

/// `println!` for the worker's own lines ([`output::say`]): never a panic on a full or
/// closed stdout.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::worker::output::say(format_args!($($arg)*))
    };
}

pub mod afk_vars;
mod agent;
mod attempt;
mod blame;
mod checks;
pub mod claiming;
mod error;
mod fence;
mod landing;
mod lifecycle;
mod liveness;
mod output;
mod rate_wait;
mod reach;
pub mod stop_signals;
pub mod wording;
pub mod worker_dir;

use crate::config::Config;
use crate::git::Git;
use crate::layout::Layout;
use crate::sweeps::suite::{self, BootError};
use crate::sweeps::{SweepCtx, SweepName};
use crate::tracker::Tracker;

pub use afk_vars::WorkerEnv;
pub use agent::ENV_TEXT_MAX;
pub use attempt::next_attempt;
pub use error::{ClusterLost, WorkerError, WorkerOutcome};
pub use liveness::LIVENESS_FIELDS;
pub use wording::{BOOT_ONLY_SKIPPED, BOOT_ONLY_SWEPT, slugify};

use stop_signals::StopFlag;
use worker_dir::Home;

#[derive(Debug, Clone, Default)]
pub struct WorkerOpts {
    /// Work at most one issue, then exit.
    pub once: bool,
    /// Bootstrap (and sweep, when solo), then exit without claiming.
    pub boot_only: bool,
}

/// Runs the worker to its end.
pub fn run(
    layout: &Layout,
    config: &Config,
    tracker: &dyn Tracker,
    wenv: &WorkerEnv,
    opts: &WorkerOpts,
) -> Result<WorkerOutcome, WorkerError> {
    let stop = StopFlag::install().map_err(WorkerError::Signals)?;
    let git = Git::new(layout.repo());
    let home = Home::new(layout, &wenv.worker_id)?;

    if !wenv.sweeps_done {
        let ctx = SweepCtx::new(layout, config, tracker, &git, false);
        match suite::run_suite(&ctx, &SweepName::ALL).into_result() {
            Ok(report) => say!("{}", report.summary()),
            Err(BootError::Halted(msg)) => {
                home.finish();
                return Err(WorkerError::BootHalted(msg));
            }
            Err(e) => {
                eprintln!("afk-supervisor worker: {}", e.log_message())
            }
        }
    }
    if opts.boot_only {
        say!(
            "{}",
            if wenv.sweeps_done {
                BOOT_ONLY_SKIPPED
            } else {
                BOOT_ONLY_SWEPT
            }
        );
        home.finish();
        return Ok(WorkerOutcome::Done);
    }
    // Before any claim: an agent that cannot run is the host's fault (exit 78, the slot is
    // parked), never an issue taken and given back in a crash loop.
    let agent = match crate::program::check_agent(config, layout) {
        // The program the check found is the one run: a relative `./scripts/agent.sh` is
        // the repo's, made absolute, never looked up again from the issue's worktree.
        Ok(program) => crate::program::with_program(config.agent.command.as_deref(), &program),
        Err(e) => {
            home.finish();
            return Err(WorkerError::Config(e.to_string()));
        }
    };

    // Before any claim too: a sandbox that cannot be had parks the slot (exit 78); the
    // agent never runs unconfined in its place.
    let confinement = match reach::Confinement::find(config, &git) {
        Ok(c) => c,
        Err(e) => {
            home.finish();
            return Err(e);
        }
    };
    let w = Worker {
        layout,
        config,
        tracker,
        git,
        wenv,
        agent,
        confinement,
        stop,
        home: &home,
    };
    let end = w.work_loop(opts.once);
    home.finish();
    end
}

/// One worker's run: what every step reads.
struct Worker<'a> {
    layout: &'a Layout,
    config: &'a Config,
    tracker: &'a dyn Tracker,
    git: Git,
    wenv: &'a WorkerEnv,
    agent: Vec<String>,
    /// The sandbox and what every attempt's agent is given (`docs/SPEC.md` §11.19).
    confinement: reach::Confinement,
    stop: StopFlag,
    home: &'a Home,
}

/// How one issue ended.
enum Outcome {
    Done,
    /// The agent could not be started for this issue's data: handed to a human.
    SetAside,
    AgentFailed,
    /// The agent ran past `timing.attempt_max_s`; the issue went back to the queue.
    Capped,
    /// The agent's account stopped the run; the issue went back and the fleet pauses.
    AccountLimited,
    /// The attempt was refused (tampering) or held (sensitive paths): a person has the
    /// issue, and the worktree is kept for them.
    Refused,
    Interrupted {
        signal: i32,
    },
}

/// Why the worker does not claim (it ends as [`WorkerOutcome::AgentPaused`]).
#[derive(Debug, thiserror::Error)]
enum Held {
    #[error("agent paused: {0}")]
    AgentPaused(String),
    /// Without its start time the worker cannot be named as a reservation's holder.
    #[error("budget: this worker's process start time is unreadable")]
    NoStartTime,
    /// The day's budget is used up (the reason says by what).
    #[error("{0}")]
    Budget(String),
    #[error("budget reservations: {0}")]
    Reservations(#[source] crate::budget::reserve::ReserveError),
    /// `[cluster]`: the fleet's day key could not be checked (etcd unavailable, or the
    /// key holds no budget document): no claim, as without a live lease.
    #[error("{0}")]
    Fleet(#[source] crate::cluster::cas::CasError),
}

impl Worker<'_> {
    /// What holds this worker back before a claim (`docs/SPEC.md` §11.13): the agent pause
    /// in force, or the day's budget used up. When the claim may go ahead, the attempt's
    /// expected cost is reserved against the day's budget in the same locked step as the
    /// check (so N workers checking at once overshoot it by at most one attempt); the
    /// returned guard holds it until the attempt has ended. While spent and reserved
    /// together reach the budget, the worker waits for the running attempts to settle
    /// instead of claiming.
    fn held(&self) -> Result<Option<crate::budget::reserve::Guard>, Held> {
        use crate::budget::reserve::{self, Decision};
        let mut said = false;
        loop {
            let now = crate::timeutil::now_epoch();
            if let Some(p) = crate::lanes::pause_file::agent_active_at(&self.layout.state(), now) {
                return Err(Held::AgentPaused(p.describe()));
            }
            let budget = &self.config.budget;
            if !budget.daily() {
                return Ok(None);
            }
            let holder = reserve::Holder::this(&self.wenv.worker_id).ok_or(Held::NoStartTime)?;
            let max_age_s = self.config.timing.attempt_max_s;
            // On a cluster the day's budget is the fleet's: one key in etcd, every host's.
            let decision = match crate::cluster::active() {
                Some(c) => crate::budget::fleet_day::check_and_reserve(
                    c,
                    self.layout,
                    budget,
                    &holder,
                    max_age_s,
                    now,
                )
                .map_err(Held::Fleet),
                None => reserve::check_and_reserve(self.layout, budget, &holder, max_age_s, now)
                    .map_err(Held::Reservations),
            };
            match decision {
                Ok(Decision::Go(guard)) => return Ok(guard),
                Ok(Decision::Reached(r)) => return Err(Held::Budget(r.reason)),
                // Money is at stake: a reservation that cannot be checked is no claim.
                Err(e) => return Err(e),
                Ok(Decision::Wait(why)) => {
                    if !said {
                        eprintln!("worker {}: {why}; waiting", self.wenv.worker_id);
                        said = true;
                    }
                    if self.stop.signal().is_some() || self.wenv.retire_requested() {
                        // The loop's own checks say what ends the worker.
                        return Ok(None);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(250));
                }
            }
        }
    }

    fn work_loop(&self, once: bool) -> Result<WorkerOutcome, WorkerError> {
        loop {
            if let Some(signal) = self.stop.signal() {
                return Ok(WorkerOutcome::Interrupted { signal });
            }
            if self.wenv.retire_requested() {
                eprintln!(
                    "worker {}: retire requested; not taking another issue",
                    self.wenv.worker_id
                );
                return Ok(WorkerOutcome::Retired);
            }
            // Held until this iteration ends: the attempt's cost is then in the ledger.
            let _reservation = match self.held() {
                Ok(guard) => guard,
                // As for a claim with etcd down: the exit of a transient hold, not a death.
                Err(Held::Fleet(e)) => return Err(ClusterLost::Budget(e).into()),
                Err(why) => {
                    eprintln!("worker {}: {why}; not claiming", self.wenv.worker_id);
                    return Ok(WorkerOutcome::AgentPaused);
                }
            };
            if let Some(signal) = self.stop.signal() {
                return Ok(WorkerOutcome::Interrupted { signal });
            }
            if self.wenv.retire_requested() {
                return Ok(WorkerOutcome::Retired);
            }
            let Some((issue, claim)) = self.claim_next()? else {
                // A stop that came while a claim waited took nothing: it ends the worker.
                if let Some(signal) = self.stop.signal() {
                    return Ok(WorkerOutcome::Interrupted { signal });
                }
                say!(
                    "worker {}: no ready-for-agent issue; exiting",
                    self.wenv.worker_id
                );
                return Ok(WorkerOutcome::NoWork);
            };
            match self.work_issue(&issue, claim)? {
                Outcome::Done | Outcome::SetAside | Outcome::Capped | Outcome::Refused if once => {
                    return Ok(WorkerOutcome::Done);
                }
                Outcome::Done | Outcome::SetAside | Outcome::Capped | Outcome::Refused => {}
                Outcome::AgentFailed => return Ok(WorkerOutcome::AgentFailed),
                Outcome::AccountLimited => return Ok(WorkerOutcome::AgentPaused),
                Outcome::Interrupted { signal } => {
                    return Ok(WorkerOutcome::Interrupted { signal });
                }
            }
        }
    }
}
