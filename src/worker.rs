//! The built-in AFK worker: `afk-supervisor worker [--once] [--boot-only]`.
//!
//! One worker process claims `ready-for-agent` issues one at a time and runs the configured
//! agent on each in an isolated git worktree. Under a supervisor (`RED_AFK_SWEEPS_DONE=1`)
//! its boot is bootstrap + claim only; solo it runs the whole boot sweep suite first (`docs/SPEC.md` §6).
//!
//! Exit codes follow `docs/SPEC.md` §6: 0 done (queue empty or `--once` finished), 78 when the host is
//! misconfigured (no agent command) so the supervisor parks the slot instead of looping,
//! anything else a death.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use crate::attempt_state::{AttemptState, Current, Envelope};
use crate::boot::{self, BootError};
use crate::claim::Claim;
use crate::claim::tracked::{self, Verdict, WonClaim};
use crate::config::{self, Config, ConfigError};
use crate::exit::{self, Failure};
use crate::git::Git;
use crate::layout::{self, Layout, WORKER_NAMESPACES};
use crate::ledger;
use crate::pidfile;
use crate::sweeps::{SweepCtx, SweepName, worker_tree};
use crate::text;
use crate::timeutil;
use crate::toonl;
use crate::tracker::{LabeledIssue, Tracker, TrackerError, labels};

pub const BOOT_ONLY_SWEPT: &str = "boot complete (--boot-only): sweeps ran, no issues processed";
pub const BOOT_ONLY_SKIPPED: &str =
    "boot complete (--boot-only): sweeps skipped (supervisor-owned), no issues processed";

/// Fields of a worker's `liveness.toonl`; the supervisor's stall check reads `ts`.
pub const LIVENESS_FIELDS: [&str; 4] = ["ts", "pid", "issue", "stage"];

#[derive(Debug, Clone, Default)]
pub struct WorkerOpts {
    /// Work at most one issue, then exit.
    pub once: bool,
    /// Bootstrap (and sweep, when solo), then exit without claiming.
    pub boot_only: bool,
}

/// What the supervisor tells a worker through `RED_AFK_*` (`docs/SPEC.md` §6).
#[derive(Debug, Clone)]
pub struct WorkerEnv {
    pub sweeps_done: bool,
    pub slot: Option<usize>,
    pub worker_id: String,
    pub runner: String,
    pub retire_file: Option<PathBuf>,
    /// Seconds between liveness records while an agent runs (`RED_AFK_LIVENESS_S`, default 30).
    pub liveness_s: u64,
}

impl WorkerEnv {
    /// Reads the variables; an out-of-range number is a configuration error (exit 78),
    /// found before anything is claimed.
    pub fn from_env(env: &HashMap<String, String>, config: &Config) -> Result<Self, ConfigError> {
        let get = |k: &str| {
            env.get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        Ok(WorkerEnv {
            sweeps_done: get("RED_AFK_SWEEPS_DONE").as_deref() == Some("1"),
            slot: get("RED_AFK_SLOT").and_then(|s| s.parse().ok()),
            worker_id: get("RED_AFK_WORKER_ID")
                .filter(|id| valid_worker_id(id))
                .unwrap_or_else(|| format!("solo-{}", std::process::id())),
            runner: get("RED_AFK_RUNNER").unwrap_or_else(|| config.worker.runner.clone()),
            retire_file: get("RED_AFK_RETIRE_FILE").map(PathBuf::from),
            liveness_s: config::env_seconds(env, "RED_AFK_LIVENESS_S", "liveness_s", 1)?
                .unwrap_or(30),
        })
    }

    fn retire_requested(&self) -> bool {
        self.retire_file.as_ref().is_some_and(|f| f.exists())
    }
}

/// A worker id becomes a directory and a branch component (`afk/<id>/<N>-<slug>`): keep it
/// to a safe alphabet and to what git accepts as one ref component (no `..`, no `.lock`
/// ending), so an id that would make an illegal branch is refused before anything is
/// claimed.
fn valid_worker_id(id: &str) -> bool {
    id.len() <= 64
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && crate::git::ref_component_problem(id).is_none()
}

/// A branch/dir-safe slug of an issue title.
pub fn slugify(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 40 {
            break;
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() { "issue".into() } else { out }
}

/// Signals that stop the worker; the number is kept so the exit code can say which.
fn install_signal_flag() -> Result<Arc<AtomicUsize>, Failure> {
    let flag = Arc::new(AtomicUsize::new(0));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register_usize(sig, Arc::clone(&flag), sig as usize)
            .map_err(|e| Failure::failed(format!("cannot install signal handler: {e}")))?;
    }
    Ok(flag)
}

/// Runs the worker; returns its exit code.
pub fn run(
    layout: &Layout,
    config: &Config,
    tracker: &dyn Tracker,
    wenv: &WorkerEnv,
    opts: &WorkerOpts,
) -> Result<i32, Failure> {
    let stop = install_signal_flag()?;
    let git = Git::new(layout.repo());
    let home = Bootstrap::new(layout, &wenv.worker_id)?;

    if !wenv.sweeps_done {
        let ctx = SweepCtx {
            layout,
            config,
            tracker,
            git: &git,
            dry_run: false,
        };
        match boot::run_suite(&ctx, &SweepName::ALL).into_result() {
            Ok(report) => println!("{}", report.summary()),
            Err(BootError::Halted(msg)) => {
                home.finish();
                return Err(Failure::new(
                    exit::BOOT_HALTED,
                    format!("boot sweeps halted: {msg}"),
                ));
            }
            Err(e) => {
                eprintln!("afk-supervisor worker: {}", e.log_message())
            }
        }
    }
    if opts.boot_only {
        println!(
            "{}",
            if wenv.sweeps_done {
                BOOT_ONLY_SKIPPED
            } else {
                BOOT_ONLY_SWEPT
            }
        );
        home.finish();
        return Ok(exit::OK);
    }
    // Before any claim: an agent that cannot run is the host's fault (exit 78, the slot is
    // parked), never an issue taken and given back in a crash loop.
    let agent = match crate::program::check_agent(config, layout) {
        Ok(_) => config.agent.command.clone().unwrap_or_default(),
        Err(e) => {
            home.finish();
            return Err(Failure::config(e.to_string()));
        }
    };

    let w = Worker {
        layout,
        config,
        tracker,
        git,
        wenv,
        agent,
        stop,
        home: &home,
    };
    let code = w.work_loop(opts.once);
    home.finish();
    code
}

/// The worker's own dir and `worker.pid` (after `.red/tmp/`, `.red/state/` and their
/// `.gitignore` lines, [`crate::bootstrap`]); removed again on a clean exit.
struct Bootstrap {
    dir: PathBuf,
}

impl Bootstrap {
    fn new(layout: &Layout, worker_id: &str) -> Result<Self, Failure> {
        let ignore =
            crate::bootstrap::ensure(layout).map_err(|e| Failure::failed(e.to_string()))?;
        if let Some(note) = ignore.note() {
            eprintln!("worker {worker_id}: {note}");
        }
        let dir = layout
            .worker_namespace(WORKER_NAMESPACES[0])
            .join(worker_id);
        fs::create_dir_all(&dir).map_err(|e| {
            Failure::failed(format!("{}: cannot create worker dir: {e}", dir.display()))
        })?;
        let pid_file = dir.join("worker.pid");
        pidfile::write_pid_file(&pid_file, std::process::id() as i32)
            .map_err(|e| Failure::failed(format!("{}: {e}", pid_file.display())))?;
        Ok(Bootstrap { dir })
    }

    /// Removes `worker.pid` and, when nothing else is in it, the worker dir: attempt dirs
    /// stay for orphan cleanup to judge by their issue's state.
    fn finish(&self) {
        let _ = pidfile::remove_pid_file(&self.dir.join("worker.pid"));
        let _ = fs::remove_dir(&self.dir);
    }
}

struct Worker<'a> {
    layout: &'a Layout,
    config: &'a Config,
    tracker: &'a dyn Tracker,
    git: Git,
    wenv: &'a WorkerEnv,
    agent: Vec<String>,
    stop: Arc<AtomicUsize>,
    home: &'a Bootstrap,
}

/// A claim the worker holds: the local lock and, on a shared tracker, the won claim mark
/// whose release mark ends every comment that gives the issue up.
struct TakenClaim {
    local: Claim,
    marks: Option<WonClaim>,
}

impl TakenClaim {
    /// `body`, ending in the hand-off (`to_human`) or release mark when the claim was won
    /// by marks.
    fn ending(&self, body: &str, to_human: bool) -> String {
        match &self.marks {
            Some(m) => m.ending(body, to_human),
            None => body.to_string(),
        }
    }
}

/// How one issue ended.
enum Outcome {
    Done,
    /// The agent could not be started for this issue's data: handed to a human.
    SetAside,
    AgentFailed,
    /// The agent ran past `timing.attempt_max_s`; the issue went back to the queue.
    Capped,
    Interrupted(i32),
}

impl Worker<'_> {
    fn stopped(&self) -> Option<i32> {
        match self.stop.load(Ordering::SeqCst) {
            0 => None,
            sig => Some(128 + sig as i32),
        }
    }

    fn work_loop(&self, once: bool) -> Result<i32, Failure> {
        loop {
            if let Some(code) = self.stopped() {
                return Ok(code);
            }
            if self.wenv.retire_requested() {
                eprintln!(
                    "worker {}: retire requested; not taking another issue",
                    self.wenv.worker_id
                );
                return Ok(exit::OK);
            }
            let Some((issue, claim)) = self.claim_next()? else {
                println!(
                    "worker {}: no ready-for-agent issue; exiting",
                    self.wenv.worker_id
                );
                return Ok(exit::OK);
            };
            let outcome = self.work_issue(&issue, claim)?;
            match outcome {
                Outcome::Done | Outcome::SetAside | Outcome::Capped if once => {
                    return Ok(exit::OK);
                }
                Outcome::Done | Outcome::SetAside | Outcome::Capped => {}
                Outcome::AgentFailed => return Ok(exit::FAILED),
                Outcome::Interrupted(code) => return Ok(code),
            }
        }
    }

    /// The lowest-numbered open `ready-for-agent` issue whose claim this worker wins. The
    /// backend lists oldest first, so the 200 looked at are the queue's head however long
    /// it is.
    fn claim_next(&self) -> Result<Option<(LabeledIssue, TakenClaim)>, Failure> {
        crate::pause::worker_gate(self.layout)?;
        let mut queue = self
            .tracker
            .list_open_with_label_oldest_first(labels::READY_FOR_AGENT, 200)
            .map_err(|e| tracker_failure(&e))?;
        queue.retain(|i| crate::tracker::is_claimable(&i.labels));
        queue.sort_by_key(|i| i.number);
        for issue in queue {
            let claim = Claim::try_take(self.layout, issue.number).map_err(|e| {
                Failure::failed(format!(
                    "{}: cannot claim: {e}",
                    self.layout.claims().display()
                ))
            })?;
            let Some(claim) = claim else { continue };
            // The listing may be stale: confirm under the claim before taking it.
            let current = self.tracker.view(issue.number);
            let ready = current.as_ref().is_ok_and(|v| {
                v.state == crate::tracker::IssueState::Open
                    && v.has_label(labels::READY_FOR_AGENT)
                    && !v.has_label(labels::RUNNING)
            });
            if !ready {
                let _ = claim.release();
                if let Err(e) = current {
                    return Err(tracker_failure(&e));
                }
                continue;
            }
            if let Err(e) = self.tracker.edit_labels(
                issue.number,
                &[labels::RUNNING],
                &[labels::READY_FOR_AGENT],
            ) {
                let _ = claim.release();
                return Err(tracker_failure(&e));
            }
            let marks = match self.claim_on_tracker(issue.number) {
                Ok(Some(Verdict::Lost { holder })) => {
                    let by = holder.map_or("a hand-off".to_string(), |h| h.to_string());
                    println!(
                        "worker {}: yielded #{} to {by}",
                        self.wenv.worker_id, issue.number
                    );
                    let _ = claim.release();
                    continue;
                }
                Ok(Some(Verdict::Won(won))) => Some(won),
                Ok(None) => None,
                // The local claim stays: the supervisor's release (or orphan cleanup)
                // gives the issue back from it once this worker is gone, marks checked.
                Err(e) => return Err(Failure::new(exit_for(e.tracker_error()), e.to_string())),
            };
            return Ok(Some((
                issue,
                TakenClaim {
                    local: claim,
                    marks,
                },
            )));
        }
        Ok(None)
    }

    /// The claim decided on a tracker several checkouts share (SPEC §11.5); `None` where
    /// this checkout's local claim is all there is (the `local` store).
    fn claim_on_tracker(&self, n: u64) -> Result<Option<Verdict>, tracked::ClaimError> {
        if !self.tracker.shared_across_checkouts() {
            return Ok(None);
        }
        let host = tracked::this_host(self.layout);
        tracked::claim(self.tracker, n, &self.wenv.worker_id, &host).map(Some)
    }

    /// Posts a comment that gives the issue up: with its release mark, retried (the mark's
    /// nonce makes a duplicate harmless); the local store gets it once.
    fn post_ending(&self, n: u64, claim: &TakenClaim, body: &str, to_human: bool) -> bool {
        let body = claim.ending(body, to_human);
        match &claim.marks {
            Some(_) => tracked::post(self.tracker, n, &body).is_ok(),
            None => self.tracker.comment(n, &body).is_ok(),
        }
    }

    /// The label change that gives the issue up; retried on a shared tracker (a repeated
    /// edit changes nothing), where a failure would otherwise wait for the claims belt.
    fn hand_labels(&self, n: u64, claim: &TakenClaim, add: &str) -> Result<(), Failure> {
        let edit = || self.tracker.edit_labels(n, &[add], &[labels::RUNNING]);
        match &claim.marks {
            Some(_) => tracked::retry(edit),
            None => edit(),
        }
        .map_err(|e| tracker_failure(&e))
    }

    fn over_limit(&self, records: &[ledger::Record]) -> bool {
        ledger::failures(records) as u64 >= self.config.worker.max_failed_attempts
    }

    /// Takes issue `n` out of the queue for good (`docs/SPEC.md` §11.10): the comment listing every
    /// attempt (ending with the hand-off mark), then `ready-for-human` and
    /// `afk:quarantined` in place of `running` and `ready-for-agent`, then the ledger's
    /// `quarantined` record, from which a later retry counts afresh.
    fn quarantine(
        &self,
        n: u64,
        claim: &TakenClaim,
        records: &[ledger::Record],
    ) -> Result<(), Failure> {
        let body = ledger::quarantine_comment(records, labels::QUARANTINED);
        self.post_ending(n, claim, &body, true);
        let edit = || {
            self.tracker.edit_labels(
                n,
                &[labels::READY_FOR_HUMAN, labels::QUARANTINED],
                &[labels::RUNNING, labels::READY_FOR_AGENT],
            )
        };
        match &claim.marks {
            Some(_) => tracked::retry(edit),
            None => edit(),
        }
        .map_err(|e| tracker_failure(&e))?;
        let record = ledger::Record::now(
            Some(&self.wenv.worker_id),
            None,
            ledger::Outcome::Quarantined,
        );
        if let Err(e) = ledger::append(self.layout, n, &record) {
            eprintln!("worker {}: attempt ledger: {e}", self.wenv.worker_id);
        }
        eprintln!(
            "worker {}: #{n} quarantined after {} failed attempt(s)",
            self.wenv.worker_id,
            ledger::failures(records)
        );
        Ok(())
    }

    fn work_issue(&self, issue: &LabeledIssue, claim: TakenClaim) -> Result<Outcome, Failure> {
        let n = issue.number;
        let title = issue_title(issue);
        let slug = slugify(&title);
        let attempt = next_attempt(self.layout, n);
        let attempt_dir = self.home.dir.join(format!("{n}-a{attempt}"));
        let worktree = attempt_dir.join("worktree");
        let mut branch = format!("afk/{}/{n}-{slug}", self.wenv.worker_id);
        // A kept worktree of an earlier attempt by the same worker id still holds the plain
        // name; the attempt suffix keeps the `docs/SPEC.md` §8 shape `afk/<worker>/<N>-<slug>`.
        if matches!(
            self.git.rev_parse(&format!("refs/heads/{branch}")),
            Ok(Some(_))
        ) {
            branch = format!("{branch}-a{attempt}");
        }
        let records = ledger::read(self.layout, n).unwrap_or_else(|e| {
            // Unreadable: no quarantine and no resume on a guess; the attempt runs afresh.
            eprintln!("worker {}: attempt ledger: {e}", self.wenv.worker_id);
            Vec::new()
        });
        if ledger::failures(&records) as u64 >= self.config.worker.max_failed_attempts {
            // Deaths recorded by restores brought the issue to its limit: no new attempt.
            let quarantined = self.quarantine(n, &claim, &records);
            if let Err(e) = claim.local.release() {
                eprintln!(
                    "worker {}: releasing claim of #{n}: {e}",
                    self.wenv.worker_id
                );
            }
            quarantined?;
            return Ok(Outcome::SetAside);
        }
        let resume = ledger::resume_branch(&records).map(str::to_string);
        let mut state = AttemptFile::new(
            &attempt_dir,
            &self.wenv.worker_id,
            n,
            &title,
            &slug,
            &worktree,
        );
        println!(
            "worker {}: claimed #{n} ({}); attempt {n}-a{attempt}",
            self.wenv.worker_id,
            text::escape(&title)
        );
        let started = state.state.started_at.clone();
        let end = |outcome: ledger::Outcome, branch: &str| {
            let head = Git::new(&worktree)
                .rev_parse("HEAD")
                .ok()
                .flatten()
                .or_else(|| {
                    self.git
                        .rev_parse(&format!("refs/heads/{branch}"))
                        .ok()
                        .flatten()
                });
            let record =
                ledger::Record::now(Some(&self.wenv.worker_id), started.as_deref(), outcome)
                    .on_branch(branch, head);
            let mut records = records.clone();
            if let Err(e) = ledger::append(self.layout, n, &record) {
                eprintln!("worker {}: attempt ledger: {e}", self.wenv.worker_id);
            }
            records.push(record);
            records
        };

        // Set once the agent has finished its work: from then on, a failure must not hand
        // the issue back to the queue, or the work would be done twice.
        let finished = std::cell::Cell::new(false);
        let result = (|| -> Result<Outcome, Failure> {
            fs::create_dir_all(&attempt_dir).map_err(|e| {
                Failure::failed(format!(
                    "{}: cannot create attempt dir: {e}",
                    attempt_dir.display()
                ))
            })?;
            state.write("worktree")?;
            let start_point = self.prepare_start_point(resume.as_deref());
            self.git
                .worktree_add(&worktree, &branch, &start_point)
                .map_err(|e| Failure::failed(e.to_string()))?;
            state.write("agent")?;
            let status = self.run_agent(
                issue,
                &title,
                &branch,
                &worktree,
                &attempt_dir,
                resume.as_deref(),
            )?;
            match status {
                AgentEnd::Signalled(code) => Ok(Outcome::Interrupted(code)),
                AgentEnd::Capped => {
                    state.write("failed")?;
                    // Nothing is committed on the agent's behalf; what it committed is pushed
                    // so the next attempt, on any host, resumes from it.
                    let pushed = match self.publish(&worktree, &branch, &start_point) {
                        Ok(_) => String::new(),
                        Err(e) => {
                            format!(" (push failed: {e}; the commits are in the local branch)")
                        }
                    };
                    let records = end(ledger::Outcome::WallClockCapped, &branch);
                    if self.over_limit(&records) {
                        self.quarantine(n, &claim, &records)?;
                        return Ok(Outcome::Capped);
                    }
                    let body = format!(
                        "🤖 /afk attempt {n}-a{attempt} reached the wall-clock cap ({}s) and was stopped; its work is on branch `{branch}`{pushed}, where the next attempt resumes. Returning to ready-for-agent.",
                        self.config.timing.attempt_max_s
                    );
                    self.post_ending(n, &claim, &body, false);
                    self.hand_labels(n, &claim, labels::READY_FOR_AGENT)?;
                    Ok(Outcome::Capped)
                }
                AgentEnd::NotStarted(StartFailure::Host(why)) => {
                    // The host's fault, not the issue's: the issue goes back untouched (the
                    // interruption path below) and the supervisor parks the slot.
                    Err(Failure::config(why))
                }
                AgentEnd::NotStarted(StartFailure::Issue(why)) => {
                    // Every worker would fail the same way on this issue: never requeue it.
                    finished.set(true);
                    state.write("set-aside")?;
                    end(ledger::Outcome::SetAside, &branch);
                    let edited = self.hand_labels(n, &claim, labels::READY_FOR_HUMAN);
                    let body = format!(
                        "🤖 /afk set this issue aside: the agent could not be started for this issue ({why}). The full title and body reach the agent as files, so this needs a person to look at the issue before an agent takes it again."
                    );
                    // Posted even when the label change failed: its hand-off mark tells the
                    // claims belt to finish the hand-off, never to requeue.
                    self.post_ending(n, &claim, &body, true);
                    edited?;
                    eprintln!(
                        "worker {}: #{n} set aside: {}",
                        self.wenv.worker_id,
                        text::escape(&why)
                    );
                    Ok(Outcome::SetAside)
                }
                AgentEnd::Exited(0) => {
                    finished.set(true);
                    state.write("publish")?;
                    let commits = self.publish(&worktree, &branch, &start_point);
                    let body = match commits {
                        Ok(0) => format!(
                            "🤖 /afk finished attempt {n}-a{attempt}: the agent made no commits; ready for human review."
                        ),
                        Ok(k) => format!(
                            "🤖 /afk finished attempt {n}-a{attempt}: {k} commit(s) on branch `{branch}`; ready for human review."
                        ),
                        Err(e) => format!(
                            "🤖 /afk finished attempt {n}-a{attempt} but could not push `{branch}` ({e}); the work is in the local branch."
                        ),
                    };
                    let edited = self.hand_labels(n, &claim, labels::READY_FOR_HUMAN);
                    if self.post_ending(n, &claim, &body, true) {
                        state.set_envelope_posted();
                    }
                    end(ledger::Outcome::Done, &branch);
                    edited?;
                    state.write("done")?;
                    Ok(Outcome::Done)
                }
                AgentEnd::Exited(code) => {
                    state.write("failed")?;
                    let records = end(ledger::Outcome::AgentFailed(code), &branch);
                    if self.over_limit(&records) {
                        self.quarantine(n, &claim, &records)?;
                        return Ok(Outcome::AgentFailed);
                    }
                    let body = format!(
                        "🤖 /afk attempt {n}-a{attempt} failed (agent exit {code}); returning to ready-for-agent."
                    );
                    // The release mark first: the next claim must find the claim ended.
                    self.post_ending(n, &claim, &body, false);
                    self.hand_labels(n, &claim, labels::READY_FOR_AGENT)?;
                    Ok(Outcome::AgentFailed)
                }
            }
        })();

        let interrupted = matches!(result, Ok(Outcome::Interrupted(_)) | Err(_));
        if interrupted && !finished.get() {
            // Never leave the issue eternally `running`: give it back to the queue, its
            // claim mark ended first so the next claim starts clean.
            if let Some(m) = &claim.marks {
                let _ = tracked::post(self.tracker, n, &m.release_mark());
            }
            let _ = self
                .tracker
                .edit_labels(n, &[labels::READY_FOR_AGENT], &[labels::RUNNING]);
            let _ = state.write("interrupted");
            end(ledger::Outcome::GivenBack, &branch);
        } else if result.is_err() {
            let _ = state.write("handoff-failed");
        }
        // Only a finished attempt's worktree goes, and only when clean (git refuses a dirty
        // one): after a failure or an interruption the agent's uncommitted work is kept
        // beside the attempt's state for a person, until orphan cleanup judges the attempt.
        let done = matches!(result, Ok(Outcome::Done | Outcome::SetAside));
        if worktree.exists() {
            match done.then(|| self.git.worktree_remove(&worktree, false)) {
                Some(Ok(())) => {}
                Some(Err(e)) => eprintln!("worker {}: worktree kept: {e}", self.wenv.worker_id),
                None => eprintln!(
                    "worker {}: worktree kept for inspection at {}",
                    self.wenv.worker_id,
                    worktree.display()
                ),
            }
        }
        if let Err(e) = claim.local.release() {
            eprintln!(
                "worker {}: releasing claim of #{n}: {e}",
                self.wenv.worker_id
            );
        }
        result
    }

    /// The branch a capped attempt left (`origin/<branch>` freshly fetched, else the local
    /// branch) when resuming; else `origin/<base>` freshly fetched when possible, else
    /// whatever the checkout has.
    fn prepare_start_point(&self, resume: Option<&str>) -> String {
        if let Some(b) = resume {
            let remote = format!("origin/{b}");
            if self.git.fetch_base(b).is_ok() && matches!(self.git.rev_parse(&remote), Ok(Some(_)))
            {
                return remote;
            }
            let local = format!("refs/heads/{b}");
            if matches!(self.git.rev_parse(&local), Ok(Some(_))) {
                return local;
            }
            eprintln!(
                "worker {}: branch {b} to resume is gone; starting from the base",
                self.wenv.worker_id
            );
        }
        let base = &self.config.fleet.base;
        if let Err(e) = self.git.fetch_base(base) {
            eprintln!(
                "worker {}: fetch of {base} failed, starting from the local ref: {e}",
                self.wenv.worker_id
            );
        }
        let remote = format!("origin/{base}");
        match self.git.rev_parse(&remote) {
            Ok(Some(_)) => remote,
            _ => "HEAD".into(),
        }
    }

    /// Pushes the branch when the agent committed; returns the number of new commits.
    fn publish(&self, worktree: &Path, branch: &str, start_point: &str) -> Result<u64, String> {
        let wt = Git::new(worktree);
        let count = wt
            .run(&["rev-list", "--count", &format!("{start_point}..HEAD")])
            .map_err(|e| e.to_string())?;
        let count: u64 = count
            .trim()
            .parse()
            .map_err(|_| format!("rev-list said {count:?}"))?;
        if count > 0 {
            wt.push_branch(branch).map_err(|e| e.to_string())?;
        }
        Ok(count)
    }

    fn run_agent(
        &self,
        issue: &LabeledIssue,
        title: &str,
        branch: &str,
        worktree: &Path,
        attempt_dir: &Path,
        resume: Option<&str>,
    ) -> Result<AgentEnd, Failure> {
        let mut cmd = Command::new(&self.agent[0]);
        match resume {
            Some(b) => cmd.env("RED_AFK_RESUME_BRANCH", b),
            None => cmd.env_remove("RED_AFK_RESUME_BRANCH"),
        };
        cmd.args(&self.agent[1..])
            .current_dir(worktree)
            .env("RED_AFK_ISSUE", issue.number.to_string())
            .env("RED_AFK_BRANCH", branch)
            .env("RED_AFK_WORKTREE", worktree)
            .env("RED_AFK_ATTEMPT_DIR", attempt_dir)
            .env("RED_AFK_RUNNER", &self.wenv.runner);
        pass_issue_texts(&mut cmd, attempt_dir, title, &issue.body)?;
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                let why = format!("agent.command {:?} could not start: {e}", self.agent[0]);
                return match start_blame(&e) {
                    Blame::Issue => Ok(AgentEnd::NotStarted(StartFailure::Issue(why))),
                    Blame::Host => Ok(AgentEnd::NotStarted(StartFailure::Host(why))),
                    Blame::Unknown => Err(Failure::failed(why)),
                };
            }
        };
        // Liveness records mark progress, not mere existence: one when the agent starts, then
        // one whenever its worktree moves (a new commit or changed files), checked every
        // `liveness_s`. A hung agent therefore goes quiet and the supervisor's stall check
        // (newest record or slot-log write) can flag and kill it.
        let liveness = attempt_dir.join("liveness.toonl");
        append_liveness(&liveness, issue.number, "agent");
        let wt = Git::new(worktree);
        let mut seen = worktree_fingerprint(&wt);
        let every = Duration::from_secs(self.wenv.liveness_s);
        let mut next_look = timeutil::deadline(Instant::now(), every);
        let cap = timeutil::deadline(
            Instant::now(),
            Duration::from_secs(self.config.timing.attempt_max_s),
        );
        loop {
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
                    if let Some(code) = self.stopped() {
                        return Ok(AgentEnd::Signalled(code));
                    }
                    use std::os::unix::process::ExitStatusExt;
                    let code = status
                        .code()
                        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                    return Ok(AgentEnd::Exited(code));
                }
                Ok(None) => {}
                Err(e) => return Err(Failure::failed(format!("waiting for the agent: {e}"))),
            }
            if let Some(code) = self.stopped() {
                // Half the supervisor's grace: the worker must still have time to give the
                // issue back before the supervisor's SIGKILL reaches the whole group.
                stop_agent(
                    &mut child,
                    Duration::from_millis(self.config.timing.stop_grace_s.saturating_mul(500)),
                );
                return Ok(AgentEnd::Signalled(code));
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
                return Ok(AgentEnd::Capped);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

enum AgentEnd {
    Exited(i32),
    /// Stopped at the wall-clock cap.
    Capped,
    Signalled(i32),
    NotStarted(StartFailure),
}

/// Why `execve` of the agent failed, by whose fault.
enum StartFailure {
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
) -> Result<(), Failure> {
    for (var, name, text) in [
        ("RED_AFK_ISSUE_TITLE", "issue-title.txt", title),
        ("RED_AFK_ISSUE_BODY", "issue-body.md", body),
    ] {
        let file = attempt_dir.join(name);
        crate::fsutil::atomic_write(&file, text.as_bytes())
            .map_err(|e| Failure::failed(format!("{}: {e}", file.display())))?;
        let (value, whole) = env_form(text);
        cmd.env(format!("{var}_FILE"), &file).env(var, value);
        if whole {
            cmd.env_remove(format!("{var}_TRUNCATED"));
        } else {
            cmd.env(format!("{var}_TRUNCATED"), "1");
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

/// The exit code for a tracker failure: a rate limit exits [`exit::RATE_LIMITED`], which the
/// supervisor must not count as a death (SPEC §6); anything else 1.
fn exit_for(e: &TrackerError) -> i32 {
    if e.is_rate_limited() {
        exit::RATE_LIMITED
    } else {
        exit::FAILED
    }
}

fn tracker_failure(e: &TrackerError) -> Failure {
    Failure::new(exit_for(e), e.to_string())
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

/// What the agent has done to its worktree so far: HEAD plus the porcelain status.
/// `None` when git cannot tell (then no progress is claimed).
fn worktree_fingerprint(wt: &Git) -> Option<String> {
    let head = wt.run(&["rev-parse", "HEAD"]).ok()?;
    let status = wt.run(&["status", "--porcelain=v1", "-z"]).ok()?;
    Some(format!("{}\n{status}", head.trim()))
}

fn append_liveness(path: &Path, issue: u64, stage: &str) {
    let record = json!({
        "ts": timeutil::now_rfc3339_millis(),
        "pid": std::process::id(),
        "issue": issue,
        "stage": stage,
    });
    // A refused or failed write leaves the stall check to fall back on the slot log.
    let _ = toonl::append_record(path, &LIVENESS_FIELDS, record);
}

/// The title of a listed issue; the gh listing carries only the body, so there the first
/// line of the body stands in.
fn issue_title(issue: &LabeledIssue) -> String {
    if let Some(t) = issue.title.as_ref().filter(|t| !t.trim().is_empty()) {
        return t.trim().to_string();
    }
    issue
        .body
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.trim_start_matches('#').trim().chars().take(80).collect())
        .unwrap_or_else(|| format!("issue {}", issue.number))
}

/// One more than the highest attempt number of `issue` in any worker dir of any namespace,
/// so attempt numbers are per issue across the fleet (the attempt cap keeps the newest).
pub fn next_attempt(layout: &Layout, issue: u64) -> u64 {
    let workers = worker_tree::worker_entries(layout).unwrap_or_default();
    let max = workers
        .iter()
        .filter(|w| w.kind == worker_tree::Kind::Dir)
        .flat_map(|w| worker_tree::entries(&w.path).unwrap_or_default())
        .filter_map(|a| layout::parse_attempt_dir(&a.name))
        .filter(|(n, _)| *n == issue)
        .map(|(_, k)| k)
        .max()
        .unwrap_or(0);
    max + 1
}

/// The attempt's `afk.state.json` (`docs/SPEC.md` §3), rewritten atomically at each stage.
struct AttemptFile {
    dir: PathBuf,
    state: AttemptState,
}

impl AttemptFile {
    fn new(
        dir: &Path,
        worker_id: &str,
        number: u64,
        title: &str,
        slug: &str,
        worktree: &Path,
    ) -> Self {
        let pid = std::process::id();
        let started_at = timeutil::rfc3339(SystemTime::now());
        let state = AttemptState {
            version: 1,
            worker_id: Some(worker_id.into()),
            pid: Some(i64::from(pid)),
            pid_start_time: pidfile::process_start_time(pid as i32),
            started_at: Some(started_at.clone()),
            current: Some(Current {
                number: Some(number),
                title: Some(title.into()),
                slug: Some(slug.into()),
                worktree: Some(worktree.display().to_string()),
                started_at: Some(started_at),
                stage: None,
                ..Default::default()
            }),
            envelope: Some(Envelope {
                posted: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        AttemptFile {
            dir: dir.to_path_buf(),
            state,
        }
    }

    fn set_envelope_posted(&mut self) {
        self.state.envelope = Some(Envelope {
            posted: Some(true),
            ..Default::default()
        });
    }

    /// Records `stage`; a finished attempt has `current: null` and keeps the last issue and
    /// stage under `last` for people reading the dir later.
    fn write(&mut self, stage: &str) -> Result<(), Failure> {
        let finished = matches!(stage, "done" | "failed" | "interrupted" | "set-aside");
        if let Some(cur) = self.state.current.as_mut() {
            cur.stage = Some(stage.into());
        }
        let number = self.state.current.as_ref().and_then(|c| c.number);
        self.state
            .extra
            .insert("last".into(), json!({ "number": number, "stage": stage }));
        let mut out = self.state.clone();
        if finished {
            out.current = None;
        }
        out.write(&self.dir)
            .map_err(|e| Failure::failed(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(slugify("Fix the Login page!"), "fix-the-login-page");
        assert_eq!(slugify("  ## ?? "), "issue");
        assert_eq!(slugify("Ünïcode and stuff"), "n-code-and-stuff");
        assert!(slugify(&"x".repeat(100)).len() <= 40);
    }

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

    #[test]
    fn worker_ids() {
        assert!(valid_worker_id("sup-12-slot-0-3"));
        for bad in [
            "", "../x", "a/b", "-x", ".x", "a b", "a..b", "x.lock", "w.lock",
        ] {
            assert!(!valid_worker_id(bad), "{bad}");
        }
    }

    #[test]
    fn attempt_numbers_span_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert_eq!(next_attempt(&layout, 5), 1);
        fs::create_dir_all(layout.worker_namespace("workers").join("w1/5-a2")).unwrap();
        fs::create_dir_all(layout.worker_namespace("go-workers").join("w2/5-a4")).unwrap();
        fs::create_dir_all(layout.worker_namespace("workers").join("w1/6-a9")).unwrap();
        assert_eq!(next_attempt(&layout, 5), 5);
    }
}
