//! The `local` backend: an issue tracker embedded in the repo, the default where there is no
//! GitHub. One TOML file per issue under `.red/state/tracker/issues/`, so a person can read
//! and fix an issue with an editor and a diff shows what changed.
//!
//! Several processes (the supervisor, its workers, an operator's `issue` command) write at
//! once, so every change is a read-modify-write under one exclusive `flock` on the store's
//! `lock` file, ending in an atomic rename: no update is lost and no reader sees a torn file.
//! Reads take a shared lock and never create anything, so a store that does not exist yet
//! reads as empty and a dry run leaves `.red/state/` untouched.
//! A file that does not parse is reported with its name and position and is never
//! overwritten, so a bad hand edit cannot cost data.
//!
//! Pull requests (the docs sweep's lane) are recorded beside the issues and landed by
//! fast-forwarding the base branch on `origin` with a plain `git push`; git itself refuses
//! anything that is not a fast-forward.

use std::fs::{self, File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{
    ErrorKind, IssueState, IssueSummary, IssueView, LabeledIssue, Tracker, TrackerError,
    TrackerResult,
};
use crate::cmd::RunError;
use crate::fsutil::{Links, atomic_write, open_lock_file, open_regular, read_small_text};
use crate::git::{Git, GitError};
use crate::layout::Layout;
use crate::text::{clip_quoted, line_col, one_line};
use crate::timeutil;

/// One comment on a local issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    /// RFC 3339 UTC.
    pub at: String,
    pub body: String,
}

/// A local issue as stored in `issues/<N>.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Issue {
    pub number: u64,
    pub title: String,
    pub state: IssueState,
    #[serde(default)]
    pub labels: Vec<String>,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC; absent while open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<String>,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub comments: Vec<Comment>,
    /// Keys a person or another tool added; kept as they are on every rewrite.
    #[serde(flatten)]
    pub extra: toml::Table,
}

impl Issue {
    pub fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PrState {
    #[serde(alias = "open")]
    Open,
    #[serde(alias = "merged")]
    Merged,
    /// Abandoned unmerged (its landing failed and its branch was deleted).
    #[serde(alias = "closed")]
    Closed,
}

/// A local pull request as stored in `prs/<K>.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PullRequest {
    pub id: u64,
    pub base: String,
    pub head: String,
    pub title: String,
    pub state: PrState,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_at: Option<String>,
    /// The commit `base` was fast-forwarded to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_sha: Option<String>,
    /// RFC 3339 UTC, when abandoned unmerged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<String>,
    #[serde(default)]
    pub body: String,
    /// Opened as a draft (`docs/SPEC.md` §11.22).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draft: bool,
    /// Its checks, as a local CI (or a person) records them: the local store's stand-in for
    /// GitHub's check runs (`docs/SPEC.md` §11.22).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<LocalCheck>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comments: Vec<Comment>,
}

/// One check of a local pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalCheck {
    pub name: String,
    /// `pass`, `fail`, `pending`, `skipping` or `cancel`, as `gh pr checks` buckets them.
    pub bucket: String,
    /// The failure's log (the end of it is what the agent is told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

impl PullRequest {
    /// The id `pr_create` returns, `local-pr-<K>`.
    pub fn local_id(&self) -> String {
        format!("local-pr-{}", self.id)
    }
}

/// Which issues `list` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateFilter {
    #[default]
    Open,
    Closed,
    All,
}

impl std::str::FromStr for StateFilter {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, UnknownState> {
        match s {
            "open" => Ok(StateFilter::Open),
            "closed" => Ok(StateFilter::Closed),
            "all" => Ok(StateFilter::All),
            other => Err(UnknownState(other.to_string())),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {0:?} (expected open, closed or all)")]
pub struct UnknownState(pub String);

/// The order issues are read in, by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Highest number first, as `issue list` (and gh) show them.
    #[default]
    NewestFirst,
    /// Lowest number first: the claim order.
    OldestFirst,
}

/// A listing filter: a state and labels that must all be present.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    pub state: StateFilter,
    pub labels: Vec<String>,
}

impl ListFilter {
    pub fn matches(&self, state: IssueState, labels: &[String]) -> bool {
        let state_ok = match self.state {
            StateFilter::Open => state == IssueState::Open,
            StateFilter::Closed => state == IssueState::Closed,
            StateFilter::All => true,
        };
        state_ok && self.labels.iter().all(|l| labels.contains(l))
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    #[serde(default = "one")]
    next_issue: u64,
    #[serde(default = "one")]
    next_pr: u64,
}

fn one() -> u64 {
    1
}

impl Default for Meta {
    fn default() -> Self {
        Meta {
            next_issue: 1,
            next_pr: 1,
        }
    }
}

/// How long a call waits for the store lock unless told otherwise (`tracker.timeout_s`).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// The embedded tracker over `.red/state/tracker/`.
#[derive(Debug, Clone)]
pub struct LocalTracker {
    dir: PathBuf,
    git: Git,
    lock_timeout: Duration,
}

impl LocalTracker {
    /// `git` is the repository whose `origin` pull requests land on.
    pub fn new(layout: &Layout, git: Git) -> Self {
        LocalTracker {
            dir: layout.tracker_dir(),
            git,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        }
    }

    /// How long one call waits for the store lock before it fails as transient, so a
    /// stopped holder (a process frozen with SIGSTOP, a hung editor hook) cannot freeze
    /// every sweep and worker behind it.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// The store directory, `.red/state/tracker/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn issue_file(&self, number: u64) -> PathBuf {
        self.dir.join("issues").join(format!("{number}.toml"))
    }

    pub fn pr_file(&self, id: u64) -> PathBuf {
        self.dir.join("prs").join(format!("{id}.toml"))
    }

    fn meta_file(&self) -> PathBuf {
        self.dir.join("meta.toml")
    }

    /// Opens a new issue and returns its number.
    pub fn create(&self, title: &str, body: &str, labels: &[&str]) -> TrackerResult<u64> {
        let op = "local issue create";
        if title.trim().is_empty() {
            return Err(failed(op, "the title is empty"));
        }
        check_labels(op, labels)?;
        let _lock = self.lock(op)?;
        let mut meta: Meta = read_toml(&self.meta_file(), op)?.unwrap_or_default();
        let highest = self.numbers("issues", op)?.into_iter().max().unwrap_or(0);
        let number = meta.next_issue.max(highest + 1).max(1);
        let mut issue = Issue {
            number,
            title: title.to_string(),
            state: IssueState::Open,
            labels: Vec::new(),
            created_at: now(),
            closed_at: None,
            body: body.to_string(),
            comments: Vec::new(),
            extra: toml::Table::new(),
        };
        add_labels(&mut issue.labels, labels);
        write_toml(&self.issue_file(number), &issue, op)?;
        meta.next_issue = number + 1;
        write_toml(&self.meta_file(), &meta, op)?;
        Ok(number)
    }

    pub fn close(&self, number: u64) -> TrackerResult<()> {
        self.update(number, "close", |i| {
            if i.state == IssueState::Open {
                i.state = IssueState::Closed;
                i.closed_at = Some(now());
            }
            Ok(())
        })
    }

    pub fn reopen(&self, number: u64) -> TrackerResult<()> {
        self.update(number, "reopen", |i| {
            i.state = IssueState::Open;
            i.closed_at = None;
            Ok(())
        })
    }

    /// The whole issue, with its body and comments.
    pub fn show(&self, number: u64) -> TrackerResult<Issue> {
        let op = format!("local issue view {number}");
        let _lock = self.lock_shared(&op)?;
        self.read_issue(number, &op)
    }

    /// Issues matching `filter`, newest (highest number) first.
    pub fn list(&self, filter: &ListFilter) -> TrackerResult<Vec<Issue>> {
        Ok(self
            .all_issues("local issue list")?
            .into_iter()
            .filter(|i| filter.matches(i.state, &i.labels))
            .collect())
    }

    /// Every recorded pull request, oldest first.
    pub fn pull_requests(&self) -> TrackerResult<Vec<PullRequest>> {
        let op = "local pr list";
        let _lock = self.lock_shared(op)?;
        self.read_prs(op)
    }

    // ---- storage ----

    fn lock_path(&self) -> PathBuf {
        self.dir.join("lock")
    }

    /// The store's exclusive lock, held for one read-modify-write; released on drop. The
    /// store is created on the first write.
    fn lock(&self, op: &str) -> TrackerResult<File> {
        fs::create_dir_all(&self.dir).map_err(|e| io_failed(op, &self.dir, e))?;
        let path = self.lock_path();
        let f = open_lock_file(&path).map_err(|e| io_failed(op, &path, e.into()))?;
        self.wait_for_lock(&f, false, &path, op)?;
        Ok(f)
    }

    /// A shared lock, so a listing sees every issue as of one moment. Reading never
    /// creates anything (a dry run must leave `.red/state/` as it is): without a lock file
    /// no writer has ever finished, so there is nothing to wait for and `None` is returned.
    fn lock_shared(&self, op: &str) -> TrackerResult<Option<File>> {
        let path = self.lock_path();
        let mut opts = File::options();
        opts.read(true);
        let f = match open_regular(&path, opts, Links::Refuse) {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            Err(e) => return Err(io_failed(op, &path, e.into())),
        };
        self.wait_for_lock(&f, true, &path, op)?;
        Ok(Some(f))
    }

    /// Polls for the lock with a short backoff until the timeout, then gives up with a
    /// transient error: the holder may finish, so nothing must act on it as a verdict.
    fn wait_for_lock(&self, f: &File, shared: bool, path: &Path, op: &str) -> TrackerResult<()> {
        let deadline = timeutil::deadline(Instant::now(), self.lock_timeout);
        let mut pause = Duration::from_millis(1);
        loop {
            let attempt = if shared {
                f.try_lock_shared()
            } else {
                f.try_lock()
            };
            match attempt {
                Ok(()) => return Ok(()),
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(io_failed(op, path, e)),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(TrackerError::new(
                    ErrorKind::Transient,
                    op,
                    format!(
                        "{}: still held by another process after {}s",
                        path.display(),
                        self.lock_timeout.as_secs_f64()
                    ),
                ));
            }
            thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Numbers of the `<K>.toml` files in `sub` (`issues` or `prs`); anything else there
    /// (a `.tmp` left by a crash, an editor's backup) is ignored.
    fn numbers(&self, sub: &str, op: &str) -> TrackerResult<Vec<u64>> {
        let dir = self.dir.join(sub);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_failed(op, &dir, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_failed(op, &dir, e))?;
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".toml")) else {
                continue;
            };
            let canonical = !stem.starts_with('0') && stem.bytes().all(|b| b.is_ascii_digit());
            if let (true, Ok(n)) = (canonical, stem.parse::<u64>()) {
                out.push(n);
            }
        }
        Ok(out)
    }

    fn read_issue(&self, number: u64, op: &str) -> TrackerResult<Issue> {
        let path = self.issue_file(number);
        let issue: Issue = read_toml(&path, op)?.ok_or_else(|| {
            TrackerError::new(
                ErrorKind::NotFound,
                op,
                format!("no issue #{number} in {}", self.dir.display()),
            )
        })?;
        if issue.number != number {
            return Err(failed(
                op,
                format!(
                    "{}: says number = {} but the file is named for #{number}",
                    path.display(),
                    issue.number
                ),
            ));
        }
        Ok(issue)
    }

    fn all_issues(&self, op: &str) -> TrackerResult<Vec<Issue>> {
        self.issues_in_order(op, Order::NewestFirst, usize::MAX, |_| true)
    }

    /// The first `limit` issues in `order` that `keep` accepts; files past them are not
    /// read, so the oldest few of a 10,000-issue store cost a few reads.
    fn issues_in_order(
        &self,
        op: &str,
        order: Order,
        limit: usize,
        keep: impl Fn(&Issue) -> bool,
    ) -> TrackerResult<Vec<Issue>> {
        let _lock = self.lock_shared(op)?;
        let mut numbers = self.numbers("issues", op)?;
        match order {
            Order::NewestFirst => numbers.sort_unstable_by(|a, b| b.cmp(a)),
            Order::OldestFirst => numbers.sort_unstable(),
        }
        let mut out = Vec::new();
        for n in numbers {
            if out.len() >= limit {
                break;
            }
            match self.read_issue(n, op) {
                Ok(i) if keep(&i) => out.push(i),
                Ok(_) => {}
                // Removed between the listing and the read: it is simply not there.
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    fn read_prs(&self, op: &str) -> TrackerResult<Vec<PullRequest>> {
        let mut ids = self.numbers("prs", op)?;
        ids.sort_unstable();
        let mut out = Vec::new();
        for id in ids {
            if let Some(pr) = read_toml::<PullRequest>(&self.pr_file(id), op)? {
                out.push(pr);
            }
        }
        Ok(out)
    }

    /// One locked read-modify-write of issue `number`; nothing is written when `change`
    /// fails.
    fn update(
        &self,
        number: u64,
        what: &str,
        change: impl FnOnce(&mut Issue) -> TrackerResult<()>,
    ) -> TrackerResult<()> {
        let op = format!("local issue {what} {number}");
        let _lock = self.lock(&op)?;
        let mut issue = self.read_issue(number, &op)?;
        change(&mut issue)?;
        write_toml(&self.issue_file(number), &issue, &op)
    }

    /// The pull request `local-pr-<K>` names.
    fn local_pr(&self, pr: &str) -> TrackerResult<PullRequest> {
        let op = format!("local pr view {pr}");
        let id = pr
            .strip_prefix("local-pr-")
            .and_then(crate::layout::parse_positive)
            .ok_or_else(|| failed(&op, format!("{pr:?} is not a local pull request id")))?;
        let _lock = self.lock_shared(&op)?;
        read_toml(&self.pr_file(id), &op)?.ok_or_else(|| {
            TrackerError::new(ErrorKind::NotFound, op, format!("no pull request {pr}"))
        })
    }

    /// One locked read-modify-write of pull request `pr`.
    fn update_pr(&self, pr: &str, change: impl FnOnce(&mut PullRequest)) -> TrackerResult<()> {
        let mut p = self.local_pr(pr)?;
        let op = format!("local pr edit {pr}");
        let _lock = self.lock(&op)?;
        p = read_toml(&self.pr_file(p.id), &op)?.unwrap_or(p);
        change(&mut p);
        write_toml(&self.pr_file(p.id), &p, &op)
    }

    fn git_err(&self, e: GitError) -> TrackerError {
        match e {
            GitError::Run(RunError::Timeout { argv, timeout, .. }) => TrackerError::new(
                ErrorKind::Transient,
                argv.to_string(),
                format!("timed out after {}s and was killed", timeout.as_secs_f64()),
            ),
            GitError::Run(e @ RunError::TooLarge { .. }) => {
                TrackerError::new(ErrorKind::Transient, "git", e.to_string())
            }
            GitError::Run(RunError::Spawn { argv, source }) => {
                TrackerError::new(ErrorKind::Failed, argv.to_string(), source.to_string())
            }
            GitError::Failed { argv, code, stderr } => TrackerError::new(
                ErrorKind::Failed,
                argv,
                format!("exit {code}: {}", one_line(&stderr)),
            ),
            GitError::Parse { argv, what } => TrackerError::new(ErrorKind::Failed, argv, what),
            // A lock still held when the wait ran out: someone else is busy, try again later.
            e @ GitError::Lock { .. } => {
                TrackerError::new(ErrorKind::Transient, "git", e.to_string())
            }
            // Raised by the git layer's typed operations, never by `Git::run`.
            other @ (GitError::BadName { .. } | GitError::PartialDelete { .. }) => {
                TrackerError::new(ErrorKind::Failed, "git", other.to_string())
            }
        }
    }

    /// Which of `refs` exist on `origin`, by asking `origin` itself rather than trusting a
    /// possibly stale remote-tracking ref.
    fn remote_heads(&self, branches: &[&str]) -> TrackerResult<Vec<String>> {
        let mut args = vec!["ls-remote".to_string(), "origin".to_string()];
        args.extend(branches.iter().map(|b| format!("refs/heads/{b}")));
        let out = self.git.run(&args).map_err(|e| self.git_err(e))?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter_map(|r| r.strip_prefix("refs/heads/"))
            .map(str::to_string)
            .collect())
    }
}

fn now() -> String {
    timeutil::rfc3339(SystemTime::now())
}

fn failed(op: impl Into<String>, detail: impl Into<String>) -> TrackerError {
    TrackerError::new(ErrorKind::Failed, op, detail)
}

fn io_failed(op: &str, path: &Path, e: io::Error) -> TrackerError {
    failed(op, format!("{}: {e}", path.display()))
}

fn check_labels(op: &str, labels: &[&str]) -> TrackerResult<()> {
    for l in labels {
        if l.trim().is_empty() || l.contains(',') || l.contains('\n') {
            return Err(failed(
                op,
                format!("invalid label {l:?}: labels must be non-empty and contain no comma"),
            ));
        }
    }
    Ok(())
}

fn add_labels(labels: &mut Vec<String>, add: &[&str]) {
    for l in add {
        if !labels.iter().any(|x| x == l) {
            labels.push(l.to_string());
        }
    }
}

/// Largest issue, PR or meta file read (an issue with a long discussion stays far below).
const MAX_RECORD_BYTES: u64 = 16 << 20;

/// Reads a TOML file (safely: see [`read_small_text`]); `None` when it does not exist. A parse error names the file, line and
/// column in one line.
fn read_toml<T: DeserializeOwned>(path: &Path, op: &str) -> TrackerResult<Option<T>> {
    let text = match read_small_text(path, MAX_RECORD_BYTES) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) => return Err(io_failed(op, path, e.into())),
    };
    parse_toml(&text).map(Some).map_err(|e| {
        failed(
            op,
            format!(
                "{}:{e} (fix or remove the file; it was left unchanged)",
                path.display()
            ),
        )
    })
}

/// One of the store's TOML records read from its text: the value, or `LINE:COL: reason` on
/// one line.
fn parse_toml<T: DeserializeOwned>(text: &str) -> Result<T, RecordError> {
    toml::from_str(text).map_err(|e| {
        let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
        RecordError {
            line,
            col,
            reason: clip_quoted(e.message().trim()),
        }
    })
}

/// A store record whose TOML does not parse: where, and why (clipped to one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: {reason}")]
pub struct RecordError {
    pub line: usize,
    pub col: usize,
    pub reason: String,
}

/// An issue file (`issues/<N>.toml`) read from its text (pure, for tests and fuzzing).
pub fn parse_issue(text: &str) -> Result<Issue, RecordError> {
    parse_toml(text)
}

/// A pull-request file (`prs/<N>.toml`) read from its text.
pub fn parse_pull_request(text: &str) -> Result<PullRequest, RecordError> {
    parse_toml(text)
}

/// `meta.toml` read from its text: the next issue and pull-request numbers.
pub fn parse_meta(text: &str) -> Result<(u64, u64), RecordError> {
    parse_toml::<Meta>(text).map(|m| (m.next_issue, m.next_pr))
}

fn write_toml<T: Serialize>(path: &Path, value: &T, op: &str) -> TrackerResult<()> {
    let text = toml::to_string(value)
        .map_err(|e| failed(op, format!("{}: cannot encode: {e}", path.display())))?;
    atomic_write(path, text.as_bytes()).map_err(|e| io_failed(op, path, e))
}

/// The canonical form of `path`, resolving its longest existing ancestor, so the identity is
/// the same before and after the store is first written.
fn canonical(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = path.to_path_buf();
    loop {
        if let Ok(c) = fs::canonicalize(&cur) {
            return rest.iter().rev().fold(c, |acc: PathBuf, p| acc.join(p));
        }
        match (cur.file_name().map(|n| n.to_os_string()), cur.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                cur = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

impl LocalTracker {
    /// Open issues carrying `label`, the first `limit` in `order`.
    fn labeled(&self, label: &str, limit: usize, order: Order) -> TrackerResult<Vec<LabeledIssue>> {
        let open_with_label = |i: &Issue| i.state == IssueState::Open && i.has_label(label);
        Ok(self
            .issues_in_order("local issue list", order, limit, open_with_label)?
            .into_iter()
            .map(|i| LabeledIssue {
                number: i.number,
                body: i.body,
                labels: i.labels,
                title: Some(i.title),
            })
            .collect())
    }
}

impl Tracker for LocalTracker {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn identity(&self) -> String {
        format!("local:{}", canonical(&self.dir).display())
    }

    fn list_all(&self, limit: usize) -> TrackerResult<Vec<IssueSummary>> {
        Ok(self
            .all_issues("local issue list")?
            .into_iter()
            .take(limit)
            .map(|i| IssueSummary {
                number: i.number,
                state: i.state,
                labels: i.labels,
                closed_at: i.closed_at,
            })
            .collect())
    }

    fn view(&self, number: u64) -> TrackerResult<IssueView> {
        let i = self.show(number)?;
        Ok(IssueView {
            state: i.state,
            labels: i.labels,
        })
    }

    fn edit_labels(&self, number: u64, add: &[&str], remove: &[&str]) -> TrackerResult<()> {
        let op = format!("local issue edit {number}");
        if add.is_empty() && remove.is_empty() {
            return Err(failed(op, "no label to add or remove"));
        }
        check_labels(&op, add)?;
        check_labels(&op, remove)?;
        // As on GitHub, a label both added and removed ends up removed.
        self.update(number, "edit", |i| {
            add_labels(&mut i.labels, add);
            i.labels.retain(|l| !remove.contains(&l.as_str()));
            Ok(())
        })
    }

    fn comment(&self, number: u64, body: &str) -> TrackerResult<()> {
        if body.trim().is_empty() {
            return Err(failed(
                format!("local issue comment {number}"),
                "the comment body is empty",
            ));
        }
        self.update(number, "comment", |i| {
            i.comments.push(Comment {
                at: now(),
                body: body.to_string(),
            });
            Ok(())
        })
    }

    fn comments(&self, number: u64) -> TrackerResult<Vec<String>> {
        Ok(self
            .show(number)?
            .comments
            .into_iter()
            .map(|c| c.body)
            .collect())
    }

    fn list_open_with_label(&self, label: &str, limit: usize) -> TrackerResult<Vec<LabeledIssue>> {
        self.labeled(label, limit, Order::NewestFirst)
    }

    fn list_open_with_label_oldest_first(
        &self,
        label: &str,
        limit: usize,
    ) -> TrackerResult<Vec<LabeledIssue>> {
        self.labeled(label, limit, Order::OldestFirst)
    }

    fn pr_create(&self, base: &str, head: &str, title: &str, body: &str) -> TrackerResult<String> {
        self.pr_open(base, head, title, body, false)
    }

    fn pr_open(
        &self,
        base: &str,
        head: &str,
        title: &str,
        body: &str,
        draft: bool,
    ) -> TrackerResult<String> {
        let op = format!("local pr create --base {base} --head {head}");
        if base == head {
            return Err(failed(op, "base and head are the same branch"));
        }
        let present = self.remote_heads(&[base, head])?;
        for b in [base, head] {
            if !present.iter().any(|p| p == b) {
                return Err(failed(op, format!("branch {b} does not exist on origin")));
            }
        }
        let _lock = self.lock(&op)?;
        let prs = self.read_prs(&op)?;
        if let Some(p) = prs
            .iter()
            .find(|p| p.state == PrState::Open && p.head == head && p.base == base)
        {
            return Err(failed(
                op,
                format!(
                    "a pull request for branch {head} into branch {base} already exists: {}",
                    p.local_id()
                ),
            ));
        }
        let mut meta: Meta = read_toml(&self.meta_file(), &op)?.unwrap_or_default();
        let highest = prs.iter().map(|p| p.id).max().unwrap_or(0);
        let id = meta.next_pr.max(highest + 1).max(1);
        let pr = PullRequest {
            id,
            base: base.to_string(),
            head: head.to_string(),
            title: title.to_string(),
            state: PrState::Open,
            created_at: now(),
            merged_at: None,
            merged_sha: None,
            closed_at: None,
            body: body.to_string(),
            draft,
            checks: Vec::new(),
            labels: Vec::new(),
            comments: Vec::new(),
        };
        write_toml(&self.pr_file(id), &pr, &op)?;
        meta.next_pr = id + 1;
        write_toml(&self.meta_file(), &meta, &op)?;
        Ok(pr.local_id())
    }

    /// Lands the open pull request whose head is `head`: `base` on `origin` is moved to the
    /// head's commit without force, so git refuses a non-fast-forward and nothing is lost;
    /// then the head branch is deleted on `origin`. The git work runs outside the store lock
    /// so a slow remote never blocks issue updates.
    fn pr_merge(&self, head: &str) -> TrackerResult<()> {
        let op = format!("local pr merge {head}");
        let pr = {
            let _lock = self.lock_shared(&op)?;
            self.read_prs(&op)?
                .into_iter()
                .rfind(|p| p.state == PrState::Open && p.head == head)
        };
        let Some(pr) = pr else {
            return Err(TrackerError::new(
                ErrorKind::NotFound,
                op,
                format!("no open pull request for branch {head:?}"),
            ));
        };
        let tracking = format!("refs/remotes/origin/{head}");
        self.git
            .run(&[
                "fetch",
                "--quiet",
                "origin",
                &format!("+refs/heads/{head}:{tracking}"),
            ])
            .map_err(|e| self.git_err(e))?;
        let sha = self
            .git
            .run(&["rev-parse", "--verify", &format!("{tracking}^{{commit}}")])
            .map_err(|e| self.git_err(e))?
            .trim()
            .to_string();
        self.git
            .run(&["push", "origin", &format!("{sha}:refs/heads/{}", pr.base)])
            .map_err(|e| self.git_err(e))?;
        {
            let _lock = self.lock(&op)?;
            let path = self.pr_file(pr.id);
            let mut current: PullRequest = read_toml(&path, &op)?.unwrap_or(pr);
            current.state = PrState::Merged;
            current.merged_at = Some(now());
            current.merged_sha = Some(sha.clone());
            write_toml(&path, &current, &op)?;
        }
        self.git
            .run(&["push", "origin", "--delete", head])
            .map_err(|e| {
                let mut err = self.git_err(e);
                err.detail = format!(
                    "landed {sha}, but deleting the branch failed: {}",
                    err.detail
                );
                err
            })?;
        Ok(())
    }

    fn pr_status(&self, pr: &str) -> TrackerResult<super::PrStatus> {
        let p = self.local_pr(pr)?;
        Ok(super::PrStatus {
            state: match p.state {
                PrState::Open => "OPEN",
                PrState::Merged => "MERGED",
                PrState::Closed => "CLOSED",
            }
            .into(),
            draft: p.draft,
            head_sha: None,
            reviews: Vec::new(),
            comments: p
                .comments
                .iter()
                .map(|c| super::PrNote {
                    key: super::note_key(
                        timeutil::parse_rfc3339(&c.at).map(timeutil::epoch_secs),
                        &c.body,
                    ),
                    author: String::new(),
                    trusted: true,
                    body: c.body.clone(),
                    state: None,
                })
                .collect(),
        })
    }

    /// Every check the record carries: the local store has no notion of required ones.
    fn pr_checks(&self, pr: &str, _required: bool) -> TrackerResult<Vec<super::PrCheck>> {
        Ok(self
            .local_pr(pr)?
            .checks
            .into_iter()
            .map(|c| super::PrCheck {
                name: c.name,
                bucket: c.bucket,
                link: None,
                log: c.log,
            })
            .collect())
    }

    fn run_failed_log(&self, run: &str) -> TrackerResult<String> {
        Err(failed(
            format!("local run view {run}"),
            "the local tracker has no CI runs: a local check carries its log",
        ))
    }

    /// Merges at once: the base on `origin` moves, never forced, to the head (a merge
    /// commit for `merge` when the head does not contain the base, a squashed commit for
    /// `squash` and `rebase`), computed with `git merge-tree` so no worktree is touched; a
    /// conflict is refused and nothing moves.
    fn pr_merge_auto(&self, pr: &str, method: crate::config::MergeMethod) -> TrackerResult<()> {
        let p = self.local_pr(pr)?;
        let op = format!("local pr merge {pr}");
        if p.state != PrState::Open {
            return Err(failed(op, format!("{pr} is not open")));
        }
        let track = |b: &str| format!("refs/remotes/origin/{b}");
        self.git
            .run(&[
                "fetch",
                "--quiet",
                "origin",
                &format!("+refs/heads/{}:{}", p.base, track(&p.base)),
                &format!("+refs/heads/{}:{}", p.head, track(&p.head)),
            ])
            .map_err(|e| self.git_err(e))?;
        let sha = |r: &str| -> TrackerResult<String> {
            Ok(self
                .git
                .run(&["rev-parse", "--verify", &format!("{r}^{{commit}}")])
                .map_err(|e| self.git_err(e))?
                .trim()
                .to_string())
        };
        let (base, head) = (sha(&track(&p.base))?, sha(&track(&p.head))?);
        let contains = self
            .git
            .is_ancestor(&base, &head)
            .map_err(|e| self.git_err(e))?;
        let landed = if contains && method != crate::config::MergeMethod::Squash {
            head.clone()
        } else {
            let tree = self
                .git
                .run(&["merge-tree", "--write-tree", &base, &head])
                .map_err(|e| {
                    let mut err = self.git_err(e);
                    err.detail = format!(
                        "merging {} into {} conflicts: {}",
                        p.head, p.base, err.detail
                    );
                    err
                })?;
            let tree = tree.lines().next().unwrap_or_default().trim().to_string();
            let message = format!("{} ({})\n\n{}", p.title, p.local_id(), p.body.trim());
            let mut args = vec![
                "-c".to_string(),
                format!("user.name={}", crate::git::FLEET_NAME),
                "-c".into(),
                format!("user.email={}", crate::git::FLEET_EMAIL),
                "commit-tree".into(),
                tree,
                "-p".into(),
                base.clone(),
            ];
            if method == crate::config::MergeMethod::Merge {
                args.extend(["-p".into(), head.clone()]);
            }
            args.extend(["-m".into(), message]);
            self.git
                .run(&args)
                .map_err(|e| self.git_err(e))?
                .trim()
                .to_string()
        };
        self.git
            .run(&[
                "push",
                "--quiet",
                "origin",
                &format!("{landed}:refs/heads/{}", p.base),
            ])
            .map_err(|e| self.git_err(e))?;
        {
            let _lock = self.lock(&op)?;
            let path = self.pr_file(p.id);
            let mut current: PullRequest = read_toml(&path, &op)?.unwrap_or(p.clone());
            current.state = PrState::Merged;
            current.merged_at = Some(now());
            current.merged_sha = Some(landed.clone());
            write_toml(&path, &current, &op)?;
        }
        // The head branch is the branch reaper's once the issue is closed; deleting it here
        // is a courtesy that may fail.
        let _ = self
            .git
            .run(&["push", "--quiet", "origin", "--delete", &p.head]);
        Ok(())
    }

    /// The local store has no `Closes #N` automation: the merge closes the issue here.
    fn close_merged(&self, number: u64) -> TrackerResult<()> {
        self.close(number)
    }

    /// The draft flag off; refused on a pull request that is not open.
    fn pr_ready(&self, pr: &str) -> TrackerResult<()> {
        if self.local_pr(pr)?.state != PrState::Open {
            return Err(failed(
                format!("local pr ready {pr}"),
                format!("{pr} is not open"),
            ));
        }
        self.update_pr(pr, |p| p.draft = false)
    }

    fn pr_comment(&self, pr: &str, body: &str) -> TrackerResult<()> {
        self.update_pr(pr, |p| {
            p.comments.push(Comment {
                at: now(),
                body: body.to_string(),
            })
        })
    }

    fn pr_add_label(&self, pr: &str, label: &str) -> TrackerResult<()> {
        check_labels(&format!("local pr edit {pr}"), &[label])?;
        self.update_pr(pr, |p| add_labels(&mut p.labels, &[label]))
    }

    /// Marks every open pull request whose head is `head` closed. A store with none (or no
    /// store at all) is left untouched: the exclusive lock, which creates the store, is only
    /// taken when there is something to close.
    fn pr_abandon(&self, head: &str) -> TrackerResult<()> {
        let op = format!("local pr abandon {head}");
        let open = |p: &PullRequest| p.state == PrState::Open && p.head == head;
        {
            let _lock = self.lock_shared(&op)?;
            if !self.read_prs(&op)?.iter().any(open) {
                return Ok(());
            }
        }
        let _lock = self.lock(&op)?;
        for mut pr in self.read_prs(&op)?.into_iter().filter(|p| open(p)) {
            pr.state = PrState::Closed;
            pr.closed_at = Some(now());
            write_toml(&self.pr_file(pr.id), &pr, &op)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker() -> (tempfile::TempDir, LocalTracker) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let t = LocalTracker::new(&layout, Git::new(dir.path()));
        (dir, t)
    }

    #[test]
    fn round_trip_keeps_hand_added_keys_and_multiline_bodies() {
        let (_d, t) = tracker();
        let n = t.create("First", "line one\nline two\n", &["a"]).unwrap();
        assert_eq!(n, 1);
        let path = t.issue_file(n);
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("title = \"First\""), "{text}");
        let text = text.replace("title = \"First\"", "title = \"First\"\nassignee = \"ann\"");
        fs::write(&path, text).unwrap();
        t.edit_labels(n, &["b"], &["a"]).unwrap();
        t.comment(n, "hello\nthere").unwrap();
        let i = t.show(n).unwrap();
        assert_eq!(i.labels, vec!["b"]);
        assert_eq!(i.body, "line one\nline two\n");
        assert_eq!(i.comments.len(), 1);
        assert_eq!(
            i.extra.get("assignee").and_then(|v| v.as_str()),
            Some("ann")
        );
    }

    #[test]
    fn a_broken_file_is_named_and_left_alone() {
        let (_d, t) = tracker();
        let n = t.create("x", "", &[]).unwrap();
        let path = t.issue_file(n);
        fs::write(&path, "number = 1\ntitle = \n").unwrap();
        let e = t.edit_labels(n, &["a"], &[]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Failed);
        assert!(e.detail.contains(&format!("{}:2:", path.display())), "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "number = 1\ntitle = \n");
        assert!(t.list_all(10).is_err());
    }

    #[test]
    fn lower_case_state_and_renumbered_file_are_handled() {
        let (_d, t) = tracker();
        let n = t.create("x", "", &[]).unwrap();
        let path = t.issue_file(n);
        let text = fs::read_to_string(&path)
            .unwrap()
            .replace("\"OPEN\"", "\"closed\"");
        fs::write(&path, &text).unwrap();
        assert_eq!(t.view(n).unwrap().state, IssueState::Closed);
        fs::write(&path, text.replace("number = 1", "number = 7")).unwrap();
        let e = t.view(n).unwrap_err();
        assert!(e.detail.contains("says number = 7"), "{e}");
    }

    #[test]
    fn numbers_are_never_reused_and_stray_files_are_ignored() {
        let (_d, t) = tracker();
        assert_eq!(t.create("a", "", &[]).unwrap(), 1);
        assert_eq!(t.create("b", "", &[]).unwrap(), 2);
        fs::remove_file(t.issue_file(2)).unwrap();
        assert_eq!(t.create("c", "", &[]).unwrap(), 3);
        fs::write(t.dir().join("issues/3.toml.tmp"), "garbage").unwrap();
        fs::write(t.dir().join("issues/03.toml"), "garbage").unwrap();
        fs::write(t.dir().join("issues/notes.txt"), "garbage").unwrap();
        let nums: Vec<u64> = t.list_all(10).unwrap().iter().map(|i| i.number).collect();
        assert_eq!(nums, vec![3, 1]);
    }

    #[test]
    fn identity_is_stable_before_and_after_first_write() {
        let (_d, t) = tracker();
        let before = t.identity();
        t.create("a", "", &[]).unwrap();
        assert_eq!(before, t.identity());
        assert!(before.starts_with("local:/"), "{before}");
        assert!(before.ends_with(".red/state/tracker"), "{before}");
    }

    #[test]
    fn abandoning_closes_only_open_prs_of_that_head() {
        let (_d, t) = tracker();
        let pr = |id, head: &str, state| PullRequest {
            id,
            base: "main".into(),
            head: head.into(),
            title: format!("pr {id}"),
            state,
            created_at: now(),
            merged_at: None,
            merged_sha: None,
            closed_at: None,
            body: String::new(),
            draft: false,
            checks: Vec::new(),
            labels: Vec::new(),
            comments: Vec::new(),
        };
        t.create("seed", "", &[]).unwrap();
        for p in [
            pr(1, "lane/a", PrState::Merged),
            pr(2, "lane/a", PrState::Open),
            pr(3, "lane/b", PrState::Open),
        ] {
            write_toml(&t.pr_file(p.id), &p, "test").unwrap();
        }
        t.pr_abandon("lane/a").unwrap();
        let states: Vec<_> = t
            .pull_requests()
            .unwrap()
            .into_iter()
            .map(|p| (p.id, p.state, p.closed_at.is_some()))
            .collect();
        assert_eq!(
            states,
            [
                (1, PrState::Merged, false),
                (2, PrState::Closed, true),
                (3, PrState::Open, false)
            ]
        );
        assert!(
            fs::read_to_string(t.pr_file(2))
                .unwrap()
                .contains("state = \"CLOSED\"")
        );
    }

    #[test]
    fn reading_a_store_that_does_not_exist_creates_nothing() {
        let (d, t) = tracker();
        assert!(t.list_all(10).unwrap().is_empty());
        assert!(t.list_open_with_label("running", 10).unwrap().is_empty());
        assert_eq!(t.view(1).unwrap_err().kind, ErrorKind::NotFound);
        assert!(t.pull_requests().unwrap().is_empty());
        assert_eq!(
            t.pr_merge("docs-sweep/x").unwrap_err().kind,
            ErrorKind::NotFound
        );
        t.pr_abandon("docs-sweep/x").unwrap();
        assert!(!d.path().join(".red").exists());
        // The first write creates the store; reads then take the shared lock.
        let n = t.create("a", "", &[]).unwrap();
        assert!(t.lock_path().exists());
        assert_eq!(t.list_all(10).unwrap().len(), 1);
        assert_eq!(t.view(n).unwrap().state, IssueState::Open);
    }

    /// Runs `f` on another thread; `None` when it has not returned within a minute (a
    /// call blocked on the lock for good).
    fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60)).ok()
    }

    #[test]
    fn a_lock_held_too_long_is_a_transient_error_naming_the_lock_file() {
        let (_d, t) = tracker();
        let n = t.create("a", "", &[]).unwrap();
        let t = t.with_timeout(Duration::from_millis(200));
        // Another open file description: flock conflicts with it as with another process.
        let holder = File::options().write(true).open(t.lock_path()).unwrap();
        holder.lock().unwrap();
        let (w, r) = (t.clone(), t.clone());
        let write = within_a_minute(move || w.edit_labels(n, &["x"], &[]))
            .expect("the write waited for the lock for good");
        let read = within_a_minute(move || r.list_all(10)).expect("the read waited for good");
        for e in [write.unwrap_err(), read.unwrap_err()] {
            assert_eq!(e.kind, ErrorKind::Transient, "{e}");
            assert!(
                e.detail.contains(&t.lock_path().display().to_string()),
                "{e}"
            );
        }
        assert!(t.show(n).is_err());
        drop(holder);
        t.edit_labels(n, &["x"], &[]).unwrap();
        assert_eq!(t.show(n).unwrap().labels, vec!["x"]);
    }

    #[test]
    fn filters() {
        let (_d, t) = tracker();
        let a = t.create("a", "", &["x", "y"]).unwrap();
        let b = t.create("b", "", &["x"]).unwrap();
        t.close(b).unwrap();
        let f = |state, labels: &[&str]| ListFilter {
            state,
            labels: labels.iter().map(|s| s.to_string()).collect(),
        };
        let nums =
            |f: ListFilter| -> Vec<u64> { t.list(&f).unwrap().iter().map(|i| i.number).collect() };
        assert_eq!(nums(f(StateFilter::Open, &[])), vec![a]);
        assert_eq!(nums(f(StateFilter::Closed, &[])), vec![b]);
        assert_eq!(nums(f(StateFilter::All, &["x"])), vec![b, a]);
        assert_eq!(nums(f(StateFilter::All, &["x", "y"])), vec![a]);
        t.reopen(b).unwrap();
        assert_eq!(t.show(b).unwrap().closed_at, None);
    }
}
