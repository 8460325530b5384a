use super::*;
use std::collections::BTreeSet;

// ---- the state machine through a test double: no processes, injected time ----

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use nix::sys::signal::Signal;

use crate::exit;
use crate::process::{Pidfd, Proc};
use crate::supervisor::children::{Children, Started};
use crate::supervisor::reaper::Group;
use crate::supervisor::spawn::SpawnError;
use crate::supervisor::usage::Usage;

/// What the double was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Spawn { slot: String, pid: i32 },
    Group { leader: i32, sig: Signal },
}

#[derive(Default)]
struct World {
    next_pid: i32,
    running: HashSet<i32>,
    /// Groups with a live member (a worker's leads its group while it runs).
    groups: HashSet<i32>,
    ended: HashMap<i32, ExitKind>,
    /// Workers that ignore SIGTERM (only SIGKILL ends them).
    stubborn: HashSet<i32>,
    fail_spawns: bool,
    /// What `usage` reports per worker.
    usage: HashMap<i32, Usage>,
    calls: Vec<Call>,
}

/// A `Children` with no processes: spawns get fresh pids, signals are recorded, and a
/// worker ends when the test says so (or when a signal it obeys reaches its group).
#[derive(Clone, Default)]
struct Double(Rc<RefCell<World>>);

impl Double {
    fn end(&self, pid: i32, kind: ExitKind) {
        let mut w = self.0.borrow_mut();
        w.running.remove(&pid);
        w.groups.remove(&pid);
        w.ended.insert(pid, kind);
    }
    fn calls(&self) -> Vec<Call> {
        self.0.borrow().calls.clone()
    }
    fn spawns(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| matches!(c, Call::Spawn { .. }))
            .count()
    }
}

impl Children for Double {
    fn spawn(&mut self, spec: &SpawnSpec<'_>) -> Result<Started, SpawnError> {
        let mut w = self.0.borrow_mut();
        if w.fail_spawns {
            return Err(SpawnError::Start {
                program: spec.argv[0].clone(),
                source: std::io::Error::from_raw_os_error(libc::ENOENT),
            });
        }
        w.next_pid += 1;
        let pid = 10_000 + w.next_pid;
        w.running.insert(pid);
        w.groups.insert(pid);
        let slot = spec
            .env
            .iter()
            .find(|(k, _)| k == "RED_AFK_SLOT")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        w.calls.push(Call::Spawn { slot, pid });
        Ok(Started {
            pid,
            start: 1,
            pidfd: None,
            watched: true,
        })
    }
    fn adopt(&mut self, pid: i32, _start: u64) -> Option<Started> {
        self.0.borrow().running.contains(&pid).then_some(Started {
            pid,
            start: 1,
            pidfd: None,
            watched: true,
        })
    }
    fn is_live(&mut self, pid: i32, _start: u64) -> bool {
        self.0.borrow().running.contains(&pid)
    }
    fn exit_of(&mut self, pid: i32, _keep_zombie: bool) -> Option<ExitKind> {
        self.0.borrow().ended.get(&pid).copied()
    }
    fn next_zombie(&mut self) -> Option<(i32, bool)> {
        None
    }
    fn reap(&mut self, _pid: i32) {}
    fn signal_group(&mut self, leader: i32, _group: &Group, sig: Signal) {
        self.0.borrow_mut().calls.push(Call::Group { leader, sig });
        let obeys = sig == Signal::SIGKILL || !self.0.borrow().stubborn.contains(&leader);
        if obeys && self.0.borrow().running.contains(&leader) {
            self.end(leader, ExitKind::Signal(sig as i32));
        } else if obeys {
            self.0.borrow_mut().groups.remove(&leader);
        }
    }
    fn group_alive(&mut self, leader: i32, _group: &Group) -> bool {
        self.0.borrow().groups.contains(&leader)
    }
    fn usage(&mut self, _leaders: &[i32]) -> HashMap<i32, Usage> {
        self.0.borrow().usage.clone()
    }
    fn group_for(&self, _pidfd: Option<&Arc<Pidfd>>) -> Group {
        Group::Pinned
    }
    fn strays(&mut self, _keep: &HashSet<i32>, _lane: &std::path::Path) -> Vec<Proc> {
        Vec::new()
    }
    fn escapees(
        &mut self,
        _ended: &[(String, bool)],
        _keep: &HashSet<i32>,
        _lane: &std::path::Path,
    ) -> Vec<(String, Proc)> {
        Vec::new()
    }
    fn signal_stray(&mut self, _p: &Proc, _sig: Signal) {}
    fn reap_orphans(&mut self, _keep: &HashSet<i32>) {}
}

struct Bench {
    fleet: Fleet,
    os: Double,
    layout: Layout,
    t0: Instant,
    _dir: tempfile::TempDir,
    _rt: tokio::runtime::Runtime,
}

impl Bench {
    /// A fleet of `workers` with the default timing (fast death 30 s, circuit 5 in 90 s,
    /// half-open 60 s, stop grace 10 s), started at `t0`.
    fn new(workers: usize) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.supervisor_lane()).unwrap();
        let journal = Journal::open(&layout.event_log(), false).unwrap();
        let mut config = Config::default();
        config.fleet.workers = workers;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let os = Double::default();
        let (tx, _rx) = {
            let _in = rt.enter();
            tokio::sync::mpsc::unbounded_channel()
        };
        let argv = vec!["worker".to_string()];
        let fleet = Fleet::new(layout.clone(), &config, argv, (1, 1), journal, tx)
            .with_children(Box::new(os.clone()));
        Bench {
            fleet,
            os,
            layout,
            t0: Instant::now(),
            _dir: dir,
            _rt: rt,
        }
    }
    fn at(&self, secs: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(secs)
    }
    fn start(&mut self) {
        let now = self.t0;
        self.fleet.start(Vec::new(), 0, false);
        self.fleet.service(now);
    }
    fn pid_in(&self, slot: usize) -> Option<i32> {
        self.fleet
            .pool
            .slots
            .get(&slot)
            .and_then(|s| s.worker().map(|w| w.pid))
    }
    /// The worker in `slot` ends with `kind` at `secs`, and the loop handles it.
    fn end(&mut self, slot: usize, kind: ExitKind, secs: f64) {
        let pid = self.pid_in(slot).expect("a worker in the slot");
        self.os.end(pid, kind);
        let now = self.at(secs);
        self.fleet.own_child_ended(pid, 1, now);
        self.fleet.service(now);
    }
    fn phase(&self, slot: usize) -> String {
        self.fleet.pool.slots[&slot].shown_state().to_string()
    }
    fn kinds(&self) -> Vec<String> {
        crate::toonl::read_events(&self.layout.event_log())
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect()
    }
    fn count(&self, kind: &str) -> usize {
        self.kinds().iter().filter(|k| *k == kind).count()
    }
}

#[test]
fn a_death_respawns_in_the_same_slot_and_a_clean_exit_idles_it() {
    let mut b = Bench::new(2);
    b.start();
    assert_eq!(b.os.spawns(), 2);
    b.end(1, ExitKind::Code(1), 40.0);
    assert_eq!(b.os.spawns(), 3, "respawned at once");
    assert!(matches!(b.os.calls().last(), Some(Call::Spawn { slot, .. }) if slot == "1"));
    b.end(0, ExitKind::Code(0), 41.0);
    assert_eq!(b.phase(0), "idle");
    assert_eq!(b.os.spawns(), 3, "a clean exit waits for work");
    // The queue says there is work: the idle slot wakes; an empty queue keeps it idle.
    b.fleet.on_queue(Ok(BTreeSet::new()), b.at(42.0));
    assert_eq!(b.os.spawns(), 3);
    b.fleet.on_queue(Ok(BTreeSet::from([7])), b.at(43.0));
    assert_eq!(b.os.spawns(), 4);
    assert_eq!(b.count("slot.unidle"), 1);
}

#[test]
fn fast_deaths_trip_the_circuit_and_a_probe_that_lives_closes_it() {
    let mut b = Bench::new(1);
    b.start();
    // Five deaths 1 s apart, each within fast_death (30 s) of its start: the circuit trips.
    for i in 0..5 {
        b.end(0, ExitKind::Code(1), 1.0 + f64::from(i));
    }
    assert_eq!(b.phase(0), "parked", "{:?}", b.kinds());
    assert_eq!(b.count("circuit.trip"), 1);
    let spawns = b.os.spawns();
    assert_eq!(spawns, 5, "no respawn once tripped");
    // Nothing before the half-open backoff (60 s)...
    b.fleet.service(b.at(30.0));
    assert_eq!(b.os.spawns(), spawns);
    // ...then one probe.
    b.fleet.service(b.at(66.0));
    assert_eq!(b.os.spawns(), spawns + 1);
    assert_eq!(b.count("circuit.half-open"), 1);
    // The probe outlives fast_death: the circuit closes.
    b.fleet.service(b.at(100.0));
    assert_eq!(b.count("circuit.closed"), 1, "{:?}", b.kinds());
    assert_eq!(b.phase(0), "running");
}

#[test]
fn exit_78_parks_the_slot_for_good() {
    let mut b = Bench::new(1);
    b.start();
    b.end(0, ExitKind::Code(78), 1.0);
    assert_eq!(b.phase(0), "parked");
    b.fleet.service(b.at(10_000.0));
    b.fleet.on_queue(Ok(BTreeSet::from([1, 2])), b.at(10_001.0));
    assert_eq!(b.os.spawns(), 1, "never retried");
}

#[test]
fn a_worker_that_cannot_start_counts_as_a_fast_death() {
    let mut b = Bench::new(1);
    b.os.0.borrow_mut().fail_spawns = true;
    b.start();
    assert_eq!(b.phase(0), "parked");
    assert!(b.count("slot.spawn-failed") >= 1, "{:?}", b.kinds());
    assert_eq!(b.count("circuit.trip"), 1);
}

#[test]
fn shrinking_hard_kills_the_surplus_and_growing_spawns() {
    let mut b = Bench::new(3);
    b.start();
    let surplus = b.pid_in(2).unwrap();
    b.fleet.reconcile(2, ShrinkMode::HardKill, b.at(5.0));
    assert!(b.os.calls().contains(&Call::Group {
        leader: surplus,
        sig: Signal::SIGTERM
    }));
    b.fleet.own_child_ended(surplus, 1, b.at(5.1));
    b.fleet.service(b.at(5.2));
    assert_eq!(b.fleet.pool.slots.len(), 2, "slot 2 retired");
    assert_eq!(b.os.spawns(), 3, "a surplus is not replaced");
    b.fleet.reconcile(4, ShrinkMode::HardKill, b.at(6.0));
    assert_eq!(b.os.spawns(), 5);
    assert_eq!(b.fleet.pool.slots.len(), 4);
}

#[test]
fn a_stop_terminates_every_group_and_kills_what_ignores_it_after_the_grace() {
    let mut b = Bench::new(2);
    b.start();
    let (obedient, stubborn) = (b.pid_in(0).unwrap(), b.pid_in(1).unwrap());
    b.os.0.borrow_mut().stubborn.insert(stubborn);
    b.fleet.begin_stop(exit::SIGTERM, "SIGTERM", b.at(1.0));
    b.fleet.own_child_ended(obedient, 1, b.at(1.1));
    b.fleet.service(b.at(1.1));
    assert!(!b.fleet.stop_complete(b.at(1.2)), "one worker still runs");
    // The grace (10 s) is over: SIGKILL to the stubborn group, which ends it.
    b.fleet.service(b.at(11.5));
    assert!(b.os.calls().contains(&Call::Group {
        leader: stubborn,
        sig: Signal::SIGKILL
    }));
    b.fleet.own_child_ended(stubborn, 1, b.at(11.6));
    b.fleet.service(b.at(11.6));
    assert!(b.fleet.stop_complete(b.at(11.7)));
    assert_eq!(b.os.spawns(), 2, "nothing respawned during a stop");
    assert_eq!(b.fleet.stopping().map(|s| s.code), Some(exit::SIGTERM));
}

#[test]
fn the_whole_start_up_is_in_one_heartbeat() {
    let mut b = Bench::new(3);
    b.fleet.start(Vec::new(), 0, false);
    // No tick and no loop turn yet: the one start-up write already names every worker.
    let state = state_file::read(&b.layout.state_file()).unwrap().unwrap();
    let mut pids: Vec<i32> = state.slot_pids.iter().map(|p| p.pid).collect();
    pids.sort_unstable();
    assert_eq!(pids, vec![10_001, 10_002, 10_003]);
}

/// A queue check that finds work for every idle slot wakes them in batches of
/// [`UNIDLE_PER_TURN`], one batch per loop turn, not all at once.
#[test]
fn idle_slots_wake_in_batches() {
    let mut b = Bench::new(40);
    b.start();
    for slot in 0..40 {
        b.end(slot, ExitKind::Code(0), 40.0);
    }
    assert_eq!(b.os.spawns(), 40);
    b.fleet.on_queue(Ok((1..=100).collect()), b.at(41.0));
    let mut woken = vec![b.os.spawns() - 40];
    for i in 0..3 {
        b.fleet.service(b.at(41.1 + f64::from(i) * 0.1));
        woken.push(b.os.spawns() - 40);
    }
    assert_eq!(woken, vec![16, 32, 40, 40]);
}

/// A worker with no sign of life for `stall_s` is flagged, one whose tree's CPU time moves
/// is progressing again, and past `stall_kill_s` its group is terminated.
#[test]
fn stalls_are_judged_by_files_and_cpu_and_end_in_a_kill() {
    let mut b = Bench::new(1);
    b.start();
    let pid = b.pid_in(0).unwrap();
    let long_ago = crate::timeutil::now_epoch() - 1000;
    let set_started = |b: &mut Bench, epoch: u64| {
        let w = b
            .fleet
            .pool
            .slots
            .get_mut(&0)
            .unwrap()
            .worker_mut()
            .unwrap();
        w.started_epoch = epoch;
        w.cpu_moved_epoch = epoch;
    };
    // Started 1000 s ago (past stall_s = 600), no log, no liveness record, no CPU seen.
    set_started(&mut b, long_ago);
    b.fleet.tick(b.at(1.0));
    assert_eq!(b.count("slot.stalled"), 1, "{:?}", b.kinds());
    // Its tree computes: the first reading is the baseline, a moved one is progress.
    let cpu = |b: &Bench, ms: u64| {
        b.os.0.borrow_mut().usage.insert(
            pid,
            Usage {
                cpu_ms: ms,
                rss_kib: 1024,
                procs: 2,
                // The agent's processes: the bench runs the built-in worker.
                agent_cpu_ms: ms,
                memory_peak_kib: None,
            },
        );
    };
    cpu(&b, 100);
    b.fleet.tick(b.at(70.0));
    // Below the floor (1% of a core: 700 ms over the 70 s window) is no progress.
    cpu(&b, 700);
    b.fleet.tick(b.at(140.0));
    assert_eq!(b.count("slot.progress"), 0);
    // Read once a minute: a tick sooner changes nothing.
    cpu(&b, 1600);
    b.fleet.tick(b.at(170.0));
    assert_eq!(b.count("slot.progress"), 0);
    b.fleet.tick(b.at(210.0));
    assert_eq!(b.count("slot.progress"), 1, "{:?}", b.kinds());
    let snap = b.fleet.snapshot(b.at(210.0));
    assert_eq!(snap.slot_detail[0].cpu_ms, Some(1600));
    assert_eq!(snap.slot_detail[0].rss_kib, Some(1024));
    // Quiet again for longer than stall_kill_s (1800 s): its group is terminated.
    set_started(&mut b, long_ago - 1000);
    b.fleet.tick(b.at(220.0));
    assert_eq!(b.count("slot.stall-kill"), 1, "{:?}", b.kinds());
    assert!(b.os.calls().contains(&Call::Group {
        leader: pid,
        sig: Signal::SIGTERM
    }));
}

/// A worker that meets a tracker rate limit exits 75: not a death (no circuit trip, however
/// often), the slot idles and the next queue check with work wakes it.
#[test]
fn a_rate_limited_worker_idles_its_slot_and_trips_no_circuit() {
    let mut b = Bench::new(1);
    b.start();
    for i in 0..6 {
        b.end(0, ExitKind::Code(exit::RATE_LIMITED), 1.0 + f64::from(i));
        assert_eq!(b.phase(0), "idle");
        b.fleet
            .on_queue(Ok(BTreeSet::from([3])), b.at(1.5 + f64::from(i)));
    }
    assert_eq!(b.count("circuit.trip"), 0, "{:?}", b.kinds());
    assert_eq!(b.os.spawns(), 7);
    assert_eq!(b.phase(0), "running");
}

/// Five rounds of fast deaths in every slot (circuit_k = 5): every slot circuit trips.
/// Returns the time of the last death.
fn trip_every_slot(b: &mut Bench, slots: usize) -> f64 {
    let mut t = 0.0;
    for _ in 0..5 {
        for slot in 0..slots {
            t += 0.5;
            if b.pid_in(slot).is_some() {
                b.end(slot, ExitKind::Code(1), t);
            }
        }
    }
    t
}

/// Four slots whose workers all die at once: the second slot circuit to trip opens the
/// fleet circuit; from then on each backoff step costs exactly one spawn (the probe), and
/// a probe that lives past the fast-death time reopens every slot.
#[test]
fn a_fleet_circuit_probes_with_one_slot_per_backoff_step() {
    let mut b = Bench::new(4);
    b.start();
    let t = trip_every_slot(&mut b, 4);
    assert_eq!(b.count("fleet.circuit-open"), 1, "{:?}", b.kinds());
    let opened_at = t;
    let before = b.os.spawns();
    assert_eq!(before, 4 + 4 * 4, "no respawn once tripped");
    assert!((0..4).all(|s| b.phase(s) == "parked"));
    let snap = b.fleet.snapshot(b.at(t));
    let fc = snap.fleet_circuit.expect("fleet circuit in state.toon");
    assert_eq!(
        (fc.state.to_string().as_str(), fc.tripped_slots),
        ("open", 2)
    );
    assert!(
        fc.reason.starts_with("last exits: slot 0 "),
        "{}",
        fc.reason
    );
    // The slots' own probes (60 s after their trips) and the fleet's (60 s after it
    // opened) fall in the same minute: one spawn in all, then one per step.
    let mut per_step = Vec::new();
    let mut at = opened_at;
    for backoff in [60.0, 120.0, 240.0] {
        let spawns = b.os.spawns();
        for k in 0..=10 {
            b.fleet.service(b.at(at + backoff * f64::from(k) / 10.0));
        }
        at += backoff;
        b.fleet.service(b.at(at + 0.1));
        per_step.push(b.os.spawns() - spawns);
        let probe = (0..4)
            .find(|s| b.pid_in(*s).is_some())
            .expect("one probe runs");
        assert_eq!((0..4).filter(|s| b.pid_in(*s).is_some()).count(), 1);
        // The probe dies fast: re-parked with the next step.
        at += 1.0;
        b.end(probe, ExitKind::Code(1), at);
    }
    assert_eq!(per_step, vec![1, 1, 1], "{:?}", b.kinds());
    assert_eq!(b.count("fleet.circuit-probe"), 3);
    assert_eq!(b.count("fleet.circuit-reparked"), 3);
    assert_eq!(
        b.count("circuit.half-open"),
        0,
        "slot probes wait for the fleet's"
    );
    // The next probe (480 s) lives past fast_death (30 s): every slot reopens.
    at += 480.5;
    b.fleet.service(b.at(at));
    assert_eq!(
        b.fleet.snapshot(b.at(at)).fleet_circuit.unwrap().state,
        crate::supervisor::state_file::FleetCircuitState::Probing
    );
    b.fleet.service(b.at(at + 31.0));
    assert_eq!(b.count("fleet.circuit-closed"), 1, "{:?}", b.kinds());
    assert!((0..4).all(|s| b.phase(s) == "running"), "{:?}", b.kinds());
    assert!(b.fleet.snapshot(b.at(at + 31.0)).fleet_circuit.is_none());
}

/// A fleet probe that ends with 69 or 75 met the tracker, not the agent: the circuit stays
/// at its step (the next probe one same backoff later) and the slot is not counted dead.
#[test]
fn a_fleet_probe_that_meets_the_tracker_keeps_its_step() {
    let mut b = Bench::new(4);
    b.start();
    let t = trip_every_slot(&mut b, 4);
    assert_eq!(b.count("fleet.circuit-open"), 1, "{:?}", b.kinds());
    // The first probe (60 s) ends with 75, then the next with 69: each time the same
    // 60 s step again, one spawn per step.
    let mut at = t;
    for code in [crate::exit::RATE_LIMITED, crate::exit::TRACKER_UNAVAILABLE] {
        let spawns = b.os.spawns();
        at += 60.1;
        b.fleet.service(b.at(at));
        assert_eq!(b.os.spawns() - spawns, 1, "{:?}", b.kinds());
        let probe = (0..4).find(|s| b.pid_in(*s).is_some()).expect("a probe");
        at += 1.0;
        b.end(probe, ExitKind::Code(code), at);
        assert!((0..4).all(|s| b.pid_in(s).is_none()));
        let fc = b
            .fleet
            .snapshot(b.at(at))
            .fleet_circuit
            .expect("still open");
        assert_eq!(fc.state.to_string(), "open");
        // Not yet due a minute less a second later: the step did not grow.
        b.fleet.service(b.at(at + 59.0));
        assert!((0..4).all(|s| b.pid_in(s).is_none()), "{:?}", b.kinds());
    }
    assert_eq!(b.count("fleet.circuit-reparked"), 2);
    assert_eq!(b.count("fleet.circuit-probe"), 2);
}

/// A rate-limit pause holds every spawn and wake-up (a death is not respawned, a queue
/// with work wakes nothing), counts no death against any circuit, is logged once however
/// often it is seen, and ends by itself at the reset.
#[test]
fn a_pause_holds_spawns_until_the_reset_and_is_logged_once() {
    let mut b = Bench::new(2);
    b.start();
    let pause = crate::pause::Pause {
        reason: "rate limited: API rate limit exceeded".into(),
        until_epoch: now_epoch() + 100,
        since_epoch: now_epoch(),
    };
    b.fleet.on_paused(pause.clone(), b.at(1.0));
    b.fleet.on_paused(pause.clone(), b.at(2.0));
    assert_eq!(b.count("fleet.paused"), 1);
    let snap = b.fleet.snapshot(b.at(2.0));
    assert_eq!(
        snap.paused.map(|p| p.until_epoch),
        Some(Some(pause.until_epoch))
    );
    b.end(0, ExitKind::Code(exit::RATE_LIMITED), 3.0);
    // A plain death while paused is not respawned either.
    b.end(1, ExitKind::Code(1), 3.2);
    for i in 0..6 {
        b.fleet
            .on_queue(Ok(BTreeSet::from([4])), b.at(3.5 + f64::from(i)));
        b.fleet.service(b.at(3.6 + f64::from(i)));
    }
    assert_eq!(
        b.os.spawns(),
        2,
        "nothing spawned while paused: {:?}",
        b.kinds()
    );
    assert_eq!((b.phase(0).as_str(), b.phase(1).as_str()), ("idle", "idle"));
    assert_eq!(b.count("circuit.trip"), 0);
    assert_eq!(b.count("fleet.resumed"), 0);
    assert!(b.fleet.next_deadline(b.at(10.0)) <= b.at(1.0 + 100.0));
    b.fleet.service(b.at(102.0));
    assert_eq!(b.count("fleet.resumed"), 1, "{:?}", b.kinds());
    assert!(b.fleet.snapshot(b.at(102.0)).paused.is_none());
    b.fleet.on_queue(Ok(BTreeSet::from([4, 5])), b.at(103.0));
    assert_eq!(b.phase(0), "running");
    assert_eq!(b.phase(1), "running");
}

/// A fleet probe that exits 0 closes the fleet circuit and idles like any clean exit; the
/// other parked slots spawn at once.
#[test]
fn a_fleet_probe_that_exits_0_closes_the_circuit() {
    let mut b = Bench::new(2);
    b.start();
    let t = trip_every_slot(&mut b, 2);
    assert_eq!(b.count("fleet.circuit-open"), 1, "{:?}", b.kinds());
    b.fleet.service(b.at(t + 61.0));
    let probe = (0..2).find(|s| b.pid_in(*s).is_some()).expect("a probe");
    b.end(probe, ExitKind::Code(0), t + 62.0);
    assert_eq!(b.count("fleet.circuit-closed"), 1, "{:?}", b.kinds());
    assert_eq!(b.phase(probe), "idle");
    assert_eq!(b.phase(1 - probe), "running");
}
