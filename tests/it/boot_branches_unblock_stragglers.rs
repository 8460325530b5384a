//! The branch reaper, unblock sweep and straggler check inside the boot suite
//! (`afk-supervisor sweep --only branches,unblock,stragglers`): their counts in the summary
//! line, their decisions, dry runs, and tracker failures.

use std::process::Command;

use afk_supervisor::tracker::LocalTracker;

use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::{Repo, TestEnv, run, set};

const ONLY: &str = "branches,unblock,stragglers";

fn bin(env: &TestEnv, repo: &Repo) -> Command {
    let mut c = env.bin_locks_in_tmpdir();
    c.arg("--repo").arg(&repo.path);
    c
}

/// Branches: afk/2-done (closed; both sides), afk/1-live (open; both sides), afk/odd
/// (origin only, unrecognised).
fn branches(env: &TestEnv, repo: &Repo) {
    for b in ["afk/2-done", "afk/1-live", "afk/odd"] {
        env.git(&repo.path, &["branch", b]);
    }
    env.git(
        &repo.path,
        &[
            "push",
            "-q",
            "origin",
            "afk/2-done",
            "afk/1-live",
            "afk/odd",
        ],
    );
    env.git(&repo.path, &["branch", "-D", "-q", "afk/odd"]);
}

fn local_fixture() -> (TestEnv, Repo, LocalTracker) {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let t = env.local_tracker(&repo.path);
    let issues: [&[&str]; 8] = [
        &["ready-for-agent"],
        &[],
        &[],
        &["needs-triage"],
        &["needs-triage", "needs-info"],
        &[],
        &["blocked:dependency", "req:2"],
        &["blocked:dependency", "req:1"],
    ];
    for (i, l) in issues.iter().enumerate() {
        assert_eq!(
            t.create(&format!("issue {}", i + 1), "", l).unwrap(),
            i as u64 + 1
        );
    }
    t.close(2).unwrap();
    t.close(6).unwrap();
    branches(&env, &repo);
    (env, repo, t)
}

const SUMMARY: &str = "boot sweeps complete: orphans removed=0 restored=0 kept=0 | attempt-cap reclaimed=0 | branches remote=1 local=1 spared=3 | docs-sweep clean files=0 | unblocked=1 | stragglers unlabeled=1 triage=2 info=1";

#[test]
fn suite_counts_and_decisions() {
    let (env, repo, t) = local_fixture();
    let mut c = bin(&env, &repo);
    c.args(["--tracker", "local", "sweep", "--only", ONLY]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.last(), Some(&SUMMARY), "{out}");
    for want in [
        "branches reap origin/afk/2-done #2 [CLOSED]: issue closed",
        "branches spare origin/afk/odd: unrecognised branch name",
        "branches reap afk/2-done #2 [CLOSED]: issue closed",
        "branches spare afk/1-live #1 [OPEN]: issue #1 open",
        "unblock promote #7 [blocked:dependency]: all dependencies closed (#2)",
        "unblock keep #8 [blocked:dependency]: waiting on #1 (open)",
        "stragglers warn open issues: stragglers: 3 open issues AFK cannot take (unlabeled=1 triage=2 info=1): #3, #4, #5",
    ] {
        assert!(lines.contains(&want), "missing {want:?} in:\n{out}");
    }
    assert_eq!(env.afk_refs(&repo.origin), set(&["afk/1-live", "afk/odd"]));
    assert_eq!(env.afk_refs(&repo.path), set(&["afk/1-live"]));
    assert!(
        t.show(7)
            .unwrap()
            .labels
            .contains(&"ready-for-agent".into())
    );
    assert_eq!(t.show(7).unwrap().comments.len(), 1);
}

#[test]
fn suite_dry_run_changes_nothing() {
    let (env, repo, t) = local_fixture();
    let mut c = bin(&env, &repo);
    c.args(["--tracker", "local", "sweep", "--dry-run", "--only", ONLY]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with(&format!("{SUMMARY}\n")), "{out}");
    assert_eq!(
        env.afk_refs(&repo.origin),
        set(&["afk/1-live", "afk/2-done", "afk/odd"])
    );
    assert_eq!(env.afk_refs(&repo.path), set(&["afk/1-live", "afk/2-done"]));
    assert!(
        t.show(7)
            .unwrap()
            .labels
            .contains(&"blocked:dependency".into())
    );
    assert!(t.show(7).unwrap().comments.is_empty());
}

#[test]
fn no_stragglers_no_warning() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let t = env.local_tracker(&repo.path);
    t.create("ready", "", &["ready-for-agent"]).unwrap();
    let mut c = bin(&env, &repo);
    c.args(["--tracker", "local", "sweep", "--only", "stragglers"]);
    let (code, out, _) = run(c);
    assert_eq!(code, 0);
    assert!(!out.contains("warn"), "{out}");
    assert!(
        out.ends_with("stragglers unlabeled=0 triage=0 info=0\n"),
        "{out}"
    );
}

fn gh_sweep(env: &TestEnv, repo: &Repo, gh: &FakeGh, only: &str) -> (i32, String, String) {
    let mut c = bin(env, repo);
    c.env("PATH", gh.path_env())
        .args(["--tracker", "gh", "sweep", "--only", only]);
    run(c)
}

#[test]
fn transient_tracker_failures_change_nothing() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    branches(&env, &repo);
    let gh = FakeGh::install(&env);
    gh.set_issues(&[
        FakeIssue::open(1, &["ready-for-agent"]),
        FakeIssue::closed(2, &[]),
        FakeIssue::open(7, &["blocked:dependency", "req:2"]),
        FakeIssue::open(9, &[]),
    ]);

    // Reaper: the listing fails, every branch is spared, the suite goes on.
    gh.fail_next(1, 1, "HTTP 502: Bad Gateway");
    let (code, out, err) = gh_sweep(&env, &repo, &gh, "branches");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("branches warn afk/* [unclassified]: tracker failed, every branch spared:"),
        "{out}"
    );
    assert!(out.contains("branches remote=0 local=0 spared=5"), "{out}");
    assert_eq!(env.afk_refs(&repo.origin).len(), 3);
    assert_eq!(env.afk_refs(&repo.path).len(), 2);

    // Unblock: the state listing fails, nothing is promoted, the sweep fails.
    gh.clear_calls();
    gh.delay_next(1, 0.0);
    gh.fail_next(1, 1, "error connecting to api.github.com");
    let (code, _, err) = gh_sweep(&env, &repo, &gh, "unblock");
    assert_eq!(code, 1);
    assert!(
        err.contains("unblock: listing blocker states failed:"),
        "{err}"
    );
    let calls = gh.calls();
    assert!(calls.iter().all(|c| c[1] == "list"), "{calls:?}");
    assert!(
        gh.issue(7)
            .unwrap()
            .labels
            .contains(&"blocked:dependency".into())
    );
    assert!(gh.issue(7).unwrap().comments.is_empty());

    // Stragglers: the listing fails, the sweep fails with one line.
    gh.fail_next(1, 1, "HTTP 503: Service Unavailable");
    let (code, _, err) = gh_sweep(&env, &repo, &gh, "stragglers");
    assert_eq!(code, 1);
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with("afk-supervisor: straggler check:"),
        "{err}"
    );

    // And once gh answers again, the same suite does its work.
    let (code, out, err) = gh_sweep(&env, &repo, &gh, ONLY);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("branches remote=1 local=1 spared=3 | docs-sweep clean files=0 | unblocked=1 | stragglers unlabeled=1 triage=0 info=0"),
        "{out}"
    );
}
