//! Stopping the fleet: every group terminated, confirmed gone, then the exit code.

use std::time::{Duration, Instant};

use super::*;

impl Fleet {
    // ---- stopping ----

    /// Starts stopping the fleet; a second request kills what is left at once.
    pub fn begin_stop(&mut self, code: i32, why: &str, now: Instant) {
        if self.stopping.is_some() {
            self.log(Event::now(
                kind::STOP,
                format!("{why} again: killing every remaining worker group now"),
            ));
            self.reaper.kill_all_now(now);
            return;
        }
        let grace = Duration::from_secs(self.timing.stop_grace_s);
        self.stopping = Some(Stopping {
            code,
            give_up_at: now + grace + Duration::from_secs(10),
        });
        let live: Vec<(i32, bool)> = self
            .slots
            .values_mut()
            .filter_map(|s| s.worker_mut())
            .map(|w| {
                w.kill = Some(KillReason::Stop);
                (w.pid, w.own_child)
            })
            .collect();
        self.log(Event::now(
            kind::STOP,
            format!("stopping fleet ({why}): {} workers", live.len()),
        ));
        for (pid, own) in live {
            self.reaper.terminate(pid, own, false, now);
        }
    }

    /// Every worker ended and every group is empty.
    pub fn stop_complete(&self) -> bool {
        self.slots.values().all(|s| s.worker().is_none()) && self.reaper.is_empty()
    }

    /// What is still alive when giving up on a stop.
    pub fn leftovers(&self) -> Vec<i32> {
        self.slots
            .values()
            .filter_map(|s| s.worker().map(|w| w.pid))
            .chain(self.reaper.leaders())
            .collect()
    }
}
