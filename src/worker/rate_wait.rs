//! A finished attempt's hand-off that meets GitHub's rate limit waits for the reset and
//! writes then. Exiting instead (75, the tracker unavailable) would leave the issue
//! `running` with its work handed to nobody: given back, then worked again by an agent
//! that costs money. While the limit holds no worker of the fleet claims anything, so a
//! slot that waits costs nothing; a stop signal ends the wait, and the write is then
//! given up as before. The wait says so in the slot log every third of `timing.stall_s`,
//! the sign of life that keeps it from being taken for a stall.

use std::time::{Duration, Instant};

use super::Worker;
use super::claiming::TakenClaim;
use crate::tracker::TrackerResult;

/// The longest wait for one write: GitHub's primary limit resets within the hour.
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// A wait when the pause file names no reset (it was just cleared, or is unreadable).
const NO_RESET_WAIT: Duration = Duration::from_secs(60);

/// How often a wait looks at the stop signal.
const STEP: Duration = Duration::from_millis(200);

impl Worker<'_> {
    /// `call`, and again after each reset while it is rate-limited, for at most
    /// [`MAX_WAIT`] in all, until a stop signal, or until `claim` is no longer this
    /// worker's (`[cluster]`: its fence); `what` names the write in the one line a wait
    /// prints.
    pub(super) fn past_rate_limits<T>(
        &self,
        claim: &TakenClaim,
        what: &str,
        mut call: impl FnMut() -> TrackerResult<T>,
    ) -> TrackerResult<T> {
        let began = Instant::now();
        loop {
            let e = match call() {
                Err(e) if e.is_rate_limited() => e,
                other => return other,
            };
            let now = crate::timeutil::now_epoch();
            let wait = crate::lanes::pause_file::active(&self.layout.state())
                .map_or(NO_RESET_WAIT, |p| {
                    Duration::from_secs(p.until_epoch.saturating_sub(now).max(1))
                });
            if began.elapsed() + wait > MAX_WAIT || self.stop.signal().is_some() {
                return Err(e);
            }
            eprintln!(
                "worker {}: {what}: rate limited; the work is done, so it waits {}s for the reset and writes then",
                self.wenv.worker_id,
                wait.as_secs()
            );
            let until = Instant::now() + wait;
            // A line now and then: the slot log's growth is the worker's sign of life, so
            // a long wait is not taken for a stall and killed.
            let every = Duration::from_secs((self.config.timing.stall_s / 3).max(5));
            let mut said = Instant::now();
            while Instant::now() < until {
                if self.stop.signal().is_some() {
                    return Err(e);
                }
                if said.elapsed() >= every {
                    eprintln!(
                        "worker {}: {what}: still waiting for the reset, {}s left",
                        self.wenv.worker_id,
                        until.saturating_duration_since(Instant::now()).as_secs()
                    );
                    said = Instant::now();
                }
                std::thread::sleep(STEP.min(until.saturating_duration_since(Instant::now())));
            }
            // A host that lost its lease meanwhile writes nothing for the issue.
            if self.fenced(claim).is_err() {
                return Err(e);
            }
        }
    }
}
