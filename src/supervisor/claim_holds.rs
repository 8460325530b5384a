//! What holds the fleet's claims, read for the fleet off the loop (`docs/SPEC.md` §11.13):
//! the operator's pause, the rate limit's pause, a cluster host without a live lease, the
//! agent's hold (`crate::lanes::pause_file`) and the day's budget (`crate::budget` over the
//! attempt ledger), as the events the fleet takes them by; and which issues a worker would
//! try to claim. The fleet (`core/fleet/holds.rs`) decides what they mean; this reads files
//! only, and on a cluster with a daily budget the fleet's day key in etcd
//! (`budget::fleet_day`), always off the loop.

use std::collections::BTreeSet;

use crate::budget;
use crate::config::Budget;
use crate::lanes::state_file::SpendToday;
use crate::layout::Layout;
use crate::supervisor::core::event::{Event, Hold, HoldKind, PauseCause};
use crate::timeutil::now_epoch;
use crate::tracker::{self, LabeledIssue};

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
    let mut today = budget::spend_today(&all, now, budget.utc_offset_s);
    let mut reserved = None;
    // On a cluster the day's spend and reservations are the fleet's (this host's entry
    // published on the way); etcd not answering leaves this host's own figures, and its
    // workers, which cannot reserve then, claim nothing.
    if let Some(c) = crate::cluster::active() {
        use crate::budget::fleet_day::{Publish, fleet_day};
        if let Ok(day) = fleet_day(c, layout, &today, budget, now, Publish::Tidy) {
            today = day.spend;
            reserved = Some(day.reserved);
        }
    }
    let reserved = reserved.unwrap_or_else(|| reserved_here(layout, now));
    let mut spend = SpendToday {
        words: budget::spend_words(budget, &today),
        usd_micros: crate::config::Usd::from_f64(today.usd).0,
        tokens: today.tokens,
        ..SpendToday::default()
    };
    if reserved.attempts > 0 {
        spend.reserved = Some(reserved.words(budget));
        spend.reserved_usd_micros = reserved.usd_micros;
        spend.reserved_tokens = reserved.tokens;
        spend.reserved_attempts = reserved.attempts;
    }
    let hold = budget::daily_reached(budget, &today, now).map(|r| Hold {
        kind: HoldKind::Budget,
        words: r.reason,
        reason: String::new(),
        until_epoch: r.until_epoch,
    });
    (hold, Some(spend))
}

/// The live budget reservations of this host: read without the lock, a figure a moment
/// old is fine for `status`. An unreadable file shows none (the worker that meets it
/// refuses to claim and says why).
fn reserved_here(layout: &Layout, now: u64) -> budget::reserve::Reserved {
    budget::reserve::read_live(&layout.state(), now)
        .map(|live| budget::reserve::Reserved::of(&live))
        .unwrap_or_default()
}

/// What holds the fleet, as the events the fleet takes it by ([`read_holds`]).
#[derive(Debug, Default)]
pub struct HoldsRead {
    pub events: Vec<Event>,
}

impl HoldsRead {
    /// A pause of the rate limit or a hold of the agent's is among them: no queue check.
    pub fn held(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, Event::Paused(..) | Event::Hold(..)))
    }
}

/// The fleet's holds, read before a start's first spawns: the operator's pause (it holds
/// spawns, not queue checks), then the rate limit's pause, else the agent's hold or the
/// day's spend. A file that cannot be read is an event of its own and holds nothing.
pub fn read_holds(layout: &Layout, budget: &crate::config::Budget, tick_s: u64) -> HoldsRead {
    let mut events = read_operator_pause(layout);
    events.extend(read_tracker_holds(layout, budget, tick_s).events);
    HoldsRead { events }
}

/// The holds a queue check reads before it asks the tracker: the rate limit's pause, else
/// the agent's hold or the day's spend. Not the operator's pause: the loop reads that
/// itself (at each tick and control signal), so a check read before a `resume` and
/// answered after it cannot bring the lifted pause back.
pub fn read_tracker_holds(
    layout: &Layout,
    budget: &crate::config::Budget,
    tick_s: u64,
) -> HoldsRead {
    let state_dir = layout.state();
    let mut events = Vec::new();
    if let Some(p) = cluster_hold(layout, tick_s) {
        events.push(Event::Paused(p, PauseCause::NoClusterLease));
        return HoldsRead { events };
    }
    match crate::lanes::pause_file::read(&state_dir) {
        Ok(Some(p)) if p.active_at(now_epoch()) => {
            events.push(Event::Paused(p, PauseCause::RateLimit));
            return HoldsRead { events };
        }
        Ok(_) => {}
        Err(e) => events.push(Event::PauseFile(e)),
    }
    events.push(match read(layout, budget, now_epoch()) {
        (Some(h), spend) => Event::Hold(h, spend),
        (None, spend) => Event::Spend(spend),
    });
    HoldsRead { events }
}

/// The operator's pause file as the events the fleet takes it by: read before a start's
/// first spawns, at each tick and at once on a control signal, so `pause` and `resume` act
/// on the signal that follows them instead of a tick later (one small file, read on the
/// loop, so its readings arrive in order).
pub fn read_operator_pause(layout: &Layout) -> Vec<Event> {
    let mut events = Vec::new();
    let (active, resumed_via) = match crate::lanes::pause_file::read_operator(&layout.state()) {
        Ok(p) => (
            p.clone().filter(|p| p.active_at(now_epoch())),
            p.filter(|r| r.resumed).map(|r| r.via),
        ),
        Err(e) => {
            events.push(Event::PauseFile(e));
            (None, None)
        }
    };
    events.push(Event::OperatorPause {
        active,
        resumed_via,
    });
    events
}

/// The numbers of the issues a worker would try to claim: claimable labels and no claim
/// dir (anything at that path makes the worker's exclusive `mkdir` fail).
pub fn claimable(layout: &Layout, issues: &[LabeledIssue]) -> BTreeSet<u64> {
    let claims = layout.claims();
    issues
        .iter()
        .filter(|i| tracker::is_claimable(&i.labels))
        .filter(|i| std::fs::symlink_metadata(claims.join(i.number.to_string())).is_err())
        .map(|i| i.number)
        .collect()
}

/// `[cluster]`: while the host holds no live lease (etcd unavailable, or the lease lost)
/// nothing is spawned, as for a rate limit: one `fleet.paused`, the resume time moved on
/// by every check that finds it still so (each tick: it is set two ticks ahead), and
/// `fleet.resumed` within two ticks of a live lease.
fn cluster_hold(layout: &Layout, tick_s: u64) -> Option<crate::lanes::pause_file::Pause> {
    crate::cluster::active()?;
    let rec = crate::cluster::lease::read(&layout.supervisor_lane());
    if rec.as_ref().is_some_and(|r| r.live()) {
        return None;
    }
    // The keeper writes why once a renewal failed; a deadline passed before that (the
    // keeper's call still waiting on etcd) has no words of its own yet.
    let why = match rec {
        None => "no lease yet".to_string(),
        Some(r) if r.why.is_empty() => "its lease was not renewed in time".to_string(),
        Some(r) => r.why,
    };
    let now = now_epoch();
    Some(crate::lanes::pause_file::Pause {
        reason: format!("cluster: no live lease of this host ({why})"),
        until_epoch: now + 2 * tick_s.max(1),
        since_epoch: now,
    })
}
