//! One slot: which worker runs in it, or why none does.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Instant;

use crate::lanes::state_file::SlotState;
use crate::supervisor::core::circuit::{self, Circuit};

/// Why the supervisor itself ended a worker, so its end is not judged like a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// No progress for the stall-kill time: respawn.
    Stall,
    /// Surplus after a hard-kill shrink: do not respawn.
    Shrink,
    /// The fleet is stopping.
    Stop,
    /// The operator stopped or restarted this slot (`stop --slot`, `restart`).
    Operator,
}

impl KillReason {
    /// How the attempt of a worker that ended holding a claim is recorded when its issue
    /// is restored (`docs/SPEC.md` §11.10): a stall kill is the issue's failure; a hard-kill
    /// shrink or a stop is the operator's action (given back, so it never counts towards
    /// quarantine; a stop leaves its claims to the next boot's orphan cleanup anyway); an
    /// end the supervisor did not ask for is a death.
    pub fn attempt_outcome(kill: Option<KillReason>) -> crate::ledger::Outcome {
        match kill {
            Some(KillReason::Stall) => crate::ledger::Outcome::Stalled,
            Some(KillReason::Shrink | KillReason::Stop | KillReason::Operator) => {
                crate::ledger::Outcome::GivenBack
            }
            None => crate::ledger::Outcome::WorkerDied,
        }
    }
}

/// What a quick clean exit left to check: see [`Slot::unclaimable`].
#[derive(Debug, Clone, PartialEq)]
pub struct Unclaimable {
    pub seen: BTreeSet<u64>,
    pub lived_s: f64,
    pub confirmed: bool,
}

/// What the ticks have learned of a running worker; none of it outlives the run.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Flagged for no progress for `stall_s` (logged once each way).
    pub stalled: bool,
    /// The issue its current attempt works on.
    pub issue: Option<u64>,
    /// Its newest sign of life, epoch seconds.
    pub progress_epoch: u64,
    /// The tree's CPU and memory at the last reading, and when its CPU time last moved (a
    /// worker that computes is making progress whatever its files say).
    pub usage: Option<crate::supervisor::core::progress::Usage>,
    pub cpu_moved_epoch: u64,
    /// When its tree was last read (`None`: not yet), and how many readings in a row
    /// found its CPU time unchanged: a still tree is read less and less often.
    pub usage_read: Option<Instant>,
    pub still_reads: u32,
}

impl Seen {
    /// Nothing seen yet of a worker whose life began at `epoch`.
    pub fn since(epoch: u64) -> Seen {
        Seen {
            stalled: false,
            issue: None,
            progress_epoch: epoch,
            usage: None,
            cpu_moved_epoch: epoch,
            usage_read: None,
            still_reads: 0,
        }
    }

    /// Its newest sign of life of any kind (files or CPU), epoch seconds.
    pub fn last_sign(&self) -> u64 {
        self.progress_epoch.max(self.cpu_moved_epoch)
    }
}

/// A running worker in a slot (the `Running` state; [`Pending`] is before it and
/// [`Finished`] what is kept of it after, as watchexec's `CommandState` has them): how it
/// is reached and named, and what is seen of it.
#[derive(Debug, Clone)]
pub struct LiveWorker {
    pub pid: i32,
    /// Start token; with the pid, the identity other tools verify.
    pub start: u64,
    pub id: String,
    pub started: Instant,
    pub started_epoch: u64,
    /// Spawned by this supervisor (else adopted from a previous one).
    pub own_child: bool,
    /// The driver holds a pidfd for it: it refers to this worker however its pid is
    /// reused, and signals its group once it ended ([`Group::Pidfd`]).
    ///
    /// [`Group::Pidfd`]: crate::supervisor::core::reaper::Group::Pidfd
    pub pidfd: bool,
    pub log: PathBuf,
    pub kill: Option<KillReason>,
    /// What the ticks learned of it while it runs.
    pub seen: Seen,
    /// The claimable issues as the supervisor last saw them when this worker started
    /// (`None`: unknown). A quick clean exit is "nothing claimable" only if the queue is
    /// still exactly this afterwards: a worker that took an issue changed it.
    pub queue_at_spawn: Option<std::collections::BTreeSet<u64>>,
    /// cgroup mode: the attempt's own cgroup (the worker and everything it starts).
    pub cgroup: Option<std::sync::Arc<crate::cgroup::Cgroup>>,
}

impl LiveWorker {
    /// Whether the ticks saw it on an issue (its attempt dir): only such a worker's
    /// stall says anything about an agent.
    pub fn issue_known(&self) -> bool {
        self.seen.issue.is_some()
    }
}

/// How a slot's last worker ended, kept on the slot once the worker is gone (the
/// `Finished` state; the slot itself goes idle, parked or back to starting): what the
/// fleet circuit's reason quotes, and nothing it does not.
#[derive(Debug, Clone)]
pub struct Finished {
    /// How, in words: `exit 1`, `killed by SIGKILL`, `could not start (why)`.
    pub end: String,
    /// Its stdout's file; none for a worker that never started (it wrote nothing).
    pub log: Option<PathBuf>,
}

impl Finished {
    /// A worker that could not start: its spawn's error (`slot.spawn-failed`).
    pub fn not_started(error: &str) -> Finished {
        Finished {
            end: format!("could not start ({error})"),
            log: None,
        }
    }
}

/// A worker asked for and not yet started: what it is started with and named by.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The fleet's spawn number, which the answer names.
    pub seq: u64,
    pub id: String,
    pub started: Instant,
    /// See [`LiveWorker::queue_at_spawn`].
    pub queue_at_spawn: Option<BTreeSet<u64>>,
    /// The slot's phase before, back when the spawn fails.
    pub was: Box<Phase>,
}

// Unboxed on purpose: a running worker is the common phase of a slot, and a fleet has at
// most 1,024 slots, so the space a smaller phase leaves unused costs nothing that matters.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Phase {
    /// A spawn was asked for and its answer has not come yet (it comes before the next
    /// outside event).
    Starting(Pending),
    Running(LiveWorker),
    /// Exited 0; waits until the tracker shows work. `confirmed` once a queue check saw it
    /// empty (until then the idling is provisional and not logged).
    Idle {
        confirmed: bool,
    },
    /// Exit 78: never retried. `reason` is the last line its worker wrote before the
    /// exit, once the driver has read it from the log (`None` until then, and when the log
    /// cannot be read: the park reason then says exit 78).
    Fatal {
        reason: Option<String>,
    },
    /// The circuit is open: waits for its half-open probe.
    CircuitOpen,
}

#[derive(Debug, Clone)]
pub struct Slot {
    pub index: usize,
    pub phase: Phase,
    pub circuit: Circuit,
    /// Workers started in this slot, adopted ones included.
    pub spawns: u64,
    /// Workers started after the first.
    pub restarts: u64,
    /// Surplus after a drain shrink: its worker finishes and is not replaced.
    pub retiring: bool,
    /// A retiring slot's worker has its retire file (written for the shrink): until then,
    /// each tick asks again.
    pub retire_asked: bool,
    /// Why the last ask for that file failed, said once: a disk that stays full asks again
    /// at every tick, and the log hears again only when the error changes.
    pub retire_error: Option<String>,
    /// Idled because its worker exited 0 at once although the queue looked non-empty: it
    /// found nothing it could claim. Holds the claimable issues as they looked then; the
    /// slot wakes only when the queue differs, so a filter mismatch can never loop.
    /// Set by a quick clean exit: the queue as it was when that worker started, and how
    /// long it lived. The next queue check either finds the queue changed (the worker took
    /// something: respawn) or confirms "nothing claimable" (stay idle until it changes).
    pub unclaimable: Option<Unclaimable>,
    /// What `status` shows of the current worker beyond its process.
    pub shown: Shown,
    /// Stopped by the operator (`stop --slot`): nothing starts here until `restart`.
    pub stopped: bool,
    /// A drained restart asked (`restart --shrink-mode drain-then-retire`): its worker
    /// finishes its issue, then a fresh one starts.
    pub restart_pending: bool,
    /// The slot's last worker that ended, and how.
    pub finished: Option<Finished>,
}

/// Facts about a slot's current worker kept for `status`, each tagged with what it belongs
/// to so a respawn or a new issue never shows the last one's.
#[derive(Debug, Clone, Default)]
pub struct Shown {
    /// The issue number and its title, read once from the attempt's `afk.state.json`.
    pub title: Option<(u64, String)>,
    /// The worker's pid and its tree's CPU use in thousandths of a core.
    pub cpu_permille: Option<(i32, u64)>,
}

impl Slot {
    pub fn new(index: usize, params: circuit::Params) -> Self {
        Slot {
            index,
            phase: Phase::Idle { confirmed: false },
            circuit: Circuit::new(params),
            spawns: 0,
            restarts: 0,
            retiring: false,
            retire_asked: false,
            retire_error: None,
            unclaimable: None,
            shown: Shown::default(),
            stopped: false,
            restart_pending: false,
            finished: None,
        }
    }

    pub fn worker(&self) -> Option<&LiveWorker> {
        match &self.phase {
            Phase::Running(w) => Some(w),
            _ => None,
        }
    }

    pub fn worker_mut(&mut self) -> Option<&mut LiveWorker> {
        match &mut self.phase {
            Phase::Running(w) => Some(w),
            _ => None,
        }
    }

    /// A worker runs or is being started here.
    pub fn occupied(&self) -> bool {
        matches!(self.phase, Phase::Running(_) | Phase::Starting(_))
    }

    pub fn is_parked(&self) -> bool {
        matches!(self.phase, Phase::Fatal { .. } | Phase::CircuitOpen)
    }

    pub fn is_idle(&self) -> bool {
        matches!(self.phase, Phase::Idle { .. })
    }

    /// Why a parked slot is parked (`state.toon` `slot_detail[].reason`); `None` otherwise.
    pub fn park_reason(&self) -> Option<String> {
        match &self.phase {
            Phase::Fatal { reason } => Some(reason.clone().unwrap_or_else(|| {
                format!(
                    "worker exited {} (host misconfigured); parked without retry",
                    crate::exit_code::CONFIG
                )
            })),
            Phase::CircuitOpen => Some(match self.circuit.state() {
                circuit::State::Open { step: 0, .. } => {
                    let p = self.circuit.params();
                    format!(
                        "circuit open: {} fast deaths within {}s",
                        p.k,
                        p.window.as_secs()
                    )
                }
                circuit::State::Open { step, .. } => {
                    format!("circuit open: the half-open probe died fast ({step} in a row)")
                }
                _ => "circuit open: workers died fast; waiting for the half-open probe".into(),
            }),
            _ => None,
        }
    }

    /// When a parked slot's half-open probe is due; `None` unless its circuit is open.
    pub fn probe_at(&self) -> Option<Instant> {
        match (&self.phase, self.circuit.state()) {
            (Phase::CircuitOpen, circuit::State::Open { probe_at, .. }) => Some(probe_at),
            _ => None,
        }
    }

    /// The title of the current worker's issue, when known.
    pub fn issue_title(&self) -> Option<String> {
        let issue = self.worker()?.seen.issue?;
        self.shown
            .title
            .as_ref()
            .filter(|(n, _)| *n == issue)
            .map(|(_, t)| t.clone())
    }

    /// The current worker's CPU use, thousandths of a core.
    pub fn cpu_permille(&self) -> Option<u64> {
        let pid = self.worker()?.pid;
        self.shown
            .cpu_permille
            .filter(|(p, _)| *p == pid)
            .map(|(_, c)| c)
    }

    /// The `status` word: running, idle, parked, half-open, retiring or stalled.
    pub fn shown_state(&self) -> SlotState {
        match &self.phase {
            Phase::Running(_) if self.retiring => SlotState::Retiring,
            Phase::Running(w) if w.seen.stalled => SlotState::Stalled,
            Phase::Running(_)
                if matches!(self.circuit.state(), circuit::State::HalfOpen { .. }) =>
            {
                SlotState::HalfOpen
            }
            Phase::Running(_) | Phase::Starting(_) => SlotState::Running,
            Phase::Idle { .. } if self.stopped => SlotState::Stopped,
            Phase::Idle { .. } => SlotState::Idle,
            Phase::Fatal { .. } | Phase::CircuitOpen => SlotState::Parked,
        }
    }
}
