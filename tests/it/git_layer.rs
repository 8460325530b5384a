//! The git layer against real git: a work clone, a local bare `origin`, linked worktrees.

use std::path::Path;
use std::time::Duration;

use afk_supervisor::git::{ChangeKind, Changes, GitError, PathChange};

use crate::support::{TestEnv, set, strings, wait_until};

fn pc(path: &str, kind: ChangeKind) -> PathChange {
    PathChange {
        path: path.into(),
        kind,
    }
}

/// The UTF-8 paths of a listing, sorted; every fixture here has UTF-8 names only.
fn sorted(c: impl Into<Changes>) -> Vec<PathChange> {
    let c = c.into();
    assert!(c.not_utf8.is_empty(), "{:?}", c.not_utf8);
    let mut v = c.paths;
    v.sort();
    v
}

/// Branches on the bare origin, short names.
fn origin_branches(env: &TestEnv, origin: &Path) -> Vec<String> {
    env.git(
        origin,
        &["for-each-ref", "--format=%(refname:short)", "refs/heads/"],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

#[test]
fn lists_local_and_remote_afk_branches_including_nested() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    for b in [
        "afk/12-fix",
        "afk/worker-1/12-x",
        "feature/afk/3-no",
        "afk-9-no",
        "other",
    ] {
        env.git(r, &["branch", b]);
    }
    env.git(
        r,
        &[
            "push",
            "-q",
            "origin",
            "afk/12-fix",
            "afk/worker-1/12-x",
            "feature/afk/3-no",
            "other",
        ],
    );
    let git = env.lib_git(r);
    assert_eq!(
        git.local_afk_branches().unwrap(),
        strings(&["afk/12-fix", "afk/worker-1/12-x"])
    );
    // Remove one locally: the remote listing must come from origin, not local refs.
    env.git(r, &["branch", "-D", "afk/12-fix"]);
    assert_eq!(
        git.local_afk_branches().unwrap(),
        strings(&["afk/worker-1/12-x"])
    );
    assert_eq!(
        git.remote_afk_branches().unwrap(),
        strings(&["afk/12-fix", "afk/worker-1/12-x"])
    );
    let heads = git.remote_afk_heads().unwrap();
    let main_sha = env.git(r, &["rev-parse", "main"]).trim().to_string();
    assert_eq!(heads.get("afk/12-fix"), Some(&main_sha));
}

#[test]
fn worktree_branches_cover_main_checkout_and_linked_worktrees() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let git = env.lib_git(r);
    let wt = env.path().join("linked tree");
    git.worktree_add(&wt, "afk/w-1/7-linked", "origin/main")
        .unwrap();
    let detached = env.path().join("detached");
    env.git(
        r,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            detached.to_str().unwrap(),
            "main",
        ],
    );
    env.git(r, &["branch", "afk/8-idle"]);

    assert_eq!(
        git.worktree_branches().unwrap(),
        set(&["main", "afk/w-1/7-linked"])
    );
    // Asked from inside the linked worktree, the answer is the same.
    assert_eq!(
        env.lib_git(&wt).worktree_branches().unwrap(),
        set(&["main", "afk/w-1/7-linked"])
    );
    let all = git.worktrees().unwrap();
    assert_eq!(all.len(), 3);
    let d = all.iter().find(|w| w.path.ends_with("detached")).unwrap();
    assert!(d.detached && d.branch.is_none());
    assert!(all.iter().any(|w| w.path.ends_with("linked tree")));
}

#[test]
fn merged_and_unmerged_branches() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    env.git(r, &["branch", "afk/1-merged"]);
    env.git(r, &["switch", "-q", "-c", "afk/2-unmerged"]);
    env.write(r, "two.txt", "2\n");
    env.commit(r, "two");
    env.git(r, &["switch", "-q", "main"]);
    // Merged into origin/main by way of a push: a branch that landed upstream.
    env.git(r, &["switch", "-q", "-c", "afk/3-landed"]);
    env.write(r, "three.txt", "3\n");
    env.commit(r, "three");
    env.git(r, &["push", "-q", "origin", "afk/3-landed:main"]);
    env.git(r, &["fetch", "-q", "origin"]);
    env.git(r, &["switch", "-q", "main"]);

    let git = env.lib_git(r);
    let before = git.calls();
    let merged = git
        .merged_into(
            "origin/main",
            &strings(&[
                "afk/1-merged",
                "afk/2-unmerged",
                "afk/3-landed",
                "afk/99-missing",
            ]),
        )
        .unwrap();
    assert_eq!(merged, set(&["afk/1-merged", "afk/3-landed"]));
    assert_eq!(git.calls() - before, 1, "one git call for the whole list");
    assert!(git.merged_into("origin/main", &[]).unwrap().is_empty());
    assert_eq!(git.calls() - before, 1, "an empty list costs nothing");

    assert!(git.is_merged("afk/1-merged", "origin/main").unwrap());
    assert!(git.is_merged("afk/3-landed", "origin/main").unwrap());
    assert!(!git.is_merged("afk/2-unmerged", "origin/main").unwrap());
    // Not merged into main locally: main is behind origin/main.
    assert!(!git.is_merged("afk/3-landed", "main").unwrap());
    let err = git.is_merged("afk/99-missing", "origin/main").unwrap_err();
    assert!(matches!(err, GitError::Failed { .. }), "{err}");
    let err = git
        .merged_into("origin/nope", &strings(&["afk/1-merged"]))
        .unwrap_err();
    assert!(err.stderr().unwrap().contains("origin/nope"), "{err}");
}

#[test]
fn batch_deletion_local_and_remote() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let names = strings(&["afk/1-a", "afk/w/2-b", "afk/3-c"]);
    for b in &names {
        env.git(r, &["branch", b]);
    }
    env.git(r, &["branch", "afk/4-keep"]);
    env.git(
        r,
        &["push", "-q", "origin", "refs/heads/afk/*:refs/heads/afk/*"],
    );
    let git = env.lib_git(r);

    let before = git.calls();
    git.delete_local_branches(&[]).unwrap();
    git.delete_remote_branches(&[]).unwrap();
    assert_eq!(git.calls(), before, "empty batches make no call");

    git.delete_local_branches(&names).unwrap();
    assert_eq!(git.calls() - before, 1);
    assert_eq!(git.local_afk_branches().unwrap(), strings(&["afk/4-keep"]));

    let before = git.calls();
    git.delete_remote_branches(&names).unwrap();
    assert_eq!(git.calls() - before, 1);
    assert_eq!(
        origin_branches(&env, &repo.origin),
        strings(&["afk/4-keep", "main"])
    );

    // Already gone on both sides (another reaper got there first): not an error.
    git.delete_local_branches(&names).unwrap();
    git.delete_remote_branches(&names).unwrap();
    assert_eq!(
        origin_branches(&env, &repo.origin),
        strings(&["afk/4-keep", "main"])
    );
}

#[test]
fn local_deletion_reports_a_checked_out_branch_and_deletes_the_rest() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let git = env.lib_git(r);
    env.git(r, &["branch", "afk/1-a"]);
    env.git(r, &["branch", "afk/2-b"]);
    let wt = env.path().join("wt");
    git.worktree_add(&wt, "afk/3-busy", "main").unwrap();

    let err = git
        .delete_local_branches(&strings(&["afk/1-a", "afk/3-busy", "afk/2-b"]))
        .unwrap_err();
    match &err {
        GitError::PartialDelete {
            side,
            requested,
            deleted,
            remaining,
            ..
        } => {
            assert_eq!(*side, "local");
            assert_eq!(*requested, 3);
            assert_eq!(deleted, &strings(&["afk/1-a", "afk/2-b"]));
            assert_eq!(remaining, &strings(&["afk/3-busy"]));
        }
        other => panic!("expected PartialDelete, got {other}"),
    }
    assert!(err.stderr().unwrap().contains("worktree"), "{err}");
    assert!(err.to_string().contains("afk/3-busy"), "{err}");
    assert_eq!(git.local_afk_branches().unwrap(), strings(&["afk/3-busy"]));
}

#[test]
fn remote_deletion_reports_what_origin_refused() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    for b in ["afk/1-a", "afk/2-protected", "afk/3-c"] {
        env.git(r, &["branch", b]);
    }
    env.git(
        r,
        &["push", "-q", "origin", "refs/heads/afk/*:refs/heads/afk/*"],
    );
    // A per-ref hook on origin that refuses to delete one branch.
    let hook = repo.origin.join("hooks/update");
    env.write(
        &repo.origin,
        "hooks/update",
        "#!/bin/sh\ncase \"$1\" in refs/heads/afk/2-protected) echo \"protected: $1\" >&2; exit 1;; esac\nexit 0\n",
    );
    make_executable(&hook);

    let git = env.lib_git(r);
    let err = git
        .delete_remote_branches(&strings(&["afk/1-a", "afk/2-protected", "afk/3-c"]))
        .unwrap_err();
    // The atomic batch is refused as a whole, origin is listed, the survivors go ref by
    // ref, origin is listed again to see what stands.
    assert_eq!(git.calls(), 4);
    match &err {
        GitError::PartialDelete {
            side,
            deleted,
            remaining,
            ..
        } => {
            assert_eq!(*side, "remote");
            assert_eq!(deleted, &strings(&["afk/1-a", "afk/3-c"]));
            assert_eq!(remaining, &strings(&["afk/2-protected"]));
        }
        other => panic!("expected PartialDelete, got {other}"),
    }
    assert!(err.stderr().unwrap().contains("protected"), "{err}");
    assert_eq!(
        origin_branches(&env, &repo.origin),
        strings(&["afk/2-protected", "main"])
    );
}

/// Adds `refs/heads/<name>` at `sha` to a repository's packed-refs file (kept sorted, as
/// its header promises), which is how a long-lived repo holds thousands of branches.
fn add_packed_branches(git_dir: &Path, names: &[String], sha: &str) {
    let file = git_dir.join("packed-refs");
    let old = std::fs::read_to_string(&file).unwrap_or_default();
    let mut lines: Vec<String> = old
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    lines.extend(names.iter().map(|n| format!("{sha} refs/heads/{n}")));
    lines.sort_by(|a, b| {
        a.split_once(' ')
            .unwrap()
            .1
            .cmp(b.split_once(' ').unwrap().1)
    });
    let mut text = String::from("# pack-refs with: peeled fully-peeled sorted \n");
    for l in lines {
        text.push_str(&l);
        text.push('\n');
    }
    std::fs::write(file, text).unwrap();
}

#[test]
fn remote_deletion_works_without_atomic_push_support() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    for b in ["afk/1-a", "afk/2-b"] {
        env.git(r, &["branch", b]);
    }
    env.git(
        r,
        &["push", "-q", "origin", "refs/heads/afk/*:refs/heads/afk/*"],
    );
    env.git(
        &repo.origin,
        &["config", "receive.advertiseAtomic", "false"],
    );
    let git = env.lib_git(r);
    git.delete_remote_branches(&strings(&["afk/1-a", "afk/2-b"]))
        .unwrap();
    assert_eq!(origin_branches(&env, &repo.origin), strings(&["main"]));
    // Refused atomic push, one listing, one ref-by-ref push.
    assert_eq!(git.calls(), 3);
}

fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn fetch_base_follows_origin_and_fails_with_stderr_when_origin_is_gone() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let git = env.lib_git(r);
    let old = git.rev_parse("origin/main").unwrap().unwrap();

    // Someone else advances main on origin.
    let other = env.path().join("other");
    env.git(
        env.path(),
        &[
            "clone",
            "-q",
            repo.origin.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    env.write(&other, "new.txt", "new\n");
    let new = env.commit(&other, "advance");
    env.git(&other, &["push", "-q", "origin", "main"]);
    assert_eq!(git.rev_parse("origin/main").unwrap().unwrap(), old);

    git.fetch_base("main").unwrap();
    assert_eq!(git.rev_parse("origin/main").unwrap().unwrap(), new);
    // The local branch is left alone.
    assert_eq!(git.rev_parse("main").unwrap().unwrap(), old);

    std::fs::remove_dir_all(&repo.origin).unwrap();
    let err = git.fetch_base("main").unwrap_err();
    let GitError::Failed { argv, stderr, .. } = &err else {
        panic!("expected Failed, got {err}");
    };
    assert!(argv.contains("fetch"), "{argv}");
    assert!(
        stderr.contains("does not appear to be a git repository"),
        "{stderr}"
    );
    assert!(
        err.to_string()
            .contains("does not appear to be a git repository")
    );
    assert!(!err.to_string().contains('\n'), "one line: {err}");
}

#[test]
fn worktree_add_commit_push_remove_cycle() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let git = env.lib_git(r);
    let wt = r.join(".red/tmp/docs-sweep/wt");
    let branch = "afk-docs/sweep-1";
    git.worktree_add(&wt, branch, "origin/main").unwrap();
    assert!(wt.join("README.md").is_file());

    let in_wt = git.at(&wt);
    assert_eq!(in_wt.current_branch().unwrap().as_deref(), Some(branch));
    assert_eq!(git.current_branch().unwrap().as_deref(), Some("main"));
    assert!(in_wt.commit_all("docs: nothing").unwrap().is_none());

    env.write(&wt, ".red/adr/0001-x.md", "# ADR\n");
    env.write(&wt, "README.md", "changed\n");
    let sha = in_wt
        .commit_all("docs: land stranded docs")
        .unwrap()
        .unwrap();
    assert_eq!(sha.len(), 40);
    assert_eq!(in_wt.rev_parse("HEAD").unwrap().unwrap(), sha);
    assert!(in_wt.commit_all("docs: again").unwrap().is_none());
    // The primary checkout is untouched.
    assert_eq!(
        std::fs::read_to_string(r.join("README.md")).unwrap(),
        "seed\n"
    );
    assert_eq!(
        env.git(&wt, &["log", "-1", "--format=%s"]).trim(),
        "docs: land stranded docs"
    );
    // No upstream was configured: a stray push cannot go to main.
    let up = env.git_output(&wt, &["config", &format!("branch.{branch}.merge")]);
    assert!(!up.status.success());

    in_wt.push_branch(branch).unwrap();
    assert_eq!(
        env.git(
            &repo.origin,
            &["rev-parse", &format!("refs/heads/{branch}")]
        )
        .trim(),
        sha
    );
    // Not forced: a rewritten branch is rejected.
    env.git(&wt, &["commit", "-q", "--amend", "-m", "rewritten"]);
    let err = in_wt.push_branch(branch).unwrap_err();
    assert!(err.stderr().unwrap().contains("rejected"), "{err}");

    // A dirty worktree needs force.
    env.write(&wt, "scratch.txt", "x\n");
    assert!(git.worktree_remove(&wt, false).is_err());
    assert!(wt.exists());
    git.worktree_remove(&wt, true).unwrap();
    assert!(!wt.exists());
    assert_eq!(git.worktree_branches().unwrap(), set(&["main"]));

    // Prune forgets a worktree whose directory vanished.
    let gone = env.path().join("gone");
    git.worktree_add(&gone, "afk/5-gone", "main").unwrap();
    std::fs::remove_dir_all(&gone).unwrap();
    assert!(git.worktrees().unwrap().iter().any(|w| w.prunable));
    git.worktree_prune().unwrap();
    assert_eq!(git.worktrees().unwrap().len(), 1);
    git.delete_local_branches(&strings(&["afk/5-gone"]))
        .unwrap();
}

#[test]
fn ignored_docs_are_committed_in_a_worktree_only_when_forced() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    env.write(r, ".gitignore", ".red/\n");
    env.commit(r, "ignore .red");
    env.git(r, &["push", "-q", "origin", "main"]);
    env.git(r, &["fetch", "-q", "origin"]);
    let git = env.lib_git(r);
    let wt = r.join(".red/tmp/docs-sweep/wt");
    git.worktree_add(&wt, "docs/sweep-2", "origin/main")
        .unwrap();
    let in_wt = git.at(&wt);
    env.write(&wt, ".red/adr/0001 first.md", "adr\n");
    env.write(&wt, ".red/CONTEXT.md", "ctx\n");
    // `add -A` skips ignored files: nothing to commit.
    assert!(in_wt.commit_all("docs: none").unwrap().is_none());
    let docs = strings(&[".red/adr/0001 first.md", ".red/CONTEXT.md"]);
    assert_eq!(in_wt.ignored_among(&docs).unwrap().len(), 2);
    in_wt.add_force(&docs).unwrap();
    let sha = in_wt.commit_all("docs: land").unwrap().unwrap();
    assert_eq!(
        git.ls_tree_paths(&sha, ".red").unwrap(),
        strings(&[".red/CONTEXT.md", ".red/adr/0001 first.md"])
    );
    // Tracked now, later edits are picked up by `add -A` alone.
    env.write(&wt, ".red/CONTEXT.md", "ctx 2\n");
    assert!(in_wt.commit_all("docs: edit").unwrap().is_some());
    // The primary checkout never saw a commit.
    assert_eq!(
        git.rev_parse("HEAD").unwrap(),
        git.rev_parse("origin/main").unwrap()
    );
}

#[test]
fn changed_paths_sees_every_kind_of_work_tree_change() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    env.write(r, ".red/CONTEXT.md", "ctx\n");
    env.write(r, ".red/adr/0001-old.md", "old\n");
    env.write(r, ".red/adr/0002-gone.md", "gone\n");
    env.write(r, ".red/contexts/with space é.md", "s\n");
    env.write(r, "outside.md", "o\n");
    env.write(r, ".gitignore", ".red/private/\n");
    env.commit(r, "docs");

    env.write(r, ".red/CONTEXT.md", "ctx changed\n");
    std::fs::remove_file(r.join(".red/adr/0002-gone.md")).unwrap();
    env.git(r, &["mv", ".red/adr/0001-old.md", ".red/adr/0001-new.md"]);
    env.write(r, ".red/contexts/with space é.md", "s2\n");
    env.write(r, ".red/adr/0003 untracked.md", "u\n");
    env.write(r, ".red/private/a.md", "ignored\n");
    env.write(r, ".red/private/deep/b.md", "ignored too\n");
    env.write(r, ".red/tmp/lane/x.log", "x\n");
    env.write(r, "outside.md", "changed, but outside the prefix\n");

    let git = env.lib_git(r);
    let got = sorted(git.changed_paths(".red/").unwrap());
    assert_eq!(
        got,
        sorted(vec![
            pc(".red/CONTEXT.md", ChangeKind::Modified),
            pc(".red/adr/0002-gone.md", ChangeKind::Deleted),
            pc(".red/adr/0001-new.md", ChangeKind::Renamed),
            pc(".red/adr/0001-old.md", ChangeKind::Deleted),
            pc(".red/contexts/with space é.md", ChangeKind::Modified),
            pc(".red/adr/0003 untracked.md", ChangeKind::Untracked),
            pc(".red/private/a.md", ChangeKind::Ignored),
            pc(".red/private/deep/b.md", ChangeKind::Ignored),
            pc(".red/tmp/lane/x.log", ChangeKind::Untracked),
        ])
    );
    // Excluded subtrees drop out.
    let got = git
        .changed_paths_excluding(".red/", &[".red/tmp/", ".red/private/"])
        .unwrap()
        .paths;
    assert!(
        got.iter()
            .all(|c| !c.path.starts_with(".red/tmp/") && !c.path.starts_with(".red/private/"))
    );
    assert_eq!(got.len(), 6);
    // The same answer when the handle points at a subdirectory: paths stay root-relative.
    let sub = git.at(r.join(".red/adr"));
    assert_eq!(
        sorted(sub.changed_paths(".red/contexts").unwrap()),
        vec![pc(".red/contexts/with space é.md", ChangeKind::Modified)]
    );
    // Whole repository.
    assert!(
        git.changed_paths("")
            .unwrap()
            .paths
            .contains(&pc("outside.md", ChangeKind::Modified))
    );
}

#[test]
fn changed_paths_lists_docs_inside_a_wholly_ignored_dir() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    env.write(r, ".gitignore", ".red/\n");
    env.commit(r, "ignore .red");
    env.write(r, ".red/adr/0001.md", "a\n");
    env.write(r, ".red/CONTEXT-MAP.md", "m\n");
    let git = env.lib_git(r);
    assert_eq!(
        sorted(git.changed_paths(".red").unwrap()),
        vec![
            pc(".red/CONTEXT-MAP.md", ChangeKind::Ignored),
            pc(".red/adr/0001.md", ChangeKind::Ignored),
        ]
    );
    assert!(git.is_ignored(".red/adr/0001.md").unwrap());
    assert!(git.is_ignored(".red/adr/not-yet-written.md").unwrap());
    assert!(!git.is_ignored("README.md").unwrap());
    assert!(!git.is_ignored("src/new.rs").unwrap());
}

#[test]
fn ignore_checks_are_literal_and_batched() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    env.write(r, ".gitignore", "a\\*\n*.log\nbuild/\n");
    env.write(r, "a", "tracked\n");
    env.commit(r, "ignore rules");
    let git = env.lib_git(r);
    // `a*` names a file literally called "a*"; tracked `a` must not make it look tracked.
    assert!(git.is_ignored("a*").unwrap());
    assert!(!git.is_ignored("a").unwrap());
    let before = git.calls();
    let got = git
        .ignored_among(&strings(&[
            "x.log",
            "./build/out",
            "src/main.rs",
            "dir with space/y.log",
        ]))
        .unwrap();
    assert_eq!(git.calls() - before, 1);
    assert_eq!(got, set(&["x.log", "./build/out", "dir with space/y.log"]));
    assert!(git.ignored_among(&[]).unwrap().is_empty());
}

#[test]
fn paths_changed_ahead_of_base_include_deletions() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    env.write(r, ".red/adr/keep.md", "k\n");
    env.write(r, ".red/adr/change.md", "c\n");
    env.write(r, ".red/adr/remove.md", "r\n");
    env.commit(r, "base docs");
    env.git(r, &["push", "-q", "origin", "main"]);
    env.git(r, &["fetch", "-q", "origin"]);

    env.write(r, ".red/adr/change.md", "c2\n");
    env.write(r, ".red/adr/new file.md", "n\n");
    env.commit(r, "ahead 1");
    std::fs::remove_file(r.join(".red/adr/remove.md")).unwrap();
    env.write(r, "src/lib.rs", "outside\n");
    env.commit(r, "ahead 2");
    // Uncommitted work is not "ahead".
    env.write(r, ".red/adr/keep.md", "dirty\n");

    let git = env.lib_git(r);
    assert_eq!(
        sorted(git.paths_changed_ahead("origin/main", ".red/").unwrap()),
        sorted(vec![
            pc(".red/adr/change.md", ChangeKind::Modified),
            pc(".red/adr/new file.md", ChangeKind::Added),
            pc(".red/adr/remove.md", ChangeKind::Deleted),
        ])
    );
    assert!(
        git.paths_changed_ahead("origin/main", "src")
            .unwrap()
            .paths
            .contains(&pc("src/lib.rs", ChangeKind::Added))
    );
    assert!(
        git.paths_changed_ahead_excluding("origin/main", ".red/", &[".red/adr/"])
            .unwrap()
            .paths
            .is_empty()
    );
    // Commits the base has and HEAD lacks do not count (three-dot).
    env.git(r, &["push", "-q", "origin", "HEAD:main"]);
    env.git(r, &["fetch", "-q", "origin"]);
    assert!(
        git.paths_changed_ahead("origin/main", ".red/")
            .unwrap()
            .paths
            .is_empty()
    );
    assert!(git.paths_changed_ahead("origin/missing", ".red/").is_err());
}

#[test]
fn ls_tree_paths_lists_tracked_files_at_a_rev() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    env.write(r, ".red/adr/0001 a.md", "a\n");
    env.write(r, ".red/adr/sub/0002.md", "b\n");
    env.write(r, ".red/adrx/not-under.md", "c\n");
    let first = env.commit(r, "docs");
    env.git(r, &["rm", "-q", ".red/adr/sub/0002.md"]);
    env.commit(r, "remove one");
    let git = env.lib_git(r);
    assert_eq!(
        git.ls_tree_paths(&first, ".red/adr").unwrap(),
        strings(&[".red/adr/0001 a.md", ".red/adr/sub/0002.md"])
    );
    assert_eq!(
        git.ls_tree_paths("HEAD", ".red/adr/").unwrap(),
        strings(&[".red/adr/0001 a.md"])
    );
    assert!(
        git.ls_tree_paths("origin/main", ".red/")
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        git.ls_tree_paths("origin/main", "").unwrap(),
        strings(&["README.md"])
    );
    // Root-relative even from a subdirectory.
    let sub = git.at(r.join(".red/adr"));
    assert_eq!(sub.ls_tree_paths("HEAD", ".red/adr").unwrap().len(), 1);
    assert!(git.ls_tree_paths("no-such-rev", "").is_err());
}

#[test]
fn rev_parse_and_current_branch() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let git = env.lib_git(r);
    let head = env.git(r, &["rev-parse", "HEAD"]).trim().to_string();
    assert_eq!(git.rev_parse("HEAD").unwrap(), Some(head.clone()));
    assert_eq!(git.rev_parse("origin/main").unwrap(), Some(head.clone()));
    assert_eq!(git.rev_parse("refs/heads/nope").unwrap(), None);
    assert_eq!(git.rev_parse("HEAD~5").unwrap(), None);
    assert_eq!(git.current_branch().unwrap().as_deref(), Some("main"));
    env.git(r, &["checkout", "-q", "--detach"]);
    assert_eq!(git.current_branch().unwrap(), None);
    // Outside a repository both fail instead of answering "no".
    let nowhere = env.lib_git(env.path());
    assert!(nowhere.rev_parse("HEAD").is_err());
    assert!(nowhere.current_branch().is_err());
}

/// A program a git call starts: the repository's own signing program (`gpg.program` with
/// `commit.gpgsign`), since hooks never run in the fleet's git. `script` runs first; then
/// it answers as gpg does when it has signed. It reads git's payload first: a signer that
/// exits before git has written it makes git's write fail (EPIPE), and the commit with it.
fn signing_program(env: &TestEnv, r: &Path, script: &str) {
    let signer = env.path().join("signer.sh");
    std::fs::write(
        &signer,
        format!(
            "#!/bin/sh\ncat > /dev/null\n{script}\nprintf '\\n[GNUPG:] SIG_CREATED D 1 8 00 0 X\\n' >&2\n\
             printf -- '-----BEGIN PGP SIGNATURE-----\\nx\\n-----END PGP SIGNATURE-----\\n'\n"
        ),
    )
    .unwrap();
    make_executable(&signer);
    env.git(r, &["config", "commit.gpgsign", "true"]);
    env.git(r, &["config", "gpg.program", &signer.display().to_string()]);
}

#[test]
fn a_slow_git_call_times_out_and_its_children_die() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let pid_file = env.path().join("signer.pid");
    signing_program(
        &env,
        r,
        &format!("echo $$ > '{}'\nexec sleep 60", pid_file.display()),
    );
    env.write(r, "f.txt", "f\n");
    let git = env.lib_git(r).with_timeout(Duration::from_millis(1500));
    let err = git.commit_all("slow").unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(err.to_string().contains("commit"), "{err}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = wait_until(Duration::from_secs(10), || {
        afk_supervisor::pidfile::process_start_time(pid).is_none()
    });
    assert!(gone, "signing process {pid} survived the timeout");
    // Nothing was committed.
    assert_eq!(env.git(r, &["rev-list", "--count", "HEAD"]).trim(), "1");
}

/// Every call runs with prompts and optional locks off, even when the caller asks
/// otherwise, and with hooks and the file-system monitor off (SPEC §11.19): what an agent
/// planted in the repository never runs in the fleet's git.
#[test]
fn every_call_runs_with_terminal_prompts_off() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let out = env.path().join("env.txt");
    signing_program(
        &env,
        r,
        &format!(
            "echo \"$GIT_TERMINAL_PROMPT $GIT_OPTIONAL_LOCKS\" > '{}'",
            out.display()
        ),
    );
    let ran = env.path().join("planted-ran");
    for hook in ["pre-commit", "commit-msg", "post-commit"] {
        env.write(
            r,
            &format!(".git/hooks/{hook}"),
            &format!("#!/bin/sh\ntouch '{}'\n", ran.display()),
        );
        make_executable(&r.join(format!(".git/hooks/{hook}")));
    }
    let monitor = format!("touch '{}'; false", ran.display());
    env.git(r, &["config", "core.fsmonitor", &monitor]);
    env.write(r, "f.txt", "f\n");
    // Even when the caller's environment asks for prompts.
    let git = env.lib_git(r).with_env([("GIT_TERMINAL_PROMPT", "1")]);
    git.commit_all("env").unwrap().unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "0 0");
    git.changed_paths("").unwrap();
    assert!(!ran.exists(), "a planted hook or monitor ran");
}

#[test]
fn names_that_look_like_options_are_refused_before_git_runs() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let git = env.lib_git(r);
    let wt = env.path().join("wt");
    let results: Vec<(&str, GitError)> = vec![
        (
            "delete local",
            git.delete_local_branches(&strings(&["afk/1-ok", "-D"]))
                .unwrap_err(),
        ),
        (
            "delete remote",
            git.delete_remote_branches(&strings(&["--all"]))
                .unwrap_err(),
        ),
        ("push", git.push_branch("--force").unwrap_err()),
        ("fetch", git.fetch_base("-q").unwrap_err()),
        ("is_merged", git.is_merged("-x", "origin/main").unwrap_err()),
        (
            "is_merged base",
            git.is_merged("main", "--all").unwrap_err(),
        ),
        (
            "merged_into",
            git.merged_into("--all", &strings(&["main"])).unwrap_err(),
        ),
        (
            "worktree_add",
            git.worktree_add(&wt, "-b", "main").unwrap_err(),
        ),
        ("rev_parse", git.rev_parse("--all").unwrap_err()),
        ("ls_tree", git.ls_tree_paths("--full-name", "").unwrap_err()),
        ("ahead", git.paths_changed_ahead("-p", "").unwrap_err()),
        ("bad ref", git.push_branch("a..b").unwrap_err()),
    ];
    for (what, err) in &results {
        assert!(matches!(err, GitError::BadName { .. }), "{what}: {err}");
    }
    assert_eq!(git.calls(), 0, "no git process was started");
    assert!(!wt.exists());
    assert!(
        results[0].1.to_string().contains("\"-D\""),
        "{}",
        results[0].1
    );
}

/// One reap-style pass (list both sides, the checked-out set, one merged query, one delete
/// per side) over `n` AFK branches; returns the git calls it cost.
fn reap_pass(n: usize) -> u64 {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let r = &repo.path;
    let head = env.git(r, &["rev-parse", "HEAD"]).trim().to_string();
    let names: Vec<String> = (1..=n)
        .map(|i| format!("afk/w-{}/{i}-some-slug", i % 4))
        .collect();
    // Created as packed refs on both sides: the fixture is not what is being measured.
    add_packed_branches(&r.join(".git"), &names, &head);
    add_packed_branches(&repo.origin, &names, &head);
    let busy = "afk/w-1/1-some-slug";
    let unmerged = "afk/w-2/2-some-slug";
    let wt = env.path().join("busy");
    env.git(r, &["worktree", "add", "-q", wt.to_str().unwrap(), busy]);
    let tree = format!("{head}^{{tree}}");
    let ahead = env.git(r, &["commit-tree", "-p", &head, "-m", "ahead", &tree]);
    env.git(
        r,
        &[
            "update-ref",
            &format!("refs/heads/{unmerged}"),
            ahead.trim(),
        ],
    );

    let git = env.lib_git(r);
    let local = git.local_afk_branches().unwrap();
    let remote = git.remote_afk_branches().unwrap();
    let checked_out = git.worktree_branches().unwrap();
    let merged = git.merged_into("origin/main", &local).unwrap();
    let reap_local: Vec<String> = local
        .iter()
        .filter(|b| merged.contains(*b) && !checked_out.contains(*b))
        .cloned()
        .collect();
    git.delete_local_branches(&reap_local).unwrap();
    git.delete_remote_branches(&remote).unwrap();
    let calls = git.calls();

    assert_eq!(local.len(), n);
    assert_eq!(remote.len(), n);
    assert_eq!(reap_local.len(), n - 2);
    assert_eq!(
        git.local_afk_branches().unwrap(),
        strings(&[busy, unmerged])
    );
    assert_eq!(origin_branches(&env, &repo.origin), strings(&["main"]));
    calls
}

#[test]
fn a_reap_pass_costs_the_same_few_calls_for_any_number_of_branches() {
    // list x2, worktree list, merged query, one delete per side. The 2,000-branch figure is
    // measured by `cargo bench --bench git_reap`; a name list that size
    // still fits one argv (see the `chunks` unit test), so the count is the same there.
    assert_eq!(reap_pass(10), 6);
    assert_eq!(reap_pass(200), 6);
}

/// Every attempt's worktree is called `worktree/`, so concurrent adds would race for one
/// `.git/worktrees/worktree` admin dir; the layer serialises them per repo.
#[test]
fn concurrent_worktree_adds_with_one_basename_all_succeed() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let git = env.lib_git(&repo.path);
    let handles: Vec<_> = (0..24)
        .map(|i| {
            let git = git.clone();
            let path = env.path().join(format!("attempt-{i}")).join("worktree");
            std::thread::spawn(move || {
                git.worktree_add(&path, &format!("afk/w{i}/1-race"), "origin/main")
                    .map(|()| path)
            })
        })
        .collect();
    for h in handles {
        let path = h.join().unwrap().expect("worktree add");
        assert!(path.join("README.md").is_file());
    }
    assert_eq!(git.worktree_branches().unwrap().len(), 25);
    // Nothing but the worktree in each attempt dir.
    for i in 0..24 {
        let attempt = env.path().join(format!("attempt-{i}"));
        let names: Vec<_> = std::fs::read_dir(&attempt)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("worktree")]);
    }
}

/// Adds queue behind one repo-wide lock (concurrent adds race in git), but the wait is not
/// the git timeout: a fleet of hundreds starting together would otherwise see adds fail
/// and count them as deaths.
#[test]
fn a_worktree_add_waits_for_its_turn_longer_than_the_git_timeout() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let git = env.lib_git(&repo.path);
    let held = git.repo_lock("afk-worktree-add.lock").unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(3));
        drop(held);
    });
    let quick = git.clone().with_timeout(std::time::Duration::from_secs(1));
    let path = env.path().join("attempt").join("worktree");
    quick
        .worktree_add(&path, "afk/w1/1-queued", "origin/main")
        .expect("the add waits for the lock, then runs");
    assert!(path.join("README.md").is_file());
    release.join().unwrap();
}
