//! Recording a checkout's work without touching it: a commit of the working files made
//! through a private index file, and the refs that keep it. The rescue of a dead attempt
//! ([`crate::rescue`]) is built from these; none of them reads or writes the checkout's own
//! index, so a stale `index.lock` or a corrupt index cannot stop them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::parse::HEADS;
use super::{Git, GitResult, REMOTE, args, check_branch_name, check_rev};

/// The fleet's commit identity: set for each commit this layer makes, so the user's git
/// config (a missing `user.email`, a signing key that asks for a passphrase) never stops
/// one and the commit says who made it.
pub const FLEET_NAME: &str = "afk-supervisor";
pub const FLEET_EMAIL: &str = "afk-supervisor@localhost.invalid";

fn identity() -> [(&'static str, &'static str); 4] {
    [
        ("GIT_AUTHOR_NAME", FLEET_NAME),
        ("GIT_AUTHOR_EMAIL", FLEET_EMAIL),
        ("GIT_COMMITTER_NAME", FLEET_NAME),
        ("GIT_COMMITTER_EMAIL", FLEET_EMAIL),
    ]
}

impl Git {
    /// This handle with its index replaced by `index` (`GIT_INDEX_FILE`): what it stages
    /// never reaches the checkout's own index.
    pub fn with_index(&self, index: &Path) -> Git {
        self.clone()
            .with_env([("GIT_INDEX_FILE", index.as_os_str().to_owned())])
    }

    /// The checkout's own git dir, absolute (`.git/worktrees/<name>` for a linked worktree).
    pub fn git_dir(&self) -> GitResult<PathBuf> {
        let out = self.run(&["rev-parse", "--absolute-git-dir"])?;
        Ok(PathBuf::from(out.trim_end_matches(['\n', '\r'])))
    }

    /// Whether the index in use can be read at all (a corrupt one cannot).
    pub fn index_readable(&self) -> bool {
        self.run(&["ls-files", "--stage", "-z"]).is_ok()
    }

    /// Fills the index in use from `rev`'s tree, or empties it when `rev` is `None`.
    pub fn read_tree(&self, rev: Option<&str>) -> GitResult<()> {
        match rev {
            Some(r) => {
                check_rev(r)?;
                self.run(&["read-tree", "--end-of-options", r])?;
            }
            None => {
                self.run(&["read-tree", "--empty"])?;
            }
        }
        Ok(())
    }

    /// Files `add -A` would stage: untracked ones the ignore rules do not match, and
    /// tracked ones modified in the working tree, relative to the top, each once.
    pub fn unstaged_files(&self) -> GitResult<Vec<String>> {
        let done = self.ok(args([
            "ls-files",
            "-z",
            "--full-name",
            "--others",
            "--modified",
            "--exclude-standard",
            "--",
            ":(top)",
        ]))?;
        let mut names =
            super::parse::nul_list(&done.out.stdout).map_err(|w| done.parse_err(w.0))?;
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// `add -A` of the whole tree except `excluded` paths, going on past files it cannot
    /// read (`--ignore-errors`: those stay out and are the error).
    pub fn add_all_except(&self, excluded: &[String]) -> GitResult<()> {
        let mut a = args(["add", "-A", "--ignore-errors", "--", ":(top)"]);
        a.extend(
            excluded
                .iter()
                .map(|p| OsString::from(format!(":(top,exclude,literal){p}"))),
        );
        self.ok(a)?;
        Ok(())
    }

    /// Writes the index in use as a tree object; fails while it holds unmerged entries.
    pub fn write_tree(&self) -> GitResult<String> {
        Ok(self.run(&["write-tree"])?.trim().to_string())
    }

    /// A commit of `tree` on `parent` (none for a root commit) with `message`, made by the
    /// fleet's identity, unsigned and without hooks (`commit-tree` runs none).
    pub fn commit_tree(
        &self,
        tree: &str,
        parent: Option<&str>,
        message: &str,
    ) -> GitResult<String> {
        check_rev(tree)?;
        let mut a = args(["commit-tree", "--no-gpg-sign", "-m", message]);
        if let Some(p) = parent {
            check_rev(p)?;
            a.extend(args(["-p", p]));
        }
        a.extend(args(["--end-of-options", tree]));
        let done = self.clone().with_env(identity()).ok(a)?;
        Ok(done.stdout().trim().to_string())
    }

    /// Points `refname` (a full ref) at `sha`; with `old`, only if it points there now
    /// (compare and swap), with `None` whatever it was.
    pub fn update_ref(&self, refname: &str, sha: &str, old: Option<&str>) -> GitResult<()> {
        check_rev(refname)?;
        check_rev(sha)?;
        let mut a = args(["update-ref", "-m", "afk rescue", "--", refname, sha]);
        if let Some(o) = old {
            check_rev(o)?;
            a.push(o.into());
        }
        self.ok(a)?;
        Ok(())
    }

    /// Commits reachable from `tip` that no ref holds except `own` (a local branch, short
    /// name, e.g. the attempt's own branch): local branches, remote-tracking branches, tags
    /// and `refs/afk/` count.
    pub fn commits_held_nowhere_else(&self, tip: &str, own: Option<&str>) -> GitResult<u64> {
        check_rev(tip)?;
        // `tip` is checked not to look like an option; `--end-of-options` would make the
        // ref options after it revisions.
        let mut a = args(["rev-list", "--count", tip, "--not"]);
        if let Some(b) = own {
            check_branch_name(b)?;
            a.push(format!("--exclude={b}").into());
        }
        a.extend(args([
            "--branches",
            "--remotes",
            "--tags",
            "--glob=refs/afk/*",
        ]));
        let done = self.ok(a)?;
        let out = done.stdout();
        out.trim()
            .parse()
            .map_err(|_| done.parse_err(format!("not a count: {:?}", out.trim())))
    }

    /// Pushes commit `sha` to branch `branch` on `origin`; never forced, so a branch that
    /// holds someone else's commits is refused, not overwritten.
    pub fn push_commit(&self, sha: &str, branch: &str) -> GitResult<()> {
        check_rev(sha)?;
        check_branch_name(branch)?;
        let refspec = format!("{sha}:{HEADS}{branch}");
        self.ok(args(["push", "--quiet", "--", REMOTE, &refspec]))?;
        Ok(())
    }

    /// Refs under `prefix` (full names, e.g. `refs/afk/rescue/`) with the commit each
    /// points at.
    pub fn refs_under(&self, prefix: &str) -> GitResult<Vec<(String, String)>> {
        check_rev(prefix)?;
        let out = self.run(&["for-each-ref", "--format=%(objectname) %(refname)", prefix])?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(sha, name)| (name.to_string(), sha.to_string()))
            .collect())
    }

    /// Deletes full refs (`refs/afk/rescue/...`), one call per ref.
    pub fn delete_refs(&self, refs: &[String]) -> GitResult<()> {
        for r in refs {
            check_rev(r)?;
            self.ok(args(["update-ref", "-d", "--", r]))?;
        }
        Ok(())
    }
}
