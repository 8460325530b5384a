//! `status`'s verdict, as `systemctl is-active` gives one: the exit code says whether the
//! fleet is healthy, running but degraded, or not running, so a script or a monitor need not
//! parse the table. A slot whose circuit is open (parked) or probing (half-open) counts as
//! parked.

use crate::control::StatusReport;
use crate::lanes::state_file::SlotState;

/// Running and nothing in the way.
pub const HEALTHY: &str = "healthy";
/// Running, but some of it is held back: a parked slot, the fleet circuit, a pause, or
/// work waiting that no slot can take.
pub const DEGRADED: &str = "degraded";

/// Why the running fleet is degraded, one phrase each; empty when it is healthy.
pub fn degraded(report: &StatusReport) -> Vec<String> {
    let mut why = Vec::new();
    let parked: Vec<String> = report
        .slots
        .iter()
        .filter(|s| matches!(s.state, SlotState::Parked | SlotState::HalfOpen))
        .map(|s| s.slot.to_string())
        .collect();
    if !parked.is_empty() {
        why.push(format!("slots parked: {}", parked.join(", ")));
    } else if report.fleet.parked > 0 {
        why.push(format!("slots parked: {}", report.fleet.parked));
    }
    if report.fleet.circuit.is_some() {
        why.push("fleet circuit open".into());
    }
    if report.fleet.paused.is_some() {
        why.push("fleet paused".into());
    }
    if let Some(h) = &report.fleet.held {
        why.push(match h.hold.as_str() {
            "budget" => "budget reached".into(),
            _ => format!("agent paused: {}", h.kind),
        });
    }
    if report.fleet.operator_pause.is_some() {
        why.push("operator pause".into());
    }
    if let Some(w) = work_waiting(report) {
        why.push(w);
    }
    why
}

/// `work waiting: 1 ready-for-agent, no slot can take it (slot 0 stopped)`: issues are
/// ready and every slot is stopped, parked, retiring, or there is none (target 0), so the
/// fleet does nothing while its work waits. An idle slot can take it (the next queue
/// check wakes it), a running one once it is done.
fn work_waiting(report: &StatusReport) -> Option<String> {
    let ready = report.fleet.ready_for_agent.filter(|n| *n > 0)?;
    let can_take = |s: &SlotState| {
        matches!(
            s,
            SlotState::Running | SlotState::Idle | SlotState::Stalled | SlotState::Unknown
        )
    };
    if report.slots.iter().any(|s| can_take(&s.state)) {
        return None;
    }
    let slots: Vec<String> = report
        .slots
        .iter()
        .map(|s| format!("slot {} {}", s.slot, s.state.as_str()))
        .collect();
    let why = match slots.is_empty() {
        true => format!("target {}", report.fleet.target),
        false => slots.join(", "),
    };
    Some(format!(
        "work waiting: {ready} ready-for-agent, no slot can take it ({why})"
    ))
}

/// `status --json`'s object: the report with `health` and `degraded` added. One function
/// so the CLI and the MCP tool `fleet_status` cannot drift apart.
pub fn report_json(report: &StatusReport) -> serde_json::Result<serde_json::Value> {
    let mut value = serde_json::to_value(report)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("health".into(), verdict(report).into());
        map.insert("degraded".into(), degraded(report).into());
    }
    Ok(value)
}

/// [`HEALTHY`] or [`DEGRADED`].
pub fn verdict(report: &StatusReport) -> &'static str {
    if degraded(report).is_empty() {
        HEALTHY
    } else {
        DEGRADED
    }
}
