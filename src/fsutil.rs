//! Small filesystem helpers shared by every module that writes files other tools read.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::layout::tmp_file;

/// Writes `bytes` to `path` atomically: `<path>.tmp` is written and synced, then renamed
/// over `path`, so a reader sees the old content or the new one, never a torn write.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let tmp = tmp_file(path);
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

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

/// Why a small file was not read.
#[derive(Debug, thiserror::Error)]
pub enum SmallFileError {
    #[error("is a symlink")]
    Symlink,
    #[error("not a regular file")]
    NotRegular,
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Reads a small file that other processes write (a pid file, a start token, a state file)
/// without trusting what sits at the path: a symlink is not followed (it could point at
/// `/dev/zero` or at a file outside the repo), a FIFO is not waited on, nothing but a
/// regular file is read, and never more than `limit` bytes. `Ok(None)` when absent.
pub fn read_small_file(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, SmallFileError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(SmallFileError::Symlink),
        Err(e) => return Err(e.into()),
    };
    if !file.metadata()?.is_file() {
        return Err(SmallFileError::NotRegular);
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(SmallFileError::TooLarge(limit));
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b/file");
        atomic_write(&p, b"one").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
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
            Err(SmallFileError::NotRegular)
        ));
        // A FIFO with no writer: opening and judging it must not block.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            read_small_file(&fifo, 8),
            Err(SmallFileError::NotRegular)
        ));
    }
}
