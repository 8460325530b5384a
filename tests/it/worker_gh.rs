//! The built-in worker against the fake gh. Every tracker call has a deadline (SPEC §7): a
//! `gh` that never answers is killed with its process group at `tracker.timeout_s`, the
//! failure is transient, and nothing acts on it. The fake gh's `hang` reply stands in for a
//! gh stuck on a dead connection. A rate limit is a class of its own: the worker exits 75
//! for it, changing nothing. A quarantine on the shared tracker ends the claim with the
//! hand-off mark (`docs/SPEC.md` §11.5, §11.10).

use std::fs;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use afk_supervisor::tracker::{ErrorKind, Tracker};

use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::{self, Repo, TestEnv, cli, wait_until};

/// A repo whose built-in worker talks to the fake gh (timeout 5 s) and whose agent counts
/// its runs, then runs `script`.
pub(crate) struct GhWorker {
    pub env: TestEnv,
    pub repo: Repo,
    pub gh: FakeGh,
    runs: PathBuf,
}

impl GhWorker {
    fn new() -> Self {
        Self::with("", "")
    }

    /// With `script` after the agent's count and `config` appended to the config file.
    pub fn with(script: &str, config: &str) -> Self {
        let env = TestEnv::new();
        let repo = env.repo_with_origin();
        let runs = env.path().join("runs");
        let agent = env.path().join("agent.sh");
        fs::write(
            &agent,
            format!("echo run >> {}\n{script}\n", runs.display()),
        )
        .unwrap();
        fs::create_dir_all(repo.path.join(".red")).unwrap();
        fs::write(
            repo.path.join(".red/afk-supervisor.toml"),
            format!(
                "[agent]\ncommand = [\"sh\", \"{}\"]\n{}\n[tracker]\nkind = \"gh\"\n\
                 repo = \"fake-owner/fake-repo\"\ntimeout_s = 5\n{config}",
                agent.display(),
                crate::support::REPORTING_AGENT
            ),
        )
        .unwrap();
        let gh = FakeGh::install(&env);
        gh.set_issues(&[FakeIssue::open(1, &["ready-for-agent"]).with_body("# Do it\n")]);
        GhWorker {
            env,
            repo,
            gh,
            runs,
        }
    }

    /// Runs `worker --once` under a supervisor's variables and checks its exit code.
    pub fn work_once(&self, want: i32) -> Output {
        let mut c = self.env.bin_on(&self.repo.path);
        self.gh.apply(&mut c);
        cli::work_once(c, want)
    }

    /// Issue 1 is as it was, no agent ran, no claim is left.
    fn assert_untouched(&self) {
        let issue = self.gh.issue(1).unwrap();
        assert_eq!(issue.labels, vec!["ready-for-agent"]);
        assert!(issue.comments.is_empty(), "{:?}", issue.comments);
        assert!(!self.runs.exists(), "no agent ran");
        assert!(!self.repo.path.join(".red/tmp/claims/1").exists());
    }

    pub fn runs(&self) -> usize {
        fs::read_to_string(&self.runs).map_or(0, |t| t.lines().count())
    }
}

/// Whether `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |st| {
        st.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
    })
}

fn assert_all_ended(gh: &FakeGh, calls: usize) {
    let mut pids = gh.pids();
    assert_eq!(pids.len(), calls, "{pids:?}");
    let hung = gh.hung_children();
    assert_eq!(hung.len(), 1, "{hung:?}");
    pids.extend(hung);
    for pid in pids {
        assert!(
            wait_until(Duration::from_secs(10), || ended(pid)),
            "pid {pid} outlived the deadline"
        );
    }
}

#[test]
fn a_hung_gh_is_killed_with_its_group_and_counted_transient() {
    let env = TestEnv::new();
    let gh = FakeGh::install(&env);
    gh.set_issues(&[FakeIssue::open(1, &["running"])]);
    gh.hang_next(1);
    // Generous: the Python fake must start its child before the deadline, even on a
    // loaded machine.
    let t = gh.tracker_with_timeout(Some("o/r"), Duration::from_secs(5));
    let e = t
        .edit_labels(1, &["ready-for-agent"], &["running"])
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(
        e.detail.contains("timed out after 5s and was killed"),
        "{e}"
    );
    assert_all_ended(&gh, 1);
    assert_eq!(gh.issue(1).unwrap().labels, vec!["running"]);
}

/// The worker's claim: the confirming `view` hangs; the worker gives up at the deadline,
/// exits 69 (tracker unavailable, not a death: SPEC §6), drops its local claim, changes
/// nothing on the tracker and runs no agent. The next worker, with gh answering again,
/// works the issue.
#[test]
fn a_worker_whose_gh_hangs_changes_nothing_and_the_next_one_works_the_issue() {
    let w = GhWorker::new();
    w.gh.pass_next(1);
    w.gh.hang_next(1);
    let o = w.work_once(69);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("timed out after 5s and was killed"),
        "{stderr}"
    );
    let calls = w.gh.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0][..2], ["issue", "list"]);
    assert_eq!(calls[1][..2], ["issue", "view"]);
    assert_all_ended(&w.gh, 2);
    w.assert_untouched();

    w.work_once(0);
    assert_eq!(w.runs(), 1);
    assert_eq!(w.gh.issue(1).unwrap().labels, vec!["ready-for-human"]);
}

/// GitHub's rate limit on the claim check: the worker exits 75 (its own code, never a
/// death, SPEC §6), drops its local claim and changes nothing; it retries nothing either.
#[test]
fn a_rate_limited_worker_exits_75_and_changes_nothing() {
    let w = GhWorker::new();
    w.gh.pass_next(1);
    w.gh.fail_next(
        1,
        1,
        "HTTP 403: API rate limit exceeded for user ID 1. (https://api.github.com/graphql)",
    );
    let o = w.work_once(75);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("rate-limited"), "{stderr}");
    // The third call asks for the reset; none is spent, so the pause is a minute.
    let calls = w.gh.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[2], ["api", "rate_limit"]);
    let pause = afk_supervisor::lanes::pause_file::active(
        &afk_supervisor::layout::Layout::new(&w.repo.path).state(),
    )
    .expect("the fleet paused");
    // A minute from when gh answered (the record may be stamped a second later).
    let d = afk_supervisor::lanes::pause_file::DEFAULT_PAUSE_S;
    assert!((d - 1..=d).contains(&(pause.until_epoch - pause.since_epoch)));
    w.assert_untouched();
    // The next worker claims nothing while the pause holds and calls nothing.
    w.work_once(75);
    assert_eq!(w.gh.calls().len(), 3);
}

/// An operator pause (`afk-supervisor pause`): the worker claims nothing and calls nothing
/// (exit 75, never a death); after `resume` the next one works the issue.
#[test]
fn an_operator_pause_keeps_the_worker_from_claiming_until_resumed() {
    let w = GhWorker::new();
    let state = afk_supervisor::layout::Layout::new(&w.repo.path).state();
    afk_supervisor::lanes::pause_file::pause_operator(&state, Some("release freeze"), None, "cli")
        .unwrap();
    let o = w.work_once(75);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("fleet paused by the operator"), "{stderr}");
    assert!(w.gh.calls().is_empty(), "{:?}", w.gh.calls());
    w.assert_untouched();
    afk_supervisor::lanes::pause_file::resume_operator(&state, "cli").unwrap();
    w.work_once(0);
    assert_eq!(w.runs(), 1);
}

/// A dropped connection while listing the queue: a transient failure, so the worker exits
/// 69 (tracker unavailable: the supervisor counts no death, SPEC §6) with gh's text as its
/// one line, and nothing is claimed or changed.
#[test]
fn a_worker_whose_tracker_fails_transiently_exits_69_and_changes_nothing() {
    let w = GhWorker::new();
    w.gh.fail_next(
        1,
        1,
        "error connecting to api.github.com\ncheck your internet connection or https://githubstatus.com",
    );
    let o = w.work_once(69);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("error connecting to api.github.com"),
        "{stderr}"
    );
    let calls = w.gh.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0][..2], ["issue", "list"]);
    w.assert_untouched();
    // gh answering again: the next worker works the issue.
    w.work_once(0);
    assert_eq!(w.runs(), 1);
}

/// On the shared tracker the quarantine comment carries the hand-off mark as its last
/// line, so the claims belt finishes a hand-off and never requeues the issue.
#[test]
fn a_quarantine_on_gh_ends_the_claim_with_the_handoff_mark() {
    let w = GhWorker::with("exit 3", "[worker]\nmax_failed_attempts = 2\n");
    w.work_once(1);
    assert_eq!(w.gh.issue(1).unwrap().labels, vec!["ready-for-agent"]);
    w.work_once(1);
    w.work_once(0);
    assert_eq!(w.runs(), 2);
    let issue = w.gh.issue(1).unwrap();
    let mut labels = issue.labels.clone();
    labels.sort();
    assert_eq!(labels, vec!["afk:quarantined", "ready-for-human"]);
    let quarantine: Vec<&str> = issue
        .comments
        .iter()
        .map(|c| c.body.as_str())
        .filter(|b| b.contains("quarantined this issue"))
        .collect();
    assert_eq!(quarantine.len(), 1, "{:?}", issue.comments);
    assert!(
        quarantine[0].contains("after 2 failed attempt(s)"),
        "{}",
        quarantine[0]
    );
    let last = quarantine[0]
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap();
    assert!(last.starts_with("🤖 /afk handoff w1@"), "{last}");
}

/// An outsider's comment whose last line is a well-formed claim mark (#22): on a public
/// repository anyone may comment, so only the fleet's own login (`gh api user`, asked once)
/// and `claims.trusted_authors` make marks. The worker ignores the outsider's, says so once,
/// and works the issue.
#[test]
fn an_outsiders_claim_mark_does_not_hold_the_issue() {
    use support::fake_gh::FakeComment;
    let w = GhWorker::new();
    let mark = "looks done to me\n🤖 /afk claim mallory@evil-box-0badc0de 0123456789abcdef";
    w.gh.set_issues(&[FakeIssue::open(1, &["ready-for-agent"])
        .with_body("# Do it\n")
        .with_comment(FakeComment::by("mallory", "NONE", mark))]);
    let o = w.work_once(0);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(w.runs(), 1, "{stderr}");
    assert_eq!(w.gh.issue(1).unwrap().labels, vec!["ready-for-human"]);
    assert_eq!(
        stderr.matches("ignored a claim mark by mallory").count(),
        1,
        "{stderr}"
    );
    assert_eq!(w.gh.viewer_calls(), 1, "{:?}", w.gh.calls());
}

/// A login named in `claims.trusted_authors` is a mark maker: its claim holds the issue.
#[test]
fn a_trusted_authors_claim_mark_holds_the_issue() {
    use support::fake_gh::FakeComment;
    let w = GhWorker::with("", "\n[claims]\ntrusted_authors = [\"other-bot\"]\n");
    let mark = "🤖 /afk claim w9@other-box-0badc0de 0123456789abcdef";
    w.gh.set_issues(&[FakeIssue::open(1, &["ready-for-agent"])
        .with_body("# Do it\n")
        .with_comment(FakeComment::by("other-bot", "NONE", mark))]);
    let o = w.work_once(0);
    assert_eq!(w.runs(), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let issue = w.gh.issue(1).unwrap();
    assert!(
        issue
            .comments
            .iter()
            .any(|c| c.body.starts_with("🤖 /afk yielded w1@")),
        "{:?}",
        issue.comments
    );
}

/// The claim switch lands on GitHub but every answer is a 502 (#22): the worker retries
/// the idempotent edit, then re-reads the issue, sees `running` in place of
/// `ready-for-agent`, and goes on with the claim instead of leaving the issue `running`
/// with no mark and no worker.
#[test]
fn a_claim_switch_that_landed_though_its_answer_failed_is_carried_on() {
    let w = GhWorker::new();
    // The queue listing, the confirming view, the provenance call (SPEC §11.20) and the
    // fleet's login answer; the switch is applied and answered 502 on each of its three tries.
    w.gh.pass_next(4);
    w.gh.apply_then_fail_next(
        3,
        1,
        "HTTP 502: Bad Gateway (https://api.github.com/graphql)",
    );
    let o = w.work_once(0);
    assert_eq!(w.runs(), 1, "{}", String::from_utf8_lossy(&o.stderr));
    let issue = w.gh.issue(1).unwrap();
    assert_eq!(issue.labels, vec!["ready-for-human"]);
    assert!(
        issue
            .comments
            .iter()
            .any(|c| c.body.starts_with("🤖 /afk claim w1@")),
        "{:?}",
        issue.comments
    );
}

/// A garbage answer where JSON was asked for (a proxy's error page): the tracker failed,
/// not the worker, so it exits 69 (no death, no circuit) and changes nothing (#22).
#[test]
fn a_worker_given_garbage_by_gh_exits_69_and_changes_nothing() {
    let w = GhWorker::new();
    w.gh.respond_next(1, 0, "<html><body>502 Bad Gateway</body></html>\n", "");
    let o = w.work_once(69);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("unexpected JSON from gh"), "{stderr}");
    w.assert_untouched();
}
