//! cgroup v2, the kernel's own grouping of a process tree: what no `setsid`, double fork
//! or cleared environment escapes. One home for every cgroup fact the supervisor uses:
//! finding the hierarchy ([`hierarchy`]), the fleet's layout in it ([`fleet`]), watching a
//! cgroup become empty ([`watch`]), and here one cgroup directory and its files.
//!
//! Every read here is of a kernel pseudo-file (a few hundred bytes that the kernel renders
//! on `read`, never a disk or a pipe), so it does not block the event loop the way an
//! outside file could.

pub mod fleet;
pub mod hierarchy;
pub mod watch;

use std::fs;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The most bytes read from one cgroup file (`cgroup.procs` of a big tree is the largest).
const MAX_READ: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct CgroupError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// One cgroup: a directory of the v2 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cgroup {
    dir: PathBuf,
}

/// What the kernel counted for one cgroup over its whole life (its processes that exited
/// included): the figures of an attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    /// `cpu.stat` `usage_usec`: CPU time, microseconds.
    pub cpu_usec: Option<u64>,
    /// `memory.peak`, bytes (only where the memory controller is enabled).
    pub memory_peak: Option<u64>,
    /// `memory.current`, bytes (only where the memory controller is enabled).
    pub memory_current: Option<u64>,
    /// `memory.events` `oom_kill`: processes the OOM killer ended in it.
    pub oom_kills: Option<u64>,
}

impl Cgroup {
    pub fn at(dir: impl Into<PathBuf>) -> Cgroup {
        Cgroup { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn child(&self, name: &str) -> Cgroup {
        Cgroup::at(self.dir.join(name))
    }

    pub fn parent(&self) -> Option<Cgroup> {
        self.dir.parent().map(Cgroup::at)
    }

    fn err(&self, file: &str, source: io::Error) -> CgroupError {
        CgroupError {
            path: if file.is_empty() {
                self.dir.clone()
            } else {
                self.dir.join(file)
            },
            source,
        }
    }

    /// Creates the cgroup; one that exists already is fine.
    pub fn create(&self) -> Result<(), CgroupError> {
        match fs::create_dir(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && self.dir.is_dir() => Ok(()),
            Err(e) => Err(self.err("", e)),
        }
    }

    /// Creates the cgroup; one that exists already is an error (`AlreadyExists`), as is a
    /// missing parent (`NotFound`).
    pub fn make(&self) -> Result<(), CgroupError> {
        fs::create_dir(&self.dir).map_err(|e| self.err("", e))
    }

    pub fn exists(&self) -> bool {
        self.dir.join("cgroup.procs").is_file()
    }

    fn read(&self, file: &str) -> Result<String, CgroupError> {
        let bytes = crate::process::read_kernel_file(&self.dir.join(file), MAX_READ)
            .map_err(|e| self.err(file, e))?;
        String::from_utf8(bytes)
            .map_err(|e| self.err(file, io::Error::new(io::ErrorKind::InvalidData, e)))
    }

    fn write(&self, file: &str, value: &str) -> Result<(), CgroupError> {
        fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join(file))
            .and_then(|mut f| f.write_all(value.as_bytes()))
            .map_err(|e| self.err(file, e))
    }

    /// Sets one interface file (a limit such as `memory.max`).
    pub fn set(&self, file: &str, value: &str) -> Result<(), CgroupError> {
        self.write(file, value)
    }

    /// Whether any live process is in this cgroup or below (`cgroup.events`); a cgroup
    /// that is gone is empty.
    pub fn populated(&self) -> Result<bool, CgroupError> {
        match self.read("cgroup.events") {
            Ok(text) => Ok(keyed(&text, "populated") == Some(1)),
            Err(e) if e.source.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The processes of this cgroup and of every cgroup below it.
    pub fn procs(&self) -> Vec<i32> {
        let mut out: Vec<i32> = self
            .read("cgroup.procs")
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default();
        for c in self.children() {
            out.extend(c.procs());
        }
        out
    }

    /// The cgroups directly below this one.
    pub fn children(&self) -> Vec<Cgroup> {
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<Cgroup> = rd
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| Cgroup::at(e.path()))
            .collect();
        out.sort_by(|a, b| a.dir.cmp(&b.dir));
        out
    }

    /// SIGKILL to every process in this cgroup and below, by the kernel, in one write:
    /// nothing started in between escapes it.
    pub fn kill(&self) -> Result<(), CgroupError> {
        self.write("cgroup.kill", "1")
    }

    /// `sig` to every process in this cgroup and below (a polite first signal; the kernel
    /// has no `cgroup.kill` for anything but SIGKILL).
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        for pid in self.procs() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }

    /// Moves process `pid` (0: the caller) into this cgroup.
    pub fn move_pid(&self, pid: i32) -> Result<(), CgroupError> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// `cgroup.procs` opened for writing: a child writes `0` to it between `fork` and
    /// `exec` (no allocation, async-signal-safe) to start inside this cgroup.
    pub fn open_procs(&self) -> Result<OwnedFd, CgroupError> {
        fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))
            .map(OwnedFd::from)
            .map_err(|e| self.err("cgroup.procs", e))
    }

    /// The controllers this cgroup can enable for its children (`cgroup.controllers`).
    pub fn controllers(&self) -> Vec<String> {
        words(self.read("cgroup.controllers").ok())
    }

    /// The controllers enabled for its children (`cgroup.subtree_control`).
    pub fn subtree_control(&self) -> Vec<String> {
        words(self.read("cgroup.subtree_control").ok())
    }

    /// Enables `controllers` for this cgroup's children; each that fails is left out and
    /// the ones enabled afterwards are returned.
    pub fn enable(&self, controllers: &[String]) -> Vec<String> {
        let enabled = self.subtree_control();
        for c in controllers {
            if !enabled.contains(c) {
                let _ = self.write("cgroup.subtree_control", &format!("+{c}"));
            }
        }
        self.subtree_control()
    }

    pub fn figures(&self) -> Figures {
        self.figures_with(true)
    }

    /// [`Cgroup::figures`], the memory files read only when `memory` says the controller
    /// is there: where it is not delegated they are absent, and three failed opens per
    /// attempt are a third of what finishing one costs.
    pub fn figures_with(&self, memory: bool) -> Figures {
        let num = |file: &str| {
            self.read(file)
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
        };
        let mut f = Figures {
            cpu_usec: self
                .read("cpu.stat")
                .ok()
                .and_then(|t| keyed(&t, "usage_usec")),
            ..Figures::default()
        };
        if memory {
            f.memory_peak = num("memory.peak");
            f.memory_current = num("memory.current");
            f.oom_kills = self
                .read("memory.events")
                .ok()
                .and_then(|t| keyed(&t, "oom_kill"));
        }
        f
    }

    /// Removes this cgroup and every one below it, deepest first. A cgroup that still
    /// has processes cannot be removed (the kernel refuses): the error names it.
    ///
    /// The directory is removed first and listed only when the kernel refuses: an
    /// attempt's cgroup almost never has children, and listing a kernfs directory costs
    /// more than the `rmdir` itself.
    pub fn remove_tree(&self) -> Result<(), CgroupError> {
        let refused = match fs::remove_dir(&self.dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => e,
        };
        let below = self.children();
        if below.is_empty() {
            return Err(self.err("", refused));
        }
        for c in below {
            c.remove_tree()?;
        }
        match fs::remove_dir(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.err("", e)),
        }
    }
}

/// The figures of this process's own cgroup when it is an attempt's
/// (`…/slot-<N>/attempt-…`, cgroup mode); `None` anywhere else.
pub fn own_attempt_figures() -> Option<Figures> {
    let (_, own) = hierarchy::own().ok()?;
    let name = own.dir().file_name()?.to_str()?;
    name.starts_with("attempt-").then(|| own.figures())
}

/// The number after `key ` in a flat-keyed cgroup file (`populated 1`, `usage_usec 12`).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

fn words(text: Option<String>) -> Vec<String> {
    text.map(|t| t.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Writes `0` to an open `cgroup.procs`: moves the calling process. For `pre_exec`: one
/// syscall, no allocation.
pub fn join_from_child(fd: std::os::fd::RawFd) -> io::Result<()> {
    // SAFETY: a plain write of two bytes from a static buffer to a descriptor we own.
    let n = unsafe { libc::write(fd, b"0\n".as_ptr().cast(), 2) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_files_are_read_by_key() {
        let events = "populated 1\nfrozen 0\n";
        assert_eq!(keyed(events, "populated"), Some(1));
        assert_eq!(keyed(events, "frozen"), Some(0));
        assert_eq!(keyed(events, "missing"), None);
        let stat = "usage_usec 123456\nuser_usec 100000\nsystem_usec 23456\n";
        assert_eq!(keyed(stat, "usage_usec"), Some(123456));
        assert_eq!(keyed("usage_usec_x 5\n", "usage_usec"), None);
    }
}
