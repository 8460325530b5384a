//! The rescue of a dead attempt's work (`docs/SPEC.md` §11.15), the one home: every end of
//! an attempt that is not a clean hand-off (a death the supervisor notices, a stall kill, a
//! hard-kill shrink, `stop --force`, the boot sweep's restore, a claims-belt takeover, the
//! wall-clock cap, an interrupted worker) and every sweep about to remove an attempt dir
//! call [`rescue`] first, so no agent-hour is burnt twice.
//!
//! What it does, in the attempt's worktree, without ever touching the checkout's own index
//! (a stale `index.lock` or a corrupt index must not stop it) or its files:
//! 1. stages the working files into a private copy of the index (`add -A`: tracked changes
//!    and untracked files the repo does not ignore), files over `rescue.max_file_bytes`
//!    left out, and commits that as `WIP: rescued attempt <N>-a<K> (<why>)` with the
//!    fleet's identity on top of HEAD (no commit when nothing differs);
//! 2. keeps the result on `refs/afk/rescue/<N>/a<K>` and moves the attempt's branch to it
//!    (only when it can also install the private index, so the kept tree reads clean);
//! 3. pushes the branch to `origin` when the tracker is shared (`gh`) and `origin` exists,
//!    never forced: a branch there holding someone else's commits refuses it, and the
//!    rescue ref is what names the work then.
//!
//! A merge or rebase in progress, a detached HEAD, a stale `index.lock` and a corrupt index
//! are rescued as far as git allows and named in [`Rescued::problems`]; a rescue never
//! deletes anything, so a tree it could not record is kept by its caller.

use std::fs;
use std::path::{Path, PathBuf};

use crate::event_log::{Kind, Record};
use crate::git::{Git, GitError};
use crate::layout;

/// Where a rescue keeps its commit when it is not (or not only) on `origin`.
pub const RESCUE_REFS: &str = "refs/afk/rescue/";

/// The private index a rescue stages into, in the worktree's git dir.
const RESCUE_INDEX: &str = "afk-rescue.index";

/// `refs/afk/rescue/<N>/a<K>`.
pub fn rescue_ref(issue: u64, attempt: u64) -> String {
    format!("{RESCUE_REFS}{issue}/a{attempt}")
}

/// The issue of a rescue ref, when `name` is one.
pub fn issue_of_ref(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(RESCUE_REFS)?;
    let (n, a) = rest.split_once('/')?;
    layout::parse_positive(a.strip_prefix('a')?)?;
    layout::parse_positive(n)
}

/// What a rescue is asked to do.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    /// The repository (the primary checkout); the worktree is reached from it.
    pub git: &'a Git,
    /// The attempt dir, `<worker dir>/<N>-a<K>/`, whose `worktree/` is rescued.
    pub attempt_dir: &'a Path,
    /// Why the attempt ended, for the commit message (`worker died`, `stall kill`).
    pub why: &'a str,
    /// `rescue.max_file_bytes`.
    pub max_file_bytes: u64,
    /// Push the branch to `origin` (the tracker is shared across checkouts, `gh`).
    pub push: bool,
}

/// A rescue that recorded something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rescued {
    pub issue: u64,
    pub attempt: u64,
    /// Where the work is: the branch name when it was pushed to `origin`, else the rescue
    /// ref (a full ref).
    pub reference: String,
    /// The commit that holds the work.
    pub sha: String,
    /// The WIP commit, when there was uncommitted work.
    pub wip: Option<String>,
    /// Files left out for their size, with it.
    pub left_out: Vec<(String, u64)>,
    /// What could not be recorded or was odd about the tree (one phrase each).
    pub problems: Vec<String>,
    /// An earlier rescue of this attempt holds the work already: nothing new was made.
    pub already: bool,
}

impl Rescued {
    /// The restore comment's line, `work rescued to <ref> at <sha>`.
    pub fn comment_line(&self) -> String {
        format!("work rescued to {} at {}", self.reference, self.sha)
    }

    /// The event's (and a sweep line's) message.
    pub fn message(&self) -> String {
        let mut m = format!(
            "#{} attempt {}-a{}: {}",
            self.issue,
            self.issue,
            self.attempt,
            self.comment_line()
        );
        if let Some(w) = &self.wip {
            m.push_str(&format!(" (WIP commit {})", short(w)));
        }
        if !self.left_out.is_empty() {
            let names: Vec<&str> = self.left_out.iter().map(|(p, _)| p.as_str()).collect();
            m.push_str(&format!("; left out for size: {}", names.join(", ")));
        }
        if !self.problems.is_empty() {
            m.push_str(&format!("; {}", self.problems.join("; ")));
        }
        m
    }
}

impl Rescued {
    /// The `attempt.rescued` event of this rescue, with its issue.
    pub fn event(&self) -> Record {
        Record::now(Kind::AttemptRescued, self.message()).issue(self.issue)
    }

    /// Appends [`Rescued::event`] to the fleet's event log from outside the supervisor's
    /// own loop (the built-in worker, the claims belt), through [`crate::event_log::append_event`],
    /// so every rescue is an event wherever it was made. A rescue that found its work kept
    /// already (`already`) was logged by whoever made it and is not logged again. A log
    /// that cannot be written is a warning on stderr: the work is on its ref either way.
    pub fn log(&self, layout: &layout::Layout, slot: Option<usize>, pid: Option<i32>) {
        if self.already {
            return;
        }
        let mut ev = self.event();
        ev.slot = slot.map(|s| s as u64);
        ev.pid = pid.map(i64::from);
        if let Err(e) = crate::event_log::append_event(&layout.event_log(), &ev) {
            eprintln!("afk-supervisor: warning: {e}");
        }
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// Why a rescue could not record the work; the caller keeps the tree.
#[derive(Debug, thiserror::Error)]
pub enum RescueError {
    #[error("{}: not an attempt dir `<N>-a<K>`", .0.display())]
    NotAttempt(PathBuf),
    #[error("{}: rescue failed: {source}", path.display())]
    Git {
        path: PathBuf,
        #[source]
        source: GitError,
    },
    #[error("{}: rescue failed: {why}", path.display())]
    Io { path: PathBuf, why: String },
}

/// The attempt dir's worktree when it is one: a real directory (never a link) with a
/// `.git` file, as `git worktree add` makes.
pub fn worktree_of(attempt_dir: &Path) -> Option<PathBuf> {
    let wt = attempt_dir.join("worktree");
    let is_dir = fs::symlink_metadata(&wt).is_ok_and(|m| m.is_dir());
    let has_git = fs::symlink_metadata(wt.join(".git")).is_ok_and(|m| m.is_file());
    (is_dir && has_git).then_some(wt)
}

/// What every rescue of one fleet shares: the repository, the size limit and whether to
/// push. Built once from the config and the tracker, handed to whoever may rescue.
#[derive(Debug, Clone)]
pub struct Keeper {
    pub git: Git,
    pub max_file_bytes: u64,
    pub push: bool,
}

/// `rescue.max_file_bytes` when no config says otherwise.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 50 << 20;

impl Keeper {
    /// The rescuer of the repository at `repo`; `push` when the tracker is shared across
    /// checkouts (`gh`), so the work reaches `origin`.
    pub fn new(repo: &Path, max_file_bytes: u64, push: bool) -> Self {
        Keeper {
            git: Git::new(repo),
            max_file_bytes,
            push,
        }
    }

    /// [`rescue`] of one attempt dir, ended for `why`.
    pub fn rescue(&self, attempt_dir: &Path, why: &str) -> Result<Option<Rescued>, RescueError> {
        rescue(&Plan {
            git: &self.git,
            attempt_dir,
            why,
            max_file_bytes: self.max_file_bytes,
            push: self.push,
        })
    }

    /// The newest attempt dir of issue `n` in worker `worker_id`'s dir (any namespace),
    /// rescued; `Ok(None)` when there is none or it holds no work.
    pub fn rescue_newest(
        &self,
        layout: &layout::Layout,
        worker_id: &str,
        n: u64,
        why: &str,
    ) -> Result<Option<Rescued>, RescueError> {
        match newest_attempt_dir(layout, worker_id, n) {
            Some(dir) => self.rescue(&dir, why),
            None => Ok(None),
        }
    }
}

/// The newest `<N>-a<K>` dir of issue `n` directly inside worker `worker_id`'s dir, in
/// any namespace; a link is never taken for one.
pub fn newest_attempt_dir(layout: &layout::Layout, worker_id: &str, n: u64) -> Option<PathBuf> {
    if worker_id.is_empty() || worker_id.contains('/') || worker_id.starts_with('.') {
        return None;
    }
    layout::WORKER_NAMESPACES
        .iter()
        .filter_map(|ns| fs::read_dir(layout.worker_namespace(ns).join(worker_id)).ok())
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let (issue, k) = layout::parse_attempt_dir(e.file_name().to_str()?)?;
            (issue == n).then(|| (k, e.path()))
        })
        .max_by_key(|(k, _)| *k)
        .map(|(_, p)| p)
}

/// Rescues the attempt's work; `Ok(None)` when there is none to rescue (no worktree, no
/// uncommitted change and no commit that another ref does not hold already).
pub fn rescue(plan: &Plan<'_>) -> Result<Option<Rescued>, RescueError> {
    let name = plan
        .attempt_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    let Some(wt_path) = worktree_of(plan.attempt_dir) else {
        return Ok(None);
    };
    // A worktree in a dir no rescue ref can be named after is kept for a person.
    let Some((issue, attempt)) = layout::parse_attempt_dir(name) else {
        return Err(RescueError::NotAttempt(plan.attempt_dir.to_path_buf()));
    };
    let git_err = |source| RescueError::Git {
        path: wt_path.clone(),
        source,
    };
    // A sandboxed agent's commits are in its attempt's own object dir until its worker
    // takes them in; a worker that died first left them there, and its attempt was never
    // judged (`docs/SPEC.md` §11.19): kept on this checkout's ref, never pushed.
    let room = crate::sandbox::AttemptRoom::new(plan.attempt_dir);
    let unjudged = std::fs::symlink_metadata(&room.root).is_ok();
    if unjudged {
        crate::sandbox::object_dir::take_in(plan.git, &room.objects()).map_err(git_err)?;
    }
    let push = plan.push && !unjudged;
    let wt = plan.git.at(&wt_path);
    let git_dir = wt.git_dir().map_err(git_err)?;
    let head = wt.rev_parse("HEAD").map_err(git_err)?;
    let branch = wt.current_branch().map_err(git_err)?;
    let mut problems = Vec::new();
    if branch.is_none() {
        problems.push(match &head {
            Some(h) => format!("HEAD was detached at {}", short(h)),
            None => "HEAD named no commit".to_string(),
        });
    }
    if let Ok(Some(m)) = wt.rev_parse("MERGE_HEAD") {
        problems.push(format!(
            "a merge of {} was in progress: its files are committed as they were, on HEAD alone",
            short(&m)
        ));
    }
    if git_dir.join("rebase-merge").exists() || git_dir.join("rebase-apply").exists() {
        problems.push("a rebase was in progress: committed on the commit it had reached".into());
    }
    let locked = git_dir.join("index.lock").exists();
    if locked {
        problems.push("a stale index.lock was left: the tree's own index was not touched".into());
    }

    let index = git_dir.join(RESCUE_INDEX);
    let staged = stage(&wt, &git_dir, &index, head.as_deref(), plan, &mut problems);
    let (tree, left_out) = match staged {
        Ok(t) => t,
        Err(e) => {
            let _ = fs::remove_file(&index);
            // Nothing could be staged: the commits are still worth keeping.
            problems.push(format!("uncommitted files not recorded: {e}"));
            (None, Vec::new())
        }
    };
    let head_tree = match &head {
        Some(h) => wt.rev_parse(&format!("{h}^{{tree}}")).map_err(git_err)?,
        None => None,
    };
    let wip = match &tree {
        Some(t) if Some(t) != head_tree.as_ref() => {
            let message = wip_message(issue, attempt, plan, &left_out, &problems);
            Some(
                wt.commit_tree(t, head.as_deref(), &message)
                    .map_err(git_err)?,
            )
        }
        _ => None,
    };
    let Some(tip) = wip.clone().or(head.clone()) else {
        let _ = fs::remove_file(&index);
        return Ok(None);
    };
    let keep = rescue_ref(issue, attempt);
    // Nothing new: the work is rescued already when the rescue ref holds this tip, else
    // there is none (every commit is on some other ref and nothing is uncommitted).
    let mut already = false;
    if wip.is_none()
        && wt
            .commits_held_nowhere_else(&tip, branch.as_deref())
            .map_err(git_err)?
            == 0
    {
        let _ = fs::remove_file(&index);
        if wt.rev_parse(&keep).map_err(git_err)?.as_deref() != Some(tip.as_str()) {
            return Ok(None);
        }
        already = true;
    }
    if !already {
        wt.update_ref(&keep, &tip, None).map_err(git_err)?;
    }
    match (&branch, &wip, &head) {
        (Some(b), Some(w), Some(h)) if !locked => {
            let moved = wt.update_ref(&format!("refs/heads/{b}"), w, Some(h));
            match moved.map(|()| fs::rename(&index, git_dir.join("index"))) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => problems.push(format!("the tree's index was not replaced: {e}")),
                Err(e) => problems.push(format!("branch {b} not moved: {e}")),
            }
        }
        _ => {}
    }
    let _ = fs::remove_file(&index);
    let mut reference = keep;
    // An earlier rescue made where nothing was pushed (a `stop --force`, a tracker that
    // was not `gh` then) is pushed now; a push of what `origin` has already changes nothing.
    if push {
        match (&branch, plan.git.has_origin()) {
            (Some(b), Ok(true)) => match wt.push_commit(&tip, b) {
                Ok(()) => reference = b.clone(),
                Err(e) => problems.push(format!("push to origin failed, kept here: {e}")),
            },
            (None, Ok(true)) => problems.push("not pushed: no branch to push it to".into()),
            (_, Ok(false)) => {}
            (_, Err(e)) => problems.push(format!("not pushed: {e}")),
        }
    }
    Ok(Some(Rescued {
        issue,
        attempt,
        reference,
        sha: tip,
        wip,
        left_out,
        problems,
        already,
    }))
}

/// Files left out of a rescue for their size, with it.
type LeftOut = Vec<(String, u64)>;

/// Stages the working files into the private `index` (a copy of the tree's own, or HEAD's
/// tree when that one cannot be read) and writes them as a tree; files over the size limit
/// stay out. `None` for the tree when git cannot write one (unmerged entries it could not
/// resolve).
fn stage(
    wt: &Git,
    git_dir: &Path,
    index: &Path,
    head: Option<&str>,
    plan: &Plan<'_>,
    problems: &mut Vec<String>,
) -> Result<(Option<String>, LeftOut), RescueError> {
    let io_err = |e: std::io::Error| RescueError::Io {
        path: index.to_path_buf(),
        why: e.to_string(),
    };
    let git_err = |source| RescueError::Git {
        path: wt.repo().to_path_buf(),
        source,
    };
    let _ = fs::remove_file(index);
    let own = git_dir.join("index");
    if fs::symlink_metadata(&own).is_ok_and(|m| m.is_file()) {
        fs::copy(&own, index).map_err(io_err)?;
    }
    let ix = wt.with_index(index);
    if index.exists() && !ix.index_readable() {
        problems.push("the index was corrupt: staged afresh from HEAD".into());
        let _ = fs::remove_file(index);
    }
    if !index.exists() {
        ix.read_tree(head).map_err(git_err)?;
    }
    let mut left_out = Vec::new();
    for p in ix.unstaged_files().map_err(git_err)? {
        let size = fs::symlink_metadata(wt.repo().join(&p)).map_or(0, |m| m.len());
        if size > plan.max_file_bytes {
            left_out.push((p, size));
        }
    }
    let excluded: Vec<String> = left_out.iter().map(|(p, _)| p.clone()).collect();
    if let Err(e) = ix.add_all_except(&excluded) {
        problems.push(format!("some files could not be staged: {e}"));
    }
    match ix.write_tree() {
        Ok(t) => Ok((Some(t), left_out)),
        Err(e) => {
            problems.push(format!("no tree could be written: {e}"));
            Ok((None, left_out))
        }
    }
}

fn wip_message(
    issue: u64,
    attempt: u64,
    plan: &Plan<'_>,
    left_out: &[(String, u64)],
    problems: &[String],
) -> String {
    let mut m = format!("WIP: rescued attempt {issue}-a{attempt} ({})\n", plan.why);
    if !left_out.is_empty() {
        m.push_str(&format!(
            "\nLeft out, over rescue.max_file_bytes ({} bytes):\n",
            plan.max_file_bytes
        ));
        for (p, size) in left_out {
            m.push_str(&format!("- {p} ({size} bytes)\n"));
        }
    }
    if !problems.is_empty() {
        m.push_str("\nThe tree as found:\n");
        for p in problems {
            m.push_str(&format!("- {p}\n"));
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rescue_refs_name_their_issue() {
        assert_eq!(rescue_ref(12, 3), "refs/afk/rescue/12/a3");
        assert_eq!(issue_of_ref("refs/afk/rescue/12/a3"), Some(12));
        assert_eq!(issue_of_ref("refs/afk/rescue/12/x3"), None);
        assert_eq!(issue_of_ref("refs/afk/rescue/0/a1"), None);
        assert_eq!(issue_of_ref("refs/heads/afk/12-x"), None);
    }
}
