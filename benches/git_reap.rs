//! Times a reap-style pass of the git layer over N AFK branches (default 2000) held locally
//! and on a local bare `origin`, and prints the git calls each step cost.
//!
//! `cargo bench --bench git_reap -- 2000`

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use afk_supervisor::git::Git;
use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this once, small, as a
    // smoke test of the bench itself.
    let bench = std::env::args().any(|a| a == "--bench");
    let n: usize = match std::env::args().skip(1).find(|a| !a.starts_with("--")) {
        Some(a) => a.parse().context("N must be a number")?,
        None if bench => 2000,
        None => 50,
    };
    let dir = tempfile::tempdir()?;
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home)?;
    let gitconfig = home.join(".gitconfig");
    std::fs::write(
        &gitconfig,
        "[user]\n\tname = Bench\n\temail = bench@example.invalid\n[init]\n\tdefaultBranch = main\n",
    )?;
    let env: Vec<(OsString, OsString)> = vec![
        ("HOME".into(), home.clone().into()),
        ("GIT_CONFIG_GLOBAL".into(), gitconfig.into()),
        ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
    ];
    let origin = dir.path().join("origin.git");
    let repo = dir.path().join("repo");
    let git = |cwd: &Path, args: &[&str]| -> Result<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(cwd)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()?;
        if !out.status.success() {
            bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let root = dir.path();
    git(root, &["init", "-q", "--bare", "-b", "main", path(&origin)])?;
    git(root, &["init", "-q", "-b", "main", path(&repo)])?;
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "seed"])?;
    git(&repo, &["remote", "add", "origin", path(&origin)])?;
    git(&repo, &["push", "-q", "origin", "main"])?;
    git(&repo, &["fetch", "-q", "origin"])?;
    let head = git(&repo, &["rev-parse", "HEAD"])?;
    let names: Vec<String> = (1..=n)
        .map(|i| format!("afk/worker-{}/{i}-a-typical-issue-slug", i % 8))
        .collect();
    pack(&repo.join(".git"), &names, &head)?;
    pack(&origin, &names, &head)?;

    let lib = Git::new(&repo).with_env(env.clone());
    let mut last = 0;
    let mut step = |what: &str, t: Instant| {
        let calls = lib.calls();
        println!(
            "{what:<28} {:>8.3}s  git calls {}",
            t.elapsed().as_secs_f64(),
            calls - last
        );
        last = calls;
    };
    let all = Instant::now();
    let t = Instant::now();
    let local = lib.local_afk_branches()?;
    step("local_afk_branches", t);
    let t = Instant::now();
    let remote = lib.remote_afk_branches()?;
    step("remote_afk_branches", t);
    let t = Instant::now();
    let busy = lib.worktree_branches()?;
    step("worktree_branches", t);
    let t = Instant::now();
    let merged = lib.merged_into("origin/main", &local)?;
    step("merged_into", t);
    let reap: Vec<String> = local
        .iter()
        .filter(|b| merged.contains(*b) && !busy.contains(*b))
        .cloned()
        .collect();
    let t = Instant::now();
    lib.delete_local_branches(&reap)?;
    step("delete_local_branches", t);
    let t = Instant::now();
    lib.delete_remote_branches(&remote)?;
    step("delete_remote_branches", t);
    println!(
        "reap pass over {n} local + {} remote branches: {:.3}s, {} git calls",
        remote.len(),
        all.elapsed().as_secs_f64(),
        lib.calls()
    );
    if !lib.local_afk_branches()?.is_empty() || !lib.remote_afk_branches()?.is_empty() {
        bail!("branches survived the pass");
    }
    Ok(())
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// Adds the branches to a packed-refs file, sorted as its header promises.
fn pack(git_dir: &Path, names: &[String], sha: &str) -> Result<()> {
    let file = git_dir.join("packed-refs");
    let old = std::fs::read_to_string(&file).unwrap_or_default();
    let mut refs: Vec<(String, String)> = old
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .filter_map(|l| l.split_once(' '))
        .map(|(s, r)| (r.to_string(), s.to_string()))
        .collect();
    refs.extend(
        names
            .iter()
            .map(|n| (format!("refs/heads/{n}"), sha.to_string())),
    );
    refs.sort();
    let mut text = String::from("# pack-refs with: peeled fully-peeled sorted \n");
    for (r, s) in refs {
        text.push_str(&format!("{s} {r}\n"));
    }
    std::fs::write(file, text)?;
    Ok(())
}
