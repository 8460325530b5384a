//! The fleet's shared state when it runs on more than one box (`[cluster]`, `docs/SPEC.md`
//! §11.23): claims in etcd instead of comment marks.
//!
//! A claim is one transaction: no claim key and no done key for issue N, then the claim key
//! put, bound to the host's lease. The transaction's revision (the key's create revision)
//! is the claim's fencing token: every write that acts on the claim (the hand-off, the
//! push, the give-back) first checks that the key still exists at that revision. The
//! supervisor keeps the host's lease alive ([`keeper`]) and writes, after every renewal it
//! got an answer to, the lease file ([`lease`]): the lease and the deadline by which the
//! host's agents must have stopped, on `CLOCK_BOOTTIME` (which keeps counting through a
//! suspend, unlike `CLOCK_MONOTONIC`). Workers read that file: they claim nothing without a
//! live lease, and stop their agent at the deadline, so a host cut off from etcd (or a
//! supervisor stopped by SIGSTOP) has no agent left when its lease expires and another
//! host may take the issue. A dead host's claims vanish with its lease; whichever live
//! host sees a claim vanish without its done key gives the issue back
//! (`supervisor::cluster_belt`).
//!
//! Without `[cluster]` nothing here runs: [`active`] is `None` and the fleet coordinates
//! through the tracker as before.

pub mod cas;
pub mod etcd;
mod http;
pub mod keeper;
pub mod lease;
pub mod shared;
pub mod steward;
pub mod windows;

use std::sync::OnceLock;
use std::time::Duration;

pub use etcd::{Cmp, Etcd, EtcdError, EtcdResult, Kv, Op};

use crate::config::ClusterCfg;

/// How long a done key outlives its hand-off: the labels the hand-off changed are then
/// on the tracker, so no queue listing still shows the issue ready.
pub const DONE_TTL_S: u64 = 120;

/// How long a restore guard keeps a second host from restoring the same vanished claim.
pub const RESTORE_GUARD_TTL_S: u64 = 60;

/// The fleet's handle on its cluster.
#[derive(Debug)]
pub struct Cluster {
    pub etcd: Etcd,
    prefix: String,
    /// Where the GitHub identities' write windows go (`windows`): `afk/` under the default
    /// prefix, shared by the repositories of one identity; else the fleet's own prefix.
    identity_root: String,
    pub lease_s: u64,
}

/// A won claim: the issue and the revision that created its key (the fencing token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub issue: u64,
    pub revision: i64,
}

/// Who holds a claim key: `<worker>@<host>`, the §11.5 holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimKey {
    pub issue: u64,
    pub holder: String,
    pub revision: i64,
    pub lease: i64,
}

impl ClaimKey {
    /// The host part of the holder.
    pub fn host(&self) -> &str {
        self.holder
            .split_once('@')
            .map_or(self.holder.as_str(), |(_, h)| h)
    }
}

/// How a claim's end is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// To a person: the done key keeps the issue from being claimed again while the
    /// hand-off's labels settle.
    HandOff,
    /// Back to the queue: the claim key goes, nothing else.
    GiveBack,
}

static ACTIVE: OnceLock<Cluster> = OnceLock::new();

/// This process's cluster, once [`install`] ran with a `[cluster]` table.
pub fn active() -> Option<&'static Cluster> {
    ACTIVE.get()
}

/// Why the cluster could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    #[error("cluster.password_file {0}: {1}")]
    Password(String, String),
    /// A TLS file (`cluster.ca_file`, `cert_file`, `key_file`) missing or not the PEM it
    /// must hold.
    #[error("{key} {path}: {why}")]
    Tls {
        key: &'static str,
        path: String,
        why: String,
    },
}

/// The agent that reaches `https://` members: it trusts only the fleet's CA (`ca_file`; a
/// public CA's certificate is no etcd member's) and shows this host's certificate when the
/// config names one. One agent per process, its connections closed after each call as the
/// plain client's are.
pub fn tls_agent(tls: &crate::config::cluster::ClusterTls) -> Result<ureq::Agent, SetupError> {
    use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
    let read = |key: &'static str, path: &std::path::Path| -> Result<Vec<u8>, SetupError> {
        let bad = |why: String| SetupError::Tls {
            key,
            path: path.display().to_string(),
            why,
        };
        crate::fsutil::read_capped(path, 1 << 20, crate::fsutil::Links::Follow)
            .map_err(|e| bad(e.to_string()))?
            .ok_or_else(|| bad("does not exist".into()))
    };
    let certs = |key: &'static str,
                 path: &std::path::Path|
     -> Result<Vec<Certificate<'static>>, SetupError> {
        let pem = read(key, path)?;
        let found: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
            .filter_map(|i| match i {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if found.is_empty() {
            return Err(SetupError::Tls {
                key,
                path: path.display().to_string(),
                why: "no PEM certificate in it".into(),
            });
        }
        Ok(found)
    };
    let roots = certs("cluster.ca_file", &tls.ca_file)?;
    let client = match &tls.client {
        Some((cert, key)) => {
            let chain = certs("cluster.cert_file", cert)?;
            let pem = read("cluster.key_file", key)?;
            let key = PrivateKey::from_pem(&pem).map_err(|e| SetupError::Tls {
                key: "cluster.key_file",
                path: key.display().to_string(),
                why: format!("not a PEM private key: {e}"),
            })?;
            Some(ClientCert::new_with_certs(&chain, key))
        }
        None => None,
    };
    let config = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&roots))
        .client_cert(client)
        .build();
    Ok(ureq::Agent::config_builder()
        .tls_config(config)
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("afk-supervisor/", env!("CARGO_PKG_VERSION")))
        .build()
        .into())
}

/// Sets up this process's cluster from `cfg` (a no-op when one is set up already); `repo`
/// is the tracker's `owner/name`, the default key prefix.
pub fn install(cfg: &ClusterCfg, repo: &str) -> Result<&'static Cluster, SetupError> {
    if let Some(c) = ACTIVE.get() {
        return Ok(c);
    }
    let c = Cluster::new(cfg, repo)?;
    let c = ACTIVE.get_or_init(|| c);
    // GitHub counts writes per identity: the hosts keep one window per identity in etcd.
    crate::tracker::pace::share_through(Box::new(windows::EtcdWindows(c)));
    // The hosts read the ready queue the leader's steward publishes.
    crate::tracker::gh_queue::share_through(Box::new(steward::EtcdQueue(c)));
    Ok(c)
}

impl Cluster {
    pub fn new(cfg: &ClusterCfg, repo: &str) -> Result<Cluster, SetupError> {
        let login = match (&cfg.username, &cfg.password_file) {
            (Some(u), Some(f)) => {
                let p = crate::fsutil::read_capped(f, 4096, crate::fsutil::Links::Follow)
                    .map_err(|e| SetupError::Password(f.display().to_string(), e.to_string()))?
                    .ok_or_else(|| {
                        SetupError::Password(f.display().to_string(), "does not exist".into())
                    })?;
                let p = String::from_utf8_lossy(&p)
                    .trim_end_matches(['\n', '\r'])
                    .to_string();
                Some((u.clone(), p))
            }
            _ => None,
        };
        let prefix = cfg.key_prefix(repo);
        let mut etcd = Etcd::new(cfg.endpoints.clone(), call_timeout(cfg.lease_s), login);
        if let Some(tls) = &cfg.tls {
            etcd = etcd.with_tls(tls_agent(tls)?);
        }
        Ok(Cluster {
            etcd,
            identity_root: match cfg.prefix {
                Some(_) => prefix.clone(),
                None => "afk/".to_string(),
            },
            prefix,
            lease_s: cfg.lease_s,
        })
    }

    /// The key prefix of this fleet.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Where the GitHub identities' write windows live (`windows::key`).
    pub fn identity_root(&self) -> &str {
        &self.identity_root
    }

    pub fn claims_prefix(&self) -> String {
        format!("{}claims/", self.prefix)
    }

    pub fn claim_key(&self, n: u64) -> String {
        format!("{}claims/{n}", self.prefix)
    }

    pub fn done_key(&self, n: u64) -> String {
        format!("{}done/{n}", self.prefix)
    }

    pub fn done_prefix(&self) -> String {
        format!("{}done/", self.prefix)
    }

    /// Where host `host` publishes its status, under its lease (`status --fleet`).
    pub fn host_key(&self, host: &str) -> String {
        format!("{}hosts/{host}", self.prefix)
    }

    /// The fleet as etcd holds it, for `status --fleet`: every host's published status
    /// (JSON), the leader, the claims, the shared pauses, each GitHub identity's writes
    /// in the last minute and hour by every host, and the steward's queue.
    /// `budgets`: this host's write budgets, which the identities' use is shown against.
    pub fn fleet_view(
        &self,
        budgets: crate::config::WriteBudgets,
    ) -> EtcdResult<serde_json::Value> {
        let hosts_prefix = format!("{}hosts/", self.prefix);
        let hosts: Vec<serde_json::Value> = self
            .etcd
            .get_prefix(&hosts_prefix)?
            .iter()
            .map(|kv| {
                serde_json::from_str(&kv.value).unwrap_or_else(
                    |_| serde_json::json!({"host": kv.key.strip_prefix(&hosts_prefix)}),
                )
            })
            .collect();
        let leader = self.etcd.get(&self.leader_key())?.map(|kv| kv.value);
        let claims: Vec<serde_json::Value> = self
            .claims()?
            .iter()
            .map(|k| serde_json::json!({"issue": k.issue, "holder": k.holder, "revision": k.revision}))
            .collect();
        let pause = |which: &str| -> EtcdResult<serde_json::Value> {
            Ok(self
                .etcd
                .get(&format!("{}pause/{which}", self.prefix))?
                .and_then(|kv| reddb_io_toon::from_str::<serde_json::Value>(&kv.value).ok())
                .filter(|p| {
                    p["until_epoch"]
                        .as_u64()
                        .is_some_and(|t| t > crate::timeutil::now_epoch())
                })
                .unwrap_or(serde_json::Value::Null))
        };
        let root = format!("{}github/", self.identity_root);
        let values: Vec<(String, String)> = self
            .etcd
            .get_prefix(&root)?
            .into_iter()
            .map(|kv| (kv.key, kv.value))
            .collect();
        let now_ms = crate::timeutil::now_epoch().saturating_mul(1000);
        let github = windows::uses(&values, &self.identity_root, now_ms, budgets);
        Ok(serde_json::json!({
            "prefix": self.prefix,
            "leader": leader,
            "github": github,
            "hosts": hosts,
            "claims": claims,
            "agent_paused": pause("agent")?,
            "rate_paused": pause("rate")?,
            "queue": self.queue_view(crate::timeutil::now_epoch_ms())?,
        }))
    }

    /// The election's key: the leader's host, bound to its lease.
    pub fn leader_key(&self) -> String {
        format!("{}leader", self.prefix)
    }

    /// Campaigns for the fleet's election under `lease`: the key is put when nobody holds
    /// it; whether `host` leads now (also when it already held the key under this lease).
    pub fn campaign(&self, host: &str, lease: i64) -> EtcdResult<bool> {
        let key = self.leader_key();
        let t = self.etcd.txn(
            &[Cmp::Absent(key.clone())],
            &[Op::Put {
                key: key.clone(),
                value: host.to_string(),
                lease,
            }],
            &[],
        )?;
        if t.succeeded {
            return Ok(true);
        }
        Ok(self
            .etcd
            .get(&key)?
            .is_some_and(|kv| kv.lease == lease && kv.value == host))
    }

    fn restore_key(&self, n: u64) -> String {
        format!("{}restore/{n}", self.prefix)
    }

    /// Claims issue `n` for `holder` (`<worker>@<host>`) under `lease`: `Some` with the
    /// fencing token when no claim and no done key existed, `None` when another holds it
    /// or it was handed off a moment ago.
    pub fn claim(&self, n: u64, holder: &str, lease: i64) -> EtcdResult<Option<Fence>> {
        let key = self.claim_key(n);
        let t = self.etcd.txn(
            &[Cmp::Absent(key.clone()), Cmp::Absent(self.done_key(n))],
            &[Op::Put {
                key,
                value: holder.to_string(),
                lease,
            }],
            &[],
        )?;
        Ok(t.succeeded.then_some(Fence {
            issue: n,
            revision: t.revision,
        }))
    }

    /// Whether the claim `fence` names still holds: its key exists, created at its
    /// revision.
    pub fn holds(&self, fence: Fence) -> EtcdResult<bool> {
        Ok(self
            .etcd
            .get(&self.claim_key(fence.issue))?
            .is_some_and(|kv| kv.create_revision == fence.revision))
    }

    /// Ends the claim `fence` names, when it still holds; a hand-off leaves the done key
    /// (on a lease of its own, [`DONE_TTL_S`]). Whether it held.
    pub fn end(&self, fence: Fence, ending: Ending) -> EtcdResult<bool> {
        let n = fence.issue;
        let mut ops = vec![Op::Delete(self.claim_key(n))];
        if ending == Ending::HandOff {
            let lease = self.etcd.grant(DONE_TTL_S)?;
            ops.push(Op::Put {
                key: self.done_key(n),
                value: "handoff".into(),
                lease,
            });
        }
        let t = self.etcd.txn(
            &[Cmp::CreatedAt(self.claim_key(n), fence.revision)],
            &ops,
            &[],
        )?;
        Ok(t.succeeded)
    }

    /// The claim key of issue `n`, if one exists.
    pub fn claim_of(&self, n: u64) -> EtcdResult<Option<ClaimKey>> {
        Ok(self
            .etcd
            .get(&self.claim_key(n))?
            .and_then(|kv| claim_key(&kv)))
    }

    /// Every claim key of the fleet.
    pub fn claims(&self) -> EtcdResult<Vec<ClaimKey>> {
        let kvs = self.etcd.get_prefix(&self.claims_prefix())?;
        Ok(kvs.iter().filter_map(claim_key).collect())
    }

    /// Deletes issue `n`'s done key: the landing belt sent the issue back to the queue for a
    /// fix round, which a hand-off's key must not hold up.
    pub fn clear_done(&self, n: u64) -> EtcdResult<()> {
        self.etcd
            .txn(&[], &[Op::Delete(self.done_key(n))], &[])
            .map(|_| ())
    }

    /// Every issue with a done key.
    pub fn done(&self) -> EtcdResult<Vec<u64>> {
        let p = self.done_prefix();
        Ok(self
            .etcd
            .get_prefix(&p)?
            .iter()
            .filter_map(|kv| kv.key.strip_prefix(&p)?.parse().ok())
            .collect())
    }

    /// Deletes the claim key of `n` when it is the one created at `revision` (a dead
    /// worker's claim its own host gave back).
    pub fn drop_claim(&self, n: u64, revision: i64) -> EtcdResult<bool> {
        Ok(self
            .etcd
            .txn(
                &[Cmp::CreatedAt(self.claim_key(n), revision)],
                &[Op::Delete(self.claim_key(n))],
                &[],
            )?
            .succeeded)
    }

    /// The right to restore issue `n` whose claim vanished: granted to one host only
    /// (for [`RESTORE_GUARD_TTL_S`]), and only while nobody claims it.
    pub fn restore_guard(&self, n: u64) -> EtcdResult<bool> {
        let lease = self.etcd.grant(RESTORE_GUARD_TTL_S)?;
        Ok(self
            .etcd
            .txn(
                &[
                    Cmp::Absent(self.claim_key(n)),
                    Cmp::Absent(self.restore_key(n)),
                ],
                &[Op::Put {
                    key: self.restore_key(n),
                    value: "restore".into(),
                    lease,
                }],
                &[],
            )?
            .succeeded)
    }
}

fn claim_key(kv: &Kv) -> Option<ClaimKey> {
    let n = kv.key.rsplit('/').next()?.parse().ok()?;
    Some(ClaimKey {
        issue: n,
        holder: kv.value.clone(),
        revision: kv.create_revision,
        lease: kv.lease,
    })
}

/// How long one call may take: a third of the lease, so a member that does not answer
/// leaves time to try the next one and renew before the deadline; at least 500 ms.
pub fn call_timeout(lease_s: u64) -> Duration {
    Duration::from_millis((lease_s * 1000 / 3).max(500))
}

/// Sets up this process's cluster when `config` has `[cluster]`; `None` without one. The
/// key prefix's default names the project as the tracker does: `tracker.repo`, else the
/// `owner/name` of `origin`, else `origin`'s URL itself (clones of one bare repository
/// share it).
pub fn install_for(
    config: &crate::config::Config,
    layout: &crate::layout::Layout,
) -> Result<Option<&'static Cluster>, SetupError> {
    let Some(cfg) = &config.cluster else {
        return Ok(None);
    };
    let repo = match &config.tracker.repo {
        Some(r) => r.clone(),
        None => {
            let origin = crate::tracker::select::origin_url(&crate::git::Git::new(layout.repo()));
            match origin {
                Some(url) => crate::tracker::select::repo_from_url(&url)
                    .map_or(url.trim_matches('/').to_string(), |(_, r)| r),
                None => layout.repo().display().to_string(),
            }
        }
    };
    install(cfg, &repo).map(Some)
}
