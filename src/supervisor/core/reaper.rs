//! Cleaning up after workers: what is left of an ended worker's process group is
//! terminated (SIGTERM, then SIGKILL after the stop grace) and the group is followed until
//! it is empty. Pure bookkeeping: it says what to signal, reap or let go of as [`Order`]s
//! and is told which groups still have members; the driver reaches the processes through
//! `children`, which holds their pidfds (a group here names its leader's by pid and start).
//!
//! A late SIGKILL to a group must never hit an unrelated one. Where the kernel signals
//! groups through pidfds (Linux 6.9+), the group is named by its kernel object, not its
//! number, so the leader is reaped at once. Elsewhere our own leader is kept a zombie
//! until its group is gone: that pins the group id, which the kernel cannot hand to a new
//! process while the zombie exists.

use std::time::{Duration, Instant};

/// How a dying group is signalled and found empty.
#[derive(Debug, Clone)]
pub enum Group {
    /// Through the leader's pidfd (Linux 6.9+): safe after the leader was reaped, and
    /// "empty" is the kernel's answer, no table read. The driver holds the pidfd of the
    /// worker (leader, `start`) until the group is done ([`Order::Forget`]): nothing here
    /// owns a descriptor.
    Pidfd { start: u64 },
    /// By group id, with our own leader kept a zombie until the group is empty so the id
    /// cannot be reused; emptiness is read from `/proc`.
    Pinned,
    /// cgroup mode: the worker's attempt cgroup. SIGKILL is `cgroup.kill`; empty is its
    /// `populated 0`, which arrives as an event where the cgroup is watched.
    Cgroup(crate::cgroup::Cgroup),
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
    /// Its emptying arrives as an event (a watched cgroup): no re-check is scheduled.
    evented: bool,
}

/// Which signal an [`Order::Signal`] sends: the two a group is ever ended with. The OS side
/// (`os/children.rs`) turns it into the system's number; the fleet names no OS type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: end cleanly (a worker gives its issues back).
    Term,
    /// SIGKILL: past the grace, or a hard stop.
    Kill,
}

/// What the reaper asks to be done to a group or its leader.
#[derive(Debug, Clone)]
pub enum Order {
    /// Signal the group `leader` leads (or led); `if_alive`: only while it has a live
    /// member (an adopted leader that is gone does not pin a pinned group's id).
    Signal {
        leader: i32,
        group: Group,
        sig: Stop,
        if_alive: bool,
    },
    /// Reap our own leader, whose zombie pinned its group id until the group emptied.
    Reap { leader: i32 },
    /// Let go of the pidfd of worker (`leader`, `start`): its group is gone, or is not
    /// followed through it.
    Forget { leader: i32, start: u64 },
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
    dying: Vec<Dying>,
}

const FIRST_RECHECK: Duration = Duration::from_millis(20);
const LAST_RECHECK: Duration = Duration::from_secs(1);

impl Reaper {
    pub fn new(grace: Duration) -> Self {
        Reaper {
            grace,
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
    /// `leader_exited` says whether the leader's end was already handled; `evented`
    /// whether a cgroup's emptying arrives as an event (nothing re-checks it then).
    #[allow(clippy::too_many_arguments)]
    pub fn terminate(
        &mut self,
        leader: i32,
        group: Group,
        own_child: bool,
        leader_exited: bool,
        evented: bool,
        now: Instant,
    ) -> Option<Order> {
        if let Some(d) = self.dying.iter_mut().find(|d| d.leader == leader) {
            d.leader_exited |= leader_exited;
            return None;
        }
        let order = Order::Signal {
            leader,
            group: group.clone(),
            sig: Stop::Term,
            if_alive: matches!(group, Group::Pinned) && !own_child,
        };
        let evented = evented && matches!(group, Group::Cgroup(_));
        self.dying.push(Dying {
            leader,
            evented,
            group,
            own_child,
            leader_exited,
            kill_at: crate::timeutil::deadline(now, self.grace),
            killed: false,
            recheck_at: now + FIRST_RECHECK,
            recheck_every: FIRST_RECHECK,
        });
        Some(order)
    }

    /// The groups being terminated, for the driver to ask which still have members.
    /// Whether the group `leader` led was already sent its kill (past the grace).
    pub fn killed(&self, leader: i32) -> bool {
        self.dying.iter().any(|d| d.leader == leader && d.killed)
    }

    /// Whether the group worker (`leader`, `start`) led is followed through its pidfd
    /// (which must then be held until the group is done). The start token tells a worker
    /// that got the pid of a leader whose group is still dying from that leader.
    pub fn follows_pidfd(&self, leader: i32, start: u64) -> bool {
        self.dying.iter().any(|d| {
            d.leader == leader && matches!(d.group, Group::Pidfd { start: s } if s == start)
        })
    }

    pub fn groups(&self) -> impl Iterator<Item = (i32, &Group)> + '_ {
        self.dying.iter().map(|d| (d.leader, &d.group))
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

    /// Advances every group by `alive` (whether each leader's group still has a live
    /// member; one not named counts as alive): SIGKILL when its grace is over, done when
    /// no live member is left and the leader's end was handled (then a pinned leader is
    /// reaped). Called at the end of every loop turn.
    pub fn poll(&mut self, alive: &dyn Fn(i32) -> bool, now: Instant) -> (Vec<Done>, Vec<Order>) {
        let mut done = Vec::new();
        let mut orders = Vec::new();
        self.dying.retain_mut(|d| {
            let members = alive(d.leader);
            if !members && d.leader_exited {
                match d.group {
                    Group::Pinned if d.own_child => {
                        orders.push(Order::Reap { leader: d.leader });
                    }
                    Group::Pidfd { start } => orders.push(Order::Forget {
                        leader: d.leader,
                        start,
                    }),
                    _ => {}
                }
                done.push(Done {
                    leader: d.leader,
                    killed: d.killed,
                });
                return false;
            }
            if members && now >= d.kill_at && !d.killed {
                orders.push(Order::Signal {
                    leader: d.leader,
                    group: d.group.clone(),
                    sig: Stop::Kill,
                    if_alive: false,
                });
                d.killed = true;
            }
            if now >= d.recheck_at {
                d.recheck_every = (d.recheck_every * 2).min(LAST_RECHECK);
                d.recheck_at = now + d.recheck_every;
            }
            true
        });
        (done, orders)
    }

    /// When the next SIGKILL or re-check is due while groups are pending.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.dying
            .iter()
            .filter_map(|d| match (d.evented, d.killed) {
                (true, true) => None,
                (true, false) => Some(d.kill_at),
                (false, true) => Some(d.recheck_at),
                (false, false) => Some(d.recheck_at.min(d.kill_at)),
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group followed through its leader's pidfd is known by the leader's start token
    /// too (a worker given the pid of a leader whose group is still dying is not that
    /// leader), and the pidfd is let go of once the group is gone.
    #[test]
    fn a_pidfd_group_is_known_by_its_leaders_start_and_let_go_of_when_done() {
        let mut r = Reaper::new(Duration::from_secs(10));
        let now = Instant::now();
        let order = r.terminate(42, Group::Pidfd { start: 7 }, true, true, false, now);
        assert!(matches!(
            order,
            Some(Order::Signal {
                leader: 42,
                sig: Stop::Term,
                ..
            })
        ));
        assert!(r.follows_pidfd(42, 7));
        assert!(!r.follows_pidfd(42, 8), "another worker with that pid");
        let (done, orders) = r.poll(&|_| true, now);
        assert!(done.is_empty() && orders.is_empty(), "{orders:?}");
        let (done, orders) = r.poll(&|_| false, now);
        assert_eq!(
            done,
            vec![Done {
                leader: 42,
                killed: false
            }]
        );
        assert!(
            matches!(
                orders[..],
                [Order::Forget {
                    leader: 42,
                    start: 7
                }]
            ),
            "{orders:?}"
        );
        assert!(!r.follows_pidfd(42, 7));
    }
}
