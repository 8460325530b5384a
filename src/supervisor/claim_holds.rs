//! What holds the fleet's claims for the agent, read off the loop by each queue check
//! (`docs/SPEC.md` §11.13): the agent pause file (`crate::lanes::pause_file`) and the day's budget
//! (`crate::budget` over the attempt ledger). The fleet (`core/fleet/holds.rs`) decides what
//! they mean; this reads files only.

use crate::budget;
use crate::config::Budget;
use crate::lanes::state_file::SpendToday;
use crate::layout::Layout;
use crate::supervisor::core::event::{Hold, HoldKind};

/// The hold in force at `now`, and the day's spend when a daily budget is set.
pub fn read(layout: &Layout, budget: &Budget, now: u64) -> (Option<Hold>, Option<SpendToday>) {
    if let Some(p) = crate::lanes::pause_file::agent_active_at(&layout.state(), now) {
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
