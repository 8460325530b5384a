//! The `gh` backend: exact argv, call counts, error classification, timeouts, bad JSON,
//! and the argv checked against the real GitHub CLI.

use std::path::PathBuf;
use std::time::Duration;

use afk_supervisor::tracker::{ErrorKind, GhTracker, IssueState, Tracker, TrackerError};

use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::{TestEnv, strings, wait_until};

fn fixture() -> (TestEnv, FakeGh) {
    let env = TestEnv::new();
    let fake = FakeGh::install(&env);
    fake.set_issues(&[
        FakeIssue::open(1, &["running"]),
        FakeIssue::closed(2, &["ready-for-human"]),
        FakeIssue::open(3, &["blocked:dependency", "req:2"]).with_body("## Blocked by\n- #2\n"),
    ]);
    (env, fake)
}

#[test]
fn list_all_is_one_call_with_the_spec_argv() {
    let (_env, fake) = fixture();
    let all = fake.tracker(Some("o/r")).list_all(5000).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(
        fake.calls(),
        vec![strings(&[
            "issue",
            "list",
            "--state",
            "all",
            "--limit",
            "5000",
            "--json",
            "number,state,labels,closedAt",
            "--repo",
            "o/r"
        ])]
    );
    fake.clear_calls();
    fake.tracker(None).list_all(7).unwrap();
    assert_eq!(
        fake.calls(),
        vec![strings(&[
            "issue",
            "list",
            "--state",
            "all",
            "--limit",
            "7",
            "--json",
            "number,state,labels,closedAt"
        ])]
    );
}

#[test]
fn every_operation_uses_exactly_one_spec_call() {
    let (_env, fake) = fixture();
    let t = fake.tracker(Some("o/r"));
    t.view(1).unwrap();
    t.edit_labels(1, &["ready-for-agent", "x"], &["running"])
        .unwrap();
    t.edit_labels(1, &["y"], &[]).unwrap();
    t.edit_labels(1, &[], &["y"]).unwrap();
    t.comment(1, "hello").unwrap();
    assert_eq!(t.comments(1).unwrap(), vec!["hello"]);
    t.list_open_with_label("blocked:dependency", 200).unwrap();
    let url = t.pr_create("main", "docs/x", "docs: t", "b").unwrap();
    t.pr_merge("docs/x").unwrap();
    t.auth_status().unwrap();
    let repo = ["--repo", "o/r"];
    let with = |v: &[&str]| {
        let mut v = strings(v);
        v.extend(strings(&repo));
        v
    };
    assert_eq!(
        fake.calls(),
        vec![
            with(&["issue", "view", "1", "--json", "state,labels"]),
            with(&[
                "issue",
                "edit",
                "1",
                "--add-label",
                "ready-for-agent,x",
                "--remove-label",
                "running"
            ]),
            with(&["issue", "edit", "1", "--add-label", "y"]),
            with(&["issue", "edit", "1", "--remove-label", "y"]),
            with(&["issue", "comment", "1", "--body", "hello"]),
            with(&["issue", "view", "1", "--json", "state,labels,comments"]),
            with(&[
                "issue",
                "list",
                "--label",
                "blocked:dependency",
                "--state",
                "open",
                "--limit",
                "200",
                "--json",
                "number,body,labels"
            ]),
            with(&[
                "pr", "create", "--base", "main", "--head", "docs/x", "--title", "docs: t",
                "--body", "b"
            ]),
            with(&["pr", "merge", "docs/x", "--merge", "--delete-branch"]),
            strings(&["auth", "status"]),
        ]
    );
    assert_eq!(url, "https://github.com/o/r/pull/4");
    assert_eq!(fake.issue(1).unwrap().labels, vec!["ready-for-agent", "x"]);
}

fn view_err(fake: &FakeGh) -> TrackerError {
    fake.tracker(Some("o/r")).view(1).unwrap_err()
}

#[test]
fn failures_are_classified_and_name_the_command() {
    let (_env, fake) = fixture();
    let cases = [
        (
            1,
            "HTTP 502: Bad Gateway (https://api.github.com/graphql)",
            ErrorKind::Transient,
        ),
        (1, "HTTP 503: Service Unavailable", ErrorKind::Transient),
        (
            1,
            "GraphQL: API rate limit exceeded for user ID 1. (repository)",
            ErrorKind::RateLimited,
        ),
        (
            1,
            "error connecting to api.github.com\ncheck your internet connection or https://githubstatus.com",
            ErrorKind::Transient,
        ),
        (
            1,
            "could not resolve to an Issue with the number of 9",
            ErrorKind::NotFound,
        ),
        (
            1,
            "HTTP 401: Bad credentials (https://api.github.com/graphql)",
            ErrorKind::Failed,
        ),
        (
            1,
            "GraphQL: Could not resolve to a Repository with the name 'o/r'. (repository)",
            ErrorKind::Failed,
        ),
        (
            4,
            "To get started with GitHub CLI, please run:  gh auth login",
            ErrorKind::Failed,
        ),
    ];
    for (code, stderr, want) in cases {
        fake.fail_next(1, code, stderr);
        let e = view_err(&fake);
        assert_eq!(e.kind, want, "{stderr}: {e}");
        assert!(
            e.command
                .contains("issue view 1 --json state,labels --repo o/r"),
            "{e}"
        );
        let first = stderr.lines().next().unwrap();
        assert!(e.detail.contains(first), "{e}");
        assert!(e.detail.contains(&format!("exit {code}")), "{e}");
        assert!(!e.to_string().contains('\n'), "one line: {e}");
    }
    // Only the scripted calls failed: the next one answers.
    assert_eq!(
        fake.tracker(Some("o/r")).view(1).unwrap().state,
        IssueState::Open
    );
}

#[test]
fn a_transient_failure_changes_nothing_and_the_next_k_calls_fail() {
    let (_env, fake) = fixture();
    let t = fake.tracker(Some("o/r"));
    fake.fail_next(2, 1, "HTTP 500: Internal Server Error");
    assert!(
        t.edit_labels(1, &["x"], &["running"])
            .unwrap_err()
            .is_transient()
    );
    assert!(t.comment(1, "c").unwrap_err().is_transient());
    assert_eq!(fake.issue(1).unwrap().labels, vec!["running"]);
    assert!(fake.issue(1).unwrap().comments.is_empty());
    t.comment(1, "c").unwrap();
    assert_eq!(fake.issue(1).unwrap().comments.len(), 1);
    assert_eq!(fake.calls().len(), 3);
}

#[test]
/// Transient (#22): a proxy's error page or a cut-off answer is the tracker misbehaving, so
/// the worker exits 69 (no death, no circuit) and nothing acts on it.
fn json_that_is_not_what_was_asked_for_is_a_clear_transient_failure() {
    let (_env, fake) = fixture();
    let t = fake.tracker(Some("o/r"));
    let bad = [
        "not json at all",
        "{\"number\": 1}",
        "[{\"number\": 1, \"labels\": []}]",
        "[{\"number\": \"one\", \"state\": \"OPEN\", \"labels\": []}]",
        "[{\"number\": 1, \"state\": \"MERGED\", \"labels\": []}]",
        "[{\"number\": 1, \"state\": \"OPEN\", \"labels\": [\"plain-string\"]}]",
        "",
    ];
    for out in bad {
        fake.respond_next(1, 0, out, "");
        let e = t.list_all(10).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Transient, "{out}: {e}");
        assert!(e.detail.contains("unexpected JSON from gh"), "{out}: {e}");
        assert!(e.command.contains("issue list --state all"), "{e}");
    }
    fake.respond_next(1, 0, "[]", "");
    let e = t.view(1).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Transient);
    assert!(e.detail.starts_with("unexpected JSON from gh: "), "{e}");
}

#[test]
fn extra_fields_and_every_closed_at_spelling_are_accepted() {
    let (_env, fake) = fixture();
    let t = fake.tracker(Some("o/r"));
    fake.respond_next(
        1,
        0,
        r#"[
          {"number": 5, "state": "CLOSED", "closedAt": "2026-02-03T04:05:06Z", "title": "x",
           "labels": [{"id": "LA_1", "name": "a", "color": "fff", "description": "d"}]},
          {"number": 4, "state": "OPEN", "closedAt": null, "labels": []},
          {"number": 3, "state": "OPEN", "closedAt": "", "labels": []},
          {"number": 2, "state": "OPEN", "closedAt": "0001-01-01T00:00:00Z", "labels": []},
          {"number": 1, "state": "OPEN", "labels": []}
        ]"#,
        "",
    );
    let all = t.list_all(10).unwrap();
    assert_eq!(all[0].closed_at.as_deref(), Some("2026-02-03T04:05:06Z"));
    assert_eq!(all[0].labels, vec!["a"]);
    assert!(all[1..].iter().all(|i| i.closed_at.is_none()));
}

#[test]
fn a_timeout_kills_gh_and_is_transient() {
    let (_env, fake) = fixture();
    fake.delay_next(1, 60.0);
    // Generous: the Python fake must start and record its pid before it is killed, even
    // on a loaded machine.
    let t = fake.tracker_with_timeout(Some("o/r"), Duration::from_secs(5));
    let e = t.view(1).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.detail.contains("timed out after 5s"), "{e}");
    let pids = fake.pids();
    assert_eq!(pids.len(), 1);
    let proc_dir = PathBuf::from(format!("/proc/{}", pids[0]));
    assert!(
        wait_until(Duration::from_secs(10), || !proc_dir.exists()),
        "fake gh pid {} is still running after the timeout",
        pids[0]
    );
}

#[test]
fn a_missing_gh_is_a_failure_not_a_transient() {
    let env = TestEnv::new();
    let t =
        GhTracker::new(None, Duration::from_secs(5)).with_program(env.path().join("no-such-gh"));
    let e = t.list_all(10).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Failed);
    assert!(e.detail.contains("no-such-gh"), "{e}");
}

#[test]
fn auth_status_reflects_the_login() {
    let (_env, fake) = fixture();
    let t = fake.tracker(Some("o/r"));
    t.auth_status().unwrap();
    fake.set_auth(false);
    let e = t.auth_status().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Failed);
    assert!(e.detail.contains("not logged into"), "{e}");
}

#[test]
fn the_fake_refuses_anything_outside_the_contract() {
    let (env, fake) = fixture();
    // A scripted failure is not consumed by a refused call.
    fake.fail_next(1, 1, "HTTP 502");
    for argv in [
        vec!["issue", "list"],
        vec!["issue", "view", "1", "--json", "state,labels,title"],
        vec!["issue", "view", "01", "--json", "state,labels"],
        vec!["issue", "edit", "1"],
        vec![
            "issue",
            "edit",
            "1",
            "--remove-label",
            "a",
            "--add-label",
            "b",
        ],
        vec!["auth", "status", "--repo", "o/r"],
        vec!["pr", "merge", "x", "--squash", "--delete-branch"],
    ] {
        let out = env.command(fake.program()).args(&argv).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{argv:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with(&format!("unknown gh invocation: {}", argv[0])),
            "{err}"
        );
    }
    assert!(view_err(&fake).is_transient());
    // The binary finds the fake first on PATH (in a checkout: `--repo` must be one).
    let checkout = env.path().join("checkout");
    env.git(env.path(), &["init", "-q", checkout.to_str().unwrap()]);
    let out = env
        .bin()
        .env("PATH", fake.path_env())
        .args(["--repo"])
        .arg(&checkout)
        .args(["--tracker", "gh", "issue", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        rows.as_array().unwrap().len(),
        2,
        "open issues only: {rows}"
    );
}

#[test]
fn chaos_fails_calls_before_acting_replays_by_seed_and_still_refuses_unknown_argv() {
    let (env, fake) = fixture();
    fake.set_chaos(Some((1.0, 7)));
    let out = env
        .command(fake.program())
        .args(["issue", "frobnicate", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let t = fake.tracker(None);
    let e = t.edit_labels(1, &["x"], &[]).unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(t.comment(1, "hi").unwrap_err().is_transient());
    assert_eq!(fake.issue(1).unwrap().labels, vec!["running"]);
    assert!(fake.issue(1).unwrap().comments.is_empty());
    assert_eq!(fake.chaos_failures(), 2);
    // A fixed seed fails the same calls each time.
    let pattern = |seed: u64| {
        fake.set_chaos(Some((0.5, seed)));
        (0..12).map(|_| t.view(1).is_err()).collect::<Vec<_>>()
    };
    let first = pattern(3);
    assert_eq!(pattern(3), first);
    assert!(first.contains(&true) && first.contains(&false), "{first:?}");
    fake.set_chaos(None);
    t.view(1).unwrap();
}

// ---- the real GitHub CLI ----

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Every argv the backend sends is checked against the real `gh`: pointed at a host that
/// cannot resolve, each call must get as far as the network and fail there, never on usage
/// (unknown flag, bad arguments, unknown JSON field).
#[test]
#[cfg_attr(
    not(afk_has_gh),
    ignore = "needs the real gh (apt-get install gh); under CI=true it always runs"
)]
fn real_gh_accepts_every_argv_and_fails_only_on_the_network() {
    let gh = on_path("gh").expect("the real gh on PATH (.ci/run installs it)");
    let env = TestEnv::new();
    let cfg = env.path().join("gh-config");
    std::fs::create_dir_all(&cfg).unwrap();
    let mut t = GhTracker::new(Some("gh.invalid/o/r".into()), Duration::from_secs(60))
        .with_program(&gh)
        .in_dir(env.path())
        .with_env("HOME", &env.home)
        .with_env("GH_CONFIG_DIR", &cfg)
        .with_env("GH_TOKEN", "dummy")
        .with_env("GH_ENTERPRISE_TOKEN", "dummy")
        .with_env("GH_HOST", "gh.invalid");
    // A proxy would answer for gh.invalid with its own error: connect directly (Go takes an
    // empty proxy variable as unset, and NO_PROXY=* bypasses any left).
    for var in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        t = t.with_env(var, "").with_env(var.to_lowercase(), "");
    }
    t = t.with_env("NO_PROXY", "*").with_env("no_proxy", "*");
    let restore = "🤖 /afk orchestrator died mid-issue; restoring ready-for-agent.";
    let results: Vec<(&str, Result<(), TrackerError>)> = vec![
        ("list all", t.list_all(5000).map(drop)),
        ("view", t.view(1).map(drop)),
        ("comments", t.comments(1).map(drop)),
        (
            "edit add+remove",
            t.edit_labels(1, &["ready-for-agent", "req:2"], &["running"]),
        ),
        ("edit add", t.edit_labels(1, &["blocked:dependency"], &[])),
        (
            "edit remove",
            t.edit_labels(1, &[], &["blocked:dependency"]),
        ),
        ("comment", t.comment(1, restore)),
        ("comment dash", t.comment(1, "--body - looks like a flag")),
        (
            "blocked",
            t.list_open_with_label("blocked:dependency", 200).map(drop),
        ),
        (
            "pr create",
            t.pr_create("main", "docs/x", "docs: -t", "- a\n- b")
                .map(drop),
        ),
        ("pr merge", t.pr_merge("docs/x")),
        ("api rate_limit", t.rate_limit_reset().map(drop)),
        ("queue page", t.ready_page(1, None).map(drop)),
        (
            "queue page with an etag",
            t.ready_page(2, Some("W/\"9a\"")).map(drop),
        ),
    ];
    const USAGE: [&str; 9] = [
        "unknown flag",
        "unknown command",
        "unknown shorthand",
        "usage:",
        "unknown json field",
        "accepts ",
        "required flag",
        "invalid argument",
        "flag needs an argument",
    ];
    for (what, r) in results {
        let e = r.expect_err(what);
        let detail = e.detail.to_lowercase();
        assert!(
            !USAGE.iter().any(|u| detail.contains(u)),
            "real gh rejected the argv of {what}: {e}"
        );
        assert!(
            detail.contains("error connecting to gh.invalid"),
            "{what}: expected a network failure, got: {e}"
        );
        assert_eq!(e.kind, ErrorKind::Transient, "{what}: {e}");
        assert!(!e.to_string().contains('\n'), "one line: {e}");
        eprintln!("real gh, {what}: {e}");
    }
    let e = t.auth_status().unwrap_err();
    let detail = e.detail.to_lowercase();
    assert!(
        !USAGE.iter().any(|u| detail.contains(u)),
        "auth status: {e}"
    );
    assert!(detail.contains("gh.invalid"), "auth status: {e}");
    eprintln!("real gh, auth status: {e}");
}

/// A tracker sharing the fleet's files under `state`.
fn fleet_tracker(fake: &FakeGh, state: &std::path::Path) -> GhTracker {
    fake.tracker(Some("o/r")).with_fleet(
        state,
        afk_supervisor::tracker::pace::Pace::new(state, 20, Duration::from_secs(60)),
    )
}

/// A primary rate limit: the reset comes from `gh api rate_limit` (exactly that argv), the
/// pause is recorded, and every later repository call is refused unsent until it.
#[test]
fn a_primary_rate_limit_records_the_reset_and_later_calls_are_not_sent() {
    let (env, fake) = fixture();
    let state = env.path().join("state");
    let reset = afk_supervisor::timeutil::now_epoch() + 30;
    fake.set_rate_limit(Some(reset));
    let t = fleet_tracker(&fake, &state);
    assert_eq!(t.rate_limit_reset().unwrap(), Some(reset));
    fake.clear_calls();
    let e = t.view(1).unwrap_err();
    assert_eq!(e.kind, ErrorKind::RateLimited, "{e}");
    assert_eq!(
        fake.calls(),
        vec![
            strings(&[
                "issue",
                "view",
                "1",
                "--json",
                "state,labels",
                "--repo",
                "o/r"
            ]),
            strings(&["api", "rate_limit"]),
        ]
    );
    let pause = afk_supervisor::lanes::pause_file::active(&state).expect("paused");
    assert_eq!(pause.until_epoch, reset);
    assert!(
        pause.reason.contains("API rate limit exceeded"),
        "{}",
        pause.reason
    );
    for _ in 0..3 {
        let e = t.comment(1, "hello").unwrap_err();
        assert_eq!(e.kind, ErrorKind::RateLimited);
        assert!(
            e.detail.starts_with("not called: fleet paused until "),
            "{e}"
        );
    }
    assert_eq!(fake.calls().len(), 2, "nothing sent while paused");
    assert_eq!(fake.rate_limit_hits(), 1);
    // `gh auth status` costs no quota and still runs.
    t.auth_status().unwrap();
}

/// A secondary limit names no reset in `gh api rate_limit`: a minute, without asking;
/// a `retry-after` in gh's message is used as it is.
#[test]
fn secondary_limits_pause_a_minute_or_for_the_retry_after() {
    let (env, fake) = fixture();
    let state = env.path().join("state");
    let t = fleet_tracker(&fake, &state);
    fake.fail_next(1, 1, "HTTP 403: You have exceeded a secondary rate limit. Please wait a few minutes before you try again.");
    assert_eq!(t.view(1).unwrap_err().kind, ErrorKind::RateLimited);
    assert_eq!(
        fake.calls().len(),
        1,
        "no rate_limit call for a secondary limit"
    );
    let p = afk_supervisor::lanes::pause_file::active(&state).unwrap();
    let d = afk_supervisor::lanes::pause_file::DEFAULT_PAUSE_S;
    assert!((d - 1..=d).contains(&(p.until_epoch - p.since_epoch)));

    let state2 = env.path().join("state2");
    let t2 = fleet_tracker(&fake, &state2);
    fake.fail_next(1, 1, "HTTP 429: Too Many Requests\nRetry-After: 120");
    assert_eq!(t2.view(1).unwrap_err().kind, ErrorKind::RateLimited);
    let p = afk_supervisor::lanes::pause_file::active(&state2).unwrap();
    assert!((119..=120).contains(&(p.until_epoch - p.since_epoch)));
}

/// The fake accepts `gh api rate_limit` only as the SPEC spells it.
#[test]
fn the_fake_refuses_rate_limit_with_a_repo() {
    let (_env, fake) = fixture();
    let out = std::process::Command::new(fake.program())
        .args(["api", "rate_limit", "--repo", "o/r"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown gh invocation"));
}

/// GitHub's write limit is per account, not per checkout (#22): two checkouts of one
/// account on a host share one budget, `~/.local/state/afk-supervisor/pace-<login>` (the
/// login from `gh api user`). With 2 writes a window, the second checkout's first write is
/// refused unsent once the first checkout spent both.
#[test]
fn two_checkouts_of_one_account_share_one_write_budget() {
    let (env, fake) = fixture();
    let a = env.repo_with_origin().path;
    let b = env.path().join("repo-b");
    env.git(
        env.path(),
        &["clone", "-q", "origin.git", b.to_str().unwrap()],
    );
    for repo in [&a, &b] {
        std::fs::create_dir_all(repo.join(".red")).unwrap();
        std::fs::write(
            repo.join(".red/afk-supervisor.toml"),
            "[tracker]\nkind = \"gh\"\nrepo = \"fake-owner/fake-repo\"\ntimeout_s = 1\n\
             max_writes_per_min = 2\npace_window_s = 600\n",
        )
        .unwrap();
    }
    let comment = |repo: &std::path::Path, body: &str| {
        env.bin()
            .env("PATH", fake.path_env())
            .arg("--repo")
            .arg(repo)
            .args(["issue", "comment", "1", "--body", body])
            .output()
            .unwrap()
    };
    for body in ["one", "two"] {
        let o = comment(&a, body);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = comment(&b, "three");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(stderr.contains("not called: write pace"), "{stderr}");
    assert!(stderr.contains("pace-fake"), "{stderr}");
    assert_eq!(fake.issue(1).unwrap().comments.len(), 2);
    // The test environment sets XDG_STATE_HOME (tests/it/support), so the account's budget is
    // there, not under ~/.local/state.
    assert!(
        env.dir
            .path()
            .join("state/afk-supervisor/pace-fake")
            .is_file()
    );
}

/// GitHub refuses a label the repository lacks; the fleet's are created once, by name
/// without case, and a second look creates none.
#[test]
fn the_fleets_labels_are_created_once_and_a_missing_label_is_refused_as_github_does() {
    let (_env, fake) = fixture();
    fake.set_repo_labels(&["ready-for-agent", "Running"]);
    let t = fake.tracker(Some("o/r"));
    let err = t.edit_labels(1, &["afk:pr-open"], &[]).unwrap_err();
    assert!(err.to_string().contains("'afk:pr-open' not found"), "{err}");
    let made = t
        .ensure_labels(afk_supervisor::tracker::labels::FLEET)
        .unwrap();
    let wanted: Vec<&str> = afk_supervisor::tracker::labels::FLEET
        .iter()
        .map(|l| l.name)
        .filter(|n| !["ready-for-agent", "running"].contains(n))
        .collect();
    assert_eq!(made, wanted);
    let creates: Vec<Vec<String>> = fake
        .calls()
        .into_iter()
        .filter(|c| c.starts_with(&strings(&["label", "create"])))
        .collect();
    assert_eq!(creates.len(), wanted.len(), "{creates:?}");
    assert_eq!(
        creates[0],
        strings(&[
            "label",
            "create",
            "ready-for-human",
            "--color",
            "1d76db",
            "--description",
            "The fleet handed this to a person",
            "--force",
            "--repo",
            "o/r"
        ])
    );
    t.edit_labels(1, &["afk:pr-open"], &[]).unwrap();
    assert!(
        t.ensure_labels(afk_supervisor::tracker::labels::FLEET)
            .unwrap()
            .is_empty()
    );
    assert_eq!(fake.repo_labels().len(), 2 + wanted.len());
}

/// The steward's listing (SPEC §11.23): `gh api -i` with the page's last ETag. Unchanged,
/// GitHub answers 304 (gh: exit 1, `gh: HTTP 304`), which is an answer, not a failure; a
/// change gives the new page and a new ETag; past 100 issues a second page follows.
#[test]
fn the_conditional_queue_answers_304_until_the_queue_moves() {
    use afk_supervisor::tracker::gh_queue::Page;
    let env = TestEnv::new();
    let fake = FakeGh::install(&env);
    let mut issues: Vec<FakeIssue> = (1..=130)
        .map(|n| FakeIssue::open(n, &["ready-for-agent"]).with_body(&format!("body {n}")))
        .collect();
    issues.push(FakeIssue::open(131, &["running"]));
    fake.set_issues(&issues);
    let t = fake.tracker(Some("fake-owner/fake-repo"));
    let Some(Page::Fresh {
        etag,
        issues: one,
        full,
    }) = t.ready_page(1, None).unwrap()
    else {
        panic!("no fresh page")
    };
    assert!(full);
    assert_eq!(one.len(), 100);
    assert_eq!((one[0].number, one[0].body.as_str()), (1, "body 1"));
    let etag = etag.expect("an ETag");
    let Some(Page::Fresh {
        issues: two, full, ..
    }) = t.ready_page(2, None).unwrap()
    else {
        panic!("no second page")
    };
    assert!(!full);
    assert_eq!(
        two.iter().map(|i| i.number).collect::<Vec<_>>(),
        (101..=130).collect::<Vec<_>>()
    );
    assert_eq!(
        t.ready_page(1, Some(&etag)).unwrap(),
        Some(Page::NotModified)
    );
    assert_eq!(
        fake.calls().last().unwrap(),
        &strings(&[
            "api",
            "-i",
            "-H",
            &format!("If-None-Match: {etag}"),
            "repos/fake-owner/fake-repo/issues?labels=ready-for-agent&state=open&sort=created&direction=asc&per_page=100&page=1",
        ])
    );
    // Issue 1 claimed: page 1 changed.
    t.edit_labels(1, &["running"], &["ready-for-agent"])
        .unwrap();
    let Some(Page::Fresh {
        etag: etag2,
        issues: one,
        ..
    }) = t.ready_page(1, Some(&etag)).unwrap()
    else {
        panic!("a changed page answered 304")
    };
    assert_ne!(etag2.as_deref(), Some(etag.as_str()));
    assert_eq!(one[0].number, 2);
    assert_eq!(fake.conditional_answers(), (3, 1));
    // A failure is still one, classified as any gh call's: a 502 is worth a retry, a bare
    // 404 (a repository that is not there) is a configuration problem.
    fake.fail_next(1, 1, "gh: Bad Gateway (HTTP 502)\n");
    assert_eq!(
        t.ready_page(1, None).unwrap_err().kind,
        ErrorKind::Transient
    );
    fake.fail_next(1, 1, "gh: Not Found (HTTP 404)\n");
    assert_eq!(t.ready_page(1, None).unwrap_err().kind, ErrorKind::Failed);
}
