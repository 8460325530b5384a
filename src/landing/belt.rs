//! The landing belt (`docs/SPEC.md` §11.22): the supervisor's pass over the checkout's live
//! landing records, once at start and every `landing.watch_interval_s`. A pull request whose
//! opening failed is opened again; an open one is followed until it is merged or closed: a
//! failing CI check, a review asking for changes or a trusted `/afk fix` comment on it, and a
//! trusted `/afk requeue` on its issue, send the issue back to the queue for a fix round on
//! its branch (bounded by `landing.max_fix_rounds` and the issue's budget), and with
//! `landing.merge = "auto"` the merge is asked for once nothing fails.
//!
//! On one box the belt is the checkout's: one supervisor per repo runs it (the repo's lock),
//! over the records its workers wrote. On a cluster it is the fleet's: the leader alone runs
//! it, over every record in etcd, whichever host opened the pull request (a dead one's
//! too). A record's step that fails costs that record only; the next pass tries again.

use std::sync::Arc;

use super::pr_text as ltext;
use super::{PrRecord, PrState};
use crate::config::{CiScope, Config, MergeMode};
use crate::event_log::Kind;
use crate::layout::Layout;
use crate::tracker::{PrCheck, PrNote, PrStatus, Tracker, TrackerError, labels};

/// What one pass did, for its `supervisor.periodic` line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// Live records looked at.
    pub watched: usize,
    /// Pull requests opened after an earlier refusal.
    pub opened: usize,
    /// Fix rounds asked for.
    pub fixes: usize,
    pub merged: usize,
    /// Records whose step failed this pass (retried next pass), with why.
    pub failed: Vec<String>,
}

impl Pass {
    /// `watched=3 opened=1 fixes=1 merged=0 failed=0`, then each failure.
    pub fn line(&self) -> String {
        let mut s = format!(
            "watched={} opened={} fixes={} merged={} failed={}",
            self.watched,
            self.opened,
            self.fixes,
            self.merged,
            self.failed.len()
        );
        for f in &self.failed {
            s.push_str("; ");
            s.push_str(f);
        }
        s
    }
}

/// What sends an open pull request's issue back for a fix round.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Trigger {
    /// The keys it is noted by, so it is acted on once.
    keys: Vec<String>,
    /// In words, for the comment and the event (`CI check test failed`).
    source: String,
    /// What the agent is told.
    guidance: String,
}

/// One checkout's landing belt.
pub struct Belt {
    tracker: Arc<dyn Tracker>,
    layout: Layout,
    config: Config,
}

impl Belt {
    pub fn new(tracker: Arc<dyn Tracker>, layout: &Layout, config: &Config) -> Belt {
        Belt {
            tracker,
            layout: layout.clone(),
            config: config.clone(),
        }
    }

    /// One pass over every live record. A record that cannot be read is a failure of the
    /// pass's line, never a reason to touch the others.
    pub fn pass(&mut self) -> Pass {
        let (records, errors) = super::list(&self.layout);
        let mut pass = Pass {
            failed: errors.iter().map(ToString::to_string).collect(),
            ..Pass::default()
        };
        for r in records.into_iter().filter(PrRecord::is_live) {
            pass.watched += 1;
            let n = r.issue;
            let step = match r.state {
                PrState::Pending => self.open(r).map(|_| pass.opened += 1),
                _ => self.follow(r, &mut pass),
            };
            if let Err(e) = step {
                pass.failed.push(format!("#{n}: {e}"));
            }
        }
        pass
    }

    /// Opens a pending record's pull request again.
    fn open(&self, r: PrRecord) -> Result<(), TrackerError> {
        let n = r.issue;
        let opened = self
            .tracker
            .pr_open(&r.base, &r.branch, &r.title, &r.body, r.draft);
        let url = match opened {
            Ok(url) => url,
            Err(e) => {
                let why = crate::text::one_line(&e.to_string());
                self.change(n, |rec| rec.failure = Some(why.clone()));
                return Err(e);
            }
        };
        self.change(n, |rec| {
            rec.state = PrState::Open;
            rec.url = Some(url.clone());
            rec.failure = None;
        });
        self.event(
            Kind::PrOpened,
            n,
            format!(
                "#{n} pull request {url} opened from {} into {} (retried after: {})",
                r.branch,
                r.base,
                r.failure.as_deref().unwrap_or("an earlier failure")
            ),
        );
        // The hand-off's comment could not name the pull request: this one does.
        self.tracker
            .comment(n, &ltext::opened_late(&url, &r.branch))
    }

    /// Follows an open pull request one step.
    fn follow(&self, r: PrRecord, pass: &mut Pass) -> Result<(), TrackerError> {
        let n = r.issue;
        let Some(pr) = r.url.as_deref().map(pr_ref) else {
            return Ok(());
        };
        let status = self.tracker.pr_status(&pr)?;
        match status.state.as_str() {
            "MERGED" => {
                self.merged(&r)?;
                pass.merged += 1;
                return Ok(());
            }
            "CLOSED" => {
                self.change(n, |rec| rec.state = PrState::Closed);
                self.event(
                    Kind::PrClosed,
                    n,
                    format!("#{n} pull request {} closed unmerged", r.name()),
                );
                return self.tracker.edit_labels(n, &[], &[labels::PR_OPEN]);
            }
            _ => {}
        }
        let required = self.config.landing.ci == CiScope::Required;
        let checks = self.tracker.pr_checks(&pr, required)?;
        let ci_failing: Vec<&PrCheck> = checks.iter().filter(|c| c.failed()).collect();
        let ci_pending = checks.iter().any(|c| c.bucket == "pending");
        // Failing now: CI's word, else the check command's at the hand-off.
        let failing = !ci_failing.is_empty() || r.checks.starts_with("failing");
        if failing != r.failing {
            self.change(n, |rec| rec.failing = failing);
        }
        let (thread, issue_notes) = self.tracker.trusted_comments(n)?;
        // A fix round already queued or running: nothing new is asked until it is done.
        let handed = thread.has_label(labels::READY_FOR_HUMAN);
        if !handed {
            return Ok(());
        }
        let mut trigger = None;
        if !ci_failing.is_empty() {
            trigger = self.ci_trigger(&r, &status, &ci_failing)?;
        }
        if trigger.is_none() {
            trigger = self.note_trigger(&r, &status, &issue_notes);
        }
        if let Some(t) = trigger {
            if self.fix(&r, &pr, t)? {
                pass.fixes += 1;
            }
            return Ok(());
        }
        let mut draft = status.draft;
        if r.ready_when_green && !failing && !ci_pending {
            self.made_ready(&r, &pr, status.draft)?;
            draft = false;
        }
        let mergeable = !failing && !ci_pending && !draft && !r.needs_person;
        if self.config.landing.merge == MergeMode::Auto && !r.merge_requested && mergeable {
            self.tracker
                .pr_merge_auto(&pr, self.config.landing.method)?;
            self.change(n, |rec| rec.merge_requested = true);
            self.event(
                Kind::PrMergeRequested,
                n,
                format!(
                    "#{n} pull request {} merge asked for ({}; the repository's rules decide when)",
                    r.name(),
                    self.config.landing.method
                ),
            );
            // The local store merges at once: said now, not a pass later.
            if self.tracker.pr_status(&pr)?.state == "MERGED" {
                self.merged(&r)?;
                pass.merged += 1;
            }
        }
        Ok(())
    }

    /// A draft opened only because its checks failed, now green (the checks of the fix
    /// round that pushed last passed, no CI check fails or waits): marked ready for review,
    /// once (`pr.ready`); one a person marked ready already is only noted. A draft by
    /// `landing.draft` never comes here.
    fn made_ready(&self, r: &PrRecord, pr: &str, draft: bool) -> Result<(), TrackerError> {
        let n = r.issue;
        if draft {
            self.tracker.pr_ready(pr)?;
            self.event(
                Kind::PrReady,
                n,
                format!(
                    "#{n} pull request {}: its checks pass now ({}); marked ready for review",
                    r.name(),
                    r.checks
                ),
            );
        }
        self.change(n, |rec| {
            rec.draft = false;
            rec.ready_when_green = false;
        });
        Ok(())
    }

    /// A failing required check of the pull request's head, with its log's end; `None`
    /// when that failure was acted on before.
    fn ci_trigger(
        &self,
        r: &PrRecord,
        status: &PrStatus,
        failing: &[&PrCheck],
    ) -> Result<Option<Trigger>, TrackerError> {
        let n = r.issue;
        let names: Vec<&str> = failing.iter().map(|c| c.name.as_str()).collect();
        let head = status.head_sha.clone().unwrap_or_else(|| {
            // The local store names no head: the failure is known by its checks' logs.
            let logs: String = failing
                .iter()
                .map(|c| c.log.clone().unwrap_or_default())
                .collect();
            crate::tracker::note_key(None, &format!("{}{logs}", names.join(",")))
        });
        let key = format!("ci:{head}");
        if r.saw(&key) {
            return Ok(None);
        }
        let first = failing[0];
        let log = match (&first.log, first.run_id()) {
            (Some(l), _) => l.clone(),
            (None, Some(run)) => self.tracker.run_failed_log(run)?,
            (None, None) => String::new(),
        };
        let link = first.link.as_deref().unwrap_or("");
        self.event(
            Kind::PrChecksFailed,
            n,
            format!(
                "#{n} pull request {}: CI check(s) {} failed{}",
                r.name(),
                names.join(", "),
                if link.is_empty() {
                    String::new()
                } else {
                    format!(" ({link})")
                }
            ),
        );
        let tail = ltext::tail(&log, ltext::TAIL_MAX);
        Ok(Some(Trigger {
            keys: vec![key],
            source: format!("CI check {} failed", names.join(", ")),
            guidance: format!(
                "The pull request's CI check(s) {} failed{}. Fix what they report and commit on the same branch. The end of the failed job's log:\n\n{tail}",
                names.join(", "),
                if link.is_empty() {
                    String::new()
                } else {
                    format!(" ({link})")
                }
            ),
        }))
    }

    /// A trusted review asking for changes or `/afk fix` comment on the pull request, or a
    /// trusted `/afk requeue` on its issue, not acted on before. An untrusted `/afk` command
    /// is ignored and said once.
    fn note_trigger(
        &self,
        r: &PrRecord,
        status: &PrStatus,
        issue_notes: &[PrNote],
    ) -> Option<Trigger> {
        let n = r.issue;
        let mut ignored = Vec::new();
        let mut found = None;
        let candidates = status
            .reviews
            .iter()
            .map(|v| ("review", v))
            .chain(status.comments.iter().map(|c| ("comment", c)))
            .chain(issue_notes.iter().map(|c| ("requeue", c)));
        for (what, note) in candidates {
            let key = format!("{what}:{}", note.key);
            if r.saw(&key) {
                continue;
            }
            let asked = match what {
                "review" => (note.state.as_deref() == Some("CHANGES_REQUESTED"))
                    .then(|| note.body.trim().to_string()),
                "comment" => command(&note.body, "/afk fix"),
                _ => command(&note.body, "/afk requeue"),
            };
            let Some(text) = asked else { continue };
            if !note.trusted {
                ignored.push(key);
                eprintln!(
                    "afk-supervisor: #{n}: ignored {what} by {}: only the fleet's own login and claims.trusted_authors direct the fleet (SPEC §11.5)",
                    note.author
                );
                continue;
            }
            let by = if note.author.is_empty() {
                String::new()
            } else {
                format!(" by {}", note.author)
            };
            let source = match what {
                "review" => format!("a review{by} requests changes"),
                "comment" => format!("`/afk fix`{by}"),
                _ => format!("`/afk requeue`{by} on the issue"),
            };
            found = Some(Trigger {
                keys: vec![key],
                guidance: format!(
                    "{}{by} asks for this on the pull request {}:\n\n{}",
                    match what {
                        "review" => "A review",
                        _ => "A person",
                    },
                    r.name(),
                    if text.is_empty() {
                        "(no text: read the pull request's conversation)".to_string()
                    } else {
                        text
                    }
                ),
                source,
            });
            break;
        }
        if !ignored.is_empty() {
            self.change(n, |rec| {
                for k in &ignored {
                    rec.note(k);
                }
            });
        }
        found
    }

    /// Sends the issue back for a fix round, or, past `landing.max_fix_rounds` or the
    /// issue's budget, gives the pull request to a person (once). Returns whether a round
    /// was asked for.
    fn fix(&self, r: &PrRecord, pr: &str, t: Trigger) -> Result<bool, TrackerError> {
        let n = r.issue;
        let max = self.config.landing.max_fix_rounds;
        let over_budget = self.issue_budget_spent(n);
        if r.fix_rounds >= max || over_budget {
            if !r.needs_person {
                let why = if over_budget {
                    "the issue's budget (budget.usd_per_issue) is spent".to_string()
                } else {
                    format!("its {max} fix round(s) (landing.max_fix_rounds) are used")
                };
                self.tracker.pr_add_label(pr, labels::READY_FOR_HUMAN)?;
                self.tracker.pr_comment(
                    pr,
                    &format!(
                        "🤖 /afk: {}, but {why}: this pull request is yours now.",
                        t.source
                    ),
                )?;
                self.event(
                    Kind::PrNeedsPerson,
                    n,
                    format!("#{n} pull request {}: {}; {why}", r.name(), t.source),
                );
            }
            self.change(n, |rec| {
                rec.needs_person = true;
                for k in &t.keys {
                    rec.note(k);
                }
            });
            return Ok(false);
        }
        let round = r.fix_rounds + 1;
        // The comment first, the labels second (§11.4): a pass cut between them redoes
        // both, and the keys are noted only once the issue is back in the queue.
        self.tracker.comment(
            n,
            &format!(
                "🤖 /afk fix round {round} of {max} for pull request {}: {}. Back to ready-for-agent; the next attempt pushes to its branch `{}`.",
                r.name(),
                t.source,
                r.branch
            ),
        )?;
        self.change(n, |rec| rec.guidance = Some(t.guidance.clone()));
        self.tracker
            .edit_labels(n, &[labels::READY_FOR_AGENT], &[labels::READY_FOR_HUMAN])?;
        // On a cluster the hand-off's done key (§11.23) would keep the round unclaimed for
        // its two minutes: the issue is back in the queue on purpose, so the key goes.
        if let Some(c) = crate::cluster::active()
            && let Err(e) = c.clear_done(n)
        {
            eprintln!(
                "afk-supervisor: #{n}: done key not cleared ({e}); the fix round waits for it to expire"
            );
        }
        self.change(n, |rec| {
            rec.fix_rounds = round;
            for k in &t.keys {
                rec.note(k);
            }
        });
        self.event(
            Kind::PrFixRequested,
            n,
            format!(
                "#{n} pull request {}: fix round {round} of {max} requested: {}",
                r.name(),
                t.source
            ),
        );
        Ok(true)
    }

    /// A merged pull request: its `afk:pr-open` label taken off, the issue closed where the
    /// tracker does not close it itself, then recorded. In that order: a closed issue
    /// never still says its pull request is open, and a tracker call that fails leaves the
    /// record open, so the next pass does it all again (each step is idempotent).
    fn merged(&self, r: &PrRecord) -> Result<(), TrackerError> {
        let n = r.issue;
        self.tracker.edit_labels(n, &[], &[labels::PR_OPEN])?;
        self.tracker.close_merged(n)?;
        let now = crate::timeutil::now_epoch();
        self.change(n, |rec| {
            rec.state = PrState::Merged;
            rec.merged_epoch = Some(now);
            rec.failing = false;
        });
        self.event(
            Kind::PrMerged,
            n,
            format!("#{n} pull request {} merged into {}", r.name(), r.base),
        );
        Ok(())
    }

    /// Whether issue `n`'s spend reached `budget.usd_per_issue`.
    fn issue_budget_spent(&self, n: u64) -> bool {
        let Some(limit) = self.config.budget.usd_per_issue else {
            return false;
        };
        let records = crate::ledger::read(&self.layout, n).unwrap_or_default();
        // On a cluster, every host's spend of the issue (`budget::fleet_issue`).
        let spent = crate::budget::fleet_issue::spent(&self.layout, n, &records);
        crate::config::Usd::from_f64(spent.usd) >= limit
    }

    /// One locked change (on a cluster, a compare-and-swap) of issue `n`'s record; a failure
    /// is one line on stderr.
    fn change(&self, n: u64, mut f: impl FnMut(&mut PrRecord)) {
        let done = super::update(&self.layout, n, |rec| {
            let mut rec = rec?;
            f(&mut rec);
            Some(rec)
        });
        if let Err(e) = done {
            eprintln!("afk-supervisor: landing record of #{n}: {e}");
        }
    }

    fn event(&self, kind: Kind, n: u64, msg: String) {
        super::log_event(&self.layout, kind, n, msg, None);
    }
}

/// What a tracker call names a pull request by: the number at the end of a gh URL, else
/// the local id as it is.
pub fn pr_ref(url: &str) -> String {
    url.rsplit_once("/pull/")
        .map_or(url, |(_, n)| n.trim_end_matches('/'))
        .to_string()
}

/// The text after `word` when `body`'s first non-empty line starts with it (`/afk fix make
/// the test pass` → `make the test pass`, with the lines after it).
fn command(body: &str, word: &str) -> Option<String> {
    let body = body.trim_start();
    let rest = body.strip_prefix(word)?;
    if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
        return None;
    }
    Some(rest.trim().to_string())
}

/// The belt as a periodic task for the supervisor loop: each call is one pass, its line.
pub fn task(
    tracker: Arc<dyn Tracker>,
    layout: &Layout,
    config: &Config,
) -> impl FnMut() -> Result<String, String> + Send + use<> {
    let mut belt = Belt::new(tracker, layout, config);
    move || {
        let p = belt.pass();
        if p.failed.is_empty() {
            Ok(p.line())
        } else {
            Err(p.line())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_pr_refs() {
        assert_eq!(
            command("/afk fix make it pass", "/afk fix").as_deref(),
            Some("make it pass")
        );
        assert_eq!(
            command("  /afk fix\nline two", "/afk fix").as_deref(),
            Some("line two")
        );
        assert_eq!(command("/afk fixed it", "/afk fix"), None);
        assert_eq!(command("please /afk fix", "/afk fix"), None);
        assert_eq!(pr_ref("https://github.com/o/r/pull/12"), "12");
        assert_eq!(pr_ref("local-pr-3"), "local-pr-3");
    }
}
