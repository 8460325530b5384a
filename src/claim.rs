//! Claims, the one home: the local lock `.red/tmp/claims/<N>/pid` (SPEC §1), whose
//! exclusive `mkdir` makes two workers racing for one issue never both win, whatever the
//! tracker says; the marks on the tracker that do the same across checkouts (`marks`,
//! `tracked`); judging a claim alive or stale ([`liveness`], `stale`); and releasing a dead
//! holder's claims (`release`). The tracker side of giving an issue back (the restore
//! comment and labels) is `sweeps::transition`, which the releasers call. Before a claim,
//! whose words the issue is (`tracker::provenance`); a held issue's way back (`approval`).

pub mod approval;
pub mod marks;
pub mod release;
pub mod stale;
pub mod tracked;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::layout::{Layout, parse_positive};
use crate::pidfile::{self, Liveness, MissingStart};

/// The issue a claim dir's name gives: a positive decimal without leading zeros, as
/// [`Claim::try_take`] writes it; any other name is not a claim.
pub fn issue_of(dir_name: &str) -> Option<u64> {
    parse_positive(dir_name)
}

/// Whether the claim of `n` is held: what its pid file (and start token) says, a missing
/// file deciding "dead".
pub fn liveness(layout: &Layout, n: u64) -> Liveness {
    pidfile::liveness(&layout.claim_pid(n), MissingStart::ExistenceDecides)
}

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
    use crate::pidfile::liveness;

    #[test]
    fn any_claims_is_true_only_for_a_claim_named_by_its_issue() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert!(!release::any_claims(&layout), "no claims folder");
        std::fs::create_dir_all(layout.claims()).unwrap();
        assert!(!release::any_claims(&layout), "an empty folder");
        std::fs::write(layout.claims().join("notes.txt"), "").unwrap();
        std::fs::create_dir(layout.claims().join("not-an-issue")).unwrap();
        assert!(!release::any_claims(&layout), "nothing named by an issue");
        std::fs::create_dir(layout.claims().join("42")).unwrap();
        assert!(release::any_claims(&layout));
    }

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
