//! One slot's crash-loop breaker: the fast-death window and the half-open backoff.
//!
//! Pure logic over instants handed in by the caller, so every transition is unit-tested
//! with a synthetic clock and the loop only has to act on the verdicts.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::Timing;
use crate::supervisor::core::breaker::{self, Breaker, ProbeEnd};

/// The timing knobs the breaker needs, from `[timing]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// A worker ending sooner than this after its start died fast.
    pub fast_death: Duration,
    /// Fast deaths within `window` that trip the breaker.
    pub k: u32,
    pub window: Duration,
    pub base_s: u64,
    pub cap_s: u64,
}

impl Params {
    pub fn from_timing(t: &Timing) -> Self {
        Params {
            fast_death: Duration::from_secs(t.fast_death_s),
            k: t.circuit_k.max(1),
            window: Duration::from_secs(t.circuit_window_s),
            base_s: t.half_open_base_s,
            cap_s: t.half_open_cap_s,
        }
    }

    /// `min(base·2^step, cap)` seconds.
    pub fn backoff(&self, step: u32) -> Duration {
        let factor = 1u64.checked_shl(step.min(63)).unwrap_or(u64::MAX);
        Duration::from_secs(self.base_s.saturating_mul(factor).min(self.cap_s))
    }
}

/// A slot's breaker state; its probe is the slot's own next worker.
pub type State = breaker::State<()>;

/// What to do after a worker died (exit other than 0 and 78).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterDeath {
    /// Respawn now. `fast` deaths are counted: `fast_in_window` of `k`.
    Respawn { fast: bool, fast_in_window: u32 },
    /// The K-th fast death in the window: park until the probe.
    Tripped {
        fast_deaths: u32,
        backoff: Duration,
        step: u32,
    },
    /// The probe died fast: park again with the next step.
    Reparked {
        lived: Duration,
        backoff: Duration,
        step: u32,
    },
}

#[derive(Debug, Clone)]
pub struct Circuit {
    params: Params,
    fast_deaths: VecDeque<Instant>,
    breaker: Breaker<()>,
}

impl Circuit {
    pub fn new(params: Params) -> Self {
        Circuit {
            params,
            fast_deaths: VecDeque::new(),
            breaker: Breaker::new(),
        }
    }

    pub fn state(&self) -> State {
        self.breaker.state()
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Fast deaths still inside the window at `now`.
    pub fn fast_in_window(&mut self, now: Instant) -> u32 {
        let window = self.params.window;
        while self
            .fast_deaths
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > window)
        {
            self.fast_deaths.pop_front();
        }
        u32::try_from(self.fast_deaths.len()).unwrap_or(u32::MAX)
    }

    /// A worker started at `started` died at `now`.
    pub fn on_death(&mut self, now: Instant, started: Instant) -> AfterDeath {
        let lived = now.saturating_duration_since(started);
        let fast = lived < self.params.fast_death;
        let params = self.params;
        match self
            .breaker
            .probe_ended(now, lived, !fast, |step| params.backoff(step))
        {
            Some(ProbeEnd::Reparked {
                lived,
                backoff,
                step,
            }) => {
                return AfterDeath::Reparked {
                    lived,
                    backoff,
                    step,
                };
            }
            // The probe outlived the fast-death time before dying: it had succeeded.
            Some(ProbeEnd::Closed { .. }) => self.fast_deaths.clear(),
            None => {}
        }
        if !fast {
            return AfterDeath::Respawn {
                fast: false,
                fast_in_window: self.fast_in_window(now),
            };
        }
        self.fast_deaths.push_back(now);
        let n = self.fast_in_window(now);
        if n >= self.params.k {
            let backoff = self.params.backoff(0);
            self.fast_deaths.clear();
            self.breaker.open(now, 0, backoff);
            return AfterDeath::Tripped {
                fast_deaths: n,
                backoff,
                step: 0,
            };
        }
        AfterDeath::Respawn {
            fast: true,
            fast_in_window: n,
        }
    }

    /// Is the cooldown over, so the probe may start?
    pub fn probe_due(&self, now: Instant) -> bool {
        self.breaker.probe_due(now)
    }

    /// Open → half-open; returns the expired backoff and the step for the log line.
    pub fn start_probe(&mut self, now: Instant) -> Option<(Duration, u32)> {
        self.breaker.start_probe((), now)
    }

    /// Closes the breaker when the probe has lived past the fast-death time; returns how
    /// long it lived.
    pub fn check_probe(&mut self, now: Instant) -> Option<Duration> {
        let lived = self.breaker.check_probe(now, self.params.fast_death)?;
        self.fast_deaths.clear();
        Some(lived)
    }

    /// A clean end (exit 0) proves the worker can run: a probe that did so closes it.
    pub fn on_clean_exit(&mut self) -> bool {
        if matches!(self.breaker.state(), State::HalfOpen { .. }) {
            self.close();
            return true;
        }
        false
    }

    fn close(&mut self) {
        self.breaker.close();
        self.fast_deaths.clear();
    }

    /// Closed with a clean slate: the fleet-wide circuit's probe proved the worker runs,
    /// for every slot at once.
    pub fn reset(&mut self) {
        self.close();
    }

    /// The next instant at which this breaker wants attention (probe due or probe proven).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.breaker.next_deadline(self.params.fast_death)
    }
}

/// Knobs and a seconds helper both breakers' unit tests use: 30 s fast death, 3 in 90 s,
/// back-off from 60 s to an hour.
#[cfg(test)]
pub(crate) mod test_knobs {
    use super::*;

    pub(crate) fn params() -> Params {
        Params {
            fast_death: Duration::from_secs(30),
            k: 3,
            window: Duration::from_secs(90),
            base_s: 60,
            cap_s: 3600,
        }
    }

    pub(crate) fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }
}

#[cfg(test)]
mod tests {
    use super::test_knobs::{params, s};
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = params();
        let got: Vec<u64> = (0..8).map(|i| p.backoff(i).as_secs()).collect();
        assert_eq!(got, [60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(p.backoff(200).as_secs(), 3600);
    }

    #[test]
    fn trips_on_the_kth_fast_death_in_the_window() {
        let t0 = Instant::now();
        let mut c = Circuit::new(params());
        assert_eq!(
            c.on_death(t0 + s(1), t0),
            AfterDeath::Respawn {
                fast: true,
                fast_in_window: 1
            }
        );
        assert_eq!(
            c.on_death(t0 + s(2), t0 + s(1)),
            AfterDeath::Respawn {
                fast: true,
                fast_in_window: 2
            }
        );
        assert_eq!(
            c.on_death(t0 + s(3), t0 + s(2)),
            AfterDeath::Tripped {
                fast_deaths: 3,
                backoff: s(60),
                step: 0
            }
        );
        assert!(!c.probe_due(t0 + s(62)));
        assert!(c.probe_due(t0 + s(63)));
        assert_eq!(c.next_deadline(), Some(t0 + s(63)));
    }

    #[test]
    fn slow_deaths_and_old_fast_deaths_do_not_trip() {
        let t0 = Instant::now();
        let mut c = Circuit::new(params());
        c.on_death(t0 + s(1), t0);
        c.on_death(t0 + s(2), t0 + s(1));
        // A slow death respawns and does not count.
        assert_eq!(
            c.on_death(t0 + s(100), t0 + s(2)),
            AfterDeath::Respawn {
                fast: false,
                fast_in_window: 0
            }
        );
        // The first two fell out of the window.
        assert_eq!(
            c.on_death(t0 + s(101), t0 + s(100)),
            AfterDeath::Respawn {
                fast: true,
                fast_in_window: 1
            }
        );
        assert_eq!(c.state(), State::Closed);
    }

    /// A circuit tripped by three fast deaths a second apart, and when they began.
    fn tripped() -> (Instant, Circuit) {
        let t0 = Instant::now();
        let mut c = Circuit::new(params());
        for i in 0..3 {
            c.on_death(t0 + s(i + 1), t0 + s(i));
        }
        (t0, c)
    }

    #[test]
    fn probe_that_dies_fast_reparks_with_the_next_step() {
        let (t0, mut c) = tripped();
        let probe = t0 + s(63);
        assert_eq!(c.start_probe(probe), Some((s(60), 0)));
        assert_eq!(c.check_probe(probe + s(10)), None);
        assert_eq!(
            c.on_death(probe + s(5), probe),
            AfterDeath::Reparked {
                lived: s(5),
                backoff: s(120),
                step: 1
            }
        );
        let probe2 = probe + s(125);
        assert!(c.probe_due(probe2));
        assert_eq!(c.start_probe(probe2), Some((s(120), 1)));
        assert!(matches!(
            c.on_death(probe2 + s(1), probe2),
            AfterDeath::Reparked { step: 2, .. }
        ));
    }

    #[test]
    fn probe_that_lives_closes_and_resets() {
        let (t0, mut c) = tripped();
        let probe = t0 + s(70);
        c.start_probe(probe);
        assert_eq!(c.next_deadline(), Some(probe + s(30)));
        assert_eq!(c.check_probe(probe + s(30)), Some(s(30)));
        assert_eq!(c.state(), State::Closed);
        // Reset: it takes K new fast deaths to trip again, at step 0.
        let t1 = probe + s(40);
        c.on_death(t1, t1);
        c.on_death(t1 + s(1), t1 + s(1));
        assert!(matches!(
            c.on_death(t1 + s(2), t1 + s(2)),
            AfterDeath::Tripped { step: 0, .. }
        ));
    }

    #[test]
    fn probe_dying_slowly_before_the_check_counts_as_success() {
        let (t0, mut c) = tripped();
        let probe = t0 + s(70);
        c.start_probe(probe);
        assert_eq!(
            c.on_death(probe + s(31), probe),
            AfterDeath::Respawn {
                fast: false,
                fast_in_window: 0
            }
        );
        assert_eq!(c.state(), State::Closed);
    }

    #[test]
    fn clean_exit_of_a_probe_closes() {
        let t0 = Instant::now();
        let mut c = Circuit::new(Params { k: 1, ..params() });
        assert!(matches!(c.on_death(t0, t0), AfterDeath::Tripped { .. }));
        assert!(!c.on_clean_exit());
        c.start_probe(t0 + s(60));
        assert!(c.on_clean_exit());
        assert_eq!(c.state(), State::Closed);
    }
}
