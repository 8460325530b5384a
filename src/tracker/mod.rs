//! The issue tracker behind one interface (`docs/SPEC.md` §7): the `gh` CLI or the embedded `local`
//! store. Sweeps and the supervisor only ever see [`Tracker`], so every behaviour can be
//! exercised against the real local backend and against `gh` with a fake on `PATH`.

use std::fmt;

use serde::{Deserialize, Serialize};

pub mod gh;
pub mod gh_output;
pub mod gh_provenance;
pub mod gh_queue;
pub mod local;
pub mod pace;
pub mod provenance;
pub mod select;
pub mod trust;

pub use gh::GhTracker;
pub use local::LocalTracker;
pub use select::{SelectError, Selected, open};

pub mod labels {
    pub const READY_FOR_AGENT: &str = "ready-for-agent";
    pub const RUNNING: &str = "running";
    pub const READY_FOR_HUMAN: &str = "ready-for-human";
    pub const BLOCKED_DEPENDENCY: &str = "blocked:dependency";
    pub const NEEDS_TRIAGE: &str = "needs-triage";
    pub const NEEDS_INFO: &str = "needs-info";
    /// An issue whose attempts failed `worker.max_failed_attempts` times (`docs/SPEC.md` §11.10).
    pub const QUARANTINED: &str = "afk:quarantined";
    /// *(project, SPEC §11.20)* Held until a trusted `/afk approve`: never claimed.
    pub const NEEDS_APPROVAL: &str = "afk:needs-approval";
    /// An issue whose pull request the fleet opened and its landing belt watches
    /// (`docs/SPEC.md` §11.22); beside `ready-for-human`.
    pub const PR_OPEN: &str = "afk:pr-open";
    /// `req:<N>`: issue N blocks the labelled issue.
    pub const REQ_PREFIX: &str = "req:";

    /// A label the fleet writes, with what GitHub shows beside it when the fleet creates it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Label {
        pub name: &'static str,
        /// Six hex digits, no `#`.
        pub color: &'static str,
        pub description: &'static str,
    }

    /// Every label the fleet puts on an issue or a pull request: GitHub refuses to add a
    /// label a repository does not have, so the supervisor creates the missing ones at
    /// start (`docs/SPEC.md` §7). `blocked:dependency` and `req:<N>` are people's to apply.
    pub const FLEET: &[Label] = &[
        Label {
            name: READY_FOR_AGENT,
            color: "0e8a16",
            description: "An unattended agent may work this issue",
        },
        Label {
            name: RUNNING,
            color: "fbca04",
            description: "An agent of the fleet is working this issue",
        },
        Label {
            name: READY_FOR_HUMAN,
            color: "1d76db",
            description: "The fleet handed this to a person",
        },
        Label {
            name: NEEDS_TRIAGE,
            color: "d4c5f9",
            description: "Needs a person to triage it",
        },
        Label {
            name: NEEDS_INFO,
            color: "d4c5f9",
            description: "Needs more information",
        },
        Label {
            name: QUARANTINED,
            color: "b60205",
            description: "Its attempts kept failing: the fleet stopped trying",
        },
        Label {
            name: NEEDS_APPROVAL,
            color: "e99695",
            description: "Text from an untrusted hand: held until a trusted /afk approve",
        },
        Label {
            name: PR_OPEN,
            color: "5319e7",
            description: "The fleet opened a pull request for this issue and follows it",
        },
    ];
}

/// Whether a worker may claim an issue with these labels: `ready-for-agent` and none of
/// `running`, `blocked:dependency`, `afk:quarantined` and `afk:needs-approval`. The
/// worker's claim and the supervisor's queue count share it, so the supervisor never wakes
/// a slot for work no worker would take.
pub fn is_claimable(labels: &[String]) -> bool {
    let has = |want: &str| labels.iter().any(|l| l == want);
    has(labels::READY_FOR_AGENT)
        && !has(labels::RUNNING)
        && !has(labels::BLOCKED_DEPENDENCY)
        && !has(labels::QUARANTINED)
        && !has(labels::NEEDS_APPROVAL)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum IssueState {
    // Lower-case spellings are accepted because people hand-edit the local store.
    #[serde(alias = "open")]
    Open,
    #[serde(alias = "closed")]
    Closed,
}

impl fmt::Display for IssueState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IssueState::Open => "OPEN",
            IssueState::Closed => "CLOSED",
        })
    }
}

/// One row of the batch listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueSummary {
    pub number: u64,
    pub state: IssueState,
    pub labels: Vec<String>,
    /// RFC 3339, when closed.
    pub closed_at: Option<String>,
}

/// One issue as a single `view` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueView {
    pub state: IssueState,
    pub labels: Vec<String>,
}

/// One issue with its comments, as one `view` with comments reports it (SPEC §11.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueThread {
    pub state: IssueState,
    pub labels: Vec<String>,
    /// Oldest first, with the time the tracker stored each (epoch seconds) where known.
    pub comments: Vec<crate::claim::marks::Comment>,
}

impl IssueThread {
    pub fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }
}

/// An open issue listed by label with when it last changed (`updatedAt`), where known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub number: u64,
    pub updated_at: Option<String>,
}

/// An open issue listed by label, with its body (the unblock sweep reads `## Blocked by`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabeledIssue {
    pub number: u64,
    pub body: String,
    pub labels: Vec<String>,
    /// Known on the local backend; the `docs/SPEC.md` §7 gh argv does not ask for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

impl IssueSummary {
    pub fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }
}

impl IssueView {
    pub fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }
}

/// A pull request as the landing belt follows it (`docs/SPEC.md` §11.22).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrStatus {
    /// `OPEN`, `MERGED` or `CLOSED`.
    pub state: String,
    pub draft: bool,
    /// The head commit; `None` where the tracker does not say.
    pub head_sha: Option<String>,
    /// Reviews and conversation comments, oldest first.
    pub reviews: Vec<PrNote>,
    pub comments: Vec<PrNote>,
}

/// One review or comment of a pull request, or one comment of an issue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrNote {
    /// A key that stays the same across reads (the tracker's id, else the time and text).
    pub key: String,
    pub author: String,
    /// Whether its author may direct the fleet: the same rule as claim marks (SPEC §11.5).
    pub trusted: bool,
    pub body: String,
    /// A review's state (`CHANGES_REQUESTED`, `APPROVED`, `COMMENTED`); `None` for comments.
    pub state: Option<String>,
}

/// One check of a pull request, as `gh pr checks --json name,bucket,link` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrCheck {
    pub name: String,
    /// `pass`, `fail`, `pending`, `skipping` or `cancel`.
    pub bucket: String,
    pub link: Option<String>,
    /// The failure's log when the tracker carries it with the check (the local store).
    pub log: Option<String>,
}

impl PrCheck {
    pub fn failed(&self) -> bool {
        matches!(self.bucket.as_str(), "fail" | "cancel")
    }

    /// The GitHub Actions run of its link (`…/actions/runs/<id>/job/<job>`).
    pub fn run_id(&self) -> Option<&str> {
        let link = self.link.as_deref()?;
        let rest = &link[link.find("/actions/runs/")? + "/actions/runs/".len()..];
        let id = rest.split('/').next()?;
        (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then_some(id)
    }
}

/// How a failed tracker call failed. Only `NotFound` and `Failed` may ever lead to an
/// action; a `Transient` or `RateLimited` failure never leads to a deletion, label change
/// or comment. `RateLimited` (GitHub's primary or secondary rate limit) is kept apart
/// because retrying soon makes it worse: it is waited out, not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    NotFound,
    Transient,
    RateLimited,
    Failed,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::Transient => "transient",
            ErrorKind::RateLimited => "rate-limited",
            ErrorKind::Failed => "failed",
        })
    }
}

/// A failed tracker call: the kind, the command (argv for `gh`, operation for `local`) and
/// what the backend said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{command}: {kind}: {detail}")]
pub struct TrackerError {
    pub kind: ErrorKind,
    pub command: String,
    pub detail: String,
}

impl TrackerError {
    pub fn new(kind: ErrorKind, command: impl Into<String>, detail: impl Into<String>) -> Self {
        TrackerError {
            kind,
            command: command.into(),
            detail: detail.into(),
        }
    }

    /// A failure that may pass on a retry soon (network, timeout, 5xx).
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Transient
    }

    /// GitHub refused the call for its rate limit.
    pub fn is_rate_limited(&self) -> bool {
        self.kind == ErrorKind::RateLimited
    }
}

pub type TrackerResult<T> = Result<T, TrackerError>;

/// Default `--limit` of the batch listing.
pub const DEFAULT_LIST_LIMIT: usize = 5000;

/// The operations sweeps, the supervisor and the worker need. Implementations are
/// blocking and safe to share between threads.
pub trait Tracker: Send + Sync {
    /// `gh` or `local`.
    fn kind(&self) -> &'static str;

    /// A stable identity of the tracked project across checkouts: `github:OWNER/NAME` or
    /// `local:<canonical store path>`. Keys the unblock belt's host-wide lock.
    fn identity(&self) -> String;

    /// Every issue, open and closed, in one call.
    fn list_all(&self, limit: usize) -> TrackerResult<Vec<IssueSummary>>;

    /// One issue; `NotFound` when it does not exist.
    fn view(&self, number: u64) -> TrackerResult<IssueView>;

    /// Adds and removes labels in one call. Either list may be empty, not both.
    fn edit_labels(&self, number: u64, add: &[&str], remove: &[&str]) -> TrackerResult<()>;

    fn comment(&self, number: u64, body: &str) -> TrackerResult<()>;

    /// The bodies of issue `number`'s comments, oldest first (gh: `issue view N --json
    /// state,labels,comments`). A transition that writes a comment reads them first, so a
    /// comment already posted by an earlier, interrupted pass is not posted twice.
    fn comments(&self, number: u64) -> TrackerResult<Vec<String>>;

    /// State, labels and comments of one issue in one call (gh: `issue view N --json
    /// state,labels,comments`). The default asks [`Tracker::view`] and
    /// [`Tracker::comments`] and knows no comment times.
    fn thread(&self, number: u64) -> TrackerResult<IssueThread> {
        let v = self.view(number)?;
        let comments = self
            .comments(number)?
            .into_iter()
            .map(|body| crate::claim::marks::Comment { body, at: None })
            .collect();
        Ok(IssueThread {
            state: v.state,
            labels: v.labels,
            comments,
        })
    }

    /// Whether several checkouts share this tracker, so that a claim must be decided by
    /// marks on the issue (SPEC §11.5): `gh` yes, the per-checkout `local` store no.
    fn shared_across_checkouts(&self) -> bool {
        false
    }

    /// One page (from 1) of the ready queue, oldest first, asked with the ETag of the
    /// page's last answer: the cluster's steward (SPEC §11.23). `None` where the tracker
    /// has no conditional listing (the local store, which no other host reads).
    fn ready_page(
        &self,
        _page: usize,
        _etag: Option<&str>,
    ) -> TrackerResult<Option<gh_queue::Page>> {
        Ok(None)
    }

    /// Open issues carrying `label`, with their bodies.
    fn list_open_with_label(&self, label: &str, limit: usize) -> TrackerResult<Vec<LabeledIssue>>;

    /// Open issues carrying `label`, oldest (lowest number) first: the first `limit` of the
    /// whole queue in claim order, however many issues there are. The worker claims from it.
    fn list_open_with_label_oldest_first(
        &self,
        label: &str,
        limit: usize,
    ) -> TrackerResult<Vec<LabeledIssue>>;

    /// Opens a pull request from `head` into `base`; returns its URL or local id.
    /// Creates those of `wanted` the tracker does not have (a name compared without case,
    /// as GitHub does) and answers their names; a tracker without a label registry (the
    /// local store) has nothing to create.
    fn ensure_labels(&self, wanted: &[labels::Label]) -> TrackerResult<Vec<String>> {
        let _ = wanted;
        Ok(Vec::new())
    }

    fn pr_create(&self, base: &str, head: &str, title: &str, body: &str) -> TrackerResult<String>;

    /// Opens a finished issue's pull request (`docs/SPEC.md` §11.22), as a draft when
    /// `draft`; returns its URL or local id. The default opens it ready with
    /// [`Tracker::pr_create`] and refuses a draft.
    fn pr_open(
        &self,
        base: &str,
        head: &str,
        title: &str,
        body: &str,
        draft: bool,
    ) -> TrackerResult<String> {
        if draft {
            return Err(TrackerError::new(
                ErrorKind::Failed,
                format!("{} pr create --draft", self.kind()),
                "this tracker opens no draft pull requests",
            ));
        }
        self.pr_create(base, head, title, body)
    }

    /// Merges the pull request whose head is `head` and deletes the branch.
    fn pr_merge(&self, head: &str) -> TrackerResult<()>;

    /// Reads pull request `pr` (a number on gh, `local-pr-<K>` locally): its state, head,
    /// reviews and comments (`docs/SPEC.md` §11.22).
    fn pr_status(&self, pr: &str) -> TrackerResult<PrStatus>;

    /// Pull request `pr`'s checks; only the base branch's required ones when `required`.
    fn pr_checks(&self, pr: &str, required: bool) -> TrackerResult<Vec<PrCheck>>;

    /// The failed steps' log of CI run `run` (`gh run view <run> --log-failed`).
    fn run_failed_log(&self, run: &str) -> TrackerResult<String>;

    /// Asks for pull request `pr` to be merged by `method` once the repository's rules are
    /// met (`gh pr merge --auto`); the local store merges at once.
    fn pr_merge_auto(&self, pr: &str, method: crate::config::MergeMethod) -> TrackerResult<()>;

    /// Marks draft pull request `pr` ready for review (`gh pr ready`): a draft opened only
    /// because its checks failed, once a fix round made them pass (`docs/SPEC.md` §11.22).
    fn pr_ready(&self, pr: &str) -> TrackerResult<()>;

    /// Closes issue `number` after its pull request (`Closes #N`) merged. The default does
    /// nothing: GitHub closes it itself when the pull request lands on the default branch.
    fn close_merged(&self, number: u64) -> TrackerResult<()> {
        let _ = number;
        Ok(())
    }

    /// Comments on pull request `pr`.
    fn pr_comment(&self, pr: &str, body: &str) -> TrackerResult<()>;

    /// Adds `label` to pull request `pr`.
    fn pr_add_label(&self, pr: &str, label: &str) -> TrackerResult<()>;

    /// Issue `number`'s comments, each with whether its author may direct the fleet (the
    /// rule of claim marks). The default trusts every comment: the local store's are the
    /// checkout's own.
    fn trusted_comments(&self, number: u64) -> TrackerResult<(IssueThread, Vec<PrNote>)> {
        let t = self.thread(number)?;
        let notes = t
            .comments
            .iter()
            .map(|c| PrNote {
                key: note_key(c.at, &c.body),
                author: String::new(),
                trusted: true,
                body: c.body.clone(),
                state: None,
            })
            .collect();
        Ok((t, notes))
    }

    /// Leaves no open pull request whose head is `head`, once the caller has deleted (or
    /// tried to delete) that branch on `origin` because its landing failed. A merged one
    /// stays as it is. The default does nothing, which is right for GitHub: it closes a pull
    /// request by itself when its head branch is deleted, and `docs/SPEC.md` §7 has no `gh pr close`
    /// argv to call.
    fn pr_abandon(&self, head: &str) -> TrackerResult<()> {
        let _ = head;
        Ok(())
    }

    /// Open issues carrying `label`, each with when it last changed (a comment, an edit, a
    /// label), so a belt reads again only what changed. The default knows no times: every
    /// issue reads as changed.
    fn list_open_changed(&self, label: &str, limit: usize) -> TrackerResult<Vec<Changed>> {
        Ok(self
            .list_open_with_label(label, limit)?
            .into_iter()
            .map(|i| Changed {
                number: i.number,
                updated_at: None,
            })
            .collect())
    }

    /// Whether issue `number`'s text may reach an agent, and the text it may (SPEC §11.20).
    /// The default is for a tracker with no outsiders (the `local` store): every hand on
    /// it is the local user's, so the listing's text stands.
    fn vet(&self, number: u64) -> TrackerResult<provenance::Vetting> {
        let _ = number;
        Ok(provenance::Vetting::NoOutsiders)
    }
}

/// A stable key of a comment the tracker gives no id for: its time and an FNV-1a hash of
/// its text.
pub fn note_key(at: Option<u64>, body: &str) -> String {
    let h = body.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{}-{h:016x}", at.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_come_from_actions_links() {
        let c = |link: &str| PrCheck {
            link: Some(link.into()),
            ..PrCheck::default()
        };
        assert_eq!(
            c("https://github.com/o/r/actions/runs/123/job/456").run_id(),
            Some("123")
        );
        assert_eq!(c("https://ci.example/build/9").run_id(), None);
        assert_eq!(
            c("https://github.com/o/r/actions/runs/x1/job/4").run_id(),
            None
        );
        assert_ne!(note_key(Some(1), "a"), note_key(Some(1), "b"));
    }

    #[test]
    fn claimable_needs_ready_and_no_blocker() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(is_claimable(&l(&["ready-for-agent", "bug"])));
        assert!(!is_claimable(&l(&["bug"])));
        assert!(!is_claimable(&l(&["ready-for-agent", "afk:quarantined"])));
        assert!(!is_claimable(&l(&["ready-for-agent", "running"])));
        assert!(!is_claimable(&l(&[
            "ready-for-agent",
            "blocked:dependency",
            "req:99"
        ])));
    }
}
