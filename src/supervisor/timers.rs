//! Work the supervisor loop does on a timer beside the fleet, on its blocking pool: the
//! unblock belt, the stale-claims belt, the approval belt and slot-log expiry. Each run's text or error becomes
//! one `supervisor.periodic` record; a run still going when its next is due is not doubled.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use crate::config::Config;
use crate::event_log::Kind;
use crate::event_log::Record;
use crate::layout::Layout;
use crate::supervisor::core::event::Event;
use crate::supervisor::slot_logs::ExpireError;
use crate::supervisor::unblock_belt::BeltPass;
use crate::tracker::{Tracker, TrackerError};

/// Why one run of a periodic task failed (logged as `<name> failed: <error>`).
#[derive(Debug, thiserror::Error)]
pub enum PeriodicError {
    /// The unblock belt's pass, or a write within it, failed.
    #[error("{}", .0.outcome())]
    Belt(BeltPass),
    /// The stale-claims belt could not read the tracker.
    #[error(transparent)]
    Claims(#[from] TrackerError),
    #[error(transparent)]
    SlotLogs(#[from] ExpireError),
    /// The landing belt's pass failed for some of its records (`docs/SPEC.md` §11.22).
    #[error("{0}")]
    Landing(String),
    /// `[cluster]`: the claims belt could not read etcd or the tracker.
    #[error(transparent)]
    Cluster(#[from] crate::supervisor::cluster_belt::ClusterBeltError),
    /// `[cluster]`: the steward could not read the queue on GitHub or publish it.
    #[error(transparent)]
    Steward(#[from] crate::cluster::steward::StewardError),
    /// An earlier run panicked while holding the task.
    #[error("an earlier run panicked")]
    Poisoned,
}

/// A task the loop runs on the blocking pool every `interval` (first run one interval after
/// start-up, the boot suite having just done the same work, unless `at_start`). Its `Ok`
/// text or error is logged as `supervisor.periodic`.
pub struct Periodic {
    pub name: &'static str,
    pub interval: Duration,
    /// Also run once as the loop starts (work the boot suite does not do).
    pub at_start: bool,
    pub task: Arc<Mutex<PeriodicTask>>,
}

/// The work of a [`Periodic`]: an `Ok` text or an error, logged either way.
pub type PeriodicTask = Box<dyn FnMut() -> Result<String, PeriodicError> + Send>;

/// Periodic work beside the fleet. The unblock belt runs here, independent of the boot
/// suite, so a blocker closed by hand while the fleet runs still promotes its dependents
/// (BOOT-SWEEPS.md, *Unblock belt*); its host-wide lock keeps one belt per tracker.
pub fn periodic_tasks(
    config: &Config,
    layout: &Layout,
    tracker: &Arc<dyn Tracker>,
) -> Vec<Periodic> {
    let mut stale = crate::claim::stale::StaleBelt::new(
        Arc::clone(tracker),
        layout,
        config.claims.stale_after_s,
    )
    .with_rescue_limit(config.rescue.max_file_bytes)
    .with_unmarked_grace(Duration::from_secs(config.claims.unmarked_grace_s));
    let shared = tracker.shared_across_checkouts();
    let mut tasks = vec![
        Periodic {
            name: "unblock-belt",
            interval: Duration::from_secs(config.timing.unblock_interval_s),
            at_start: false,
            task: Arc::new(Mutex::new(unless_paused(
                layout,
                leader_only(layout, {
                    let mut pass = crate::supervisor::unblock_belt::task(
                        Arc::clone(tracker),
                        layout.repo().display().to_string(),
                    );
                    Box::new(move || pass().map_err(PeriodicError::Belt))
                }),
            ))),
        },
        Periodic {
            name: "claims-belt",
            interval: crate::claim::stale::interval_with_grace(
                config.claims.stale_after_s,
                config.claims.unmarked_grace_s,
            ),
            at_start: false,
            task: Arc::new(Mutex::new(unless_paused(
                layout,
                Box::new(move || Ok(stale.pass()?)),
            ))),
        },
        Periodic {
            name: "approval-belt",
            interval: Duration::from_secs(config.timing.unblock_interval_s),
            at_start: true,
            task: Arc::new(Mutex::new(unless_paused(
                layout,
                leader_only(layout, {
                    let mut belt = crate::claim::approval::ApprovalBelt::new(Arc::clone(tracker));
                    Box::new(move || Ok(belt.pass()?))
                }),
            ))),
        },
    ];
    // The landing belt: the checkout's pull requests (on a cluster the fleet's, on the
    // leader), opened again after a refusal and followed until merged (`docs/SPEC.md`
    // §11.22); once at start, then on its interval.
    tasks.push(Periodic {
        name: "landing-belt",
        interval: Duration::from_secs(config.landing.watch_interval_s),
        at_start: true,
        task: Arc::new(Mutex::new(unless_paused(
            layout,
            leader_only(layout, {
                let mut pass = crate::landing::belt::task(Arc::clone(tracker), layout, config);
                Box::new(move || pass().map_err(PeriodicError::Landing))
            }),
        ))),
    });
    // Stale claims and held issues exist only where other checkouts claim too and
    // outsiders write: on a tracker only this checkout uses (`local`) those belts have
    // nothing to do, and their passes are not run at all.
    if !shared {
        tasks.retain(|t| t.name != "claims-belt" && t.name != "approval-belt");
    }
    // On a cluster the claims are etcd's: a vanished claim is found every tick, not after
    // `claims.stale_after_s` (`docs/SPEC.md` §11.23).
    if let Some(c) = crate::cluster::active() {
        tasks.retain(|t| t.name != "claims-belt");
        let mut belt =
            crate::supervisor::cluster_belt::ClusterBelt::new(c, Arc::clone(tracker), layout);
        tasks.push(Periodic {
            name: "cluster-belt",
            // An eighth of the lease (one cheap etcd range): a vanished claim is found
            // well within the lease's length, however long the tick.
            interval: Duration::from_millis(
                (config.timing.tick_s * 1000).min(c.lease_s * 125).max(250),
            ),
            at_start: true,
            // Not skipped while paused: it carries the pauses between the hosts, and calls
            // the tracker only when no rate limit holds.
            task: Arc::new(Mutex::new(Box::new(move || Ok(belt.pass()?)))),
        });
        if shared {
            tasks.push(steward_task(c, config, layout, tracker));
        }
    }
    tasks
}

/// The GitHub steward (`docs/SPEC.md` §11.23): on the leader, the ready queue read with
/// conditional requests and published to etcd. While a rate limit holds it does not
/// look, and says nothing: the published queue ages, and nobody may call GitHub anyway.
fn steward_task(
    c: &'static crate::cluster::Cluster,
    config: &Config,
    layout: &Layout,
    tracker: &Arc<dyn Tracker>,
) -> Periodic {
    let mut steward =
        crate::cluster::steward::Steward::new(Duration::from_secs(config.timing.tick_s));
    let interval = steward.every();
    let tracker = Arc::clone(tracker);
    let (lane, state) = (layout.supervisor_lane(), layout.state());
    let host = crate::claim::tracked::this_host(layout);
    Periodic {
        name: "steward",
        interval,
        at_start: true,
        task: Arc::new(Mutex::new(leader_only(
            layout,
            Box::new(move || {
                if crate::lanes::pause_file::active(&state).is_some() {
                    return Ok(String::new());
                }
                // Its keys go with the lease; without one nothing is put.
                let lease = crate::cluster::lease::read(&lane).map_or(0, |r| r.lease);
                if lease == 0 {
                    return Ok(String::new());
                }
                Ok(steward.pass(c, tracker.as_ref(), &host, lease)?)
            }),
        ))),
    }
}

/// A repository-wide belt that runs on one host: on a cluster the election's leader alone
/// (`docs/SPEC.md` §11.23), a follower's turn logging nothing; on one box, always.
fn leader_only(layout: &Layout, mut task: PeriodicTask) -> PeriodicTask {
    let lane = layout.supervisor_lane();
    Box::new(move || match crate::cluster::lease::leads(&lane) {
        true => task(),
        false => Ok(String::new()),
    })
}

/// A tracker belt that skips its run while the fleet is paused for a rate limit
/// (`crate::lanes::pause_file`); read on the blocking pool, where the task runs.
fn unless_paused(layout: &Layout, mut task: PeriodicTask) -> PeriodicTask {
    let state = layout.state();
    Box::new(move || match crate::lanes::pause_file::active(&state) {
        Some(p) => Ok(format!("skipped: fleet paused {}", p.describe())),
        None => task(),
    })
}

/// Housekeeping that needs no tracker: slot log folders past `log.slot_log_days` go, at
/// start-up and daily.
pub fn housekeeping_tasks(config: &Config, layout: &Layout) -> Vec<Periodic> {
    let (layout, days) = (layout.clone(), config.log.slot_log_days);
    vec![Periodic {
        name: "slot-logs",
        interval: crate::supervisor::slot_logs::INTERVAL,
        at_start: true,
        task: Arc::new(Mutex::new(Box::new(move || {
            Ok(crate::supervisor::slot_logs::expire(
                &layout,
                days,
                std::time::SystemTime::now(),
            )?)
        }))),
    }]
}

/// One run of a periodic task on the blocking pool, unless its previous run is still going
/// (a slow tracker never piles up runs). Its result comes back as a [`Event::Log`].
pub(super) fn start_periodic(
    p: &mut Periodic,
    running: &Arc<AtomicBool>,
    tx: &UnboundedSender<Event>,
) {
    if running.swap(true, Ordering::AcqRel) {
        return;
    }
    let task = Arc::clone(&p.task);
    let (name, running, tx) = (p.name, Arc::clone(running), tx.clone());
    tokio::task::spawn_blocking(move || {
        let result = match task.lock() {
            Ok(mut t) => t(),
            Err(_) => Err(PeriodicError::Poisoned),
        };
        running.store(false, Ordering::Release);
        let msg = match result {
            // A pass with nothing to say (the cluster belt's, every tick) logs nothing.
            Ok(t) if t.is_empty() => return,
            Ok(t) => format!("{name}: {t}"),
            Err(e) => format!("{name} failed: {e}"),
        };
        let _ = tx.send(Event::Log(Record::now(Kind::SupervisorPeriodic, msg)));
    });
}
