//! Stopping, status, scaling and takeover of a real fleet.

use std::fs;

use nix::sys::signal::Signal;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT, alive, kill};
use crate::support::{fleet, wait_until};
use afk_supervisor::event_log::Kind;

/// A worker with a grandchild in its group, an orphaned grandchild (reparented to the
/// supervisor) that lives, and one that exits at once (must be reaped, not left a zombie).
const FAMILY_WORKER: &str = r#"
sleep 1000 &
(sleep 1000 & echo $! > "$AFK_TEST_DIR/orphan-$RED_AFK_SLOT")
(sh -c 'exit 0' &)
wait
"#;

/// Finishes when asked to retire; otherwise idles.
const RETIRING_WORKER: &str = r#"
while [ ! -f "$RED_AFK_RETIRE_FILE" ]; do sleep 0.1; done
exit 0
"#;

#[test]
fn stop_command_leaves_nothing_alive_and_no_zombie() {
    let mut f = Fleet::new(FAMILY_WORKER, FAST_TIMING);
    let sup = f.start(&["--workers", "2"]);
    f.wait_workers(2);
    let orphan_file = f.file("orphan-0");
    assert!(wait_until(WAIT, || !fleet::read(&orphan_file)
        .trim()
        .is_empty()));
    let orphan: i32 = fleet::read(&orphan_file).trim().parse().unwrap();
    // The supervisor is a subreaper: the orphan is its child now.
    assert!(wait_until(WAIT, || {
        afk_supervisor::process::read(orphan).is_some_and(|p| p.ppid == sup)
    }));
    // The grandchild that exited was reaped by the supervisor.
    assert!(
        wait_until(WAIT, || f.zombies_of(sup).is_empty()),
        "zombies of the supervisor: {:?}",
        f.zombies_of(sup)
    );
    let tagged_before = f.tagged();
    assert!(tagged_before.len() >= 7, "{tagged_before:?}");

    let out = f.run_cmd(&["stop"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("fleet stopped (supervisor pid={sup})")
    );
    let status = f.wait_exit();
    assert_eq!(status.code(), Some(143));
    assert!(f.tagged().is_empty(), "still alive: {:?}", f.tagged());
    assert!(!alive(orphan));
    for p in &tagged_before {
        let zombie = afk_supervisor::process::read(*p).is_some_and(|p| p.is_zombie());
        assert!(!zombie, "{p} left a zombie");
    }
    assert!(!f.layout.supervisor_pid().exists());
    assert!(!afk_supervisor::layout::start_file(&f.layout.supervisor_pid()).exists());
    assert!(!f.layout.supervisor_stop().exists());
    let stops = f.events_of(Kind::SupervisorStop);
    assert!(
        stops
            .last()
            .unwrap()
            .msg
            .contains("fleet stopped (exit 143)")
    );
    // Nothing is running now.
    let out = f.run_cmd(&["stop"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no fleet running"
    );
    let out = f.run_cmd(&["status"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no supervisor running"));
}

#[test]
fn sigint_and_sighup_stop_the_fleet_with_their_exit_codes() {
    for (sig, code) in [(Signal::SIGINT, 130), (Signal::SIGHUP, 129)] {
        let mut f = Fleet::new(FAMILY_WORKER, FAST_TIMING);
        let sup = f.start(&["--workers", "1"]);
        f.wait_workers(1);
        kill(sup, sig);
        assert_eq!(f.wait_exit().code(), Some(code));
        assert!(
            f.tagged().is_empty(),
            "{sig}: still alive: {:?}",
            f.tagged()
        );
        assert!(!f.layout.supervisor_pid().exists());
    }
}

#[test]
fn a_worker_ignoring_sigterm_is_killed_after_the_grace() {
    // The ignored SIGTERM is inherited by the grandchild too.
    let mut f = Fleet::new("trap '' TERM\nsleep 1000 &\nwait\n", FAST_TIMING);
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    let out = f.run_cmd(&["stop"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(f.wait_exit().code(), Some(143));
    assert!(f.tagged().is_empty(), "still alive: {:?}", f.tagged());
    let exit = f.events_of(Kind::SlotExit);
    assert!(exit[0].msg.contains("killed by SIGKILL"), "{}", f.dump());
}

#[test]
fn stop_force_kills_supervisor_and_recorded_workers() {
    let mut f = Fleet::new(FAMILY_WORKER, FAST_TIMING);
    let sup = f.start(&["--workers", "2"]);
    let pids = f.wait_workers(2);
    let out = f.run_cmd(&["stop", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("fleet stopped (supervisor pid={sup}, workers killed=2)")
    );
    let status = f.wait_exit();
    assert_eq!(status.code(), None, "killed by a signal");
    for p in pids {
        assert!(wait_until(WAIT, || !alive(p)));
    }
    assert!(!f.layout.supervisor_pid().exists());
}

#[test]
fn status_shows_every_slot_and_the_fleet() {
    // Slot 1's worker has an attempt dir for issue 17: status shows the issue.
    let script = format!(
        "if [ \"$RED_AFK_SLOT\" = 1 ]; then mkdir -p \"$PWD/.red/tmp/workers/$RED_AFK_WORKER_ID/17-a1\"; fi\n{FAMILY_WORKER}"
    );
    let mut f = Fleet::new(&script, FAST_TIMING);
    let sup = f.start(&["--workers", "2"]);
    let pids = f.wait_workers(2);
    let out = f.run_cmd(&["status"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("supervisor pid={sup} heartbeat ")),
        "{text}"
    );
    assert!(text.contains("fleet: target=2 live=2 parked=0"), "{text}");
    for (i, p) in pids.iter().enumerate() {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{i} "))
                && l.contains(&p.to_string())
                && l.contains("running")),
            "{text}"
        );
    }
    let out = f.run_cmd(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["supervisor"]["pid"], sup);
    assert_eq!(v["fleet"]["target"], 2);
    assert_eq!(v["fleet"]["live"], 2);
    assert_eq!(v["slots"].as_array().unwrap().len(), 2);
    assert_eq!(v["slots"][0]["worker_id"], format!("sup-{sup}-slot-0-1"));
    assert_eq!(v["slots"][0]["restarts"], 0);
    assert!(v["slots"][0]["uptime_s"].is_u64());
    assert!(v["slots"][0]["issue"].is_null());
    assert!(wait_until(WAIT, || {
        let out = f.run_cmd(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["slots"][1]["issue"] == 17
    }));
    let text = String::from_utf8_lossy(&f.run_cmd(&["status"]).stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("1 ") && l.ends_with("#17")),
        "{text}"
    );
    assert!(v["supervisor"]["heartbeat_age_s"].is_u64());
}

#[test]
fn scale_up_then_drain_down_then_hard_kill_down() {
    let mut f = Fleet::new(RETIRING_WORKER, FAST_TIMING);
    let sup = f.start(&["--workers", "1"]);
    f.wait_workers(1);

    let out = f.run_cmd(&["scale", "3"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!(
            "directive applied (supervisor pid={sup}, target=3, shrink-mode=drain-then-retire)"
        )
    );
    let three = f.wait_workers(3);

    // Drain: the surplus slots get their retire files, finish, and are not replaced.
    let out = f.run_cmd(&["scale", "1", "--shrink-mode", "drain-then-retire"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let retired = f.wait_events(Kind::SlotRetired, 2);
    let mut slots: Vec<u64> = retired.iter().filter_map(|e| e.slot).collect();
    slots.sort();
    assert_eq!(slots, vec![1, 2]);
    let left = f.wait_workers(1);
    assert_eq!(left, vec![three[0]]);
    let exits = f.events_of(Kind::SlotExit);
    assert!(
        exits
            .iter()
            .filter(|e| e.slot != Some(0))
            .all(|e| e.msg.contains("exit 0")),
        "{}",
        f.dump()
    );
    assert!(!f.layout.retire_file(1).exists());
    assert!(!f.layout.retire_file(2).exists());
    let spawns_after_drain = f.count(Kind::SlotSpawn);
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    assert_eq!(f.count(Kind::SlotSpawn), spawns_after_drain);

    // Hard kill: up again, then the surplus is stopped at once, without retire files.
    let out = f.run_cmd(&["scale", "3"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    f.wait_workers(3);
    let out = f.run_cmd(&["scale", "1", "--shrink-mode", "hard-kill"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("directive applied (supervisor pid={sup}, target=1, shrink-mode=hard-kill)")
    );
    f.wait_events(Kind::SlotHardKill, 2);
    f.wait_events(Kind::SlotRetired, 4);
    f.wait_workers(1);
    let killed: Vec<_> = f
        .events_of(Kind::SlotExit)
        .into_iter()
        .filter(|e| e.msg.contains("killed by SIGTERM"))
        .collect();
    assert_eq!(killed.len(), 2, "{}", f.dump());
    assert!(wait_until(WAIT, || f.live_script_processes() == 1));
}

#[test]
fn kill_9_then_restart_adopts_the_workers_without_spawning() {
    let mut f = Fleet::new(FAMILY_WORKER, FAST_TIMING);
    let first = f.start(&["--workers", "2"]);
    let pids = f.wait_workers(2);
    kill(first, Signal::SIGKILL);
    f.wait_exit();
    // The workers survive their supervisor.
    for p in &pids {
        assert!(alive(*p));
    }
    let spawns = f.count(Kind::SlotSpawn);
    let second = f.start(&["--workers", "2"]);
    let take = f.wait_events(Kind::SupervisorTakeover, 1);
    assert_eq!(take[0].msg, "takeover adoption: adopted=2 dead=0 target=2");
    let mut adopted = f.wait_workers(2);
    adopted.sort();
    let mut expected = pids.clone();
    expected.sort();
    assert_eq!(adopted, expected);
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    assert_eq!(f.count(Kind::SlotSpawn), spawns, "{}", f.dump());
    let s = f.state().unwrap();
    assert_eq!(s.pid, second);

    // An adopted worker's death is noticed and handled like any other.
    kill(pids[0], Signal::SIGKILL);
    assert!(wait_until(WAIT, || {
        let now = f.worker_pids();
        now.len() == 2 && !now.contains(&pids[0])
    }));
    assert_eq!(f.count(Kind::SlotSpawn), spawns + 1);
    // One boot suite per supervisor life.
    assert_eq!(f.count(Kind::SupervisorBootSweep), 2);
    // A clean stop now takes the adopted worker's whole group too.
    let out = f.run_cmd(&["stop"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(f.wait_exit().code(), Some(143));
    assert!(f.tagged().is_empty(), "still alive: {:?}", f.tagged());
}

#[test]
fn corrupt_pid_state_and_resize_files_are_reported_and_survived() {
    let mut f = Fleet::new(FAMILY_WORKER, FAST_TIMING);
    let lane = f.layout.supervisor_lane();
    fs::create_dir_all(&lane).unwrap();
    fs::write(f.layout.supervisor_pid(), "12abc\n").unwrap();
    fs::write(f.layout.state_file(), "slot_pids[2]{slot,pid}:\n  oops\n").unwrap();
    // With only corrupt files, nothing is running.
    let out = f.run_cmd(&["status"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pid file corrupt"));
    let out = f.run_cmd(&["stop"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no fleet running"
    );

    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    let errors = f.events_of(Kind::SupervisorError);
    assert!(
        errors
            .iter()
            .any(|e| e.msg.contains("previous pid file corrupt")),
        "{}",
        f.dump()
    );
    assert!(
        errors
            .iter()
            .any(|e| e.msg.contains("state.toon: not a valid state file")
                && e.msg.contains("no worker adopted")),
        "{}",
        f.dump()
    );
    assert_eq!(f.count(Kind::SupervisorTakeover), 0);

    // A corrupt directive is reported once and ignored; a valid one then applies.
    fs::write(f.layout.resize_file(), "target: lots\n").unwrap();
    let err = f.wait_events(Kind::SupervisorError, errors.len() + 1);
    assert!(
        err.last().unwrap().msg.contains("resize.toon"),
        "{}",
        f.dump()
    );
    assert!(err.last().unwrap().msg.contains("target stays 1"));
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    assert_eq!(f.count(Kind::SupervisorError), errors.len() + 1);
    assert_eq!(f.state().unwrap().target, 1);
    fs::write(f.layout.resize_file(), "target: 2\n").unwrap();
    f.wait_workers(2);
}

/// Two supervisors started at the same instant: one runs, and the other names exactly
/// that one's pid (not `unknown` because the pid file is not written yet, nor a dead
/// predecessor's pid).
#[test]
fn the_losing_supervisor_names_the_winner() {
    let f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    // A predecessor that died without cleaning up: its pid file names a dead process.
    fs::create_dir_all(f.layout.supervisor_lane()).unwrap();
    fs::write(f.layout.supervisor_pid(), "999999\n").unwrap();
    for round in 0..3 {
        let launch = || {
            f.cmd(&["--workers", "1"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (mut a, mut b) = (launch(), launch());
        let mut loser = None;
        assert!(wait_until(WAIT, || {
            if let Ok(Some(s)) = a.try_wait() {
                loser = Some((s, b.id()));
            } else if let Ok(Some(s)) = b.try_wait() {
                loser = Some((s, a.id()));
            }
            loser.is_some()
        }));
        let (status, winner) = loser.unwrap();
        let (mut lost, mut won) = if winner == a.id() { (b, a) } else { (a, b) };
        let mut err = String::new();
        std::io::Read::read_to_string(lost.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(1), "round {round}: {err}");
        assert_eq!(
            err.trim(),
            format!("afk-supervisor: supervisor already running for this project (pid={winner})"),
            "round {round}"
        );
        kill(won.id() as i32, Signal::SIGTERM);
        won.wait().unwrap();
    }
}
