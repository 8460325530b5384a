//! Branch listing, merge checks and batch deletion, local and on `origin`.
//!
//! Built for the branch reaper: listing, the checked-out set, the merged query and each
//! side's deletion are one git call apiece however many branches there are.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;

use super::parse::{self, HEADS, Names};
use super::{Git, Worktree};
use super::{GitError, GitResult, REMOTE, args, check_branch_name, check_rev, chunks};

/// Where AFK branches live.
pub const AFK_HEADS: &str = "refs/heads/afk/";

impl Git {
    /// Local branches under `afk/`, nested ones included, as short names (`afk/12-fix`).
    /// Names that are not UTF-8 are left out; [`Git::local_afk_listing`] has them.
    pub fn local_afk_branches(&self) -> GitResult<Vec<String>> {
        Ok(self.local_afk_listing()?.utf8)
    }

    /// Local branches under `afk/`: the UTF-8 names, and apart from them the names that
    /// are not UTF-8, as bytes (never decoded into a name git does not have).
    pub fn local_afk_listing(&self) -> GitResult<Names<String>> {
        self.local_branches_under(AFK_HEADS)
    }

    /// Every local branch whose name is UTF-8, short names.
    pub fn local_branches(&self) -> GitResult<Vec<String>> {
        Ok(self.local_branches_under(HEADS)?.utf8)
    }

    fn local_branches_under(&self, prefix: &str) -> GitResult<Names<String>> {
        let done = self.ok(args(["for-each-ref", "--format=%(refname)", prefix]))?;
        Ok(parse::branch_names(&done.out.stdout, prefix))
    }

    /// Branches under `afk/` on `origin` whose names are UTF-8, short names, sorted.
    pub fn remote_afk_branches(&self) -> GitResult<Vec<String>> {
        Ok(self.remote_afk_heads()?.into_keys().collect())
    }

    /// Branches under `afk/` on `origin`, sorted, and apart from them the names that are
    /// not UTF-8, as bytes.
    pub fn remote_afk_listing(&self) -> GitResult<Names<String>> {
        let heads = self.remote_heads_under(AFK_HEADS)?;
        let mut utf8: Vec<String> = heads.utf8.into_iter().map(|(b, _)| b).collect();
        utf8.sort();
        utf8.dedup();
        Ok(Names {
            utf8,
            not_utf8: heads.not_utf8,
        })
    }

    /// Branches under `afk/` on `origin` (UTF-8 names) with the commit each points at.
    pub fn remote_afk_heads(&self) -> GitResult<BTreeMap<String, String>> {
        Ok(self
            .remote_heads_under(AFK_HEADS)?
            .utf8
            .into_iter()
            .collect())
    }

    fn remote_heads_under(&self, prefix: &str) -> GitResult<Names<(String, String)>> {
        let pattern = format!("{prefix}*");
        // `--heads` keeps the server from advertising anything but branches (a GitHub repo
        // also has thousands of refs/pull/*).
        let done = self.ok(args(["ls-remote", "--heads", REMOTE, &pattern]))?;
        parse::ls_remote_heads(&done.out.stdout, prefix).map_err(|w| done.parse_err(w.0))
    }

    /// All worktrees of the repository: the main checkout and every linked one.
    pub fn worktrees(&self) -> GitResult<Vec<Worktree>> {
        let done = self.ok(args(["worktree", "list", "--porcelain", "-z"]))?;
        parse::worktree_list_z(&done.out.stdout).map_err(|w| done.parse_err(w.0))
    }

    /// Branches checked out in any worktree (git refuses to delete those).
    pub fn worktree_branches(&self) -> GitResult<BTreeSet<String>> {
        Ok(self
            .worktrees()?
            .into_iter()
            .filter_map(|w| w.branch)
            .collect())
    }

    /// Which of `branches` (local, short names) are reachable from `base_ref`. One git call
    /// for any number of branches; none for an empty list.
    pub fn merged_into(&self, base_ref: &str, branches: &[String]) -> GitResult<BTreeSet<String>> {
        if branches.is_empty() {
            return Ok(BTreeSet::new());
        }
        check_rev(base_ref)?;
        let merged = format!("--merged={base_ref}");
        let done = self.ok(args([
            "for-each-ref",
            "--format=%(refname)",
            &merged,
            HEADS,
        ]))?;
        let merged: BTreeSet<String> = parse::branch_names(&done.out.stdout, HEADS)
            .utf8
            .into_iter()
            .collect();
        Ok(branches
            .iter()
            .filter(|b| merged.contains(*b))
            .cloned()
            .collect())
    }

    /// Whether local branch `branch` is reachable from `base_ref`. A branch that does not
    /// exist is an error, not "unmerged".
    pub fn is_merged(&self, branch: &str, base_ref: &str) -> GitResult<bool> {
        check_branch_name(branch)?;
        check_rev(base_ref)?;
        let local = format!("{HEADS}{branch}");
        let a = args([
            "merge-base",
            "--is-ancestor",
            "--end-of-options",
            &local,
            base_ref,
        ]);
        Ok(self.yes_no(a, 0, 1)?.0)
    }

    /// Whether commit `ancestor` is reachable from `rev`.
    pub fn is_ancestor(&self, ancestor: &str, rev: &str) -> GitResult<bool> {
        check_rev(ancestor)?;
        check_rev(rev)?;
        let a = args([
            "merge-base",
            "--is-ancestor",
            "--end-of-options",
            ancestor,
            rev,
        ]);
        Ok(self.yes_no(a, 0, 1)?.0)
    }

    /// Deletes local branches with `git branch -D`, one call per [`super::ARGV_BUDGET`] of
    /// names. Branches already gone count as deleted; any left in place (checked out in a
    /// worktree) make a [`GitError::PartialDelete`] naming them.
    pub fn delete_local_branches(&self, branches: &[String]) -> GitResult<()> {
        let wanted = checked_unique(branches)?;
        if wanted.is_empty() {
            return Ok(());
        }
        let mut first_err = None;
        for chunk in chunks(&wanted) {
            let mut a = args(["branch", "-D", "--"]);
            a.extend(chunk.iter().map(OsString::from));
            if let Err(e) = self.ok(a) {
                first_err.get_or_insert(e);
            }
        }
        let Some(cause) = first_err else {
            return Ok(());
        };
        let present: BTreeSet<String> = self.local_branches()?.into_iter().collect();
        partial("local", &wanted, &present, cause)
    }

    /// Deletes branches on `origin` with one `git push --atomic origin --delete …` per
    /// [`super::ARGV_BUDGET`] of names: one ref transaction on the remote, where ref-by-ref
    /// deletion of thousands of packed refs rewrites the packed-refs file once per ref.
    /// Branches already gone count as deleted. When the remote refuses the batch (a
    /// protected branch, a hook, no atomic support), `origin` is listed once and the
    /// survivors are deleted ref by ref, keeping whatever the remote accepts; whatever still
    /// stands is reported in a [`GitError::PartialDelete`].
    pub fn delete_remote_branches(&self, branches: &[String]) -> GitResult<()> {
        let wanted = checked_unique(branches)?;
        if wanted.is_empty() {
            return Ok(());
        }
        let Some(_refused) = self.push_deletes(&wanted, true) else {
            return Ok(());
        };
        let present = self.remote_branch_set()?;
        let left: Vec<String> = wanted
            .iter()
            .filter(|b| present.contains(*b))
            .cloned()
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        let Some(cause) = self.push_deletes(&left, false) else {
            return Ok(());
        };
        let present = self.remote_branch_set()?;
        partial("remote", &wanted, &present, cause)
    }

    /// Pushes deletions of `names` (full refnames, so a name missing on the remote is not
    /// refused client-side); the first failure, if any.
    fn push_deletes(&self, names: &[String], atomic: bool) -> Option<GitError> {
        let mut first_err = None;
        for chunk in chunks(names) {
            let mut a = args(["push", "--quiet", "--delete"]);
            if atomic {
                a.push("--atomic".into());
            }
            a.extend(args(["--", REMOTE]));
            a.extend(chunk.iter().map(|b| OsString::from(format!("{HEADS}{b}"))));
            if let Err(e) = self.ok(a) {
                first_err.get_or_insert(e);
            }
        }
        first_err
    }

    fn remote_branch_set(&self) -> GitResult<BTreeSet<String>> {
        Ok(self
            .remote_heads_under(HEADS)?
            .utf8
            .into_iter()
            .map(|(b, _)| b)
            .collect())
    }

    /// Whether a remote named `origin` is configured (reachable or not). A local-only
    /// checkout has none, which is not the same as an `origin` that cannot be reached.
    pub fn has_origin(&self) -> GitResult<bool> {
        let remotes = self.run(&["remote"])?;
        Ok(remotes.lines().any(|r| r.trim() == REMOTE))
    }

    /// Updates `refs/remotes/origin/<base>` from `origin` (forced, like the default refspec,
    /// so a rewritten base is followed).
    pub fn fetch_base(&self, base: &str) -> GitResult<()> {
        check_branch_name(base)?;
        let refspec = format!("+{HEADS}{base}:refs/remotes/{REMOTE}/{base}");
        self.ok(args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--",
            REMOTE,
            &refspec,
        ]))?;
        Ok(())
    }

    /// Pushes local `branch` to the same name on `origin`; never forced.
    pub fn push_branch(&self, branch: &str) -> GitResult<()> {
        check_branch_name(branch)?;
        let refspec = format!("{HEADS}{branch}:{HEADS}{branch}");
        self.ok(args(["push", "--quiet", "--", REMOTE, &refspec]))?;
        Ok(())
    }

    /// Pushes local `branch` to `remote` on `origin`, never forced: a fix round's commits
    /// onto its pull request's branch, which its attempt started from.
    pub fn push_branch_to(&self, branch: &str, remote: &str) -> GitResult<()> {
        check_branch_name(branch)?;
        check_branch_name(remote)?;
        let refspec = format!("{HEADS}{branch}:{HEADS}{remote}");
        self.ok(args(["push", "--quiet", "--", REMOTE, &refspec]))?;
        Ok(())
    }

    /// The object `rev` names, or `None` when it does not resolve. Append `^{commit}` to
    /// peel a tag.
    pub fn rev_parse(&self, rev: &str) -> GitResult<Option<String>> {
        check_rev(rev)?;
        let a = args(["rev-parse", "--verify", "--quiet", "--end-of-options", rev]);
        let (found, done) = self.yes_no(a, 0, 1)?;
        if !found {
            return Ok(None);
        }
        let sha = done.stdout().trim().to_string();
        if sha.is_empty() || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(done.parse_err(format!("not an object name: {sha:?}")));
        }
        Ok(Some(sha))
    }

    /// The branch checked out here (short name), `None` when HEAD is detached.
    pub fn current_branch(&self) -> GitResult<Option<String>> {
        let (attached, done) = self.yes_no(args(["symbolic-ref", "--quiet", "HEAD"]), 0, 1)?;
        if !attached {
            return Ok(None);
        }
        let full = done.stdout().trim().to_string();
        match full.strip_prefix(HEADS) {
            Some(short) => Ok(Some(short.to_string())),
            None => Err(done.parse_err(format!("HEAD points outside refs/heads/: {full}"))),
        }
    }
}

/// Validates every name before any git call, and drops repeats (git rejects a ref named
/// twice in one push).
fn checked_unique(branches: &[String]) -> GitResult<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for b in branches {
        check_branch_name(b)?;
        if seen.insert(b.as_str()) {
            out.push(b.clone());
        }
    }
    Ok(out)
}

/// Success when none of `wanted` is still `present`, else the partial-deletion error.
fn partial(
    side: &'static str,
    wanted: &[String],
    present: &BTreeSet<String>,
    cause: GitError,
) -> GitResult<()> {
    let (remaining, deleted): (Vec<String>, Vec<String>) =
        wanted.iter().cloned().partition(|b| present.contains(b));
    if remaining.is_empty() {
        return Ok(());
    }
    Err(GitError::PartialDelete {
        side,
        requested: wanted.len(),
        deleted,
        remaining,
        cause: Box::new(cause),
    })
}
