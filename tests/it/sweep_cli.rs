//! `afk-supervisor sweep --only orphans,attempt-cap [--dry-run] [--json]` end to end: the
//! built binary on a real repo with the local tracker.

use std::path::Path;
use std::process::Output;

use afk_supervisor::tracker::LocalTracker;

use crate::support::fake_gh::FakeGh;
use crate::support::sweep_fixtures::*;
use crate::support::{TestEnv, stdout};

fn sweep(env: &TestEnv, repo: &Path, extra: &[&str]) -> Output {
    env.bin()
        .arg("--repo")
        .arg(repo)
        .args(["--tracker", "local", "sweep"])
        .args(extra)
        .output()
        .unwrap()
}

struct Fixture {
    env: TestEnv,
    tree: Tree,
    closed: u64,
    human: u64,
}

fn fixture() -> Fixture {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let tree = Tree::new(&repo.path);
    let t = LocalTracker::new(&tree.layout, env.lib_git(&repo.path));
    let closed = t.create("closed", "", &[]).unwrap();
    t.close(closed).unwrap();
    let human = t
        .create("waiting for a human", "", &["ready-for-human"])
        .unwrap();
    let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    tree.attempt(&w, &format!("{closed}-a1"), Some(&state_json(None)), MIN);
    tree.attempt(
        &w,
        &format!("{human}-a1"),
        Some(&state_json(Some(true))),
        2 * DAY,
    );
    tree.attempt(
        &w,
        &format!("{human}-a2"),
        Some(&state_json(Some(false))),
        2 * DAY,
    );
    // Seven attempts of a waiting issue in another dead worker: two over the count cap.
    let w2 = tree.worker("go-workers", "w2", Pid::Corrupt);
    for n in 3..=9 {
        tree.attempt(&w2, &format!("{human}-a{n}"), Some(&state_json(None)), DAY);
    }
    Fixture {
        env,
        tree,
        closed,
        human,
    }
}

#[test]
fn dry_run_prints_every_decision_and_changes_nothing() {
    let f = fixture();
    let repo = f.tree.layout.repo();
    let before = snapshot(repo);
    let out = sweep(
        &f.env,
        repo,
        &["--only", "orphans,attempt-cap", "--dry-run"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(snapshot(repo), before);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "dry run: nothing is changed");
    let closed_line = format!(
        "orphans remove .red/tmp/workers/w1/{c}-a1 #{c} [CLOSED]: issue closed",
        c = f.closed
    );
    assert!(lines.iter().any(|l| l.starts_with(&closed_line)), "{text}");
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "orphans remove .red/tmp/workers/w1/{h}-a1 #{h} [OPEN ready-for-human]: ready-for-human, envelope posted",
            h = f.human
        ))),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "orphans keep .red/tmp/workers/w1/{h}-a2 #{h} [OPEN ready-for-human]",
            h = f.human
        ))),
        "{text}"
    );
    // The cap sees the tree as orphan cleanup would leave it: a2..a9 of the waiting issue
    // (a1 goes in orphan cleanup), newest five kept.
    let cap_removed: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("attempt-cap remove"))
        .collect();
    assert_eq!(cap_removed.len(), 3, "{text}");
    assert_eq!(
        *lines.last().unwrap(),
        "boot sweeps complete: orphans removed=2 restored=0 kept=8 | attempt-cap reclaimed=3 | branches remote=0 local=0 spared=0 | docs-sweep clean files=0 | unblocked=0 | stragglers unlabeled=0 triage=0 info=0"
    );
}

#[test]
fn json_carries_the_same_decisions_and_counts() {
    let f = fixture();
    let repo = f.tree.layout.repo();
    let out = sweep(
        &f.env,
        repo,
        &["--only", "attempt-cap,orphans", "--dry-run", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["report"]["orphans"]["removed"], 2);
    assert_eq!(v["report"]["attempt_cap_reclaimed"], 3);
    let decisions = v["report"]["decisions"].as_array().unwrap();
    let d = decisions
        .iter()
        .find(|d| d["subject"] == format!(".red/tmp/workers/w1/{}-a1", f.closed))
        .unwrap();
    assert_eq!(d["sweep"], "orphans");
    assert_eq!(d["issue"], f.closed);
    assert_eq!(d["state"], "CLOSED");
    assert_eq!(d["verdict"], "remove");
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .starts_with("boot sweeps complete: orphans removed=2")
    );
}

#[test]
fn a_real_run_removes_what_the_dry_run_listed() {
    let f = fixture();
    let repo = f.tree.layout.repo();
    let dry = sweep(
        &f.env,
        repo,
        &["--only", "orphans,attempt-cap", "--dry-run"],
    );
    let real = sweep(&f.env, repo, &["--only", "orphans,attempt-cap"]);
    assert!(
        real.status.success(),
        "{}",
        String::from_utf8_lossy(&real.stderr)
    );
    let dry_text = stdout(&dry);
    let real_text = stdout(&real);
    let body = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with("dry run"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(body(&dry_text), body(&real_text));
    let w = f.tree.layout.worker_namespace("workers").join("w1");
    assert!(!w.join(format!("{}-a1", f.closed)).exists());
    // Kept by orphan cleanup (7-day TTL), then beyond the newest five of its issue.
    assert!(!w.join(format!("{}-a2", f.human)).exists());
    assert!(real_text.contains(&format!(
        "attempt-cap remove .red/tmp/workers/w1/{}-a2",
        f.human
    )));
    let w2 = f.tree.layout.worker_namespace("go-workers").join("w2");
    let left: Vec<bool> = (3..=9)
        .map(|n| w2.join(format!("{}-a{n}", f.human)).exists())
        .collect();
    assert_eq!(left, vec![false, false, true, true, true, true, true]);
}

#[test]
fn an_unknown_sweep_name_is_a_usage_error() {
    let f = fixture();
    let out = sweep(&f.env, f.tree.layout.repo(), &["--only", "orphans,orphan"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown sweep \"orphan\""));
}

#[test]
fn a_sweep_failure_is_one_line_and_exit_1() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path.join(".red")).unwrap();
    std::fs::create_dir_all(elsewhere.path().join("workers/w1/5-a1")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), repo.path.join(".red/tmp")).unwrap();
    let out = sweep(&env, &repo.path, &["--only", "orphans"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    // The tracker choice, then the failure in one line.
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert_eq!(lines[0], "tracker: local (requested)");
    let err = lines[1];
    assert!(
        err.contains("orphan cleanup") && err.contains("is a symlink"),
        "{err}"
    );
    assert!(elsewhere.path().join("workers/w1/5-a1").exists());
}

/// The reviewer's case: origin is on GitHub but gh is not logged in. `auto` no longer picks
/// the empty local store: the sweep is refused (exit 78, one line) and nothing is touched.
/// Asked for that store on purpose (`--tracker local`), where no issue exists, a dead
/// worker's dirs fall back to the mtime TTL instead of all being removed.
#[test]
fn auto_with_gh_logged_out_is_refused_and_an_empty_local_store_keeps_dirs_by_mtime() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    env.git(
        &repo.path,
        &["remote", "set-url", "origin", "https://github.com/o/r.git"],
    );
    let gh = FakeGh::install(&env);
    gh.set_auth(false);
    let tree = Tree::new(&repo.path);
    let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    let waiting = tree.attempt(&w, "41-a1", Some(&state_json(Some(false))), 2 * DAY);
    let stale = tree.attempt(&w, "42-a1", Some(&state_json(None)), 7 * DAY + MIN);
    let bare = tree.attempt(&w, "43-a1", None, 2 * DAY);
    let claim = tree.claim(41, Pid::Dead(dead_pid()));
    let sweep = |kind: &str| {
        let mut cmd = env.bin();
        gh.apply(&mut cmd);
        cmd.arg("--repo")
            .arg(&repo.path)
            .args(["--tracker", kind, "sweep", "--only", "orphans"])
            .output()
            .unwrap()
    };
    let out = sweep("auto");
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.ends_with("run gh auth login, or set tracker.kind = \"local\"\n"),
        "{err}"
    );
    assert!(waiting.exists() && stale.exists() && bare.exists() && claim.exists());
    assert!(stdout(&out).is_empty());

    let out = sweep("local");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let choices: Vec<&str> = err.lines().filter(|l| l.starts_with("tracker: ")).collect();
    assert_eq!(choices, vec!["tracker: local (requested)"], "{err}");
    assert!(waiting.exists(), "a dir inside its 7-day TTL was removed");
    assert!(!stale.exists());
    assert!(!bare.exists());
    // The claim is the record #41 could be restored from where it really lives.
    assert!(claim.exists());
    let text = stdout(&out);
    assert!(
        text.contains("issue not found by the tracker, mtime TTL with state file"),
        "{text}"
    );
    assert!(
        text.contains("orphans keep .red/tmp/claims/41 #41 [not-found]: claim holder dead (pid "),
        "{text}"
    );
    assert!(
        text.contains("but the tracker cannot say the issue is running: not restored, claim kept for the next pass"),
        "{text}"
    );
}

#[test]
fn a_dry_run_on_a_repo_without_a_store_writes_nothing_to_state() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let tree = Tree::new(&repo.path);
    let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    tree.attempt(&w, "7-a1", Some(&state_json(None)), 30 * DAY);
    tree.claim(7, Pid::Dead(dead_pid()));
    let before = snapshot(&repo.path.join(".red"));
    let out = sweep(&env, &repo.path, &["--dry-run"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout(&out).contains("orphans remove .red/tmp/workers/w1/7-a1 #7"));
    assert!(!repo.path.join(".red/state").exists());
    assert_eq!(snapshot(&repo.path.join(".red")), before);
}
