//! Which paths changed, are tracked, or are ignored: the docs sweep's three signals.
//!
//! Every path in and out is relative to the repository root with `/` separators, whatever
//! directory `Git` points at, and prefixes are matched literally (`:(top,literal)`), so a
//! name with `*` or `[` is never read as a glob.

use std::collections::BTreeSet;
use std::ffi::OsString;

use super::parse::{self, Changes};
use super::{Git, GitResult, args, check_rev, top_literal};

/// `:(top,exclude,literal)<prefix>`: leaves a subtree out of a walk.
fn exclude(prefix: &str) -> OsString {
    format!(":(top,exclude,literal){}", prefix.trim_start_matches("./")).into()
}

impl Git {
    /// Work-tree changes under `prefix` against HEAD: modified, staged, deleted, renamed,
    /// untracked and ignored files, each ignored or untracked file listed on its own (an
    /// ignored directory is walked, except a nested repository or worktree, which git
    /// reports as one `dir/` entry). Paths that are not UTF-8 come apart, as bytes.
    pub fn changed_paths(&self, prefix: &str) -> GitResult<Changes> {
        self.changed_paths_excluding(prefix, &[])
    }

    /// [`Git::changed_paths`] without the subtrees in `excluded` (e.g. `.red/tmp/`), which
    /// git then does not walk at all.
    pub fn changed_paths_excluding(&self, prefix: &str, excluded: &[&str]) -> GitResult<Changes> {
        // `--ignored=traditional` with `--untracked-files=all` lists the files inside an
        // ignored directory; `matching` would collapse a wholly ignored `.red/adr/` into
        // one directory entry and hide the docs in it.
        let mut a = args([
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--ignored=traditional",
            "--find-renames",
            "--",
        ]);
        a.push(top_literal(prefix));
        a.extend(excluded.iter().map(|e| exclude(e)));
        let done = self.ok(a)?;
        parse::status_z(&done.out.stdout).map_err(|w| done.parse_err(w.0))
    }

    /// Paths changed under `prefix` by the commits on HEAD that `base_ref` lacks (the
    /// three-dot diff from their merge base), deletions included.
    pub fn paths_changed_ahead(&self, base_ref: &str, prefix: &str) -> GitResult<Changes> {
        self.paths_changed_ahead_excluding(base_ref, prefix, &[])
    }

    /// [`Git::paths_changed_ahead`] without the subtrees in `excluded`.
    pub fn paths_changed_ahead_excluding(
        &self,
        base_ref: &str,
        prefix: &str,
        excluded: &[&str],
    ) -> GitResult<Changes> {
        check_rev(base_ref)?;
        let range = format!("{base_ref}...HEAD");
        let mut a = args([
            "diff",
            "--name-status",
            "-z",
            "--find-renames",
            "--no-relative",
            "--no-ext-diff",
            "--end-of-options",
            &range,
            "--",
        ]);
        a.push(top_literal(prefix));
        a.extend(excluded.iter().map(|e| exclude(e)));
        let done = self.ok(a)?;
        parse::name_status_z(&done.out.stdout).map_err(|w| done.parse_err(w.0))
    }

    /// Paths the commits from `base` to `tip` change (added, modified, deleted, renamed
    /// from and to), as git prints them.
    pub fn paths_changed_between(&self, base: &str, tip: &str) -> GitResult<Vec<String>> {
        check_rev(base)?;
        check_rev(tip)?;
        let a = args([
            "diff",
            "--name-only",
            "-z",
            "--no-renames",
            "--no-relative",
            "--no-ext-diff",
            "--no-textconv",
            "--end-of-options",
            base,
            tip,
            "--",
        ]);
        let done = self.ok(a)?;
        Ok(done
            .out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect())
    }

    /// Files tracked under `prefix` at `rev`.
    pub fn ls_tree_paths(&self, rev: &str, prefix: &str) -> GitResult<Vec<String>> {
        check_rev(rev)?;
        let mut a = args([
            "ls-tree",
            "-r",
            "-z",
            "--name-only",
            "--full-tree",
            "--end-of-options",
            rev,
            "--",
        ]);
        a.push(top_literal(prefix));
        let done = self.ok(a)?;
        parse::nul_list(&done.out.stdout).map_err(|w| done.parse_err(w.0))
    }

    /// Whether the ignore rules (`.gitignore` files, `info/exclude`, `core.excludesFile`)
    /// match `path`, tracked or not and whether or not it exists: the question "would
    /// `git add` skip it without `--force`".
    pub fn is_ignored(&self, path: &str) -> GitResult<bool> {
        Ok(!self.ignored_among(&[path.to_string()])?.is_empty())
    }

    /// The subset of `paths` that ignore rules match ([`Git::is_ignored`] semantics), in
    /// one git call.
    pub fn ignored_among(&self, paths: &[String]) -> GitResult<BTreeSet<String>> {
        if paths.is_empty() {
            return Ok(BTreeSet::new());
        }
        // Paths go through stdin: no argv limit, and `--no-index` keeps check-ignore from
        // matching them as globs against the index (where `a*` would "find" tracked `a`).
        let mut input = Vec::new();
        let mut asked = std::collections::HashMap::new();
        for p in paths {
            let spec = format!(":(top){}", p.trim_start_matches("./"));
            input.extend_from_slice(spec.as_bytes());
            input.push(0);
            asked.insert(spec, p);
        }
        let a = args(["check-ignore", "--stdin", "-z", "--no-index"]);
        let done = self.exec(a, Some(input))?;
        // Exit 1: none of them is ignored.
        match done.code() {
            Some(0) | Some(1) => {}
            _ => return Err(done.failed()),
        }
        let echoed = parse::nul_list(&done.out.stdout).map_err(|w| done.parse_err(w.0))?;
        echoed
            .iter()
            .map(|e| {
                asked.get(e).map(|p| (*p).clone()).ok_or_else(|| {
                    done.parse_err(format!("check-ignore echoed {e:?}, never asked"))
                })
            })
            .collect()
    }
}
