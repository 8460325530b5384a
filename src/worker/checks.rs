//! The project's checks after the agent (`docs/SPEC.md` §11.22): `[checks] command` run in
//! the issue's worktree, inside the same sandbox and environment the agent gets (the checks
//! run the repository's code, which the agent may have written), under `checks.timeout_s`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::reach::Task;
use super::{Worker, WorkerError};
use crate::landing::pr_text as ltext;

/// The most bytes of a run's output read back for its tail.
const TAIL_BYTES: u64 = 64 << 10;

/// The grace between SIGTERM and SIGKILL for checks past their time.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// How one run of the checks ended.
pub(super) enum ChecksRun {
    Passed {
        secs: f64,
    },
    /// `why` in words (`exit 1`, `timed out after 60s`), the end of the output, and whether
    /// another round of the agent may help (not when the command cannot even start).
    Failed {
        why: String,
        tail: String,
        again: bool,
    },
    /// The worker was signalled while the checks ran; they were stopped.
    Interrupted(i32),
}

impl Worker<'_> {
    /// Runs the checks of issue `n`'s `round` in `task`'s worktree; `None` without `[checks] command`.
    /// The output (stdout and stderr together) goes to `<attempt dir>/checks-<round>.log`.
    pub(super) fn run_checks(
        &self,
        task: Task<'_>,
        n: u64,
        round: u64,
    ) -> Result<Option<ChecksRun>, WorkerError> {
        let Some(argv) = self.config.checks.command.as_deref() else {
            return Ok(None);
        };
        let log = task.attempt_dir.join(format!("checks-{round}.log"));
        let out = File::create(&log).map_err(|e| WorkerError::file(log.clone(), "", e))?;
        let err = out
            .try_clone()
            .map_err(|e| WorkerError::file(log.clone(), "", e))?;
        let result_file = task.attempt_dir.join("checks-result.json");
        let (mut cmd, room) =
            self.confinement
                .command(self.config, self.layout, task, argv, &result_file)?;
        // Its own group, so a time-out or a stop ends every process it started.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .env(crate::afk_env::ISSUE, n.to_string())
            .env(crate::afk_env::BRANCH, task.branch)
            .env(crate::afk_env::WORKTREE, task.worktree)
            .env(crate::afk_env::ATTEMPT_DIR, task.attempt_dir)
            .env(crate::afk_env::CHECKS_ROUND, round.to_string());
        let started = Instant::now();
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                super::reach::after_agent(&self.git, self.layout, &room, &self.wenv.worker_id);
                return Ok(Some(ChecksRun::Failed {
                    why: format!("checks.command {:?} could not start: {e}", argv[0]),
                    tail: String::new(),
                    again: false,
                }));
            }
        };
        let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
        let deadline =
            crate::timeutil::deadline(started, Duration::from_secs(self.config.checks.timeout_s));
        let ended = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) => {}
                Err(e) => break Err(format!("waiting for the checks: {e}")),
            }
            if let Some(signal) = self.stop.signal() {
                stop_group(pgid, &mut child);
                super::reach::after_agent(&self.git, self.layout, &room, &self.wenv.worker_id);
                return Ok(Some(ChecksRun::Interrupted(signal)));
            }
            if Instant::now() >= deadline {
                stop_group(pgid, &mut child);
                break Err(format!("timed out after {}s", self.config.checks.timeout_s));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        super::reach::after_agent(&self.git, self.layout, &room, &self.wenv.worker_id);
        let secs = started.elapsed().as_secs_f64();
        let why = match ended {
            Ok(status) if status.success() => {
                eprintln!(
                    "worker {}: checks round {round} passed in {secs:.1}s",
                    self.wenv.worker_id
                );
                return Ok(Some(ChecksRun::Passed { secs }));
            }
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                match (status.code(), status.signal()) {
                    (Some(c), _) => format!("exit {c}"),
                    (None, Some(s)) => format!("killed by signal {s}"),
                    _ => "ended abnormally".into(),
                }
            }
            Err(why) => why,
        };
        eprintln!(
            "worker {}: checks round {round} failed ({why}); output in {}",
            self.wenv.worker_id,
            log.display()
        );
        Ok(Some(ChecksRun::Failed {
            why,
            tail: read_tail(&log),
            again: true,
        }))
    }
}

/// SIGTERM to the checks' group, [`KILL_GRACE`] for it to end, then SIGKILL.
fn stop_group(pgid: nix::unistd::Pid, child: &mut std::process::Child) {
    use nix::sys::signal::{Signal, killpg};
    let _ = killpg(pgid, Signal::SIGTERM);
    let deadline = crate::timeutil::deadline(Instant::now(), KILL_GRACE);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = killpg(pgid, Signal::SIGKILL);
    let _ = child.wait();
}

/// The end of a run's output: its last [`TAIL_BYTES`], as text, cut to
/// [`ltext::TAIL_MAX`] characters.
fn read_tail(log: &std::path::Path) -> String {
    let Ok(mut f) = File::open(log) else {
        return String::new();
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)));
    let mut bytes = Vec::new();
    let _ = f.take(TAIL_BYTES).read_to_end(&mut bytes);
    ltext::tail(&String::from_utf8_lossy(&bytes), ltext::TAIL_MAX)
}

/// What the next round is told after a failing run of `argv`.
pub(super) fn guidance(argv: &[String], why: &str, tail: &str) -> String {
    format!(
        "The project's checks (`{}`) failed after your last round ({why}). Fix what they report, commit on the same branch, and make them pass. The end of their output:\n\n{tail}",
        argv.join(" ")
    )
}
