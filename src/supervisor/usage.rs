//! What each worker's process tree costs: CPU time and memory, read once per tick.
//!
//! A worker leads its own session and whatever it starts stays in that session (unless it
//! calls `setsid`, which the stray search covers), so a worker's tree is its session. The
//! session's members, their CPU time and their memory come from one `/proc` read per
//! reading (each process's `stat` once), never on an event. The totals go into
//! `state.toon` for `status`, and a change of a tree's CPU time counts as progress for the
//! stall check: a worker that is compiling is not stalled, whatever its log says.

use std::collections::{HashMap, HashSet};

use crate::process;

/// One worker tree's use at the last reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time of the tree's live processes, milliseconds (what exited is not counted).
    pub cpu_ms: u64,
    /// Resident memory of the tree, KiB.
    pub rss_kib: u64,
    /// Live processes in the tree.
    pub procs: usize,
    /// CPU time of the tree's live processes other than its leader (the worker), with the
    /// children each waited for, milliseconds: the agent's work, for the stall check. The
    /// built-in worker's own polling is not the agent's progress.
    pub agent_cpu_ms: u64,
    /// cgroup mode with the memory controller: the attempt's `memory.peak`, KiB.
    pub memory_peak_kib: Option<u64>,
}

/// Reads the fleet's use. Stateless today (one `/proc` read per call, which already has
/// every figure); kept a value so a caller holds one, as it would a cache.
#[derive(Debug, Default)]
pub struct Meter {}

impl Meter {
    pub fn new() -> Self {
        Meter {}
    }

    /// The use of each session led by one of `leaders`: one read of `/proc/<pid>/stat` per
    /// process on the host, nothing else (a second read of each member, as sysinfo did,
    /// doubled the cost of a large fleet's reading).
    pub fn measure(&mut self, leaders: &[i32]) -> HashMap<i32, Usage> {
        let mut out: HashMap<i32, Usage> = HashMap::new();
        if leaders.is_empty() {
            return out;
        }
        let leaders: HashSet<i32> = leaders.iter().copied().collect();
        for p in process::table_with_usage() {
            if p.proc.is_zombie() || !leaders.contains(&p.proc.sid) {
                continue;
            }
            let u = out.entry(p.proc.sid).or_default();
            if p.proc.pid != p.proc.sid {
                u.agent_cpu_ms = u.agent_cpu_ms.saturating_add(p.cpu_ms);
            }
            u.cpu_ms = u.cpu_ms.saturating_add(p.own_cpu_ms);
            u.rss_kib = u.rss_kib.saturating_add(p.rss_kib);
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
            m.measure(&[leader])
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
