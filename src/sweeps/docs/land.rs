//! The landing: one isolated worktree from `origin/<base>` under
//! `.red/tmp/docs-sweep/`, one `docs:` commit with exactly the stranded paths, one pushed
//! branch, one pull request merged into the base through the tracker, one fetch.
//!
//! The primary checkout is only ever read: no commit, checkout, stash or reset happens
//! there. Its refs gain nothing that outlives the run (the landing's local branch and its
//! remote-tracking ref are deleted at the end, success or not), and a failed run takes its
//! branch off `origin` again and leaves no open pull request.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use nix::fcntl::{Flock, FlockArg};

use super::fsops;
use super::judge::{Change, LandItem};
use crate::git::{Git, GitError, GitResult};
use crate::layout::Layout;
use crate::safe_delete::{DeleteError, DeleteRoot};
use crate::tracker::{Tracker, TrackerError};

/// Branches of the landing live outside `afk/` so the branch reaper, which parses issue
/// numbers out of `afk/…`, never sees them.
pub const BRANCH_PREFIX: &str = "afk-docs/sweep-";

/// Lock file in the git common dir (shared by all worktrees of the repo, never shown by
/// `git status`): one landing at a time, so clearing a stale landing can never pull a live
/// worktree from under another sweep.
pub const LOCK_FILE: &str = "afk-docs-sweep.lock";

/// Why the landing failed; its text is the detail of a `landing-failed` halt.
#[derive(Debug, thiserror::Error)]
pub enum LandError {
    #[error("another docs sweep is landing in this repo ({path}: {errno})")]
    Busy {
        path: PathBuf,
        errno: nix::errno::Errno,
    },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("clearing the stale lane: {0}")]
    Stale(#[from] DeleteError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("copying {path}: {source}")]
    Copy { path: String, source: io::Error },
    #[error("no free branch name {stem}<N>")]
    NoBranchName { stem: String },
    #[error("pushed {branch}, but opening the pull request failed: {source}")]
    PrCreate {
        branch: String,
        source: TrackerError,
    },
    #[error("pushed {branch} and opened {pr}, but merging it failed: {source}")]
    PrMerge {
        branch: String,
        pr: String,
        source: TrackerError,
    },
    #[error("{pr} reported merged, but origin/{base} does not contain {commit}")]
    NotOnBase {
        pr: String,
        base: String,
        commit: String,
    },
    #[error("landed {commit}, but cleaning up the lane failed: {cleanup}")]
    Cleanup { commit: String, cleanup: String },
    #[error("{first} (cleaning up the lane also failed: {cleanup})")]
    AndCleanup {
        first: Box<LandError>,
        cleanup: String,
    },
}

/// What a successful landing produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub branch: String,
    pub commit: String,
    /// The PR's URL (gh) or local id.
    pub pr: String,
}

/// Everything the landing needs.
pub struct LandCtx<'a> {
    /// The primary checkout (read only, plus refs).
    pub git: &'a Git,
    pub layout: &'a Layout,
    pub tracker: &'a dyn Tracker,
    pub base: &'a str,
}

/// The commit subject, also the PR title: `docs: land N stranded .red doc(s)`.
pub fn subject(n: usize) -> String {
    format!(
        "docs: land {n} stranded .red doc{}",
        if n == 1 { "" } else { "s" }
    )
}

/// The commit and PR body: why, then one line per path.
pub fn body(items: &[LandItem], base: &str) -> String {
    let mut s = format!(
        "Source-of-truth docs under .red/ that origin/{base} did not show, landed by the \
         afk-supervisor docs sweep before any worker started.\n\n"
    );
    for i in items {
        s.push_str(&format!("{:<6} {}\n", i.change.as_str(), i.path));
    }
    s
}

/// Lands `items`. `Ok(None)`: git's filters (e.g. an eol rule in the base's
/// `.gitattributes`) turned every file into what the base already has, so there was
/// nothing to commit; landing again at every boot would change nothing. The worktree is
/// removed and the local branch deleted whatever happens. When the landing fails after the
/// branch reached `origin`, the branch is deleted there and its pull request abandoned
/// (see [`undo_remote`]), so failed boots do not pile up branches and open pull requests.
pub fn land(ctx: &LandCtx<'_>, items: &[LandItem]) -> Result<Option<Landed>, LandError> {
    let _lock = LandingLock::acquire(ctx.git)?;
    let wt = ctx.layout.docs_sweep();
    clear_stale(ctx.git, ctx.layout)?;
    let branch = branch_name(ctx.git)?;
    let start = format!("refs/remotes/origin/{}", ctx.base);
    ctx.git.worktree_add(&wt, &branch, &start)?;

    let mut worktree_live = true;
    let mut on_origin = false;
    let mut pr_tried = false;
    let result = (|| {
        let Some(commit) = commit_in_worktree(ctx, &wt, items)? else {
            return Ok(None);
        };
        if let Err(e) = ctx.git.push_branch(&branch) {
            // A push that timed out may still have updated origin; only a branch that is
            // provably this run's (it points at this run's commit) is ever deleted there.
            on_origin = e.is_timeout()
                && remote_head(ctx.git, &branch).ok().flatten().as_deref() == Some(commit.as_str());
            return Err(e.into());
        }
        on_origin = true;
        // The worktree is done once the branch is on origin; removing it before the merge
        // also lets `gh pr merge --delete-branch` delete the local branch if it tries.
        ctx.git.worktree_remove(&wt, true)?;
        worktree_live = false;
        let title = subject(items.len());
        // Set before the call: a create that failed or timed out may still have opened one.
        pr_tried = true;
        let pr = ctx
            .tracker
            .pr_create(ctx.base, &branch, &title, &body(items, ctx.base))
            .map_err(|source| LandError::PrCreate {
                branch: branch.clone(),
                source,
            })?;
        ctx.tracker
            .pr_merge(&branch)
            .map_err(|source| LandError::PrMerge {
                branch: branch.clone(),
                pr: pr.clone(),
                source,
            })?;
        ctx.git.fetch_base(ctx.base)?;
        if !is_ancestor(ctx.git, &commit, &start)? {
            return Err(LandError::NotOnBase {
                pr,
                base: ctx.base.to_string(),
                commit,
            });
        }
        Ok(Some(Landed {
            branch: branch.clone(),
            commit,
            pr,
        }))
    })();

    let mut cleanup = Vec::new();
    if worktree_live && let Err(e) = ctx.git.worktree_remove(&wt, true) {
        cleanup.push(e.to_string());
    }
    if result.is_err() {
        cleanup.extend(undo_remote(ctx, &branch, on_origin, pr_tried));
    }
    if let Err(e) = drop_local_refs(ctx.git, &branch) {
        cleanup.push(e.to_string());
    }
    if cleanup.is_empty() {
        return result;
    }
    let cleanup = cleanup.join("; ");
    Err(match result {
        Ok(Some(l)) => LandError::Cleanup {
            commit: l.commit,
            cleanup,
        },
        Ok(None) => LandError::Cleanup {
            commit: "nothing".into(),
            cleanup,
        },
        Err(first) => LandError::AndCleanup {
            first: Box::new(first),
            cleanup,
        },
    })
}

/// Copies and deletes the stranded paths in the worktree, stages exactly those paths and
/// commits them. Returns the commit, `None` when nothing differed after staging.
fn commit_in_worktree(
    ctx: &LandCtx<'_>,
    wt: &Path,
    items: &[LandItem],
) -> Result<Option<String>, LandError> {
    let wgit = ctx.git.at(wt);
    let mut staged = Vec::new();
    for item in items {
        if item.change == Change::Delete {
            let spec = format!(":(top,literal){}", item.path);
            wgit.run(&["rm", "-q", "--ignore-unmatch", "--", &spec])?;
        } else {
            fsops::copy_regular(ctx.layout.repo(), wt, &item.path).map_err(|source| {
                LandError::Copy {
                    path: item.path.clone(),
                    source,
                }
            })?;
            staged.push(item.path.clone());
        }
    }
    // Forced: a repo that ignores `.red/` must still get its docs committed.
    wgit.add_force(&staged)?;
    let message = format!("{}\n\n{}", subject(items.len()), body(items, ctx.base));
    Ok(wgit.commit_staged(&message)?)
}

/// Undoes on `origin` what a failed landing created there, best effort: each failure is
/// returned as text for the error's cleanup note and never replaces the landing's own
/// error. The branch goes first: on GitHub, deleting a pull request's head branch closes
/// the pull request, which is why the `gh` backend needs no call of its own in
/// [`Tracker::pr_abandon`]; the local store records its pull request as closed.
fn undo_remote(ctx: &LandCtx<'_>, branch: &str, on_origin: bool, pr_tried: bool) -> Vec<String> {
    let mut failed = Vec::new();
    if on_origin && let Err(e) = ctx.git.delete_remote_branches(&[branch.to_string()]) {
        failed.push(format!("deleting {branch} on origin: {e}"));
    }
    if pr_tried && let Err(e) = ctx.tracker.pr_abandon(branch) {
        failed.push(format!("closing the pull request of {branch}: {e}"));
    }
    failed
}

/// The commit `branch` points at on `origin`, asked of `origin` itself.
fn remote_head(git: &Git, branch: &str) -> GitResult<Option<String>> {
    let full = format!("refs/heads/{branch}");
    let out = git.run(&["ls-remote", "--heads", "origin", &full])?;
    Ok(out.lines().find_map(|l| {
        let (sha, name) = l.split_once('\t')?;
        (name == full).then(|| sha.to_string())
    }))
}

/// Landing attempts made by this process, so two attempts in one second never share a name
/// even when the first one's branch is already gone everywhere.
static ATTEMPTS: AtomicU32 = AtomicU32::new(0);

/// A fresh `afk-docs/sweep-<UTC timestamp>-<pid>-<n>` name: the pid tells processes apart,
/// `n` counts this process's attempts, and a name that still exists locally or on `origin`
/// (a leftover, another host's run) is skipped. `origin` is asked directly because the
/// remote-tracking refs are deleted after every run.
fn branch_name(git: &Git) -> Result<String, LandError> {
    let fmt = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    // Formatting a UTC timestamp with a fixed numeric pattern cannot fail in practice;
    // should it, the epoch seconds are just as unique.
    let now = time::OffsetDateTime::now_utc();
    let stamp = now
        .format(&fmt)
        .unwrap_or_else(|_| now.unix_timestamp().to_string());
    let stem = format!("{BRANCH_PREFIX}{stamp}-{}-", std::process::id());
    let pattern = format!("refs/heads/{stem}*");
    let on_origin = git.run(&["ls-remote", "--heads", "origin", &pattern])?;
    let taken: BTreeSet<&str> = on_origin
        .lines()
        .filter_map(|l| l.split_once('\t')?.1.strip_prefix("refs/heads/"))
        .collect();
    for _ in 0..100 {
        let n = ATTEMPTS.fetch_add(1, Ordering::Relaxed) + 1;
        let name = format!("{stem}{n}");
        let local = git.rev_parse(&format!("refs/heads/{name}"))?;
        let tracking = git.rev_parse(&format!("refs/remotes/origin/{name}"))?;
        if local.is_none() && tracking.is_none() && !taken.contains(name.as_str()) {
            return Ok(name);
        }
    }
    Err(LandError::NoBranchName { stem })
}

/// Removes a landing worktree left by a crashed run, and only that path. A registered worktree goes
/// through git (which also drops its admin entry); anything else there goes through the
/// sweeps' one deletion primitive ([`crate::safe_delete::DeleteRoot`]: inside `.red/tmp` only,
/// no symlinked parent, a symlink removed as a link). `git worktree prune` runs only when
/// the landing worktree is registered but its dir is gone, the one case nothing else clears.
pub fn clear_stale(git: &Git, layout: &Layout) -> Result<(), LandError> {
    // Refuses a symlinked `.red` or `.red/tmp` up front: the landing would live (and later be
    // removed) somewhere outside the repo.
    let tmp = DeleteRoot::open(layout)?;
    let wt = layout.docs_sweep();
    let want = lenient_canonical(&wt);
    let registered = git
        .worktrees()?
        .iter()
        .any(|w| lenient_canonical(&w.path) == want);
    let present = match fs::symlink_metadata(&wt) {
        Ok(m) => Some(m.file_type().is_dir()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => return Err(LandError::Io { path: wt, source }),
    };
    match present {
        None if registered => Ok(git.worktree_prune()?),
        None => Ok(()),
        Some(is_dir) => {
            if is_dir && registered {
                git.worktree_remove(&wt, true)?;
            }
            if let Some(tmp) = tmp {
                tmp.remove(&wt)?;
            }
            Ok(())
        }
    }
}

/// The canonical form of `p`, resolving its longest existing ancestor, so a landing worktree whose dir
/// is gone still compares equal to git's (resolved) record of it.
fn lenient_canonical(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = p;
    loop {
        if let Ok(c) = fs::canonicalize(cur) {
            return rest.iter().rev().fold(c, |acc, part| acc.join(part));
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Deletes the landing's local branch and its remote-tracking ref (left by the push or by the
/// local tracker's fetch). The branch on origin is deleted by the merge, or by
/// [`undo_remote`] when the landing failed.
fn drop_local_refs(git: &Git, branch: &str) -> GitResult<()> {
    git.delete_local_branches(&[branch.to_string()])?;
    let tracking = format!("refs/remotes/origin/{branch}");
    if git.rev_parse(&tracking)?.is_some() {
        git.run(&["update-ref", "-d", &tracking])?;
    }
    Ok(())
}

fn is_ancestor(git: &Git, commit: &str, of: &str) -> GitResult<bool> {
    match git.run(&["merge-base", "--is-ancestor", commit, of]) {
        Ok(_) => Ok(true),
        Err(GitError::Failed { code, .. }) if code == "1" => Ok(false),
        Err(e) => Err(e),
    }
}

/// An exclusive, non-blocking `flock` held for the whole landing.
struct LandingLock {
    _lock: Flock<File>,
}

impl LandingLock {
    fn acquire(git: &Git) -> Result<Self, LandError> {
        let path = git.common_dir()?.join(LOCK_FILE);
        let file = match OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        {
            Ok(f) => f,
            Err(source) => return Err(LandError::Io { path, source }),
        };
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(LandingLock { _lock: lock }),
            Err((_, errno)) => Err(LandError::Busy { path, errno }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_and_body() {
        assert_eq!(subject(1), "docs: land 1 stranded .red doc");
        assert_eq!(subject(3), "docs: land 3 stranded .red docs");
        let b = body(
            &[
                LandItem {
                    path: ".red/adr/1.md".into(),
                    change: Change::Add,
                },
                LandItem {
                    path: ".red/CONTEXT.md".into(),
                    change: Change::Delete,
                },
            ],
            "main",
        );
        assert!(b.contains("origin/main did not show"));
        assert!(
            b.ends_with("add    .red/adr/1.md\ndelete .red/CONTEXT.md\n"),
            "{b}"
        );
    }
}
