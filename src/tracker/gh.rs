//! The `gh` backend: the GitHub CLI run with exactly the argv of `docs/SPEC.md` §7, never through a
//! shell, each call under a deadline that kills gh's whole process group.
//!
//! Every failure is classified (not found / transient / failed) from the exit status and
//! gh's stderr, because the sweeps must never act on a transient failure: a timeout, a
//! network error, a rate limit or a 5xx must never look like "the issue is gone".
//!
//! With the checkout's state dir known ([`GhTracker::with_fleet`]), a rate-limited answer
//! pauses the whole fleet until GitHub's reset ([`crate::lanes::pause_file`]), every call of this
//! tracker is refused unsent while the pause holds, and content-creating calls are paced
//! across the fleet ([`super::pace`]).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::gh_output::OutputError;
use super::trust::{Author, Trust, Verdict};
use super::{
    ErrorKind, IssueState, IssueSummary, IssueView, LabeledIssue, Tracker, TrackerError,
    TrackerResult,
};
use crate::cmd::{self, Argv, RunError, RunOpts};
use crate::text::{clip_quoted, excerpt, one_line};

/// What a gh call touches, which decides `--repo` and the fleet's pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// An issue or PR call: `--repo` appended when configured; costs quota, so refused
    /// unsent while the fleet is paused and a rate-limited answer pauses it.
    Repo,
    /// A repository call that names the repository in its own arguments (`api graphql`):
    /// no `--repo` (gh rejects it there), paused like [`Scope::Repo`].
    RepoInArgs,
    /// `auth status`, `api rate_limit`, `api user`: the account's, free of quota.
    Account,
}

/// A tracker backed by the GitHub CLI.
#[derive(Debug, Clone)]
pub struct GhTracker {
    program: PathBuf,
    repo: Option<String>,
    timeout: Duration,
    dir: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    /// The checkout's `.red/state/` (the pause file) and the write pace; `None` outside a
    /// checkout's fleet (some unit tests).
    fleet: Option<(PathBuf, super::pace::Pace)>,
    /// Whose claim marks count besides the fleet's own login (SPEC §11.5).
    trust: Trust,
}

impl GhTracker {
    /// `repo` is `OWNER/NAME` (or `HOST/OWNER/NAME`); when set, every issue and PR call gets
    /// `--repo <repo>` so gh never guesses from the working directory's remotes.
    pub fn new(repo: Option<String>, timeout: Duration) -> Self {
        GhTracker {
            program: PathBuf::from("gh"),
            repo,
            timeout,
            dir: None,
            env: Vec::new(),
            fleet: None,
            trust: Trust::default(),
        }
    }

    /// Whose marks count besides the fleet's own login (`claims.trusted_authors`,
    /// `claims.trust_members`).
    pub fn with_trust(mut self, trust: Trust) -> Self {
        self.trust = trust;
        self
    }

    /// `gh api user`: the login this gh acts as, asked once per process and program (a
    /// fleet's login does not change under a running process) and kept.
    pub fn viewer(&self) -> TrackerResult<String> {
        static VIEWERS: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
        let cache = VIEWERS.get_or_init(Default::default);
        let known = cache
            .lock()
            .ok()
            .and_then(|m| m.get(&self.program).cloned());
        if let Some(login) = known {
            return Ok(login);
        }
        let login = self.run_parsed_with(&["api", "user"], Scope::Account, parse::viewer)?;
        if let Ok(mut m) = cache.lock() {
            m.insert(self.program.clone(), login.clone());
        }
        Ok(login)
    }

    /// Drops from `thread` every mark whose author may not make one (SPEC §11.5), saying
    /// so once per issue and process; other comments stay. The fleet's login is asked only
    /// when a mark's author is not trusted by name or association.
    fn drop_untrusted_marks(
        &self,
        number: u64,
        thread: &mut super::IssueThread,
        authors: Vec<Option<Author>>,
    ) -> TrackerResult<()> {
        let mut ignored: Vec<String> = Vec::new();
        let mut keep = Vec::with_capacity(thread.comments.len());
        for (c, author) in std::mem::take(&mut thread.comments)
            .into_iter()
            .zip(authors)
        {
            if crate::claim::marks::Mark::parse(&c.body).is_none() {
                keep.push(c);
                continue;
            }
            let trusted = self.trusts(author.as_ref())?;
            if trusted {
                keep.push(c);
            } else {
                ignored.push(author.map_or("an unknown author".into(), |a| {
                    format!("{} ({})", a.login, a.association)
                }));
            }
        }
        thread.comments = keep;
        if !ignored.is_empty() && first_report(&self.identity(), number) {
            eprintln!(
                "afk-supervisor: #{number}: ignored a claim mark by {}: only the fleet's own login and claims.trusted_authors make marks (SPEC §11.5)",
                ignored.join(", ")
            );
        }
        Ok(())
    }

    /// Whether `author` may direct the fleet (SPEC §11.5's rule of marks): trusted by name
    /// or association, else only when it is the fleet's own login (asked once).
    fn trusts(&self, author: Option<&Author>) -> TrackerResult<bool> {
        Ok(match author {
            None => false,
            Some(a) => match self.trust.judge(a) {
                Verdict::Trusted => true,
                Verdict::IfFleet => self.trust.counts(a, &self.viewer()?),
            },
        })
    }

    /// Shares the fleet's pause (`state_dir`/`fleet-pause.toon`) and write pace with every
    /// other process of the checkout.
    pub fn with_fleet(mut self, state_dir: impl Into<PathBuf>, pace: super::pace::Pace) -> Self {
        self.fleet = Some((state_dir.into(), pace));
        self
    }

    /// `gh api rate_limit`: the latest reset (epoch seconds) among the limits that are
    /// spent; `None` when none is (a secondary limit, or the reset already passed). The
    /// endpoint costs no quota.
    pub fn rate_limit_reset(&self) -> TrackerResult<Option<u64>> {
        let out = self.run(&["api", "rate_limit"], Scope::Account)?;
        parse::rate_limit_reset(&out).map_err(|e| {
            TrackerError::new(
                ErrorKind::Failed,
                "gh api rate_limit",
                format!("unexpected JSON from gh: {e}"),
            )
        })
    }

    /// Records the fleet-wide pause after a rate-limited answer: until the reset GitHub
    /// names in its message, else the one `gh api rate_limit` reports, else a minute.
    fn pause_fleet(&self, stderr: &str) {
        let Some((state_dir, _)) = &self.fleet else {
            return;
        };
        let now = crate::timeutil::now_epoch();
        let until = reset_in_message(stderr, now)
            .or_else(|| {
                (!is_secondary(stderr))
                    .then(|| self.rate_limit_reset().ok().flatten())
                    .flatten()
            })
            .unwrap_or(now + crate::lanes::pause_file::DEFAULT_PAUSE_S);
        let reason = format!("rate limited: {}", one_line(stderr));
        if let Err(e) = crate::lanes::pause_file::record(state_dir, &reason, until) {
            eprintln!(
                "afk-supervisor: {}: {e}",
                crate::lanes::pause_file::path(state_dir).display()
            );
        }
    }

    /// A content-creating call: paced across the fleet, then run.
    fn run_write(&self, args: &[&str]) -> TrackerResult<String> {
        // A paused fleet refuses the call before it takes a slot of the budget: writes
        // never sent must not spend the pace the fleet resumes with.
        if let Some(refused) = self.refused_while_paused(&render(&self.argv(args, Scope::Repo))) {
            return Err(refused);
        }
        if let Some((_, pace)) = &self.fleet {
            // GitHub's limit is the account's: the budget is the login's, on this host.
            let pace = if pace.is_per_account() {
                pace.for_login(&self.viewer()?)
            } else {
                pace.clone()
            };
            let deadline = crate::timeutil::deadline(
                Instant::now(),
                self.timeout.saturating_add(Duration::from_secs(60)),
            );
            if let Err(e) = pace.acquire(deadline) {
                let kind = match &e {
                    super::pace::PaceError::Exhausted { .. }
                    | super::pace::PaceError::Locked { .. }
                    | super::pace::PaceError::Shared(_) => ErrorKind::Transient,
                    super::pace::PaceError::File(_) => ErrorKind::Failed,
                    // The hour's writes are spent: the whole fleet waits for the next slot,
                    // as for GitHub's own limit, rather than every worker meeting it.
                    super::pace::PaceError::HourSpent { wait_s, .. } => {
                        if let Some((state_dir, _)) = &self.fleet {
                            let until = crate::timeutil::now_epoch() + wait_s;
                            let reason = format!("rate limited: write pace: {e}");
                            if let Err(err) =
                                crate::lanes::pause_file::record(state_dir, &reason, until)
                            {
                                eprintln!(
                                    "afk-supervisor: {}: {err}",
                                    crate::lanes::pause_file::path(state_dir).display()
                                );
                            }
                        }
                        ErrorKind::RateLimited
                    }
                };
                return Err(TrackerError::new(
                    kind,
                    render(&self.argv(args, Scope::Repo)),
                    format!("not called: write pace: {e}"),
                ));
            }
        }
        self.run(args, Scope::Repo)
    }

    /// The refusal of a repository call while the fleet is paused (`crate::lanes::pause_file`).
    fn refused_while_paused(&self, command: &str) -> Option<TrackerError> {
        let (state_dir, _) = self.fleet.as_ref()?;
        let p = crate::lanes::pause_file::active(state_dir)?;
        Some(TrackerError::new(
            ErrorKind::RateLimited,
            command,
            format!("not called: fleet paused {}", p.describe()),
        ))
    }

    /// Runs this program instead of `gh` from `PATH` (tests point it at a fake).
    pub fn with_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = program.into();
        self
    }

    /// The directory gh runs in; without `--repo`, gh reads the repository from its remotes.
    pub fn in_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Adds one environment variable to every gh call.
    pub fn with_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn repo(&self) -> Option<&str> {
        self.repo.as_deref()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the program exists: a path is checked as is, a bare name on `PATH`.
    pub fn program_found(&self) -> bool {
        if self.program.components().count() > 1 {
            return self.program.is_file();
        }
        let path = self
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_default();
        std::env::split_paths(&path).any(|d| d.join(&self.program).is_file())
    }

    /// `gh auth status`: whether gh is logged in. Never takes `--repo` (gh rejects it there).
    pub fn auth_status(&self) -> TrackerResult<()> {
        self.run(&["auth", "status"], Scope::Account).map(|_| ())
    }

    fn argv(&self, args: &[&str], scope: Scope) -> Argv {
        let mut full: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        if scope == Scope::Repo
            && let Some(repo) = &self.repo
        {
            full.push("--repo".into());
            full.push(repo.clone());
        }
        Argv::new(self.program.clone(), full)
    }

    /// Runs one gh call; stdout on success, a classified [`TrackerError`] otherwise.
    fn run(&self, args: &[&str], scope: Scope) -> TrackerResult<String> {
        self.run_codes(args, scope, &[])
    }

    /// [`Self::run`], also answering with stdout when gh exits with one of `answers` (`gh pr
    /// checks` exits 1 when a check failed and 8 while one is pending).
    fn run_codes(&self, args: &[&str], scope: Scope, answers: &[i32]) -> TrackerResult<String> {
        self.run_accepting(args, scope, &|code, _| answers.contains(&code))
    }

    /// [`Self::run`], also answering with stdout when `accept(exit code, stdout)` says the
    /// failure is an answer (a 304 that gh reports as exit 1).
    fn run_accepting(
        &self,
        args: &[&str],
        scope: Scope,
        accept: &dyn Fn(i32, &str) -> bool,
    ) -> TrackerResult<String> {
        let argv = self.argv(args, scope);
        let mut env: Vec<(OsString, OsString)> = vec![
            // Never wait on a prompt or print an update notice: nobody is at the keyboard.
            ("GH_PROMPT_DISABLED".into(), "1".into()),
            ("GH_NO_UPDATE_NOTIFIER".into(), "1".into()),
            ("NO_COLOR".into(), "1".into()),
        ];
        env.extend(self.env.iter().cloned());
        let opts = RunOpts {
            cwd: self.dir.clone(),
            env,
            stdin: None,
        };
        let command = render(&argv);
        // Repository calls cost quota; `auth status` and `api rate_limit` do not.
        if scope != Scope::Account
            && let Some(refused) = self.refused_while_paused(&command)
        {
            return Err(refused);
        }
        match cmd::run(&argv, self.timeout, &opts) {
            Ok(out)
                if out.status.success()
                    || out
                        .status
                        .code()
                        .is_some_and(|c| accept(c, &out.stdout_str())) =>
            {
                Ok(out.stdout_str())
            }
            Ok(out) => {
                let stderr = out.stderr_str();
                let kind = classify(out.status.code(), &stderr);
                if kind == ErrorKind::RateLimited && scope != Scope::Account {
                    self.pause_fleet(&stderr);
                }
                let detail = match out.status.code() {
                    Some(code) => format!("exit {code}: {}", one_line(&stderr)),
                    None => format!("killed by a signal: {}", one_line(&stderr)),
                };
                Err(TrackerError::new(kind, command, detail))
            }
            Err(RunError::Timeout {
                timeout, stderr, ..
            }) => Err(TrackerError::new(
                ErrorKind::Transient,
                command,
                format!(
                    "timed out after {}s and was killed{}",
                    timeout.as_secs_f64(),
                    if stderr.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", one_line(&stderr))
                    }
                ),
            )),
            // Not the answer asked for: like unparseable output, worth a retry later.
            Err(RunError::TooLarge { limit, .. }) => Err(TrackerError::new(
                ErrorKind::Transient,
                command,
                format!("printed more than {limit} bytes and was killed"),
            )),
            Err(RunError::Spawn { source, .. }) => Err(TrackerError::new(
                ErrorKind::Failed,
                command,
                format!(
                    "cannot run {}: {source} (is the GitHub CLI installed and on PATH?)",
                    self.program.display()
                ),
            )),
        }
    }

    /// Runs gh and reads its JSON with one of the [`parse`] functions.
    fn run_parsed<T>(
        &self,
        args: &[&str],
        parser: fn(&str) -> Result<T, OutputError>,
    ) -> TrackerResult<T> {
        self.run_parsed_with(args, Scope::Repo, parser)
    }

    /// [`Self::run_parsed`], with or without `--repo`.
    fn run_parsed_with<T>(
        &self,
        args: &[&str],
        scope: Scope,
        parser: fn(&str) -> Result<T, OutputError>,
    ) -> TrackerResult<T> {
        let stdout = self.run(args, scope)?;
        // An answer that is not the JSON asked for (a proxy's HTML page, a cut-off body) is
        // the tracker misbehaving, not the worker: transient (exit 69), never a death that
        // trips the circuits.
        parser(&stdout).map_err(|e| {
            TrackerError::new(
                ErrorKind::Transient,
                render(&self.argv(args, scope)),
                format!("unexpected JSON from gh: {e}"),
            )
        })
    }
}

/// Whether an ignored mark on issue `number` of tracker `identity` is reported now: once
/// per issue and process, so a thread read every pass does not repeat it.
fn first_report(identity: &str, number: u64) -> bool {
    static SEEN: OnceLock<Mutex<HashSet<(String, u64)>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
        .lock()
        .map_or(true, |mut s| s.insert((identity.to_string(), number)))
}

/// The argv as shown in errors, on one line (a multi-line `--body` is shown with `\n`).
fn render(argv: &Argv) -> String {
    argv.to_string().replace('\n', "\\n")
}

/// Classifies a failed gh call from its exit code (`None`: killed by a signal) and stderr.
///
/// *Not found* is only ever the explicit "no such issue / pull request" answer: a missing
/// repository or a bare HTTP 404 is a configuration problem (`Failed`), never a reason to
/// treat an issue as gone. Anything that may succeed on a retry is `Transient`.
pub fn classify(code: Option<i32>, stderr: &str) -> ErrorKind {
    let s = stderr.to_lowercase();
    if code.is_none() {
        return ErrorKind::Transient;
    }
    if s.contains("could not resolve to a repository") {
        return ErrorKind::Failed;
    }
    const NOT_FOUND: [&str; 4] = [
        "could not resolve to an issue",
        "could not resolve to a pullrequest",
        "could not resolve to a pull request",
        "no pull requests found for branch",
    ];
    if NOT_FOUND.iter().any(|p| s.contains(p)) {
        return ErrorKind::NotFound;
    }
    // Primary ("API rate limit exceeded", HTTP 403) and secondary ("secondary rate limit",
    // "abuse detection", HTTP 403 or 429) limits: before the transient texts, which share
    // words with them.
    const RATE_LIMITED: [&str; 3] = ["rate limit", "abuse detection", "http 429"];
    if RATE_LIMITED.iter().any(|p| s.contains(p)) {
        return ErrorKind::RateLimited;
    }
    const TRANSIENT: [&str; 21] = [
        "error connecting to",
        "check your internet connection",
        "could not resolve host",
        "no such host",
        "dial tcp",
        "connection refused",
        "connection reset",
        "broken pipe",
        "network is unreachable",
        "i/o timeout",
        "tls handshake timeout",
        "timeout awaiting response headers",
        "context deadline exceeded",
        "client.timeout exceeded",
        "unexpected eof",
        ": eof",
        "bad gateway",
        "service unavailable",
        "gateway timeout",
        "internal server error",
        "something went wrong",
    ];
    if TRANSIENT.iter().any(|p| s.contains(p)) || has_http_5xx(&s) {
        return ErrorKind::Transient;
    }
    ErrorKind::Failed
}

/// GitHub's secondary ("abuse") limit: no reset in `gh api rate_limit`, which reports only
/// the primary ones.
fn is_secondary(stderr: &str) -> bool {
    let s = stderr.to_lowercase();
    s.contains("secondary rate limit") || s.contains("abuse detection") || s.contains("http 429")
}

/// A reset named in gh's message: `retry after N` / `retry-after: N` seconds, or an
/// `x-ratelimit-reset: EPOCH` header line.
pub fn reset_in_message(stderr: &str, now: u64) -> Option<u64> {
    let s = stderr.to_lowercase();
    let number_after = |key: &str| -> Option<u64> {
        let i = s.find(key)? + key.len();
        let digits: String = s[i..]
            .trim_start_matches([' ', ':'])
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    if let Some(at) = number_after("x-ratelimit-reset") {
        return Some(at);
    }
    ["retry-after", "retry after"]
        .iter()
        .find_map(|k| number_after(k))
        .map(|secs| now.saturating_add(secs))
}

/// `HTTP 5xx` anywhere in the (lower-cased) text.
fn has_http_5xx(s: &str) -> bool {
    s.match_indices("http 5").any(|(i, _)| {
        let rest = &s.as_bytes()[i + "http 5".len()..];
        rest.len() >= 2
            && rest[0].is_ascii_digit()
            && rest[1].is_ascii_digit()
            && rest.get(2).is_none_or(|b| !b.is_ascii_digit())
    })
}

#[derive(Deserialize)]
struct GhLabel {
    name: String,
}

#[derive(Deserialize)]
struct GhListRow {
    number: u64,
    state: String,
    labels: Vec<GhLabel>,
    #[serde(rename = "closedAt", default)]
    closed_at: Option<String>,
}

#[derive(Deserialize)]
struct GhView {
    state: String,
    labels: Vec<GhLabel>,
}

#[derive(Deserialize)]
struct GhBody {
    body: String,
    #[serde(rename = "createdAt", default)]
    created_at: Option<String>,
    /// `null` for a deleted account.
    #[serde(default)]
    author: Option<GhAuthor>,
    #[serde(rename = "authorAssociation", default)]
    author_association: Option<String>,
}

#[derive(Debug, Deserialize)]
struct GhAuthor {
    login: String,
}

#[derive(Deserialize)]
struct GhThread {
    state: String,
    labels: Vec<GhLabel>,
    comments: Vec<GhBody>,
}

#[derive(Deserialize)]
struct GhLabeledRow {
    number: u64,
    #[serde(default)]
    body: Option<String>,
    labels: Vec<GhLabel>,
}

/// `gh pr view --json state,isDraft,headRefOid,reviews,comments`.
#[derive(Debug, Deserialize)]
pub struct GhPrView {
    state: String,
    #[serde(rename = "isDraft", default)]
    is_draft: bool,
    #[serde(rename = "headRefOid", default)]
    head_ref_oid: Option<String>,
    #[serde(default)]
    reviews: Vec<GhPrNote>,
    #[serde(default)]
    comments: Vec<GhPrNote>,
}

/// One review or comment of `gh pr view`.
#[derive(Debug, Deserialize)]
struct GhPrNote {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    author: Option<GhAuthor>,
    #[serde(rename = "authorAssociation", default)]
    author_association: Option<String>,
    #[serde(default)]
    body: String,
    #[serde(default)]
    state: Option<String>,
    #[serde(rename = "submittedAt", default)]
    submitted_at: Option<String>,
    #[serde(rename = "createdAt", default)]
    created_at: Option<String>,
}

fn parse_state(s: &str) -> Result<IssueState, OutputError> {
    match s.to_ascii_uppercase().as_str() {
        "OPEN" => Ok(IssueState::Open),
        "CLOSED" => Ok(IssueState::Closed),
        other => Err(OutputError::State(excerpt(other))),
    }
}

fn json<T: DeserializeOwned>(text: &str) -> Result<T, OutputError> {
    serde_json::from_str(text).map_err(|e| OutputError::Json(clip_quoted(&e.to_string())))
}

/// The pure readers of gh's JSON output, one per call shape: outside data in, a value or
/// the reason it is not one out (the caller adds the command line).
pub mod parse {
    use super::*;

    /// `gh issue list --json number,state,labels,closedAt`.
    pub fn list_all(text: &str) -> Result<Vec<IssueSummary>, OutputError> {
        let rows: Vec<GhListRow> = json(text)?;
        rows.into_iter()
            .map(|r| {
                Ok(IssueSummary {
                    number: r.number,
                    state: parse_state(&r.state)?,
                    labels: names(r.labels),
                    closed_at: closed_at(r.closed_at),
                })
            })
            .collect()
    }

    /// `gh issue view <N> --json state,labels`.
    pub fn view(text: &str) -> Result<IssueView, OutputError> {
        let v: GhView = json(text)?;
        Ok(IssueView {
            state: parse_state(&v.state)?,
            labels: names(v.labels),
        })
    }

    /// `gh issue list … --json number,body,labels`.
    pub fn labeled(text: &str) -> Result<Vec<LabeledIssue>, OutputError> {
        let rows: Vec<GhLabeledRow> = json(text)?;
        Ok(rows
            .into_iter()
            .map(|r| LabeledIssue {
                number: r.number,
                body: r.body.unwrap_or_default(),
                labels: names(r.labels),
                title: None,
            })
            .collect())
    }

    /// `gh label list --json name`: the repository's label names.
    pub fn label_names(text: &str) -> Result<Vec<String>, OutputError> {
        #[derive(Deserialize)]
        struct Row {
            name: String,
        }
        let rows: Vec<Row> = json(text)?;
        Ok(rows.into_iter().map(|r| r.name).collect())
    }

    /// `gh issue list … --json number,updatedAt`.
    pub fn changed(text: &str) -> Result<Vec<super::super::Changed>, OutputError> {
        #[derive(Deserialize)]
        struct Row {
            number: u64,
            #[serde(rename = "updatedAt", default)]
            updated_at: Option<String>,
        }
        let rows: Vec<Row> = json(text)?;
        Ok(rows
            .into_iter()
            .map(|r| super::super::Changed {
                number: r.number,
                updated_at: r.updated_at.filter(|t| !t.is_empty()),
            })
            .collect())
    }

    /// `gh api rate_limit`: the latest `reset` among the resources whose `remaining` is 0.
    pub fn rate_limit_reset(text: &str) -> Result<Option<u64>, OutputError> {
        #[derive(Deserialize)]
        struct Limit {
            remaining: u64,
            reset: u64,
        }
        #[derive(Deserialize)]
        struct Limits {
            resources: std::collections::BTreeMap<String, Limit>,
        }
        let l: Limits = json(text)?;
        Ok(l.resources
            .values()
            .filter(|r| r.remaining == 0)
            .map(|r| r.reset)
            .max())
    }

    /// `gh issue view <N> --json state,labels,comments`: the comments' bodies.
    pub fn comments(text: &str) -> Result<Vec<String>, OutputError> {
        Ok(thread(text)?.comments.into_iter().map(|c| c.body).collect())
    }

    /// `gh issue view <N> --json state,labels,comments`: state, labels and the comments
    /// with their times (for the claim marks).
    pub fn thread(text: &str) -> Result<super::super::IssueThread, OutputError> {
        authored_thread(text).map(|(t, _)| t)
    }

    /// `gh pr view <pr> --json state,isDraft,headRefOid,reviews,comments`.
    pub fn pr_view(text: &str) -> Result<GhPrView, OutputError> {
        json(text)
    }

    /// `gh pr checks <pr> --json name,bucket,link`.
    pub fn pr_checks(text: &str) -> Result<Vec<super::super::PrCheck>, OutputError> {
        #[derive(Deserialize)]
        struct Row {
            name: String,
            bucket: String,
            #[serde(default)]
            link: Option<String>,
        }
        let rows: Vec<Row> = json(text)?;
        Ok(rows
            .into_iter()
            .map(|r| super::super::PrCheck {
                name: r.name,
                bucket: r.bucket.to_ascii_lowercase(),
                link: r.link.filter(|l| !l.is_empty()),
                log: None,
            })
            .collect())
    }

    /// `gh api user`: the login.
    pub fn viewer(text: &str) -> Result<String, OutputError> {
        #[derive(Deserialize)]
        struct User {
            login: String,
        }
        let u: User = json(text)?;
        if u.login.is_empty() {
            return Err(OutputError::Json("empty login".into()));
        }
        Ok(u.login)
    }

    /// [`thread`], and each comment's author (`None`: a deleted account), in order.
    pub fn authored_thread(
        text: &str,
    ) -> Result<(super::super::IssueThread, Vec<Option<Author>>), OutputError> {
        let v: GhThread = json(text)?;
        let authors = v
            .comments
            .iter()
            .map(|c| {
                c.author.as_ref().map(|a| Author {
                    login: a.login.clone(),
                    association: c.author_association.clone().unwrap_or_default(),
                })
            })
            .collect();
        let thread = super::super::IssueThread {
            state: parse_state(&v.state)?,
            labels: names(v.labels),
            comments: v
                .comments
                .into_iter()
                .map(|c| crate::claim::marks::Comment {
                    at: c
                        .created_at
                        .as_deref()
                        .and_then(crate::timeutil::parse_rfc3339)
                        .map(crate::timeutil::epoch_secs),
                    body: c.body,
                })
                .collect(),
        };
        Ok((thread, authors))
    }
}

/// `issue list --label <label> --state open --limit <limit>`: the head of every listing by
/// label (SPEC §7), the `--json` fields the caller's.
fn open_with_label<'a>(label: &'a str, limit: &'a str) -> Vec<&'a str> {
    vec![
        "issue", "list", "--label", label, "--state", "open", "--limit", limit,
    ]
}

/// gh prints `null`, `""` or Go's zero time for an issue that was never closed.
fn closed_at(raw: Option<String>) -> Option<String> {
    raw.filter(|s| !s.is_empty() && !s.starts_with("0001-01-01"))
}

fn names(labels: Vec<GhLabel>) -> Vec<String> {
    labels.into_iter().map(|l| l.name).collect()
}

/// Labels gh takes as one comma-separated flag value; a comma inside a label cannot be sent.
fn label_csv(argv_hint: &str, labels: &[&str]) -> TrackerResult<String> {
    for l in labels {
        if l.trim().is_empty() || l.contains(',') {
            return Err(TrackerError::new(
                ErrorKind::Failed,
                argv_hint.to_string(),
                format!("invalid label {l:?}: labels must be non-empty and contain no comma"),
            ));
        }
    }
    Ok(labels.join(","))
}

impl GhTracker {
    /// `gh issue list --label L --state open --limit N [order] --json number,body,labels`.
    fn labeled(
        &self,
        label: &str,
        limit: usize,
        order: &[&str],
    ) -> TrackerResult<Vec<LabeledIssue>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // On a cluster the steward's copy of the queue answers while it is fresh: the
        // hosts' listings cost etcd a range, not GitHub a query (SPEC §11.23).
        if label == super::labels::READY_FOR_AGENT
            && let Some(mut queue) = super::gh_queue::shared_ready()
        {
            queue.truncate(limit);
            return Ok(queue);
        }
        let limit = limit.to_string();
        let mut args = open_with_label(label, &limit);
        args.extend_from_slice(order);
        args.extend(["--json", "number,body,labels"]);
        self.run_parsed(&args, parse::labeled)
    }
}

impl Tracker for GhTracker {
    fn kind(&self) -> &'static str {
        "gh"
    }

    fn identity(&self) -> String {
        match &self.repo {
            // GitHub names are case-insensitive: `Org/Repo` and `org/repo` are one tracker,
            // so checkouts spelling them differently still share one unblock belt.
            Some(r) => format!("github:{}", r.to_ascii_lowercase()),
            None => {
                let dir = self
                    .dir
                    .clone()
                    .or_else(|| std::env::current_dir().ok())
                    .unwrap_or_default();
                let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
                format!("github:(remotes of {})", dir.display())
            }
        }
    }

    fn list_all(&self, limit: usize) -> TrackerResult<Vec<IssueSummary>> {
        if limit == 0 {
            // gh refuses `--limit 0`; nothing asked for is nothing returned, as on `local`.
            return Ok(Vec::new());
        }
        let limit = limit.to_string();
        let args = [
            "issue",
            "list",
            "--state",
            "all",
            "--limit",
            limit.as_str(),
            "--json",
            "number,state,labels,closedAt",
        ];
        self.run_parsed(&args, parse::list_all)
    }

    fn view(&self, number: u64) -> TrackerResult<IssueView> {
        let n = number.to_string();
        let args = ["issue", "view", n.as_str(), "--json", "state,labels"];
        self.run_parsed(&args, parse::view)
    }

    fn edit_labels(&self, number: u64, add: &[&str], remove: &[&str]) -> TrackerResult<()> {
        let n = number.to_string();
        let hint = format!("gh issue edit {n}");
        if add.is_empty() && remove.is_empty() {
            return Err(TrackerError::new(
                ErrorKind::Failed,
                hint,
                "no label to add or remove",
            ));
        }
        let add_csv = label_csv(&hint, add)?;
        let remove_csv = label_csv(&hint, remove)?;
        let mut args = vec!["issue", "edit", n.as_str()];
        if !add.is_empty() {
            args.extend(["--add-label", add_csv.as_str()]);
        }
        if !remove.is_empty() {
            args.extend(["--remove-label", remove_csv.as_str()]);
        }
        self.run_write(&args).map(|_| ())
    }

    fn comment(&self, number: u64, body: &str) -> TrackerResult<()> {
        let n = number.to_string();
        self.run_write(&["issue", "comment", n.as_str(), "--body", body])
            .map(|_| ())
    }

    fn comments(&self, number: u64) -> TrackerResult<Vec<String>> {
        Ok(self
            .thread(number)?
            .comments
            .into_iter()
            .map(|c| c.body)
            .collect())
    }

    fn thread(&self, number: u64) -> TrackerResult<super::IssueThread> {
        let (mut thread, authors) = self.authored_thread(number)?;
        self.drop_untrusted_marks(number, &mut thread, authors)?;
        Ok(thread)
    }

    fn shared_across_checkouts(&self) -> bool {
        true
    }

    fn ready_page(
        &self,
        page: usize,
        etag: Option<&str>,
    ) -> TrackerResult<Option<super::gh_queue::Page>> {
        let argv = super::gh_queue::argv(self.repo.as_deref(), page, etag);
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        // gh reports a 304 as `gh: HTTP 304` and exit 1, after its status line.
        let not_modified =
            |code: i32, stdout: &str| code == 1 && super::gh_queue::status(stdout) == Some(304);
        let out = self.run_accepting(&args, Scope::RepoInArgs, &not_modified)?;
        super::gh_queue::parse(&out).map(Some).map_err(|e| {
            TrackerError::new(
                ErrorKind::Transient,
                render(&self.argv(&args, Scope::RepoInArgs)),
                format!("unexpected answer from gh: {e}"),
            )
        })
    }

    fn list_open_with_label(&self, label: &str, limit: usize) -> TrackerResult<Vec<LabeledIssue>> {
        self.labeled(label, limit, &[])
    }

    /// `--search sort:created-asc` makes GitHub sort before it cuts at `--limit`; on GitHub
    /// numbers follow creation, so this is lowest number first.
    fn list_open_with_label_oldest_first(
        &self,
        label: &str,
        limit: usize,
    ) -> TrackerResult<Vec<LabeledIssue>> {
        self.labeled(label, limit, &["--search", "sort:created-asc"])
    }

    fn pr_create(&self, base: &str, head: &str, title: &str, body: &str) -> TrackerResult<String> {
        let out = self.run_write(&[
            "pr", "create", "--base", base, "--head", head, "--title", title, "--body", body,
        ])?;
        Ok(last_line(&out))
    }

    fn pr_merge(&self, head: &str) -> TrackerResult<()> {
        self.run(
            &["pr", "merge", head, "--merge", "--delete-branch"],
            Scope::Repo,
        )
        .map(|_| ())
    }

    fn list_open_changed(&self, label: &str, limit: usize) -> TrackerResult<Vec<super::Changed>> {
        let limit = limit.to_string();
        let mut args = open_with_label(label, &limit);
        args.extend(["--json", "number,updatedAt"]);
        self.run_parsed(&args, parse::changed)
    }

    /// `gh label list --limit 1000 --json name`, then one `gh label create <name> --color
    /// <hex> --description <text> --force` per missing label (`--force`: another host that
    /// created it meanwhile is no failure).
    fn ensure_labels(&self, wanted: &[super::labels::Label]) -> TrackerResult<Vec<String>> {
        let have = self.run_parsed(
            &["label", "list", "--limit", "1000", "--json", "name"],
            parse::label_names,
        )?;
        let mut made = Vec::new();
        for l in wanted {
            if have.iter().any(|h| h.eq_ignore_ascii_case(l.name)) {
                continue;
            }
            self.run_write(&[
                "label",
                "create",
                l.name,
                "--color",
                l.color,
                "--description",
                l.description,
                "--force",
            ])?;
            made.push(l.name.to_string());
        }
        Ok(made)
    }

    /// One GraphQL call (SPEC §7), judged under the checkout's trust policy; the fleet's
    /// login is asked only when a hand is not trusted by name or association.
    fn vet(&self, number: u64) -> TrackerResult<super::provenance::Vetting> {
        let argv = super::gh_provenance::argv(self.repo.as_deref(), number);
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let found = self.run_parsed_with(&args, Scope::RepoInArgs, super::gh_provenance::parse)?;
        let Some(p) = found else {
            return Err(TrackerError::new(
                ErrorKind::NotFound,
                format!("gh api graphql (issue #{number})"),
                "no such issue",
            ));
        };
        let fleet = self.viewer()?;
        Ok(super::provenance::vet(&p, &self.trust, &fleet))
    }

    fn pr_status(&self, pr: &str) -> TrackerResult<super::PrStatus> {
        self.pr_view(pr)
    }

    /// `gh pr checks <pr> [--required] --json name,bucket,link`. gh exits 1 when a check
    /// failed and 8 while one is pending, answering all the same; a pull request with no
    /// (required) checks is none.
    fn pr_checks(&self, pr: &str, required: bool) -> TrackerResult<Vec<super::PrCheck>> {
        let mut args = vec!["pr", "checks", pr];
        if required {
            args.push("--required");
        }
        args.extend(["--json", "name,bucket,link"]);
        let out = match self.run_codes(&args, Scope::Repo, &[1, 8]) {
            Ok(out) => out,
            Err(e)
                if e.detail.contains("no checks reported")
                    || e.detail.contains("no required checks reported") =>
            {
                return Ok(Vec::new());
            }
            Err(e) => return Err(e),
        };
        // Exit 1 with nothing on stdout: gh's "no checks reported" on stderr.
        if out.trim().is_empty() {
            return Ok(Vec::new());
        }
        parse::pr_checks(&out).map_err(|e| {
            TrackerError::new(
                ErrorKind::Transient,
                render(&self.argv(&args, Scope::Repo)),
                format!("unexpected JSON from gh: {e}"),
            )
        })
    }

    /// `gh run view <run> --log-failed`.
    fn run_failed_log(&self, run: &str) -> TrackerResult<String> {
        self.run(&["run", "view", run, "--log-failed"], Scope::Repo)
    }

    /// `gh pr ready <pr>`.
    fn pr_ready(&self, pr: &str) -> TrackerResult<()> {
        self.run(&["pr", "ready", pr], Scope::Repo).map(|_| ())
    }

    /// `gh pr merge <pr> --auto --squash|--merge|--rebase`.
    fn pr_merge_auto(&self, pr: &str, method: crate::config::MergeMethod) -> TrackerResult<()> {
        self.run(&["pr", "merge", pr, "--auto", method.flag()], Scope::Repo)
            .map(|_| ())
    }

    /// `gh pr comment <pr> --body <b>`.
    fn pr_comment(&self, pr: &str, body: &str) -> TrackerResult<()> {
        self.run_write(&["pr", "comment", pr, "--body", body])
            .map(|_| ())
    }

    /// `gh pr edit <pr> --add-label <l>`.
    fn pr_add_label(&self, pr: &str, label: &str) -> TrackerResult<()> {
        let l = label_csv(&format!("gh pr edit {pr}"), &[label])?;
        self.run_write(&["pr", "edit", pr, "--add-label", &l])
            .map(|_| ())
    }

    /// The thread with each comment's author judged (`gh issue view <N> --json
    /// state,labels,comments`).
    fn trusted_comments(
        &self,
        number: u64,
    ) -> TrackerResult<(super::IssueThread, Vec<super::PrNote>)> {
        let (thread, authors) = self.authored_thread(number)?;
        let mut notes = Vec::with_capacity(thread.comments.len());
        for (c, a) in thread.comments.iter().zip(authors) {
            notes.push(super::PrNote {
                key: super::note_key(c.at, &c.body),
                author: a.as_ref().map_or("(deleted)".into(), |a| a.login.clone()),
                trusted: self.trusts(a.as_ref())?,
                body: c.body.clone(),
                state: None,
            });
        }
        Ok((thread, notes))
    }

    /// `gh pr create --base B --head H --title T --body X [--draft]`.
    fn pr_open(
        &self,
        base: &str,
        head: &str,
        title: &str,
        body: &str,
        draft: bool,
    ) -> TrackerResult<String> {
        if !draft {
            return self.pr_create(base, head, title, body);
        }
        let out = self.run_write(&[
            "pr", "create", "--base", base, "--head", head, "--title", title, "--body", body,
            "--draft",
        ])?;
        Ok(last_line(&out))
    }
}

impl GhTracker {
    /// `gh issue view <N> --json state,labels,comments`: the thread and each comment's
    /// author.
    fn authored_thread(
        &self,
        number: u64,
    ) -> TrackerResult<(super::IssueThread, Vec<Option<Author>>)> {
        let n = number.to_string();
        let args = [
            "issue",
            "view",
            n.as_str(),
            "--json",
            "state,labels,comments",
        ];
        self.run_parsed(&args, parse::authored_thread)
    }

    /// `gh pr view <pr> --json state,isDraft,headRefOid,reviews,comments`, each review and
    /// comment judged by the rule of marks.
    fn pr_view(&self, pr: &str) -> TrackerResult<super::PrStatus> {
        let args = [
            "pr",
            "view",
            pr,
            "--json",
            "state,isDraft,headRefOid,reviews,comments",
        ];
        let v = self.run_parsed(&args, parse::pr_view)?;
        let mut status = super::PrStatus {
            state: v.state.to_ascii_uppercase(),
            draft: v.is_draft,
            head_sha: v.head_ref_oid.filter(|s| !s.is_empty()),
            reviews: Vec::new(),
            comments: Vec::new(),
        };
        for (list, out) in [
            (v.reviews, &mut status.reviews),
            (v.comments, &mut status.comments),
        ] {
            for n in list {
                let author = n.author.as_ref().map(|a| Author {
                    login: a.login.clone(),
                    association: n.author_association.clone().unwrap_or_default(),
                });
                let at = n
                    .submitted_at
                    .as_deref()
                    .or(n.created_at.as_deref())
                    .unwrap_or("");
                out.push(super::PrNote {
                    key: n
                        .id
                        .clone()
                        .unwrap_or_else(|| super::note_key(None, &format!("{at}{}", n.body))),
                    author: author
                        .as_ref()
                        .map_or("(deleted)".into(), |a| a.login.clone()),
                    trusted: self.trusts(author.as_ref())?,
                    body: n.body,
                    state: n.state,
                });
            }
        }
        Ok(status)
    }
}

/// gh prints the new pull request's URL as its last line of stdout.
fn last_line(out: &str) -> String {
    out.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_table() {
        use ErrorKind::*;
        let cases: &[(Option<i32>, &str, ErrorKind)] = &[
            (
                Some(1),
                "GraphQL: Could not resolve to an issue or pull request with the number of 9. (repository.issue)",
                NotFound,
            ),
            (
                Some(1),
                "could not resolve to an Issue with the number of 9",
                NotFound,
            ),
            (Some(1), "no pull requests found for branch \"x\"", NotFound),
            (
                Some(1),
                "GraphQL: Could not resolve to a Repository with the name 'o/r'. (repository)",
                Failed,
            ),
            (
                Some(1),
                "HTTP 502: Bad Gateway (https://api.github.com/graphql)",
                Transient,
            ),
            (Some(1), "HTTP 503", Transient),
            (Some(1), "HTTP 5", Failed),
            (Some(1), "HTTP 5000 widgets", Failed),
            (
                Some(1),
                "GraphQL: API rate limit exceeded for user ID 1.",
                RateLimited,
            ),
            (
                Some(1),
                "You have exceeded a secondary rate limit",
                RateLimited,
            ),
            (
                Some(1),
                "HTTP 403: You have exceeded a secondary rate limit. Please wait a few minutes before you try again. (https://api.github.com/graphql)",
                RateLimited,
            ),
            (
                Some(1),
                "HTTP 429: Too Many Requests (https://api.github.com/repos/o/r/issues)",
                RateLimited,
            ),
            (
                Some(1),
                "error connecting to api.github.com\ncheck your internet connection or https://githubstatus.com",
                Transient,
            ),
            (
                Some(1),
                "Post \"https://api.github.com/graphql\": dial tcp: lookup api.github.com: no such host",
                Transient,
            ),
            (
                Some(1),
                "Post \"https://api.github.com/graphql\": EOF",
                Transient,
            ),
            (Some(1), "HTTP 401: Bad credentials", Failed),
            (
                Some(4),
                "To get started with GitHub CLI, please run:  gh auth login",
                Failed,
            ),
            (Some(1), "HTTP 404: Not Found", Failed),
            (Some(2), "unknown flag: --frob", Failed),
            (None, "", Transient),
        ];
        for (code, stderr, want) in cases {
            assert_eq!(classify(*code, stderr), *want, "{code:?} {stderr:?}");
        }
    }

    #[test]
    fn closed_at_normalises_gh_spellings() {
        assert_eq!(closed_at(None), None);
        assert_eq!(closed_at(Some(String::new())), None);
        assert_eq!(closed_at(Some("0001-01-01T00:00:00Z".into())), None);
        assert_eq!(
            closed_at(Some("2026-01-02T03:04:05Z".into())).as_deref(),
            Some("2026-01-02T03:04:05Z")
        );
    }

    #[test]
    fn repo_flag_only_when_set_and_never_for_auth() {
        let t = GhTracker::new(Some("o/r".into()), Duration::from_secs(1));
        assert_eq!(
            t.argv(&["issue", "view", "3"], Scope::Repo).to_string(),
            "gh issue view 3 --repo o/r"
        );
        assert_eq!(
            t.argv(&["auth", "status"], Scope::Account).to_string(),
            "gh auth status"
        );
        let t = GhTracker::new(None, Duration::from_secs(1));
        assert_eq!(
            t.argv(&["issue", "view", "3"], Scope::Repo).to_string(),
            "gh issue view 3"
        );
        assert!(
            t.identity().starts_with("github:(remotes of "),
            "{}",
            t.identity()
        );
        let a = GhTracker::new(Some("Org/Repo".into()), Duration::from_secs(1));
        let b = GhTracker::new(Some("org/repo".into()), Duration::from_secs(1));
        assert_eq!(a.identity(), b.identity());
        assert_eq!(a.identity(), "github:org/repo");
    }

    #[test]
    fn labels_with_commas_are_refused_before_calling_gh() {
        let t = GhTracker::new(None, Duration::from_secs(1)).with_program("/nonexistent/gh");
        let e = t.edit_labels(1, &["a,b"], &[]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Failed);
        assert!(e.detail.contains("comma"), "{e}");
        let e = t.edit_labels(1, &[], &[]).unwrap_err();
        assert!(e.detail.contains("no label"), "{e}");
        // A missing program is a plain failure, never transient.
        let e = t.view(1).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Failed);
        assert!(e.detail.contains("/nonexistent/gh"), "{e}");
    }
}
