//! Stopping the fleet: every group terminated, confirmed gone, then the exit code.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::*;
use crate::process;
use crate::timeutil;

/// How often the strays of one ended worker are searched for while some are found (with
/// backoff 1, 2, 4, 8, 16 s: about half a minute in all), before the survivors are named in
/// one line and left to the stop.
const STRAY_SEARCHES: u32 = 6;

impl Fleet {
    // ---- stopping ----

    /// Starts stopping the fleet; a second request kills what is left at once.
    pub fn begin_stop(&mut self, code: i32, why: &str, now: Instant) {
        if self.stopping.is_some() {
            self.log(Event::now(
                kind::STOP,
                format!("{why} again: killing every remaining worker group now"),
            ));
            self.procs.reaper.kill_all_now(now);
            return;
        }
        let grace = Duration::from_secs(self.timing.stop_grace_s);
        // One grace for the worker groups, one for descendants that left them.
        self.stopping = Some(Stopping {
            code,
            give_up_at: timeutil::deadline(
                now,
                grace
                    .saturating_mul(2)
                    .saturating_add(Duration::from_secs(10)),
            ),
        });
        let live: Vec<(i32, Group, bool)> = self
            .pool
            .slots
            .values_mut()
            .filter_map(|s| s.worker_mut())
            .map(|w| {
                w.kill = Some(KillReason::Stop);
                (w.pid, group_of(&*self.procs.children, w), w.own_child)
            })
            .collect();
        self.log(Event::now(
            kind::STOP,
            format!("stopping fleet ({why}): {} workers", live.len()),
        ));
        for (pid, group, own) in live {
            self.procs
                .reaper
                .terminate(&mut *self.procs.children, pid, group, own, false, now);
        }
    }

    /// Every worker ended, every group is empty, and no descendant that escaped its
    /// group (`setsid`) is left among our children. Drives the escaped ones' termination.
    pub fn stop_complete(&mut self, now: Instant) -> bool {
        if !(self.pool.slots.values().all(|s| s.worker().is_none()) && self.procs.reaper.is_empty())
        {
            return false;
        }
        self.sweep_strays(now)
    }

    /// SIGTERM (SIGKILL once the grace is over) to every stray and its group, again on
    /// every call since killing one can reparent its own escaped children. Returns whether
    /// none is left.
    fn sweep_strays(&mut self, now: Instant) -> bool {
        if self.procs.cgroup_mode {
            return self.sweep_cgroups(now);
        }
        let strays = self.strays();
        if strays.is_empty() {
            return true;
        }
        let grace = Duration::from_secs(self.timing.stop_grace_s);
        let first = self.procs.strays_since.is_none();
        let since = *self.procs.strays_since.get_or_insert(now);
        if first {
            let pids: Vec<i32> = strays.iter().map(|p| p.pid).collect();
            self.log(Event::now(
                kind::STOP,
                format!(
                    "stopping {} processes that left their worker's process group: {pids:?}",
                    pids.len()
                ),
            ));
        }
        let sig = if now >= timeutil::deadline(since, grace) {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        for p in &strays {
            self.procs.children.signal_stray(p, sig);
        }
        false
    }

    /// cgroup mode: nothing of a worker is outside its cgroup, so what a stop must still
    /// end is any attempt cgroup of the fleet that holds processes but belongs to no
    /// worker (a dead attempt of a previous supervisor): SIGTERM, `cgroup.kill` after the
    /// grace. Returns whether none is left.
    fn sweep_cgroups(&mut self, now: Instant) -> bool {
        let grace = Duration::from_secs(self.timing.stop_grace_s);
        let since = *self.procs.strays_since.get_or_insert(now);
        let sig = if now >= timeutil::deadline(since, grace) {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        let keep: Vec<crate::cgroup::Cgroup> = self
            .procs
            .ended_cgroups
            .values()
            .map(|e| e.0.clone())
            .collect();
        let n = self.procs.children.sweep_cgroups(&keep, sig);
        if n > 0 && !self.procs.cgroup_strays_logged {
            self.procs.cgroup_strays_logged = true;
            self.log(Event::now(
                kind::STOP,
                format!("stopping {n} attempt cgroups that outlived their worker"),
            ));
        }
        n == 0
    }

    /// What a stop must still end besides the worker groups: our children that left their
    /// worker's group (reparented to us, the subreaper), and every other live process of
    /// this fleet wherever it was reparented. The second covers what adopted workers left:
    /// their escaped descendants went to init when the previous supervisor died.
    fn strays(&mut self) -> Vec<process::Proc> {
        let keep = self.covered();
        self.procs
            .children
            .strays(&keep, &self.layout.supervisor_lane())
    }

    /// Processes a stray search must leave alone: every worker (own or adopted, running
    /// or its group still being cleaned up) and our unwatched children.
    fn covered(&self) -> HashSet<i32> {
        let mut keep = self.kept_children();
        keep.extend(self.procs.reaper.leaders());
        keep.extend(
            self.pool
                .slots
                .values()
                .filter_map(|s| s.worker().map(|w| w.pid)),
        );
        keep
    }

    /// After an ended worker's group is gone, its descendants that escaped the group (they
    /// carry its `RED_AFK_WORKER_ID`) must go too, or they would live until the fleet
    /// stops. Finding them reads the process table, so it is not done per event: the ids
    /// wait here and the next tick searches once for all of them ([`Self::search_strays`]).
    pub(super) fn clean_after(&mut self, done: &[Done], now: Instant) {
        for d in done {
            if let Some(ended) = self.procs.ended.remove(&d.leader) {
                self.procs.stray_search.push((d.leader, ended.0, ended.1));
            }
        }
        let kills = std::mem::take(&mut self.procs.stray_kills);
        for (p, kill_at) in kills {
            if !self.procs.children.is_live(p.pid, p.start) {
                continue;
            }
            if now < kill_at {
                self.procs.stray_kills.push((p, kill_at));
            } else {
                self.procs.children.signal_stray(&p, Signal::SIGKILL);
            }
        }
    }

    /// One search for the escaped descendants of every worker whose group ended since the
    /// last tick: SIGTERM now, SIGKILL after the grace. Our own workers' escapees were
    /// reparented to us; an adopted worker's went elsewhere, so the fleet is looked for by
    /// its environment across the table.
    pub(super) fn search_strays(&mut self, now: Instant) {
        let pending: Vec<(i32, String, bool, u32)> = std::mem::take(&mut self.procs.stray_search)
            .into_iter()
            .map(|(leader, id, own)| (leader, id, own, 0))
            .collect();
        self.search_strays_of(pending, now);
    }

    /// The repeated searches that are due ([`STRAY_SEARCHES`], with backoff): a stray sent
    /// SIGTERM may start another process carrying the worker's id before it exits.
    pub(super) fn retry_strays(&mut self, now: Instant) {
        if self.procs.next_stray_retry().is_none_or(|d| d > now) {
            return;
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.procs.stray_retry)
            .into_iter()
            .partition(|r| r.due <= now);
        self.procs.stray_retry = later;
        let pending = due
            .into_iter()
            .map(|r| (r.leader, r.id, r.own, r.searches))
            .collect();
        self.search_strays_of(pending, now);
    }

    fn search_strays_of(&mut self, pending: Vec<(i32, String, bool, u32)>, now: Instant) {
        if pending.is_empty() {
            return;
        }
        let keep = self.covered();
        let ended: Vec<(String, bool)> = pending.iter().map(|p| (p.1.clone(), p.2)).collect();
        let found = self
            .procs
            .children
            .escapees(&ended, &keep, &self.layout.supervisor_lane());
        let grace = Duration::from_secs(self.timing.stop_grace_s);
        for (leader, id, own, searches) in pending {
            let strays: Vec<process::Proc> = found
                .iter()
                .filter(|(of, _)| *of == id)
                .map(|(_, p)| *p)
                .collect();
            if strays.is_empty() {
                continue;
            }
            let searches = searches + 1;
            let pids: Vec<i32> = strays.iter().map(|p| p.pid).collect();
            if searches > STRAY_SEARCHES {
                self.log(
                    Event::now(
                        kind::ERROR,
                        format!(
                            "worker {id}: processes still carry its id after {STRAY_SEARCHES} searches, left to the stop: {pids:?}"
                        ),
                    )
                    .pid(leader),
                );
                continue;
            }
            // Already sent SIGTERM and waiting for their SIGKILL: not again.
            let new: Vec<process::Proc> = strays
                .into_iter()
                .filter(|p| !self.procs.stray_kills.iter().any(|(k, _)| k == p))
                .collect();
            if !new.is_empty() {
                let pids: Vec<i32> = new.iter().map(|p| p.pid).collect();
                self.log(
                    Event::now(
                        kind::ERROR,
                        format!(
                            "worker {id} left processes outside its group: terminating {pids:?}"
                        ),
                    )
                    .pid(leader),
                );
            }
            for p in new {
                self.procs.children.signal_stray(&p, Signal::SIGTERM);
                self.procs
                    .stray_kills
                    .push((p, crate::timeutil::deadline(now, grace)));
            }
            // Searched again until nothing carrying the id is left: 1 s, 2 s, 4 s, ...
            let backoff = Duration::from_secs(1u64 << (searches - 1).min(4));
            self.procs.stray_retry.push(super::processes::StrayRetry {
                leader,
                id,
                own,
                searches,
                due: crate::timeutil::deadline(now, backoff),
            });
        }
    }

    /// Our children that are workers (never treated as strays).
    pub(super) fn kept_children(&self) -> HashSet<i32> {
        self.pool
            .slots
            .values()
            .filter_map(|s| s.worker().filter(|w| w.own_child).map(|w| w.pid))
            .chain(self.procs.unwatched.iter().map(|(p, _)| *p))
            .collect()
    }

    /// What is still alive when giving up on a stop.
    pub fn leftovers(&mut self) -> Vec<i32> {
        let strays: Vec<i32> = self.strays().into_iter().map(|p| p.pid).collect();
        let mut left: Vec<i32> = self
            .pool
            .slots
            .values()
            .filter_map(|s| s.worker().map(|w| w.pid))
            .chain(self.procs.reaper.leaders())
            .chain(strays)
            .collect();
        left.sort_unstable();
        left.dedup();
        left
    }
}
