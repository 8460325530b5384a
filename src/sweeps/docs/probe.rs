//! The git reads the docs sweep needs beyond the shared git layer: blob ids at a revision,
//! the fork point, the blob git would store for a work-tree file, a path's history on the
//! base and the common git dir. Candidates to move into `crate::git` later.

use std::collections::{HashMap, HashSet};

use super::classify::DOC_PATHSPECS;
use crate::git::parse::ParseError;
use crate::git::{Git, GitError, GitResult};

/// Blob ids of every doc at `rev` (one `ls-tree` of the doc roots; callers look paths
/// up). Only blobs count: a doc path that is a submodule at `rev` is not a doc version.
/// The roots hold no glob characters, so `ls-tree`'s pattern matching is harmless here.
pub fn doc_blobs(git: &Git, rev: &str) -> GitResult<HashMap<String, String>> {
    let mut args = vec!["ls-tree", "-r", "-z", "--full-tree", rev, "--"];
    args.extend(DOC_PATHSPECS);
    let out = git.run(&args)?;
    parse_ls_tree(&out).map_err(|what| GitError::Parse {
        argv: format!("git ls-tree -r -z --full-tree {rev}"),
        what: what.0,
    })
}

/// Parses `git ls-tree -z` records `<mode> SP <type> SP <oid> TAB <path>`.
pub fn parse_ls_tree(out: &str) -> Result<HashMap<String, String>, ParseError> {
    let mut map = HashMap::new();
    for rec in out.split('\0').filter(|r| !r.is_empty()) {
        let (meta, path) = rec
            .split_once('\t')
            .ok_or_else(|| ParseError(format!("no tab in {rec:?}")))?;
        let mut f = meta.split(' ');
        let (_mode, kind, oid) = match (f.next(), f.next(), f.next()) {
            (Some(m), Some(k), Some(o)) => (m, k, o),
            _ => return Err(ParseError(format!("short record {rec:?}"))),
        };
        if kind == "blob" {
            map.insert(path.to_string(), oid.to_string());
        }
    }
    Ok(map)
}

/// The fork point of `a` and `b`; `None` when they share no history.
pub fn merge_base(git: &Git, a: &str, b: &str) -> GitResult<Option<String>> {
    match git.run(&["merge-base", a, b]) {
        Ok(out) => Ok(Some(out.trim().to_string()).filter(|s| !s.is_empty())),
        Err(GitError::Failed { code, .. }) if code == "1" => Ok(None),
        Err(e) => Err(e),
    }
}

/// The blob ids git would store for these work-tree files (with the repo's clean
/// filters, so they compare with committed blobs), in the order given.
pub fn hash_objects(git: &Git, paths: &[&str]) -> GitResult<Vec<String>> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec!["hash-object", "--"];
    args.extend(paths.iter().copied());
    let out = git.run(&args)?;
    let oids: Vec<String> = out.lines().map(|l| l.trim().to_string()).collect();
    if oids.len() != paths.len() || oids.iter().any(|o| !is_oid(o)) {
        return Err(GitError::Parse {
            argv: "git hash-object".into(),
            what: format!("{} ids for {} paths", oids.len(), paths.len()),
        });
    }
    Ok(oids)
}

/// Every blob `path` ever had on `rev`'s history (one walk of that path's commits).
pub fn history_blobs(git: &Git, rev: &str, path: &str) -> GitResult<HashSet<String>> {
    let spec = format!(":(top,literal){path}");
    let out = git.run(&[
        "log",
        "-z",
        "--format=",
        "--raw",
        "--no-abbrev",
        "--no-renames",
        rev,
        "--",
        &spec,
    ])?;
    Ok(parse_raw_blobs(&out))
}

/// Old and new blob ids from `git log -z --raw` records `:<m> <m> <old> <new> <st>\0<path>`.
pub fn parse_raw_blobs(out: &str) -> HashSet<String> {
    let mut set = HashSet::new();
    for rec in out
        .split('\0')
        .filter_map(|r| r.trim_start().strip_prefix(':'))
    {
        let f: Vec<&str> = rec.split(' ').collect();
        for oid in f.iter().skip(2).take(2) {
            if is_oid(oid) && oid.bytes().any(|b| b != b'0') {
                set.insert((*oid).to_string());
            }
        }
    }
    set
}

fn is_oid(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ls_tree_keeps_blobs_only() {
        let oid = "c1827f07e114c20547dc6a7296588870a4b5b62c";
        let out = format!(
            "100644 blob {oid}\t.red/adr/1 two.md\0160000 commit {oid}\t.red/adr/sub\0120000 blob {oid}\t.red/CONTEXT.md\0"
        );
        let m = parse_ls_tree(&out).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[".red/adr/1 two.md"], oid);
        assert!(m.contains_key(".red/CONTEXT.md"));
        assert!(parse_ls_tree("garbage\0").is_err());
        assert!(parse_ls_tree("").unwrap().is_empty());
    }

    #[test]
    fn raw_log_collects_old_and_new_blobs() {
        let a = "c1827f07e114c20547dc6a7296588870a4b5b62c";
        let b = "78981922613b2afb6025042ff6bd878ac1994e85";
        let zero = "0".repeat(40);
        let out = format!(
            ":100644 000000 {a} {zero} D\0.red/adr/1.md\0:100644 100644 {b} {a} M\0.red/adr/1.md\0:000000 100644 {zero} {b} A\0.red/adr/1.md\0"
        );
        let s = parse_raw_blobs(&out);
        assert_eq!(s.len(), 2);
        assert!(s.contains(a) && s.contains(b));
        assert!(parse_raw_blobs("").is_empty());
    }
}
