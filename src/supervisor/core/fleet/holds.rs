//! The agent's holds on the whole fleet (`docs/SPEC.md` §11.13): the agent's account ran
//! out (a usage limit, a login, credit, an overload) or the day's budget is used up. While
//! one holds no slot spawns (a worker would claim nothing anyway, exit 76). An agent hold
//! ends with one probe: a single slot spawns, and only when its worker ends without
//! meeting the limit again does every slot resume. A budget hold ends at the next day.

use crate::supervisor::core::breaker::{self, Breaker};
use crate::supervisor::core::event::{Hold, HoldKind};
use std::time::{Duration, Instant};

use super::*;
use crate::event_log::Kind;
use crate::lanes::state_file::{AgentHold, SpendToday};

/// The hold in force and what it carries.
#[derive(Debug, Default)]
pub(super) struct Holds {
    /// The hold in force.
    pub(super) hold: Option<Hold>,
    /// Open while a hold is in force (its probe due at the hold's end), half-open while
    /// one slot's worker probes the agent after an agent hold ended.
    pub(super) breaker: Breaker<usize>,
    /// The day's spend as the last queue check read it.
    pub(super) spend: Option<SpendToday>,
    /// The offset of `budget.timezone`, for the resume time `status` shows.
    pub(super) utc_offset_s: i32,
}

impl Holds {
    /// Whether slot `idx` may not spawn now.
    pub(super) fn blocks(&self, idx: usize) -> bool {
        match self.breaker.state() {
            breaker::State::Closed => false,
            breaker::State::Open { .. } => true,
            breaker::State::HalfOpen { probe, .. } => probe != idx,
        }
    }

    /// The slot whose worker probes the agent, while one does.
    pub(super) fn probe(&self) -> Option<usize> {
        match self.breaker.state() {
            breaker::State::HalfOpen { probe, .. } => Some(probe),
            _ => None,
        }
    }

    /// When the hold in force ends.
    pub(super) fn ends_at(&self) -> Option<Instant> {
        match self.breaker.state() {
            breaker::State::Open { probe_at, .. } => Some(probe_at),
            _ => None,
        }
    }

    pub(super) fn snapshot(&self) -> Option<AgentHold> {
        self.hold.as_ref().map(|h| AgentHold {
            hold: match h.kind {
                HoldKind::Agent => "agent".into(),
                HoldKind::Budget => "budget".into(),
            },
            kind: h.words.clone(),
            reason: h.reason.clone(),
            until_epoch: h.until_epoch,
            utc_offset_s: self.utc_offset_s,
        })
    }

    /// `agent paused: usage limit, resumes 17:00 (in 42m)` for the `STATUS=` line.
    pub(super) fn words(&self, now: u64) -> Option<String> {
        self.snapshot().map(|h| h.words(now))
    }
}

impl Fleet {
    /// A pause (the rate limit's or the operator's) or an agent's hold keeps every slot
    /// from starting.
    pub(super) fn all_held(&self) -> bool {
        self.guards.held() || self.holds.hold.is_some()
    }

    /// A queue check found a hold in force: nothing spawns until it ends. Logged once per
    /// hold; a later end found afterwards only moves the resume time.
    pub fn on_hold(&mut self, h: Hold, spend: Option<SpendToday>, now: Instant) {
        self.view.queue_inflight = false;
        self.view.queue_again = false;
        self.holds.spend = spend;
        let left = Duration::from_secs(h.until_epoch.saturating_sub(self.epoch()));
        self.record.dirty = true;
        if let Some(cur) = &mut self.holds.hold {
            if h.kind == cur.kind && h.until_epoch > cur.until_epoch {
                *cur = h;
                self.holds.breaker.open(now, 0, left);
            }
            return;
        }
        // A probe still running met the limit again: this new hold ends it.
        let (event, msg) = match h.kind {
            HoldKind::Agent => (
                Kind::FleetAgentPaused,
                format!(
                    "agent paused: {} ({}); no spawns or claims until {}, then one probe",
                    h.words,
                    h.reason,
                    crate::timeutil::rfc3339(
                        std::time::UNIX_EPOCH + Duration::from_secs(h.until_epoch)
                    )
                ),
            ),
            HoldKind::Budget => (
                Kind::FleetBudgetReached,
                format!(
                    "{}; in-flight attempts finish, no new claims until {}",
                    h.words,
                    crate::timeutil::rfc3339(
                        std::time::UNIX_EPOCH + Duration::from_secs(h.until_epoch)
                    )
                ),
            ),
        };
        self.log(line(event, msg));
        self.view.unidle_backlog = (0, self.view.unidle_backlog.1);
        self.holds.hold = Some(h);
        self.holds.breaker.open(now, 0, left);
    }

    /// The day's spend from a queue check that found no hold.
    pub fn on_spend(&mut self, spend: Option<SpendToday>) {
        self.record.dirty |= self.holds.spend != spend;
        self.holds.spend = spend;
    }

    /// The hold's end has come: a budget's resumes the fleet (the queue check wakes the
    /// idle slots), an agent's starts the one probe.
    pub(super) fn hold_due(&mut self, now: Instant) {
        let Some(h) = &self.holds.hold else {
            return;
        };
        if !self.holds.breaker.probe_due(now) {
            return;
        }
        let kind = h.kind;
        self.holds.hold = None;
        self.record.dirty = true;
        if kind == HoldKind::Budget {
            self.holds.breaker.close();
            self.log(line(
                Kind::FleetBudgetResumed,
                "a new budget day began: the fleet claims again",
            ));
            self.request_queue();
            return;
        }
        let Some(idx) = self.probe_slot() else {
            self.holds.breaker.close();
            self.agent_resumed("the agent pause ended and every slot is busy");
            return;
        };
        self.holds.breaker.start_probe(idx, now);
        if let Some(slot) = self.pool.slots.get_mut(&idx) {
            slot.phase = Phase::Idle { confirmed: true };
        }
        self.log(
            line(
                Kind::FleetAgentProbe,
                format!("agent pause over: one probe in slot {idx} before the whole fleet"),
            )
            .slot(idx),
        );
        self.spawn_in(idx, now);
    }

    /// The worker in slot `idx` ended with `code`. Returns whether it was the agent's probe
    /// and that probe met the limit again (its slot then idles until the hold's end).
    pub(super) fn agent_probe_ended(&mut self, idx: usize, code: Option<i32>) -> bool {
        if self.holds.probe() != Some(idx) {
            return false;
        }
        self.holds.breaker.close();
        if code == Some(crate::exit_code::AGENT_PAUSED) {
            // The queue check reads the pause the probe recorded and holds again.
            self.request_queue();
            return true;
        }
        self.agent_resumed(&format!("the probe in slot {idx} ran the agent"));
        false
    }

    /// The slot a fleet-wide probe spawns in: the lowest within the target with no worker
    /// that is neither retiring nor parked for good.
    pub(super) fn probe_slot(&self) -> Option<usize> {
        self.pool
            .slots
            .values()
            .find(|s| {
                s.index < self.pool.target
                    && !s.retiring
                    && !s.occupied()
                    && !matches!(s.phase, Phase::Fatal { .. })
            })
            .map(|s| s.index)
    }

    fn agent_resumed(&mut self, why: &str) {
        self.log(line(
            Kind::FleetAgentResumed,
            format!("agent resumed: {why}; every slot claims again"),
        ));
        self.record.dirty = true;
        self.request_queue();
    }
}
