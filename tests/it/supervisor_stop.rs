//! A stop is only reported once nothing of the fleet is left.

use std::fs;
use std::process::{Command, Stdio};

use afk_supervisor::lanes::state_file::{self, SlotPid};
use afk_supervisor::pidfile;
use afk_supervisor::process;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT, alive};
use crate::support::{fleet, wait_until};
use afk_supervisor::event_log::Kind;

/// Leaves a descendant in a session of its own (out of the worker's process group, so a
/// group kill misses it), notes its pid, and waits.
const SETSID_WORKER: &str = r#"
setsid sh -c 'echo $$ > "$AFK_TEST_DIR/escaped-$RED_AFK_SLOT"; exec sleep 1000' &
exec sleep 600
"#;

#[test]
fn stop_leaves_no_descendant_that_left_its_workers_group() {
    let mut f = Fleet::new(SETSID_WORKER, FAST_TIMING);
    let sup = f.start(&["--workers", "1"]);
    f.wait_workers(1);
    let file = f.file("escaped-0");
    assert!(wait_until(WAIT, || fleet::read(&file)
        .trim()
        .parse::<i32>()
        .is_ok()));
    let escaped: i32 = fleet::read(&file).trim().parse().unwrap();
    let p = process::read(escaped).unwrap();
    assert_eq!(p.sid, escaped, "the descendant leads its own session");

    let out = f.run_cmd(&["stop"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{}", f.dump());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("fleet stopped (supervisor pid={sup})")
    );
    assert_eq!(f.wait_exit().code(), Some(143));
    assert!(
        !alive(escaped),
        "escaped descendant {escaped} survived the stop"
    );
    assert!(f.tagged().is_empty(), "still alive: {:?}", f.tagged());
    assert!(
        f.events_of(Kind::SupervisorStop)
            .iter()
            .any(|e| e.msg.contains("left their worker's process group")),
        "{}",
        f.dump()
    );
}

/// `stop` checks the workers recorded in `state.toon` itself: a supervisor that exits while
/// one of them lives on is not "fleet stopped". The supervisor's pid file here names a
/// plain process that simply dies on SIGTERM without touching anything.
#[test]
fn stop_reports_recorded_workers_still_alive() {
    let f = Fleet::new("exit 0\n", FAST_TIMING);
    let spawn = || {
        Command::new("sleep")
            .arg("600")
            .env("AFK_TEST_TAG", &f.tag)
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut sup = spawn();
    let mut worker = spawn();
    let (sup_pid, worker_pid) = (sup.id() as i32, worker.id() as i32);
    fs::create_dir_all(f.layout.supervisor_lane()).unwrap();
    pidfile::write_pid_file(&f.layout.supervisor_pid(), sup_pid).unwrap();
    let state = state_file::StateFile {
        ts: "2026-01-01T00:00:00.000Z".into(),
        epoch: 0,
        pid: sup_pid,
        pid_start_time: pidfile::process_start_time(sup_pid).unwrap(),
        target: 1,
        runner: "claude".into(),
        shrink_mode: Default::default(),
        ready_for_agent: None,
        ready_for_agent_unknown: None,
        slots: Default::default(),
        slot_pids: vec![SlotPid {
            slot: 0,
            pid: worker_pid,
            start: pidfile::process_start_time(worker_pid).unwrap(),
        }],
        churn: Default::default(),
        last_progress_epoch: 0,
        slot_detail: Vec::new(),
        paused: None,
        fleet_circuit: None,
        quarantined: None,
        boot_suite: None,
        tracker_kind: None,
        held: None,
        spend: None,
        isolation: None,
    };
    state_file::write(&f.layout.state_file(), &state).unwrap();

    let out = f.run_cmd(&["stop", "--timeout", "20"]);
    let _ = sup.wait();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!(
            "afk-supervisor: fleet not stopped: supervisor pid={sup_pid} gone, workers still alive: [{worker_pid}]"
        )
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("fleet stopped"));
    assert!(alive(worker_pid));

    // `--force` kills it and says so; nothing is left.
    let out = f.run_cmd(&["stop", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "fleet stopped (no supervisor, workers killed=1)"
    );
    let _ = worker.wait();
    assert!(!alive(worker_pid));
}

/// The first worker leaves a `setsid` descendant and dies; the fleet keeps running.
const ESCAPE_THEN_DIE: &str = r#"
if mkdir "$AFK_TEST_DIR/first" 2>/dev/null; then
  setsid sh -c 'echo $$ > "$AFK_TEST_DIR/escaped"; exec sleep 1000' &
  while [ ! -s "$AFK_TEST_DIR/escaped" ]; do sleep 0.05; done
  exit 3
fi
exec sleep 600
"#;

#[test]
fn a_dead_workers_escaped_descendants_are_ended_while_the_fleet_runs() {
    let mut f = Fleet::new(ESCAPE_THEN_DIE, FAST_TIMING);
    f.start(&["--workers", "1"]);
    f.wait_events(Kind::SlotExit, 1);
    let escaped: i32 = fleet::read(&f.file("escaped")).trim().parse().unwrap();
    assert!(
        wait_until(WAIT, || !alive(escaped)),
        "escaped descendant {escaped} outlived its worker\n{}",
        f.dump()
    );
    // Logged after the SIGTERM is sent: the descendant may be gone before the line is.
    let ev = f.wait_event_with(Kind::SupervisorError, "left processes outside its group");
    assert!(
        ev.msg.ends_with(&format!("terminating [{escaped}]")),
        "{}",
        ev.msg
    );
    // The respawned worker is untouched.
    let live = f.wait_workers(1);
    assert!(alive(live[0]));
}

/// A repo with no `origin`: the boot sweeps' git calls leave a child of theirs reparented to
/// the supervisor (a child subreaper) as a zombie in its own session. That zombie must not
/// hold up the reaping of everything behind it: a fleet whose workers keep dying (each
/// leaving its `sleep` to be reaped) still stops at once, with 143 and no give-up.
#[test]
fn a_fleet_of_dying_workers_without_origin_stops_cleanly() {
    let timing = FAST_TIMING.replace("fast_death_s = 1", "fast_death_s = 0");
    let mut f = Fleet::new("sleep 0.2\nexit 1\n", &timing);
    f.env.git(&f.repo, &["remote", "remove", "origin"]);
    f.start(&["--workers", "4"]);
    f.wait_events(Kind::SlotExit, 24);
    fleet::kill(f.sup_pid(), nix::sys::signal::Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143), "{}", f.dump());
    assert!(
        !f.dump().contains("giving up"),
        "the stop gave up:\n{}",
        f.dump()
    );
    assert!(
        wait_until(WAIT, || f.tagged().is_empty()),
        "left: {:?}",
        f.tagged()
    );
}

/// The `SigBlk` mask of `/proc/<pid>/task/<tid>/status` (or of `/proc/<pid>/status`).
fn blocked_mask(status: &std::path::Path) -> u64 {
    let text = fleet::read(status);
    let hex = text
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .unwrap_or_else(|| panic!("no SigBlk in {}:\n{text}", status.display()));
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

/// The loop reads its signals from a descriptor with no handler installed, so a thread
/// that left one unblocked would take its default action (SIGTERM ending the supervisor
/// without its stop): every thread of a running supervisor blocks them, the diagnostics
/// writer's included, and the workers start with none blocked. A SIGTERM then still
/// stops the fleet the orderly way.
#[test]
fn every_supervisor_thread_leaves_the_loops_signals_to_the_loop_and_workers_block_none() {
    use nix::sys::signal::Signal;
    let mut f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    f.extra_env
        .push(("RUST_LOG".into(), "afk_supervisor=debug".into()));
    let sup = f.start(&["--workers", "2"]);
    let workers = f.wait_workers(2);
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 1);
    let tasks: Vec<_> = fs::read_dir(format!("/proc/{sup}/task"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        tasks.len() >= 2,
        "the loop and the diagnostics writer at least: {tasks:?}"
    );
    let wanted = process::LOOP_SIGNALS
        .iter()
        .fold(0u64, |m, s| m | process::signal_bit(*s) >> 1);
    for task in &tasks {
        let mask = blocked_mask(&task.join("status"));
        assert_eq!(
            mask & wanted,
            wanted,
            "{} blocks {mask:#x}, not all of {wanted:#x}",
            task.display()
        );
    }
    for w in workers {
        let status = std::path::PathBuf::from(format!("/proc/{w}/status"));
        assert_eq!(blocked_mask(&status), 0, "worker {w}");
    }
    fleet::kill(sup, Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143), "{}", f.dump());
    assert!(
        f.events_of(Kind::SupervisorStop)
            .iter()
            .any(|e| e.msg.starts_with("stopping fleet (SIGTERM)")),
        "{}",
        f.dump()
    );
    assert!(f.tagged().is_empty(), "still alive: {:?}", f.tagged());
}
