//! The attempt: its number, per issue across the fleet, and its `afk.state.json`
//! (`docs/SPEC.md` §3), rewritten atomically at each stage.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::json;

use super::WorkerError;
use crate::attempt_state::{AttemptState, Current, Envelope, Stage};
use crate::layout::{self, Layout};
use crate::pidfile;
use crate::sweeps::worker_tree;
use crate::timeutil;

/// One more than the highest attempt number of `issue` in any worker dir of any namespace,
/// so attempt numbers are per issue across the fleet (the attempt cap keeps the newest).
pub fn next_attempt(layout: &Layout, issue: u64) -> u64 {
    let workers = worker_tree::worker_entries(layout).unwrap_or_default();
    let max = workers
        .iter()
        .filter(|w| w.kind == worker_tree::Kind::Dir)
        .flat_map(|w| worker_tree::entries(&w.path).unwrap_or_default())
        .filter_map(|a| layout::parse_attempt_dir(&a.name))
        .filter(|(n, _)| *n == issue)
        .map(|(_, k)| k)
        .max()
        .unwrap_or(0);
    max + 1
}

/// The attempt's `afk.state.json` (`docs/SPEC.md` §3), rewritten atomically at each stage.
pub(super) struct AttemptFile {
    dir: PathBuf,
    pub state: AttemptState,
}

impl AttemptFile {
    pub fn new(
        dir: &Path,
        worker_id: &str,
        number: u64,
        title: &str,
        slug: &str,
        worktree: &Path,
    ) -> Self {
        let pid = std::process::id();
        let started_at = timeutil::rfc3339(SystemTime::now());
        let state = AttemptState {
            version: 1,
            worker_id: Some(worker_id.into()),
            pid: Some(i64::from(pid)),
            pid_start_time: pidfile::process_start_time(pid as i32),
            started_at: Some(started_at.clone()),
            current: Some(Current {
                number: Some(number),
                title: Some(title.into()),
                slug: Some(slug.into()),
                worktree: Some(worktree.display().to_string()),
                started_at: Some(started_at),
                stage: None,
                ..Default::default()
            }),
            envelope: Some(Envelope {
                posted: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        AttemptFile {
            dir: dir.to_path_buf(),
            state,
        }
    }

    pub fn set_envelope_posted(&mut self) {
        self.state.envelope = Some(Envelope {
            posted: Some(true),
            ..Default::default()
        });
    }

    /// Records `stage`; a finished attempt has `current: null` and keeps the last issue and
    /// stage under `last` for people reading the dir later.
    ///
    /// The stage is kept in memory before the file is written, so [`AttemptFile::stage`]
    /// is where the attempt got to even when the disk refused the write.
    pub fn write(&mut self, stage: Stage) -> Result<(), WorkerError> {
        let finished = stage.is_final();
        let number = self.state.current.as_ref().and_then(|c| c.number);
        self.state
            .extra
            .insert("last".into(), json!({ "number": number, "stage": stage }));
        if let Some(cur) = self.state.current.as_mut() {
            cur.stage = Some(stage);
        }
        let mut out = self.state.clone();
        if finished {
            out.current = None;
        }
        Ok(out.write(&self.dir)?)
    }

    /// The stage the attempt last reached; `None` before its first.
    pub fn stage(&self) -> Option<&Stage> {
        self.state.current.as_ref().and_then(|c| c.stage.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn attempt_numbers_span_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert_eq!(next_attempt(&layout, 5), 1);
        fs::create_dir_all(layout.worker_namespace("workers").join("w1/5-a2")).unwrap();
        fs::create_dir_all(layout.worker_namespace("go-workers").join("w2/5-a4")).unwrap();
        fs::create_dir_all(layout.worker_namespace("workers").join("w1/6-a9")).unwrap();
        assert_eq!(next_attempt(&layout, 5), 5);
    }
}
