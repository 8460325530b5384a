//! A worker ended: its group cleaned up, its claims queued for release, and its slot's
//! next step decided by how it ended (respawn, idle, park, retire), with the circuit's
//! verdict on a death.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::*;
use crate::event_log::Kind;

impl Fleet {
    /// Records a death and applies the circuit's verdict. Returns whether to respawn now.
    pub(super) fn death(&mut self, idx: usize, now: Instant, started: Instant) -> bool {
        self.churn.death(now);
        if self.guards.fleet_circuit.probe_slot() == Some(idx) {
            // The fleet's probe could not even start.
            self.end_fleet_probe(idx, false, true, now);
            return false;
        }
        let window_s = self.timing.circuit_window_s;
        let fleet_open = self.guards.fleet_circuit.is_open();
        self.pool.unsettle(idx);
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
                let msg = log_texts::tripped(idx, fast_deaths, window_s, backoff.as_secs());
                self.log(line(Kind::CircuitTrip, msg).slot(idx));
                self.note_slot_trip(idx, now);
                false
            }
            AfterDeath::Reparked {
                lived,
                backoff,
                step,
            } => {
                slot.phase = Phase::CircuitOpen;
                let msg = log_texts::reparked(idx, lived.as_secs(), backoff.as_secs(), step);
                self.log(line(Kind::CircuitReParked, msg).slot(idx));
                false
            }
        }
    }

    /// Worker `pid` (started at `start`) ended with `exit`.
    pub(super) fn on_exit(&mut self, pid: i32, start: u64, exit: ExitKind, now: Instant) {
        self.ended(pid, start, exit, None, now);
    }

    /// Worker `pid` never became one: its `execve` failed after its spawn was answered.
    /// Its end is the spawn's failure (`slot.spawn-failed`, a fast death), not an exit.
    pub(super) fn on_not_started(&mut self, pid: i32, start: u64, error: String, now: Instant) {
        let exit = ExitKind::Code(crate::exit_code::EXEC_FAILED);
        self.ended(pid, start, exit, Some(error), now);
    }

    /// A worker's end, logged as its exit, or as its spawn's `failure`.
    fn ended(
        &mut self,
        pid: i32,
        start: u64,
        exit: ExitKind,
        failure: Option<String>,
        now: Instant,
    ) {
        let Some(idx) = self.pool.slot_of(pid, start) else {
            // Not a current worker (already handled): only its group cleanup may be pending.
            self.groups.reaper.leader_exited(pid);
            return;
        };
        self.pool.by_worker.remove(&(pid, start));
        self.groups.unwatched.retain(|u| u.0 != pid);
        let Some(slot) = self.pool.slots.get_mut(&idx) else {
            return;
        };
        let Phase::Running(w) =
            std::mem::replace(&mut slot.phase, Phase::Idle { confirmed: false })
        else {
            return;
        };
        let retiring = slot.retiring;
        let group = self.group_of(&w);
        self.terminate(w.pid, group, w.own_child, true);
        // Its pidfd is held on only while its group is followed through it (until then
        // the reaper says when).
        if w.pidfd && !self.groups.reaper.follows_pidfd(w.pid, w.start) {
            self.emit(Effect::Group(Order::Forget {
                leader: w.pid,
                start: w.start,
            }));
        }
        // In cgroup mode nothing of the worker is outside its cgroup: no stray search.
        match &w.cgroup {
            Some(cg) => {
                self.groups
                    .ended_cgroups
                    .insert(w.pid, (cg.as_ref().clone(), idx, w.id.clone()));
            }
            None => {
                self.groups.ended.insert(w.pid, (w.id.clone(), w.own_child));
            }
        }
        if let Some(error) = failure {
            self.start_failed(idx, error, Some(pid), w.started, now);
            return;
        }
        // A worker that did not end cleanly may hold claims it can no longer give back.
        // At a stop they are left to the next boot's orphan cleanup.
        if !matches!(
            exit,
            ExitKind::Code(crate::exit_code::OK) | ExitKind::Code(crate::exit_code::CONFIG)
        ) && self.stopping.is_none()
        {
            self.groups.pending_release.push(DeadWorker {
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
            line(
                Kind::SlotExit,
                format!("worker {} {exit} after {:.1}s", w.id, lived.as_secs_f64()),
            )
            .slot(idx)
            .pid(pid),
        );
        if let Some(slot) = self.pool.slots.get_mut(&idx) {
            slot.finished = Some(Finished {
                end: exit.to_string(),
                log: Some(w.log.clone()),
            });
        }
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
                    crate::exit_code::RATE_LIMITED
                        | crate::exit_code::TRACKER_UNAVAILABLE
                        | crate::exit_code::AGENT_PAUSED
                )
            ) {
                self.fleet_probe_inconclusive(idx, &exit.to_string(), now);
                return;
            }
            let clean = matches!(exit, ExitKind::Code(crate::exit_code::OK));
            let fatal = matches!(exit, ExitKind::Code(crate::exit_code::CONFIG));
            self.end_fleet_probe(idx, clean, !clean && !fatal, now);
            // A clean probe idles like any clean exit; `CONFIG` still parks its slot for good.
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
            ExitKind::Code(crate::exit_code::CONFIG) => {
                if let Some(slot) = self.pool.slots.get_mut(&idx) {
                    slot.phase = Phase::Fatal { reason: None };
                }
                self.emit(Effect::ReadFatalReason {
                    slot: idx,
                    log: w.log.clone(),
                });
                self.log(line(Kind::SlotParked, log_texts::fatal_parked(idx)).slot(idx));
            }
            ExitKind::Code(
                code @ (crate::exit_code::RATE_LIMITED | crate::exit_code::TRACKER_UNAVAILABLE),
            ) => {
                // The tracker said wait (or could not be reached), not that the worker is
                // broken: no death, no circuit. The slot idles until a queue check (the next
                // tick's) finds work again.
                let met =
                    if code == crate::exit_code::RATE_LIMITED && self.guards.operator.is_some() {
                        "found the fleet paused by the operator"
                    } else if code == crate::exit_code::RATE_LIMITED {
                        "met a tracker rate limit"
                    } else {
                        "found the tracker unavailable"
                    };
                let msg = format!(
                    "slot {idx} idle: worker {} {met} (exit {code}); not a death, \
                     the next queue check decides",
                    w.id,
                );
                self.log(line(Kind::SlotIdle, msg).slot(idx));
            }
            ExitKind::Code(crate::exit_code::AGENT_PAUSED) => {
                // The agent's account (or the day's budget) holds the whole fleet, not
                // this slot: no death, no circuit; the queue check reads the hold.
                let msg = format!(
                    "slot {idx} idle: worker {} found the agent paused (exit {}); not a death",
                    w.id,
                    crate::exit_code::AGENT_PAUSED
                );
                self.log(line(Kind::SlotIdle, msg).slot(idx));
                self.request_queue();
            }
            ExitKind::Code(crate::exit_code::OK) => {
                let closed = self
                    .pool
                    .slots
                    .get_mut(&idx)
                    .is_some_and(|s| s.circuit.on_clean_exit());
                if closed {
                    let msg = log_texts::closed(idx, lived.as_secs());
                    self.log(line(Kind::CircuitClosed, msg).slot(idx));
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
