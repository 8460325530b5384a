//! `status`: the running supervisor's view, from its heartbeat (`state.toon`), the event
//! log's end and the ledgers, read in the asker's process; never the supervisor's work.

use serde::Serialize;

use super::{ControlError, running};
use crate::event_log::Record;
use crate::lanes::state_file::{
    self, BootSuite, FleetCircuit, FleetPause, ShrinkMode, SlotState, StateFile,
};
use crate::layout::Layout;
use crate::process;
use crate::timeutil::now_epoch;

/// The version of `status --json`'s shape (`docs/status.schema.json`). Fields are only
/// ever added within a version (readers must ignore ones they do not know); a bump means a
/// field was removed, renamed or changed its meaning or type.
pub const STATUS_SCHEMA_VERSION: u32 = 1;

/// `status --json`: this shape is stable; fields are only ever added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusReport {
    /// [`STATUS_SCHEMA_VERSION`]: what a reader checks before it trusts the shape.
    pub schema_version: u32,
    pub supervisor: SupervisorInfo,
    pub fleet: FleetInfo,
    pub slots: Vec<SlotRow>,
    /// When this report was made (epoch seconds): what its relative times count from.
    pub epoch: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SupervisorInfo {
    pub pid: i32,
    pub start_time: u64,
    /// The last heartbeat (`state.toon` `epoch`); null before the first one (boot sweeps).
    pub heartbeat_epoch: Option<u64>,
    pub heartbeat_age_s: Option<u64>,
    /// How long the supervisor has run; null when its start cannot be read.
    pub uptime_s: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FleetInfo {
    pub target: usize,
    pub live: usize,
    pub parked: usize,
    pub deaths: usize,
    pub respawns: usize,
    pub window_s: u64,
    pub ready_for_agent: Option<u64>,
    /// Why `ready_for_agent` is null; null when it is a number.
    pub ready_for_agent_unknown: Option<String>,
    pub shrink_mode: ShrinkMode,
    pub runner: String,
    /// The fleet waits out a tracker rate limit; null otherwise.
    pub paused: Option<FleetPause>,
    /// The fleet-wide circuit when open or probing; null otherwise.
    pub circuit: Option<FleetCircuit>,
    /// Open issues labelled `afk:quarantined`; null when unknown.
    pub quarantined: Option<u64>,
    /// Slots idle (their last worker found nothing to claim).
    pub idle: usize,
    /// How the boot suite ended; null from a supervisor that does not say.
    pub boot_suite: Option<BootSuite>,
    /// `gh` or `local`; null when the tracker could not be opened.
    pub tracker_kind: Option<String>,
    /// The agent's account or the day's budget holds the fleet (§11.13); null otherwise.
    pub held: Option<crate::lanes::state_file::AgentHold>,
    /// The day's spend, when a daily budget is set; null otherwise.
    pub spend: Option<crate::lanes::state_file::SpendToday>,
    /// Attempts whose work was rescued (`rescued` in the attempt ledgers, `docs/SPEC.md`
    /// §11.15); null when the ledgers cannot be read.
    pub rescued: Option<u64>,
    /// `cgroup` or `process-group (<why>)`; null from a supervisor that does not say.
    pub isolation: Option<String>,
    /// The checkout's pull requests by state (`docs/SPEC.md` §11.22), from the landing
    /// records; null when one cannot be read.
    pub prs: Option<crate::landing::PrCounts>,
    /// The operator's pause in force (`afk-supervisor pause`), read from its file; null
    /// when none holds.
    pub operator_pause: Option<crate::lanes::pause_file::OperatorPause>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotRow {
    pub slot: usize,
    pub pid: Option<i32>,
    pub worker_id: Option<String>,
    pub state: SlotState,
    pub uptime_s: Option<u64>,
    pub restarts: u64,
    pub issue: Option<u64>,
    /// The worker tree's CPU time (ms) and resident memory (KiB) at the last tick.
    pub cpu_ms: Option<u64>,
    pub rss_kib: Option<u64>,
    /// Why a parked slot is parked; null for every other state.
    pub reason: Option<String>,
    /// The issue's title, when the worker recorded it.
    pub title: Option<String>,
    /// CPU use of the worker's tree, thousandths of a core (see `state.toon`).
    pub cpu_permille: Option<u64>,
    /// When an open circuit's half-open probe is due (epoch seconds).
    pub probe_epoch: Option<u64>,
    /// The slot's newest event-log record, from the log's end only; null when none is there.
    pub last_event: Option<Record>,
    /// cgroup mode with the memory controller: the attempt's `memory.peak`, KiB.
    pub memory_peak_kib: Option<u64>,
}

/// The running supervisor's view, from its heartbeat.
pub fn status(layout: &Layout) -> Result<StatusReport, ControlError> {
    let (pid, start) = running(layout)?;
    let state = state_file::read(&layout.state_file())?
        .filter(|s| s.pid == pid && s.pid_start_time == start);
    let now = now_epoch();
    let Some(s) = state else {
        return Ok(StatusReport {
            schema_version: STATUS_SCHEMA_VERSION,
            supervisor: SupervisorInfo {
                pid,
                start_time: start,
                heartbeat_epoch: None,
                heartbeat_age_s: None,
                uptime_s: process::start_epoch(start).map(|t| now.saturating_sub(t)),
            },
            fleet: FleetInfo {
                target: 0,
                live: 0,
                parked: 0,
                deaths: 0,
                respawns: 0,
                window_s: 0,
                ready_for_agent: None,
                ready_for_agent_unknown: Some("no heartbeat yet (boot sweeps running)".into()),
                shrink_mode: ShrinkMode::default(),
                runner: String::new(),
                paused: None,
                circuit: None,
                quarantined: None,
                idle: 0,
                boot_suite: None,
                tracker_kind: None,
                held: None,
                spend: None,
                rescued: None,
                prs: None,
                isolation: None,
                operator_pause: crate::lanes::pause_file::operator_active(&layout.state()),
            },
            slots: Vec::new(),
            epoch: now,
        });
    };
    // The log's end only, read here in the reader's process: never the supervisor's work.
    let last = crate::event_log::tail::last_event_per_slot(&layout.event_log(), LAST_EVENTS_BYTES)
        .unwrap_or_default();
    let mut report = report_from(&s, start, now, &last);
    fill_new_claims(layout, &mut report.slots);
    report.fleet.rescued = crate::ledger::rescued_total(layout).ok();
    report.fleet.prs = crate::landing::counts(layout).ok();
    report.fleet.operator_pause = crate::lanes::pause_file::operator_active(&layout.state());
    Ok(report)
}

/// The issue (and title) of each worker that claimed one since the heartbeat was written:
/// the supervisor learns a claim from the worker's attempt dir at its next tick, up to a
/// tick after the claim, while the dir is there as soon as the worker claimed. Read here,
/// in the asker's process, the same way the tick reads it.
fn fill_new_claims(layout: &Layout, slots: &mut [SlotRow]) {
    for row in slots
        .iter_mut()
        .filter(|r| r.issue.is_none() && r.pid.is_some())
    {
        let Some(id) = &row.worker_id else {
            continue;
        };
        if let Some(a) = crate::supervisor::os::stall::current_attempt(layout, id) {
            row.title = crate::supervisor::os::stall::attempt_title(&a);
            row.issue = Some(a.issue);
        }
    }
}

/// Most bytes of the event log's end read for each slot's last event.
const LAST_EVENTS_BYTES: u64 = crate::event_log::tail::LAST_EVENTS_BYTES;

fn report_from(
    s: &StateFile,
    start: u64,
    now: u64,
    last: &std::collections::BTreeMap<u64, Record>,
) -> StatusReport {
    StatusReport {
        schema_version: STATUS_SCHEMA_VERSION,
        epoch: now,
        supervisor: SupervisorInfo {
            pid: s.pid,
            start_time: start,
            heartbeat_epoch: Some(s.epoch),
            heartbeat_age_s: Some(now.saturating_sub(s.epoch)),
            uptime_s: process::start_epoch(start).map(|t| now.saturating_sub(t)),
        },
        fleet: FleetInfo {
            target: s.target,
            live: s.slots.busy,
            parked: s.slots.parked,
            deaths: s.churn.deaths,
            respawns: s.churn.respawns,
            window_s: s.churn.window_s,
            ready_for_agent: s.ready_for_agent,
            ready_for_agent_unknown: match s.ready_for_agent {
                Some(_) => None,
                None => Some(
                    s.ready_for_agent_unknown
                        .clone()
                        .unwrap_or_else(|| "not reported by this supervisor".into()),
                ),
            },
            shrink_mode: s.shrink_mode,
            runner: s.runner.clone(),
            paused: s.paused.clone(),
            circuit: s.fleet_circuit.clone(),
            quarantined: s.quarantined,
            idle: s
                .slot_detail
                .iter()
                .filter(|d| d.state == SlotState::Idle)
                .count(),
            boot_suite: s.boot_suite.clone(),
            tracker_kind: s.tracker_kind.clone(),
            held: s.held.clone(),
            spend: s.spend.clone(),
            rescued: None,
            prs: None,
            isolation: s.isolation.clone(),
            operator_pause: None,
        },
        slots: s
            .slot_detail
            .iter()
            .map(|d| SlotRow {
                slot: d.slot,
                pid: d.pid,
                worker_id: d.worker_id.clone(),
                state: d.state,
                uptime_s: d.started_epoch.map(|t| now.saturating_sub(t)),
                restarts: d.restarts,
                issue: d.issue,
                cpu_ms: d.cpu_ms,
                rss_kib: d.rss_kib,
                reason: d.reason.clone(),
                title: d.title.clone(),
                cpu_permille: d.cpu_permille,
                probe_epoch: d.probe_epoch,
                last_event: last.get(&(d.slot as u64)).cloned(),
                memory_peak_kib: d.memory_peak_kib,
            })
            .collect(),
    }
}
