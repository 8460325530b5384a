//! The supervisor's core with real processes: spawning with the `docs/SPEC.md` §6 environment,
//! respawn, the circuit breaker, exit 78, stalls, and start-up refusals.

use std::fs;

use nix::sys::signal::Signal;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT, alive, kill};
use crate::support::{count_prefixed, fleet, git_trace_commands, wait_until};
use afk_supervisor::event_log::Kind;

/// Records its environment, then idles with a grandchild in its process group.
const RECORDING_WORKER: &str = r#"
env | grep -E '^(RED_AFK_|AFK_TEST_TAG=)' | sort > "$AFK_TEST_DIR/env-$$"
sleep 1000 &
echo $! > "$AFK_TEST_DIR/gc-$$"
wait
"#;

#[test]
fn workers_get_the_spec_env_and_a_killed_worker_is_respawned_within_the_target() {
    let mut f = Fleet::new(RECORDING_WORKER, FAST_TIMING);
    // A supervisor control variable that must not leak into workers.
    f.extra_env
        .push(("RED_AFK_CIRCUIT_WINDOW_S".into(), "60".into()));
    // A dead worker's empty shell: the boot sweeps remove it before any worker starts.
    let shell = f.layout.worker_namespace("workers").join("dead-w");
    fs::create_dir_all(&shell).unwrap();
    fs::write(shell.join("worker.pid"), "not-a-pid\n").unwrap();
    f.start(&["--workers", "2"]);
    let pids = f.wait_workers(2);
    assert!(!shell.exists(), "boot sweeps did not run");
    let events = f.events();
    let boot = events
        .iter()
        .position(|e| e.kind == Kind::SupervisorBootSweep)
        .unwrap();
    let first_spawn = events
        .iter()
        .position(|e| e.kind == Kind::SlotSpawn)
        .unwrap();
    assert!(boot < first_spawn);
    assert!(
        events[boot]
            .msg
            .starts_with("boot sweeps complete: orphans ")
    );
    let sup = f.sup_pid();
    for pid in &pids {
        let env_file = f.file(&format!("env-{pid}"));
        assert!(wait_until(WAIT, || env_file.exists()));
        assert!(wait_until(WAIT, || {
            fleet::read(&env_file).contains("RED_AFK_WORKER_ID")
        }));
        let text = fleet::read(&env_file);
        let slot = f
            .state()
            .unwrap()
            .slot_pids
            .iter()
            .find(|p| p.pid == *pid)
            .unwrap()
            .slot;
        let lane = f.layout.supervisor_lane();
        let expected = format!(
            "AFK_TEST_TAG={}\nRED_AFK_RETIRE_FILE={}/afk-supervisor-slot-{slot}.retire\n\
             RED_AFK_RUNNER=claude\nRED_AFK_SLOT={slot}\nRED_AFK_SWEEPS_DONE=1\n\
             RED_AFK_WORKER_ID=sup-{sup}-slot-{slot}-{seq}\n",
            f.tag,
            lane.display(),
            // The first workers are started in slot order, one sequence for the fleet.
            seq = slot + 1
        );
        assert_eq!(text, expected);
        // Own session and process group; stdout appended to the slot log.
        let p = afk_supervisor::process::read(*pid).unwrap();
        assert_eq!((p.pgid, p.sid), (*pid, *pid));
    }

    // Kill one worker: it is respawned, and the live count never goes above the target.
    let victim = pids[0];
    let gc_file = f.file(&format!("gc-{victim}"));
    assert!(wait_until(WAIT, || !fleet::read(&gc_file)
        .trim()
        .is_empty()));
    let grandchild: i32 = fleet::read(&gc_file).trim().parse().unwrap();
    assert!(alive(grandchild));
    let before = f.count(Kind::SlotSpawn);
    kill(victim, Signal::SIGKILL);
    let mut max_live = 0;
    let respawned = wait_until(WAIT, || {
        max_live = max_live.max(f.live_script_processes());
        let now = f.worker_pids();
        now.len() == 2 && !now.contains(&victim)
    });
    assert!(respawned, "not respawned:\n{}", f.dump());
    // Keep watching through two whole ticks after the respawn: a second spawn for the same
    // death (a tick that still counted the dead worker, say) would happen within them.
    let ticks = f.count(Kind::SupervisorTick);
    let watched = wait_until(WAIT, || {
        max_live = max_live.max(f.live_script_processes());
        f.count(Kind::SupervisorTick) >= ticks + 2
    });
    assert!(watched, "no two ticks after the respawn:\n{}", f.dump());
    assert!(max_live <= 2, "{max_live} workers were live at once");
    assert_eq!(f.count(Kind::SlotSpawn), before + 1);
    let exit = f
        .events_of(Kind::SlotExit)
        .into_iter()
        .find(|e| e.pid == Some(i64::from(victim)))
        .expect("exit record");
    assert!(exit.msg.contains("killed by SIGKILL"), "{}", exit.msg);
    // The boot suite ran exactly once, respawns included.
    assert_eq!(f.count(Kind::SupervisorBootSweep), 1);
    // The victim's grandchild went with its group.
    assert!(
        wait_until(WAIT, || !alive(grandchild)),
        "grandchild survived"
    );
    assert_eq!(f.live_script_processes(), 2);
}

#[test]
fn instant_deaths_trip_the_circuit_after_k_spawns_and_a_probe_follows_the_backoff() {
    // Dies at once while the `fail` file exists; afterwards it lives.
    let script = r#"
if [ -f "$AFK_TEST_DIR/fail" ]; then exit 1; fi
sleep 1000 &
wait
"#;
    // A fast-death time well above a shell's start-up, even on a loaded machine.
    let timing = FAST_TIMING.replace("fast_death_s = 1", "fast_death_s = 3");
    let mut f = Fleet::new(script, &timing);
    fs::write(f.file("fail"), "").unwrap();
    f.start(&["--workers", "1"]);
    let trip = f.wait_events(Kind::CircuitTrip, 1);
    assert_eq!(
        trip[0].msg,
        "circuit open: slot 0 tripped after 3 fast deaths within 60s, probe in 1s (step=0)"
    );
    // Exactly K spawns before the trip.
    let events = f.events();
    let trip_at = events
        .iter()
        .position(|e| e.kind == Kind::CircuitTrip)
        .unwrap();
    let spawns = events[..trip_at]
        .iter()
        .filter(|e| e.kind == Kind::SlotSpawn)
        .count();
    assert_eq!(spawns, 3, "{}", f.dump());

    // After the backoff, a probe; it dies fast and re-parks with the next step.
    let half = f.wait_events(Kind::CircuitHalfOpen, 1);
    assert_eq!(
        half[0].msg,
        "circuit half-open: slot 0 cooldown expired, spawning probe (backoff=1s step=0)"
    );
    let reparked = f.wait_events(Kind::CircuitReParked, 1);
    // How long the probe lived depends on the machine's load: check the shape only.
    let msg = &reparked[0].msg;
    let lived = msg
        .strip_prefix("circuit re-parked: slot 0 probe died after ")
        .and_then(|rest| rest.split_once("s, next probe in 2s (step=1)"))
        .map(|(n, _)| n);
    assert!(lived.is_some_and(|n| n.parse::<u64>().is_ok()), "{msg}");
    // Heal the host: the next probe lives past the fast-death time and closes the circuit.
    fs::remove_file(f.file("fail")).unwrap();
    let closed = f.wait_events(Kind::CircuitClosed, 1);
    assert!(
        closed[0]
            .msg
            .starts_with("circuit closed: slot 0 probe succeeded ("),
        "{}",
        closed[0].msg
    );
    assert!(closed[0].msg.ends_with("s), backoff reset"));
    let pids = f.wait_workers(1);
    assert!(alive(pids[0]));
    let events = f.events();
    let trips = events
        .iter()
        .filter(|e| e.kind == Kind::CircuitTrip)
        .count();
    assert_eq!(trips, 1);
    // The parked slot showed as parked; now it runs.
    let s = f.state().unwrap();
    assert_eq!(s.slot_detail[0].state, "running");
}

#[test]
fn exit_78_parks_the_slot_for_good() {
    let script = "if [ \"$RED_AFK_SLOT\" = 0 ]; then exit 78; fi\nsleep 1000 &\nwait\n";
    let mut f = Fleet::new(script, FAST_TIMING);
    f.start(&["--workers", "2"]);
    let parked = f.wait_events(Kind::SlotParked, 1);
    assert_eq!(
        parked[0].msg,
        "fatal host configuration: slot 0 parked without retry"
    );
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 3);
    let slot0_spawns = f
        .events_of(Kind::SlotSpawn)
        .iter()
        .filter(|e| e.slot == Some(0))
        .count();
    assert_eq!(slot0_spawns, 1, "{}", f.dump());
    let s = f.state().unwrap();
    assert_eq!(s.slots.parked, 1);
    assert_eq!(s.slots.busy, 1);
    assert_eq!(s.slot_detail[0].state, "parked");
    let out = f.run_cmd(&["status", "--json"]);
    // A parked slot: running but degraded (exit 1, as `systemctl is-active` would say).
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["health"], "degraded");
    assert_eq!(v["slots"][0]["state"], "parked");
    assert_eq!(v["slots"][1]["state"], "running");
    assert_eq!(v["fleet"]["parked"], 1);
}

#[test]
fn a_worker_without_progress_is_flagged_then_killed_and_respawned() {
    let timing = FAST_TIMING
        .replace("stall_s = 600", "stall_s = 2")
        .replace("stall_kill_s = 1200", "stall_kill_s = 4");
    let mut f = Fleet::new("sleep 1000 &\nwait\n", &timing);
    f.start(&["--workers", "1"]);
    let first = f.wait_workers(1)[0];
    let stalled = f.wait_events(Kind::SlotStalled, 1);
    assert!(
        stalled[0].msg.contains("stalled: no progress for"),
        "{}",
        stalled[0].msg
    );
    let killed = f.wait_events(Kind::SlotStallKill, 1);
    assert_eq!(killed[0].pid, Some(i64::from(first)));
    assert!(wait_until(WAIT, || {
        let p = f.worker_pids();
        p.len() == 1 && p[0] != first
    }));
    assert!(!alive(first));
}

/// A worker that writes nothing but burns CPU (a compile, a test run) is progressing: its
/// tree's CPU time moves, so it is neither flagged nor killed, while the same thresholds
/// flag an idle one (above). Its CPU and memory are in `status --json`.
#[test]
fn a_worker_that_computes_is_not_stalled() {
    let timing = FAST_TIMING
        .replace("stall_s = 600", "stall_s = 2")
        .replace("stall_kill_s = 1200", "stall_kill_s = 4");
    let mut f = Fleet::new("i=0; while :; do i=$((i+1)); done\n", &timing);
    f.start(&["--workers", "1"]);
    let pid = f.wait_workers(1)[0];
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 7);
    assert_eq!(f.count(Kind::SlotStalled), 0, "{}", f.dump());
    assert_eq!(f.count(Kind::SlotStallKill), 0, "{}", f.dump());
    assert_eq!(f.worker_pids(), vec![pid]);
    let out = f.run_cmd(&["status", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["slots"][0]["cpu_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{v}"
    );
    assert!(
        v["slots"][0]["rss_kib"].as_u64().is_some_and(|k| k > 0),
        "{v}"
    );
}

#[test]
fn a_second_supervisor_is_refused_and_the_first_is_unaffected() {
    let mut f = Fleet::new(RECORDING_WORKER, FAST_TIMING);
    let first = f.start(&["--workers", "2"]);
    let pids = f.wait_workers(2);
    let pid_file = fs::read(f.layout.supervisor_pid()).unwrap();
    let out = f.run_cmd(&["run", "--workers", "3"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "supervisor already running for this project (pid={first})"
        )),
        "{err}"
    );
    assert_eq!(fs::read(f.layout.supervisor_pid()).unwrap(), pid_file);
    assert_eq!(f.count(Kind::SupervisorStart), 1);
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    assert_eq!(f.worker_pids(), pids);
    assert_eq!(f.count(Kind::SlotSpawn), 2);
    assert_eq!(f.state().unwrap().target, 2);
}

#[test]
fn without_worker_command_the_built_in_worker_runs() {
    let mut f = Fleet::new("exit 0\n", FAST_TIMING);
    f.write_config(&format!(
        "[tracker]\nkind = \"local\"\n[agent]\ncommand = [\"/bin/true\"]\n\n{FAST_TIMING}"
    ));
    f.start(&["--workers", "1"]);
    // An empty queue: the built-in worker exits 0 and the slot idles.
    f.wait_events(Kind::SlotIdle, 1);
    let start = &f.events_of(Kind::SupervisorStart)[0];
    assert!(
        start
            .msg
            .contains("\"--tracker\", \"local\", \"worker\", \"--once\"]"),
        "{}",
        start.msg
    );
    assert!(start.msg.contains(env!("CARGO_BIN_EXE_afk-supervisor")));
    assert_eq!(f.count(Kind::SlotParked), 0);
    // A missing agent is refused before the start (tests/it/first_run_errors.rs).
}

#[test]
fn a_malformed_config_is_exit_78_and_nothing_starts() {
    let f = Fleet::new("exit 0\n", FAST_TIMING);
    f.write_config("[timing]\ntick_s = \"soon\"\n");
    let out = f.run_cmd(&["--workers", "1"]);
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("afk-supervisor.toml:2:"), "{err}");
    assert!(!f.layout.supervisor_pid().exists());
    f.write_config("[timing]\nstall_s = 10\nstall_kill_s = 10\n");
    let out = f.run_cmd(&["--workers", "1"]);
    assert_eq!(out.status.code(), Some(78));
    assert!(!f.layout.supervisor_pid().exists());
}

/// A hung agent under the built-in worker, at realistic settings (#22): `stall_s = 15`,
/// `stall_kill_s = 30`. The worker's own polling burns a clock tick now and then; that is
/// not the agent's progress, and CPU counts only above the floor (1% of a core over the
/// window), so the hang is flagged and then killed.
#[test]
fn a_hung_agent_under_the_built_in_worker_is_stall_killed() {
    let mut f = Fleet::new("", "");
    f.write_config(
        "[tracker]\nkind = \"local\"\n\n[agent]\ncommand = [\"sleep\", \"100000\"]\n\n\
         [timing]\ntick_s = 1\nstop_grace_s = 2\nstall_s = 15\nstall_kill_s = 30\n",
    );
    let out = f.run_cmd(&[
        "issue",
        "new",
        "--title",
        "hangs",
        "--label",
        "ready-for-agent",
    ]);
    assert!(out.status.success(), "{out:?}");
    f.start(&["--workers", "1"]);
    let killed = wait_until(std::time::Duration::from_secs(150), || {
        f.count(Kind::SlotStallKill) >= 1
    });
    assert!(killed, "{}", f.dump());
    assert_eq!(f.count(Kind::SlotProgress), 0, "{}", f.dump());
}

/// The supervisor raises its own soft open-files limit to the hard one (a pidfd per
/// worker), and every worker gets back the limit the supervisor was started with.
#[test]
fn the_supervisor_raises_its_open_files_limit_and_workers_keep_the_inherited_one() {
    let worker = "ulimit -n > \"$AFK_TEST_DIR/nofile-$$\"\nexec sleep 1000\n";
    let mut f = Fleet::new(worker, FAST_TIMING);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    assert!(
        lim.rlim_max > 300,
        "hard open-files limit {} leaves no room to test a raise",
        lim.rlim_max
    );
    f.open_files = Some(256);
    f.start(&["--workers", "2"]);
    let pids = f.wait_workers(2);
    for pid in &pids {
        let file = f.file(&format!("nofile-{pid}"));
        assert!(wait_until(WAIT, || fleet::read(&file).ends_with('\n')));
        assert_eq!(fleet::read(&file).trim(), "256", "worker {pid}");
    }
    let limits = fs::read_to_string(format!("/proc/{}/limits", f.sup_pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("an open-files line");
    let soft_hard: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    let hard = if lim.rlim_max == libc::RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        lim.rlim_max.to_string()
    };
    assert_eq!(soft_hard, vec![hard.as_str(), hard.as_str()], "{line}");
}

/// The git commands of one boot (the supervisor's, read from its `GIT_TRACE`), each as its
/// words after `git`.
fn boot_git_commands(f: &mut Fleet) -> Vec<String> {
    let trace = f.file("git-trace");
    let _ = fs::remove_file(&trace);
    f.extra_env.retain(|(k, _)| k != "GIT_TRACE");
    f.extra_env
        .push(("GIT_TRACE".into(), trace.display().to_string()));
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    kill(f.sup_pid(), Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143), "{}", f.dump());
    git_trace_commands(&trace)
}

#[test]
fn a_boot_fetches_the_base_once_and_a_local_tracker_does_not_ask_for_origins_url() {
    let mut f = Fleet::new("exec sleep 1000\n", FAST_TIMING);
    // Auto: `origin` is asked for (it could name a GitHub repository); the reap and the
    // docs sweep share one remote listing and one fetch.
    let cmds = boot_git_commands(&mut f);
    assert_eq!(
        count_prefixed(&cmds, "remote get-url origin"),
        1,
        "{cmds:#?}"
    );
    assert_eq!(count_prefixed(&cmds, "fetch "), 1, "{cmds:#?}");
    assert_eq!(count_prefixed(&cmds, "remote"), 2, "{cmds:#?}");

    // A requested local tracker has no use for `origin`'s URL.
    f.write_config(&format!(
        "[worker]\ncommand = [\"sh\", \"{}\"]\n\n[tracker]\nkind = \"local\"\n\n{FAST_TIMING}",
        f.script.display()
    ));
    let cmds = boot_git_commands(&mut f);
    assert_eq!(count_prefixed(&cmds, "remote"), 1, "{cmds:#?}");
    assert_eq!(count_prefixed(&cmds, "fetch "), 1, "{cmds:#?}");
}

/// Each worker stamps the wall clock as it starts (ns).
const STAMPING_WORKER: &str = r#"
date +%s%N > "$AFK_TEST_DIR/stamp-$RED_AFK_SLOT.tmp"
mv "$AFK_TEST_DIR/stamp-$RED_AFK_SLOT.tmp" "$AFK_TEST_DIR/stamp-$RED_AFK_SLOT"
exec sleep 1000
"#;

/// A start-up's spawns go out in one batch and are logged after it; each `slot.spawn`
/// record still carries the time its worker was started. Spawn k's clock is read after its
/// `clone3` returned and before spawn k+1 began, so it is no later than the start stamp of
/// any worker spawned after it (the same wall clock, `date +%s%N`): before the fix every
/// record carried the end of the batch, later than the workers that had already started.
#[test]
fn each_spawn_record_is_stamped_when_its_worker_started_not_when_the_batch_ended() {
    const N: usize = 24;
    let mut f = Fleet::new(STAMPING_WORKER, FAST_TIMING);
    f.start(&["--workers", &N.to_string()]);
    let records = f.wait_events(Kind::SlotSpawn, N);
    let stamp = |slot: u64| {
        let p = f.file(&format!("stamp-{slot}"));
        assert!(wait_until(WAIT, || p.exists()), "slot {slot} never stamped");
        let ns: u128 = fleet::read(&p).trim().parse().expect("date +%s%N");
        ns / 1_000_000
    };
    // (spawn sequence, record's ms, that worker's own start stamp's ms)
    let mut spawns: Vec<(u64, u128, u128)> = records
        .iter()
        .map(|r| {
            let seq: u64 = r.msg.rsplit('-').next().unwrap().parse().unwrap();
            let at = afk_supervisor::timeutil::parse_rfc3339(&r.ts).unwrap();
            let ms = at
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis();
            (seq, ms, stamp(r.slot.unwrap()))
        })
        .collect();
    spawns.sort();
    for (k, &(seq, logged, _)) in spawns.iter().enumerate() {
        for &(later, _, started) in &spawns[k + 1..] {
            assert!(
                logged <= started,
                "spawn {seq} is logged at {logged} ms, after spawn {later}'s worker started at \
                 {started} ms: {spawns:?}"
            );
        }
    }
    kill(f.sup_pid(), Signal::SIGTERM);
    f.wait_exit();
}
