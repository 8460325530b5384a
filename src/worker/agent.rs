//! Running the agent on one issue: its command in the worktree with the issue's variables
//! (`docs/SPEC.md` §6, §11.2), liveness records while it runs, the wall-clock cap, and
//! stopping it with every process it started.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::error::ClusterLost;
use super::liveness::{append_liveness, worktree_fingerprint};
use super::{Worker, WorkerError};
use crate::afk_env;
use crate::agent_profile;
use crate::git::Git;
use crate::timeutil;
use crate::tracker::LabeledIssue;

impl Worker<'_> {
    pub(super) fn run_agent(
        &self,
        issue: &LabeledIssue,
        title: &str,
        task: super::reach::Task<'_>,
        resume: Resume<'_>,
    ) -> Result<AgentEnd, WorkerError> {
        let super::reach::Task {
            attempt_dir,
            worktree,
            branch,
            ..
        } = task;
        let Resume {
            branch: resume,
            session,
            guidance,
        } = resume;
        let vars = agent_profile::PromptVars {
            number: issue.number,
            title,
            body_file: &attempt_dir.join("issue-body.md"),
            branch,
            resume_branch: resume,
            guidance,
        };
        let prompt = agent_profile::prompt(self.config.agent.prompt.as_deref(), &vars);
        let argv = agent_profile::argv(
            self.config.agent.profile,
            &self.agent,
            &prompt,
            self.config.agent.prompt.is_some(),
            session,
        );
        let result_file = attempt_dir.join(RESULT_FILE_NAME);
        // An allowlisted environment and a private home always; inside bubblewrap unless
        // `agent.sandbox = "none"` (`docs/SPEC.md` §11.19).
        let (mut cmd, room) =
            self.confinement
                .command(self.config, self.layout, task, &argv, &result_file)?;
        match resume {
            Some(b) => cmd.env(afk_env::RESUME_BRANCH, b),
            None => cmd.env_remove(afk_env::RESUME_BRANCH),
        };
        match guidance {
            Some(g) => {
                let file = attempt_dir.join(GUIDANCE_FILE_NAME);
                crate::fsutil::atomic_write(&file, g.as_bytes())
                    .map_err(|e| WorkerError::file(file.clone(), "", e))?;
                cmd.env(afk_env::GUIDANCE_FILE, file)
            }
            None => cmd.env_remove(afk_env::GUIDANCE_FILE),
        };
        cmd.stdin(Stdio::null())
            .env(afk_env::RESULT_FILE, &result_file)
            .env(afk_env::ISSUE, issue.number.to_string())
            .env(afk_env::BRANCH, branch)
            .env(afk_env::WORKTREE, worktree)
            .env(afk_env::ATTEMPT_DIR, attempt_dir)
            .env(afk_env::RUNNER, &self.wenv.runner);
        pass_issue_texts(&mut cmd, attempt_dir, title, &issue.body)?;
        // Through the worker, so the slot log keeps at most `log.slot_log_max_bytes` of
        // this attempt's output (its head and its tail) and the profile reads its end.
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                super::reach::after_agent(&self.git, self.layout, &room, &self.wenv.worker_id);
                let why = format!("agent.command {:?} could not start: {e}", self.agent[0]);
                return match start_blame(&e) {
                    Blame::Issue => Ok(AgentEnd::NotStarted(StartFailure::Issue(why))),
                    Blame::Host => Ok(AgentEnd::NotStarted(StartFailure::Host(why))),
                    Blame::Unknown => Err(WorkerError::Agent(why)),
                };
            }
        };
        let output =
            super::output::OutputCap::attach(&mut child, self.config.log.slot_log_max_bytes);
        // Liveness records mark progress, not mere existence: one when the agent starts, then
        // one whenever its worktree moves (a new commit or changed files), checked every
        // `liveness_s`. A hung agent therefore goes quiet and the supervisor's stall check
        // (newest record or slot-log write) can flag and kill it.
        let liveness = attempt_dir.join("liveness.toonl");
        append_liveness(&liveness, issue.number, "agent");
        // The agent's new objects are in the attempt's own dir until it ends.
        let wt = match self.confinement.in_force.bwrap() {
            Some(_) => Git::new(worktree).with_env([(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                room.objects().into_os_string(),
            )]),
            None => Git::new(worktree),
        };
        let mut seen = worktree_fingerprint(&wt);
        let every = Duration::from_secs(self.wenv.liveness_s);
        let mut next_look = timeutil::deadline(Instant::now(), every);
        let cap = timeutil::deadline(
            Instant::now(),
            Duration::from_secs(self.config.timing.attempt_max_s),
        );
        let mut lease_watch = LeaseWatch::new(self.layout);
        let end = loop {
            if Instant::now() >= next_look {
                let now = worktree_fingerprint(&wt);
                if now.is_some() && now != seen {
                    append_liveness(&liveness, issue.number, "progress");
                    seen = now;
                }
                next_look = timeutil::deadline(Instant::now(), every);
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    // A group signal reaches the agent and the worker together: the agent's
                    // end is then an interruption, not a failed attempt.
                    if let Some(signal) = self.stop.signal() {
                        break Ok(Ended::Signalled(signal));
                    }
                    use std::os::unix::process::ExitStatusExt;
                    let code = status.code().unwrap_or_else(|| {
                        crate::exit_code::signalled(status.signal().unwrap_or(0))
                    });
                    break Ok(Ended::Exited(code));
                }
                Ok(None) => {}
                Err(e) => break Err(WorkerError::Agent(format!("waiting for the agent: {e}"))),
            }
            if let Some(signal) = self.stop.signal() {
                // Half the supervisor's grace: the worker must still have time to give the
                // issue back before the supervisor's SIGKILL reaches the whole group.
                stop_agent(
                    &mut child,
                    Duration::from_millis(self.config.timing.stop_grace_s.saturating_mul(500)),
                );
                break Ok(Ended::Signalled(signal));
            }
            if let Some(why) = lease_watch.lost() {
                // The host's lease may end soon: the agent stops before it can, so no two
                // agents ever work one issue (`docs/SPEC.md` §11.23).
                eprintln!(
                    "worker {}: #{} {why}; stopping the agent",
                    self.wenv.worker_id, issue.number
                );
                stop_agent(&mut child, lease_watch.grace());
                break Err(why.into());
            }
            if Instant::now() >= cap {
                eprintln!(
                    "worker {}: #{} reached the wall-clock cap ({}s); stopping the agent",
                    self.wenv.worker_id, issue.number, self.config.timing.attempt_max_s
                );
                stop_agent(
                    &mut child,
                    Duration::from_secs(self.config.timing.stop_grace_s),
                );
                break Ok(Ended::Capped);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        // What it printed still names its session and cost, also when it was capped.
        let (stdout, stderr) = output.finish();
        super::reach::after_agent(&self.git, self.layout, &room, &self.wenv.worker_id);
        Ok(match end? {
            Ended::Exited(code) => {
                let result_file = crate::fsutil::read_small_file(
                    &result_file,
                    agent_profile::generic::MAX_RESULT_BYTES,
                )
                .ok()
                .flatten()
                // Made empty for the sandbox to bind: not written.
                .filter(|r| !r.is_empty());
                AgentEnd::Exited(Finished {
                    code,
                    stdout,
                    stderr,
                    result_file,
                })
            }
            Ended::Capped => AgentEnd::Capped(stdout),
            Ended::Signalled(signal) => AgentEnd::Signalled(signal),
        })
    }
}

/// How the wait for the agent ended, before its output is drained.
enum Ended {
    Exited(i32),
    Capped,
    Signalled(i32),
}

/// What an attempt continues: the branch of an earlier one (`RED_AFK_RESUME_BRANCH`) and
/// that attempt's agent session, when each is known, and what this round must address
/// (`RED_AFK_GUIDANCE_FILE`, the prompt's `{guidance}`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Resume<'a> {
    pub branch: Option<&'a str>,
    pub session: Option<&'a str>,
    pub guidance: Option<&'a str>,
}

/// The guidance file's name in the attempt dir (`RED_AFK_GUIDANCE_FILE`).
pub const GUIDANCE_FILE_NAME: &str = "guidance.md";

/// The name of the agent's result file in the attempt dir (`RED_AFK_RESULT_FILE`).
pub const RESULT_FILE_NAME: &str = "agent-result.json";

/// A run that ended by itself: its exit code and what it said.
pub(super) struct Finished {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub result_file: Option<Vec<u8>>,
}

impl Finished {
    /// What the profile reads of this run, now.
    pub fn seen(&self) -> agent_profile::Seen<'_> {
        agent_profile::Seen {
            exit_code: self.code,
            stdout: &self.stdout,
            stderr: &self.stderr,
            result_file: self.result_file.as_deref(),
            now_epoch: crate::timeutil::now_epoch(),
        }
    }
}

pub(super) enum AgentEnd {
    Exited(Finished),
    /// Stopped at the wall-clock cap, with the end of what it printed.
    Capped(Vec<u8>),
    /// The worker was signalled (the number) while the agent ran.
    Signalled(i32),
    NotStarted(StartFailure),
}

/// Why `execve` of the agent failed, by whose fault.
pub(super) enum StartFailure {
    /// This issue's data (E2BIG, EINVAL): every worker would fail the same way on it.
    Issue(String),
    /// The host (the program is missing or not executable): exit 78, the slot is parked.
    Host(String),
}

enum Blame {
    Issue,
    Host,
    /// Anything else (out of memory, too many processes): a death, as before.
    Unknown,
}

/// Whose fault a failed agent start is. The issue's texts are the only per-issue data in
/// the agent's argv and environment, so an error about the size or the content of the
/// arguments belongs to the issue; an error about the program belongs to the host.
fn start_blame(e: &std::io::Error) -> Blame {
    use nix::errno::Errno;
    match e.raw_os_error().map(Errno::from_raw) {
        Some(Errno::E2BIG | Errno::EINVAL) => Blame::Issue,
        Some(
            Errno::ENOENT
            | Errno::EACCES
            | Errno::EPERM
            | Errno::ENOEXEC
            | Errno::ENOTDIR
            | Errno::EISDIR
            | Errno::ELOOP
            | Errno::ENAMETOOLONG
            | Errno::ETXTBSY,
        ) => Blame::Host,
        // Rust refuses a NUL in an argument or variable before it calls execve.
        None if e.kind() == std::io::ErrorKind::InvalidInput => Blame::Issue,
        _ => Blame::Unknown,
    }
}

/// The most bytes of one issue text put in an environment variable. Linux refuses a
/// single string over 128 KiB (MAX_ARG_STRLEN) and all of argv and the environment over a
/// quarter of the stack limit; 32 KiB per text leaves room for the rest.
pub const ENV_TEXT_MAX: usize = 32 * 1024;

/// Gives the agent the issue's title and body: whole, as files in the attempt dir
/// (`issue-title.txt`, `issue-body.md`, named by `RED_AFK_ISSUE_TITLE_FILE` and
/// `RED_AFK_ISSUE_BODY_FILE`), and bounded in `RED_AFK_ISSUE_TITLE` / `RED_AFK_ISSUE_BODY`
/// (NULs dropped, cut at [`ENV_TEXT_MAX`] bytes on a character boundary), with
/// `RED_AFK_ISSUE_TITLE_TRUNCATED=1` / `RED_AFK_ISSUE_BODY_TRUNCATED=1` when the variable
/// is not the whole text.
fn pass_issue_texts(
    cmd: &mut Command,
    attempt_dir: &Path,
    title: &str,
    body: &str,
) -> Result<(), WorkerError> {
    for (var, file_var, truncated_var, name, text) in [
        (
            afk_env::ISSUE_TITLE,
            afk_env::ISSUE_TITLE_FILE,
            afk_env::ISSUE_TITLE_TRUNCATED,
            "issue-title.txt",
            title,
        ),
        (
            afk_env::ISSUE_BODY,
            afk_env::ISSUE_BODY_FILE,
            afk_env::ISSUE_BODY_TRUNCATED,
            "issue-body.md",
            body,
        ),
    ] {
        let file = attempt_dir.join(name);
        crate::fsutil::atomic_write(&file, text.as_bytes())
            .map_err(|e| WorkerError::file(file.clone(), "", e))?;
        let (value, whole) = env_form(text);
        cmd.env(file_var, &file).env(var, value);
        if whole {
            cmd.env_remove(truncated_var);
        } else {
            cmd.env(truncated_var, "1");
        }
    }
    Ok(())
}

/// `text` as an environment value: NULs dropped, at most [`ENV_TEXT_MAX`] bytes, cut on a
/// character boundary; and whether that is the whole text.
fn env_form(text: &str) -> (String, bool) {
    let mut value = text.replace('\0', "");
    let mut end = value.len().min(ENV_TEXT_MAX);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value.truncate(end);
    let whole = value.len() == text.len();
    (value, whole)
}

/// Stops the agent and every process it started: SIGTERM to the whole tree, `grace` for
/// it to end, then SIGKILL to whatever is left. The agent shares the worker's process
/// group (so a supervisor's group signal reaches it), so its tree is found by parent
/// links, each process kept by its identity (pid and start time) so a reused pid is
/// never signalled.
fn stop_agent(child: &mut Child, grace: Duration) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let tree = agent_tree(child.id() as i32);
    let signal = |sig: Signal| {
        for p in tree.iter().filter(|p| p.is_live()) {
            let _ = kill(Pid::from_raw(p.pid), sig);
        }
    };
    signal(Signal::SIGTERM);
    let deadline = timeutil::deadline(Instant::now(), grace);
    let mut agent_done = false;
    while Instant::now() < deadline {
        agent_done = agent_done || matches!(child.try_wait(), Ok(Some(_)));
        if agent_done && !tree[1..].iter().any(|p| p.is_live()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(Signal::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}

/// The agent (first) and its live descendants, as identities.
fn agent_tree(root: i32) -> Vec<crate::process::ProcId> {
    let table = crate::process::table();
    let mut pids = vec![root];
    let mut i = 0;
    while i < pids.len() {
        let parent = pids[i];
        pids.extend(
            table
                .iter()
                .filter(|p| p.ppid == parent && !p.is_zombie())
                .map(|p| p.pid),
        );
        i += 1;
    }
    pids.into_iter()
        .filter_map(crate::process::ProcId::of)
        .collect()
}

/// `[cluster]`: the host's lease file, read every 200 ms while the agent runs; `lost` once
/// its deadline passed or the lease is gone. Without a cluster it never says so.
struct LeaseWatch {
    lane: Option<std::path::PathBuf>,
    next: Instant,
    ttl_ms: u64,
}

impl LeaseWatch {
    fn new(layout: &crate::layout::Layout) -> LeaseWatch {
        LeaseWatch {
            lane: crate::cluster::active().map(|_| layout.supervisor_lane()),
            next: Instant::now(),
            ttl_ms: crate::cluster::active().map_or(0, |c| c.lease_s * 1000),
        }
    }

    fn lost(&mut self) -> Option<ClusterLost> {
        let lane = self.lane.as_ref()?;
        if Instant::now() < self.next {
            return None;
        }
        self.next = Instant::now() + Duration::from_millis(200);
        match crate::cluster::lease::read(lane) {
            Some(r) if r.live() => None,
            Some(r) if r.lease != 0 => Some(ClusterLost::NotRenewed { lease: r.lease }),
            Some(r) => Some(ClusterLost::NoneHeld { why: r.why }),
            None => Some(ClusterLost::LeaseFileGone),
        }
    }

    /// The agent's grace: half the margin the deadline keeps before the lease can end.
    fn grace(&self) -> Duration {
        Duration::from_millis(crate::cluster::lease::margin_ms(self.ttl_ms) / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_forms_are_bounded_and_nul_free() {
        assert_eq!(env_form("short"), ("short".into(), true));
        assert_eq!(env_form("a\0b"), ("ab".into(), false));
        let long = "é".repeat(ENV_TEXT_MAX);
        let (v, whole) = env_form(&long);
        assert!(!whole);
        assert_eq!(v.len(), ENV_TEXT_MAX);
        let (v, _) = env_form(&format!("x{long}"));
        assert_eq!(v.len(), ENV_TEXT_MAX - 1, "cut before a split character");
        assert!(long.starts_with(&v[1..]));
    }

    #[test]
    fn start_failures_are_blamed() {
        use std::io::{Error, ErrorKind};
        let os = |e: nix::errno::Errno| Error::from_raw_os_error(e as i32);
        assert!(matches!(
            start_blame(&os(nix::errno::Errno::E2BIG)),
            Blame::Issue
        ));
        assert!(matches!(
            start_blame(&Error::new(ErrorKind::InvalidInput, "nul byte found")),
            Blame::Issue
        ));
        assert!(matches!(
            start_blame(&os(nix::errno::Errno::ENOENT)),
            Blame::Host
        ));
        assert!(matches!(
            start_blame(&os(nix::errno::Errno::EACCES)),
            Blame::Host
        ));
        assert!(matches!(
            start_blame(&os(nix::errno::Errno::EAGAIN)),
            Blame::Unknown
        ));
    }
}
