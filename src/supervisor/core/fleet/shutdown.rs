//! Stopping the fleet: every group terminated and confirmed gone, then the exit code; and
//! which processes a search for escaped descendants must leave alone.

use std::time::{Duration, Instant};

use super::*;
use crate::event_log::Kind;
use crate::timeutil;

impl Fleet {
    // ---- stopping ----

    /// Starts stopping the fleet; a second request kills what is left at once.
    pub(super) fn begin_stop(&mut self, code: i32, why: &str, now: Instant) {
        if self.stopping.is_some() {
            self.log(line(
                Kind::SupervisorStop,
                format!("{why} again: killing every remaining worker group now"),
            ));
            self.groups.reaper.kill_all_now(now);
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
        let pidfd_groups = self.groups.pidfd_groups;
        let live: Vec<(i32, Group, bool)> = self
            .pool
            .slots
            .values_mut()
            .filter_map(|s| s.worker_mut())
            .map(|w| {
                w.kill = Some(KillReason::Stop);
                (w.pid, group_for(pidfd_groups, w), w.own_child)
            })
            .collect();
        self.log(line(
            Kind::SupervisorStop,
            format!("stopping fleet ({why}): {} workers", live.len()),
        ));
        for (pid, group, own) in live {
            self.terminate(pid, group, own, false);
        }
    }

    /// Every worker ended and every group is empty (the driver then ends what escaped
    /// the groups before the stop is complete).
    pub fn stop_settled(&self) -> bool {
        self.pool.slots.values().all(|s| s.worker().is_none()) && self.groups.reaper.is_empty()
    }

    /// Processes a stray search must leave alone: every worker (own or adopted, running
    /// or its group still being cleaned up) and our unwatched children.
    pub fn covered(&self) -> HashSet<i32> {
        let mut keep = self.kept_children();
        keep.extend(self.groups.reaper.leaders());
        keep.extend(
            self.pool
                .slots
                .values()
                .filter_map(|s| s.worker().map(|w| w.pid)),
        );
        keep
    }

    /// cgroup mode: the ended workers' cgroups not yet empty (a stop leaves them to their
    /// own cleanup rather than sweeping them as strays).
    pub fn ended_cgroups(&self) -> Vec<crate::cgroup::Cgroup> {
        self.groups
            .ended_cgroups
            .values()
            .map(|e| e.0.clone())
            .collect()
    }

    /// Whether the fleet runs in cgroup mode (a stop then sweeps attempt cgroups, not
    /// the process table).
    pub fn cgroup_mode(&self) -> bool {
        self.groups.cgroup_mode
    }

    /// After an ended worker's group is gone, its descendants that escaped the group (they
    /// carry its `RED_AFK_WORKER_ID`) must go too, or they would live until the fleet
    /// stops. Finding them reads the process table, so it is not done per event: the ids
    /// wait here and the next tick asks for one search for all of them.
    pub(super) fn clean_after(&mut self, done: &[Done]) {
        for d in done {
            if let Some(ended) = self.groups.ended.remove(&d.leader) {
                self.groups.stray_search.push((d.leader, ended.0, ended.1));
            }
        }
    }

    /// The tick's one search for the escaped descendants of every worker whose group ended
    /// since the last tick.
    pub(super) fn search_strays(&mut self) {
        let pending = std::mem::take(&mut self.groups.stray_search);
        if !pending.is_empty() {
            self.emit(Effect::SearchStrays(pending));
        }
    }

    /// Our children that are workers (never treated as strays).
    pub fn kept_children(&self) -> HashSet<i32> {
        self.pool
            .slots
            .values()
            .filter_map(|s| s.worker().filter(|w| w.own_child).map(|w| w.pid))
            .chain(self.groups.unwatched.iter().map(|(p, _)| *p))
            .collect()
    }

    /// Our children the orphan reaping must leave alone: the workers and the leaders that
    /// pin their groups.
    pub fn kept_from_reaping(&self) -> HashSet<i32> {
        let mut keep = self.kept_children();
        keep.extend(self.groups.reaper.leaders());
        keep
    }

    /// The workers and group leaders still alive when giving up on a stop.
    pub fn live_pids(&self) -> Vec<i32> {
        self.pool
            .slots
            .values()
            .filter_map(|s| s.worker().map(|w| w.pid))
            .chain(self.groups.reaper.leaders())
            .collect()
    }
}

/// How the group of worker `w` is signalled: see [`Fleet::group_of`].
pub(super) fn group_for(pidfd_groups: bool, w: &LiveWorker) -> Group {
    match (&w.cgroup, w.pidfd) {
        (Some(cg), _) => Group::Cgroup(cg.as_ref().clone()),
        (None, true) if pidfd_groups => Group::Pidfd { start: w.start },
        _ => Group::Pinned,
    }
}
