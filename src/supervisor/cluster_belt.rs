//! `[cluster]`: the claims belt of a fleet whose claims live in etcd (`docs/SPEC.md`
//! §11.23), in place of the marks' stale-claims belt. Every pass (a tick, at most an eighth of a
//! lease) reads the fleet's claim keys, one etcd range, no tracker call:
//! - a claim key seen at the last pass and gone now, with no done key (no hand-off), went
//!   with its host's lease: the host died, or was cut off or stopped past its lease (its
//!   agents stopped at the deadline). The issue goes back to `ready-for-agent` with the
//!   §7 restore comment, by the one host that wins the restore guard, and only while it is
//!   still `running`. Its worker's work is rescued where it ran (the existing rescue: the
//!   host's release, or its boot's orphan sweep when it comes back).
//! - the leader also lists the `running` issues (one tracker call) at its first pass as the
//!   leader, after etcd was away, and every ten leases: those without a claim key are such
//!   issues too (a fleet started after every host died, claims gone while etcd was away);
//! - a claim key of this host that no local claim names (a worker that could not end it in
//!   etcd) at two passes in a row is dropped;
//! - the landing records this checkout kept in its files while etcd did not answer go to
//!   etcd (`landing::move_to_etcd`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::event_log::Kind;
use crate::layout::Layout;
use crate::sweeps::transition;
use crate::tracker::{IssueState, Tracker, labels};

/// How often, in leases, the leader lists the `running` issues besides (10: every two
/// minutes with the default lease, one tracker call).
const RECONCILE_LEASES: u64 = 10;

/// Why a pass of the cluster belt stopped: etcd or the tracker did not answer. The next
/// pass tries again; only the first failure of a run of them is logged.
#[derive(Debug, thiserror::Error)]
pub enum ClusterBeltError {
    #[error(transparent)]
    Etcd(#[from] crate::cluster::etcd::EtcdError),
    #[error(transparent)]
    Tracker(#[from] crate::tracker::TrackerError),
}

pub struct ClusterBelt {
    cluster: &'static Cluster,
    tracker: Arc<dyn Tracker>,
    layout: Layout,
    host: String,
    /// The claim keys at the last pass: issue to (revision, holder).
    known: Option<BTreeMap<u64, (i64, String)>>,
    /// This host's claim keys no local claim named at the last pass.
    strays: BTreeSet<(u64, i64)>,
    /// Claims that vanished, not yet looked at by a leader: issue to (holder, when seen).
    pending: BTreeMap<u64, (String, Instant)>,
    /// When this host, as the leader, last listed the `running` issues: at its first pass
    /// as the leader, after every pass that failed (claims may have come and gone while
    /// etcd was away), and every [`RECONCILE_LEASES`] leases (a claim taken and gone
    /// between two passes).
    looked_at_running: Option<Instant>,
    /// Whether the last pass failed (a failure is said once, not once a tick).
    failing: bool,
    /// What moving this checkout's landing records to etcd could not do, already said.
    said_records: BTreeSet<String>,
}

impl ClusterBelt {
    pub fn new(cluster: &'static Cluster, tracker: Arc<dyn Tracker>, layout: &Layout) -> Self {
        ClusterBelt {
            cluster,
            tracker,
            layout: layout.clone(),
            host: crate::claim::tracked::this_host(layout),
            known: None,
            strays: BTreeSet::new(),
            pending: BTreeMap::new(),
            looked_at_running: None,
            failing: false,
            said_records: BTreeSet::new(),
        }
    }

    /// One pass; its text is empty when nothing happened (nothing is logged then).
    pub fn pass(&mut self) -> Result<String, ClusterBeltError> {
        match self.try_pass() {
            Ok(t) => {
                let back = std::mem::replace(&mut self.failing, false);
                Ok(match (back, t.is_empty()) {
                    (true, true) => "etcd answers again".into(),
                    (true, false) => format!("etcd answers again; {t}"),
                    (false, _) => t,
                })
            }
            Err(_) if self.failing => Ok(String::new()),
            Err(e) => {
                self.failing = true;
                self.looked_at_running = None;
                Err(e)
            }
        }
    }

    fn try_pass(&mut self) -> Result<String, ClusterBeltError> {
        let c = self.cluster;
        // The holds first: a pause met on any host holds every host within a pass.
        let mut said = c.sync_pauses(&self.layout.state())?;
        // Landing records this checkout kept while etcd did not answer (or from before
        // `[cluster]`): the fleet's, so etcd's.
        let moved = crate::landing::move_to_etcd(&self.layout, c);
        for n in &moved.put {
            said.push(format!(
                "#{n}: landing record kept in this checkout moved to etcd"
            ));
        }
        for n in &moved.superseded {
            said.push(format!(
                "#{n}: landing record kept in this checkout dropped: etcd holds a later one"
            ));
        }
        for e in moved.errors {
            let e = e.to_string();
            // Said once each, not at every pass.
            if self.said_records.insert(e.clone()) {
                said.push(format!("landing records: {e}"));
            }
        }
        // While the rate limit holds, the tracker is not called: the claims are looked at
        // once it is over (what vanished meanwhile is still missing then).
        if crate::lanes::pause_file::active(&self.layout.state()).is_some() {
            return Ok(said.join("; "));
        }
        let claims = c.claims()?;
        let now: BTreeMap<u64, (i64, String)> = claims
            .iter()
            .map(|k| (k.issue, (k.revision, k.holder.clone())))
            .collect();
        let mut strays = BTreeSet::new();
        for k in claims.iter().filter(|k| k.host() == self.host) {
            if self.layout.claims().join(k.issue.to_string()).exists() {
                continue;
            }
            let key = (k.issue, k.revision);
            if self.strays.contains(&key) {
                if c.drop_claim(k.issue, k.revision).unwrap_or(false) {
                    said.push(format!(
                        "#{}: claim key of {} dropped (no local claim names it)",
                        k.issue, k.holder
                    ));
                }
            } else {
                strays.insert(key);
            }
        }
        self.strays = strays;
        // What vanished since the last pass waits here for the leader's turn (a follower
        // that becomes the leader, the old one having died with these very claims, still
        // gives them back), for at most a few leases.
        let stale_after = Duration::from_secs(self.cluster.lease_s * 4);
        if let Some(before) = &self.known {
            for (n, (_, h)) in before.iter().filter(|(n, _)| !now.contains_key(n)) {
                self.pending
                    .entry(*n)
                    .or_insert((h.clone(), Instant::now()));
            }
        }
        self.pending
            .retain(|n, (_, at)| !now.contains_key(n) && at.elapsed() < stale_after);
        self.known = Some(now.clone());
        if !crate::cluster::lease::leads(&self.layout.supervisor_lane()) {
            // A follower that becomes the leader looks at the `running` issues first.
            self.looked_at_running = None;
            return Ok(said.join("; "));
        }
        let mut candidates: Vec<(u64, String)> = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|(n, (h, _))| (n, h))
            .collect();
        let reconcile = Duration::from_secs(self.cluster.lease_s * RECONCILE_LEASES);
        if self
            .looked_at_running
            .is_none_or(|t| t.elapsed() >= reconcile)
        {
            // The `running` issues nobody claims: a fleet started after every host died,
            // claims that went while etcd was away, or between two passes.
            let running = self.tracker.list_open_with_label(labels::RUNNING, 200)?;
            self.looked_at_running = Some(Instant::now());
            candidates.extend(
                running
                    .into_iter()
                    .filter(|i| !now.contains_key(&i.number))
                    .filter(|i| !candidates.iter().any(|(n, _)| *n == i.number))
                    .map(|i| (i.number, "nobody".to_string()))
                    .collect::<Vec<_>>(),
            );
        }
        let done: BTreeSet<u64> = if candidates.is_empty() {
            BTreeSet::new()
        } else {
            c.done()?.into_iter().collect()
        };
        for (n, holder) in candidates {
            // Handed off (the labels settle on their own), or a worker of this host holds
            // it locally (its own end or this host's release gives it back).
            if done.contains(&n) || self.layout.claims().join(n.to_string()).exists() {
                continue;
            }
            if !c.restore_guard(n)? {
                continue;
            }
            let v = match self.tracker.view(n) {
                Ok(v) => v,
                Err(e) => {
                    said.push(format!(
                        "#{n}: claim of {holder} vanished; view failed: {e}"
                    ));
                    continue;
                }
            };
            if v.state != IssueState::Open
                || !v.has_label(labels::RUNNING)
                || v.has_label(labels::READY_FOR_HUMAN)
            {
                continue;
            }
            match transition::restore(self.tracker.as_ref(), &self.layout, n, None, &mut 0) {
                Ok(transition::Restored::Done) => {
                    said.push(format!(
                        "#{n}: claim of {holder} vanished with its host's lease: running -> ready-for-agent"
                    ));
                    // Another host's claim went with its lease: that host is presumed
                    // lost, which a person wants to know (the notifier's `host-lost`).
                    if let Some((worker, host)) = holder.split_once('@')
                        && host != self.host
                    {
                        let ev = crate::event_log::Record::now(
                            Kind::ClaimsHostLost,
                            crate::claim::stale::host_lost_by_lease_text(
                                n,
                                worker,
                                host,
                                self.cluster.lease_s,
                            ),
                        )
                        .issue(n);
                        if let Err(e) =
                            crate::event_log::append_event(&self.layout.event_log(), &ev)
                        {
                            eprintln!("afk-supervisor: warning: {e}");
                        }
                    }
                }
                Ok(transition::Restored::HeldElsewhere(h)) => {
                    said.push(format!("#{n}: claimed again by {h} meanwhile; left alone"))
                }
                Err(e) => said.push(format!("#{n}: claim of {holder} vanished; restore: {e}")),
            }
        }
        Ok(said.join("; "))
    }
}
