//! What the fleet tells: the event log's lines, and the heartbeat `state.toon` asked for
//! after every transition and at every tick (the driver writes both).

use std::time::Instant;

use crate::timeutil::rfc3339_millis;

use super::*;
use crate::event_log::Kind;

/// What only the heartbeat carries: whether a transition is not written
/// yet, the last tick line, the boot suite's end, the newest progress, and the failures
/// reported once (a heartbeat that cannot be written, a stop sentinel that is not a file,
/// a corrupt resize directive). One part because these are what the fleet has said or
/// must still say, and nothing decides by them.
pub(super) struct Record {
    /// Something was logged (every transition is) since the last heartbeat.
    pub(super) dirty: bool,
    /// Of that, something other than a worker's start, end or progress (a pause, a
    /// circuit, a resize, a stop): written at once, not after the heartbeat gap.
    pub(super) urgent: bool,
    /// The last tick line not yet taken by the service manager's `STATUS=`.
    pub(super) tick_line: Option<String>,
    /// How the boot suite ended, for `status`.
    pub(super) boot_suite: Option<state_file::BootSuite>,
    /// The newest sign of life of any worker, epoch seconds.
    pub(super) last_progress_epoch: u64,
    /// The last corrupt `resize.toon` reported (its cause and content).
    pub(super) resize_reported: Option<String>,
    /// The last slot-control request answered (its id) or corrupt file reported.
    pub(super) slot_control_seen: Option<String>,
    /// The last report of something not a regular file at the stop sentinel's path.
    pub(super) stop_file_reported: Option<String>,
    /// `cgroup` or `process-group (why)`, for `status`.
    pub(super) isolation: Option<String>,
    /// The last heartbeat written and when: a tick writes another only when it would say
    /// something else, or this one is [`HEARTBEAT_MAX_AGE`] old.
    pub(super) written: Option<(StateFile, Instant)>,
    /// A tick read figures shown per slot (a tree's usage, a worker's issue or title),
    /// which change no line of the event log: the next tick compares the slots' rows.
    pub(super) rows_moved: bool,
    /// Ticks until the rows are compared even though nothing said they moved.
    pub(super) rows_check_in: u32,
}

/// How many quiet ticks compare only the fleet-wide part of the heartbeat before one
/// compares every slot's row too: a row that changed in a way nothing flags (the figures a
/// tick reads are flagged) reaches `state.toon` within this many ticks. A row comparison
/// touches every slot's memory, a few milliseconds at 1,000 slots on a box that pages idle
/// memory out.
pub(super) const ROWS_CHECK_EVERY: u32 = 4;

/// How old the heartbeat may grow while nothing in it changes: `status` shows its age to a
/// person, who should not read a quiet fleet as a hung one (liveness itself is the pid
/// file's, `os/lock.rs`).
pub(super) const HEARTBEAT_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(300);

/// A line of the fleet's own for the event log, stamped when logged ([`Fleet::log`]).
pub(super) fn line(kind: Kind, msg: impl Into<String>) -> event_log::Record {
    event_log::Record {
        ts: String::new(),
        kind,
        slot: None,
        pid: None,
        issue: None,
        msg: msg.into(),
    }
}

impl Record {
    pub(super) fn new(epoch: u64) -> Self {
        Record {
            dirty: true,
            tick_line: None,
            boot_suite: None,
            last_progress_epoch: epoch,
            resize_reported: None,
            slot_control_seen: None,
            stop_file_reported: None,
            isolation: None,
            written: None,
            urgent: false,
            rows_moved: false,
            rows_check_in: ROWS_CHECK_EVERY,
        }
    }
}

/// The records a busy fleet makes by the dozen a second, whose heartbeat waits out the gap:
/// in cgroup mode every attempt's end adds its figures, which made each end urgent and a
/// churning fleet write its heartbeat five times a second instead of once (at 1,000
/// workers, the encoding of every slot was most of what a respawn cost beyond 16).
const CHURN: [Kind; 4] = [
    Kind::SlotSpawn,
    Kind::SlotExit,
    Kind::SlotProgress,
    Kind::SlotFigures,
];

impl Fleet {
    /// Logs `ev`, stamped with the event's time when it has none (a line of the fleet's
    /// own; one from a helper thread keeps its time).
    pub fn log(&mut self, mut ev: event_log::Record) {
        // A transition is logged, so a line asks for the heartbeat; the tick line and the
        // periodic tasks' results change nothing the heartbeat says.
        if ev.kind != Kind::SupervisorTick && ev.kind != Kind::SupervisorPeriodic {
            self.record.dirty = true;
            self.record.urgent |= !CHURN.contains(&ev.kind);
        }
        if ev.ts.is_empty() {
            ev.ts = rfc3339_millis(self.wall);
        }
        self.emit(Effect::Log(ev));
    }

    /// The wall-clock time of the event being handled, epoch seconds.
    pub(super) fn epoch(&self) -> u64 {
        epoch_secs(self.wall)
    }

    /// Whether a transition happened since the last heartbeat.
    pub fn heartbeat_due(&self) -> bool {
        self.record.dirty
    }

    /// Whether one of those is more than churn (see [`Record::urgent`]): the heartbeat is
    /// written at the end of this turn, whatever the gap.
    pub fn heartbeat_urgent(&self) -> bool {
        self.record.urgent
    }

    /// The heartbeat just taken could not be written: it is due again (the driver tries it
    /// a gap later), with whatever has changed by then.
    pub fn heartbeat_owed(&mut self) {
        self.record.dirty = true;
    }

    /// The heartbeat to write now: nothing is left unwritten after it.
    pub fn snapshot_written(&mut self, now: Instant) -> StateFile {
        self.record.dirty = false;
        self.record.urgent = false;
        self.record.rows_moved = false;
        self.record.rows_check_in = ROWS_CHECK_EVERY;
        let snap = self.snapshot(now);
        self.record.written = Some((snap.clone(), now));
        snap
    }

    /// Whether the tick's heartbeat must be written: a transition, a changed figure (a
    /// reading, the churn window, a queue count), or the last one is getting old. A quiet
    /// fleet's tick writes nothing.
    pub(super) fn heartbeat_wanted(&mut self, now: Instant) -> bool {
        if self.record.dirty {
            return true;
        }
        match &self.record.written {
            None => return true,
            Some((_, at)) if now.saturating_duration_since(*at) >= HEARTBEAT_MAX_AGE => {
                return true;
            }
            Some(_) => {}
        }
        let rows = self.record.rows_moved || self.record.rows_check_in <= 1;
        self.record.rows_moved = false;
        self.record.rows_check_in = match rows {
            true => ROWS_CHECK_EVERY,
            false => self.record.rows_check_in - 1,
        };
        let mut snap = self.snapshot_head(now);
        if rows {
            snap.slot_pids = self.slot_pid_rows();
            snap.slot_detail = self.slot_rows(now);
        }
        let Some((last, _)) = &mut self.record.written else {
            return true;
        };
        snap.ts.clone_from(&last.ts);
        snap.epoch = last.epoch;
        if rows {
            return snap != *last;
        }
        // The fleet-wide part alone: the last rows are set aside for the comparison.
        let pids = std::mem::take(&mut last.slot_pids);
        let detail = std::mem::take(&mut last.slot_detail);
        let changed = snap != *last;
        last.slot_pids = pids;
        last.slot_detail = detail;
        changed
    }

    /// The tick line written since the last call, if any (for the service manager).
    pub fn take_tick_line(&mut self) -> Option<String> {
        let line = self.record.tick_line.take()?;
        // A hold is what a person must see first (`agent paused: usage limit, …`).
        Some(match self.holds.words(self.epoch()) {
            Some(h) => format!("{h}; {line}"),
            None => line,
        })
    }

    pub fn snapshot(&mut self, now: Instant) -> StateFile {
        let mut snap = self.snapshot_head(now);
        snap.slot_pids = self.slot_pid_rows();
        snap.slot_detail = self.slot_rows(now);
        snap
    }

    /// The heartbeat but for its per-slot rows (left empty).
    fn snapshot_head(&mut self, now: Instant) -> StateFile {
        let churn = self.churn.in_window(now, self.timing.circuit_window_s);
        let slots = self.slot_counts();
        let sys_now = self.wall;
        StateFile {
            ts: rfc3339_millis(sys_now),
            epoch: epoch_secs(sys_now),
            pid: self.launch.me.0,
            pid_start_time: self.launch.me.1,
            target: self.pool.target,
            runner: self.launch.runner.clone(),
            shrink_mode: self.pool.shrink_mode,
            ready_for_agent: self.view.ready,
            ready_for_agent_unknown: match (&self.view.ready, &self.view.tracker_error) {
                (Some(_), _) => None,
                (None, Some(e)) => Some(format!(
                    "tracker check failed: {}",
                    crate::text::excerpt(&e.to_string())
                )),
                (None, None) => Some("no tracker check has answered yet".into()),
            },
            slots,
            slot_pids: Vec::new(),
            churn,
            last_progress_epoch: self.record.last_progress_epoch,
            slot_detail: Vec::new(),
            paused: self.guards.pause_snapshot(),
            fleet_circuit: self.guards.fleet_circuit.snapshot(),
            quarantined: self.view.quarantined,
            boot_suite: self.record.boot_suite.clone(),
            tracker_kind: self.view.tracker.as_ref().ok().cloned(),
            held: self.holds.snapshot(),
            spend: self.holds.spend.clone(),
            isolation: self.record.isolation.clone(),
        }
    }

    /// Each running worker's slot, pid and start, for `state.toon`.
    fn slot_pid_rows(&self) -> Vec<SlotPid> {
        self.pool
            .slots
            .values()
            .filter_map(|s| {
                s.worker().map(|w| SlotPid {
                    slot: s.index,
                    pid: w.pid,
                    start: w.start,
                })
            })
            .collect()
    }

    /// Each slot's row of `state.toon`.
    fn slot_rows(&self, now: Instant) -> Vec<SlotDetail> {
        let sys_now = self.wall;
        self.pool
            .slots
            .values()
            .map(|s| SlotDetail {
                slot: s.index,
                state: s.shown_state(),
                pid: s.worker().map(|w| w.pid),
                worker_id: s.worker().map(|w| w.id.clone()),
                started_epoch: s.worker().map(|w| w.started_epoch),
                restarts: s.restarts,
                issue: s.worker().and_then(|w| w.seen.issue),
                cpu_ms: s.worker().and_then(|w| w.seen.usage).map(|u| u.cpu_ms),
                rss_kib: s.worker().and_then(|w| w.seen.usage).map(|u| u.rss_kib),
                reason: s.park_reason(),
                title: s.issue_title(),
                cpu_permille: s.cpu_permille(),
                probe_epoch: s
                    .probe_at()
                    .map(|t| epoch_secs(sys_now) + t.saturating_duration_since(now).as_secs()),
                cgroup: s
                    .worker()
                    .and_then(|w| w.cgroup.as_ref())
                    .map(|c| crate::text::path_text(c.dir())),
                memory_peak_kib: s
                    .worker()
                    .and_then(|w| w.seen.usage)
                    .and_then(|u| u.memory_peak_kib),
            })
            .collect()
    }

    /// The slots by what they do (a slot being started counts as busy).
    pub(super) fn slot_counts(&self) -> SlotCounts {
        let busy = self.pool.slots.values().filter(|s| s.occupied()).count();
        let parked = self.pool.slots.values().filter(|s| s.is_parked()).count();
        let total = self.pool.slots.len();
        SlotCounts {
            busy,
            free: total - busy - parked,
            total,
            parked,
        }
    }

    /// How the boot suite ended, for `state.toon`.
    pub fn set_boot_suite(&mut self, boot: state_file::BootSuite) {
        self.record.boot_suite = Some(boot);
    }

    /// Asks for the heartbeat now (after transitions, so `status` is never a tick behind).
    pub(super) fn heartbeat(&mut self) {
        self.emit(Effect::WriteState);
    }
}
