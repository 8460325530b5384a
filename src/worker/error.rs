//! How a worker run ends: a typed outcome, or a typed error. The exit code for each is
//! chosen in `src/cli/worker.rs` (`docs/SPEC.md` §6, §9), so the supervisor can tell a
//! host to park, a tracker to wait for and a real death apart.

use std::io;
use std::path::PathBuf;

use crate::attempt_state::StateError;
use crate::bootstrap::BootstrapError;
use crate::claim::tracked::ClaimError;
use crate::git::GitError;
use crate::tracker::TrackerError;

/// A run that ended as the worker meant it to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerOutcome {
    /// `--once` worked its issue, or `--boot-only` finished booting.
    Done,
    /// The queue held nothing this worker could claim.
    NoWork,
    /// The retire file appeared: no further issue was taken.
    Retired,
    /// The agent failed its issue, which went back to the queue (or to a human).
    AgentFailed,
    /// A signal stopped the worker; the issue it held went back to the queue.
    Interrupted { signal: i32 },
    /// The agent's account ran out, or the day's budget is used up: the worker claimed
    /// nothing more, and the fleet holds (exit 76, `docs/SPEC.md` §6, §11.13).
    AgentPaused,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The host cannot run the agent: the slot is parked, never retried.
    #[error("{0}")]
    Config(String),
    /// The solo boot's docs sweep or probe halted it.
    #[error("boot sweeps halted: {0}")]
    BootHalted(String),
    /// The tracker answered *rate-limited* (SPEC §7): not a death.
    #[error("{0}")]
    RateLimited(String),
    /// The tracker failed transiently (network, timeout, 5xx, a held store lock): not a
    /// death either, the next queue check decides.
    #[error("{0}")]
    TrackerUnavailable(String),
    /// The tracker refused or failed for good.
    #[error("{0}")]
    Tracker(String),
    #[error("cannot install signal handler: {0}")]
    Signals(#[source] io::Error),
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// A file or directory of the worker's own could not be written.
    #[error("{}: {what}{source}", path.display())]
    File {
        path: PathBuf,
        /// What was being done, with its `": "`, or empty.
        what: &'static str,
        source: io::Error,
    },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    AttemptState(#[from] StateError),
    /// The agent's process could not be started or waited for (not its own exit code).
    #[error("{0}")]
    Agent(String),
    /// `[cluster]`: the host's lease is not live or the claim's fencing token no longer
    /// holds (`docs/SPEC.md` §11.23): nothing more is written for the issue; not a death.
    #[error("cluster: {0}")]
    ClusterLost(#[from] ClusterLost),
}

/// `[cluster]`: why the worker may no longer act on its claim, or may not claim at all.
#[derive(Debug, thiserror::Error)]
pub enum ClusterLost {
    #[error("no live lease of this host ({why}): not claiming")]
    NoLease { why: String },
    #[error("claiming #{issue} in etcd: {source}")]
    Claiming {
        issue: u64,
        #[source]
        source: crate::cluster::etcd::EtcdError,
    },
    #[error(
        "the host's cluster lease is not live; the claim of #{issue} may be another host's by now"
    )]
    LeaseNotLive { issue: u64 },
    #[error("the claim of #{issue} (revision {revision}) is gone from etcd")]
    ClaimGone { issue: u64, revision: i64 },
    #[error("the claim of #{issue} cannot be checked: {source}")]
    Unchecked {
        issue: u64,
        #[source]
        source: crate::cluster::etcd::EtcdError,
    },
    /// While the agent runs: the lease was held, then not renewed in time.
    #[error("the host's cluster lease {lease:x} was not renewed in time")]
    NotRenewed { lease: i64 },
    #[error("the host holds no cluster lease ({why})")]
    NoneHeld { why: String },
    #[error("the host's cluster lease file is gone")]
    LeaseFileGone,
    /// The fleet's day's budget key could not be checked before a claim.
    #[error("the fleet's day's budget cannot be checked: {0}; not claiming")]
    Budget(#[source] crate::cluster::cas::CasError),
}

impl WorkerError {
    pub fn file(path: PathBuf, what: &'static str, source: io::Error) -> Self {
        WorkerError::File { path, what, source }
    }
}

impl From<&TrackerError> for WorkerError {
    fn from(e: &TrackerError) -> Self {
        classify(e, e.to_string())
    }
}

impl From<&ClaimError> for WorkerError {
    fn from(e: &ClaimError) -> Self {
        classify(e.tracker_error(), e.to_string())
    }
}

fn classify(e: &TrackerError, message: String) -> WorkerError {
    if e.is_rate_limited() {
        WorkerError::RateLimited(message)
    } else if e.is_transient() {
        WorkerError::TrackerUnavailable(message)
    } else {
        WorkerError::Tracker(message)
    }
}
