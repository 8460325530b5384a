//! Idling on an empty queue and un-idling when work appears, with the real local tracker.

use std::fs;

use crate::support::fleet::{FAST_TIMING, Fleet};
use crate::support::{self, fleet};
use afk_supervisor::event_log::Kind;

/// A worker that claims the first `ready-for-agent` issue (an exclusive `mkdir`, then the
/// label `running`), notes it, and exits 0, as a worker with nothing more to do does.
const CLAIMING_WORKER: &str = r#"
n=$("$AFK_TEST_BIN" issue list --label ready-for-agent 2>/dev/null | head -1 | sed -n 's/^#\([0-9]*\) .*/\1/p')
if [ -n "$n" ] && mkdir "$AFK_TEST_DIR/claim-$n" 2>/dev/null; then
  "$AFK_TEST_BIN" issue label "$n" --remove ready-for-agent --add running 2>/dev/null
  echo "$n" >> "$AFK_TEST_DIR/worked"
fi
exit 0
"#;

fn claiming_fleet() -> Fleet {
    claiming_fleet_with("")
}

/// A claiming fleet on the local tracker; `extra_timing` is appended to `[timing]`.
fn claiming_fleet_with(extra_timing: &str) -> Fleet {
    let mut f = Fleet::new(
        CLAIMING_WORKER,
        &format!("[tracker]\nkind = \"local\"\n\n{FAST_TIMING}{extra_timing}"),
    );
    f.extra_env.push((
        "AFK_TEST_BIN".into(),
        env!("CARGO_BIN_EXE_afk-supervisor").into(),
    ));
    f
}

#[test]
fn slots_idle_on_an_empty_queue_and_wake_one_per_ready_issue() {
    let mut f = claiming_fleet();
    f.start(&["--workers", "2"]);
    let idle = f.wait_events(Kind::SlotIdle, 2);
    assert!(
        idle[0]
            .msg
            .contains("idle: worker exited 0 and no ready-for-agent issue is open"),
        "{}",
        idle[0].msg
    );
    // Idle slots stay idle while the queue is empty.
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    assert_eq!(f.count(Kind::SlotSpawn), 2, "{}", f.dump());
    let s = f.state().unwrap();
    assert_eq!(s.slots.busy, 0);
    assert!(s.slot_detail.iter().all(|d| d.state == "idle"));
    assert_eq!(s.ready_for_agent, Some(0));

    // One ready issue wakes one slot; its worker claims it and the slot idles again.
    f.new_issue("first");
    let unidle = f.wait_events(Kind::SlotUnidle, 1);
    assert!(
        unidle[0].msg.ends_with("un-idled: ready-for-agent=1"),
        "{}",
        unidle[0].msg
    );
    f.wait_events(Kind::SlotIdle, 3);
    assert_eq!(fleet::read(&f.file("worked")), "1\n");
    assert_eq!(f.count(Kind::SlotSpawn), 3);

    // Two ready issues wake both slots; each issue is worked once.
    f.new_issue("second");
    f.new_issue("third");
    assert!(
        support::wait_until(fleet::WAIT, || {
            fleet::read(&f.file("worked")).lines().count() == 3
                && f.state()
                    .is_some_and(|s| s.slots.busy == 0 && s.ready_for_agent == Some(0))
        }),
        "{}",
        f.dump()
    );
    let mut worked: Vec<String> = fleet::read(&f.file("worked"))
        .lines()
        .map(String::from)
        .collect();
    worked.sort();
    assert_eq!(worked, ["1", "2", "3"]);
    // Every spawn after the first two was an un-idle.
    let unidles = f.events_of(Kind::SlotUnidle);
    assert!(unidles.len() >= 3, "{}", f.dump());
    assert_eq!(f.count(Kind::SlotSpawn), 2 + unidles.len(), "{}", f.dump());
    // No clean exit was counted as a death.
    assert!(
        f.events_of(Kind::SupervisorTick)
            .iter()
            .all(|e| e.msg.contains(" deaths=0 "))
    );
}

#[test]
fn a_tracker_failure_neither_idles_nor_wakes_anything() {
    let mut f = claiming_fleet();
    f.start(&["--workers", "1"]);
    f.wait_events(Kind::SlotIdle, 1);
    // Break the local store: its directory becomes a plain file. (Reads never create the
    // store, so on an empty queue it may not exist yet.)
    let store = f.layout.tracker_dir();
    let aside = store.with_file_name("tracker.aside");
    fs::create_dir_all(&store).unwrap();
    fs::rename(&store, &aside).unwrap();
    fs::write(&store, "not a directory").unwrap();
    let err = f.wait_events(Kind::TrackerError, 1);
    assert!(
        err[0]
            .msg
            .starts_with("ready-for-agent check failed, slot states kept: "),
        "{}",
        err[0].msg
    );
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 3);
    // Logged once, nothing woken, the slot still idle.
    assert_eq!(f.count(Kind::TrackerError), 1, "{}", f.dump());
    assert_eq!(f.count(Kind::SlotSpawn), 1);
    assert_eq!(f.state().unwrap().slot_detail[0].state, "idle");
    // Repaired, with work: the slot wakes.
    fs::remove_file(&store).unwrap();
    fs::rename(&aside, &store).unwrap();
    f.new_issue("after the outage");
    f.wait_events(Kind::SlotUnidle, 1);
    f.wait_events(Kind::SlotIdle, 2);
    assert_eq!(fleet::read(&f.file("worked")), "1\n");
    let recovered = f.wait_events(Kind::TrackerError, 2);
    assert!(
        recovered[1]
            .msg
            .starts_with("ready-for-agent check works again")
    );
}

/// The supervisor's own unblock belt: a blocker closed by hand while the fleet runs promotes
/// its dependent, which wakes an idle slot and gets worked, with no restart and no boot suite.
#[test]
fn the_belt_promotes_a_dependent_while_the_fleet_runs() {
    let mut f = claiming_fleet_with("unblock_interval_s = 1\n");
    let out = f.run_cmd(&["issue", "new", "--title", "blocker", "--no-label"]);
    assert!(out.status.success(), "{out:?}");
    let out = f.run_cmd(&[
        "issue",
        "new",
        "--title",
        "dependent",
        "--label",
        "blocked:dependency",
        "--label",
        "req:1",
    ]);
    assert!(out.status.success(), "{out:?}");
    f.start(&["--workers", "1"]);
    f.wait_events(Kind::SlotIdle, 1);
    // The belt runs while #1 is open and promotes nothing (the slot-log sweep also logs
    // as supervisor.periodic, at start-up).
    let belt_ran = support::wait_until(std::time::Duration::from_secs(30), || {
        f.events_of(Kind::SupervisorPeriodic)
            .iter()
            .any(|e| e.msg.starts_with("unblock-belt: "))
    });
    assert!(belt_ran, "{}", f.dump());
    assert!(!fs::exists(f.file("worked")).unwrap());

    let out = f.run_cmd(&["issue", "close", "1"]);
    assert!(out.status.success(), "{out:?}");
    let promoted = support::wait_until(std::time::Duration::from_secs(30), || {
        f.events_of(Kind::SupervisorPeriodic)
            .iter()
            .any(|e| e.msg.contains("unblocked=1 (#2)"))
    });
    assert!(promoted, "{}", f.dump());
    // The belt is named once, by the task's name (issue 52, item 12).
    let said: Vec<String> = f
        .events_of(Kind::SupervisorPeriodic)
        .into_iter()
        .map(|e| e.msg)
        .filter(|m| m.contains("unblocked="))
        .collect();
    assert!(
        said.iter().any(|m| m == "unblock-belt: unblocked=1 (#2)"),
        "{said:?}"
    );
    f.wait_events(Kind::SlotUnidle, 1);
    f.wait_events(Kind::SlotIdle, 2);
    assert_eq!(fleet::read(&f.file("worked")), "2\n");
    let shown = f.run_cmd(&["issue", "show", "2", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let comments: Vec<&str> = v["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["body"].as_str().unwrap())
        .collect();
    assert_eq!(
        comments,
        vec!["🤖 /afk unblocked: all dependencies closed (#1)."]
    );
    // Exactly one boot suite in the supervisor's life.
    assert_eq!(f.count(Kind::SupervisorBootSweep), 1);
}

/// The built-in worker (`worker --once`) in every slot, with an agent that never ends.
fn builtin_worker_fleet() -> Fleet {
    let mut f = Fleet::new(
        "exec \"$AFK_TEST_BIN\" --repo \"$PWD\" worker --once\n",
        &format!(
            "[agent]\ncommand = [\"sleep\", \"600\"]\n\n[tracker]\nkind = \"local\"\n\n{FAST_TIMING}"
        ),
    );
    f.extra_env.push((
        "AFK_TEST_BIN".into(),
        env!("CARGO_BIN_EXE_afk-supervisor").into(),
    ));
    f
}

/// An issue that is `ready-for-agent` but blocked is not work: the built-in worker skips it
/// and exits 0, and the supervisor must not count it and respawn that worker forever.
#[test]
fn a_ready_but_blocked_issue_does_not_respawn_workers() {
    let mut f = builtin_worker_fleet();
    let out = f.run_cmd(&[
        "issue",
        "new",
        "--title",
        "blocked",
        "--label",
        "ready-for-agent",
        "--label",
        "blocked:dependency",
        "--label",
        "req:99",
    ]);
    assert!(out.status.success(), "{out:?}");
    f.start(&["--workers", "2"]);
    f.wait_events(Kind::SlotIdle, 2);
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 4);
    assert_eq!(f.count(Kind::SlotSpawn), 2, "{}", f.dump());
    assert_eq!(f.state().unwrap().ready_for_agent, Some(0));

    // A claimable issue still wakes exactly one slot, whose worker claims it.
    f.new_issue("real work");
    f.wait_events(Kind::SlotUnidle, 1);
    assert!(
        support::wait_until(fleet::WAIT, || f
            .labels_of(2)
            .contains(&"running".to_string())),
        "{}",
        f.dump()
    );
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 3);
    assert_eq!(f.count(Kind::SlotSpawn), 3, "{}", f.dump());
    assert_eq!(f.labels_of(1).len(), 3, "the blocked issue is untouched");
}

/// Whatever the count says, a worker that exits 0 at once with work apparently queued found
/// nothing it could claim: the slot idles until the queue changes, it does not loop.
#[test]
fn a_worker_that_claims_nothing_idles_its_slot_until_the_queue_changes() {
    let mut f = Fleet::new(
        "exit 0\n",
        &format!("[tracker]\nkind = \"local\"\n\n{FAST_TIMING}"),
    );
    f.new_issue("never taken");
    f.start(&["--workers", "2"]);
    let nothing = |f: &Fleet| {
        f.events_of(Kind::SlotIdle)
            .into_iter()
            .filter(|e| e.msg.contains("nothing claimable"))
            .count()
    };
    assert!(
        support::wait_until(fleet::WAIT, || nothing(&f) >= 2),
        "{}",
        f.dump()
    );
    let spawns = f.count(Kind::SlotSpawn);
    // At most one extra try per slot (a worker that ended before the first queue check).
    assert!(spawns <= 4, "{}", f.dump());
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 4);
    assert_eq!(f.count(Kind::SlotSpawn), spawns, "{}", f.dump());
    let idles = f.events_of(Kind::SlotIdle);
    let msg = &idles
        .iter()
        .find(|e| e.msg.contains("nothing claimable"))
        .unwrap()
        .msg;
    assert!(
        msg.contains("while ready-for-agent=1: nothing claimable, waiting for the queue to change"),
        "{msg}"
    );

    // A new issue changes the queue: the slots wake, find nothing again, and idle again.
    f.new_issue("also never taken");
    f.wait_events(Kind::SlotUnidle, 1);
    assert!(
        support::wait_until(fleet::WAIT, || nothing(&f) >= 3),
        "{}",
        f.dump()
    );
    let after = f.count(Kind::SlotSpawn);
    assert!(after > spawns && after <= spawns + 2, "{}", f.dump());
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 3);
    assert_eq!(f.count(Kind::SlotSpawn), after, "{}", f.dump());
}

/// Workers that finish an issue quicker than `fast_death_s`, while more issues wait: each
/// one's quick clean exit changed the queue it started with, so the slot is respawned until
/// the queue is drained (not idled as "nothing claimable"), even when a queue check ran
/// while it worked.
#[test]
fn quick_workers_drain_the_whole_queue() {
    let worker = CLAIMING_WORKER.replace("exit 0", "sleep 1.5\nexit 0");
    let mut f = Fleet::new(
        &worker,
        "[tracker]\nkind = \"local\"\n\n[timing]\ntick_s = 1\nfast_death_s = 30\n\
         stop_grace_s = 2\nstall_s = 600\nstall_kill_s = 1200\n",
    );
    f.extra_env.push((
        "AFK_TEST_BIN".into(),
        env!("CARGO_BIN_EXE_afk-supervisor").into(),
    ));
    for t in ["one", "two", "three"] {
        f.new_issue(t);
    }
    f.start(&["--workers", "1"]);
    let drained = support::wait_until(std::time::Duration::from_secs(60), || {
        fs::read_to_string(f.file("worked")).is_ok_and(|w| w.lines().count() == 3)
    });
    assert!(drained, "{}", f.dump());
    let mut worked: Vec<String> = fleet::read(&f.file("worked"))
        .lines()
        .map(String::from)
        .collect();
    worked.sort();
    assert_eq!(worked, vec!["1", "2", "3"]);
    assert!(
        f.events_of(Kind::SlotIdle)
            .iter()
            .all(|e| !e.msg.contains("nothing claimable")),
        "{}",
        f.dump()
    );
}

/// A worker that found the tracker unavailable exits 69 (`docs/SPEC.md` §6): like 75, not a
/// death. With work queued, every queue check wakes the slot and the worker exits 69 again
/// at once, far quicker than `fast_death_s`, yet no tick counts a death and the circuit
/// (3 fast deaths) never trips.
#[test]
fn a_worker_that_finds_the_tracker_unavailable_is_no_death_and_trips_no_circuit() {
    let mut f = Fleet::new(
        "exit 69\n",
        &format!("[tracker]\nkind = \"local\"\n\n{FAST_TIMING}"),
    );
    f.new_issue("waiting for the tracker");
    f.start(&["--workers", "1"]);
    let unavailable = |f: &Fleet| {
        f.events_of(Kind::SlotIdle)
            .into_iter()
            .filter(|e| {
                e.msg
                    .contains("found the tracker unavailable (exit 69); not a death")
            })
            .count()
    };
    assert!(
        support::wait_until(fleet::WAIT, || unavailable(&f) >= 5),
        "{}",
        f.dump()
    );
    assert!(f.count(Kind::SlotSpawn) >= 5, "{}", f.dump());
    assert_eq!(f.count(Kind::CircuitTrip), 0, "{}", f.dump());
    let ticks = f.events_of(Kind::SupervisorTick);
    assert!(!ticks.is_empty(), "{}", f.dump());
    for t in &ticks {
        assert!(t.msg.contains(" deaths=0 "), "{}", t.msg);
    }
}
