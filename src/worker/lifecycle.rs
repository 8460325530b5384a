//! One issue from its claim to its hand-off: the attempt dir and worktree, the agent's run,
//! and what each way it ends does to the issue (the comment, the labels, the ledger
//! record), with the quarantine at the failure limit (`docs/SPEC.md` §11.4, §11.10).

use std::fs;
use std::path::PathBuf;

use super::agent::{AgentEnd, StartFailure};
use super::attempt::{AttemptFile, next_attempt};
use super::blame::StallBlame;
use super::claiming::TakenClaim;
use super::reach::Refusal;
use super::wording::{self, issue_title, slugify};
use super::{Outcome, Worker, WorkerError};
use crate::agent_profile::{self, End, Usage};
use crate::attempt_state::Stage;
use crate::claim::tracked;
use crate::event_log::Kind;
use crate::git::Git;
use crate::landing::pr_text::ChecksWord;
use crate::ledger;
use crate::rescue::Rescued;
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
        claim: &mut TakenClaim,
        records: &[ledger::Record],
    ) -> Result<(), WorkerError> {
        let body = ledger::quarantine_comment(records, labels::QUARANTINED);
        self.to_person(
            n,
            claim,
            &body,
            &[labels::READY_FOR_HUMAN, labels::QUARANTINED],
            ledger::Outcome::Quarantined,
        )?;
        eprintln!(
            "worker {}: #{n} quarantined after {} failed attempt(s)",
            self.wenv.worker_id,
            ledger::failures(records)
        );
        self.log_event(
            Kind::AttemptQuarantined,
            n,
            ledger::quarantined_text(n, ledger::failures(records)),
        );
        Ok(())
    }

    /// One record of `kind` about issue `n` in the fleet's event log, with this worker's
    /// slot and pid (`docs/SPEC.md` §11.15, §11.19, §11.21): one line appended as
    /// `control.request` is. A log that cannot be written never fails what it records.
    fn log_event(&self, kind: Kind, n: u64, msg: String) {
        let mut ev = crate::event_log::Record::now(kind, msg).issue(n);
        ev.slot = self.wenv.slot.map(|s| s as u64);
        ev.pid = Some(i64::from(std::process::id()));
        if let Err(e) = crate::event_log::append_event(&self.layout.event_log(), &ev) {
            eprintln!("afk-supervisor: warning: {e}");
        }
    }

    /// Where a person opens the pull request of `branch`: GitHub's compare page, when the
    /// fleet's repository is on github.com (`tracker.repo`, else `origin`); else none.
    pub(super) fn review_link(&self, branch: &str) -> Option<String> {
        let (host, repo) = match &self.config.tracker.repo {
            Some(r) => ("github.com".to_string(), r.clone()),
            None => {
                let url = self.git.run(&["remote", "get-url", "origin"]).ok()?;
                crate::tracker::select::repo_from_url(&url)?
            }
        };
        (host == "github.com").then(|| {
            format!(
                "https://github.com/{repo}/compare/{}...{branch}?expand=1",
                self.config.fleet.base
            )
        })
    }

    /// Hands issue `n` to a person for good: the comment `body` (ending with the hand-off
    /// mark), then `add` in place of `running` and `ready-for-agent`, then the ledger's
    /// `marker`, from which a later retry counts afresh.
    fn to_person(
        &self,
        n: u64,
        claim: &mut TakenClaim,
        body: &str,
        add: &[&str],
        marker: ledger::Outcome,
    ) -> Result<(), WorkerError> {
        self.fenced(claim)?;
        claim.mark_to_person();
        self.post_ending(n, claim, body, true);
        let edit = || {
            self.tracker
                .edit_labels(n, add, &[labels::RUNNING, labels::READY_FOR_AGENT])
        };
        match &claim.marks {
            Some(_) => tracked::retry(edit),
            None => edit(),
        }
        .map_err(|e| WorkerError::from(&e))?;
        let record = ledger::Record::now(Some(&self.wenv.worker_id), None, marker);
        if let Err(e) = ledger::append(self.layout, n, &record) {
            eprintln!("worker {}: attempt ledger: {e}", self.wenv.worker_id);
        }
        // On a cluster the fleet's spend of the issue counts afresh too.
        if marker == ledger::Outcome::OverBudget
            && let Some(c) = crate::cluster::active()
            && let Err(e) = crate::budget::fleet_issue::reset(c, n, crate::timeutil::now_epoch())
        {
            eprintln!("worker {}: issue spend: {e}", self.wenv.worker_id);
        }
        Ok(())
    }

    /// On a cluster: this host's spend of issue `n`, its ledger's now, published for the
    /// fleet's weighing of `budget.usd_per_issue` (one line when etcd does not take it).
    fn publish_issue_spend(&self, n: u64) {
        let Some(c) = crate::cluster::active() else {
            return;
        };
        if self.config.budget.usd_per_issue.is_none() {
            return;
        }
        let records = ledger::read(self.layout, n).unwrap_or_default();
        if let Err(e) = crate::budget::fleet_issue::publish(c, self.layout, n, &records) {
            eprintln!("worker {}: issue spend: {e}", self.wenv.worker_id);
        }
    }

    pub(super) fn work_issue(
        &self,
        issue: &LabeledIssue,
        mut claim: TakenClaim,
    ) -> Result<Outcome, WorkerError> {
        let n = issue.number;
        let records = ledger::read(self.layout, n).unwrap_or_else(|e| {
            // Unreadable: no quarantine and no resume on a guess; the attempt runs afresh.
            eprintln!("worker {}: attempt ledger: {e}", self.wenv.worker_id);
            Vec::new()
        });
        if let Some(barred) = self.barred(n, &mut claim, &records) {
            if let Err(e) = claim.local.release() {
                eprintln!(
                    "worker {}: releasing claim of #{n}: {e}",
                    self.wenv.worker_id
                );
            }
            return barred;
        }
        let (a, file) = self.plan_attempt(issue, records);
        let mut held = Held { file, claim };
        self.announce(&a);
        let result = self.attempt_stages(&a, &mut held);
        let keeps_issue = held.file.stage().is_some_and(Stage::keeps_issue);
        let interrupted = matches!(result, Ok(Outcome::Interrupted { .. }) | Err(_));
        if interrupted && !keeps_issue {
            self.give_back(&a, &mut held);
        } else if result.is_err() {
            let _ = held.file.write(Stage::HandoffFailed);
        }
        // Only a finished attempt's worktree goes, and only when clean (git refuses a dirty
        // one): after a failure or an interruption the agent's uncommitted work is kept
        // beside the attempt's state for a person, until orphan cleanup judges the attempt.
        let done = matches!(result, Ok(Outcome::Done | Outcome::SetAside));
        if a.worktree.exists() {
            match done.then(|| self.git.worktree_remove(&a.worktree, false)) {
                Some(Ok(())) => {}
                Some(Err(e)) => eprintln!("worker {}: worktree kept: {e}", self.wenv.worker_id),
                None => eprintln!(
                    "worker {}: worktree kept for inspection at {}",
                    self.wenv.worker_id,
                    a.worktree.display()
                ),
            }
        }
        if let Err(e) = held.claim.local.release() {
            eprintln!(
                "worker {}: releasing claim of #{n}: {e}",
                self.wenv.worker_id
            );
        }
        result
    }

    /// Whether issue `n` may have a new attempt at all: not once deaths recorded by
    /// restores brought it to its failure limit (quarantined then), nor once its spend
    /// reached `budget.usd_per_issue` (handed to a person). `Some` is the attempt's end.
    fn barred(
        &self,
        n: u64,
        claim: &mut TakenClaim,
        records: &[ledger::Record],
    ) -> Option<Result<Outcome, WorkerError>> {
        if self.over_limit(records) {
            return Some(
                self.quarantine(n, claim, records)
                    .map(|()| Outcome::SetAside),
            );
        }
        match self.over_issue_budget(n, claim, records, "") {
            Ok(false) => None,
            handed => Some(handed.map(|_| Outcome::SetAside)),
        }
    }

    /// The attempt's facts, found before anything of it is made: its number, dir, branch,
    /// and what it resumes (an open pull request's branch, or the branch a capped attempt
    /// left, with that attempt's agent session).
    fn plan_attempt<'i>(
        &self,
        issue: &'i LabeledIssue,
        records: Vec<ledger::Record>,
    ) -> (Attempt<'i>, AttemptFile) {
        let n = issue.number;
        let title = issue_title(issue);
        let slug = slugify(&title);
        let number = next_attempt(self.layout, n);
        let dir = self.home.dir.join(format!("{n}-a{number}"));
        let worktree = dir.join("worktree");
        let mut branch = format!("afk/{}/{n}-{slug}", self.wenv.worker_id);
        // A kept worktree of an earlier attempt by the same worker id still holds the plain
        // name; the attempt suffix keeps the `docs/SPEC.md` §8 shape `afk/<worker>/<N>-<slug>`.
        if matches!(
            self.git.rev_parse(&format!("refs/heads/{branch}")),
            Ok(Some(_))
        ) {
            branch = format!("{branch}-a{number}");
        }
        // The issue's landing record: an open pull request makes this attempt a fix round
        // on its branch, and a fix request left guidance for it (`docs/SPEC.md` §11.22).
        let landed = crate::landing::read(self.layout, n).unwrap_or_else(|e| {
            eprintln!("worker {}: landing record: {e}", self.wenv.worker_id);
            None
        });
        let guidance = landed.as_ref().and_then(|r| r.guidance.clone());
        let pr = landed.filter(|r| r.state == crate::landing::PrState::Open);
        let resume = match &pr {
            Some(p) => Some(p.branch.clone()),
            None => ledger::resume_branch(&records).map(str::to_string),
        };
        // The session of the attempt whose branch (or pull request) this one resumes
        // (Claude Code resumes it).
        let session = resume.as_deref().and_then(|b| {
            let pr_url = pr.as_ref().and_then(|p| p.url.as_deref());
            records
                .iter()
                .rev()
                .filter(|r| {
                    r.branch.as_deref() == Some(b)
                        || (pr_url.is_some() && r.pr.as_deref() == pr_url)
                })
                .find_map(|r| r.usage.session_id.clone())
        });
        let file = AttemptFile::new(&dir, &self.wenv.worker_id, n, &title, &slug, &worktree);
        let started = file.state.started_at.clone();
        let a = Attempt {
            issue,
            n,
            number,
            title,
            dir,
            worktree,
            branch,
            records,
            pr,
            guidance,
            resume,
            session,
            started,
        };
        (a, file)
    }

    /// The claim said in the slot log and the event log (`attempt.claimed`).
    fn announce(&self, a: &Attempt<'_>) {
        let (n, number, branch) = (a.n, a.number, &a.branch);
        say!(
            "worker {}: claimed #{n} ({}); attempt {n}-a{number}",
            self.wenv.worker_id,
            text::escape(&a.title)
        );
        let fix =
            a.pr.as_ref()
                .map_or(String::new(), |p| format!("; a fix round of {}", p.name()));
        self.landing_event(
            Kind::AttemptClaimed,
            n,
            format!(
                "#{n} claimed by worker {}: attempt {n}-a{number} on branch {branch}{fix}",
                self.wenv.worker_id
            ),
        );
    }

    /// The attempt's stages in order: the worktree, the agent's rounds with the checks,
    /// the hand-on. Each either leads to the next or ends the attempt with its outcome.
    fn attempt_stages(&self, a: &Attempt<'_>, held: &mut Held) -> Result<Outcome, WorkerError> {
        let ws = self.worktree_stage(a, held)?;
        match self.agent_stage(a, held, &ws)? {
            Step::End(outcome) => Ok(outcome),
            Step::Next(worked) => self.publish_stage(a, held, &ws, worked),
        }
    }

    /// The attempt dir, the worktree on the attempt's branch, and the tamper check's
    /// watch and first look.
    fn worktree_stage(&self, a: &Attempt<'_>, held: &mut Held) -> Result<Workspace, WorkerError> {
        fs::create_dir_all(&a.dir)
            .map_err(|e| WorkerError::file(a.dir.clone(), "cannot create attempt dir: ", e))?;
        held.file.write(Stage::Worktree)?;
        let start_point = self.prepare_start_point(a.resume.as_deref());
        self.git
            .worktree_add(&a.worktree, &a.branch, &start_point)?;
        // The commit the attempt starts from: its commits are counted from it and its
        // branch must still build on it, whatever the agent does to other refs.
        let base = self.git.rev_parse(&format!("refs/heads/{}", a.branch))?;
        let watch = self.confinement.watch(
            self.config,
            self.layout,
            &a.worktree,
            &a.branch,
            &self.wenv.worker_id,
        )?;
        let before = watch.take(&self.git)?;
        Ok(Workspace {
            start_point,
            base,
            watch,
            before,
        })
    }

    /// The agent's rounds: one, then one more after each failing run of the checks
    /// (`docs/SPEC.md` §11.22), on the same branch, told what failed.
    fn agent_stage(
        &self,
        a: &Attempt<'_>,
        held: &mut Held,
        ws: &Workspace,
    ) -> Result<Step<Worked>, WorkerError> {
        held.file.write(Stage::Agent)?;
        let task = a.task(ws);
        let mut round = 1u64;
        let mut told = a.guidance.clone();
        let mut session = a.session.clone();
        loop {
            let resume = super::agent::Resume {
                branch: a.resume.as_deref(),
                session: session.as_deref(),
                guidance: told.as_deref(),
            };
            let status = self.run_agent(a.issue, &a.title, task, resume)?;
            // Before anything of the attempt is pushed, rescued or handed on.
            let refusal = match status {
                AgentEnd::NotStarted(_) => None,
                _ => self.confinement.judge(
                    &self.git,
                    &ws.watch,
                    &ws.before,
                    ws.base.as_deref(),
                    task,
                    &self.config.agent.sensitive_paths,
                ),
            };
            if let Some(refusal) = refusal {
                return self.refused(a, held, &status, &refusal).map(Step::End);
            }
            super::reach::cleared(self.layout, &a.dir, &self.wenv.worker_id);
            let (fin, usage) = match status {
                AgentEnd::Signalled(signal) => {
                    return Ok(Step::End(Outcome::Interrupted { signal }));
                }
                AgentEnd::Capped(stdout) => return self.capped(a, held, &stdout).map(Step::End),
                // The host's fault, not the issue's: the issue goes back untouched (the
                // interruption path) and the supervisor parks the slot.
                AgentEnd::NotStarted(StartFailure::Host(why)) => {
                    return Err(WorkerError::Config(why));
                }
                AgentEnd::NotStarted(StartFailure::Issue(why)) => {
                    return self.set_aside(a, held, &why).map(Step::End);
                }
                AgentEnd::Exited(fin) => match self.exited(a, held, &fin)? {
                    Step::Next(usage) => (fin, usage),
                    Step::End(outcome) => return Ok(Step::End(outcome)),
                },
            };
            held.file.write(Stage::Checks)?;
            let (why, tail) = match self.checks_round(a, task, round, &usage)? {
                Step::End(outcome) => return Ok(Step::End(outcome)),
                Step::Next(Checked::Publish(checks)) => {
                    return Ok(Step::Next(Worked { fin, usage, checks }));
                }
                Step::Next(Checked::Again { why, tail }) => (why, tail),
            };
            // This round's cost counts now; the next round is the attempt's own.
            let landed = EndNote {
                pr: a.pr.as_ref().and_then(|p| p.url.clone()),
                checks: Some(format!("failed: {why}")),
                ..EndNote::default()
            };
            self.record_end(a, ledger::Outcome::ChecksFailed, &usage, landed);
            if usage.session_id.is_some() {
                session.clone_from(&usage.session_id);
            }
            let command = self.config.checks.command.as_deref().unwrap_or_default();
            told = Some(super::checks::guidance(command, &why, &tail));
            round += 1;
        }
    }

    /// The sandbox refused the run's work (`docs/SPEC.md` §11.22): changes outside the
    /// worktree put back, nothing pushed, the issue handed to a person.
    fn refused(
        &self,
        a: &Attempt<'_>,
        held: &mut Held,
        status: &AgentEnd,
        refusal: &Refusal,
    ) -> Result<Outcome, WorkerError> {
        let (n, number) = (a.n, a.number);
        // What the refused run cost still counts against the budgets.
        let usage = match status {
            AgentEnd::Exited(fin) => {
                self.priced(agent_profile::classify(self.config.agent.profile, &fin.seen()).1)
            }
            _ => Usage::default(),
        };
        held.file.write(Stage::Refused)?;
        let (outcome, tampered, found) = match refusal {
            Refusal::Tampered(t) => (
                ledger::Outcome::Tampered,
                true,
                t.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ),
            Refusal::Held(paths) => (ledger::Outcome::Held, false, paths.clone()),
        };
        if let Refusal::Tampered(t) = refusal {
            for change in t {
                if let Err(e) = change.undo(&self.git) {
                    eprintln!(
                        "worker {}: could not put back {change}: {e}",
                        self.wenv.worker_id
                    );
                }
            }
        }
        let what = if tampered { "tampered" } else { "held" };
        let msg = format!(
            "#{n} attempt {n}-a{number} refused ({what}): {}; nothing pushed, worktree kept at {}",
            text::escape(&found.join("; ")),
            a.worktree.display()
        );
        eprintln!("worker {}: {msg}", self.wenv.worker_id);
        self.log_event(Kind::AttemptRefused, n, msg);
        self.record_end(a, outcome, &usage, EndNote::default());
        let body = wording::refused(n, number, tampered, &found, &a.branch, &a.worktree);
        let edited = self.hand_labels(n, &mut held.claim, labels::READY_FOR_HUMAN);
        self.post_ending(n, &held.claim, &body, true);
        edited?;
        Ok(Outcome::Refused)
    }

    /// The agent hit the wall-clock cap: its work, committed or not, is rescued (pushed
    /// with `gh`) so the next attempt, on any host, resumes from it.
    fn capped(
        &self,
        a: &Attempt<'_>,
        held: &mut Held,
        stdout: &[u8],
    ) -> Result<Outcome, WorkerError> {
        let n = a.n;
        let seen = agent_profile::Seen {
            exit_code: crate::exit_code::SIGTERM,
            stdout,
            stderr: &[],
            result_file: None,
            now_epoch: crate::timeutil::now_epoch(),
        };
        let usage = self.priced(agent_profile::classify(self.config.agent.profile, &seen).1);
        held.file.write(Stage::Failed)?;
        // As before rescues existed, the cap pushes to any `origin`.
        let (rescued, pushed) = self.rescue(a, "wall-clock cap", true);
        let note = EndNote {
            rescued,
            ..EndNote::default()
        };
        let records = self.record_end(a, ledger::Outcome::WallClockCapped, &usage, note);
        // The one comment over the budget still says where the work is.
        let kept = wording::over_budget_work(&a.branch, &pushed);
        let cap_s = self.config.timing.attempt_max_s;
        let body = wording::capped(n, a.number, cap_s, &a.branch, &pushed);
        self.after_failure(a, held, &records, &kept, &body)?;
        Ok(Outcome::Capped)
    }

    /// Where a failed attempt's issue goes: quarantined at the failure limit, to a person
    /// once its spend reached the budget (`tail` ends that comment), else back to the queue
    /// with `body`. The budget is checked here, not only at the next claim, so a host whose
    /// ledger lacks this spend cannot take the issue again.
    fn after_failure(
        &self,
        a: &Attempt<'_>,
        held: &mut Held,
        records: &[ledger::Record],
        tail: &str,
        body: &str,
    ) -> Result<(), WorkerError> {
        let n = a.n;
        if self.over_limit(records) {
            return self.quarantine(n, &mut held.claim, records);
        }
        if self.over_issue_budget(n, &mut held.claim, records, tail)? {
            return Ok(());
        }
        // The release mark first: the next claim must find the claim ended.
        self.post_ending(n, &held.claim, body, false);
        self.hand_labels(n, &mut held.claim, labels::READY_FOR_AGENT)
    }

    /// The agent could not start on this issue's data: every worker would fail the same
    /// way on it, so it is never requeued but handed to a person.
    fn set_aside(
        &self,
        a: &Attempt<'_>,
        held: &mut Held,
        why: &str,
    ) -> Result<Outcome, WorkerError> {
        let n = a.n;
        held.file.write(Stage::SetAside)?;
        self.record_end(
            a,
            ledger::Outcome::SetAside,
            &Usage::default(),
            EndNote::default(),
        );
        let edited = self.hand_labels(n, &mut held.claim, labels::READY_FOR_HUMAN);
        let body = wording::set_aside(why);
        // Posted even when the label change failed: its hand-off mark tells the claims
        // belt to finish the hand-off, never to requeue.
        self.post_ending(n, &held.claim, &body, true);
        let text = ledger::handed_off_text(n, &format!("set aside: {}", text::escape(why)), None);
        self.log_event(Kind::AttemptHandedOff, n, text);
        edited?;
        eprintln!(
            "worker {}: #{n} set aside: {}",
            self.wenv.worker_id,
            text::escape(why)
        );
        Ok(Outcome::SetAside)
    }

    /// The agent exited: its work (and what it cost) goes on to the checks when it says
    /// done; a failure or an account-wide limit ends the attempt.
    fn exited(
        &self,
        a: &Attempt<'_>,
        held: &mut Held,
        fin: &super::agent::Finished,
    ) -> Result<Step<Usage>, WorkerError> {
        let (verdict, usage) = agent_profile::classify(self.config.agent.profile, &fin.seen());
        let usage = self.priced(usage);
        if !matches!(verdict, End::AccountWide { .. }) {
            // The account ran this issue: an unknown reset's backoff starts over.
            let _ = crate::lanes::pause_file::agent_clear(&self.layout.state());
        }
        match verdict {
            End::Done => Ok(Step::Next(usage)),
            End::Failed { code } => self.agent_failed(a, held, code, &usage).map(Step::End),
            End::AccountWide {
                why,
                reset_epoch,
                detail,
            } => {
                held.file.write(Stage::AccountLimited)?;
                let kind = why.to_string();
                let paused = crate::lanes::pause_file::agent_record(
                    &self.layout.state(),
                    &kind,
                    &detail,
                    reset_epoch,
                );
                self.record_end(
                    a,
                    ledger::Outcome::AccountLimited,
                    &usage,
                    EndNote::default(),
                );
                // Back to the queue with no failure comment: only the release mark that
                // ends the claim on a shared tracker.
                if let Some(m) = &held.claim.marks {
                    let _ = tracked::post(self.tracker, a.n, &m.release_mark());
                }
                self.hand_labels(a.n, &mut held.claim, labels::READY_FOR_AGENT)?;
                let (n, who) = (a.n, &self.wenv.worker_id);
                match paused {
                    Ok(p) => eprintln!(
                        "worker {who}: #{n} given back: agent paused: {}",
                        text::escape(&p.describe())
                    ),
                    Err(e) => eprintln!(
                        "worker {who}: #{n} given back ({kind}); the agent pause could not be recorded: {e}"
                    ),
                }
                Ok(Step::End(Outcome::AccountLimited))
            }
            End::Interrupted => Ok(Step::End(Outcome::Interrupted { signal: 15 })),
        }
    }

    /// The agent failed (exit `code`): recorded (excused when the failure is not the
    /// issue's), then quarantine at the limit, a person over the budget, or the queue.
    fn agent_failed(
        &self,
        a: &Attempt<'_>,
        held: &mut Held,
        code: i32,
        usage: &Usage,
    ) -> Result<Outcome, WorkerError> {
        let n = a.n;
        held.file.write(Stage::Failed)?;
        let note = EndNote {
            excused: self.excuse(n, a.started.as_deref()),
            ..EndNote::default()
        };
        let records = self.record_end(a, ledger::Outcome::AgentFailed(code), usage, note);
        let body = wording::failed(n, a.number, code);
        self.after_failure(a, held, &records, "", &body)?;
        Ok(Outcome::AgentFailed)
    }

    /// One run of the checks after round `round` of the agent: passed (or none set) leads
    /// to the hand-on; failed leads to another round, unless this was the last one the
    /// checks or the issue's budget allow (then the hand-on says they fail).
    fn checks_round(
        &self,
        a: &Attempt<'_>,
        task: super::reach::Task<'_>,
        round: u64,
        usage: &Usage,
    ) -> Result<Step<Checked>, WorkerError> {
        let (n, number) = (a.n, a.number);
        let Some(run) = self.run_checks(task, n, round)? else {
            return Ok(Step::Next(Checked::Publish(ChecksWord::None)));
        };
        let (why, tail, again) = match run {
            super::checks::ChecksRun::Passed { secs } => {
                self.landing_event(
                    Kind::PrChecksPassed,
                    n,
                    format!(
                        "#{n} attempt {n}-a{number} round {round}: checks passed in {secs:.1}s"
                    ),
                );
                return Ok(Step::Next(Checked::Publish(ChecksWord::Passed { round })));
            }
            super::checks::ChecksRun::Interrupted(signal) => {
                return Ok(Step::End(Outcome::Interrupted { signal }));
            }
            super::checks::ChecksRun::Failed { why, tail, again } => (why, tail, again),
        };
        self.landing_event(
            Kind::PrChecksFailed,
            n,
            format!("#{n} attempt {n}-a{number} round {round}: checks failed: {why}"),
        );
        let last = round >= self.config.checks.max_rounds || !again;
        if last || self.issue_budget_spent(n, &a.records, usage) {
            let failing = ChecksWord::Failing {
                rounds: round,
                why,
                tail,
            };
            return Ok(Step::Next(Checked::Publish(failing)));
        }
        Ok(Step::Next(Checked::Again { why, tail }))
    }

    /// The hand-on of the agent's work: pushed, the pull request or the person, the
    /// labels, the comment, the ledger's `done`.
    fn publish_stage(
        &self,
        a: &Attempt<'_>,
        held: &mut Held,
        ws: &Workspace,
        worked: Worked,
    ) -> Result<Outcome, WorkerError> {
        let n = a.n;
        let Worked { fin, usage, checks } = worked;
        // Nothing of the attempt is pushed or handed on by a host whose claim may be
        // another's by now: the work is rescued as for an interruption.
        self.fenced(&held.claim)?;
        held.file.write(Stage::Publish)?;
        let message = agent_profile::final_message(self.config.agent.profile, &fin.seen());
        let handed = self.hand_off(super::landing::HandOff {
            n,
            attempt: a.number,
            title: &a.title,
            branch: &a.branch,
            base: ws.base.as_deref().unwrap_or(&ws.start_point),
            pr: a.pr.as_ref(),
            checks: &checks,
            message: message.as_deref(),
            figures: self.figures(n, a.number, &a.records, a.started.as_deref(), &usage),
        });
        let edited = self.hand_labels_all(n, &mut held.claim, &handed.labels);
        if self.post_ending(n, &held.claim, &handed.comment, true) {
            held.file.set_envelope_posted();
        }
        let (kind, line) = handed.told.clone();
        self.log_event(kind, n, line);
        let note = EndNote {
            pr: handed.pr,
            checks: self.config.checks.command.is_some().then(|| checks.words()),
            ..EndNote::default()
        };
        self.record_end(a, ledger::Outcome::Done, &usage, note);
        if a.guidance.is_some()
            && let Err(e) = crate::landing::take_guidance(self.layout, n)
        {
            eprintln!("worker {}: landing record: {e}", self.wenv.worker_id);
        }
        edited?;
        held.file.write(Stage::Done)?;
        Ok(Outcome::Done)
    }

    /// An attempt stopped before its work was handed on: the issue goes back to the
    /// queue, never left eternally `running`, its claim mark ended first so the next
    /// claim starts clean; the work is rescued and the ledger says how it ended (a stall
    /// kill is a failure, whose blame decides whether it counts).
    fn give_back(&self, a: &Attempt<'_>, held: &mut Held) {
        let n = a.n;
        if let Some(m) = &held.claim.marks {
            let _ = tracked::post(self.tracker, n, &m.release_mark());
        }
        // A claim lost with the host's lease is given back by the host that finds it
        // vanished, not by this one (`docs/SPEC.md` §11.23).
        match self.fenced(&held.claim) {
            Ok(()) => {
                let _ = self
                    .tracker
                    .edit_labels(n, &[labels::READY_FOR_AGENT], &[labels::RUNNING]);
            }
            Err(e) => eprintln!("worker {}: #{n}: not given back: {e}", self.wenv.worker_id),
        }
        let _ = held.file.write(Stage::Interrupted);
        let (outcome, excused) = self.interrupted_outcome(a);
        let why = match outcome {
            ledger::Outcome::Stalled => "stall kill",
            ledger::Outcome::AccountLimited => "provider stall",
            _ => "interrupted",
        };
        let (rescued, _) = self.rescue(a, why, false);
        let note = EndNote {
            excused,
            rescued,
            ..EndNote::default()
        };
        self.record_end(a, outcome, &Usage::default(), note);
    }

    /// How an interrupted attempt is recorded: stopped by the supervisor for making no
    /// progress, a failed attempt (not a give-back, or an agent that always hangs would be
    /// requeued forever) unless its blame lies with the provider or the fleet; else given
    /// back. With the excuse, when there is one.
    fn interrupted_outcome(&self, a: &Attempt<'_>) -> (ledger::Outcome, Option<String>) {
        let n = a.n;
        let mark = crate::attempt_state::StallMark::read(&a.dir);
        let ends = super::output::take_last_ends();
        if mark.is_none() {
            return (ledger::Outcome::GivenBack, None);
        }
        match self.stall_blame(n, a.started.as_deref(), ends.as_ref(), mark) {
            StallBlame::Issue => (ledger::Outcome::Stalled, None),
            StallBlame::Provider(detail) => {
                // What the agent last said names the provider (waiting for the network,
                // its retries given up): the account's, paused, nobody's.
                eprintln!(
                    "worker {}: #{n} stalled on the provider: {}",
                    self.wenv.worker_id,
                    text::escape(&detail)
                );
                (ledger::Outcome::AccountLimited, None)
            }
            StallBlame::FleetWide(why) => {
                eprintln!(
                    "worker {}: #{n} stalled with the fleet: {}",
                    self.wenv.worker_id,
                    text::escape(&why)
                );
                (ledger::Outcome::Stalled, Some(why))
            }
        }
    }

    /// The attempt's ledger record of `outcome` (its branch's head, what it cost, what
    /// `note` adds), appended; the issue's ledger with it, as the attempt saw it.
    fn record_end(
        &self,
        a: &Attempt<'_>,
        outcome: ledger::Outcome,
        usage: &Usage,
        note: EndNote,
    ) -> Vec<ledger::Record> {
        let branch = &a.branch;
        let head = Git::new(&a.worktree)
            .rev_parse("HEAD")
            .ok()
            .flatten()
            .or_else(|| {
                self.git
                    .rev_parse(&format!("refs/heads/{branch}"))
                    .ok()
                    .flatten()
            });
        let mut record =
            ledger::Record::now(Some(&self.wenv.worker_id), a.started.as_deref(), outcome)
                .on_branch(branch, head)
                .with_usage(usage)
                .with_own_cgroup_figures();
        record.excused = note.excused;
        if let Some(r) = &note.rescued {
            record = record.rescued_to(&r.reference, &r.sha);
        }
        (record.pr, record.checks) = (note.pr, note.checks);
        let mut records = a.records.clone();
        if let Err(e) = ledger::append(self.layout, a.n, &record) {
            eprintln!("worker {}: attempt ledger: {e}", self.wenv.worker_id);
        }
        records.push(record);
        self.publish_issue_spend(a.n);
        records
    }

    /// Every end that is not a clean hand-off keeps the work on a ref (and on `origin`
    /// with `gh`, or with `push`) for the next attempt; what it says goes to the slot log,
    /// the event log (`attempt.rescued`) and, returned, the comment.
    fn rescue(&self, a: &Attempt<'_>, why: &str, push: bool) -> (Option<Rescued>, String) {
        let mut keeper = self.keeper();
        keeper.push |= push;
        match keeper.rescue(&a.dir, why) {
            Ok(Some(r)) => {
                eprintln!("worker {}: {}", self.wenv.worker_id, r.message());
                r.log(
                    self.layout,
                    self.wenv.slot,
                    i32::try_from(std::process::id()).ok(),
                );
                let note = format!("; {}", r.comment_line());
                (Some(r), note)
            }
            Ok(None) => (None, String::new()),
            Err(e) => {
                eprintln!("worker {}: {e}", self.wenv.worker_id);
                (None, wording::push_failed(&e))
            }
        }
    }

    /// What a pull request's body says of this attempt (`docs/SPEC.md` §11.22): which it
    /// is, how many attempts the issue has had, how long it ran and what it cost.
    fn figures(
        &self,
        n: u64,
        attempt: u64,
        records: &[ledger::Record],
        started: Option<&str>,
        usage: &Usage,
    ) -> crate::landing::pr_text::Figures {
        let now = crate::timeutil::now_epoch();
        let began = started
            .and_then(crate::timeutil::parse_rfc3339)
            .map_or(now, crate::timeutil::epoch_secs);
        let attempts = ledger::current(records)
            .iter()
            .filter(|r| r.outcome.is_attempt())
            .count() as u64;
        crate::landing::pr_text::Figures {
            attempt: format!("{n}-a{attempt}"),
            attempts: attempts + 1,
            duration_s: now.saturating_sub(began),
            cost_usd: usage.cost_usd,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
        }
    }

    /// Whether issue `n`'s spend, its ledger's `records` and this attempt's round that
    /// cost `usage` together, reached `budget.usd_per_issue`: no more check rounds then.
    fn issue_budget_spent(&self, n: u64, records: &[ledger::Record], usage: &Usage) -> bool {
        let Some(limit) = self.config.budget.usd_per_issue else {
            return false;
        };
        // The rounds already recorded are in the ledger file, not in `records`.
        let now = ledger::read(self.layout, n).unwrap_or_else(|_| records.to_vec());
        let spent = crate::budget::fleet_issue::spent(self.layout, n, &now).usd
            + usage.cost_usd.unwrap_or(0.0);
        crate::config::Usd::from_f64(spent) >= limit
    }

    /// `usage` with its dollars: a Codex run reports tokens only, so they are priced at
    /// `budget.prices` and the dollar budgets hold for it as for Claude Code.
    fn priced(&self, usage: Usage) -> Usage {
        if usage.cost_usd.is_some()
            || self.config.agent.profile != agent_profile::ProfileKind::Codex
        {
            return usage;
        }
        Usage {
            cost_usd: crate::budget::priced(&usage, &self.config.budget.prices),
            ..usage
        }
    }

    /// Hands issue `n` to a person when its spend since the last hand-off reached
    /// `budget.usd_per_issue` (`docs/SPEC.md` §11.13): one comment giving the spend, then
    /// `ready-for-human` in place of `running` and `ready-for-agent`, then the ledger's
    /// `over-budget` marker; `tail` ends the comment (where a capped attempt's work is).
    /// Returns whether it did.
    fn over_issue_budget(
        &self,
        n: u64,
        claim: &mut TakenClaim,
        records: &[ledger::Record],
        tail: &str,
    ) -> Result<bool, WorkerError> {
        let Some(limit) = self.config.budget.usd_per_issue else {
            return Ok(false);
        };
        let spent = crate::budget::fleet_issue::spent(self.layout, n, records);
        if crate::config::Usd::from_f64(spent.usd) < limit {
            return Ok(false);
        }
        let body = wording::over_budget(spent.usd, spent.runs, &limit.to_string()) + tail;
        self.to_person(
            n,
            claim,
            &body,
            &[labels::READY_FOR_HUMAN],
            ledger::Outcome::OverBudget,
        )?;
        eprintln!(
            "worker {}: #{n} handed to a person: spend ${:.2} reached budget.usd_per_issue {limit}",
            self.wenv.worker_id, spent.usd
        );
        let why = format!(
            "its attempts cost ${:.2} over {} run(s), reaching budget.usd_per_issue {limit}",
            spent.usd, spent.runs
        );
        self.log_event(
            Kind::AttemptHandedOff,
            n,
            ledger::handed_off_text(n, &why, None),
        );
        Ok(true)
    }

    /// The branch a capped attempt left (`origin/<branch>` freshly fetched, else the local
    /// branch) when resuming; else `origin/<base>` freshly fetched when possible, else
    /// whatever the checkout has.
    fn prepare_start_point(&self, resume: Option<&str>) -> String {
        // A rescue kept on this checkout (`refs/afk/rescue/<N>/a<K>`): a full ref, never
        // on `origin`.
        if let Some(r) = resume.filter(|r| r.starts_with("refs/")) {
            if matches!(self.git.rev_parse(r), Ok(Some(_))) {
                return r.to_string();
            }
            eprintln!(
                "worker {}: rescue {r} to resume is gone; starting from the base",
                self.wenv.worker_id
            );
        } else if let Some(b) = resume {
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

    /// The rescuer of this worker's attempts: pushing to `origin` when the tracker is
    /// shared across checkouts.
    fn keeper(&self) -> crate::rescue::Keeper {
        crate::rescue::Keeper::new(
            self.layout.repo(),
            self.config.rescue.max_file_bytes,
            self.tracker.shared_across_checkouts(),
        )
    }
}

/// One attempt of an issue: the facts every stage of it reads, found before it starts.
struct Attempt<'i> {
    issue: &'i LabeledIssue,
    n: u64,
    /// Its number among the issue's attempts (`<N>-a<number>`).
    number: u64,
    title: String,
    dir: PathBuf,
    worktree: PathBuf,
    branch: String,
    /// The issue's ledger as the attempt began.
    records: Vec<ledger::Record>,
    /// The issue's open pull request: this attempt is a fix round on its branch.
    pr: Option<crate::landing::PrRecord>,
    /// What a fix request asked of this attempt.
    guidance: Option<String>,
    /// The branch (or rescue ref) this attempt resumes, and that attempt's agent session.
    resume: Option<String>,
    session: Option<String>,
    /// When it started (RFC 3339), as its state file says.
    started: Option<String>,
}

impl Attempt<'_> {
    /// What the agent and the checks work in.
    fn task<'s>(&'s self, ws: &'s Workspace) -> super::reach::Task<'s> {
        super::reach::Task {
            attempt_dir: &self.dir,
            worktree: &self.worktree,
            worktree_gitdir: &ws.watch.worktree_gitdir,
            branch: &self.branch,
        }
    }
}

/// What an attempt changes as it goes: its state file, whose stage says how far it got
/// (and so whether a failure may still give the issue back), and its claim, which knows
/// whether the issue went to a person.
struct Held {
    file: AttemptFile,
    claim: TakenClaim,
}

/// What the worktree stage made for the agent's.
struct Workspace {
    /// Where the attempt's branch was made from.
    start_point: String,
    /// The commit the attempt starts from.
    base: Option<String>,
    watch: crate::sandbox::tamper::Watch,
    before: crate::sandbox::tamper::Snapshot,
}

/// What a stage leads to: the next stage, with what it made for it, or the attempt's end.
enum Step<T> {
    Next(T),
    End(Outcome),
}

/// What the agent's stage hands on: its last run, what the rounds cost, what the checks
/// say.
struct Worked {
    fin: super::agent::Finished,
    usage: Usage,
    checks: ChecksWord,
}

/// What a run of the checks leads to.
enum Checked {
    /// The hand-on, saying this of the checks.
    Publish(ChecksWord),
    /// Another round of the agent, told why and shown the end of the output.
    Again { why: String, tail: String },
}

/// What an attempt's ledger record adds to its outcome, branch and cost.
#[derive(Default)]
struct EndNote {
    excused: Option<String>,
    rescued: Option<Rescued>,
    pr: Option<String>,
    checks: Option<String>,
}

/// Why the agent's commits were not published; the issue's comment says it.
#[derive(Debug, thiserror::Error)]
pub(super) enum PublishError {
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error("rev-list said {0:?}")]
    Count(String),
}
