//! Parsers for git's machine-readable output. Pure functions over bytes so that every record
//! shape (renames, NUL-separated paths with spaces or newlines, detached worktrees) is unit
//! tested without running git.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// One path a change touches, relative to the repository root with `/` separators.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathChange {
    pub path: String,
    pub kind: ChangeKind,
}

/// How a path differs. A rename is reported twice: the new path as [`ChangeKind::Renamed`]
/// and the old path as [`ChangeKind::Deleted`], so a caller mirroring the change onto another
/// tree needs no rename special case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeKind {
    Modified,
    Added,
    Deleted,
    Renamed,
    Untracked,
    Ignored,
}

/// One entry of `git worktree list --porcelain -z`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    pub path: PathBuf,
    /// `None` for a bare repository entry.
    pub head: Option<String>,
    /// Short branch name (`afk/12-x`); `None` when detached or bare, or when the name is
    /// not UTF-8 (then it is in [`Worktree::branch_not_utf8`]).
    pub branch: Option<String>,
    /// The short branch name's bytes when they are not UTF-8.
    pub branch_not_utf8: Option<Vec<u8>>,
    pub bare: bool,
    pub detached: bool,
    pub locked: bool,
    /// Git considers the worktree prunable (its directory is gone); its branch is still
    /// checked out as far as `git branch -D` is concerned until `git worktree prune` runs.
    pub prunable: bool,
}

pub(crate) const HEADS: &str = "refs/heads/";

/// Paths git reported, split by whether they are UTF-8. Only UTF-8 paths are ever passed
/// back to git or the file system by this crate; the others are kept as bytes so a caller
/// can say, one line each, that it leaves them alone, instead of acting on a lossily
/// decoded name that does not exist (or failing on the whole listing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub paths: Vec<PathChange>,
    /// Paths that are not UTF-8, in the order git gave them. For a rename or copy with one
    /// such side, both sides are here: landing only the other half would lose the file.
    pub not_utf8: Vec<Vec<u8>>,
}

impl From<Vec<PathChange>> for Changes {
    fn from(paths: Vec<PathChange>) -> Self {
        Changes {
            paths,
            not_utf8: Vec::new(),
        }
    }
}

/// Ref names git listed, split by whether they are UTF-8 (see [`Changes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names<T> {
    pub utf8: Vec<T>,
    /// Short names (without `refs/heads/`) that are not UTF-8, as git gave them.
    pub not_utf8: Vec<Vec<u8>>,
}

/// What git printed that its parser could not read; `GitError::Parse` adds the command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

fn utf8(bytes: &[u8]) -> Result<String, ParseError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        ParseError(format!(
            "path is not UTF-8: {:?}",
            String::from_utf8_lossy(bytes)
        ))
    })
}

/// Splits NUL-terminated fields; a missing final NUL is tolerated, empty fields are kept
/// (worktree records are separated by an empty field).
fn nul_fields(bytes: &[u8]) -> Vec<&[u8]> {
    let mut fields: Vec<&[u8]> = bytes.split(|b| *b == 0).collect();
    if bytes.last() == Some(&0) || bytes.is_empty() {
        fields.pop();
    }
    fields
}

/// A NUL-separated list of UTF-8 strings (`ls-tree -z --name-only`, `check-ignore -z`).
pub fn nul_list(bytes: &[u8]) -> Result<Vec<String>, ParseError> {
    nul_fields(bytes)
        .into_iter()
        .filter(|f| !f.is_empty())
        .map(utf8)
        .collect()
}

/// `git status --porcelain=v1 -z`: `XY PATH\0`, and for a rename or copy `XY NEW\0OLD\0`.
pub fn status_z(bytes: &[u8]) -> Result<Changes, ParseError> {
    let fields = nul_fields(bytes);
    let mut out = Changes::default();
    let mut i = 0;
    while i < fields.len() {
        let rec = fields[i];
        i += 1;
        if rec.len() < 4 || rec[2] != b' ' {
            return Err(ParseError(format!(
                "malformed status record {:?}",
                String::from_utf8_lossy(rec)
            )));
        }
        let (x, y) = (rec[0], rec[1]);
        let raw = &rec[3..];
        let moved = matches!(x, b'R' | b'C') || matches!(y, b'R' | b'C');
        let orig = if moved {
            let Some(o) = fields.get(i) else {
                return Err(ParseError(format!(
                    "rename record for {:?} lacks its source path",
                    String::from_utf8_lossy(raw)
                )));
            };
            i += 1;
            Some(*o)
        } else {
            None
        };
        let (Ok(path), Ok(orig)) = (
            std::str::from_utf8(raw),
            orig.map(std::str::from_utf8).transpose(),
        ) else {
            out.not_utf8.push(raw.to_vec());
            out.not_utf8.extend(orig.map(<[u8]>::to_vec));
            continue;
        };
        let kind = status_kind(x, y);
        out.paths.push(PathChange {
            path: path.to_string(),
            kind,
        });
        // A copy leaves its source in place; a rename removes it.
        if let Some(o) = orig
            && (x == b'R' || y == b'R')
        {
            out.paths.push(PathChange {
                path: o.to_string(),
                kind: ChangeKind::Deleted,
            });
        }
    }
    Ok(out)
}

fn status_kind(x: u8, y: u8) -> ChangeKind {
    match (x, y) {
        (b'?', b'?') => ChangeKind::Untracked,
        (b'!', b'!') => ChangeKind::Ignored,
        // Gone from the work tree, whatever the index says.
        (_, b'D') => ChangeKind::Deleted,
        // Unmerged: the path exists in some form with conflicting content.
        (b'U', _) | (_, b'U') | (b'A', b'A') => ChangeKind::Modified,
        (b'D', _) => ChangeKind::Deleted,
        (b'R', _) | (_, b'R') => ChangeKind::Renamed,
        (b'A', _) | (b'C', _) | (_, b'A') | (_, b'C') => ChangeKind::Added,
        _ => ChangeKind::Modified,
    }
}

/// `git diff --name-status -z`: `S\0PATH\0`, and for a rename or copy `R100\0OLD\0NEW\0`.
pub fn name_status_z(bytes: &[u8]) -> Result<Changes, ParseError> {
    let fields = nul_fields(bytes);
    let mut out = Changes::default();
    let mut i = 0;
    while i < fields.len() {
        let status = fields[i];
        i += 1;
        let Some(&letter) = status.first() else {
            return Err(ParseError("empty name-status record".into()));
        };
        let moved = matches!(letter, b'R' | b'C');
        let need = if moved { 2 } else { 1 };
        if i + need > fields.len() {
            return Err(ParseError(format!(
                "name-status record {:?} lacks its path",
                String::from_utf8_lossy(status)
            )));
        }
        let record = &fields[i..i + need];
        i += need;
        let Ok(names) = record
            .iter()
            .map(|f| std::str::from_utf8(f).map(str::to_string))
            .collect::<Result<Vec<String>, _>>()
        else {
            out.not_utf8.extend(record.iter().map(|f| f.to_vec()));
            continue;
        };
        let first = names[0].clone();
        if moved {
            let new = names[1].clone();
            let kind = if letter == b'R' {
                ChangeKind::Renamed
            } else {
                ChangeKind::Added
            };
            out.paths.push(PathChange { path: new, kind });
            if letter == b'R' {
                out.paths.push(PathChange {
                    path: first,
                    kind: ChangeKind::Deleted,
                });
            }
        } else {
            let kind = match letter {
                b'A' => ChangeKind::Added,
                b'D' => ChangeKind::Deleted,
                b'M' | b'T' | b'U' | b'X' => ChangeKind::Modified,
                other => {
                    return Err(ParseError(format!(
                        "unknown name-status letter {:?} for {first:?}",
                        other as char
                    )));
                }
            };
            out.paths.push(PathChange { path: first, kind });
        }
    }
    Ok(out)
}

/// `git worktree list --porcelain -z`: attribute fields, each record ended by an empty field.
pub fn worktree_list_z(bytes: &[u8]) -> Result<Vec<Worktree>, ParseError> {
    let mut out = Vec::new();
    let mut cur: Option<Worktree> = None;
    for field in nul_fields(bytes) {
        if field.is_empty() {
            if let Some(w) = cur.take() {
                out.push(w);
            }
            continue;
        }
        let (key, value) = match field.iter().position(|b| *b == b' ') {
            Some(p) => (&field[..p], Some(&field[p + 1..])),
            None => (field, None),
        };
        if key == b"worktree" {
            if let Some(w) = cur.take() {
                out.push(w);
            }
            let path = value.ok_or_else(|| ParseError("worktree record without a path".into()))?;
            cur = Some(Worktree {
                // Worktree paths are filesystem bytes; on Unix any bytes form a path.
                path: PathBuf::from(std::ffi::OsStr::from_bytes(path)),
                head: None,
                branch: None,
                branch_not_utf8: None,
                bare: false,
                detached: false,
                locked: false,
                prunable: false,
            });
            continue;
        }
        let Some(w) = cur.as_mut() else {
            return Err(ParseError(format!(
                "worktree attribute {:?} before any worktree",
                String::from_utf8_lossy(field)
            )));
        };
        match key {
            b"HEAD" => w.head = value.map(utf8).transpose()?,
            b"branch" => {
                let full =
                    value.ok_or_else(|| ParseError("branch attribute without a ref".into()))?;
                // A worktree on a ref outside refs/heads/ holds no branch.
                let Some(short) = full.strip_prefix(HEADS.as_bytes()) else {
                    continue;
                };
                match std::str::from_utf8(short) {
                    Ok(b) => w.branch = Some(b.to_string()),
                    Err(_) => w.branch_not_utf8 = Some(short.to_vec()),
                }
            }
            b"bare" => w.bare = true,
            b"detached" => w.detached = true,
            b"locked" => w.locked = true,
            b"prunable" => w.prunable = true,
            // Attributes added by newer git are not ours to reject.
            _ => {}
        }
    }
    if let Some(w) = cur.take() {
        out.push(w);
    }
    Ok(out)
}

/// Lines of git output as bytes (a ref name cannot hold a newline), `\r\n` tolerated.
fn byte_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
}

/// Full refnames, one per line (`for-each-ref --format=%(refname)`), turned into short
/// branch names; lines outside `prefix` are dropped.
pub fn branch_names(bytes: &[u8], prefix: &str) -> Names<String> {
    let mut out = Names::default();
    for line in byte_lines(bytes).filter(|l| l.starts_with(prefix.as_bytes())) {
        let Some(short) = line.strip_prefix(HEADS.as_bytes()) else {
            continue;
        };
        match std::str::from_utf8(short) {
            Ok(s) => out.utf8.push(s.to_string()),
            Err(_) => out.not_utf8.push(short.to_vec()),
        }
    }
    out
}

/// `git ls-remote` lines `<sha>\t<ref>` turned into `(short branch, sha)` for refs under
/// `prefix`. ls-remote patterns match ref tails, so the prefix is checked again here.
pub fn ls_remote_heads(bytes: &[u8], prefix: &str) -> Result<Names<(String, String)>, ParseError> {
    let mut out = Names::default();
    for line in byte_lines(bytes) {
        let Some(tab) = line.iter().position(|b| *b == b'\t') else {
            return Err(ParseError(format!(
                "malformed ls-remote line {:?}",
                crate::text::excerpt(&String::from_utf8_lossy(line))
            )));
        };
        let (sha, name) = (&line[..tab], &line[tab + 1..]);
        if !name.starts_with(prefix.as_bytes()) || name.ends_with(b"^{}") {
            continue;
        }
        let Some(short) = name.strip_prefix(HEADS.as_bytes()) else {
            continue;
        };
        let sha = utf8(sha)?;
        match std::str::from_utf8(short) {
            Ok(s) => out.utf8.push((s.to_string(), sha)),
            Err(_) => out.not_utf8.push(short.to_vec()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ChangeKind::*;

    fn pc(path: &str, kind: ChangeKind) -> PathChange {
        PathChange {
            path: path.into(),
            kind,
        }
    }

    #[test]
    fn status_plain_records() {
        let raw = b" M src/a.rs\0 D gone.md\0?? new dir/with space.md\0!! .red/adr/x.md\0A  added\0M  staged\0";
        assert_eq!(
            status_z(raw).unwrap().paths,
            vec![
                pc("src/a.rs", Modified),
                pc("gone.md", Deleted),
                pc("new dir/with space.md", Untracked),
                pc(".red/adr/x.md", Ignored),
                pc("added", Added),
                pc("staged", Modified),
            ]
        );
    }

    #[test]
    fn status_rename_is_new_then_old() {
        let raw = "R  docs/new é.md\0docs/old.md\0 M after\0".as_bytes();
        assert_eq!(
            status_z(raw).unwrap().paths,
            vec![
                pc("docs/new é.md", Renamed),
                pc("docs/old.md", Deleted),
                pc("after", Modified),
            ]
        );
    }

    #[test]
    fn status_copy_keeps_source() {
        let raw = b"C  copy\0orig\0";
        assert_eq!(status_z(raw).unwrap().paths, vec![pc("copy", Added)]);
    }

    #[test]
    fn status_worktree_rename_of_intent_to_add() {
        let raw = b" R b\0a\0";
        assert_eq!(
            status_z(raw).unwrap().paths,
            vec![pc("b", Renamed), pc("a", Deleted)]
        );
    }

    #[test]
    fn status_path_with_newline_and_arrow() {
        let raw = b"?? odd\nname -> x\0";
        assert_eq!(
            status_z(raw).unwrap().paths,
            vec![pc("odd\nname -> x", Untracked)]
        );
    }

    #[test]
    fn status_states_map_to_kinds() {
        assert_eq!(status_kind(b'A', b'D'), Deleted);
        assert_eq!(status_kind(b'A', b'M'), Added);
        assert_eq!(status_kind(b'U', b'U'), Modified);
        assert_eq!(status_kind(b'D', b'D'), Deleted);
        assert_eq!(status_kind(b'R', b'M'), Renamed);
        assert_eq!(status_kind(b'M', b'M'), Modified);
        assert_eq!(status_kind(b' ', b'T'), Modified);
    }

    #[test]
    fn status_errors_are_reported() {
        assert!(status_z(b"R  only-new\0").unwrap_err().0.contains("source"));
        assert!(status_z(b"XY\0").unwrap_err().0.contains("malformed"));
        assert_eq!(status_z(b"").unwrap(), Changes::default());
    }

    #[test]
    fn name_status_records() {
        let raw =
            "M\0a.md\0A\0dir/b c.md\0D\0old.md\0R087\0from.md\0to é.md\0C100\0src\0dst\0T\0link\0"
                .as_bytes();
        assert_eq!(
            name_status_z(raw).unwrap().paths,
            vec![
                pc("a.md", Modified),
                pc("dir/b c.md", Added),
                pc("old.md", Deleted),
                pc("to é.md", Renamed),
                pc("from.md", Deleted),
                pc("dst", Added),
                pc("link", Modified),
            ]
        );
    }

    #[test]
    fn name_status_truncated_and_unknown() {
        assert!(
            name_status_z(b"R100\0only\0")
                .unwrap_err()
                .0
                .contains("lacks")
        );
        assert!(name_status_z(b"Z\0p\0").unwrap_err().0.contains("unknown"));
        assert_eq!(name_status_z(b"").unwrap(), Changes::default());
    }

    #[test]
    fn worktree_list_records() {
        let raw = b"worktree /r\0HEAD aaaa\0branch refs/heads/main\0\0\
worktree /r/.red/tmp/w 1\0HEAD bbbb\0branch refs/heads/afk/w-1/12-x\0locked\0\0\
worktree /d\0HEAD cccc\0detached\0prunable gitdir file points to non-existent location\0\0";
        let w = worktree_list_z(raw).unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!(w[0].path, PathBuf::from("/r"));
        assert_eq!(w[0].branch.as_deref(), Some("main"));
        assert_eq!(w[1].path, PathBuf::from("/r/.red/tmp/w 1"));
        assert_eq!(w[1].branch.as_deref(), Some("afk/w-1/12-x"));
        assert!(w[1].locked);
        assert_eq!(w[2].branch, None);
        assert!(w[2].detached && w[2].prunable);
        assert_eq!(w[2].head.as_deref(), Some("cccc"));
    }

    #[test]
    fn worktree_list_bare_and_errors() {
        let w = worktree_list_z(b"worktree /b.git\0bare\0\0").unwrap();
        assert!(w[0].bare && w[0].head.is_none());
        assert!(worktree_list_z(b"HEAD aaaa\0\0").is_err());
        assert!(worktree_list_z(b"").unwrap().is_empty());
    }

    #[test]
    fn branch_names_strip_and_filter() {
        let text = b"refs/heads/afk/1-a\nrefs/heads/afk/w/2-b\nrefs/heads/main\n";
        assert_eq!(
            branch_names(text, "refs/heads/afk/").utf8,
            vec!["afk/1-a", "afk/w/2-b"]
        );
        assert_eq!(branch_names(text, HEADS).utf8.len(), 3);
    }

    #[test]
    fn ls_remote_filters_tail_matches() {
        let text = b"aaa\trefs/heads/afk/1-a\nbbb\trefs/heads/x/refs/heads/afk/2\nccc\trefs/heads/afk/w/3-c\n";
        assert_eq!(
            ls_remote_heads(text, "refs/heads/afk/").unwrap().utf8,
            vec![
                ("afk/1-a".to_string(), "aaa".to_string()),
                ("afk/w/3-c".to_string(), "ccc".to_string())
            ]
        );
        assert!(ls_remote_heads(b"garbage\n", HEADS).is_err());
    }

    /// A name that is not UTF-8 is set apart as bytes, never decoded lossily into a name
    /// that does not exist, and never fails the rest of the listing.
    #[test]
    fn names_that_are_not_utf8_are_set_apart() {
        let raw = b"?? .red/adr/\xff.md\0?? .red/adr/ok.md\0R  .red/adr/new\xfe\0.red/adr/old.md\0";
        let c = status_z(raw).unwrap();
        assert_eq!(c.paths, vec![pc(".red/adr/ok.md", Untracked)]);
        assert_eq!(
            c.not_utf8,
            vec![
                b".red/adr/\xff.md".to_vec(),
                b".red/adr/new\xfe".to_vec(),
                b".red/adr/old.md".to_vec()
            ]
        );
        let c = name_status_z(b"A\0x\xff\0M\0y\0").unwrap();
        assert_eq!(c.paths, vec![pc("y", Modified)]);
        assert_eq!(c.not_utf8, vec![b"x\xff".to_vec()]);
        let n = branch_names(
            b"refs/heads/afk/1-\xff\nrefs/heads/afk/2-b\n",
            "refs/heads/afk/",
        );
        assert_eq!(n.utf8, vec!["afk/2-b"]);
        assert_eq!(n.not_utf8, vec![b"afk/1-\xff".to_vec()]);
        let n = ls_remote_heads(b"aaa\trefs/heads/afk/1-\xff\n", "refs/heads/afk/").unwrap();
        assert!(n.utf8.is_empty());
        assert_eq!(n.not_utf8, vec![b"afk/1-\xff".to_vec()]);
        let w = worktree_list_z(b"worktree /r\0HEAD aa\0branch refs/heads/afk/\xff\0\0").unwrap();
        assert_eq!(w[0].branch, None);
        assert_eq!(w[0].branch_not_utf8.as_deref(), Some(&b"afk/\xff"[..]));
    }

    #[test]
    fn nul_list_handles_missing_terminator() {
        assert_eq!(nul_list(b"a b\0c").unwrap(), vec!["a b", "c"]);
        assert!(nul_list(b"").unwrap().is_empty());
    }
}
