//! The fleet: every slot's state machine, as a pure function of events.
//!
//! [`Fleet::handle`] takes one [`Event`] and when it happened ([`Now`]: the instant and
//! the wall-clock time) and returns the [`Effect`]s it decided, in order; nothing here
//! touches a file, a process, the journal, the loop's channel, tokio or a clock. The driver
//! (`supervisor::driver`) turns each source (a worker's pidfd, a signal, a tracker answer,
//! the timer) into an event, carries the effects out and feeds their answers (a spawn's
//! pid, a cgroup's figures) back at once, so every decision is taken here, in order, and
//! no two transitions can race.
//!
//! One file per event, as a verb: `start` (start-up and takeover), `spawn` (a worker
//! asked for and its answer), `exit` (a worker ended), `stop`, `scale` (`resize.toon`),
//! `operator` (one slot's stop or restart), `queue` (a queue check's answers), `tick`
//! (the timers, the tick's stall checks), `guards` and `holds` (the pauses, the fleet
//! circuit, the agent's holds). The state parts, each beside the code that uses it most:
//! `pool` (the slots and their target), `groups` (the groups being terminated and what
//! waits for them), `queue`'s tracker view, `churn` (deaths and respawns), `tick`'s
//! timers, `heartbeat` (what `state.toon` shows).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::claim::release::DeadWorker;
use crate::config::{Config, Timing};
use crate::event_log;
use crate::lanes::scale_directive::{Found, ScaleDirective};
use crate::lanes::state_file::{self, ShrinkMode, SlotCounts, SlotDetail, SlotPid, StateFile};
use crate::layout::Layout;
use crate::process::ExitKind;
use crate::supervisor::core::circuit::{self, AfterDeath};
use crate::supervisor::core::effect::Effect;
pub use crate::supervisor::core::event::{
    Adopted, Adoptee, Event, Now, QueueError, TrackerUnavailable,
};
use crate::supervisor::core::event::{RetireAsker, SlotMarks, Started};
use crate::supervisor::core::log_texts::{self, TickCounts};
use crate::supervisor::core::reaper::{Done, Group, Order, Reaper};
use crate::supervisor::core::slot::{
    Finished, KillReason, LiveWorker, Pending, Phase, Seen, Slot, Unclaimable,
};
use crate::timeutil::epoch_secs;
use crate::tracker::Tracker;
use crate::tracker::select::SelectError;
pub use tick::ProgressQuery;

/// A stop in progress.
#[derive(Debug, Clone, Copy)]
pub struct Stopping {
    pub code: i32,
    /// Past this, whatever refuses to die is reported and the supervisor exits anyway.
    pub give_up_at: Instant,
}

/// The fleet, in parts that each keep one kind of state; every decision that needs
/// several of them is a method here (or in the file of the part it is mostly about).
pub struct Fleet {
    layout: Layout,
    timing: Timing,
    /// What the event being handled decided, in order; [`Fleet::handle`] returns it.
    out: Vec<Effect>,
    /// When the event being handled happened (the time every decision in it uses).
    now: Instant,
    /// Its wall-clock time, for what is recorded (epoch seconds, log stamps).
    wall: std::time::SystemTime,
    pool: Pool,
    launch: Launch,
    groups: Groups,
    churn: ChurnCount,
    view: TrackerView,
    guards: Guards,
    timers: Timers,
    record: Record,
    stopping: Option<Stopping>,
    holds: holds::Holds,
}

/// What a new worker is started with and named by: one part because a spawn is what it is
/// for (a resize changes the runner for the spawns that follow; the heartbeat shows it).
struct Launch {
    argv: Vec<String>,
    runner: String,
    /// This supervisor's pid (in every worker id it gives) and start token.
    me: (i32, u64),
    /// Workers started by this supervisor: the last part of every worker id, so an id is
    /// never reused even when a slot is retired and created again.
    spawn_seq: u64,
    /// The start found the fleet held (a pause, the agent's hold) and spawned nothing: its
    /// slots that never had a worker start once nothing holds ([`Fleet::start_held_slots`]).
    held_start: bool,
}

mod churn;
mod groups;
mod guards;
mod heartbeat;
mod holds;
mod pool;
pub mod resize;
pub mod shutdown;
pub mod slot_requests;
pub mod spawn_asked;
pub mod start_up;
#[cfg(test)]
mod tests;
mod tick;
pub mod tracker_view;
pub mod worker_ended;

use churn::ChurnCount;
use groups::Groups;
use guards::Guards;
use heartbeat::{Record, line};
use pool::Pool;
use tick::Timers;
use tracker_view::TrackerView;
use tracker_view::UNIDLE_EVERY;

impl Fleet {
    /// A fleet for `config` in `layout`, started by supervisor `me` (pid, start token) at
    /// `now`; `pidfd_groups`: the kernel signals groups through pidfds.
    pub fn new(
        layout: Layout,
        config: &Config,
        argv: Vec<String>,
        me: (i32, u64),
        pidfd_groups: bool,
        now: Now,
    ) -> Self {
        let timing = config.timing.clone();
        let (wall, now) = (now.wall, now.at);
        Fleet {
            layout,
            pool: Pool::new(config.fleet.workers, circuit::Params::from_timing(&timing)),
            launch: Launch {
                argv,
                runner: config.worker.runner.clone(),
                me,
                spawn_seq: 0,
                held_start: false,
            },
            groups: Groups {
                pidfd_groups,
                ..Groups::new(Duration::from_secs(timing.stop_grace_s))
            },
            churn: ChurnCount::default(),
            view: TrackerView::new(),
            guards: Guards::new(config.timing.fleet_circuit_fraction),
            timers: Timers {
                agent_only: config.worker.command.is_none(),
                ..Timers::new(now, timing.tick_s)
            },
            record: Record::new(epoch_secs(wall)),
            stopping: None,
            holds: holds::Holds {
                utc_offset_s: config.budget.utc_offset_s,
                ..holds::Holds::default()
            },
            timing,
            out: Vec::new(),
            now,
            wall,
        }
    }

    /// The isolation chosen at start-up, as `status` words it: in `cgroup_mode` every
    /// worker has its own cgroup (which `children` creates), and `evented`: its emptying
    /// arrives as an event. Before [`Fleet::start`].
    pub fn set_isolation(&mut self, described: String, cgroup_mode: bool, evented: bool) {
        self.groups.cgroup_mode = cgroup_mode;
        self.groups.cgroups_evented = evented;
        self.record.isolation = Some(described);
    }

    /// Whether start-up could open the tracker (the driver keeps the tracker itself).
    pub fn set_tracker(&mut self, tracker: Result<Arc<dyn Tracker>, SelectError>) {
        self.view.tracker = tracker
            .map(|t| t.kind().to_string())
            .map_err(TrackerUnavailable::from);
    }

    /// Decides on `event`, which happened at `now`; returns what is to be done, in order.
    #[must_use]
    pub fn handle(&mut self, event: Event, now: Now) -> Vec<Effect> {
        self.now = now.at;
        self.wall = now.wall;
        let now = now.at;
        match event {
            // Never the fleet's: read and reaped by the driver (`Driver::feed` keeps them),
            // which feeds `Exited` for each worker that ended.
            Event::ChildEnded { .. } | Event::Sigchld => {}
            Event::Exited { pid, start, kind } => self.on_exit(pid, start, kind, now),
            Event::NotStarted { pid, start, error } => self.on_not_started(pid, start, error, now),
            Event::Queue(r) => self.on_queue(r, now),
            Event::Paused(p, cause) => self.on_paused(p, cause, now),
            Event::Hold(h, spend) => self.on_hold(h, spend, now),
            Event::Spend(spend) => self.on_spend(spend),
            Event::PauseFile(e) => self.on_pause_file(e),
            Event::Quarantined(n) => self.on_quarantined(n),
            Event::OperatorPause {
                active,
                resumed_via,
            } => self.on_operator_pause(active, resumed_via),
            Event::Log(ev) => self.log(ev),
            // Nothing to decide: it only wakes the loop, whose next `Turn` carries which
            // dying groups still have members.
            Event::CgroupChanged => {}
            Event::Stop { code, why } => self.begin_stop(code, why, now),
            Event::Control(files) => {
                let files = *files;
                self.apply_scale(files.scale, now);
                self.apply_slot_control(files.slot_request, files.slot_ack, now);
            }
            Event::Tick(facts) => self.tick(*facts, now),
            Event::Turn { alive } => self.service(&alive, now),
            Event::Spawned {
                slot,
                seq,
                started,
                log,
                cgroup,
            } => self.spawned(slot, seq, started, log, cgroup),
            Event::SpawnFailed { slot, seq, error } => self.spawn_failed(slot, seq, error, now),
            Event::FatalReason { slot, reason } => {
                if let Some(Phase::Fatal { reason: known }) =
                    self.pool.slots.get_mut(&slot).map(|s| &mut s.phase)
                {
                    *known = Some(reason);
                    self.record.dirty = true;
                }
            }
            Event::CgroupFinished { leader, figures } => self.cgroup_finished(leader, figures),
            Event::CircuitLog {
                tripped,
                log,
                lines,
            } => self.fleet_circuit_opened(tripped, Some((&log, &lines))),
            Event::RetireAsked { slot, asker, error } => match asker {
                RetireAsker::Shrink => self.shrink_retire_asked(slot, error),
                RetireAsker::SlotControl { ack, done, before } => {
                    self.slot_retire_asked(slot, ack, *done, before, error)
                }
            },
        }
        debug_assert!(
            self.pool.unsettled_complete(),
            "a slot's circuit opened without its slot among the unsettled"
        );
        debug_assert!(
            self.pool.workers_indexed(),
            "a running worker missing from the index of workers"
        );
        self.take_effects()
    }

    /// What was decided outside [`Fleet::handle`] (start-up, the stop's checks).
    #[must_use]
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.out)
    }

    pub(super) fn emit(&mut self, e: Effect) {
        self.out.push(e);
    }

    /// Gives the claims of dead workers whose process group is now confirmed gone back,
    /// on the blocking pool (the driver's); its events come back as [`Event::Log`].
    pub(super) fn release_claims(&mut self, done: &[Done]) {
        if done.is_empty() || self.groups.pending_release.is_empty() {
            return;
        }
        let (ready, rest): (Vec<DeadWorker>, Vec<DeadWorker>) =
            std::mem::take(&mut self.groups.pending_release)
                .into_iter()
                .partition(|w| done.iter().any(|d| d.leader == w.pid));
        self.groups.pending_release = rest;
        if self.view.tracker.is_err() || ready.is_empty() {
            return;
        }
        self.emit(Effect::ReleaseClaims(ready));
    }

    pub fn stopping(&self) -> Option<Stopping> {
        self.stopping
    }
}
