//! The breaker the circuits and the agent hold are built on: closed → open (tripped, the
//! probe due after a backoff step) → half-open (one probe runs) → closed again, or open at
//! the next step. The slot's circuit ([`circuit`]) trips it on fast deaths within a window;
//! the fleet's ([`fleet_circuit`]) on a fraction of its slots tripping; the agent's hold
//! (`fleet/holds.rs`) opens it until the hold's end. Each keeps its own rule and backoff,
//! and names its probe with `P` (`()` for a slot, the probing slot for the fleet).
//!
//! Pure logic over instants handed in by the caller.
//!
//! [`circuit`]: crate::supervisor::core::circuit
//! [`fleet_circuit`]: crate::supervisor::core::fleet_circuit

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State<P> {
    Closed,
    /// Tripped: nothing runs until `probe_at`.
    Open {
        probe_at: Instant,
        step: u32,
        backoff: Duration,
    },
    /// One probe runs since `started`; it closes the breaker by living past the fast-death
    /// time.
    HalfOpen {
        probe: P,
        started: Instant,
        step: u32,
        backoff: Duration,
    },
}

/// How a probe ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeEnd {
    /// It proved the worker runs: closed.
    Closed { lived: Duration },
    /// It did not: open again with the next step.
    Reparked {
        lived: Duration,
        backoff: Duration,
        step: u32,
    },
}

#[derive(Debug, Clone)]
pub struct Breaker<P> {
    state: State<P>,
}

impl<P: Copy> Breaker<P> {
    pub fn new() -> Self {
        Breaker {
            state: State::Closed,
        }
    }

    pub fn state(&self) -> State<P> {
        self.state
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Open at backoff `step`: the probe is due one `backoff` after `now`. Returns when.
    pub fn open(&mut self, now: Instant, step: u32, backoff: Duration) -> Instant {
        let probe_at = crate::timeutil::deadline(now, backoff);
        self.state = State::Open {
            probe_at,
            step,
            backoff,
        };
        probe_at
    }

    pub fn close(&mut self) {
        self.state = State::Closed;
    }

    /// Is the cooldown over, so the probe may start?
    pub fn probe_due(&self, now: Instant) -> bool {
        matches!(self.state, State::Open { probe_at, .. } if now >= probe_at)
    }

    /// Open → half-open with `probe`; the expired backoff and the step, for the log line.
    pub fn start_probe(&mut self, probe: P, now: Instant) -> Option<(Duration, u32)> {
        let State::Open { step, backoff, .. } = self.state else {
            return None;
        };
        self.state = State::HalfOpen {
            probe,
            started: now,
            step,
            backoff,
        };
        Some((backoff, step))
    }

    /// How long the running probe has lived at `now`; `None` unless half-open.
    pub fn probe_lived(&self, now: Instant) -> Option<Duration> {
        match self.state {
            State::HalfOpen { started, .. } => Some(now.saturating_duration_since(started)),
            _ => None,
        }
    }

    /// Closes the breaker when the probe has lived past `fast_death`; returns how long it
    /// lived.
    pub fn check_probe(&mut self, now: Instant, fast_death: Duration) -> Option<Duration> {
        let lived = self.probe_lived(now)?;
        if lived < fast_death {
            return None;
        }
        self.close();
        Some(lived)
    }

    /// The probe ended at `now` after living `lived`: `proven` closes the breaker, else it
    /// opens again at the next step with that step's `backoff`. `None` unless half-open.
    pub fn probe_ended(
        &mut self,
        now: Instant,
        lived: Duration,
        proven: bool,
        backoff: impl Fn(u32) -> Duration,
    ) -> Option<ProbeEnd> {
        let State::HalfOpen { step, .. } = self.state else {
            return None;
        };
        if proven {
            self.close();
            return Some(ProbeEnd::Closed { lived });
        }
        let step = step.saturating_add(1);
        let backoff = backoff(step);
        self.open(now, step, backoff);
        Some(ProbeEnd::Reparked {
            lived,
            backoff,
            step,
        })
    }

    /// The same step again, one backoff after `now`: open (no probe could start) or
    /// half-open (the probe said nothing either way). Returns that backoff and step.
    pub fn again(&mut self, now: Instant) -> Option<(Duration, u32)> {
        let (State::Open { step, backoff, .. } | State::HalfOpen { step, backoff, .. }) =
            self.state
        else {
            return None;
        };
        self.open(now, step, backoff);
        Some((backoff, step))
    }

    /// The next instant the breaker wants attention: the probe due, or the probe proven
    /// by living past `fast_death`.
    pub fn next_deadline(&self, fast_death: Duration) -> Option<Instant> {
        match self.state {
            State::Closed => None,
            State::Open { probe_at, .. } => Some(probe_at),
            State::HalfOpen { started, .. } => Some(crate::timeutil::deadline(started, fast_death)),
        }
    }
}

impl<P: Copy> Default for Breaker<P> {
    fn default() -> Self {
        Breaker::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn open_probe_and_close_or_open_again() {
        let t0 = Instant::now();
        let mut b: Breaker<usize> = Breaker::new();
        assert!(b.is_closed());
        assert_eq!(b.start_probe(1, t0), None);
        b.open(t0, 0, s(60));
        assert!(!b.probe_due(t0 + s(59)));
        assert!(b.probe_due(t0 + s(60)));
        assert_eq!(b.start_probe(2, t0 + s(60)), Some((s(60), 0)));
        assert_eq!(b.check_probe(t0 + s(80), s(30)), None);
        let end = b.probe_ended(t0 + s(70), s(10), false, |step| s(60 << step));
        assert_eq!(
            end,
            Some(ProbeEnd::Reparked {
                lived: s(10),
                backoff: s(120),
                step: 1
            })
        );
        assert_eq!(b.next_deadline(s(30)), Some(t0 + s(190)));
        assert_eq!(b.again(t0 + s(100)), Some((s(120), 1)));
        assert_eq!(b.start_probe(3, t0 + s(220)), Some((s(120), 1)));
        assert_eq!(b.check_probe(t0 + s(250), s(30)), Some(s(30)));
        assert!(b.is_closed());
    }
}
