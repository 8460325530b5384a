//! Timers: the tick (heartbeat, resize, queue, stalls), circuit probes, group cleanup.

use std::time::{Duration, Instant};

use std::collections::HashMap;

use super::*;
use crate::event_log::Kind;
use crate::supervisor::core::event::{TickFacts, WorkerFiles};
use crate::supervisor::core::progress as stall;
use crate::supervisor::core::progress::Usage;

/// A running worker whose files the tick reads (see [`Fleet::progress_wanted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressQuery {
    pub pid: i32,
    pub worker_id: String,
    pub log: std::path::PathBuf,
    pub started_epoch: u64,
    /// The issue whose title is already known (not read again).
    pub title_of: Option<u64>,
}

/// How often a worker's tree's CPU and memory are read while it computes, or while it
/// nears its stall threshold (sooner when `stall_s` is short). Its first reading is one
/// such interval after its start.
const USAGE_EVERY: Duration = Duration::from_secs(60);

/// A tree whose CPU time did not move at its last readings is read at twice the interval
/// per still reading, up to this many times it: an idle fleet of 1,000 waiting workers
/// costs a few readings a minute, not a thousand.
const USAGE_STILL_STEPS: u32 = 3;

/// When the periodic work is next due: the tick. One part because only the tick moves it.
pub(super) struct Timers {
    pub(super) next_tick: Instant,
    /// Whether the workers are the built-in one, whose own CPU is not the agent's progress.
    pub(super) agent_only: bool,
}

impl Timers {
    pub(super) fn new(now: Instant, tick_s: u64) -> Self {
        Timers {
            next_tick: crate::timeutil::deadline(now, Duration::from_secs(tick_s)),
            agent_only: false,
        }
    }
}

impl Fleet {
    // ---- timers ----

    pub fn next_deadline(&self, now: Instant) -> Instant {
        let mut d = self.timers.next_tick;
        let held = self.guards.slot_probes_held();
        for s in self
            .pool
            .unsettled
            .iter()
            .filter_map(|i| self.pool.slots.get(i))
        {
            if held && matches!(s.phase, Phase::CircuitOpen) {
                // Its probe waits for the pause or the fleet circuit, whose own
                // deadlines wake the loop.
                continue;
            }
            if let Some(c) = s.circuit.next_deadline() {
                d = d.min(c);
            }
        }
        for g in [
            self.guards.pause_deadline(),
            self.guards.fleet_circuit_deadline(&self.pool.params),
            self.holds.ends_at(),
        ]
        .into_iter()
        .flatten()
        {
            d = d.min(g);
        }
        if let Some(r) = self.groups.reaper.next_deadline() {
            d = d.min(r);
        }
        if let Some(s) = self.stopping {
            d = d.min(s.give_up_at).min(now + Duration::from_millis(100));
        } else if self.view.unidle_backlog.0 > 0 {
            d = d.min(now + UNIDLE_EVERY);
        }
        d.max(now)
    }

    /// Runs whatever is due at the end of a loop turn: group cleanup, circuit probes,
    /// wake-ups (the tick is its own event, [`Fleet::tick_due`]).
    pub(super) fn service(&mut self, alive: &[(i32, bool)], now: Instant) {
        let alive: HashMap<i32, bool> = alive.iter().copied().collect();
        let (done, orders) = self
            .groups
            .reaper
            .poll(&|l| alive.get(&l).copied().unwrap_or(true), now);
        self.out.extend(orders.into_iter().map(Effect::Group));
        for d in &done {
            tracing::debug!(leader = d.leader, killed = d.killed, "worker group gone");
        }
        self.finish_cgroups(&done);
        if self.stopping.is_some() {
            self.groups.pending_release.clear();
            return;
        }
        self.clean_after(&done);
        // A cgroup being finished gives its claims back once its figures are read.
        let done: Vec<Done> = done
            .into_iter()
            .filter(|d| !self.groups.finishing.contains_key(&d.leader))
            .collect();
        self.release_claims(&done);
        self.resume_if_due(now);
        self.hold_due(now);
        self.wake_backlog(now);
        self.fleet_circuit_due(now);
        self.circuits(now);
    }

    fn circuits(&mut self, now: Instant) {
        let held = self.guards.slot_probes_held();
        // Only a slot whose circuit is open or probing has anything to do here; one that
        // closed (or went) leaves the set.
        let slots = &self.pool.slots;
        self.pool.unsettled.retain(|i| {
            slots
                .get(i)
                .is_some_and(|s| s.circuit.next_deadline().is_some())
        });
        let idxs: Vec<usize> = self.pool.unsettled.iter().copied().collect();
        for idx in idxs {
            let Some(slot) = self.pool.slots.get_mut(&idx) else {
                continue;
            };
            match slot.phase {
                Phase::CircuitOpen if !held && slot.circuit.probe_due(now) => {
                    if let Some((backoff, step)) = slot.circuit.start_probe(now) {
                        slot.phase = Phase::Idle { confirmed: true };
                        let msg = log_texts::half_open(idx, backoff.as_secs(), step);
                        self.log(line(Kind::CircuitHalfOpen, msg).slot(idx));
                        self.spawn_in(idx, now);
                    }
                }
                Phase::Running(_) => {
                    if let Some(lived) = slot.circuit.check_probe(now) {
                        let msg = log_texts::closed(idx, lived.as_secs());
                        self.log(line(Kind::CircuitClosed, msg).slot(idx));
                    }
                }
                _ => {}
            }
        }
    }

    /// Whether the tick is due: the driver then reads what [`Fleet::progress_wanted`]
    /// names and the control files, and feeds [`Event::Tick`].
    pub fn tick_due(&self, now: Instant) -> bool {
        self.stopping.is_none() && now >= self.timers.next_tick
    }

    /// The running workers whose files the tick at `now` reads: pid, worker id, slot log,
    /// start, and the issue whose title is known already (not read again). Only the slots
    /// that are due: a worker whose last sign of life is recent cannot be stalled, so its
    /// files are read with its CPU reading (refreshing `status`'s issue and title), and a
    /// worker whose issue is not known yet is asked for at every tick, but only once
    /// `has_dir` says it has a directory of attempts (the driver answers from one listing
    /// of the worker directories, made the first time it is asked): an idle fleet's tick
    /// costs no read and no query per worker.
    pub fn progress_wanted(
        &self,
        now: Instant,
        has_dir: impl Fn(&str) -> bool,
    ) -> Vec<ProgressQuery> {
        let now_e = self.epoch();
        let stall_s = self.timing.stall_s;
        self.pool
            .slots
            .values()
            .filter_map(|s| {
                let w = s.worker()?;
                let due = self.usage_due(w, now)
                    || w.seen.stalled
                    || now_e.saturating_sub(w.seen.last_sign()) >= stall_s;
                let issue_only = !due && w.seen.issue.is_none() && has_dir(&w.id);
                (due || issue_only).then(|| ProgressQuery {
                    pid: w.pid,
                    worker_id: w.id.clone(),
                    log: w.log.clone(),
                    started_epoch: w.started_epoch,
                    title_of: s.shown.title.as_ref().map(|(n, _)| *n),
                })
            })
            .collect()
    }

    /// The tick: stop file, resize, queue, stalls, orphans, heartbeat and the tick line.
    pub(super) fn tick(&mut self, facts: TickFacts, now: Instant) {
        self.timers.next_tick =
            crate::timeutil::deadline(now, Duration::from_secs(self.timing.tick_s));
        match facts.stop_file {
            Ok(true) => {
                self.begin_stop(crate::exit_code::OK, "stop file", now);
                return;
            }
            Ok(false) => self.record.stop_file_reported = None,
            // Not a stop request: reported once, then ignored.
            Err(msg) => {
                if self.record.stop_file_reported.as_deref() != Some(msg.as_str()) {
                    self.log(line(Kind::SupervisorError, msg.clone()));
                    self.record.stop_file_reported = Some(msg);
                }
            }
        }
        let files = facts.control;
        self.ask_retire_again();
        self.apply_scale(files.scale, now);
        self.apply_slot_control(files.slot_request, files.slot_ack, now);
        self.request_queue();
        self.check_stalls(facts.progress, facts.usage, now);
        self.adopted_gone(facts.gone, now);
        self.pool.prune_workers();
        self.search_strays();
        self.emit(Effect::ReapOrphans);
        let slots = self.slot_counts();
        if self.heartbeat_wanted(now) {
            self.heartbeat();
        }
        let (deaths, respawned) = self.churn.take_tick();
        let counts = TickCounts {
            slots: slots.total,
            respawned,
            deaths,
            parked: slots.parked,
            idle_parked: self.pool.slots.values().filter(|s| s.is_idle()).count(),
            ready: self.view.ready.unwrap_or(0),
            busy: slots.busy,
            free: slots.free,
        };
        let text = log_texts::tick(&counts);
        self.record.tick_line = Some(text.clone());
        self.log(line(Kind::SupervisorTick, text));
    }

    // ---- stalls ----

    /// The leaders whose CPU and memory this tick reads: only the workers whose reading
    /// is due ([`Fleet::usage_due`]), `None` when none is.
    pub fn usage_wanted(&self, now: Instant) -> Option<Vec<i32>> {
        let leaders: Vec<i32> = self
            .pool
            .slots
            .values()
            .filter_map(|s| s.worker())
            .filter(|w| self.usage_due(w, now))
            .map(|w| w.pid)
            .collect();
        (!leaders.is_empty()).then_some(leaders)
    }

    /// Whether `w`'s tree is read at the tick at `now`. The interval is once a minute (a
    /// quarter of `stall_s` when that is shorter): often enough for `status` and for the
    /// stall check to see a computing tree move well inside `stall_s`. A tree found still
    /// waits twice as long per still reading (up to 8 times), unless its worker nears
    /// the stall threshold (no sign of life for half of `stall_s`), where its CPU is the
    /// sign the check needs.
    pub(super) fn usage_due(&self, w: &LiveWorker, now: Instant) -> bool {
        let stall_s = self.timing.stall_s;
        let every = USAGE_EVERY.min(Duration::from_secs((stall_s / 4).max(1)));
        let near_stall =
            w.seen.stalled || self.epoch().saturating_sub(w.seen.last_sign()) >= stall_s / 2;
        let every = match near_stall {
            true => every,
            false => every * (1 << w.seen.still_reads.min(USAGE_STILL_STEPS)),
        };
        let since = w.seen.usage_read.unwrap_or(w.started);
        now.saturating_duration_since(since) >= every
    }

    /// The CPU and memory of the due workers' trees as the driver read them for this tick
    /// (when [`Fleet::usage_wanted`] asked); a tree whose CPU time moved made progress.
    fn measure_workers(&mut self, usage: Option<HashMap<i32, Usage>>, now: Instant) {
        let Some(usage) = usage else {
            return;
        };
        self.record.rows_moved = true;
        let now_e = self.epoch();
        let (agent_only, floor) = (self.timers.agent_only, self.timing.stall_cpu_floor_permille);
        let due: Vec<usize> = self
            .pool
            .slots
            .values()
            .filter(|s| s.worker().is_some_and(|w| self.usage_due(w, now)))
            .map(|s| s.index)
            .collect();
        for idx in due {
            let Some(slot) = self.pool.slots.get_mut(&idx) else {
                continue;
            };
            let Phase::Running(w) = &mut slot.phase else {
                continue;
            };
            let previous_read = w.seen.usage_read.replace(now);
            let u = usage.get(&w.pid).copied();
            // Under the built-in worker the agent's processes are the work; the worker's
            // own polling is not. A custom worker's whole tree counts.
            let work = |u: Usage| {
                if agent_only { u.agent_cpu_ms } else { u.cpu_ms }
            };
            // A worker of ours is first measured from its start, when its tree had used
            // nothing: else one busy from its first second showed no progress before its
            // second reading, and the stall clock (whole seconds) could count a spawn late
            // in its second as a second idle already.
            let since = match (w.seen.usage, previous_read) {
                (Some(before), Some(t)) => Some((work(before), t)),
                (None, None) if w.own_child => Some((0, w.started)),
                _ => None,
            };
            if let (Some(u), Some((before, t))) = (u, since) {
                let used = work(u).saturating_sub(before);
                let wall =
                    u64::try_from(now.saturating_duration_since(t).as_millis()).unwrap_or(u64::MAX);
                if stall::cpu_progressed(used, wall, floor) {
                    w.seen.cpu_moved_epoch = now_e;
                }
            }
            let still = matches!((u, w.seen.usage), (Some(u), Some(b)) if u.cpu_ms == b.cpu_ms);
            w.seen.still_reads = if still { w.seen.still_reads + 1 } else { 0 };
            slot.shown.cpu_permille = u
                .and_then(|u| cpu_permille(w, u, previous_read, now))
                .map(|c| (w.pid, c));
            w.seen.usage = u;
        }
    }

    fn check_stalls(
        &mut self,
        files: Vec<(i32, WorkerFiles)>,
        usage: Option<HashMap<i32, Usage>>,
        now: Instant,
    ) {
        self.measure_workers(usage, now);
        // A worker's issue, title and progress come from these files; without any, the walk
        // below would find nothing to look at in any slot.
        if files.is_empty() {
            return;
        }
        self.record.rows_moved = true;
        let mut files: HashMap<i32, WorkerFiles> = files.into_iter().collect();
        let now_e = self.epoch();
        let (stall_s, kill_s) = (self.timing.stall_s, self.timing.stall_kill_s);
        let idxs: Vec<usize> = self.pool.slots.keys().copied().collect();
        // First every slot's progress, then the judgement: whether a stall is one issue's
        // or the fleet's depends on the other slots at the same reading.
        let mut attempts: HashMap<usize, Option<stall::Attempt>> = HashMap::new();
        for &idx in &idxs {
            let Some(slot) = self.pool.slots.get_mut(&idx) else {
                continue;
            };
            let Phase::Running(w) = &mut slot.phase else {
                continue;
            };
            // A worker started since the driver read the files is read at the next tick.
            let Some(read) = files.remove(&w.pid) else {
                continue;
            };
            let attempt = read.attempt;
            w.seen.issue = attempt.as_ref().map(|a| a.issue);
            if let (Some(a), Some(t)) = (&attempt, read.title) {
                slot.shown.title = Some((a.issue, t));
            }
            w.seen.progress_epoch = read.files_epoch.max(w.seen.cpu_moved_epoch);
            self.record.last_progress_epoch =
                self.record.last_progress_epoch.max(w.seen.progress_epoch);
            attempts.insert(idx, attempt);
        }
        let fleet_wide = self.fleet_wide_stall(now_e, stall_s);
        for idx in idxs {
            let Some(attempt) = attempts.remove(&idx) else {
                continue;
            };
            let Some(slot) = self.pool.slots.get_mut(&idx) else {
                continue;
            };
            let Phase::Running(w) = &mut slot.phase else {
                continue;
            };
            if w.kill.is_some() {
                continue;
            }
            let (pid, own, id, group) = (
                w.pid,
                w.own_child,
                w.id.clone(),
                super::shutdown::group_for(self.groups.pidfd_groups, w),
            );
            let progress = stall::progress(now_e, w.seen.progress_epoch, stall_s, kill_s);
            // Once one slot reaches the kill while most busy slots stall, every stalling
            // slot is stopped at once as the provider's: none is blamed, none waits its turn.
            let stop = match (&progress, &fleet_wide) {
                (stall::Progress::Kill { idle_s }, _) => Some(*idle_s),
                (stall::Progress::Stalled { idle_s }, Some(fw)) if fw.kill_due => {
                    w.issue_known().then_some(*idle_s)
                }
                _ => None,
            };
            let ev = if let Some(idle_s) = stop {
                w.kill = Some(KillReason::Stall);
                let why = fleet_wide.as_ref().map(FleetWideStall::why);
                // Marked before the signal, so the worker that gives its issue back on
                // SIGTERM records the attempt as stalled, and whose fault it was.
                if let Some(a) = &attempt {
                    self.out.push(Effect::MarkStall {
                        attempt_dir: a.dir.clone(),
                        fleet_wide: why.clone(),
                    });
                }
                let out = &mut self.out;
                groups::terminate_into(&mut self.groups, out, pid, group, own, false, now);
                let whose = why.map_or(String::new(), |w| format!(" ({w})"));
                line(
                    Kind::SlotStallKill,
                    format!(
                        "worker {id} made no progress for {idle_s}s (kill at {kill_s}s): killing its process group{whose}"
                    ),
                )
            } else {
                match progress {
                    stall::Progress::Stalled { idle_s } if !w.seen.stalled => {
                        w.seen.stalled = true;
                        line(
                            Kind::SlotStalled,
                            format!("worker {id} stalled: no progress for {idle_s}s"),
                        )
                    }
                    stall::Progress::Progressing if w.seen.stalled => {
                        w.seen.stalled = false;
                        line(Kind::SlotProgress, format!("worker {id} progressing again"))
                    }
                    _ => continue,
                }
            };
            self.log(ev.slot(idx).pid(pid));
        }
    }

    /// Whether the slots' stalls at this reading are the fleet's: at least two slots on an
    /// issue and most of them without progress for `stall_s` (`docs/SPEC.md` §11.13).
    /// `kill_due` once one of them reached `stall_kill_s`.
    fn fleet_wide_stall(&self, now_e: u64, stall_s: u64) -> Option<FleetWideStall> {
        let (mut busy, mut stalling, mut kill_due) = (0usize, 0usize, false);
        for slot in self.pool.slots.values() {
            let Phase::Running(w) = &slot.phase else {
                continue;
            };
            if !w.issue_known() || w.kill.is_some() {
                continue;
            }
            busy += 1;
            let idle_s = now_e.saturating_sub(w.seen.progress_epoch);
            if idle_s >= stall_s {
                stalling += 1;
                kill_due |= idle_s >= self.timing.stall_kill_s;
            }
        }
        (stalling >= 2 && stalling * 2 > busy).then_some(FleetWideStall {
            stalling,
            busy,
            stall_s,
            kill_due,
        })
    }
}

/// Most busy slots stalling at one reading: the provider's, not the issues'.
struct FleetWideStall {
    stalling: usize,
    busy: usize,
    stall_s: u64,
    kill_due: bool,
}

impl FleetWideStall {
    fn why(&self) -> String {
        format!(
            "{} of {} busy slots made no progress for {}s or more: the provider's, not the issues'",
            self.stalling, self.busy, self.stall_s
        )
    }
}

/// The tree's CPU use in thousandths of a core: over the interval since the previous read
/// when this worker was measured then, else since its start. The supervisor computes it
/// because only it knows when each read was taken; a reader of `state.toon` would divide
/// by the wrong interval.
fn cpu_permille(
    w: &LiveWorker,
    u: Usage,
    previous_read: Option<Instant>,
    now: Instant,
) -> Option<u64> {
    let (used_ms, since) = match (w.seen.usage, previous_read) {
        (Some(before), Some(t)) => (u.cpu_ms.saturating_sub(before.cpu_ms), t),
        _ => (u.cpu_ms, w.started),
    };
    let wall_ms = u64::try_from(now.saturating_duration_since(since).as_millis()).ok()?;
    (wall_ms > 0).then(|| used_ms.saturating_mul(1000) / wall_ms)
}
