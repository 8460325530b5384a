//! Timers: the tick (heartbeat, resize, queue, stalls), circuit probes, group cleanup.

use std::time::{Duration, Instant};

use super::*;

/// How often, at most, the workers' CPU and memory are read (sooner when `stall_s` is short).
const USAGE_EVERY: Duration = Duration::from_secs(60);

/// When the periodic work is next due: the tick, and the workers' usage reading it does
/// less often. One part because only the tick reads and moves them.
pub(super) struct Timers {
    pub(super) next_tick: Instant,
    /// When the workers' CPU and memory were last read.
    pub(super) usage_read_at: Option<Instant>,
    /// Whether the workers are the built-in one, whose own CPU is not the agent's progress.
    pub(super) agent_only: bool,
}

impl Timers {
    pub(super) fn new(now: Instant, tick_s: u64) -> Self {
        Timers {
            next_tick: crate::timeutil::deadline(now, Duration::from_secs(tick_s)),
            usage_read_at: None,
            agent_only: false,
        }
    }
}

impl Fleet {
    // ---- timers ----

    pub fn next_deadline(&self, now: Instant) -> Instant {
        let mut d = self.timers.next_tick;
        let held = self.guards.slot_probes_held();
        for s in self.pool.slots.values() {
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
            self.holds.held.as_ref().map(|(_, at)| *at),
        ]
        .into_iter()
        .flatten()
        {
            d = d.min(g);
        }
        if let Some(r) = self.procs.reaper.next_deadline() {
            d = d.min(r);
        }
        if let Some(k) = self.procs.next_stray_kill() {
            d = d.min(k);
        }
        // A stop sweeps every stray itself; the repeated searches wait for no stop.
        if self.stopping.is_none()
            && let Some(r) = self.procs.next_stray_retry()
        {
            d = d.min(r);
        }
        if let Some(s) = self.stopping {
            d = d.min(s.give_up_at).min(now + Duration::from_millis(100));
        } else if self.view.unidle_backlog.0 > 0 {
            d = d.min(now + UNIDLE_EVERY);
        }
        d.max(now)
    }

    /// Runs whatever is due: group cleanup, circuit probes, the tick.
    pub fn service(&mut self, now: Instant) {
        let done = self.procs.reaper.poll(&mut *self.procs.children, now);
        for d in &done {
            tracing::debug!(leader = d.leader, killed = d.killed, "worker group gone");
        }
        self.finish_cgroups(&done);
        if self.stopping.is_some() {
            self.procs.pending_release.clear();
            return;
        }
        self.clean_after(&done, now);
        self.retry_strays(now);
        self.release_claims(&done);
        self.resume_if_due(now);
        self.hold_due(now);
        self.wake_backlog(now);
        self.fleet_circuit_due(now);
        self.circuits(now);
        if now >= self.timers.next_tick {
            self.timers.next_tick =
                crate::timeutil::deadline(now, Duration::from_secs(self.timing.tick_s));
            self.tick(now);
        }
    }

    fn circuits(&mut self, now: Instant) {
        let held = self.guards.slot_probes_held();
        let idxs: Vec<usize> = self.pool.slots.keys().copied().collect();
        for idx in idxs {
            let Some(slot) = self.pool.slots.get_mut(&idx) else {
                continue;
            };
            match slot.phase {
                Phase::CircuitOpen if !held && slot.circuit.probe_due(now) => {
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
        let stop_file = self.layout.supervisor_stop();
        match crate::fsutil::regular_file_present(&stop_file) {
            Ok(true) => {
                self.begin_stop(0, "stop file", now);
                return;
            }
            Ok(false) => self.record.stop_file_reported = None,
            // Not a stop request: reported once, then ignored.
            Err(e) => {
                let msg = format!("{}: {e}; not a stop request, ignored", stop_file.display());
                if self.record.stop_file_reported.as_deref() != Some(msg.as_str()) {
                    self.log(Event::now(kind::ERROR, msg.clone()));
                    self.record.stop_file_reported = Some(msg);
                }
            }
        }
        self.apply_resize(now);
        self.apply_slot_control(now);
        self.request_queue();
        self.check_stalls(now);
        self.check_unwatched_adopted(now);
        self.search_strays(now);
        self.reap_orphans();
        let snap = self.snapshot(now);
        self.write_state(&snap);
        self.record.dirty = false;
        let (deaths, respawned) = self.churn.take_tick();
        let counts = TickCounts {
            slots: snap.slots.total,
            respawned,
            deaths,
            parked: snap.slots.parked,
            idle_parked: self.pool.slots.values().filter(|s| s.is_idle()).count(),
            ready: self.view.ready.unwrap_or(0),
            busy: snap.slots.busy,
            free: snap.slots.free,
        };
        let line = texts::tick(&counts);
        self.record.tick_line = Some(line.clone());
        self.log(Event::now(kind::TICK, line));
    }

    // ---- stalls ----

    /// The CPU and memory of every worker's tree (one `/proc` read and one sysinfo read
    /// of just those processes); a tree whose CPU time moved made progress.
    fn measure_workers(&mut self, now: Instant) {
        // A `/proc` read and a sysinfo read of every worker's tree cost most of an idle
        // tick at a large fleet: once a minute is enough for `status` and for a stall
        // threshold measured in minutes.
        // Often enough for the stall check to see a computing tree move well inside
        // `stall_s`.
        let every = USAGE_EVERY.min(Duration::from_secs((self.timing.stall_s / 4).max(1)));
        if self
            .timers
            .usage_read_at
            .is_some_and(|t| now.saturating_duration_since(t) < every)
        {
            return;
        }
        let previous_read = self.timers.usage_read_at.replace(now);
        let leaders: Vec<i32> = self
            .pool
            .slots
            .values()
            .filter_map(|s| s.worker().map(|w| w.pid))
            .collect();
        if leaders.is_empty() {
            return;
        }
        let usage = self.procs.children.usage(&leaders);
        let now_e = now_epoch();
        let (agent_only, floor) = (self.timers.agent_only, self.timing.stall_cpu_floor_permille);
        for slot in self.pool.slots.values_mut() {
            let Phase::Running(w) = &mut slot.phase else {
                continue;
            };
            let u = usage.get(&w.pid).copied();
            // Under the built-in worker the agent's processes are the work; the worker's
            // own polling is not. A custom worker's whole tree counts.
            let work = |u: crate::supervisor::usage::Usage| {
                if agent_only { u.agent_cpu_ms } else { u.cpu_ms }
            };
            if let (Some(u), Some(before), Some(t)) = (u, w.usage, previous_read) {
                let used = work(u).saturating_sub(work(before));
                let wall =
                    u64::try_from(now.saturating_duration_since(t).as_millis()).unwrap_or(u64::MAX);
                if stall::cpu_progressed(used, wall, floor) {
                    w.cpu_moved_epoch = now_e;
                }
            }
            slot.shown.cpu_permille = u
                .and_then(|u| cpu_permille(w, u, previous_read, now))
                .map(|c| (w.pid, c));
            w.usage = u;
        }
    }

    fn check_stalls(&mut self, now: Instant) {
        self.measure_workers(now);
        let now_e = now_epoch();
        let (stall_s, kill_s) = (self.timing.stall_s, self.timing.stall_kill_s);
        let idxs: Vec<usize> = self.pool.slots.keys().copied().collect();
        for idx in idxs {
            let Some(slot) = self.pool.slots.get_mut(&idx) else {
                continue;
            };
            let Phase::Running(w) = &mut slot.phase else {
                continue;
            };
            let attempt = stall::current_attempt(&self.layout, &w.id);
            w.issue = attempt.as_ref().map(|a| a.issue);
            note_title(&mut slot.shown, attempt.as_ref());
            w.progress_epoch = stall::progress_epoch(w.started_epoch, &w.log, attempt.as_ref())
                .max(w.cpu_moved_epoch);
            self.record.last_progress_epoch = self.record.last_progress_epoch.max(w.progress_epoch);
            if w.kill.is_some() {
                continue;
            }
            let (pid, own, id, group) = (
                w.pid,
                w.own_child,
                w.id.clone(),
                group_of(&*self.procs.children, w),
            );
            let ev = match stall::progress(now_e, w.progress_epoch, stall_s, kill_s) {
                stall::Progress::Kill { idle_s } => {
                    w.kill = Some(KillReason::Stall);
                    // Marked before the signal, so the worker that gives its issue back
                    // on SIGTERM records the attempt as stalled (a failure).
                    if let Some(a) = &attempt {
                        let mark = a.dir.join(crate::attempt_state::STALL_KILLED_FILE);
                        if let Err(e) = crate::fsutil::atomic_write(&mark, b"") {
                            self.record
                                .journal
                                .write(Event::now(kind::ERROR, format!("{}: {e}", mark.display())));
                        }
                    }
                    self.procs.reaper.terminate(
                        &mut *self.procs.children,
                        pid,
                        group,
                        own,
                        false,
                        now,
                    );
                    Event::now(
                        kind::STALL_KILL,
                        format!(
                            "worker {id} made no progress for {idle_s}s (kill at {kill_s}s): killing its process group"
                        ),
                    )
                }
                stall::Progress::Stalled { idle_s } if !w.stalled => {
                    w.stalled = true;
                    Event::now(
                        kind::STALLED,
                        format!("worker {id} stalled: no progress for {idle_s}s"),
                    )
                }
                stall::Progress::Progressing if w.stalled => {
                    w.stalled = false;
                    Event::now(kind::PROGRESS, format!("worker {id} progressing again"))
                }
                _ => continue,
            };
            self.log(ev.slot(idx).pid(pid));
        }
    }
}

/// Longest issue title kept for `status` (the whole title reaches the agent as a file).
const TITLE_MAX_CHARS: usize = 200;

/// The tree's CPU use in thousandths of a core: over the interval since the previous read
/// when this worker was measured then, else since its start. The supervisor computes it
/// because only it knows when each read was taken; a reader of `state.toon` would divide
/// by the wrong interval.
fn cpu_permille(
    w: &LiveWorker,
    u: crate::supervisor::usage::Usage,
    previous_read: Option<Instant>,
    now: Instant,
) -> Option<u64> {
    let (used_ms, since) = match (w.usage, previous_read) {
        (Some(before), Some(t)) => (u.cpu_ms.saturating_sub(before.cpu_ms), t),
        _ => (u.cpu_ms, w.started),
    };
    let wall_ms = u64::try_from(now.saturating_duration_since(since).as_millis()).ok()?;
    (wall_ms > 0).then(|| used_ms.saturating_mul(1000) / wall_ms)
}

/// Remembers the title of the issue `attempt` works, read from its `afk.state.json` once
/// per issue (again only while the worker has not recorded it yet).
fn note_title(shown: &mut super::super::slot::Shown, attempt: Option<&stall::Attempt>) {
    let Some(a) = attempt else {
        return;
    };
    if shown.title.as_ref().is_some_and(|(n, _)| *n == a.issue) {
        return;
    }
    let title = crate::attempt_state::AttemptState::read(&a.dir)
        .ok()
        .flatten()
        .and_then(|st| st.current)
        .filter(|c| c.number.is_none_or(|n| n == a.issue))
        .and_then(|c| c.title)
        .filter(|t| !t.trim().is_empty());
    if let Some(t) = title {
        let t = match t.char_indices().nth(TITLE_MAX_CHARS) {
            Some((end, _)) => format!("{}…", &t[..end]),
            None => t,
        };
        shown.title = Some((a.issue, t));
    }
}
