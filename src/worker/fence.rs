//! The claim in etcd (`[cluster]`, `docs/SPEC.md` §11.23) as the worker holds it: the
//! fencing token checked before every write that acts on the claim, and the claim ended
//! when the worker lets the issue go (a hand-off leaves the done key).

use std::path::PathBuf;

use super::error::ClusterLost;
use crate::cluster::{Cluster, Ending, Fence, lease};

/// A won claim in etcd; ended when dropped, however the attempt ends.
pub(super) struct FenceGuard {
    pub cluster: &'static Cluster,
    pub fence: Fence,
    pub lane: PathBuf,
    /// Whether the issue went to a person (the done key is then left).
    pub to_human: bool,
}

impl FenceGuard {
    /// `Ok` while the claim holds: the host's lease is live (by the lease file's deadline)
    /// and the claim key still exists at the token's revision; else why not.
    pub fn holds(&self) -> Result<(), ClusterLost> {
        let issue = self.fence.issue;
        match lease::read(&self.lane) {
            Some(r) if r.live() => {}
            _ => return Err(ClusterLost::LeaseNotLive { issue }),
        }
        match self.cluster.holds(self.fence) {
            Ok(true) => Ok(()),
            Ok(false) => Err(ClusterLost::ClaimGone {
                issue,
                revision: self.fence.revision,
            }),
            Err(source) => Err(ClusterLost::Unchecked { issue, source }),
        }
    }
}

impl Drop for FenceGuard {
    fn drop(&mut self) {
        let ending = if self.to_human {
            Ending::HandOff
        } else {
            Ending::GiveBack
        };
        // Tried a few times: a claim key left behind is dropped by the host's belt once
        // no local claim names it, but only after a tick.
        for _ in 0..3 {
            match self.cluster.end(self.fence, ending) {
                Ok(_) => return,
                Err(e) => {
                    eprintln!(
                        "worker: ending the claim of #{} in etcd: {e}",
                        self.fence.issue
                    );
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            }
        }
    }
}
