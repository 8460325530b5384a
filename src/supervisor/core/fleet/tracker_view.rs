//! The fleet's view of the tracker: the queue check (off the loop, one at a time), what it
//! last said, and the wake-ups it decides.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::*;
use crate::event_log::Kind;

/// What the fleet knows of the tracker and the state of its checks. One part because a
/// queue check reads and writes only this (besides waking slots), and the heartbeat shows
/// it as one: the count, or why it is unknown.
pub(super) struct TrackerView {
    /// The tracker's kind (the driver asks it), or why it could not be opened.
    pub(super) tracker: Result<String, TrackerUnavailable>,
    /// The claimable issues' count at the last successful queue check.
    pub(super) ready: Option<u64>,
    /// The claimable issues at the last successful queue check.
    pub(super) ready_set: Option<BTreeSet<u64>>,
    /// The last tracker failure logged, so a tracker that stays down is logged once.
    pub(super) tracker_error: Option<QueueError>,
    /// Open `afk:quarantined` issues at the last count, and when it was asked for.
    pub(super) quarantined: Option<u64>,
    pub(super) quarantine_asked: Option<Instant>,
    /// A check is running; another was asked for meanwhile (it runs after).
    pub(super) queue_inflight: bool,
    pub(super) queue_again: bool,
    /// Slots a queue check said to wake that are not woken yet, and the queue depth it saw.
    pub(super) unidle_backlog: (usize, u64),
}

impl TrackerView {
    pub(super) fn new() -> Self {
        TrackerView {
            tracker: Err(TrackerUnavailable::NotOpened),
            ready: None,
            ready_set: None,
            tracker_error: None,
            quarantined: None,
            quarantine_asked: None,
            queue_inflight: false,
            queue_again: false,
            unidle_backlog: (0, 0),
        }
    }
}

impl Fleet {
    pub fn on_queue(&mut self, result: Result<BTreeSet<u64>, QueueError>, now: Instant) {
        self.view.queue_inflight = false;
        self.start_held_slots(now);
        tracing::debug!(
            claimable = result.as_ref().ok().map(BTreeSet::len),
            "queue checked"
        );
        match result {
            Ok(set) => {
                let n = set.len() as u64;
                if self.view.tracker_error.take().is_some() {
                    self.log(line(
                        Kind::TrackerError,
                        format!("ready-for-agent check works again: {n} open"),
                    ));
                }
                self.record.dirty |= self.view.ready != Some(n);
                self.view.ready = Some(n);
                // A slot idled on "nothing claimable" rejoins the others once the queue
                // differs from what its worker saw.
                let mut confirmed = Vec::new();
                for slot in self.pool.slots.values_mut() {
                    match &mut slot.unclaimable {
                        Some(u) if u.seen != set => slot.unclaimable = None,
                        Some(u) if !u.confirmed => {
                            u.confirmed = true;
                            let msg =
                                log_texts::nothing_claimable(slot.index, u.lived_s, u.seen.len());
                            confirmed.push((slot.index, msg));
                        }
                        _ => {}
                    }
                }
                for (idx, msg) in confirmed {
                    self.log(line(Kind::SlotIdle, msg).slot(idx));
                }
                self.view.ready_set = Some(set);
                let idle = if self.all_held() {
                    // A check answered just before the pause began: nothing wakes.
                    Vec::new()
                } else {
                    self.pool.wakeable()
                };
                let wake = usize::try_from(n).unwrap_or(usize::MAX).min(idle.len());
                // Slots that wake together would all claim, fetch and add worktrees at
                // once: a batch now, the rest a batch per loop turn (see `service`).
                let now_wake = wake.min(UNIDLE_PER_TURN);
                self.view.unidle_backlog = (wake - now_wake, n);
                for &idx in &idle[..now_wake] {
                    self.unidle(idx, n, now);
                }
                for &idx in &idle[wake..] {
                    if let Some(slot) = self.pool.slots.get_mut(&idx)
                        && let Phase::Idle { confirmed } = &mut slot.phase
                        && !*confirmed
                    {
                        *confirmed = true;
                        let msg = format!(
                            "slot {idx} idle: worker exited {} and no ready-for-agent issue \
                             is open",
                            crate::exit_code::OK
                        );
                        self.log(line(Kind::SlotIdle, msg).slot(idx));
                    }
                }
            }
            Err(e) => {
                if self.view.tracker_error.as_ref() != Some(&e) {
                    self.log(line(
                        Kind::TrackerError,
                        format!("ready-for-agent check failed, slot states kept: {e}"),
                    ));
                    self.view.tracker_error = Some(e);
                }
            }
        }
        if self.view.queue_again {
            self.view.queue_again = false;
            self.request_queue();
        }
    }
    fn unidle(&mut self, idx: usize, ready: u64, now: Instant) {
        self.log(
            line(
                Kind::SlotUnidle,
                format!("slot {idx} un-idled: ready-for-agent={ready}"),
            )
            .slot(idx),
        );
        self.spawn_in(idx, now);
    }

    /// The next batch of slots a queue check said to wake, at most [`UNIDLE_PER_TURN`].
    pub(super) fn wake_backlog(&mut self, now: Instant) {
        let (left, ready) = self.view.unidle_backlog;
        if left == 0 || self.stopping.is_some() || self.guards.held() {
            self.view.unidle_backlog = (0, ready);
            return;
        }
        let idle = self.pool.wakeable();
        let batch = left.min(UNIDLE_PER_TURN).min(idle.len());
        self.view.unidle_backlog = (if batch == 0 { 0 } else { left - batch }, ready);
        for &idx in &idle[..batch] {
            self.unidle(idx, ready, now);
        }
    }

    /// Asks the tracker for the claimable issues, off the loop (a slow tracker never
    /// delays noticing a death); one check at a time, a request during one runs after it.
    pub(super) fn request_queue(&mut self) {
        if self.view.queue_inflight {
            self.view.queue_again = true;
            return;
        }
        self.view.queue_inflight = true;
        let now = self.now;
        let count_quarantined = self
            .view
            .quarantine_asked
            .is_none_or(|t| now.saturating_duration_since(t) >= QUARANTINE_EVERY);
        if count_quarantined {
            self.view.quarantine_asked = Some(now);
        }
        self.emit(Effect::CheckQueue { count_quarantined });
    }

    pub fn on_quarantined(&mut self, n: u64) {
        self.record.dirty |= self.view.quarantined != Some(n);
        self.view.quarantined = Some(n);
    }
}

/// How often, at most, the quarantined issues are counted (one tracker call).
const QUARANTINE_EVERY: Duration = Duration::from_secs(60);

/// Most idle slots woken in one loop turn; the rest follow a turn later each.
pub(super) const UNIDLE_PER_TURN: usize = 16;

/// How soon the next batch of a wake-up follows.
pub(super) const UNIDLE_EVERY: Duration = Duration::from_millis(20);
