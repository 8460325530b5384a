//! Cleaning up after workers: what is left of an ended worker's process group is
//! terminated (SIGTERM, then SIGKILL after the stop grace), its leader is reaped only once
//! the group is empty, and orphans reparented to the supervisor are reaped.
//!
//! Keeping our own leader a zombie until its group is gone pins the group id: the kernel
//! cannot hand that pid to a new process while the zombie exists, so a late SIGKILL to the
//! group can never hit an unrelated one.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use std::sync::Arc;

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use crate::process::{self, Pidfd, Proc};

/// How a dying group is signalled and found empty.
#[derive(Debug, Clone)]
pub enum Group {
    /// Through the leader's pidfd (Linux 6.9+): safe after the leader was reaped, and
    /// "empty" is the kernel's answer, no table read.
    Pidfd(Arc<Pidfd>),
    /// By group id, with our own leader kept a zombie until the group is empty so the id
    /// cannot be reused; emptiness is read from `/proc`.
    Pinned,
}

#[derive(Debug, Clone)]
struct Dying {
    leader: i32,
    group: Group,
    /// Our child: reaped here once the group is empty (pinned groups only). An adopted
    /// leader is someone else's child.
    own_child: bool,
    /// The leader has ended (its exit was handled); until then the group is not done.
    leader_exited: bool,
    kill_at: Instant,
    killed: bool,
    /// When to look again without an event: members that are not our children end
    /// without telling us (an adopted worker's, reparented elsewhere).
    recheck_at: Instant,
    recheck_every: Duration,
}

/// A group that finished cleaning up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub leader: i32,
    /// SIGKILL was needed.
    pub killed: bool,
}

#[derive(Debug)]
pub struct Reaper {
    grace: Duration,
    my_pid: i32,
    my_sid: i32,
    dying: Vec<Dying>,
}

const FIRST_RECHECK: Duration = Duration::from_millis(20);
const LAST_RECHECK: Duration = Duration::from_secs(1);

impl Reaper {
    pub fn new(grace: Duration) -> Self {
        Reaper {
            grace,
            my_pid: std::process::id() as i32,
            my_sid: process::own_sid(),
            dying: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.dying.is_empty()
    }

    pub fn contains(&self, leader: i32) -> bool {
        self.dying.iter().any(|d| d.leader == leader)
    }

    /// Leaders this reaper is responsible for (never reaped as orphans).
    pub fn leaders(&self) -> impl Iterator<Item = i32> + '_ {
        self.dying.iter().map(|d| d.leader)
    }

    /// Starts terminating the group led by `leader`: SIGTERM now, SIGKILL at `now + grace`.
    /// `leader_exited` says whether the leader's end was already handled.
    pub fn terminate(
        &mut self,
        leader: i32,
        group: Group,
        own_child: bool,
        leader_exited: bool,
        now: Instant,
    ) {
        if let Some(d) = self.dying.iter_mut().find(|d| d.leader == leader) {
            d.leader_exited |= leader_exited;
            return;
        }
        match &group {
            Group::Pidfd(fd) => {
                let _ = fd.signal_group(Some(Signal::SIGTERM));
            }
            // An adopted leader that is gone does not pin the group id: signal only a
            // group that still has members.
            Group::Pinned => {
                if own_child || process::group_has_live_member(&process::table(), leader) {
                    let _ = killpg(Pid::from_raw(leader), Signal::SIGTERM);
                }
            }
        }
        self.dying.push(Dying {
            leader,
            group,
            own_child,
            leader_exited,
            kill_at: crate::timeutil::deadline(now, self.grace),
            killed: false,
            recheck_at: now + FIRST_RECHECK,
            recheck_every: FIRST_RECHECK,
        });
    }

    /// Records that the leader of a group being terminated has ended.
    pub fn leader_exited(&mut self, leader: i32) {
        if let Some(d) = self.dying.iter_mut().find(|d| d.leader == leader) {
            d.leader_exited = true;
        }
    }

    /// Sends SIGKILL to every group now, whatever its grace (a second stop signal).
    pub fn kill_all_now(&mut self, now: Instant) {
        for d in &mut self.dying {
            d.kill_at = now;
        }
    }

    /// Advances every group: SIGKILL when its grace is over, done when no live member is
    /// left and the leader's end was handled (then a pinned leader is reaped). Called on
    /// events (a child ended, a deadline came): the cost is one syscall per dying group,
    /// plus one `/proc` read only where groups are pinned.
    pub fn poll(&mut self, now: Instant) -> Vec<Done> {
        if self.dying.is_empty() {
            return Vec::new();
        }
        let table = self
            .dying
            .iter()
            .any(|d| matches!(d.group, Group::Pinned))
            .then(process::table);
        let mut done = Vec::new();
        self.dying.retain_mut(|d| {
            let members = match &d.group {
                Group::Pidfd(fd) => fd.group_alive(),
                Group::Pinned => table
                    .as_deref()
                    .is_some_and(|t| process::group_has_live_member(t, d.leader)),
            };
            if !members && d.leader_exited {
                if d.own_child && matches!(d.group, Group::Pinned) {
                    let _ = waitpid(Pid::from_raw(d.leader), Some(WaitPidFlag::WNOHANG));
                }
                done.push(Done {
                    leader: d.leader,
                    killed: d.killed,
                });
                return false;
            }
            if members && now >= d.kill_at && !d.killed {
                match &d.group {
                    Group::Pidfd(fd) => {
                        let _ = fd.signal_group(Some(Signal::SIGKILL));
                    }
                    Group::Pinned => {
                        let _ = killpg(Pid::from_raw(d.leader), Signal::SIGKILL);
                    }
                }
                d.killed = true;
            }
            if now >= d.recheck_at {
                d.recheck_every = (d.recheck_every * 2).min(LAST_RECHECK);
                d.recheck_at = now + d.recheck_every;
            }
            true
        });
        done
    }

    /// When the next SIGKILL or re-check is due while groups are pending.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.dying
            .iter()
            .map(|d| {
                if d.killed {
                    d.recheck_at
                } else {
                    d.recheck_at.min(d.kill_at)
                }
            })
            .min()
    }

    /// Live children of ours outside our session that no worker leads and no group cleanup
    /// covers: descendants that left their worker's group (`setsid`) and were reparented to
    /// us, the child subreaper, when their parent died.
    pub fn strays(&self, keep: &HashSet<i32>) -> Vec<Proc> {
        process::table()
            .into_iter()
            .filter(|p| {
                p.ppid == self.my_pid
                    && !p.is_zombie()
                    && p.sid != self.my_sid
                    && !keep.contains(&p.pid)
                    && !self.contains(p.pid)
            })
            .collect()
    }

    /// Signals a stray and its process group (never ours: a stray is outside our session,
    /// so its group is too, and that session was made by a worker's descendant).
    pub fn signal_stray(p: &Proc, sig: Signal) {
        let _ = killpg(Pid::from_raw(p.pgid), sig);
        let _ = nix::sys::signal::kill(Pid::from_raw(p.pid), sig);
    }

    /// Reaps zombies reparented to us from workers' trees. Children of our own session
    /// (commands the supervisor runs and waits for itself) and the leaders in `keep` are
    /// left alone. Returns how many were reaped.
    pub fn reap_orphans(&self, keep: &HashSet<i32>) -> usize {
        let table = process::table();
        self.reap_orphans_in(&table, keep)
    }

    fn reap_orphans_in(&self, table: &[Proc], keep: &HashSet<i32>) -> usize {
        let mut n = 0;
        for p in table {
            if p.ppid == self.my_pid
                && p.is_zombie()
                && p.sid != self.my_sid
                && !keep.contains(&p.pid)
                && !self.contains(p.pid)
                && waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG)).is_ok()
            {
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::super::spawn::{SpawnSpec, spawn};
    use super::*;

    /// The worker leaves a grandchild in its group and exits at once: the grandchild is
    /// terminated, the group is seen empty, and the leader is reaped, whichever way the
    /// group is signalled.
    #[test]
    fn group_leftovers_are_terminated_and_leader_reaped() {
        for pidfd in [true, false] {
            if pidfd && !process::pidfd_groups() {
                assert!(std::env::var_os("CI").is_none(), "no pidfd group signals");
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let gc = dir.path().join("gc.pid");
            let script = format!("sleep 300 & echo $! > {}; exit 3", gc.display());
            let argv: Vec<String> = vec!["sh".into(), "-c".into(), script];
            let s = spawn(&SpawnSpec {
                argv: &argv,
                cwd: dir.path(),
                log: &dir.path().join("log"),
                env: vec![],
            })
            .unwrap();
            let fd = Arc::new(Pidfd::open(s.pid).unwrap());
            let deadline = Instant::now() + Duration::from_secs(20);
            // Reaped at once when the group is signalled through the pidfd; kept a zombie
            // (pinning the group id) otherwise.
            let exit = loop {
                if let Some(k) = process::child_exit(s.pid, pidfd) {
                    break k;
                }
                assert!(Instant::now() < deadline, "worker never ended");
                std::thread::sleep(Duration::from_millis(10));
            };
            assert_eq!(exit, process::ExitKind::Code(3));
            let gc: i32 = std::fs::read_to_string(&gc)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(process::read(gc).is_some_and(|p| !p.is_zombie()));
            let group = if pidfd {
                Group::Pidfd(fd)
            } else {
                Group::Pinned
            };
            let mut r = Reaper::new(Duration::from_secs(30));
            r.terminate(s.pid, group, true, true, Instant::now());
            let mut done = Vec::new();
            while done.is_empty() {
                assert!(Instant::now() < deadline, "group never emptied");
                done = r.poll(Instant::now());
                std::thread::sleep(Duration::from_millis(20));
            }
            assert_eq!(
                done,
                vec![Done {
                    leader: s.pid,
                    killed: false
                }]
            );
            assert!(process::read(s.pid).is_none(), "leader reaped");
            assert!(r.is_empty());
        }
    }
}
