//! Fault injection: the supervisor SIGKILLed at every phase, then restarted.
//!
//! Invariants checked after every kill and at the end: never more live workers than the
//! target, every live worker recorded by the supervisor that runs, and, once a boot suite
//! has run, no issue `running` without a live claim. Workers are found independently of
//! the code under test: by the test's tag in their environment, as session leaders with a
//! `RED_AFK_WORKER_ID`.

use std::collections::BTreeSet;
use std::fs;
use std::time::{Duration, Instant};

use afk_supervisor::lanes::state_file::{self, StateFile};
use afk_supervisor::process;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT, alive, kill};
use crate::support::{fleet, wait_until};
use afk_supervisor::event_log::Kind;

const TARGET: usize = 3;

/// The built-in worker in every slot, with an agent that works until it is killed.
fn builtin_fleet(issues: usize) -> Fleet {
    let f = Fleet::new(
        "exec \"$AFK_TEST_BIN\" --repo \"$PWD\" worker --once\n",
        &format!(
            "[agent]\ncommand = [\"sleep\", \"600\"]\n\n[tracker]\nkind = \"local\"\n\n{FAST_TIMING}"
        ),
    )
    .with_bin();
    for i in 0..issues {
        let title = format!("issue {i}");
        let out = f.run_cmd(&[
            "issue",
            "new",
            "--title",
            &title,
            "--label",
            "ready-for-agent",
        ]);
        assert!(out.status.success(), "{out:?}");
    }
    f
}

/// Live workers of this test's fleet: session leaders carrying the tag and a worker id.
/// git's background `gc --auto` also leads a session of its own (it daemonizes) with the
/// worker's environment: it is not a worker, and it is told apart by its program.
fn live_workers(f: &Fleet) -> Vec<i32> {
    f.tagged()
        .into_iter()
        .filter(|&pid| {
            let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            let git = exe
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("git"));
            !git
        })
        .filter(|&pid| {
            process::read(pid).is_some_and(|p| p.sid == pid && !p.is_zombie())
                && process::environ(pid)
                    .is_some_and(|e| process::env_value(&e, "RED_AFK_WORKER_ID").is_some())
        })
        .collect()
}

/// Records of `kind` in the event log, counted on the raw text: cheap enough to poll in
/// a tight loop, so a kill lands right after the record is written.
fn log_count(f: &Fleet, kind: Kind) -> usize {
    let needle = format!(",{kind},");
    fs::read_to_string(f.layout.event_log())
        .map(|t| t.lines().filter(|l| l.contains(&needle)).count())
        .unwrap_or(0)
}

fn kill_supervisor(f: &mut Fleet) {
    kill(f.sup_pid(), Signal::SIGKILL);
    f.wait_exit();
}

fn assert_within_target(f: &Fleet, when: &str) {
    let workers = live_workers(f);
    let detail: Vec<String> = workers
        .iter()
        .map(|&pid| {
            let p = process::read(pid);
            let id = process::environ(pid)
                .and_then(|e| {
                    process::env_value(&e, "RED_AFK_WORKER_ID")
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                })
                .unwrap_or_default();
            format!("{pid} {id} {p:?}")
        })
        .collect();
    assert!(
        workers.len() <= TARGET,
        "{when}: {} live workers for a target of {TARGET}:\n{}\nstate: {:?}\n{}",
        workers.len(),
        detail.join("\n"),
        f.state().map(|s| s.slot_pids),
        f.dump()
    );
}

/// The state file of the supervisor now running.
fn current_state(f: &Fleet) -> Option<StateFile> {
    f.state().filter(|s| s.pid == f.sup_pid())
}

/// Starts a supervisor and waits until every live worker is recorded, the target met
/// (or nothing left to claim) and a boot suite behind it; then checks the claims.
fn settle_and_check(f: &mut Fleet, boots_before: usize) {
    f.start(&["--workers", &TARGET.to_string()]);
    f.wait_events(Kind::SupervisorBootSweep, boots_before + 1);
    let mut last = String::new();
    let ok = wait_until(WAIT, || {
        let Some(s) = current_state(f) else {
            return false;
        };
        let recorded: BTreeSet<i32> = s.slot_pids.iter().map(|p| p.pid).collect();
        let live: BTreeSet<i32> = live_workers(f).into_iter().collect();
        last = format!(
            "recorded={recorded:?} live={live:?} ready={:?}",
            s.ready_for_agent
        );
        // A full fleet, or fewer only because nothing is left to claim: the kills made
        // workers die on their issues, and an issue that kept killing workers is
        // quarantined (it leaves the queue).
        let full = live.len() == TARGET || s.ready_for_agent == Some(0);
        full && !live.is_empty() && live == recorded
    });
    assert!(
        ok,
        "never settled on the recorded workers: {last}\n{}",
        f.dump()
    );
    assert!(live_workers(f).len() <= TARGET);
    assert_no_stranded_issue(f);
}

/// Every `running` issue is held by a live claim (`claims/N/pid` naming a live process).
fn assert_no_stranded_issue(f: &Fleet) {
    let out = f.run_cmd(&["issue", "list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let issues: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for i in issues.as_array().unwrap() {
        let n = i["number"].as_u64().unwrap();
        let running = i["labels"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str() == Some("running"));
        if !running {
            continue;
        }
        // A worker claims (mkdir, pid) before it labels, so a live claim must be there.
        let pid_file = f.layout.claims().join(n.to_string()).join("pid");
        let pid: Option<i32> = fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok());
        assert!(
            pid.is_some_and(alive),
            "issue #{n} is running without a live claim ({pid:?})\n{}",
            f.dump()
        );
    }
}

/// Kills one live worker's whole group, so the next supervisor must spawn a replacement
/// (and its start-up has a spawn for the next kill to land in).
fn kill_one_worker(f: &Fleet, round: usize) {
    let workers = live_workers(f);
    if workers.is_empty() {
        return;
    }
    let pid = workers[round % workers.len()];
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    assert!(
        wait_until(WAIT, || !alive(pid)),
        "worker {pid} survived SIGKILL"
    );
}

/// A supervisor killed between starting a worker and writing `state.toon` leaves a worker
/// nobody recorded. Reproduced exactly: the heartbeat is taken back to what it was before
/// the last spawn (one worker missing), and with no heartbeat at all.
#[test]
fn a_live_worker_missing_from_state_is_adopted_not_doubled() {
    for variant in ["one missing", "no state file"] {
        let mut f = Fleet::new("exec sleep 600\n", FAST_TIMING);
        f.start(&["--workers", &TARGET.to_string()]);
        let pids = f.wait_workers(TARGET);
        kill_supervisor(&mut f);
        let path = f.layout.state_file();
        if variant == "no state file" {
            fs::remove_file(&path).unwrap();
        } else {
            let mut s = state_file::read(&path).unwrap().unwrap();
            s.slot_pids.pop();
            s.slot_detail
                .retain(|d| s.slot_pids.iter().any(|p| Some(p.pid) == d.pid));
            state_file::write(&path, &s).unwrap();
        }
        let spawns = f.count(Kind::SlotSpawn);
        f.start(&["--workers", &TARGET.to_string()]);
        let mut adopted = f.wait_workers(TARGET);
        adopted.sort_unstable();
        let mut expected = pids.clone();
        expected.sort_unstable();
        assert_eq!(adopted, expected, "{variant}: {}", f.dump());
        let ticks = f.count(Kind::SupervisorTick);
        f.wait_events(Kind::SupervisorTick, ticks + 2);
        assert_eq!(f.count(Kind::SlotSpawn), spawns, "{variant}: {}", f.dump());
        assert_eq!(live_workers(&f).len(), TARGET, "{variant}");
        let take = f.events_of(Kind::SupervisorTakeover);
        assert!(
            take.iter().any(
                |e| e.msg.starts_with("found ") && e.msg.contains("not recorded in state.toon")
            ),
            "{variant}: {}",
            f.dump()
        );
        let out = f.run_cmd(&["stop"]);
        assert_eq!(out.status.code(), Some(0), "{variant}: {out:?}");
        assert!(f.tagged().is_empty(), "{variant}: left {:?}", f.tagged());
    }
}

/// SIGKILL swept across start-up (lock, boot suite, takeover, spawns) in small steps, with a
/// worker killed between rounds so each start-up spawns; then a kill mid-tick and kills
/// mid-stop. After every kill: never more live workers than the target. At the end, a
/// supervisor that runs has recorded every live worker, and no issue is stranded.
#[test]
fn sigkill_at_every_phase_never_runs_more_than_the_target() {
    // Enough issues that quarantine (3 failed attempts each) never empties the queue.
    let mut f = builtin_fleet(24);
    let workers = TARGET.to_string();

    // Calibrate: how long a start-up takes here, launch to the last spawn.
    let t0 = Instant::now();
    f.start(&["--workers", &workers]);
    f.wait_events(Kind::SlotSpawn, TARGET);
    let startup = t0.elapsed();
    kill_supervisor(&mut f);
    assert_within_target(&f, "after calibration");

    const STEPS: u32 = 20;
    for k in 0..STEPS {
        kill_one_worker(&f, k as usize);
        // From a fifth of the start-up to its end and a little past it.
        let at = startup * (k + 5) / (STEPS + 4);
        f.start(&["--workers", &workers]);
        std::thread::sleep(at);
        kill_supervisor(&mut f);
        assert_within_target(&f, &format!("kill {k} at {at:?} into start-up"));
    }

    // The narrowest window: the instant a spawn is logged, before anything after it.
    for k in 0..8 {
        kill_one_worker(&f, k);
        let spawns = f.count(Kind::SlotSpawn);
        f.start(&["--workers", &workers]);
        // Generous: a start-up under a loaded machine can wait out a slow git or fsync.
        let deadline = Instant::now() + WAIT * 4;
        let mut seen = false;
        while !seen && Instant::now() < deadline {
            seen = log_count(&f, Kind::SlotSpawn) > spawns;
            std::thread::sleep(Duration::from_micros(200));
        }
        if !seen {
            // Left running, so what it waits on can be seen.
            let sup = f.sup_pid();
            let ps = std::process::Command::new("ps")
                .args(["-o", "pid,ppid,pgid,stat,wchan:24,args", "--forest", "-e"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let tree: Vec<&str> = ps
                .lines()
                .filter(|l| {
                    f.tagged()
                        .iter()
                        .any(|p| l.trim_start().starts_with(&format!("{p} ")))
                })
                .collect();
            let err = std::fs::read_dir(f.env.path())
                .unwrap()
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("supervisor-"))
                .map(|e| fs::read_to_string(e.path()).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n");
            panic!(
                "round {k}: supervisor {sup} never spawned\n{}\nstderr:\n{err}\n{}",
                tree.join("\n"),
                f.dump()
            );
        }
        kill_supervisor(&mut f);
        assert_within_target(&f, &format!("kill {k} at a spawn"));
    }

    // Mid-tick: a supervisor that has been running a while.
    kill_one_worker(&f, 0);
    f.start(&["--workers", &workers]);
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    kill_supervisor(&mut f);
    assert_within_target(&f, "kill mid-tick");

    // Mid-stop: SIGTERM, then SIGKILL while the workers are giving their issues back.
    for delay_ms in [0u64, 20, 150] {
        let boots = f.count(Kind::SupervisorBootSweep);
        f.start(&["--workers", &workers]);
        f.wait_events(Kind::SupervisorBootSweep, boots + 1);
        assert!(wait_until(WAIT, || current_state(&f).is_some()));
        kill(f.sup_pid(), Signal::SIGTERM);
        std::thread::sleep(Duration::from_millis(delay_ms));
        kill_supervisor(&mut f);
        assert_within_target(&f, &format!("kill {delay_ms} ms into a stop"));
    }

    let boots = f.count(Kind::SupervisorBootSweep);
    settle_and_check(&mut f, boots);
    let out = f.run_cmd(&["stop"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{}", f.dump());
    assert!(f.tagged().is_empty(), "left after stop: {:?}", f.tagged());
}

/// `stop` after a takeover: the adopted workers' descendants that left their group
/// (`setsid`, one ignoring SIGTERM) were reparented away from the new supervisor. The stop
/// still ends them, and only then says the fleet stopped.
#[test]
fn stop_after_takeover_ends_what_adopted_workers_left() {
    let worker = r#"
setsid sh -c 'trap "" TERM; exec sleep 600' </dev/null &
setsid sh -c 'exec sleep 600' </dev/null &
echo $! >> "$AFK_TEST_DIR/escaped"
exec sleep 600
"#;
    let mut f = Fleet::new(worker, FAST_TIMING);
    f.start(&["--workers", "2"]);
    f.wait_workers(2);
    assert!(wait_until(WAIT, || {
        fleet::read(&f.file("escaped")).lines().count() == 2
    }));
    kill_supervisor(&mut f);
    f.start(&["--workers", "2"]);
    f.wait_events(Kind::SupervisorTakeover, 1);
    f.wait_workers(2);
    // Two workers, each with two escaped descendants.
    let sup = f.sup_pid();
    let fleet_procs: Vec<i32> = f.tagged().into_iter().filter(|p| *p != sup).collect();
    assert_eq!(fleet_procs.len(), 6, "{fleet_procs:?}");

    let out = f.run_cmd(&["stop"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{}", f.dump());
    assert!(text.contains("fleet stopped"), "{text}");
    assert!(
        f.tagged().is_empty(),
        "stop said done; alive: {:?}",
        f.tagged()
    );
}

/// With no supervisor left, `stop` reports a fleet process nobody recorded instead of
/// "no fleet running", and `stop --force` ends it.
#[test]
fn stop_without_a_supervisor_finds_unrecorded_fleet_processes() {
    let mut f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    kill_supervisor(&mut f);
    fs::remove_file(f.layout.state_file()).unwrap();
    let out = f.run_cmd(&["stop"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 processes of the fleet are live"), "{err}");
    let out = f.run_cmd(&["stop", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(f.tagged().is_empty(), "left: {:?}", f.tagged());
}

/// A stop that comes while the boot sweeps run, after a SIGKILL left the last supervisor's
/// worker alive: the worker is the fleet too. It is ended as a stop ends one (SIGTERM,
/// then the grace), and `stop` says the fleet stopped, with nothing of it left.
#[test]
fn a_stop_during_the_boot_sweeps_ends_the_workers_a_killed_supervisor_left() {
    let mut f = Fleet::new(
        "trap 'echo term >> \"$AFK_TEST_DIR/termed\"; exit 0' TERM\nwhile :; do sleep 1; done\n",
        &format!(
            "[tracker]\nkind = \"gh\"\nrepo = \"fake-owner/fake-repo\"\ntimeout_s = 600\n\n{FAST_TIMING}"
        ),
    );
    let gh = crate::support::fake_gh::FakeGh::install(&f.env);
    f.extra_env
        .push(("PATH".into(), gh.path_env().to_string_lossy().into_owned()));
    f.start(&["--workers", "1"]);
    let workers = f.wait_workers(1);
    kill_supervisor_only(&mut f);
    assert!(alive(workers[0]));
    // The next boot's first tracker call never answers: its sweeps are still running.
    gh.hang_next(1);
    f.start(&["--workers", "1"]);
    assert!(wait_until(WAIT, || !gh.hung_children().is_empty()));
    assert_eq!(f.count(Kind::SupervisorTakeover), 0, "{}", f.dump());

    let out = f.run_cmd(&["stop", "--timeout", "60"]);
    let hung = gh.hung_children();
    for pid in &hung {
        kill(*pid, Signal::SIGKILL);
    }
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{}", f.dump());
    f.wait_exit();
    assert!(!alive(workers[0]));
    assert_eq!(fleet::read(&f.file("termed")).lines().count(), 1);
    let stops: Vec<String> = f
        .events_of(Kind::SupervisorStop)
        .into_iter()
        .map(|e| e.msg)
        .collect();
    assert!(
        stops.contains(&format!(
            "stop during the boot sweeps: ending 1 workers the last supervisor left: [{}]",
            workers[0]
        )),
        "{stops:?}"
    );
    assert!(stops.contains(&"stopped by signal during the boot sweeps".to_string()));
}

/// SIGKILL to the supervisor alone: its workers live on.
fn kill_supervisor_only(f: &mut Fleet) {
    kill(f.sup_pid(), Signal::SIGKILL);
    f.wait_exit();
}
