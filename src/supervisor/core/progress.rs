//! A worker's progress as the fleet judges it, from what the driver reads for it: its
//! tree's use ([`Usage`], `os/tree_usage.rs`) and its newest attempt ([`Attempt`],
//! `os/stall.rs`). The readings are the OS side's; the judgement is here, pure, so the
//! fleet decides a stall without touching a file or a process.

use std::path::PathBuf;

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

/// A worker's newest attempt dir `<ns>/<worker-id>/<N>-a<n>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub dir: PathBuf,
    pub issue: u64,
    pub attempt: u64,
}

/// Whether `used_ms` of CPU over `wall_ms` is progress: more than `floor_permille`
/// thousandths of a core. A hung agent's worker polls now and then (a clock tick in tens of
/// seconds); counting any change would reset the stall clock forever.
pub fn cpu_progressed(used_ms: u64, wall_ms: u64, floor_permille: u64) -> bool {
    used_ms > 0 && u128::from(used_ms) * 1000 > u128::from(floor_permille) * u128::from(wall_ms)
}

/// Where a worker stands against the stall thresholds: what [`progress`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Progressing,
    Stalled { idle_s: u64 },
    Kill { idle_s: u64 },
}

/// How long since the newest sign of life, measured against `stall_s` (flag it) and
/// `kill_s` (end its group).
pub fn progress(now_epoch: u64, progress_epoch: u64, stall_s: u64, kill_s: u64) -> Progress {
    let idle_s = now_epoch.saturating_sub(progress_epoch);
    if idle_s >= kill_s {
        Progress::Kill { idle_s }
    } else if idle_s >= stall_s {
        Progress::Stalled { idle_s }
    } else {
        Progress::Progressing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_counts_only_above_the_floor() {
        // The built-in worker's poll: one 10 ms tick in a 15 s window is no progress.
        assert!(!cpu_progressed(10, 15_000, 10));
        assert!(!cpu_progressed(150, 15_000, 10));
        assert!(cpu_progressed(151, 15_000, 10));
        assert!(!cpu_progressed(0, 15_000, 0));
        assert!(cpu_progressed(1, 15_000, 0));
        assert!(!cpu_progressed(u64::MAX, u64::MAX, 1000));
    }

    #[test]
    fn progress_thresholds() {
        assert_eq!(progress(1000, 1000, 600, 1800), Progress::Progressing);
        assert_eq!(progress(1599, 1000, 600, 1800), Progress::Progressing);
        assert_eq!(
            progress(1600, 1000, 600, 1800),
            Progress::Stalled { idle_s: 600 }
        );
        assert_eq!(
            progress(2800, 1000, 600, 1800),
            Progress::Kill { idle_s: 1800 }
        );
        assert_eq!(progress(10, 1000, 600, 1800), Progress::Progressing);
    }
}
