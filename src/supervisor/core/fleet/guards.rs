//! What holds the whole fleet back: the rate-limit pause (`crate::lanes::pause_file`, SPEC §11.11) and
//! the fleet-wide circuit (`crate::supervisor::core::fleet_circuit`, SPEC §11.12).

use std::time::{Duration, Instant};

use super::*;
use crate::event_log::Kind;
use crate::supervisor::core::event::PauseCause;
use crate::supervisor::core::fleet_circuit::{self, ProbeEnd};

/// What holds every slot back at once: the rate-limit pause in force and the fleet-wide
/// circuit with what it reports. One part because a spawn, a slot's probe and a wake-up all
/// ask the same question of both: may the fleet start anything now?
pub(super) struct Guards {
    /// The fleet-wide pause in force (the rate limit's, `crate::lanes::pause_file`, or the
    /// cluster's hold), what caused it, and when it ends.
    pub(super) paused: Option<(crate::lanes::pause_file::Pause, PauseCause, Instant)>,
    /// The operator's pause in force (`crate::lanes::pause_file::OperatorPause`), as the last queue
    /// check or control signal read it.
    pub(super) operator: Option<crate::lanes::pause_file::OperatorPause>,
    /// The last unreadable pause file reported.
    pub(super) pause_file_error: Option<crate::lanes::pause_file::PauseFileError>,
    /// The fleet-wide circuit (`fleet_circuit`).
    pub(super) fleet_circuit: fleet_circuit::FleetCircuit,
}

impl Guards {
    pub(super) fn new(fleet_circuit_fraction: crate::config::Fraction) -> Self {
        Guards {
            paused: None,
            operator: None,
            pause_file_error: None,
            fleet_circuit: fleet_circuit::FleetCircuit::new(fleet_circuit_fraction),
        }
    }

    /// Whether a pause (the rate limit's or the operator's) holds every new start.
    pub(super) fn held(&self) -> bool {
        self.paused.is_some() || self.operator.is_some()
    }

    /// When the pause in force ends.
    pub(super) fn pause_deadline(&self) -> Option<Instant> {
        self.paused.as_ref().map(|(_, _, at)| *at)
    }

    pub(super) fn pause_snapshot(&self) -> Option<state_file::FleetPause> {
        self.paused
            .as_ref()
            .map(|(p, _, _)| state_file::FleetPause {
                reason: p.reason.clone(),
                until_epoch: Some(p.until_epoch),
            })
    }

    /// When the fleet circuit next needs the loop; a pause holds its probe (not one that
    /// already runs).
    pub(super) fn fleet_circuit_deadline(&self, params: &circuit::Params) -> Option<Instant> {
        if self.held()
            && !matches!(
                self.fleet_circuit.state(),
                fleet_circuit::State::HalfOpen { .. }
            )
        {
            return None;
        }
        self.fleet_circuit.next_deadline(params)
    }

    /// Whether slot circuits' own probes wait (the fleet's circuit or pause holds them).
    pub(super) fn slot_probes_held(&self) -> bool {
        self.held() || self.fleet_circuit.is_open()
    }
}

impl Fleet {
    // ---- the rate-limit pause ----

    /// A queue check found the pause file in force: the fleet holds every spawn, wake-up
    /// and queue check until its end. Logged once per pause; a longer one found later
    /// only moves the resume time.
    pub fn on_paused(
        &mut self,
        p: crate::lanes::pause_file::Pause,
        cause: PauseCause,
        now: Instant,
    ) {
        self.view.queue_inflight = false;
        self.view.queue_again = false;
        let left = Duration::from_secs(p.until_epoch.saturating_sub(self.epoch()));
        let resume_at = crate::timeutil::deadline(now, left);
        match &mut self.guards.paused {
            Some((cur, cur_cause, at)) => {
                if p.until_epoch > cur.until_epoch {
                    *cur = p;
                    *cur_cause = cause;
                    *at = resume_at;
                    self.record.dirty = true;
                }
            }
            None => {
                let msg = format!(
                    "fleet paused {}: no claims, queue checks, sweep writes or belts until then",
                    p.describe()
                );
                self.log(line(Kind::FleetPaused, msg));
                self.view.unidle_backlog = (0, self.view.unidle_backlog.1);
                self.guards.paused = Some((p, cause, resume_at));
            }
        }
    }

    /// The pause file could not be read; it pauses nothing. Reported once.
    pub fn on_pause_file(&mut self, e: crate::lanes::pause_file::PauseFileError) {
        if self.guards.pause_file_error.as_ref() != Some(&e) {
            self.log(line(
                Kind::SupervisorError,
                format!("{e}; it pauses nothing"),
            ));
            self.guards.pause_file_error = Some(e);
        }
    }

    /// The reset has passed: the fleet resumes by itself, and the queue check that
    /// follows wakes the idle slots (or finds a newer pause).
    pub(super) fn resume_if_due(&mut self, now: Instant) {
        let Some((p, cause, at)) = &self.guards.paused else {
            return;
        };
        if now < *at {
            return;
        }
        let msg = match cause {
            PauseCause::RateLimit => {
                format!("fleet resumed: the rate-limit reset passed ({})", p.reason)
            }
            PauseCause::NoClusterLease => format!(
                "fleet resumed: this host holds a live cluster lease again (held: {})",
                p.reason
            ),
        };
        self.guards.paused = None;
        self.log(line(Kind::FleetResumed, msg));
        self.request_queue();
    }

    // ---- the operator pause ----

    /// The operator pause file as a queue check or a control signal read it: `Some` while a
    /// pause holds, and who resumed it when the file is a `resume`'s record. The change is
    /// logged once each way; a resume's queue check then wakes the idle slots.
    pub(super) fn on_operator_pause(
        &mut self,
        p: Option<crate::lanes::pause_file::OperatorPause>,
        resumed_via: Option<String>,
    ) {
        match (&self.guards.operator, p) {
            (None, Some(p)) => {
                let msg = format!(
                    "fleet paused by the operator {}: no new claims or spawns; workers in flight finish",
                    p.describe()
                );
                self.log(line(Kind::FleetOperatorPaused, msg));
                self.view.unidle_backlog = (0, self.view.unidle_backlog.1);
                self.guards.operator = Some(p);
                self.record.dirty = true;
            }
            (Some(_), Some(p)) => self.guards.operator = Some(p),
            (Some(was), None) => {
                let how = match resumed_via {
                    Some(via) => format!("resumed by the operator (via={via})"),
                    None => format!("the operator pause ended ({})", was.reason),
                };
                self.log(line(Kind::FleetOperatorResumed, format!("fleet {how}")));
                self.guards.operator = None;
                self.record.dirty = true;
                // Read on the resume's signal: a queue check now wakes the idle slots. One
                // in flight read the file already or answers after this, and wakes them.
                if !self.view.queue_inflight {
                    self.request_queue();
                }
            }
            (None, None) => {}
        }
    }

    // ---- the fleet-wide circuit ----

    /// Slot `idx`'s own circuit tripped: maybe the fleet's opens. Its reason quotes the end
    /// of that slot's last log, which the driver reads and answers at once
    /// ([`Effect::ReadCircuitLog`]); the fleet is parked already.
    pub(super) fn note_slot_trip(&mut self, idx: usize, now: Instant) {
        let (target, params) = (self.pool.target, self.pool.params);
        let Some(tripped) = self
            .guards
            .fleet_circuit
            .on_slot_trip(idx, now, target, &params)
        else {
            return;
        };
        let finished = self.pool.slots.get(&idx).and_then(|s| s.finished.as_ref());
        match finished.and_then(|f| f.log.clone()) {
            Some(log) => self.emit(Effect::ReadCircuitLog { tripped, log }),
            None => self.fleet_circuit_opened(tripped, None),
        }
    }

    /// The fleet circuit opened with `tripped` slots tripped, `log` the end of the last
    /// one's log: its reason and its record.
    pub(super) fn fleet_circuit_opened(
        &mut self,
        tripped: usize,
        log: Option<(&std::path::Path, &[String])>,
    ) {
        let exits: BTreeMap<usize, String> = self
            .pool
            .slots
            .iter()
            .filter_map(|(i, s)| s.finished.as_ref().map(|f| (*i, f.end.clone())))
            .collect();
        let reason = fleet_circuit::reason(&exits, log);
        self.guards.fleet_circuit.set_reason(reason);
        let msg = format!(
            "fleet circuit open: {tripped} of {} slots tripped their circuits within {}s; \
             the fleet is parked and one slot probes in {}s: {}",
            self.pool.target,
            self.timing.circuit_window_s,
            self.pool.params.backoff(0).as_secs(),
            self.guards.fleet_circuit.reason()
        );
        self.log(line(Kind::FleetCircuitOpen, msg));
        self.view.unidle_backlog = (0, self.view.unidle_backlog.1);
    }

    /// The fleet's probe in slot `idx` ended (`clean`: exit 0). When that closes the
    /// circuit, the probe's slot respawns with the others if `respawn` (a death; a clean
    /// exit idles and an exit 78 parks it as usual). Returns whether it closed.
    pub(super) fn end_fleet_probe(
        &mut self,
        idx: usize,
        clean: bool,
        respawn: bool,
        now: Instant,
    ) -> bool {
        let params = self.pool.params;
        match self.guards.fleet_circuit.on_probe_end(now, clean, &params) {
            Some(ProbeEnd::Closed { lived }) => {
                if respawn && let Some(slot) = self.pool.slots.get_mut(&idx) {
                    slot.phase = Phase::CircuitOpen;
                }
                self.close_fleet_circuit(idx, lived, now);
                true
            }
            Some(ProbeEnd::Reparked {
                lived,
                backoff,
                step,
            }) => {
                if let Some(slot) = self.pool.slots.get_mut(&idx) {
                    slot.phase = Phase::CircuitOpen;
                }
                let msg = format!(
                    "fleet circuit re-parked: the probe in slot {idx} died after {:.1}s; next probe in {}s (step {step})",
                    lived.as_secs_f64(),
                    backoff.as_secs()
                );
                self.log(line(Kind::FleetCircuitReparked, msg).slot(idx));
                false
            }
            None => false,
        }
    }

    /// The probe in `idx` ended because the tracker asked to wait: no verdict on the
    /// agent, so the circuit stays at its step (no longer backoff) and no death counts.
    pub(super) fn fleet_probe_inconclusive(&mut self, idx: usize, exit: &str, now: Instant) {
        let Some((backoff, step)) = self.guards.fleet_circuit.on_probe_inconclusive(now) else {
            return;
        };
        if let Some(slot) = self.pool.slots.get_mut(&idx) {
            slot.phase = Phase::CircuitOpen;
        }
        let msg = format!(
            "fleet circuit: the probe in slot {idx} ended with {exit} (the tracker asked to wait, not the agent failing); probing again in {}s (step {step})",
            backoff.as_secs()
        );
        self.log(line(Kind::FleetCircuitReparked, msg).slot(idx));
    }

    fn close_fleet_circuit(&mut self, idx: usize, lived: Duration, now: Instant) {
        let msg = format!(
            "fleet circuit closed: the probe in slot {idx} lived {:.1}s; every slot reopens",
            lived.as_secs_f64()
        );
        self.log(line(Kind::FleetCircuitClosed, msg).slot(idx));
        let mut parked = Vec::new();
        for slot in self.pool.slots.values_mut() {
            slot.circuit.reset();
            if matches!(slot.phase, Phase::CircuitOpen)
                && slot.index < self.pool.target
                && !slot.retiring
            {
                slot.phase = Phase::Idle { confirmed: false };
                parked.push(slot.index);
            }
        }
        for i in parked {
            self.spawn_in(i, now);
        }
        self.request_queue();
    }

    /// Starts the single probe when due, and closes the circuit once it lived long enough.
    pub(super) fn fleet_circuit_due(&mut self, now: Instant) {
        let params = self.pool.params;
        let probing = self.guards.fleet_circuit.probe_slot();
        if let Some(ProbeEnd::Closed { lived }) =
            self.guards.fleet_circuit.check_probe(now, &params)
            && let Some(idx) = probing
        {
            self.close_fleet_circuit(idx, lived, now);
        }
        if self.guards.held() || !self.guards.fleet_circuit.probe_due(now) {
            return;
        }
        let Some(idx) = self.probe_slot() else {
            // Every slot is busy or parked for good: the same step, one backoff later.
            self.guards.fleet_circuit.postpone(now);
            return;
        };
        let Some((backoff, step)) = self.guards.fleet_circuit.start_probe(idx, now) else {
            return;
        };
        if let Some(slot) = self.pool.slots.get_mut(&idx) {
            slot.phase = Phase::Idle { confirmed: true };
        }
        let msg = format!(
            "fleet circuit probing with slot {idx} after {}s (step {step})",
            backoff.as_secs()
        );
        self.log(line(Kind::FleetCircuitProbe, msg).slot(idx));
        self.spawn_in(idx, now);
    }
}
