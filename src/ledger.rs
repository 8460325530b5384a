//! The attempt ledger (`docs/SPEC.md` §11.10): one durable TOONL file per issue,
//! `.red/state/attempts/<N>.toonl`, with one record per attempt end. The built-in worker
//! appends when its attempt ends; a restore of a dead worker's issue (orphan cleanup, the
//! supervisor's release) appends `worker-died`. The ledger decides quarantine (too many
//! failed attempts) and resume (the last attempt was capped: the next one starts from its
//! branch).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::fsutil;
use crate::layout::Layout;
use crate::timeutil;
use crate::toonl::{self, LogError};

/// Header fields of a ledger file, in order: the first six of `docs/SPEC.md` §11.10, then
/// what the attempt cost and why a failure did not count (§11.13), and where its work
/// was rescued (§11.15), what the kernel counted for it (§11.16), and its pull request and
/// checks (§11.22). A file whose last
/// header is shorter gets this header again before the next record; readers follow the
/// newest header, and the fields an older header lacks read as `null`.
pub const FIELDS: [&str; 19] = [
    "worker",
    "start",
    "end",
    "outcome",
    "branch",
    "head",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "turns",
    "model",
    "session_id",
    "excused",
    "rescued",
    "cpu_ms",
    "memory_peak_kib",
    "pr",
    "checks",
];

/// The most bytes of one ledger read.
pub const MAX_LEDGER_BYTES: u64 = 1 << 20;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Outcome {
    /// The agent exited 0; the issue went to a human.
    Done,
    /// The agent could not be started for this data; handed to a human.
    SetAside,
    /// The agent exited with this code.
    AgentFailed(i32),
    /// The agent ran past `timing.attempt_max_s` and was stopped.
    WallClockCapped,
    /// The worker died mid-issue; its issue was restored by a sweep or the supervisor.
    WorkerDied,
    /// The supervisor killed the worker for making no progress (`timing.stall_kill_s`);
    /// its issue was restored. A failure like `worker-died`.
    Stalled,
    /// The worker was stopped (a fleet stop, a signal) and gave the issue back.
    GivenBack,
    /// The kernel's OOM killer ended a process of the attempt (cgroup mode, with the
    /// memory controller: `memory.events` `oom_kill`). A failure like `worker-died`.
    OomKilled,
    /// Not an attempt: the worker quarantined the issue here. Failures before this record
    /// no longer count, so a person who removes the label gives the issue a fresh budget.
    Quarantined,
    /// The agent's account could not run it (usage limit, login, credit, overload): the
    /// issue went back untouched and the fleet paused. Never a failure.
    AccountLimited,
    /// Not an attempt: the spend passed `budget.usd_per_issue` and it went to a
    /// person here. Spend before this record no longer counts against the issue.
    OverBudget,
    /// The agent changed what it must not (refs, the shared git config or hooks, the
    /// fleet's config; `docs/SPEC.md` §11.19): nothing was pushed and a person has the
    /// issue. Not the failure: a hostile text is a person's to judge.
    Tampered,
    /// The attempt's changes touch `agent.sensitive_paths`: held for a person, not pushed.
    Held,
    /// One agent round of an attempt whose `[checks] command` then failed; the attempt went
    /// on with another round (`docs/SPEC.md` §11.22). Its cost counts; never a failure.
    ChecksFailed,
}

impl Outcome {
    /// Whether the attempt counts towards `worker.max_failed_attempts`.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Outcome::AgentFailed(_)
                | Outcome::WallClockCapped
                | Outcome::WorkerDied
                | Outcome::Stalled
                | Outcome::OomKilled
        )
    }
}

impl Outcome {
    /// Whether the record is an attempt's end, not a marker (`quarantined`, `over-budget`)
    /// nor one round of an attempt that went on (`checks-failed`).
    pub fn is_attempt(self) -> bool {
        !matches!(
            self,
            Outcome::Quarantined | Outcome::OverBudget | Outcome::ChecksFailed
        )
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done => f.write_str("done"),
            Outcome::SetAside => f.write_str("set-aside"),
            Outcome::AgentFailed(code) => write!(f, "agent-failed exit {code}"),
            Outcome::WallClockCapped => f.write_str("wall-clock-capped"),
            Outcome::WorkerDied => f.write_str("worker-died"),
            Outcome::Stalled => f.write_str("stalled"),
            Outcome::GivenBack => f.write_str("given-back"),
            Outcome::Quarantined => f.write_str("quarantined"),
            Outcome::AccountLimited => f.write_str("account-limited"),
            Outcome::OverBudget => f.write_str("over-budget"),
            Outcome::OomKilled => f.write_str("oom-killed"),
            Outcome::Tampered => f.write_str("tampered"),
            Outcome::Held => f.write_str("held"),
            Outcome::ChecksFailed => f.write_str("checks-failed"),
        }
    }
}

/// A ledger record's outcome that is none of §11.10's words (the text excerpted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown attempt outcome {0:?}")]
pub struct UnknownOutcome(pub String);

impl FromStr for Outcome {
    type Err = UnknownOutcome;

    fn from_str(s: &str) -> Result<Self, UnknownOutcome> {
        Ok(match s {
            "done" => Outcome::Done,
            "set-aside" => Outcome::SetAside,
            "wall-clock-capped" => Outcome::WallClockCapped,
            "worker-died" => Outcome::WorkerDied,
            "stalled" => Outcome::Stalled,
            "given-back" => Outcome::GivenBack,
            "quarantined" => Outcome::Quarantined,
            "account-limited" => Outcome::AccountLimited,
            "over-budget" => Outcome::OverBudget,
            "oom-killed" => Outcome::OomKilled,
            "tampered" => Outcome::Tampered,
            "held" => Outcome::Held,
            "checks-failed" => Outcome::ChecksFailed,
            other => {
                let code = other
                    .strip_prefix("agent-failed exit ")
                    .and_then(|c| c.parse().ok())
                    .ok_or_else(|| UnknownOutcome(crate::text::excerpt(other)))?;
                Outcome::AgentFailed(code)
            }
        })
    }
}

impl TryFrom<String> for Outcome {
    type Error = UnknownOutcome;
    fn try_from(s: String) -> Result<Self, UnknownOutcome> {
        s.parse()
    }
}

impl From<Outcome> for String {
    fn from(o: Outcome) -> String {
        o.to_string()
    }
}

/// One ledger record: an attempt's end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The worker id, when known.
    pub worker: Option<String>,
    /// RFC 3339, when known.
    pub start: Option<String>,
    /// RFC 3339.
    pub end: String,
    pub outcome: Outcome,
    pub branch: Option<String>,
    /// The branch's head commit at the end.
    pub head: Option<String>,
    /// What the run cost and its session, where the agent's profile reports them
    /// (§11.13): `cost_usd` … `session_id`, flat in the record.
    #[serde(flatten)]
    pub usage: crate::agent_profile::Usage,
    /// Why this failure is not the issue's own and does not count towards quarantine
    /// (an account-wide condition was known, or the agent was failing on other issues).
    #[serde(default)]
    pub excused: Option<String>,
    /// Where the attempt's work was rescued (`docs/SPEC.md` §11.15): `<ref> <sha>`, the
    /// ref a branch name on `origin` or a `refs/afk/rescue/<N>/a<K>` kept here. Absent in
    /// records written before rescues existed.
    #[serde(default)]
    pub rescued: Option<String>,
    /// cgroup mode: the attempt's CPU time from the kernel (`cpu.stat` `usage_usec`), ms.
    /// Absent in records written before it existed.
    #[serde(default)]
    pub cpu_ms: Option<u64>,
    /// cgroup mode with the memory controller: the attempt's `memory.peak`, KiB.
    #[serde(default)]
    pub memory_peak_kib: Option<u64>,
    /// The pull request the attempt opened or pushed to (`docs/SPEC.md` §11.22): its URL
    /// or local id.
    #[serde(default)]
    pub pr: Option<String>,
    /// What the `[checks] command` said after this round (`passed`, `failed exit 1`, …).
    #[serde(default)]
    pub checks: Option<String>,
}

impl Record {
    /// A record ending now.
    pub fn now(worker: Option<&str>, start: Option<&str>, outcome: Outcome) -> Self {
        Record {
            worker: worker.map(str::to_string),
            start: start.map(str::to_string),
            end: timeutil::rfc3339(std::time::SystemTime::now()),
            outcome,
            branch: None,
            head: None,
            usage: crate::agent_profile::Usage::default(),
            excused: None,
            rescued: None,
            cpu_ms: None,
            memory_peak_kib: None,
            pr: None,
            checks: None,
        }
    }

    /// The record with the rescue of its work (`<ref> <sha>`).
    pub fn rescued_to(mut self, reference: &str, sha: &str) -> Self {
        self.rescued = Some(format!("{reference} {sha}"));
        self
    }

    /// The ref and the commit the attempt's work was rescued to, when it was.
    pub fn rescue(&self) -> Option<(&str, &str)> {
        let r = self.rescued.as_deref()?;
        r.split_once(' ')
    }

    /// The record with what the run cost and which session it was.
    pub fn with_usage(mut self, u: &crate::agent_profile::Usage) -> Self {
        self.usage = u.clone();
        self
    }

    /// The figures of the attempt cgroup this process runs in (cgroup mode: the built-in
    /// worker is in its attempt's cgroup, so at the attempt's end they are the attempt's);
    /// none elsewhere.
    pub fn with_own_cgroup_figures(mut self) -> Self {
        if let Some(f) = crate::cgroup::own_attempt_figures() {
            self.cpu_ms = f.cpu_usec.map(|u| u / 1000);
            self.memory_peak_kib = f.memory_peak.map(|b| b / 1024);
        }
        self
    }

    pub fn on_branch(mut self, branch: &str, head: Option<String>) -> Self {
        self.branch = Some(branch.to_string());
        self.head = head;
        self
    }
}

/// The ledger file of issue `n`.
pub fn path(layout: &Layout, n: u64) -> PathBuf {
    layout.state().join("attempts").join(format!("{n}.toonl"))
}

/// Appends one record, as one whole line.
pub fn append(layout: &Layout, n: u64, record: &Record) -> Result<(), LogError> {
    let file = path(layout, n);
    if let Some(dir) = file.parent()
        && !dir.is_dir()
    {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| LogError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        // The first record's directory entry, like the file's (synced with the record).
        if let Some(up) = dir.parent() {
            fsutil::sync_dir(up).map_err(io(up))?;
        }
    }
    let json = serde_json::to_value(record).map_err(|e| LogError::Encode {
        path: file.clone(),
        source: e.into(),
    })?;
    // Synced: the ledger decides quarantine and spend, and a rescued attempt's record is
    // where its work is found again; an attempt ends minutes apart, so the sync is cheap.
    toonl::append_record_current(
        &file,
        &FIELDS,
        json,
        MAX_LEDGER_BYTES,
        fsutil::Durability::Synced,
    )
}

/// Every issue's records, by issue number (the files under `attempts/` named `<N>.toonl`);
/// a ledger that cannot be read is left out and named in the returned errors.
pub fn read_all(layout: &Layout) -> (Vec<(u64, Vec<Record>)>, Vec<LogError>) {
    let dir = layout.state().join("attempts");
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (out, errors);
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|s| s.strip_suffix(".toonl"))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        match read(layout, n) {
            Ok(r) => out.push((n, r)),
            Err(e) => errors.push(e),
        }
    }
    out.sort_by_key(|(n, _)| *n);
    (out, errors)
}

/// Every record of issue `n`, oldest first; none when there is no ledger yet.
pub fn read(layout: &Layout, n: u64) -> Result<Vec<Record>, LogError> {
    read_file(&path(layout, n))
}

fn read_file(file: &Path) -> Result<Vec<Record>, LogError> {
    let bytes = match fsutil::read_small_file(file, MAX_LEDGER_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(Vec::new()),
        Err(e) => {
            return Err(LogError::Io {
                path: file.to_path_buf(),
                source: e.into(),
            });
        }
    };
    toonl::decode_records(&bytes).map_err(|source| LogError::Decode {
        path: file.to_path_buf(),
        source,
    })
}

/// The records since the last quarantine: the attempts that count now.
pub fn current(records: &[Record]) -> &[Record] {
    let from = records
        .iter()
        .rposition(|r| r.outcome == Outcome::Quarantined)
        .map_or(0, |i| i + 1);
    &records[from..]
}

/// Failed attempts since the last quarantine that were the issue's own (not excused).
pub fn failures(records: &[Record]) -> usize {
    current(records)
        .iter()
        .filter(|r| r.outcome.is_failure() && r.excused.is_none())
        .count()
}

/// Failed attempts since the last quarantine, excused or not: how far back in the queue
/// the issue goes (an excused failure still says the agent could not do it just now).
pub fn failed_lately(records: &[Record]) -> usize {
    current(records)
        .iter()
        .filter(|r| r.outcome.is_failure())
        .count()
}

/// The branch the next attempt resumes: where the newest attempt's work was rescued, else
/// that attempt's branch when it was capped. An attempt that ended by an interruption or a
/// death with nothing rescued (it made no work of its own) is passed over, so the work it
/// had resumed is resumed again. A rescue ref is a full ref (`refs/afk/rescue/<N>/a<K>`), a
/// pushed branch a short name.
pub fn resume_branch(records: &[Record]) -> Option<&str> {
    let nothing_new = |r: &&Record| {
        r.rescued.is_none()
            && matches!(
                r.outcome,
                Outcome::GivenBack | Outcome::WorkerDied | Outcome::Stalled
            )
    };
    let last = current(records).iter().rev().find(|r| !nothing_new(r))?;
    if let Some((reference, _)) = last.rescue() {
        return Some(reference);
    }
    (last.outcome == Outcome::WallClockCapped)
        .then_some(last.branch.as_deref())
        .flatten()
}

/// One line per attempt, oldest first, as `issue show` lists them (and any other view of an
/// issue's attempts): when, outcome, worker, branch, head and where its work was rescued.
pub fn attempt_lines(records: &[Record]) -> Vec<String> {
    records.iter().map(Record::line).collect()
}

impl Record {
    /// `<start> .. <end>  <outcome>  worker=<id> branch=<b> head=<sha>[ rescued=<ref> <sha>]`,
    /// each field escaped for a terminal, `-` where unknown.
    pub fn line(&self) -> String {
        let field = |v: &Option<String>| v.as_deref().map_or("-".into(), crate::text::escape);
        let mut line = format!(
            "{} .. {}  {}  worker={} branch={} head={}",
            field(&self.start),
            crate::text::escape(&self.end),
            self.outcome,
            field(&self.worker),
            field(&self.branch),
            field(&self.head)
        );
        if let Some(r) = &self.rescued {
            line.push_str(&format!(" rescued={}", crate::text::escape(r)));
        }
        if let Some(c) = &self.checks {
            line.push_str(&format!(" checks={}", crate::text::escape(c)));
        }
        if let Some(p) = &self.pr {
            line.push_str(&format!(" pr={}", crate::text::escape(p)));
        }
        line
    }
}

/// Rescued attempts across every issue's ledger (`status --json`'s `rescued`). Entries
/// that are not `<N>.toonl` files are passed over; an unreadable ledger is an error.
pub fn rescued_total(layout: &Layout) -> Result<u64, LogError> {
    let dir = layout.state().join("attempts");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(source) => return Err(LogError::Io { path: dir, source }),
    };
    let mut total = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".toonl"))
            .and_then(crate::layout::parse_positive)
        else {
            continue;
        };
        total += rescued_count(&read(layout, n)?) as u64;
    }
    Ok(total)
}

/// How many of the records carry a rescue.
pub fn rescued_count(records: &[Record]) -> usize {
    records.iter().filter(|r| r.rescued.is_some()).count()
}

/// `#<N> ready for review: <K> commit(s) on branch <branch>[ (<link>)]`: the link is where
/// a pull request for the branch is opened, when `origin` is on a forge that has one.
pub fn ready_text(n: u64, commits: u64, branch: &str, link: Option<&str>) -> String {
    let mut t = format!("#{n} ready for review: {commits} commit(s) on branch {branch}");
    if let Some(l) = link {
        t.push_str(&format!(" ({l})"));
    }
    t
}

/// `#<N> handed to a person: <why>[; work on branch <branch>]`.
pub fn handed_off_text(n: u64, why: &str, branch: Option<&str>) -> String {
    let mut t = format!("#{n} handed to a person: {why}");
    if let Some(b) = branch {
        t.push_str(&format!("; work on branch {b}"));
    }
    t
}

/// `#<N> quarantined after <K> failed attempt(s): it waits for a person (afk:quarantined)`.
pub fn quarantined_text(n: u64, failures: usize) -> String {
    format!(
        "#{n} quarantined after {failures} failed attempt(s): it waits for a person (afk:quarantined)"
    )
}

/// The quarantine comment: every counted attempt (when, outcome, branch) and how to retry.
pub fn quarantine_comment(records: &[Record], label: &str) -> String {
    let attempts = current(records);
    let failed = failures(records);
    let mut body = format!(
        "🤖 /afk quarantined this issue after {failed} failed attempt(s); it will not be requeued automatically.\n\nAttempts:\n"
    );
    for r in attempts {
        let when = match &r.start {
            Some(s) => format!("{s} – {}", r.end),
            None => r.end.clone(),
        };
        let branch = r
            .branch
            .as_deref()
            .map_or(String::new(), |b| format!(", branch `{b}`"));
        let by = r
            .worker
            .as_deref()
            .map_or(String::new(), |w| format!(" (worker {w})"));
        body.push_str(&format!("- {when}: {}{branch}{by}\n", r.outcome));
    }
    body.push_str(&format!(
        "\nTo retry: fix what makes the attempts fail, then remove the `{label}` label and add `ready-for-agent` back.\n"
    ));
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip() {
        for o in [
            Outcome::Done,
            Outcome::SetAside,
            Outcome::AgentFailed(-1),
            Outcome::AgentFailed(137),
            Outcome::WallClockCapped,
            Outcome::WorkerDied,
            Outcome::Stalled,
            Outcome::GivenBack,
            Outcome::Quarantined,
            Outcome::AccountLimited,
            Outcome::OverBudget,
            Outcome::OomKilled,
            Outcome::ChecksFailed,
        ] {
            assert_eq!(o.to_string().parse::<Outcome>(), Ok(o));
        }
        assert!("agent-failed exit x".parse::<Outcome>().is_err());
        assert!("exploded".parse::<Outcome>().is_err());
    }

    /// Issue `n`'s ledger as a version before the cost, rescue and kernel fields wrote it:
    /// the six-field header and one `row`.
    fn six_field_ledger(layout: &Layout, n: u64, row: &str) -> PathBuf {
        let file = path(layout, n);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(
            &file,
            format!("[]{{worker,start,end,outcome,branch,head}}:\n{row}\n"),
        )
        .unwrap();
        file
    }

    /// A ledger written before the cost fields reads as it did, and a record appended to
    /// it carries its cost under a header of its own.
    #[test]
    fn an_old_ledger_reads_and_takes_records_with_cost() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let file = six_field_ledger(
            &layout,
            3,
            "w1,null,\"2026-01-01T00:00:00Z\",agent-failed exit 1,null,null",
        );
        let old = read(&layout, 3).unwrap();
        assert_eq!(old.len(), 1);
        assert_eq!(old[0].usage.cost_usd, None);
        let usage = crate::agent_profile::Usage {
            cost_usd: Some(0.4),
            input_tokens: Some(10),
            session_id: Some("s1".into()),
            ..Default::default()
        };
        let r = Record::now(Some("w2"), None, Outcome::AccountLimited).with_usage(&usage);
        append(&layout, 3, &r).unwrap();
        append(&layout, 3, &r).unwrap();
        let got = read(&layout, 3).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].usage.cost_usd, Some(0.4));
        assert_eq!(got[2].usage.session_id.as_deref(), Some("s1"));
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text.matches("[]{").count(),
            2,
            "one new header, not one per record"
        );
        assert_eq!(failures(&got), 1, "account-limited is never a failure");
    }

    /// A ledger an older version wrote (six fields) gains the new header before the first
    /// new record: both read, the old ones without figures, and an oom-killed attempt
    /// counts as a failure.
    #[test]
    fn an_old_ledger_reads_beside_records_with_figures() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let file = six_field_ledger(
            &layout,
            9,
            "w0,null,\"2026-01-01T00:00:00Z\",worker-died,null,null",
        );
        let mut r = Record::now(Some("w1"), None, Outcome::OomKilled);
        r.cpu_ms = Some(1500);
        r.memory_peak_kib = Some(2048);
        append(&layout, 9, &r).unwrap();
        append(&layout, 9, &Record::now(Some("w2"), None, Outcome::Done)).unwrap();
        let got = read(&layout, 9).unwrap();
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0].cpu_ms, None);
        assert_eq!(got[1], r);
        assert_eq!(failures(&got), 2);
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.matches("[]{").count(), 2, "one new header: {text}");
    }

    #[test]
    fn append_read_count_and_resume() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert_eq!(read(&layout, 7).unwrap(), vec![]);
        let failed = Record::now(
            Some("w1"),
            Some("2026-01-01T00:00:00Z"),
            Outcome::AgentFailed(3),
        )
        .on_branch("afk/w1/7-x", Some("abc".into()));
        append(&layout, 7, &failed).unwrap();
        append(&layout, 7, &Record::now(None, None, Outcome::GivenBack)).unwrap();
        append(&layout, 7, &Record::now(None, None, Outcome::WorkerDied)).unwrap();
        let capped = Record::now(Some("w2"), None, Outcome::WallClockCapped)
            .on_branch("afk/w2/7-x", Some("def".into()));
        append(&layout, 7, &capped).unwrap();
        let got = read(&layout, 7).unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], failed);
        assert_eq!(failures(&got), 3);
        assert_eq!(resume_branch(&got), Some("afk/w2/7-x"));
        let text = std::fs::read_to_string(path(&layout, 7)).unwrap();
        assert!(text.starts_with("[]{worker,start,end,outcome,branch,head,cost_usd,"));
        assert_eq!(text.lines().count(), 5, "one header, one line per record");

        let comment = quarantine_comment(&got, "afk:quarantined");
        assert!(comment.contains("after 3 failed attempt(s)"), "{comment}");
        assert!(comment.contains("agent-failed exit 3, branch `afk/w1/7-x` (worker w1)"));
        assert!(comment.contains("remove the `afk:quarantined` label"));

        append(&layout, 7, &Record::now(None, None, Outcome::Quarantined)).unwrap();
        let got = read(&layout, 7).unwrap();
        assert_eq!(failures(&got), 0, "a quarantine resets the count");
        assert_eq!(resume_branch(&got), None);
    }

    #[test]
    fn a_rescue_is_resumed_and_old_headers_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        // A ledger written before the `rescued` field: its records read, and the next
        // append writes the current header first.
        let file = six_field_ledger(
            &layout,
            3,
            "w1,null,\"2026-01-01T00:00:00Z\",worker-died,null,null",
        );
        let died = Record::now(Some("w2"), None, Outcome::WorkerDied)
            .on_branch("afk/w2/3-x", Some("abc".into()))
            .rescued_to("refs/afk/rescue/3/a2", "def");
        append(&layout, 3, &died).unwrap();
        let got = read(&layout, 3).unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].rescued, None);
        assert_eq!(got[1], died);
        assert_eq!(resume_branch(&got), Some("refs/afk/rescue/3/a2"));
        assert_eq!(rescued_count(&got), 1);
        // An attempt that was given back with nothing of its own resumes the same rescue.
        append(&layout, 3, &Record::now(None, None, Outcome::GivenBack)).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.matches("pr,checks}:").count(), 1, "{text}");
        let got = read(&layout, 3).unwrap();
        assert_eq!(resume_branch(&got), Some("refs/afk/rescue/3/a2"));
        append(
            &layout,
            3,
            &Record::now(None, None, Outcome::AgentFailed(1)),
        )
        .unwrap();
        assert_eq!(resume_branch(&read(&layout, 3).unwrap()), None);
    }

    /// The ledger's record is on the disk when `append` returns: the first one with the
    /// entries that make it findable (`attempts/` in `.red/state/`, the file in
    /// `attempts/`), each after what it names; a later one with its data alone.
    #[test]
    fn a_record_is_synced_and_the_first_one_with_its_directory_entries() {
        use crate::fsutil::{SyncSeen, take_syncs};
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let file = path(&layout, 5);
        let attempts = file.parent().unwrap().to_path_buf();
        let r = Record::now(Some("w1"), None, Outcome::Done);
        take_syncs();
        append(&layout, 5, &r).unwrap();
        assert_eq!(
            take_syncs(),
            [
                SyncSeen::Dir(layout.state()),
                SyncSeen::Data(file.clone()),
                SyncSeen::Dir(attempts),
            ]
        );
        append(&layout, 5, &r).unwrap();
        assert_eq!(take_syncs(), [SyncSeen::Data(file)]);
    }
}
