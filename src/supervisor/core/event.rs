//! What happens to the fleet, as one enum: every source the loop waits on (a worker's
//! pidfd, a signal, a tracker answer from the blocking pool, the timer) and every answer
//! the driver brings back for an effect becomes an [`Event`] that
//! `Fleet::handle` decides on.
//!
//! It sits below the fleet, `children` and `periodic` because they all send it: the
//! helper threads through the loop's channel, the driver directly.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use crate::cgroup::{Cgroup, Figures};
use crate::event_log::Record;
use crate::lanes::pause_file::{OperatorPause, Pause, PauseFileError};
use crate::lanes::scale_directive;
use crate::lanes::slot_control::{self, Ack, Request};
use crate::lanes::state_file::SpendToday;
use crate::process::ExitKind;
use crate::supervisor::core::progress::Attempt;
use crate::supervisor::core::progress::Usage;
use crate::tracker::TrackerError;
use crate::tracker::select::SelectError;

/// One thing that happened, in the order the loop saw it.
#[derive(Debug)]
pub enum Event {
    /// The pidfd of our own worker became readable: it ended (how is read when handled).
    ChildEnded { pid: i32, start: u64 },
    /// A worker ended and how is known (an adopted one's is [`ExitKind::Unknown`]).
    Exited {
        pid: i32,
        start: u64,
        kind: ExitKind,
    },
    /// Our own worker ended because its `execve` failed, after its spawn had been
    /// answered (the spawn does not wait for it): the spawn's failure, why in one line.
    NotStarted { pid: i32, start: u64, error: String },
    /// The claimable `ready-for-agent` issues, or why the tracker could not say.
    Queue(Result<BTreeSet<u64>, QueueError>),
    /// The fleet is held, for a rate limit (read from the pause file) or for want of a
    /// live cluster lease: the queue check that found it did not call the tracker.
    Paused(Pause, PauseCause),
    /// The pause file could not be read (it pauses nothing): reported once.
    PauseFile(PauseFileError),
    /// Open issues labelled `afk:quarantined`, counted beside a queue check.
    Quarantined(u64),
    /// The agent's account or the day's budget holds the fleet (the queue check that
    /// found it did not call the tracker), with the day's spend.
    Hold(Hold, Option<SpendToday>),
    /// The day's spend, read beside a queue check that found no hold.
    Spend(Option<SpendToday>),
    /// The operator pause as a queue check read it: the one in force (`None`: none
    /// holds), and who resumed it when the record is a `resume`'s.
    OperatorPause {
        active: Option<OperatorPause>,
        resumed_via: Option<String>,
    },
    /// A line for the event log from a helper thread (a release, a periodic task).
    Log(Record),
    /// A watched cgroup's `cgroup.events` changed (cgroup mode): the dying groups are
    /// looked at again by the turn that follows.
    CgroupChanged,
    /// A stop signal (or the stop file): `code` is the exit status the fleet ends with.
    Stop { code: i32, why: &'static str },
    /// SIGCHLD: zombies to collect, our own workers' among them.
    Sigchld,
    /// SIGUSR1 (or the tick): `resize.toon` and `slot-control.toon` as the driver read them.
    /// Boxed, like the tick's facts: the rare events' payloads would size every event, and
    /// a worker's end is one, collected into a vector at each wake-up.
    Control(Box<ControlFiles>),
    /// The tick is due, with what the driver read for it.
    Tick(Box<TickFacts>),
    /// The end of a loop turn: whatever is due runs (group cleanup, probes, wake-ups).
    /// `alive`: whether each group being terminated still has a live member.
    Turn { alive: Vec<(i32, bool)> },
    /// The answer to a spawn: the worker of spawn `seq` in `slot` runs.
    Spawned {
        slot: usize,
        seq: u64,
        started: Started,
        /// Its stdout's file.
        log: PathBuf,
        /// cgroup mode: the attempt's own cgroup.
        cgroup: Option<Cgroup>,
    },
    /// The answer to a spawn: the worker could not be started (why, one line).
    SpawnFailed {
        slot: usize,
        seq: u64,
        error: String,
    },
    /// The answer to reading a worker's log after its exit 78: its last line.
    FatalReason { slot: usize, reason: String },
    /// The answer to reading a slot log for the fleet circuit's reason: its last lines
    /// (none when it could not be read).
    CircuitLog {
        tripped: usize,
        log: PathBuf,
        lines: Vec<String>,
    },
    /// The answer to finishing an ended worker's empty cgroup: what the kernel counted.
    CgroupFinished { leader: i32, figures: Figures },
    /// The answer to asking the worker of `slot` to retire: `error` when its retire file
    /// could not be written (the path and why).
    RetireAsked {
        slot: usize,
        asker: RetireAsker,
        error: Option<String>,
    },
}

/// Who asked a worker to retire, carried through the write and back with its answer.
#[derive(Debug)]
pub enum RetireAsker {
    /// A shrink by drain: the slot is above the target.
    Shrink,
    /// The operator's stop or restart of one slot by drain: the answer to give, the line
    /// that says it was done, and the slot's marks as they were before the request (put
    /// back when the file cannot be written, so the slot is not left waiting on a worker
    /// that was never asked).
    SlotControl {
        ack: Ack,
        done: Box<Record>,
        before: SlotMarks,
    },
}

/// What an operator's request to one slot changes before its worker ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotMarks {
    pub stopped: bool,
    pub restart_pending: bool,
}

/// When an event happened: the monotonic instant every deadline is measured on, and the
/// wall-clock time its records are stamped with (epoch seconds, the event log's `ts`).
/// Both come in with the event; the fleet reads no clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub at: std::time::Instant,
    pub wall: std::time::SystemTime,
}

impl Now {
    /// `at`, with the system's wall clock now.
    pub fn system(at: std::time::Instant) -> Now {
        Now {
            at,
            wall: std::time::SystemTime::now(),
        }
    }
}

/// The control files the operator writes, as read once for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlFiles {
    /// `resize.toon`: the scale directive.
    pub scale: scale_directive::Found,
    pub slot_request: slot_control::Found<Request>,
    /// Read only beside a request not answered in this run.
    pub slot_ack: slot_control::Found<Ack>,
}

/// What the tick needs from outside, read by the driver before it feeds the tick.
#[derive(Debug, Clone)]
pub struct TickFacts {
    /// The stop sentinel: present, absent, or something that is not a regular file (why).
    pub stop_file: Result<bool, String>,
    pub control: ControlFiles,
    /// Every running worker the fleet asked about, by pid.
    pub progress: Vec<(i32, WorkerFiles)>,
    /// The workers' CPU and memory by leader, when the fleet asked for a reading.
    pub usage: Option<HashMap<i32, Usage>>,
    /// Adopted workers without a pidfd watch that are no longer live.
    pub gone: Vec<(i32, u64)>,
}

/// What one worker's files say of its progress.
#[derive(Debug, Clone, Default)]
pub struct WorkerFiles {
    /// The attempt it works on (its newest attempt dir), if any.
    pub attempt: Option<Attempt>,
    /// The newest sign of life of its files (log, liveness), epoch seconds.
    pub files_epoch: u64,
    /// The title of that attempt's issue, read only when the fleet did not know it.
    pub title: Option<String>,
}

/// A started or adopted worker as `children` hands it over.
#[derive(Debug, Clone)]
pub struct Started {
    pub pid: i32,
    pub start: u64,
    /// `children` holds a pidfd for it, which refers to this process however its pid is
    /// reused (none where the kernel has no pidfds, and in tests). The fleet names it by
    /// (pid, start), and says when it is no longer needed (`reaper::Order::Forget`).
    pub pidfd: bool,
    /// Its end will be reported as an event; otherwise the driver looks for it (own
    /// children on SIGCHLD, adopted ones every tick).
    pub watched: bool,
}

/// A previous supervisor's worker found live at start-up.
#[derive(Debug, Clone)]
pub struct Adoptee {
    pub slot: usize,
    pub pid: i32,
    pub start: u64,
    pub worker_id: Option<String>,
    pub started_epoch: Option<u64>,
    pub restarts: u64,
    /// cgroup mode: the attempt cgroup it was found in.
    pub cgroup: Option<crate::cgroup::Cgroup>,
}

/// An adoptee as the driver found it: watched (`None`: it ended before it could be), and
/// where its output goes.
#[derive(Debug, Clone)]
pub struct Adopted {
    pub adoptee: Adoptee,
    pub watch: Option<Started>,
    /// Its stdout's target (`/proc/<pid>/fd/1`), else its slot's log of the day.
    pub log: PathBuf,
}

/// Why the fleet has no tracker to ask.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrackerUnavailable {
    /// No tracker was set yet (`Fleet::set_tracker`
    /// comes right after start-up's own opening; only a fleet built without it, as in
    /// unit tests, asks before).
    #[error("not opened yet")]
    NotOpened,
    /// Opening the tracker failed at start-up.
    #[error(transparent)]
    Select(#[from] SelectError),
}

/// Why a queue check has no answer. Its text is what the event log's `tracker.error` line
/// and `status` show.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    #[error("tracker unavailable: {0}")]
    Unavailable(TrackerUnavailable),
    #[error(transparent)]
    Tracker(#[from] TrackerError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::ErrorKind;

    /// The texts the event log and `status` showed when these were strings.
    #[test]
    fn a_queue_errors_text_is_the_one_the_log_always_showed() {
        let unopened = QueueError::Unavailable(TrackerUnavailable::NotOpened);
        assert_eq!(unopened.to_string(), "tracker unavailable: not opened yet");
        let select = SelectError::NotLoggedIn {
            because: "origin is on GitHub",
            detail: "exit 1".into(),
        };
        assert_eq!(
            QueueError::Unavailable(TrackerUnavailable::from(select.clone())).to_string(),
            format!("tracker unavailable: {select}")
        );
        let call = TrackerError::new(ErrorKind::Transient, "gh issue list", "timed out");
        assert_eq!(QueueError::from(call.clone()).to_string(), call.to_string());
    }
}

/// What holds the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    /// The agent's account: at the end, one probe before the whole fleet.
    Agent,
    /// The day's budget: at the next day, the whole fleet.
    Budget,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub kind: HoldKind,
    /// `usage limit`, …, or the budget's `daily budget reached: spend today $1.20 of $1.00`.
    pub words: String,
    /// The agent's own words (empty for a budget).
    pub reason: String,
    pub until_epoch: u64,
}

/// What holds the fleet in an [`Event::Paused`]: the words of its `fleet.resumed` differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseCause {
    /// GitHub's rate limit, until its reset (`docs/SPEC.md` §11.11).
    RateLimit,
    /// `[cluster]`: this host holds no live lease (`docs/SPEC.md` §11.23).
    NoClusterLease,
}
