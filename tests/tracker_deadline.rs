//! Every tracker call has a deadline (SPEC §7): a `gh` that never answers is killed with
//! its process group at `tracker.timeout_s`, the failure is transient, and nothing acts on
//! it. The fake gh's `hang` reply stands in for a gh stuck on a dead connection.

mod support;

use std::fs;
use std::time::Duration;

use afk_supervisor::tracker::{ErrorKind, Tracker};
use support::fake_gh::{FakeGh, FakeIssue};
use support::{TestEnv, wait_until};

/// Whether `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |st| {
        st.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
    })
}

fn assert_all_ended(gh: &FakeGh, calls: usize) {
    let mut pids = gh.pids();
    assert_eq!(pids.len(), calls, "{pids:?}");
    let hung = gh.hung_children();
    assert_eq!(hung.len(), 1, "{hung:?}");
    pids.extend(hung);
    for pid in pids {
        assert!(
            wait_until(Duration::from_secs(10), || ended(pid)),
            "pid {pid} outlived the deadline"
        );
    }
}

#[test]
fn a_hung_gh_is_killed_with_its_group_and_counted_transient() {
    let env = TestEnv::new();
    let gh = FakeGh::install(&env);
    gh.set_issues(&[FakeIssue::open(1, &["running"])]);
    gh.hang_next(1);
    // Generous: the Python fake must start its child before the deadline, even on a
    // loaded machine.
    let t = gh.tracker_with_timeout(Some("o/r"), Duration::from_secs(5));
    let e = t
        .edit_labels(1, &["ready-for-agent"], &["running"])
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(
        e.detail.contains("timed out after 5s and was killed"),
        "{e}"
    );
    assert_all_ended(&gh, 1);
    assert_eq!(gh.issue(1).unwrap().labels, vec!["running"]);
}

/// The worker's claim: the confirming `view` hangs; the worker gives up at the deadline,
/// drops its local claim, changes nothing on the tracker and runs no agent. The next
/// worker, with gh answering again, works the issue.
#[test]
fn a_worker_whose_gh_hangs_changes_nothing_and_the_next_one_works_the_issue() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let runs = env.path().join("runs");
    let agent = env.path().join("agent.sh");
    fs::write(&agent, format!("echo run >> {}\n", runs.display())).unwrap();
    fs::create_dir_all(repo.path.join(".red")).unwrap();
    fs::write(
        repo.path.join(".red/afk-supervisor.toml"),
        format!(
            "[agent]\ncommand = [\"sh\", \"{}\"]\n\n[tracker]\nkind = \"gh\"\n\
             repo = \"fake-owner/fake-repo\"\ntimeout_s = 5\n",
            agent.display()
        ),
    )
    .unwrap();
    let gh = FakeGh::install(&env);
    gh.set_issues(&[FakeIssue::open(1, &["ready-for-agent"]).with_body("# Do it\n")]);
    gh.pass_next(1);
    gh.hang_next(1);
    let worker = || {
        env.bin()
            .arg("--repo")
            .arg(&repo.path)
            .args(["worker", "--once"])
            .env("PATH", gh.path_env())
            .env("RED_AFK_SWEEPS_DONE", "1")
            .env("RED_AFK_WORKER_ID", "w1")
            .output()
            .unwrap()
    };
    let o = worker();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("timed out after 5s and was killed"),
        "{stderr}"
    );
    let calls = gh.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0][..2], ["issue", "list"]);
    assert_eq!(calls[1][..2], ["issue", "view"]);
    assert_all_ended(&gh, 2);
    let issue = gh.issue(1).unwrap();
    assert_eq!(issue.labels, vec!["ready-for-agent"]);
    assert!(issue.comments.is_empty(), "{:?}", issue.comments);
    assert!(!runs.exists(), "no agent ran");
    assert!(!repo.path.join(".red/tmp/claims/1").exists());

    let o = worker();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(fs::read_to_string(&runs).unwrap().lines().count(), 1);
    assert_eq!(gh.issue(1).unwrap().labels, vec!["ready-for-human"]);
}
