//! Walking the worker namespaces (`.red/tmp/{workers,go-workers,scout-workers}/<id>/<N>-a<n>/`)
//! without ever following a symlink: entries are classified by `read_dir`'s own file type,
//! which does not follow links, so a linked worker or attempt dir is seen as a link.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::layout::{Layout, WORKER_NAMESPACES};

/// Why a sweep over the worker tree stopped: `.red/tmp` could not be opened, or a registered
/// dir could not be read (shared by orphan cleanup and the attempt cap).
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("{0}")]
    DeleteRoot(#[from] crate::safe_delete::DeleteError),
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// `worker.pid` inside a worker dir.
pub const WORKER_PID: &str = "worker.pid";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    Symlink,
    File,
}

/// One entry of a directory, as `read_dir` saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    /// The file name, lossily decoded (names that are not UTF-8 never parse as anything).
    pub name: String,
    pub kind: Kind,
}

/// The entries of `dir`, sorted by name; `Ok(empty)` when `dir` does not exist.
pub fn entries(dir: &Path) -> io::Result<Vec<Entry>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent?;
        let ft = ent.file_type()?;
        let kind = if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_dir() {
            Kind::Dir
        } else {
            Kind::File
        };
        out.push(Entry {
            path: ent.path(),
            name: ent.file_name().to_string_lossy().into_owned(),
            kind,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Every entry directly inside each worker namespace, namespace by namespace.
pub fn worker_entries(layout: &Layout) -> Result<Vec<Entry>, (PathBuf, io::Error)> {
    let mut out = Vec::new();
    for ns in WORKER_NAMESPACES {
        let dir = layout.worker_namespace(ns);
        // A namespace that is itself a symlink is not walked.
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err((dir, e)),
        }
        out.extend(entries(&dir).map_err(|e| (dir.clone(), e))?);
    }
    Ok(out)
}

pub fn worker_pid(worker_dir: &Path) -> PathBuf {
    worker_dir.join(WORKER_PID)
}

/// Whether a real directory has no entries at all.
pub fn is_empty_dir(dir: &Path) -> io::Result<bool> {
    Ok(fs::read_dir(dir)?.next().is_none())
}

/// Modification time of the path itself (a link's own time, not its target's).
pub fn mtime(path: &Path) -> io::Result<SystemTime> {
    fs::symlink_metadata(path)?.modified()
}

/// How long before `now` the path was last modified; zero for times in the future.
pub fn age(path: &Path, now: SystemTime) -> io::Result<Duration> {
    Ok(now.duration_since(mtime(path)?).unwrap_or(Duration::ZERO))
}

/// Whether the attempt dir holds a linked git worktree: `worktree/` a real dir whose
/// `.git` is a file (git's `gitdir:` pointer), judged without following links.
pub fn holds_linked_worktree(attempt: &Path) -> bool {
    crate::rescue::worktree_of(attempt).is_some()
}

/// After a sweep removed attempt dirs holding linked worktrees: `git worktree prune` in the
/// repo, so git forgets them. Otherwise git keeps each one's branch "checked out" and the
/// branch reaper spares it on every run. `None` when it went through, else the reason for
/// the sweep's decision list.
pub fn prune_worktree_records(layout: &Layout) -> Option<String> {
    crate::git::Git::new(layout.repo())
        .worktree_prune()
        .err()
        .map(|e| {
            format!(
                "removed attempt dirs held git worktrees, but pruning their records failed: {e}"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let ns = layout.worker_namespace("go-workers");
        fs::create_dir_all(ns.join("w1/3-a1")).unwrap();
        fs::write(ns.join("stray"), "x").unwrap();
        std::os::unix::fs::symlink(ns.join("w1"), ns.join("w2")).unwrap();
        let found = worker_entries(&layout).unwrap();
        let kinds: Vec<(&str, Kind)> = found.iter().map(|e| (e.name.as_str(), e.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                ("stray", Kind::File),
                ("w1", Kind::Dir),
                ("w2", Kind::Symlink)
            ]
        );
        assert!(is_empty_dir(&ns.join("w1/3-a1")).unwrap());
        assert!(!is_empty_dir(&ns.join("w1")).unwrap());
    }
}
