//! Small filesystem helpers shared by every module that writes files other tools read.

use std::fs;
use std::io::{self, Write};
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
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
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
}
