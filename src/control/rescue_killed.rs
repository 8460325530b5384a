//! After `stop --force`: the supervisor was SIGKILLed with its workers, so nobody noticed
//! the deaths and released their claims (the next boot's orphan cleanup does), but their
//! work need not wait for a boot that may never come: every attempt of a killed worker
//! (its `worker.pid` left behind, naming a dead process) is rescued here, off any event
//! loop, by the `stop` command itself.

use crate::config::{Config, TrackerKind};
use crate::layout::Layout;
use crate::pidfile::{Liveness, MissingStart, liveness};
use crate::rescue::{Keeper, RescueError, Rescued};
use crate::sweeps::worker_tree::{self, Kind};

/// Rescues each attempt dir of every worker whose `worker.pid` names a dead process;
/// one result per attempt that held work or failed. Pushes only when the tracker is `gh`
/// (`auto` is pushed by the next boot's orphan cleanup, which knows the tracker).
pub fn rescue_killed(layout: &Layout, config: &Config) -> Vec<Result<Rescued, RescueError>> {
    let keeper = Keeper::new(
        layout.repo(),
        config.rescue.max_file_bytes,
        config.tracker.kind == TrackerKind::Gh,
    );
    let Ok(workers) = worker_tree::worker_entries(layout) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for w in workers.iter().filter(|w| w.kind == Kind::Dir) {
        let pid = worker_tree::worker_pid(&w.path);
        let killed = std::fs::symlink_metadata(&pid).is_ok_and(|m| m.is_file())
            && matches!(
                liveness(&pid, MissingStart::ExistenceDecides),
                Liveness::Dead { .. }
            );
        if !killed {
            continue;
        }
        for a in worker_tree::entries(&w.path).unwrap_or_default() {
            if a.kind != Kind::Dir || crate::layout::parse_attempt_dir(&a.name).is_none() {
                continue;
            }
            match keeper.rescue(&a.path, "stop --force") {
                Ok(Some(r)) if !r.already => out.push(Ok(r)),
                Ok(_) => {}
                Err(e) => out.push(Err(e)),
            }
        }
    }
    out
}
