//! Taking the next issue: the queue's head, the local claim, the confirming view, the
//! `running` label and, on a shared tracker, the claim marks (`docs/SPEC.md` §11.5); and
//! the two acts that give a claimed issue up again (its ending comment and labels).

use super::error::ClusterLost;
use super::fence::FenceGuard;
use super::{Worker, WorkerError};
use crate::claim::Claim;
use crate::claim::tracked::{self, Verdict, WonClaim};
use crate::event_log::Kind;
use crate::ledger;
use crate::tracker::provenance::{Hold, Vetting};
use crate::tracker::{LabeledIssue, labels};

/// A claim the worker holds: the local lock and, on a shared tracker, the won claim mark
/// whose release mark ends every comment that gives the issue up.
pub(super) struct TakenClaim {
    pub local: Claim,
    pub marks: Option<WonClaim>,
    /// `[cluster]`: the claim in etcd, its fencing token checked before each write.
    pub fence: Option<FenceGuard>,
}

impl TakenClaim {
    /// The issue goes to a person: a claim in etcd then ends leaving its done key.
    pub fn mark_to_person(&mut self) {
        if let Some(f) = &mut self.fence {
            f.to_human = true;
        }
    }

    /// `body`, ending in the hand-off (`to_human`) or release mark when the claim was won
    /// by marks.
    fn ending(&self, body: &str, to_human: bool) -> String {
        match &self.marks {
            Some(m) => m.ending(body, to_human),
            None => body.to_string(),
        }
    }
}

impl Worker<'_> {
    /// The next issue, claimed; `None` when nothing ready could be taken, or when a stop
    /// came while a claim waited on a hand-off (the caller checks its stop flag).
    pub(super) fn claim_next(&self) -> Result<Option<(LabeledIssue, TakenClaim)>, WorkerError> {
        // While the fleet waits out a rate limit it takes nothing (and costs no call): the
        // exit code is the rate limit's, which the supervisor never counts as a death.
        if let Some(p) = crate::lanes::pause_file::active(&self.layout.state()) {
            return Err(WorkerError::RateLimited(format!(
                "fleet paused {}: not claiming",
                p.describe()
            )));
        }
        // An operator pause (`afk-supervisor pause`) takes nothing new either.
        if let Some(p) = crate::lanes::pause_file::operator_active(&self.layout.state()) {
            return Err(WorkerError::RateLimited(format!(
                "fleet paused by the operator {}: not claiming",
                p.describe()
            )));
        }
        // On a cluster, nothing is claimed without a live lease of the host (etcd down, or
        // the supervisor not renewing it): the claim would not outlive the lease.
        let cluster = crate::cluster::active();
        let lease = match cluster {
            Some(_) => match crate::cluster::lease::read(&self.layout.supervisor_lane()) {
                Some(r) if r.live() => Some(r),
                r => {
                    return Err(ClusterLost::NoLease {
                        why: r.map_or("no lease file".to_string(), |r| r.why),
                    }
                    .into());
                }
            },
            None => None,
        };
        let mut queue = self
            .tracker
            .list_open_with_label_oldest_first(labels::READY_FOR_AGENT, 200)
            .map_err(|e| WorkerError::from(&e))?;
        queue.retain(|i| crate::tracker::is_claimable(&i.labels));
        // Fewest failed attempts first, then lowest number: an issue that just failed goes
        // behind the work nobody has tried, so one failing issue neither holds the queue nor
        // is retried by every worker in turn before any other issue shows whether the agent
        // fails everywhere (the excuse that keeps a broken agent from quarantining issues).
        queue.sort_by_cached_key(|i| {
            let failed =
                ledger::read(self.layout, i.number).map_or(0, |r| ledger::failed_lately(&r));
            (failed, i.number)
        });
        for mut issue in queue {
            let claim = Claim::try_take(self.layout, issue.number)
                .map_err(|e| WorkerError::file(self.layout.claims(), "cannot claim: ", e))?;
            let Some(claim) = claim else { continue };
            // On a cluster the claim is one transaction in etcd, before the confirming view
            // (a race lost to another host costs no tracker call) and the label switch (a
            // `running` issue without a claim key is then always an orphan). A claim the
            // view does not confirm ends as its guard is dropped.
            let fence = match (cluster, &lease) {
                (Some(c), Some(l)) => {
                    let holder = format!("{}@{}", self.wenv.worker_id, l.host);
                    match c.claim(issue.number, &holder, l.lease) {
                        Ok(Some(fence)) => Some(FenceGuard {
                            cluster: c,
                            fence,
                            lane: self.layout.supervisor_lane(),
                            to_human: false,
                        }),
                        Ok(None) => {
                            let _ = claim.release();
                            continue;
                        }
                        Err(source) => {
                            let _ = claim.release();
                            return Err(ClusterLost::Claiming {
                                issue: issue.number,
                                source,
                            }
                            .into());
                        }
                    }
                }
                _ => None,
            };
            // The listing may be stale: confirm under the claim before taking it.
            let current = self.tracker.view(issue.number);
            let ready = current.as_ref().is_ok_and(|v| {
                v.state == crate::tracker::IssueState::Open
                    && v.has_label(labels::READY_FOR_AGENT)
                    && !v.has_label(labels::RUNNING)
            });
            if !ready {
                let _ = claim.release();
                if let Err(e) = current {
                    return Err(WorkerError::from(&e));
                }
                continue;
            }
            // Whose words the text is, judged before anything else happens (SPEC §11.20):
            // the agent gets exactly the vetted text, never the listing's.
            match self.tracker.vet(issue.number) {
                Ok(Vetting::NoOutsiders) => {}
                Ok(Vetting::Trusted { title, body }) => {
                    issue.title = Some(title);
                    issue.body = body;
                }
                Ok(Vetting::Held {
                    hold,
                    newest_comment,
                }) => {
                    let held = self.hold_for_approval(issue.number, &hold, newest_comment);
                    let _ = claim.release();
                    held?;
                    continue;
                }
                Err(e) => {
                    let _ = claim.release();
                    return Err(WorkerError::from(&e));
                }
            }
            // The switch may land though its answer fails: retried, then settled by what
            // the tracker shows, so a landed switch is never left `running` unworked.
            if let Err(e) = tracked::edit_labels_settled(
                self.tracker,
                issue.number,
                &[labels::RUNNING],
                &[labels::READY_FOR_AGENT],
            ) {
                let _ = claim.release();
                return Err(WorkerError::from(&e));
            }
            let marks = match self.claim_on_tracker(issue.number) {
                Ok(Some(Verdict::Lost { holder })) => {
                    let by = holder.map_or("a hand-off".to_string(), |h| h.to_string());
                    say!(
                        "worker {}: yielded #{} to {by}",
                        self.wenv.worker_id,
                        issue.number
                    );
                    let _ = claim.release();
                    continue;
                }
                Ok(Some(Verdict::Stopped)) => {
                    say!(
                        "worker {}: stopped while claiming #{}; gave it back",
                        self.wenv.worker_id,
                        issue.number
                    );
                    let _ = claim.release();
                    return Ok(None);
                }
                Ok(Some(Verdict::Won(won))) => Some(won),
                Ok(None) => None,
                // The local claim stays: the supervisor's release (or orphan cleanup)
                // gives the issue back from it once this worker is gone, marks checked.
                Err(e) => return Err(WorkerError::from(&e)),
            };
            return Ok(Some((
                issue,
                TakenClaim {
                    local: claim,
                    marks,
                    fence,
                },
            )));
        }
        Ok(None)
    }

    /// Holds issue `n` for a person: one comment saying why (not repeated when it is the
    /// newest already), `afk:needs-approval`, and one `issue.held` event.
    fn hold_for_approval(
        &self,
        n: u64,
        hold: &Hold,
        newest_comment: Option<String>,
    ) -> Result<(), WorkerError> {
        let body = hold.comment();
        if newest_comment.as_deref() != Some(body.as_str()) {
            self.tracker
                .comment(n, &body)
                .map_err(|e| WorkerError::from(&e))?;
        }
        self.tracker
            .edit_labels(n, &[labels::NEEDS_APPROVAL], &[])
            .map_err(|e| WorkerError::from(&e))?;
        let msg = format!("#{n} held for a person: {}", hold.reason());
        say!("worker {}: {msg}", self.wenv.worker_id);
        let mut ev = crate::event_log::Record::now(Kind::IssueHeld, msg).issue(n);
        ev.slot = self.wenv.slot.map(|s| s as u64);
        ev.pid = Some(i64::from(std::process::id()));
        if let Err(e) = crate::event_log::append_event(&self.layout.event_log(), &ev) {
            eprintln!("afk-supervisor: warning: {e}");
        }
        Ok(())
    }

    /// The claim decided on a tracker several checkouts share (SPEC §11.5); `None` where
    /// this checkout's local claim is all there is (the `local` store).
    fn claim_on_tracker(&self, n: u64) -> Result<Option<Verdict>, tracked::ClaimError> {
        // On a cluster, etcd decided the claim: no marks.
        if !self.tracker.shared_across_checkouts() || crate::cluster::active().is_some() {
            return Ok(None);
        }
        let host = tracked::this_host(self.layout);
        let stopped = || self.stop.signal().is_some();
        let settle = tracked::Settle {
            within: tracked::HANDOFF_SETTLE,
            stopped: &stopped,
        };
        tracked::claim(self.tracker, n, &self.wenv.worker_id, &host, &settle).map(Some)
    }

    /// Posts a comment that gives the issue up: with its release mark, retried (the mark's
    /// nonce makes a duplicate harmless); the local store gets it once.
    pub(super) fn post_ending(
        &self,
        n: u64,
        claim: &TakenClaim,
        body: &str,
        to_human: bool,
    ) -> bool {
        if let Err(e) = self.fenced(claim) {
            eprintln!("worker {}: #{n}: not commenting: {e}", self.wenv.worker_id);
            return false;
        }
        let body = claim.ending(body, to_human);
        let post = || match &claim.marks {
            Some(_) => tracked::post(self.tracker, n, &body),
            None => self.tracker.comment(n, &body),
        };
        if to_human {
            // The person's only word of the work: worth waiting out a rate limit for.
            self.past_rate_limits(claim, &format!("#{n}: the hand-off's comment"), post)
                .is_ok()
        } else {
            post().is_ok()
        }
    }

    /// The label change that gives the issue up; retried on a shared tracker (a repeated
    /// edit changes nothing), where a failure would otherwise wait for the claims belt.
    pub(super) fn hand_labels(
        &self,
        n: u64,
        claim: &mut TakenClaim,
        add: &str,
    ) -> Result<(), WorkerError> {
        self.hand_labels_all(n, claim, &[add])
    }

    /// `Ok` unless the claim's fencing token no longer holds (`[cluster]`): checked before
    /// every write that acts on the claim, so a host that lost its lease writes nothing.
    pub(super) fn fenced(&self, claim: &TakenClaim) -> Result<(), WorkerError> {
        match &claim.fence {
            Some(f) => Ok(f.holds()?),
            None => Ok(()),
        }
    }
}
