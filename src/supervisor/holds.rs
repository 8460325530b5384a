//! What holds the fleet's claims for the agent, read off the loop by each queue check
//! (`docs/SPEC.md` §11.13): the agent pause file (`crate::pause`) and the day's budget
//! (`crate::budget` over the attempt ledger). The fleet (`fleet/holds.rs`) decides what
//! they mean; this reads files only.

use crate::budget;
use crate::config::Budget;
use crate::layout::Layout;
use crate::supervisor::state_file::{AgentHold, SpendToday};

/// What holds the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    /// The agent's account: at the end, one probe before the whole fleet.
    Agent,
    /// The day's budget: at the next day, the whole fleet.
    Budget,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub kind: HoldKind,
    /// `usage limit`, …, or the budget's `daily budget reached: spend today $1.20 of $1.00`.
    pub words: String,
    /// The agent's own words (empty for a budget).
    pub reason: String,
    pub until_epoch: u64,
}

/// The hold in force at `now`, and the day's spend when a daily budget is set.
pub fn read(layout: &Layout, budget: &Budget, now: u64) -> (Option<Hold>, Option<SpendToday>) {
    if let Some(p) = crate::pause::agent_active_at(&layout.state(), now) {
        let hold = Hold {
            kind: HoldKind::Agent,
            words: p.kind,
            reason: p.reason,
            until_epoch: p.until_epoch,
        };
        return (Some(hold), None);
    }
    if !budget.daily() {
        return (None, None);
    }
    let (all, _) = crate::ledger::read_all(layout);
    let today = budget::spend_today(&all, now, budget.utc_offset_s);
    let spend = SpendToday {
        words: budget::spend_words(budget, &today),
        usd_micros: crate::config::Usd::from_f64(today.usd).0,
        tokens: today.tokens,
        ..SpendToday::default()
    };
    let spend = with_reserved(spend, layout, budget, now);
    let hold = budget::daily_reached(budget, &today, now).map(|r| Hold {
        kind: HoldKind::Budget,
        words: r.reason,
        reason: String::new(),
        until_epoch: r.until_epoch,
    });
    (hold, Some(spend))
}

/// `spend` with the live budget reservations of this host, when any: read without the lock, a figure
/// a moment old is fine for `status`. An unreadable file shows none (the worker that
/// meets it refuses to claim and says why).
fn with_reserved(mut spend: SpendToday, layout: &Layout, budget: &Budget, now: u64) -> SpendToday {
    let Ok(live) = budget::reserve::read_live(&layout.state(), now) else {
        return spend;
    };
    let r = budget::reserve::Reserved::of(&live);
    if r.attempts > 0 {
        spend.reserved = Some(r.words(budget));
        spend.reserved_usd_micros = r.usd_micros;
        spend.reserved_tokens = r.tokens;
        spend.reserved_attempts = r.attempts;
    }
    spend
}

/// `agent paused: usage limit, resumes 17:00 (in 42m)`, or for the budget
/// `budget reached: spend today $1.20 of $1.00, resumes 00:00 (in 3h02m)`; the clock time
/// in `budget.timezone`.
pub fn hold_words(h: &AgentHold, now: u64) -> String {
    let local = (h.until_epoch as i64 + i64::from(h.utc_offset_s)).rem_euclid(86_400);
    let at = format!("{:02}:{:02}", local / 3600, (local % 3600) / 60);
    let left = match h.until_epoch.checked_sub(now) {
        Some(s) if s > 0 => format!("in {}", crate::timeutil::coarse_duration(s)),
        _ => "now".into(),
    };
    let what = crate::text::excerpt(&crate::text::escape(&h.kind));
    match h.hold.as_str() {
        "budget" => format!(
            "budget reached: {}, resumes {at} ({left})",
            what.trim_start_matches("daily budget reached: ")
        ),
        _ => format!("agent paused: {what}, resumes {at} ({left})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_says_what_and_when_in_the_configured_zone() {
        let h = AgentHold {
            hold: "agent".into(),
            kind: "usage limit".into(),
            reason: "Claude AI usage limit reached|1796144400".into(),
            until_epoch: 1_796_144_400, // 2026-12-01T17:00:00Z
            utc_offset_s: 0,
        };
        assert_eq!(
            hold_words(&h, 1_796_144_400 - 42 * 60),
            "agent paused: usage limit, resumes 17:00 (in 42m)"
        );
        let b = AgentHold {
            hold: "budget".into(),
            kind: "daily budget reached: spend today $1.20 of $1.00".into(),
            reason: String::new(),
            until_epoch: 1_796_169_600, // 2026-12-02T00:00:00Z
            utc_offset_s: 3600,
        };
        assert_eq!(
            hold_words(&b, 1_796_169_600 - 3600),
            "budget reached: spend today $1.20 of $1.00, resumes 01:00 (in 1h00m)"
        );
    }
}
