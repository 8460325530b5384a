//! The processes that escaped their worker's group (`setsid`): found by the worker id in
//! their environment (or, at a stop, as any live process of the fleet), sent SIGTERM and
//! SIGKILL after the grace. Driven by the driver: it reads the process table through
//! `children`, so it is no part of the pure fleet, which only says whose groups ended
//! (`Effect::SearchStrays`) and what to leave alone.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::event_log::Kind;
use crate::event_log::Record;
use crate::process::Proc;
use crate::supervisor::os::children::Children;
use crate::timeutil;

/// How often the strays of one ended worker are searched for while some are found (with
/// backoff 1, 2, 4, 8, 16 s: about half a minute in all), before the survivors are named in
/// one line and left to the stop.
const STRAY_SEARCHES: u32 = 6;

/// One ended worker to search for strays again.
#[derive(Debug, Clone)]
struct Retry {
    leader: i32,
    id: String,
    own: bool,
    searches: u32,
    due: Instant,
}

/// What the searches and the stop's sweep remember between calls.
#[derive(Debug, Default)]
pub struct Strays {
    /// Escaped descendants sent SIGTERM, and when SIGKILL is due.
    kills: Vec<(Proc, Instant)>,
    /// Ended workers whose search found something: searched again at `due`.
    retry: Vec<Retry>,
    /// When the stop first found descendants that escaped their worker's group.
    since: Option<Instant>,
    /// A stop already said it ends attempt cgroups no worker owns.
    cgroups_logged: bool,
}

/// What a search or sweep is given: the door, what to leave alone, the fleet's lane and
/// the grace before SIGKILL.
pub struct Scope<'a> {
    pub os: &'a mut dyn Children,
    pub keep: &'a HashSet<i32>,
    pub lane: &'a Path,
    pub grace: Duration,
}

impl Strays {
    /// When the next stray sent SIGTERM is due its SIGKILL, or (outside a stop) the next
    /// repeated search.
    pub fn next_deadline(&self, stopping: bool) -> Option<Instant> {
        let kill = self.kills.iter().map(|k| k.1).min();
        let retry = (!stopping)
            .then(|| self.retry.iter().map(|r| r.due).min())
            .flatten();
        kill.into_iter().chain(retry).min()
    }

    /// SIGKILL to each stray whose grace is over, forgetting those gone.
    pub fn kill_due(&mut self, os: &mut dyn Children, now: Instant) {
        let kills = std::mem::take(&mut self.kills);
        for (p, kill_at) in kills {
            if !os.is_live(p.pid, p.start) {
                continue;
            }
            if now < kill_at {
                self.kills.push((p, kill_at));
            } else {
                os.signal_stray(&p, Signal::SIGKILL);
            }
        }
    }

    /// One search for the escaped descendants of these ended workers (leader, id, our own
    /// child): SIGTERM now, SIGKILL after the grace. Our own workers' escapees were
    /// reparented to us; an adopted worker's went elsewhere, so the fleet is looked for by
    /// its environment across the table. Returns the lines to log.
    pub fn search(
        &mut self,
        scope: Scope<'_>,
        ended: Vec<(i32, String, bool)>,
        now: Instant,
    ) -> Vec<Record> {
        let pending = ended
            .into_iter()
            .map(|(leader, id, own)| (leader, id, own, 0))
            .collect();
        self.search_of(scope, pending, now)
    }

    /// The repeated searches that are due ([`STRAY_SEARCHES`], with backoff): a stray sent
    /// SIGTERM may start another process carrying the worker's id before it exits.
    /// Whether a search is due again: the caller then gathers what it must leave alone
    /// (every worker's pid), which it spares itself on the turns when none is.
    pub fn retry_is_due(&self, now: Instant) -> bool {
        self.retry.iter().any(|r| r.due <= now)
    }

    pub fn retry_due(&mut self, scope: Scope<'_>, now: Instant) -> Vec<Record> {
        if !self.retry_is_due(now) {
            return Vec::new();
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.retry)
            .into_iter()
            .partition(|r| r.due <= now);
        self.retry = later;
        let pending = due
            .into_iter()
            .map(|r| (r.leader, r.id, r.own, r.searches))
            .collect();
        self.search_of(scope, pending, now)
    }

    fn search_of(
        &mut self,
        scope: Scope<'_>,
        pending: Vec<(i32, String, bool, u32)>,
        now: Instant,
    ) -> Vec<Record> {
        let mut lines = Vec::new();
        if pending.is_empty() {
            return lines;
        }
        let ended: Vec<(String, bool)> = pending.iter().map(|p| (p.1.clone(), p.2)).collect();
        let found = scope.os.escapees(&ended, scope.keep, scope.lane);
        for (leader, id, own, searches) in pending {
            let strays: Vec<Proc> = found
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
                lines.push(
                    Record::now(
                        Kind::SupervisorError,
                        format!(
                            "worker {id}: processes still carry its id after {STRAY_SEARCHES} searches, left to the stop: {pids:?}"
                        ),
                    )
                    .pid(leader),
                );
                continue;
            }
            // Already sent SIGTERM and waiting for their SIGKILL: not again.
            let new: Vec<Proc> = strays
                .into_iter()
                .filter(|p| !self.kills.iter().any(|(k, _)| k == p))
                .collect();
            if !new.is_empty() {
                let pids: Vec<i32> = new.iter().map(|p| p.pid).collect();
                lines.push(
                    Record::now(
                        Kind::SupervisorError,
                        format!(
                            "worker {id} left processes outside its group: terminating {pids:?}"
                        ),
                    )
                    .pid(leader),
                );
            }
            for p in new {
                scope.os.signal_stray(&p, Signal::SIGTERM);
                self.kills.push((p, timeutil::deadline(now, scope.grace)));
            }
            // Searched again until nothing carrying the id is left: 1 s, 2 s, 4 s, ...
            let backoff = Duration::from_secs(1u64 << (searches - 1).min(4));
            self.retry.push(Retry {
                leader,
                id,
                own,
                searches,
                due: timeutil::deadline(now, backoff),
            });
        }
        lines
    }

    /// At a stop, once every worker group is gone: SIGTERM (SIGKILL once the grace is
    /// over) to every stray and its group, again on every call since killing one can
    /// reparent its own escaped children. In cgroup mode nothing of a worker is outside
    /// its cgroup, so what is swept is any attempt cgroup of the fleet that holds
    /// processes but is none of `cgroups_kept`. Returns whether none is left, and the
    /// lines to log.
    pub fn sweep(
        &mut self,
        scope: Scope<'_>,
        cgroups: Option<&[crate::cgroup::Cgroup]>,
        now: Instant,
    ) -> (bool, Vec<Record>) {
        let mut lines = Vec::new();
        if let Some(kept) = cgroups {
            let since = *self.since.get_or_insert(now);
            let sig = if now >= timeutil::deadline(since, scope.grace) {
                Signal::SIGKILL
            } else {
                Signal::SIGTERM
            };
            let n = scope.os.sweep_cgroups(kept, sig);
            if n > 0 && !self.cgroups_logged {
                self.cgroups_logged = true;
                lines.push(Record::now(
                    Kind::SupervisorStop,
                    format!("stopping {n} attempt cgroups that outlived their worker"),
                ));
            }
            return (n == 0, lines);
        }
        let strays = scope.os.strays(scope.keep, scope.lane);
        if strays.is_empty() {
            return (true, lines);
        }
        let first = self.since.is_none();
        let since = *self.since.get_or_insert(now);
        if first {
            let pids: Vec<i32> = strays.iter().map(|p| p.pid).collect();
            lines.push(Record::now(
                Kind::SupervisorStop,
                format!(
                    "stopping {} processes that left their worker's process group: {pids:?}",
                    pids.len()
                ),
            ));
        }
        let sig = if now >= timeutil::deadline(since, scope.grace) {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        for p in &strays {
            scope.os.signal_stray(p, sig);
        }
        (false, lines)
    }
}
