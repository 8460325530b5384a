//! The fleet: every slot's state machine and what the loop does on each event.
//!
//! Single-threaded by design: the event loop turns each source (a worker's pidfd, a
//! signal, a finished tracker call, a timer) into a [`Msg`] or a call here, and every
//! decision is taken here, in order, so no two transitions can race. Work that blocks
//! (tracker calls) runs on the runtime's blocking pool and comes back as a [`Msg`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::UnboundedSender;

use super::children::{Children, Os, Started};
use super::circuit::{self, AfterDeath};
use super::journal::Journal;
use super::reaper::{Done, Group, Reaper};
use super::release::{self, DeadWorker};
use super::resize::{self, Found, Resize};
use super::slot::{KillReason, LiveWorker, Phase, Slot, Unclaimable};
use super::spawn::{self, ExitKind, SpawnSpec};
use super::stall;
use super::state_file::{self, Churn, ShrinkMode, SlotCounts, SlotDetail, SlotPid, StateFile};
use super::texts::{self, TickCounts, kind};
use crate::config::{Config, Timing};
use crate::fsutil::{atomic_write, remove_file_if_exists};
use crate::layout::Layout;
use crate::process;
use crate::timeutil::{date_utc, epoch_secs, now_epoch, now_rfc3339_millis};
use crate::toonl::Event;
use crate::tracker::Tracker;

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
    Queue(Result<BTreeSet<u64>, String>),
    /// The fleet is paused for a rate limit (read from the pause file): the queue check
    /// that found it did not call the tracker.
    Paused(crate::pause::Pause),
    /// The pause file could not be read (it pauses nothing): reported once.
    PauseFile(String),
    /// Open issues labelled `afk:quarantined`, counted beside a queue check.
    Quarantined(u64),
    Log(Event),
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
}

pub struct Fleet {
    layout: Layout,
    timing: Timing,
    argv: Vec<String>,
    runner: String,
    me: (i32, u64),
    journal: Journal,
    tx: UnboundedSender<Msg>,
    queue_inflight: bool,
    queue_again: bool,
    slots: BTreeMap<usize, Slot>,
    target: usize,
    shrink_mode: ShrinkMode,
    params: circuit::Params,
    reaper: Reaper,
    ready: Option<u64>,
    /// The claimable issues at the last successful queue check.
    ready_set: Option<BTreeSet<u64>>,
    churn_deaths: VecDeque<Instant>,
    churn_respawns: VecDeque<Instant>,
    tick_deaths: usize,
    tick_respawns: usize,
    /// The last tick line not yet taken by the service manager's `STATUS=`.
    tick_line: Option<String>,
    resize_reported: Option<String>,
    /// The last report of something not a regular file at the stop sentinel's path.
    stop_file_reported: Option<String>,
    /// The last tracker failure logged, so a tracker that stays down is logged once.
    tracker_error: Option<String>,
    /// Likewise for a heartbeat that cannot be written (disk full, lane removed).
    state_error: Option<String>,
    last_progress_epoch: u64,
    stopping: Option<Stopping>,
    /// Workers with no pidfd watch (the kernel has none, or registering it failed): own
    /// ones are checked on every SIGCHLD, adopted ones every tick.
    unwatched: Vec<(i32, u64)>,
    next_tick: Instant,
    /// Something was logged (every transition is) since the last heartbeat.
    dirty: bool,
    /// For the queue check and giving a dead worker's claimed issues back; the error when
    /// the tracker could not be opened.
    tracker: Result<Arc<dyn Tracker>, String>,
    /// Dead workers whose claims are released once their process group is gone.
    pending_release: Vec<DeadWorker>,
    /// When the stop first found descendants that escaped their worker's group.
    strays_since: Option<Instant>,
    /// Ended workers' ids (and whether each was our own child) by pid, until their group is
    /// gone: then their escaped descendants (found by `RED_AFK_WORKER_ID` in their
    /// environment) are terminated.
    ended: HashMap<i32, (String, bool)>,
    /// Workers whose group ended since the last tick: leader, id, our own child; their
    /// escaped descendants are searched for at the tick.
    stray_search: Vec<(i32, String, bool)>,
    /// Escaped descendants sent SIGTERM, and when SIGKILL is due.
    stray_kills: Vec<(process::Proc, Instant)>,
    /// Workers started by this supervisor: the last part of every worker id, so an id is
    /// never reused even when a slot is retired and created again.
    spawn_seq: u64,
    /// Retired slots, kept so a slot that comes back keeps its circuit and its park.
    retired: HashMap<usize, Slot>,
    /// Slots a queue check said to wake that are not woken yet, and the queue depth it saw.
    unidle_backlog: (usize, u64),
    /// Every process action goes through here (the OS, or a test double).
    children: Box<dyn Children>,
    /// When the workers' CPU and memory were last read.
    usage_read_at: Option<Instant>,
    /// How the boot suite ended, for `status`.
    boot_suite: Option<state_file::BootSuite>,
    /// The fleet-wide rate-limit pause in force and when it ends (`crate::pause`).
    paused: Option<(crate::pause::Pause, Instant)>,
    /// The last unreadable pause file reported.
    pause_file_error: Option<String>,
    /// Open `afk:quarantined` issues at the last count, and when it was asked for.
    quarantined: Option<u64>,
    quarantine_asked: Option<Instant>,
    /// The fleet-wide circuit (`fleet_circuit`).
    fleet_circuit: super::fleet_circuit::FleetCircuit,
    /// Each slot's last exit and log, for the fleet circuit's reason.
    last_exits: BTreeMap<usize, (String, std::path::PathBuf)>,
}

mod guards;
mod scaling;
mod stop;
#[cfg(test)]
mod tests;
mod tick;

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
            params: circuit::Params::from_timing(&timing),
            reaper: Reaper::new(Duration::from_secs(timing.stop_grace_s)),
            next_tick: crate::timeutil::deadline(
                Instant::now(),
                Duration::from_secs(timing.tick_s),
            ),
            timing,
            argv,
            runner: config.worker.runner.clone(),
            me,
            journal,
            queue_inflight: false,
            queue_again: false,
            slots: BTreeMap::new(),
            target: config.fleet.workers,
            shrink_mode: ShrinkMode::default(),
            ready: None,
            ready_set: None,
            churn_deaths: VecDeque::new(),
            churn_respawns: VecDeque::new(),
            tick_deaths: 0,
            tick_respawns: 0,
            tick_line: None,
            resize_reported: None,
            stop_file_reported: None,
            tracker_error: None,
            state_error: None,
            last_progress_epoch: now_epoch(),
            stopping: None,
            unwatched: Vec::new(),
            dirty: true,
            tracker: Err("not opened yet".into()),
            pending_release: Vec::new(),
            strays_since: None,
            ended: HashMap::new(),
            stray_search: Vec::new(),
            stray_kills: Vec::new(),
            spawn_seq: 0,
            retired: HashMap::new(),
            unidle_backlog: (0, 0),
            children: Box::new(Os::new(tx.clone())),
            usage_read_at: None,
            boot_suite: None,
            paused: None,
            pause_file_error: None,
            quarantined: None,
            quarantine_asked: None,
            fleet_circuit: super::fleet_circuit::FleetCircuit::new(
                config.timing.fleet_circuit_fraction,
            ),
            last_exits: BTreeMap::new(),
            tx,
        }
    }

    /// The fleet with its processes handled by `children` instead of the OS (a test
    /// double).
    pub fn with_children(mut self, children: Box<dyn Children>) -> Self {
        self.children = children;
        self
    }

    /// The tracker the queue is checked and dead workers' claims are released through.
    pub fn set_tracker(&mut self, tracker: Result<Arc<dyn Tracker>, String>) {
        self.tracker = tracker;
    }

    /// Releases the claims of dead workers whose process group is now confirmed gone, on
    /// the blocking pool; its events come back as [`Msg::Log`].
    fn release_claims(&mut self, done: &[Done]) {
        if done.is_empty() || self.pending_release.is_empty() {
            return;
        }
        let (ready, rest): (Vec<DeadWorker>, Vec<DeadWorker>) =
            std::mem::take(&mut self.pending_release)
                .into_iter()
                .partition(|w| done.iter().any(|d| d.leader == w.pid));
        self.pending_release = rest;
        let Ok(tracker) = self.tracker.clone() else {
            return;
        };
        for w in ready {
            if release::claims_of(&self.layout, &w).is_empty() {
                continue;
            }
            let (layout, tx, tracker) = (self.layout.clone(), self.tx.clone(), tracker.clone());
            self.blocking(move || {
                for ev in release::release(&layout, tracker.as_ref(), &w) {
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

    pub fn log(&mut self, ev: Event) {
        if ev.kind != kind::TICK {
            self.dirty = true;
        }
        self.journal.write(ev);
    }

    /// Writes the heartbeat if a transition happened since the last one.
    pub fn heartbeat_if_changed(&mut self, now: Instant) {
        if self.dirty {
            self.heartbeat(now);
        }
    }

    /// The tick line written since the last call, if any (for the service manager).
    pub fn take_tick_line(&mut self) -> Option<String> {
        self.tick_line.take()
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
            let msg = texts::takeover(adopted, dead, self.target);
            self.log(Event::now(kind::TAKEOVER, msg));
        }
        let (t, m) = (self.target, self.shrink_mode);
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
        }) = self.children.adopt(pid, start)
        else {
            self.log(
                Event::now(kind::ERROR, "adopted worker ended before it was watched")
                    .slot(a.slot)
                    .pid(pid),
            );
            return;
        };
        if !watched {
            self.unwatched.push((pid, start));
        }
        let mut slot = Slot::new(a.slot, self.params);
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
        });
        self.slots.insert(a.slot, slot);
    }

    // ---- spawning ----

    /// Workers that count against the target: live, in a slot that is not retiring.
    fn live_in_target(&self) -> usize {
        self.slots
            .values()
            .filter(|s| s.worker().is_some() && !s.retiring)
            .count()
    }

    /// Starts a worker in slot `idx`. A worker that cannot even start died fast; the
    /// circuit decides whether to try again at once or park the slot.
    fn spawn_in(&mut self, idx: usize, now: Instant) {
        loop {
            if self.stopping.is_some() || idx >= self.target {
                return;
            }
            // A paused fleet starts nothing that would claim (the slot idles until the
            // resume's queue check), and an open fleet circuit only its one probe.
            if self.paused.is_some() || !self.fleet_circuit.may_spawn(idx) {
                return;
            }
            let Some(slot) = self.slots.get(&idx) else {
                return;
            };
            if slot.worker().is_some() {
                return;
            }
            if self.live_in_target() >= self.target {
                self.log(
                    Event::now(
                        kind::ERROR,
                        format!(
                            "refusing to spawn: {} live workers already meet the target {}",
                            self.live_in_target(),
                            self.target
                        ),
                    )
                    .slot(idx),
                );
                return;
            }
            let Some(slot) = self.slots.get_mut(&idx) else {
                return;
            };
            slot.unclaimable = None;
            slot.spawns += 1;
            if slot.spawns > 1 {
                slot.restarts += 1;
                self.tick_respawns += 1;
                self.churn_respawns.push_back(now);
            }
            self.spawn_seq += 1;
            let id = format!("sup-{}-slot-{idx}-{}", self.me.0, self.spawn_seq);
            let log = self.layout.slot_log(&date_utc(SystemTime::now()), idx);
            let env = spawn::worker_env(idx, &id, &self.runner, &self.layout.retire_file(idx));
            let spec = SpawnSpec {
                argv: &self.argv,
                cwd: self.layout.repo(),
                log: &log,
                env,
            };
            let queue_at_spawn = self.ready_set.clone();
            match self.children.spawn(&spec) {
                Ok(s) => {
                    let fd = s.pidfd.clone();
                    if !s.watched {
                        self.unwatched.push((s.pid, s.start));
                    }
                    if let Some(slot) = self.slots.get_mut(&idx) {
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
        self.tick_deaths += 1;
        self.churn_deaths.push_back(now);
        if self.fleet_circuit.probe_slot() == Some(idx) {
            // The fleet's probe could not even start.
            self.end_fleet_probe(idx, false, true, now);
            return false;
        }
        let window_s = self.timing.circuit_window_s;
        let fleet_open = self.fleet_circuit.is_open();
        let Some(slot) = self.slots.get_mut(&idx) else {
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
            .slots
            .values()
            .find(|s| s.worker().is_some_and(|w| w.pid == pid && w.start == start))
            .map(|s| s.index)
        else {
            // Not a current worker (already handled): only its group cleanup may be pending.
            self.reaper.leader_exited(pid);
            return;
        };
        let Some(slot) = self.slots.get_mut(&idx) else {
            return;
        };
        let Phase::Running(w) =
            std::mem::replace(&mut slot.phase, Phase::Idle { confirmed: false })
        else {
            return;
        };
        let retiring = slot.retiring;
        let group = self.children.group_for(w.pidfd.as_ref());
        self.reaper
            .terminate(&mut *self.children, w.pid, group, w.own_child, true, now);
        self.ended.insert(w.pid, (w.id.clone(), w.own_child));
        // A worker that did not end cleanly may hold claims it can no longer give back.
        // At a stop they are left to the next boot's orphan cleanup.
        if !matches!(exit, ExitKind::Code(0) | ExitKind::Code(78)) && self.stopping.is_none() {
            self.pending_release.push(DeadWorker {
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
        self.last_exits
            .insert(idx, (exit.to_string(), w.log.clone()));
        if self.stopping.is_some() {
            return;
        }
        if idx >= self.target {
            self.retire_slot(idx);
            return;
        }
        if self.fleet_circuit.probe_slot() == Some(idx) {
            let clean = matches!(exit, ExitKind::Code(0));
            let fatal = matches!(exit, ExitKind::Code(78));
            self.end_fleet_probe(idx, clean, !clean && !fatal, now);
            // A clean probe idles like any clean exit; 78 still parks its slot for good.
            if !clean && !fatal {
                return;
            }
        }
        if retiring || w.kill == Some(KillReason::Shrink) {
            // Grown back while its worker was being retired: within the target again.
            self.unretire(idx);
            self.spawn_in(idx, now);
            return;
        }
        if w.kill == Some(KillReason::Stall) {
            self.tick_deaths += 1;
            self.churn_deaths.push_back(now);
            self.spawn_in(idx, now);
            return;
        }
        match exit {
            ExitKind::Code(78) => {
                if let Some(slot) = self.slots.get_mut(&idx) {
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
                let met = if code == crate::exit::RATE_LIMITED {
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
            ExitKind::Code(0) => {
                let closed = self
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
        if lived >= self.params.fast_death {
            return;
        }
        let Some(seen) = queue_at_spawn.filter(|s| !s.is_empty()) else {
            return;
        };
        let Some(slot) = self.slots.get_mut(&idx) else {
            return;
        };
        slot.unclaimable = Some(Unclaimable {
            seen,
            lived_s: lived.as_secs_f64(),
            confirmed: false,
        });
    }

    pub fn on_queue(&mut self, result: Result<BTreeSet<u64>, String>, now: Instant) {
        self.queue_inflight = false;
        tracing::debug!(claimable = ?result.as_ref().map(BTreeSet::len), "queue checked");
        match result {
            Ok(set) => {
                let n = set.len() as u64;
                if self.tracker_error.take().is_some() {
                    self.log(Event::now(
                        kind::TRACKER_ERROR,
                        format!("ready-for-agent check works again: {n} open"),
                    ));
                }
                self.dirty |= self.ready != Some(n);
                self.ready = Some(n);
                // A slot idled on "nothing claimable" rejoins the others once the queue
                // differs from what its worker saw.
                let mut confirmed = Vec::new();
                for slot in self.slots.values_mut() {
                    match &mut slot.unclaimable {
                        Some(u) if u.seen != set => slot.unclaimable = None,
                        Some(u) if !u.confirmed => {
                            u.confirmed = true;
                            let msg = texts::nothing_claimable(slot.index, u.lived_s, u.seen.len());
                            confirmed.push((slot.index, msg));
                        }
                        _ => {}
                    }
                }
                for (idx, msg) in confirmed {
                    self.log(Event::now(kind::IDLE, msg).slot(idx));
                }
                self.ready_set = Some(set);
                let idle = match self.paused {
                    // A check answered just before the pause began: nothing wakes.
                    Some(_) => Vec::new(),
                    None => self.wakeable(),
                };
                let wake = usize::try_from(n).unwrap_or(usize::MAX).min(idle.len());
                // Slots that wake together would all claim, fetch and add worktrees at
                // once: a batch now, the rest a batch per loop turn (see `service`).
                let now_wake = wake.min(UNIDLE_PER_TURN);
                self.unidle_backlog = (wake - now_wake, n);
                for &idx in &idle[..now_wake] {
                    self.unidle(idx, n, now);
                }
                for &idx in &idle[wake..] {
                    if let Some(slot) = self.slots.get_mut(&idx)
                        && let Phase::Idle { confirmed } = &mut slot.phase
                        && !*confirmed
                    {
                        *confirmed = true;
                        let msg = format!(
                            "slot {idx} idle: worker exited 0 and no ready-for-agent issue is open"
                        );
                        self.log(Event::now(kind::IDLE, msg).slot(idx));
                    }
                }
            }
            Err(e) => {
                if self.tracker_error.as_deref() != Some(e.as_str()) {
                    self.log(Event::now(
                        kind::TRACKER_ERROR,
                        format!("ready-for-agent check failed, slot states kept: {e}"),
                    ));
                    self.tracker_error = Some(e);
                }
            }
        }
        if self.queue_again {
            self.queue_again = false;
            self.request_queue();
        }
    }

    /// Idle slots a queue with work would wake, lowest first.
    fn wakeable(&self) -> Vec<usize> {
        self.slots
            .values()
            .filter(|s| {
                s.is_idle() && s.index < self.target && !s.retiring && s.unclaimable.is_none()
            })
            .map(|s| s.index)
            .collect()
    }

    fn unidle(&mut self, idx: usize, ready: u64, now: Instant) {
        self.log(
            Event::now(
                kind::UNIDLE,
                format!("slot {idx} un-idled: ready-for-agent={ready}"),
            )
            .slot(idx),
        );
        self.spawn_in(idx, now);
    }

    /// The next batch of slots a queue check said to wake, at most [`UNIDLE_PER_TURN`].
    pub(super) fn wake_backlog(&mut self, now: Instant) {
        let (left, ready) = self.unidle_backlog;
        if left == 0 || self.stopping.is_some() || self.paused.is_some() {
            self.unidle_backlog = (0, ready);
            return;
        }
        let idle = self.wakeable();
        let batch = left.min(UNIDLE_PER_TURN).min(idle.len());
        self.unidle_backlog = (if batch == 0 { 0 } else { left - batch }, ready);
        for &idx in &idle[..batch] {
            self.unidle(idx, ready, now);
        }
    }

    /// Asks the tracker for the claimable issues, off the loop (a slow tracker never
    /// delays noticing a death); one check at a time, a request during one runs after it.
    fn request_queue(&mut self) {
        if self.queue_inflight {
            self.queue_again = true;
            return;
        }
        self.queue_inflight = true;
        let (layout, tx) = (self.layout.clone(), self.tx.clone());
        let tracker = self.tracker.clone();
        let count_quarantined = self
            .quarantine_asked
            .is_none_or(|t| t.elapsed() >= QUARANTINE_EVERY);
        if count_quarantined {
            self.quarantine_asked = Some(Instant::now());
        }
        self.blocking(move || {
            // The pause is read first: a paused fleet's queue check costs no call.
            let state_dir = layout.state();
            let paused = || match crate::pause::read(&state_dir) {
                Ok(Some(p)) if p.active_at(now_epoch()) => Some(p),
                Ok(_) => None,
                Err(e) => {
                    let _ = tx.send(Msg::PauseFile(e));
                    None
                }
            };
            if let Some(p) = paused() {
                let _ = tx.send(Msg::Paused(p));
                return;
            }
            if count_quarantined
                && let Ok(t) = &tracker
                && let Ok(q) =
                    t.list_open_with_label(crate::tracker::labels::QUARANTINED, QUEUE_LIMIT)
            {
                let _ = tx.send(Msg::Quarantined(q.len() as u64));
            }
            let r = match tracker {
                Ok(t) => t
                    .list_open_with_label(crate::tracker::labels::READY_FOR_AGENT, QUEUE_LIMIT)
                    .map(|v| super::run::claimable(&layout, &v))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("tracker unavailable: {e}")),
            };
            // A rate-limited answer has just recorded the pause (the gh backend does).
            if r.is_err()
                && let Some(p) = paused()
            {
                let _ = tx.send(Msg::Paused(p));
                return;
            }
            let _ = tx.send(Msg::Queue(r));
        });
    }

    /// SIGCHLD: our own workers that ended without a pidfd watch, and the orphans of the
    /// workers' trees reparented to us (the child subreaper).
    ///
    /// Where groups are signalled through pidfds, nothing is pinned: the kernel is asked
    /// for our zombie children one at a time (`waitid` without reaping) and each is reaped,
    /// a worker's as its exit. The first zombie that belongs to a command the supervisor
    /// runs itself (in our session; its own waiter reaps it) ends the pass, the next
    /// SIGCHLD or tick goes on. Elsewhere `/proc` is read, sparing the pinned leaders.
    pub fn on_sigchld(&mut self, now: Instant) {
        self.check_unwatched_children(now);
        if !process::pidfd_groups() {
            let mut keep = self.kept_children();
            keep.extend(self.reaper.leaders());
            self.children.reap_orphans(&keep);
            return;
        }
        // Bounded: each round reaps one zombie, and at most this many arrive per event.
        for _ in 0..4096 {
            let Some((pid, commands)) = self.children.next_zombie() else {
                return;
            };
            if let Some(start) = self.own_worker_start(pid) {
                self.own_child_ended(pid, start, now);
                continue;
            }
            if commands {
                return;
            }
            self.children.reap(pid);
        }
    }

    /// Our own worker `pid` (started at `start`) has ended: read how (reaping it unless its
    /// zombie pins its group id) and handle the exit.
    pub fn own_child_ended(&mut self, pid: i32, start: u64, now: Instant) {
        let pinned = self
            .slots
            .values()
            .filter_map(|s| s.worker())
            .find(|w| w.pid == pid && w.start == start)
            .is_none_or(|w| matches!(self.children.group_for(w.pidfd.as_ref()), Group::Pinned));
        if self.own_worker_start(pid) != Some(start) {
            return;
        }
        if let Some(kind) = self.children.exit_of(pid, pinned) {
            self.unwatched.retain(|u| u.0 != pid);
            self.on_exit(pid, start, kind, now);
        }
    }

    /// The start token of the running worker `pid` when it is our own child.
    fn own_worker_start(&self, pid: i32) -> Option<u64> {
        self.slots
            .values()
            .filter_map(|s| s.worker())
            .find(|w| w.pid == pid && w.own_child)
            .map(|w| w.start)
    }

    /// Own workers with no pidfd watch: checked on each SIGCHLD (no thread, no poll).
    fn check_unwatched_children(&mut self, now: Instant) {
        let own: Vec<(i32, u64)> = self
            .unwatched
            .iter()
            .copied()
            .filter(|(pid, start)| self.own_worker_start(*pid) == Some(*start))
            .collect();
        for (pid, start) in own {
            self.own_child_ended(pid, start, now);
        }
    }

    /// Adopted workers with no pidfd watch: checked by identity every tick.
    pub(super) fn check_unwatched_adopted(&mut self, now: Instant) {
        let ended: Vec<(i32, u64)> = self
            .unwatched
            .iter()
            .copied()
            .filter(|(pid, _)| self.own_worker_start(*pid).is_none())
            .collect::<Vec<_>>()
            .into_iter()
            .filter(|(pid, start)| !self.children.is_live(*pid, *start))
            .collect();
        for (pid, start) in ended {
            self.unwatched.retain(|u| u.0 != pid);
            self.on_exit(pid, start, ExitKind::Unknown, now);
        }
    }
}

/// How often, at most, the quarantined issues are counted (one tracker call).
const QUARANTINE_EVERY: Duration = Duration::from_secs(60);

/// Most open `ready-for-agent` issues counted per queue check.
const QUEUE_LIMIT: usize = 1000;

/// Most idle slots woken in one loop turn; the rest follow a turn later each.
pub(super) const UNIDLE_PER_TURN: usize = 16;

/// How soon the next batch of a wake-up follows.
pub(super) const UNIDLE_EVERY: Duration = Duration::from_millis(20);

impl Fleet {
    /// The orphans of the workers' trees, by reading `/proc` (pinned groups only).
    pub fn reap_orphans(&mut self) {
        if process::pidfd_groups() {
            self.on_sigchld(Instant::now());
            return;
        }
        let mut keep = self.kept_children();
        keep.extend(self.reaper.leaders());
        self.children.reap_orphans(&keep);
    }
}
