//! A dead worker's claims: released and their issues given back once its group is gone.

use std::fs;

use afk_supervisor::sweeps::orphans::RESTORE_COMMENT;
use nix::sys::signal::Signal;

use crate::support::fleet::{FAST_TIMING, Fleet};
use crate::support::{self, fleet};
use afk_supervisor::event_log::Kind;

/// The first worker claims issue 1 the way the built-in worker does (an exclusive `mkdir`,
/// its own pid in `claims/1/pid`, the label `running`), notes its pid, then either waits to
/// be killed or exits with `$AFK_TEST_EXIT`. Later workers only wait.
const CLAIM_THEN_WAIT: &str = r#"
if mkdir "$AFK_TEST_DIR/first" 2>/dev/null; then
  mkdir -p .red/tmp/claims/1 ".red/tmp/workers/$RED_AFK_WORKER_ID/1-a1"
  echo $$ > .red/tmp/claims/1/pid
  "$AFK_TEST_BIN" issue label 1 --remove ready-for-agent --add running || exit 9
  echo $$ > "$AFK_TEST_DIR/claimer"
  if [ -n "$AFK_TEST_EXIT" ]; then exit "$AFK_TEST_EXIT"; fi
fi
exec sleep 600
"#;

fn fleet_with_issue() -> Fleet {
    fleet_with_issue_and(FAST_TIMING)
}

/// One `ready-for-agent` issue on the local tracker and a fleet whose workers claim it.
fn fleet_with_issue_and(timing: &str) -> Fleet {
    let f = Fleet::new(
        CLAIM_THEN_WAIT,
        &format!("[tracker]\nkind = \"local\"\n\n{timing}"),
    )
    .with_bin();
    f.new_issue("work");
    f
}

fn claimer(f: &Fleet) -> i32 {
    assert!(
        support::wait_until(fleet::WAIT, || fleet::read(&f.file("claimer"))
            .trim()
            .parse::<i32>()
            .is_ok()),
        "{}",
        f.dump()
    );
    fleet::read(&f.file("claimer")).trim().parse().unwrap()
}

#[test]
fn a_killed_workers_claim_is_released_and_its_issue_restored() {
    let mut f = fleet_with_issue();
    f.start(&["--workers", "1"]);
    let pid = claimer(&f);
    assert_eq!(f.labels_of(1), ["running"]);
    fleet::kill(pid, Signal::SIGKILL);

    let restored = f.wait_events(Kind::SlotRestore, 1);
    assert_eq!(restored[0].issue, Some(1));
    assert_eq!(restored[0].pid, Some(i64::from(pid)));
    assert!(
        restored[0]
            .msg
            .ends_with("died holding #1: running -> ready-for-agent, claim removed"),
        "{}",
        restored[0].msg
    );
    assert_eq!(f.labels_of(1), ["ready-for-agent"]);
    assert_eq!(f.comments_of(1), [RESTORE_COMMENT]);
    assert!(!f.layout.claims().join("1").exists());
    // Nothing is restored twice, whatever happens next.
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    assert_eq!(f.count(Kind::SlotRestore), 1, "{}", f.dump());
    assert_eq!(f.comments_of(1).len(), 1);
    // The dead worker's attempt ends in the issue's ledger, once.
    let ledger = afk_supervisor::ledger::read(&f.layout, 1).unwrap();
    let outcomes: Vec<_> = ledger.iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, [afk_supervisor::ledger::Outcome::WorkerDied]);
}

#[test]
fn a_clean_exit_leaves_its_claim_alone() {
    let mut f = fleet_with_issue();
    f.extra_env.push(("AFK_TEST_EXIT".into(), "0".into()));
    f.start(&["--workers", "1"]);
    claimer(&f);
    f.wait_events(Kind::SlotExit, 1);
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 3);
    assert_eq!(f.count(Kind::SlotRestore), 0, "{}", f.dump());
    assert_eq!(f.labels_of(1), ["running"]);
    assert!(f.comments_of(1).is_empty());
    assert!(fs::exists(f.layout.claims().join("1/pid")).unwrap());
}

/// A claim naming another process (pid of a live stranger) is not the dead worker's.
#[test]
fn a_crash_releases_only_the_dead_workers_claims() {
    let mut f = fleet_with_issue();
    let out = f.run_cmd(&["issue", "new", "--title", "other", "--label", "running"]);
    assert!(out.status.success(), "{out:?}");
    let other = f.layout.claims().join("2");
    fs::create_dir_all(&other).unwrap();
    // The test process itself: live, and not the worker.
    fs::write(other.join("pid"), format!("{}\n", std::process::id())).unwrap();
    f.extra_env.push(("AFK_TEST_EXIT".into(), "3".into()));
    f.start(&["--workers", "1"]);
    claimer(&f);
    f.wait_events(Kind::SlotRestore, 1);
    assert_eq!(f.labels_of(1), ["ready-for-agent"]);
    assert_eq!(f.labels_of(2), ["running"]);
    assert!(other.join("pid").exists());
    assert!(f.comments_of(2).is_empty());
}

/// A worker the supervisor kills for making no progress ends its attempt `stalled` (a
/// failure), not `worker-died`, when its issue is restored.
#[test]
fn a_stall_killed_workers_attempt_ends_stalled_in_the_ledger() {
    let timing = FAST_TIMING.replace(
        "stall_s = 600\nstall_kill_s = 1200",
        "stall_s = 1\nstall_kill_s = 2",
    );
    let mut f = fleet_with_issue_and(&timing);
    f.start(&["--workers", "1"]);
    claimer(&f);
    f.wait_events(Kind::SlotStallKill, 1);
    let restored = f.wait_events(Kind::SlotRestore, 1);
    assert_eq!(restored[0].issue, Some(1));
    // The attempt was marked before the signal, for a worker that gives its issue back on
    // SIGTERM (the built-in one) to record `stalled` itself.
    let marked: Vec<_> = afk_supervisor::layout::WORKER_NAMESPACES
        .iter()
        .flat_map(|ns| {
            fs::read_dir(f.layout.worker_namespace(ns))
                .into_iter()
                .flatten()
        })
        .flatten()
        .map(|w| {
            w.path()
                .join("1-a1")
                .join(afk_supervisor::attempt_state::STALL_KILLED_FILE)
        })
        .filter(|m| m.is_file())
        .collect();
    assert_eq!(marked.len(), 1, "{}", f.dump());
    let ledger = afk_supervisor::ledger::read(&f.layout, 1).unwrap();
    let outcomes: Vec<_> = ledger.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [afk_supervisor::ledger::Outcome::Stalled],
        "{}",
        f.dump()
    );
    assert!(afk_supervisor::ledger::Outcome::Stalled.is_failure());
}

/// A worker stopped by a hard-kill shrink is the operator's doing, not the issue's failure:
/// its issue is restored with `given-back` in the ledger, which never counts towards
/// quarantine.
#[test]
fn a_hard_kill_shrinks_workers_attempt_ends_given_back_in_the_ledger() {
    let mut f = fleet_with_issue();
    f.start(&["--workers", "1"]);
    let pid = claimer(&f);
    assert_eq!(f.labels_of(1), ["running"]);
    let out = f.run_cmd(&["scale", "0", "--shrink-mode", "hard-kill"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{}", f.dump());
    f.wait_events(Kind::SlotHardKill, 1);
    let restored = f.wait_events(Kind::SlotRestore, 1);
    assert_eq!(restored[0].issue, Some(1));
    assert_eq!(restored[0].pid, Some(i64::from(pid)));
    assert_eq!(f.labels_of(1), ["ready-for-agent"]);
    assert!(!f.layout.claims().join("1").exists());
    let ledger = afk_supervisor::ledger::read(&f.layout, 1).unwrap();
    let outcomes: Vec<_> = ledger.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [afk_supervisor::ledger::Outcome::GivenBack],
        "{}",
        f.dump()
    );
    assert!(!afk_supervisor::ledger::Outcome::GivenBack.is_failure());
}
