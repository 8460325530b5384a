//! The built-in worker end to end: a real repo with a bare origin, the real local tracker,
//! and small shell scripts as the agent.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::cli::{self, SUPERVISED};
use crate::support::{self, Repo, TestEnv, json_comments, json_labels, stderr, stdout, wait_until};
use afk_supervisor::event_log::Kind;

struct Fixture {
    env: TestEnv,
    repo: Repo,
}

impl Fixture {
    /// A repo whose config runs `agent` (shell script text) as the agent.
    fn new(agent: Option<&str>) -> Self {
        Self::with_timing(agent, "")
    }

    /// As [`Fixture::new`], with more `[timing]` lines.
    fn with_timing(agent: Option<&str>, timing: &str) -> Self {
        let env = TestEnv::new();
        let repo = env.repo_with_origin();
        let red = repo.path.join(".red");
        fs::create_dir_all(&red).unwrap();
        let mut cfg = format!("[tracker]\nkind = \"local\"\n[timing]\nstop_grace_s = 2\n{timing}");
        if let Some(script) = agent {
            let path = env.path().join("agent.sh");
            fs::write(&path, format!("#!/bin/sh\nset -eu\n{script}\n")).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
            cfg.push_str(&format!(
                "[agent]\ncommand = [{:?}]\n{}",
                path.display().to_string(),
                support::REPORTING_AGENT
            ));
        }
        fs::write(red.join("afk-supervisor.toml"), cfg).unwrap();
        // Keep the runtime lanes out of `git status`, as an adopting repo would.
        fs::write(
            repo.path.join(".git/info/exclude"),
            ".red/tmp/\n.red/state/\n",
        )
        .unwrap();
        Fixture { env, repo }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.env.bin();
        c.arg("--repo").arg(&self.repo.path).args(args);
        c
    }

    fn run(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        let mut c = self.cmd(args);
        c.envs(vars.iter().copied());
        c.output().unwrap()
    }

    fn new_issue(&self, title: &str, labels: &[&str]) -> u64 {
        let mut args = vec!["issue", "new", "--title", title];
        for l in labels {
            args.extend(["--label", l]);
        }
        let out = self.run(&args, &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    /// Runs `worker --once` under a supervisor's variables and checks its exit code.
    fn work_once(&self, want: i32) -> Output {
        cli::work_once(self.env.bin_on(&self.repo.path), want)
    }

    fn issue(&self, n: u64) -> Value {
        let out = self.run(&["issue", "show", &n.to_string(), "--json"], &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn labels(&self, n: u64) -> Vec<String> {
        json_labels(&self.issue(n))
    }

    fn comments(&self, n: u64) -> Vec<String> {
        json_comments(&self.issue(n))
    }

    fn workers_dir(&self) -> PathBuf {
        self.repo.path.join(".red/tmp/workers")
    }

    fn attempt_dirs(&self) -> Vec<PathBuf> {
        support::attempt_dirs(&self.repo.path)
    }
}

#[test]
fn boot_only_reports_which_path_it_took() {
    let f = Fixture::new(None);
    let o = f.run(&["worker", "--boot-only"], &SUPERVISED);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).lines().last(),
        Some("boot complete (--boot-only): sweeps skipped (supervisor-owned), no issues processed")
    );
    assert!(!stdout(&o).contains("boot sweeps complete"));

    let o = f.run(&["worker", "--boot-only"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("boot sweeps complete: orphans removed="),
        "{out}"
    );
    assert_eq!(
        out.lines().last(),
        Some("boot complete (--boot-only): sweeps ran, no issues processed")
    );
    // A clean exit leaves no worker shell behind.
    assert_eq!(fs::read_dir(f.workers_dir()).unwrap().count(), 0);
}

#[test]
fn without_an_agent_the_host_is_misconfigured() {
    let f = Fixture::new(None);
    let n = f.new_issue("Needs an agent", &["ready-for-agent"]);
    let o = f.run(&["worker", "--once"], &SUPERVISED);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    let line = the_error_line(&o);
    assert!(
        line.starts_with("afk-supervisor: agent.command is not set (")
            && line.contains(".red/afk-supervisor.toml"),
        "{line}"
    );
    // Nothing was claimed.
    assert_eq!(f.labels(n), vec!["ready-for-agent"]);
    assert_nothing_claimed(&f);
}

/// The worker's one error line (beside it on stderr: the tracker it chose).
fn the_error_line(o: &Output) -> String {
    let err = stderr(o);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("afk-supervisor:"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    lines[0].to_string()
}

/// No claim dir, no attempt dir, no worker shell: the worker stopped before claiming.
fn assert_nothing_claimed(f: &Fixture) {
    let claims = f.repo.path.join(".red/tmp/claims");
    assert_eq!(
        fs::read_dir(&claims).map_or(0, |d| d.count()),
        0,
        "no claim dir"
    );
    assert!(f.attempt_dirs().is_empty(), "no attempt dir");
    assert_eq!(fs::read_dir(f.workers_dir()).map_or(0, |d| d.count()), 0);
}

#[test]
fn an_agent_that_cannot_be_executed_is_refused_before_any_claim() {
    let f = Fixture::new(None);
    let not_exec = f.env.path().join("agent-not-executable.sh");
    fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&not_exec, fs::Permissions::from_mode(0o644)).unwrap();
    let cfg = f.repo.path.join(".red/afk-supervisor.toml");
    let base = fs::read_to_string(&cfg).unwrap();
    let n = f.new_issue("Needs a real agent", &["ready-for-agent"]);
    for (program, why) in [
        ("/no/such/agent".to_string(), ": does not exist".to_string()),
        (
            not_exec.display().to_string(),
            ": is not executable".to_string(),
        ),
        (
            "no-such-agent-on-path".to_string(),
            ": not found on PATH".to_string(),
        ),
    ] {
        fs::write(&cfg, format!("{base}[agent]\ncommand = [{program:?}]\n")).unwrap();
        let o = f.run(&["worker", "--once"], &SUPERVISED);
        assert_eq!(o.status.code(), Some(78), "{program}: {}", stderr(&o));
        let line = the_error_line(&o);
        assert!(
            line.starts_with(&format!("afk-supervisor: agent.command[0] = {program:?} ("))
                && line.contains(&cfg.display().to_string())
                && line.contains(&why),
            "{line}"
        );
        assert_eq!(f.labels(n), vec!["ready-for-agent"]);
        assert!(f.comments(n).is_empty());
        assert_nothing_claimed(&f);
    }
}

#[test]
fn works_one_issue_and_hands_it_to_a_human() {
    let f = Fixture::new(Some(
        "echo \"$RED_AFK_ISSUE:$RED_AFK_ISSUE_TITLE\" > done.txt\n\
         git add done.txt\n\
         git commit -q -m \"afk: #$RED_AFK_ISSUE\"",
    ));
    let blocked = f.new_issue("Blocked one", &["ready-for-agent", "blocked:dependency"]);
    let first = f.new_issue("Add the greeting", &["ready-for-agent"]);
    let second = f.new_issue("Second thing", &["ready-for-agent"]);
    let o = f.run(&["worker", "--once"], &SUPERVISED);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));

    // Handed to a person with its pull request (`docs/SPEC.md` §11.22).
    let mut labels = f.labels(first);
    labels.sort();
    assert_eq!(labels, vec!["afk:pr-open", "ready-for-human"]);
    let comments = f.comments(first);
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0].contains(
            "opened pull request local-pr-1: 1 commit(s) on branch `afk/w1/2-add-the-greeting`"
        ),
        "{comments:?}"
    );
    // The branch landed on origin with the agent's commit.
    let shown = f.env.git(
        &f.repo.origin,
        &["show", "afk/w1/2-add-the-greeting:done.txt"],
    );
    assert_eq!(shown, "2:Add the greeting\n");
    // Only one issue per --once; the blocked one was never touched.
    assert_eq!(f.labels(second), vec!["ready-for-agent"]);
    let mut b = f.labels(blocked);
    b.sort();
    assert_eq!(b, vec!["blocked:dependency", "ready-for-agent"]);
    // Claim released, worktree gone, attempt kept with its state file.
    assert!(!f.repo.path.join(".red/tmp/claims/2").exists());
    let attempts = f.attempt_dirs();
    assert_eq!(attempts.len(), 1);
    assert!(attempts[0].ends_with("w1/2-a1"), "{attempts:?}");
    assert!(!attempts[0].join("worktree").exists());
    let state: Value =
        serde_json::from_slice(&fs::read(attempts[0].join("afk.state.json")).unwrap()).unwrap();
    assert_eq!(state["version"], 1);
    assert_eq!(state["worker_id"], "w1");
    assert_eq!(state["current"], Value::Null);
    assert_eq!(state["envelope"]["posted"], true);
    assert!(attempts[0].join("liveness.toonl").exists());
    // The primary checkout is untouched.
    assert_eq!(
        f.env
            .git(&f.repo.path, &["rev-parse", "--abbrev-ref", "HEAD"])
            .trim(),
        "main"
    );
    assert!(!f.repo.path.join("done.txt").exists());
}

#[test]
fn a_failing_agent_returns_the_issue_and_dies() {
    let f = Fixture::new(Some("exit 3"));
    let n = f.new_issue("Will fail", &["ready-for-agent"]);
    let o = f.run(&["worker", "--once"], &SUPERVISED);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(f.labels(n), vec!["ready-for-agent"]);
    let comments = f.comments(n);
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0].contains("failed (agent exit 3)"),
        "{comments:?}"
    );
    assert!(!f.repo.path.join(".red/tmp/claims/1").exists());
    // The next attempt of the same issue gets the next number.
    let o = f.run(&["worker", "--once"], &SUPERVISED);
    assert_eq!(o.status.code(), Some(1));
    let mut names: Vec<String> = f
        .attempt_dirs()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["1-a1", "1-a2"]);
    // A failed attempt keeps its worktree (the agent's uncommitted work) for a person.
    for a in f.attempt_dirs() {
        assert!(a.join("worktree").is_dir(), "{}", a.display());
    }
    let branches = f.env.git(&f.repo.path, &["branch", "--list", "afk/*"]);
    assert!(branches.contains("afk/w1/1-will-fail\n"), "{branches}");
    assert!(branches.contains("afk/w1/1-will-fail-a2"), "{branches}");
}

#[test]
fn empty_queue_and_retire_file_exit_zero_without_claiming() {
    let f = Fixture::new(Some("exit 0"));
    let o = f.run(&["worker", "--once"], &SUPERVISED);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("no ready-for-agent issue"),
        "{}",
        stdout(&o)
    );

    let n = f.new_issue("Ready", &["ready-for-agent"]);
    let retire = f.env.path().join("slot-0.retire");
    fs::write(&retire, "").unwrap();
    let retire_s = retire.display().to_string();
    let mut vars = SUPERVISED.to_vec();
    vars.push(("RED_AFK_RETIRE_FILE", &retire_s));
    let o = f.run(&["worker", "--once"], &vars);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(f.labels(n), vec!["ready-for-agent"]);
    assert!(f.attempt_dirs().is_empty());
}

/// A worker SIGTERMed mid-issue (`stall_mark`: after the supervisor marked the attempt
/// as stopped for a stall) gives the issue back and ends its attempt with `outcome`.
fn sigterm_mid_issue(stall_mark: bool, outcome: &str) {
    let marker = TestEnv::new();
    let started = marker.path().join("agent-started");
    let f = Fixture::new(Some(&format!("touch {}\nexec sleep 60", started.display())));
    let n = f.new_issue("Long one", &["ready-for-agent"]);
    let mut child = f
        .cmd(&["worker", "--once"])
        .envs(SUPERVISED)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    assert!(
        wait_until(Duration::from_secs(30), || started.exists()),
        "agent never started"
    );
    assert_eq!(f.labels(n), vec!["running"]);
    if stall_mark {
        let attempts = f.attempt_dirs();
        assert_eq!(attempts.len(), 1);
        fs::write(
            attempts[0].join(afk_supervisor::attempt_state::STALL_KILLED_FILE),
            "",
        )
        .unwrap();
    }
    // As the supervisor does: the whole group gets SIGTERM.
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert_eq!(f.labels(n), vec!["ready-for-agent"]);
    assert!(!f.repo.path.join(".red/tmp/claims/1").exists());
    let attempts = f.attempt_dirs();
    assert_eq!(attempts.len(), 1);
    assert!(attempts[0].join("worktree").is_dir());
    let state: Value =
        serde_json::from_slice(&fs::read(attempts[0].join("afk.state.json")).unwrap()).unwrap();
    assert_eq!(state["current"], Value::Null);
    assert_eq!(state["last"]["stage"], "interrupted");
    let outcomes: Vec<String> = self::attempts(&f, n)
        .iter()
        .map(|r| r["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outcomes, vec![outcome.to_string()]);
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
}

#[test]
fn sigterm_mid_issue_gives_the_issue_back() {
    sigterm_mid_issue(false, "given-back");
}

/// Stopped for a stall, the attempt is a failure (`stalled`), so an agent that always hangs
/// reaches quarantine instead of being requeued forever.
#[test]
fn a_stall_stopped_attempt_gives_the_issue_back_as_stalled() {
    sigterm_mid_issue(true, "stalled");
}

fn liveness_stages(f: &Fixture) -> Vec<String> {
    let attempts = f.attempt_dirs();
    assert_eq!(attempts.len(), 1);
    let text = fs::read_to_string(attempts[0].join("liveness.toonl")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("[]{ts,pid,issue,stage}:"));
    lines
        .map(|l| l.rsplit(',').next().unwrap().to_string())
        .collect()
}

/// Liveness records mark progress: an agent that only sleeps leaves the single start
/// record however long it runs, so the supervisor's stall check can see it hang.
#[test]
fn an_idle_agent_leaves_one_liveness_record() {
    let f = Fixture::new(Some("sleep 3"));
    f.new_issue("Quiet", &["ready-for-agent"]);
    let mut vars = SUPERVISED.to_vec();
    vars.push(("RED_AFK_LIVENESS_S", "1"));
    let o = f.run(&["worker", "--once"], &vars);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(liveness_stages(&f), vec!["agent"]);
}

#[test]
fn an_agent_that_changes_its_worktree_records_progress() {
    let f = Fixture::new(Some(
        "sleep 1\necho one > a.txt\nsleep 2\ngit add a.txt\ngit commit -q -m one\nsleep 2",
    ));
    f.new_issue("Busy", &["ready-for-agent"]);
    let mut vars = SUPERVISED.to_vec();
    vars.push(("RED_AFK_LIVENESS_S", "1"));
    let o = f.run(&["worker", "--once"], &vars);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let stages = liveness_stages(&f);
    assert_eq!(stages[0], "agent");
    assert!(stages.len() >= 2, "{stages:?}");
    assert!(stages[1..].iter().all(|s| s == "progress"), "{stages:?}");
}

fn attempts(f: &Fixture, n: u64) -> Vec<Value> {
    f.issue(n)["attempts"].as_array().unwrap().clone()
}

/// An agent that always fails burns exactly `max_failed_attempts` (3) attempts; then the
/// issue leaves the queue with one comment listing them, and no fourth attempt runs, even
/// when someone adds `ready-for-agent` back without removing the quarantine label.
#[test]
fn an_always_failing_agent_is_quarantined_after_three_attempts() {
    let marks = TestEnv::new();
    let runs = marks.path().join("runs");
    let f = Fixture::new(Some(&format!("echo run >> {}\nexit 3", runs.display())));
    let n = f.new_issue("Never works", &["ready-for-agent"]);
    for _ in 1..=3 {
        f.work_once(1);
    }
    let o = f.work_once(0);
    assert!(
        stdout(&o).contains("no ready-for-agent issue"),
        "{}",
        stdout(&o)
    );
    assert_eq!(fs::read_to_string(&runs).unwrap().lines().count(), 3);

    let mut labels = f.labels(n);
    labels.sort();
    assert_eq!(labels, vec!["afk:quarantined", "ready-for-human"]);
    let comments = f.comments(n);
    assert_eq!(comments.len(), 3, "{comments:?}");
    assert_eq!(
        comments
            .iter()
            .filter(|c| c.contains("failed (agent exit 3)"))
            .count(),
        2
    );
    let quarantine: Vec<&String> = comments
        .iter()
        .filter(|c| c.contains("quarantined this issue"))
        .collect();
    assert_eq!(quarantine.len(), 1, "{comments:?}");
    let q = quarantine[0];
    assert!(q.contains("after 3 failed attempt(s)"), "{q}");
    assert_eq!(
        q.matches(": agent-failed exit 3, branch `afk/w1/1-never-works")
            .count(),
        3,
        "{q}"
    );
    assert!(q.contains("remove the `afk:quarantined` label"), "{q}");

    let ledger = attempts(&f, n);
    let outcomes: Vec<&str> = ledger
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        vec![
            "agent-failed exit 3",
            "agent-failed exit 3",
            "agent-failed exit 3",
            "quarantined"
        ]
    );
    assert_eq!(ledger[0]["worker"], "w1");
    assert_eq!(ledger[1]["branch"], "afk/w1/1-never-works-a2");
    let shown = stdout(&f.run(&["issue", "show", &n.to_string()], &[]));
    assert_eq!(
        shown.matches("agent-failed exit 3  worker=w1").count(),
        3,
        "{shown}"
    );

    // Never requeued by accident: the quarantine label alone keeps workers off it.
    let o = f.run(
        &["issue", "label", &n.to_string(), "--add", "ready-for-agent"],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    f.work_once(0);
    assert_eq!(fs::read_to_string(&runs).unwrap().lines().count(), 3);
    assert_eq!(f.comments(n).len(), 3);
}

/// An agent past `timing.attempt_max_s` is stopped with everything it started; its work is
/// rescued (what it left uncommitted as a WIP commit) and pushed, the issue goes back, and
/// the next attempt starts from that branch and is told so.
#[test]
fn a_capped_attempt_is_stopped_and_the_next_one_resumes_its_branch() {
    let marks = TestEnv::new();
    let sleeper = marks.path().join("sleeper.pid");
    let resumed = marks.path().join("resumed");
    let f = Fixture::with_timing(
        Some(&format!(
            "if [ -z \"${{RED_AFK_RESUME_BRANCH:-}}\" ]; then\n\
             echo one > one.txt\ngit add one.txt\ngit commit -q -m one\n\
             echo uncommitted > two.txt\n\
             sleep 60 &\necho $! > {sleeper}\nwait\n\
             else\n\
             {{ echo \"$RED_AFK_RESUME_BRANCH\"; cat one.txt; git log --format=%s; }} > {resumed}\n\
             fi",
            sleeper = sleeper.display(),
            resumed = resumed.display(),
        )),
        "attempt_max_s = 2\n",
    );
    let n = f.new_issue("Slow one", &["ready-for-agent"]);
    let o = f.work_once(0);
    assert!(
        stderr(&o).contains("reached the wall-clock cap (2s)"),
        "{}",
        stderr(&o)
    );
    // The agent's own child is gone too.
    let pid = fs::read_to_string(&sleeper).unwrap().trim().to_string();
    let gone = || {
        fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |st| {
            st.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), gone),
        "sleeper {pid} survived"
    );

    assert_eq!(f.labels(n), vec!["ready-for-agent"]);
    let comments = f.comments(n);
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert!(
        comments[0].contains("reached the wall-clock cap (2s)"),
        "{comments:?}"
    );
    assert!(
        comments[0].contains("on branch `afk/w1/1-slow-one`"),
        "{comments:?}"
    );
    let head = f
        .env
        .git(&f.repo.origin, &["rev-parse", "afk/w1/1-slow-one"]);
    let files = f.env.git(
        &f.repo.origin,
        &["ls-tree", "--name-only", "afk/w1/1-slow-one"],
    );
    assert!(files.lines().any(|l| l == "one.txt"), "{files}");
    assert!(
        files.lines().any(|l| l == "two.txt"),
        "the uncommitted file is rescued: {files}"
    );
    let subject = f.env.git(
        &f.repo.origin,
        &["log", "-1", "--format=%s", "afk/w1/1-slow-one"],
    );
    assert_eq!(subject.trim(), "WIP: rescued attempt 1-a1 (wall-clock cap)");
    let ledger = attempts(&f, n);
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0]["outcome"], "wall-clock-capped");
    assert_eq!(ledger[0]["branch"], "afk/w1/1-slow-one");
    assert_eq!(ledger[0]["head"], head.trim());
    assert_eq!(
        ledger[0]["rescued"],
        format!("afk/w1/1-slow-one {}", head.trim())
    );
    assert!(
        comments[0].contains(&format!(
            "work rescued to afk/w1/1-slow-one at {}",
            head.trim()
        )),
        "{comments:?}"
    );
    // And an event in the fleet's log, written by the worker itself.
    let layout = afk_supervisor::layout::Layout::new(&f.repo.path);
    let events = afk_supervisor::event_log::read_events(&layout.event_log()).unwrap();
    let rescued: Vec<_> = events
        .iter()
        .filter(|e| e.kind == Kind::AttemptRescued)
        .collect();
    assert_eq!(rescued.len(), 1, "{events:?}");
    assert_eq!(rescued[0].issue, Some(n));
    assert!(
        rescued[0].msg.contains(&format!(
            "work rescued to afk/w1/1-slow-one at {}",
            head.trim()
        )),
        "{}",
        rescued[0].msg
    );

    f.work_once(0);
    let seen = fs::read_to_string(&resumed).unwrap();
    let mut lines = seen.lines();
    assert_eq!(lines.next(), Some("afk/w1/1-slow-one"));
    assert_eq!(
        lines.next(),
        Some("one"),
        "the worktree has the first attempt's file"
    );
    assert_eq!(
        lines.next(),
        Some("WIP: rescued attempt 1-a1 (wall-clock cap)"),
        "and the rescue: {seen}"
    );
    assert_eq!(lines.next(), Some("one"), "and its commit: {seen}");
    let ledger = attempts(&f, n);
    let outcomes: Vec<&str> = ledger
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, vec!["wall-clock-capped", "done"]);
    assert_eq!(f.labels(n), vec!["ready-for-human"]);
}

/// An issue that just failed goes behind the issues nobody has tried: a failing agent
/// on three issues runs #1, #2, #3 and only then #1 again, so a broken agent shows on
/// other issues before one of them is tried three times.
#[test]
fn an_issue_that_just_failed_goes_behind_the_untried_ones() {
    let marks = TestEnv::new();
    let runs = marks.path().join("runs");
    let f = Fixture::new(Some(&format!(
        "echo \"$RED_AFK_ISSUE\" >> {}\nexit 3",
        runs.display()
    )));
    for t in ["One", "Two", "Three"] {
        f.new_issue(t, &["ready-for-agent"]);
    }
    for _ in 1..=4 {
        f.work_once(1);
    }
    let ran: Vec<String> = fs::read_to_string(&runs)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ran, ["1", "2", "3", "1"]);
    for n in 1..=3 {
        assert_eq!(f.labels(n), vec!["ready-for-agent"], "#{n}");
    }
}

/// Deaths recorded by restores count too: an issue whose ledger already holds three
/// `worker-died` attempts is quarantined by the next worker that claims it, before any
/// agent runs.
#[test]
fn an_issue_that_killed_three_workers_is_quarantined_at_its_next_claim() {
    use afk_supervisor::ledger::{self, Outcome, Record};
    let marks = TestEnv::new();
    let runs = marks.path().join("runs");
    let f = Fixture::new(Some(&format!("echo run >> {}", runs.display())));
    let n = f.new_issue("Kills workers", &["ready-for-agent"]);
    let layout = afk_supervisor::layout::Layout::new(&f.repo.path);
    ledger::append(&layout, n, &Record::now(None, None, Outcome::GivenBack)).unwrap();
    for _ in 0..3 {
        ledger::append(&layout, n, &Record::now(None, None, Outcome::WorkerDied)).unwrap();
    }
    let o = f.work_once(0);
    assert!(
        stderr(&o).contains("quarantined after 3 failed attempt(s)"),
        "{}",
        stderr(&o)
    );
    assert!(!runs.exists(), "no agent ran");
    let mut labels = f.labels(n);
    labels.sort();
    assert_eq!(labels, vec!["afk:quarantined", "ready-for-human"]);
    let comments = f.comments(n);
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert_eq!(
        comments[0].matches(": worker-died").count(),
        3,
        "{comments:?}"
    );
    assert_eq!(
        comments[0].matches(": given-back").count(),
        1,
        "{comments:?}"
    );
    assert!(f.attempt_dirs().is_empty());
    assert!(!f.repo.path.join(".red/tmp/claims/1").exists());
}

/// An agent that prints without measure (#22): the slot log keeps at most
/// `log.slot_log_max_bytes` of the attempt's output, its head and its tail, with the cut
/// marked between them. The two streams are read on two threads, so their last lines may
/// land in either order: both end with `TAIL-END`, and so does the log whatever the order.
#[test]
fn a_chatty_agents_output_is_capped_with_its_head_and_tail_kept() {
    let f = Fixture::with_timing(
        Some(
            "echo HEAD-START\n\
             i=0; while [ $i -lt 40 ]; do head -c 100000 /dev/zero | tr '\\0' 'x'; echo; echo err-$i >&2; i=$((i+1)); done\n\
             echo TAIL-END; echo TAIL-END >&2",
        ),
        "[log]\nslot_log_max_bytes = 65536\n",
    );
    f.new_issue("Talks a lot", &["ready-for-agent"]);
    let o = f.run(&["worker", "--once"], &SUPERVISED);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(
        out.len() + err.len() < 65536 + 8192,
        "{} + {} bytes",
        out.len(),
        err.len()
    );
    assert!(out.contains("HEAD-START"), "{}", &out[..out.len().min(300)]);
    assert!(
        out.trim_end().ends_with("TAIL-END"),
        "{}",
        &out[out.len().saturating_sub(300)..]
    );
    assert!(
        out.contains("bytes of the agent's output cut here (log.slot_log_max_bytes = 65536)"),
        "{}",
        &out[..out.len().min(300)]
    );
}
