//! A finished attempt's hand-off (`docs/SPEC.md` §11.22): its commits pushed, then the
//! issue's pull request opened (or, for a fix round, pushed to), the landing record written,
//! and the one comment and labels that hand the issue to a person.

use super::claiming::TakenClaim;
use super::lifecycle::PublishError;
use super::{Worker, WorkerError};
use crate::config::ChecksFailure;
use crate::event_log::Kind;
use crate::landing::pr_text::{self as ltext, ChecksWord, Figures};
use crate::landing::{self, PrRecord, PrState};
use crate::ledger;
use crate::tracker::labels;

/// What the hand-off of one finished attempt needs.
pub(super) struct HandOff<'a> {
    pub n: u64,
    pub attempt: u64,
    pub title: &'a str,
    /// The attempt's local branch.
    pub branch: &'a str,
    /// The commit the attempt started from: its commits are counted from it.
    pub base: &'a str,
    /// The live pull request when this attempt is a fix round.
    pub pr: Option<&'a PrRecord>,
    pub checks: &'a ChecksWord,
    pub message: Option<&'a str>,
    pub figures: Figures,
}

/// How the hand-off ended: the comment and labels that give the issue to a person, and the
/// pull request named in the ledger.
pub(super) struct Handed {
    pub comment: String,
    pub labels: Vec<&'static str>,
    pub pr: Option<String>,
    /// The event that tells the humans (`attempt.ready` or `attempt.handed-off`, what the
    /// notifier sends; `docs/SPEC.md` §11.21) and its line.
    pub told: (Kind, String),
}

impl Worker<'_> {
    /// Pushes the attempt's commits and lands them: a pull request per finished issue
    /// (`landing.pull_request`), into `fleet.base`, with `Closes #N`; a fix round pushes to
    /// the open pull request instead. An opening that fails leaves the branch pushed
    /// and a `pending` record the landing belt opens again. Never fails the attempt: what
    /// went wrong is said in the comment.
    pub(super) fn hand_off(&self, h: HandOff<'_>) -> Handed {
        let attempt = format!("{}-a{}", h.n, h.attempt);
        let person = vec![labels::READY_FOR_HUMAN];
        // A fix round pushes onto its pull request's branch (its worktree started there).
        let target = h.pr.map(|p| p.branch.as_str());
        let commits = self.publish_to(h.branch, target, h.base);
        let commits = match commits {
            Ok(k) => k,
            Err(e) => {
                let told = (
                    Kind::AttemptHandedOff,
                    ledger::handed_off_text(
                        h.n,
                        &format!(
                            "its branch could not be pushed ({e}); the work is in the local branch"
                        ),
                        Some(h.branch),
                    ),
                );
                return Handed {
                    comment: super::wording::finished(h.n, h.attempt, h.branch, &Err::<u64, _>(e)),
                    labels: person,
                    pr: h.pr.and_then(|p| p.url.clone()),
                    told,
                };
            }
        };
        let landing = &self.config.landing;
        if commits == 0 || !landing.pull_request {
            let ok: Result<u64, PublishError> = Ok(commits);
            let told = match commits {
                0 => (
                    Kind::AttemptHandedOff,
                    ledger::handed_off_text(h.n, "the agent made no commits", None),
                ),
                k => self.ready(h.n, k, h.branch, None),
            };
            return Handed {
                comment: super::wording::finished(h.n, h.attempt, h.branch, &ok),
                labels: person,
                pr: h.pr.and_then(|p| p.url.clone()),
                told,
            };
        }
        if let Some(pr) = h.pr {
            return self.pushed_to(&h, pr, &attempt, commits);
        }
        let failing = h.checks.failing();
        if failing && self.config.checks.on_failure == ChecksFailure::Person {
            return Handed {
                comment: ltext::checks_to_person(&attempt, h.branch, commits, h.checks),
                labels: person,
                pr: None,
                told: (
                    Kind::AttemptHandedOff,
                    ledger::handed_off_text(
                        h.n,
                        &format!("its checks still fail ({})", h.checks.words()),
                        Some(h.branch),
                    ),
                ),
            };
        }
        let draft = landing.draft || failing;
        let body = ltext::body(h.n, h.message, h.checks, &h.figures);
        let base = &self.config.fleet.base;
        let mut record = PrRecord {
            draft,
            ready_when_green: draft && !landing.draft,
            checks: h.checks.words(),
            failing,
            check_rounds: h.checks.extra_rounds(),
            ..PrRecord::pending(h.n, h.branch, base, h.title, &body)
        };
        let opened = self.tracker.pr_open(base, h.branch, h.title, &body, draft);
        let handed = match opened {
            Ok(url) => {
                record.state = PrState::Open;
                record.url = Some(url.clone());
                let what = if draft {
                    "draft pull request"
                } else {
                    "pull request"
                };
                self.landing_event(
                    Kind::PrOpened,
                    h.n,
                    format!(
                        "#{} attempt {attempt} opened {what} {url} from {} into {base}: {commits} commit(s); checks: {}",
                        h.n,
                        h.branch,
                        h.checks.words()
                    ),
                );
                Handed {
                    comment: ltext::opened(&attempt, &url, h.branch, commits, h.checks),
                    labels: vec![labels::READY_FOR_HUMAN, labels::PR_OPEN],
                    told: self.ready(h.n, commits, h.branch, Some(&url)),
                    pr: Some(url),
                }
            }
            Err(e) => {
                let why = crate::text::one_line(&e.to_string());
                record.failure = Some(why.clone());
                eprintln!(
                    "worker {}: #{}: opening the pull request failed: {why}; branch {} kept",
                    self.wenv.worker_id, h.n, h.branch
                );
                self.landing_event(
                    Kind::PrCreateFailed,
                    h.n,
                    format!(
                        "#{} attempt {attempt}: branch {} pushed, opening the pull request failed: {why}; retried by the landing belt",
                        h.n, h.branch
                    ),
                );
                Handed {
                    comment: ltext::refused(&attempt, h.branch, commits, &why),
                    labels: vec![labels::READY_FOR_HUMAN, labels::PR_OPEN],
                    pr: None,
                    told: self.ready(h.n, commits, h.branch, None),
                }
            }
        };
        if let Err(e) = landing::write(self.layout, record) {
            eprintln!("worker {}: landing record: {e}", self.wenv.worker_id);
        }
        handed
    }

    /// A fix round's commits pushed to the open pull request.
    fn pushed_to(&self, h: &HandOff<'_>, pr: &PrRecord, attempt: &str, commits: u64) -> Handed {
        let name = pr.name();
        let updated = landing::update(self.layout, h.n, |r| {
            let mut r = r?;
            r.checks = h.checks.words();
            r.failing = h.checks.failing();
            r.check_rounds += h.checks.extra_rounds();
            Some(r)
        });
        if let Err(e) = updated {
            eprintln!("worker {}: landing record: {e}", self.wenv.worker_id);
        }
        self.landing_event(
            Kind::PrUpdated,
            h.n,
            format!(
                "#{} attempt {attempt} pushed {commits} commit(s) to {name} (branch {}); checks: {}",
                h.n,
                pr.branch,
                h.checks.words()
            ),
        );
        Handed {
            comment: ltext::pushed(attempt, &name, &pr.branch, commits, h.checks),
            labels: vec![labels::READY_FOR_HUMAN, labels::PR_OPEN],
            pr: pr.url.clone(),
            told: self.ready(h.n, commits, &pr.branch, pr.url.as_deref()),
        }
    }

    /// `attempt.ready`: `commits` on `branch`, linked to its pull request, else to where a
    /// person opens one (GitHub's compare page), when known.
    fn ready(&self, n: u64, commits: u64, branch: &str, pr: Option<&str>) -> (Kind, String) {
        let link = pr.map(str::to_string).or_else(|| self.review_link(branch));
        (
            Kind::AttemptReady,
            ledger::ready_text(n, commits, branch, link.as_deref()),
        )
    }

    /// Pushes `branch` (to `target` on `origin` when given, else under its own name) when
    /// the agent committed; returns the number of new commits counted on the branch from
    /// `base`.
    fn publish_to(
        &self,
        branch: &str,
        target: Option<&str>,
        base: &str,
    ) -> Result<u64, PublishError> {
        let count = self.git.run(&[
            "rev-list",
            "--count",
            &format!("{base}..refs/heads/{branch}"),
        ])?;
        let count: u64 = count
            .trim()
            .parse()
            .map_err(|_| PublishError::Count(count.clone()))?;
        if count > 0 {
            match target {
                Some(t) => self.git.push_branch_to(branch, t)?,
                None => self.git.push_branch(branch)?,
            }
        }
        Ok(count)
    }

    /// One landing event of this worker's attempt (with its slot and pid).
    pub(super) fn landing_event(&self, kind: Kind, n: u64, msg: String) {
        landing::log_event(self.layout, kind, n, msg, self.wenv.slot);
    }

    /// The label change that hands the issue to a person: `add` in place of `running`.
    pub(super) fn hand_labels_all(
        &self,
        n: u64,
        claim: &mut TakenClaim,
        add: &[&str],
    ) -> Result<(), WorkerError> {
        // On a cluster nothing is handed on by a host whose claim may be another's by now.
        self.fenced(claim)?;
        if add.contains(&labels::READY_FOR_HUMAN) {
            claim.mark_to_person();
        }
        let edit = || match &claim.marks {
            Some(_) => {
                crate::claim::tracked::edit_labels_settled(self.tracker, n, add, &[labels::RUNNING])
            }
            None => self.tracker.edit_labels(n, add, &[labels::RUNNING]),
        };
        // Handed to a person, the work is done: a rate limit is waited out, not a reason
        // to leave the issue `running` for someone to redo.
        let handed = if add.contains(&labels::READY_FOR_HUMAN) {
            self.past_rate_limits(claim, &format!("#{n}: the hand-off's labels"), edit)
        } else {
            edit()
        };
        handed.map_err(|e| WorkerError::from(&e))
    }
}
