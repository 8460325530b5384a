//! Orphan cleanup over the `gh` backend with the fake `gh`: a failing tracker falls back to
//! the mtime TTL and changes nothing on any issue; calls are counted from the fake's log.

use std::path::PathBuf;

use afk_supervisor::sweeps::orphans::{self, OrphanReport, RESTORE_COMMENT};
use afk_supervisor::tracker::GhTracker;

use crate::support::TestEnv;
use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::sweep_fixtures::*;

struct Setup {
    _env: TestEnv,
    gh: FakeGh,
    t: GhTracker,
    tree: Tree,
}

fn setup(issues: &[FakeIssue]) -> Setup {
    let env = TestEnv::new();
    let gh = FakeGh::install(&env);
    gh.set_issues(issues);
    let t = gh.tracker(None);
    let repo = env.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let tree = Tree::new(&repo);
    Setup {
        _env: env,
        gh,
        t,
        tree,
    }
}

fn sweep(s: &Setup) -> OrphanReport {
    orphans::run(&s.tree.layout, &s.t, s.tree.now, false).unwrap()
}

/// Dirs whose issue states would mean "remove" or "restore", aged either side of both
/// fallback TTLs.
fn fallback_tree(s: &Setup) -> [(PathBuf, bool); 4] {
    let w = s.tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    let st = state_json(Some(true));
    [
        (s.tree.attempt(&w, "1-a1", Some(&st), 7 * DAY - MIN), true),
        (s.tree.attempt(&w, "1-a2", Some(&st), 7 * DAY + MIN), false),
        (s.tree.attempt(&w, "2-a1", None, DAY - MIN), true),
        (s.tree.attempt(&w, "2-a2", None, DAY + MIN), false),
    ]
}

fn assert_fallback(s: &Setup, dirs: &[(PathBuf, bool)], r: &OrphanReport) {
    for (p, kept) in dirs {
        assert_eq!(p.exists(), *kept, "{}", p.display());
    }
    // Only the batch listing was tried: no per-issue view, no edit, no comment.
    assert_eq!(s.gh.verbs(&[]), vec!["issue list"]);
    assert_eq!(s.gh.issue(2).unwrap().labels, vec!["running"]);
    assert!(s.gh.issue(2).unwrap().comments.is_empty());
    assert_eq!(
        (r.counts.removed, r.counts.kept, r.counts.restored),
        (2, 2, 0)
    );
    assert!(
        r.decisions.iter().filter(|d| d.issue.is_some()).all(|d| d
            .state
            .as_deref()
            .is_some_and(|s| s.starts_with("unavailable"))),
        "{:#?}",
        r.decisions
    );
}

#[test]
fn transient_list_failure_falls_back_to_mtime_ttl() {
    let s = setup(&[FakeIssue::closed(1, &[]), FakeIssue::open(2, &["running"])]);
    let dirs = fallback_tree(&s);
    s.gh.fail_next(1, 1, "HTTP 502: Bad Gateway");
    let r = sweep(&s);
    assert_fallback(&s, &dirs, &r);
    assert!(
        r.decisions[0].reason.contains("transient"),
        "{}",
        r.decisions[0].reason
    );
}

#[test]
fn failed_list_falls_back_to_mtime_ttl() {
    let s = setup(&[FakeIssue::closed(1, &[]), FakeIssue::open(2, &["running"])]);
    let dirs = fallback_tree(&s);
    s.gh.fail_next(1, 1, "HTTP 401: Bad credentials");
    let r = sweep(&s);
    assert_fallback(&s, &dirs, &r);
    assert!(
        r.decisions[0].reason.contains("failed"),
        "{}",
        r.decisions[0].reason
    );
}

#[test]
fn a_number_missing_from_the_batch_gets_one_view() {
    let s = setup(&[FakeIssue::closed(1, &[])]);
    let w = s.tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    // #40 is not in the batch (e.g. past the list limit) and the view fails: TTL only.
    let kept = s.tree.attempt(&w, "40-a1", None, DAY - MIN);
    let kept2 = s.tree.attempt(&w, "40-a2", None, MIN);
    // #41 does not exist: the view says so, which says nothing of its state: TTL only too.
    let ghost = s.tree.attempt(&w, "41-a1", None, MIN);
    let old_ghost = s.tree.attempt(&w, "41-a2", None, DAY + MIN);
    s.gh.delay_next(1, 0.0); // the list answers normally
    s.gh.fail_next(1, 1, "HTTP 503: Service Unavailable");
    let r = sweep(&s);
    assert!(kept.exists() && kept2.exists());
    assert!(ghost.exists());
    assert!(!old_ghost.exists());
    assert_eq!(
        s.gh.verbs(&[]),
        vec!["issue list", "issue view", "issue view"]
    );
    assert_eq!(r.tracker_reads, 3);
}

#[test]
fn a_transient_failure_of_the_restore_keeps_the_dir_and_posts_nothing() {
    let s = setup(&[FakeIssue::open(7, &["running"])]);
    let w = s.tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    let a = s.tree.attempt(&w, "7-a1", Some(&state_json(None)), MIN);
    s.gh.delay_next(1, 0.0);
    s.gh.fail_next(1, 1, "error connecting to api.github.com");
    let r = sweep(&s);
    assert!(a.exists());
    // The restore reads the claim marks first (SPEC §11.5): that read fails, nothing is posted.
    assert_eq!(s.gh.verbs(&[]), vec!["issue list", "issue view"]);
    assert_eq!(s.gh.issue(7).unwrap().labels, vec!["running"]);
    assert_eq!((r.counts.restored, r.counts.kept), (0, 1));
    // Next boot, with the tracker back, the restore goes through.
    s.gh.clear_calls();
    let r = sweep(&s);
    assert!(!a.exists());
    assert_eq!(r.counts.restored, 1);
    assert_eq!(
        s.gh.verbs(&[]),
        vec!["issue list", "issue view", "issue comment", "issue edit"]
    );
    let issue = s.gh.issue(7).unwrap();
    assert_eq!(issue.labels, vec!["ready-for-agent"]);
    assert_eq!(issue.comments[0].body, RESTORE_COMMENT);
}

#[test]
fn two_thousand_dirs_of_three_hundred_issues_cost_one_list_plus_the_transitions() {
    let live = LiveProc::spawn();
    // Issue kinds by number: closed, ready-for-human, ready-for-agent, and every 30th
    // running without a claim (a transition) or with a live claim (none).
    let issues: Vec<FakeIssue> = (1..=300u64)
        .map(|n| match n % 30 {
            0 => FakeIssue::open(n, &["running"]),
            15 => FakeIssue::open(n, &["running"]),
            k if k % 3 == 0 => FakeIssue::closed(n, &[]),
            k if k % 3 == 1 => FakeIssue::open(n, &["ready-for-human"]),
            _ => FakeIssue::open(n, &["ready-for-agent"]),
        })
        .collect();
    let s = setup(&issues);
    for n in (15..=300u64).step_by(30) {
        s.tree.claim(n, Pid::Live(live.pid()));
    }
    let workers: Vec<PathBuf> = (0..20)
        .map(|w| {
            s.tree
                .worker("workers", &format!("w{w}"), Pid::Dead(shared_dead_pid()))
        })
        .collect();
    let st = state_json(Some(false));
    for k in 0..2000u64 {
        let issue = k % 300 + 1;
        let attempt = k / 300 + 1;
        s.tree.bare_attempt(
            &workers[(k % 20) as usize],
            &format!("{issue}-a{attempt}"),
            &st,
            MIN,
        );
    }
    let r = sweep(&s);
    let v = s.gh.verbs(&[]);
    let count = |verb: &str| v.iter().filter(|c| *c == verb).count();
    assert_eq!(r.counts.restored, 10);
    assert_eq!(count("issue list"), 1);
    // One read of the claim marks per restore (SPEC §11.5), none for the rest.
    assert_eq!(count("issue view"), 10);
    assert_eq!(count("issue edit"), 10);
    assert_eq!(count("issue comment"), 10);
    assert_eq!(v.len(), 1 + 3 * 10);
    // ready-for-human dirs (fresh, envelope not posted) stay; everything else went.
    let is_human = |n: u64| matches!(n % 30, k if k != 0 && k != 15 && k % 3 == 1);
    let human_dirs = (0..2000u64).filter(|k| is_human(k % 300 + 1)).count();
    assert_eq!(r.counts.kept, human_dirs);
    assert_eq!(r.counts.removed + r.counts.kept, 2000);
}
