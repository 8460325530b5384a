//! The fleet: every slot's state machine and what the loop does on each event.
//!
//! Single-threaded by design: the event loop turns each source (a worker's pidfd, a
//! signal, a finished tracker call, a timer) into a [`Msg`] or a call here, and every
//! decision is taken here, in order, so no two transitions can race. Work that blocks
//! (tracker calls) runs on the runtime's blocking pool and comes back as a [`Msg`].
//!
//! [`Fleet`]'s state is a few parts, each with one job and defined beside the code that
//! uses it most: `pool` (the slots and their target), `processes` (the OS seam: children,
//! reaper, what waits for a group to go), `queue` (the tracker view and the queue check),
//! `guards` (the rate-limit pause and the fleet circuit), `churn` (deaths and respawns),
//! `tick` (the timers), `heartbeat` (the journal and `state.toon`); spawning and exits are
//! here, resizes in `scaling`, the stop in `stop`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::UnboundedSender;

use super::children::{Children, Os, Started};
use super::circuit::{self, AfterDeath};
use super::journal::Journal;
use super::reaper::{Done, Group, Reaper};
use super::release::{self, DeadWorker};
use super::scale_directive::{self as resize, Found, ScaleDirective as Resize};
use super::slot::{KillReason, LiveWorker, Phase, Slot, Unclaimable};
use super::spawn::{self, ExitKind, SpawnSpec};
use super::stall;
use super::state_file::{self, ShrinkMode, SlotCounts, SlotDetail, SlotPid, StateFile};
use super::texts::{self, TickCounts, kind};
use crate::config::{Config, Timing};
use crate::fsutil::{atomic_write, remove_file_if_exists};
use crate::layout::Layout;
use crate::process;
use crate::timeutil::{date_utc, epoch_secs, now_epoch, now_rfc3339_millis};
use crate::toonl::Event;
use crate::tracker::Tracker;
use crate::tracker::select::SelectError;

/// What the helper threads tell the loop.
#[derive(Debug)]
pub enum Msg {
    /// The pidfd of our own worker became readable: it ended (how is read when handled).
    ChildEnded {
        pid: i32,
        start: u64,
    },
    /// A worker that is not our child ended.
    Exited {
        pid: i32,
        start: u64,
        kind: ExitKind,
    },
    /// The claimable `ready-for-agent` issues, or why the tracker could not say.
    Queue(Result<BTreeSet<u64>, QueueError>),
    /// The fleet is paused for a rate limit (read from the pause file): the queue check
    /// that found it did not call the tracker.
    Paused(crate::pause::Pause),
    /// The pause file could not be read (it pauses nothing): reported once.
    PauseFile(crate::pause::PauseFileError),
    /// Open issues labelled `afk:quarantined`, counted beside a queue check.
    Quarantined(u64),
    /// The agent's account or the day's budget holds the fleet (the queue check that
    /// found it did not call the tracker), with the day's spend.
    Hold(
        crate::supervisor::holds::Hold,
        Option<state_file::SpendToday>,
    ),
    /// The day's spend, read beside a queue check that found no hold.
    Spend(Option<state_file::SpendToday>),
    /// The operator pause as a queue check read it (`None`: none holds).
    OperatorPause(Option<crate::pause::OperatorPause>),
    Log(Event),
    /// A watched cgroup's `cgroup.events` changed (cgroup mode): the dying groups are
    /// looked at again.
    CgroupChanged,
}

/// A stop in progress.
#[derive(Debug, Clone, Copy)]
pub struct Stopping {
    pub code: i32,
    /// Past this, whatever refuses to die is reported and the supervisor exits anyway.
    pub give_up_at: Instant,
}

/// A previous supervisor's worker found live at start-up.
#[derive(Debug, Clone)]
pub struct Adoptee {
    pub slot: usize,
    pub pid: i32,
    pub start: u64,
    pub worker_id: Option<String>,
    pub started_epoch: Option<u64>,
    pub restarts: u64,
    /// cgroup mode: the attempt cgroup it was found in.
    pub cgroup: Option<crate::cgroup::Cgroup>,
}

/// How the group of worker `w` is signalled and found empty: its cgroup where it has one,
/// else its process group.
fn group_of(children: &dyn Children, w: &LiveWorker) -> Group {
    match &w.cgroup {
        Some(cg) => Group::Cgroup(cg.as_ref().clone()),
        None => children.group_for(w.pidfd.as_ref()),
    }
}

/// The fleet, in parts that each keep one kind of state; every decision that needs
/// several of them is a method here (or in the file of the part it is mostly about).
pub struct Fleet {
    layout: Layout,
    timing: Timing,
    /// Where the blocking pool's jobs send their results (as [`Msg`]).
    tx: UnboundedSender<Msg>,
    pool: Pool,
    launch: Launch,
    procs: Processes,
    churn: ChurnCount,
    view: TrackerView,
    guards: Guards,
    timers: Timers,
    record: Record,
    stopping: Option<Stopping>,
    holds: holds::Holds,
    budget: crate::config::Budget,
    /// `rescue.max_file_bytes`, for the rescue of a dead worker's attempt.
    rescue_max_file_bytes: u64,
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
}

mod churn;
mod guards;
mod heartbeat;
mod holds;
mod operator;
mod pool;
mod processes;
mod queue;
mod scaling;
mod stop;
#[cfg(test)]
mod tests;
mod tick;

use churn::ChurnCount;
use guards::Guards;
use heartbeat::Record;
use pool::Pool;
use processes::Processes;
use queue::TrackerView;
use queue::UNIDLE_EVERY;
pub use queue::{QueueError, TrackerUnavailable};
use tick::Timers;

impl Fleet {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layout: Layout,
        config: &Config,
        argv: Vec<String>,
        me: (i32, u64),
        journal: Journal,
        tx: UnboundedSender<Msg>,
    ) -> Self {
        let timing = config.timing.clone();
        Fleet {
            layout,
            pool: Pool::new(config.fleet.workers, circuit::Params::from_timing(&timing)),
            launch: Launch {
                argv,
                runner: config.worker.runner.clone(),
                me,
                spawn_seq: 0,
            },
            procs: Processes::new(
                Box::new(Os::new(tx.clone())),
                Duration::from_secs(timing.stop_grace_s),
            ),
            churn: ChurnCount::default(),
            view: TrackerView::new(),
            guards: Guards::new(config.timing.fleet_circuit_fraction),
            timers: Timers {
                agent_only: config.worker.command.is_none(),
                ..Timers::new(Instant::now(), timing.tick_s)
            },
            record: Record::new(journal),
            stopping: None,
            holds: holds::Holds {
                utc_offset_s: config.budget.utc_offset_s,
                ..holds::Holds::default()
            },
            budget: config.budget.clone(),
            rescue_max_file_bytes: config.rescue.max_file_bytes,
            timing,
            tx,
        }
    }

    /// The isolation chosen at start-up: in cgroup mode every worker starts in its own
    /// cgroup of the fleet's subtree. Before [`Fleet::start`].
    pub fn set_isolation(&mut self, isolation: &super::isolation::Isolation) {
        if let Some(cg) = isolation.cgroups() {
            self.procs.children = Box::new(Os::new(self.tx.clone()).with_cgroups(cg.clone()));
            self.procs.cgroup_mode = true;
        }
        self.record.isolation = Some(isolation.describe());
    }

    /// The fleet with its processes handled by `children` instead of the OS (a test
    /// double).
    pub fn with_children(mut self, children: Box<dyn Children>) -> Self {
        self.procs.children = children;
        self
    }

    /// The tracker the queue is checked and dead workers' claims are released through, or
    /// why start-up could not open it.
    pub fn set_tracker(&mut self, tracker: Result<Arc<dyn Tracker>, SelectError>) {
        self.view.tracker = tracker.map_err(TrackerUnavailable::from);
    }

    /// Releases the claims of dead workers whose process group is now confirmed gone, on
    /// the blocking pool; its events come back as [`Msg::Log`].
    fn release_claims(&mut self, done: &[Done]) {
        if done.is_empty() || self.procs.pending_release.is_empty() {
            return;
        }
        let (ready, rest): (Vec<DeadWorker>, Vec<DeadWorker>) =
            std::mem::take(&mut self.procs.pending_release)
                .into_iter()
                .partition(|w| done.iter().any(|d| d.leader == w.pid));
        self.procs.pending_release = rest;
        let Ok(tracker) = self.view.tracker.clone() else {
            return;
        };
        for w in ready {
            if release::claims_of(&self.layout, &w).is_empty() {
                continue;
            }
            let (layout, tx, tracker) = (self.layout.clone(), self.tx.clone(), tracker.clone());
            // Git work for the rescue, tracker calls for the restore: off the event loop.
            let keeper = crate::rescue::Keeper::new(
                layout.repo(),
                self.rescue_max_file_bytes,
                tracker.shared_across_checkouts(),
            );
            self.blocking(move || {
                for ev in release::release_rescuing(&layout, tracker.as_ref(), &w, &keeper) {
                    let _ = tx.send(Msg::Log(ev));
                }
            });
        }
    }

    /// Runs `job` on the runtime's blocking pool, or on this thread outside a runtime.
    fn blocking(&self, job: impl FnOnce() + Send + 'static) {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(job);
            }
            Err(_) => job(),
        }
    }

    pub fn stopping(&self) -> Option<Stopping> {
        self.stopping
    }

    // ---- start-up ----

    /// Takes over the live workers of a previous supervisor, then spawns every slot of the
    /// target that has none, then records them all in one heartbeat.
    pub fn start(&mut self, adoptees: Vec<Adoptee>, dead: usize, had_state: bool) {
        let now = Instant::now();
        let adopted = adoptees.len();
        for a in adoptees {
            self.adopt(a, now);
        }
        if had_state {
            let msg = texts::takeover(adopted, dead, self.pool.target);
            self.log(Event::now(kind::TAKEOVER, msg));
        }
        let (t, m) = (self.pool.target, self.pool.shrink_mode);
        self.reconcile(t, m, now);
        // One write for the whole start-up, never one per spawn.
        self.heartbeat(now);
    }

    fn adopt(&mut self, a: Adoptee, now: Instant) {
        let now_e = now_epoch();
        let started_epoch = a.started_epoch.unwrap_or(now_e).min(now_e);
        let started = now
            .checked_sub(Duration::from_secs(now_e - started_epoch))
            .unwrap_or(now);
        let log = std::fs::read_link(format!("/proc/{}/fd/1", a.pid))
            .unwrap_or_else(|_| self.layout.slot_log(&date_utc(SystemTime::now()), a.slot));
        let id = a
            .worker_id
            .unwrap_or_else(|| format!("adopted-{}-slot-{}", a.pid, a.slot));
        let (pid, start) = (a.pid, a.start);
        let Some(Started {
            pidfd: fd, watched, ..
        }) = self.procs.children.adopt(pid, start)
        else {
            self.log(
                Event::now(kind::ERROR, "adopted worker ended before it was watched")
                    .slot(a.slot)
                    .pid(pid),
            );
            return;
        };
        if !watched {
            self.procs.unwatched.push((pid, start));
        }
        if let Some(cg) = &a.cgroup {
            self.procs.children.follow_cgroup(pid, cg);
        }
        let mut slot = Slot::new(a.slot, self.pool.params);
        slot.spawns = a.restarts + 1;
        slot.restarts = a.restarts;
        slot.phase = Phase::Running(LiveWorker {
            pid,
            start,
            id,
            started,
            started_epoch,
            own_child: false,
            pidfd: fd,
            log,
            kill: None,
            stalled: false,
            issue: None,
            progress_epoch: started_epoch,
            usage: None,
            cpu_moved_epoch: started_epoch,
            queue_at_spawn: None,
            cgroup: a.cgroup.clone().map(Arc::new),
        });
        self.pool.slots.insert(a.slot, slot);
    }

    // ---- spawning ----
    /// Starts a worker in slot `idx`. A worker that cannot even start died fast; the
    /// circuit decides whether to try again at once or park the slot.
    fn spawn_in(&mut self, idx: usize, now: Instant) {
        loop {
            if self.stopping.is_some() || idx >= self.pool.target {
                return;
            }
            // A paused fleet starts nothing that would claim (the slot idles until the
            // resume's queue check), and an open fleet circuit only its one probe.
            if self.guards.held() || !self.guards.fleet_circuit.may_spawn(idx) {
                return;
            }
            // Held by the agent's account or the day's budget: nothing, or only the probe.
            if self.holds.blocks(idx) {
                return;
            }
            let Some(slot) = self.pool.slots.get(&idx) else {
                return;
            };
            if slot.worker().is_some() || slot.stopped {
                return;
            }
            if self.pool.live_in_target() >= self.pool.target {
                self.log(
                    Event::now(
                        kind::ERROR,
                        format!(
                            "refusing to spawn: {} live workers already meet the target {}",
                            self.pool.live_in_target(),
                            self.pool.target
                        ),
                    )
                    .slot(idx),
                );
                return;
            }
            let Some(slot) = self.pool.slots.get_mut(&idx) else {
                return;
            };
            slot.unclaimable = None;
            slot.spawns += 1;
            if slot.spawns > 1 {
                slot.restarts += 1;
                self.churn.respawn(now);
            }
            self.launch.spawn_seq += 1;
            let id = format!(
                "sup-{}-slot-{idx}-{}",
                self.launch.me.0, self.launch.spawn_seq
            );
            let log = self.layout.slot_log(&date_utc(SystemTime::now()), idx);
            let env =
                spawn::worker_env(idx, &id, &self.launch.runner, &self.layout.retire_file(idx));
            let spec = SpawnSpec {
                argv: &self.launch.argv,
                cwd: self.layout.repo(),
                log: &log,
                env,
            };
            let queue_at_spawn = self.view.ready_set.clone();
            let seq = self.launch.spawn_seq;
            match self.procs.children.spawn_attempt(&spec, idx, seq) {
                Ok((s, cgroup)) => {
                    let fd = s.pidfd.clone();
                    if !s.watched {
                        self.procs.unwatched.push((s.pid, s.start));
                    }
                    if let Some(slot) = self.pool.slots.get_mut(&idx) {
                        slot.phase = Phase::Running(LiveWorker {
                            pid: s.pid,
                            start: s.start,
                            id: id.clone(),
                            started: now,
                            started_epoch: now_epoch(),
                            own_child: true,
                            pidfd: fd,
                            log,
                            kill: None,
                            stalled: false,
                            issue: None,
                            progress_epoch: now_epoch(),
                            usage: None,
                            cpu_moved_epoch: now_epoch(),
                            queue_at_spawn: queue_at_spawn.clone(),
                            cgroup: cgroup.map(Arc::new),
                        });
                    }
                    // Recorded in the heartbeat at the end of this loop turn (one write per
                    // turn, however many spawned); a supervisor killed before that leaves a
                    // worker its successor still finds by its environment (`run.rs`).
                    tracing::debug!(slot = idx, pid = s.pid, worker = %id, "spawned");
                    self.log(
                        Event::now(kind::SPAWN, format!("spawned worker {id}"))
                            .slot(idx)
                            .pid(s.pid),
                    );
                    return;
                }
                Err(e) => {
                    self.log(Event::now(kind::SPAWN_FAILED, e.to_string()).slot(idx));
                    if !self.death(idx, now, now) {
                        return;
                    }
                }
            }
        }
    }

    /// Records a death and applies the circuit's verdict. Returns whether to respawn now.
    fn death(&mut self, idx: usize, now: Instant, started: Instant) -> bool {
        self.churn.death(now);
        if self.guards.fleet_circuit.probe_slot() == Some(idx) {
            // The fleet's probe could not even start.
            self.end_fleet_probe(idx, false, true, now);
            return false;
        }
        let window_s = self.timing.circuit_window_s;
        let fleet_open = self.guards.fleet_circuit.is_open();
        let Some(slot) = self.pool.slots.get_mut(&idx) else {
            return false;
        };
        match slot.circuit.on_death(now, started) {
            AfterDeath::Respawn { .. } if fleet_open => {
                // Parked with the rest of the fleet until its probe closes the circuit.
                slot.phase = Phase::CircuitOpen;
                false
            }
            AfterDeath::Respawn { .. } => true,
            AfterDeath::Tripped {
                fast_deaths,
                backoff,
                ..
            } => {
                slot.phase = Phase::CircuitOpen;
                let msg = texts::tripped(idx, fast_deaths, window_s, backoff.as_secs());
                self.log(Event::now(kind::CIRCUIT_TRIP, msg).slot(idx));
                self.note_slot_trip(idx, now);
                false
            }
            AfterDeath::Reparked {
                lived,
                backoff,
                step,
            } => {
                slot.phase = Phase::CircuitOpen;
                let msg = texts::reparked(idx, lived.as_secs(), backoff.as_secs(), step);
                self.log(Event::now(kind::CIRCUIT_REPARKED, msg).slot(idx));
                false
            }
        }
    }

    // ---- events ----

    pub fn on_exit(&mut self, pid: i32, start: u64, exit: ExitKind, now: Instant) {
        let Some(idx) = self
            .pool
            .slots
            .values()
            .find(|s| s.worker().is_some_and(|w| w.pid == pid && w.start == start))
            .map(|s| s.index)
        else {
            // Not a current worker (already handled): only its group cleanup may be pending.
            self.procs.reaper.leader_exited(pid);
            return;
        };
        let Some(slot) = self.pool.slots.get_mut(&idx) else {
            return;
        };
        let Phase::Running(w) =
            std::mem::replace(&mut slot.phase, Phase::Idle { confirmed: false })
        else {
            return;
        };
        let retiring = slot.retiring;
        let group = group_of(&*self.procs.children, &w);
        self.procs.reaper.terminate(
            &mut *self.procs.children,
            w.pid,
            group,
            w.own_child,
            true,
            now,
        );
        // In cgroup mode nothing of the worker is outside its cgroup: no stray search.
        match &w.cgroup {
            Some(cg) => {
                self.procs
                    .ended_cgroups
                    .insert(w.pid, (cg.as_ref().clone(), idx, w.id.clone()));
            }
            None => {
                self.procs.ended.insert(w.pid, (w.id.clone(), w.own_child));
            }
        }
        // A worker that did not end cleanly may hold claims it can no longer give back.
        // At a stop they are left to the next boot's orphan cleanup.
        if !matches!(exit, ExitKind::Code(0) | ExitKind::Code(78)) && self.stopping.is_none() {
            self.procs.pending_release.push(DeadWorker {
                slot: idx,
                pid: w.pid,
                start: w.start,
                id: w.id.clone(),
                outcome: KillReason::attempt_outcome(w.kill),
            });
        }
        let lived = now.saturating_duration_since(w.started);
        tracing::debug!(slot = idx, pid, %exit, lived_ms = lived.as_millis() as u64, "worker ended");
        self.log(
            Event::now(
                kind::EXIT,
                format!("worker {} {exit} after {:.1}s", w.id, lived.as_secs_f64()),
            )
            .slot(idx)
            .pid(pid),
        );
        self.guards
            .last_exits
            .insert(idx, (exit.to_string(), w.log.clone()));
        if self.stopping.is_some() {
            return;
        }
        if idx >= self.pool.target {
            self.retire_slot(idx);
            return;
        }
        if self.operator_exit(idx, w.kill, now) {
            return;
        }
        if self.guards.fleet_circuit.probe_slot() == Some(idx) {
            if matches!(
                exit,
                ExitKind::Code(
                    crate::exit::RATE_LIMITED
                        | crate::exit::TRACKER_UNAVAILABLE
                        | crate::exit::AGENT_PAUSED
                )
            ) {
                self.fleet_probe_inconclusive(idx, &exit.to_string(), now);
                return;
            }
            let clean = matches!(exit, ExitKind::Code(0));
            let fatal = matches!(exit, ExitKind::Code(78));
            self.end_fleet_probe(idx, clean, !clean && !fatal, now);
            // A clean probe idles like any clean exit; 78 still parks its slot for good.
            if !clean && !fatal {
                return;
            }
        }
        let code = match exit {
            ExitKind::Code(c) => Some(c),
            _ => None,
        };
        if self.agent_probe_ended(idx, code) {
            return;
        }
        if retiring || w.kill == Some(KillReason::Shrink) {
            // Grown back while its worker was being retired: within the target again.
            self.unretire(idx);
            self.spawn_in(idx, now);
            return;
        }
        if w.kill == Some(KillReason::Stall) {
            self.churn.death(now);
            self.spawn_in(idx, now);
            return;
        }
        match exit {
            ExitKind::Code(78) => {
                if let Some(slot) = self.pool.slots.get_mut(&idx) {
                    slot.phase = Phase::Fatal;
                    slot.fatal_reason = Some(super::slot::fatal_reason_from_log(&w.log));
                }
                self.log(Event::now(kind::PARKED, texts::fatal_parked(idx)).slot(idx));
            }
            ExitKind::Code(
                code @ (crate::exit::RATE_LIMITED | crate::exit::TRACKER_UNAVAILABLE),
            ) => {
                // The tracker said wait (or could not be reached), not that the worker is
                // broken: no death, no circuit. The slot idles until a queue check (the next
                // tick's) finds work again.
                let met = if code == crate::exit::RATE_LIMITED && self.guards.operator.is_some() {
                    "found the fleet paused by the operator"
                } else if code == crate::exit::RATE_LIMITED {
                    "met a tracker rate limit"
                } else {
                    "found the tracker unavailable"
                };
                let msg = format!(
                    "slot {idx} idle: worker {} {met} (exit {code}); not a death, \
                     the next queue check decides",
                    w.id,
                );
                self.log(Event::now(kind::IDLE, msg).slot(idx));
            }
            ExitKind::Code(crate::exit::AGENT_PAUSED) => {
                // The agent's account (or the day's budget) holds the whole fleet, not
                // this slot: no death, no circuit; the queue check reads the hold.
                let msg = format!(
                    "slot {idx} idle: worker {} found the agent paused (exit {}); not a death",
                    w.id,
                    crate::exit::AGENT_PAUSED
                );
                self.log(Event::now(kind::IDLE, msg).slot(idx));
                self.request_queue();
            }
            ExitKind::Code(0) => {
                let closed = self
                    .pool
                    .slots
                    .get_mut(&idx)
                    .is_some_and(|s| s.circuit.on_clean_exit());
                if closed {
                    let msg = texts::closed(idx, lived.as_secs());
                    self.log(Event::now(kind::CIRCUIT_CLOSED, msg).slot(idx));
                }
                self.note_fast_clean_exit(idx, lived, w.queue_at_spawn.clone());
                // Idle until a queue check says otherwise (logged once confirmed empty).
                self.request_queue();
            }
            _ => {
                if self.death(idx, now, w.started) {
                    self.spawn_in(idx, now);
                }
            }
        }
    }

    /// A worker that exits 0 before `fast_death_s` while the queue looked non-empty may
    /// have found nothing it could claim (whatever the count said). Its slot idles until
    /// the queue differs from what it was when that worker started: a worker that took an
    /// issue changed it, so it is respawned after the next queue check; one that found
    /// nothing claimable left it as it was, so it waits instead of respawning in a loop.
    fn note_fast_clean_exit(
        &mut self,
        idx: usize,
        lived: Duration,
        queue_at_spawn: Option<BTreeSet<u64>>,
    ) {
        if lived >= self.pool.params.fast_death {
            return;
        }
        let Some(seen) = queue_at_spawn.filter(|s| !s.is_empty()) else {
            return;
        };
        let Some(slot) = self.pool.slots.get_mut(&idx) else {
            return;
        };
        slot.unclaimable = Some(Unclaimable {
            seen,
            lived_s: lived.as_secs_f64(),
            confirmed: false,
        });
    }
}
