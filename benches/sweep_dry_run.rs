//! Dry run of orphan cleanup + attempt cap over a large tree: time and tracker calls.
//!
//! `cargo bench --bench sweep_dry_run` builds 10,000 attempt dirs (override with
//! `AFK_BENCH_DIRS=N`) of 1,500 issues on the real local tracker, then times
//! 1. the suite in-process (`suite::run_suite`, dry run), counting tracker calls through a
//!    recording decorator around the local backend, and
//! 2. the binary: `afk-supervisor --repo DIR --tracker local sweep --only orphans,attempt-cap
//!    --dry-run --json`.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it runs a small tree as a smoke
//! test so the bench cannot rot.

// The tree builders of the integration tests; this bench uses a few of them.
#[path = "../tests/it/support/sweep_fixtures.rs"]
#[allow(dead_code)]
mod sweep_fixtures;

use std::time::{Duration, Instant};

use afk_supervisor::config::Config;
use afk_supervisor::git::Git;
use afk_supervisor::sweeps::suite;
use afk_supervisor::sweeps::{SweepCtx, SweepName};
use afk_supervisor::tracker::LocalTracker;
use sweep_fixtures::*;

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let dirs: usize = std::env::var("AFK_BENCH_DIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench { 10_000 } else { 300 });
    let issues = (dirs / 7).clamp(10, 1_500) as u64;
    let workers = (dirs / 100).max(2);

    let dir = tempfile::tempdir().expect("tempdir");
    let repo = dir.path();
    let status = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(repo)
        .status()
        .expect("git init");
    assert!(status.success());
    let tree = Tree::new(repo);
    let tracker = LocalTracker::new(&tree.layout, Git::new(repo));
    let live = LiveProc::spawn();

    let t0 = Instant::now();
    for i in 1..=issues {
        let labels: &[&str] = match i % 10 {
            0..=2 => &[],
            3 | 4 => &["ready-for-human"],
            5..=7 => &["ready-for-agent"],
            _ => &["running"],
        };
        let n = tracker
            .create(&format!("issue {i}"), "", labels)
            .expect("create");
        if i % 10 <= 2 {
            tracker.close(n).expect("close");
        }
        if i % 10 == 9 {
            tree.claim(n, Pid::Live(live.pid()));
        }
    }
    let worker_dirs: Vec<_> = (0..workers)
        .map(|w| {
            let pid = if w % 20 == 0 {
                Pid::Live(live.pid())
            } else {
                Pid::Dead(shared_dead_pid())
            };
            tree.worker(
                ["workers", "go-workers", "scout-workers"][w % 3],
                &format!("w{w}"),
                pid,
            )
        })
        .collect();
    let posted = state_json(Some(true));
    let unposted = state_json(Some(false));
    for k in 0..dirs {
        let issue = (k as u64 % (issues + 5)) + 1; // five numbers the tracker lacks
        let attempt = k as u64 / (issues + 5) + 1;
        let state = if k % 2 == 0 { &posted } else { &unposted };
        let age = Duration::from_secs((k as u64 * 7_919) % (20 * 86_400));
        tree.bare_attempt(
            &worker_dirs[k % workers],
            &format!("{issue}-a{attempt}"),
            state,
            age,
        );
    }
    println!(
        "tree: {dirs} attempt dirs of {} issue numbers in {workers} worker dirs, built in {:.2?}",
        issues + 5,
        t0.elapsed()
    );

    let counting = Counting::new(&tracker);
    let config = Config::default();
    let git = Git::new(repo);
    let ctx = SweepCtx::new(&tree.layout, &config, &counting, &git, true);
    let only = [SweepName::Orphans, SweepName::AttemptCap];
    let t1 = Instant::now();
    let report = suite::run_suite(&ctx, &only).into_result().expect("suite");
    let in_process = t1.elapsed();
    let calls = counting.calls();
    let count = |p: &str| calls.iter().filter(|c| c.starts_with(p)).count();
    println!(
        "in-process dry run: {in_process:.2?}, {} decisions",
        report.decisions.len()
    );
    println!(
        "tracker calls: {} (list {}, view {}, edit {}, comment {})",
        calls.len(),
        count("list"),
        count("view"),
        count("edit"),
        count("comment")
    );
    println!("{}", report.summary());
    assert_eq!(
        count("edit") + count("comment"),
        0,
        "a dry run wrote to the tracker"
    );

    let t2 = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_afk-supervisor"))
        .arg("--repo")
        .arg(repo)
        .args([
            "--tracker",
            "local",
            "sweep",
            "--only",
            "orphans,attempt-cap",
            "--dry-run",
            "--json",
        ])
        .output()
        .expect("run afk-supervisor");
    let cli = t2.elapsed();
    assert!(
        out.status.success(),
        "sweep failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "binary dry run (--json, {} bytes of output): {cli:.2?}",
        out.stdout.len()
    );
    drop(live);
}
