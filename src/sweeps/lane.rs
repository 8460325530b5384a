//! The one deletion primitive every sweep uses (SPEC §1 safety rules).
//!
//! A sweep bug must not be able to reach durable state. So every removal goes through
//! [`Lane::remove`], which refuses a path unless it lies lexically *and* physically inside a
//! registered lane of `.red/tmp/`: no `..`, no symlinked parent on the way, and `.red/tmp`
//! itself not a symlink. The path itself is judged with `symlink_metadata`, so a symlink is
//! unlinked as a link and never walked; `std::fs::remove_dir_all` does not follow symlinks
//! below the top either (it opens every directory with `O_NOFOLLOW`).

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::layout::{Layout, WORKER_NAMESPACES, parse_legacy_work_dir};

/// Why a path was refused or could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    #[error("{path}: lane root unusable: {why}")]
    Root { path: PathBuf, why: String },
    #[error("{path}: refused: {why}")]
    Refused { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What a removal found at the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovedKind {
    /// A real directory, removed with everything below it.
    Dir,
    /// A symlink, unlinked; its target was not touched.
    Symlink,
    /// A regular (or special) file.
    File,
    /// Nothing was there any more.
    Absent,
}

/// One removal: the path and what was there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub path: PathBuf,
    pub kind: RemovedKind,
}

/// `.red/tmp/` of one repo, resolved once.
#[derive(Debug, Clone)]
pub struct Lane {
    /// `.red/tmp` as the layout spells it: paths handed in are checked against this.
    tmp: PathBuf,
    /// `.red/tmp` resolved: parents of removed paths must resolve below it.
    tmp_canon: PathBuf,
}

impl Lane {
    /// Resolves `.red/tmp`. `Ok(None)` when it does not exist (nothing to sweep); an error
    /// when `.red` or `.red/tmp` is a symlink or cannot be resolved, because then "inside
    /// `.red/tmp`" would mean somewhere else entirely.
    pub fn open(layout: &Layout) -> Result<Option<Lane>, LaneError> {
        let tmp = layout.tmp();
        let root_err = |why: String| LaneError::Root {
            path: tmp.clone(),
            why,
        };
        for p in [layout.red(), tmp.clone()] {
            match fs::symlink_metadata(&p) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(root_err(format!("{} is a symlink", p.display())));
                }
                Ok(m) if !m.is_dir() => {
                    return Err(root_err(format!("{} is not a directory", p.display())));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(root_err(e.to_string())),
            }
        }
        let repo_canon = fs::canonicalize(layout.repo()).map_err(|e| root_err(e.to_string()))?;
        let tmp_canon = fs::canonicalize(&tmp).map_err(|e| root_err(e.to_string()))?;
        if tmp_canon != repo_canon.join(".red").join("tmp") {
            return Err(root_err(format!(
                "resolves to {}, outside the repo",
                tmp_canon.display()
            )));
        }
        Ok(Some(Lane { tmp, tmp_canon }))
    }

    pub fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// Checks that `path` may be removed, without touching it. Dry runs call this so a
    /// listing shows the same refusals a real run would hit.
    pub fn check(&self, path: &Path) -> Result<(), LaneError> {
        let refused = |why: &str| LaneError::Refused {
            path: path.to_path_buf(),
            why: why.to_string(),
        };
        let rel = path
            .strip_prefix(&self.tmp)
            .map_err(|_| refused("not inside .red/tmp"))?;
        let mut names: Vec<&OsStr> = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => names.push(n),
                _ => return Err(refused("path has `.`, `..` or a root component")),
            }
        }
        if !is_registered(&names) {
            return Err(refused("not in a registered lane of .red/tmp"));
        }
        let parent = path.parent().ok_or_else(|| refused("no parent"))?;
        let parent_canon = fs::canonicalize(parent).map_err(|e| LaneError::Io {
            path: parent.to_path_buf(),
            source: e,
        })?;
        let expected = self.tmp_canon.join(rel.parent().unwrap_or(Path::new("")));
        if parent_canon != expected {
            return Err(refused(&format!(
                "parent resolves to {} (a symlink on the way)",
                parent_canon.display()
            )));
        }
        Ok(())
    }

    /// Removes `path` after [`Lane::check`]: a symlink as a link, a directory with its
    /// contents (never following links below it), a file as a file.
    pub fn remove(&self, path: &Path) -> Result<Removed, LaneError> {
        match self.check(path) {
            // A parent that vanished means the path is gone too.
            Err(LaneError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                return Ok(Removed {
                    path: path.to_path_buf(),
                    kind: RemovedKind::Absent,
                });
            }
            other => other?,
        }
        let io_err = |e: io::Error| LaneError::Io {
            path: path.to_path_buf(),
            source: e,
        };
        let meta = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Removed {
                    path: path.to_path_buf(),
                    kind: RemovedKind::Absent,
                });
            }
            Err(e) => return Err(io_err(e)),
        };
        let ft = meta.file_type();
        let kind = if ft.is_symlink() {
            fs::remove_file(path).map_err(io_err)?;
            RemovedKind::Symlink
        } else if ft.is_dir() {
            fs::remove_dir_all(path).map_err(io_err)?;
            RemovedKind::Dir
        } else {
            fs::remove_file(path).map_err(io_err)?;
            RemovedKind::File
        };
        Ok(Removed {
            path: path.to_path_buf(),
            kind,
        })
    }
}

/// The registered lanes (SPEC §1): inside a worker namespace, `claims/`, `logs/` or
/// `supervisors/` (never the lane root itself), the docs-sweep worktree, and numeric legacy
/// `work-<N>` dirs. Slug-named `work-*` dirs are manual worktrees and never registered.
fn is_registered(names: &[&OsStr]) -> bool {
    let Some(first) = names.first().and_then(|n| n.to_str()) else {
        return false;
    };
    let nested = names.len() >= 2;
    match first {
        "claims" | "logs" | "supervisors" => nested,
        ns if WORKER_NAMESPACES.contains(&ns) => nested,
        "docs-sweep" => true,
        name => parse_legacy_work_dir(name).is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Layout, Lane) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        fs::create_dir_all(layout.tmp()).unwrap();
        let lane = Lane::open(&layout).unwrap().unwrap();
        (dir, layout, lane)
    }

    #[test]
    fn missing_tmp_is_none_and_symlinked_tmp_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert!(Lane::open(&layout).unwrap().is_none());
        let elsewhere = tempfile::tempdir().unwrap();
        fs::create_dir_all(layout.red()).unwrap();
        symlink(elsewhere.path(), layout.tmp()).unwrap();
        let err = Lane::open(&layout).unwrap_err().to_string();
        assert!(err.contains("is a symlink"), "{err}");
    }

    #[test]
    fn removes_dirs_files_and_links_inside_lanes() {
        let (_d, layout, lane) = setup();
        let attempt = layout.worker_namespace("workers").join("w1/5-a1");
        fs::create_dir_all(attempt.join("worktree/src")).unwrap();
        fs::write(attempt.join("worktree/src/x"), "x").unwrap();
        let r = lane.remove(&attempt).unwrap();
        assert_eq!(r.kind, RemovedKind::Dir);
        assert!(!attempt.exists());
        assert_eq!(lane.remove(&attempt).unwrap().kind, RemovedKind::Absent);

        let pid = layout.worker_namespace("workers").join("w1/worker.pid");
        fs::write(&pid, "1").unwrap();
        assert_eq!(lane.remove(&pid).unwrap().kind, RemovedKind::File);

        let legacy = layout.tmp().join("work-12");
        fs::create_dir_all(&legacy).unwrap();
        assert_eq!(lane.remove(&legacy).unwrap().kind, RemovedKind::Dir);
    }

    #[test]
    fn symlinks_are_unlinked_never_walked() {
        let (_d, layout, lane) = setup();
        let state = layout.state().join("castle");
        fs::create_dir_all(&state).unwrap();
        fs::write(state.join("keep"), "durable").unwrap();
        let w = layout.worker_namespace("workers").join("w1");
        fs::create_dir_all(&w).unwrap();
        // A symlinked attempt dir: the link goes, the target stays.
        symlink(&state, w.join("7-a1")).unwrap();
        assert_eq!(
            lane.remove(&w.join("7-a1")).unwrap().kind,
            RemovedKind::Symlink
        );
        assert_eq!(fs::read_to_string(state.join("keep")).unwrap(), "durable");
        // A link inside a removed dir is unlinked, not followed.
        fs::create_dir_all(w.join("8-a1")).unwrap();
        symlink(&state, w.join("8-a1/link")).unwrap();
        lane.remove(&w.join("8-a1")).unwrap();
        assert_eq!(fs::read_to_string(state.join("keep")).unwrap(), "durable");
        // A path reached through a symlinked worker dir is refused.
        symlink(&state, layout.worker_namespace("workers").join("w2")).unwrap();
        let through = layout.worker_namespace("workers").join("w2/keep");
        let err = lane.remove(&through).unwrap_err().to_string();
        assert!(err.contains("symlink on the way"), "{err}");
        assert!(state.join("keep").exists());
    }

    #[test]
    fn refuses_outside_and_unregistered() {
        let (_d, layout, lane) = setup();
        for p in [
            layout.state().join("x"),
            layout.tmp(),
            layout.worker_namespace("workers"),
            layout.claims(),
            layout.tmp().join("work-fix-login"),
            layout.tmp().join("other/x"),
            layout.tmp().join("workers/../../state"),
            PathBuf::from("/etc/passwd"),
        ] {
            assert!(
                matches!(lane.check(&p), Err(LaneError::Refused { .. })),
                "{}",
                p.display()
            );
        }
        fs::create_dir_all(layout.tmp().join("work-fix-login")).unwrap();
        assert!(lane.remove(&layout.tmp().join("work-fix-login")).is_err());
        assert!(layout.tmp().join("work-fix-login").exists());
    }
}
