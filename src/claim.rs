//! Claim locks `.red/tmp/claims/<N>/pid` (SPEC §1): the exclusive `mkdir` is the lock, so
//! two workers racing for one issue can never both win, whatever the tracker says.

pub mod marks;
pub mod stale;
pub mod tracked;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::layout::Layout;
use crate::pidfile;

/// A held claim; released explicitly (a crashed holder's claim is released by orphan cleanup).
#[derive(Debug)]
pub struct Claim {
    dir: PathBuf,
    issue: u64,
}

impl Claim {
    /// Takes the claim of `issue` for this process, or `None` when someone holds it.
    pub fn try_take(layout: &Layout, issue: u64) -> io::Result<Option<Claim>> {
        let root = layout.claims();
        fs::create_dir_all(&root)?;
        let dir = root.join(issue.to_string());
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(None),
            Err(e) => return Err(e),
        }
        let claim = Claim { dir, issue };
        if let Err(e) = pidfile::write_pid_file(&claim.pid_file(), std::process::id() as i32) {
            let _ = claim.release();
            return Err(e);
        }
        Ok(Some(claim))
    }

    pub fn issue(&self) -> u64 {
        self.issue
    }

    pub fn pid_file(&self) -> PathBuf {
        self.dir.join("pid")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes the pid file, its start token and the claim dir.
    pub fn release(self) -> io::Result<()> {
        pidfile::remove_pid_file(&self.pid_file())?;
        crate::fsutil::remove_dir_if_exists(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pidfile::{MissingStart, liveness};

    #[test]
    fn exclusive_and_releasable() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let c = Claim::try_take(&layout, 7).unwrap().unwrap();
        assert!(liveness(&layout.claim_pid(7), MissingStart::ExistenceDecides).is_live());
        assert!(Claim::try_take(&layout, 7).unwrap().is_none());
        c.release().unwrap();
        assert!(!layout.claims().join("7").exists());
        Claim::try_take(&layout, 7)
            .unwrap()
            .unwrap()
            .release()
            .unwrap();
    }
}
