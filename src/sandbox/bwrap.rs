//! The bubblewrap command line one attempt's agent runs under: a plan of mounts made from
//! the attempt's paths (pure, so its tests need no sandbox), rendered as `bwrap` argv.
//!
//! What the agent sees: `/` read-only; `/dev` and `/proc` its own (a pid namespace: no
//! other process of the host is visible, so neither the supervisor nor another agent can be
//! signalled or read); the operator's home and `/run/user` hidden under empty tmpfs, with
//! the paths it needs from there (the repository, the agent's program) shown again
//! read-only; writable only its worktree, the worktree's own git dir, the attempt's object
//! dir, its worker's branch directory, and its private `HOME` and `TMPDIR`. The worktree's
//! `.git` file and its git dir's `commondir` and `gitdir` are bound read-only on top, so the
//! agent cannot point the worker's later git calls elsewhere. No capabilities (bubblewrap
//! keeps root's otherwise), and the sandbox dies with the worker. It stays in the
//! worker's session, which has no terminal to inject into (its stdin is `/dev/null`), so
//! its CPU still counts as the worker's tree and no process of it leads a session the
//! fleet would take for a worker (SPEC §11.1); the worker starts it in a process group of
//! its own, since `kill(0, …)` from inside a pid namespace reaches the whole group.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One mount of the plan, applied in order (a later one lies over an earlier one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    /// An empty tmpfs over the path: what was there is not visible.
    Hide(PathBuf),
    /// The path bound onto itself read-only.
    Ro(PathBuf),
    /// The path bound onto itself writable.
    Rw(PathBuf),
}

/// The paths of one attempt the plan is made from.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    pub worktree: PathBuf,
    /// The worktree's own git dir (`<common dir>/worktrees/<id>`).
    pub worktree_gitdir: PathBuf,
    /// Writable besides the worktree: the attempt's object dir, private home and tmp, its
    /// result file, and the directories its branch's ref and reflog live in.
    pub writable: Vec<PathBuf>,
    /// Hidden under an empty tmpfs: the operator's home, `/run/user`.
    pub hide: Vec<PathBuf>,
    /// Shown again read-only where hidden: the repository, the agent's program and the
    /// `PATH` entries under a hidden path, `agent.sandbox_read`.
    pub expose: Vec<PathBuf>,
    /// Whether the agent keeps the host's network (`agent.network`).
    pub network: bool,
}

/// The options every sandbox of the fleet starts with, the start-up probe's included.
pub fn base_args(network: bool) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    .map(OsString::from)
    .to_vec();
    if !network {
        a.push("--unshare-net".into());
    }
    a
}

impl Reach {
    /// The mounts, in the order they must be applied.
    pub fn plan(&self) -> Vec<Mount> {
        let hidden = |p: &Path| self.hide.iter().any(|h| p.starts_with(h));
        let mut m: Vec<Mount> = self.hide.iter().cloned().map(Mount::Hide).collect();
        let mut shown: Vec<&PathBuf> = self.expose.iter().filter(|p| hidden(p)).collect();
        shown.sort();
        shown.dedup();
        // A path inside another shown one is already visible.
        let outer: Vec<PathBuf> = shown
            .iter()
            .filter(|p| !shown.iter().any(|o| o != *p && p.starts_with(o)))
            .map(|p| (*p).clone())
            .collect();
        m.extend(outer.into_iter().map(Mount::Ro));
        m.push(Mount::Rw(self.worktree.clone()));
        m.push(Mount::Rw(self.worktree_gitdir.clone()));
        m.extend(self.writable.iter().cloned().map(Mount::Rw));
        // Pinned over the writable ones: where the worktree's git data is.
        m.push(Mount::Ro(self.worktree.join(".git")));
        m.push(Mount::Ro(self.worktree_gitdir.join("commondir")));
        m.push(Mount::Ro(self.worktree_gitdir.join("gitdir")));
        m
    }

    /// `bwrap` argv (without the program): the base options, the plan, the worktree as
    /// the working directory, then `agent`.
    pub fn argv(&self, agent: &[String]) -> Vec<OsString> {
        let mut a = base_args(self.network);
        for mount in self.plan() {
            let (flag, p) = match mount {
                Mount::Hide(p) => {
                    a.push("--tmpfs".into());
                    a.push(p.into_os_string());
                    continue;
                }
                Mount::Ro(p) => ("--ro-bind", p),
                Mount::Rw(p) => ("--bind", p),
            };
            a.push(flag.into());
            a.push(p.clone().into_os_string());
            a.push(p.into_os_string());
        }
        // The hiding tmpfs made read-only last, once every mount point in it is made: a
        // write there would go nowhere, and the agent should be told so.
        for h in &self.hide {
            a.push("--remount-ro".into());
            a.push(h.clone().into_os_string());
        }
        a.push("--chdir".into());
        a.push(self.worktree.clone().into_os_string());
        a.push("--".into());
        a.extend(agent.iter().map(OsString::from));
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach() -> Reach {
        Reach {
            worktree: "/home/op/repo/.red/tmp/workers/w/1-a1/worktree".into(),
            worktree_gitdir: "/home/op/repo/.git/worktrees/worktree".into(),
            writable: vec!["/home/op/repo/.red/tmp/workers/w/1-a1/sandbox/home".into()],
            hide: vec!["/home/op".into(), "/run/user".into()],
            expose: vec![
                "/home/op/repo".into(),
                "/home/op/repo/.git".into(),
                "/home/op/.nvm/bin".into(),
                "/usr/bin".into(),
            ],
            network: true,
        }
    }

    #[test]
    fn hidden_first_then_shown_again_then_writable_then_pinned() {
        let plan = reach().plan();
        assert_eq!(
            plan,
            vec![
                Mount::Hide("/home/op".into()),
                Mount::Hide("/run/user".into()),
                Mount::Ro("/home/op/.nvm/bin".into()),
                Mount::Ro("/home/op/repo".into()),
                Mount::Rw("/home/op/repo/.red/tmp/workers/w/1-a1/worktree".into()),
                Mount::Rw("/home/op/repo/.git/worktrees/worktree".into()),
                Mount::Rw("/home/op/repo/.red/tmp/workers/w/1-a1/sandbox/home".into()),
                Mount::Ro("/home/op/repo/.red/tmp/workers/w/1-a1/worktree/.git".into()),
                Mount::Ro("/home/op/repo/.git/worktrees/worktree/commondir".into()),
                Mount::Ro("/home/op/repo/.git/worktrees/worktree/gitdir".into()),
            ],
            "/usr/bin is visible already; the repo's .git is inside the repo"
        );
    }

    #[test]
    fn argv_drops_capabilities_and_ends_with_the_agent() {
        let mut r = reach();
        let a: Vec<String> = r
            .argv(&["claude".into(), "-p".into()])
            .into_iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        let at = |s: &str| a.iter().position(|x| x == s).unwrap();
        assert_eq!(a[at("--cap-drop") + 1], "ALL");
        assert!(a.contains(&"--unshare-pid".to_string()));
        assert!(!a.contains(&"--unshare-net".to_string()));
        assert_eq!(&a[a.len() - 3..], ["--", "claude", "-p"]);
        assert!(at("--tmpfs") < at("--bind"), "hidden before the writable");
        r.network = false;
        let a = r.argv(&["x".into()]);
        assert!(a.contains(&OsString::from("--unshare-net")));
    }
}
