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
    /// Short branch name (`afk/12-x`); `None` when detached or bare.
    pub branch: Option<String>,
    pub bare: bool,
    pub detached: bool,
    pub locked: bool,
    /// Git considers the worktree prunable (its directory is gone); its branch is still
    /// checked out as far as `git branch -D` is concerned until `git worktree prune` runs.
    pub prunable: bool,
}

pub(crate) const HEADS: &str = "refs/heads/";

fn utf8(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| format!("path is not UTF-8: {:?}", String::from_utf8_lossy(bytes)))
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
pub fn nul_list(bytes: &[u8]) -> Result<Vec<String>, String> {
    nul_fields(bytes)
        .into_iter()
        .filter(|f| !f.is_empty())
        .map(utf8)
        .collect()
}

/// `git status --porcelain=v1 -z`: `XY PATH\0`, and for a rename or copy `XY NEW\0OLD\0`.
pub fn status_z(bytes: &[u8]) -> Result<Vec<PathChange>, String> {
    let fields = nul_fields(bytes);
    let mut out = Vec::new();
    let mut i = 0;
    while i < fields.len() {
        let rec = fields[i];
        i += 1;
        if rec.len() < 4 || rec[2] != b' ' {
            return Err(format!(
                "malformed status record {:?}",
                String::from_utf8_lossy(rec)
            ));
        }
        let (x, y) = (rec[0], rec[1]);
        let path = utf8(&rec[3..])?;
        let moved = matches!(x, b'R' | b'C') || matches!(y, b'R' | b'C');
        let orig = if moved {
            let Some(o) = fields.get(i) else {
                return Err(format!("rename record for {path:?} lacks its source path"));
            };
            i += 1;
            Some(utf8(o)?)
        } else {
            None
        };
        let kind = status_kind(x, y);
        out.push(PathChange { path, kind });
        // A copy leaves its source in place; a rename removes it.
        if let Some(o) = orig
            && (x == b'R' || y == b'R')
        {
            out.push(PathChange {
                path: o,
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
pub fn name_status_z(bytes: &[u8]) -> Result<Vec<PathChange>, String> {
    let fields = nul_fields(bytes);
    let mut out = Vec::new();
    let mut i = 0;
    while i < fields.len() {
        let status = fields[i];
        i += 1;
        let Some(&letter) = status.first() else {
            return Err("empty name-status record".into());
        };
        let moved = matches!(letter, b'R' | b'C');
        let need = if moved { 2 } else { 1 };
        if i + need > fields.len() {
            return Err(format!(
                "name-status record {:?} lacks its path",
                String::from_utf8_lossy(status)
            ));
        }
        let first = utf8(fields[i])?;
        if moved {
            let new = utf8(fields[i + 1])?;
            let kind = if letter == b'R' {
                ChangeKind::Renamed
            } else {
                ChangeKind::Added
            };
            out.push(PathChange { path: new, kind });
            if letter == b'R' {
                out.push(PathChange {
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
                    return Err(format!(
                        "unknown name-status letter {:?} for {first:?}",
                        other as char
                    ));
                }
            };
            out.push(PathChange { path: first, kind });
        }
        i += need;
    }
    Ok(out)
}

/// `git worktree list --porcelain -z`: attribute fields, each record ended by an empty field.
pub fn worktree_list_z(bytes: &[u8]) -> Result<Vec<Worktree>, String> {
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
            let path = value.ok_or("worktree record without a path")?;
            cur = Some(Worktree {
                // Worktree paths are filesystem bytes; on Unix any bytes form a path.
                path: PathBuf::from(std::ffi::OsStr::from_bytes(path)),
                head: None,
                branch: None,
                bare: false,
                detached: false,
                locked: false,
                prunable: false,
            });
            continue;
        }
        let Some(w) = cur.as_mut() else {
            return Err(format!(
                "worktree attribute {:?} before any worktree",
                String::from_utf8_lossy(field)
            ));
        };
        match key {
            b"HEAD" => w.head = value.map(utf8).transpose()?,
            b"branch" => {
                let full = utf8(value.ok_or("branch attribute without a ref")?)?;
                // A worktree on a ref outside refs/heads/ holds no branch.
                w.branch = full.strip_prefix(HEADS).map(str::to_string);
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

/// Full refnames, one per line (`for-each-ref --format=%(refname)`), turned into short
/// branch names; lines outside `prefix` are dropped.
pub fn branch_names(text: &str, prefix: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.strip_prefix(HEADS))
        .map(str::to_string)
        .collect()
}

/// `git ls-remote` lines `<sha>\t<ref>` turned into `(short branch, sha)` for refs under
/// `prefix`. ls-remote patterns match ref tails, so the prefix is checked again here.
pub fn ls_remote_heads(text: &str, prefix: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let Some((sha, name)) = line.split_once('\t') else {
            return Err(format!("malformed ls-remote line {line:?}"));
        };
        if !name.starts_with(prefix) || name.ends_with("^{}") {
            continue;
        }
        if let Some(short) = name.strip_prefix(HEADS) {
            out.push((short.to_string(), sha.to_string()));
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
            status_z(raw).unwrap(),
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
            status_z(raw).unwrap(),
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
        assert_eq!(status_z(raw).unwrap(), vec![pc("copy", Added)]);
    }

    #[test]
    fn status_worktree_rename_of_intent_to_add() {
        let raw = b" R b\0a\0";
        assert_eq!(
            status_z(raw).unwrap(),
            vec![pc("b", Renamed), pc("a", Deleted)]
        );
    }

    #[test]
    fn status_path_with_newline_and_arrow() {
        let raw = b"?? odd\nname -> x\0";
        assert_eq!(
            status_z(raw).unwrap(),
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
        assert!(status_z(b"R  only-new\0").unwrap_err().contains("source"));
        assert!(status_z(b"XY\0").unwrap_err().contains("malformed"));
        assert!(status_z(b"?? \xff\xfe\0").unwrap_err().contains("UTF-8"));
        assert_eq!(status_z(b"").unwrap(), vec![]);
    }

    #[test]
    fn name_status_records() {
        let raw =
            "M\0a.md\0A\0dir/b c.md\0D\0old.md\0R087\0from.md\0to é.md\0C100\0src\0dst\0T\0link\0"
                .as_bytes();
        assert_eq!(
            name_status_z(raw).unwrap(),
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
                .contains("lacks")
        );
        assert!(name_status_z(b"Z\0p\0").unwrap_err().contains("unknown"));
        assert_eq!(name_status_z(b"").unwrap(), vec![]);
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
        let text = "refs/heads/afk/1-a\nrefs/heads/afk/w/2-b\nrefs/heads/main\n";
        assert_eq!(
            branch_names(text, "refs/heads/afk/"),
            vec!["afk/1-a", "afk/w/2-b"]
        );
        assert_eq!(branch_names(text, HEADS).len(), 3);
    }

    #[test]
    fn ls_remote_filters_tail_matches() {
        let text = "aaa\trefs/heads/afk/1-a\nbbb\trefs/heads/x/refs/heads/afk/2\nccc\trefs/heads/afk/w/3-c\n";
        assert_eq!(
            ls_remote_heads(text, "refs/heads/afk/").unwrap(),
            vec![
                ("afk/1-a".to_string(), "aaa".to_string()),
                ("afk/w/3-c".to_string(), "ccc".to_string())
            ]
        );
        assert!(ls_remote_heads("garbage\n", HEADS).is_err());
    }

    #[test]
    fn nul_list_handles_missing_terminator() {
        assert_eq!(nul_list(b"a b\0c").unwrap(), vec!["a b", "c"]);
        assert!(nul_list(b"").unwrap().is_empty());
    }
}
