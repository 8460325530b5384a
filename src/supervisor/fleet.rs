//! The fleet: every slot's state machine and what the loop does on each event.
//!
//! Single-threaded by design: the watcher, signal, queue and periodic threads only send
//! [`Msg`]s, and every decision is taken here, in order, so no two transitions can race.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use super::circuit::{self, Verdict};
use super::journal::Journal;
use super::reaper::Reaper;
use super::resize::{self, Found, Resize};
use super::slot::{KillReason, Phase, Slot, Worker};
use super::spawn::{self, ExitKind, SpawnSpec};
use super::stall;
use super::state_file::{self, Churn, ShrinkMode, SlotCounts, SlotDetail, SlotPid, StateFile};
use super::texts::{self, TickCounts, kind};
use crate::boot::{BootError, BootReport};
use crate::config::{Config, Timing};
use crate::fsutil::{atomic_write, remove_file_if_exists};
use crate::layout::Layout;
use crate::timeutil::{date_utc, epoch_secs, now_epoch, now_rfc3339_millis};
use crate::toonl::Event;

/// What the helper threads tell the loop.
#[derive(Debug)]
pub enum Msg {
    Exited { pid: i32, start: u64, kind: ExitKind },
    Signal(i32),
    /// Open `ready-for-agent` issues, or why the tracker could not say.
    Queue(Result<u64, String>),
    Log(Event),
    Boot(Result<BootReport, BootError>),
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
    tx: Sender<Msg>,
    queue_tx: Sender<()>,
    queue_inflight: bool,
    queue_again: bool,
    slots: BTreeMap<usize, Slot>,
    target: usize,
    shrink_mode: ShrinkMode,
    params: circuit::Params,
    reaper: Reaper,
    ready: Option<u64>,
    churn_deaths: VecDeque<Instant>,
    churn_respawns: VecDeque<Instant>,
    tick_deaths: usize,
    tick_respawns: usize,
    resize_reported: Option<String>,
    /// The last tracker failure logged, so a tracker that stays down is logged once.
    tracker_error: Option<String>,
    last_progress_epoch: u64,
    stopping: Option<Stopping>,
    /// Own workers whose watcher thread could not start: checked every tick instead.
    unwatched: Vec<(i32, u64)>,
    next_tick: Instant,
    /// Something was logged (every transition is) since the last heartbeat.
    dirty: bool,
}

impl Fleet {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        layout: Layout,
        config: &Config,
        argv: Vec<String>,
        me: (i32, u64),
        journal: Journal,
        tx: Sender<Msg>,
        queue_tx: Sender<()>,
    ) -> Self {
        let timing = config.timing.clone();
        Fleet {
            layout,
            params: circuit::Params::from_timing(&timing),
            reaper: Reaper::new(Duration::from_secs(timing.stop_grace_s)),
            next_tick: Instant::now() + Duration::from_secs(timing.tick_s),
            timing,
            argv,
            runner: config.worker.runner.clone(),
            me,
            journal,
            tx,
            queue_tx,
            queue_inflight: false,
            queue_again: false,
            slots: BTreeMap::new(),
            target: config.fleet.workers,
            shrink_mode: ShrinkMode::default(),
            ready: None,
            churn_deaths: VecDeque::new(),
            churn_respawns: VecDeque::new(),
            tick_deaths: 0,
            tick_respawns: 0,
            resize_reported: None,
            tracker_error: None,
            last_progress_epoch: now_epoch(),
            stopping: None,
            unwatched: Vec::new(),
            dirty: true,
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

    pub fn stopping(&self) -> Option<Stopping> {
        self.stopping
    }

    // ---- start-up ----

    /// Takes over the live workers of a previous supervisor, then spawns every slot of the
    /// target that has none.
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
        let tx = self.tx.clone();
        let (pid, start) = (a.pid, a.start);
        if let Err(e) = spawn::watch_adopted(pid, start, move |kind| {
            let _ = tx.send(Msg::Exited { pid, start, kind });
        }) {
            self.log(
                Event::now(
                    kind::ERROR,
                    format!("cannot watch adopted worker: {e}; not adopted"),
                )
                .slot(a.slot)
                .pid(pid),
            );
            return;
        }
        let mut slot = Slot::new(a.slot, self.params);
        slot.spawns = a.restarts + 1;
        slot.restarts = a.restarts;
        slot.phase = Phase::Running(Worker {
            pid,
            start,
            id,
            started,
            started_epoch,
            own_child: false,
            log,
            kill: None,
            stalled: false,
            issue: None,
            progress_epoch: started_epoch,
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
            slot.spawns += 1;
            if slot.spawns > 1 {
                slot.restarts += 1;
                self.tick_respawns += 1;
                self.churn_respawns.push_back(now);
            }
            let id = format!("sup-{}-slot-{idx}-{}", self.me.0, slot.spawns);
            let log = self.layout.slot_log(&date_utc(SystemTime::now()), idx);
            let env = spawn::worker_env(idx, &id, &self.runner, &self.layout.retire_file(idx));
            let spec = SpawnSpec {
                argv: &self.argv,
                cwd: self.layout.repo(),
                log: &log,
                env,
            };
            match spawn::spawn(&spec) {
                Ok(s) => {
                    self.install_watcher(idx, s.pid, s.start);
                    if let Some(slot) = self.slots.get_mut(&idx) {
                        slot.phase = Phase::Running(Worker {
                            pid: s.pid,
                            start: s.start,
                            id: id.clone(),
                            started: now,
                            started_epoch: now_epoch(),
                            own_child: true,
                            log,
                            kill: None,
                            stalled: false,
                            issue: None,
                            progress_epoch: now_epoch(),
                        });
                    }
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

    fn install_watcher(&mut self, idx: usize, pid: i32, start: u64) {
        let tx = self.tx.clone();
        if let Err(e) = spawn::watch_child(pid, move |kind| {
            let _ = tx.send(Msg::Exited { pid, start, kind });
        }) {
            self.log(
                Event::now(
                    kind::ERROR,
                    format!("cannot start a watcher thread ({e}); checking each tick"),
                )
                .slot(idx)
                .pid(pid),
            );
            self.unwatched.push((pid, start));
        }
    }

    /// Records a death and applies the circuit's verdict. Returns whether to respawn now.
    fn death(&mut self, idx: usize, now: Instant, started: Instant) -> bool {
        self.tick_deaths += 1;
        self.churn_deaths.push_back(now);
        let window_s = self.timing.circuit_window_s;
        let Some(slot) = self.slots.get_mut(&idx) else {
            return false;
        };
        match slot.circuit.on_death(now, started) {
            Verdict::Respawn { .. } => true,
            Verdict::Tripped {
                fast_deaths,
                backoff,
                ..
            } => {
                slot.phase = Phase::CircuitOpen;
                let msg = texts::tripped(idx, fast_deaths, window_s, backoff.as_secs());
                self.log(Event::now(kind::CIRCUIT_TRIP, msg).slot(idx));
                false
            }
            Verdict::Reparked {
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
        let Phase::Running(w) = std::mem::replace(&mut slot.phase, Phase::Idle { confirmed: false })
        else {
            return;
        };
        let retiring = slot.retiring;
        self.reaper.terminate(w.pid, w.own_child, true, now);
        let lived = now.saturating_duration_since(w.started);
        self.log(
            Event::now(
                kind::EXIT,
                format!(
                    "worker {} {exit} after {:.1}s",
                    w.id,
                    lived.as_secs_f64()
                ),
            )
            .slot(idx)
            .pid(pid),
        );
        if self.stopping.is_some() {
            return;
        }
        if retiring || idx >= self.target || w.kill == Some(KillReason::Shrink) {
            self.retire_slot(idx);
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
                }
                self.log(Event::now(kind::PARKED, texts::fatal_parked(idx)).slot(idx));
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

    pub fn on_queue(&mut self, result: Result<u64, String>, now: Instant) {
        self.queue_inflight = false;
        match result {
            Ok(n) => {
                if self.tracker_error.take().is_some() {
                    self.log(Event::now(
                        kind::TRACKER_ERROR,
                        format!("ready-for-agent check works again: {n} open"),
                    ));
                }
                self.dirty |= self.ready != Some(n);
                self.ready = Some(n);
                let idle: Vec<usize> = self
                    .slots
                    .values()
                    .filter(|s| s.is_idle() && s.index < self.target && !s.retiring)
                    .map(|s| s.index)
                    .collect();
                let wake = usize::try_from(n).unwrap_or(usize::MAX).min(idle.len());
                for &idx in &idle[..wake] {
                    self.log(
                        Event::now(kind::UNIDLE, format!("slot {idx} un-idled: ready-for-agent={n}"))
                            .slot(idx),
                    );
                    self.spawn_in(idx, now);
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

    fn request_queue(&mut self) {
        if self.queue_inflight {
            self.queue_again = true;
            return;
        }
        if self.queue_tx.send(()).is_ok() {
            self.queue_inflight = true;
        }
    }

    /// SIGCHLD: reap orphans of the workers' trees.
    pub fn reap_orphans(&mut self) {
        let keep: HashSet<i32> = self
            .slots
            .values()
            .filter_map(|s| s.worker().filter(|w| w.own_child).map(|w| w.pid))
            .chain(self.unwatched.iter().map(|(p, _)| *p))
            .collect();
        self.reaper.reap_orphans(&keep);
    }

    // ---- stopping ----

    /// Starts stopping the fleet; a second request kills what is left at once.
    pub fn begin_stop(&mut self, code: i32, why: &str, now: Instant) {
        if self.stopping.is_some() {
            self.log(Event::now(
                kind::STOP,
                format!("{why} again: killing every remaining worker group now"),
            ));
            self.reaper.kill_all_now(now);
            return;
        }
        let grace = Duration::from_secs(self.timing.stop_grace_s);
        self.stopping = Some(Stopping {
            code,
            give_up_at: now + grace + Duration::from_secs(10),
        });
        let live: Vec<(i32, bool)> = self
            .slots
            .values_mut()
            .filter_map(|s| s.worker_mut())
            .map(|w| {
                w.kill = Some(KillReason::Stop);
                (w.pid, w.own_child)
            })
            .collect();
        self.log(Event::now(
            kind::STOP,
            format!("stopping fleet ({why}): {} workers", live.len()),
        ));
        for (pid, own) in live {
            self.reaper.terminate(pid, own, false, now);
        }
    }

    /// Every worker ended and every group is empty.
    pub fn stop_complete(&self) -> bool {
        self.slots.values().all(|s| s.worker().is_none()) && self.reaper.is_empty()
    }

    /// What is still alive when giving up on a stop.
    pub fn leftovers(&self) -> Vec<i32> {
        self.slots
            .values()
            .filter_map(|s| s.worker().map(|w| w.pid))
            .chain(self.reaper.leaders())
            .collect()
    }

    // ---- timers ----

    pub fn next_deadline(&self, now: Instant) -> Instant {
        let mut d = self.next_tick;
        for s in self.slots.values() {
            if let Some(c) = s.circuit.next_deadline() {
                d = d.min(c);
            }
        }
        if let Some(r) = self.reaper.next_deadline(now) {
            d = d.min(r);
        }
        if let Some(s) = self.stopping {
            d = d.min(s.give_up_at).min(now + Duration::from_millis(100));
        }
        d.max(now)
    }

    /// Runs whatever is due: group cleanup, circuit probes, the tick.
    pub fn service(&mut self, now: Instant) {
        self.reaper.poll(now);
        if self.stopping.is_some() {
            return;
        }
        self.circuits(now);
        if now >= self.next_tick {
            self.next_tick = now + Duration::from_secs(self.timing.tick_s);
            self.tick(now);
        }
    }

    fn circuits(&mut self, now: Instant) {
        let idxs: Vec<usize> = self.slots.keys().copied().collect();
        for idx in idxs {
            let Some(slot) = self.slots.get_mut(&idx) else {
                continue;
            };
            match slot.phase {
                Phase::CircuitOpen if slot.circuit.probe_due(now) => {
                    if let Some((backoff, step)) = slot.circuit.start_probe(now) {
                        slot.phase = Phase::Idle { confirmed: true };
                        let msg = texts::half_open(idx, backoff.as_secs(), step);
                        self.log(Event::now(kind::CIRCUIT_HALF_OPEN, msg).slot(idx));
                        self.spawn_in(idx, now);
                    }
                }
                Phase::Running(_) => {
                    if let Some(lived) = slot.circuit.check_probe(now) {
                        let msg = texts::closed(idx, lived.as_secs());
                        self.log(Event::now(kind::CIRCUIT_CLOSED, msg).slot(idx));
                    }
                }
                _ => {}
            }
        }
    }

    /// The tick: stop file, resize, queue, stalls, orphans, heartbeat and the tick line.
    pub fn tick(&mut self, now: Instant) {
        if self.layout.supervisor_stop().exists() {
            self.begin_stop(0, "stop file", now);
            return;
        }
        self.apply_resize(now);
        self.request_queue();
        self.check_stalls(now);
        self.check_unwatched();
        self.reap_orphans();
        let snap = self.snapshot(now);
        self.write_state(&snap);
        self.dirty = false;
        let counts = TickCounts {
            slots: snap.slots.total,
            respawned: self.tick_respawns,
            deaths: self.tick_deaths,
            parked: snap.slots.parked,
            idle_parked: self.slots.values().filter(|s| s.is_idle()).count(),
            ready: self.ready.unwrap_or(0),
            busy: snap.slots.busy,
            free: snap.slots.free,
        };
        self.tick_deaths = 0;
        self.tick_respawns = 0;
        self.log(Event::now(kind::TICK, texts::tick(&counts)));
    }

    fn check_unwatched(&mut self) {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        let mut ended = Vec::new();
        self.unwatched.retain(|&(pid, start)| {
            let kind = match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
                Ok(WaitStatus::Exited(_, c)) => ExitKind::Code(c),
                Ok(WaitStatus::Signaled(_, s, _)) => ExitKind::Signal(s as i32),
                Ok(_) => return true,
                Err(_) => ExitKind::Unknown,
            };
            ended.push((pid, start, kind));
            false
        });
        let now = Instant::now();
        for (pid, start, kind) in ended {
            self.on_exit(pid, start, kind, now);
        }
    }

    // ---- resize ----

    /// Reads `resize.toon` and converges the slots on it. A corrupt directive is reported
    /// once per distinct content and otherwise ignored.
    pub fn apply_resize(&mut self, now: Instant) {
        match resize::read(&self.layout.resize_file()) {
            Found::None => self.resize_reported = None,
            Found::Corrupt { raw, why } => {
                if self.resize_reported.as_deref() != Some(raw.as_str()) {
                    let msg = format!(
                        "{}: {why}; directive ignored, target stays {}",
                        self.layout.resize_file().display(),
                        self.target
                    );
                    self.log(Event::now(kind::ERROR, msg));
                    self.resize_reported = Some(raw);
                }
            }
            Found::Directive(Resize {
                target,
                shrink_mode,
                runner,
            }) => {
                self.resize_reported = None;
                if let Some(r) = runner
                    && r != self.runner
                {
                    self.log(Event::now(
                        kind::RESIZE,
                        format!("runner {} -> {r} for workers spawned from now on", self.runner),
                    ));
                    self.runner = r;
                }
                if (target, shrink_mode) != (self.target, self.shrink_mode) {
                    self.log(Event::now(
                        kind::RESIZE,
                        format!(
                            "resize: target {} -> {target} (shrink-mode={shrink_mode})",
                            self.target
                        ),
                    ));
                }
                self.reconcile(target, shrink_mode, now);
            }
        }
    }

    /// Converges on `target`: slots below it exist (a retiring one is kept instead of a new
    /// spawn), slots at or above it drain or are killed.
    fn reconcile(&mut self, target: usize, mode: ShrinkMode, now: Instant) {
        self.target = target;
        self.shrink_mode = mode;
        for idx in self.slots.keys().copied().filter(|i| *i >= target).collect::<Vec<_>>() {
            self.shrink_slot(idx, mode, now);
        }
        for idx in 0..target {
            match self.slots.get_mut(&idx) {
                Some(s) if s.retiring && s.worker().is_some_and(|w| w.kill.is_none()) => {
                    s.retiring = false;
                    let _ = remove_file_if_exists(&self.layout.retire_file(idx));
                    self.log(
                        Event::now(kind::UNRETIRE, format!("slot {idx} kept: within the target again"))
                            .slot(idx),
                    );
                }
                Some(_) => {}
                None => {
                    self.slots.insert(idx, Slot::new(idx, self.params));
                    self.spawn_in(idx, now);
                }
            }
        }
    }

    fn shrink_slot(&mut self, idx: usize, mode: ShrinkMode, now: Instant) {
        let retire_file = self.layout.retire_file(idx);
        let Some(slot) = self.slots.get_mut(&idx) else {
            return;
        };
        let was_retiring = slot.retiring;
        slot.retiring = true;
        let Some(w) = slot.worker_mut() else {
            self.retire_slot(idx);
            return;
        };
        if w.kill.is_some() {
            return;
        }
        match mode {
            ShrinkMode::HardKill => {
                w.kill = Some(KillReason::Shrink);
                let (pid, own, id) = (w.pid, w.own_child, w.id.clone());
                self.reaper.terminate(pid, own, false, now);
                self.log(
                    Event::now(kind::HARD_KILL, format!("slot {idx} surplus: stopping worker {id}"))
                        .slot(idx)
                        .pid(pid),
                );
            }
            ShrinkMode::DrainThenRetire if !was_retiring => {
                let (pid, id) = (w.pid, w.id.clone());
                if let Err(e) = atomic_write(&retire_file, b"") {
                    self.log(Event::now(kind::ERROR, format!("{}: {e}", retire_file.display())));
                }
                self.log(
                    Event::now(
                        kind::RETIRE,
                        format!("slot {idx} surplus: worker {id} finishes its issue, then the slot retires"),
                    )
                    .slot(idx)
                    .pid(pid),
                );
            }
            ShrinkMode::DrainThenRetire => {}
        }
    }

    fn retire_slot(&mut self, idx: usize) {
        if self.slots.remove(&idx).is_some() {
            let _ = remove_file_if_exists(&self.layout.retire_file(idx));
            self.log(Event::now(kind::RETIRED, format!("slot {idx} retired")).slot(idx));
        }
    }

    // ---- stalls ----

    fn check_stalls(&mut self, now: Instant) {
        let now_e = now_epoch();
        let (stall_s, kill_s) = (self.timing.stall_s, self.timing.stall_kill_s);
        let idxs: Vec<usize> = self.slots.keys().copied().collect();
        for idx in idxs {
            let Some(w) = self.slots.get_mut(&idx).and_then(Slot::worker_mut) else {
                continue;
            };
            let attempt = stall::current_attempt(&self.layout, &w.id);
            w.issue = attempt.as_ref().map(|a| a.issue);
            w.progress_epoch = stall::progress_epoch(w.started_epoch, &w.log, attempt.as_ref());
            self.last_progress_epoch = self.last_progress_epoch.max(w.progress_epoch);
            if w.kill.is_some() {
                continue;
            }
            let (pid, own, id) = (w.pid, w.own_child, w.id.clone());
            let ev = match stall::judge(now_e, w.progress_epoch, stall_s, kill_s) {
                stall::Verdict::Kill { idle_s } => {
                    w.kill = Some(KillReason::Stall);
                    self.reaper.terminate(pid, own, false, now);
                    Event::now(
                        kind::STALL_KILL,
                        format!("worker {id} made no progress for {idle_s}s (kill at {kill_s}s): killing its process group"),
                    )
                }
                stall::Verdict::Stalled { idle_s } if !w.stalled => {
                    w.stalled = true;
                    Event::now(
                        kind::STALLED,
                        format!("worker {id} stalled: no progress for {idle_s}s"),
                    )
                }
                stall::Verdict::Progressing if w.stalled => {
                    w.stalled = false;
                    Event::now(kind::PROGRESS, format!("worker {id} progressing again"))
                }
                _ => continue,
            };
            self.log(ev.slot(idx).pid(pid));
        }
    }

    // ---- the heartbeat ----

    pub fn snapshot(&mut self, now: Instant) -> StateFile {
        let window = Duration::from_secs(self.timing.circuit_window_s);
        for q in [&mut self.churn_deaths, &mut self.churn_respawns] {
            while q
                .front()
                .is_some_and(|t| now.saturating_duration_since(*t) > window)
            {
                q.pop_front();
            }
        }
        let busy = self.slots.values().filter(|s| s.worker().is_some()).count();
        let parked = self.slots.values().filter(|s| s.is_parked()).count();
        let total = self.slots.len();
        let sys_now = SystemTime::now();
        StateFile {
            ts: now_rfc3339_millis(),
            epoch: epoch_secs(sys_now),
            pid: self.me.0,
            pid_start_time: self.me.1,
            target: self.target,
            runner: self.runner.clone(),
            shrink_mode: self.shrink_mode,
            ready_for_agent: self.ready,
            slots: SlotCounts {
                busy,
                free: total - busy - parked,
                total,
                parked,
            },
            slot_pids: self
                .slots
                .values()
                .filter_map(|s| {
                    s.worker().map(|w| SlotPid {
                        slot: s.index,
                        pid: w.pid,
                        start: w.start,
                    })
                })
                .collect(),
            churn: Churn {
                deaths: self.churn_deaths.len(),
                respawns: self.churn_respawns.len(),
                window_s: self.timing.circuit_window_s,
            },
            last_progress_epoch: self.last_progress_epoch,
            slot_detail: self
                .slots
                .values()
                .map(|s| SlotDetail {
                    slot: s.index,
                    state: s.state_word().to_string(),
                    pid: s.worker().map(|w| w.pid),
                    worker_id: s.worker().map(|w| w.id.clone()),
                    started_epoch: s.worker().map(|w| w.started_epoch),
                    restarts: s.restarts,
                    issue: s.worker().and_then(|w| w.issue),
                })
                .collect(),
        }
    }

    pub fn write_state(&mut self, snap: &StateFile) {
        let path = self.layout.state_file();
        if let Err(e) = state_file::write(&path, snap) {
            self.log(Event::now(kind::ERROR, e.to_string()));
        }
    }

    /// Writes the heartbeat now (after transitions, so `status` is never a tick behind).
    pub fn heartbeat(&mut self, now: Instant) {
        self.dirty = false;
        let snap = self.snapshot(now);
        self.write_state(&snap);
    }

    pub fn state_path(&self) -> PathBuf {
        self.layout.state_file()
    }
}
