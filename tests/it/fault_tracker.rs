//! The tracker-fault part of the fault-injection suite (issue 14).
//!
//! One *round* is what a fleet does to the tracker between two boots: the supervisor
//! releases a dead worker's claim (`supervisor::release`), then the boot's orphan cleanup
//! and an unblock pass run. The world has every transition that carries a comment: a
//! restore from a dead worker's attempt dir (pass 2), a restore from a stale claim alone
//! (pass 3), a restore by the supervisor's release, and an unblock.
//!
//! The property, checked against a round on a tracker that never fails: whatever fails in
//! a faulty round, one more clean round ends in the same state (labels, and comments with
//! no comment missing and none twice), with no issue left `running` whose claim's owner is
//! dead and no claim or attempt dir of those issues left behind. Faults come from the fake
//! gh (a failure aimed at each call in turn, and seeded chaos failing ~30% of calls) and,
//! on the local tracker, from its one fault seam: a store lock held past the timeout.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;

use afk_supervisor::claim::release::DeadWorker;
use afk_supervisor::layout::Layout;
use afk_supervisor::supervisor::release_dead;
use afk_supervisor::sweeps::orphans::{self, RESTORE_COMMENT};
use afk_supervisor::sweeps::unblock_sweep;
use afk_supervisor::tracker::{IssueState, LocalTracker, Tracker};

use crate::support::TestEnv;
use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::sweep_fixtures::*;

/// gh's text for a dropped connection: classified transient.
const NET: &str = "error connecting to api.github.com\ncheck your internet connection or https://githubstatus.com";

/// Fixed chaos seeds: each replays the same failures on every run.
const SEEDS: [u64; 6] = [1, 2, 3, 5, 8, 13];
const CHAOS_RATE: f64 = 0.3;
/// Faulty rounds before the clean one.
const CHAOS_ROUNDS: usize = 2;

/// Issue numbers of the world.
const RESTORE_ATTEMPT: u64 = 1; // running; dead worker's attempt dir and dead claim
const RESTORE_CLAIM: u64 = 2; // running; only a dead claim left
const CLOSED: u64 = 3; // closed; a dead worker's attempt dir
const UNBLOCK: u64 = 4; // blocked on #3 (closed): promoted
const STILL_BLOCKED: u64 = 5; // blocked on #6 (open): kept
const OPEN: u64 = 6; // ready-for-agent, untouched
const RELEASE: u64 = 7; // running; claimed by the supervisor's dead worker

/// Issues whose claim owner is dead: none may end `running`.
const DEAD_CLAIMS: [u64; 3] = [RESTORE_ATTEMPT, RESTORE_CLAIM, RELEASE];

/// One issue as the end state compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct End {
    state: IssueState,
    labels: Vec<String>,
    comments: Vec<String>,
}

/// A repo dir with the world's `.red/tmp` tree; the tracker is the caller's.
struct World {
    env: TestEnv,
    tree: Tree,
    attempts: Vec<PathBuf>,
    dead: DeadWorker,
}

impl World {
    fn new() -> World {
        let env = TestEnv::new();
        let repo = env.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        let tree = Tree::new(&repo);
        let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
        let st = state_json(None);
        let attempts = vec![
            tree.attempt(&w, &format!("{RESTORE_ATTEMPT}-a1"), Some(&st), DAY),
            tree.attempt(&w, &format!("{CLOSED}-a1"), Some(&st), DAY),
        ];
        tree.claim(RESTORE_ATTEMPT, Pid::Dead(dead_pid()));
        tree.claim(RESTORE_CLAIM, Pid::Dead(dead_pid()));
        // The supervisor's worker: its claim names its pid and start time.
        let pid = dead_pid();
        tree.claim(RELEASE, Pid::Dead(pid));
        let dead = DeadWorker {
            slot: 0,
            pid,
            start: 1,
            id: "sup-1-slot-0-1".into(),
            outcome: afk_supervisor::ledger::Outcome::WorkerDied,
        };
        World {
            env,
            tree,
            attempts,
            dead,
        }
    }

    fn layout(&self) -> &Layout {
        &self.tree.layout
    }

    /// One round. Failures are the point: they are reported, never fatal here.
    fn round(&self, t: &dyn Tracker) {
        release_dead::release(self.layout(), t, &self.dead);
        orphans::run(self.layout(), t, self.tree.now, false).expect("orphan pass");
        let _ = unblock_sweep::pass(t, false);
    }

    /// Claims still present.
    fn claims(&self) -> Vec<u64> {
        let mut v: Vec<u64> = DEAD_CLAIMS
            .into_iter()
            .filter(|n| self.layout().claims().join(n.to_string()).exists())
            .collect();
        v.sort_unstable();
        v
    }

    /// The end state: every issue as `issues` reads it, plus the local records left.
    fn end(&self, issues: BTreeMap<u64, End>) -> Ends {
        let attempts = self.attempts.iter().map(|p| p.exists()).collect();
        (issues, self.claims(), attempts)
    }
}

/// Issues, claims left, and whether each attempt dir is left.
type Ends = (BTreeMap<u64, End>, Vec<u64>, Vec<bool>);

fn sorted(mut labels: Vec<String>) -> Vec<String> {
    labels.sort();
    labels
}

/// The fake's store as it is (read directly, no gh call).
fn gh_end(gh: &FakeGh) -> BTreeMap<u64, End> {
    gh.issues()
        .into_iter()
        .map(|i| {
            let state = match i.state.as_str() {
                "OPEN" => IssueState::Open,
                _ => IssueState::Closed,
            };
            let end = End {
                state,
                labels: sorted(i.labels),
                comments: i.comments.into_iter().map(|c| c.body).collect(),
            };
            (i.number, end)
        })
        .collect()
}

/// The local store, read through a tracker that does not fail.
fn local_end(t: &LocalTracker) -> BTreeMap<u64, End> {
    t.list_all(100)
        .expect("list")
        .into_iter()
        .map(|row| {
            let end = End {
                state: row.state,
                labels: sorted(row.labels),
                comments: t.comments(row.number).expect("comments"),
            };
            (row.number, end)
        })
        .collect()
}

fn gh_issues() -> Vec<FakeIssue> {
    vec![
        FakeIssue::open(RESTORE_ATTEMPT, &["running"]),
        FakeIssue::open(RESTORE_CLAIM, &["running"]),
        FakeIssue::closed(CLOSED, &[]),
        FakeIssue::open(UNBLOCK, &["blocked:dependency", "req:3"]),
        FakeIssue::open(STILL_BLOCKED, &["blocked:dependency", "req:6"]),
        FakeIssue::open(OPEN, &["ready-for-agent"]),
        FakeIssue::open(RELEASE, &["running"]),
    ]
}

/// A world on the fake gh.
fn gh_world() -> (World, FakeGh) {
    let w = World::new();
    let gh = FakeGh::install(&w.env);
    gh.set_issues(&gh_issues());
    (w, gh)
}

/// What every faulty run must end in: the end state after one round with no failure.
fn assert_clean_end(end: &Ends, what: &str) {
    let (issues, claims, attempts) = end;
    let unblocked = unblock_sweep::comment_text(&[CLOSED]);
    let want = |n: u64, labels: &[&str], comments: &[&str]| {
        let labels = sorted(labels.iter().map(|l| l.to_string()).collect());
        let got = &issues[&n];
        assert_eq!(got.labels, labels, "{what}: labels of #{n}");
        assert_eq!(
            got.comments,
            comments.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            "{what}: comments of #{n}"
        );
    };
    want(RESTORE_ATTEMPT, &["ready-for-agent"], &[RESTORE_COMMENT]);
    want(RESTORE_CLAIM, &["ready-for-agent"], &[RESTORE_COMMENT]);
    want(CLOSED, &[], &[]);
    want(UNBLOCK, &["ready-for-agent", "req:3"], &[&unblocked]);
    want(STILL_BLOCKED, &["blocked:dependency", "req:6"], &[]);
    want(OPEN, &["ready-for-agent"], &[]);
    want(RELEASE, &["ready-for-agent"], &[RESTORE_COMMENT]);
    for n in DEAD_CLAIMS {
        assert!(
            !issues[&n].labels.iter().any(|l| l == "running"),
            "{what}: #{n} stranded running"
        );
    }
    assert_eq!(claims, &Vec::<u64>::new(), "{what}: claims left");
    assert_eq!(attempts, &vec![false, false], "{what}: attempt dirs left");
}

#[test]
fn a_clean_round_on_gh_is_the_reference() {
    let (w, gh) = gh_world();
    w.round(&gh.tracker(None));
    assert_clean_end(&w.end(gh_end(&gh)), "clean round");
    // Exactly one comment per transition, so no duplicate hides in a clean run either.
    let posted = gh
        .calls()
        .iter()
        .filter(|c| c[..2] == ["issue", "comment"])
        .count();
    assert_eq!(posted, 4);
}

/// How many calls a clean round makes on gh, for aiming a failure at each one.
fn clean_round_calls() -> usize {
    let (w, gh) = gh_world();
    w.round(&gh.tracker(None));
    gh.calls().len()
}

#[test]
fn a_failure_at_any_single_call_is_made_good_by_one_clean_round() {
    let n = clean_round_calls();
    assert!(n >= 10, "the round made only {n} calls");
    for k in 0..n {
        let (w, gh) = gh_world();
        gh.pass_next(k);
        gh.fail_next(1, 1, NET);
        let t = gh.tracker(None);
        w.round(&t);
        w.round(&t);
        assert_clean_end(&w.end(gh_end(&gh)), &format!("failure at call {k}"));
    }
}

#[test]
fn seeded_chaos_on_gh_converges_after_one_clean_round() {
    for seed in SEEDS {
        let (w, gh) = gh_world();
        let t = gh.tracker(None);
        gh.set_chaos(Some((CHAOS_RATE, seed)));
        for _ in 0..CHAOS_ROUNDS {
            w.round(&t);
        }
        let failed = gh.chaos_failures();
        assert!(failed > 0, "seed {seed}: chaos failed no call");
        gh.set_chaos(None);
        w.round(&t);
        assert_clean_end(
            &w.end(gh_end(&gh)),
            &format!("seed {seed} ({failed} failures)"),
        );
        // Every call chaos made was a `docs/SPEC.md` argv: the fake refuses anything else with exit
        // 2, which no round survives unnoticed (the end state would differ).
        assert!(
            gh.calls()
                .iter()
                .all(|c| c[0] == "issue" || c[..] == ["api", "user"]),
            "{:?}",
            gh.calls()
        );
    }
}

/// A stale claim whose issue cannot be read is the only record to restore it from: it is
/// kept (counted), and the next pass restores the issue and only then drops the claim.
#[test]
fn a_stale_claim_outlives_a_failed_read_of_its_issue() {
    let env = TestEnv::new();
    let repo = env.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let tree = Tree::new(&repo);
    let claim = tree.claim(RESTORE_CLAIM, Pid::Dead(dead_pid()));
    let gh = FakeGh::install(&env);
    gh.set_issues(&[FakeIssue::open(RESTORE_CLAIM, &["running"])]);
    let t = gh.tracker(None);
    gh.fail_next(1, 1, NET);
    let r = orphans::run(&tree.layout, &t, tree.now, false).unwrap();
    assert!(claim.exists(), "the claim went before its issue was read");
    assert_eq!((r.counts.kept, r.counts.claims_released), (1, 0));
    assert_eq!(gh.issue(RESTORE_CLAIM).unwrap().labels, vec!["running"]);
    orphans::run(&tree.layout, &t, tree.now, false).unwrap();
    let i = gh.issue(RESTORE_CLAIM).unwrap();
    assert_eq!(i.labels, vec!["ready-for-agent"]);
    assert_eq!(i.comments.len(), 1);
    assert_eq!(i.comments[0].body, RESTORE_COMMENT);
    assert!(!claim.exists());
}

/// The supervisor's release: a failure at any of its calls leaves the claim, from which
/// the next boot's orphan cleanup finishes the restore, comment included, exactly once.
#[test]
fn a_release_interrupted_at_any_call_is_finished_by_the_next_orphan_pass() {
    for k in 0..3 {
        let (w, gh) = gh_world();
        let t = gh.tracker(None);
        gh.pass_next(k);
        gh.fail_next(1, 1, NET);
        release_dead::release(w.layout(), &t, &w.dead);
        orphans::run(w.layout(), &t, w.tree.now, false).unwrap();
        let i = gh.issue(RELEASE).unwrap();
        assert_eq!(i.labels, vec!["ready-for-agent"], "failure at call {k}");
        let bodies: Vec<&str> = i.comments.iter().map(|c| c.body.as_str()).collect();
        assert_eq!(bodies, vec![RESTORE_COMMENT], "failure at call {k}");
        assert!(!w.claims().contains(&RELEASE), "failure at call {k}");
    }
}

// ---- the local tracker: its fault seam is the store lock ----

fn local_world() -> (World, LocalTracker) {
    let w = World::new();
    let t = LocalTracker::new(w.layout(), w.env.lib_git(w.layout().repo()));
    for i in gh_issues() {
        let labels: Vec<&str> = i.labels.iter().map(String::as_str).collect();
        let n = t.create(&i.title, "", &labels).unwrap();
        assert_eq!(n, i.number);
        if i.state == "CLOSED" {
            t.close(n).unwrap();
        }
    }
    (w, t)
}

#[test]
fn a_clean_round_on_local_is_the_reference() {
    let (w, t) = local_world();
    w.round(&t);
    assert_clean_end(&w.end(local_end(&t)), "clean local round");
}

/// A round while another process holds the store lock past the timeout: every call fails
/// as transient, so nothing changes (no claim or dir dropped, no label, no comment); one
/// clean round then ends where a round with no failure does.
#[test]
fn a_round_behind_a_held_store_lock_changes_nothing_and_one_clean_round_converges() {
    let (w, t) = local_world();
    let before = w.end(local_end(&t));
    let holder = File::options()
        .write(true)
        .open(t.dir().join("lock"))
        .unwrap();
    holder.lock().unwrap();
    let blocked = t.clone().with_timeout(Duration::from_millis(50));
    w.round(&blocked);
    drop(holder);
    assert_eq!(
        w.end(local_end(&t)),
        before,
        "a round on a locked store changed something"
    );
    w.round(&t);
    assert_clean_end(&w.end(local_end(&t)), "local, after a locked round");
}
