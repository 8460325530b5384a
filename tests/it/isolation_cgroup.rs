//! Isolation (docs/guide/isolation.md): every worker in its own cgroup v2 cgroup. A descendant
//! that left its worker's session, cleared its environment and was reparented to init is
//! still in the worker's cgroup, so it ends with the worker, at `stop`, and after a
//! takeover. The same runs in process-group mode print what that mode leaves, for the
//! comparison. CPU seconds come from the kernel; the memory tests need the memory
//! controller delegated to the hierarchy the tests run in.
//!
//! Every test removes the fleet's cgroup directories it caused, even when it fails
//! ([`CgroupGuard`]).

use std::time::Duration;

use afk_supervisor::cgroup::Cgroup;
use afk_supervisor::cgroup::fleet::fleet_dir;
use afk_supervisor::process;
use afk_supervisor::supervisor::os::isolation::fleet_name;
use nix::sys::signal::Signal;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT, kill};
use crate::support::{self, sweep_fixtures, wait_until};
use afk_supervisor::event_log::Kind;

/// Kills whatever is left in the fleet's cgroup subtree and removes its directories.
pub(crate) struct CgroupGuard(Cgroup);

impl CgroupGuard {
    pub(crate) fn of(f: &Fleet) -> CgroupGuard {
        let dir = fleet_dir(None, &fleet_name(&f.layout)).expect("own cgroup v2 directory");
        CgroupGuard(dir)
    }
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if !self.0.exists() {
            return;
        }
        let _ = self.0.kill();
        wait_until(WAIT, || !self.0.populated().unwrap_or(false));
        let removed = wait_until(Duration::from_secs(5), || self.0.remove_tree().is_ok());
        if !removed && !std::thread::panicking() {
            panic!("could not remove {}", self.0.dir().display());
        }
    }
}

/// A fleet in `mode` (`cgroup` or `process-group`) running `script`.
fn fleet_in(mode: &str, script: &str) -> (Fleet, CgroupGuard) {
    fleet_in_timed(mode, script, FAST_TIMING)
}

fn fleet_in_timed(mode: &str, script: &str, timing: &str) -> (Fleet, CgroupGuard) {
    let mut f = Fleet::new(script, timing);
    f.extra_env
        .push(("RED_AFK_ISOLATION".into(), mode.to_string()));
    let g = CgroupGuard::of(&f);
    (f, g)
}

/// A `sleep` argument no other test uses: its processes are counted by command line
/// (an escaper with `env -i` carries no tag).
fn marker(f: &Fleet) -> String {
    let n: u32 = f
        .tag
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!("1000.{}", n % 1_000_000)
}

/// Live processes running `sleep <marker>`.
fn marked(marker: &str) -> Vec<i32> {
    let want = format!("sleep\0{marker}\0");
    process::table()
        .into_iter()
        .filter(|p| !p.is_zombie())
        .filter(|p| {
            std::fs::read(format!("/proc/{}/cmdline", p.pid)).is_ok_and(|c| c == want.as_bytes())
        })
        .map(|p| p.pid)
        .collect()
}

/// The worker of the issue: its agent leaves a process in a new session with a cleared
/// environment (reparented away when its parent exits), then the worker runs on.
fn escaping_worker(m: &str) -> String {
    format!(
        "setsid -f env -i sleep {m} </dev/null >/dev/null 2>&1\n\
         echo up > \"$AFK_TEST_DIR/ready-$RED_AFK_SLOT\"\n\
         exec sleep 600\n"
    )
}

/// 200 children: a third in new sessions, a third ignoring SIGTERM, a third plain.
fn forking_worker(m: &str) -> String {
    format!(
        "i=0\n\
         while [ $i -lt 200 ]; do\n\
           case $((i % 3)) in\n\
             0) setsid -f sleep {m} </dev/null >/dev/null 2>&1 ;;\n\
             1) (trap '' TERM; exec sleep {m}) </dev/null >/dev/null 2>&1 & ;;\n\
             *) sleep {m} </dev/null >/dev/null 2>&1 & ;;\n\
           esac\n\
           i=$((i + 1))\n\
         done\n\
         echo up > \"$AFK_TEST_DIR/ready-$RED_AFK_SLOT\"\n\
         exec sleep 600\n"
    )
}

/// A fleet in `mode` whose worker leaves the escaper, then exits 0 once told to (it has
/// been told when this returns); and the escaper's marker.
fn escaper_that_ends(mode: &str) -> (Fleet, CgroupGuard, String) {
    let (mut f, g) = fleet_in(mode, "");
    let m = marker(&f);
    let script = format!(
        "setsid -f env -i sleep {m} </dev/null >/dev/null 2>&1\n\
         until [ -e \"$AFK_TEST_DIR/go\" ]; do sleep 0.05; done\n\
         exit 0\n"
    );
    std::fs::write(&f.script, script).unwrap();
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    assert!(wait_until(WAIT, || marked(&m).len() == 1), "{}", f.dump());
    std::fs::write(f.file("go"), "").unwrap();
    (f, g, m)
}

fn wait_ready(f: &Fleet, m: &str, n: usize) {
    let file = f.file("ready-0");
    assert!(
        wait_until(WAIT, || file.exists() && marked(m).len() >= n),
        "worker not ready: {} marked\n{}",
        marked(m).len(),
        f.dump()
    );
}

/// SIGKILL to the supervisor, then a successor that takes its worker over.
fn takeover(f: &mut Fleet) {
    kill(f.sup_pid(), Signal::SIGKILL);
    f.wait_exit();
    f.start(&["--workers", "1"]);
    f.wait_events(Kind::SupervisorTakeover, 1);
    f.wait_workers(1);
}

fn require_cgroups() {
    #[cfg(not(afk_has_cgroup_v2))]
    panic!("no writable cgroup v2 subtree here");
}

/// The worker's pid is in its attempt cgroup, which is below the fleet's directory, and
/// `state.toon` and `status` say `isolation: cgroup`.
#[test]
#[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
fn a_worker_runs_in_its_own_attempt_cgroup() {
    require_cgroups();
    let (mut f, g) = fleet_in("cgroup", "exec sleep 600\n");
    f.start(&["--workers", "1"]);
    let pids = f.wait_workers(1);
    let state = f.state().unwrap();
    assert_eq!(state.isolation.as_deref(), Some("cgroup"), "{}", f.dump());
    let cg = state.slot_detail[0]
        .cgroup
        .clone()
        .expect("cgroup recorded");
    let cg = Cgroup::at(cg);
    assert!(cg.dir().starts_with(g.0.dir().join("slot-0")), "{cg:?}");
    assert_eq!(cg.procs(), pids, "the worker alone is in its cgroup");
    let sup = afk_supervisor::cgroup::hierarchy::of_pid(f.sup_pid()).unwrap();
    assert!(
        sup.ends_with("/supervisor"),
        "supervisor in its leaf: {sup}"
    );
    let out = f.run_cmd(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("isolation: cgroup"), "{text}");
    let json = f.run_cmd(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["fleet"]["isolation"], "cgroup", "{v}");
    f.stop_fleet();
    assert!(!g.0.exists(), "the fleet's cgroups are removed at the end");
}

/// The cgroups are made while the boot sweeps run, so a boot that halts has made them:
/// the supervisor that exits 4 takes them down as a stop does, and leaves its own cgroup.
#[test]
#[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
fn a_boot_that_halts_leaves_no_fleet_cgroup() {
    require_cgroups();
    let (mut f, g) = fleet_in("cgroup", "exec sleep 600\n");
    // The docs sweep halts on a doc that git ignores (zero precedent), before any spawn.
    std::fs::write(f.repo.join(".gitignore"), ".red/\n").unwrap();
    f.env.git(&f.repo, &["add", ".gitignore"]);
    f.env.git(&f.repo, &["commit", "-q", "-m", "ignore .red"]);
    f.env.git(&f.repo, &["push", "-q", "origin", "main"]);
    std::fs::create_dir_all(f.repo.join(".red/adr")).unwrap();
    std::fs::write(f.repo.join(".red/adr/0001.md"), "private?\n").unwrap();
    f.start(&["--workers", "1"]);
    let status = f.wait_exit();
    assert_eq!(status.code(), Some(4), "{}", f.dump());
    assert_eq!(f.count(Kind::SlotSpawn), 0, "{}", f.dump());
    assert!(
        !g.0.exists(),
        "{} left after a halted boot",
        g.0.dir().display()
    );
}

/// The escaping worker ends (its issue done): what it left in a new session with a
/// cleared environment is gone with it, while the supervisor runs on.
#[test]
#[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
fn nothing_escapes_a_worker_that_ended() {
    require_cgroups();
    let (mut f, _g, m) = escaper_that_ends("cgroup");
    assert!(
        wait_until(WAIT, || marked(&m).is_empty()),
        "left after the worker's end: {:?}\n{}",
        marked(&m),
        f.dump()
    );
    eprintln!("cgroup mode, escaper after the worker's end: 0 left");
    f.stop_fleet();
}

/// The issue's measurement: the escaping worker, taken over by a successor, then `stop`.
#[test]
#[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
fn nothing_escapes_stop_after_a_takeover() {
    require_cgroups();
    let (mut f, g) = fleet_in("cgroup", "");
    let m = marker(&f);
    std::fs::write(&f.script, escaping_worker(&m)).unwrap();
    f.start(&["--workers", "1"]);
    wait_ready(&f, &m, 1);
    takeover(&mut f);
    let state = f.state().unwrap();
    assert!(
        state.slot_detail[0].cgroup.is_some(),
        "adopted with its cgroup: {state:?}"
    );
    f.stop_fleet();
    let left = marked(&m);
    eprintln!(
        "cgroup mode, escaper after takeover + stop: {} left",
        left.len()
    );
    assert!(left.is_empty(), "left after stop: {left:?}\n{}", f.dump());
    assert!(!g.0.exists(), "the fleet's cgroups are removed at the end");
}

/// 200 children, some in new sessions, some ignoring SIGTERM: none is left after `stop`,
/// nor after a takeover and `stop`.
#[test]
#[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
fn two_hundred_children_end_at_stop_and_after_a_takeover() {
    require_cgroups();
    for with_takeover in [false, true] {
        let (mut f, _g) = fleet_in("cgroup", "");
        let m = marker(&f);
        std::fs::write(&f.script, forking_worker(&m)).unwrap();
        f.start(&["--workers", "1"]);
        wait_ready(&f, &m, 200);
        if with_takeover {
            takeover(&mut f);
        }
        f.stop_fleet();
        let left = marked(&m);
        eprintln!(
            "cgroup mode, 200 children, takeover={with_takeover}: {} left after stop",
            left.len()
        );
        assert!(
            left.is_empty(),
            "left: {} {left:?}\n{}",
            left.len(),
            f.dump()
        );
    }
}

/// The same runs in process-group mode, for the comparison `docs/guide/isolation.md` states:
/// what the mode leaves is printed (the escaper with a cleared environment outlives a
/// takeover and `stop` there); the stop itself must still succeed.
#[test]
fn process_group_mode_leftovers_for_comparison() {
    let mut counts = Vec::new();
    // The escaper after its worker's end, the supervisor still running.
    {
        let (mut f, _g, m) = escaper_that_ends("process-group");
        f.wait_events(Kind::SlotExit, 1);
        // Two ticks: the stray search after a worker's end runs at the tick.
        let ticks = f.count(Kind::SupervisorTick);
        f.wait_events(Kind::SupervisorTick, ticks + 2);
        counts.push(format!(
            "escaper after its worker's end: {} left",
            marked(&m).len()
        ));
        f.stop_fleet();
        for pid in marked(&m) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    for (name, forking) in [("escaper", false), ("200 children", true)] {
        for with_takeover in [false, true] {
            let (mut f, _g) = fleet_in("process-group", "");
            let m = marker(&f);
            let script = if forking {
                forking_worker(&m)
            } else {
                escaping_worker(&m)
            };
            std::fs::write(&f.script, script).unwrap();
            f.start(&["--workers", "1"]);
            wait_ready(&f, &m, if forking { 200 } else { 1 });
            if with_takeover {
                takeover(&mut f);
            }
            f.stop_fleet();
            // Whatever the stop ended is gone by now; what is left stays.
            std::thread::sleep(Duration::from_secs(1));
            let left = marked(&m);
            counts.push(format!(
                "{name}, takeover={with_takeover}: {} left",
                left.len()
            ));
            for pid in left {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
    eprintln!("process-group mode after stop: {}", counts.join("; "));
}

/// CPU seconds from the kernel: a busy worker's are > 0, a sleeping one's ~0, in
/// `state.toon` while they run and in each attempt's figures when it ends.
#[test]
#[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
fn cpu_seconds_of_a_busy_and_a_sleeping_worker() {
    require_cgroups();
    let script = "if [ \"$RED_AFK_SLOT\" = 0 ]; then while :; do :; done; fi\nexec sleep 600\n";
    // A tree is first read one interval after its worker starts: a quarter of `stall_s`
    // here (2 s), not the minute of a longer `stall_s`.
    let timing = FAST_TIMING.replace("stall_s = 600", "stall_s = 8");
    let (mut f, _g) = fleet_in_timed("cgroup", script, &timing);
    f.start(&["--workers", "2"]);
    f.wait_workers(2);
    let cpu = |slot: usize| {
        f.state()
            .and_then(|s| s.slot_detail.into_iter().find(|d| d.slot == slot))
            .and_then(|d| d.cpu_ms)
    };
    assert!(
        wait_until(WAIT, || cpu(0).is_some_and(|ms| ms > 0) && cpu(1).is_some()),
        "busy {:?} sleeping {:?}\n{}",
        cpu(0),
        cpu(1),
        f.dump()
    );
    let sleeping = cpu(1).unwrap();
    assert!(sleeping < 100, "a sleeping worker used {sleeping} ms");
    // The busy one has run for a while by the time the kernel's count reaches 0.5 s.
    let busy_id = f.state().unwrap().slot_detail[0].worker_id.clone().unwrap();
    let cg = Cgroup::at(f.state().unwrap().slot_detail[0].cgroup.clone().unwrap());
    assert!(wait_until(WAIT, || cg
        .figures()
        .cpu_usec
        .is_some_and(|u| u > 500_000)));
    f.stop_fleet();
    let seconds = |id: &str| -> f64 {
        let prefix = format!("worker {id} attempt used ");
        let e = f
            .events_of(Kind::SlotFigures)
            .into_iter()
            .find(|e| e.msg.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no figures for {id}\n{}", f.dump()));
        e.msg[prefix.len()..]
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap()
    };
    let state_ids: Vec<String> = f
        .events_of(Kind::SlotSpawn)
        .iter()
        .filter_map(|e| e.msg.strip_prefix("spawned worker ").map(str::to_string))
        .collect();
    let sleeping_id = state_ids.iter().find(|i| **i != busy_id).unwrap();
    assert!(seconds(&busy_id) > 0.5, "{}", f.dump());
    assert!(seconds(sleeping_id) < 0.1, "{}", f.dump());
}

/// A limit asked for is enforced where its controller is delegated, and is one line at
/// start-up where it is not, never silent.
#[test]
#[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
fn a_limit_is_set_or_said_to_be_unenforceable() {
    require_cgroups();
    let (mut f, g) = fleet_in("cgroup", "exec sleep 600\n");
    let config = format!(
        "[worker]\ncommand = [\"sh\", \"{}\"]\nmemory_max = \"64M\"\npids_max = 50\n\n{FAST_TIMING}",
        f.script.display()
    );
    f.write_config(&config);
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    let cg = Cgroup::at(f.state().unwrap().slot_detail[0].cgroup.clone().unwrap());
    let controllers = g.0.subtree_control();
    for (key, file, controller, want) in [
        ("worker.memory_max", "memory.max", "memory", "67108864"),
        ("worker.pids_max", "pids.max", "pids", "50"),
    ] {
        if controllers.iter().any(|c| c == controller) {
            let got = std::fs::read_to_string(cg.dir().join(file)).unwrap();
            assert_eq!(got.trim(), want, "{file}");
        } else {
            let said = f
                .events()
                .iter()
                .filter(|e| e.msg.starts_with(key) && e.msg.contains("not enforceable"))
                .count();
            assert_eq!(said, 1, "{key}: {}", f.dump());
        }
    }
    f.stop_fleet();
}

/// `memory.peak` of an attempt reaches `status` where the memory controller is there.
#[test]
#[cfg_attr(not(afk_has_memory_cgroup), ignore = "no memory controller delegated")]
fn memory_peak_of_an_attempt() {
    let (mut f, _g) = fleet_in(
        "cgroup",
        "head -c 20000000 /dev/zero | tail -c 1 >/dev/null\nexec sleep 600\n",
    );
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    let peak = || {
        f.state()
            .and_then(|s| s.slot_detail.first().and_then(|d| d.memory_peak_kib))
    };
    assert!(
        wait_until(WAIT, || peak().is_some_and(|k| k > 1024)),
        "{:?}",
        peak()
    );
    f.stop_fleet();
}

/// An attempt the OOM killer ends is `oom-killed` in the event log.
#[test]
#[cfg_attr(not(afk_has_memory_cgroup), ignore = "no memory controller delegated")]
fn an_oom_kill_is_its_own_outcome() {
    let (mut f, _g) = fleet_in("cgroup", "");
    let config = format!(
        "[worker]\ncommand = [\"sh\", \"{}\"]\nmemory_max = \"32M\"\n\n{FAST_TIMING}",
        f.script.display()
    );
    std::fs::write(
        &f.script,
        "python3 -c 'x = bytearray(200 * 1024 * 1024)'\nexec sleep 600\n",
    )
    .unwrap();
    f.write_config(&config);
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    f.stop_fleet();
    assert!(
        f.events().iter().any(|e| e.msg.contains("oom-killed")),
        "{}",
        f.dump()
    );
}

/// The supervisor's release of an attempt the OOM killer ended (the outcome comes from the
/// cgroup's `memory.events`, which needs the memory controller; here it is given): the
/// restore comment says so above the restore line, which stays the claim mark, and the
/// issue's ledger ends the attempt `oom-killed`.
#[test]
fn an_oom_killed_attempts_restore_comment_says_so() {
    use afk_supervisor::claim::marks::{Mark, RESTORE_COMMENT};
    use afk_supervisor::claim::release::DeadWorker;
    use afk_supervisor::ledger::Outcome;
    use afk_supervisor::supervisor::release_dead;
    use afk_supervisor::sweeps::transition::OOM_KILLED_LINE;
    use afk_supervisor::tracker::LocalTracker;
    use sweep_fixtures::{Pid, Tree, dead_pid};

    let env = support::TestEnv::new();
    let repo = env.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let tree = Tree::new(&repo);
    let t = LocalTracker::new(&tree.layout, env.lib_git(&repo));
    let n = t.create("a build that needs 3G", "", &["running"]).unwrap();
    let pid = dead_pid();
    tree.claim(n, Pid::Dead(pid));
    let dead = DeadWorker {
        slot: 0,
        pid,
        start: 1,
        id: "sup-1-slot-0-1".into(),
        outcome: Outcome::OomKilled,
    };
    let events = release_dead::release(&tree.layout, &t, &dead);
    assert_eq!(
        support::local_labels(&t, n),
        vec!["ready-for-agent"],
        "{events:?}"
    );
    let comments = support::local_comments(&t, n);
    assert_eq!(
        comments,
        vec![format!("{OOM_KILLED_LINE}\n\n{RESTORE_COMMENT}")],
        "{events:?}"
    );
    assert!(comments[0].contains("OOM killer"), "{comments:?}");
    assert_eq!(Mark::parse(&comments[0]), Some(Mark::Restore));
    let ledger = afk_supervisor::ledger::read(&tree.layout, n).unwrap();
    assert_eq!(
        ledger.last().map(|r| r.outcome),
        Some(Outcome::OomKilled),
        "{ledger:?}"
    );
    assert!(!tree.layout.claims().join(n.to_string()).exists());
}

/// With no supervisor left (SIGKILLed), `stop --force` finds the fleet's processes by
/// their cgroups first: the escaper with a cleared environment goes too.
#[test]
#[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
fn stop_force_without_a_supervisor_ends_what_the_cgroups_hold() {
    require_cgroups();
    let (mut f, _g) = fleet_in("cgroup", "");
    let m = marker(&f);
    std::fs::write(&f.script, escaping_worker(&m)).unwrap();
    f.start(&["--workers", "1"]);
    wait_ready(&f, &m, 1);
    kill(f.sup_pid(), Signal::SIGKILL);
    f.wait_exit();
    let out = f.run_cmd(&["stop", "--force", "--timeout", "30"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let left = marked(&m);
    assert!(left.is_empty(), "left after stop --force: {left:?}");
    assert!(f.tagged().is_empty(), "left: {:?}", f.tagged());
}

/// The built-in worker runs inside its attempt's cgroup: the ledger record of its attempt
/// carries the attempt's CPU time from the kernel.
#[test]
#[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
fn the_built_in_workers_ledger_record_carries_the_attempts_cpu() {
    require_cgroups();
    let (mut f, _g) = fleet_in("cgroup", "");
    let agent = f.file("agent.sh");
    std::fs::write(
        &agent,
        "i=0; while [ $i -lt 200000 ]; do i=$((i + 1)); done; exit 1\n",
    )
    .unwrap();
    f.write_config(&format!(
        "[tracker]\nkind = \"local\"\n[agent]\ncommand = [\"sh\", {:?}]\n\n{FAST_TIMING}",
        agent.display().to_string()
    ));
    f.new_issue("work");
    f.start(&["--workers", "1"]);
    let first = || {
        afk_supervisor::ledger::read(&f.layout, 1)
            .ok()
            .and_then(|r| r.into_iter().next())
    };
    assert!(wait_until(WAIT, || first().is_some()), "{}", f.dump());
    let r = first().unwrap();
    assert_eq!(
        r.outcome,
        afk_supervisor::ledger::Outcome::AgentFailed(1),
        "{r:?}"
    );
    assert!(r.cpu_ms.is_some_and(|ms| ms > 0), "{r:?}");
    f.stop_fleet();
}
