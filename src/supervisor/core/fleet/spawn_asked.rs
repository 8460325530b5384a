//! A worker asked for in a slot (the guards that hold it back first), and the answer:
//! running, or a start that failed and counts as a fast death.

use std::time::Instant;

use super::*;
use crate::event_log::Kind;

impl Fleet {
    /// Asks for a worker in slot `idx`; the slot is starting until the answer
    /// ([`Fleet::spawned`] or [`Fleet::spawn_failed`]) comes, at once.
    pub(super) fn spawn_in(&mut self, idx: usize, now: Instant) {
        if self.stopping.is_some() || idx >= self.pool.target {
            return;
        }
        // A paused fleet starts nothing that would claim (the slot idles until the
        // resume's queue check), and an open fleet circuit only its one probe.
        if self.guards.held() || !self.guards.fleet_circuit.may_spawn(idx) {
            return;
        }
        // Held by the agent's account or the day's budget: nothing, or only the probe.
        if self.holds.blocks(idx) {
            return;
        }
        let Some(slot) = self.pool.slots.get(&idx) else {
            return;
        };
        if slot.occupied() || slot.stopped {
            return;
        }
        if self.pool.target_met() {
            self.log(
                line(
                    Kind::SupervisorError,
                    format!(
                        "refusing to spawn: {} live workers already meet the target {}",
                        self.pool.live_in_target(),
                        self.pool.target
                    ),
                )
                .slot(idx),
            );
            return;
        }
        let Some(slot) = self.pool.slots.get_mut(&idx) else {
            return;
        };
        slot.unclaimable = None;
        slot.spawns += 1;
        if slot.spawns > 1 {
            slot.restarts += 1;
            self.churn.respawn(now);
        }
        self.launch.spawn_seq += 1;
        let id = format!(
            "sup-{}-slot-{idx}-{}",
            self.launch.me.0, self.launch.spawn_seq
        );
        let env =
            crate::afk_env::slot_vars(idx, &id, &self.launch.runner, &self.layout.retire_file(idx));
        let seq = self.launch.spawn_seq;
        let pending = Pending {
            seq,
            id,
            started: now,
            queue_at_spawn: self.view.ready_set.clone(),
            was: Box::new(std::mem::replace(
                &mut slot.phase,
                Phase::Idle { confirmed: false },
            )),
        };
        slot.phase = Phase::Starting(pending);
        self.emit(Effect::Spawn {
            slot: idx,
            seq,
            argv: self.launch.argv.clone(),
            env,
        });
    }

    /// The worker of spawn `seq` in slot `idx` runs.
    pub(super) fn spawned(
        &mut self,
        idx: usize,
        seq: u64,
        s: Started,
        log: std::path::PathBuf,
        cgroup: Option<crate::cgroup::Cgroup>,
    ) {
        let now_e = self.epoch();
        let Some((slot, p)) = self.answered(idx, seq) else {
            if s.pidfd {
                self.emit(Effect::Group(Order::Forget {
                    leader: s.pid,
                    start: s.start,
                }));
            }
            return;
        };
        slot.phase = Phase::Running(LiveWorker {
            pid: s.pid,
            start: s.start,
            id: p.id.clone(),
            started: p.started,
            started_epoch: now_e,
            own_child: true,
            pidfd: s.pidfd,
            log,
            kill: None,
            seen: Seen::since(now_e),
            queue_at_spawn: p.queue_at_spawn,
            cgroup: cgroup.map(Arc::new),
        });
        self.pool.by_worker.insert((s.pid, s.start), idx);
        if !s.watched {
            self.groups.unwatched.push((s.pid, s.start));
        }
        // Recorded in the heartbeat at the end of this loop turn (one write per turn,
        // however many spawned); a supervisor killed before that leaves a worker its
        // successor still finds by its environment (`main_loop.rs`).
        tracing::debug!(slot = idx, pid = s.pid, worker = %p.id, "spawned");
        self.log(
            line(Kind::SlotSpawn, format!("spawned worker {}", p.id))
                .slot(idx)
                .pid(s.pid),
        );
    }

    /// The worker of spawn `seq` in slot `idx` could not even start: it died fast; the
    /// circuit decides whether to try again at once or park the slot.
    pub(super) fn spawn_failed(&mut self, idx: usize, seq: u64, error: String, now: Instant) {
        let Some((slot, p)) = self.answered(idx, seq) else {
            return;
        };
        slot.phase = *p.was;
        self.start_failed(idx, error, None, now, now);
    }

    /// The worker of slot `idx` (asked for at `started`; `pid` once it had one) never ran,
    /// for `error` (`slot.spawn-failed`). The slot keeps that as its last end, and it is a
    /// fast death for the circuit, whether the failure came with the spawn's answer or at
    /// the child's end ([`Fleet::on_not_started`]): no claims, no attempt, no probe of the
    /// agent's account answered.
    pub(super) fn start_failed(
        &mut self,
        idx: usize,
        error: String,
        pid: Option<i32>,
        started: Instant,
        now: Instant,
    ) {
        if let Some(slot) = self.pool.slots.get_mut(&idx) {
            slot.finished = Some(Finished::not_started(&error));
        }
        let mut record = line(Kind::SlotSpawnFailed, error).slot(idx);
        if let Some(pid) = pid {
            record = record.pid(pid);
        }
        self.log(record);
        if self.stopping.is_some() {
            return;
        }
        if idx >= self.pool.target {
            self.retire_slot(idx);
            return;
        }
        if self.death(idx, now, started) {
            self.spawn_in(idx, now);
        }
    }

    /// Slot `idx` and its spawn `seq` now answered (`None`: not that spawn's answer).
    fn answered(&mut self, idx: usize, seq: u64) -> Option<(&mut Slot, Pending)> {
        let slot = self.pool.slots.get_mut(&idx)?;
        if !matches!(&slot.phase, Phase::Starting(p) if p.seq == seq) {
            return None;
        }
        match std::mem::replace(&mut slot.phase, Phase::Idle { confirmed: false }) {
            Phase::Starting(p) => Some((slot, p)),
            _ => None,
        }
    }
}
