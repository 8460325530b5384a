//! The operator's acts on a real fleet: `pause`/`resume` (no new spawns while paused,
//! in-flight workers finish) and `stop --slot` / `restart` through the control path.

use crate::support::fleet::{FAST_TIMING, Fleet, StatusExit, WAIT};
use crate::support::{fleet, stderr, stdout, wait_until};
use afk_supervisor::event_log::Kind;

/// Notes each start, then runs until asked to retire (a drain) or killed.
const NOTING_WORKER: &str = r#"
echo "$RED_AFK_SLOT $$" >> "$AFK_TEST_DIR/spawns"
while [ ! -f "$RED_AFK_RETIRE_FILE" ]; do sleep 0.1; done
exit 0
"#;

/// Notes each start, works two seconds, exits 0: with an issue open, respawned each time.
const CYCLING_WORKER: &str = r#"
echo "$RED_AFK_SLOT $$" >> "$AFK_TEST_DIR/spawns"
sleep 2
exit 0
"#;

fn spawns(f: &Fleet) -> Vec<(usize, i32)> {
    fleet::read(&f.file("spawns"))
        .lines()
        .filter_map(|l| {
            let (s, p) = l.split_once(' ')?;
            Some((s.parse().ok()?, p.parse().ok()?))
        })
        .collect()
}

/// Waits for `n` more supervisor ticks than now.
fn wait_ticks(f: &Fleet, n: usize) {
    let now = f.count(Kind::SupervisorTick);
    assert!(
        wait_until(WAIT, || f.count(Kind::SupervisorTick) >= now + n),
        "{}",
        f.dump()
    );
}

#[test]
fn an_operator_pause_holds_new_spawns_until_resumed_and_status_shows_it() {
    let mut f = Fleet::new(CYCLING_WORKER, FAST_TIMING);
    f.new_issue("work");
    f.start(&["--workers", "1"]);
    assert!(wait_until(WAIT, || spawns(&f).len() >= 2), "{}", f.dump());

    let out = f.run_cmd(&["pause", "--reason", "release freeze"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout(&out).contains("fleet paused"), "{out:?}");
    let paused = f.wait_events(Kind::FleetOperatorPaused, 1);
    assert!(paused[0].msg.contains("release freeze"), "{paused:?}");
    assert!(paused[0].msg.contains("via=cli"), "{paused:?}");
    let asked = f.events_of(Kind::ControlRequest);
    assert!(
        asked
            .iter()
            .any(|e| e.msg.contains("pause") && e.msg.ends_with("(via=cli)"))
    );

    // The worker in flight finishes; nothing new starts while the pause holds.
    assert!(
        wait_until(WAIT, || f.worker_pids().is_empty()),
        "{}",
        f.dump()
    );
    let held = spawns(&f).len();
    wait_ticks(&f, 4);
    assert_eq!(spawns(&f).len(), held, "spawned while paused: {}", f.dump());
    let j = f.status_json(StatusExit::OfHealth);
    assert_eq!(j["health"], "degraded", "{j}");
    assert!(
        j["degraded"]
            .as_array()
            .is_some_and(|d| d.contains(&"operator pause".into())),
        "{j}"
    );
    assert_eq!(j["fleet"]["operator_pause"]["reason"], "release freeze");
    assert_eq!(j["fleet"]["operator_pause"]["via"], "cli");
    let plain = stdout(&f.run_cmd(&["status"]));
    assert!(
        plain.contains("paused by the operator: release freeze (via=cli), until resumed"),
        "{plain}"
    );

    let out = f.run_cmd(&["resume"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let resumed = f.wait_events(Kind::FleetOperatorResumed, 1);
    assert!(resumed[0].msg.contains("via=cli"), "{resumed:?}");
    assert!(wait_until(WAIT, || spawns(&f).len() > held), "{}", f.dump());
    assert!(f.status_json(StatusExit::OfHealth)["fleet"]["operator_pause"].is_null());
    // A second resume has nothing to lift; a pause in the past is refused.
    assert!(stdout(&f.run_cmd(&["resume"])).contains("no operator pause"));
    let out = f.run_cmd(&["pause", "--until", "2001-01-01T00:00:00Z"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("in the past"), "{out:?}");
    let out = f.run_cmd(&["pause", "--until", "soon"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
}

/// A pause written while no fleet runs holds the next start: its first spawns wait for the
/// resume, and then every slot starts, as the start would have started it.
#[test]
fn a_pause_written_without_a_fleet_holds_the_next_start_until_resumed() {
    let mut f = Fleet::new(CYCLING_WORKER, FAST_TIMING);
    f.new_issue("work");
    let out = f.run_cmd(&["pause", "--reason", "before the start"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout(&out).contains("holds for the next start"), "{out:?}");
    f.start(&["--workers", "2"]);
    let paused = f.wait_events(Kind::FleetOperatorPaused, 1);
    assert!(paused[0].msg.contains("before the start"), "{paused:?}");
    // The pause is read before the start's one batch of spawns, whose records are written
    // with it: none is there, and none comes over the ticks after.
    wait_ticks(&f, 3);
    assert_eq!(f.count(Kind::SlotSpawn), 0, "{}", f.dump());
    assert!(spawns(&f).is_empty(), "{}", f.dump());

    let out = f.run_cmd(&["resume"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    f.wait_events(Kind::FleetOperatorResumed, 1);
    // Every slot starts, as the start would have started it, though one issue is open.
    let both = || {
        let s = spawns(&f);
        s.iter().any(|(i, _)| *i == 0) && s.iter().any(|(i, _)| *i == 1)
    };
    assert!(wait_until(WAIT, both), "{}", f.dump());
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
}

/// A fleet held by a pause from its start and then stopped spawned nothing: the slot logs
/// opened for its first spawns are taken back at its end, with the day's folder made for
/// them, so `logs` has no empty day to show.
#[test]
fn a_fleet_paused_from_its_start_and_stopped_leaves_no_slot_logs() {
    let mut f = Fleet::new(CYCLING_WORKER, FAST_TIMING);
    let out = f.run_cmd(&["pause", "--reason", "before the start"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    f.start(&["--workers", "3"]);
    f.wait_events(Kind::FleetOperatorPaused, 1);
    wait_ticks(&f, 2);
    assert_eq!(f.count(Kind::SlotSpawn), 0, "{}", f.dump());
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
    assert!(f.wait_exit().code().is_some());
    let days: Vec<_> = match std::fs::read_dir(f.layout.logs()) {
        Ok(d) => d.map(|e| e.unwrap().path()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{e}"),
    };
    assert!(days.is_empty(), "left: {days:?}\n{}", f.dump());
}

#[test]
fn stop_slot_empties_one_slot_until_restart_and_restart_replaces_a_worker() {
    let mut f = Fleet::new(NOTING_WORKER, FAST_TIMING);
    // No fleet: refused, nothing written.
    let out = f.run_cmd(&["restart", "0"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("no supervisor running"), "{out:?}");
    f.start(&["--workers", "2"]);
    f.wait_workers(2);

    let out = f.run_cmd(&["stop", "--slot", "1", "--shrink-mode", "hard-kill"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout(&out).contains("slot 1: stop worker"), "{out:?}");
    assert!(
        wait_until(WAIT, || f.worker_pids().len() == 1),
        "{}",
        f.dump()
    );
    assert!(wait_until(WAIT, || {
        f.status_json(StatusExit::OfHealth)["slots"]
            .as_array()
            .is_some_and(|s| s.iter().any(|r| r["slot"] == 1 && r["state"] == "stopped"))
    }));
    wait_ticks(&f, 3);
    assert_eq!(
        spawns(&f).iter().filter(|(s, _)| *s == 1).count(),
        1,
        "slot 1 respawned: {}",
        f.dump()
    );
    let stopped = f.events_of(Kind::SlotStopped);
    assert!(
        stopped.iter().any(|e| e.msg.contains("via=cli")),
        "{stopped:?}"
    );

    let out = f.run_cmd(&["restart", "1"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        wait_until(WAIT, || f.worker_pids().len() == 2),
        "{}",
        f.dump()
    );

    // A hard restart of a running slot: a new worker, no death counted.
    let before: Vec<i32> = spawns(&f)
        .iter()
        .filter(|(s, _)| *s == 0)
        .map(|(_, p)| *p)
        .collect();
    let out = f.run_cmd(&["restart", "0"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(wait_until(WAIT, || spawns(&f)
        .iter()
        .filter(|(s, _)| *s == 0)
        .count()
        > before.len()));
    assert_eq!(
        f.status_json(StatusExit::OfHealth)["fleet"]["deaths"],
        0,
        "{}",
        f.dump()
    );

    // A drained stop: the worker is asked to retire and the slot stays empty.
    let out = f.run_cmd(&["stop", "--slot", "0"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout(&out).contains("finishes its issue"), "{out:?}");
    assert!(
        wait_until(WAIT, || f.worker_pids().len() == 1),
        "{}",
        f.dump()
    );

    // Out of range: a usage error naming the fleet's slots.
    let out = f.run_cmd(&["restart", "5"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("slot 5 is not in the fleet (target 2"),
        "{out:?}"
    );
    let out = f.run_cmd(&["stop", "--slot", "9"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
}

/// A tick far longer than any wait below: what happens must come from the control signal
/// `pause`, `resume` and `scale` send, never from the next tick.
const SLOW_TICK: &str = "[timing]\ntick_s = 120\nfast_death_s = 1\ncircuit_k = 3\n\
circuit_window_s = 60\nhalf_open_base_s = 1\nhalf_open_cap_s = 4\nstop_grace_s = 2\n\
stall_s = 600\nstall_kill_s = 1200\n";

/// Well under [`SLOW_TICK`]'s tick, generous for a loaded CI box.
const AT_ONCE: std::time::Duration = std::time::Duration::from_secs(20);

/// Notes each start, then works until the test lets this worker go (`release-<pid>`).
const HELD_WORKER: &str = r#"
echo "$RED_AFK_SLOT $$" >> "$AFK_TEST_DIR/spawns"
while [ ! -f "$AFK_TEST_DIR/release-$$" ]; do sleep 0.1; done
exit 0
"#;

/// Issue 52, items 1 and 2: `pause` and `resume` take effect on their signal (not at the
/// next tick's queue check), and a `scale` up while paused adds an idle slot that starts
/// nothing until the resume.
#[test]
fn pause_resume_and_a_scale_while_paused_act_on_their_signal_not_the_next_tick() {
    let mut f = Fleet::new(HELD_WORKER, SLOW_TICK);
    f.new_issue("one");
    f.new_issue("two");
    f.start(&["--workers", "1"]);
    assert!(wait_until(WAIT, || spawns(&f).len() == 1), "{}", f.dump());
    // The start is behind us; its first tick is two minutes away.
    assert!(
        wait_until(WAIT, || f.state().is_some_and(|s| s.slots.busy == 1)),
        "{}",
        f.dump()
    );

    let out = f.run_cmd(&["pause", "--reason", "lunch"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        wait_until(AT_ONCE, || f.count(Kind::FleetOperatorPaused) == 1),
        "the pause waited for a tick: {}",
        f.dump()
    );

    // Scaling up while paused: the new slot exists and idles; nothing is spawned in it.
    let out = f.run_cmd(&["scale", "2"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        stdout(&out).contains("paused by the operator until resumed (lunch, via=cli)"),
        "{out:?}"
    );
    let j = f.status_json(StatusExit::OfHealth);
    assert_eq!(j["fleet"]["target"], 2, "{j}");
    assert_eq!(j["slots"][1]["state"], "idle", "{j}");
    assert!(j["slots"][1]["pid"].is_null(), "{j}");
    // The one worker in flight finishes; its slot is not respawned while paused.
    let (_, first) = spawns(&f)[0];
    std::fs::write(f.file(&format!("release-{first}")), "").unwrap();
    assert!(
        wait_until(WAIT, || f.worker_pids().is_empty()),
        "{}",
        f.dump()
    );
    assert_eq!(spawns(&f).len(), 1, "spawned while paused: {}", f.dump());
    assert_eq!(f.count(Kind::SlotSpawn), 1, "{}", f.dump());

    let out = f.run_cmd(&["resume"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let both = || {
        let s = spawns(&f);
        s.iter().filter(|(i, _)| *i == 0).count() == 2 && s.iter().any(|(i, _)| *i == 1)
    };
    assert!(
        wait_until(AT_ONCE, both),
        "the resume waited for a tick: {}",
        f.dump()
    );
    assert_eq!(f.count(Kind::FleetOperatorResumed), 1, "{}", f.dump());
    assert_eq!(
        f.count(Kind::SupervisorTick),
        0,
        "a tick came: {}",
        f.dump()
    );
    for (_, pid) in spawns(&f) {
        let _ = std::fs::write(f.file(&format!("release-{pid}")), "");
    }
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
}

/// Issue 52, item 5: work waiting that no slot can take (the one slot stopped) is a
/// degraded fleet: exit 1 and the reason, until a slot can take it again.
#[test]
fn status_is_degraded_while_work_waits_and_every_slot_is_stopped() {
    let mut f = Fleet::new(NOTING_WORKER, FAST_TIMING);
    f.new_issue("work");
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    let out = f.run_cmd(&["stop", "--slot", "0", "--shrink-mode", "hard-kill"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let mut j = serde_json::Value::Null;
    let stopped = wait_until(WAIT, || {
        j = f.status_json(StatusExit::Any);
        j["slots"][0]["state"] == "stopped" && j["fleet"]["ready_for_agent"] == 1
    });
    assert!(stopped, "{j}\n{}", f.dump());
    let j = f.status_json(StatusExit::Is(1));
    assert_eq!(j["health"], "degraded", "{j}");
    assert_eq!(
        j["degraded"],
        serde_json::json!([
            "work waiting: 1 ready-for-agent, no slot can take it (slot 0 stopped)"
        ]),
        "{j}"
    );
    let out = f.run_cmd(&["status"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stdout(&out).lines().last().is_some_and(|l| l
            == "degraded: work waiting: 1 ready-for-agent, no slot can take it (slot 0 stopped)"),
        "{out:?}"
    );
    let out = f.run_cmd(&["restart", "0"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        wait_until(WAIT, || f.status_json(StatusExit::Any)["health"]
            == "healthy"),
        "{}",
        f.dump()
    );
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
}
