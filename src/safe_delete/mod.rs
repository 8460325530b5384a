//! Safe deletion: the one deletion primitive every sweep (and every other remover of
//! `.red/tmp/` entries) uses (`docs/SPEC.md` §1 safety rules).
//!
//! A sweep bug must not be able to reach durable state. So every removal goes through
//! [`DeleteRoot::remove`], which refuses a path unless it lies lexically inside a registered lane
//! of `.red/tmp/` (no `..`) and is reached physically the same way: `.red`, `.red/tmp` and
//! every directory on the way are opened one by one with `O_NOFOLLOW` relative to the one
//! before, so a symlink anywhere on the way is refused, even one swapped in after a check.
//! The removal itself ([`rmtree`]) works from those descriptors too: a symlink is unlinked
//! as a link and never walked, and a directory on another mount than `.red/tmp` (an agent
//! sandbox, a bind mount) is never entered; it is kept and the removal reported as
//! incomplete.

use std::ffi::{CStr, CString, OsStr};
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use crate::layout::{Layout, WORKER_NAMESPACES, parse_legacy_work_dir};
use rmtree::{FileKind, MountId, RmError, c_name, open_dir_at, stat_at, stat_fd};

pub mod rmtree;

pub use rmtree::RemovedKind;

/// Why a path was refused or could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
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
    /// Part of the tree is on another filesystem and was kept, so `path` still exists.
    #[error("{path}: not removed entirely: {source}")]
    Kept {
        path: PathBuf,
        #[source]
        source: RmError,
    },
}

/// One removal: the path and what was there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub path: PathBuf,
    pub kind: RemovedKind,
}

/// `.red/tmp/` of one repo.
#[derive(Debug, Clone)]
pub struct DeleteRoot {
    repo: PathBuf,
    /// `.red/tmp` as the layout spells it: paths handed in are checked against this.
    tmp: PathBuf,
}

/// `.red/tmp` opened, and the mount it lives on.
struct Root {
    fd: OwnedFd,
    mount: MountId,
}

impl DeleteRoot {
    /// Checks `.red/tmp`. `Ok(None)` when it does not exist (nothing to sweep); an error
    /// when `.red` or `.red/tmp` is a symlink or cannot be resolved, because then "inside
    /// `.red/tmp`" would mean somewhere else entirely.
    pub fn open(layout: &Layout) -> Result<Option<DeleteRoot>, DeleteError> {
        let tmp = layout.tmp();
        let root_err = |why: String| DeleteError::Root {
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
        let this = DeleteRoot {
            repo: layout.repo().to_path_buf(),
            tmp,
        };
        this.root()?;
        Ok(Some(this))
    }

    pub fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// Opens `<repo>/.red/tmp` component by component, never through a symlink.
    fn root(&self) -> Result<Root, DeleteError> {
        let root_err = |why: String| DeleteError::Root {
            path: self.tmp.clone(),
            why,
        };
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut fd = open(&self.repo, flags, Mode::empty())
            .map_err(|e| root_err(format!("{}: {e}", self.repo.display())))?;
        for name in [c".red", c"tmp"] {
            fd = open_dir_at(fd.as_fd(), name).map_err(|e| {
                let what = match not_a_dir(fd.as_fd(), name, &e) {
                    Some(FileKind::Symlink) => "is a symlink".to_string(),
                    Some(_) => "is not a directory".to_string(),
                    None => e.to_string(),
                };
                root_err(format!("{}: {what}", name.to_string_lossy()))
            })?;
        }
        let mount = stat_fd(fd.as_fd())
            .map_err(|e| root_err(e.to_string()))?
            .mount;
        Ok(Root { fd, mount })
    }

    /// The names below `.red/tmp` of a path that may be removed, by its spelling alone.
    fn names<'p>(&self, path: &'p Path) -> Result<Vec<&'p OsStr>, DeleteError> {
        let refused = |why: &str| DeleteError::Refused {
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
        Ok(names)
    }

    /// Opens the parent of `path` from the lane root, one real directory at a time on the
    /// root's own filesystem; returns it with the last name.
    fn open_parent(
        &self,
        root: &Root,
        path: &Path,
        names: &[&OsStr],
    ) -> Result<(OwnedFd, CString), DeleteError> {
        let refused = |why: String| DeleteError::Refused {
            path: path.to_path_buf(),
            why,
        };
        let io_err = |at: &Path, source| DeleteError::Io {
            path: at.to_path_buf(),
            source,
        };
        let (last, parents) = names
            .split_last()
            .ok_or_else(|| refused("no parent".into()))?;
        let mut fd = root.fd.try_clone().map_err(|e| io_err(&self.tmp, e))?;
        let mut at = self.tmp.clone();
        for name in parents {
            at.push(name);
            let cname = c_name(name).map_err(|e| io_err(&at, e))?;
            fd = match open_dir_at(fd.as_fd(), &cname) {
                Ok(next) => next,
                Err(e) => {
                    return Err(match not_a_dir(fd.as_fd(), &cname, &e) {
                        Some(FileKind::Symlink) => refused(format!(
                            "{} is a symlink (a symlink on the way)",
                            at.display()
                        )),
                        Some(_) => refused(format!("{} is not a directory", at.display())),
                        None => io_err(&at, e),
                    });
                }
            };
            let meta = stat_fd(fd.as_fd()).map_err(|e| io_err(&at, e))?;
            if !meta.mount.same(root.mount) {
                return Err(refused(format!(
                    "{} is on another filesystem (a mount point)",
                    at.display()
                )));
            }
        }
        let last = c_name(last).map_err(|e| io_err(path, e))?;
        Ok((fd, last))
    }

    /// Checks that `path` may be removed, without touching it. Dry runs call this so a
    /// listing shows the same refusals a real run would hit.
    pub fn check(&self, path: &Path) -> Result<(), DeleteError> {
        let names = self.names(path)?;
        let root = self.root()?;
        self.open_parent(&root, path, &names).map(|_| ())
    }

    /// Removes `path` after the checks of [`DeleteRoot::check`], from the descriptors those
    /// checks opened: a symlink as a link, a directory with its contents (never following
    /// links below it, never entering another mount), a file as a file.
    pub fn remove(&self, path: &Path) -> Result<Removed, DeleteError> {
        let absent = || Removed {
            path: path.to_path_buf(),
            kind: RemovedKind::Absent,
        };
        let names = self.names(path)?;
        let root = self.root()?;
        let (parent, last) = match self.open_parent(&root, path, &names) {
            Ok(p) => p,
            // A parent that vanished means the path is gone too.
            Err(DeleteError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                return Ok(absent());
            }
            Err(e) => return Err(e),
        };
        match rmtree::remove_at(parent.as_fd(), &last, path, root.mount) {
            Ok(kind) => Ok(Removed {
                path: path.to_path_buf(),
                kind,
            }),
            Err(RmError::Io { path, source }) => Err(DeleteError::Io { path, source }),
            Err(source @ RmError::Kept { .. }) => Err(DeleteError::Kept {
                path: path.to_path_buf(),
                source,
            }),
        }
    }
}

/// When opening `name` as a directory failed because it is none (Linux reports a symlink
/// under `O_DIRECTORY|O_NOFOLLOW` as `ENOTDIR`, not `ELOOP`), what it is instead.
fn not_a_dir(dir: BorrowedFd<'_>, name: &CStr, e: &io::Error) -> Option<FileKind> {
    if !matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
        return None;
    }
    Some(stat_at(dir, name).map_or(FileKind::Other, |m| m.kind))
}

/// The registered lanes (`docs/SPEC.md` §1): inside a worker namespace, `claims/`, `logs/` or
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

    fn setup() -> (tempfile::TempDir, Layout, DeleteRoot) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        fs::create_dir_all(layout.tmp()).unwrap();
        let root = DeleteRoot::open(&layout).unwrap().unwrap();
        (dir, layout, root)
    }

    #[test]
    fn missing_tmp_is_none_and_symlinked_tmp_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert!(DeleteRoot::open(&layout).unwrap().is_none());
        let elsewhere = tempfile::tempdir().unwrap();
        fs::create_dir_all(layout.red()).unwrap();
        symlink(elsewhere.path(), layout.tmp()).unwrap();
        let err = DeleteRoot::open(&layout).unwrap_err().to_string();
        assert!(err.contains("is a symlink"), "{err}");
    }

    #[test]
    fn removes_dirs_files_and_links_inside_lanes() {
        let (_d, layout, root) = setup();
        let attempt = layout.worker_namespace("workers").join("w1/5-a1");
        fs::create_dir_all(attempt.join("worktree/src")).unwrap();
        fs::write(attempt.join("worktree/src/x"), "x").unwrap();
        let r = root.remove(&attempt).unwrap();
        assert_eq!(r.kind, RemovedKind::Dir);
        assert!(!attempt.exists());
        assert_eq!(root.remove(&attempt).unwrap().kind, RemovedKind::Absent);

        let pid = layout.worker_namespace("workers").join("w1/worker.pid");
        fs::write(&pid, "1").unwrap();
        assert_eq!(root.remove(&pid).unwrap().kind, RemovedKind::File);

        let legacy = layout.tmp().join("work-12");
        fs::create_dir_all(&legacy).unwrap();
        assert_eq!(root.remove(&legacy).unwrap().kind, RemovedKind::Dir);
    }

    #[test]
    fn symlinks_are_unlinked_never_walked() {
        let (_d, layout, root) = setup();
        let state = layout.state().join("castle");
        fs::create_dir_all(&state).unwrap();
        fs::write(state.join("keep"), "durable").unwrap();
        let w = layout.worker_namespace("workers").join("w1");
        fs::create_dir_all(&w).unwrap();
        // A symlinked attempt dir: the link goes, the target stays.
        symlink(&state, w.join("7-a1")).unwrap();
        assert_eq!(
            root.remove(&w.join("7-a1")).unwrap().kind,
            RemovedKind::Symlink
        );
        assert_eq!(fs::read_to_string(state.join("keep")).unwrap(), "durable");
        // A link inside a removed dir is unlinked, not followed.
        fs::create_dir_all(w.join("8-a1")).unwrap();
        symlink(&state, w.join("8-a1/link")).unwrap();
        root.remove(&w.join("8-a1")).unwrap();
        assert_eq!(fs::read_to_string(state.join("keep")).unwrap(), "durable");
        // A path reached through a symlinked worker dir is refused.
        symlink(&state, layout.worker_namespace("workers").join("w2")).unwrap();
        let through = layout.worker_namespace("workers").join("w2/keep");
        let err = root.remove(&through).unwrap_err().to_string();
        assert!(err.contains("symlink on the way"), "{err}");
        assert!(state.join("keep").exists());
    }

    #[test]
    fn a_component_swapped_for_a_symlink_after_the_check_is_refused() {
        let (_d, layout, root) = setup();
        let castle = layout.state().join("castle");
        fs::create_dir_all(castle.join("5-a1")).unwrap();
        fs::write(castle.join("5-a1/notes"), "durable").unwrap();
        let ns = layout.worker_namespace("workers");
        let attempt = ns.join("w1/5-a1");
        fs::create_dir_all(&attempt).unwrap();
        root.check(&attempt).unwrap();
        // Between the dry-run check and the removal, the worker dir becomes a link.
        fs::rename(ns.join("w1"), ns.join("w1-real")).unwrap();
        symlink(&castle, ns.join("w1")).unwrap();
        let err = root.remove(&attempt).unwrap_err().to_string();
        assert!(err.contains("symlink on the way"), "{err}");
        assert_eq!(
            fs::read_to_string(castle.join("5-a1/notes")).unwrap(),
            "durable"
        );
        // `.red/tmp` itself swapped for a link after the lane was opened.
        let elsewhere = tempfile::tempdir().unwrap();
        fs::create_dir_all(elsewhere.path().join("workers/w2/6-a1")).unwrap();
        fs::rename(layout.tmp(), layout.red().join("tmp-real")).unwrap();
        symlink(elsewhere.path(), layout.tmp()).unwrap();
        let err = root
            .remove(&layout.tmp().join("workers/w2/6-a1"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is a symlink"), "{err}");
        assert!(elsewhere.path().join("workers/w2/6-a1").exists());
    }

    #[test]
    fn refuses_outside_and_unregistered() {
        let (_d, layout, root) = setup();
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
                matches!(root.check(&p), Err(DeleteError::Refused { .. })),
                "{}",
                p.display()
            );
        }
        fs::create_dir_all(layout.tmp().join("work-fix-login")).unwrap();
        assert!(root.remove(&layout.tmp().join("work-fix-login")).is_err());
        assert!(layout.tmp().join("work-fix-login").exists());
    }
}
