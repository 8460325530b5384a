//! The base fetched from `origin` once per suite run. The branch reap and the docs sweep
//! both judge against `origin/<base>`, and each used to fetch it: at boot that was two
//! round trips to the remote (hundreds of milliseconds each against a real host), or in a
//! checkout with no `origin`, two failed fetches and two `git remote` listings. What one
//! sweep learnt the next now reuses. A failed fetch is not remembered: the next sweep
//! tries again, so a blip during the reap does not halt the docs sweep by itself.
//!
//! Whether there is an `origin` is asked first (`git remote`, a local call of a millisecond
//! or two) rather than learnt from a failed fetch: in a checkout without one, `git fetch
//! origin` takes `origin` for a path and starts a shell and `git-upload-pack` to find it
//! missing, about twice the listing's cost, and a fetch that fails is then always an error
//! of the remote, never a question. Beside a fetch from a real host the listing is lost in
//! the round trip.

use std::cell::RefCell;

use crate::git::{Git, GitError};

/// What [`BaseFetch::fetch`] could not settle.
#[derive(Debug, thiserror::Error)]
pub enum BaseFetchError {
    /// `origin` is configured and the fetch failed (unreachable, refused, no such base).
    #[error("{0}")]
    Fetch(GitError),
    /// `git remote` could not say whether there is an `origin` at all.
    #[error("{0}")]
    Remotes(GitError),
}

/// One suite run's memory of the base fetch; a new one for each run, so a later run (the
/// next boot, `afk-supervisor sweep`) fetches afresh.
#[derive(Debug, Default)]
pub struct BaseFetch {
    /// The base last settled and what was found: `true` fetched this run, `false` this
    /// checkout has no `origin`. Kept with its name, so another base is fetched for itself.
    known: RefCell<Option<(String, bool)>>,
}

impl BaseFetch {
    /// Whether there is an `origin` whose base is now fetched (`true`) or no `origin` at
    /// all (`false`): two git calls (the listing, then the fetch) where there is one, one
    /// where there is not, and none for a repeat.
    pub fn fetch(&self, git: &Git, base: &str) -> Result<bool, BaseFetchError> {
        if let Some((done, known)) = &*self.known.borrow()
            && done == base
        {
            return Ok(*known);
        }
        let has_origin = git.has_origin().map_err(BaseFetchError::Remotes)?;
        if has_origin {
            git.fetch_base(base).map_err(BaseFetchError::Fetch)?;
        }
        *self.known.borrow_mut() = Some((base.to_string(), has_origin));
        Ok(has_origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A git whose every call fails to start (no such directory): any call would show as
    /// an error, so a remembered answer is one that made no call.
    #[test]
    fn a_settled_base_is_answered_without_git_and_another_base_is_not() {
        let git = Git::new("/nonexistent/afk-base-fetch");
        let f = BaseFetch::default();
        *f.known.borrow_mut() = Some(("main".into(), true));
        assert!(matches!(f.fetch(&git, "main"), Ok(true)));
        assert_eq!(git.calls(), 0);
        assert!(f.fetch(&git, "trunk").is_err());
        assert!(git.calls() > 0);
    }
}
