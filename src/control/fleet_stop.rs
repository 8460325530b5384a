//! `stop`: the whole fleet stopped from outside (the stop file and SIGTERM, or `--force`'s
//! SIGKILLs), and the fleet's live processes found the way `stop` must find them.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{ControlError, signal_verified, wait_for};
use crate::fsutil::atomic_write;
use crate::lanes::state_file;
use crate::layout::Layout;
use crate::pidfile;
use crate::process;
use crate::supervisor::os::lock::running_supervisor;
use crate::timeutil::now_epoch;

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
    process::fleet_leaders(&layout.supervisor_lane())
        .into_iter()
        .filter(|m| m.worker_id.is_some())
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
    let Ok(Some(state)) = state_file::read(&layout.state_file()) else {
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
