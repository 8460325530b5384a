//! The fleet-wide holds shared through etcd (`docs/SPEC.md` §11.23): the agent's account
//! pause and the tracker's rate-limit pause. Each host keeps its files as ever
//! (`crate::lanes::pause_file`); the cluster belt copies a pause met on any host to the key
//! `P/pause/agent` or `P/pause/rate` (compare-and-swap: only a longer pause replaces the
//! key) and a longer pause found there into this host's file, so every check that reads
//! the files (the worker before it claims, the supervisor's queue check) holds on every
//! host within a pass of the belt.

use std::path::Path;

use super::{Cluster, Cmp, EtcdResult, Op};
use crate::lanes::pause_file::{self, AgentPause, Pause};

impl Cluster {
    fn pause_key(&self, which: &str) -> String {
        format!("{}pause/{which}", self.prefix())
    }

    /// Publishes `until`'s record under `key` when it holds longer than what is there.
    fn publish<T: serde::Serialize>(&self, key: &str, rec: &T, until: u64) -> EtcdResult<bool> {
        let there = self.etcd.get(key)?;
        let longer = match &there {
            Some(kv) => until_of(&kv.value).is_none_or(|t| t < until),
            None => true,
        };
        if !longer {
            return Ok(false);
        }
        let Ok(value) = reddb_io_toon::to_string(rec) else {
            return Ok(false);
        };
        let cmp = match &there {
            Some(kv) => Cmp::ModifiedAt(key.to_string(), kv.mod_revision),
            None => Cmp::Absent(key.to_string()),
        };
        let put = Op::Put {
            key: key.to_string(),
            value,
            lease: 0,
        };
        Ok(self.etcd.txn(&[cmp], &[put], &[])?.succeeded)
    }

    /// One exchange of the pauses between this host's `state_dir` and etcd; what changed,
    /// in words (empty when nothing did).
    pub fn sync_pauses(&self, state_dir: &Path) -> EtcdResult<Vec<String>> {
        let now = crate::timeutil::now_epoch();
        let mut said = Vec::new();
        let agent_key = self.pause_key("agent");
        if let Some(p) = pause_file::agent_active_at(state_dir, now) {
            self.publish(&agent_key, &p, p.until_epoch)?;
        }
        if let Some(kv) = self.etcd.get(&agent_key)?
            && let Ok(p) = reddb_io_toon::from_str::<AgentPause>(&kv.value)
            && p.active_at(now)
            && pause_file::agent_adopt(state_dir, &p).unwrap_or(false)
        {
            said.push(format!("agent pause from another host: {}", p.describe()));
        }
        let rate_key = self.pause_key("rate");
        if let Some(p) = pause_file::active(state_dir) {
            self.publish(&rate_key, &p, p.until_epoch)?;
        }
        if let Some(kv) = self.etcd.get(&rate_key)?
            && let Ok(p) = reddb_io_toon::from_str::<Pause>(&kv.value)
            && p.active_at(now)
            && pause_file::active(state_dir).is_none_or(|here| here.until_epoch < p.until_epoch)
            && pause_file::record(state_dir, &p.reason, p.until_epoch).is_ok()
        {
            said.push(format!(
                "rate-limit pause from another host: {}",
                p.describe()
            ));
        }
        Ok(said)
    }
}

/// `until_epoch` of a pause record of either kind.
fn until_of(text: &str) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Until {
        until_epoch: u64,
    }
    reddb_io_toon::from_str::<Until>(text)
        .ok()
        .map(|u| u.until_epoch)
}
