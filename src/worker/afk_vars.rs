//! What the supervisor tells this worker through `RED_AFK_*` (`docs/SPEC.md` §6), read
//! once at start with the config's bound check, before anything is claimed.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::afk_env::{LIVENESS_S, RETIRE_FILE, SLOT, SWEEPS_DONE, WORKER_ID};
use crate::config::{self, Config, ConfigError};

/// What the supervisor tells a worker through `RED_AFK_*` (`docs/SPEC.md` §6).
#[derive(Debug, Clone)]
pub struct WorkerEnv {
    pub sweeps_done: bool,
    pub slot: Option<usize>,
    pub worker_id: String,
    /// `RED_AFK_RUNNER` as the config already read it (its one reader): the variable wins
    /// over the file there, so the worker and `status` name the same runner.
    pub runner: String,
    pub retire_file: Option<PathBuf>,
    /// Seconds between liveness records while an agent runs (`RED_AFK_LIVENESS_S`, default 30).
    pub liveness_s: u64,
}

impl WorkerEnv {
    /// Reads the variables; an out-of-range number is a configuration error (exit 78),
    /// found before anything is claimed.
    pub fn from_env(env: &HashMap<String, String>, config: &Config) -> Result<Self, ConfigError> {
        let get = |k: &str| {
            env.get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        Ok(WorkerEnv {
            sweeps_done: get(SWEEPS_DONE).as_deref() == Some("1"),
            slot: get(SLOT).and_then(|s| s.parse().ok()),
            worker_id: get(WORKER_ID)
                .filter(|id| valid_worker_id(id))
                .unwrap_or_else(|| format!("solo-{}", std::process::id())),
            runner: config.worker.runner.clone(),
            retire_file: get(RETIRE_FILE).map(PathBuf::from),
            liveness_s: config::env_seconds(env, LIVENESS_S, "liveness_s", 1)?.unwrap_or(30),
        })
    }

    pub fn retire_requested(&self) -> bool {
        self.retire_file.as_ref().is_some_and(|f| f.exists())
    }
}

/// A worker id becomes a directory and a branch component (`afk/<id>/<N>-<slug>`): keep it
/// to a safe alphabet and to what git accepts as one ref component (no `..`, no `.lock`
/// ending), so an id that would make an illegal branch is refused before anything is
/// claimed.
fn valid_worker_id(id: &str) -> bool {
    id.len() <= 64
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && crate::git::ref_component_problem(id).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_ids() {
        assert!(valid_worker_id("sup-12-slot-0-3"));
        for bad in [
            "", "../x", "a/b", "-x", ".x", "a b", "a..b", "x.lock", "w.lock",
        ] {
            assert!(!valid_worker_id(bad), "{bad}");
        }
    }
}
