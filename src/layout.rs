//! The fixed layout of `.red/` under a repo (`docs/SPEC.md` §1, §4).
//!
//! Every path the tool touches is built here, so the names other tools depend on live in
//! exactly one place and a sweep cannot invent a path outside the registered lanes.

use std::path::{Path, PathBuf};

/// Worker namespaces under `.red/tmp/` whose `<worker-id>/` dirs hold attempt dirs.
pub const WORKER_NAMESPACES: [&str; 3] = ["workers", "go-workers", "scout-workers"];

/// Paths under one repo's `.red/`.
///
/// The supervisor lane and `.red/tmp/` are joined once: a respawn names a retire file, a
/// slot log and the claims folder, and joining each from the repo root, a component at a
/// time, was an allocation a component on every one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    repo: PathBuf,
    tmp: PathBuf,
    lane: PathBuf,
}

impl Layout {
    pub fn new(repo: impl Into<PathBuf>) -> Self {
        let repo = repo.into();
        let tmp = repo.join(".red").join("tmp");
        let lane = tmp.join("supervisors").join("default");
        Layout { repo, tmp, lane }
    }

    pub fn repo(&self) -> &Path {
        &self.repo
    }

    pub fn red(&self) -> PathBuf {
        self.repo.join(".red")
    }

    /// `.red/tmp/`: the only tree any sweep may delete in.
    pub fn tmp(&self) -> PathBuf {
        self.tmp.clone()
    }

    pub fn state(&self) -> PathBuf {
        self.red().join("state")
    }

    /// The embedded `local` tracker's store.
    pub fn tracker_dir(&self) -> PathBuf {
        self.state().join("tracker")
    }

    /// The repo-level config file, `.red/afk-supervisor.toml`.
    pub fn repo_config(&self) -> PathBuf {
        self.red().join("afk-supervisor.toml")
    }

    pub fn worker_namespace(&self, ns: &str) -> PathBuf {
        self.tmp.join(ns)
    }

    pub fn claims(&self) -> PathBuf {
        self.tmp.join("claims")
    }

    /// `claims/<N>/pid`: the claim lock of issue N.
    pub fn claim_pid(&self, issue: u64) -> PathBuf {
        self.claims().join(issue.to_string()).join("pid")
    }

    pub fn docs_sweep(&self) -> PathBuf {
        self.tmp.join("docs-sweep")
    }

    pub fn logs(&self) -> PathBuf {
        self.tmp.join("logs")
    }

    /// `logs/<yyyy-mm-dd>/afk-supervisor-slot-<i>.log`.
    pub fn slot_log(&self, date: &str, slot: usize) -> PathBuf {
        let mut name = String::with_capacity(48);
        name.push_str("logs/");
        name.push_str(date);
        name.push_str("/afk-supervisor-slot-");
        push_number(&mut name, slot);
        name.push_str(".log");
        joined(&self.tmp, &name)
    }

    /// The supervisor lane, `.red/tmp/supervisors/default/`.
    pub fn supervisor_lane(&self) -> PathBuf {
        self.lane.clone()
    }

    pub fn supervisor_pid(&self) -> PathBuf {
        self.lane.join("afk-supervisor.pid")
    }

    pub fn supervisor_lock(&self) -> PathBuf {
        self.lane.join("afk-supervisor.lock")
    }

    pub fn supervisor_stop(&self) -> PathBuf {
        self.lane.join("afk-supervisor.stop")
    }

    pub fn resize_file(&self) -> PathBuf {
        self.lane.join("resize.toon")
    }

    pub fn state_file(&self) -> PathBuf {
        self.lane.join("state.toon")
    }

    pub fn retire_file(&self, slot: usize) -> PathBuf {
        let mut name = String::with_capacity(40);
        name.push_str("afk-supervisor-slot-");
        push_number(&mut name, slot);
        name.push_str(".retire");
        joined(&self.lane, &name)
    }

    pub fn event_log(&self) -> PathBuf {
        self.lane.join("supervisor.log.toonl")
    }

    /// What a supervisor started in the background (`start`) prints, appended.
    pub fn supervisor_out(&self) -> PathBuf {
        self.lane.join("supervisor.out")
    }
}

/// `dir/rel` in one allocation (`rel` relative, `/`-separated).
fn joined(dir: &Path, rel: &str) -> PathBuf {
    let mut p = std::ffi::OsString::with_capacity(dir.as_os_str().len() + 1 + rel.len());
    p.push(dir.as_os_str());
    p.push("/");
    p.push(rel);
    PathBuf::from(p)
}

fn push_number(s: &mut String, n: usize) {
    use std::fmt::Write;
    let _ = write!(s, "{n}");
}

/// `<file>.start` beside a pid file: the recorded process start time (`docs/SPEC.md` §2).
pub fn start_file(pid_file: &Path) -> PathBuf {
    sibling_with_suffix(pid_file, ".start")
}

/// `<file>.tmp` beside a file: the staging name for atomic writes.
pub fn tmp_file(file: &Path) -> PathBuf {
    sibling_with_suffix(file, ".tmp")
}

fn sibling_with_suffix(file: &Path, suffix: &str) -> PathBuf {
    let mut name = file
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    file.with_file_name(name)
}

/// Parses an attempt dir name `<N>-a<n>` (`^[1-9][0-9]*-a[1-9][0-9]*$`) into (issue, attempt).
pub fn parse_attempt_dir(name: &str) -> Option<(u64, u64)> {
    let (issue, attempt) = name.split_once("-a")?;
    Some((parse_positive(issue)?, parse_positive(attempt)?))
}

/// Parses a legacy flat work dir name `work-<N>` (`^work-[1-9][0-9]*$`).
pub fn parse_legacy_work_dir(name: &str) -> Option<u64> {
    parse_positive(name.strip_prefix("work-")?)
}

/// A positive decimal without sign, leading zero or overflow (issue and attempt numbers,
/// `claims/<N>`).
pub fn parse_positive(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    if bytes.is_empty() || bytes[0] == b'0' || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_names() {
        assert_eq!(parse_attempt_dir("12-a3"), Some((12, 3)));
        assert_eq!(parse_attempt_dir("1-a1"), Some((1, 1)));
        for bad in [
            "0-a1", "12-a0", "012-a1", "12-a", "-a1", "12a1", "12-a1x", "12-b1", "+1-a1",
        ] {
            assert_eq!(parse_attempt_dir(bad), None, "{bad}");
        }
    }

    #[test]
    fn legacy_names() {
        assert_eq!(parse_legacy_work_dir("work-7"), Some(7));
        for bad in [
            "work-",
            "work-0",
            "work-07",
            "work-fix-login",
            "work7",
            "work-99999999999999999999999",
        ] {
            assert_eq!(parse_legacy_work_dir(bad), None, "{bad}");
        }
    }

    #[test]
    fn positive_numbers() {
        assert_eq!(parse_positive("42"), Some(42));
        for bad in ["", "0", "042", "-1", "+1", "4x", "99999999999999999999999"] {
            assert_eq!(parse_positive(bad), None, "{bad}");
        }
    }

    /// The paths built in one allocation are the ones the component joins give.
    #[test]
    fn file_paths_equal_their_joins() {
        for repo in ["/r", "/r/", "rel/repo", "."] {
            let l = Layout::new(repo);
            let lane = Path::new(repo).join(".red/tmp/supervisors/default");
            assert_eq!(
                l.retire_file(12),
                lane.join("afk-supervisor-slot-12.retire")
            );
            assert_eq!(
                l.slot_log("2026-12-05", 3),
                Path::new(repo)
                    .join(".red")
                    .join("tmp")
                    .join("logs")
                    .join("2026-12-05")
                    .join("afk-supervisor-slot-3.log")
            );
            assert_eq!(l.supervisor_lane(), lane);
            assert_eq!(l.tmp(), l.red().join("tmp"));
        }
    }

    #[test]
    fn siblings() {
        let p = Path::new("/r/.red/tmp/supervisors/default/afk-supervisor.pid");
        assert_eq!(
            start_file(p),
            Path::new("/r/.red/tmp/supervisors/default/afk-supervisor.pid.start")
        );
        assert_eq!(
            tmp_file(p),
            Path::new("/r/.red/tmp/supervisors/default/afk-supervisor.pid.tmp")
        );
    }
}
