//! The fleet's subtree of the cgroup v2 hierarchy, and what start-up decides about it.
//!
//! ```text
//! <parent>/afk-<repo>-<hash>/        the fleet (fleet.memory_max); no process of its own
//!     supervisor/                    the supervisor (the no-internal-processes rule)
//!     slot-<N>/                      one per slot; no process of its own
//!         attempt-<sup pid>-<seq>/   one per spawn: the worker and all it starts
//! ```
//!
//! `<parent>` is `isolation.cgroup_root` when set, else the supervisor's own cgroup as it
//! started. The fleet's directory is named from the repo's supervisor lane, so fleets of
//! different repos started from one cgroup (a shell, a CI job, the hierarchy's root) never
//! share a directory, and a successor supervisor of the same repo finds its predecessor's.
//! A fresh attempt cgroup per spawn keeps an old attempt's leftovers out of the new one's
//! figures.

use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::sync::Mutex;

use super::hierarchy::{self, HierarchyError};
use super::{Cgroup, CgroupError};

/// The leaf the supervisor itself lives in.
pub const SUPERVISOR_LEAF: &str = "supervisor";

/// Controllers the fleet enables for its attempts where they are offered.
const WANTED: [&str; 3] = ["cpu", "memory", "pids"];

/// One limit from the configuration: its key, the cgroup file it sets, and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub key: &'static str,
    pub file: &'static str,
    pub value: String,
}

impl Limit {
    /// The controller whose file this is (`memory.max` needs `memory`).
    pub fn controller(&self) -> &str {
        self.file.split('.').next().unwrap_or(self.file)
    }
}

/// A fleet's cgroups, once set up.
#[derive(Debug)]
pub struct FleetCgroups {
    root: Cgroup,
    /// Where the supervisor was before it moved into its leaf (it goes back there at the
    /// end, so the fleet's directories can be removed).
    origin: Cgroup,
    /// Controllers the attempts have (enabled down to them).
    controllers: Vec<String>,
    /// The worker limits that can be enforced, set on every attempt.
    worker_limits: Vec<Limit>,
    /// Slots whose directory this supervisor made (or found) and enabled controllers in.
    ready_slots: Mutex<HashSet<usize>>,
}

/// What start-up found: the fleet's cgroups, and one line per limit that cannot be
/// enforced.
#[derive(Debug)]
pub struct Setup {
    pub cgroups: FleetCgroups,
    pub notes: Vec<String>,
}

/// The fleet directory's name for the supervisor lane `lane` of the repo at `repo`.
pub fn fleet_name(repo: &Path, lane: &Path) -> String {
    let base: String = repo
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .take(40)
        .collect();
    let canonical = std::fs::canonicalize(lane).unwrap_or_else(|_| lane.to_path_buf());
    // FNV-1a: stable across builds and hosts, which std's hasher does not promise.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("afk-{base}-{:08x}", h as u32)
}

/// The fleet directory under `parent` (`isolation.cgroup_root`) or the supervisor's own
/// cgroup, without creating anything: for a `stop` or a test that looks for it.
pub fn fleet_dir(parent: Option<&Path>, name: &str) -> Result<Cgroup, HierarchyError> {
    let parent = match parent {
        Some(p) => Cgroup::at(p),
        None => outside_own_leaf(hierarchy::own()?.1, name),
    };
    Ok(parent.child(name))
}

/// A supervisor started from inside a fleet's leaf (a restart from the leaf's shell) uses
/// that fleet's parent, not a fleet nested in its own.
fn outside_own_leaf(own: Cgroup, name: &str) -> Cgroup {
    let d = own.dir();
    let in_leaf = d.file_name().is_some_and(|n| n == SUPERVISOR_LEAF)
        && d.parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n.to_string_lossy() == name);
    match (in_leaf, d.parent().and_then(Path::parent)) {
        (true, Some(p)) => Cgroup::at(p),
        _ => own,
    }
}

/// The fleet's directories made and this process in its leaf, the controllers not yet
/// enabled: [`enter`] is what start-up does while the boot sweeps run (the move waits out
/// an RCU grace period), [`Entered::configure`] what it does after them. The kernel
/// refuses to enable a controller in a cgroup that holds processes, and the sweeps' `git`
/// calls forked before the move stay where the supervisor started until they end.
#[derive(Debug)]
pub struct Entered {
    parent: Cgroup,
    /// The parent is the hierarchy's root (the host's, never shaped by the fleet).
    parent_is_mount_root: bool,
    root: Cgroup,
    origin: Cgroup,
}

/// Why the fleet's subtree could not be made or entered.
#[derive(Debug, thiserror::Error)]
pub enum EnterError {
    #[error(transparent)]
    Hierarchy(#[from] HierarchyError),
    /// `isolation.cgroup_root` names no directory of the hierarchy.
    #[error("{} is not a cgroup v2 directory", .parent.display())]
    NoParent { parent: std::path::PathBuf },
    #[error("cgroup v2 subtree not writable: {0}")]
    NotWritable(#[source] CgroupError),
}

/// Makes the fleet's directory and leaf and moves this process in; or says why the subtree
/// is not writable (the caller then runs in process-group mode, or refuses to start where
/// `isolation.mode = "cgroup"` asked for it).
pub fn enter(parent: Option<&Path>, name: &str) -> Result<Entered, EnterError> {
    let (mount, own) = hierarchy::own()?;
    let origin = own.clone();
    let parent = match parent {
        Some(p) => {
            let c = Cgroup::at(p);
            if !c.exists() {
                return Err(EnterError::NoParent {
                    parent: p.to_path_buf(),
                });
            }
            c
        }
        None => outside_own_leaf(own, name),
    };
    let root = parent.child(name);
    let leaf = root.child(SUPERVISOR_LEAF);
    let existed = root.exists();
    let made = root
        .create()
        .and_then(|()| leaf.create())
        .and_then(|()| leaf.move_pid(0));
    if let Err(e) = made {
        if !existed {
            let _ = root.remove_tree();
        }
        return Err(EnterError::NotWritable(e));
    }
    Ok(Entered {
        parent_is_mount_root: mount.point == parent.dir(),
        parent,
        root,
        origin,
    })
}

/// This process back in `origin`, where it started, and every empty directory of the fleet
/// at `root` removed; a populated one stays (and is named in the error).
fn leave(origin: &Cgroup, root: &Cgroup) -> Result<(), CgroupError> {
    let _ = origin.move_pid(0);
    root.remove_tree()
}

impl Entered {
    /// What a start that ends before the fleet runs leaves: see [`leave`].
    pub fn teardown(&self) -> Result<(), CgroupError> {
        leave(&self.origin, &self.root)
    }

    /// The controllers enabled down to the attempts and the limits checked and set, with
    /// one line per limit that cannot be enforced.
    pub fn configure(self, worker_limits: &[Limit], fleet_limits: &[Limit]) -> Setup {
        let Entered {
            parent,
            parent_is_mount_root,
            root,
            origin,
        } = self;
        // Controllers reach an attempt only if every cgroup above it enables them for its
        // children. The fleet's parent is enabled only where it is not the hierarchy's root
        // (a delegated subtree is ours to shape; the root is the host's).
        let in_parent = parent.controllers();
        let offered: Vec<String> = WANTED
            .iter()
            .map(|c| c.to_string())
            .filter(|c| in_parent.contains(c))
            .collect();
        if !parent_is_mount_root {
            parent.enable(&offered);
        }
        let have = root.controllers();
        let in_root: Vec<String> = offered.into_iter().filter(|c| have.contains(c)).collect();
        let controllers = root.enable(&in_root);
        let mut notes = Vec::new();
        let usable = |l: &Limit, have: &[String], notes: &mut Vec<String>| {
            let ok = have.iter().any(|c| c == l.controller());
            if !ok {
                notes.push(format!(
                    "{} = {:?} not enforceable: the {} controller is not delegated to {}",
                    l.key,
                    l.value,
                    l.controller(),
                    root.dir().display()
                ));
            }
            ok
        };
        for l in fleet_limits {
            if usable(l, &have, &mut notes)
                && let Err(e) = root.set(l.file, &l.value)
            {
                notes.push(format!("{} = {:?} not enforceable: {e}", l.key, l.value));
            }
        }
        let worker_limits = worker_limits
            .iter()
            .filter(|l| usable(l, &controllers, &mut notes))
            .cloned()
            .collect();
        Setup {
            cgroups: FleetCgroups {
                root,
                origin,
                controllers,
                worker_limits,
                ready_slots: Mutex::default(),
            },
            notes,
        }
    }
}

impl FleetCgroups {
    pub fn root(&self) -> &Cgroup {
        &self.root
    }

    /// Controllers each attempt has (`memory`, `cpu`, `pids`, where delegated).
    pub fn controllers(&self) -> &[String] {
        &self.controllers
    }

    /// Whether the attempts have the memory controller (and so its files).
    pub fn has_memory(&self) -> bool {
        self.controllers.iter().any(|c| c == "memory")
    }

    pub fn slot(&self, slot: usize) -> Cgroup {
        self.root.child(&format!("slot-{slot}"))
    }

    /// A fresh cgroup for one spawn in `slot`, with the worker limits set. A leftover
    /// directory of that name (a reused supervisor pid) is removed first; one still
    /// populated is an error, never shared.
    ///
    /// A slot's own directory is made and its controllers enabled once per supervisor (the
    /// first spawn in it); after that a spawn costs one `mkdir`, and a slot directory found
    /// gone (removed from outside) is made again.
    pub fn attempt(&self, slot: usize, sup_pid: i32, seq: u64) -> Result<Cgroup, CgroupError> {
        let s = self.slot(slot);
        let a = s.child(&format!("attempt-{sup_pid}-{seq}"));
        let ready = self.ready_slots.lock().is_ok_and(|r| r.contains(&slot));
        if !ready {
            self.prepare_slot(slot, &s)?;
        }
        match a.make() {
            Ok(()) => {}
            Err(e) if e.source.kind() == io::ErrorKind::AlreadyExists => {
                a.remove_tree()?;
                a.make()?;
            }
            Err(e) if e.source.kind() == io::ErrorKind::NotFound && ready => {
                self.prepare_slot(slot, &s)?;
                a.make()?;
            }
            Err(e) => return Err(e),
        }
        for l in &self.worker_limits {
            // Checked enforceable at start-up; a value the kernel refuses was said there
            // too, so a failure here changes nothing it did not already say.
            let _ = a.set(l.file, &l.value);
        }
        Ok(a)
    }

    /// Makes slot `slot`'s directory `s` (one there already is fine) and enables the
    /// attempts' controllers in it. With none delegated there is nothing to enable, and
    /// `cgroup.subtree_control` is not even read (it was, twice a slot: 128 reads in a
    /// start of 64).
    fn prepare_slot(&self, slot: usize, s: &Cgroup) -> Result<(), CgroupError> {
        s.create()?;
        if !self.controllers.is_empty() {
            s.enable(&self.controllers);
        }
        if let Ok(mut r) = self.ready_slots.lock() {
            r.insert(slot);
        }
        Ok(())
    }

    /// Every attempt cgroup of the fleet with its slot: what a successor adopts or ends.
    pub fn attempts(&self) -> Vec<(usize, Cgroup)> {
        attempts_under(&self.root)
    }

    /// The end of a stop: see [`leave`].
    pub fn teardown(&self) -> Result<(), CgroupError> {
        leave(&self.origin, &self.root)
    }
}

/// The attempt cgroups below a fleet directory, by slot.
pub fn attempts_under(root: &Cgroup) -> Vec<(usize, Cgroup)> {
    let mut out = Vec::new();
    for s in root.children() {
        let slot = s
            .dir()
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("slot-"))
            .and_then(|n| n.parse().ok());
        if let Some(slot) = slot {
            out.extend(s.children().into_iter().map(|a| (slot, a)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_names_differ_by_lane_and_stay_valid() {
        let a = fleet_name(Path::new("/x/my repo"), Path::new("/x/my repo/.red/l"));
        let b = fleet_name(Path::new("/y/my repo"), Path::new("/y/my repo/.red/l"));
        assert_ne!(a, b);
        assert!(a.starts_with("afk-my_repo-"), "{a}");
        assert!(!a.contains('/'));
        assert_eq!(
            a,
            fleet_name(Path::new("/x/my repo"), Path::new("/x/my repo/.red/l"))
        );
    }

    #[test]
    fn a_supervisor_in_its_own_leaf_uses_the_fleets_parent() {
        let own = Cgroup::at("/cg/p/afk-r-1/supervisor");
        assert_eq!(outside_own_leaf(own, "afk-r-1").dir(), Path::new("/cg/p"));
        let other = Cgroup::at("/cg/p/afk-r-2/supervisor");
        assert_eq!(
            outside_own_leaf(other.clone(), "afk-r-1").dir(),
            other.dir()
        );
    }

    /// A slot is made once per supervisor, yet one removed from outside is made again;
    /// a leftover attempt of the same name is replaced, never shared; a tree with a
    /// cgroup below goes whole.
    #[test]
    #[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
    fn slots_are_made_once_and_again_when_gone() {
        let (_, own) = hierarchy::own().unwrap();
        let root = own.child(&format!("afk-unit-fleet-{}", std::process::id()));
        root.create().unwrap();
        // Removed even when an assertion fails (nothing runs in it).
        struct Gone(Cgroup);
        impl Drop for Gone {
            fn drop(&mut self) {
                let _ = self.0.remove_tree();
            }
        }
        let _gone = Gone(root.clone());
        let f = FleetCgroups {
            root: root.clone(),
            origin: own,
            controllers: Vec::new(),
            worker_limits: Vec::new(),
            ready_slots: Mutex::default(),
        };
        let a = f.attempt(0, 1, 1).unwrap();
        assert!(a.exists() && a.dir().starts_with(f.slot(0).dir()));
        assert!(f.ready_slots.lock().unwrap().contains(&0));
        a.remove_tree().unwrap();
        f.slot(0).remove_tree().unwrap();
        let again = f.attempt(0, 1, 2).unwrap();
        assert!(again.exists(), "a slot removed from outside is made again");
        again.child("inner").create().unwrap();
        let same = f.attempt(0, 1, 2).unwrap();
        assert!(same.exists() && !same.child("inner").exists());
        assert_eq!(attempts_under(&root).len(), 1);
        root.remove_tree().unwrap();
        assert!(!root.dir().exists());
    }

    #[test]
    fn limits_name_their_controller() {
        let l = Limit {
            key: "worker.memory_max",
            file: "memory.max",
            value: "1G".into(),
        };
        assert_eq!(l.controller(), "memory");
    }
}
