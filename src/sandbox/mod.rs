//! The agent's reach (issue 47; README "Running agents safely"; `docs/SPEC.md` §11.19).
//!
//! An agent runs unattended, with its permission prompts off, on text anyone may have
//! written, so the built-in worker treats it as hostile code: it gets its worktree and its
//! task, nothing else. Four layers, one file each:
//! - [`env`]: the agent's environment is an allowlist (never the tracker's token, never the
//!   supervisor's other variables), with a private `HOME` and `TMPDIR` per attempt,
//!   [`home`] seeding that `HOME` with the agent CLI's own config only;
//! - [`bwrap`]: the agent runs inside bubblewrap (`agent.sandbox = "bwrap"`, the default,
//!   failing closed): the whole file system read-only, the operator's home hidden, the
//!   worktree and the attempt's own git data writable, its own pid namespace, no
//!   capabilities;
//! - [`objects`]: inside the sandbox the agent's commits land in an object directory of
//!   the attempt's own, taken into the repository's store by the worker afterwards, so
//!   nothing of the main store is ever writable to it;
//! - [`tamper`]: what the agent could have changed outside its branch is recorded before it
//!   runs and compared after; any change is refused, never pushed.
//!
//! Every git call of the fleet also runs with hooks and `core.fsmonitor` off
//! ([`crate::git::HARDENING`]), so nothing planted in the repository runs outside the
//! sandbox. This module is below `config` in the module map: it takes plain values.

pub mod bwrap;
pub mod env;
pub mod home;
pub mod object_dir;
pub mod tamper;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cmd::{self, Argv, RunOpts};

/// `[agent] sandbox`: where the agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Inside bubblewrap; an agent never runs where it cannot be made (fail closed).
    #[default]
    Bwrap,
    /// As the worker's own child, unconfined: chosen explicitly, never fallen back to.
    None,
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SandboxMode::Bwrap => "bwrap",
            SandboxMode::None => "none",
        })
    }
}

/// The sandbox a fleet's agents run in, found once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InForce {
    Bwrap {
        program: PathBuf,
        /// `bubblewrap 0.8.0`, as `bwrap --version` says it.
        version: String,
    },
    None,
}

impl InForce {
    /// The bubblewrap program, when the agent runs inside it.
    pub fn bwrap(&self) -> Option<&Path> {
        match self {
            InForce::Bwrap { program, .. } => Some(program),
            InForce::None => None,
        }
    }

    /// The start-up line: which sandbox is in force and why (`from` names where
    /// `agent.sandbox` was set).
    pub fn describe(&self, from: &str) -> String {
        match self {
            InForce::Bwrap { program, version } => format!(
                "agent sandbox: bwrap ({version} at {}; {from}): the agent sees the file system read-only but its worktree, its own git data and a private HOME",
                program.display()
            ),
            InForce::None => format!(
                "agent sandbox: none ({from}): the agent runs unconfined with this user's rights; only its environment is cleaned"
            ),
        }
    }
}

/// Why the sandbox the config asks for cannot be had: the fleet refuses to run agents
/// (exit 78) rather than run them unconfined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "agent.sandbox = \"bwrap\" ({from}): bubblewrap (`bwrap`) is not on PATH; install it (Debian and Ubuntu: apt-get install bubblewrap) or set [agent] sandbox = \"none\" to run agents unconfined (docs/guide/safety.md)"
    )]
    NotFound { from: String },
    #[error(
        "agent.sandbox = \"bwrap\" ({from}): {} cannot make a sandbox on this host: {why}; allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or AppArmor's userns rule on Ubuntu) or set [agent] sandbox = \"none\"",
        program.display()
    )]
    Unusable {
        from: String,
        program: PathBuf,
        why: String,
    },
}

/// The longest the start-up probe may take: bubblewrap sets a sandbox up in milliseconds.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Finds the sandbox `mode` asks for and proves it works by running `true` inside the same
/// namespaces the agent gets (`network`: whether the agent keeps the host's network).
/// `path` is the `PATH` to look `bwrap` up on; `from` names the setting for messages.
pub fn probe(
    mode: SandboxMode,
    path: Option<&std::ffi::OsStr>,
    network: bool,
    from: &str,
) -> Result<InForce, SandboxError> {
    if mode == SandboxMode::None {
        return Ok(InForce::None);
    }
    let Some(program) = find_on_path("bwrap", path) else {
        return Err(SandboxError::NotFound { from: from.into() });
    };
    let unusable = |why: String| SandboxError::Unusable {
        from: from.into(),
        program: program.clone(),
        why,
    };
    let mut args = bwrap::base_args(network);
    args.extend(["--", "true"].map(std::ffi::OsString::from));
    let run = cmd::run(
        &Argv::new(program.clone(), args),
        PROBE_TIMEOUT,
        &RunOpts::default(),
    )
    .map_err(|e| unusable(e.to_string()))?;
    if !run.status.success() {
        let said = run.stderr_str();
        return Err(unusable(if said.is_empty() {
            format!("a test sandbox exited with {}", run.status)
        } else {
            crate::text::one_line(&said)
        }));
    }
    let version = cmd::run(
        &Argv::new(program.clone(), ["--version"]),
        PROBE_TIMEOUT,
        &RunOpts::default(),
    )
    .ok()
    .map(|o| o.stdout_str().trim().to_string())
    .filter(|v| !v.is_empty())
    .unwrap_or_else(|| "bubblewrap".into());
    Ok(InForce::Bwrap { program, version })
}

/// The first executable regular file named `name` in `path`'s absolute entries.
pub fn find_on_path(name: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Where one attempt's sandbox keeps what is its own, under the attempt dir: the private
/// `HOME` and `TMPDIR`, and (inside bubblewrap) the object directory its commits go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRoom {
    pub root: PathBuf,
}

impl AttemptRoom {
    pub fn new(attempt_dir: &Path) -> AttemptRoom {
        AttemptRoom {
            root: attempt_dir.join("sandbox"),
        }
    }
    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }
    pub fn objects(&self) -> PathBuf {
        self.root.join("objects")
    }
}
