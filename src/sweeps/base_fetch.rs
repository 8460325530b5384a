//! The base fetched from `origin` once per suite run. The branch reap and the docs sweep
//! both judge against `origin/<base>`, and each used to fetch it: at boot that was two
//! round trips to the remote (hundreds of milliseconds each against a real host), or in a
//! checkout with no `origin`, two failed fetches and two `git remote` listings. What one
//! sweep learnt the next now reuses. A failed fetch is not remembered: the next sweep
//! tries again, so a blip during the reap does not halt the docs sweep by itself.

use std::cell::Cell;

use crate::git::{Git, GitError};

/// What [`BaseFetch::fetch`] could not settle.
#[derive(Debug, thiserror::Error)]
pub enum BaseFetchError {
    /// `origin` is configured and the fetch failed (unreachable, refused, no such base).
    #[error("{0}")]
    Fetch(GitError),
    /// The fetch failed and `git remote` could not say whether there is an `origin` at all.
    #[error("{0}")]
    Remotes(GitError),
}

/// One suite run's memory of the base fetch; a new one for each run, so a later run (the
/// next boot, `afk-supervisor sweep`) fetches afresh.
#[derive(Debug, Default)]
pub struct BaseFetch {
    /// `Some(true)`: fetched this run. `Some(false)`: this checkout has no `origin`.
    known: Cell<Option<bool>>,
}

impl BaseFetch {
    /// Whether there is an `origin` whose base is now fetched (`true`) or no `origin` at
    /// all (`false`). Only a failed fetch asks whether there is an `origin`, so the usual
    /// pass costs one git call, and a repeat costs none.
    pub fn fetch(&self, git: &Git, base: &str) -> Result<bool, BaseFetchError> {
        if let Some(known) = self.known.get() {
            return Ok(known);
        }
        let has_origin = match git.fetch_base(base) {
            Ok(()) => true,
            Err(e) => match git.has_origin() {
                Ok(false) => false,
                Ok(true) => return Err(BaseFetchError::Fetch(e)),
                Err(listing) => return Err(BaseFetchError::Remotes(listing)),
            },
        };
        self.known.set(Some(has_origin));
        Ok(has_origin)
    }
}
