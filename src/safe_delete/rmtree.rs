//! Removing a tree through directory file descriptors, for [`super::DeleteRoot`].
//!
//! `std::fs::remove_dir_all` works from a path: a component checked a moment ago can have
//! been swapped for a symlink by the time it is opened, and it descends into whatever is
//! mounted below (an agent's sandbox, a bind mount of someone's home), deleting data that
//! is not the repo's. Here every step is taken relative to a directory fd opened with
//! `O_NOFOLLOW`: a symlink is only ever unlinked as a link, and a directory on another
//! mount than the lane root is never entered. Such a directory is kept and reported, and
//! the directories above it are then left in place (they are not empty).

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

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

/// Which mounted filesystem a file lives on. Bind mounts of the same filesystem share the
/// device number, so the mount id (statx `STATX_MNT_ID`) is compared too where the kernel
/// gives one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountId {
    dev: u64,
    mnt: Option<u64>,
}

impl MountId {
    /// Same device, and the same mount where both ids are known.
    pub fn same(self, other: MountId) -> bool {
        self.dev == other.dev
            && match (self.mnt, other.mnt) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Dir,
    Symlink,
    Other,
}

/// The two facts a removal decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub kind: FileKind,
    pub mount: MountId,
}

#[derive(Debug, thiserror::Error)]
pub enum RmError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Directories on another mount were kept, so the tree could not go entirely.
    #[error(
        "kept {}: on another filesystem (a mount point), never entered",
        list(kept)
    )]
    Kept { kept: Vec<PathBuf> },
}

fn list(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths
        .iter()
        .take(3)
        .map(|p| p.display().to_string())
        .collect();
    match paths.len() {
        n if n > 3 => format!("{} and {} more", shown.join(", "), n - 3),
        _ => shown.join(", "),
    }
}

fn statx(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<Meta> {
    let mut buf = MaybeUninit::<libc::statx>::zeroed();
    let mask = libc::STATX_TYPE | libc::STATX_MNT_ID;
    // SAFETY: `name` is NUL-terminated, `buf` is a writable statx the kernel fills in.
    let rc = unsafe {
        libc::statx(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags,
            mask,
            buf.as_mut_ptr(),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            // No statx (an old kernel, a strict seccomp filter): the device alone decides.
            return fstatat_meta(dir, name, flags);
        }
        return Err(e);
    }
    // SAFETY: statx succeeded, and a zeroed statx is a valid value in any case.
    let st = unsafe { buf.assume_init() };
    let fmt = u32::from(st.stx_mode) & libc::S_IFMT;
    let kind = match fmt {
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        _ => FileKind::Other,
    };
    let dev = libc::makedev(st.stx_dev_major, st.stx_dev_minor);
    let mnt = (st.stx_mask & libc::STATX_MNT_ID != 0).then_some(st.stx_mnt_id);
    Ok(Meta {
        kind,
        mount: MountId { dev, mnt },
    })
}

fn fstatat_meta(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<Meta> {
    let st = fstatat(dir, name, AtFlags::from_bits_truncate(flags))?;
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        _ => FileKind::Other,
    };
    Ok(Meta {
        kind,
        mount: MountId {
            dev: st.st_dev,
            mnt: None,
        },
    })
}

/// `name` inside `dir`, not following a symlink.
pub fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Meta> {
    statx(dir, name, libc::AT_SYMLINK_NOFOLLOW)
}

/// The open file `fd` itself.
pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<Meta> {
    statx(fd, c"", libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)
}

/// Opens the directory `name` inside `dir`; a symlink there fails with `ELOOP`, anything
/// but a directory with `ENOTDIR`.
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(dir, name, flags, Mode::empty()).map_err(io::Error::from)
}

/// `name` as a C string; a file name never holds a NUL byte.
pub fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Removes `name` inside `parent` (reported as `path`): a symlink or file is unlinked, a
/// directory emptied and removed, never leaving the `root` mount.
pub fn remove_at(
    parent: BorrowedFd<'_>,
    name: &CStr,
    path: &Path,
    root: MountId,
) -> Result<RemovedKind, RmError> {
    let io_err = |source| RmError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = match stat_at(parent, name) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(RemovedKind::Absent),
        Err(e) => return Err(io_err(e)),
    };
    let mut kept = Vec::new();
    let kind = remove_entry(parent, name, meta, path, root, &mut kept)?;
    if !kept.is_empty() {
        return Err(RmError::Kept { kept });
    }
    Ok(kind)
}

/// One entry whose metadata was just read; directories on another mount go to `kept`.
fn remove_entry(
    parent: BorrowedFd<'_>,
    name: &CStr,
    meta: Meta,
    path: &Path,
    root: MountId,
    kept: &mut Vec<PathBuf>,
) -> Result<RemovedKind, RmError> {
    let io_err = |source| RmError::Io {
        path: path.to_path_buf(),
        source,
    };
    let unlink = |flag| match unlinkat(parent, name, flag) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(io_err(e.into())),
    };
    match meta.kind {
        FileKind::Symlink => unlink(UnlinkatFlags::NoRemoveDir).map(|()| RemovedKind::Symlink),
        FileKind::Other => unlink(UnlinkatFlags::NoRemoveDir).map(|()| RemovedKind::File),
        FileKind::Dir => {
            if !meta.mount.same(root) {
                kept.push(path.to_path_buf());
                return Ok(RemovedKind::Dir);
            }
            let fd = match open_dir_at(parent, name) {
                Ok(fd) => fd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(RemovedKind::Absent),
                // Swapped for a symlink or a file since the stat: remove that, as what it is.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                    return unlink(UnlinkatFlags::NoRemoveDir).map(|()| RemovedKind::Symlink);
                }
                Err(e) => return Err(io_err(e)),
            };
            // What was opened, not what was stat'ed, decides: a mount can appear between.
            let opened = stat_fd(fd.as_fd()).map_err(io_err)?;
            if !opened.mount.same(root) {
                kept.push(path.to_path_buf());
                return Ok(RemovedKind::Dir);
            }
            let before = kept.len();
            empty_dir(fd, path, root, kept)?;
            if kept.len() == before {
                unlink(UnlinkatFlags::RemoveDir)?;
            }
            Ok(RemovedKind::Dir)
        }
    }
}

/// Removes everything inside the directory open as `fd`.
fn empty_dir(
    fd: OwnedFd,
    path: &Path,
    root: MountId,
    kept: &mut Vec<PathBuf>,
) -> Result<(), RmError> {
    let io_err = |source: io::Error| RmError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut dir = Dir::from_fd(fd).map_err(|e| io_err(e.into()))?;
    // Names first, then removals: the listing is not disturbed by its own deletions.
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry.map_err(|e| io_err(e.into()))?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    let dfd = dir.as_fd();
    for name in names {
        let child = path.join(OsStr::from_bytes(name.to_bytes()));
        let meta = match stat_at(dfd, &name) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(RmError::Io {
                    path: child,
                    source: e,
                });
            }
        };
        remove_entry(dfd, &name, meta, &child, root, kept)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn open(p: &Path) -> OwnedFd {
        nix::fcntl::open(p, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn statx_and_the_fallback_agree_on_kind_and_device() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("d")).unwrap();
        fs::write(dir.path().join("f"), "x").unwrap();
        std::os::unix::fs::symlink("d", dir.path().join("l")).unwrap();
        let fd = open(dir.path());
        for (name, kind) in [
            (c"d", FileKind::Dir),
            (c"f", FileKind::Other),
            (c"l", FileKind::Symlink),
        ] {
            let a = stat_at(fd.as_fd(), name).unwrap();
            let b = fstatat_meta(fd.as_fd(), name, libc::AT_SYMLINK_NOFOLLOW).unwrap();
            assert_eq!((a.kind, b.kind), (kind, kind));
            assert!(a.mount.same(b.mount));
        }
        let fallback = fstatat_meta(fd.as_fd(), c"", libc::AT_EMPTY_PATH).unwrap();
        assert!(stat_fd(fd.as_fd()).unwrap().mount.same(fallback.mount));
    }

    #[test]
    fn removes_a_tree_and_unlinks_links_without_following_them() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("keep"), "mine").unwrap();
        let t = dir.path().join("t");
        fs::create_dir_all(t.join("a/b/c")).unwrap();
        fs::write(t.join("a/b/c/f"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), t.join("a/out")).unwrap();
        let fd = open(dir.path());
        let root = stat_fd(fd.as_fd()).unwrap().mount;
        let removed = remove_at(fd.as_fd(), c"t", &t, root).unwrap();
        assert_eq!(removed, RemovedKind::Dir);
        assert!(!t.exists());
        assert!(outside.path().join("keep").exists());
        let again = remove_at(fd.as_fd(), c"t", &t, root).unwrap();
        assert_eq!(again, RemovedKind::Absent);
    }
}
