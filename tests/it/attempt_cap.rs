//! The attempt cap over real trees: age and count caps per issue across workers and
//! namespaces, live attempts and live workers untouched, corrupt state kept.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use afk_supervisor::sweeps::attempt_cap::{self, CapReport, Caps};

use crate::support::sweep_fixtures::*;

const CAPS: Caps = Caps {
    max_age: Duration::from_secs(14 * 86_400),
    max_count: 5,
};

fn run(tree: &Tree, caps: Caps, dry_run: bool) -> CapReport {
    attempt_cap::run(&tree.layout, caps, tree.now, dry_run, &HashSet::new()).unwrap()
}

fn existing(paths: &[PathBuf]) -> Vec<bool> {
    paths.iter().map(|p| p.exists()).collect()
}

#[test]
fn keeps_the_newest_five_by_attempt_number_across_workers_and_namespaces() {
    let d = tempfile::tempdir().unwrap();
    let tree = Tree::new(d.path());
    let w1 = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    let w2 = tree.worker("go-workers", "w2", Pid::Corrupt);
    let st = state_json(Some(false));
    // Attempt numbers 1..=8 of issue 5 spread over two workers; mtimes do not follow the
    // numbers, so only the attempt number can decide.
    let mut a = Vec::new();
    for n in 1..=8u64 {
        let w = if n % 2 == 0 { &w1 } else { &w2 };
        let age = Duration::from_secs(3600 * (9 - n) % 7 + 60);
        a.push(tree.attempt(w, &format!("5-a{n}"), Some(&st), age));
    }
    // Another issue under the cap is untouched.
    let other = tree.attempt(&w1, "6-a1", None, DAY);

    let r = run(&tree, CAPS, false);
    assert_eq!(r.reclaimed, 3);
    assert_eq!(
        existing(&a),
        vec![false, false, false, true, true, true, true, true]
    );
    assert!(other.exists());
    let removed: Vec<&str> = r
        .decisions
        .iter()
        .filter(|d| d.verdict == "remove")
        .map(|d| d.subject.as_str())
        .collect();
    assert_eq!(removed.len(), 3);
    assert!(
        removed
            .iter()
            .all(|s| s.contains("5-a1") || s.contains("5-a2") || s.contains("5-a3"))
    );
    // A second pass finds nothing more to do.
    assert_eq!(run(&tree, CAPS, false).reclaimed, 0);
}

#[test]
fn age_cap_first_then_count_cap_over_the_rest_with_the_boundary_either_side() {
    let d = tempfile::tempdir().unwrap();
    let tree = Tree::new(d.path());
    let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    let st = state_json(None);
    let age_of = |n: u64| match n {
        7 => 14 * DAY + MIN, // just over the age cap: removed although among the newest
        8 => 14 * DAY - MIN, // just under: kept
        _ => DAY,
    };
    let a: Vec<PathBuf> = (1..=8)
        .map(|n| tree.attempt(&w, &format!("9-a{n}"), Some(&st), age_of(n)))
        .collect();
    let r = run(&tree, CAPS, false);
    // a7 by age; then the newest five of the rest are a8, a6, a5, a4, a3.
    assert_eq!(
        existing(&a),
        vec![false, false, true, true, true, true, false, true]
    );
    assert_eq!(r.reclaimed, 3);
    let a7 = r
        .decisions
        .iter()
        .find(|d| d.subject.ends_with("9-a7"))
        .unwrap();
    assert!(
        a7.reason.contains("older than the age cap"),
        "{}",
        a7.reason
    );
}

#[test]
fn live_attempts_are_neither_counted_nor_removed() {
    let d = tempfile::tempdir().unwrap();
    let tree = Tree::new(d.path());
    let live = LiveProc::spawn();
    let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    let st = state_json(Some(true));
    let mut a: Vec<PathBuf> = (1..=6)
        .map(|n| tree.attempt(&w, &format!("3-a{n}"), Some(&st), DAY))
        .collect();
    // The newest attempt is live and older than the age cap: still untouched.
    a.push(tree.attempt(&w, "3-a7", Some(&live_state_json(live.pid())), 30 * DAY));
    let r = run(&tree, CAPS, false);
    // Not counted: the five kept besides it are a2..a6; only a1 goes.
    assert_eq!(
        existing(&a),
        vec![false, true, true, true, true, true, true]
    );
    assert_eq!(r.reclaimed, 1);
    let live_d = r
        .decisions
        .iter()
        .find(|d| d.subject.ends_with("3-a7"))
        .unwrap();
    assert_eq!(live_d.verdict, "skip");
}

#[test]
fn a_live_workers_dir_is_not_touched_and_a_reused_pid_is_dead() {
    let d = tempfile::tempdir().unwrap();
    let tree = Tree::new(d.path());
    let p1 = LiveProc::spawn();
    let p2 = LiveProc::spawn();
    let live_w = tree.worker("scout-workers", "live", Pid::Live(p1.pid()));
    let reused_w = tree.worker("workers", "reused", Pid::Reused(p2.pid()));
    let st = state_json(None);
    let in_live: Vec<PathBuf> = (1..=3)
        .map(|n| tree.attempt(&live_w, &format!("4-a{n}"), Some(&st), 20 * DAY))
        .collect();
    let in_reused: Vec<PathBuf> = (4..=6)
        .map(|n| tree.attempt(&reused_w, &format!("4-a{n}"), Some(&st), 20 * DAY))
        .collect();
    let r = run(&tree, CAPS, false);
    assert_eq!(existing(&in_live), vec![true, true, true]);
    assert_eq!(existing(&in_reused), vec![false, false, false]);
    assert_eq!(r.reclaimed, 3);
}

#[test]
fn a_corrupt_state_file_is_kept_reported_and_not_counted() {
    let d = tempfile::tempdir().unwrap();
    let tree = Tree::new(d.path());
    let w = tree.worker("workers", "w1", Pid::Missing);
    let st = state_json(None);
    let mut a: Vec<PathBuf> = (1..=5)
        .map(|n| tree.attempt(&w, &format!("2-a{n}"), Some(&st), DAY))
        .collect();
    a.push(tree.attempt(&w, "2-a6", Some("{\"pid\": "), 40 * DAY));
    // Make the worker dir old enough that a missing worker.pid means dead.
    set_age(&w, tree.now, DAY);
    let r = run(&tree, CAPS, false);
    assert_eq!(existing(&a), vec![true; 6]);
    assert_eq!(r.reclaimed, 0);
    assert_eq!(r.unjudged, 1);
    let bad = r
        .decisions
        .iter()
        .find(|d| d.subject.ends_with("2-a6"))
        .unwrap();
    assert_eq!(bad.verdict, "keep");
    assert!(bad.reason.contains("afk.state.json"), "{}", bad.reason);
}

#[test]
fn dry_run_decides_the_same_and_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let tree = Tree::new(d.path());
    let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    let a: Vec<PathBuf> = (1..=4)
        .map(|n| tree.attempt(&w, &format!("8-a{n}"), None, DAY * n as u32))
        .collect();
    let caps = Caps {
        max_age: 3 * DAY + MIN,
        max_count: 2,
    };
    let dry = run(&tree, caps, true);
    assert_eq!(existing(&a), vec![true; 4]);
    let real = run(&tree, caps, false);
    assert_eq!(dry, real);
    // a4 (4 days) by age; of a3, a2, a1 the newest two stay.
    assert_eq!(real.reclaimed, 2);
    assert_eq!(existing(&a), vec![false, true, true, false]);
}

#[test]
fn paths_an_earlier_dry_run_sweep_removed_are_treated_as_gone() {
    let d = tempfile::tempdir().unwrap();
    let tree = Tree::new(d.path());
    let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    let a: Vec<PathBuf> = (1..=3)
        .map(|n| tree.attempt(&w, &format!("8-a{n}"), None, DAY))
        .collect();
    let caps = Caps {
        max_age: 14 * DAY,
        max_count: 2,
    };
    let gone: HashSet<PathBuf> = [a[2].clone()].into();
    let r = attempt_cap::run(&tree.layout, caps, tree.now, true, &gone).unwrap();
    // a3 is "gone", so a1 and a2 are the newest two.
    assert_eq!(r.reclaimed, 0);
    assert!(r.decisions.iter().all(|d| !d.subject.ends_with("8-a3")));
}

#[test]
fn a_worker_whose_pid_file_cannot_be_judged_is_not_touched() {
    let d = tempfile::tempdir().unwrap();
    let tree = Tree::new(d.path());
    let mut all = Vec::new();
    for (id, pid) in [
        ("w-dir", Pid::NotAFile),
        ("w-start", Pid::BadStart(dead_pid())),
    ] {
        let w = tree.worker("workers", id, pid);
        for n in 1..=7u64 {
            all.push(tree.attempt(&w, &format!("5-a{n}"), None, 30 * DAY));
        }
    }
    let r = run(&tree, CAPS, false);
    assert_eq!(r.reclaimed, 0);
    assert!(all.iter().all(|p| p.exists()));
    assert_eq!(r.unjudged, 2);
    assert!(
        r.decisions
            .iter()
            .all(|d| d.verdict == "keep" && d.reason.contains("cannot be judged")),
        "{:#?}",
        r.decisions
    );
}
