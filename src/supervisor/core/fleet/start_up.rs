//! Start-up: a previous supervisor's live workers taken over, then a worker asked for in
//! every empty slot of the target, all in one batch with one heartbeat after it.

use std::time::{Duration, Instant};

use super::*;
use crate::event_log::Kind;

impl Fleet {
    /// Takes over the live workers of a previous supervisor, then spawns every slot of the
    /// target that has none, then records them all in one heartbeat.
    #[must_use]
    pub fn start(
        &mut self,
        adoptees: Vec<Adopted>,
        dead: usize,
        had_state: bool,
        now: Now,
    ) -> Vec<Effect> {
        (self.now, self.wall) = (now.at, now.wall);
        let now = now.at;
        let adopted = adoptees.len();
        for a in adoptees {
            self.adopt(a, now);
        }
        if had_state {
            let msg = log_texts::takeover(adopted, dead, self.pool.target);
            self.log(line(Kind::SupervisorTakeover, msg));
        }
        // Holds read before the start (a pause written while no fleet ran) keep every slot
        // from spawning; the first queue check after they lift starts them.
        self.launch.held_start = self.all_held();
        let (t, m) = (self.pool.target, self.pool.shrink_mode);
        self.reconcile(t, m, now);
        // One write for the whole start-up, never one per spawn.
        self.heartbeat();
        self.take_effects()
    }

    /// A held start's slots that never had a worker start, as the start would have started
    /// them, once nothing holds: whatever the queue says (a start spawns every slot of the
    /// target, and a worker that finds nothing to claim idles its slot), where the queue
    /// would wake only as many as it has issues. Asked at each queue answer, which is where
    /// every hold's end is learnt; after the first, it costs one test.
    pub(super) fn start_held_slots(&mut self, now: Instant) {
        if !self.launch.held_start || self.all_held() || self.holds.probe().is_some() {
            return;
        }
        self.launch.held_start = false;
        let never: Vec<usize> = self
            .pool
            .wakeable()
            .into_iter()
            .filter(|i| self.pool.slots.get(i).is_some_and(|s| s.spawns == 0))
            .collect();
        for idx in never {
            self.spawn_in(idx, now);
        }
    }

    fn adopt(&mut self, found: Adopted, now: Instant) {
        let Adopted {
            adoptee: a,
            watch,
            log,
        } = found;
        let now_e = self.epoch();
        let started_epoch = a.started_epoch.unwrap_or(now_e).min(now_e);
        let started = now
            .checked_sub(Duration::from_secs(now_e - started_epoch))
            .unwrap_or(now);
        let id = a
            .worker_id
            .unwrap_or_else(|| format!("adopted-{}-slot-{}", a.pid, a.slot));
        let (pid, start) = (a.pid, a.start);
        let Some(Started {
            pidfd: fd, watched, ..
        }) = watch
        else {
            self.log(
                line(
                    Kind::SupervisorError,
                    "adopted worker ended before it was watched",
                )
                .slot(a.slot)
                .pid(pid),
            );
            return;
        };
        if !watched {
            self.groups.unwatched.push((pid, start));
        }
        let mut slot = Slot::new(a.slot, self.pool.params);
        slot.spawns = a.restarts + 1;
        slot.restarts = a.restarts;
        slot.phase = Phase::Running(LiveWorker {
            pid,
            start,
            id,
            started,
            started_epoch,
            own_child: false,
            pidfd: fd,
            log,
            kill: None,
            seen: Seen::since(started_epoch),
            queue_at_spawn: None,
            cgroup: a.cgroup.clone().map(Arc::new),
        });
        self.pool.by_worker.insert((pid, start), a.slot);
        self.pool.slots.insert(a.slot, slot);
    }
}
