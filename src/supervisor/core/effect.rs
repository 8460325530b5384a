//! What the fleet asks to be done, as one enum: `Fleet::handle`
//! returns these and the driver (`driver.rs`) carries them out, in order, through the
//! journal, the filesystem and the blocking pool. The fleet itself does no I/O, so its
//! decisions are tested by feeding events and reading the effects.

use std::path::PathBuf;

use crate::claim::release::DeadWorker;
use crate::event_log::Record;
use crate::lanes::slot_control::Ack;
use crate::supervisor::core::event::RetireAsker;
use crate::supervisor::core::reaper::Order;

/// One thing to do, in the order the fleet decided it.
#[derive(Debug)]
#[must_use]
pub enum Effect {
    /// A line for the event log.
    Log(Record),
    /// Write the heartbeat `state.toon` as the fleet stands when this is carried out
    /// (after the answers to the effects before it); a write that fails is reported once.
    WriteState,
    /// Ask the tracker for the claimable issues on the blocking pool (the pause files and
    /// the agent's holds first); the answers come back as events. `count_quarantined`:
    /// also count the quarantined issues.
    CheckQueue { count_quarantined: bool },
    /// Give these dead workers' claims back (their attempts rescued first) on the
    /// blocking pool; what it did comes back as log events.
    ReleaseClaims(Vec<DeadWorker>),
    /// Ask the worker of `slot` to finish its issue and exit: its retire file, holding
    /// `token` (the run's start token). Answered at once by `Event::RetireAsked`, since
    /// what the fleet says and keeps depends on whether the file is there.
    WriteRetire {
        slot: usize,
        token: String,
        asker: RetireAsker,
    },
    /// The worker of `slot` is no longer asked to retire.
    RemoveRetire { slot: usize },
    /// Mark an attempt stall-killed before its worker is signalled, so a worker that
    /// gives its issue back on SIGTERM records the attempt as stalled; `fleet_wide` (the
    /// reason) when most busy slots stalled at once: the provider's, excused.
    MarkStall {
        attempt_dir: PathBuf,
        fleet_wide: Option<String>,
    },
    /// Start the worker of spawn `seq` in `slot` (in the repo, output to that slot's log
    /// of the day): answered at once by `Event::Spawned`
    /// or `Event::SpawnFailed`.
    Spawn {
        slot: usize,
        seq: u64,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// Signal a worker's group, or reap its pinning leader.
    Group(Order),
    /// Read the last line of a worker's log that exited 78, answered by
    /// `Event::FatalReason`.
    ReadFatalReason { slot: usize, log: PathBuf },
    /// Read the last lines of `log` (the slot log of the worker whose trip opened the fleet
    /// circuit, `tripped` slots in all), answered by `Event::CircuitLog`: the fleet reads
    /// no file itself.
    ReadCircuitLog { tripped: usize, log: PathBuf },
    /// cgroup mode: an ended worker's cgroup is empty: read its figures and remove it,
    /// answered by `Event::CgroupFinished`.
    FinishCgroup {
        leader: i32,
        cgroup: crate::cgroup::Cgroup,
    },
    /// Search once for the processes that escaped these ended workers' groups (leader,
    /// worker id, our own child) and terminate them (`os/strays.rs`).
    SearchStrays(Vec<(i32, String, bool)>),
    /// Reap the orphans of the workers' trees that were reparented to us.
    ReapOrphans,
    /// Answer a slot-control request (`slot-control.ack.toon`).
    AnswerSlotControl(Ack),
}
