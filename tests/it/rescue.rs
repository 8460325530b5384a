//! No agent-hour burnt twice (issue #21): a dead attempt's work is rescued onto a ref, the
//! next attempt resumes from it, and no sweep deletes work no other ref holds. A real
//! supervisor, the built-in worker, real git with a bare `origin`, and shell agents.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT, kill, read};
use crate::support::{self, fleet, wait_until};
use afk_supervisor::event_log::Kind;

/// The agent of every test here: a first attempt commits `one.txt`, leaves `two.txt`
/// uncommitted and waits to be killed; an attempt that resumes writes what it was given
/// (the variable, `git log`, `two.txt`) to `<marks>/resumed` and finishes.
fn agent_script(marks: &Path) -> String {
    format!(
        "#!/bin/sh\nset -eu\n\
         if [ -z \"${{RED_AFK_RESUME_BRANCH:-}}\" ]; then\n\
         echo one > one.txt\ngit add one.txt\ngit commit -q -m 'agent: one'\n\
         echo two > two.txt\n\
         echo \"$RED_AFK_ATTEMPT_DIR\" > {m}/first\n\
         exec sleep 600\n\
         else\n\
         {{ echo \"$RED_AFK_RESUME_BRANCH\"; git log --format='%h %s'; cat two.txt; }} > {m}/resumed.tmp\n\
         mv {m}/resumed.tmp {m}/resumed\n\
         fi\n",
        m = marks.display()
    )
}

/// A one-worker fleet of the built-in worker on the local tracker, with one
/// `ready-for-agent` issue and the agent above.
fn rescue_fleet(extra: &str) -> (Fleet, PathBuf) {
    let f = Fleet::new("exec \"$AFK_TEST_BIN\" --repo \"$PWD\" worker --once\n", "").with_bin();
    let marks = f.file("marks");
    fs::create_dir_all(&marks).unwrap();
    let agent = f.file("agent.sh");
    fs::write(&agent, agent_script(&marks)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&agent, fs::Permissions::from_mode(0o755)).unwrap();
    f.write_config(&format!(
        "[worker]\ncommand = [\"sh\", \"{}\"]\n\n[agent]\ncommand = [\"{}\"]\n{}\n\
         [tracker]\nkind = \"local\"\n\n{FAST_TIMING}{extra}",
        f.script.display(),
        agent.display(),
        crate::support::REPORTING_AGENT
    ));
    fs::write(f.repo.join(".git/info/exclude"), ".red/tmp/\n.red/state/\n").unwrap();
    let out = f.run_cmd(&[
        "issue",
        "new",
        "--title",
        "Long work",
        "--label",
        "ready-for-agent",
    ]);
    assert!(out.status.success(), "{out:?}");
    (f, marks)
}

/// Starts a one-worker supervisor; returns the pid of the built-in worker running the first
/// attempt once its agent has committed and left the uncommitted file.
fn start_first_attempt(f: &mut Fleet, marks: &Path) -> i32 {
    f.start(&["--workers", "1"]);
    assert!(
        wait_until(WAIT, || marks.join("first").exists()),
        "the first attempt never started:\n{}",
        f.dump()
    );
    let pids = f.wait_workers(1);
    pids[0]
}

fn git(f: &Fleet, args: &[&str]) -> String {
    f.env.git(&f.repo, args)
}

/// The agent commits a file and leaves another uncommitted; its worker is SIGKILLed (as
/// the OOM killer does). The next attempt resumes from the rescue: its worktree holds the
/// agent's commit and a WIP commit with the uncommitted file. After `sweep` with every
/// attempt dir aged 40 days, the agent's commit is still on a ref.
#[test]
fn a_sigkilled_workers_work_is_rescued_and_resumed() {
    let (mut f, marks) = rescue_fleet("");
    let worker = start_first_attempt(&mut f, &marks);
    kill(worker, Signal::SIGKILL);
    assert!(
        wait_until(WAIT, || marks.join("resumed").exists()),
        "no attempt resumed:\n{}",
        f.dump()
    );
    let resumed = read(&marks.join("resumed"));
    println!(
        "second attempt: RED_AFK_RESUME_BRANCH, then `git log --format='%h %s'`, then two.txt:\n{resumed}"
    );
    let lines: Vec<&str> = resumed.lines().collect();
    assert_eq!(lines[0], "refs/afk/rescue/1/a1", "{resumed}");
    assert!(
        lines[1].ends_with(" WIP: rescued attempt 1-a1 (worker died)"),
        "{resumed}"
    );
    assert!(lines[2].ends_with(" agent: one"), "{resumed}");
    assert_eq!(lines.last(), Some(&"two"), "{resumed}");
    let agent_commit = git(&f, &["rev-parse", "refs/afk/rescue/1/a1~1"]);
    let agent_commit = agent_commit.trim();
    assert!(
        wait_until(WAIT, || f.labels_of(1) == vec!["ready-for-human"]),
        "{}",
        f.dump()
    );
    // Visible: the event, the restore comment, the ledger record and `issue show`.
    let rescued = f.events_of(Kind::AttemptRescued);
    assert_eq!(rescued.len(), 1, "{}", f.dump());
    assert!(
        rescued[0]
            .msg
            .contains("work rescued to refs/afk/rescue/1/a1 at "),
        "{}",
        rescued[0].msg
    );
    let wip = git(&f, &["rev-parse", "refs/afk/rescue/1/a1"]);
    let comments = f.comments_of(1);
    assert!(
        comments[0].starts_with(&format!(
            "work rescued to refs/afk/rescue/1/a1 at {}",
            wip.trim()
        )),
        "{comments:?}"
    );
    let shown = f.run_cmd(&["issue", "show", "1"]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    let listed = shown
        .lines()
        .find(|l| l.contains("  worker-died  "))
        .unwrap_or_default();
    assert!(
        listed.ends_with(&format!(" rescued=refs/afk/rescue/1/a1 {}", wip.trim())),
        "{shown}"
    );
    let out = f.run_cmd(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["fleet"]["rescued"], 1, "{status}");

    let out = f.run_cmd(&["stop"]);
    assert!(out.status.success(), "{out:?}");
    f.wait_exit();
    // Every attempt dir 40 days old: the attempt cap and orphan cleanup may remove them
    // all, but the agent's commit stays on a ref.
    let old = SystemTime::now() - Duration::from_secs(40 * 86_400);
    for d in support::attempt_dirs(&f.repo) {
        fs::File::open(&d).unwrap().set_modified(old).unwrap();
    }
    let out = f.run_cmd(&["sweep"]);
    assert!(out.status.success(), "{out:?}");
    let holders = git(
        &f,
        &[
            "for-each-ref",
            "--contains",
            agent_commit,
            "--format=%(refname)",
        ],
    );
    assert!(
        holders.lines().any(|r| r == "refs/afk/rescue/1/a1"),
        "{holders}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The rescue of attempt 1-a1 as it must be after any end: `refs/afk/rescue/1/a1` holds a
/// WIP commit (for one of `whys`) with the uncommitted `two.txt`, on the agent's own commit.
fn assert_rescued(f: &Fleet, whys: &[&str]) -> String {
    let ok = wait_until(WAIT, || {
        f.env
            .git_output(
                &f.repo,
                &["rev-parse", "--verify", "-q", "refs/afk/rescue/1/a1"],
            )
            .status
            .success()
    });
    assert!(ok, "no rescue ref:\n{}", f.dump());
    let log = git(f, &["log", "--format=%s", "refs/afk/rescue/1/a1"]);
    let subjects: Vec<&str> = log.lines().collect();
    let wanted: Vec<String> = whys
        .iter()
        .map(|w| format!("WIP: rescued attempt 1-a1 ({w})"))
        .collect();
    assert!(wanted.iter().any(|w| w == subjects[0]), "{log}");
    assert_eq!(subjects[1], "agent: one", "{log}");
    let files = git(f, &["ls-tree", "--name-only", "refs/afk/rescue/1/a1"]);
    assert!(files.lines().any(|l| l == "two.txt"), "{files}");
    git(f, &["rev-parse", "refs/afk/rescue/1/a1"])
        .trim()
        .to_string()
}

/// The ledger's records of issue 1, waited for until `n` are there.
fn ledger(f: &Fleet, n: usize) -> Vec<afk_supervisor::ledger::Record> {
    let mut got = Vec::new();
    let ok = wait_until(WAIT, || {
        got = afk_supervisor::ledger::read(&f.layout, 1).unwrap_or_default();
        got.len() >= n
    });
    assert!(ok, "{got:?}\n{}", f.dump());
    got
}

/// The whole fleet SIGKILLed mid-issue (supervisor and worker, as a reboot does): the
/// next supervisor's boot sweep rescues the attempt before it restores the issue, and the
/// next attempt resumes from the rescue.
#[test]
fn the_boot_sweep_rescues_before_it_restores() {
    let (mut f, marks) = rescue_fleet("");
    let worker = start_first_attempt(&mut f, &marks);
    kill(f.sup_pid(), Signal::SIGKILL);
    f.wait_exit();
    kill(worker, Signal::SIGKILL);
    assert!(wait_until(WAIT, || !fleet::alive(worker)));
    f.start(&["--workers", "1"]);
    assert!(
        wait_until(WAIT, || marks.join("resumed").exists()),
        "no attempt resumed:\n{}",
        f.dump()
    );
    let sha = assert_rescued(&f, &["orchestrator died"]);
    let rescued = f.events_of(Kind::AttemptRescued);
    assert_eq!(rescued.len(), 1, "{}", f.dump());
    assert!(rescued[0].msg.contains(&sha), "{}", rescued[0].msg);
    let comments = f.comments_of(1);
    assert_eq!(
        comments[0],
        format!(
            "work rescued to refs/afk/rescue/1/a1 at {sha}\n\n{}",
            afk_supervisor::sweeps::orphans::RESTORE_COMMENT
        ),
        "{comments:?}"
    );
    let records = ledger(&f, 1);
    assert_eq!(
        records[0].rescued.as_deref(),
        Some(format!("refs/afk/rescue/1/a1 {sha}").as_str())
    );
    let resumed = read(&marks.join("resumed"));
    assert_eq!(
        resumed.lines().next(),
        Some("refs/afk/rescue/1/a1"),
        "{resumed}"
    );
}

/// A stall kill rescues: the built-in worker, signalled for making no progress, keeps its
/// attempt's work before it gives the issue back (or the supervisor's release does, when
/// the grace ran out and it was killed).
#[test]
fn a_stall_kill_rescues() {
    let (mut f, marks) = rescue_fleet("");
    f.write_config(&read(&f.repo.join(".red/afk-supervisor.toml")).replace(
        "stall_s = 600\nstall_kill_s = 1200",
        "stall_s = 1\nstall_kill_s = 2",
    ));
    start_first_attempt(&mut f, &marks);
    f.wait_events(Kind::SlotStallKill, 1);
    // SIGTERM: the worker rescues; killed at the grace's end: the supervisor does. Either
    // way the rescue is one event.
    let sha = assert_rescued(&f, &["stall kill"]);
    let rescued = f.wait_events(Kind::AttemptRescued, 1);
    assert_eq!(rescued.len(), 1, "{}", f.dump());
    assert_eq!(rescued[0].issue, Some(1), "{}", f.dump());
    assert!(rescued[0].msg.contains(&sha), "{}", rescued[0].msg);
    let records = ledger(&f, 1);
    assert_eq!(records[0].outcome, afk_supervisor::ledger::Outcome::Stalled);
    assert!(records[0].rescued.is_some(), "{records:?}");
}

/// A hard-kill shrink rescues the stopped worker's attempt.
#[test]
fn a_hard_kill_shrink_rescues() {
    let (mut f, marks) = rescue_fleet("");
    start_first_attempt(&mut f, &marks);
    let out = f.run_cmd(&["scale", "0", "--shrink-mode", "hard-kill"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    f.wait_events(Kind::SlotHardKill, 1);
    assert_rescued(&f, &["interrupted", "stopped by a hard-kill shrink"]);
    let records = ledger(&f, 1);
    assert_eq!(
        records[0].outcome,
        afk_supervisor::ledger::Outcome::GivenBack
    );
    assert!(records[0].rescued.is_some(), "{records:?}");
}

/// `stop --force` kills the supervisor and its workers, then rescues their attempts
/// itself and names each rescue.
#[test]
fn stop_force_rescues() {
    let (mut f, marks) = rescue_fleet("");
    start_first_attempt(&mut f, &marks);
    let out = f.run_cmd(&["stop", "--force"]);
    assert!(out.status.success(), "{out:?}");
    let _ = f.wait_exit();
    let sha = assert_rescued(&f, &["stop --force"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("work rescued to refs/afk/rescue/1/a1 at {sha}")),
        "{said}"
    );
    let rescued = f.events_of(Kind::AttemptRescued);
    assert_eq!(rescued.len(), 1, "{}", f.dump());
    assert!(rescued[0].msg.contains(&sha), "{}", rescued[0].msg);
}

// ---- bad trees, through the library: real git, a worktree as a worker leaves it ----

/// A repo with a bare origin and the dead attempt `w1/5-a1` whose worktree is on
/// `afk/w1/5-x` with the agent's commit `a.txt`; returns the repo and the attempt dir.
fn dead_attempt(env: &support::TestEnv) -> (PathBuf, PathBuf) {
    let repo = env.repo_with_origin().path;
    let attempt = repo.join(".red/tmp/workers/w1/5-a1");
    fs::create_dir_all(&attempt).unwrap();
    fs::write(repo.join(".git/info/exclude"), ".red/\n").unwrap();
    let wt = attempt.join("worktree");
    env.git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "afk/w1/5-x",
            wt.to_str().unwrap(),
            "main",
        ],
    );
    env.write(&wt, "a.txt", "agent\n");
    env.commit(&wt, "agent: a");
    (repo, attempt)
}

fn keeper(env: &support::TestEnv, repo: &Path, max: u64) -> afk_supervisor::rescue::Keeper {
    afk_supervisor::rescue::Keeper {
        git: env.lib_git(repo),
        max_file_bytes: max,
        push: false,
    }
}

/// A 200 MB file (sparse, so the test is fast) is left out of the rescue and named in its
/// commit message; the rest is committed.
#[test]
fn a_file_over_the_size_limit_is_left_out_and_named() {
    let env = support::TestEnv::new();
    let (repo, attempt) = dead_attempt(&env);
    let wt = attempt.join("worktree");
    fs::File::create(wt.join("core.dump"))
        .unwrap()
        .set_len(200 << 20)
        .unwrap();
    env.write(&wt, "notes.md", "half done\n");
    let r = keeper(&env, &repo, 50 << 20)
        .rescue(&attempt, "worker died")
        .unwrap()
        .expect("rescued");
    assert_eq!(r.left_out, vec![("core.dump".to_string(), 200 << 20)]);
    assert_eq!(r.reference, "refs/afk/rescue/5/a1");
    let msg = env.git(&repo, &["log", "-1", "--format=%B", &r.sha]);
    assert!(
        msg.starts_with("WIP: rescued attempt 5-a1 (worker died)\n"),
        "{msg}"
    );
    assert!(msg.contains("- core.dump (209715200 bytes)"), "{msg}");
    let files = env.git(&repo, &["ls-tree", "--name-only", &r.sha]);
    assert!(files.lines().any(|l| l == "notes.md"), "{files}");
    assert!(!files.lines().any(|l| l == "core.dump"), "{files}");
    assert!(
        r.message().contains("left out for size: core.dump"),
        "{}",
        r.message()
    );
    // The tree is where it was, the big file too; the branch moved to the rescue and the
    // tree's own index with it, so `git status` shows only what was left out.
    assert!(wt.join("core.dump").exists());
    assert_eq!(env.git(&wt, &["rev-parse", "HEAD"]).trim(), r.sha);
    assert_eq!(
        env.git(&wt, &["status", "--porcelain"]).trim(),
        "?? core.dump"
    );
    // Asked again, it is rescued already: nothing new is made.
    let again = keeper(&env, &repo, 50 << 20)
        .rescue(&attempt, "swept")
        .unwrap()
        .expect("held");
    assert!(again.already && again.sha == r.sha, "{again:?}");
}

/// A merge in progress, with a conflicted file: its files are committed as they are (the
/// conflict markers too) on HEAD, the merge is named, and the tree is left as it was.
#[test]
fn a_merge_in_progress_is_rescued_and_named() {
    let env = support::TestEnv::new();
    let (repo, attempt) = dead_attempt(&env);
    let wt = attempt.join("worktree");
    env.git(&wt, &["checkout", "-q", "-b", "other", "main"]);
    env.write(&wt, "a.txt", "other\n");
    env.commit(&wt, "other: a");
    env.git(&wt, &["checkout", "-q", "afk/w1/5-x"]);
    let merge = env.git_output(&wt, &["merge", "-q", "other"]);
    assert!(!merge.status.success(), "the merge must conflict");
    let head = env.git(&wt, &["rev-parse", "HEAD"]);
    let r = keeper(&env, &repo, 50 << 20)
        .rescue(&attempt, "worker died")
        .unwrap()
        .expect("rescued");
    assert!(
        r.problems.iter().any(|p| p.contains("a merge of")),
        "{:?}",
        r.problems
    );
    let parent = env.git(&repo, &["rev-parse", &format!("{}~1", r.sha)]);
    assert_eq!(parent, head);
    let a = env.git(&repo, &["show", &format!("{}:a.txt", r.sha)]);
    assert!(a.contains("<<<<<<<") && a.contains("other"), "{a}");
    assert!(wt.join(".git").exists(), "the tree is kept");
    let msg = env.git(&repo, &["log", "-1", "--format=%B", &r.sha]);
    assert!(msg.contains("a merge of"), "{msg}");
}

/// A stale `index.lock` (a worker killed mid-`git add`): the rescue goes through its own
/// index, leaves the lock and the tree's index alone, and the work is on the rescue ref.
/// The orphan sweep then rescues rather than deleting blind.
#[test]
fn a_stale_index_lock_is_rescued_around_and_left() {
    let env = support::TestEnv::new();
    let (repo, attempt) = dead_attempt(&env);
    let wt = attempt.join("worktree");
    env.write(&wt, "a.txt", "edited\n");
    env.write(&wt, "b.txt", "new\n");
    let git_dir = env.git(&wt, &["rev-parse", "--absolute-git-dir"]);
    let lock = PathBuf::from(git_dir.trim()).join("index.lock");
    fs::write(&lock, "").unwrap();
    let head = env.git(&wt, &["rev-parse", "HEAD"]);
    let r = keeper(&env, &repo, 50 << 20)
        .rescue(&attempt, "worker died")
        .unwrap()
        .expect("rescued");
    assert!(lock.exists(), "the lock is not ours to remove");
    assert!(
        r.problems.iter().any(|p| p.contains("index.lock")),
        "{:?}",
        r.problems
    );
    assert_eq!(
        env.git(&wt, &["rev-parse", "HEAD"]),
        head,
        "branch not moved"
    );
    assert_eq!(
        env.git(&repo, &["show", &format!("{}:a.txt", r.sha)]),
        "edited\n"
    );
    assert_eq!(
        env.git(&repo, &["show", &format!("{}:b.txt", r.sha)]),
        "new\n"
    );
}

/// A corrupt index: staged afresh from HEAD, so the working files are still rescued.
#[test]
fn a_corrupt_index_is_rescued_from_head() {
    let env = support::TestEnv::new();
    let (repo, attempt) = dead_attempt(&env);
    let wt = attempt.join("worktree");
    env.write(&wt, "b.txt", "new\n");
    let git_dir = env.git(&wt, &["rev-parse", "--absolute-git-dir"]);
    fs::write(PathBuf::from(git_dir.trim()).join("index"), "garbage").unwrap();
    let r = keeper(&env, &repo, 50 << 20)
        .rescue(&attempt, "worker died")
        .unwrap()
        .expect("rescued");
    assert!(
        r.problems.iter().any(|p| p.contains("corrupt")),
        "{:?}",
        r.problems
    );
    let files = env.git(&repo, &["ls-tree", "--name-only", &r.sha]);
    assert!(files.lines().any(|l| l == "b.txt"), "{files}");
    assert!(files.lines().any(|l| l == "a.txt"), "{files}");
}

/// A detached HEAD: the work is kept on the rescue ref (there is no branch to move), and
/// the detachment is named.
#[test]
fn a_detached_head_is_kept_on_the_rescue_ref() {
    let env = support::TestEnv::new();
    let (repo, attempt) = dead_attempt(&env);
    let wt = attempt.join("worktree");
    env.git(&wt, &["checkout", "-q", "--detach"]);
    env.write(&wt, "c.txt", "detached work\n");
    env.commit(&wt, "agent: c");
    let r = keeper(&env, &repo, 50 << 20)
        .rescue(&attempt, "worker died")
        .unwrap()
        .expect("rescued");
    assert_eq!(r.reference, "refs/afk/rescue/5/a1");
    assert!(r.wip.is_none(), "everything was committed");
    assert!(
        r.problems.iter().any(|p| p.contains("detached")),
        "{:?}",
        r.problems
    );
    assert_eq!(
        env.git(&repo, &["rev-parse", "refs/afk/rescue/5/a1"])
            .trim(),
        r.sha
    );
}

/// Sweeps never delete work no other ref holds: a closed issue's dead attempt with
/// uncommitted work is rescued by the orphan sweep before its dir goes; one whose rescue
/// cannot be made (its worktree's git dir is gone) is kept, and the line says so.
#[test]
fn the_orphan_sweep_rescues_first_and_keeps_what_it_cannot_rescue() {
    let env = support::TestEnv::new();
    let (repo, attempt) = dead_attempt(&env);
    let wt = attempt.join("worktree");
    env.write(&wt, "b.txt", "uncommitted\n");
    let layout = afk_supervisor::layout::Layout::new(&repo);
    let tracker = afk_supervisor::tracker::LocalTracker::new(&layout, env.lib_git(&repo));
    for n in 1..=6 {
        let made = tracker.create(&format!("issue {n}"), "", &[]).unwrap();
        assert_eq!(made, n);
    }
    tracker.close(5).unwrap();
    // A second attempt of a closed issue whose worktree git cannot open.
    let broken = repo.join(".red/tmp/workers/w1/6-a1");
    fs::create_dir_all(broken.join("worktree")).unwrap();
    fs::write(broken.join("worktree/.git"), "gitdir: /nonexistent\n").unwrap();
    tracker.close(6).unwrap();
    let old = SystemTime::now() - Duration::from_secs(40 * 86_400);
    // The worker dir too: no `worker.pid` in an old dir is a dead worker.
    for d in [&attempt, &broken, &repo.join(".red/tmp/workers/w1")] {
        fs::File::open(d).unwrap().set_modified(old).unwrap();
    }
    let keeper = keeper(&env, &repo, 50 << 20);
    let r = afk_supervisor::sweeps::orphans::run_with(
        &layout,
        &tracker,
        SystemTime::now(),
        false,
        &keeper,
    )
    .unwrap();
    assert!(!attempt.exists(), "{:#?}", r.decisions);
    let sha = env.git(&repo, &["rev-parse", "refs/afk/rescue/5/a1"]);
    assert_eq!(
        env.git(&repo, &["show", &format!("{}:b.txt", sha.trim())]),
        "uncommitted\n"
    );
    let line = r
        .decisions
        .iter()
        .find(|d| d.subject.ends_with("5-a1"))
        .unwrap();
    assert!(
        line.reason.contains("work rescued to refs/afk/rescue/5/a1"),
        "{line:?}"
    );
    assert!(broken.exists(), "{:#?}", r.decisions);
    let kept = r
        .decisions
        .iter()
        .find(|d| d.subject.ends_with("6-a1"))
        .unwrap();
    assert!(kept.reason.contains("rescue failed"), "{kept:?}");
    assert!(kept.reason.contains("the tree is kept"), "{kept:?}");
}

/// On `gh` (the fake gh, a bare `origin`): the boot sweep's restore of a `running` issue
/// pushes the rescued branch to `origin`, never forced, and the restore comment and the
/// ledger name it.
#[test]
fn on_gh_the_rescued_branch_is_pushed_and_the_restore_comment_names_it() {
    use support::fake_gh::{FakeGh, FakeIssue};
    let env = support::TestEnv::new();
    let (repo, attempt) = dead_attempt(&env);
    let origin = env.path().join("origin.git");
    let wt = attempt.join("worktree");
    env.write(&wt, "b.txt", "uncommitted\n");
    let old = SystemTime::now() - Duration::from_secs(40 * 86_400);
    fs::File::open(repo.join(".red/tmp/workers/w1"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let gh = FakeGh::install(&env);
    gh.set_issues(&[FakeIssue::open(5, &["running"])]);
    let tracker = gh.tracker(Some("fake-owner/fake-repo"));
    let layout = afk_supervisor::layout::Layout::new(&repo);
    let keeper = afk_supervisor::rescue::Keeper {
        push: true,
        ..keeper(&env, &repo, 50 << 20)
    };
    let r = afk_supervisor::sweeps::orphans::run_with(
        &layout,
        &tracker,
        SystemTime::now(),
        false,
        &keeper,
    )
    .unwrap();
    assert_eq!(r.counts.restored, 1, "{:#?}", r.decisions);
    let on_origin = env.git(&origin, &["rev-parse", "afk/w1/5-x"]);
    let on_origin = on_origin.trim();
    assert_eq!(
        env.git(&origin, &["show", &format!("{on_origin}:b.txt")]),
        "uncommitted\n"
    );
    let issue = gh.issue(5).unwrap();
    assert_eq!(issue.labels, vec!["ready-for-agent"]);
    assert_eq!(
        issue.comments[0].body,
        format!(
            "work rescued to afk/w1/5-x at {on_origin}\n\n{}",
            afk_supervisor::sweeps::orphans::RESTORE_COMMENT
        )
    );
    let records = afk_supervisor::ledger::read(&layout, 5).unwrap();
    assert_eq!(
        records[0].rescued.as_deref(),
        Some(format!("afk/w1/5-x {on_origin}").as_str())
    );
    assert_eq!(
        afk_supervisor::ledger::resume_branch(&records),
        Some("afk/w1/5-x")
    );
    assert_eq!(r.rescued.len(), 1);

    // Someone else's commit on that branch on origin: a later rescue is never forced over
    // it; the work stays on the rescue ref and the refusal is said.
    let other = env.path().join("other");
    env.git(
        env.path(),
        &[
            "clone",
            "-q",
            origin.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    env.git(&other, &["checkout", "-q", "afk/w1/5-x"]);
    env.write(&other, "theirs.txt", "theirs\n");
    let theirs = env.commit(&other, "someone else");
    env.git(&other, &["push", "-q", "origin", "afk/w1/5-x"]);
    let attempt2 = repo.join(".red/tmp/workers/w1/5-a2");
    let wt2 = attempt2.join("worktree");
    env.git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "afk/w1/5-x-a2",
            wt2.to_str().unwrap(),
            "main",
        ],
    );
    env.git(&wt2, &["branch", "-q", "-f", "afk/w1/5-x", "HEAD"]);
    env.git(&wt2, &["checkout", "-q", "afk/w1/5-x"]);
    env.write(&wt2, "c.txt", "mine\n");
    let r2 = keeper
        .rescue(&attempt2, "worker died")
        .unwrap()
        .expect("rescued");
    assert_eq!(r2.reference, "refs/afk/rescue/5/a2");
    assert!(
        r2.problems
            .iter()
            .any(|p| p.contains("push to origin failed")),
        "{:?}",
        r2.problems
    );
    assert_eq!(
        env.git(&origin, &["rev-parse", "afk/w1/5-x"]).trim(),
        theirs
    );
}

/// The branch reaper judges rescue refs like local `afk/*` branches of their issue: spared
/// while it is open, reaped once it is closed.
#[test]
fn the_reaper_spares_an_open_issues_rescue_and_reaps_a_closed_ones() {
    let env = support::TestEnv::new();
    let (repo, _attempt) = dead_attempt(&env);
    let git = env.lib_git(&repo);
    let head = env.git(&repo, &["rev-parse", "afk/w1/5-x"]);
    for r in ["refs/afk/rescue/5/a1", "refs/afk/rescue/6/a2"] {
        env.git(&repo, &["update-ref", r, head.trim()]);
    }
    let layout = afk_supervisor::layout::Layout::new(&repo);
    let tracker = afk_supervisor::tracker::LocalTracker::new(&layout, git.clone());
    for n in 1..=6 {
        tracker.create(&format!("issue {n}"), "", &[]).unwrap();
    }
    tracker.close(5).unwrap();
    let r = afk_supervisor::sweeps::branch_reaper::run(
        &git,
        &tracker,
        "main",
        false,
        &Default::default(),
    )
    .unwrap();
    let refs = env.git(&repo, &["for-each-ref", "--format=%(refname)", "refs/afk/"]);
    assert_eq!(refs.trim(), "refs/afk/rescue/6/a2", "{:#?}", r.decisions);
    let line = |name: &str| {
        r.decisions
            .iter()
            .find(|d| d.branch == name)
            .map(|d| d.line(false))
            .unwrap_or_default()
    };
    assert!(
        line("refs/afk/rescue/5/a1").starts_with("reaped (local)"),
        "{:#?}",
        r.decisions
    );
    assert!(
        line("refs/afk/rescue/6/a2").starts_with("spared (local)"),
        "{:#?}",
        r.decisions
    );
}

/// The claims belt's takeover of this checkout's own dead worker (`gh`, its claim mark
/// still standing, its process gone, uncommitted work in its worktree) rescues the work
/// first: kept on `refs/afk/rescue/5/a1` and pushed, the ledger record names it, and an
/// `attempt.rescued` event says so.
#[test]
fn the_claims_belt_takeover_of_a_dead_own_worker_rescues() {
    use afk_supervisor::claim::marks::{Holder, Mark};
    use support::fake_gh::{FakeComment, FakeGh, FakeIssue};
    let env = support::TestEnv::new();
    let (repo, attempt) = dead_attempt(&env);
    let origin = env.path().join("origin.git");
    env.write(&attempt.join("worktree"), "b.txt", "uncommitted\n");
    let layout = afk_supervisor::layout::Layout::new(&repo);
    // The worker's pid file names a process that has exited.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    fs::write(
        repo.join(".red/tmp/workers/w1/worker.pid"),
        format!("{pid}\n"),
    )
    .unwrap();
    let host = afk_supervisor::claim::tracked::this_host(&layout);
    let mark = Mark::Claim {
        holder: Holder::new("w1", &host),
        nonce: "0123456789abcdef".into(),
    };
    let gh = FakeGh::install(&env);
    gh.set_issues(&[
        FakeIssue::open(5, &["running"]).with_comment(FakeComment::by(
            "fake",
            "OWNER",
            &mark.text(),
        )),
    ]);
    let tracker: std::sync::Arc<dyn afk_supervisor::tracker::Tracker> =
        std::sync::Arc::new(gh.tracker(Some("fake-owner/fake-repo")));
    let mut belt = afk_supervisor::claim::stale::StaleBelt::new(tracker, &layout, 1);
    let mut said = String::new();
    let took = wait_until(WAIT, || {
        said = belt.pass().unwrap();
        said.contains("taken-over=1")
    });
    assert!(took, "{said}");
    assert_eq!(gh.issue(5).unwrap().labels, vec!["ready-for-agent"]);

    let sha = env.git(&repo, &["rev-parse", "refs/afk/rescue/5/a1"]);
    let sha = sha.trim();
    assert_eq!(
        env.git(&repo, &["log", "-1", "--format=%s", sha]).trim(),
        "WIP: rescued attempt 5-a1 (claims-belt takeover)"
    );
    assert_eq!(
        env.git(&repo, &["show", &format!("{sha}:b.txt")]),
        "uncommitted\n"
    );
    assert_eq!(env.git(&origin, &["rev-parse", "afk/w1/5-x"]).trim(), sha);
    let records = afk_supervisor::ledger::read(&layout, 5).unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        records[0].rescued.as_deref(),
        Some(format!("afk/w1/5-x {sha}").as_str())
    );
    let events = afk_supervisor::event_log::read_events(&layout.event_log()).unwrap();
    let rescued: Vec<_> = events
        .iter()
        .filter(|e| e.kind == Kind::AttemptRescued)
        .collect();
    assert_eq!(rescued.len(), 1, "{events:?}");
    assert_eq!(rescued[0].issue, Some(5));
    assert!(
        rescued[0]
            .msg
            .contains(&format!("work rescued to afk/w1/5-x at {sha}")),
        "{}",
        rescued[0].msg
    );
}
