//! The fleets of this user on this host, for `afk-supervisor list` (as `pm2 list`): every
//! supervisor appends its checkout to `$XDG_STATE_HOME/afk-supervisor/fleets` (else
//! `~/.local/state/afk-supervisor/fleets`), one absolute path a line, once. The list is the
//! checkouts seen; which of them run now is read from each one's own pid file.
//!
//! The file is appended to under an `flock` of it, re-read first, so supervisors starting
//! together never write a path twice. A file that is not a regular file, or too big, is
//! left alone with the error. Lines leave it only by [`forget`], under the same lock: the
//! demo forgets the scratch checkout it removed, and `list --forget-gone` the checkouts
//! that are no longer there.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::fsutil::{self, SmallFileError};

/// Largest registry read (some 10,000 checkouts).
pub const MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum FleetsError {
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        source: SmallFileError,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("neither XDG_STATE_HOME nor HOME is set: no place for the list of fleets")]
    NoHome,
}

/// The registry's path from these variables' values (`XDG_STATE_HOME`, `HOME`); a relative
/// `XDG_STATE_HOME` is ignored, as the XDG spec says.
pub fn path_from(xdg_state_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    let base = match xdg_state_home.filter(|s| s.starts_with('/')) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(home.filter(|h| !h.is_empty())?).join(".local/state"),
    };
    Some(base.join("afk-supervisor").join("fleets"))
}

/// The registry of this process's user.
pub fn path() -> Result<PathBuf, FleetsError> {
    let x = std::env::var("XDG_STATE_HOME").ok();
    let h = std::env::var("HOME").ok();
    path_from(x.as_deref(), h.as_deref()).ok_or(FleetsError::NoHome)
}

fn parse(text: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| l.starts_with('/')) {
        let p = PathBuf::from(line);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// Every checkout recorded in `file`, in the order first seen; none when it is absent.
pub fn read(file: &Path) -> Result<Vec<PathBuf>, FleetsError> {
    let text = fsutil::read_small_text(file, MAX_BYTES).map_err(|source| FleetsError::File {
        path: file.to_path_buf(),
        source,
    })?;
    Ok(text.as_deref().map(parse).unwrap_or_default())
}

/// The registry opened for a change, locked (the lock goes with the file), with its text.
fn open_locked(file: &Path, create: bool) -> Result<Option<(std::fs::File, Vec<u8>)>, FleetsError> {
    let io = |source| FleetsError::Io {
        path: file.to_path_buf(),
        source,
    };
    if create && let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|source| FleetsError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).append(create).write(!create).create(create);
    let f = fsutil::open_regular(file, opts, fsutil::Links::Refuse).map_err(|source| {
        FleetsError::File {
            path: file.to_path_buf(),
            source,
        }
    })?;
    let Some(mut f) = f else {
        return Ok(None);
    };
    f.lock().map_err(io)?;
    let mut bytes = Vec::new();
    f.rewind()
        .and_then(|()| (&mut f).take(MAX_BYTES + 1).read_to_end(&mut bytes))
        .map_err(io)?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(FleetsError::File {
            path: file.to_path_buf(),
            source: SmallFileError::TooLarge(MAX_BYTES),
        });
    }
    Ok(Some((f, bytes)))
}

/// Removes from `file` every checkout `gone` says to forget; returns them. Rewritten in
/// place under the lock `record` takes (a rename would let a `record` waiting on the old
/// file append where no reader looks). A missing file forgets nothing.
pub fn forget(file: &Path, gone: impl Fn(&Path) -> bool) -> Result<Vec<PathBuf>, FleetsError> {
    let io = |source| FleetsError::Io {
        path: file.to_path_buf(),
        source,
    };
    let Some((mut f, bytes)) = open_locked(file, false)? else {
        return Ok(Vec::new());
    };
    let (forgotten, kept): (Vec<PathBuf>, Vec<PathBuf>) = parse(&String::from_utf8_lossy(&bytes))
        .into_iter()
        .partition(|p| gone(p));
    if forgotten.is_empty() {
        return Ok(forgotten);
    }
    let mut text = String::new();
    for p in &kept {
        text.push_str(&p.to_string_lossy());
        text.push('\n');
    }
    f.set_len(0)
        .and_then(|()| f.rewind())
        .and_then(|()| f.write_all(text.as_bytes()))
        .map_err(io)?;
    Ok(forgotten)
}

/// Appends `repo` to `file` unless it is there already.
pub fn record(file: &Path, repo: &Path) -> Result<(), FleetsError> {
    let io = |source| FleetsError::Io {
        path: file.to_path_buf(),
        source,
    };
    let Some((mut f, bytes)) = open_locked(file, true)? else {
        return Err(io(std::io::Error::from(std::io::ErrorKind::NotFound)));
    };
    if parse(&String::from_utf8_lossy(&bytes))
        .iter()
        .any(|p| p == repo)
    {
        return Ok(());
    }
    let mut line = String::new();
    if bytes.last().is_some_and(|b| *b != b'\n') {
        line.push('\n');
    }
    line.push_str(&repo.to_string_lossy());
    line.push('\n');
    f.write_all(line.as_bytes()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_the_list_lives() {
        let p = |x, h| path_from(x, h).map(|p| p.display().to_string());
        assert_eq!(
            p(Some("/x/state"), Some("/home/u")).as_deref(),
            Some("/x/state/afk-supervisor/fleets")
        );
        assert_eq!(
            p(Some("relative"), Some("/home/u")).as_deref(),
            Some("/home/u/.local/state/afk-supervisor/fleets")
        );
        assert_eq!(p(None, None), None);
    }

    #[test]
    fn records_once_and_reads_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a/fleets");
        assert!(read(&file).unwrap().is_empty());
        record(&file, Path::new("/r/one")).unwrap();
        record(&file, Path::new("/r/two")).unwrap();
        record(&file, Path::new("/r/one")).unwrap();
        assert_eq!(
            read(&file).unwrap(),
            [PathBuf::from("/r/one"), PathBuf::from("/r/two")]
        );
        std::fs::write(&file, "/r/x").unwrap();
        record(&file, Path::new("/r/y")).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "/r/x\n/r/y\n");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(record(&link, Path::new("/r/z")).is_err());
        assert!(read(&link).is_err());
    }
}
