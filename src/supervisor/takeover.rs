//! The workers a killed supervisor left behind. They are the fleet as much as any this
//! supervisor spawns: a start adopts them (their slots are taken, not spawned again), and
//! a stop that comes while the boot sweeps still run, before anything was adopted, ends
//! them as a stop ends a worker, so `stop` never finds the fleet half stopped.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::event_log::{Kind, Record};
use crate::lanes::state_file;
use crate::layout::Layout;
use crate::pidfile;
use crate::process::{self, ProcId};
use crate::supervisor::core::event::Adoptee;
use crate::supervisor::journal::Journal;

/// The previous supervisor's workers that are still live (pid and start both match).
/// Returns them, how many recorded workers were dead, whether there was a state file, and
/// the slots it recorded workers in.
pub(super) fn takeover_candidates(
    layout: &Layout,
    journal: &mut Journal,
) -> (Vec<Adoptee>, usize, bool, Vec<usize>) {
    let state = match state_file::read(&layout.state_file()) {
        Ok(Some(s)) => s,
        Ok(None) => return (Vec::new(), 0, false, Vec::new()),
        Err(e) => {
            journal.write(Record::now(
                Kind::SupervisorError,
                format!("{e}; no worker adopted"),
            ));
            return (Vec::new(), 0, false, Vec::new());
        }
    };
    let me = std::process::id() as i32;
    let mut adoptees: Vec<Adoptee> = Vec::new();
    let mut dead = 0;
    for sp in &state.slot_pids {
        let live = sp.pid != me && pidfile::judge_pid(sp.pid, Some(sp.start)).is_live();
        if !live
            || adoptees
                .iter()
                .any(|a| a.slot == sp.slot || a.pid == sp.pid)
        {
            dead += 1;
            continue;
        }
        let detail = state
            .slot_detail
            .iter()
            .find(|d| d.slot == sp.slot && d.pid == Some(sp.pid));
        adoptees.push(Adoptee {
            slot: sp.slot,
            pid: sp.pid,
            start: sp.start,
            worker_id: detail.and_then(|d| d.worker_id.clone()),
            started_epoch: detail.and_then(|d| d.started_epoch),
            restarts: detail.map_or(0, |d| d.restarts),
            cgroup: None,
        });
    }
    let recorded = state.slot_pids.iter().map(|sp| sp.slot).collect();
    (adoptees, dead, !state.slot_pids.is_empty(), recorded)
}

/// Live workers of this repo's fleet that `state.toon` does not record: a supervisor
/// killed between starting a worker and writing the heartbeat leaves one, and without this
/// its successor would spawn a full fleet beside it. A worker is found by the lane its
/// environment names ([`process::fleet_leaders`], read while the boot suite ran, so each
/// is checked again to be the process that was read); of the session leaders sharing one
/// worker id the oldest is the worker, the others are descendants that called `setsid`.
pub(super) fn unrecorded_workers(
    leaders: Vec<process::FleetMember>,
    known: &[Adoptee],
) -> Vec<Adoptee> {
    let mut leaders: Vec<process::FleetMember> = leaders
        .into_iter()
        .filter(|m| m.worker_id.is_some() && m.slot.is_some())
        .filter(|m| pidfile::judge_pid(m.proc.pid, Some(m.proc.start)).is_live())
        .collect();
    leaders.sort_by_key(|m| m.proc.start);
    let mut found: Vec<Adoptee> = Vec::new();
    for m in leaders {
        let id = m.worker_id.clone();
        let taken = known
            .iter()
            .chain(&found)
            .any(|a| a.pid == m.proc.pid || (a.worker_id.is_some() && a.worker_id == id));
        if taken {
            continue;
        }
        let used = |i: usize| known.iter().chain(&found).any(|a| a.slot == i);
        let wanted = m.slot.unwrap_or(0);
        let slot = if used(wanted) {
            (0..).find(|i| !used(*i)).unwrap_or(wanted)
        } else {
            wanted
        };
        found.push(Adoptee {
            slot,
            pid: m.proc.pid,
            start: m.proc.start,
            worker_id: id,
            started_epoch: process::start_epoch(m.proc.start),
            restarts: 0,
            cgroup: None,
        });
    }
    found
}

/// How often the ending looks whether the workers are gone.
const POLL: Duration = Duration::from_millis(50);

/// Ends the workers the last supervisor left, as a stop ends a worker: SIGTERM to each
/// one's group (it rescues its work and gives its issue back), `grace` to go, then
/// SIGKILL. Called when a stop signal came during the boot sweeps; `leaders` is the
/// process table's fleet leaders read beside the suite. Returns the pids still alive after
/// it all (none, unless something ignores SIGKILL).
pub(super) async fn end_left_workers(
    layout: &Layout,
    grace: Duration,
    leaders: Vec<process::FleetMember>,
    journal: &mut Journal,
) -> Vec<i32> {
    let (mut left, _, _, _) = takeover_candidates(layout, journal);
    let unrecorded = unrecorded_workers(leaders, &left);
    left.extend(unrecorded);
    let ids: Vec<ProcId> = left
        .iter()
        .map(|a| ProcId {
            pid: a.pid,
            start: a.start,
        })
        .collect();
    if ids.is_empty() {
        return Vec::new();
    }
    let pids: Vec<i32> = ids.iter().map(|p| p.pid).collect();
    journal.write(Record::now(
        Kind::SupervisorStop,
        format!(
            "stop during the boot sweeps: ending {} workers the last supervisor left: {pids:?}",
            ids.len()
        ),
    ));
    for id in &ids {
        id.signal_tree(Signal::SIGTERM);
    }
    if !gone_within(&ids, grace).await {
        for id in &ids {
            id.signal_tree(Signal::SIGKILL);
        }
        gone_within(&ids, Duration::from_secs(5)).await;
    }
    ids.iter().filter(|p| p.is_live()).map(|p| p.pid).collect()
}

/// Waits until none of `ids` is alive, at most `limit`; whether they all went.
async fn gone_within(ids: &[ProcId], limit: Duration) -> bool {
    let deadline = crate::timeutil::deadline(Instant::now(), limit);
    loop {
        if ids.iter().all(|p| !p.is_live()) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}
