//! An attempt dir that holds a registered git worktree (`<attempt>/worktree/`, made by
//! `git worktree add` as the built-in worker does) is removed by orphan cleanup or the
//! attempt cap together with git's record of it, so the branch reaper no longer sees the
//! closed issue's branch as checked out and reaps it. Real git, real local tracker.

use std::collections::HashSet;
use std::path::PathBuf;

use afk_supervisor::sweeps::{attempt_cap, orphans};
use afk_supervisor::tracker::LocalTracker;

use crate::support::sweep_fixtures::*;
use crate::support::{Repo, TestEnv};

const BRANCH: &str = "afk/w1/1-fix";

/// A repo whose issue #1 is closed, and a dead worker's attempt `1-a1` holding a linked
/// worktree on `afk/w1/1-fix`.
fn fixture() -> (TestEnv, Repo, Tree, LocalTracker, PathBuf) {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let t = env.local_tracker(&repo.path);
    assert_eq!(t.create("fix", "", &[]).unwrap(), 1);
    t.close(1).unwrap();
    let tree = Tree::new(&repo.path);
    let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    let attempt = w.join("1-a1");
    std::fs::create_dir_all(&attempt).unwrap();
    std::fs::write(attempt.join("afk.state.json"), state_json(Some(true))).unwrap();
    let wt = attempt.join("worktree");
    env.git(
        &repo.path,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            BRANCH,
            wt.to_str().unwrap(),
            "origin/main",
        ],
    );
    set_age(&attempt, tree.now, 20 * DAY);
    (env, repo, tree, t, attempt)
}

fn registered_worktrees(env: &TestEnv, repo: &Repo) -> usize {
    env.git(&repo.path, &["worktree", "list", "--porcelain"])
        .lines()
        .filter(|l| l.starts_with("worktree "))
        .count()
}

fn reap(env: &TestEnv, repo: &Repo) -> String {
    let out = env
        .bin()
        .arg("--repo")
        .arg(&repo.path)
        .args(["--tracker", "local", "reap"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn orphan_cleanup_prunes_the_worktree_record_and_reap_then_reaps_the_branch() {
    let (env, repo, tree, t, attempt) = fixture();
    assert_eq!(registered_worktrees(&env, &repo), 2);
    let r = orphans::run(&tree.layout, &t, tree.now, false).unwrap();
    assert_eq!(r.counts.removed, 1, "{:#?}", r.decisions);
    assert!(!attempt.exists());
    assert_eq!(registered_worktrees(&env, &repo), 1, "git still records it");
    let out = reap(&env, &repo);
    assert!(
        out.contains(&format!("reaped (local): {BRANCH} #1 — issue closed")),
        "{out}"
    );
    assert!(
        env.git(&repo.path, &["branch", "--list", BRANCH])
            .is_empty()
    );
}

#[test]
fn the_attempt_cap_prunes_the_worktree_record_too() {
    let (env, repo, tree, _t, attempt) = fixture();
    let caps = attempt_cap::Caps {
        max_age: 14 * DAY,
        max_count: 5,
    };
    let r = attempt_cap::run(&tree.layout, caps, tree.now, false, &HashSet::new()).unwrap();
    assert_eq!(r.reclaimed, 1, "{:#?}", r.decisions);
    assert!(!attempt.exists());
    assert_eq!(registered_worktrees(&env, &repo), 1, "git still records it");
}

#[test]
fn a_dry_run_leaves_the_worktree_and_its_record() {
    let (env, repo, tree, t, attempt) = fixture();
    orphans::run(&tree.layout, &t, tree.now, true).unwrap();
    assert!(attempt.join("worktree/.git").is_file());
    assert_eq!(registered_worktrees(&env, &repo), 2);
}
