//! One issue from its claim to its hand-off: the attempt dir and worktree, the agent's run,
//! and what each way it ends does to the issue (the comment, the labels, the ledger
//! record), with the quarantine at the failure limit (`docs/SPEC.md` §11.4, §11.10).

use std::fs;
use std::path::Path;

use super::agent::{AgentEnd, StartFailure};
use super::attempt::{AttemptFile, next_attempt};
use super::queue::TakenClaim;
use super::texts::{self, issue_title, slugify};
use super::{Outcome, Worker, WorkerError};
use crate::claim::tracked;
use crate::git::Git;
use crate::ledger;
use crate::text;
use crate::tracker::{LabeledIssue, labels};

impl Worker<'_> {
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
    ) -> Result<(), WorkerError> {
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
        .map_err(|e| WorkerError::from(&e))?;
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

    pub(super) fn work_issue(
        &self,
        issue: &LabeledIssue,
        claim: TakenClaim,
    ) -> Result<Outcome, WorkerError> {
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
                    .on_branch(branch, head)
                    .with_own_cgroup_figures();
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
        let result = (|| -> Result<Outcome, WorkerError> {
            fs::create_dir_all(&attempt_dir).map_err(|e| {
                WorkerError::file(attempt_dir.clone(), "cannot create attempt dir: ", e)
            })?;
            state.write("worktree")?;
            let start_point = self.prepare_start_point(resume.as_deref());
            self.git.worktree_add(&worktree, &branch, &start_point)?;
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
                AgentEnd::Signalled(signal) => Ok(Outcome::Interrupted { signal }),
                AgentEnd::Capped => {
                    state.write("failed")?;
                    // Nothing is committed on the agent's behalf; what it committed is pushed
                    // so the next attempt, on any host, resumes from it.
                    let pushed = match self.publish(&worktree, &branch, &start_point) {
                        Ok(_) => String::new(),
                        Err(e) => texts::push_failed(&e),
                    };
                    let records = end(ledger::Outcome::WallClockCapped, &branch);
                    if self.over_limit(&records) {
                        self.quarantine(n, &claim, &records)?;
                        return Ok(Outcome::Capped);
                    }
                    let cap_s = self.config.timing.attempt_max_s;
                    let body = texts::capped(n, attempt, cap_s, &branch, &pushed);
                    self.post_ending(n, &claim, &body, false);
                    self.hand_labels(n, &claim, labels::READY_FOR_AGENT)?;
                    Ok(Outcome::Capped)
                }
                AgentEnd::NotStarted(StartFailure::Host(why)) => {
                    // The host's fault, not the issue's: the issue goes back untouched (the
                    // interruption path below) and the supervisor parks the slot.
                    Err(WorkerError::Config(why))
                }
                AgentEnd::NotStarted(StartFailure::Issue(why)) => {
                    // Every worker would fail the same way on this issue: never requeue it.
                    finished.set(true);
                    state.write("set-aside")?;
                    end(ledger::Outcome::SetAside, &branch);
                    let edited = self.hand_labels(n, &claim, labels::READY_FOR_HUMAN);
                    let body = texts::set_aside(&why);
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
                    let body = texts::finished(n, attempt, &branch, &commits);
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
                    let body = texts::failed(n, attempt, code);
                    // The release mark first: the next claim must find the claim ended.
                    self.post_ending(n, &claim, &body, false);
                    self.hand_labels(n, &claim, labels::READY_FOR_AGENT)?;
                    Ok(Outcome::AgentFailed)
                }
            }
        })();

        let interrupted = matches!(result, Ok(Outcome::Interrupted { .. }) | Err(_));
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
            // Stopped by the supervisor for making no progress: a failed attempt, not a
            // give-back, or an agent that always hangs would be requeued forever.
            let outcome = match crate::attempt_state::stall_killed(&attempt_dir) {
                true => ledger::Outcome::Stalled,
                false => ledger::Outcome::GivenBack,
            };
            end(outcome, &branch);
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
    fn publish(
        &self,
        worktree: &Path,
        branch: &str,
        start_point: &str,
    ) -> Result<u64, PublishError> {
        let wt = Git::new(worktree);
        let count = wt.run(&["rev-list", "--count", &format!("{start_point}..HEAD")])?;
        let count: u64 = count
            .trim()
            .parse()
            .map_err(|_| PublishError::Count(count.clone()))?;
        if count > 0 {
            wt.push_branch(branch)?;
        }
        Ok(count)
    }
}

/// Why the agent's commits were not published; the issue's comment says it.
#[derive(Debug, thiserror::Error)]
pub(super) enum PublishError {
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error("rev-list said {0:?}")]
    Count(String),
}
