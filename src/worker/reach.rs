//! What one attempt's agent may reach (`docs/SPEC.md` §11.19, [`crate::sandbox`]): the
//! sandbox found at the worker's start, and for each attempt its private home, its
//! environment, the bubblewrap plan and, after the agent, the objects taken in, the private
//! rooms removed and the tamper check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::WorkerError;
use crate::config::Config;
use crate::git::Git;
use crate::layout::Layout;
use crate::sandbox::bwrap::Reach;
use crate::sandbox::tamper::{Snapshot, Tamper, Watch};
use crate::sandbox::{AttemptRoom, InForce};

/// Where one attempt works.
#[derive(Debug, Clone, Copy)]
pub(super) struct Task<'a> {
    pub attempt_dir: &'a Path,
    pub worktree: &'a Path,
    /// The worktree's own git dir, found once for the tamper check's [`Watch`].
    pub worktree_gitdir: &'a Path,
    pub branch: &'a str,
}

/// The facts every attempt of this worker shares, found once at its start.
pub(super) struct Confinement {
    pub in_force: InForce,
    /// The operator's `HOME` and the account's home from the password database: hidden.
    operator_homes: Vec<PathBuf>,
    codex_home: Option<PathBuf>,
    /// Who the agent's commits are by when the operator's variables do not say: the
    /// repository's `user.name` / `user.email`, else the fleet's identity.
    identity: (String, String),
    common_dir: PathBuf,
}

impl Confinement {
    /// Finds the sandbox the config asks for (exit 78 when it cannot be had: never an
    /// unconfined agent in its place) and what every attempt needs.
    pub fn find(config: &Config, git: &Git) -> Result<Self, WorkerError> {
        let from = match &config.file {
            Some(f) => f.display().to_string(),
            None => "the default".into(),
        };
        let in_force = crate::sandbox::probe(
            config.agent.sandbox,
            std::env::var_os("PATH").as_deref(),
            config.agent.network,
            &from,
        )
        .map_err(|e| WorkerError::Config(e.to_string()))?;
        let mut operator_homes: Vec<PathBuf> = std::env::var_os("HOME")
            .map(PathBuf::from)
            .into_iter()
            .collect();
        if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::getuid()) {
            operator_homes.push(u.dir);
        }
        // Only a directory there can be hidden (`nobody`'s home is `/nonexistent`).
        operator_homes.retain(|h| h.is_absolute() && h != Path::new("/") && h.is_dir());
        operator_homes.dedup();
        let codex_home = std::env::var_os("CODEX_HOME").map(PathBuf::from);
        let ident = |key: &str, fallback: &str| {
            git.run(&["config", "--get", key])
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| fallback.to_string())
        };
        let identity = (
            ident("user.name", crate::git::FLEET_NAME),
            ident("user.email", crate::git::FLEET_EMAIL),
        );
        let common_dir = git
            .common_dir()
            .map_err(|e| WorkerError::Agent(format!("the repository's git dir: {e}")))?;
        Ok(Confinement {
            in_force,
            operator_homes,
            codex_home,
            identity,
            common_dir,
        })
    }

    /// Prepares one attempt: the private home seeded and tmp made, and (inside bubblewrap)
    /// the attempt's object dir and result file; returns the command to run `argv` with and
    /// the attempt's room.
    pub fn command(
        &self,
        config: &Config,
        layout: &Layout,
        task: Task<'_>,
        argv: &[String],
        result_file: &Path,
    ) -> Result<(Command, AttemptRoom), WorkerError> {
        let room = AttemptRoom::new(task.attempt_dir);
        let io = |what: &'static str, p: &Path| {
            let p = p.to_path_buf();
            move |e: std::io::Error| WorkerError::file(p, what, e)
        };
        let operator_home = self.operator_homes.first().map(PathBuf::as_path);
        crate::sandbox::home::seed(
            &room.home(),
            &config.agent.home_files(),
            operator_home,
            self.codex_home.as_deref(),
        )
        .map_err(io("cannot make the agent's home: ", &room.home()))?;
        std::fs::create_dir_all(room.tmp())
            .map_err(io("cannot make the agent's tmp: ", &room.tmp()))?;
        let parent: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let mut env: BTreeMap<String, String> = crate::sandbox::env::agent_env(
            parent.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            config.agent.profile,
            &config.agent.env,
            &room.home(),
            &room.tmp(),
        );
        for (k, v) in [
            ("GIT_AUTHOR_NAME", &self.identity.0),
            ("GIT_AUTHOR_EMAIL", &self.identity.1),
            ("GIT_COMMITTER_NAME", &self.identity.0),
            ("GIT_COMMITTER_EMAIL", &self.identity.1),
        ] {
            env.entry(k.into()).or_insert_with(|| v.clone());
        }
        if config.agent.profile == crate::agent_profile::ProfileKind::Codex {
            env.insert(
                "CODEX_HOME".into(),
                room.home().join(".codex").display().to_string(),
            );
        }
        let mut cmd = match self.in_force.bwrap() {
            None => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
            Some(bwrap) => {
                std::fs::create_dir_all(room.objects()).map_err(io(
                    "cannot make the attempt's object dir: ",
                    &room.objects(),
                ))?;
                env.extend(crate::sandbox::object_dir::agent_git_env(
                    &room.objects(),
                    &self.common_dir.join("objects"),
                    0,
                ));
                // The agent may write its result file: it exists before the sandbox is
                // made, so it can be bound (an empty one is read as none).
                std::fs::write(result_file, b"")
                    .map_err(io("cannot make the agent's result file: ", result_file))?;
                let reach = self.reach(config, layout, task, argv, &room, result_file)?;
                let mut c = Command::new(bwrap);
                c.args(reach.argv(argv));
                // A group of its own, in the worker's session: `kill(0, …)` from inside the
                // pid namespace would otherwise reach the worker's whole group (the worker
                // itself), while the session keeps its CPU counted as the worker's tree. The
                // worker stops it (by parent links) and `--die-with-parent` ends it with the
                // worker.
                std::os::unix::process::CommandExt::process_group(&mut c, 0);
                c
            }
        };
        cmd.env_clear().envs(env).current_dir(task.worktree);
        Ok((cmd, room))
    }

    /// The bubblewrap plan of one attempt.
    fn reach(
        &self,
        config: &Config,
        layout: &Layout,
        task: Task<'_>,
        argv: &[String],
        room: &AttemptRoom,
        result_file: &Path,
    ) -> Result<Reach, WorkerError> {
        let Task {
            worktree,
            worktree_gitdir,
            branch,
            ..
        } = task;
        let mut writable = vec![
            room.objects(),
            room.home(),
            room.tmp(),
            result_file.to_path_buf(),
        ];
        // The worker's branch directory, for the attempt's branch's ref and reflog.
        let branch_ref = PathBuf::from(format!("refs/heads/{branch}"));
        if let Some(dir) = branch_ref.parent() {
            for base in [self.common_dir.clone(), self.common_dir.join("logs")] {
                let d = base.join(dir);
                std::fs::create_dir_all(&d).map_err(|e| {
                    WorkerError::file(d.clone(), "cannot make the branch's ref dir: ", e)
                })?;
                writable.push(d);
            }
        }
        let mut hide = self.operator_homes.clone();
        if Path::new("/run/user").is_dir() {
            hide.push("/run/user".into());
        }
        let mut expose = vec![layout.repo().to_path_buf(), self.common_dir.clone()];
        if let Some(path) = std::env::var_os("PATH") {
            expose.extend(std::env::split_paths(&path).filter(|p| p.is_absolute()));
        }
        // The agent's program and any file its command line names, wherever they are.
        for a in argv.iter().map(Path::new).filter(|p| p.is_absolute()) {
            if a.exists() {
                expose.push(a.to_path_buf());
            }
            if let Ok(real) = std::fs::canonicalize(a)
                && let Some(dir) = real.parent()
            {
                expose.push(dir.to_path_buf());
            }
        }
        expose.extend(config.agent.sandbox_read.iter().cloned());
        expose.retain(|p| p.exists());
        Ok(Reach {
            worktree: worktree.to_path_buf(),
            worktree_gitdir: worktree_gitdir.to_path_buf(),
            writable,
            hide,
            expose,
            network: config.agent.network,
        })
    }

    /// What the tamper check watches for one attempt.
    pub fn watch(
        &self,
        config: &Config,
        layout: &Layout,
        worktree: &Path,
        branch: &str,
        worker_id: &str,
    ) -> Result<Watch, WorkerError> {
        // Found once here: the sandbox binds it writable, so a guess would never do.
        let worktree_gitdir = Git::new(worktree).git_dir()?;
        let mut fleet_files = vec![layout.repo_config()];
        if let Some(f) = &config.file
            && !fleet_files.contains(f)
        {
            fleet_files.push(f.clone());
        }
        Ok(Watch {
            common_dir: self.common_dir.clone(),
            worktree: worktree.to_path_buf(),
            worktree_gitdir,
            branch_ref: format!("refs/heads/{branch}"),
            own_prefix: format!("refs/heads/afk/{worker_id}/"),
            fleet_files,
        })
    }
}

/// Takes the attempt's objects in and removes its private home and tmp (the copies of the
/// agent's login among them); the object dir goes too once its objects are in the store.
/// Each failure is one line on stderr: the work stays where it is for a person.
pub(super) fn after_agent(git: &Git, layout: &Layout, room: &AttemptRoom, worker_id: &str) {
    let mut remove = vec![room.home(), room.tmp()];
    match crate::sandbox::object_dir::take_in(git, &room.objects()) {
        Ok(_) => remove.push(room.objects()),
        Err(e) => eprintln!(
            "worker {worker_id}: the agent's commits could not be taken in from {}: {e}",
            room.objects().display()
        ),
    }
    let Ok(Some(root)) = crate::safe_delete::DeleteRoot::open(layout) else {
        return;
    };
    for p in remove.iter().filter(|p| p.exists()) {
        if let Err(e) = root.remove(p) {
            eprintln!("worker {worker_id}: {e}");
        }
    }
}

/// Marks an attempt judged clean: its room's (empty) root goes. While the root is there a
/// rescue keeps the attempt's work on this checkout and never pushes it
/// ([`crate::rescue`]), so an attempt whose worker died before judging it stays local.
pub(super) fn cleared(layout: &Layout, attempt_dir: &Path, worker_id: &str) {
    let room = AttemptRoom::new(attempt_dir);
    let empty = std::fs::read_dir(&room.root).is_ok_and(|mut d| d.next().is_none());
    if !empty {
        return;
    }
    if let Ok(Some(root)) = crate::safe_delete::DeleteRoot::open(layout)
        && let Err(e) = root.remove(&room.root)
    {
        eprintln!("worker {worker_id}: {e}");
    }
}

/// The tamper check's verdict, with the changes found.
pub(super) fn compare(watch: &Watch, git: &Git, before: &Snapshot) -> Vec<Tamper> {
    match watch.compare(git, before) {
        Ok(found) => found,
        // Unknown is not clean: nothing is pushed on a check that could not be made.
        Err(e) => vec![Tamper::Unchecked(e.to_string())],
    }
}

/// Why an attempt's work is not pushed (`docs/SPEC.md` §11.19).
pub(super) enum Refusal {
    /// The agent changed what it must not; each change found.
    Tampered(Vec<Tamper>),
    /// Its changes touch `agent.sensitive_paths`: these paths.
    Held(Vec<String>),
}

impl Confinement {
    /// Judges an attempt once its agent has ended, before anything of it is pushed or
    /// rescued: the tamper check against `before`, the branch still on `base` (the commit
    /// it started from), then the paths its commits and its uncommitted files change
    /// against `sensitive`.
    pub fn judge(
        &self,
        git: &Git,
        watch: &Watch,
        before: &Snapshot,
        base: Option<&str>,
        task: Task<'_>,
        sensitive: &[String],
    ) -> Option<Refusal> {
        let Task {
            worktree, branch, ..
        } = task;
        let mut found = compare(watch, git, before);
        let tip = git
            .rev_parse(&format!("refs/heads/{branch}"))
            .ok()
            .flatten();
        let mut changed = Vec::new();
        if let (Some(base), Some(tip)) = (base, tip.as_deref()) {
            match git.is_ancestor(base, tip) {
                Ok(true) => match git.paths_changed_between(base, tip) {
                    Ok(paths) => changed.extend(paths),
                    Err(e) => found.push(Tamper::Unchecked(e.to_string())),
                },
                Ok(false) => found.push(Tamper::OffBase {
                    branch: branch.to_string(),
                    base: base.to_string(),
                }),
                Err(e) => found.push(Tamper::Unchecked(e.to_string())),
            }
        }
        if !found.is_empty() {
            return Some(Refusal::Tampered(found));
        }
        // What a rescue would commit: the files the agent left uncommitted.
        if let Ok(c) = git.at(worktree).changed_paths("") {
            changed.extend(c.paths.into_iter().map(|p| p.path));
        }
        let mut held: Vec<String> = crate::sandbox::tamper::sensitive(&changed, sensitive)
            .into_iter()
            .map(str::to_string)
            .collect();
        held.sort();
        held.dedup();
        (!held.is_empty()).then_some(Refusal::Held(held))
    }
}
