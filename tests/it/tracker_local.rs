//! The `local` backend: no lost update under real concurrent processes, and pull requests
//! landed on a real bare `origin` by fast-forward only.

use std::path::Path;
use std::process::Stdio;

use afk_supervisor::git::Git;
use afk_supervisor::layout::Layout;
use afk_supervisor::tracker::local::PrState;
use afk_supervisor::tracker::{ErrorKind, LocalTracker, Tracker};

use crate::support::{Repo, TestEnv};

const PROCS: usize = 8;
const EDITS: usize = 50;
const CHILD_REPO: &str = "AFK_TEST_TRACKER_CHILD_REPO";
const CHILD_ID: &str = "AFK_TEST_TRACKER_CHILD_ID";

/// Not a test of its own: the body of one contending process, started by
/// `label_edits_from_8_processes_are_never_lost` re-executing this test binary.
#[test]
#[ignore = "helper process for label_edits_from_8_processes_are_never_lost"]
fn contention_child() {
    let (Some(repo), Some(id)) = (std::env::var_os(CHILD_REPO), std::env::var_os(CHILD_ID)) else {
        eprintln!("contention_child only runs when started by its parent test");
        return;
    };
    let id = id.to_string_lossy().into_owned();
    // The parent started this process with its isolated HOME and git config, which the
    // library's git layer inherits.
    let t = LocalTracker::new(&Layout::new(Path::new(&repo)), Git::new(Path::new(&repo)));
    for j in 0..EDITS {
        if j % 2 == 0 {
            t.edit_labels(1, &[&format!("p{id}-{j}")], &[]).unwrap();
        } else {
            t.edit_labels(2, &[], &[&format!("s{id}-{j}")]).unwrap();
        }
        if j % 10 == 0 {
            t.comment(1, &format!("p{id} at {j}")).unwrap();
        }
    }
}

#[test]
fn label_edits_from_8_processes_are_never_lost() {
    let env = TestEnv::new();
    let repo = env.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let t = env.local_tracker(&repo);
    t.create("adds land here", "", &["keep"]).unwrap();
    let seeded: Vec<String> = (0..PROCS)
        .flat_map(|i| (1..EDITS).step_by(2).map(move |j| format!("s{i}-{j}")))
        .collect();
    let mut labels: Vec<&str> = seeded.iter().map(String::as_str).collect();
    labels.push("keep");
    t.create("removes land here", "", &labels).unwrap();

    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCS)
        .map(|i| {
            env.command(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    "tracker_local::contention_child",
                    "--nocapture",
                ])
                .env(CHILD_REPO, &repo)
                .env(CHILD_ID, i.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a contending process failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let one = t.show(1).unwrap();
    let mut want: Vec<String> = (0..PROCS)
        .flat_map(|i| (0..EDITS).step_by(2).map(move |j| format!("p{i}-{j}")))
        .collect();
    want.push("keep".into());
    let mut got = one.labels.clone();
    got.sort();
    want.sort();
    assert_eq!(got.len(), PROCS * EDITS / 2 + 1);
    assert_eq!(got, want);
    assert_eq!(one.comments.len(), PROCS * EDITS.div_ceil(10));
    assert_eq!(t.show(2).unwrap().labels, vec!["keep"]);
    // No staging file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(t.dir().join("issues"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".toml"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn origin_ref(env: &TestEnv, repo: &Repo, r: &str) -> Option<String> {
    let out = env.git_output(&repo.origin, &["rev-parse", "--verify", "--quiet", r]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn merging_fast_forwards_base_on_origin_and_deletes_the_head() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let t = env.local_tracker(&repo.path);
    let sha = env.push_branch(&repo, "docs-sweep/a");
    let id = t
        .pr_create("main", "docs-sweep/a", "docs: a", "files: a")
        .unwrap();
    assert_eq!(id, "local-pr-1");
    t.pr_merge("docs-sweep/a").unwrap();
    assert_eq!(
        origin_ref(&env, &repo, "refs/heads/main"),
        Some(sha.clone())
    );
    assert_eq!(origin_ref(&env, &repo, "refs/heads/docs-sweep/a"), None);
    let prs = t.pull_requests().unwrap();
    assert_eq!(prs.len(), 1);
    assert_eq!(prs[0].state, PrState::Merged);
    assert_eq!(prs[0].merged_sha.as_deref(), Some(sha.as_str()));
    // The record is a readable TOML file.
    let text = std::fs::read_to_string(t.pr_file(1)).unwrap();
    assert!(text.contains("state = \"MERGED\""), "{text}");
}

#[test]
fn a_non_fast_forward_is_refused_with_gits_message_and_nothing_moves() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let t = env.local_tracker(&repo.path);
    env.push_branch(&repo, "docs-sweep/b");
    t.pr_create("main", "docs-sweep/b", "docs: b", "").unwrap();
    // Someone lands another commit on main first.
    std::fs::write(repo.path.join("other.txt"), "x\n").unwrap();
    env.git(&repo.path, &["add", "other.txt"]);
    env.git(&repo.path, &["commit", "-q", "-m", "other"]);
    env.git(&repo.path, &["push", "-q", "origin", "main"]);
    let main_before = origin_ref(&env, &repo, "refs/heads/main");

    let e = t.pr_merge("docs-sweep/b").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Failed, "{e}");
    assert!(e.command.contains("push origin"), "{e}");
    assert!(e.detail.contains("rejected"), "git's message: {e}");
    assert!(!e.to_string().contains('\n'), "{e}");
    assert_eq!(origin_ref(&env, &repo, "refs/heads/main"), main_before);
    assert!(origin_ref(&env, &repo, "refs/heads/docs-sweep/b").is_some());
    assert_eq!(t.pull_requests().unwrap()[0].state, PrState::Open);
}

#[test]
fn merging_lands_the_heads_latest_commit_on_origin() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let t = env.local_tracker(&repo.path);
    env.push_branch(&repo, "docs-sweep/c");
    t.pr_create("main", "docs-sweep/c", "docs: c", "").unwrap();
    // The head moves on origin after the PR was opened, from another clone.
    let other = env.path().join("other");
    env.git(
        env.path(),
        &[
            "clone",
            "-q",
            "-b",
            "docs-sweep/c",
            repo.origin.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    std::fs::write(other.join("more.md"), "more\n").unwrap();
    env.git(&other, &["add", "more.md"]);
    env.git(&other, &["commit", "-q", "-m", "docs: more"]);
    env.git(&other, &["push", "-q", "origin", "docs-sweep/c"]);
    let latest = env.git(&other, &["rev-parse", "HEAD"]).trim().to_string();

    t.pr_merge("docs-sweep/c").unwrap();
    assert_eq!(origin_ref(&env, &repo, "refs/heads/main"), Some(latest));
}

#[test]
fn a_pr_needs_both_branches_on_origin() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let t = env.local_tracker(&repo.path);
    let e = t.pr_create("main", "not-pushed", "t", "").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Failed);
    assert!(
        e.detail.contains("not-pushed does not exist on origin"),
        "{e}"
    );
    env.push_branch(&repo, "docs-sweep/d");
    let e = t.pr_create("trunk", "docs-sweep/d", "t", "").unwrap_err();
    assert!(e.detail.contains("trunk does not exist on origin"), "{e}");
    assert!(t.pull_requests().unwrap().is_empty());
}

#[test]
fn a_store_without_origin_reports_git_failure_for_prs() {
    let env = TestEnv::new();
    let dir = env.path().join("plain");
    std::fs::create_dir_all(&dir).unwrap();
    let out = env
        .command("git")
        .args(["init", "-q"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let t = env.local_tracker(&dir);
    let e = t.pr_create("main", "x", "t", "").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Failed);
    assert!(e.command.contains("ls-remote origin"), "{e}");
    // Issues work without any remote.
    let n = t.create("works", "", &[]).unwrap();
    assert_eq!(t.view(n).unwrap().labels, Vec::<String>::new());
}
