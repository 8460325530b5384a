//! Stale claims across checkouts (SPEC §11.5): the supervisor's `claims-belt`.
//!
//! A checkout that died (a host SIGKILLed with its supervisor and workers) leaves its
//! issues `running` with its claim marks on them, and nobody else's orphan cleanup has a
//! local record to restore them from. So every `claims.stale_after_s / 4` seconds (at
//! least 1, at most 600) the supervisor lists the `running` issues (one call) and, for an
//! issue it has seen `running` for `stale_after_s` and holds no live local claim of, reads
//! the thread (one call, then at most once per `stale_after_s` per issue) and judges it:
//!
//! - held by a worker of this checkout that no longer runs: taken over at once;
//! - held by another checkout: taken over once the claim mark is `stale_after_s` old and
//!   the holder's branch `afk/<worker>/<N>-*` on `origin` did not move since the last look;
//! - held by nobody: taken over once the last mark event is `stale_after_s` old;
//! - labelled `ready-for-human` too (a late claimant's label switch not taken back): its
//!   `running` removed, whatever the marks say.
//!
//! A takeover posts a takeover mark naming the claim it ends, re-reads the thread and puts
//! `ready-for-agent` back only when its own mark was the effective one, so two checkouts
//! taking over at once change the labels once. No call is made on a tracker that only this
//! checkout uses (`local`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::marks::{self, Event, Holder, Mark, Standing};
use super::tracked;
use crate::event_log::Kind;
use crate::git::Git;
use crate::layout::{Layout, WORKER_NAMESPACES};
use crate::pidfile::{Liveness, MissingStart, liveness};
use crate::tracker::{IssueState, Tracker, TrackerError, labels};

/// `host <host> presumed lost: its claim on #<N> (<worker>) went stale (no progress for
/// <S>s); #<N> is back in the queue`.
pub fn host_lost_text(n: u64, worker: &str, host: &str, stale_s: u64) -> String {
    format!(
        "host {host} presumed lost: its claim on #{n} ({worker}) went stale (no progress for {stale_s}s); #{n} is back in the queue"
    )
}

/// On a cluster (`docs/SPEC.md` §11.23): `host <host> presumed lost: its claim on #<N>
/// (<worker>) went stale (its <L>s lease ended); #<N> is back in the queue`.
pub fn host_lost_by_lease_text(n: u64, worker: &str, host: &str, lease_s: u64) -> String {
    format!(
        "host {host} presumed lost: its claim on #{n} ({worker}) went stale (its {lease_s}s lease ended); #{n} is back in the queue"
    )
}

/// What to do with one `running` issue whose thread was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaleAction {
    /// Leave it; look again after this long.
    Leave(Duration),
    /// End the claim named (or, `None`, the holderless `running`) with a takeover mark.
    TakeOver(Option<(Holder, String)>),
    /// An effective takeover whose label change did not land: make the label change.
    Relabel,
    /// A hand-off mark whose label change did not land: `ready-for-human` it is.
    FinishHandoff,
}

/// What to do about a thread's standing at `now` (epoch seconds). `own_live` says whether a
/// worker id of this checkout still runs. The branch check is the caller's.
pub fn stale_action(
    s: &Standing,
    host: &str,
    now: u64,
    stale_after: Duration,
    own_live: impl Fn(&str) -> bool,
) -> StaleAction {
    let remaining = |at: Option<u64>| {
        let age = Duration::from_secs(now.saturating_sub(at.unwrap_or(now)));
        stale_after.saturating_sub(age)
    };
    match &s.holder {
        Some(h) if h.holder.host == host => {
            if own_live(&h.holder.worker) {
                StaleAction::Leave(stale_after)
            } else {
                StaleAction::TakeOver(Some((h.holder.clone(), h.nonce.clone())))
            }
        }
        Some(h) => match remaining(h.at) {
            r if r.is_zero() => StaleAction::TakeOver(Some((h.holder.clone(), h.nonce.clone()))),
            r => StaleAction::Leave(r),
        },
        None => {
            let at = s.last.and_then(|(_, at)| at);
            match remaining(at) {
                _ if matches!(s.last, Some((Event::HandedOff, _))) => StaleAction::FinishHandoff,
                r if !r.is_zero() && s.last.is_some() => StaleAction::Leave(r),
                _ if matches!(s.last, Some((Event::TakenOver, _))) => StaleAction::Relabel,
                _ => StaleAction::TakeOver(None),
            }
        }
    }
}

/// The belt's memory between passes.
pub struct StaleBelt {
    tracker: Arc<dyn Tracker>,
    layout: Layout,
    git: Git,
    host: String,
    stale_after: Duration,
    /// How long a `running` issue with no claim mark at all waits before it is restored.
    unmarked_grace: Duration,
    first_seen: HashMap<u64, Instant>,
    next_look: HashMap<u64, Instant>,
    /// The holder branches' heads on origin at the last look, per issue.
    branches: HashMap<u64, BTreeMap<String, String>>,
    /// `rescue.max_file_bytes`, for the rescue of this checkout's dead worker's attempt.
    rescue_max_file_bytes: u64,
}

/// The interval of the belt for a stale age.
pub fn interval(stale_after_s: u64) -> Duration {
    Duration::from_secs((stale_after_s / 4).clamp(1, 600))
}

/// The interval of the belt for a stale age and the grace of an unmarked `running` issue:
/// a quarter of the shorter.
pub fn interval_with_grace(stale_after_s: u64, unmarked_grace_s: u64) -> Duration {
    interval(stale_after_s.min(unmarked_grace_s))
}

impl StaleBelt {
    pub fn new(tracker: Arc<dyn Tracker>, layout: &Layout, stale_after_s: u64) -> StaleBelt {
        StaleBelt {
            tracker,
            layout: layout.clone(),
            git: Git::new(layout.repo()),
            host: tracked::this_host(layout),
            stale_after: Duration::from_secs(stale_after_s),
            unmarked_grace: Duration::from_secs(stale_after_s),
            first_seen: HashMap::new(),
            next_look: HashMap::new(),
            branches: HashMap::new(),
            rescue_max_file_bytes: crate::rescue::DEFAULT_MAX_FILE_BYTES,
        }
    }

    /// The belt with the config's `rescue.max_file_bytes`.
    pub fn with_rescue_limit(mut self, max_file_bytes: u64) -> StaleBelt {
        self.rescue_max_file_bytes = max_file_bytes;
        self
    }

    /// Before a takeover of this checkout's own dead worker: its attempt's work rescued
    /// and pushed (the tracker is shared), so the takeover's next attempt resumes from it
    /// on any host. Another checkout's worktrees are not here to rescue.
    fn rescue_own(&self, n: u64, holder: &Holder) -> Option<crate::rescue::Rescued> {
        if holder.host != self.host {
            return None;
        }
        let keeper = crate::rescue::Keeper {
            git: self.git.clone(),
            max_file_bytes: self.rescue_max_file_bytes,
            push: true,
        };
        match keeper.rescue_newest(&self.layout, &holder.worker, n, "claims-belt takeover") {
            Ok(r) => r,
            Err(e) => {
                eprintln!("afk-supervisor: #{n}: {e}");
                None
            }
        }
    }

    /// A `running` issue that carries no claim mark at all (its label switch landed though
    /// the answer failed, and its worker gave up) is restored once seen for `grace`, not
    /// after the stale age (at most the stale age).
    pub fn with_unmarked_grace(mut self, grace: Duration) -> StaleBelt {
        self.unmarked_grace = grace.min(self.stale_after);
        self
    }

    /// One pass; the text is logged by the supervisor. Only the listing of `running`
    /// issues stops it; a failure on one issue is counted and left for the next pass.
    pub fn pass(&mut self) -> Result<String, TrackerError> {
        if !self.tracker.shared_across_checkouts() {
            return Ok("tracker not shared across checkouts: nothing to do".into());
        }
        let running = self.tracker.list_open_with_label(labels::RUNNING, 200)?;
        let now = Instant::now();
        let numbers: Vec<u64> = running.iter().map(|i| i.number).collect();
        self.first_seen.retain(|n, _| numbers.contains(n));
        self.next_look.retain(|n, _| numbers.contains(n));
        self.branches.retain(|n, _| numbers.contains(n));
        let (mut looked, mut taken, mut errors) = (0, 0, 0);
        let mut heads: Option<crate::git::GitResult<BTreeMap<String, String>>> = None;
        for n in numbers {
            if self.local_claim(n) == Some(true) {
                continue;
            }
            let first = *self.first_seen.entry(n).or_insert(now);
            let seen = now.duration_since(first);
            if seen < self.unmarked_grace || self.next_look.get(&n).is_some_and(|t| *t > now) {
                continue;
            }
            looked += 1;
            let thread = match self.tracker.thread(n) {
                Ok(t) => t,
                Err(_) => {
                    errors += 1;
                    continue;
                }
            };
            if thread.state != IssueState::Open || !thread.has_label(labels::RUNNING) {
                continue;
            }
            if thread.has_label(labels::READY_FOR_HUMAN) {
                // `running` beside `ready-for-human`: a late claimant's label switch whose
                // take-back failed. No worker works an issue a person has; never requeued.
                match tracked::edit_labels_settled(
                    self.tracker.as_ref(),
                    n,
                    &[],
                    &[labels::RUNNING],
                ) {
                    Ok(()) => taken += 1,
                    Err(_) => errors += 1,
                }
                continue;
            }
            let standing = marks::standing(&thread.comments);
            let unmarked = standing.holder.is_none() && standing.last.is_none();
            if !unmarked && seen < self.stale_after {
                // Marked: judged only once seen `running` for the stale age.
                self.next_look.insert(n, first + self.stale_after);
                continue;
            }
            let epoch = crate::timeutil::now_epoch();
            let layout = &self.layout;
            let action = stale_action(&standing, &self.host, epoch, self.stale_after, |w| {
                worker_live(layout, w)
            });
            let action = match action {
                StaleAction::TakeOver(Some((h, nonce))) if h.host != self.host => {
                    let heads = heads.get_or_insert_with(|| self.git.remote_afk_heads());
                    match heads {
                        // No look at the branch, no takeover.
                        Err(_) => StaleAction::Leave(self.stale_after),
                        Ok(all) => {
                            let prefix = format!("afk/{}/{n}-", h.worker);
                            let mine: BTreeMap<String, String> = all
                                .iter()
                                .filter(|(b, _)| b.starts_with(&prefix))
                                .map(|(b, s)| (b.clone(), s.clone()))
                                .collect();
                            let before = self.branches.insert(n, mine.clone());
                            let moved = before.map_or(!mine.is_empty(), |b| b != mine);
                            if moved {
                                StaleAction::Leave(self.stale_after)
                            } else {
                                StaleAction::TakeOver(Some((h, nonce)))
                            }
                        }
                    }
                }
                v => v,
            };
            match action {
                StaleAction::Leave(d) => {
                    self.next_look
                        .insert(n, now + d.max(Duration::from_secs(1)));
                }
                StaleAction::FinishHandoff => match tracked::edit_labels_settled(
                    self.tracker.as_ref(),
                    n,
                    &[labels::READY_FOR_HUMAN],
                    &[labels::RUNNING],
                ) {
                    Ok(()) => taken += 1,
                    Err(_) => errors += 1,
                },
                StaleAction::Relabel => match self.relabel(n) {
                    Ok(()) => taken += 1,
                    Err(()) => errors += 1,
                },
                StaleAction::TakeOver(target) => match self.rescue_and_take_over(n, target) {
                    Ok(true) => taken += 1,
                    Ok(false) => {}
                    Err(()) => errors += 1,
                },
            }
        }
        Ok(format!(
            "running={} looked={looked} taken-over={taken} errors={errors}",
            running.len()
        ))
    }

    /// Whether this checkout holds a claim dir of `n`: `Some(true)` live (or not yet
    /// judgeable), `Some(false)` dead, `None` none.
    fn local_claim(&self, n: u64) -> Option<bool> {
        let dir = self.layout.claims().join(n.to_string());
        std::fs::symlink_metadata(&dir).ok()?;
        Some(!matches!(
            super::liveness(&self.layout, n),
            Liveness::Dead { .. }
        ))
    }

    /// The takeover mark, the re-read, and the label change when our mark was effective.
    fn take_over(&self, n: u64, target: Option<(Holder, String)>) -> Result<bool, ()> {
        let nonce = marks::new_nonce();
        let mark = Mark::Takeover {
            target,
            host: self.host.clone(),
            nonce: nonce.clone(),
        };
        tracked::post(self.tracker.as_ref(), n, &mark.text()).map_err(|_| ())?;
        let thread = tracked::read_thread(self.tracker.as_ref(), n).map_err(|_| ())?;
        if !marks::standing(&thread.comments).took_over(&nonce)
            || thread.state != IssueState::Open
            || !thread.has_label(labels::RUNNING)
        {
            return Ok(false);
        }
        self.relabel(n).map(|()| true)
    }

    /// [`StaleBelt::take_over`], this checkout's own dead worker's work rescued first (an
    /// `attempt.rescued` event) and the rescue recorded in the ledger once the takeover is
    /// effective.
    fn rescue_and_take_over(&self, n: u64, target: Option<(Holder, String)>) -> Result<bool, ()> {
        let rescued = target.as_ref().and_then(|(h, _)| self.rescue_own(n, h));
        // The work is on its ref whatever the takeover does: its event goes now (a later
        // pass's rescue of the same tip finds it `already` and logs nothing twice).
        if let Some(r) = &rescued {
            r.log(&self.layout, None, None);
        }
        let took = self.take_over(n, target.clone())?;
        if took && let Some(r) = &rescued {
            self.record_rescue(n, target.as_ref(), r);
        }
        if took && let Some((h, _)) = target.as_ref().filter(|(h, _)| h.host != self.host) {
            // Another checkout's claim went stale with its branch standing still: that
            // host (or its fleet) is presumed lost, which a person wants to know.
            let ev = crate::event_log::Record::now(
                Kind::ClaimsHostLost,
                host_lost_text(n, &h.worker, &h.host, self.stale_after.as_secs()),
            )
            .issue(n);
            if let Err(e) = crate::event_log::append_event(&self.layout.event_log(), &ev) {
                eprintln!("afk-supervisor: warning: {e}");
            }
        }
        Ok(took)
    }

    /// The ledger's record of the taken-over attempt of this checkout's dead worker, with
    /// its rescue, so the next attempt resumes from it.
    fn record_rescue(&self, n: u64, target: Option<&(Holder, String)>, r: &crate::rescue::Rescued) {
        let worker = target.map(|(h, _)| h.worker.as_str());
        let record = crate::ledger::Record::now(worker, None, crate::ledger::Outcome::WorkerDied)
            .rescued_to(&r.reference, &r.sha);
        if let Err(e) = crate::ledger::append(&self.layout, n, &record) {
            eprintln!("afk-supervisor: #{n}: attempt ledger: {e}");
        }
        eprintln!("afk-supervisor: {}", r.message());
    }

    fn relabel(&self, n: u64) -> Result<(), ()> {
        tracked::edit_labels_settled(
            self.tracker.as_ref(),
            n,
            &[labels::READY_FOR_AGENT],
            &[labels::RUNNING],
        )
        .map_err(|_| ())?;
        // A dead claim of ours would keep this checkout's workers off the issue.
        if self.local_claim(n) == Some(false) {
            let _ = super::release::remove(&self.layout, n);
        }
        Ok(())
    }
}

/// Whether a worker id of this checkout still runs: its `worker.pid` in any namespace.
fn worker_live(layout: &Layout, worker: &str) -> bool {
    if worker.starts_with('.') || !marks::valid_host(worker) {
        return false;
    }
    WORKER_NAMESPACES.iter().any(|ns| {
        let pid = layout.worker_namespace(ns).join(worker).join("worker.pid");
        !matches!(
            liveness(&pid, MissingStart::ExistenceDecides),
            Liveness::Dead { .. }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::marks::{Comment, standing};

    const HOUR: Duration = Duration::from_secs(3600);

    fn thread(marks: &[(Mark, u64)]) -> Standing {
        let c: Vec<Comment> = marks
            .iter()
            .map(|(m, at)| Comment {
                body: m.text(),
                at: Some(*at),
            })
            .collect();
        standing(&c)
    }

    fn claim(host: &str) -> Mark {
        Mark::Claim {
            holder: Holder::new("w1", host),
            nonce: "aaaaaaaaaaaaaaaa".into(),
        }
    }

    #[test]
    fn own_dead_workers_are_taken_over_at_once_live_ones_never() {
        let s = thread(&[(claim("me"), 1000)]);
        let target = Some((Holder::new("w1", "me"), "aaaaaaaaaaaaaaaa".to_string()));
        assert_eq!(
            stale_action(&s, "me", 1001, HOUR, |_| false),
            StaleAction::TakeOver(target)
        );
        assert_eq!(
            stale_action(&s, "me", 1_000_000, HOUR, |_| true),
            StaleAction::Leave(HOUR)
        );
    }

    #[test]
    fn another_hosts_claim_waits_for_the_stale_age() {
        let s = thread(&[(claim("other"), 1000)]);
        assert_eq!(
            stale_action(&s, "me", 1000 + 600, HOUR, |_| false),
            StaleAction::Leave(Duration::from_secs(3000))
        );
        assert!(matches!(
            stale_action(&s, "me", 1000 + 3600, HOUR, |_| false),
            StaleAction::TakeOver(Some(_))
        ));
    }

    #[test]
    fn holderless_running_issues_wait_then_relabel_after_a_takeover() {
        assert_eq!(
            stale_action(&Standing::default(), "me", 5, HOUR, |_| false),
            StaleAction::TakeOver(None)
        );
        let t = Mark::Takeover {
            target: None,
            host: "x".into(),
            nonce: "bbbbbbbbbbbbbbbb".into(),
        };
        let s = thread(&[(t, 1000)]);
        assert_eq!(
            stale_action(&s, "me", 1010, HOUR, |_| false),
            StaleAction::Leave(Duration::from_secs(3590))
        );
        assert_eq!(
            stale_action(&s, "me", 9000, HOUR, |_| false),
            StaleAction::Relabel
        );
        let s = thread(&[
            (claim("other"), 1000),
            (
                Mark::Handoff {
                    holder: Holder::new("w1", "other"),
                    nonce: "aaaaaaaaaaaaaaaa".into(),
                },
                1001,
            ),
        ]);
        assert_eq!(
            stale_action(&s, "me", 1002, HOUR, |_| false),
            StaleAction::FinishHandoff
        );
    }

    #[test]
    fn intervals_are_bounded() {
        assert_eq!(interval(3), Duration::from_secs(1));
        assert_eq!(interval(7200), Duration::from_secs(600));
        assert_eq!(interval(40), Duration::from_secs(10));
    }
}
