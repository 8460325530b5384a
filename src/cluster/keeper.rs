//! The host's lease, kept alive by the supervisor: granted at start, renewed every third of
//! its TTL, the lease file rewritten after every renewal etcd answered. When etcd does not
//! answer, the keeper goes on trying every quarter second; the workers stop their agents by
//! themselves at the file's deadline (the keeper need not be running for that: a stopped
//! supervisor stops renewing, and its workers still stop in time). When the lease is gone
//! (expired while etcd was away, or the supervisor was stopped past it) a new one is
//! granted as soon as etcd answers. Each change is one note, not one per try.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::Cluster;
use super::lease::{self, LeaseRecord, boot_ms};

/// When a host's running agents stop, as an outage is first said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentsStop {
    /// No lease was held: no agent runs under one.
    NoLease,
    /// At the lease's deadline, this many milliseconds from now, unless etcd answers.
    In(u64),
    /// The deadline passed while the renewal waited on etcd: the workers stopped them.
    Passed,
}

/// What the keeper has to say, once per change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// A lease was granted (at start, or after one was lost).
    Granted { lease: i64, ttl_s: u64 },
    /// etcd stopped answering; the agents stop at the deadline unless it answers before.
    Unavailable { why: String, agents: AgentsStop },
    /// etcd answers again and the lease held.
    Back { after_ms: u64 },
    /// The lease is gone (its deadline passed, or etcd says so): no claims until a new one.
    Lost { why: String },
    /// The lease file could not be written.
    FileError(String),
    /// This host won the fleet's election (or lost it with its lease).
    Leader(bool),
}

/// Keeps the host's lease until `stop` is set, then revokes it (its claims end at once,
/// the workers having given their issues back by then). `report` hears each [`Note`].
pub fn run(
    cluster: &Cluster,
    lane: PathBuf,
    host: String,
    stop: Arc<AtomicBool>,
    mut report: impl FnMut(Note),
    mut status: impl FnMut(bool) -> Option<String>,
) {
    let ttl_ms = cluster.lease_s * 1000;
    let renew_every = ttl_ms / 3;
    let retry_ms = 250;
    let mut held: Option<LeaseRecord> = None;
    // Since when renewals fail, and whether that was said.
    let mut failing_since: Option<u64> = None;
    let mut next_try = 0u64;
    let mut no_lease_said = false;
    // A lease given up while etcd did not answer: etcd renews every lease's TTL when it
    // comes back (a new leader does), so its claims would linger a whole lease more; it is
    // revoked as soon as etcd answers, and its issues are given back at once.
    let mut given_up: Option<i64> = None;
    let write = |rec: &LeaseRecord, report: &mut dyn FnMut(Note)| {
        if let Err(e) = lease::write(&lane, rec) {
            report(Note::FileError(format!(
                "{}: {e}",
                lease::path(&lane).display()
            )));
        }
    };
    let none = |why: &str| LeaseRecord {
        lease: 0,
        ttl_ms,
        renewed_boot_ms: 0,
        host: host.clone(),
        why: why.to_string(),
        leader: false,
    };
    while !stop.load(Ordering::SeqCst) {
        let now = boot_ms();
        if now < next_try {
            std::thread::sleep(Duration::from_millis((next_try - now).min(100)));
            continue;
        }
        match &held {
            None => {
                let sent = boot_ms();
                match cluster.etcd.grant(cluster.lease_s) {
                    Ok(id) => {
                        if let Some(old) = given_up.take()
                            && cluster.etcd.revoke(old).is_err()
                        {
                            given_up = Some(old);
                        }
                        let leader = cluster.campaign(&host, id).unwrap_or(false);
                        if leader {
                            report(Note::Leader(true));
                        }
                        let rec = LeaseRecord {
                            lease: id,
                            ttl_ms,
                            renewed_boot_ms: sent,
                            host: host.clone(),
                            why: String::new(),
                            leader,
                        };
                        write(&rec, &mut report);
                        publish(cluster, &host, &rec, &mut status);
                        held = Some(rec);
                        failing_since = None;
                        no_lease_said = false;
                        report(Note::Granted {
                            lease: id,
                            ttl_s: cluster.lease_s,
                        });
                        next_try = sent + renew_every;
                    }
                    Err(e) => {
                        if !no_lease_said {
                            write(&none(&e.to_string()), &mut report);
                            report(Note::Unavailable {
                                why: e.to_string(),
                                agents: AgentsStop::NoLease,
                            });
                            no_lease_said = true;
                        }
                        next_try = boot_ms() + retry_ms;
                    }
                }
            }
            Some(rec) => {
                let sent = boot_ms();
                let rec = rec.clone();
                if sent >= rec.renewed_boot_ms + ttl_ms {
                    // Past its end whatever etcd says: the claims are gone.
                    let why = "the lease ran out while etcd did not answer".to_string();
                    write(&none(&why), &mut report);
                    report(Note::Lost { why });
                    given_up = Some(rec.lease);
                    held = None;
                    next_try = sent;
                    continue;
                }
                match cluster.etcd.keepalive(rec.lease) {
                    Ok(Some(_)) => {
                        // A follower campaigns at every renewal: the leader's key goes with
                        // its lease, so a new leader is there within the lease.
                        let leader = rec.leader
                            || match cluster.campaign(&host, rec.lease) {
                                Ok(true) => {
                                    report(Note::Leader(true));
                                    true
                                }
                                _ => false,
                            };
                        let renewed = LeaseRecord {
                            renewed_boot_ms: sent,
                            leader,
                            ..rec
                        };
                        write(&renewed, &mut report);
                        publish(cluster, &host, &renewed, &mut status);
                        held = Some(renewed);
                        if let Some(since) = failing_since.take() {
                            report(Note::Back {
                                after_ms: sent.saturating_sub(since),
                            });
                        }
                        next_try = sent + renew_every;
                    }
                    Ok(None) => {
                        let why = format!("etcd says lease {:x} is gone", rec.lease);
                        write(&none(&why), &mut report);
                        report(Note::Lost { why });
                        held = None;
                        failing_since = None;
                        next_try = sent;
                    }
                    Err(e) => {
                        if failing_since.is_none() {
                            failing_since = Some(sent);
                            report(Note::Unavailable {
                                why: e.to_string(),
                                // Said once the call failed, which may have taken a
                                // while: counted from now, not from when it was sent.
                                agents: match rec.stop_at_boot_ms().checked_sub(boot_ms()) {
                                    Some(ms) if ms > 0 => AgentsStop::In(ms),
                                    _ => AgentsStop::Passed,
                                },
                            });
                        }
                        next_try = boot_ms() + retry_ms;
                    }
                }
            }
        }
    }
    if let Some(rec) = held {
        let _ = cluster.etcd.revoke(rec.lease);
        write(&none("the supervisor stopped"), &mut report);
    }
}

/// Puts this host's status (`status --fleet`) under its lease, best effort: it goes with
/// the lease, so a dead host drops out of the view by itself.
fn publish(
    cluster: &Cluster,
    host: &str,
    rec: &LeaseRecord,
    status: &mut impl FnMut(bool) -> Option<String>,
) {
    if let Some(value) = status(rec.leader) {
        let _ = cluster.etcd.put(&cluster.host_key(host), &value, rec.lease);
    }
}

impl Note {
    /// The note as one event-log line.
    pub fn line(&self) -> String {
        match self {
            Note::Granted { lease, ttl_s } => {
                format!("cluster: lease {lease:x} granted ({ttl_s}s); claims are open")
            }
            Note::Unavailable {
                why,
                agents: AgentsStop::NoLease,
            } => format!("cluster: etcd unavailable ({why}); no claims until it answers"),
            Note::Unavailable {
                why,
                agents: AgentsStop::In(ms),
            } => format!(
                "cluster: etcd unavailable ({why}); no new claims, running agents stop in {ms}ms unless it answers"
            ),
            Note::Unavailable {
                why,
                agents: AgentsStop::Passed,
            } => format!(
                "cluster: etcd unavailable ({why}); no new claims, running agents stopped at the lease's deadline"
            ),
            Note::Back { after_ms } => {
                format!("cluster: etcd answers again after {after_ms}ms; the lease held")
            }
            Note::Lost { why } => {
                format!("cluster: lease lost ({why}); this host's agents stopped, its claims ended")
            }
            Note::FileError(e) => format!("cluster: lease file: {e}"),
            Note::Leader(true) => {
                "cluster: this host leads the fleet: the repo-wide sweeps and belts run here".into()
            }
            Note::Leader(false) => "cluster: this host no longer leads the fleet".into(),
        }
    }
}
