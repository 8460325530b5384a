//! One issue from its claim to its hand-off: the attempt dir and worktree, the agent's run,
//! and what each way it ends does to the issue (the comment, the labels, the ledger
//! record), with the quarantine at the failure limit (`docs/SPEC.md` §11.4, §11.10).

use std::fs;

use super::agent::{AgentEnd, StartFailure};
use super::attempt::{AttemptFile, next_attempt};
use super::claiming::TakenClaim;
use super::reach::Refusal;
use super::wording::{self, issue_title, slugify};
use super::{Outcome, Worker, WorkerError};
use crate::agent_profile::{self, End, Usage};
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
        claim: &TakenClaim,
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
        claim: &TakenClaim,
        body: &str,
        add: &[&str],
        marker: ledger::Outcome,
    ) -> Result<(), WorkerError> {
        self.fenced(claim)?;
        if let Some(f) = &claim.fence {
            f.to_human.set(true);
        }
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
        match self.over_issue_budget(n, &claim, &records, "") {
            Ok(false) => {}
            handed => {
                if let Err(e) = claim.local.release() {
                    eprintln!(
                        "worker {}: releasing claim of #{n}: {e}",
                        self.wenv.worker_id
                    );
                }
                handed?;
                return Ok(Outcome::SetAside);
            }
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
        let mut state = AttemptFile::new(
            &attempt_dir,
            &self.wenv.worker_id,
            n,
            &title,
            &slug,
            &worktree,
        );
        say!(
            "worker {}: claimed #{n} ({}); attempt {n}-a{attempt}",
            self.wenv.worker_id,
            text::escape(&title)
        );
        let fix = pr
            .as_ref()
            .map_or(String::new(), |p| format!("; a fix round of {}", p.name()));
        self.landing_event(
            Kind::AttemptClaimed,
            n,
            format!(
                "#{n} claimed by worker {}: attempt {n}-a{attempt} on branch {branch}{fix}",
                self.wenv.worker_id
            ),
        );
        let started = state.state.started_at.clone();
        let end_record = |outcome: ledger::Outcome,
                          branch: &str,
                          usage: &Usage,
                          excused: Option<String>,
                          rescued: Option<&Rescued>,
                          landed: (Option<String>, Option<String>)| {
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
            let mut record =
                ledger::Record::now(Some(&self.wenv.worker_id), started.as_deref(), outcome)
                    .on_branch(branch, head)
                    .with_usage(usage)
                    .with_own_cgroup_figures();
            record.excused = excused;
            if let Some(r) = rescued {
                record = record.rescued_to(&r.reference, &r.sha);
            }
            (record.pr, record.checks) = landed;
            let mut records = records.clone();
            if let Err(e) = ledger::append(self.layout, n, &record) {
                eprintln!("worker {}: attempt ledger: {e}", self.wenv.worker_id);
            }
            records.push(record);
            records
        };
        let end_rescued = |outcome: ledger::Outcome,
                           branch: &str,
                           usage: &Usage,
                           excused: Option<String>,
                           rescued: Option<&Rescued>| {
            end_record(outcome, branch, usage, excused, rescued, (None, None))
        };
        let end =
            |outcome: ledger::Outcome, branch: &str, usage: &Usage, excused: Option<String>| {
                end_rescued(outcome, branch, usage, excused, None)
            };
        // Every end that is not a clean hand-off keeps the work on a ref (and on `origin`
        // with `gh`) for the next attempt; what it says goes to the slot log, the event log
        // (`attempt.rescued`) and the comment.
        let rescue = |why: &str, push: bool| -> (Option<Rescued>, String) {
            let mut keeper = self.keeper();
            keeper.push |= push;
            match keeper.rescue(&attempt_dir, why) {
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
            // The commit the attempt starts from: its commits are counted from it and its
            // branch must still build on it, whatever the agent does to other refs.
            let base = self.git.rev_parse(&format!("refs/heads/{branch}"))?;
            let watch = self.confinement.watch(
                self.config,
                self.layout,
                &worktree,
                &branch,
                &self.wenv.worker_id,
            )?;
            let before = watch.take(&self.git)?;
            state.write("agent")?;
            let task = super::reach::Task {
                attempt_dir: &attempt_dir,
                worktree: &worktree,
                worktree_gitdir: &watch.worktree_gitdir,
                branch: &branch,
            };
            // The agent's rounds: one, then one more after each failing run of the checks
            // (`docs/SPEC.md` §11.22), on the same branch, told what failed.
            let mut round = 1u64;
            let mut told = guidance.clone();
            let mut session_now = session.clone();
            let (fin, usage, checks) = loop {
                let status = self.run_agent(
                    issue,
                    &title,
                    task,
                    super::agent::Resume {
                        branch: resume.as_deref(),
                        session: session_now.as_deref(),
                        guidance: told.as_deref(),
                    },
                )?;
                // Before anything of the attempt is pushed, rescued or handed on.
                let refusal = match status {
                    AgentEnd::NotStarted(_) => None,
                    _ => self.confinement.judge(
                        &self.git,
                        &watch,
                        &before,
                        base.as_deref(),
                        task,
                        &self.config.agent.sensitive_paths,
                    ),
                };
                if let Some(refusal) = refusal {
                    finished.set(true);
                    // What the refused run cost still counts against the budgets.
                    let usage = match &status {
                        AgentEnd::Exited(fin) => self.priced(
                            agent_profile::classify(self.config.agent.profile, &fin.seen()).1,
                        ),
                        _ => Usage::default(),
                    };
                    state.write("refused")?;
                    let (outcome, tampered, found) = match &refusal {
                        Refusal::Tampered(t) => (
                            ledger::Outcome::Tampered,
                            true,
                            t.iter().map(ToString::to_string).collect::<Vec<_>>(),
                        ),
                        Refusal::Held(paths) => (ledger::Outcome::Held, false, paths.clone()),
                    };
                    if let Refusal::Tampered(t) = &refusal {
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
                        "#{n} attempt {n}-a{attempt} refused ({what}): {}; nothing pushed, worktree kept at {}",
                        text::escape(&found.join("; ")),
                        worktree.display()
                    );
                    eprintln!("worker {}: {msg}", self.wenv.worker_id);
                    self.log_event(Kind::AttemptRefused, n, msg);
                    end(outcome, &branch, &usage, None);
                    let body = wording::refused(n, attempt, tampered, &found, &branch, &worktree);
                    let edited = self.hand_labels(n, &claim, labels::READY_FOR_HUMAN);
                    self.post_ending(n, &claim, &body, true);
                    edited?;
                    return Ok(Outcome::Refused);
                }
                super::reach::cleared(self.layout, &attempt_dir, &self.wenv.worker_id);
                let ended = match status {
                    AgentEnd::Signalled(signal) => Ok(Outcome::Interrupted { signal }),
                    AgentEnd::Capped(stdout) => {
                        let seen = agent_profile::Seen {
                            exit_code: crate::exit_code::SIGTERM,
                            stdout: &stdout,
                            stderr: &[],
                            result_file: None,
                            now_epoch: crate::timeutil::now_epoch(),
                        };
                        let usage = self
                            .priced(agent_profile::classify(self.config.agent.profile, &seen).1);
                        state.write("failed")?;
                        // Its work, committed or not, is rescued (pushed with `gh`) so the next
                        // attempt, on any host, resumes from it.
                        // As before rescues existed, the cap pushes to any `origin`.
                        let (rescued, pushed) = rescue("wall-clock cap", true);
                        let records = end_rescued(
                            ledger::Outcome::WallClockCapped,
                            &branch,
                            &usage,
                            None,
                            rescued.as_ref(),
                        );
                        if self.over_limit(&records) {
                            self.quarantine(n, &claim, &records)?;
                            return Ok(Outcome::Capped);
                        }
                        // The issue would go back to the queue: checked here, not only at the
                        // next claim, so a host whose ledger lacks this spend cannot take it
                        // again; the one comment still says where the work is.
                        let kept = wording::over_budget_work(&branch, &pushed);
                        if self.over_issue_budget(n, &claim, &records, &kept)? {
                            return Ok(Outcome::Capped);
                        }
                        let cap_s = self.config.timing.attempt_max_s;
                        let body = wording::capped(n, attempt, cap_s, &branch, &pushed);
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
                        end(ledger::Outcome::SetAside, &branch, &Usage::default(), None);
                        let edited = self.hand_labels(n, &claim, labels::READY_FOR_HUMAN);
                        let body = wording::set_aside(&why);
                        // Posted even when the label change failed: its hand-off mark tells the
                        // claims belt to finish the hand-off, never to requeue.
                        self.post_ending(n, &claim, &body, true);
                        self.log_event(
                            Kind::AttemptHandedOff,
                            n,
                            ledger::handed_off_text(
                                n,
                                &format!("set aside: {}", text::escape(&why)),
                                None,
                            ),
                        );
                        edited?;
                        eprintln!(
                            "worker {}: #{n} set aside: {}",
                            self.wenv.worker_id,
                            text::escape(&why)
                        );
                        Ok(Outcome::SetAside)
                    }
                    AgentEnd::Exited(fin) => {
                        let (verdict, usage) =
                            agent_profile::classify(self.config.agent.profile, &fin.seen());
                        let usage = self.priced(usage);
                        if !matches!(verdict, End::AccountWide { .. }) {
                            // The account ran this issue: an unknown reset's backoff starts over.
                            let _ = crate::lanes::pause_file::agent_clear(&self.layout.state());
                        }
                        match verdict {
                            End::Done => {}
                            End::Failed { code } => {
                                state.write("failed")?;
                                let excused = self.excuse(n, started.as_deref());
                                let records = end(
                                    ledger::Outcome::AgentFailed(code),
                                    &branch,
                                    &usage,
                                    excused,
                                );
                                if self.over_limit(&records) {
                                    self.quarantine(n, &claim, &records)?;
                                    return Ok(Outcome::AgentFailed);
                                }
                                if self.over_issue_budget(n, &claim, &records, "")? {
                                    return Ok(Outcome::AgentFailed);
                                }
                                let body = wording::failed(n, attempt, code);
                                // The release mark first: the next claim must find the claim ended.
                                self.post_ending(n, &claim, &body, false);
                                self.hand_labels(n, &claim, labels::READY_FOR_AGENT)?;
                                return Ok(Outcome::AgentFailed);
                            }
                            End::AccountWide {
                                why,
                                reset_epoch,
                                detail,
                            } => {
                                state.write("account-limited")?;
                                let kind = why.to_string();
                                let paused = crate::lanes::pause_file::agent_record(
                                    &self.layout.state(),
                                    &kind,
                                    &detail,
                                    reset_epoch,
                                );
                                end(ledger::Outcome::AccountLimited, &branch, &usage, None);
                                // Back to the queue with no failure comment: only the release
                                // mark that ends the claim on a shared tracker.
                                if let Some(m) = &claim.marks {
                                    let _ = tracked::post(self.tracker, n, &m.release_mark());
                                }
                                self.hand_labels(n, &claim, labels::READY_FOR_AGENT)?;
                                match paused {
                                    Ok(p) => eprintln!(
                                        "worker {}: #{n} given back: agent paused: {}",
                                        self.wenv.worker_id,
                                        text::escape(&p.describe())
                                    ),
                                    Err(e) => eprintln!(
                                        "worker {}: #{n} given back ({kind}); the agent pause could not be recorded: {e}",
                                        self.wenv.worker_id
                                    ),
                                }
                                return Ok(Outcome::AccountLimited);
                            }
                            End::Interrupted => return Ok(Outcome::Interrupted { signal: 15 }),
                        }
                        state.write("checks")?;
                        let Some(run) = self.run_checks(task, n, round)? else {
                            break (fin, usage, ChecksWord::None);
                        };
                        let (why, tail, again) = match run {
                            super::checks::ChecksRun::Passed { secs } => {
                                self.landing_event(
                                Kind::PrChecksPassed,
                                n,
                                format!("#{n} attempt {n}-a{attempt} round {round}: checks passed in {secs:.1}s"),
                            );
                                break (fin, usage, ChecksWord::Passed { round });
                            }
                            super::checks::ChecksRun::Interrupted(signal) => {
                                return Ok(Outcome::Interrupted { signal });
                            }
                            super::checks::ChecksRun::Failed { why, tail, again } => {
                                (why, tail, again)
                            }
                        };
                        self.landing_event(
                            Kind::PrChecksFailed,
                            n,
                            format!(
                                "#{n} attempt {n}-a{attempt} round {round}: checks failed: {why}"
                            ),
                        );
                        let last = round >= self.config.checks.max_rounds || !again;
                        if last || self.issue_budget_spent(n, &records, &usage) {
                            break (
                                fin,
                                usage,
                                ChecksWord::Failing {
                                    rounds: round,
                                    why,
                                    tail,
                                },
                            );
                        }
                        // This round's cost counts now; the next round is the attempt's own.
                        end_record(
                            ledger::Outcome::ChecksFailed,
                            &branch,
                            &usage,
                            None,
                            None,
                            (
                                pr.as_ref().and_then(|p| p.url.clone()),
                                Some(format!("failed: {why}")),
                            ),
                        );
                        if usage.session_id.is_some() {
                            session_now.clone_from(&usage.session_id);
                        }
                        told = Some(super::checks::guidance(
                            self.config.checks.command.as_deref().unwrap_or_default(),
                            &why,
                            &tail,
                        ));
                        round += 1;
                        continue;
                    }
                };
                return ended;
            };
            // Nothing of the attempt is pushed or handed on by a host whose claim may be
            // another's by now: the work is rescued as for an interruption.
            self.fenced(&claim)?;
            finished.set(true);
            state.write("publish")?;
            let message = agent_profile::final_message(self.config.agent.profile, &fin.seen());
            let handed = self.hand_off(super::landing::HandOff {
                n,
                attempt,
                title: &title,
                branch: &branch,
                base: base.as_deref().unwrap_or(&start_point),
                pr: pr.as_ref(),
                checks: &checks,
                message: message.as_deref(),
                figures: self.figures(n, attempt, &records, started.as_deref(), &usage),
            });
            let edited = self.hand_labels_all(n, &claim, &handed.labels);
            if self.post_ending(n, &claim, &handed.comment, true) {
                state.set_envelope_posted();
            }
            let (kind, line) = handed.told.clone();
            self.log_event(kind, n, line);
            let checked = self.config.checks.command.is_some().then(|| checks.words());
            end_record(
                ledger::Outcome::Done,
                &branch,
                &usage,
                None,
                None,
                (handed.pr, checked),
            );
            if guidance.is_some()
                && let Err(e) = crate::landing::take_guidance(self.layout, n)
            {
                eprintln!("worker {}: landing record: {e}", self.wenv.worker_id);
            }
            edited?;
            state.write("done")?;
            Ok(Outcome::Done)
        })();

        let interrupted = matches!(result, Ok(Outcome::Interrupted { .. }) | Err(_));
        if interrupted && !finished.get() {
            // Never leave the issue eternally `running`: give it back to the queue, its
            // claim mark ended first so the next claim starts clean.
            if let Some(m) = &claim.marks {
                let _ = tracked::post(self.tracker, n, &m.release_mark());
            }
            // A claim lost with the host's lease is given back by the host that finds it
            // vanished, not by this one (`docs/SPEC.md` §11.23).
            match self.fenced(&claim) {
                Ok(()) => {
                    let _ =
                        self.tracker
                            .edit_labels(n, &[labels::READY_FOR_AGENT], &[labels::RUNNING]);
                }
                Err(e) => eprintln!("worker {}: #{n}: not given back: {e}", self.wenv.worker_id),
            }
            let _ = state.write("interrupted");
            // Stopped by the supervisor for making no progress: a failed attempt, not a
            // give-back, or an agent that always hangs would be requeued forever.
            let mark = crate::attempt_state::StallMark::read(&attempt_dir);
            let stalled = mark.is_some();
            let ends = super::output::take_last_ends();
            let mut outcome = match stalled {
                true => ledger::Outcome::Stalled,
                false => ledger::Outcome::GivenBack,
            };
            let mut excused = None;
            if stalled {
                match self.stall_blame(n, started.as_deref(), ends.as_ref(), mark) {
                    StallBlame::Issue => {}
                    StallBlame::Provider(detail) => {
                        // What the agent last said names the provider (waiting for the
                        // network, its retries given up): the account's, paused, nobody's.
                        outcome = ledger::Outcome::AccountLimited;
                        eprintln!(
                            "worker {}: #{n} stalled on the provider: {}",
                            self.wenv.worker_id,
                            text::escape(&detail)
                        );
                    }
                    StallBlame::FleetWide(why) => {
                        eprintln!(
                            "worker {}: #{n} stalled with the fleet: {}",
                            self.wenv.worker_id,
                            text::escape(&why)
                        );
                        excused = Some(why);
                    }
                }
            }
            let why = match outcome {
                ledger::Outcome::Stalled => "stall kill",
                ledger::Outcome::AccountLimited => "provider stall",
                _ => "interrupted",
            };
            let (rescued, _) = rescue(why, false);
            end_rescued(
                outcome,
                &branch,
                &Usage::default(),
                excused,
                rescued.as_ref(),
            );
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
        let spent = crate::budget::issue_spend(&now).usd + usage.cost_usd.unwrap_or(0.0);
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
        claim: &TakenClaim,
        records: &[ledger::Record],
        tail: &str,
    ) -> Result<bool, WorkerError> {
        let Some(limit) = self.config.budget.usd_per_issue else {
            return Ok(false);
        };
        let spent = crate::budget::issue_spend(records);
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

    /// Why a failure of issue `n` now is not the issue's own (`docs/SPEC.md` §11.13), if
    /// it is not: an account-wide condition holds or began while the attempt (started at
    /// `started`, RFC 3339) ran, or within the circuit window the agent failed on other
    /// issues and finished none.
    fn excuse(&self, n: u64, started: Option<&str>) -> Option<String> {
        let now = crate::timeutil::now_epoch();
        let window = self.config.timing.circuit_window_s;
        let began = started
            .and_then(crate::timeutil::parse_rfc3339)
            .map_or(now, crate::timeutil::epoch_secs);
        if let Ok(Some(p)) = crate::lanes::pause_file::agent_read(&self.layout.state())
            && (p.active_at(now) || p.since_epoch >= began)
        {
            return Some(format!("an account-wide condition was known ({})", p.kind));
        }
        let (all, _) = ledger::read_all(self.layout);
        let since = now.saturating_sub(window);
        let recent = |r: &&ledger::Record| {
            crate::timeutil::parse_rfc3339(&r.end)
                .map(crate::timeutil::epoch_secs)
                .is_some_and(|e| e >= since)
        };
        let mut failing = Vec::new();
        let mut finished = false;
        for (m, records) in &all {
            for r in records.iter().filter(recent) {
                match r.outcome {
                    ledger::Outcome::AgentFailed(_) if *m != n => failing.push(format!("#{m}")),
                    ledger::Outcome::Done => finished = true,
                    _ => {}
                }
            }
        }
        failing.dedup();
        (!failing.is_empty() && !finished).then(|| {
            format!(
                "the agent was failing on other issues too ({}) within {window}s",
                failing.join(", ")
            )
        })
    }

    /// Whose fault a stall-killed attempt of issue `n` (started at `started`) is, from
    /// what its agent last said (`ends`: stdout and stderr) and from the fleet around it
    /// (`docs/SPEC.md` §11.13). The agent's own last words naming the provider
    /// (`Reconnecting... waiting for network`, an outage it was riding out) make it the
    /// account's: the fleet pauses (recorded here). Else, when the supervisor's `mark`
    /// says most busy slots stalled at once, or when other issues stalled or failed within
    /// `timing.circuit_window_s` and none finished, the stall is the fleet's, not this
    /// issue's: excused, and the fleet pauses on the backoff instead of killing slot after
    /// slot. Else it is the issue's.
    fn stall_blame(
        &self,
        n: u64,
        started: Option<&str>,
        ends: Option<&(Vec<u8>, Vec<u8>)>,
        mark: Option<crate::attempt_state::StallMark>,
    ) -> StallBlame {
        let state = self.layout.state();
        if let Some((stdout, stderr)) = ends {
            let seen = agent_profile::Seen {
                exit_code: crate::exit_code::SIGTERM,
                stdout,
                stderr,
                result_file: None,
                now_epoch: crate::timeutil::now_epoch(),
            };
            if let (
                End::AccountWide {
                    why,
                    reset_epoch,
                    detail,
                },
                _,
            ) = agent_profile::classify(self.config.agent.profile, &seen)
            {
                let _ = crate::lanes::pause_file::agent_record(
                    &state,
                    &why.to_string(),
                    &detail,
                    reset_epoch,
                );
                return StallBlame::Provider(detail);
            }
        }
        // The supervisor saw most busy slots stall at once and stopped them together: its
        // judgement, made with every slot in view, comes before this worker's own look
        // back at the ledger (which cannot excuse the first stall of an outage).
        let supervisor = match mark {
            Some(crate::attempt_state::StallMark::FleetWide(why)) => Some(why),
            _ => None,
        };
        match supervisor.or_else(|| self.excuse_stall(n, started)) {
            Some(why) => {
                let kind = agent_profile::AccountWide::Unreachable.to_string();
                let _ = crate::lanes::pause_file::agent_record(&state, &kind, &why, None);
                StallBlame::FleetWide(why)
            }
            None => StallBlame::Issue,
        }
    }

    /// Why a stall of issue `n` is not the issue's own: within the circuit window other
    /// issues' attempts stalled (or failed) and no issue's finished.
    fn excuse_stall(&self, n: u64, started: Option<&str>) -> Option<String> {
        if let Some(why) = self.excuse(n, started) {
            return Some(why);
        }
        let now = crate::timeutil::now_epoch();
        let window = self.config.timing.circuit_window_s;
        let since = now.saturating_sub(window);
        let (all, _) = ledger::read_all(self.layout);
        let mut stalled = Vec::new();
        let mut finished = false;
        for (m, records) in &all {
            let recent = records.iter().filter(|r| {
                crate::timeutil::parse_rfc3339(&r.end)
                    .map(crate::timeutil::epoch_secs)
                    .is_some_and(|e| e >= since)
            });
            for r in recent {
                match r.outcome {
                    ledger::Outcome::Stalled if *m != n => stalled.push(format!("#{m}")),
                    ledger::Outcome::Done => finished = true,
                    _ => {}
                }
            }
        }
        // Slots stopped in the same sweep have no ledger record yet: the supervisor's
        // marks in their attempt dirs say they stalled.
        for (m, mark) in self.stall_marks() {
            if m != n && mark >= since && !stalled.contains(&format!("#{m}")) {
                stalled.push(format!("#{m}"));
            }
        }
        stalled.dedup();
        (!stalled.is_empty() && !finished).then(|| {
            format!(
                "other issues' agents stalled too ({}) within {window}s: the provider's, not the issues'",
                stalled.join(", ")
            )
        })
    }

    /// The stall marks (`stall-killed`) the supervisor left in any worker's attempt dirs:
    /// each attempt's issue and when it was marked (epoch seconds). Never through a link.
    fn stall_marks(&self) -> Vec<(u64, u64)> {
        let mut marks = Vec::new();
        for ns in crate::layout::WORKER_NAMESPACES {
            let Ok(workers) = fs::read_dir(self.layout.worker_namespace(ns)) else {
                continue;
            };
            for w in workers.flatten() {
                let Ok(attempts) = fs::read_dir(w.path()) else {
                    continue;
                };
                for a in attempts.flatten() {
                    let Some((issue, _)) = a
                        .file_name()
                        .to_str()
                        .and_then(crate::layout::parse_attempt_dir)
                    else {
                        continue;
                    };
                    let mark = a.path().join(crate::attempt_state::STALL_KILLED_FILE);
                    let at = fs::symlink_metadata(&mark)
                        .ok()
                        .filter(fs::Metadata::is_file)
                        .and_then(|m| m.modified().ok())
                        .map(crate::timeutil::epoch_secs);
                    if let Some(at) = at {
                        marks.push((issue, at));
                    }
                }
            }
        }
        marks
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

/// Whose fault a stall-killed attempt is.
enum StallBlame {
    /// The issue's: recorded `stalled`, counted towards quarantine.
    Issue,
    /// The provider's, by the agent's own last words: `account-limited`, the fleet paused.
    Provider(String),
    /// The fleet's: other issues stalled too; `stalled` but excused, the fleet paused.
    FleetWide(String),
}

/// Why the agent's commits were not published; the issue's comment says it.
#[derive(Debug, thiserror::Error)]
pub(super) enum PublishError {
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error("rev-list said {0:?}")]
    Count(String),
}
