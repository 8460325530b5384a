//! The branch reaper over many AFK branches: git and tracker calls, and time.
//!
//! `cargo bench --bench reap` builds 2,000 branches (override with `AFK_BENCH_BRANCHES=N`),
//! each both local and on a local bare `origin`, for issues on the real local tracker: two
//! thirds of the numbers exist (every other one closed), the rest are unknown. Then
//! 1. the reaper in-process as a dry run, counting git processes ([`Git::calls`]) and
//!    tracker calls (a recording decorator around the local backend);
//! 2. the binary, `afk-supervisor --tracker local reap`, for real;
//! 3. the binary again, which must be a no-op.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it runs 60 branches as a smoke
//! test so the bench cannot rot.

// The tree builders of the integration tests; this bench uses a few of them.
#[path = "../tests/it/support/sweep_fixtures.rs"]
#[allow(dead_code)]
mod sweep_fixtures;

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use afk_supervisor::git::Git;
use afk_supervisor::layout::Layout;
use afk_supervisor::sweeps::branch_reaper;
use afk_supervisor::tracker::LocalTracker;
use sweep_fixtures::Counting;

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let n: u64 = std::env::var("AFK_BENCH_BRANCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench { 2000 } else { 60 });

    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let gitconfig = home.join(".gitconfig");
    std::fs::write(
        &gitconfig,
        "[user]\n\tname = Bench\n\temail = bench@example.invalid\n[init]\n\tdefaultBranch = main\n",
    )
    .expect("gitconfig");
    let env: Vec<(OsString, OsString)> = vec![
        ("HOME".into(), home.into()),
        ("GIT_CONFIG_GLOBAL".into(), gitconfig.into()),
        ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
        ("TMPDIR".into(), dir.path().into()),
    ];
    let git = |cwd: &Path, args: &[&str], stdin: Option<&str>| -> String {
        let mut c = Command::new("git");
        c.arg("-C").arg(cwd).args(args).envs(env.iter().cloned());
        c.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("git");
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).expect("stdin");
        }
        let out = child.wait_with_output().expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };

    let t0 = Instant::now();
    let origin = dir.path().join("origin.git");
    let repo = dir.path().join("repo");
    let root = dir.path();
    git(
        root,
        &["init", "-q", "--bare", "-b", "main", s(&origin)],
        None,
    );
    git(root, &["init", "-q", "-b", "main", s(&repo)], None);
    git(
        &repo,
        &["commit", "-q", "--allow-empty", "-m", "seed"],
        None,
    );
    git(&repo, &["remote", "add", "origin", s(&origin)], None);
    git(&repo, &["push", "-q", "origin", "main"], None);
    let head = git(&repo, &["rev-parse", "HEAD"], None);
    let refs: String = (1..=n)
        .map(|i| {
            format!(
                "create refs/heads/afk/worker-{}/{i}-a-typical-issue-slug {head}\n",
                i % 8
            )
        })
        .collect();
    git(&repo, &["update-ref", "--stdin"], Some(&refs));
    git(
        &repo,
        &["push", "-q", "origin", "refs/heads/afk/*:refs/heads/afk/*"],
        None,
    );
    let lib_git = Git::new(&repo).with_env(env.clone());
    let tracker = LocalTracker::new(&Layout::new(&repo), lib_git.clone());
    let known = n * 2 / 3;
    for i in 1..=known {
        let k = tracker
            .create(&format!("issue {i}"), "", &["running"])
            .expect("create");
        if k.is_multiple_of(2) {
            tracker.close(k).expect("close");
        }
    }
    println!(
        "fixture: {n} branches local and on origin, {known} issues ({} closed), built in {:.2?}",
        known / 2,
        t0.elapsed()
    );

    let counting = Counting::new(&tracker);
    let t1 = Instant::now();
    let report = branch_reaper::run(&lib_git, &counting, "main", true, &Default::default())
        .expect("dry run");
    let dry = t1.elapsed();
    let c = report.counts();
    println!(
        "in-process dry run: {dry:.2?}; git calls {}, tracker calls {} ({:?}); would reap remote={} local={}, spare {}",
        lib_git.calls(),
        counting.calls().len(),
        counting.calls(),
        c.remote,
        c.local,
        c.spared
    );

    let reap = || {
        let t = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_afk-supervisor"))
            .envs(env.iter().cloned())
            .arg("--repo")
            .arg(&repo)
            .args(["--tracker", "local", "reap"])
            .output()
            .expect("run afk-supervisor");
        let took = t.elapsed();
        assert!(
            out.status.success(),
            "reap failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (took, text)
    };
    let (took, text) = reap();
    let reaped = text.lines().filter(|l| l.starts_with("reaped")).count();
    println!(
        "binary reap: {took:.2?}; {} ; {reaped} reaped lines",
        text.lines().next().unwrap_or_default()
    );
    assert_eq!(reaped, c.remote + c.local);
    let (took, text) = reap();
    assert!(!text.contains("reaped"), "second reap was not a no-op");
    println!(
        "binary reap again (no-op): {took:.2?}; {}",
        text.lines().next().unwrap_or_default()
    );
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}
