//! What an agent could change beyond its branch, recorded before it runs and compared
//! after: the refs no other part of the fleet moves while it works, the shared git config,
//! attributes and hooks, the worktree's links to its git data, and the fleet's config.
//!
//! Inside bubblewrap none of these is writable, so a difference there means the sandbox
//! failed; with `agent.sandbox = "none"` this is what stands between a hostile agent and a
//! push. Refs other workers and fetches move while an agent works (`refs/remotes/`, the
//! other workers' `refs/heads/afk/<id>/`) are not compared, and rescue refs only must not
//! move or vanish (other workers add theirs): what is compared is what nothing but a person
//! changes while a fleet runs. A change is refused: nothing of the attempt is pushed.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::git::{Git, GitResult};

/// The most of one watched file kept for the comparison; a file past it is compared by its
/// length and its first bytes.
const FILE_CAP: u64 = 4 << 20;

/// What to watch for one attempt.
#[derive(Debug, Clone)]
pub struct Watch {
    /// The repository's common git dir (`.git`).
    pub common_dir: PathBuf,
    pub worktree: PathBuf,
    pub worktree_gitdir: PathBuf,
    /// The attempt's own branch, full (`refs/heads/afk/<id>/<N>-<slug>`): it may move.
    pub branch_ref: String,
    /// The branch directory of the attempt's worker (`refs/heads/afk/<id>/`): its other
    /// branches must not move.
    pub own_prefix: String,
    /// The fleet's files an agent must not change (the config file).
    pub fleet_files: Vec<PathBuf>,
}

/// One recorded state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    refs: BTreeMap<String, String>,
    files: BTreeMap<PathBuf, Seen>,
}

/// A watched file as found: its bytes (up to [`FILE_CAP`]), a link's target, or absent.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Absent,
    File { len: u64, head: Vec<u8>, mode: u32 },
    Link(PathBuf),
    Other,
}

/// One change found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tamper {
    RefMoved {
        name: String,
        from: String,
        to: String,
    },
    RefDeleted {
        name: String,
        was: String,
    },
    RefCreated {
        name: String,
    },
    FileChanged {
        path: PathBuf,
        how: &'static str,
    },
    /// The attempt's branch no longer builds on the commit it started from.
    OffBase {
        branch: String,
        base: String,
    },
    /// The check could not be made: unknown is not clean.
    Unchecked(String),
}

impl fmt::Display for Tamper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = |s: &str| s.chars().take(12).collect::<String>();
        match self {
            Tamper::RefMoved { name, from, to } => {
                write!(f, "{name} moved from {} to {}", short(from), short(to))
            }
            Tamper::RefDeleted { name, .. } => write!(f, "{name} deleted"),
            Tamper::RefCreated { name } => write!(f, "{name} created"),
            Tamper::FileChanged { path, how } => write!(f, "{} {how}", path.display()),
            Tamper::OffBase { branch, base } => write!(
                f,
                "{branch} no longer builds on {}, the commit the attempt started from",
                short(base)
            ),
            Tamper::Unchecked(why) => write!(f, "the check could not be made: {why}"),
        }
    }
}

impl Watch {
    /// Whether `name` is a ref the comparison covers, and whether it is append-only
    /// (rescue refs: new ones are another worker's).
    fn guards(&self, name: &str) -> Option<bool> {
        if name == self.branch_ref || name.starts_with("refs/remotes/") || name == "refs/stash" {
            return None;
        }
        if name.starts_with("refs/heads/afk/") && !name.starts_with(&self.own_prefix) {
            return None;
        }
        Some(name.starts_with("refs/afk/"))
    }

    fn watched_files(&self) -> Vec<PathBuf> {
        let mut files = vec![
            self.common_dir.join("config"),
            self.common_dir.join("info").join("attributes"),
            self.worktree.join(".git"),
            self.worktree_gitdir.join("commondir"),
            self.worktree_gitdir.join("gitdir"),
            self.worktree_gitdir.join("config.worktree"),
        ];
        let hooks = self.common_dir.join("hooks");
        files.push(hooks.clone());
        if let Ok(entries) = std::fs::read_dir(&hooks) {
            files.extend(entries.flatten().map(|e| e.path()));
        }
        files.extend(self.fleet_files.iter().cloned());
        files
    }

    /// Records the refs and files (one git call).
    pub fn take(&self, git: &Git) -> GitResult<Snapshot> {
        let refs = git
            .refs_under("refs/")?
            .into_iter()
            .filter(|(name, _)| self.guards(name).is_some())
            .collect();
        let files = self
            .watched_files()
            .into_iter()
            .map(|p| {
                let seen = seen(&p);
                (p, seen)
            })
            .collect();
        Ok(Snapshot { refs, files })
    }

    /// What changed from `before` to now.
    pub fn compare(&self, git: &Git, before: &Snapshot) -> GitResult<Vec<Tamper>> {
        let after = self.take(git)?;
        let mut found = Vec::new();
        for (name, from) in &before.refs {
            match after.refs.get(name) {
                Some(to) if to == from => {}
                Some(to) => found.push(Tamper::RefMoved {
                    name: name.clone(),
                    from: from.clone(),
                    to: to.clone(),
                }),
                None => found.push(Tamper::RefDeleted {
                    name: name.clone(),
                    was: from.clone(),
                }),
            }
        }
        for name in after.refs.keys() {
            if !before.refs.contains_key(name) && self.guards(name) == Some(false) {
                found.push(Tamper::RefCreated { name: name.clone() });
            }
        }
        // A hook planted now was not listed before: every path of either side is looked at.
        let mut paths: Vec<&PathBuf> = before.files.keys().chain(after.files.keys()).collect();
        paths.sort();
        paths.dedup();
        for p in paths {
            let was = before.files.get(p).unwrap_or(&Seen::Absent);
            let is = after.files.get(p).unwrap_or(&Seen::Absent);
            if was != is {
                let how = match (was, is) {
                    (Seen::Absent, _) => "created",
                    (_, Seen::Absent) => "removed",
                    _ => "changed",
                };
                found.push(Tamper::FileChanged {
                    path: p.clone(),
                    how,
                });
            }
        }
        Ok(found)
    }
}

/// A file as [`Seen`], never following a link.
fn seen(path: &Path) -> Seen {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Seen::Absent;
    };
    if meta.file_type().is_symlink() {
        return Seen::Link(std::fs::read_link(path).unwrap_or_default());
    }
    if meta.is_dir() {
        return Seen::File {
            len: 0,
            head: Vec::new(),
            mode: meta.permissions().mode(),
        };
    }
    if !meta.is_file() {
        return Seen::Other;
    }
    let mut head = Vec::new();
    // Opened without following a link and without blocking: the path was a regular file
    // a moment ago, and an agent may have swapped in a FIFO since.
    let mut read = std::fs::OpenOptions::new();
    read.read(true);
    let opened = crate::fsutil::open_regular(path, read, crate::fsutil::Links::Refuse);
    if let Ok(Some(f)) = opened {
        let _ = f.take(FILE_CAP).read_to_end(&mut head);
    }
    Seen::File {
        len: meta.len(),
        head,
        mode: meta.permissions().mode(),
    }
}

impl Tamper {
    /// Puts a moved, deleted or created ref back as it was recorded (compare and swap:
    /// a ref moved again since is left alone); `Ok(false)` for a change that is not a ref.
    pub fn undo(&self, git: &Git) -> GitResult<bool> {
        match self {
            Tamper::RefMoved { name, from, to } => git.update_ref(name, from, Some(to)),
            Tamper::RefDeleted { name, was } => git.update_ref(name, was, None),
            Tamper::RefCreated { name } => git.delete_refs(std::slice::from_ref(name)),
            _ => return Ok(false),
        }?;
        Ok(true)
    }
}

/// Paths among `changed` under one of the `sensitive` prefixes (`.github/workflows/`):
/// held for a person rather than pushed, since a push may run them with the repository's
/// secrets.
pub fn sensitive<'a>(changed: &'a [String], prefixes: &[String]) -> Vec<&'a str> {
    changed
        .iter()
        .filter(|p| {
            prefixes.iter().any(|s| {
                let s = s.trim_start_matches("./");
                p.starts_with(s) || (s.ends_with('/') && p.as_str() == s.trim_end_matches('/'))
            })
        })
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(dir: &Path) -> Watch {
        Watch {
            common_dir: dir.join(".git"),
            worktree: dir.join("wt"),
            worktree_gitdir: dir.join(".git/worktrees/wt"),
            branch_ref: "refs/heads/afk/w1/3-x".into(),
            own_prefix: "refs/heads/afk/w1/".into(),
            fleet_files: vec![dir.join("fleet.toml")],
        }
    }

    #[test]
    fn which_refs_are_guarded() {
        let w = watch(Path::new("/r"));
        assert_eq!(w.guards("refs/heads/main"), Some(false));
        assert_eq!(w.guards("refs/tags/v1"), Some(false));
        assert_eq!(w.guards("refs/heads/afk/w1/2-y"), Some(false));
        assert_eq!(w.guards("refs/afk/rescue/3/a1"), Some(true));
        assert_eq!(w.guards("refs/heads/afk/w1/3-x"), None, "its own branch");
        assert_eq!(w.guards("refs/heads/afk/w2/4-z"), None, "another worker's");
        assert_eq!(w.guards("refs/remotes/origin/main"), None);
    }

    #[test]
    fn files_planted_changed_and_removed_are_found() {
        let d = tempfile::tempdir().unwrap();
        let w = watch(d.path());
        std::fs::create_dir_all(d.path().join(".git/hooks")).unwrap();
        std::fs::write(d.path().join(".git/config"), "[core]\n").unwrap();
        std::fs::write(d.path().join("fleet.toml"), "x = 1\n").unwrap();
        let files = |w: &Watch| -> BTreeMap<PathBuf, Seen> {
            w.watched_files()
                .into_iter()
                .map(|p| {
                    let s = seen(&p);
                    (p, s)
                })
                .collect()
        };
        let before = files(&w);
        std::fs::write(d.path().join(".git/hooks/pre-push"), "#!/bin/sh\n").unwrap();
        std::fs::write(d.path().join(".git/config"), "[core]\nfsmonitor = x\n").unwrap();
        std::fs::remove_file(d.path().join("fleet.toml")).unwrap();
        let after = files(&w);
        let changed: Vec<&PathBuf> = after
            .keys()
            .chain(before.keys())
            .filter(|p| {
                before.get(*p).unwrap_or(&Seen::Absent) != after.get(*p).unwrap_or(&Seen::Absent)
            })
            .collect();
        let names: Vec<String> = changed
            .iter()
            .map(|p| p.strip_prefix(d.path()).unwrap().display().to_string())
            .collect();
        for want in [".git/hooks/pre-push", ".git/config", "fleet.toml"] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
    }

    #[test]
    fn sensitive_paths_by_prefix() {
        let changed = vec![
            ".github/workflows/ci.yml".to_string(),
            "src/main.rs".to_string(),
            ".github/CODEOWNERS".to_string(),
        ];
        let prefixes = vec![
            ".github/workflows/".to_string(),
            "./.github/CODEOWNERS".to_string(),
        ];
        assert_eq!(
            sensitive(&changed, &prefixes),
            [".github/workflows/ci.yml", ".github/CODEOWNERS"]
        );
    }
}
