//! `afk-supervisor reap` and the branch reaper over real git (a local bare `origin`, a
//! linked worktree, merged and unmerged branches) with the real local tracker, and with the
//! fake `gh` for tracker failures and call counts.

use std::path::Path;

use afk_supervisor::sweeps::branch_reaper::{self, Action};
use afk_supervisor::tracker::Tracker;

use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::{Repo, TestEnv, run, set};

/// The fixture: issues #1 open, #2 closed, #3 closed on the local tracker (#9 and #0 never
/// exist), and these branches:
///
/// | branch | origin | local | note |
/// |---|---|---|---|
/// | afk/1-open | x | x | open issue |
/// | afk/2-done | x | x | closed, with an unmerged commit |
/// | afk/w1/2-retry | x | | closed, worker-scoped name |
/// | afk/3-in-tree | x | x | closed, checked out in a linked worktree |
/// | afk/9-merged | x | x | not found, at `main` (merged) |
/// | afk/9-unmerged | | x | not found, one commit ahead |
/// | afk/notes | x | x | unrecognised |
/// | afk/0-zero | | x | unrecognised |
struct Fixture {
    env: TestEnv,
    repo: Repo,
}

fn fixture() -> Fixture {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let t = env.local_tracker(r);
    assert_eq!(t.create("open one", "", &["ready-for-agent"]).unwrap(), 1);
    assert_eq!(t.create("closed one", "", &[]).unwrap(), 2);
    assert_eq!(t.create("closed, in a worktree", "", &[]).unwrap(), 3);
    t.close(2).unwrap();
    t.close(3).unwrap();

    for b in [
        "afk/1-open",
        "afk/w1/2-retry",
        "afk/3-in-tree",
        "afk/9-merged",
        "afk/notes",
        "afk/0-zero",
    ] {
        env.git(r, &["branch", b]);
    }
    for b in ["afk/2-done", "afk/9-unmerged"] {
        env.git(r, &["switch", "-q", "-c", b]);
        env.git(r, &["commit", "-q", "--allow-empty", "-m", b]);
        env.git(r, &["switch", "-q", "main"]);
    }
    env.git(
        r,
        &[
            "push",
            "-q",
            "origin",
            "afk/1-open",
            "afk/2-done",
            "afk/w1/2-retry",
            "afk/3-in-tree",
            "afk/9-merged",
            "afk/notes",
        ],
    );
    env.git(r, &["branch", "-q", "-D", "afk/w1/2-retry"]);
    let wt = env.path().join("wt3");
    env.git(
        r,
        &[
            "worktree",
            "add",
            "-q",
            wt.to_str().unwrap(),
            "afk/3-in-tree",
        ],
    );
    Fixture { env, repo }
}

fn reap(f: &Fixture, extra: &[&str]) -> (i32, String, String) {
    let mut c = f.env.bin_on(&f.repo.path);
    c.args(["--tracker", "local", "reap"]).args(extra);
    run(c)
}

const FIRST_RUN: &str = "\
afk branch counts: remote-afk=6 local-afk=7
spared (remote): afk/1-open — issue #1 open
reaped (remote): afk/2-done #2 — issue closed
reaped (remote): afk/3-in-tree #3 — issue closed
spared (remote): afk/9-merged — issue #9 not found
spared (remote): afk/notes — unrecognised branch name
reaped (remote): afk/w1/2-retry #2 — issue closed
spared (local): afk/0-zero — unrecognised branch name
spared (local): afk/1-open — issue #1 open
reaped (local): afk/2-done #2 — issue closed
spared (local): afk/3-in-tree — checked out in a worktree (issue #3 closed)
reaped (local): afk/9-merged #9 — merged into origin/main (issue not found)
spared (local): afk/9-unmerged — issue #9 not found, not merged into origin/main
spared (local): afk/notes — unrecognised branch name
";

const SECOND_RUN: &str = "\
afk branch counts: remote-afk=3 local-afk=5
spared (remote): afk/1-open — issue #1 open
spared (remote): afk/9-merged — issue #9 not found
spared (remote): afk/notes — unrecognised branch name
spared (local): afk/0-zero — unrecognised branch name
spared (local): afk/1-open — issue #1 open
spared (local): afk/3-in-tree — checked out in a worktree (issue #3 closed)
spared (local): afk/9-unmerged — issue #9 not found, not merged into origin/main
spared (local): afk/notes — unrecognised branch name
";

#[test]
fn reap_prints_every_decision_then_is_a_no_op() {
    let f = fixture();
    let (code, out, err) = reap(&f, &[]);
    assert_eq!(code, 0, "stderr: {err}");
    assert_eq!(out, FIRST_RUN);
    assert_eq!(
        f.env.afk_refs(&f.repo.origin),
        set(&["afk/1-open", "afk/9-merged", "afk/notes"])
    );
    assert_eq!(
        f.env.afk_refs(&f.repo.path),
        set(&[
            "afk/0-zero",
            "afk/1-open",
            "afk/3-in-tree",
            "afk/9-unmerged",
            "afk/notes"
        ])
    );
    // The worktree is untouched and still on its branch.
    let wt = f.env.path().join("wt3");
    assert_eq!(
        f.env.git(&wt, &["branch", "--show-current"]).trim(),
        "afk/3-in-tree"
    );

    let (code, again, err) = reap(&f, &[]);
    assert_eq!(code, 0, "stderr: {err}");
    assert_eq!(again, SECOND_RUN);
    assert!(!again.contains("reaped"));
    let (_, third, _) = reap(&f, &[]);
    assert_eq!(third, SECOND_RUN);
}

#[test]
fn dry_run_says_would_reap_and_deletes_nothing() {
    let f = fixture();
    let before = (f.env.afk_refs(&f.repo.origin), f.env.afk_refs(&f.repo.path));
    let (code, out, err) = reap(&f, &["--dry-run"]);
    assert_eq!(code, 0, "stderr: {err}");
    assert_eq!(out, FIRST_RUN.replace("reaped (", "would reap ("));
    assert_eq!(
        (f.env.afk_refs(&f.repo.origin), f.env.afk_refs(&f.repo.path)),
        before
    );
}

/// `reap` with `--tracker gh` and the fake first on PATH.
fn reap_gh(f: &Fixture, gh: &FakeGh) -> (i32, String, String) {
    let mut c = f.env.bin_on(&f.repo.path);
    gh.apply(&mut c).args(["--tracker", "gh", "reap"]);
    run(c)
}

fn gh_issues() -> Vec<FakeIssue> {
    vec![
        FakeIssue::open(1, &["ready-for-agent"]),
        FakeIssue::closed(2, &[]),
        FakeIssue::closed(3, &[]),
    ]
}

#[test]
fn gh_backend_reaps_the_same_with_one_tracker_call() {
    let f = fixture();
    let gh = FakeGh::install(&f.env);
    gh.set_issues(&gh_issues());
    let (code, out, err) = reap_gh(&f, &gh);
    assert_eq!(code, 0, "stderr: {err}");
    assert_eq!(out, FIRST_RUN);
    let calls = gh.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        calls[0][..6],
        ["issue", "list", "--state", "all", "--limit", "5000"]
    );
}

#[test]
fn a_failing_tracker_spares_every_branch() {
    for (code, stdout, stderr) in [
        (
            1,
            "",
            "HTTP 502: Bad Gateway (https://api.github.com/graphql)",
        ),
        (1, "", "error connecting to api.github.com"),
        (4, "", "HTTP 401: Bad credentials"),
        (0, "[{\"number\": ", ""),
    ] {
        let f = fixture();
        let gh = FakeGh::install(&f.env);
        gh.set_issues(&gh_issues());
        gh.respond_next(1, code, stdout, stderr);
        let before = (f.env.afk_refs(&f.repo.origin), f.env.afk_refs(&f.repo.path));
        let (exit, out, err) = reap_gh(&f, &gh);
        assert_eq!(exit, 0, "{stderr}: {err}");
        assert!(
            err.contains("warning: tracker failed, every afk branch spared"),
            "{err}"
        );
        assert!(!out.contains("reap"), "{stderr}: {out}");
        assert!(
            out.contains("spared (remote): afk/2-done — issue #2 unclassified (tracker failed)"),
            "{out}"
        );
        assert!(
            out.contains("spared (local): afk/9-merged — issue #9 unclassified (tracker failed)"),
            "{out}"
        );
        assert_eq!(
            (f.env.afk_refs(&f.repo.origin), f.env.afk_refs(&f.repo.path)),
            before,
            "{stderr}"
        );
        assert_eq!(gh.calls().len(), 1);
    }
}

#[test]
fn unreachable_origin_fails_cleanly() {
    let f = fixture();
    f.env.git(
        &f.repo.path,
        &["remote", "set-url", "origin", "/nonexistent/origin.git"],
    );
    let before = f.env.afk_refs(&f.repo.path);
    let (code, out, err) = reap(&f, &[]);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("afk-supervisor: branch reaper: fetching the base from origin:"),
        "{err}"
    );
    assert_eq!(f.env.afk_refs(&f.repo.path), before);
}

/// Builds `n` AFK branches, locally and on origin, by writing each repo's `packed-refs`
/// (thousands of loose ref files, or a push creating them, cost seconds on slow disks).
/// One issue in 50 is closed and one in 50 unknown to the tracker; the rest are open. (Git
/// takes a lock file per deleted ref, so deleting thousands is slow whoever asks; the
/// bench `benches/reap.rs` times that. Here the point is that the call counts do not grow.)
fn many_branches(env: &TestEnv, repo: &Repo, n: u64) -> Vec<FakeIssue> {
    let head = env
        .git(&repo.path, &["rev-parse", "HEAD"])
        .trim()
        .to_string();
    let names: Vec<String> = (1..=n)
        .map(|i| format!("refs/heads/afk/worker-{}/{i}-a-typical-issue-slug", i % 8))
        .collect();
    for git_dir in [repo.path.join(".git"), repo.origin.clone()] {
        pack_refs(&git_dir, &names, &head);
    }
    assert_eq!(env.afk_refs(&repo.origin).len(), n as usize);
    (1..=n)
        .filter_map(|i| match i % 50 {
            0 => Some(FakeIssue::closed(i, &[])),
            1 => None,
            _ => Some(FakeIssue::open(i, &["running"])),
        })
        .collect()
}

/// Adds `refs` at `sha` to `git_dir/packed-refs`, keeping the file sorted as git expects.
fn pack_refs(git_dir: &Path, refs: &[String], sha: &str) {
    let file = git_dir.join("packed-refs");
    let old = std::fs::read_to_string(&file).unwrap_or_default();
    let mut all: Vec<(String, String)> = old
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .filter_map(|l| l.split_once(' '))
        .map(|(s, r)| (r.to_string(), s.to_string()))
        .chain(refs.iter().map(|r| (r.clone(), sha.to_string())))
        .collect();
    all.sort();
    let mut text = String::from("# pack-refs with: peeled fully-peeled sorted \n");
    for (r, s) in all {
        text.push_str(&format!("{s} {r}\n"));
    }
    std::fs::write(file, text).unwrap();
}

/// (git calls, tracker calls, remote reaped, local reaped, spared) of one reaper run.
fn reap_cost(n: u64) -> (u64, usize, usize, usize, usize) {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let gh = FakeGh::install(&env);
    gh.set_issues(&many_branches(&env, &repo, n));
    let git = env.lib_git(&repo.path);
    let t = gh.tracker(None);
    let r = branch_reaper::run(&git, &t, "main", false, &Default::default()).unwrap();
    assert!(r.delete_errors.is_empty(), "{:?}", r.delete_errors);
    assert_eq!((r.remote_afk, r.local_afk), (n as usize, n as usize));
    let c = r.counts();
    // Closed: reaped on both sides. Open: spared. Not found: remote spared, local merged
    // (every branch points at main), so reaped.
    let closed = (1..=n).filter(|i| i % 50 == 0).count();
    let unknown = (1..=n).filter(|i| i % 50 == 1).count();
    assert_eq!(c.remote, closed);
    assert_eq!(c.local, closed + unknown);
    assert_eq!(c.spared, 2 * n as usize - c.remote - c.local);
    assert_eq!(env.afk_refs(&repo.origin).len(), n as usize - c.remote);
    assert_eq!(env.afk_refs(&repo.path).len(), n as usize - c.local);
    assert!(r.decisions.iter().all(|d| d.action != Action::NotReaped));
    (git.calls(), gh.calls().len(), c.remote, c.local, c.spared)
}

#[test]
fn reap_cost_does_not_grow_with_the_branch_count() {
    let small = reap_cost(100);
    let large = reap_cost(2000);
    eprintln!("reap over 100 branches: {small:?}; over 2000: {large:?}");
    // remote listing, fetch, ls-remote, local list, rescue-ref list (refs/afk/rescue/*),
    // worktree list, merge check, push --delete, branch -D.
    assert_eq!(small.0, 9);
    assert_eq!(large.0, 9);
    assert_eq!((small.1, large.1), (1, 1));
}

#[test]
fn dry_run_costs_seven_git_calls_and_counts_like_the_summary() {
    let f = fixture();
    let t = f.env.local_tracker(&f.repo.path);
    assert_eq!(t.kind(), "local");
    let git = f.env.lib_git(&f.repo.path);
    let r = branch_reaper::run(&git, &t, "main", true, &Default::default()).unwrap();
    // Dry run: remote listing, fetch, ls-remote, local list, rescue-ref list, worktree list,
    // one merge check; no delete.
    assert_eq!(git.calls(), 7);
    assert_eq!(r.tracker_calls, 1);
    assert_eq!(
        r.counts(),
        afk_supervisor::sweeps::branch_reaper::BranchCounts {
            remote: 3,
            local: 2,
            spared: 8
        }
    );
}

/// A local-only checkout (no `origin` at all): nothing remote to list or delete, local
/// branches judged against the local base, and the reap succeeds instead of failing.
#[test]
fn a_repo_without_origin_reaps_its_local_side_only() {
    let f = fixture();
    f.env.git(&f.repo.path, &["remote", "remove", "origin"]);
    let (code, out, err) = reap(&f, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "\
afk branch counts: remote-afk=0 local-afk=7
spared (local): afk/0-zero — unrecognised branch name
spared (local): afk/1-open — issue #1 open
reaped (local): afk/2-done #2 — issue closed
spared (local): afk/3-in-tree — checked out in a worktree (issue #3 closed)
reaped (local): afk/9-merged #9 — merged into main (issue not found)
spared (local): afk/9-unmerged — issue #9 not found, not merged into main
spared (local): afk/notes — unrecognised branch name
"
    );
    // The bare repo that used to be origin is untouched.
    assert!(f.env.afk_refs(&f.repo.origin).contains("afk/2-done"));
}
