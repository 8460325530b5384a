//! The fleet-wide circuit (`docs/SPEC.md` §11.12): when at least
//! `timing.fleet_circuit_fraction` of the slots trip their own circuits within one circuit
//! window, the cause is almost never the slots (an expired token, no credits, a broken
//! agent CLI), so the fleet parks as a whole and probes with a single slot on the
//! half-open backoff. A broken agent then costs one probe per backoff step, not one per
//! slot.
//!
//! Pure logic over instants handed in by the caller, like the slot [`Circuit`]; the
//! fleet acts on what it answers. Its reason quotes the end of a slot log, which the
//! driver reads (`stall::last_lines`) and the fleet hands in.
//!
//! [`Circuit`]: crate::supervisor::core::circuit::Circuit

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::config::Fraction;
use crate::lanes::state_file;
pub use crate::supervisor::core::breaker::ProbeEnd;
use crate::supervisor::core::breaker::{self, Breaker};
use crate::supervisor::core::circuit::Params;

/// The fleet's breaker state; its probe is the one slot that may spawn.
pub type State = breaker::State<usize>;

#[derive(Debug, Clone)]
pub struct FleetCircuit {
    fraction: Fraction,
    /// Slot trips inside the window: when, and which slot.
    trips: VecDeque<(Instant, usize)>,
    breaker: Breaker<usize>,
    reason: String,
    tripped_slots: usize,
    /// Epoch seconds of the (next or running) probe, for `status`.
    probe_epoch: Option<u64>,
}

fn epoch_at(now: Instant, at: Instant) -> u64 {
    crate::timeutil::now_epoch().saturating_add(at.saturating_duration_since(now).as_secs())
}

impl FleetCircuit {
    pub fn new(fraction: Fraction) -> Self {
        FleetCircuit {
            fraction,
            trips: VecDeque::new(),
            breaker: Breaker::new(),
            reason: String::new(),
            tripped_slots: 0,
            probe_epoch: None,
        }
    }

    pub fn state(&self) -> State {
        self.breaker.state()
    }

    pub fn is_open(&self) -> bool {
        !self.breaker.is_closed()
    }

    /// Slots needed to open the circuit in a fleet of `target`: the fraction, rounded up,
    /// and never fewer than 2 (one slot's trip is its own circuit's business).
    pub fn threshold(&self, target: usize) -> usize {
        self.fraction.of(target).max(2)
    }

    /// Slot `idx`'s circuit tripped at `now`. Opens the fleet circuit (returning the
    /// number of slots tripped in the window) when enough distinct slots did; its reason
    /// is [`FleetCircuit::set_reason`]'s.
    pub fn on_slot_trip(
        &mut self,
        idx: usize,
        now: Instant,
        target: usize,
        params: &Params,
    ) -> Option<usize> {
        if self.is_open() {
            return None;
        }
        self.trips.push_back((now, idx));
        while self
            .trips
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > params.window)
        {
            self.trips.pop_front();
        }
        let mut slots: Vec<usize> = self.trips.iter().map(|(_, s)| *s).collect();
        slots.sort_unstable();
        slots.dedup();
        if target < 2 || slots.len() < self.threshold(target) {
            return None;
        }
        self.park(now, 0, params.backoff(0));
        self.trips.clear();
        self.tripped_slots = slots.len();
        self.reason.clear();
        Some(slots.len())
    }

    /// Whether slot `idx` may start a worker: any while closed, only the probe's slot
    /// while probing, none while open.
    pub fn may_spawn(&self, idx: usize) -> bool {
        match self.breaker.state() {
            State::Closed => true,
            State::HalfOpen { probe, .. } => probe == idx,
            State::Open { .. } => false,
        }
    }

    pub fn probe_due(&self, now: Instant) -> bool {
        self.breaker.probe_due(now)
    }

    /// Open → probing with `slot`; the expired backoff and the step, for the log line.
    pub fn start_probe(&mut self, slot: usize, now: Instant) -> Option<(Duration, u32)> {
        let started = self.breaker.start_probe(slot, now)?;
        self.probe_epoch = Some(crate::timeutil::now_epoch());
        Some(started)
    }

    /// No slot could probe: the same step again, one backoff later.
    pub fn postpone(&mut self, now: Instant) {
        if matches!(self.breaker.state(), State::Open { .. }) {
            self.again(now);
        }
    }

    pub fn probe_slot(&self) -> Option<usize> {
        match self.breaker.state() {
            State::HalfOpen { probe, .. } => Some(probe),
            _ => None,
        }
    }

    /// The probe has lived past the fast-death time: closed.
    pub fn check_probe(&mut self, now: Instant, params: &Params) -> Option<ProbeEnd> {
        let lived = self.breaker.check_probe(now, params.fast_death)?;
        self.close();
        Some(ProbeEnd::Closed { lived })
    }

    /// The probe's worker ended at `now`: `clean` (exit 0) or having lived past the
    /// fast-death time closes the circuit; anything else parks it with the next step.
    pub fn on_probe_end(&mut self, now: Instant, clean: bool, params: &Params) -> Option<ProbeEnd> {
        let lived = self.breaker.probe_lived(now)?;
        let proven = clean || lived >= params.fast_death;
        let end = self
            .breaker
            .probe_ended(now, lived, proven, |step| params.backoff(step))?;
        match end {
            ProbeEnd::Closed { .. } => self.close(),
            ProbeEnd::Reparked { .. } => self.probe_epoch_from_breaker(now),
        }
        Some(end)
    }

    /// The probe ended saying nothing about the agent (the tracker asked to wait, exit 69
    /// or 75): the same step again, one backoff later. Returns that backoff and step.
    pub fn on_probe_inconclusive(&mut self, now: Instant) -> Option<(Duration, u32)> {
        if !matches!(self.breaker.state(), State::HalfOpen { .. }) {
            return None;
        }
        self.again(now)
    }

    /// The same step again, one backoff after `now`.
    fn again(&mut self, now: Instant) -> Option<(Duration, u32)> {
        let again = self.breaker.again(now)?;
        self.probe_epoch_from_breaker(now);
        Some(again)
    }

    /// Open at backoff `step`: the next probe one `backoff` after `now`.
    fn park(&mut self, now: Instant, step: u32, backoff: Duration) {
        let probe_at = self.breaker.open(now, step, backoff);
        self.probe_epoch = Some(epoch_at(now, probe_at));
    }

    /// `status`'s probe time: when the open breaker's probe is due.
    fn probe_epoch_from_breaker(&mut self, now: Instant) {
        if let State::Open { probe_at, .. } = self.breaker.state() {
            self.probe_epoch = Some(epoch_at(now, probe_at));
        }
    }

    fn close(&mut self) {
        self.breaker.close();
        self.trips.clear();
        self.probe_epoch = None;
    }

    pub fn next_deadline(&self, params: &Params) -> Option<Instant> {
        self.breaker.next_deadline(params.fast_death)
    }

    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Why the circuit opened ([`reason`]), once the slot log's end is known.
    pub fn set_reason(&mut self, reason: String) {
        self.reason = reason;
    }

    /// `state.toon` `fleet_circuit`; `None` while closed.
    pub fn snapshot(&self) -> Option<state_file::FleetCircuit> {
        let state = match self.breaker.state() {
            State::Closed => return None,
            State::Open { .. } => state_file::FleetCircuitState::Open,
            State::HalfOpen { .. } => state_file::FleetCircuitState::Probing,
        };
        Some(state_file::FleetCircuit {
            state,
            reason: self.reason.clone(),
            probe_epoch: self.probe_epoch,
            tripped_slots: self.tripped_slots,
        })
    }
}

/// Lines of one slot log quoted in the reason.
pub const REASON_LINES: usize = 3;

/// The circuit's one reason: how each slot's last worker ended (its exit, or why it could
/// not start), and the last lines of one slot's log (as `stall::last_lines` read them), as
/// one line.
pub fn reason(last_exits: &BTreeMap<usize, String>, log: Option<(&Path, &[String])>) -> String {
    let exits: Vec<String> = last_exits
        .iter()
        .map(|(slot, exit)| format!("slot {slot} {exit}"))
        .collect();
    let mut out = format!("last exits: {}", exits.join(", "));
    if let Some((log, tail)) = log
        && !tail.is_empty()
    {
        out.push_str(&format!("; {} ends: {}", log.display(), tail.join(" | ")));
    }
    crate::text::escape(&crate::text::one_line(&out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::core::circuit::test_knobs::{params, s};

    #[test]
    fn opens_when_the_fraction_of_slots_trips_in_one_window() {
        let t0 = Instant::now();
        let p = params();
        let mut c = FleetCircuit::new(Fraction(500));
        assert_eq!(c.threshold(4), 2);
        assert_eq!(c.threshold(5), 3);
        assert_eq!(c.threshold(1), 2);
        // The same slot twice is one slot; a trip outside the window is forgotten.
        assert_eq!(c.on_slot_trip(0, t0, 4, &p), None);
        assert_eq!(c.on_slot_trip(0, t0 + s(1), 4, &p), None);
        assert_eq!(c.on_slot_trip(1, t0 + s(200), 4, &p), None);
        assert!(!c.is_open());
        assert_eq!(c.on_slot_trip(2, t0 + s(201), 4, &p), Some(2));
        assert!(c.is_open());
        c.set_reason("why".into());
        assert!(!c.may_spawn(0));
        let snap = c.snapshot().unwrap();
        assert_eq!(
            (snap.state.to_string().as_str(), snap.tripped_slots),
            ("open", 2)
        );
        assert_eq!(snap.reason, "why");
        // A fleet of one never opens it.
        let mut one = FleetCircuit::new(Fraction(500));
        assert_eq!(one.on_slot_trip(0, t0, 1, &p), None);
    }

    #[test]
    fn one_probe_per_step_and_a_probe_that_lives_closes() {
        let t0 = Instant::now();
        let p = params();
        let mut c = FleetCircuit::new(Fraction(500));
        c.on_slot_trip(0, t0, 2, &p);
        c.on_slot_trip(1, t0, 2, &p);
        assert!(!c.probe_due(t0 + s(59)));
        assert!(c.probe_due(t0 + s(60)));
        assert_eq!(c.start_probe(3, t0 + s(60)), Some((s(60), 0)));
        assert!(c.may_spawn(3) && !c.may_spawn(0));
        assert_eq!(c.start_probe(0, t0 + s(60)), None, "one probe at a time");
        assert_eq!(
            c.on_probe_end(t0 + s(65), false, &p),
            Some(ProbeEnd::Reparked {
                lived: s(5),
                backoff: s(120),
                step: 1
            })
        );
        assert!(!c.probe_due(t0 + s(184)));
        c.start_probe(0, t0 + s(185));
        assert_eq!(c.check_probe(t0 + s(200), &p), None);
        assert_eq!(
            c.check_probe(t0 + s(215), &p),
            Some(ProbeEnd::Closed { lived: s(30) })
        );
        assert!(!c.is_open() && c.may_spawn(1));
        assert!(c.snapshot().is_none());
    }

    #[test]
    fn the_reason_names_exits_and_the_logs_last_lines() {
        let log = Path::new("/afk/slot-0.log");
        let tail = ["two", "three", "Error: token expired\u{7}"].map(String::from);
        let exits = BTreeMap::from([(0, "exit 1".to_string()), (1, "exit 2".to_string())]);
        let r = reason(&exits, Some((log, &tail)));
        assert_eq!(
            r,
            "last exits: slot 0 exit 1, slot 1 exit 2; /afk/slot-0.log ends: two | three | \
             Error: token expired\\x07"
        );
        // A log that could not be read, or ends with nothing, adds nothing.
        assert_eq!(reason(&exits, Some((log, &[]))), reason(&exits, None));
    }
}
