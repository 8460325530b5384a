//! The event-log kinds and the `docs/SPEC.md` §5 message texts, in one place so the fixed wording
//! other tools grep for cannot drift.

pub mod kind {
    pub const START: &str = "supervisor.start";
    pub const BOOT_SWEEP: &str = "supervisor.boot-sweep";
    /// One decision of a halted or failed suite, after its `boot-sweep` record.
    pub const BOOT_SWEEP_DETAIL: &str = "supervisor.boot-sweep.detail";
    /// The straggler check's warning at boot: the open issues no worker will take.
    pub const STRAGGLERS: &str = "supervisor.stragglers";
    pub const TAKEOVER: &str = "supervisor.takeover";
    pub const TICK: &str = "supervisor.tick";
    pub const RESIZE: &str = "supervisor.resize";
    pub const STOP: &str = "supervisor.stop";
    pub const ERROR: &str = "supervisor.error";
    /// Routine clean-up at start (a previous run's regular `resize.toon` removed): no error.
    pub const HOUSEKEEPING: &str = "supervisor.housekeeping";
    pub const PERIODIC: &str = "supervisor.periodic";
    pub const TRACKER: &str = "supervisor.tracker";
    pub const TRACKER_ERROR: &str = "tracker.error";
    pub const SPAWN: &str = "slot.spawn";
    pub const SPAWN_FAILED: &str = "slot.spawn-failed";
    pub const EXIT: &str = "slot.exit";
    pub const PARKED: &str = "slot.parked";
    pub const IDLE: &str = "slot.idle";
    pub const UNIDLE: &str = "slot.unidle";
    pub const STALLED: &str = "slot.stalled";
    pub const PROGRESS: &str = "slot.progress";
    pub const STALL_KILL: &str = "slot.stall-kill";
    pub const RETIRE: &str = "slot.retire";
    pub const UNRETIRE: &str = "slot.unretire";
    pub const RETIRED: &str = "slot.retired";
    pub const HARD_KILL: &str = "slot.hard-kill";
    /// A dead worker's claim released and its issue given back.
    pub const RESTORE: &str = "slot.restore";
    pub const CIRCUIT_TRIP: &str = "circuit.trip";
    pub const CIRCUIT_HALF_OPEN: &str = "circuit.half-open";
    pub const CIRCUIT_REPARKED: &str = "circuit.re-parked";
    pub const CIRCUIT_CLOSED: &str = "circuit.closed";
    /// The whole fleet waits out a tracker rate limit (`docs/SPEC.md` §11.11).
    pub const FLEET_PAUSED: &str = "fleet.paused";
    pub const FLEET_RESUMED: &str = "fleet.resumed";
    /// The fleet-wide circuit (`docs/SPEC.md` §11.12).
    pub const FLEET_CIRCUIT_OPEN: &str = "fleet.circuit-open";
    pub const FLEET_CIRCUIT_PROBE: &str = "fleet.circuit-probe";
    pub const FLEET_CIRCUIT_REPARKED: &str = "fleet.circuit-reparked";
    pub const FLEET_CIRCUIT_CLOSED: &str = "fleet.circuit-closed";
    /// An operator paused or resumed the fleet (`afk-supervisor pause|resume`, or MCP).
    pub const OPERATOR_PAUSED: &str = "fleet.operator-paused";
    pub const OPERATOR_RESUMED: &str = "fleet.operator-resumed";
    /// A control command asked something of the fleet; its message ends `(via=cli|mcp)`.
    pub const CONTROL: &str = "control.request";
    /// A slot stopped by `stop --slot` (it stays empty until `restart`).
    pub const SLOT_STOPPED: &str = "slot.stopped";
    /// A slot's worker restarted by `restart`.
    pub const SLOT_RESTART: &str = "slot.restart";

    /// The isolation chosen at start-up, and each limit that cannot be enforced
    /// (`docs/SPEC.md` §11.16).
    pub const ISOLATION: &str = "supervisor.isolation";
    /// What the kernel counted for an attempt whose cgroup emptied (§11.16).
    pub const FIGURES: &str = "slot.figures";

    /// The agent's account or the day's budget holds the fleet (`docs/SPEC.md` §11.13).
    pub const FLEET_AGENT_PAUSED: &str = "fleet.agent-paused";
    pub const FLEET_AGENT_PROBE: &str = "fleet.agent-probe";
    pub const FLEET_AGENT_RESUMED: &str = "fleet.agent-resumed";
    pub const FLEET_BUDGET_REACHED: &str = "fleet.budget-reached";
    pub const FLEET_BUDGET_RESUMED: &str = "fleet.budget-resumed";

    /// `[cluster]`: the host's lease (granted, etcd unavailable, back, lost;
    /// `docs/SPEC.md` §11.23).
    pub const CLUSTER: &str = "cluster.lease";

    /// Every kind above, the one list `logs --kind` (and `events --kind`) check a name
    /// against. A unit test reads this file and fails when a kind is missing here.
    pub const ALL: &[&str] = &[
        START,
        BOOT_SWEEP,
        BOOT_SWEEP_DETAIL,
        STRAGGLERS,
        TAKEOVER,
        TICK,
        RESIZE,
        STOP,
        ERROR,
        HOUSEKEEPING,
        PERIODIC,
        CLUSTER,
        TRACKER,
        TRACKER_ERROR,
        SPAWN,
        SPAWN_FAILED,
        EXIT,
        PARKED,
        IDLE,
        UNIDLE,
        STALLED,
        PROGRESS,
        STALL_KILL,
        RETIRE,
        UNRETIRE,
        RETIRED,
        HARD_KILL,
        RESTORE,
        CIRCUIT_TRIP,
        CIRCUIT_HALF_OPEN,
        CIRCUIT_REPARKED,
        CIRCUIT_CLOSED,
        FLEET_PAUSED,
        FLEET_RESUMED,
        FLEET_CIRCUIT_OPEN,
        FLEET_CIRCUIT_PROBE,
        FLEET_CIRCUIT_REPARKED,
        FLEET_CIRCUIT_CLOSED,
        FLEET_AGENT_PAUSED,
        FLEET_AGENT_PROBE,
        FLEET_AGENT_RESUMED,
        FLEET_BUDGET_REACHED,
        FLEET_BUDGET_RESUMED,
        ISOLATION,
        FIGURES,
        OPERATOR_PAUSED,
        OPERATOR_RESUMED,
        CONTROL,
        SLOT_STOPPED,
        SLOT_RESTART,
        crate::rescue::EVENT,
        crate::sandbox::EVENT_REFUSED,
        crate::tracker::provenance::EVENT_HELD,
        crate::ledger::EVENT_READY,
        crate::ledger::EVENT_HANDED_OFF,
        crate::ledger::EVENT_QUARANTINED,
        crate::claim::stale::EVENT_HOST_LOST,
        crate::notify::EVENT_START,
        crate::notify::EVENT_FAILED,
        crate::attempt_state::EVENT_CLAIMED,
        crate::landing::kind::OPENED,
        crate::landing::kind::UPDATED,
        crate::landing::kind::CREATE_FAILED,
        crate::landing::kind::CHECKS_FAILED,
        crate::landing::kind::CHECKS_PASSED,
        crate::landing::kind::FIX_REQUESTED,
        crate::landing::kind::NEEDS_PERSON,
        crate::landing::kind::READY,
        crate::landing::kind::MERGE_REQUESTED,
        crate::landing::kind::MERGED,
        crate::landing::kind::CLOSED,
    ];

    /// Whether `k` names a kind, or a dotted prefix of some (`slot`, `fleet`).
    pub fn is_known(k: &str) -> bool {
        ALL.iter()
            .any(|kind| *kind == k || kind.starts_with(&format!("{k}.")))
    }
}

pub fn takeover(adopted: usize, dead: usize, target: usize) -> String {
    format!("takeover adoption: adopted={adopted} dead={dead} target={target}")
}

/// A slot idled because its worker exited 0 at once with work apparently queued.
pub fn nothing_claimable(slot: usize, lived_s: f64, ready: usize) -> String {
    format!(
        "slot {slot} idle: worker exited 0 after {lived_s:.1}s while ready-for-agent={ready}: nothing claimable, waiting for the queue to change"
    )
}

pub fn fatal_parked(slot: usize) -> String {
    format!("fatal host configuration: slot {slot} parked without retry")
}

pub fn half_open(slot: usize, backoff_s: u64, step: u32) -> String {
    format!(
        "circuit half-open: slot {slot} cooldown expired, spawning probe (backoff={backoff_s}s step={step})"
    )
}

pub fn reparked(slot: usize, lived_s: u64, backoff_s: u64, step: u32) -> String {
    format!(
        "circuit re-parked: slot {slot} probe died after {lived_s}s, next probe in {backoff_s}s (step={step})"
    )
}

pub fn closed(slot: usize, lived_s: u64) -> String {
    format!("circuit closed: slot {slot} probe succeeded ({lived_s}s), backoff reset")
}

pub fn tripped(slot: usize, deaths: u32, window_s: u64, backoff_s: u64) -> String {
    format!(
        "circuit open: slot {slot} tripped after {deaths} fast deaths within {window_s}s, probe in {backoff_s}s (step=0)"
    )
}

/// The per-tick line; every field is a count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickCounts {
    pub slots: usize,
    pub respawned: usize,
    pub deaths: usize,
    pub parked: usize,
    pub idle_parked: usize,
    pub ready: u64,
    pub busy: usize,
    pub free: usize,
}

pub fn tick(c: &TickCounts) -> String {
    format!(
        "tick: slots={} respawned={} deaths={} parked={} idle-parked={} ready={} busy={} free={}",
        c.slots, c.respawned, c.deaths, c.parked, c.idle_parked, c.ready, c.busy, c.free
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `pub const X: &str = "…"` of `mod kind` is in `kind::ALL`: a kind added
    /// without it would be refused by `logs --kind`.
    #[test]
    fn every_kind_is_in_all() {
        let src = include_str!("texts.rs");
        let body = src.split("pub mod kind {").nth(1).unwrap();
        let body = body.split("pub const ALL").next().unwrap();
        let mut missing = Vec::new();
        for line in body.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("pub const ")
                && let Some((_, value)) = rest.split_once("= \"")
            {
                let value = value.trim_end_matches("\";");
                if !kind::ALL.contains(&value) {
                    missing.push(value.to_string());
                }
            }
        }
        assert!(missing.is_empty(), "not in kind::ALL: {missing:?}");
        assert!(kind::is_known("slot"));
        assert!(kind::is_known("fleet"));
        assert!(!kind::is_known("fleet.circuit"), "a prefix ends at a dot");
        assert!(kind::is_known("supervisor.tick"));
        assert!(!kind::is_known("bogus"));
        assert!(!kind::is_known("slot.ex"));
    }

    /// The kinds the notifier reads its classes from are kinds the fleet writes (the
    /// notifier sits below this module and names them as text).
    #[test]
    fn the_notifiers_kinds_are_the_fleets() {
        for k in crate::notify::classes::KINDS {
            assert!(kind::ALL.contains(&k), "{k}");
        }
        assert!(kind::ALL.contains(&kind::BOOT_SWEEP));
    }

    #[test]
    fn fixed_texts() {
        assert_eq!(
            takeover(2, 1, 3),
            "takeover adoption: adopted=2 dead=1 target=3"
        );
        assert_eq!(
            fatal_parked(1),
            "fatal host configuration: slot 1 parked without retry"
        );
        assert_eq!(
            half_open(0, 60, 0),
            "circuit half-open: slot 0 cooldown expired, spawning probe (backoff=60s step=0)"
        );
        assert!(reparked(2, 1, 120, 1).starts_with("circuit re-parked: slot 2 "));
        assert_eq!(
            closed(3, 30),
            "circuit closed: slot 3 probe succeeded (30s), backoff reset"
        );
        let c = TickCounts {
            slots: 4,
            respawned: 1,
            deaths: 2,
            parked: 1,
            idle_parked: 1,
            ready: 5,
            busy: 2,
            free: 1,
        };
        assert_eq!(
            tick(&c),
            "tick: slots=4 respawned=1 deaths=2 parked=1 idle-parked=1 ready=5 busy=2 free=1"
        );
    }
}
