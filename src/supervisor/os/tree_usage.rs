//! What each worker's process tree costs: CPU time and memory, read for the workers whose
//! reading is due (the fleet decides which, `core/fleet/tick.rs`).
//!
//! A worker leads its own session and whatever it starts stays in that session (unless it
//! calls `setsid`, which the stray search covers), so a worker's tree is its session's
//! descendants of it, found by following `/proc/<pid>/task/*/children` from the leader; in
//! cgroup mode it is its attempt cgroup's members. Either way a reading costs reads per
//! member of the trees read, never a scan of the host's process table. sysinfo then reads
//! exactly those processes, and never on an event. The totals go into `state.toon` for
//! `status`, and a change of a tree's CPU time counts as progress for the stall check: a
//! worker that is compiling is not stalled, whatever its log says.

use std::collections::HashMap;

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use crate::process;
use crate::supervisor::core::progress::Usage;

/// Who makes up a worker's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Members {
    /// Its session's descendants of the leader (process-group mode).
    Session,
    /// These processes (cgroup mode: its attempt cgroup's members).
    Listed(Vec<i32>),
}

pub struct Meter {
    sys: System,
}

impl Default for Meter {
    fn default() -> Self {
        Self::new()
    }
}

impl Meter {
    pub fn new() -> Self {
        // sysinfo keeps every read process's stat file open by default: with a large fleet
        // that is a descriptor per process, for no gain at one read per tick.
        sysinfo::set_open_files_limit(0);
        Meter { sys: System::new() }
    }

    /// The use of each tree named: a leader and who its members are.
    pub fn measure(&mut self, trees: &[(i32, Members)]) -> HashMap<i32, Usage> {
        let mut out: HashMap<i32, Usage> = HashMap::new();
        if trees.is_empty() {
            return out;
        }
        let mut members: Vec<(i32, i32)> = Vec::new();
        for (leader, which) in trees {
            let procs = match which {
                Members::Session => process::session_tree_with_cpu(*leader),
                Members::Listed(pids) => pids
                    .iter()
                    .take(process::TREE_LIMIT)
                    .filter_map(|p| process::read_with_cpu(*p))
                    .filter(|(p, _)| !p.is_zombie())
                    .collect(),
            };
            for (p, cpu_ms) in procs {
                members.push((p.pid, *leader));
                if p.pid != *leader {
                    let u = out.entry(*leader).or_default();
                    u.agent_cpu_ms = u.agent_cpu_ms.saturating_add(cpu_ms);
                }
            }
        }
        let pids: Vec<Pid> = members
            .iter()
            .map(|(pid, _)| Pid::from_u32(pid.unsigned_abs()))
            .collect();
        // A fresh table each reading: only the trees read now are in it, so it never grows
        // with the fleet's past and nothing read before is read again to forget it (the
        // figures taken, accumulated CPU time and resident memory, need no earlier read).
        self.sys = System::new();
        self.sys.refresh_processes_specifics(
            ProcessesToUpdate::Some(&pids),
            true,
            ProcessRefreshKind::nothing()
                .with_cpu()
                .with_memory()
                .without_tasks(),
        );
        for (pid, sid) in members {
            let Some(p) = self.sys.process(Pid::from_u32(pid.unsigned_abs())) else {
                continue;
            };
            let u = out.entry(sid).or_default();
            u.cpu_ms = u.cpu_ms.saturating_add(p.accumulated_cpu_time());
            u.rss_kib = u.rss_kib.saturating_add(p.memory() / 1024);
            u.procs += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    /// A session whose child burns CPU: the tree's CPU time grows and both are counted.
    #[test]
    fn a_busy_tree_shows_cpu_memory_and_members() {
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "while :; do :; done & exec sleep 300"]);
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()
                    .map(|_| ())
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = cmd.spawn().unwrap();
        let leader = child.id() as i32;
        let mut m = Meter::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let read = |m: &mut Meter| {
            m.measure(&[(leader, Members::Session)])
                .get(&leader)
                .copied()
                .unwrap_or_default()
        };
        let first = read(&mut m);
        let mut later = first;
        while later.cpu_ms < first.cpu_ms + 50 || later.procs < 2 {
            assert!(
                Instant::now() < deadline,
                "no CPU time seen: {first:?} {later:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
            later = read(&mut m);
        }
        assert_eq!(later.procs, 2, "{later:?}");
        assert!(later.rss_kib > 0, "{later:?}");
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(leader),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = child.wait();
        assert!(m.measure(&[]).is_empty());
        assert_eq!(read(&mut m), Usage::default());
    }
}
