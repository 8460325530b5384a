//! The unblock sweep: `afk-supervisor unblock` on the real local tracker (req: labels, the
//! body fallback, an open blocker, a missing blocker), the fake `gh` for failures and call
//! counts, and the belt: a pass that fails costs itself only, and of two belts of one
//! tracker on two checkouts exactly one sweeps.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use afk_supervisor::supervisor::unblock_belt::{self, Belt, BeltPass};
use afk_supervisor::sweeps::unblock_sweep::{self, comment_text};
use afk_supervisor::tracker::LocalTracker;

use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::{
    Repo, TestEnv, local_comments as comments, local_labels as labels, run, wait_until,
};

const WAIT: Duration = Duration::from_secs(60);

fn local_unblock(env: &TestEnv, repo: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut c = env.bin_locks_in_tmpdir();
    c.arg("--repo")
        .arg(repo)
        .args(["--tracker", "local", "unblock"])
        .args(extra);
    run(c)
}

/// #1 open, #2 and #3 closed; blocked issues #4..#9.
fn local_fixture() -> (TestEnv, Repo, LocalTracker) {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let t = env.local_tracker(&repo.path);
    let b = "blocked:dependency";
    let issues: [(&str, &str, &[&str]); 9] = [
        ("blocker, open", "", &["ready-for-agent"]),
        ("blocker, closed", "", &[]),
        ("blocker, closed too", "", &[]),
        ("both req closed", "", &[b, "req:3", "req:2"]),
        ("one req open", "", &[b, "req:1", "req:2"]),
        (
            "body fallback",
            "Needs the others.\n\n## Blocked by\n- #2\n- #3 (schema)\n\n## Notes\n- #1\n",
            &[b],
        ),
        ("missing blocker", "", &[b, "req:2", "req:99"]),
        ("nothing named", "Blocked by #2 somewhere in prose.", &[b]),
        ("labels win", "## Blocked by\n- #1\n", &[b, "req:2"]),
    ];
    for (i, (title, body, labels)) in issues.iter().enumerate() {
        assert_eq!(t.create(title, body, labels).unwrap(), i as u64 + 1);
    }
    t.close(2).unwrap();
    t.close(3).unwrap();
    (env, repo, t)
}

#[test]
fn promotes_exactly_the_issues_whose_blockers_are_all_closed() {
    let (env, repo, t) = local_fixture();
    let (code, out, err) = local_unblock(&env, &repo.path, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "promoted #4 — all dependencies closed (#2, #3)\n\
         kept #5 — waiting on #1 (open)\n\
         promoted #6 — all dependencies closed (#2, #3) (from `## Blocked by`)\n\
         kept #7 — waiting on #99 (not found)\n\
         kept #8 — no dependency named (no req:<N> label, no `## Blocked by` list)\n\
         promoted #9 — all dependencies closed (#2)\n\
         unblocked=3\n"
    );
    for (n, blockers) in [(4, vec![2, 3]), (6, vec![2, 3]), (9, vec![2])] {
        let l = labels(&t, n);
        assert!(l.contains(&"ready-for-agent".to_string()), "#{n}: {l:?}");
        assert!(
            !l.contains(&"blocked:dependency".to_string()),
            "#{n}: {l:?}"
        );
        assert_eq!(comments(&t, n), vec![comment_text(&blockers)], "#{n}");
    }
    assert_eq!(
        comments(&t, 4),
        vec!["🤖 /afk unblocked: all dependencies closed (#2, #3).".to_string()]
    );
    for n in [5, 7, 8] {
        assert!(labels(&t, n).contains(&"blocked:dependency".to_string()));
        assert!(!labels(&t, n).contains(&"ready-for-agent".to_string()));
        assert!(comments(&t, n).is_empty(), "#{n}");
    }

    // Nothing more to do: a second pass changes nothing.
    let (code, out, _) = local_unblock(&env, &repo.path, &[]);
    assert_eq!(code, 0);
    assert!(out.ends_with("unblocked=0\n"), "{out}");
    assert_eq!(comments(&t, 4).len(), 1);

    // The open blocker closes: its dependent goes next time.
    t.close(1).unwrap();
    let (_, out, _) = local_unblock(&env, &repo.path, &[]);
    assert!(
        out.contains("promoted #5 — all dependencies closed (#1, #2)\n"),
        "{out}"
    );
    assert!(out.ends_with("unblocked=1\n"), "{out}");
}

#[test]
fn dry_run_writes_nothing() {
    let (env, repo, t) = local_fixture();
    let (code, out, _) = local_unblock(&env, &repo.path, &["--dry-run"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("would promote #4 — all dependencies closed (#2, #3)\n"),
        "{out}"
    );
    assert!(out.ends_with("unblocked=3\n"), "{out}");
    for n in 4..=9 {
        assert!(labels(&t, n).contains(&"blocked:dependency".to_string()));
        assert!(comments(&t, n).is_empty());
    }
}

#[test]
fn flags_are_checked() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    for args in [
        &["unblock", "--interval", "5"][..],
        &["unblock", "--watch", "--dry-run"],
        &["unblock", "--watch", "--interval", "0"],
    ] {
        let mut c = env.bin_locks_in_tmpdir();
        c.arg("--repo").arg(&repo.path).args(args);
        let (code, _, err) = run(c);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
}

// ---- the gh backend, through the fake ----

fn gh_fixture(env: &TestEnv) -> FakeGh {
    let gh = FakeGh::install(env);
    gh.set_issues(&[
        FakeIssue::closed(1, &[]),
        FakeIssue::open(2, &["blocked:dependency", "req:1"]),
        FakeIssue::open(3, &["blocked:dependency"]).with_body("## Blocked by\n- #1\n"),
        FakeIssue::open(4, &["ready-for-agent"]),
    ]);
    gh
}

#[test]
fn gh_pass_costs_two_lists_and_per_promotion_a_comments_read_and_two_writes() {
    let env = TestEnv::new();
    let gh = gh_fixture(&env);
    let t = gh.tracker(Some("o/r"));
    let r = unblock_sweep::pass(&t, false).unwrap();
    assert_eq!(r.promoted, vec![2, 3]);
    assert_eq!(r.list_calls, 2);
    assert_eq!(
        gh.verbs(&["--label"]),
        vec![
            "issue list --label",
            "issue list",
            "issue view",
            "issue comment",
            "issue edit",
            "issue view",
            "issue comment",
            "issue edit",
        ]
    );
    let two = gh.issue(2).unwrap();
    assert_eq!(two.labels, vec!["req:1", "ready-for-agent"]);
    assert_eq!(two.comments[0].body, comment_text(&[1]));

    // Nothing blocked any more: one list call.
    gh.clear_calls();
    let r = unblock_sweep::pass(&t, false).unwrap();
    assert!(r.promoted.is_empty());
    assert_eq!(gh.verbs(&["--label"]), vec!["issue list --label"]);
}

#[test]
fn blockers_known_from_the_blocked_listing_need_no_second_list() {
    let env = TestEnv::new();
    let gh = FakeGh::install(&env);
    gh.set_issues(&[
        FakeIssue::open(5, &["blocked:dependency", "req:6"]),
        FakeIssue::open(6, &["blocked:dependency", "req:5"]),
    ]);
    let r = unblock_sweep::pass(&gh.tracker(None), false).unwrap();
    assert!(r.promoted.is_empty());
    assert_eq!(r.list_calls, 1);
    assert_eq!(gh.verbs(&["--label"]), vec!["issue list --label"]);
}

#[test]
fn a_failing_tracker_never_promotes() {
    // (reply queue, calls expected before the pass gives up, how it gives up); an empty
    // reply lets the call through to the fake's store.
    type Reply<'a> = (i32, &'a str, &'a str);
    let cases: [(&[Reply], Vec<&str>, GivesUp); 5] = [
        (
            &[(1, "", "HTTP 502: Bad Gateway")],
            vec!["issue list --label"],
            GivesUp::Fails("listing blocked issues failed"),
        ),
        (
            &[(0, "[]x", "")],
            // Malformed JSON from the blocked listing.
            vec!["issue list --label"],
            GivesUp::Fails("listing blocked issues failed"),
        ),
        (
            &[(0, "", ""), (1, "", "error connecting to api.github.com")],
            vec!["issue list --label", "issue list"],
            GivesUp::Fails("listing blocker states failed"),
        ),
        (
            &[
                (0, "", ""),
                (0, "", ""),
                (1, "", "HTTP 503: Service Unavailable"),
            ],
            vec!["issue list --label", "issue list", "issue view"],
            GivesUp::WriteError(2),
        ),
        (
            &[
                (0, "", ""),
                (0, "", ""),
                (0, "", ""),
                (1, "", "HTTP 503: Service Unavailable"),
            ],
            // The comment goes first: when it fails, the labels are not touched.
            vec![
                "issue list --label",
                "issue list",
                "issue view",
                "issue comment",
            ],
            GivesUp::WriteError(2),
        ),
    ];
    for (replies, want, gives_up) in cases {
        let env = TestEnv::new();
        let gh = gh_fixture(&env);
        for (code, out, err) in replies {
            if *code == 0 && out.is_empty() {
                gh.delay_next(1, 0.0);
            } else {
                gh.respond_next(1, *code, out, err);
            }
        }
        let t = gh.tracker(None);
        match (unblock_sweep::pass(&t, false), gives_up) {
            // A failed read ends the pass before any write.
            (Err(e), GivesUp::Fails(what)) => {
                assert!(e.to_string().contains(what), "{replies:?}: {e}")
            }
            // A failed write ends the pass with the issue it stopped at, nothing promoted.
            (Ok(r), GivesUp::WriteError(n)) => {
                assert!(r.promoted.is_empty(), "{replies:?}: {r:?}");
                let w = r.write_error.expect("a write error");
                assert_eq!(w.issue, n, "{replies:?}");
            }
            (got, want) => panic!("{replies:?}: expected {want:?}, got {got:?}"),
        }
        assert_eq!(gh.verbs(&["--label"]), want, "{replies:?}");
        for n in [2, 3] {
            let i = gh.issue(n).unwrap();
            assert!(i.labels.contains(&"blocked:dependency".to_string()));
            assert!(!i.labels.contains(&"ready-for-agent".to_string()));
            assert!(i.comments.is_empty());
        }
    }
}

/// How a pass over a failing tracker ends.
#[derive(Debug, Clone, Copy)]
enum GivesUp {
    /// `Err`, naming the read that failed.
    Fails(&'static str),
    /// `Ok` with no promotion and the write error of this issue.
    WriteError(u64),
}

#[test]
fn unblock_command_reports_a_failed_pass_on_one_line() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let gh = gh_fixture(&env);
    gh.fail_next(1, 1, "HTTP 502: Bad Gateway");
    let mut c = env.bin_locks_in_tmpdir();
    c.env("PATH", gh.path_env())
        .arg("--repo")
        .arg(&repo.path)
        .args(["--tracker", "gh", "unblock"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("afk-supervisor: unblock: listing blocked issues failed:"),
        "{err}"
    );
    assert!(last.contains("Bad Gateway"), "{err}");
}

// ---- the belt ----

#[test]
fn belt_survives_a_failed_pass_and_is_a_singleton() {
    let env = TestEnv::new();
    let gh = gh_fixture(&env);
    let t = gh.tracker(Some("o/r"));
    let locks: PathBuf = env.path().join("locks");
    let mut a = Belt::in_dir("github:o/r", locks.clone()).with_label("/checkout/a");
    let mut b = Belt::in_dir("github:o/r", locks.clone()).with_label("/checkout/b");

    gh.fail_next(1, 1, "HTTP 502: Bad Gateway");
    let p = a.pass(&t);
    assert!(matches!(p, BeltPass::Failed(_)), "{p:?}");
    assert!(p.is_failure());
    assert!(
        p.log_line()
            .starts_with("unblock belt: pass failed: unblock: listing blocked issues failed:"),
        "{}",
        p.log_line()
    );
    assert!(a.owns());

    let p = b.pass(&t);
    let BeltPass::Skipped { holder } = &p else {
        panic!("second belt swept: {p:?}");
    };
    assert_eq!(holder.pid, Some(std::process::id() as i32));
    assert_eq!(
        p.log_line(),
        format!(
            "unblock belt: skipped, swept by pid {} (/checkout/a)",
            std::process::id()
        )
    );

    let p = a.pass(&t);
    assert_eq!(p.unblocked(), 2);
    assert_eq!(p.log_line(), "unblock belt: unblocked=2 (#2, #3)");

    // Another tracker's belt is not held back.
    let mut other = Belt::in_dir("github:o/other", locks.clone());
    assert!(matches!(other.pass(&t), BeltPass::Swept(_)));

    // The owner goes away: the other belt takes over on its next pass.
    drop(a);
    let p = b.pass(&t);
    assert!(matches!(p, BeltPass::Swept(_)), "{p:?}");
    assert!(b.owns());
}

#[test]
fn belt_task_for_the_supervisor_loop() {
    let env = TestEnv::new();
    let gh = gh_fixture(&env);
    let tracker: std::sync::Arc<dyn afk_supervisor::tracker::Tracker> =
        std::sync::Arc::new(gh.tracker(Some("o/r")));
    let belt = Belt::in_dir("github:o/r", env.path().join("locks")).with_label("/repo");
    let mut task = unblock_belt::task_with(belt, tracker);
    gh.fail_next(1, 1, "HTTP 502: Bad Gateway");
    let e =
        afk_supervisor::supervisor::timers::PeriodicError::Belt(task().unwrap_err()).to_string();
    // The loop logs it as `unblock-belt: …` / `unblock-belt failed: …`: the belt is not
    // named twice.
    assert!(
        e.starts_with("unblock: listing blocked issues failed:"),
        "{e}"
    );
    assert_eq!(task().unwrap(), "unblocked=2 (#2, #3)");
    assert_eq!(task().unwrap(), "unblocked=0");
}

/// A `unblock --watch` child on `checkout`, its output in files.
struct Watcher {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Watcher {
    fn start(env: &TestEnv, gh: &FakeGh, checkout: &Path, config: &Path, name: &str) -> Self {
        let out = env.path().join(format!("{name}.out"));
        let err = env.path().join(format!("{name}.err"));
        let child = env
            .bin_locks_in_tmpdir()
            .env("PATH", gh.path_env())
            .arg("--repo")
            .arg(checkout)
            .arg("--config")
            .arg(config)
            .args(["unblock", "--watch", "--interval", "1"])
            .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
            .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
            .spawn()
            .unwrap();
        Watcher { child, out, err }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    fn count(&self, needle: &str) -> usize {
        self.stdout().lines().filter(|l| l.contains(needle)).count()
    }

    fn stop(&mut self, sig: nix::sys::signal::Signal) -> i32 {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).unwrap();
        let status = self.child.wait().unwrap();
        status.code().unwrap_or(-1)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn two_checkouts_one_belt_sweeps_and_the_other_takes_over() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let second = env.path().join("second");
    env.git(
        env.path(),
        &[
            "clone",
            "-q",
            repo.origin.to_str().unwrap(),
            second.to_str().unwrap(),
        ],
    );
    let gh = FakeGh::install(&env);
    gh.set_issues(&[
        FakeIssue::open(1, &[]),
        FakeIssue::open(2, &["blocked:dependency", "req:1"]),
    ]);
    let config = env.path().join("afk.toml");
    std::fs::write(&config, "[tracker]\nkind = \"gh\"\nrepo = \"o/r\"\n").unwrap();

    // The first pass fails; the belt logs it and the next pass still runs.
    gh.fail_next(1, 1, "HTTP 502: Bad Gateway");
    let mut a = Watcher::start(&env, &gh, &repo.path, &config, "a");
    assert!(
        wait_until(WAIT, || a.count("unblock belt: unblocked=0") >= 1),
        "a never swept: {} / {}",
        a.stdout(),
        a.stderr()
    );
    let failed: Vec<String> = a
        .stderr()
        .lines()
        .filter(|l| {
            l.contains("unblock belt: pass failed: unblock: listing blocked issues failed:")
        })
        .map(str::to_string)
        .collect();
    assert_eq!(failed.len(), 1, "{}", a.stderr());
    let mut b = Watcher::start(&env, &gh, &second, &config, "b");
    let skipped = format!("unblock belt: skipped, swept by pid {}", a.pid());
    assert!(
        wait_until(WAIT, || b.count(&skipped) >= 2),
        "b: {}",
        b.stdout()
    );

    // A blocker closed "by hand" while the belts run is noticed by the owner.
    let mut issues = gh.issues();
    issues[0].state = "CLOSED".into();
    gh.set_issues(&issues);
    assert!(
        wait_until(WAIT, || gh.issue(2).unwrap().comments.len() == 1),
        "not promoted"
    );
    assert!(wait_until(WAIT, || a.count("unblocked=1 (#2)") == 1));
    assert_eq!(
        gh.issue(2).unwrap().labels,
        vec!["req:1".to_string(), "ready-for-agent".to_string()]
    );

    // The owner stops: the other checkout's belt takes over.
    assert_eq!(a.stop(nix::sys::signal::Signal::SIGTERM), 143);
    let a_swept = a.count("unblock belt: unblocked=");
    assert!(wait_until(WAIT, || b.count("unblock belt: unblocked=") >= 1));
    assert_eq!(b.stop(nix::sys::signal::Signal::SIGINT), 130);
    let b_swept = b.count("unblock belt: unblocked=");

    // Exactly one belt swept each pass: every blocked listing is the failed pass or one of
    // the swept passes, and b swept nothing while a owned the tracker.
    let listings = gh
        .verbs(&["--label"])
        .iter()
        .filter(|v| *v == "issue list --label")
        .count();
    assert_eq!(listings, 1 + a_swept + b_swept);
    let b_out = b.stdout();
    let first_b_sweep = b_out
        .lines()
        .position(|l| l.contains("unblocked="))
        .unwrap();
    assert!(
        b_out
            .lines()
            .take(first_b_sweep)
            .all(|l| l.contains(&skipped)),
        "{b_out}"
    );
    assert_eq!(gh.issue(2).unwrap().comments.len(), 1);
}
