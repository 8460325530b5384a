//! Small filesystem helpers shared by every module that reads or writes files other tools
//! (or a hostile hand) can put in place: the pid files, the supervisor lane's control and
//! state files, the event log, slot logs, a worker's liveness file, the config file.
//!
//! The rules, the same for every such file: a symlink at the path is not followed (it could
//! point at `/dev/zero` or outside the repo), every open is non-blocking (a FIFO is never
//! waited on), nothing but a regular file is read or written, and a read never takes more
//! than the caller's cap. Each refusal is a [`SmallFileError`] saying what is wrong, for a
//! one-line message that the caller prefixes with the path.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::layout::tmp_file;

/// Why a file was not read or written.
#[derive(Debug, thiserror::Error)]
pub enum SmallFileError {
    #[error("is a symlink (not followed)")]
    Symlink,
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl From<SmallFileError> for io::Error {
    fn from(e: SmallFileError) -> io::Error {
        match e {
            SmallFileError::Io(e) => e,
            SmallFileError::TooLarge(_) => io::Error::new(io::ErrorKind::FileTooLarge, e),
            other => io::Error::new(io::ErrorKind::InvalidInput, other),
        }
    }
}

/// What a non-regular file is, for messages.
fn kind_word(t: fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_symlink() {
        "a symlink"
    } else {
        "not a file"
    }
}

/// Whether a symlink at the last component of the path is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// The rule for every file under `.red/tmp/`: a symlink is refused.
    Refuse,
    /// For a file the operator names or links on purpose (the config file): the link is
    /// followed, but what it leads to must still be a regular file.
    Follow,
}

/// Opens `path` with the caller's `opts` under the rules above: non-blocking (a FIFO with
/// no peer fails at once, one with a peer is refused after the open), close-on-exec, no
/// symlink followed unless `links` says so, and only a regular file is returned (with
/// `O_NONBLOCK` cleared again, so a child inheriting it writes normally). `Ok(None)` when
/// nothing is at the path and `opts` does not create.
pub fn open_regular(
    path: &Path,
    mut opts: fs::OpenOptions,
    links: Links,
) -> Result<Option<fs::File>, SmallFileError> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = match opts.custom_flags(flags).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) && links == Links::Refuse => {
            return Err(SmallFileError::Symlink);
        }
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            return Err(SmallFileError::NotRegular("a directory"));
        }
        // Opening a FIFO for writing without a reader, non-blocking.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            return Err(SmallFileError::NotRegular(
                fs::symlink_metadata(path).map_or("not a file", |m| kind_word(m.file_type())),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let t = file.metadata()?.file_type();
    if !t.is_file() {
        return Err(SmallFileError::NotRegular(kind_word(t)));
    }
    clear_nonblock(&file)?;
    Ok(Some(file))
}

fn clear_nonblock(file: &fs::File) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(file, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK;
    fcntl(file, FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok(())
}

/// Reads a small file that other processes write (a pid file, a start token, a state file)
/// without trusting what sits at the path (see the module rules), never more than `limit`
/// bytes. `Ok(None)` when absent.
pub fn read_small_file(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, SmallFileError> {
    read_capped(path, limit, Links::Refuse)
}

/// [`read_small_file`], decoded as UTF-8 (invalid sequences replaced: the parser then
/// reports the content as corrupt).
pub fn read_small_text(path: &Path, limit: u64) -> Result<Option<String>, SmallFileError> {
    Ok(read_small_file(path, limit)?.map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// Like [`read_small_file`], with the choice of following a symlink.
pub fn read_capped(
    path: &Path,
    limit: u64,
    links: Links,
) -> Result<Option<Vec<u8>>, SmallFileError> {
    let mut opts = fs::OpenOptions::new();
    opts.read(true);
    let Some(file) = open_regular(path, opts, links)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(SmallFileError::TooLarge(limit));
    }
    Ok(Some(bytes))
}

/// Opens `path` for appending, creating it when absent; refuses
/// a symlink, a FIFO, a directory or anything else that is not a regular file.
pub fn open_append(path: &Path) -> Result<fs::File, SmallFileError> {
    let mut opts = fs::OpenOptions::new();
    opts.create(true).append(true);
    open_regular(path, opts, Links::Refuse)?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound).into())
}

/// Opens (creating it when absent, never truncating) a file that is only `flock`ed.
pub fn open_lock_file(path: &Path) -> Result<fs::File, SmallFileError> {
    let mut opts = fs::OpenOptions::new();
    opts.create(true).truncate(false).write(true);
    open_regular(path, opts, Links::Refuse)?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound).into())
}

/// Whether a regular file is at `path` (a sentinel whose presence is the message).
/// `Ok(false)` when nothing is there; anything else at the path is an error saying what.
pub fn regular_file_present(path: &Path) -> Result<bool, SmallFileError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => Ok(true),
        Ok(m) if m.file_type().is_symlink() => Err(SmallFileError::Symlink),
        Ok(m) => Err(SmallFileError::NotRegular(kind_word(m.file_type()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether [`atomic_write`] can replace `path`: neither it nor its `<path>.tmp` is a
/// directory (anything else at either path is replaced). Checked at start-up for the
/// files a process cannot run without writing.
pub fn check_replaceable(path: &Path) -> Result<(), NotReplaceable> {
    for p in [path.to_path_buf(), tmp_file(path)] {
        if let Ok(m) = fs::symlink_metadata(&p)
            && m.is_dir()
        {
            return Err(NotReplaceable(p));
        }
    }
    Ok(())
}

/// A directory where [`atomic_write`] must put a file.
#[derive(Debug, thiserror::Error)]
#[error("{}: is a directory; it cannot be written", .0.display())]
pub struct NotReplaceable(pub std::path::PathBuf);

/// Writes `bytes` to `path` atomically and durably: `<path>.tmp` is written and synced,
/// then renamed over `path` and the directory synced, so a reader sees the old content or
/// the new one, never a torn write, and once this returns the new content survives a crash
/// of the machine.
///
/// Whatever is at `<path>.tmp` is this writer's to replace (a crashed write's leftover, a
/// planted FIFO or symlink): it is removed first, never followed or opened, and the tmp is
/// created afresh (`O_CREAT|O_EXCL|O_NOFOLLOW|O_NONBLOCK`). A directory there is not
/// removed: the write fails, naming it. The rename replaces a symlink or FIFO at `path`
/// itself, not what it points at.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_and_rename(path, bytes, Durability::Synced)
}

/// [`atomic_write`] without the sync: as atomic for every reader, but a crash of the
/// machine (not of this process: what was written is in the page cache) may leave the old
/// content, or on a file system that does not order the rename after the data, an empty
/// file. For a file rewritten often whose content is worthless after a reboot: the
/// heartbeat (`state.toon`), which describes processes a reboot ended, and which the next
/// supervisor rewrites at its start.
pub fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_and_rename(path, bytes, Durability::Cached)
}

/// Whether a write waits for its data to reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Synced before the write returns (and, for a file the write created, its
    /// directory entry too, where the write says so).
    Synced,
    /// Left in the page cache: a crash of the machine may lose it.
    Cached,
}

fn write_and_rename(path: &Path, bytes: &[u8], sync: Durability) -> io::Result<()> {
    let tmp = tmp_file(path);
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", tmp.display()));
    let mut f = create_tmp(path, &tmp).map_err(named)?;
    let result = (|| {
        f.write_all(bytes)?;
        if sync == Durability::Synced {
            f.sync_all()?;
            observe(|| SyncSeen::Data(tmp.clone()));
        }
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    // The rename is an entry of the directory: synced too, or a crash of the machine may
    // bring the old content back. A failure here leaves the new content in place.
    if sync == Durability::Synced {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        sync_dir(dir).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "{}: written, but its directory not synced: {e}",
                    dir.display()
                ),
            )
        })?;
    }
    Ok(())
}

/// A new, empty file at `tmp`, beside `path`: its directory made when missing, and whatever
/// was left at `tmp` (a file, a FIFO, a symlink, never followed) removed first, but a
/// directory, which is an error. The common case (the directory there, nothing at `tmp`)
/// is one `open`: the heartbeat is replaced up to once a second, and the `mkdir`
/// and `lstat` asked ahead of every write were three of its eight system calls.
fn create_tmp(path: &Path, tmp: &Path) -> io::Result<fs::File> {
    let create = || {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(tmp)
    };
    match create() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if fs::symlink_metadata(tmp)?.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    "is a directory".to_string(),
                ));
            }
            remove_file_if_exists(tmp)?;
        }
        other => return other,
    }
    create()
}

/// Syncs directory `dir` itself, so the entries made in it (a file created there) survive
/// a crash of the machine. A symlink at `dir` is refused, never followed.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?
        .sync_all()?;
    observe(|| SyncSeen::Dir(dir.to_path_buf()));
    Ok(())
}

/// Syncs the data written to `f` (opened at `path`) to the disk: what an appended record
/// needs (its size, not its times).
pub fn sync_data(f: &fs::File, path: &Path) -> io::Result<()> {
    f.sync_data()?;
    observe(|| SyncSeen::Data(path.to_path_buf()));
    Ok(())
}

/// A sync that succeeded, as the unit tests see it: a sync cannot be seen from the outside
/// short of a crash of the machine, so the durability promises (README, "fsync only where
/// durability needs it")
/// are checked by the order of these.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))] // built and dropped unseen outside the unit tests
pub(crate) enum SyncSeen {
    /// A file's data.
    Data(PathBuf),
    /// A directory's entries.
    Dir(PathBuf),
}

#[cfg(test)]
thread_local! {
    /// This thread's syncs since the last [`take_syncs`]: per thread, so tests running side
    /// by side see only their own.
    static SYNCS: std::cell::RefCell<Vec<SyncSeen>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The syncs this thread made since the last call, in order.
#[cfg(test)]
pub(crate) fn take_syncs() -> Vec<SyncSeen> {
    SYNCS.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

#[cfg(test)]
fn observe(seen: impl FnOnce() -> SyncSeen) {
    SYNCS.with(|s| s.borrow_mut().push(seen()));
}

#[cfg(not(test))]
fn observe(_: impl FnOnce() -> SyncSeen) {}

/// Removes a file, treating "already gone" as success.
pub fn remove_file_if_exists(path: &Path) -> io::Result<()> {
    gone_is_ok(fs::remove_file(path))
}

/// Removes an empty directory, treating "already gone" as success.
pub fn remove_dir_if_exists(path: &Path) -> io::Result<()> {
    gone_is_ok(fs::remove_dir(path))
}

fn gone_is_ok(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_synced_and_a_symlink_or_file_in_its_place_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::create_dir(&real).unwrap();
        sync_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        // O_NOFOLLOW with O_DIRECTORY: the link is not a directory (ENOTDIR, or ELOOP).
        let e = sync_dir(&link).unwrap_err().raw_os_error();
        assert!(matches!(e, Some(libc::ENOTDIR | libc::ELOOP)), "{e:?}");
        let file = dir.path().join("file");
        fs::write(&file, b"x").unwrap();
        assert_eq!(
            sync_dir(&file).unwrap_err().raw_os_error(),
            Some(libc::ENOTDIR)
        );
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b/file");
        atomic_write(&p, b"one").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert!(!tmp_file(&p).exists());
        // The unsynced replace is the same rename: a new file, never the old one rewritten.
        use std::os::unix::fs::MetadataExt;
        let before = fs::metadata(&p).unwrap().ino();
        let held = fs::File::open(&p).unwrap();
        replace_file(&p, b"three").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"three");
        assert_ne!(fs::metadata(&p).unwrap().ino(), before);
        assert_eq!(std::io::read_to_string(held).unwrap(), "two");
        assert!(!tmp_file(&p).exists());
        remove_file_if_exists(&p).unwrap();
        remove_file_if_exists(&p).unwrap();
        assert!(!p.exists());
    }

    #[test]
    fn small_files_are_read_only_when_regular_and_small() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        assert!(read_small_file(&p, 8).unwrap().is_none());
        fs::write(&p, b"12345678").unwrap();
        assert_eq!(read_small_file(&p, 8).unwrap().unwrap(), b"12345678");
        fs::write(&p, b"123456789").unwrap();
        assert!(matches!(
            read_small_file(&p, 8),
            Err(SmallFileError::TooLarge(8))
        ));
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(
            read_small_file(&link, 8),
            Err(SmallFileError::Symlink)
        ));
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        assert!(matches!(
            read_small_file(&sub, 8),
            Err(SmallFileError::NotRegular("a directory"))
        ));
        // A FIFO with no writer: opening and judging it must not block.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            read_small_file(&fifo, 8),
            Err(SmallFileError::NotRegular("a FIFO"))
        ));
        // Following a link is a choice; what it leads to must still be a regular file.
        assert!(matches!(
            read_capped(&link, 8, Links::Follow),
            Err(SmallFileError::NotRegular("a character device"))
        ));
        let good = dir.path().join("good");
        std::os::unix::fs::symlink(&p, &good).unwrap();
        assert!(read_capped(&good, 8, Links::Follow).is_err());
        fs::write(&p, b"1234").unwrap();
        assert_eq!(
            read_capped(&good, 8, Links::Follow).unwrap().unwrap(),
            b"1234"
        );
        assert!(matches!(
            read_small_file(&good, 8),
            Err(SmallFileError::Symlink)
        ));
    }

    fn fifo_at(p: &Path) {
        nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap();
    }

    #[test]
    fn appends_refuse_what_is_not_a_regular_file_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let mut f = open_append(&p).unwrap();
        f.write_all(b"a\n").unwrap();
        open_append(&p).unwrap().write_all(b"b\n").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"a\nb\n");
        let fifo = dir.path().join("fifo");
        fifo_at(&fifo);
        assert!(matches!(
            open_append(&fifo),
            Err(SmallFileError::NotRegular("a FIFO"))
        ));
        // With a reader on the FIFO the open itself succeeds: the type check refuses it.
        let _reader = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        assert!(matches!(
            open_append(&fifo),
            Err(SmallFileError::NotRegular("a FIFO"))
        ));
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(open_append(&link), Err(SmallFileError::Symlink)));
        assert!(matches!(
            open_lock_file(&link),
            Err(SmallFileError::Symlink)
        ));
        assert!(matches!(
            open_append(dir.path()),
            Err(SmallFileError::NotRegular("a directory"))
        ));
        assert!(regular_file_present(&p).unwrap());
        assert!(!regular_file_present(&dir.path().join("none")).unwrap());
        assert!(regular_file_present(&fifo).is_err());
        assert!(regular_file_present(&link).is_err());
    }

    #[test]
    fn atomic_write_replaces_whatever_is_at_the_tmp_path_but_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.toon");
        let tmp = tmp_file(&p);
        fifo_at(&tmp);
        atomic_write(&p, b"one").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"one");
        // A symlink at the tmp path is removed as a link; its target is untouched.
        let victim = dir.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        // A symlink at the path itself is replaced, not written through.
        fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        atomic_write(&p, b"three").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert!(fs::symlink_metadata(&p).unwrap().is_file());
        fs::create_dir(&tmp).unwrap();
        let err = atomic_write(&p, b"four").unwrap_err().to_string();
        assert!(err.contains("state.toon.tmp: is a directory"), "{err}");
        assert!(tmp.is_dir());
        assert!(check_replaceable(&p).is_err());
        fs::remove_dir(&tmp).unwrap();
        assert!(check_replaceable(&p).is_ok());
    }

    /// A synced write syncs the new content before the rename makes it the file, then the
    /// directory the rename changed; a cached one syncs nothing.
    #[test]
    fn a_synced_write_syncs_its_data_then_its_directory_and_a_cached_one_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.toon");
        take_syncs();
        atomic_write(&p, b"one\n").unwrap();
        assert_eq!(
            take_syncs(),
            [
                SyncSeen::Data(tmp_file(&p)),
                SyncSeen::Dir(dir.path().to_path_buf())
            ]
        );
        replace_file(&p, b"two\n").unwrap();
        assert_eq!(take_syncs(), []);
        assert_eq!(fs::read(&p).unwrap(), b"two\n");
    }
}
