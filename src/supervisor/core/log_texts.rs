//! The supervisor's `docs/SPEC.md` §5 message texts, in one place so the fixed wording other
//! tools grep for cannot drift (the kinds they go with are `crate::event_log::Kind`).

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
