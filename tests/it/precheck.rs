//! The boot suite's precheck (`docs/SPEC.md` §5): when what every sweep takes for granted is missing,
//! no sweep runs, the outcome says which check failed, and a supervisor still starts its
//! workers, which run their own precheck.

use crate::support::TestEnv;
use crate::support::fake_gh::FakeGh;
use crate::support::fleet::{FAST_TIMING, Fleet};
use afk_supervisor::event_log::Kind;

#[test]
fn outside_a_git_work_tree_every_command_is_refused_and_nothing_is_touched() {
    let env = TestEnv::new();
    let dir = env.path().join("not-a-repo");
    std::fs::create_dir_all(dir.join(".red/tmp/workers/w1/5-a1")).unwrap();
    let plain = env.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    for (repo, args) in [
        (&dir, &["--tracker", "local", "sweep"][..]),
        (&plain, &["--workers", "1"][..]),
        (&plain, &["run"][..]),
        (&plain, &["worker", "--once"][..]),
        (&plain, &["issue", "list"][..]),
    ] {
        let out = env
            .bin()
            .arg("--repo")
            .arg(repo)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err,
            format!(
                "afk-supervisor: --repo {}: not a git work tree; pass a checkout's directory (git init, or git clone)\n",
                repo.display()
            ),
            "{args:?}"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("boot sweeps"));
    }
    // Nothing was created or removed.
    assert!(dir.join(".red/tmp/workers/w1/5-a1").is_dir());
    assert_eq!(std::fs::read_dir(&plain).unwrap().count(), 0);
    // The same mistake from the working directory, for comparison.
    let out = env.bin().current_dir(&plain).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read_dir(&plain).unwrap().count(), 0);
}

#[test]
fn a_supervisor_whose_tracker_cannot_be_chosen_logs_the_precheck_and_still_spawns() {
    let mut f = Fleet::new("sleep 60\n", FAST_TIMING);
    f.env.git(
        &f.repo,
        &["remote", "set-url", "origin", "https://github.com/o/r.git"],
    );
    // `auto` with a GitHub origin asks gh whether it is logged in; a 502 says nothing about
    // that, so no tracker is chosen.
    let gh = FakeGh::install(&f.env);
    gh.fail_next(
        5,
        1,
        "HTTP 502: Bad Gateway (https://api.github.com/graphql)",
    );
    f.extra_env
        .push(("PATH".into(), gh.path_env().to_string_lossy().into_owned()));
    f.start(&["--workers", "2"]);
    f.wait_workers(2);
    let boot = f.events_of(Kind::SupervisorBootSweep);
    assert_eq!(boot.len(), 1, "{}", f.dump());
    assert_eq!(
        boot[0].msg,
        "boot sweeps: precheck FAILED (tracker unavailable) — workers will run their own precheck"
    );
}
