//! The client of a running supervisor: what `status`, `scale`, `stop` (and the rescue of
//! the work `stop --force` killed) and the operator's acts (`pause`, `resume`, one slot's
//! stop or restart, an issue given back) do from another process. They reach the supervisor only through the lane's files and signals, and signal
//! nothing whose pid and start token they have not both verified. The supervisor's side of
//! each file is in `crate::supervisor` (`lock`, `state_file`, `scale_directive`,
//! `slot_control`); how a [`StatusReport`] looks to a person is `crate::status`.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::lanes::state_file::StateFileError;
use crate::layout::Layout;
use crate::pidfile::NotLive;
use crate::process;
use crate::supervisor::os::lock::running_supervisor;

pub mod fleet_scale;
pub mod fleet_status;
pub mod fleet_stop;
pub mod operator;
mod rescue_killed;

pub use fleet_scale::{ScaleOutcome, scale};
pub use fleet_status::{
    FleetInfo, STATUS_SCHEMA_VERSION, SlotRow, StatusReport, SupervisorInfo, status,
};
pub use fleet_stop::{StopOutcome, live_fleet_processes, stop};
pub use rescue_killed::rescue_killed;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// No supervisor is running (the reason says why the pid file does not count).
    #[error("no supervisor running for this project ({0})")]
    NotRunning(NotLive),
    #[error(transparent)]
    State(#[from] StateFileError),
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

/// The supervisor that runs, by pid and start token, or why none does.
fn running(layout: &Layout) -> Result<(i32, u64), ControlError> {
    running_supervisor(layout).map_err(ControlError::NotRunning)
}

/// Signals `pid` only if it is still the process that started at `start`.
fn signal_verified(pid: i32, start: u64, sig: Signal) -> bool {
    process::ProcId { pid, start }.signal(sig)
}

/// Nudges the running supervisor (SIGUSR1: read the lane's control files now), after
/// verifying it is still the process that started at `start`.
fn nudge(pid: i32, start: u64) {
    signal_verified(pid, start, Signal::SIGUSR1);
}

/// Polls `cond` until it holds or `timeout` passes; whether it held.
fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = crate::timeutil::deadline(Instant::now(), timeout);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::state_file::ShrinkMode;

    #[test]
    fn no_supervisor_means_not_running_and_no_fleet() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert!(matches!(
            status(&layout),
            Err(ControlError::NotRunning(NotLive::Dead(
                crate::pidfile::DeadReason::Missing
            )))
        ));
        std::fs::create_dir_all(layout.supervisor_lane()).unwrap();
        std::fs::write(layout.supervisor_pid(), "nonsense").unwrap();
        let err = status(&layout).unwrap_err().to_string();
        assert!(err.contains("pid file corrupt"), "{err}");
        assert_eq!(
            stop(&layout, Duration::from_secs(1), false).unwrap(),
            StopOutcome::NothingRunning
        );
        assert!(matches!(
            scale(&layout, 2, ShrinkMode::HardKill, Duration::from_secs(1)),
            Err(ControlError::NotRunning(_))
        ));
        assert!(!layout.resize_file().exists());
    }
}
