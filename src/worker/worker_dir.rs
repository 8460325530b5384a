//! The worker's own dir and `worker.pid` (after `.red/tmp/`, `.red/state/` and their
//! `.gitignore` lines, [`crate::bootstrap`]); removed again on a clean exit.

use std::fs;
use std::path::PathBuf;

use super::WorkerError;
use crate::layout::{Layout, WORKER_NAMESPACES};
use crate::pidfile;

pub struct Home {
    pub dir: PathBuf,
}

impl Home {
    pub fn new(layout: &Layout, worker_id: &str) -> Result<Self, WorkerError> {
        let ignore = crate::bootstrap::ensure(layout)?;
        if let Some(note) = ignore.note() {
            eprintln!("worker {worker_id}: {note}");
        }
        let dir = layout
            .worker_namespace(WORKER_NAMESPACES[0])
            .join(worker_id);
        fs::create_dir_all(&dir)
            .map_err(|e| WorkerError::file(dir.clone(), "cannot create worker dir: ", e))?;
        let pid_file = dir.join("worker.pid");
        pidfile::write_pid_file(&pid_file, std::process::id() as i32)
            .map_err(|e| WorkerError::file(pid_file, "", e))?;
        Ok(Home { dir })
    }

    /// Removes `worker.pid` and, when nothing else is in it, the worker dir: attempt dirs
    /// stay for orphan cleanup to judge by their issue's state.
    pub fn finish(&self) {
        let _ = pidfile::remove_pid_file(&self.dir.join("worker.pid"));
        let _ = fs::remove_dir(&self.dir);
    }
}
