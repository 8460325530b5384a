//! Hostile input from outside (issue 16): issue texts too big or too strange for an
//! environment string, huge numbers in `RED_AFK_*`, a queue too long for one listing and
//! worker ids git refuses as branch components. Real processes throughout: the built-in
//! worker (`worker --once`) with a shell script as its agent, the real local tracker, and
//! the fake `gh` of tests/it/support where GitHub is the backend.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use afk_supervisor::tracker::LocalTracker;

use crate::support::cli::SUPERVISED;
use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::{Repo, TestEnv, fleet, local_comments, local_labels, wait_until};

/// Where the agent script copies what it was given.
const SEEN: &str = "seen";

/// An agent that records every text variable and file it was given (`set -u`: a missing
/// variable fails it), then exits 0.
const RECORDING_AGENT: &str = r#"
out="$AFK_TEST_SEEN"
mkdir -p "$out"
cp "$RED_AFK_ISSUE_TITLE_FILE" "$out/title.file"
cp "$RED_AFK_ISSUE_BODY_FILE" "$out/body.file"
printf %s "$RED_AFK_ISSUE_TITLE" > "$out/title.env"
printf %s "$RED_AFK_ISSUE_BODY" > "$out/body.env"
printf %s "${RED_AFK_ISSUE_TITLE_TRUNCATED:-0}" > "$out/title.truncated"
printf %s "${RED_AFK_ISSUE_BODY_TRUNCATED:-0}" > "$out/body.truncated"
"#;

struct Fx {
    env: TestEnv,
    repo: Repo,
    tracker: LocalTracker,
}

impl Fx {
    /// A repo on the local tracker whose agent is `script`, or the program `agent` names.
    fn new(agent: Agent) -> Self {
        let env = TestEnv::new();
        let repo = env.repo_with_origin();
        let program = match agent {
            Agent::Script(script) => {
                let path = env.path().join("agent.sh");
                fs::write(&path, format!("#!/bin/sh\nset -eu\n{script}\n")).unwrap();
                fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
                path
            }
            Agent::Missing => env.path().join("no-such-agent"),
        };
        env.write(
            &repo.path,
            ".red/afk-supervisor.toml",
            &format!(
                "[tracker]\nkind = \"local\"\n[timing]\nstop_grace_s = 2\n[agent]\ncommand = [{:?}]\n{}",
                program.display().to_string(),
                crate::support::REPORTING_AGENT
            ),
        );
        fs::write(
            repo.path.join(".git/info/exclude"),
            ".red/tmp/\n.red/state/\n",
        )
        .unwrap();
        let tracker = env.local_tracker(&repo.path);
        Fx { env, repo, tracker }
    }

    fn seen(&self) -> PathBuf {
        self.env.path().join(SEEN)
    }

    fn read_seen(&self, name: &str) -> Vec<u8> {
        fs::read(self.seen().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn worker(&self, args: &[&str], vars: &[(&str, &str)]) -> Command {
        let mut c = self.env.bin();
        c.arg("--repo")
            .arg(&self.repo.path)
            .arg("worker")
            .args(args)
            .env("AFK_TEST_SEEN", self.seen())
            .envs(vars.iter().copied());
        c
    }

    /// The binary on this repo: `afk-supervisor --repo <repo> <args>`.
    fn cli(&self, args: &[&str]) -> Command {
        let mut c = self.env.bin();
        c.arg("--repo").arg(&self.repo.path).args(args);
        c
    }

    /// [`Fx::cli`] run to its end; exit 0 is required and stdout returned.
    fn cli_ok(&self, args: &[&str]) -> String {
        let o = self.cli(args).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", describe(&o));
        String::from_utf8(o.stdout).expect("stdout is UTF-8")
    }

    fn run_worker(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        self.worker(args, vars).output().unwrap()
    }

    fn labels(&self, n: u64) -> Vec<String> {
        local_labels(&self.tracker, n)
    }

    fn comments(&self, n: u64) -> Vec<String> {
        local_comments(&self.tracker, n)
    }

    fn branches(&self) -> Vec<String> {
        self.env
            .git(
                &self.repo.path,
                &["branch", "--list", "--format=%(refname:short)", "afk/*"],
            )
            .lines()
            .map(str::to_string)
            .collect()
    }
}

enum Agent<'a> {
    Script(&'a str),
    Missing,
}

fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The bound of the environment form of an issue text (docs/guide/agents-and-spend.md, "The built-in worker").
const ENV_TEXT_MAX: usize = 32 * 1024;

// ---- 1. issue texts that no environment string can hold ----

/// A body far over Linux's 128 KiB per-string limit (multi-byte, so the cut must find a
/// UTF-8 boundary) reaches the agent whole through a file and bounded in the environment.
#[test]
fn a_huge_body_reaches_the_agent_through_a_file() {
    let f = Fx::new(Agent::Script(RECORDING_AGENT));
    let body = "é🦀 hostile body line\n".repeat(9000);
    assert!(body.len() > 200 * 1024);
    let n = f
        .tracker
        .create("Huge body", &body, &["ready-for-agent"])
        .unwrap();

    let o = f.run_worker(&["--once"], &SUPERVISED);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(f.labels(n), vec!["ready-for-human"]);
    assert_eq!(f.read_seen("body.file"), body.as_bytes());
    let env_form = String::from_utf8(f.read_seen("body.env")).expect("cut at a char boundary");
    assert!(env_form.len() <= ENV_TEXT_MAX, "{}", env_form.len());
    assert!(env_form.len() > ENV_TEXT_MAX - 4, "{}", env_form.len());
    assert!(body.starts_with(&env_form));
    assert_eq!(f.read_seen("body.truncated"), b"1");
    assert_eq!(f.read_seen("title.env"), b"Huge body");
    assert_eq!(f.read_seen("title.truncated"), b"0");
}

/// A NUL in a local title (and body) cannot be in an environment string: the files keep
/// it, the variables drop it and say so.
#[test]
fn a_nul_in_a_local_title_does_not_stop_the_agent() {
    let f = Fx::new(Agent::Script(RECORDING_AGENT));
    let n = f
        .tracker
        .create("Fix\0 the parser", "a\0b", &["ready-for-agent"])
        .unwrap();

    let o = f.run_worker(&["--once"], &SUPERVISED);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(f.labels(n), vec!["ready-for-human"]);
    assert_eq!(f.read_seen("title.file"), b"Fix\0 the parser");
    assert_eq!(f.read_seen("title.env"), b"Fix the parser");
    assert_eq!(f.read_seen("title.truncated"), b"1");
    assert_eq!(f.read_seen("body.file"), b"a\0b");
    assert_eq!(f.read_seen("body.env"), b"ab");
    assert_eq!(f.read_seen("body.truncated"), b"1");
}

/// The size of an environment as `execve` counts it: each string with its NUL, and a
/// pointer per string.
fn exec_size(vars: &[(OsString, OsString)]) -> usize {
    vars.iter().map(|(k, v)| k.len() + v.len() + 2 + 8).sum()
}

/// When this issue's data is what makes the agent's `execve` fail (here: E2BIG, with the
/// host's argument space at its 128 KiB floor), the issue is set aside for a human with one
/// comment, and the worker goes on to the next issue instead of handing it back to be
/// claimed again by every worker.
#[test]
fn an_issue_the_agent_cannot_be_started_for_is_set_aside_for_a_human() {
    let f = Fx::new(Agent::Script("exit 0"));
    let big = f
        .tracker
        .create(
            "Too big to start",
            &"x".repeat(64 * 1024),
            &["ready-for-agent"],
        )
        .unwrap();
    let small = f
        .tracker
        .create("Small", "fine", &["ready-for-agent"])
        .unwrap();

    // With RLIMIT_STACK at 512 KiB, argv + environment may take 128 KiB. Fill the worker's
    // environment so that it and its git calls fit with room to spare, while the 32 KiB
    // environment form of the big body does not.
    let c = f.worker(&[], &SUPERVISED);
    let bin = c.get_program().to_os_string();
    let args: Vec<OsString> = c.get_args().map(|a| a.to_os_string()).collect();
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.to_string_lossy();
            !k.starts_with("RED_AFK_") && !k.starts_with("GIT_")
        })
        .collect();
    for (k, v) in c.get_envs() {
        vars.retain(|(have, _)| have != k);
        if let Some(v) = v {
            vars.push((k.to_os_string(), v.to_os_string()));
        }
    }
    let used = exec_size(&vars) + args.iter().map(|a| a.len() + 9).sum::<usize>() + 4096;
    let room = 128 * 1024 - 24 * 1024;
    assert!(used < room, "the test's own environment is too big: {used}");
    vars.push(("AFK_TEST_PADDING".into(), "p".repeat(room - used).into()));
    let mut sh = Command::new("sh");
    sh.env_clear()
        .envs(vars)
        .args(["-c", "ulimit -s 512 && exec \"$@\"", "sh"])
        .arg(bin)
        .args(args);
    let o = sh.output().unwrap();

    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert_eq!(f.labels(big), vec!["ready-for-human"]);
    let comments = f.comments(big);
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert!(
        comments[0].contains("could not be started for this issue"),
        "{comments:?}"
    );
    assert!(!f.repo.path.join(".red/tmp/claims/1").exists());
    // The worker went on with the next issue.
    assert_eq!(f.labels(small), vec!["ready-for-human"]);
    assert_eq!(f.comments(small).len(), 1);
}

/// An agent program that is not there is the host's fault (exit 78: the supervisor parks the
/// slot), and the issue goes back untouched: no comment, no `running`.
#[test]
fn a_missing_agent_program_is_a_host_error_and_leaves_the_issue_alone() {
    let f = Fx::new(Agent::Missing);
    let n = f
        .tracker
        .create("Any", "body", &["ready-for-agent"])
        .unwrap();
    let o = f.run_worker(&["--once"], &SUPERVISED);
    assert_eq!(o.status.code(), Some(78), "{}", describe(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no-such-agent"), "{err}");
    assert_eq!(f.labels(n), vec!["ready-for-agent"]);
    assert!(f.comments(n).is_empty());
    assert!(!f.repo.path.join(".red/tmp/claims/1").exists());
}

// ---- 2. huge numbers from the environment ----

#[test]
fn a_huge_stop_grace_from_the_environment_is_a_config_error() {
    let f = Fx::new(Agent::Script("exit 0"));
    let mut sup = f
        .env
        .bin()
        .arg("--repo")
        .arg(&f.repo.path)
        .args(["run", "--workers", "0"])
        .env("RED_AFK_STOP_GRACE_S", u64::MAX.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Before the fix the supervisor started and died of a panic on SIGTERM.
    if !wait_until(Duration::from_secs(20), || {
        sup.try_wait().ok().flatten().is_some()
    }) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(sup.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let o = sup.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(78), "{}", describe(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("RED_AFK_STOP_GRACE_S"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("out of range"), "{line}");
}

#[test]
fn a_huge_liveness_interval_is_a_config_error_before_any_claim() {
    let f = Fx::new(Agent::Script("exit 0"));
    let n = f
        .tracker
        .create("Any", "body", &["ready-for-agent"])
        .unwrap();
    let max = u64::MAX.to_string();
    let mut vars = SUPERVISED.to_vec();
    vars.push(("RED_AFK_LIVENESS_S", &max));
    let o = f.run_worker(&["--once"], &vars);
    assert_eq!(o.status.code(), Some(78), "{}", describe(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("RED_AFK_LIVENESS_S"), "{err}");
    assert_eq!(f.labels(n), vec!["ready-for-agent"]);
}

// ---- 3. the oldest issues first, however long the queue ----

/// Writes `count` open `ready-for-agent` issues straight into the local store in the
/// documented hand-editable format (docs/guide/trackers.md, "The local store"), `#2` without the label.
fn fill_store(f: &Fx, count: u64) {
    let dir = f.tracker.dir().join("issues");
    fs::create_dir_all(&dir).unwrap();
    for n in 1..=count {
        let labels = if n == 2 {
            "[]"
        } else {
            "[\"ready-for-agent\"]"
        };
        fs::write(
            dir.join(format!("{n}.toml")),
            format!(
                "number = {n}\ntitle = \"issue {n}\"\nstate = \"OPEN\"\nlabels = {labels}\n\
                 created_at = \"2026-01-01T00:00:00Z\"\nbody = \"\"\n"
            ),
        )
        .unwrap();
    }
    fs::write(
        f.tracker.dir().join("meta.toml"),
        format!("next_issue = {}\nnext_pr = 1\n", count + 1),
    )
    .unwrap();
}

#[test]
fn with_ten_thousand_local_issues_the_lowest_numbers_are_claimed_first() {
    let f = Fx::new(Agent::Script("exit 0"));
    fill_store(&f, 10_000);
    for expected in [1, 3] {
        let o = f.run_worker(&["--once"], &SUPERVISED);
        assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("claimed #{expected} ")),
            "{}",
            describe(&o)
        );
        assert_eq!(f.labels(expected), vec!["ready-for-human"]);
    }
    assert!(f.labels(2).is_empty());
    for n in [4, 9_801, 10_000] {
        assert_eq!(f.labels(n), vec!["ready-for-agent"], "#{n}");
    }
}

#[test]
fn on_github_the_lowest_numbers_are_claimed_first() {
    let f = Fx::new(Agent::Script("exit 0"));
    let gh = FakeGh::install(&f.env);
    let issues: Vec<FakeIssue> = (1..=300)
        .map(|n| FakeIssue::open(n, &["ready-for-agent"]))
        .collect();
    gh.set_issues(&issues);
    let o = f
        .worker(&["--once"], &SUPERVISED)
        .env("PATH", gh.path_env())
        .args(["--tracker", "gh"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let labels = |n: u64| gh.issue(n).unwrap().labels;
    assert_eq!(labels(1), vec!["ready-for-human"]);
    for n in [2, 101, 300] {
        assert_eq!(labels(n), vec!["ready-for-agent"], "#{n}");
    }
    let listings: Vec<Vec<String>> = gh
        .calls()
        .into_iter()
        .filter(|c| c.starts_with(&["issue".into(), "list".into()]))
        .collect();
    assert_eq!(listings.len(), 1, "{listings:?}");
    assert!(
        listings[0]
            .windows(2)
            .any(|w| w == ["--search", "sort:created-asc"]),
        "{listings:?}"
    );
}

// ---- 5. worker ids git refuses as a branch component ----

#[test]
fn worker_ids_git_refuses_fall_back_to_a_solo_id_before_claiming() {
    for bad in ["a..b", "x.lock"] {
        let f = Fx::new(Agent::Script("exit 0"));
        let n = f
            .tracker
            .create("Any", "body", &["ready-for-agent"])
            .unwrap();
        let o = f.run_worker(
            &["--once"],
            &[("RED_AFK_SWEEPS_DONE", "1"), ("RED_AFK_WORKER_ID", bad)],
        );
        assert_eq!(o.status.code(), Some(0), "{bad}: {}", describe(&o));
        assert_eq!(f.labels(n), vec!["ready-for-human"], "{bad}");
        let branches = f.branches();
        assert_eq!(branches.len(), 1, "{bad}: {branches:?}");
        assert!(branches[0].starts_with("afk/solo-"), "{bad}: {branches:?}");
    }
}

// ---- 4. names that are not UTF-8, start with `-` or carry newlines ----

/// `git -C dir update-ref <name> <rev>` with a name of raw bytes.
fn update_ref(env: &TestEnv, dir: &std::path::Path, name: &[u8], rev: &str) {
    use std::os::unix::ffi::OsStrExt;
    let o = env
        .command("git")
        .arg("-C")
        .arg(dir)
        .arg("update-ref")
        .arg(std::ffi::OsStr::from_bytes(name))
        .arg(rev)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", describe(&o));
}

/// Every ref under `prefix` in `dir`, as raw bytes.
fn refs(env: &TestEnv, dir: &std::path::Path, prefix: &str) -> Vec<Vec<u8>> {
    let o = env
        .command("git")
        .arg("-C")
        .arg(dir)
        .args(["for-each-ref", "--format=%(refname)", prefix])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    o.stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// A closed issue's branch whose name is not UTF-8, locally and on origin: the reaper
/// spares it on both sides with one line saying why, still reaps the ordinary branch of the
/// same issue, and exits 0. Before the fix it deleted the U+FFFD-mangled name: `reaped
/// (remote)` for a branch still there, every run, and exit 1 on the local side.
#[test]
fn the_reaper_spares_branch_names_that_are_not_utf8() {
    let f = Fx::new(Agent::Script("exit 0"));
    let n = f.tracker.create("Done", "", &[]).unwrap();
    f.tracker.close(n).unwrap();
    let mut odd = format!("refs/heads/afk/{n}-caf").into_bytes();
    odd.extend_from_slice(b"\xe9\xff");
    let plain = format!("refs/heads/afk/{n}-plain");
    for dir in [&f.repo.path, &f.repo.origin] {
        update_ref(&f.env, dir, &odd, "refs/heads/main");
        update_ref(&f.env, dir, plain.as_bytes(), "refs/heads/main");
    }
    for round in 0..2 {
        let out = f.cli_ok(&["reap"]);
        let shown = format!("afk/{n}-caf\\xe9\\xff — name is not UTF-8");
        let expected_counts = if round == 0 {
            "remote-afk=2 local-afk=2"
        } else {
            "remote-afk=1 local-afk=1"
        };
        assert!(out.contains(expected_counts), "round {round}: {out}");
        assert_eq!(
            out.lines()
                .filter(|l| l.contains("name is not UTF-8"))
                .collect::<Vec<_>>(),
            vec![
                format!("spared (remote): {shown}"),
                format!("spared (local): {shown}")
            ],
            "round {round}: {out}"
        );
        let reaped: Vec<&str> = out.lines().filter(|l| l.starts_with("reaped")).collect();
        if round == 0 {
            assert_eq!(
                reaped,
                vec![
                    format!("reaped (remote): afk/{n}-plain #{n} — issue closed"),
                    format!("reaped (local): afk/{n}-plain #{n} — issue closed"),
                ],
                "{out}"
            );
        } else {
            assert!(reaped.is_empty(), "round {round}: {out}");
        }
    }
    assert_eq!(
        refs(&f.env, &f.repo.path, "refs/heads/afk/"),
        vec![odd.clone()]
    );
    assert_eq!(refs(&f.env, &f.repo.origin, "refs/heads/afk/"), vec![odd]);
}

/// Stranded docs with hostile names under `.red/adr/`: one whose name is not UTF-8 is
/// skipped with one line saying why, while the others (a leading `-`, a newline, an ESC
/// sequence) land byte for byte and are shown escaped, one line each. Before the fix the one
/// name failed the sweep's whole status parse, at every boot, and nothing landed.
#[test]
fn a_doc_name_that_is_not_utf8_does_not_strand_the_other_docs() {
    use std::os::unix::ffi::OsStrExt;
    let f = Fx::new(Agent::Script("exit 0"));
    let adr = f.repo.path.join(".red/adr");
    fs::create_dir_all(&adr).unwrap();
    fs::write(
        adr.join(std::ffi::OsStr::from_bytes(b"caf\xe9.md")),
        "latin-1\n",
    )
    .unwrap();
    let landing = ["-rf.md", "two\nlines.md", "esc\x1b[2J.md"];
    for name in landing {
        fs::write(adr.join(name), format!("{name}\n")).unwrap();
    }
    let out = f.cli_ok(&["sweep", "--only", "docs-sweep"]);
    assert!(!out.contains('\x1b'), "{out:?}");
    let skipped: Vec<&str> = out.lines().filter(|l| l.contains("not UTF-8")).collect();
    assert_eq!(
        skipped,
        vec![
            "docs-sweep skip .red/adr/caf\\xe9.md: name is not UTF-8: the sweep cannot land it; land it by hand"
        ],
        "{out}"
    );
    for shown in [
        ".red/adr/-rf.md",
        ".red/adr/two\\nlines.md",
        ".red/adr/esc\\e[2J.md",
    ] {
        assert_eq!(
            out.lines()
                .filter(|l| l.starts_with(&format!("docs-sweep land {shown} ")))
                .count(),
            1,
            "{shown}: {out}"
        );
    }
    for name in landing {
        let o = f.env.git_output(
            &f.repo.origin,
            &["cat-file", "-p", &format!("main:.red/adr/{name}")],
        );
        assert_eq!(
            o.stdout,
            format!("{name}\n").as_bytes(),
            "{name:?}: {}",
            describe(&o)
        );
    }
    // The skipped doc is still only here, untouched.
    assert_eq!(
        fs::read(adr.join(std::ffi::OsStr::from_bytes(b"caf\xe9.md"))).unwrap(),
        b"latin-1\n"
    );
}

// ---- 6. raw bytes on the operator's terminal and in logs ----

/// A title that would clear the screen, retitle the terminal, return the carriage and add a
/// forged line, and labels with commas, spaces, control bytes and `req:` garbage, written
/// straight into the local store as a person (or a sync tool) could.
const HOSTILE_TITLE_TOML: &str =
    r#"evil\u001b[2J\u001b]0;pwned\u0007\r\nFAKE: claimed #999\u009b\u007f"#;
const HOSTILE_TITLE_SHOWN: &str = r"evil\e[2J\e]0;pwned\x07\r\nFAKE: claimed #999\u{9b}\x7f";

fn write_issue(f: &Fx, n: u64, title_toml: &str, labels_toml: &str, body_toml: &str) {
    let dir = f.tracker.dir().join("issues");
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join(format!("{n}.toml")),
        format!(
            "number = {n}\ntitle = \"{title_toml}\"\nstate = \"OPEN\"\nlabels = {labels_toml}\n\
             created_at = \"2026-01-01T00:00:00Z\"\nbody = \"{body_toml}\"\n"
        ),
    )
    .unwrap();
    fs::write(
        f.tracker.dir().join("meta.toml"),
        format!("next_issue = {}\nnext_pr = 1\n", n + 1),
    )
    .unwrap();
}

/// Nothing a terminal acts on: no C0 control but the line breaks, no DEL, no C1 control.
fn assert_terminal_safe(what: &str, out: &str) {
    let bad: Vec<char> = out
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(bad.is_empty(), "{what}: raw {bad:?} in {out:?}");
}

#[test]
fn issue_list_and_show_escape_control_bytes_and_json_stays_exact() {
    let f = Fx::new(Agent::Script("exit 0"));
    write_issue(
        &f,
        1,
        HOSTILE_TITLE_TOML,
        r#"["ready-for-agent", "a,b", "with space", "x\u001b[31m"]"#,
        r"line one\r\nline \u001b[1mtwo\n",
    );
    let list = f.cli_ok(&["issue", "list"]);
    assert_terminal_safe("issue list", &list);
    assert_eq!(
        list,
        format!("#1 OPEN {HOSTILE_TITLE_SHOWN} [ready-for-agent, a,b, with space, x\\e[31m]\n")
    );
    let show = f.cli_ok(&["issue", "show", "1"]);
    assert_terminal_safe("issue show", &show);
    assert!(
        show.starts_with(&format!("#1 {HOSTILE_TITLE_SHOWN}\n")),
        "{show}"
    );
    assert!(show.contains("\nline one\\r\nline \\e[1mtwo\n"), "{show}");
    // --json stays exact: the title byte for byte.
    let json: serde_json::Value =
        serde_json::from_str(&f.cli_ok(&["issue", "show", "1", "--json"])).unwrap();
    assert_eq!(
        json["title"],
        "evil\u{1b}[2J\u{1b}]0;pwned\u{7}\r\nFAKE: claimed #999\u{9b}\u{7f}"
    );
}

/// The built-in worker's `claimed #N (title)` line (what lands in the slot log) is one
/// line with the title's control bytes escaped; the agent still gets the title exact.
#[test]
fn the_workers_claim_line_escapes_the_title() {
    let f = Fx::new(Agent::Script(RECORDING_AGENT));
    write_issue(&f, 1, HOSTILE_TITLE_TOML, r#"["ready-for-agent"]"#, "");
    let o = f.run_worker(&["--once"], &SUPERVISED);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let out = String::from_utf8(o.stdout.clone()).unwrap();
    let err = String::from_utf8(o.stderr.clone()).unwrap();
    assert_terminal_safe("worker stdout", &out);
    assert_terminal_safe("worker stderr", &err);
    let claimed: Vec<&str> = out.lines().filter(|l| l.contains("claimed #")).collect();
    assert_eq!(
        claimed,
        vec![format!(
            "worker w1: claimed #1 ({HOSTILE_TITLE_SHOWN}); attempt 1-a1"
        )],
        "{out}"
    );
    assert_eq!(
        f.read_seen("title.file"),
        "evil\u{1b}[2J\u{1b}]0;pwned\u{7}\r\nFAKE: claimed #999\u{9b}\u{7f}".as_bytes()
    );
}

/// `req:` garbage and labels with commas or spaces promote nothing, and the sweep's
/// lines are one each and safe for a terminal.
#[test]
fn req_label_garbage_keeps_an_issue_blocked_with_one_safe_line() {
    let f = Fx::new(Agent::Script("exit 0"));
    let closed = f.tracker.create("blocker", "", &[]).unwrap();
    f.tracker.close(closed).unwrap();
    let cases = [
        r#"["blocked:dependency", "req:1,2"]"#,
        r#"["blocked:dependency", "req: 1"]"#,
        r#"["blocked:dependency", "req:x\u001b[2J"]"#,
        r#"["blocked:dependency", "req:99999999999999999999999"]"#,
        r#"["blocked:dependency", "req:-1"]"#,
        r#"["blocked:dependency", "req:"]"#,
    ];
    for (i, labels) in cases.iter().enumerate() {
        write_issue(&f, i as u64 + 2, "blocked", labels, "");
    }
    let out = f.cli_ok(&["sweep", "--only", "unblock"]);
    assert_terminal_safe("sweep", &out);
    let kept: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("unblock keep #"))
        .collect();
    assert_eq!(kept.len(), cases.len(), "{out}");
    assert!(!out.contains("unblock promote"), "{out}");
    for n in 2..2 + cases.len() as u64 {
        assert_eq!(f.labels(n)[0], "blocked:dependency", "#{n}");
    }
}

/// `RED_AFK_TRUNK` that git would read as an option is refused at config time, exit 78,
/// naming the variable; nothing is fetched and no issue is claimed.
#[test]
fn a_trunk_git_would_read_as_an_option_is_a_config_error() {
    let f = Fx::new(Agent::Script("exit 0"));
    let n = f
        .tracker
        .create("Any", "body", &["ready-for-agent"])
        .unwrap();
    let o = f
        .cli(&["sweep", "--only", "docs-sweep"])
        .env("RED_AFK_TRUNK", "--upload-pack=touch pwned")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(78), "{}", describe(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("RED_AFK_TRUNK: fleet.base must be a branch name"),
        "{err}"
    );
    let mut vars = SUPERVISED.to_vec();
    vars.push(("RED_AFK_TRUNK", "--upload-pack=touch pwned"));
    let o = f.run_worker(&["--once"], &vars);
    assert_eq!(o.status.code(), Some(78), "{}", describe(&o));
    assert_eq!(f.labels(n), vec!["ready-for-agent"]);
    assert!(!f.repo.path.join("pwned").exists());
}

/// `status` shows a runner from `RED_AFK_RUNNER` (and every other text) escaped.
#[test]
fn status_escapes_a_hostile_runner() {
    let mut fl = fleet::Fleet::new("while true; do sleep 0.1; done\n", fleet::FAST_TIMING);
    fl.extra_env.push((
        "RED_AFK_RUNNER".into(),
        "evil\u{1b}[2J\r\nfleet: target=99".into(),
    ));
    fl.start(&["run", "--workers", "1"]);
    fl.wait_workers(1);
    let o = fl.run_cmd(&["status"]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let out = String::from_utf8(o.stdout.clone()).unwrap();
    assert_terminal_safe("status", &out);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("fleet: ")).count(),
        1,
        "{out}"
    );
    assert!(
        out.contains(r"runner=evil\e[2J\r\nfleet: target=99"),
        "{out}"
    );
    let o = fl.run_cmd(&["stop"]);
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert!(fl.wait_exit().code().is_some());
}
