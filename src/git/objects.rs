//! Objects made outside the repository's store: a sandboxed agent's commits go to an
//! object directory of its attempt's own (`GIT_OBJECT_DIRECTORY`), and the worker takes
//! them in afterwards. Each object is hashed again on the way in (`index-pack` names every
//! object by its content), so an object that lies about its name can never enter the
//! store under that name.

use std::ffi::OsString;
use std::path::Path;

use super::{Git, GitResult, args};

impl Git {
    /// Every object in the object directory `dir`, loose or packed, as hex ids.
    pub fn objects_in(&self, dir: &Path) -> GitResult<Vec<String>> {
        let only = self.clone().with_env([
            (
                OsString::from("GIT_OBJECT_DIRECTORY"),
                dir.as_os_str().to_owned(),
            ),
            (
                OsString::from("GIT_ALTERNATE_OBJECT_DIRECTORIES"),
                OsString::new(),
            ),
        ]);
        let a = args([
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
            "--unordered",
        ]);
        let out = only.ok(a)?.stdout();
        let ids: Vec<String> = out
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        if let Some(bad) = ids
            .iter()
            .find(|id| !id.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(super::GitError::Parse {
                argv: "git cat-file --batch-all-objects".into(),
                what: format!("{bad:?} listed in {}, not an object id", dir.display()),
            });
        }
        Ok(ids)
    }

    /// Takes objects `ids` of the object directory `dir` into this repository's store:
    /// one pack made from them (reading `dir` as an alternate), indexed and checked by
    /// `index-pack`. Returns how many were taken.
    pub fn import_objects(&self, dir: &Path, ids: &[String]) -> GitResult<usize> {
        if ids.is_empty() {
            return Ok(0);
        }
        let reading = self.clone().with_env([(
            OsString::from("GIT_ALTERNATE_OBJECT_DIRECTORIES"),
            dir.as_os_str().to_owned(),
        )]);
        let mut list = ids.join("\n");
        list.push('\n');
        let pack = reading.exec(
            args(["pack-objects", "--stdout", "--no-reuse-object", "-q"]),
            Some(list.into_bytes()),
        )?;
        if !pack.out.status.success() {
            return Err(pack.failed());
        }
        let stored = self.exec(
            args(["index-pack", "--stdin", "--strict"]),
            Some(pack.out.stdout),
        )?;
        if !stored.out.status.success() {
            return Err(stored.failed());
        }
        Ok(ids.len())
    }
}
