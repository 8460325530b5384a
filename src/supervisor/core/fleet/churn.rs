//! How much the fleet churns: deaths and respawns, per tick and over the circuit window.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::lanes::state_file::Churn;

/// The fleet's deaths and respawns, counted twice: since the last tick (for the tick line)
/// and over the last `circuit_window_s` (for `state.toon`'s `churn`). One part because
/// every death and respawn is counted in both at once, and only here.
#[derive(Debug, Default)]
pub(super) struct ChurnCount {
    /// When each death and respawn inside the window happened, oldest first.
    deaths: VecDeque<Instant>,
    respawns: VecDeque<Instant>,
    tick_deaths: usize,
    tick_respawns: usize,
}

impl ChurnCount {
    pub(super) fn death(&mut self, now: Instant) {
        self.tick_deaths += 1;
        self.deaths.push_back(now);
    }

    pub(super) fn respawn(&mut self, now: Instant) {
        self.tick_respawns += 1;
        self.respawns.push_back(now);
    }

    /// Deaths and respawns since the last call (the tick's), and starts counting afresh.
    pub(super) fn take_tick(&mut self) -> (usize, usize) {
        (
            std::mem::take(&mut self.tick_deaths),
            std::mem::take(&mut self.tick_respawns),
        )
    }

    /// Deaths and respawns within the last `window_s` at `now`, forgetting older ones.
    pub(super) fn in_window(&mut self, now: Instant, window_s: u64) -> Churn {
        let window = Duration::from_secs(window_s);
        for q in [&mut self.deaths, &mut self.respawns] {
            while q
                .front()
                .is_some_and(|t| now.saturating_duration_since(*t) > window)
            {
                q.pop_front();
            }
        }
        Churn {
            deaths: self.deaths.len(),
            respawns: self.respawns.len(),
            window_s,
        }
    }
}
