//! Linked worktrees and committing inside one (the docs sweep's isolated lane), so nothing
//! is ever committed, stashed or switched in the primary checkout.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Git, GitError, GitResult, args, check_branch_name, check_rev, chunks, top_literal};

/// The longest a worktree add waits for its turn: a thousand adds of ~0.1 s each, with
/// room to spare.
const WORKTREE_LOCK_WAIT: Duration = Duration::from_secs(600);

impl Git {
    /// Creates a worktree at `path` on a new branch `new_branch` starting at `start_point`.
    /// The branch gets no upstream (`--no-track`): a stray `git push` from it must not
    /// target the base it started from.
    pub fn worktree_add(&self, path: &Path, new_branch: &str, start_point: &str) -> GitResult<()> {
        check_branch_name(new_branch)?;
        check_rev(start_point)?;
        let mut a = args([
            "worktree",
            "add",
            "--quiet",
            "--no-track",
            "-b",
            new_branch,
            "--",
        ]);
        a.push(path.as_os_str().to_owned());
        a.push(start_point.into());
        // Concurrent `git worktree add`s in one repo race: each reads every other admin dir
        // under `.git/worktrees/`, and one half made by another add fails it ("failed to
        // read .git/worktrees/<name>/commondir"), unique names or not. So one at a time
        // per repo; the wait for the lock is not the git timeout, since a fleet of
        // hundreds starting together queues here for longer than any one add takes.
        let _lock = self.repo_lock_waiting("afk-worktree-add.lock", WORKTREE_LOCK_WAIT)?;
        self.ok(a)?;
        Ok(())
    }

    /// `$GIT_COMMON_DIR`, absolute: shared by every worktree of the repo.
    pub fn common_dir(&self) -> GitResult<PathBuf> {
        let out = self.run(&["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
        Ok(PathBuf::from(out.trim_end_matches(['\n', '\r'])))
    }

    /// Takes an exclusive lock on `<common dir>/<name>`, waiting at most this layer's
    /// timeout; released when the returned file is dropped.
    pub fn repo_lock(&self, name: &str) -> GitResult<File> {
        self.repo_lock_waiting(name, self.timeout)
    }

    /// [`Git::repo_lock`], waiting at most `wait` (at least this layer's timeout).
    pub fn repo_lock_waiting(&self, name: &str, wait: Duration) -> GitResult<File> {
        let wait = wait.max(self.timeout);
        let path = self.common_dir()?.join(name);
        let lock_err = |why: String| GitError::Lock {
            path: path.display().to_string(),
            why,
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| lock_err(e.to_string()))?;
        let deadline = crate::timeutil::deadline(Instant::now(), wait);
        let mut wait = Duration::from_millis(1);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_millis(50));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(lock_err(format!(
                        "still held by another process after {}s",
                        wait.as_secs()
                    )));
                }
                Err(TryLockError::Error(e)) => return Err(lock_err(e.to_string())),
            }
        }
    }

    /// Removes a linked worktree; `force` also discards its uncommitted and untracked files
    /// (a locked worktree is still refused).
    pub fn worktree_remove(&self, path: &Path, force: bool) -> GitResult<()> {
        let mut a = args(["worktree", "remove"]);
        if force {
            a.push("--force".into());
        }
        a.push("--".into());
        a.push(path.as_os_str().to_owned());
        self.ok(a)?;
        Ok(())
    }

    /// Forgets worktrees whose directories are gone.
    pub fn worktree_prune(&self) -> GitResult<()> {
        self.ok(args(["worktree", "prune"]))?;
        Ok(())
    }

    /// Stages every change in this checkout (`add -A`) and commits it. `None` when there was
    /// nothing to commit, else the new commit's sha. Hooks run as configured.
    pub fn commit_all(&self, message: &str) -> GitResult<Option<String>> {
        self.ok(args(["add", "-A"]))?;
        self.commit_staged(message)
    }

    /// Commits what is staged; `None` when nothing is.
    pub fn commit_staged(&self, message: &str) -> GitResult<Option<String>> {
        let (clean, _) = self.yes_no(args(["diff", "--cached", "--quiet", "--exit-code"]), 0, 1)?;
        if clean {
            return Ok(None);
        }
        // `-m <message>`: the message is an option value, never parsed as an option itself.
        self.ok(args(["commit", "--quiet", "-m", message]))?;
        let sha = self.rev_parse("HEAD")?;
        match sha {
            Some(s) => Ok(Some(s)),
            None => Err(super::GitError::Parse {
                argv: "git rev-parse HEAD".into(),
                what: "HEAD does not resolve right after a commit".into(),
            }),
        }
    }

    /// Stages the given paths (relative to the repository root) even when ignore rules
    /// match them, as a doc under an ignored `.red/` must still be committed. Chunked only
    /// for very long lists.
    pub fn add_force(&self, paths: &[String]) -> GitResult<()> {
        for chunk in chunks(paths) {
            let mut a = args(["add", "--force", "--"]);
            a.extend(chunk.iter().map(|p| top_literal(p)));
            self.ok(a)?;
        }
        Ok(())
    }
}
