//! Linked worktrees and committing inside one (the docs sweep's isolated lane), so nothing
//! is ever committed, stashed or switched in the primary checkout.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Git, GitError, GitResult, args, check_branch_name, check_rev, chunks, top_literal};

impl Git {
    /// Creates a worktree at `path` on a new branch `new_branch` starting at `start_point`.
    /// The branch gets no upstream (`--no-track`): a stray `git push` from it must not
    /// target the base it started from.
    ///
    /// git names a worktree's admin dir (`.git/worktrees/<name>`) after the path's last
    /// component, and concurrent adds whose paths share it (every attempt's `worktree/`)
    /// race for one name ("failed to read .git/worktrees/worktree/commondir"). So the
    /// worktree is added at a sibling path of its own (a unique admin name) and then moved
    /// into place: no repo-wide lock, so a fleet of hundreds never queues its starts
    /// behind one another.
    pub fn worktree_add(&self, path: &Path, new_branch: &str, start_point: &str) -> GitResult<()> {
        check_branch_name(new_branch)?;
        check_rev(start_point)?;
        let staging = staging_path(path);
        let mut a = args([
            "worktree",
            "add",
            "--quiet",
            "--no-track",
            "-b",
            new_branch,
            "--",
        ]);
        a.push(staging.as_os_str().to_owned());
        a.push(start_point.into());
        self.ok(a)?;
        let mut mv = args(["worktree", "move", "--"]);
        mv.push(staging.as_os_str().to_owned());
        mv.push(path.as_os_str().to_owned());
        if let Err(e) = self.ok(mv) {
            // Leave nothing half made: the staged worktree goes, the branch stays (it holds
            // nothing yet, and the reaper collects it).
            let _ = self.worktree_remove(&staging, true);
            return Err(e);
        }
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
        let deadline = crate::timeutil::deadline(Instant::now(), self.timeout);
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
                        self.timeout.as_secs()
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

/// A sibling of `path` whose last component no other add uses: the process id and a
/// counter, hidden (a dot) so a listing of the attempt dir shows only `worktree/`.
fn staging_path(path: &Path) -> PathBuf {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let base = path
        .file_name()
        .map_or_else(|| "worktree".into(), |b| b.to_string_lossy().into_owned());
    let name = format!(".{base}-{}-{n}", std::process::id());
    path.parent()
        .map_or_else(|| PathBuf::from(&name), |p| p.join(&name))
}
