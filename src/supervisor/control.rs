//! The control commands' logic: `status`, `scale` and `stop` talk to a running supervisor
//! only through the lane's files and signals, and signal nothing whose pid and start token
//! they have not both verified. How a [`StatusReport`] looks to a person is `crate::status`.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde::Serialize;

use super::lock::running_supervisor;
use super::resize::{self, Resize};
use super::state_file::{
    self, BootSuite, FleetCircuit, FleetPause, ShrinkMode, SlotState, StateFile, StateFileError,
};
use crate::fsutil::atomic_write;
use crate::layout::Layout;
use crate::pidfile::{self, NotLive};
use crate::process;
use crate::timeutil::now_epoch;
use crate::toonl::Event;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// No supervisor is running (the reason says why the pid file does not count).
    #[error("no supervisor running for this project ({0})")]
    NotRunning(NotLive),
    #[error(transparent)]
    State(#[from] StateFileError),
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

// ---- status ----

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
    pub held: Option<crate::supervisor::state_file::AgentHold>,
    /// The day's spend, when a daily budget is set; null otherwise.
    pub spend: Option<crate::supervisor::state_file::SpendToday>,
    /// Attempts whose work was rescued (`rescued` in the attempt ledgers, `docs/SPEC.md`
    /// §11.15); null when the ledgers cannot be read.
    pub rescued: Option<u64>,
    /// `cgroup` or `process-group (<why>)`; null from a supervisor that does not say.
    pub isolation: Option<String>,
    /// The operator's pause in force (`afk-supervisor pause`), read from its file; null
    /// when none holds.
    pub operator_pause: Option<crate::pause::OperatorPause>,
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
    pub last_event: Option<Event>,
    /// cgroup mode with the memory controller: the attempt's `memory.peak`, KiB.
    pub memory_peak_kib: Option<u64>,
}

/// The running supervisor's view, from its heartbeat.
pub fn status(layout: &Layout) -> Result<StatusReport, ControlError> {
    let (pid, start) = running_supervisor(layout).map_err(ControlError::NotRunning)?;
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
                isolation: None,
                operator_pause: crate::pause::operator_active(&layout.state()),
            },
            slots: Vec::new(),
            epoch: now,
        });
    };
    // The log's end only, read here in the reader's process: never the supervisor's work.
    let last = crate::logs::last_event_per_slot(&layout.event_log(), LAST_EVENTS_BYTES)
        .unwrap_or_default();
    let mut report = report_from(&s, start, now, &last);
    report.fleet.rescued = crate::ledger::rescued_total(layout).ok();
    report.fleet.operator_pause = crate::pause::operator_active(&layout.state());
    Ok(report)
}

/// Most bytes of the event log's end read for each slot's last event.
const LAST_EVENTS_BYTES: u64 = crate::logs::LAST_EVENTS_BYTES;

fn report_from(
    s: &StateFile,
    start: u64,
    now: u64,
    last: &std::collections::BTreeMap<u64, Event>,
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

// ---- scale ----

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleOutcome {
    Applied {
        pid: i32,
        target: usize,
        mode: ShrinkMode,
    },
    Pending {
        pid: i32,
        target: usize,
        mode: ShrinkMode,
    },
}

impl std::fmt::Display for ScaleOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (word, pid, target, mode) = match self {
            ScaleOutcome::Applied { pid, target, mode } => ("applied", pid, target, mode),
            ScaleOutcome::Pending { pid, target, mode } => ("pending", pid, target, mode),
        };
        write!(
            f,
            "directive {word} (supervisor pid={pid}, target={target}, shrink-mode={mode})"
        )
    }
}

/// Writes `resize.toon`, nudges the supervisor (SIGUSR1, after verifying it) and waits
/// for its heartbeat to show the new target.
pub fn scale(
    layout: &Layout,
    target: usize,
    mode: ShrinkMode,
    timeout: Duration,
) -> Result<ScaleOutcome, ControlError> {
    let (pid, start) = running_supervisor(layout).map_err(ControlError::NotRunning)?;
    let path = layout.resize_file();
    let directive = Resize {
        target,
        shrink_mode: mode,
        runner: None,
    };
    let written_at = now_epoch();
    resize::write(&path, &directive).map_err(|source| ControlError::Io {
        path: path.display().to_string(),
        source,
    })?;
    signal_verified(pid, start, Signal::SIGUSR1);
    let applied = wait_for(timeout, || {
        matches!(
            state_file::read(&layout.state_file()),
            Ok(Some(s)) if s.pid == pid && s.target == target && s.shrink_mode == mode && s.epoch >= written_at
        )
    });
    Ok(if applied {
        ScaleOutcome::Applied { pid, target, mode }
    } else {
        ScaleOutcome::Pending { pid, target, mode }
    })
}

// ---- stop ----

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// The supervisor is gone; `workers_killed` counts workers `--force` killed itself.
    Stopped {
        pid: Option<i32>,
        workers_killed: usize,
    },
    NothingRunning,
    /// No supervisor, but workers recorded in `state.toon` are still live.
    OrphanWorkers {
        live: usize,
    },
    TimedOut {
        pid: i32,
    },
    /// The supervisor is gone (or `--force` could not confirm it) but these recorded
    /// workers are still live: the fleet is not stopped.
    Incomplete {
        pid: Option<i32>,
        supervisor_alive: bool,
        alive: Vec<i32>,
    },
}

/// Stops the fleet: the stop file and SIGTERM, then waits; `force` SIGKILLs the supervisor
/// and every worker recorded in `state.toon` whose pid and start time still match. Success
/// is claimed only once no process of the fleet is left: the recorded workers, and every
/// process whose environment names this repo's lane ([`process::fleet_members`]), which
/// covers workers nobody recorded and descendants that escaped their worker's group.
pub fn stop(layout: &Layout, timeout: Duration, force: bool) -> Result<StopOutcome, ControlError> {
    let sup = running_supervisor(layout).ok();
    let workers = recorded_live_workers(layout);
    let Some((pid, start)) = sup else {
        let everything = union(workers.clone(), member_processes(layout));
        if everything.is_empty() {
            return Ok(StopOutcome::NothingRunning);
        }
        if !force {
            return Ok(StopOutcome::OrphanWorkers {
                live: everything.len(),
            });
        }
        let workers = union(workers, member_workers(layout));
        let n = kill_workers(&workers);
        let alive = kill_leftovers(layout, &workers, timeout);
        if !alive.is_empty() {
            return Ok(StopOutcome::Incomplete {
                pid: None,
                supervisor_alive: false,
                alive,
            });
        }
        return Ok(StopOutcome::Stopped {
            pid: None,
            workers_killed: n,
        });
    };
    let gone = || !pidfile::judge_pid(pid, Some(start)).is_live();
    if force {
        // The supervisor first, so it cannot spawn or adopt anything more; then every worker
        // it recorded, including any it wrote down while dying.
        signal_verified(pid, start, Signal::SIGKILL);
        let sup_gone = wait_for(timeout, gone);
        if sup_gone {
            // The supervisor was killed before it could clean up its lane.
            let _ = pidfile::remove_pid_file(&layout.supervisor_pid());
            let _ = crate::fsutil::remove_file_if_exists(&layout.supervisor_stop());
        }
        let workers = union(
            union(workers, recorded_live_workers(layout)),
            member_workers(layout),
        );
        let n = kill_workers(&workers);
        let alive = kill_leftovers(layout, &workers, timeout);
        if !sup_gone || !alive.is_empty() {
            return Ok(StopOutcome::Incomplete {
                pid: Some(pid),
                supervisor_alive: !sup_gone,
                alive,
            });
        }
        return Ok(StopOutcome::Stopped {
            pid: Some(pid),
            workers_killed: n,
        });
    }
    let stop_file = layout.supervisor_stop();
    // The sentinel is a second channel beside the signal: a stop file that cannot be
    // written (something hostile at its path) must not keep the fleet from stopping.
    if let Err(e) = atomic_write(&stop_file, format!("{}\n", now_epoch()).as_bytes()) {
        eprintln!(
            "afk-supervisor: warning: {}: {e}; stopping by signal alone",
            stop_file.display()
        );
    }
    signal_verified(pid, start, Signal::SIGTERM);
    if !wait_for(timeout, gone) {
        return Ok(StopOutcome::TimedOut { pid });
    }
    // The supervisor's exit alone proves nothing about its workers: check each one it
    // recorded, before and at its end, and anything else of the fleet still alive.
    let mut alive = still_live(&union(
        union(workers, recorded_live_workers(layout)),
        member_processes(layout),
    ));
    alive.sort_unstable();
    if !alive.is_empty() {
        return Ok(StopOutcome::Incomplete {
            pid: Some(pid),
            supervisor_alive: false,
            alive,
        });
    }
    Ok(StopOutcome::Stopped {
        pid: Some(pid),
        workers_killed: 0,
    })
}

/// Every live process of this repo's fleet (recorded workers and any process whose
/// environment names the lane), ascending: what `stop` would have to end. `status` lists
/// them when no supervisor runs, so workers left by a killed supervisor are never hidden.
pub fn live_fleet_processes(layout: &Layout) -> Vec<i32> {
    let mut pids = still_live(&union(
        recorded_live_workers(layout),
        member_processes(layout),
    ));
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The workers among the fleet's processes (session leaders with a worker id), recorded
/// or not, as (pid, start).
fn member_workers(layout: &Layout) -> Vec<(i32, u64)> {
    process::fleet_members(&layout.supervisor_lane())
        .into_iter()
        .filter(|m| m.leads_session() && m.worker_id.is_some())
        .map(|m| (m.proc.pid, m.proc.start))
        .collect()
}

/// Every live process of this repo's fleet, as (pid, start): what its attempt cgroups hold
/// first (cgroup mode: a descendant that cleared its environment is found there), then
/// what its environment names.
fn member_processes(layout: &Layout) -> Vec<(i32, u64)> {
    let in_cgroups: Vec<(i32, u64)> = fleet_attempt_cgroups(layout)
        .iter()
        .flat_map(|cg| cg.procs())
        .filter_map(process::read)
        .filter(|p| !p.is_zombie())
        .map(|p| (p.pid, p.start))
        .collect();
    let by_env = process::fleet_members(&layout.supervisor_lane())
        .into_iter()
        .map(|m| (m.proc.pid, m.proc.start))
        .collect();
    union(in_cgroups, by_env)
}

/// The attempt cgroups of the fleet `state.toon` last recorded in cgroup mode: every one
/// under the fleet directory its workers' cgroups name (`<fleet>/slot-N/attempt-…`).
fn fleet_attempt_cgroups(layout: &Layout) -> Vec<crate::cgroup::Cgroup> {
    let Ok(Some(state)) = super::state_file::read(&layout.state_file()) else {
        return Vec::new();
    };
    let mut roots: Vec<crate::cgroup::Cgroup> = state
        .slot_detail
        .iter()
        .filter_map(|d| d.cgroup.as_deref())
        .filter_map(|c| {
            std::path::Path::new(c)
                .parent()?
                .parent()
                .map(crate::cgroup::Cgroup::at)
        })
        .collect();
    roots.sort_by(|a, b| a.dir().cmp(b.dir()));
    roots.dedup();
    roots
        .iter()
        .flat_map(crate::cgroup::fleet::attempts_under)
        .map(|(_, cg)| cg)
        .collect()
}

/// After SIGKILL to `killed`: waits for them, then kills whatever of the fleet is still
/// found (killing a group can leave members of other groups reparented, still running).
/// Returns the pids that outlived it all.
fn kill_leftovers(layout: &Layout, killed: &[(i32, u64)], timeout: Duration) -> Vec<i32> {
    let deadline = crate::timeutil::deadline(Instant::now(), timeout);
    // cgroup mode: each attempt whole, by the kernel, before anything is looked for.
    for cg in fleet_attempt_cgroups(layout) {
        let _ = cg.kill();
    }
    let mut all = killed.to_vec();
    loop {
        let rest = member_processes(layout);
        kill_workers(&rest);
        all = union(all, rest);
        let all_gone = wait_for(deadline.saturating_duration_since(Instant::now()), || {
            still_live(&all).is_empty()
        });
        if !all_gone || member_processes(layout).is_empty() || Instant::now() >= deadline {
            let mut alive = still_live(&union(all, member_processes(layout)));
            alive.sort_unstable();
            return alive;
        }
    }
}

fn union(mut a: Vec<(i32, u64)>, b: Vec<(i32, u64)>) -> Vec<(i32, u64)> {
    for w in b {
        if !a.contains(&w) {
            a.push(w);
        }
    }
    a
}

/// The pids of `workers` still running as the same process (pid and start time match).
fn still_live(workers: &[(i32, u64)]) -> Vec<i32> {
    workers
        .iter()
        .filter(|(pid, start)| pidfile::judge_pid(*pid, Some(*start)).is_live())
        .map(|(pid, _)| *pid)
        .collect()
}

/// Workers `state.toon` records whose pid and start time both still match. A state file
/// that cannot be read (corrupt, or not a regular file) records none, with a warning.
fn recorded_live_workers(layout: &Layout) -> Vec<(i32, u64)> {
    let s = match state_file::read(&layout.state_file()) {
        Ok(Some(s)) => s,
        Ok(None) => return Vec::new(),
        Err(e) => {
            eprintln!("afk-supervisor: warning: {e}; its workers cannot be checked");
            return Vec::new();
        }
    };
    s.slot_pids
        .iter()
        .filter(|p| pidfile::judge_pid(p.pid, Some(p.start)).is_live())
        .map(|p| (p.pid, p.start))
        .collect()
}

/// SIGKILLs each verified worker's process group (or the worker alone when it does not
/// lead a group).
fn kill_workers(workers: &[(i32, u64)]) -> usize {
    workers
        .iter()
        .filter(|&&(pid, start)| process::ProcId { pid, start }.kill_tree())
        .count()
}

/// Signals `pid` only if it is still the process that started at `start`.
fn signal_verified(pid: i32, start: u64, sig: Signal) -> bool {
    process::ProcId { pid, start }.signal(sig)
}

fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = crate::timeutil::deadline(Instant::now(), timeout);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_lines() {
        let a = ScaleOutcome::Applied {
            pid: 7,
            target: 3,
            mode: ShrinkMode::HardKill,
        };
        assert_eq!(
            a.to_string(),
            "directive applied (supervisor pid=7, target=3, shrink-mode=hard-kill)"
        );
        let p = ScaleOutcome::Pending {
            pid: 7,
            target: 1,
            mode: ShrinkMode::DrainThenRetire,
        };
        assert_eq!(
            p.to_string(),
            "directive pending (supervisor pid=7, target=1, shrink-mode=drain-then-retire)"
        );
    }

    #[test]
    fn no_supervisor_means_not_running_and_no_fleet() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert!(matches!(
            status(&layout),
            Err(ControlError::NotRunning(NotLive::Dead(
                crate::pidfile::DeadReason::Missing
            )))
        ));
        std::fs::create_dir_all(layout.supervisor_lane()).unwrap();
        std::fs::write(layout.supervisor_pid(), "nonsense").unwrap();
        let err = status(&layout).unwrap_err().to_string();
        assert!(err.contains("pid file corrupt"), "{err}");
        assert_eq!(
            stop(&layout, Duration::from_secs(1), false).unwrap(),
            StopOutcome::NothingRunning
        );
        assert!(matches!(
            scale(&layout, 2, ShrinkMode::HardKill, Duration::from_secs(1)),
            Err(ControlError::NotRunning(_))
        ));
        assert!(!layout.resize_file().exists());
    }
}
