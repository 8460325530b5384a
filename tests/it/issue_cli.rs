//! `afk-supervisor issue …` end to end through the built binary, and how the backend is
//! chosen (`--tracker auto|gh|local`) with a real repo and the fake gh on PATH.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::{Repo, TestEnv, stderr};

#[test]
fn the_issue_commands_on_the_local_store() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    assert_eq!(
        env.ok_on(
            r,
            &[
                "issue",
                "new",
                "--title",
                "First",
                "--body",
                "Body\nline",
                "--label",
                "ready-for-agent",
                "--label",
                "req:9"
            ]
        ),
        "1\n"
    );
    assert_eq!(
        env.ok_on(r, &["issue", "new", "--title", "Second", "--no-label"]),
        "2\n"
    );
    env.ok_on(
        r,
        &[
            "issue",
            "label",
            "1",
            "--add",
            "running",
            "--remove",
            "ready-for-agent",
        ],
    );
    env.ok_on(r, &["issue", "comment", "1", "--body", "🤖 hello"]);
    env.ok_on(r, &["issue", "close", "2"]);

    assert_eq!(
        env.ok_on(r, &["issue", "list"]),
        "#1 OPEN First [req:9, running]\n"
    );
    assert_eq!(
        env.ok_on(r, &["issue", "list", "--state", "all"]),
        "#2 CLOSED Second\n#1 OPEN First [req:9, running]\n"
    );
    assert_eq!(
        env.ok_on(
            r,
            &["issue", "list", "--state", "closed", "--label", "running"]
        ),
        ""
    );

    let rows: Value =
        serde_json::from_str(&env.ok_on(r, &["issue", "list", "--state", "all", "--json"]))
            .unwrap();
    let closed_at = rows[0]["closed_at"]
        .as_str()
        .expect("closed_at")
        .to_string();
    assert_eq!(
        rows,
        json!([
            {"number": 2, "title": "Second", "state": "CLOSED", "labels": [], "closed_at": closed_at},
            {"number": 1, "title": "First", "state": "OPEN", "labels": ["req:9", "running"], "closed_at": null}
        ])
    );

    let one: Value =
        serde_json::from_str(&env.ok_on(r, &["issue", "show", "1", "--json"])).unwrap();
    let keys: Vec<&str> = one
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "number",
            "title",
            "state",
            "labels",
            "created_at",
            "closed_at",
            "body",
            "comments",
            "attempts",
            "pr"
        ]
    );
    assert_eq!(one["attempts"], json!([]), "no attempt ledger yet");
    assert_eq!(one["pr"], Value::Null, "no pull request yet");
    assert_eq!(one["body"], "Body\nline");
    assert_eq!(one["comments"][0]["body"], "🤖 hello");
    assert!(one["comments"][0]["at"].as_str().unwrap().ends_with('Z'));

    let text = env.ok_on(r, &["issue", "show", "1"]);
    assert!(
        text.starts_with("#1 First\nstate: OPEN\nlabels: req:9, running\n"),
        "{text}"
    );
    assert!(text.contains("\nBody\nline\n"), "{text}");
    assert!(
        text.contains("--- comment ") && text.ends_with("🤖 hello\n"),
        "{text}"
    );

    env.ok_on(r, &["issue", "reopen", "2"]);
    let two: Value =
        serde_json::from_str(&env.ok_on(r, &["issue", "show", "2", "--json"])).unwrap();
    assert_eq!(two["state"], "OPEN");
    assert_eq!(two["closed_at"], Value::Null);

    // The backend is named once, on stderr, so JSON on stdout stays clean.
    let out = env.run_on(r, &["issue", "list", "--json"]);
    assert_eq!(stderr(&out), "tracker: local (origin is not on GitHub)\n");
}

#[test]
fn errors_are_one_line_with_the_right_exit_code() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    env.ok_on(r, &["issue", "new", "--title", "x"]);

    let out = env.run_on(r, &["issue", "show", "99"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(
        err.lines().nth(1).unwrap().contains("no issue #99"),
        "{err}"
    );

    let out = env.run_on(r, &["issue", "label", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("give at least one --add or --remove"));

    let out = env.run_on(r, &["issue", "label", "1", "--add", "a,b"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("contain no comma"));

    let out = env.run_on(r, &["issue", "list", "--state", "sideways"]);
    assert_eq!(out.status.code(), Some(2));

    // A hand edit that broke the file: named with line and column, and left as it was.
    let file = r.join(".red/state/tracker/issues/1.toml");
    let broken = "number = 1\ntitle = \"x\"\nstate = \"OPEN\"\nlabels = [\"a\"\n";
    std::fs::write(&file, broken).unwrap();
    for args in [
        &["issue", "list"][..],
        &["issue", "label", "1", "--add", "b"],
    ] {
        let out = env.run_on(r, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(&format!("{}:", file.display())), "{err}");
        assert!(err.contains("left unchanged"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), broken);
}

#[test]
fn label_edits_from_parallel_commands_are_all_kept() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = repo.path.clone();
    env.ok_on(&r, &["issue", "new", "--title", "x", "--no-label"]);
    std::thread::scope(|s| {
        for i in 0..8 {
            let (env, r) = (&env, &r);
            s.spawn(move || {
                for j in 0..5 {
                    env.ok_on(r, &["issue", "label", "1", "--add", &format!("p{i}-{j}")]);
                }
            });
        }
    });
    let one: Value =
        serde_json::from_str(&env.ok_on(&r, &["issue", "show", "1", "--json"])).unwrap();
    assert_eq!(one["labels"].as_array().unwrap().len(), 40);
}

// ---- choosing the backend ----

fn set_origin(env: &TestEnv, repo: &Repo, url: &str) {
    env.git(&repo.path, &["remote", "set-url", "origin", url]);
}

fn with_fake(env: &TestEnv, fake: &FakeGh, repo: &Path, args: &[&str]) -> Output {
    env.bin()
        .env("PATH", fake.path_env())
        .arg("--repo")
        .arg(repo)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn auto_picks_gh_for_a_github_origin_when_gh_is_logged_in() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    set_origin(&env, &repo, "git@github.com:acme/widgets.git");
    let fake = FakeGh::install(&env);
    fake.set_issues(&[
        FakeIssue::open(4, &["ready-for-agent"]),
        FakeIssue::closed(3, &[]),
    ]);

    let out = with_fake(
        &env,
        &fake,
        &repo.path,
        &["issue", "list", "--state", "all", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "tracker: gh acme/widgets (origin is on GitHub and gh is logged in)\n"
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        rows[0],
        json!({"number": 4, "title": null, "state": "OPEN", "labels": ["ready-for-agent"], "closed_at": null})
    );
    assert_eq!(rows[1]["closed_at"], "2026-01-01T00:00:00Z");
    let calls = fake.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0], ["auth", "status"]);
    assert_eq!(calls[1].last().unwrap(), "acme/widgets");

    // What gh cannot do through the interface is refused clearly.
    let out = with_fake(&env, &fake, &repo.path, &["issue", "close", "4"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("issue close is not supported on the gh tracker"),
        "{}",
        stderr(&out)
    );

    // show, label and comment go through gh.
    let out = with_fake(
        &env,
        &fake,
        &repo.path,
        &[
            "issue",
            "label",
            "4",
            "--add",
            "running",
            "--remove",
            "ready-for-agent",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = with_fake(
        &env,
        &fake,
        &repo.path,
        &["issue", "comment", "4", "--body", "hi"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = with_fake(&env, &fake, &repo.path, &["issue", "show", "4", "--json"]);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["labels"], json!(["running"]));
    assert_eq!(shown["title"], Value::Null);
    assert_eq!(fake.issue(4).unwrap().comments[0].body, "hi");

    // A transient gh failure is reported, not papered over.
    fake.respond_next(1, 0, "", "");
    fake.fail_next(1, 1, "HTTP 502: Bad Gateway");
    let out = with_fake(&env, &fake, &repo.path, &["issue", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("transient: exit 1: HTTP 502"), "{err}");

    // Nor may a transient failure of the login probe switch to an empty local store.
    fake.fail_next(1, 1, "error connecting to api.github.com");
    let out = with_fake(&env, &fake, &repo.path, &["issue", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("gh could not say whether it is logged in"),
        "{err}"
    );
    assert!(!err.contains("tracker: local"), "{err}");
}

#[test]
fn auto_falls_back_to_local_and_says_why() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let fake = FakeGh::install(&env);
    let reason = |out: &Output| stderr(out).lines().next().unwrap_or_default().to_string();

    // A local bare origin: gh is never asked.
    let out = with_fake(&env, &fake, &repo.path, &["issue", "list"]);
    assert_eq!(reason(&out), "tracker: local (origin is not on GitHub)");
    assert!(fake.calls().is_empty());

    set_origin(&env, &repo, "https://github.com/acme/widgets.git");
    // Not logged in: refused (exit 78, one line saying what to do), never an empty store.
    fake.set_auth(false);
    let out = with_fake(&env, &fake, &repo.path, &["issue", "list"]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "afk-supervisor: tracker.kind = auto: origin is on GitHub but gh is not logged in \
         (`gh auth status`: exit 1: You are not logged into any GitHub hosts. Run gh auth login \
         to authenticate.): run gh auth login, or set tracker.kind = \"local\"\n"
    );
    assert!(
        !repo.path.join(".red/state").exists(),
        "no local store made"
    );
    fake.set_auth(true);

    // No gh at all: a PATH with git only.
    let bin = env.path().join("git-only");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(which("git"), bin.join("git")).unwrap();
    let out = env
        .bin()
        .env("PATH", &bin)
        .arg("--repo")
        .arg(&repo.path)
        .args(["issue", "list"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        reason(&out),
        "tracker: local (origin is on GitHub but gh is not installed)"
    );

    env.git(&repo.path, &["remote", "remove", "origin"]);
    let out = with_fake(&env, &fake, &repo.path, &["issue", "list"]);
    assert_eq!(reason(&out), "tracker: local (no origin remote)");
}

#[test]
fn an_explicit_choice_wins_and_tracker_repo_overrides_origin() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    set_origin(&env, &repo, "git@github.com:acme/widgets.git");
    let fake = FakeGh::install(&env);
    fake.set_issues(&[FakeIssue::open(1, &[])]);

    let out = with_fake(
        &env,
        &fake,
        &repo.path,
        &["--tracker", "local", "issue", "list"],
    );
    assert_eq!(stderr(&out), "tracker: local (requested)\n");
    assert!(fake.calls().is_empty());

    std::fs::create_dir_all(repo.path.join(".red")).unwrap();
    std::fs::write(
        repo.path.join(".red/afk-supervisor.toml"),
        "[tracker]\nkind = \"gh\"\nrepo = \"other/place\"\n",
    )
    .unwrap();
    let out = with_fake(&env, &fake, &repo.path, &["issue", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "tracker: gh other/place (requested)\n");
    // Requested explicitly: no auth probe, straight to the listing.
    let calls = fake.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0][calls[0].len() - 2..], ["--repo", "other/place"]);
    // The command-line flag beats the file.
    let out = with_fake(
        &env,
        &fake,
        &repo.path,
        &["issue", "list", "--tracker", "local"],
    );
    assert_eq!(stderr(&out), "tracker: local (requested)\n");
}

fn which(program: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} not on PATH"))
}

#[test]
fn auto_uses_gh_for_a_configured_tracker_repo_even_with_a_local_origin() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let fake = FakeGh::install(&env);
    std::fs::create_dir_all(repo.path.join(".red")).unwrap();
    std::fs::write(
        repo.path.join(".red/afk-supervisor.toml"),
        "[tracker]\nrepo = \"acme/widgets\"\n",
    )
    .unwrap();
    let out = with_fake(&env, &fake, &repo.path, &["issue", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "tracker: gh acme/widgets (tracker.repo is set and gh is logged in)\n"
    );
    assert_eq!(fake.calls()[0], ["auth", "status"]);
}
