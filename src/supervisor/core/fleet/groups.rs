//! What the fleet keeps of its workers' process groups: the groups being terminated, the
//! workers nothing watches, the dead workers whose claims wait for their group to go, and
//! the ended workers whose escaped descendants are still to be searched for. Pure
//! bookkeeping: the driver reaches the processes (`os/children.rs`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::*;
use crate::event_log::Kind;

/// One part because these are what waits on the workers' groups: a group's end, a watch
/// that could not be set, a release that needs the group gone first.
pub(super) struct Groups {
    pub(super) reaper: Reaper,
    /// Workers with no pidfd watch (the kernel has none, or registering it failed): own
    /// ones are checked on every SIGCHLD, adopted ones every tick (by the driver).
    pub(super) unwatched: Vec<(i32, u64)>,
    /// Dead workers whose claims are released once their process group is gone.
    pub(super) pending_release: Vec<DeadWorker>,
    /// Ended workers' ids (and whether each was our own child) by pid, until their group is
    /// gone: then their escaped descendants (found by `RED_AFK_WORKER_ID` in their
    /// environment) are searched for.
    pub(super) ended: HashMap<i32, (String, bool)>,
    /// Workers whose group ended since the last tick: leader, id, our own child; their
    /// escaped descendants are searched for at the tick.
    pub(super) stray_search: Vec<(i32, String, bool)>,
    /// cgroup mode: ended workers' attempt cgroups (with slot and worker id) by pid, until
    /// the cgroup is empty; then its figures are read and it is removed.
    pub(super) ended_cgroups: HashMap<i32, (crate::cgroup::Cgroup, usize, String)>,
    /// cgroup mode: cgroups being finished (figures asked for), with slot and worker id.
    pub(super) finishing: HashMap<i32, (usize, String)>,
    /// The fleet runs in cgroup mode (README "Isolation").
    pub(super) cgroup_mode: bool,
    /// The kernel signals groups through pidfds (Linux 6.9+): a worker's group is named by
    /// its pidfd, not its number.
    pub(super) pidfd_groups: bool,
    /// A cgroup's emptying arrives as an event (its `cgroup.events` is watched).
    pub(super) cgroups_evented: bool,
}

impl Groups {
    pub(super) fn new(stop_grace: Duration) -> Self {
        Groups {
            reaper: Reaper::new(stop_grace),
            unwatched: Vec::new(),
            pending_release: Vec::new(),
            ended: HashMap::new(),
            stray_search: Vec::new(),
            ended_cgroups: HashMap::new(),
            finishing: HashMap::new(),
            cgroup_mode: false,
            pidfd_groups: false,
            cgroups_evented: false,
        }
    }
}

/// [`Fleet::terminate`] on the parts it needs, for a caller holding a worker borrowed.
pub(super) fn terminate_into(
    groups: &mut Groups,
    out: &mut Vec<Effect>,
    pid: i32,
    group: Group,
    own: bool,
    exited: bool,
    now: Instant,
) {
    let evented = groups.cgroups_evented;
    if let Some(o) = groups
        .reaper
        .terminate(pid, group, own, exited, evented, now)
    {
        out.push(Effect::Group(o));
    }
}

impl Fleet {
    /// How the group of worker `w` is signalled and found empty: its cgroup where it has
    /// one, else through its pidfd where the kernel can, else by its pinned group id.
    pub(super) fn group_of(&self, w: &LiveWorker) -> Group {
        super::shutdown::group_for(self.groups.pidfd_groups, w)
    }

    /// Starts terminating worker `pid`'s group (SIGTERM now, SIGKILL after the grace).
    pub(super) fn terminate(&mut self, pid: i32, group: Group, own: bool, exited: bool) {
        let now = self.now;
        terminate_into(
            &mut self.groups,
            &mut self.out,
            pid,
            group,
            own,
            exited,
            now,
        );
    }

    /// Whether our own worker `pid` (started at `start`) is current, and if so whether its
    /// zombie must be kept to pin its group id when its end is read (`Some(keep)`).
    pub fn own_child_wait(&self, pid: i32, start: u64) -> Option<bool> {
        let idx = self.pool.slot_of(pid, start)?;
        let w = self.pool.slots.get(&idx)?.worker()?;
        w.own_child
            .then(|| matches!(self.group_of(w), Group::Pinned))
    }

    /// Our own workers with no pidfd watch, checked by the driver on each SIGCHLD.
    pub fn unwatched_own(&self) -> Vec<(i32, u64)> {
        self.groups
            .unwatched
            .iter()
            .copied()
            .filter(|(pid, start)| self.pool.own_worker_start(*pid) == Some(*start))
            .collect()
    }

    /// Adopted workers with no pidfd watch, checked by identity before every tick.
    pub fn unwatched_adopted(&self) -> Vec<(i32, u64)> {
        self.groups
            .unwatched
            .iter()
            .copied()
            .filter(|(pid, _)| self.pool.own_worker_start(*pid).is_none())
            .collect()
    }

    /// How many workers the fleet runs (about how many children a zombie pass walks).
    pub fn worker_count(&self) -> usize {
        self.pool.by_worker.len()
    }

    /// Whether a group is being waited out: an orphan's zombie can be its last member,
    /// and only a zombie pass ends it.
    pub fn groups_dying(&self) -> bool {
        !self.groups.reaper.is_empty()
    }

    /// The start token of our own current worker `pid` (its zombie is its exit, not an
    /// orphan).
    pub fn own_worker_start(&self, pid: i32) -> Option<u64> {
        self.pool.own_worker_start(pid)
    }

    /// The groups being terminated, for the driver to say which still have members.
    pub fn dying_groups(&self) -> Vec<(i32, Group)> {
        self.groups
            .reaper
            .groups()
            .map(|(l, g)| (l, g.clone()))
            .collect()
    }

    /// Adopted workers the driver found gone at the tick.
    pub(super) fn adopted_gone(&mut self, gone: Vec<(i32, u64)>, now: Instant) {
        for (pid, start) in gone {
            if !self.groups.unwatched.contains(&(pid, start)) {
                continue;
            }
            self.groups.unwatched.retain(|u| u.0 != pid);
            self.on_exit(pid, start, ExitKind::Unknown, now);
        }
    }

    /// cgroup mode: ended workers' cgroups are empty: their figures are asked for (the
    /// claims wait for them, an OOM kill changes how the attempt ends).
    pub(super) fn finish_cgroups(&mut self, done: &[Done]) {
        for d in done {
            let Some((cg, slot, id)) = self.groups.ended_cgroups.remove(&d.leader) else {
                continue;
            };
            self.groups.finishing.insert(d.leader, (slot, id));
            self.emit(Effect::FinishCgroup {
                leader: d.leader,
                cgroup: cg,
            });
        }
    }

    /// What the kernel counted for an ended worker's attempt: logged; an OOM kill makes
    /// the attempt `oom-killed` (a failure of the issue, in its ledger when its claim is
    /// given back); then its claims are given back.
    pub(super) fn cgroup_finished(&mut self, leader: i32, f: crate::cgroup::Figures) {
        let Some((slot, id)) = self.groups.finishing.remove(&leader) else {
            return;
        };
        let oom = f.oom_kills.is_some_and(|n| n > 0);
        if oom {
            for w in &mut self.groups.pending_release {
                if w.pid == leader {
                    w.outcome = crate::ledger::Outcome::OomKilled;
                }
            }
        }
        let mut msg = format!(
            "worker {id} attempt used {:.3} CPU seconds",
            f.cpu_usec.unwrap_or(0) as f64 / 1e6
        );
        if let Some(p) = f.memory_peak {
            msg.push_str(&format!(", memory peak {} KiB", p / 1024));
        }
        if oom {
            msg.push_str(&format!(
                "; the OOM killer ended {} of its processes: oom-killed",
                f.oom_kills.unwrap_or(0)
            ));
        }
        self.log(line(Kind::SlotFigures, msg).slot(slot).pid(leader));
        if self.stopping.is_some() {
            self.groups.pending_release.clear();
            return;
        }
        self.release_claims(&[Done {
            leader,
            killed: false,
        }]);
    }
}
