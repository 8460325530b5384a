//! Host-wide, non-blocking locks keyed by a tracker's identity, so that two checkouts of one
//! repo (or two supervisors of one tracker) never sweep it at the same time.
//!
//! A lock is an exclusive `flock` on a file in the per-user runtime dir
//! (`$XDG_RUNTIME_DIR/afk-supervisor/`, else `<temp dir>/afk-supervisor-<uid>/`, which honours
//! `TMPDIR`). The kernel drops it when its holder dies, so a crash never leaves a stale lock.
//! The holder writes its pid and a label (its checkout) into the file, for the loser's
//! "held by" message; the content is advisory, the `flock` alone decides.
//!
//! The lock belongs to the open file, which a child forked by any thread shares until it
//! execs (the descriptor is close-on-exec); so a lock is released with an explicit unlock,
//! never just by closing.

use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where the host-wide locks live for this user.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("afk-supervisor"),
        _ => std::env::temp_dir().join(format!("afk-supervisor-{}", euid())),
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A stable key for an identity (FNV-1a, 64 bit, hex): the same across builds and Rust
/// versions, unlike `std`'s hasher, so two different binaries on one host agree on the file.
pub fn key(identity: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in identity.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The belt's owner lock: held for the belt's whole life, so one belt per tracker sweeps.
pub fn belt_lock_path(dir: &Path, identity: &str) -> PathBuf {
    dir.join(format!("belt-{}.lock", key(identity)))
}

/// The pass lock: held while one pass lists and writes, so a one-shot `unblock`, a boot
/// suite and a belt never promote (and comment on) the same issue twice.
pub fn pass_lock_path(dir: &Path, identity: &str) -> PathBuf {
    dir.join(format!("unblock-{}.lock", key(identity)))
}

/// Who holds a lock, as its file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: Option<i32>,
    pub label: String,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "pid {pid}")?,
            None => f.write_str("another process")?,
        }
        if !self.label.is_empty() {
            write!(f, " ({})", self.label)?;
        }
        Ok(())
    }
}

impl Holder {
    fn parse(text: &str) -> Self {
        let mut lines = text.lines();
        let pid = lines
            .next()
            .and_then(|l| l.trim().parse::<i32>().ok())
            .filter(|&p| p > 0);
        Holder {
            pid,
            label: lines.next().unwrap_or("").trim().to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("lock {}: {source}", path.display())]
pub struct LockError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// A held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct HeldLock {
    file: File,
    path: PathBuf,
}

impl HeldLock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        // Unlock explicitly rather than by closing: a child forked by another thread of
        // this process shares the descriptor until it execs, and a mere close would leave
        // the lock held through that copy. LOCK_UN releases it for every copy.
        let _ = self.file.unlock();
    }
}

#[derive(Debug)]
pub enum Acquired {
    Held(HeldLock),
    Busy(Holder),
}

/// Takes the lock at `path` without waiting.
pub fn try_acquire(path: &Path, label: &str) -> Result<Acquired, LockError> {
    let err = |source| LockError {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        ensure_private_dir(dir).map_err(err)?;
    }
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(err)?;
    match file.try_lock() {
        Ok(()) => {
            let note = format!("{}\n{}\n", std::process::id(), label);
            (|| {
                file.set_len(0)?;
                file.seek(SeekFrom::Start(0))?;
                file.write_all(note.as_bytes())
            })()
            .map_err(err)?;
            Ok(Acquired::Held(HeldLock {
                file,
                path: path.to_path_buf(),
            }))
        }
        Err(TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            Ok(Acquired::Busy(Holder::parse(&text)))
        }
        Err(TryLockError::Error(e)) => Err(err(e)),
    }
}

/// Creates the lock dir private to this user, and refuses one that is a symlink or belongs
/// to someone else (a shared temp dir is writable by everyone).
fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::other("not a directory"));
    }
    if meta.uid() != euid() {
        return Err(io::Error::other(format!(
            "owned by uid {}, not by this user",
            meta.uid()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_stable() {
        assert_eq!(key(""), "cbf29ce484222325");
        assert_eq!(key("a"), "af63dc4c8601ec8c");
        assert_ne!(key("github:o/r"), key("github:o/s"));
    }

    #[test]
    fn second_taker_sees_the_holder_until_release() {
        let dir = tempfile::tempdir().unwrap();
        let path = belt_lock_path(&dir.path().join("locks"), "github:o/r");
        let Acquired::Held(held) = try_acquire(&path, "/checkout/one").unwrap() else {
            panic!("first take must win");
        };
        match try_acquire(&path, "/checkout/two").unwrap() {
            Acquired::Busy(h) => {
                assert_eq!(h.pid, Some(std::process::id() as i32));
                assert_eq!(h.label, "/checkout/one");
                assert_eq!(
                    h.to_string(),
                    format!("pid {} (/checkout/one)", std::process::id())
                );
            }
            Acquired::Held(_) => panic!("lock taken twice"),
        }
        drop(held);
        assert!(matches!(
            try_acquire(&path, "/checkout/two").unwrap(),
            Acquired::Held(_)
        ));
    }

    #[test]
    fn refuses_a_symlinked_lock_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        fs::write(&target, "keep").unwrap();
        let path = dir.path().join("belt-x.lock");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(try_acquire(&path, "").is_err());
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
    }

    #[test]
    fn holder_parse_tolerates_garbage() {
        assert_eq!(
            Holder::parse(""),
            Holder {
                pid: None,
                label: String::new()
            }
        );
        assert_eq!(Holder::parse("x\n").to_string(), "another process");
        assert_eq!(Holder::parse("-3\nl\n").to_string(), "another process (l)");
    }
}
