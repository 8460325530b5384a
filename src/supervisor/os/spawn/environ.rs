//! A worker's environment: the supervisor's own, without any `RED_AFK_*` or service-manager
//! variable, then the slot's.
//!
//! The inherited part is read and encoded once for the process: the supervisor never
//! changes its own environment, and reading it at every spawn (the environment lock, a walk,
//! two allocations a variable, then a `KEY=VALUE` string each for `execve`) was a twentieth of
//! a respawn. Only the slot's few variables are encoded per spawn.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::OnceLock;

/// The supervisor's environment as every worker inherits it.
struct Inherited {
    /// `KEY=VALUE`, ready for `execve`.
    entries: Vec<CString>,
}

fn inherited() -> &'static Inherited {
    static INHERITED: OnceLock<Inherited> = OnceLock::new();
    INHERITED.get_or_init(|| Inherited {
        entries: std::env::vars_os()
            .filter(|(k, _)| {
                let k = k.to_string_lossy();
                // The service manager's channel is the supervisor's alone: a worker must
                // not speak for the unit (nor believe a watchdog is watching it).
                !crate::afk_env::is_ours(&k)
                    && !crate::supervisor::os::sd_notify::SERVICE_MANAGER_VARS.contains(&k.as_ref())
            })
            // The environment cannot hold a NUL (it arrives as C strings), so none is lost.
            .filter_map(|(k, v)| CString::new(entry(k.as_bytes(), v.as_bytes())).ok())
            .collect(),
    })
}

fn entry(key: &[u8], value: &[u8]) -> Vec<u8> {
    [key, b"=", value].concat()
}

/// `KEY=VALUE` split at its first `=` (a key never holds one).
fn split(entry: &[u8]) -> (&[u8], &[u8]) {
    match entry.iter().position(|b| *b == b'=') {
        Some(i) => (&entry[..i], &entry[i + 1..]),
        None => (entry, b""),
    }
}

/// One worker's whole environment.
#[derive(Clone)]
pub(super) struct WorkerEnv {
    inherited: &'static Inherited,
    /// The slot's variables, encoded; each replaces an inherited one of its name.
    extra: Vec<CString>,
    /// Whether any of them could: only a name that is not ours, since no `RED_AFK_*` is
    /// inherited. A slot's own are all ours, so a spawn does not compare every inherited
    /// name with each of them (a tenth of a spawn's user time, for nothing).
    shadows: bool,
}

impl WorkerEnv {
    /// The inherited environment and then `extra`. A value holding a NUL byte cannot be
    /// passed to a program: an error naming it.
    pub(super) fn new(extra: &[(String, String)]) -> std::io::Result<WorkerEnv> {
        let extra_entries = extra
            .iter()
            .map(|(k, v)| {
                CString::new(entry(k.as_bytes(), v.as_bytes())).map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("the value of {k} contains a NUL byte"),
                    )
                })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(WorkerEnv {
            inherited: inherited(),
            extra: extra_entries,
            shadows: extra.iter().any(|(k, _)| !crate::afk_env::is_ours(k)),
        })
    }

    /// Every `KEY=VALUE`, in order: the inherited ones not replaced, then the slot's.
    pub(super) fn entries(&self) -> impl Iterator<Item = &CString> {
        self.inherited
            .entries
            .iter()
            .filter(|e| {
                !self.shadows || {
                    let (k, _) = split(e.as_bytes());
                    !self.extra.iter().any(|x| split(x.as_bytes()).0 == k)
                }
            })
            .chain(&self.extra)
    }

    /// The value the worker sees for `key`.
    pub(super) fn get(&self, key: &str) -> Option<&OsStr> {
        self.entries()
            .map(|e| split(e.as_bytes()))
            .filter(|(k, _)| *k == key.as_bytes())
            .last()
            .map(|(_, v)| OsStr::from_bytes(v))
    }

    /// As `(key, value)` pairs, for `Command` (the fallback spawn).
    pub(super) fn pairs(&self) -> Vec<(OsString, OsString)> {
        self.entries()
            .map(|e| {
                let (k, v) = split(e.as_bytes());
                (
                    OsString::from_vec(k.to_vec()),
                    OsString::from_vec(v.to_vec()),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slots_variables_come_last_and_replace_an_inherited_one() {
        let home = std::env::var_os("HOME").expect("HOME is set for the tests");
        let env = WorkerEnv::new(&[
            ("RED_AFK_SLOT".into(), "3".into()),
            ("HOME".into(), "/elsewhere".into()),
        ])
        .unwrap();
        assert_ne!(home, "/elsewhere");
        assert_eq!(env.get("HOME"), Some(OsStr::new("/elsewhere")));
        assert_eq!(env.get("RED_AFK_SLOT"), Some(OsStr::new("3")));
        let pairs = env.pairs();
        assert_eq!(pairs.iter().filter(|(k, _)| k == "HOME").count(), 1);
        let last: Vec<_> = pairs[pairs.len() - 2..]
            .iter()
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(last, ["RED_AFK_SLOT", "HOME"]);
        assert!(
            pairs
                .iter()
                .all(|(k, _)| k == "RED_AFK_SLOT" || !k.to_string_lossy().starts_with("RED_AFK_")),
            "no inherited RED_AFK_*"
        );
        assert!(WorkerEnv::new(&[("X".into(), "a\0b".into())]).is_err());
        // Only names of ours: nothing inherited is replaced, and nothing is lost.
        let ours = WorkerEnv::new(&[("RED_AFK_SLOT".into(), "3".into())]).unwrap();
        assert!(!ours.shadows);
        assert_eq!(ours.pairs().len(), ours.inherited.entries.len() + 1);
        assert_eq!(ours.get("HOME"), Some(home.as_os_str()));
    }
}
