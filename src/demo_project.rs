//! `afk-supervisor demo`: the first ten minutes, in one command.
//!
//! Builds a scratch project (a real git repo with a bare `origin`), files issues on the
//! embedded local tracker (the last one blocked by #1 through `req:1` /
//! `blocked:dependency`), and starts a real supervisor, a child of this same binary, whose
//! workers run the built-in demo agent ([`demo_agent`]: it commits a note in the issue's
//! worktree). It watches only what any operator can read, the supervisor's TOONL event log,
//! the tracker, the landing records and the attempt dirs (`docs/SPEC.md` §1, §3, §5, §11.22),
//! and prints a line as each issue is claimed, its checks fail or pass, its pull request is
//! opened and merged (`landing.merge = "auto"`: the local tracker merges once the checks
//! passed). #1's first round leaves its note unchecked, so its checks fail once and the agent
//! takes a second round. #1's merge closes it, so the supervisor's unblock belt promotes the
//! blocked issue. Once every issue's pull request is merged it stops the fleet and prints a
//! summary.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::afk_env;
use crate::event_log::{self, Kind};
use crate::exit_code;
use crate::git::Git;
use crate::layout::{Layout, WORKER_NAMESPACES};
use crate::toonl;
use crate::tracker::local::{ListFilter, LocalTracker, StateFilter};
use crate::tracker::{TrackerError, labels};

/// What `demo` was asked for.
#[derive(Debug, Clone)]
pub struct DemoOpts {
    pub workers: usize,
    pub issues: usize,
    /// Where to build the scratch project (must be absent or empty); default a new temp dir.
    pub dir: Option<PathBuf>,
    /// Keep the scratch dir after a successful run.
    pub keep: bool,
}

/// Why the demo failed. `kept` is the scratch dir, left in place for a look at the logs.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Bad options, found before anything was created.
    #[error("{0}")]
    Usage(String),
    #[error("{what}")]
    Failed { what: String, kept: Option<PathBuf> },
}

impl DemoError {
    fn failed(what: impl std::fmt::Display, kept: &Path) -> Self {
        DemoError::Failed {
            what: what.to_string(),
            kept: Some(kept.to_path_buf()),
        }
    }
}

/// How the demo's fleet run failed (the line `demo failed: …` says it).
#[derive(Debug, thiserror::Error)]
pub enum FleetFailure {
    #[error("the supervisor ended early ({0})")]
    EndedEarly(std::process::ExitStatus),
    #[error("the supervisor stopped with {0}")]
    StoppedWith(std::process::ExitStatus),
    #[error("waiting for the supervisor: {0}")]
    Wait(std::io::Error),
    #[error("the supervisor did not stop within 20s of SIGTERM; killed")]
    NoStop,
    #[error("the supervisor ended before the issues were done ({0})")]
    EndedBeforeDone(std::process::ExitStatus),
    #[error("reading the tracker: {0}")]
    ReadTracker(TrackerError),
    #[error("closing #1: {0}")]
    CloseBlocker(TrackerError),
    #[error("timed out after {secs}s with issues not handed over: {}", waiting.join(" "))]
    TimedOut { secs: u64, waiting: Vec<String> },
    #[error(transparent)]
    Log(#[from] toonl::LogError),
    #[error(transparent)]
    Seed(#[from] TrackerError),
}

/// Why the demo agent could not do its one job.
#[derive(Debug, thiserror::Error)]
pub enum DemoAgentError {
    #[error(
        "{} is not set to an issue number: run me from the built-in worker",
        afk_env::ISSUE
    )]
    NoIssue,
    #[error("working directory: {0}")]
    Cwd(std::io::Error),
    #[error("{what}: {source}")]
    Write {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
}

/// What the demo saw, for its summary (and for tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DemoSummary {
    pub issues: usize,
    /// Issues whose pull request was merged.
    pub merged: usize,
    pub attempts: usize,
    pub deaths: usize,
    pub respawns: usize,
    pub wall: Duration,
}

/// The most issues and workers the demo takes: it is a demonstration, not a load test.
pub const MAX_DEMO_ISSUES: usize = 50;
pub const MAX_DEMO_WORKERS: usize = 16;

/// How long the agent pretends to think, so a claim is visible before it is handed over.
const AGENT_PAUSE: Duration = Duration::from_millis(400);
/// The demo agent's command, after this binary's path: `<exe> demo-agent`. `crate::cli`
/// dispatches it before parsing the command line, so no help, completion or man page
/// offers it.
pub const AGENT_COMMAND: &str = "demo-agent";
/// The demo's checks (`[checks] command`): `<exe> demo-check`, dispatched like the agent.
pub const CHECK_COMMAND: &str = "demo-check";
/// The line the demo's checks want in every note.
const CHECKED: &str = "Checked.";

/// How often the demo looks at the log and the tracker.
const POLL: Duration = Duration::from_millis(100);

/// Runs the demo, printing progress to `out`; `exe` is this binary (supervisor, workers and
/// agent are all it).
pub fn run(opts: &DemoOpts, exe: &Path, out: &mut dyn Write) -> Result<DemoSummary, DemoError> {
    if opts.workers == 0 || opts.workers > MAX_DEMO_WORKERS {
        return Err(DemoError::Usage(format!(
            "--workers {}: the demo takes 1 to {MAX_DEMO_WORKERS} workers",
            opts.workers
        )));
    }
    if opts.issues == 0 || opts.issues > MAX_DEMO_ISSUES {
        return Err(DemoError::Usage(format!(
            "--issues {}: the demo takes 1 to {MAX_DEMO_ISSUES} issues",
            opts.issues
        )));
    }
    let started = Instant::now();
    let scratch = scratch_dir(opts.dir.as_deref())?;
    let result = run_in(opts, exe, &scratch, started, out);
    match result {
        Ok(summary) => {
            let kept = if opts.keep {
                Some(scratch.clone())
            } else {
                let repo = scratch.join("repo");
                let recorded = [std::fs::canonicalize(&repo).ok(), Some(repo)];
                let removed = std::fs::remove_dir_all(&scratch).ok();
                if removed.is_some() {
                    forget_checkout(&recorded);
                }
                removed.map_or_else(
                    || Some(scratch.clone()), // could not remove: say where it is
                    |()| None,
                )
            };
            print_summary(out, &summary, &scratch, kept.is_some());
            Ok(summary)
        }
        Err(e) => Err(e),
    }
}

/// The removed scratch checkout leaves the user's list of fleets (its supervisor recorded
/// it), or `list` would show it `gone` after every demo. A list that cannot be rewritten is
/// a warning: the demo itself went well.
fn forget_checkout(recorded: &[Option<PathBuf>]) {
    let forgot = crate::fleets::path().and_then(|file| {
        crate::fleets::forget(&file, |p| recorded.iter().flatten().any(|r| r == p))
    });
    if let Err(e) = forgot {
        eprintln!("afk-supervisor: warning: list of fleets: {e}");
    }
}

/// A new `afk-demo.<pid>.<k>` under `$TMPDIR`, made with an exclusive `mkdir`.
fn fresh_temp_dir() -> Result<PathBuf, DemoError> {
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for k in 0..100u32 {
        let p = base.join(format!(
            "afk-demo.{}.{}",
            std::process::id(),
            nanos.wrapping_add(k)
        ));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                last = Some(e);
                break;
            }
        }
    }
    Err(DemoError::Failed {
        what: format!(
            "{}: cannot create a scratch dir: {}",
            base.display(),
            last.map_or("no free name".into(), |e| e.to_string())
        ),
        kept: None,
    })
}

/// `dir` (created; refused unless absent or empty), else a fresh `afk-demo.XXXXXX` under
/// `$TMPDIR`.
fn scratch_dir(dir: Option<&Path>) -> Result<PathBuf, DemoError> {
    let usage = |d: &Path, why: String| DemoError::Usage(format!("--dir {}: {why}", d.display()));
    let path = match dir {
        Some(d) => {
            match std::fs::read_dir(d) {
                Ok(mut entries) => {
                    if entries.next().is_some() {
                        return Err(usage(d, "not empty; pass a new or empty directory".into()));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(d).map_err(|e| usage(d, e.to_string()))?;
                }
                Err(e) => return Err(usage(d, e.to_string())),
            }
            d.to_path_buf()
        }
        None => fresh_temp_dir()?,
    };
    std::fs::canonicalize(&path).map_err(|e| usage(&path, e.to_string()))
}

fn run_in(
    opts: &DemoOpts,
    exe: &Path,
    scratch: &Path,
    started: Instant,
    out: &mut dyn Write,
) -> Result<DemoSummary, DemoError> {
    let repo = scratch.join("repo");
    let layout = Layout::new(&repo);
    make_repo(scratch, &repo, exe, opts.workers)?;
    let tracker = LocalTracker::new(&layout, Git::new(&repo));
    let blocked = seed_issues(&tracker, opts.issues).map_err(|e| DemoError::failed(e, scratch))?;
    let _ = writeln!(
        out,
        "demo: {} issues filed in {}{}; starting a fleet of {}",
        opts.issues,
        repo.display(),
        blocked.map_or(String::new(), |b| format!(" (#{b} blocked by #1)")),
        opts.workers
    );
    let sup_out = scratch.join("supervisor.out");
    let mut child = start_supervisor(exe, &repo, &sup_out)
        .map_err(|e| DemoError::failed(format!("cannot start the supervisor: {e}"), scratch))?;
    let deadline = Duration::from_secs(40 + 2 * opts.issues as u64);
    let mut watch = Watch::new(&layout, opts.issues, blocked);
    let outcome = watch.follow(&tracker, &mut child, started, deadline, out);
    let stopped = stop_supervisor(&mut child);
    let log = layout.event_log();
    let counts = fleet_counts(&log);
    let what = match (outcome, stopped) {
        (Ok(()), Ok(())) => None,
        (Err(e), _) => Some(e),
        (Ok(()), Err(e)) => Some(e),
    };
    if let Some(what) = what {
        return Err(DemoError::failed(what, scratch));
    }
    let (deaths, respawns) = counts.map_err(|e| DemoError::failed(e, scratch))?;
    watch.print_table(out);
    Ok(DemoSummary {
        issues: opts.issues,
        merged: watch.done.len(),
        attempts: watch.attempts(),
        deaths,
        respawns,
        wall: started.elapsed(),
    })
}

/// The scratch project: `origin.git` (bare) and `repo` (its clone with one commit), with a
/// repo-local git identity so nothing depends on the user's git config, and the demo's
/// `.red/afk-supervisor.toml`.
fn make_repo(scratch: &Path, repo: &Path, exe: &Path, workers: usize) -> Result<(), DemoError> {
    let origin = scratch.join("origin.git");
    let fail = |e: String| DemoError::failed(e, scratch);
    let git = Git::new(scratch);
    let s = |p: &Path| p.display().to_string();
    git.run(&["init", "-q", "--bare", "-b", "main", &s(&origin)])
        .map_err(|e| fail(e.to_string()))?;
    git.run(&["init", "-q", "-b", "main", &s(repo)])
        .map_err(|e| fail(e.to_string()))?;
    let r = Git::new(repo);
    for (k, v) in [
        ("user.name", "AFK demo"),
        ("user.email", "afk-demo@example.invalid"),
        ("commit.gpgsign", "false"),
    ] {
        r.run(&["config", k, v]).map_err(|e| fail(e.to_string()))?;
    }
    std::fs::write(repo.join("README.md"), "# demo project\n")
        .map_err(|e| fail(format!("{}: {e}", repo.join("README.md").display())))?;
    r.run(&["add", "README.md"])
        .map_err(|e| fail(e.to_string()))?;
    r.run(&["commit", "-q", "-m", "initial commit"])
        .map_err(|e| fail(e.to_string()))?;
    r.run(&["remote", "add", "origin", &s(&origin)])
        .map_err(|e| fail(e.to_string()))?;
    r.run(&["push", "-q", "-u", "origin", "main"])
        .map_err(|e| fail(e.to_string()))?;
    let layout = Layout::new(repo);
    std::fs::create_dir_all(layout.red()).map_err(|e| fail(e.to_string()))?;
    let with_exe = |cmd: &str| {
        toml::Value::Array(vec![
            toml::Value::String(exe.display().to_string()),
            toml::Value::String(cmd.into()),
        ])
    };
    let (agent, check) = (with_exe(AGENT_COMMAND), with_exe(CHECK_COMMAND));
    // The demo's agent is this binary: where bubblewrap cannot run it (a machine with
    // only cargo), the demo says so and chooses `none` in its own config, as an operator
    // must; a real agent never falls back.
    let sandbox = match crate::sandbox::probe(
        crate::sandbox::SandboxMode::Bwrap,
        std::env::var_os("PATH").as_deref(),
        true,
        "the demo",
    ) {
        Ok(_) => String::new(),
        Err(e) => {
            eprintln!(
                "demo: {e}\ndemo: the demo's own agent runs unconfined instead (agent.sandbox = \"none\" in its config)"
            );
            "sandbox = \"none\"\n".to_string()
        }
    };
    let config = format!(
        "# written by `afk-supervisor demo`\n\
         [fleet]\nworkers = {workers}\n\n\
         [tracker]\nkind = \"local\"\n\n\
         [agent]\ncommand = {agent}\n{sandbox}\n\
         [checks]\ncommand = {check}\nmax_rounds = 2\n\n\
         [landing]\nmerge = \"auto\"\nwatch_interval_s = 1\n\n\
         [timing]\ntick_s = 1\nunblock_interval_s = 1\nstop_grace_s = 2\n"
    );
    std::fs::write(layout.repo_config(), config)
        .map_err(|e| fail(format!("{}: {e}", layout.repo_config().display())))
}

/// Files `n` issues: `n - 1` ready for an agent and, when `n > 1`, a last one blocked by #1.
/// Returns the blocked issue's number.
fn seed_issues(tracker: &LocalTracker, n: usize) -> Result<Option<u64>, TrackerError> {
    let ready = if n > 1 { n - 1 } else { n };
    for i in 1..=ready {
        tracker.create(
            &format!("Demo task {i}"),
            &format!("Write notes/issue-{i}.md and commit it."),
            &[labels::READY_FOR_AGENT],
        )?;
    }
    if n == 1 {
        return Ok(None);
    }
    tracker
        .create(
            "Follow-up to demo task 1",
            "Needs #1 closed first.",
            &[labels::BLOCKED_DEPENDENCY, "req:1"],
        )
        .map(Some)
}

/// `<exe> --repo R run`, its output to `supervisor.out`, without the caller's `RED_AFK_*`
/// variables (the demo's config must be what runs).
fn start_supervisor(exe: &Path, repo: &Path, out: &Path) -> std::io::Result<Child> {
    let log = std::fs::File::create(out)?;
    let mut cmd = Command::new(exe);
    cmd.arg("--repo").arg(repo).arg("run");
    for (k, _) in std::env::vars_os() {
        let k_str = k.to_string_lossy();
        if crate::afk_env::is_ours(&k_str)
            || matches!(&*k_str, "GIT_DIR" | "GIT_WORK_TREE" | "GIT_INDEX_FILE")
        {
            cmd.env_remove(&k);
        }
    }
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
}

/// SIGTERM, then up to 20 s for the fleet to stop (workers get `stop_grace_s` = 2 s), then
/// SIGKILL.
fn stop_supervisor(child: &mut Child) -> Result<(), FleetFailure> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(Some(status)) = child.try_wait() {
        return Err(FleetFailure::EndedEarly(status));
    }
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = crate::timeutil::deadline(Instant::now(), Duration::from_secs(20));
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(status))
                if matches!(status.code(), Some(exit_code::OK | exit_code::SIGTERM)) =>
            {
                return Ok(());
            }
            Ok(Some(status)) => return Err(FleetFailure::StoppedWith(status)),
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => return Err(FleetFailure::Wait(e)),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(FleetFailure::NoStop)
}

/// Whether a `slot.exit` record's text is a death: a worker's end by anything but exit 0
/// or 78 (host misconfigured: parked, not retried).
fn is_death(msg: &str) -> bool {
    ![exit_code::OK, exit_code::CONFIG]
        .iter()
        .any(|code| msg.contains(&format!(" exit {code} ")))
}

/// Deaths and respawns, from the event log: a death ([`is_death`]) before the stop; a
/// respawn is every spawn in a slot after its first.
fn fleet_counts(log: &Path) -> Result<(usize, usize), FleetFailure> {
    let events = event_log::read_events(log)?;
    let mut spawned: BTreeSet<u64> = BTreeSet::new();
    let (mut deaths, mut respawns) = (0, 0);
    for ev in &events {
        match &ev.kind {
            Kind::SupervisorStop => break,
            Kind::SlotSpawn => {
                if let Some(slot) = ev.slot
                    && !spawned.insert(slot)
                {
                    respawns += 1;
                }
            }
            Kind::SlotExit if is_death(&ev.msg) => deaths += 1,
            _ => {}
        }
    }
    Ok((deaths, respawns))
}

/// One issue as the demo followed it.
#[derive(Debug, Clone, Default)]
struct Seen {
    title: String,
    slot: Option<usize>,
    claimed: Option<Instant>,
    took: Option<Duration>,
    /// Its pull request, once opened.
    pr: Option<String>,
}

/// The demo's view of the run, built from the tracker, the landing records, the attempt
/// dirs and the event log.
struct Watch {
    layout: Layout,
    issues: usize,
    blocked: Option<u64>,
    seen: BTreeMap<u64, Seen>,
    /// Issues whose pull request was merged.
    done: BTreeSet<u64>,
    unblocked: bool,
    log_lines: usize,
}

impl Watch {
    fn new(layout: &Layout, issues: usize, blocked: Option<u64>) -> Self {
        Watch {
            layout: layout.clone(),
            issues,
            blocked,
            seen: BTreeMap::new(),
            done: BTreeSet::new(),
            unblocked: false,
            log_lines: 0,
        }
    }

    /// Follows the run until every issue's pull request is merged, the supervisor ends, or
    /// the deadline passes.
    fn follow(
        &mut self,
        tracker: &LocalTracker,
        child: &mut Child,
        started: Instant,
        limit: Duration,
        out: &mut dyn Write,
    ) -> Result<(), FleetFailure> {
        let deadline = crate::timeutil::deadline(started, limit);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(FleetFailure::EndedBeforeDone(status));
            }
            self.report_log(out);
            let all = tracker
                .list(&ListFilter {
                    state: StateFilter::All,
                    labels: Vec::new(),
                })
                .map_err(FleetFailure::ReadTracker)?;
            let slots = self.attempt_slots();
            let now = Instant::now();
            let mut issues = all;
            issues.sort_by_key(|i| i.number);
            for issue in &issues {
                let n = issue.number;
                let record = crate::landing::read(&self.layout, n).ok().flatten();
                let seen = self.seen.entry(n).or_default();
                seen.title.clone_from(&issue.title);
                // Claimed once its attempt dir (which names the slot) exists: the worker makes
                // it right after labelling the issue `running`.
                if seen.slot.is_none() {
                    seen.slot = slots.get(&n).copied();
                }
                if seen.claimed.is_none() && (slots.contains_key(&n) || record.is_some()) {
                    seen.claimed = Some(now);
                    let slot = seen.slot.map_or("?".to_string(), |s| s.to_string());
                    let _ = writeln!(out, "#{n} claimed by slot {slot}");
                }
                let Some(record) = record else { continue };
                if seen.pr.is_none()
                    && let Some(url) = &record.url
                {
                    seen.pr = Some(url.clone());
                    let took = seen.claimed.map(|c| now.saturating_duration_since(c));
                    seen.took = took;
                    let _ = writeln!(
                        out,
                        "#{n} done in {:.1}s → pull request {url} (checks: {})",
                        took.unwrap_or_default().as_secs_f64(),
                        record.checks
                    );
                }
                if record.state == crate::landing::PrState::Merged && self.done.insert(n) {
                    let _ = writeln!(
                        out,
                        "#{n} merged: {} → {}; #{n} closed",
                        record.name(),
                        record.base
                    );
                }
            }
            if let Some(b) = self.blocked {
                let dependent = issues.iter().find(|i| i.number == b);
                let first_closed = issues
                    .iter()
                    .any(|i| i.number == 1 && i.state == crate::tracker::IssueState::Closed);
                if first_closed
                    && !self.unblocked
                    && dependent.is_some_and(|d| !d.has_label(labels::BLOCKED_DEPENDENCY))
                {
                    self.unblocked = true;
                    let _ = writeln!(out, "#1 closed; #{b} unblocked");
                }
            }
            if self.done.len() >= self.issues {
                self.report_log(out);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let waiting: Vec<String> = issues
                    .iter()
                    .filter(|i| !self.done.contains(&i.number))
                    .map(|i| format!("#{} [{}]", i.number, i.labels.join(",")))
                    .collect();
                return Err(FleetFailure::TimedOut {
                    secs: limit.as_secs(),
                    waiting,
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// New event-log records worth a line: deaths, parked slots, tripped circuits.
    fn report_log(&mut self, out: &mut dyn Write) {
        let Ok(events) = event_log::read_events(&self.layout.event_log()) else {
            return;
        };
        for ev in events.iter().skip(self.log_lines) {
            let slot = ev.slot.map_or(String::new(), |s| format!("slot {s}: "));
            let worth = match &ev.kind {
                Kind::SlotExit => is_death(&ev.msg),
                Kind::SlotParked
                | Kind::CircuitTrip
                | Kind::SupervisorError
                | Kind::TrackerError => true,
                // The checks' verdicts and a pull request's fix rounds, as they happen.
                Kind::PrChecksFailed | Kind::PrChecksPassed | Kind::PrFixRequested => true,
                _ => false,
            };
            if worth {
                let _ = writeln!(out, "  {slot}{} ({})", ev.msg, ev.kind);
            }
        }
        self.log_lines = events.len();
    }

    /// Issue number → slot, from the attempt dirs (`<ns>/<worker-id>/<N>-a<k>/`) of the
    /// supervisor's workers, whose ids are `sup-<pid>-slot-<i>-<n>`.
    fn attempt_slots(&self) -> BTreeMap<u64, usize> {
        let mut found = BTreeMap::new();
        for (worker, n, _) in self.attempt_dirs() {
            if let Some(slot) = slot_of_worker(&worker) {
                found.insert(n, slot);
            }
        }
        found
    }

    /// Every attempt dir: (worker id, issue, attempt).
    fn attempt_dirs(&self) -> Vec<(String, u64, u64)> {
        let mut found = Vec::new();
        for ns in WORKER_NAMESPACES {
            let Ok(workers) = std::fs::read_dir(self.layout.worker_namespace(ns)) else {
                continue;
            };
            for w in workers.flatten() {
                let worker = w.file_name().to_string_lossy().into_owned();
                let Ok(attempts) = std::fs::read_dir(w.path()) else {
                    continue;
                };
                for a in attempts.flatten() {
                    if let Some((n, k)) =
                        crate::layout::parse_attempt_dir(&a.file_name().to_string_lossy())
                    {
                        found.push((worker.clone(), n, k));
                    }
                }
            }
        }
        found
    }

    fn attempts(&self) -> usize {
        self.attempt_dirs().len()
    }

    fn print_table(&self, out: &mut dyn Write) {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<6} {:<26} {:>4} {:>7}  STATE",
            "ISSUE", "TITLE", "SLOT", "TIME"
        );
        for (n, s) in &self.seen {
            let state = match (&s.pr, self.done.contains(n)) {
                (Some(pr), true) => format!("{pr} merged"),
                (Some(pr), false) => format!("{pr} open"),
                (None, _) => "-".into(),
            };
            let _ = writeln!(
                out,
                "{:<6} {:<26} {:>4} {:>7}  {state}{}",
                format!("#{n}"),
                s.title.chars().take(26).collect::<String>(),
                s.slot.map_or("?".into(), |x| x.to_string()),
                s.took
                    .map_or("-".into(), |d| format!("{:.1}s", d.as_secs_f64())),
                if self.done.contains(n) {
                    " (closed)"
                } else {
                    ""
                },
            );
        }
    }
}

/// The slot in a supervisor-made worker id `sup-<pid>-slot-<i>-<n>`.
fn slot_of_worker(id: &str) -> Option<usize> {
    let rest = id.strip_prefix("sup-")?;
    let (_, rest) = rest.split_once("-slot-")?;
    let (slot, _) = rest.split_once('-')?;
    slot.parse().ok()
}

fn print_summary(out: &mut dyn Write, s: &DemoSummary, scratch: &Path, kept: bool) {
    let layout = Layout::new(scratch.join("repo"));
    let where_ = |p: PathBuf| {
        if kept {
            p.display().to_string()
        } else {
            format!("{} (removed; pass --keep to keep it)", p.display())
        }
    };
    let _ = writeln!(out);
    let _ = writeln!(out, "demo summary");
    for (k, v) in [
        ("issues", format!("{} ({} merged)", s.issues, s.merged)),
        ("attempts", s.attempts.to_string()),
        ("deaths", s.deaths.to_string()),
        ("respawns", s.respawns.to_string()),
        ("wall time", format!("{:.1}s", s.wall.as_secs_f64())),
        ("repo", where_(layout.repo().to_path_buf())),
        ("event log", where_(layout.event_log())),
    ] {
        let _ = writeln!(out, "  {k:<10} {v}");
    }
}

/// The built-in demo agent (`afk-supervisor demo-agent`), run by the worker in the issue's
/// worktree: writes `notes/issue-<N>.md` and commits it. A stand-in for a coding agent.
pub fn demo_agent(
    env: &std::collections::HashMap<String, String>,
) -> Result<String, DemoAgentError> {
    let issue = env
        .get(afk_env::ISSUE)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .ok_or(DemoAgentError::NoIssue)?;
    let title = env.get(afk_env::ISSUE_TITLE).map_or("", String::as_str);
    let branch = env.get(afk_env::BRANCH).map_or("", String::as_str);
    // #1's first round forgets the line its checks want; told so, the second adds it.
    let told = env
        .get(afk_env::GUIDANCE_FILE)
        .is_some_and(|g| !g.is_empty());
    let checked = if issue == "1" && !told {
        String::new()
    } else {
        format!("\n{CHECKED}\n")
    };
    let cwd = std::env::current_dir().map_err(DemoAgentError::Cwd)?;
    let note = format!("notes/issue-{issue}.md");
    std::fs::create_dir_all(cwd.join("notes")).map_err(|source| DemoAgentError::Write {
        what: "notes/".into(),
        source,
    })?;
    std::fs::write(
        cwd.join(&note),
        format!("# {title}\n\nWorked unattended on branch {branch}.\n{checked}"),
    )
    .map_err(|source| DemoAgentError::Write {
        what: note.clone(),
        source,
    })?;
    std::thread::sleep(AGENT_PAUSE);
    let git = Git::new(&cwd);
    git.run(&["add", "--", &note])?;
    git.run(&["commit", "-q", "-m", &format!("afk: #{issue} {title}")])?;
    Ok(format!("demo agent: committed {note}"))
}

/// The demo's checks (`<exe> demo-check`, run by the worker in the issue's worktree after
/// the agent): every `notes/issue-*.md` must carry a `Checked.` line. The failures, one
/// line each; none when they pass.
pub fn demo_check(worktree: &Path) -> Result<Vec<String>, DemoAgentError> {
    let notes = worktree.join("notes");
    let entries = std::fs::read_dir(&notes).map_err(|source| DemoAgentError::Write {
        what: "notes/".into(),
        source,
    })?;
    let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    names.sort();
    let mut failures = Vec::new();
    for p in names {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        if !text.lines().any(|l| l.trim() == CHECKED) {
            failures.push(format!(
                "{}: no `{CHECKED}` line",
                p.strip_prefix(worktree).unwrap_or(&p).display()
            ));
        }
    }
    Ok(failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_from_worker_ids() {
        assert_eq!(slot_of_worker("sup-123-slot-2-7"), Some(2));
        assert_eq!(slot_of_worker("sup-1-slot-10-1"), Some(10));
        assert_eq!(slot_of_worker("solo-5"), None);
        assert_eq!(slot_of_worker("sup-1-slot-x-1"), None);
    }

    #[test]
    fn counts_from_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.toonl");
        let mut log = event_log::EventLog::open(&path).unwrap();
        let ev = |kind: Kind, slot: usize, msg: &str| event_log::Record::now(kind, msg).slot(slot);
        let exited = |w: &str, code: i32| format!("worker {w} exit {code} after 1.0s");
        for e in [
            ev(Kind::SlotSpawn, 0, "spawned worker a"),
            ev(Kind::SlotSpawn, 1, "spawned worker b"),
            ev(Kind::SlotExit, 0, &exited("a", exit_code::OK)),
            ev(Kind::SlotSpawn, 0, "spawned worker c"),
            ev(Kind::SlotExit, 1, &exited("b", exit_code::FAILED)),
            ev(Kind::SlotExit, 0, &exited("c", exit_code::CONFIG)),
            ev(Kind::SupervisorStop, 0, "stop"),
            ev(Kind::SlotExit, 1, "worker d killed by SIGTERM after 1.0s"),
        ] {
            log.append(&e).unwrap();
        }
        assert_eq!(fleet_counts(&path).unwrap(), (1, 1));
    }

    #[test]
    fn options_are_bounded_before_anything_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("d");
        let mut sink = Vec::new();
        for (w, n) in [(0, 3), (1, 0), (MAX_DEMO_WORKERS + 1, 1)] {
            let opts = DemoOpts {
                workers: w,
                issues: n,
                dir: Some(target.clone()),
                keep: true,
            };
            let r = run(&opts, Path::new("/bin/false"), &mut sink);
            assert!(matches!(r, Err(DemoError::Usage(_))), "{w} {n}");
        }
        assert!(!target.exists());
        std::fs::create_dir_all(target.join("x")).unwrap();
        let opts = DemoOpts {
            workers: 1,
            issues: 1,
            dir: Some(target.clone()),
            keep: true,
        };
        let r = run(&opts, Path::new("/bin/false"), &mut sink);
        assert!(matches!(r, Err(DemoError::Usage(m)) if m.contains("not empty")));
    }
}
