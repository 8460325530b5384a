//! Exit codes (`docs/SPEC.md` §9) and the one error type that reaches the edge of the program.

pub const OK: i32 = 0;
pub const FAILED: i32 = 1;
pub const USAGE: i32 = 2;
pub const NOT_RUNNING: i32 = 3;
pub const BOOT_HALTED: i32 = 4;
/// From a worker: it stopped because the tracker failed transiently (EX_UNAVAILABLE:
/// network, timeout, 5xx, a held store lock). Not a death.
pub const TRACKER_UNAVAILABLE: i32 = 69;
/// From a worker: it stopped because GitHub rate-limited it (EX_TEMPFAIL). Not a death.
pub const RATE_LIMITED: i32 = 75;
/// From a worker: it stopped because the agent's account ran out (usage limit, login,
/// credit, overload) or the day's budget is used up. Not a death: the fleet holds.
pub const AGENT_PAUSED: i32 = 76;
pub const CONFIG: i32 = 78;
/// A child of the supervisor that lost it between the fork and the exec (it never became a
/// worker) ends with this code; a successor reads no death into it.
pub const ORPHANED: i32 = 111;
/// A child of the supervisor whose `execve` failed (the command is missing or cannot be
/// run) ends with this code, as a shell's would; the supervisor reports the spawn's failure.
pub const EXEC_FAILED: i32 = 127;
pub const SIGHUP: i32 = 129;
pub const SIGINT: i32 = 130;
pub const SIGTERM: i32 = 143;

/// The code of a process stopped by `signal`, as a shell reports it (`docs/SPEC.md` §9):
/// what [`SIGHUP`], [`SIGINT`] and [`SIGTERM`] are, for any signal.
pub const fn signalled(signal: i32) -> i32 {
    128 + signal
}

/// A failure reported once, at the edge, as one line on stderr with its exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn failed(message: impl Into<String>) -> Self {
        Failure::new(FAILED, message)
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(USAGE, message)
    }

    pub fn config(message: impl Into<String>) -> Self {
        Failure::new(CONFIG, message)
    }
}
