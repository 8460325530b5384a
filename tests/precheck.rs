//! The boot suite's precheck (SPEC §5): when what every sweep takes for granted is missing,
//! no sweep runs, the outcome says which check failed, and a supervisor still starts its
//! workers, which run their own precheck.

mod fleet;
mod support;

use fleet::{FAST_TIMING, Fleet};
use support::TestEnv;
use support::fake_gh::FakeGh;

#[test]
fn sweep_outside_a_git_work_tree_fails_its_precheck_and_touches_nothing() {
    let env = TestEnv::new();
    let dir = env.path().join("not-a-repo");
    std::fs::create_dir_all(dir.join(".red/tmp/workers/w1/5-a1")).unwrap();
    let out = env
        .bin()
        .arg("--repo")
        .arg(&dir)
        .args(["--tracker", "local", "sweep"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("boot sweeps: precheck FAILED (git: ")
            && err.contains("— workers will run their own precheck"),
        "{err}"
    );
    assert!(dir.join(".red/tmp/workers/w1/5-a1").is_dir());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("boot sweeps complete"));
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
    let boot = f.events_of("supervisor.boot-sweep");
    assert_eq!(boot.len(), 1, "{}", f.dump());
    assert_eq!(
        boot[0].msg,
        "boot sweeps: precheck FAILED (tracker unavailable) — workers will run their own precheck"
    );
}
