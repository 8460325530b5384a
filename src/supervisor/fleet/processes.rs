//! The OS seam: our workers' processes and process groups, what is reaped and signalled,
//! and what waits for a group to be gone.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::*;

/// Every process action goes through `children` (the OS, or a test double), every group
/// ending through `reaper`; the rest is what waits on them. One part because these are the
/// fleet's only contact with processes: a test swaps `children` and nothing else.
pub(super) struct Processes {
    pub(super) children: Box<dyn Children>,
    pub(super) reaper: Reaper,
    /// Workers with no pidfd watch (the kernel has none, or registering it failed): own
    /// ones are checked on every SIGCHLD, adopted ones every tick.
    pub(super) unwatched: Vec<(i32, u64)>,
    /// Dead workers whose claims are released once their process group is gone.
    pub(super) pending_release: Vec<DeadWorker>,
    /// Ended workers' ids (and whether each was our own child) by pid, until their group is
    /// gone: then their escaped descendants (found by `RED_AFK_WORKER_ID` in their
    /// environment) are terminated.
    pub(super) ended: HashMap<i32, (String, bool)>,
    /// Workers whose group ended since the last tick: leader, id, our own child; their
    /// escaped descendants are searched for at the tick.
    pub(super) stray_search: Vec<(i32, String, bool)>,
    /// Escaped descendants sent SIGTERM, and when SIGKILL is due.
    pub(super) stray_kills: Vec<(process::Proc, Instant)>,
    /// When the stop first found descendants that escaped their worker's group.
    pub(super) strays_since: Option<Instant>,
    /// Ended workers whose stray search found something: searched again at `due` (a
    /// stray sent SIGTERM may start another, `setsid -f`), with the searches so far.
    pub(super) stray_retry: Vec<StrayRetry>,
    /// cgroup mode: ended workers' attempt cgroups (with slot and worker id) by pid, until
    /// the cgroup is empty; then its figures are read and it is removed.
    pub(super) ended_cgroups: HashMap<i32, (crate::cgroup::Cgroup, usize, String)>,
    /// The fleet runs in cgroup mode (README "Isolation").
    pub(super) cgroup_mode: bool,
    /// A stop already said it ends attempt cgroups no worker owns.
    pub(super) cgroup_strays_logged: bool,
}

/// One ended worker to search for strays again.
#[derive(Debug, Clone)]
pub(super) struct StrayRetry {
    pub(super) leader: i32,
    pub(super) id: String,
    pub(super) own: bool,
    pub(super) searches: u32,
    pub(super) due: Instant,
}

impl Processes {
    pub(super) fn new(children: Box<dyn Children>, stop_grace: Duration) -> Self {
        Processes {
            children,
            reaper: Reaper::new(stop_grace),
            unwatched: Vec::new(),
            pending_release: Vec::new(),
            ended: HashMap::new(),
            stray_search: Vec::new(),
            stray_kills: Vec::new(),
            strays_since: None,
            stray_retry: Vec::new(),
            ended_cgroups: HashMap::new(),
            cgroup_mode: false,
            cgroup_strays_logged: false,
        }
    }

    /// When the next repeated stray search is due.
    pub(super) fn next_stray_retry(&self) -> Option<Instant> {
        self.stray_retry.iter().map(|r| r.due).min()
    }

    /// When the next escaped descendant sent SIGTERM is due its SIGKILL.
    pub(super) fn next_stray_kill(&self) -> Option<Instant> {
        self.stray_kills.iter().map(|k| k.1).min()
    }
}

impl Fleet {
    /// SIGCHLD: our own workers that ended without a pidfd watch, and the orphans of the
    /// workers' trees reparented to us (the child subreaper).
    ///
    /// Where groups are signalled through pidfds, nothing is pinned: the kernel is asked
    /// for our zombie children one at a time (`waitid` without reaping) and each is reaped,
    /// a worker's as its exit. The first zombie that belongs to a command the supervisor
    /// runs itself (in our session; its own waiter reaps it) ends the pass, the next
    /// SIGCHLD or tick goes on. Elsewhere `/proc` is read, sparing the pinned leaders.
    pub fn on_sigchld(&mut self, now: Instant) {
        self.check_unwatched_children(now);
        if !process::pidfd_groups() {
            let mut keep = self.kept_children();
            keep.extend(self.procs.reaper.leaders());
            self.procs.children.reap_orphans(&keep);
            return;
        }
        // Bounded: each round reaps one zombie, and at most this many arrive per event.
        for _ in 0..4096 {
            let Some((pid, commands)) = self.procs.children.next_zombie() else {
                return;
            };
            if let Some(start) = self.pool.own_worker_start(pid) {
                self.own_child_ended(pid, start, now);
                continue;
            }
            if commands {
                return;
            }
            self.procs.children.reap(pid);
        }
    }

    /// Our own worker `pid` (started at `start`) has ended: read how (reaping it unless its
    /// zombie pins its group id) and handle the exit.
    pub fn own_child_ended(&mut self, pid: i32, start: u64, now: Instant) {
        let pinned = self
            .pool
            .slots
            .values()
            .filter_map(|s| s.worker())
            .find(|w| w.pid == pid && w.start == start)
            .is_none_or(|w| matches!(group_of(&*self.procs.children, w), Group::Pinned));
        if self.pool.own_worker_start(pid) != Some(start) {
            return;
        }
        if let Some(kind) = self.procs.children.exit_of(pid, pinned) {
            self.procs.unwatched.retain(|u| u.0 != pid);
            self.on_exit(pid, start, kind, now);
        }
    }
    /// Own workers with no pidfd watch: checked on each SIGCHLD (no thread, no poll).
    fn check_unwatched_children(&mut self, now: Instant) {
        let own: Vec<(i32, u64)> = self
            .procs
            .unwatched
            .iter()
            .copied()
            .filter(|(pid, start)| self.pool.own_worker_start(*pid) == Some(*start))
            .collect();
        for (pid, start) in own {
            self.own_child_ended(pid, start, now);
        }
    }

    /// Adopted workers with no pidfd watch: checked by identity every tick.
    pub(super) fn check_unwatched_adopted(&mut self, now: Instant) {
        let ended: Vec<(i32, u64)> = self
            .procs
            .unwatched
            .iter()
            .copied()
            .filter(|(pid, _)| self.pool.own_worker_start(*pid).is_none())
            .collect::<Vec<_>>()
            .into_iter()
            .filter(|(pid, start)| !self.procs.children.is_live(*pid, *start))
            .collect();
        for (pid, start) in ended {
            self.procs.unwatched.retain(|u| u.0 != pid);
            self.on_exit(pid, start, ExitKind::Unknown, now);
        }
    }

    /// The orphans of the workers' trees, by reading `/proc` (pinned groups only).
    pub fn reap_orphans(&mut self) {
        if process::pidfd_groups() {
            self.on_sigchld(Instant::now());
            return;
        }
        let mut keep = self.kept_children();
        keep.extend(self.procs.reaper.leaders());
        self.procs.children.reap_orphans(&keep);
    }
}

impl Fleet {
    /// cgroup mode: an ended worker's cgroup is empty. What the kernel counted for the
    /// attempt is logged, an OOM kill makes the attempt `oom-killed` (a failure of the
    /// issue, in its ledger when its claim is given back), and the cgroup is removed.
    pub(super) fn finish_cgroups(&mut self, done: &[Done]) {
        for d in done {
            let Some((cg, slot, id)) = self.procs.ended_cgroups.remove(&d.leader) else {
                continue;
            };
            let f = self.procs.children.finish_cgroup(d.leader, &cg);
            let oom = f.oom_kills.is_some_and(|n| n > 0);
            if oom {
                for w in &mut self.procs.pending_release {
                    if w.pid == d.leader {
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
            self.log(Event::now(kind::FIGURES, msg).slot(slot).pid(d.leader));
        }
    }
}
