//! Speed of the docs sweep on a repo shaped like a busy fleet host: many tracked files,
//! a few hundred ADRs, and a `.red/tmp/` full of ignored worker build output.
//!
//! ```sh
//! cargo bench --bench docs_sweep -- [ignored_files]
//! ```
//!
//! Prints the median wall time and git process count of a clean sweep (the common boot)
//! and of a landing of 10 docs through the real `local` tracker, plus the cost of the naive
//! alternative (`git status --ignored -uall -- .red/`) the doc-root pathspecs avoid.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use afk_supervisor::config::Config;
use afk_supervisor::git::Git;
use afk_supervisor::layout::Layout;
use afk_supervisor::sweeps::SweepCtx;
use afk_supervisor::sweeps::docs;
use afk_supervisor::sweeps::docs::DocsOutcome;
use afk_supervisor::tracker::LocalTracker;

/// An isolated HOME and git config, as the tests use.
struct Env {
    dir: tempfile::TempDir,
    vars: Vec<(String, PathBuf)>,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("gitconfig");
        fs::write(
            &cfg,
            "[user]\n\tname = Bench\n\temail = bench@example.invalid\n[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n",
        )
        .expect("gitconfig");
        let vars = vec![
            ("HOME".to_string(), dir.path().to_path_buf()),
            ("GIT_CONFIG_GLOBAL".to_string(), cfg),
            ("GIT_CONFIG_NOSYSTEM".to_string(), PathBuf::from("1")),
        ];
        Env { dir, vars }
    }

    fn git(&self, dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this once, small, as a
    // smoke test of the bench itself.
    let bench = std::env::args().any(|a| a == "--bench");
    let ignored: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .and_then(|a| a.parse().ok())
        .unwrap_or(if bench { 50_000 } else { 200 });
    let (tracked, clean_runs, land_runs) = if bench { (5_000, 7, 5) } else { (500, 1, 1) };
    let env = Env::new();
    let origin = env.dir.path().join("origin.git");
    let p = &env.dir.path().join("repo");
    env.git(
        env.dir.path(),
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            origin.to_str().unwrap(),
        ],
    );
    env.git(
        env.dir.path(),
        &["init", "-q", "-b", "main", p.to_str().unwrap()],
    );
    env.git(p, &["remote", "add", "origin", origin.to_str().unwrap()]);

    // 5,000 tracked source files, 300 tracked ADRs, `.red/tmp/` ignored.
    for i in 0..tracked {
        let f = p.join(format!("src/m{}/f{i}.rs", i % 50));
        fs::create_dir_all(f.parent().unwrap()).unwrap();
        fs::write(f, format!("// {i}\n")).unwrap();
    }
    fs::create_dir_all(p.join(".red/adr")).unwrap();
    for i in 0..300 {
        fs::write(
            p.join(format!(".red/adr/{i:04}.md")),
            format!("# ADR {i}\n"),
        )
        .unwrap();
    }
    fs::write(p.join(".gitignore"), ".red/tmp/\n").unwrap();
    env.git(p, &["add", "-A"]);
    env.git(p, &["commit", "-q", "-m", "fixture"]);
    env.git(p, &["push", "-q", "origin", "main"]);
    for i in 0..ignored {
        let f = p.join(format!(
            ".red/tmp/workers/w{}/{}-a1/target/debug/deps/o{i}.o",
            i % 4,
            1 + i % 25
        ));
        if i % 1000 == 0 || !f.parent().unwrap().exists() {
            fs::create_dir_all(f.parent().unwrap()).unwrap();
        }
        fs::write(f, b"x").unwrap();
    }

    let layout = Layout::new(p);
    let config = Config::default();
    let git = Git::new(p).with_env(env.vars.clone());
    let tracker = LocalTracker::new(&Layout::new(env.dir.path().join("store")), git.clone());
    // A fresh context per run: each run is a whole sweep, its own base fetch included.
    let ctx = || SweepCtx::new(&layout, &config, &tracker, &git, false);

    let mut clean = Vec::new();
    let mut clean_calls = 0;
    for _ in 0..clean_runs {
        let before = git.calls();
        let t = Instant::now();
        let r = docs::run(&ctx()).expect("sweep");
        clean.push(t.elapsed());
        clean_calls = git.calls() - before;
        assert_eq!(r.counts.outcome, DocsOutcome::Clean);
    }

    let mut land = Vec::new();
    let mut land_calls = 0;
    for round in 0..land_runs {
        for i in 0..10 {
            fs::write(
                p.join(format!(".red/adr/{i:04}.md")),
                format!("# ADR {i}, round {round}\n"),
            )
            .unwrap();
        }
        let before = git.calls();
        let t = Instant::now();
        let r = docs::run(&ctx()).expect("sweep");
        land.push(t.elapsed());
        land_calls = git.calls() - before;
        assert_eq!(
            (r.counts.outcome, r.counts.files),
            (DocsOutcome::Land, 10),
            "{r:?}"
        );
        // Catch the primary up with what landed, so the next round starts behind nothing.
        env.git(p, &["reset", "-q", "--hard", "origin/main"]);
    }

    let mut naive = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        env.git(
            p,
            &[
                "status",
                "--porcelain=v1",
                "-z",
                "--ignored",
                "--untracked-files=all",
                "--",
                ".red/",
            ],
        );
        naive.push(t.elapsed());
    }

    println!("repo: {tracked} tracked files, 300 ADRs, {ignored} ignored files under .red/tmp/");
    println!(
        "clean sweep:        median {:>7.1} ms, {clean_calls} git processes",
        median(clean).as_secs_f64() * 1e3
    );
    println!(
        "landing of 10 docs: median {:>7.1} ms, {land_calls} git processes (local tracker)",
        median(land).as_secs_f64() * 1e3
    );
    println!(
        "naive `git status --ignored -uall -- .red/`: median {:>7.1} ms (one call)",
        median(naive).as_secs_f64() * 1e3
    );
}
