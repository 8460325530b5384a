//! How a [`StatusReport`] looks to a person: the plain table (`status`, and `status
//! --watch` off a terminal) in [`plain`], the live view drawn with ratatui in [`view`],
//! and the terminal loop that redraws it in [`live`]. The phrases both share (a pause, a
//! circuit, a parked slot's reason) live here, so the two never word a fact differently.
//!
//! Everything shown that came from outside the process (titles, reasons, ids, the runner,
//! log messages) goes through [`crate::text::escape`]: a title cannot move the cursor.

pub mod health;
pub mod live;
pub mod plain;
pub mod view;

pub use plain::{human_duration, human_kib, render_status};

use crate::control::{FleetInfo, SlotRow, StatusReport};
use crate::lanes::state_file::{BootSuite, FleetCircuit, FleetCircuitState, FleetPause};
use crate::text;

/// `45s`, `4m`, `1h02m`: how far away something is, as a person says it.
pub fn coarse_duration(s: u64) -> String {
    crate::timeutil::coarse_duration(s)
}

/// `in 4m`, or `now` once the time has come.
fn due(epoch: u64, now: u64) -> String {
    match epoch.checked_sub(now) {
        Some(s) if s > 0 => format!("in {}", coarse_duration(s)),
        _ => "now".into(),
    }
}

/// `paused: rate limited: …, resumes in 4m`.
pub fn pause_words(p: &FleetPause, now: u64) -> String {
    let reason = text::excerpt(&text::escape(&p.reason));
    match p.until_epoch {
        Some(t) => format!("paused: {reason}, resumes {}", due(t, now)),
        None => format!("paused: {reason}, for one backoff step"),
    }
}

/// `paused by the operator: release freeze (via=cli), until resumed`.
pub fn operator_pause_words(p: &crate::lanes::pause_file::OperatorPause, now: u64) -> String {
    let reason = text::excerpt(&text::escape(&p.reason));
    let via = text::escape(&p.via);
    match p.until_epoch {
        Some(t) => format!(
            "paused by the operator: {reason} (via={via}), resumes {}",
            due(t, now)
        ),
        None => format!("paused by the operator: {reason} (via={via}), until resumed"),
    }
}

/// `fleet circuit open: 4 slots tripped: <reason>, probe in 3m`.
pub fn fleet_circuit_words(c: &FleetCircuit, now: u64) -> String {
    let mut out = format!(
        "fleet circuit {}: {} slots tripped: {}",
        c.state,
        c.tripped_slots,
        text::excerpt(&text::escape(&c.reason))
    );
    if let Some(t) = c.probe_epoch.filter(|_| c.state == FleetCircuitState::Open) {
        out.push_str(&format!(", probe {}", due(t, now)));
    }
    out
}

/// A parked slot's reason in words, with when its probe is due: `circuit open: 5 fast
/// deaths within 120s, probe in 3m`.
pub fn slot_reason_words(s: &SlotRow, now: u64) -> Option<String> {
    let why = text::escape(s.reason.as_deref()?);
    Some(match s.probe_epoch {
        Some(t) => format!("{why}, probe {}", due(t, now)),
        None => why,
    })
}

/// `clean 1.2s`, `failed: … 3.4s`.
pub fn boot_words(b: &BootSuite) -> String {
    let took = if b.elapsed_ms < 60_000 {
        format!("{:.1}s", b.elapsed_ms as f64 / 1000.0)
    } else {
        human_duration(b.elapsed_ms / 1000)
    };
    format!("{} {took}", text::excerpt(&text::escape(&b.result)))
}

/// `local, 5 ready-for-agent`, `gh, ready-for-agent unknown (tracker check failed: …)`.
pub fn tracker_words(f: &FleetInfo) -> String {
    let kind = f.tracker_kind.as_deref().map_or("unavailable", |k| k);
    match (f.ready_for_agent, &f.ready_for_agent_unknown) {
        (Some(n), _) => format!("{kind}, {n} ready-for-agent"),
        (None, Some(why)) => format!(
            "{kind}, ready-for-agent unknown ({})",
            text::excerpt(&text::escape(why))
        ),
        (None, None) => format!("{kind}, ready-for-agent unknown"),
    }
}

/// `12.5%` of one core.
pub fn cpu_words(permille: u64) -> String {
    format!("{:.1}%", permille as f64 / 10.0)
}

/// `#17 Fix the parser`, `#17`, or `-`.
pub fn issue_words(s: &SlotRow) -> String {
    match (s.issue, &s.title) {
        (Some(n), Some(t)) => format!("#{n} {}", text::escape(t)),
        (Some(n), None) => format!("#{n}"),
        _ => "-".into(),
    }
}

/// The lines above the table that only some fleets have: the pause, the fleet circuit.
pub fn alerts(r: &StatusReport) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = &r.fleet.paused {
        out.push(pause_words(p, r.epoch));
    }
    if let Some(p) = &r.fleet.operator_pause {
        out.push(operator_pause_words(p, r.epoch));
    }
    if let Some(c) = &r.fleet.circuit {
        out.push(fleet_circuit_words(c, r.epoch));
    }
    if let Some(h) = &r.fleet.held {
        out.push(h.words(r.epoch));
    }
    if let Some(s) = &r.fleet.spend {
        let mut line = text::escape(&s.words);
        if let Some(res) = &s.reserved {
            line.push_str("; ");
            line.push_str(&text::escape(res));
        }
        out.push(line);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::control::SupervisorInfo;
    use crate::event_log::{Kind, Record};
    use crate::lanes::state_file::{ShrinkMode, SlotState};

    pub const NOW: u64 = 1_800_000_000;

    /// A fleet of four as a hand-made report: running with a title (and a cgroup's memory
    /// peak), idle, parked for good, parked by its circuit; paused, with its fleet circuit
    /// open and issues quarantined.
    pub fn report() -> StatusReport {
        let slot = |i: usize, state: SlotState| SlotRow {
            slot: i,
            pid: None,
            worker_id: None,
            state,
            uptime_s: None,
            restarts: 0,
            issue: None,
            cpu_ms: None,
            rss_kib: None,
            reason: None,
            title: None,
            cpu_permille: None,
            probe_epoch: None,
            last_event: None,
            memory_peak_kib: None,
        };
        let mut running = slot(0, SlotState::Running);
        running.pid = Some(5001);
        running.worker_id = Some("sup-4242-slot-0-3".into());
        running.uptime_s = Some(185);
        running.restarts = 2;
        running.issue = Some(17);
        running.title = Some("Fix the \u{1b}[2Jparser".into());
        running.cpu_ms = Some(4200);
        running.cpu_permille = Some(125);
        running.rss_kib = Some(20_480);
        running.memory_peak_kib = Some(98_304);
        running.last_event = Some(Record {
            ts: "2027-01-15T08:00:01.000Z".into(),
            kind: Kind::SlotSpawn,
            slot: Some(0),
            pid: Some(5001),
            issue: None,
            msg: "spawned worker sup-4242-slot-0-3".into(),
        });
        let idle = slot(1, SlotState::Idle);
        let mut fatal = slot(2, SlotState::Parked);
        fatal.reason = Some("agent.command not configured".into());
        let mut open = slot(3, SlotState::Parked);
        open.restarts = 5;
        open.reason = Some("circuit open: 5 fast deaths within 120s".into());
        open.probe_epoch = Some(NOW + 185);
        StatusReport {
            schema_version: crate::control::STATUS_SCHEMA_VERSION,
            supervisor: SupervisorInfo {
                pid: 4242,
                start_time: 99,
                heartbeat_epoch: Some(NOW - 1),
                heartbeat_age_s: Some(1),
                uptime_s: Some(3725),
            },
            fleet: FleetInfo {
                target: 4,
                live: 1,
                parked: 2,
                deaths: 6,
                respawns: 5,
                window_s: 120,
                ready_for_agent: Some(7),
                ready_for_agent_unknown: None,
                shrink_mode: ShrinkMode::DrainThenRetire,
                runner: "claude".into(),
                paused: Some(FleetPause {
                    reason: "rate limited: API rate limit exceeded".into(),
                    until_epoch: Some(NOW + 245),
                }),
                circuit: Some(FleetCircuit {
                    state: FleetCircuitState::Open,
                    reason: "exits 1 1 1: boom".into(),
                    probe_epoch: Some(NOW + 60),
                    tripped_slots: 3,
                }),
                quarantined: Some(2),
                idle: 1,
                boot_suite: Some(BootSuite {
                    result: "clean".into(),
                    elapsed_ms: 1234,
                }),
                tracker_kind: Some("local".into()),
                held: None,
                spend: None,
                rescued: Some(1),
                prs: None,
                isolation: None,
                operator_pause: None,
            },
            slots: vec![running, idle, fatal, open],
            epoch: NOW,
        }
    }

    #[test]
    fn the_phrases() {
        let r = report();
        assert_eq!(
            alerts(&r),
            vec![
                "paused: rate limited: API rate limit exceeded, resumes in 4m",
                "fleet circuit open: 3 slots tripped: exits 1 1 1: boom, probe in 1m",
            ]
        );
        assert_eq!(
            slot_reason_words(&r.slots[3], NOW).unwrap(),
            "circuit open: 5 fast deaths within 120s, probe in 3m"
        );
        assert_eq!(
            slot_reason_words(&r.slots[3], NOW + 999).unwrap(),
            "circuit open: 5 fast deaths within 120s, probe now"
        );
        assert_eq!(
            slot_reason_words(&r.slots[2], NOW).unwrap(),
            "agent.command not configured"
        );
        assert_eq!(slot_reason_words(&r.slots[0], NOW), None);
        assert_eq!(
            boot_words(r.fleet.boot_suite.as_ref().unwrap()),
            "clean 1.2s"
        );
        assert_eq!(tracker_words(&r.fleet), "local, 7 ready-for-agent");
        assert_eq!(issue_words(&r.slots[0]), "#17 Fix the \\e[2Jparser");
        assert_eq!(cpu_words(125), "12.5%");
        let mut f = r.fleet.clone();
        f.ready_for_agent = None;
        f.ready_for_agent_unknown = Some("no tracker check has answered yet".into());
        f.tracker_kind = None;
        assert_eq!(
            tracker_words(&f),
            "unavailable, ready-for-agent unknown (no tracker check has answered yet)"
        );
        let p = FleetPause {
            reason: "rate limited".into(),
            until_epoch: None,
        };
        assert_eq!(
            pause_words(&p, NOW),
            "paused: rate limited, for one backoff step"
        );
    }
}
