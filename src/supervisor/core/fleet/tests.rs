//! The fleet's state machine fed events, with its effects read back: no processes, no
//! files, injected time. The bench plays the world the driver would: it answers spawns
//! with fresh pids, ends the workers a signal reaches (unless they ignore SIGTERM), and
//! says which dying groups still have members at each turn.

use super::*;
use crate::exit_code;
use std::collections::{BTreeSet, HashMap, HashSet};

use nix::sys::signal::Signal;

use crate::event_log::Kind;
use crate::lanes::slot_control;
use crate::supervisor::core::event::{ControlFiles, PauseCause, TickFacts, WorkerFiles};
use crate::supervisor::core::progress::Usage;
use crate::supervisor::core::reaper::{Order, Stop};
use crate::supervisor::os::signals::{Heard, heard};

/// What the bench's processes are and what the fleet asked of them.
#[derive(Default)]
struct World {
    next_pid: i32,
    running: HashSet<i32>,
    /// Groups with a live member (a worker's leads its group while it runs).
    groups: HashSet<i32>,
    /// How each ended worker ended, for the exit the bench reports.
    ended: HashMap<i32, ExitKind>,
    /// Workers that ignore SIGTERM (only SIGKILL ends them).
    stubborn: HashSet<i32>,
    fail_spawns: bool,
    /// A retire file cannot be written (a full disk).
    fail_retire: bool,
    /// Each slot-control answer.
    acks: Vec<slot_control::Ack>,
    /// Spawned workers get no pidfd watch (their end is found on SIGCHLD).
    unwatched: bool,
    /// Spawned workers come with a pidfd the driver holds ...
    pidfds: bool,
    /// ... these ones, by (pid, start), until the fleet lets go of them.
    held: HashSet<(i32, u64)>,
    /// What a CPU reading reports per worker.
    usage: HashMap<i32, Usage>,
    /// Each spawn: slot and pid.
    spawns: Vec<(usize, i32)>,
    /// Each group signal: leader and signal.
    signals: Vec<(i32, Stop)>,
    lines: Vec<event_log::Record>,
    /// Heartbeats written, and the last.
    writes: usize,
    state: Option<StateFile>,
    /// Every effect's name, in order.
    effects: Vec<String>,
    /// Each stall mark: the attempt dir and whether (why) it was fleet-wide.
    marks: Vec<(std::path::PathBuf, Option<String>)>,
}

struct Bench {
    fleet: Fleet,
    world: World,
    t0: Instant,
    /// The wall-clock time at `t0`: a bench's clock moves only as its events say.
    wall0: std::time::SystemTime,
}

fn quiet() -> ControlFiles {
    ControlFiles {
        scale: Found::None,
        slot_request: slot_control::Found::None,
        slot_ack: slot_control::Found::None,
    }
}

impl Bench {
    /// A fleet of `workers` with the default timing (fast death 30 s, circuit 5 in 90 s,
    /// half-open 60 s, stop grace 10 s), started at `t0`.
    fn new(workers: usize) -> Bench {
        Bench::with_groups(workers, false)
    }
    /// [`Bench::new`], where the kernel signals groups through pidfds (`pidfd_groups`) or
    /// not.
    fn with_groups(workers: usize, pidfd_groups: bool) -> Bench {
        let mut config = Config::default();
        config.fleet.workers = workers;
        let argv = vec!["worker".to_string()];
        let layout = Layout::new("/afk-unit-fleet");
        let (t0, wall0) = (Instant::now(), std::time::SystemTime::now());
        let start = Now {
            at: t0,
            wall: wall0,
        };
        let fleet = Fleet::new(layout, &config, argv, (1, 1), pidfd_groups, start);
        Bench {
            fleet,
            world: World::default(),
            t0,
            wall0,
        }
    }
    fn at(&self, secs: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(secs)
    }
    /// The event time `secs` into the bench.
    fn now(&self, secs: f64) -> Now {
        let d = Duration::from_secs_f64(secs);
        Now {
            at: self.t0 + d,
            wall: self.wall0 + d,
        }
    }
    fn start(&mut self) {
        let effects = self.fleet.start(Vec::new(), 0, false, self.now(0.0));
        self.carry(effects, 0.0);
        self.turn(0.0);
    }
    /// Carries out effects as the driver would, answers fed at once.
    fn carry(&mut self, effects: Vec<Effect>, secs: f64) {
        for e in effects {
            if let Some(answer) = self.effect(e, secs) {
                let more = self.fleet.handle(answer, self.now(secs));
                self.carry(more, secs);
            }
        }
    }
    fn effect(&mut self, e: Effect, secs: f64) -> Option<Event> {
        let now = self.at(secs);
        let name = format!("{e:?}");
        let name = name.split([' ', '(', '{']).next().unwrap_or("").to_string();
        self.world.effects.push(name);
        let w = &mut self.world;
        match e {
            Effect::Log(l) => w.lines.push(l),
            Effect::MarkStall {
                attempt_dir,
                fleet_wide,
            } => w.marks.push((attempt_dir, fleet_wide)),
            Effect::WriteState => {
                w.writes += 1;
                w.state = Some(self.fleet.snapshot_written(now));
            }
            Effect::Spawn { slot, seq, .. } => {
                if w.fail_spawns {
                    return Some(Event::SpawnFailed {
                        slot,
                        seq,
                        error: "cannot start worker: No such file or directory".into(),
                    });
                }
                w.next_pid += 1;
                let pid = 10_000 + w.next_pid;
                w.running.insert(pid);
                w.groups.insert(pid);
                w.spawns.push((slot, pid));
                if w.pidfds {
                    w.held.insert((pid, 1));
                }
                return Some(Event::Spawned {
                    slot,
                    seq,
                    started: Started {
                        pid,
                        start: 1,
                        pidfd: w.pidfds,
                        watched: !w.unwatched,
                    },
                    log: format!("/afk-unit-fleet/slot-{slot}.log").into(),
                    cgroup: None,
                });
            }
            Effect::Group(Order::Signal { leader, sig, .. }) => {
                w.signals.push((leader, sig));
                let obeys = sig == Stop::Kill || !w.stubborn.contains(&leader);
                if obeys {
                    w.groups.remove(&leader);
                    if w.running.remove(&leader) {
                        w.ended.insert(leader, ExitKind::Signal(sig as i32));
                    }
                }
            }
            Effect::Group(Order::Forget { leader, start }) => {
                assert!(w.held.remove(&(leader, start)), "forgot {leader} twice");
            }
            Effect::WriteRetire { slot, asker, .. } => {
                let error = w.fail_retire.then(|| {
                    format!("/afk-unit-fleet/slot-{slot}.retire: No space left on device")
                });
                return Some(Event::RetireAsked { slot, asker, error });
            }
            Effect::AnswerSlotControl(ack) => w.acks.push(ack),
            Effect::ReadCircuitLog { tripped, log } => {
                return Some(Event::CircuitLog {
                    tripped,
                    log,
                    lines: vec!["Error: token expired".into()],
                });
            }
            Effect::ReadFatalReason { slot, .. } => {
                return Some(Event::FatalReason {
                    slot,
                    reason: "config: no such key".into(),
                });
            }
            _ => {}
        }
        None
    }
    fn feed(&mut self, ev: Event, secs: f64) {
        let effects = self.fleet.handle(ev, self.now(secs));
        self.carry(effects, secs);
    }
    /// `sig` reaches the supervisor at `secs` and is fed as the loop feeds it (through
    /// `signals::heard`, the one place a signal's meaning is decided); SIGUSR1 with the
    /// control files as the driver would read them.
    fn signal(&mut self, sig: Signal, control: ControlFiles, secs: f64) {
        match heard(sig) {
            Some(Heard::Control) => self.feed(Event::Control(Box::new(control)), secs),
            Some(h) => {
                let ev = h.event().expect("every signal but SIGUSR1 is one event");
                self.feed(ev, secs);
            }
            None => {}
        }
    }
    /// The end of a loop turn, with which dying groups still have members.
    fn turn(&mut self, secs: f64) {
        let alive = self
            .fleet
            .dying_groups()
            .into_iter()
            .map(|(l, _)| (l, self.world.groups.contains(&l)))
            .collect();
        self.feed(Event::Turn { alive }, secs);
    }
    /// The tick, with what the driver would read: no files, the world's CPU readings.
    fn tick(&mut self, secs: f64) {
        self.tick_with(Ok(false), quiet(), secs);
    }
    fn tick_with(&mut self, stop_file: Result<bool, String>, control: ControlFiles, secs: f64) {
        let now = self.at(secs);
        let progress = self
            .fleet
            .progress_wanted(now, |_| false)
            .into_iter()
            .map(|q| {
                let files = WorkerFiles {
                    attempt: None,
                    files_epoch: q.started_epoch,
                    title: None,
                };
                (q.pid, files)
            })
            .collect();
        let usage = self
            .fleet
            .usage_wanted(now)
            .map(|_| self.world.usage.clone());
        let facts = TickFacts {
            stop_file,
            control,
            progress,
            usage,
            gone: Vec::new(),
        };
        self.feed(Event::Tick(Box::new(facts)), secs);
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
        self.world.running.remove(&pid);
        self.world.groups.remove(&pid);
        self.exited(pid, kind, secs);
        self.turn(secs);
    }
    /// One worker started with a pidfd the driver holds, where the kernel signals groups
    /// through pidfds (`pidfd_groups`) or not; and its pid.
    fn one_with_pidfd(pidfd_groups: bool) -> (Bench, i32) {
        let mut b = Bench::with_groups(1, pidfd_groups);
        b.world.pidfds = true;
        b.start();
        let pid = b.pid_in(0).expect("a worker in slot 0");
        (b, pid)
    }
    /// The worker in `slot` was answered as started, and its `execve` failed (`why`): its
    /// end as the driver feeds it at `secs`, and the turn.
    fn not_started(&mut self, slot: usize, why: &str, secs: f64) {
        let pid = self.pid_in(slot).expect("a worker in the slot");
        self.world.running.remove(&pid);
        self.world.groups.remove(&pid);
        let error = format!("cannot start `worker`: {why}");
        self.feed(
            Event::NotStarted {
                pid,
                start: 1,
                error,
            },
            secs,
        );
        self.turn(secs);
    }
    /// Worker `pid` ends (exit 1) at `secs`, and a member of its group stays, ignoring
    /// SIGTERM.
    fn leader_ends_group_stays(&mut self, pid: i32, secs: f64) {
        self.world.running.remove(&pid);
        self.world.stubborn.insert(pid);
        self.exited(pid, ExitKind::Code(1), secs);
    }
    /// Worker `pid`'s end as the driver feeds it.
    fn exited(&mut self, pid: i32, kind: ExitKind, secs: f64) {
        let start = 1;
        self.feed(Event::Exited { pid, start, kind }, secs);
    }
    /// The driver reports how worker `pid` ended, as the world has it.
    fn reported(&mut self, pid: i32, secs: f64) {
        let kind = self
            .world
            .ended
            .get(&pid)
            .copied()
            .expect("the worker ended");
        self.exited(pid, kind, secs);
    }
    /// The operator's request `id` to stop or restart one slot, as SIGUSR1 reads it.
    fn slot_control(
        &mut self,
        id: &str,
        slot: usize,
        action: slot_control::Action,
        shrink_mode: ShrinkMode,
        secs: f64,
    ) {
        let request = slot_control::Request {
            id: id.into(),
            slot,
            action,
            shrink_mode,
            via: "cli".into(),
        };
        let control = ControlFiles {
            slot_request: slot_control::Found::Some(request),
            ..quiet()
        };
        self.signal(Signal::SIGUSR1, control, secs);
    }
    fn scale(&mut self, target: usize, shrink_mode: ShrinkMode, secs: f64) {
        let control = ControlFiles {
            scale: Found::Directive(ScaleDirective {
                target,
                shrink_mode,
                runner: None,
            }),
            ..quiet()
        };
        self.signal(Signal::SIGUSR1, control, secs);
    }
    /// The worker in `slot` has shown no sign of life since `epoch` (its start included).
    fn quiet_since(&mut self, slot: usize, epoch: u64) {
        let slot = self.fleet.pool.slots.get_mut(&slot).unwrap();
        let w = slot.worker_mut().unwrap();
        w.started_epoch = epoch;
        w.seen.cpu_moved_epoch = epoch;
        w.seen.progress_epoch = epoch;
    }
    fn spawns(&self) -> usize {
        self.world.spawns.len()
    }
    fn signalled(&self, leader: i32, sig: Stop) -> bool {
        self.world.signals.contains(&(leader, sig))
    }
    fn phase(&self, slot: usize) -> String {
        self.fleet.pool.slots[&slot].shown_state().to_string()
    }
    fn kinds(&self) -> Vec<Kind> {
        self.world.lines.iter().map(|e| e.kind.clone()).collect()
    }
    /// The event-log records of `kind`, in order.
    fn records(&self, kind: Kind) -> Vec<&event_log::Record> {
        self.world.lines.iter().filter(|l| l.kind == kind).collect()
    }
    fn count(&self, kind: Kind) -> usize {
        self.kinds().iter().filter(|k| **k == kind).count()
    }
}

#[test]
fn a_death_respawns_in_the_same_slot_and_a_clean_exit_idles_it() {
    let mut b = Bench::new(2);
    b.start();
    assert_eq!(b.spawns(), 2);
    b.end(1, ExitKind::Code(exit_code::FAILED), 40.0);
    assert_eq!(b.spawns(), 3, "respawned at once");
    assert_eq!(b.world.spawns.last().map(|s| s.0), Some(1));
    b.end(0, ExitKind::Code(exit_code::OK), 41.0);
    assert_eq!(b.phase(0), "idle");
    assert_eq!(b.spawns(), 3, "a clean exit waits for work");
    // The queue says there is work: the idle slot wakes; an empty queue keeps it idle.
    b.feed(Event::Queue(Ok(BTreeSet::new())), 42.0);
    assert_eq!(b.spawns(), 3);
    b.feed(Event::Queue(Ok(BTreeSet::from([7]))), 43.0);
    assert_eq!(b.spawns(), 4);
    assert_eq!(b.count(Kind::SlotUnidle), 1);
}

#[test]
fn fast_deaths_trip_the_circuit_and_a_probe_that_lives_closes_it() {
    let mut b = Bench::new(1);
    b.start();
    // Five deaths 1 s apart, each within fast_death (30 s) of its start: the circuit trips.
    for i in 0..5 {
        b.end(0, ExitKind::Code(exit_code::FAILED), 1.0 + f64::from(i));
    }
    assert_eq!(b.phase(0), "parked", "{:?}", b.kinds());
    assert_eq!(b.count(Kind::CircuitTrip), 1);
    let spawns = b.spawns();
    assert_eq!(spawns, 5, "no respawn once tripped");
    // Nothing before the half-open backoff (60 s)...
    b.turn(30.0);
    assert_eq!(b.spawns(), spawns);
    // ...then one probe.
    b.turn(66.0);
    assert_eq!(b.spawns(), spawns + 1);
    assert_eq!(b.count(Kind::CircuitHalfOpen), 1);
    // The probe outlives fast_death: the circuit closes.
    b.turn(100.0);
    assert_eq!(b.count(Kind::CircuitClosed), 1, "{:?}", b.kinds());
    assert_eq!(b.phase(0), "running");
    // Closed, the slot leaves the few a turn looks at for circuit work (by the next).
    b.turn(101.0);
    assert!(b.fleet.pool.unsettled.is_empty());
}

#[test]
fn a_workers_end_finds_its_slot_by_its_pid_and_start_token() {
    let mut b = Bench::new(3);
    b.start();
    let pid = b.pid_in(1).unwrap();
    let start = b.fleet.pool.slots[&1].worker().unwrap().start;
    let spawns = b.spawns();
    // The same pid with another start token is another process: not this worker.
    let kind = ExitKind::Code(exit_code::FAILED);
    b.feed(
        Event::Exited {
            pid,
            start: start + 1,
            kind,
        },
        2.0,
    );
    assert_eq!((b.pid_in(1), b.spawns()), (Some(pid), spawns));
    b.feed(Event::Exited { pid, start, kind }, 3.0);
    assert_eq!(b.spawns(), spawns + 1, "its slot respawned");
    assert_ne!(b.pid_in(1), Some(pid));
    // One entry per running worker: the ended one's went with it.
    assert_eq!(b.fleet.pool.by_worker.len(), 3);
    assert_eq!(b.fleet.pool.slot_of(pid, start), None);
}

#[test]
fn the_live_workers_are_counted_against_the_target_only_beside_surplus_slots() {
    let mut b = Bench::new(3);
    b.start();
    // Asked before a spawn into an unoccupied slot: slot 0 is that one here.
    b.fleet.pool.slots.get_mut(&0).unwrap().phase = Phase::Idle { confirmed: false };
    assert!(!b.fleet.pool.target_met(), "3 slots, target 3, 2 live");
    b.fleet.pool.target = 2;
    assert!(b.fleet.pool.target_met(), "3 slots, target 2, 2 live");
    b.fleet.pool.slots.get_mut(&2).unwrap().retiring = true;
    assert!(
        !b.fleet.pool.target_met(),
        "a retiring slot's worker does not count"
    );
}

#[test]
fn a_turn_looks_only_at_the_slots_whose_circuit_is_open() {
    let mut b = Bench::new(50);
    b.start();
    // A death that trips nothing leaves its slot among the unsettled only until the
    // next turn; five fast ones in slot 7 open its circuit, and it stays.
    b.end(3, ExitKind::Code(exit_code::FAILED), 1.0);
    for i in 0..5 {
        b.end(7, ExitKind::Code(exit_code::FAILED), 2.0 + f64::from(i));
    }
    b.turn(8.0);
    assert_eq!(b.phase(7), "parked");
    assert_eq!(
        b.fleet.pool.unsettled.iter().copied().collect::<Vec<_>>(),
        [7]
    );
    // The loop's deadline is that slot's probe (60 s after its trip), before the tick.
    let probe = b.fleet.next_deadline(b.at(8.0));
    assert!(probe <= b.at(6.0 + 60.0 + 1.0), "{probe:?}");
}

#[test]
fn exit_78_parks_the_slot_for_good() {
    let mut b = Bench::new(1);
    b.start();
    b.end(0, ExitKind::Code(exit_code::CONFIG), 1.0);
    assert_eq!(b.phase(0), "parked");
    b.turn(10_000.0);
    b.feed(Event::Queue(Ok(BTreeSet::from([1, 2]))), 10_001.0);
    assert_eq!(b.spawns(), 1, "never retried");
}

#[test]
fn a_worker_that_cannot_start_counts_as_a_fast_death() {
    let mut b = Bench::new(1);
    b.world.fail_spawns = true;
    b.start();
    assert_eq!(b.phase(0), "parked");
    assert!(b.count(Kind::SlotSpawnFailed) >= 1, "{:?}", b.kinds());
    assert_eq!(b.count(Kind::CircuitTrip), 1);
}

/// A fleet whose workers cannot start at all (a missing command) opens the fleet circuit
/// with the start error as each slot's last end, not an empty list of exits.
#[test]
fn a_fleet_that_cannot_start_says_why_when_its_circuit_opens() {
    let mut b = Bench::new(2);
    b.world.fail_spawns = true;
    b.start();
    let open = b.records(Kind::FleetCircuitOpen);
    assert_eq!(open.len(), 1, "{:?}", b.kinds());
    for slot in 0..2 {
        let said =
            format!("slot {slot} could not start (cannot start worker: No such file or directory)");
        assert!(open[0].msg.contains(&said), "{}", open[0].msg);
    }
}

/// Where groups are signalled through pidfds, an ended worker's pidfd is held on (by the
/// driver: the fleet only names it) while its group is terminated, and let go of once the
/// group is gone, here after the SIGKILL a member that ignores SIGTERM needs.
#[test]
fn a_workers_pidfd_is_let_go_of_when_its_group_is_gone() {
    let (mut b, pid) = Bench::one_with_pidfd(true);
    assert_eq!(b.world.held, HashSet::from([(pid, 1)]));
    b.leader_ends_group_stays(pid, 1.0);
    b.turn(1.0);
    assert!(b.signalled(pid, Stop::Term));
    assert!(
        b.world.held.contains(&(pid, 1)),
        "held while its group lives"
    );
    b.turn(5.0);
    assert!(b.world.held.contains(&(pid, 1)));
    b.turn(12.0);
    assert!(b.signalled(pid, Stop::Kill));
    b.turn(12.1);
    let successor = b.pid_in(0).unwrap();
    assert_eq!(
        b.world.held,
        HashSet::from([(successor, 1)]),
        "{:?}",
        b.kinds()
    );
}

/// Where groups are pinned (or in cgroups), an ended worker's pidfd follows nothing: it is
/// let go of with the worker's end, while its group is still being terminated.
#[test]
fn a_pidfd_no_group_is_followed_through_is_let_go_of_at_the_workers_end() {
    let (mut b, pid) = Bench::one_with_pidfd(false);
    b.leader_ends_group_stays(pid, 1.0);
    assert!(!b.world.held.contains(&(pid, 1)), "let go of at its end");
    assert!(
        b.fleet.groups.reaper.contains(pid),
        "its group still terminated"
    );
}

/// A worker answered as started whose `execve` then failed: its end is the spawn's
/// failure, logged as one (no `slot.exit`), and a fast death, as a spawn that failed at
/// once is: five of them trip the slot's circuit.
#[test]
fn a_worker_whose_execve_failed_after_its_spawn_counts_as_a_failed_start() {
    let mut b = Bench::new(1);
    b.start();
    for i in 0..5 {
        b.not_started(0, "No such file or directory (os error 2)", 1.0 + i as f64);
    }
    let failed = b.records(Kind::SlotSpawnFailed);
    assert_eq!(failed.len(), 5, "{:?}", b.kinds());
    assert!(
        failed
            .iter()
            .all(|l| l.msg.contains("cannot start `worker`"))
    );
    assert_eq!(b.count(Kind::SlotExit), 0, "{:?}", b.kinds());
    assert_eq!(b.count(Kind::CircuitTrip), 1, "{:?}", b.kinds());
    assert_eq!(b.phase(0), "parked");
    assert_eq!(b.spawns(), 5);
}

/// The probe after an agent hold whose `execve` fails after its answer did not run the
/// agent: the fleet stays held to that one probe, which its slot tries again, as it does
/// after a spawn that failed at once.
#[test]
fn a_probe_whose_execve_failed_does_not_resume_the_fleet() {
    let mut b = Bench::new(2);
    b.start();
    b.end(0, ExitKind::Code(exit_code::AGENT_PAUSED), 1.0);
    b.end(1, ExitKind::Code(exit_code::AGENT_PAUSED), 1.0);
    let wall0 = b
        .wall0
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let hold = crate::supervisor::core::event::Hold {
        kind: crate::supervisor::core::event::HoldKind::Agent,
        words: "usage limit".into(),
        reason: "limit reached".into(),
        until_epoch: wall0 + 60,
    };
    b.feed(Event::Hold(hold, None), 2.0);
    b.turn(62.0);
    assert_eq!(b.count(Kind::FleetAgentProbe), 1, "{:?}", b.kinds());
    let spawns = b.spawns();
    b.not_started(0, "Text file busy (os error 26)", 62.5);
    assert_eq!(b.count(Kind::FleetAgentResumed), 0, "{:?}", b.kinds());
    assert_eq!(b.fleet.holds.probe(), Some(0));
    assert_eq!(b.spawns(), spawns + 1, "the probe tried again");
    assert!(b.pid_in(1).is_none(), "no other slot spawned");
}

#[test]
fn shrinking_hard_kills_the_surplus_and_growing_spawns() {
    let mut b = Bench::new(3);
    b.start();
    let surplus = b.pid_in(2).unwrap();
    b.scale(2, ShrinkMode::HardKill, 5.0);
    assert!(b.signalled(surplus, Stop::Term));
    b.reported(surplus, 5.1);
    b.turn(5.2);
    assert_eq!(b.fleet.pool.slots.len(), 2, "slot 2 retired");
    assert_eq!(b.spawns(), 3, "a surplus is not replaced");
    b.scale(4, ShrinkMode::HardKill, 6.0);
    assert_eq!(b.spawns(), 5);
    assert_eq!(b.fleet.pool.slots.len(), 4);
}

#[test]
fn a_stop_terminates_every_group_and_kills_what_ignores_it_after_the_grace() {
    let mut b = Bench::new(2);
    b.start();
    let (obedient, stubborn) = (b.pid_in(0).unwrap(), b.pid_in(1).unwrap());
    b.world.stubborn.insert(stubborn);
    b.signal(Signal::SIGTERM, quiet(), 1.0);
    assert!(b.signalled(obedient, Stop::Term) && b.signalled(stubborn, Stop::Term));
    b.reported(obedient, 1.1);
    b.turn(1.1);
    assert!(!b.fleet.stop_settled(), "one worker still runs");
    // The grace (10 s) is over: SIGKILL to the stubborn group, which ends it.
    b.turn(11.5);
    assert!(b.signalled(stubborn, Stop::Kill));
    b.reported(stubborn, 11.6);
    b.turn(11.6);
    assert!(b.fleet.stop_settled());
    assert_eq!(b.spawns(), 2, "nothing respawned during a stop");
    assert_eq!(b.fleet.stopping().map(|s| s.code), Some(exit_code::SIGTERM));
}

#[test]
fn the_whole_start_up_is_in_one_heartbeat() {
    let mut b = Bench::new(3);
    let effects = b.fleet.start(Vec::new(), 0, false, b.now(0.0));
    // Every spawn is asked for at once, and the one heartbeat after them.
    let names: Vec<String> = effects
        .iter()
        .map(|e| {
            format!("{e:?}")
                .chars()
                .take_while(|c| c.is_alphanumeric())
                .collect()
        })
        .collect();
    assert_eq!(names, vec!["Spawn", "Spawn", "Spawn", "WriteState"]);
    b.carry(effects, 0.0);
    // No tick and no loop turn yet: the one start-up write already names every worker.
    assert_eq!(b.world.writes, 1);
    let state = b.world.state.clone().unwrap();
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
        b.end(slot, ExitKind::Code(exit_code::OK), 40.0);
    }
    assert_eq!(b.spawns(), 40);
    b.feed(Event::Queue(Ok((1..=100).collect())), 41.0);
    let mut woken = vec![b.spawns() - 40];
    for i in 0..3 {
        b.turn(41.1 + f64::from(i) * 0.1);
        woken.push(b.spawns() - 40);
    }
    assert_eq!(woken, vec![16, 32, 40, 40]);
}

/// A worker busy from its start (a build, silent) is progressing at its first reading: it
/// is measured from its start, when its tree had used nothing.
#[test]
fn a_worker_busy_from_its_start_progresses_at_its_first_reading() {
    let mut b = Bench::new(1);
    b.start();
    let pid = b.pid_in(0).unwrap();
    b.quiet_since(0, epoch_secs(b.wall0) - 1000);
    b.world.usage.insert(
        pid,
        Usage {
            cpu_ms: 60_000,
            rss_kib: 1024,
            procs: 2,
            agent_cpu_ms: 60_000,
            memory_peak_kib: None,
        },
    );
    b.tick(70.0);
    assert_eq!(b.count(Kind::SlotStalled), 0, "{:?}", b.kinds());
}

/// A worker with no sign of life for `stall_s` is flagged, one whose tree's CPU time moves
/// is progressing again, and past `stall_kill_s` its group is terminated.
#[test]
fn stalls_are_judged_by_files_and_cpu_and_end_in_a_kill() {
    let mut b = Bench::new(1);
    b.start();
    let pid = b.pid_in(0).unwrap();
    let long_ago = epoch_secs(b.wall0) - 1000;
    // Started 1000 s ago (past stall_s = 600), no log, no liveness record, no CPU seen.
    b.quiet_since(0, long_ago);
    b.tick(1.0);
    assert_eq!(b.count(Kind::SlotStalled), 1, "{:?}", b.kinds());
    // Its tree computes: the first reading is measured from its start (100 ms over 70 s,
    // under the floor), a moved one is progress.
    let cpu = |b: &mut Bench, ms: u64| {
        b.world.usage.insert(
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
    cpu(&mut b, 100);
    b.tick(70.0);
    // Below the floor (1% of a core: 700 ms over the 70 s window) is no progress.
    cpu(&mut b, 700);
    b.tick(140.0);
    assert_eq!(b.count(Kind::SlotProgress), 0);
    // Read once a minute: a tick sooner changes nothing.
    cpu(&mut b, 1600);
    b.tick(170.0);
    assert_eq!(b.count(Kind::SlotProgress), 0);
    b.tick(210.0);
    assert_eq!(b.count(Kind::SlotProgress), 1, "{:?}", b.kinds());
    let snap = b.fleet.snapshot(b.at(210.0));
    assert_eq!(snap.slot_detail[0].cpu_ms, Some(1600));
    assert_eq!(snap.slot_detail[0].rss_kib, Some(1024));
    // Quiet again for longer than stall_kill_s (1800 s): its group is terminated.
    b.quiet_since(0, long_ago - 1000);
    b.tick(220.0);
    assert_eq!(b.count(Kind::SlotStallKill), 1, "{:?}", b.kinds());
    assert!(b.signalled(pid, Stop::Term));
}

/// A quiet tick compares the fleet-wide part of the heartbeat only; a tick that read a
/// figure shown per slot compares the rows and writes at once, and a row that changed
/// without anything saying so is still written within `ROWS_CHECK_EVERY` ticks.
#[test]
fn a_reading_is_written_at_its_tick_and_an_unflagged_row_within_a_few() {
    let mut b = Bench::new(2);
    b.start();
    b.tick(16.0);
    let p0 = b.pid_in(0).unwrap();
    b.world.usage.insert(
        p0,
        Usage {
            cpu_ms: 4242,
            rss_kib: 2048,
            procs: 1,
            agent_cpu_ms: 4242,
            memory_peak_kib: None,
        },
    );
    let before = b.world.writes;
    // The first reading is a minute after the start.
    b.tick(61.0);
    assert_eq!(b.world.writes, before + 1, "{:?}", b.world.effects);
    let row = |b: &Bench| {
        let state = b.world.state.clone().unwrap();
        state.slot_detail.into_iter().find(|d| d.slot == 0).unwrap()
    };
    assert_eq!(row(&b).cpu_ms, Some(4242));
    // Behind the log's back: no line, no flag.
    b.fleet.pool.slots.get_mut(&0).unwrap().restarts = 99;
    let written = b.world.writes;
    let mut ticks = 0;
    while b.world.writes == written && ticks < 10 {
        ticks += 1;
        b.tick(61.0 + 15.0 * f64::from(ticks));
    }
    assert_eq!(
        ticks,
        heartbeat::ROWS_CHECK_EVERY as i32,
        "{:?}",
        b.world.effects
    );
    assert_eq!(row(&b).restarts, 99);
}

/// A tree is first read one interval (a minute) after its worker starts; a tree found
/// still waits twice as long per still reading, and one whose CPU moves is read every
/// minute again. What each tick reads is only the workers due.
#[test]
fn a_still_tree_is_read_less_and_less_often_a_moving_one_every_minute() {
    let mut b = Bench::new(2);
    b.start();
    let (p0, p1) = (b.pid_in(0).unwrap(), b.pid_in(1).unwrap());
    let usage = |ms| Usage {
        cpu_ms: ms,
        rss_kib: 1024,
        procs: 1,
        agent_cpu_ms: ms,
        memory_peak_kib: None,
    };
    let wanted = |b: &Bench, secs: f64| {
        let mut w = b.fleet.usage_wanted(b.at(secs)).unwrap_or_default();
        w.sort_unstable();
        w
    };
    b.world.usage.insert(p0, usage(100));
    b.world.usage.insert(p1, usage(100));
    assert!(wanted(&b, 30.0).is_empty());
    let both = {
        let mut v = vec![p0, p1];
        v.sort_unstable();
        v
    };
    assert_eq!(wanted(&b, 61.0), both);
    b.tick(61.0);
    assert!(wanted(&b, 100.0).is_empty());
    // Slot 1's tree computes; slot 0's stays still.
    b.world.usage.insert(p1, usage(5000));
    assert_eq!(wanted(&b, 122.0), both);
    b.tick(122.0);
    b.world.usage.insert(p1, usage(9000));
    // A minute on: only the moving tree; the still one waits two minutes.
    assert_eq!(wanted(&b, 183.0), vec![p1]);
    b.tick(183.0);
    assert_eq!(wanted(&b, 243.0), both);
    b.tick(243.0);
    let snap = b.fleet.snapshot(b.at(243.0));
    assert_eq!(snap.slot_detail[1].cpu_ms, Some(9000));
    assert_eq!(snap.slot_detail[0].cpu_ms, Some(100));
}

/// A worker that meets a tracker rate limit exits 75: not a death (no circuit trip, however
/// often), the slot idles and the next queue check with work wakes it.
#[test]
fn a_rate_limited_worker_idles_its_slot_and_trips_no_circuit() {
    let mut b = Bench::new(1);
    b.start();
    for i in 0..6 {
        b.end(
            0,
            ExitKind::Code(exit_code::RATE_LIMITED),
            1.0 + f64::from(i),
        );
        assert_eq!(b.phase(0), "idle");
        b.feed(Event::Queue(Ok(BTreeSet::from([3]))), 1.5 + f64::from(i));
    }
    assert_eq!(b.count(Kind::CircuitTrip), 0, "{:?}", b.kinds());
    assert_eq!(b.spawns(), 7);
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
                b.end(slot, ExitKind::Code(exit_code::FAILED), t);
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
    assert_eq!(b.count(Kind::FleetCircuitOpen), 1, "{:?}", b.kinds());
    let opened_at = t;
    let before = b.spawns();
    assert_eq!(before, 4 + 4 * 4, "no respawn once tripped");
    assert!((0..4).all(|s| b.phase(s) == "parked"));
    let snap = b.fleet.snapshot(b.at(t));
    let fc = snap.fleet_circuit.expect("fleet circuit in state.toon");
    assert_eq!(
        (fc.state.to_string().as_str(), fc.tripped_slots),
        ("open", 2)
    );
    assert!(
        fc.reason
            .starts_with("last exits: slot 0 exit 1, slot 1 exit 1, "),
        "{}",
        fc.reason
    );
    // The tripping slot's log, as the driver read it: the fleet read no file.
    assert!(
        fc.reason.ends_with(" ends: Error: token expired"),
        "{}",
        fc.reason
    );
    assert_eq!(b.count(Kind::FleetCircuitOpen), 1);
    // The slots' own probes (60 s after their trips) and the fleet's (60 s after it
    // opened) fall in the same minute: one spawn in all, then one per step.
    let mut per_step = Vec::new();
    let mut at = opened_at;
    for backoff in [60.0, 120.0, 240.0] {
        let spawns = b.spawns();
        for k in 0..=10 {
            b.turn(at + backoff * f64::from(k) / 10.0);
        }
        at += backoff;
        b.turn(at + 0.1);
        per_step.push(b.spawns() - spawns);
        let probe = (0..4)
            .find(|s| b.pid_in(*s).is_some())
            .expect("one probe runs");
        assert_eq!((0..4).filter(|s| b.pid_in(*s).is_some()).count(), 1);
        // The probe dies fast: re-parked with the next step.
        at += 1.0;
        b.end(probe, ExitKind::Code(exit_code::FAILED), at);
    }
    assert_eq!(per_step, vec![1, 1, 1], "{:?}", b.kinds());
    assert_eq!(b.count(Kind::FleetCircuitProbe), 3);
    assert_eq!(b.count(Kind::FleetCircuitReparked), 3);
    assert_eq!(
        b.count(Kind::CircuitHalfOpen),
        0,
        "slot probes wait for the fleet's"
    );
    // The next probe (480 s) lives past fast_death (30 s): every slot reopens.
    at += 480.5;
    b.turn(at);
    assert_eq!(
        b.fleet.snapshot(b.at(at)).fleet_circuit.unwrap().state,
        crate::lanes::state_file::FleetCircuitState::Probing
    );
    b.turn(at + 31.0);
    assert_eq!(b.count(Kind::FleetCircuitClosed), 1, "{:?}", b.kinds());
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
    assert_eq!(b.count(Kind::FleetCircuitOpen), 1, "{:?}", b.kinds());
    // The first probe (60 s) ends with 75, then the next with 69: each time the same
    // 60 s step again, one spawn per step.
    let mut at = t;
    for code in [exit_code::RATE_LIMITED, exit_code::TRACKER_UNAVAILABLE] {
        let spawns = b.spawns();
        at += 60.1;
        b.turn(at);
        assert_eq!(b.spawns() - spawns, 1, "{:?}", b.kinds());
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
        b.turn(at + 59.0);
        assert!((0..4).all(|s| b.pid_in(s).is_none()), "{:?}", b.kinds());
    }
    assert_eq!(b.count(Kind::FleetCircuitReparked), 2);
    assert_eq!(b.count(Kind::FleetCircuitProbe), 2);
}

/// Each pause ends in its own words: a rate limit's reset, or a cluster host's lease
/// back; a longer pause of the other cause found meanwhile takes its place.
#[test]
fn a_pause_resumes_in_the_words_of_its_cause() {
    let mut b = Bench::new(1);
    b.start();
    let wall0 = epoch_secs(b.wall0);
    let pause = |reason: &str, s: u64| crate::lanes::pause_file::Pause {
        reason: reason.into(),
        until_epoch: wall0 + s,
        since_epoch: wall0,
    };
    let held = pause(
        "cluster: no live lease of this host (its lease was not renewed in time)",
        4,
    );
    b.feed(Event::Paused(held, PauseCause::NoClusterLease), 1.0);
    b.turn(6.0);
    let resumed = b.records(Kind::FleetResumed);
    assert_eq!(resumed.len(), 1);
    assert_eq!(
        resumed[0].msg,
        "fleet resumed: this host holds a live cluster lease again (held: cluster: no live lease of this host (its lease was not renewed in time))"
    );
    let limited = pause("rate limited: API rate limit exceeded", 20);
    b.feed(
        Event::Paused(
            pause("cluster: no live lease of this host (x)", 10),
            PauseCause::NoClusterLease,
        ),
        7.0,
    );
    b.feed(Event::Paused(limited, PauseCause::RateLimit), 7.5);
    b.turn(22.0);
    let resumed = b.records(Kind::FleetResumed);
    assert_eq!(resumed.len(), 2, "{:?}", b.kinds());
    assert_eq!(
        resumed[1].msg,
        "fleet resumed: the rate-limit reset passed (rate limited: API rate limit exceeded)"
    );
}

/// A rate-limit pause holds every spawn and wake-up (a death is not respawned, a queue
/// with work wakes nothing), counts no death against any circuit, is logged once however
/// often it is seen, and ends by itself at the reset.
#[test]
fn a_pause_holds_spawns_until_the_reset_and_is_logged_once() {
    let mut b = Bench::new(2);
    b.start();
    let pause = crate::lanes::pause_file::Pause {
        reason: "rate limited: API rate limit exceeded".into(),
        until_epoch: epoch_secs(b.wall0) + 100,
        since_epoch: epoch_secs(b.wall0),
    };
    b.feed(Event::Paused(pause.clone(), PauseCause::RateLimit), 1.0);
    b.feed(Event::Paused(pause.clone(), PauseCause::RateLimit), 2.0);
    assert_eq!(b.count(Kind::FleetPaused), 1);
    let snap = b.fleet.snapshot(b.at(2.0));
    assert_eq!(
        snap.paused.map(|p| p.until_epoch),
        Some(Some(pause.until_epoch))
    );
    b.end(0, ExitKind::Code(exit_code::RATE_LIMITED), 3.0);
    // A plain death while paused is not respawned either.
    b.end(1, ExitKind::Code(exit_code::FAILED), 3.2);
    for i in 0..6 {
        b.feed(Event::Queue(Ok(BTreeSet::from([4]))), 3.5 + f64::from(i));
        b.turn(3.6 + f64::from(i));
    }
    assert_eq!(
        b.spawns(),
        2,
        "nothing spawned while paused: {:?}",
        b.kinds()
    );
    assert_eq!((b.phase(0).as_str(), b.phase(1).as_str()), ("idle", "idle"));
    assert_eq!(b.count(Kind::CircuitTrip), 0);
    assert_eq!(b.count(Kind::FleetResumed), 0);
    assert!(b.fleet.next_deadline(b.at(10.0)) <= b.at(1.0 + 100.0));
    b.turn(102.0);
    assert_eq!(b.count(Kind::FleetResumed), 1, "{:?}", b.kinds());
    assert!(b.fleet.snapshot(b.at(102.0)).paused.is_none());
    b.feed(Event::Queue(Ok(BTreeSet::from([4, 5]))), 103.0);
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
    assert_eq!(b.count(Kind::FleetCircuitOpen), 1, "{:?}", b.kinds());
    b.turn(t + 61.0);
    let probe = (0..2).find(|s| b.pid_in(*s).is_some()).expect("a probe");
    b.end(probe, ExitKind::Code(exit_code::OK), t + 62.0);
    assert_eq!(b.count(Kind::FleetCircuitClosed), 1, "{:?}", b.kinds());
    assert_eq!(b.phase(probe), "idle");
    assert_eq!(b.phase(1 - probe), "running");
}

/// Each stop signal stops the fleet with its own status (128 + its number) and the same
/// orderly SIGTERM to every group; a signal the loop does not handle changes nothing.
#[test]
fn each_stop_signal_ends_the_fleet_with_its_own_status() {
    for (sig, code) in [
        (Signal::SIGTERM, 143),
        (Signal::SIGINT, 130),
        (Signal::SIGHUP, 129),
    ] {
        let mut b = Bench::new(2);
        b.start();
        let pids = [b.pid_in(0).unwrap(), b.pid_in(1).unwrap()];
        b.world.effects.clear();
        b.signal(Signal::SIGUSR2, quiet(), 0.5);
        b.signal(Signal::SIGPIPE, quiet(), 0.5);
        assert!(b.world.effects.is_empty(), "{sig}: {:?}", b.world.effects);
        assert!(b.fleet.stopping().is_none());
        b.signal(sig, quiet(), 1.0);
        assert_eq!(b.fleet.stopping().map(|s| s.code), Some(code), "{sig}");
        for pid in pids {
            assert!(b.signalled(pid, Stop::Term), "{sig}: {pid}");
            assert!(!b.signalled(pid, Stop::Kill), "{sig}: {pid}");
            b.reported(pid, 1.1);
        }
        b.turn(1.1);
        assert!(b.fleet.stop_settled(), "{sig}");
        assert_eq!(b.spawns(), 2, "{sig}: nothing respawned");
    }
}

/// SIGTERM twice: the second kills every remaining group at once, whatever the grace.
#[test]
fn a_second_stop_signal_kills_what_is_left_at_once() {
    let mut b = Bench::new(1);
    b.start();
    let pid = b.pid_in(0).unwrap();
    b.world.stubborn.insert(pid);
    b.signal(Signal::SIGTERM, quiet(), 1.0);
    assert!(b.signalled(pid, Stop::Term));
    b.turn(1.5);
    assert!(!b.signalled(pid, Stop::Kill), "within the grace");
    b.signal(Signal::SIGINT, quiet(), 2.0);
    b.turn(2.0);
    assert!(b.signalled(pid, Stop::Kill), "{:?}", b.world.effects);
    b.reported(pid, 2.1);
    b.turn(2.1);
    assert!(b.fleet.stop_settled());
    // The first signal's status stands.
    assert_eq!(b.fleet.stopping().map(|s| s.code), Some(exit_code::SIGTERM));
}

/// SIGUSR1 with a drain shrink: the surplus worker is asked to retire (its file), and
/// when it exits its slot retires and the file goes; nothing is signalled.
#[test]
fn sigusr1_drains_the_surplus_and_retires_its_slot() {
    let mut b = Bench::new(2);
    b.start();
    let surplus = b.pid_in(1).unwrap();
    b.scale(1, ShrinkMode::DrainThenRetire, 5.0);
    assert!(b.world.effects.contains(&"WriteRetire".to_string()));
    assert!(b.world.signals.is_empty(), "a drain signals nothing");
    assert_eq!(b.phase(1), "retiring");
    b.world.effects.clear();
    b.end(1, ExitKind::Code(exit_code::OK), 6.0);
    assert_eq!(
        b.world.signals,
        vec![(surplus, Stop::Term)],
        "its group's leftovers"
    );
    assert!(!b.fleet.pool.slots.contains_key(&1), "slot 1 retired");
    assert_eq!(b.count(Kind::SlotRetired), 1, "{:?}", b.kinds());
    assert!(b.world.effects.contains(&"RemoveRetire".to_string()));
    assert_eq!(b.spawns(), 2);
}

/// A drain whose retire file cannot be written says so and leaves the worker working;
/// the slot stays surplus, and each tick asks again (not each reading of `resize.toon`)
/// until the file is there, without saying the same error again.
#[test]
fn a_drain_shrink_whose_retire_file_fails_says_so_and_asks_again_at_each_tick() {
    let mut b = Bench::new(2);
    b.start();
    b.world.fail_retire = true;
    b.scale(1, ShrinkMode::DrainThenRetire, 5.0);
    assert_eq!(b.count(Kind::SlotRetire), 0, "{:?}", b.kinds());
    assert_eq!(b.count(Kind::SupervisorError), 1, "{:?}", b.kinds());
    let error = b
        .world
        .lines
        .iter()
        .rfind(|l| l.kind == Kind::SupervisorError);
    assert!(
        error.is_some_and(|l| l.msg.contains("No space left on device")),
        "{error:?}"
    );
    assert_eq!(b.phase(1), "retiring", "still surplus");
    assert!(b.world.signals.is_empty(), "a drain signals nothing");
    let wrote = |b: &Bench| {
        b.world
            .effects
            .iter()
            .filter(|e| *e == "WriteRetire")
            .count()
    };
    // Another reading of the same target does not ask again: the tick does.
    b.world.effects.clear();
    b.scale(1, ShrinkMode::DrainThenRetire, 10.0);
    assert_eq!(wrote(&b), 0, "{:?}", b.world.effects);
    // A tick with no `resize.toon` to read (a restart with a smaller target has none).
    b.tick(20.0);
    assert_eq!(wrote(&b), 1, "{:?}", b.world.effects);
    assert_eq!(
        b.count(Kind::SupervisorError),
        1,
        "the same error said once: {:?}",
        b.kinds()
    );
    b.world.fail_retire = false;
    b.world.effects.clear();
    b.tick(35.0);
    assert_eq!(wrote(&b), 1, "{:?}", b.world.effects);
    assert_eq!(b.count(Kind::SlotRetire), 1, "asked again: {:?}", b.kinds());
    b.world.effects.clear();
    b.tick(50.0);
    b.scale(1, ShrinkMode::DrainThenRetire, 55.0);
    assert_eq!(wrote(&b), 0, "asked once it worked: {:?}", b.world.effects);
    b.end(1, ExitKind::Code(exit_code::OK), 60.0);
    assert!(!b.fleet.pool.slots.contains_key(&1), "slot 1 retired");
}

/// A slot the operator stopped by drain, shrunk away and grown back, keeps its worker's
/// retire file: the worker still finishes its issue and goes, and the slot stays empty.
#[test]
fn a_slot_stopped_by_drain_keeps_its_retire_file_through_a_shrink_and_a_grow() {
    let mut b = Bench::new(2);
    b.start();
    b.slot_control(
        "r1",
        1,
        slot_control::Action::Stop,
        ShrinkMode::DrainThenRetire,
        5.0,
    );
    assert!(b.fleet.pool.slots[&1].stopped);
    b.scale(1, ShrinkMode::DrainThenRetire, 10.0);
    assert_eq!(b.phase(1), "retiring");
    b.world.effects.clear();
    b.scale(2, ShrinkMode::DrainThenRetire, 15.0);
    assert!(
        !b.world.effects.iter().any(|e| e == "RemoveRetire"),
        "{:?}",
        b.world.effects
    );
    let before = b.spawns();
    b.end(1, ExitKind::Code(exit_code::OK), 20.0);
    assert_eq!(b.spawns(), before, "the stopped slot stays empty");
    assert_eq!(b.count(Kind::SlotStopped), 2, "{:?}", b.kinds());
}

/// The operator's stop of a slot by drain is answered, and its line logged, only once the
/// worker's retire file is there; a file that cannot be written answers the request as
/// failed and leaves the slot as it was, so its worker's end respawns it.
#[test]
fn a_slot_stop_by_drain_is_answered_after_its_retire_file_and_undone_when_it_fails() {
    let mut b = Bench::new(2);
    b.start();
    b.world.fail_retire = true;
    b.slot_control(
        "r1",
        1,
        slot_control::Action::Stop,
        ShrinkMode::DrainThenRetire,
        5.0,
    );
    assert_eq!(b.world.acks.len(), 1);
    let ack = &b.world.acks[0];
    assert!(!ack.ok, "{ack:?}");
    assert!(ack.message.contains("No space left on device"), "{ack:?}");
    assert_eq!(
        b.count(Kind::SlotStopped),
        0,
        "nothing said done: {:?}",
        b.kinds()
    );
    assert!(!b.fleet.pool.slots[&1].stopped, "the slot's mark put back");
    let before = b.spawns();
    b.end(1, ExitKind::Code(exit_code::FAILED), 6.0);
    assert_eq!(
        b.spawns(),
        before + 1,
        "respawned: the slot was never stopped"
    );

    b.world.fail_retire = false;
    let names = |b: &Bench| b.world.effects.clone();
    b.world.effects.clear();
    b.slot_control(
        "r2",
        1,
        slot_control::Action::Stop,
        ShrinkMode::DrainThenRetire,
        7.0,
    );
    let effects = names(&b);
    let at = |e: &str| effects.iter().position(|x| x == e);
    assert!(
        at("WriteRetire") < at("Log") && at("Log") < at("AnswerSlotControl"),
        "the file, then the line, then the answer: {effects:?}"
    );
    assert!(b.world.acks[1].ok, "{:?}", b.world.acks[1]);
    assert_eq!(b.count(Kind::SlotStopped), 1, "{:?}", b.kinds());
    assert!(b.fleet.pool.slots[&1].stopped);
    let before = b.spawns();
    b.end(1, ExitKind::Code(exit_code::OK), 8.0);
    assert_eq!(b.spawns(), before, "a stopped slot stays empty");
}

/// SIGCHLD for a worker nothing watches: the fleet names it for the driver, which reads
/// its end and feeds it; the signal itself decides nothing.
#[test]
fn sigchld_is_how_an_unwatched_workers_end_arrives() {
    let mut b = Bench::new(1);
    b.world.unwatched = true;
    b.start();
    let pid = b.pid_in(0).unwrap();
    assert_eq!(b.fleet.unwatched_own(), vec![(pid, 1)]);
    assert_eq!(b.fleet.own_child_wait(pid, 1), Some(true), "a pinned group");
    b.world.effects.clear();
    b.signal(Signal::SIGCHLD, quiet(), 40.0);
    assert!(b.world.effects.is_empty(), "{:?}", b.world.effects);
    b.end(0, ExitKind::Code(exit_code::FAILED), 40.0);
    assert_eq!(b.spawns(), 2, "respawned");
    let next = b.pid_in(0).unwrap();
    assert_eq!(b.fleet.unwatched_own(), vec![(next, 1)]);
}

/// The stop file found at a tick stops the fleet with status 0.
#[test]
fn the_stop_file_at_a_tick_stops_with_0() {
    let mut b = Bench::new(1);
    b.start();
    let pid = b.pid_in(0).unwrap();
    assert!(!b.fleet.tick_due(b.at(1.0)));
    assert!(b.fleet.tick_due(b.at(16.0)));
    b.tick_with(Ok(true), quiet(), 16.0);
    assert_eq!(b.fleet.stopping().map(|s| s.code), Some(exit_code::OK));
    assert!(b.signalled(pid, Stop::Term));
    assert!(!b.fleet.tick_due(b.at(100.0)), "no tick during a stop");
}

/// The files of a worker on issue `issue` whose last sign of life was at `epoch`.
fn on_issue(issue: u64, epoch: u64) -> WorkerFiles {
    WorkerFiles {
        attempt: Some(crate::supervisor::core::progress::Attempt {
            dir: format!("/afk-unit-fleet/attempt-{issue}").into(),
            issue,
            attempt: 1,
        }),
        files_epoch: epoch,
        title: None,
    }
}

/// Most busy slots stalling at one reading is the provider's: when the first reaches the
/// kill, every stalling slot is stopped at once with a fleet-wide mark (its worker then
/// excuses the attempt), and a slot still making progress is left alone. One slot stalling
/// among progressing ones is its issue's.
#[test]
fn a_fleet_wide_stall_stops_every_stalling_slot_at_once_and_marks_it_the_providers() {
    let b = Bench::new(1);
    let now = epoch_secs(b.wall0) + 16;
    let (stall_s, kill_s) = (b.fleet.timing.stall_s, b.fleet.timing.stall_kill_s);
    // Slot 0 past the kill, slot 1 stalling but not yet at it, slot 2 progressing.
    let (b, pids) = three_slots_read_at(&[now - kill_s - 5, now - stall_s - 5, now - 1]);
    assert_eq!(b.world.marks.len(), 2, "{:?}", b.world.marks);
    for (dir, why) in &b.world.marks {
        let why = why
            .as_deref()
            .unwrap_or_else(|| panic!("{dir:?} not fleet-wide"));
        assert!(
            why.starts_with("2 of 3 busy slots made no progress"),
            "{why}"
        );
    }
    assert!(b.signalled(pids[0], Stop::Term));
    assert!(b.signalled(pids[1], Stop::Term));
    assert!(
        !b.signalled(pids[2], Stop::Term),
        "a progressing slot is left alone"
    );
    assert_eq!(b.count(Kind::SlotStallKill), 2, "{:?}", b.kinds());

    // One slot stalling among two progressing: its own.
    let (b, _) = three_slots_read_at(&[now - kill_s - 5, now - 1, now - 1]);
    assert_eq!(b.world.marks.len(), 1, "{:?}", b.world.marks);
    assert_eq!(b.world.marks[0].1, None, "one slot's stall is its own");
}

/// Three slots on issues 1..=3, their last signs of life at `signs`, read at one tick.
fn three_slots_read_at(signs: &[u64; 3]) -> (Bench, Vec<i32>) {
    let mut b = Bench::new(3);
    b.start();
    let pids: Vec<i32> = (0..3).map(|s| b.pid_in(s).unwrap()).collect();
    for (slot, at) in signs.iter().enumerate() {
        b.quiet_since(slot, *at);
    }
    let facts = TickFacts {
        stop_file: Ok(false),
        control: quiet(),
        progress: pids
            .iter()
            .zip(signs)
            .enumerate()
            .map(|(i, (pid, at))| (*pid, on_issue(i as u64 + 1, *at)))
            .collect(),
        usage: None,
        gone: Vec::new(),
    };
    b.feed(Event::Tick(Box::new(facts)), 16.0);
    (b, pids)
}

/// A stall kill marks the attempt before its group is signalled, so a worker that gives
/// its issue back on SIGTERM records the attempt as stalled.
#[test]
fn a_stall_kill_marks_the_attempt_before_the_signal() {
    let mut b = Bench::new(1);
    b.start();
    let pid = b.pid_in(0).unwrap();
    let long_ago = epoch_secs(b.wall0) - 4000;
    b.quiet_since(0, long_ago);
    let attempt = crate::supervisor::core::progress::Attempt {
        dir: "/afk-unit-fleet/attempt".into(),
        issue: 7,
        attempt: 1,
    };
    let facts = TickFacts {
        stop_file: Ok(false),
        control: quiet(),
        progress: vec![(
            pid,
            WorkerFiles {
                attempt: Some(attempt),
                files_epoch: long_ago,
                title: Some("Fix the parser".into()),
            },
        )],
        usage: None,
        gone: Vec::new(),
    };
    b.world.effects.clear();
    b.feed(Event::Tick(Box::new(facts)), 16.0);
    let at = |name: &str| b.world.effects.iter().position(|e| e == name);
    assert!(at("MarkStall").is_some(), "{:?}", b.world.effects);
    assert!(at("MarkStall") < at("Group"), "{:?}", b.world.effects);
    assert!(b.signalled(pid, Stop::Term));
    assert_eq!(b.count(Kind::SlotStallKill), 1, "{:?}", b.kinds());
    assert_eq!(
        b.fleet.pool.slots[&0].issue_title().as_deref(),
        Some("Fix the parser")
    );
}

/// A quiet fleet's tick rewrites nothing: the heartbeat is written when something in it
/// changed, or when the last one is five minutes old; a resize is always answered by one.
#[test]
fn a_quiet_tick_writes_no_heartbeat() {
    let mut b = Bench::new(2);
    b.start();
    b.tick(16.0);
    let after_first = b.world.writes;
    for i in 2..10 {
        b.tick(16.0 * f64::from(i));
    }
    assert_eq!(
        b.world.writes, after_first,
        "nothing changed: {:?}",
        b.world.effects
    );
    assert_eq!(
        b.count(Kind::SupervisorTick),
        9,
        "the tick line is still logged"
    );
    // The same target again changes nothing, but `scale` waits for a heartbeat.
    assert!(!b.fleet.heartbeat_due());
    b.scale(2, ShrinkMode::DrainThenRetire, 150.0);
    assert!(b.fleet.heartbeat_due());
    // A death is a change: the tick after it writes.
    b.end(1, ExitKind::Code(exit_code::FAILED), 160.0);
    b.tick(161.0);
    assert_eq!(b.world.writes, after_first + 1);

    let mut b = Bench::new(1);
    b.start();
    let quiet = b.world.writes;
    b.tick(16.0);
    b.tick(200.0);
    assert_eq!(b.world.writes, quiet);
    b.tick(301.0);
    assert_eq!(b.world.writes, quiet + 1, "five minutes old");
}

/// A group whose leader ended while a member lives on is waited out, and says so (the
/// driver then reaps orphans' zombies at the shortest gap) until it is empty.
#[test]
fn a_group_is_dying_while_a_member_outlives_its_leader() {
    let mut b = Bench::new(1);
    b.start();
    assert!(!b.fleet.groups_dying());
    let pid = b.pid_in(0).expect("a worker");
    // The member left behind ignores the group's SIGTERM.
    b.world.stubborn.insert(pid);
    b.world.running.remove(&pid);
    b.exited(pid, ExitKind::Code(exit_code::FAILED), 10.0);
    b.turn(10.0);
    assert!(b.fleet.groups_dying(), "{:?}", b.world.effects);
    b.world.groups.remove(&pid);
    b.turn(11.0);
    assert!(!b.fleet.groups_dying(), "{:?}", b.world.effects);
}

/// A respawn is churn: its heartbeat may wait out the gap. A resize (as a pause, a
/// circuit, a stop) is not: `status` shows it at the end of its turn.
#[test]
fn a_respawn_waits_for_the_heartbeat_gap_and_a_resize_does_not() {
    let mut b = Bench::new(2);
    b.start();
    b.tick(16.0);
    assert!(!b.fleet.heartbeat_due());
    b.end(1, ExitKind::Code(exit_code::FAILED), 100.0);
    assert_eq!(b.spawns(), 3, "respawned");
    assert!(b.fleet.heartbeat_due());
    assert!(!b.fleet.heartbeat_urgent(), "{:?}", b.world.effects);
    // In cgroup mode every end brings its attempt's figures: churn as well.
    b.fleet.log(super::heartbeat::line(
        Kind::SlotFigures,
        "worker sup-1-slot-1-2 attempt used 0.010 CPU seconds",
    ));
    assert!(!b.fleet.heartbeat_urgent());
    b.scale(3, ShrinkMode::DrainThenRetire, 101.0);
    assert!(b.fleet.heartbeat_urgent());
    b.fleet.snapshot_written(b.at(101.0));
    assert!(!b.fleet.heartbeat_due() && !b.fleet.heartbeat_urgent());
}

/// A start under a pause read before it (written while no fleet ran) spawns nothing; once
/// it lifts, every slot that never had a worker starts, as the start would have started
/// it, though the queue is empty or cannot be read. A later queue answer starts no more.
#[test]
fn a_start_held_by_a_pause_starts_every_slot_once_the_pause_lifts() {
    for answer in [
        Ok(BTreeSet::new()),
        Err(QueueError::Unavailable(
            crate::supervisor::core::event::TrackerUnavailable::NotOpened,
        )),
    ] {
        let mut b = Bench::new(3);
        let pause = crate::lanes::pause_file::OperatorPause {
            reason: "freeze".into(),
            since_epoch: 0,
            until_epoch: None,
            via: "cli".into(),
            resumed: false,
        };
        let held = Event::OperatorPause {
            active: Some(pause),
            resumed_via: None,
        };
        b.feed(held, 0.0);
        b.start();
        assert_eq!(b.spawns(), 0, "{:?}", b.kinds());
        b.feed(Event::Queue(Ok(BTreeSet::new())), 1.0);
        assert_eq!(
            b.spawns(),
            0,
            "a queue answer under the pause starts nothing"
        );
        let lifted = Event::OperatorPause {
            active: None,
            resumed_via: Some("cli".into()),
        };
        b.feed(lifted, 2.0);
        b.feed(Event::Queue(answer), 2.0);
        assert_eq!(b.spawns(), 3, "{:?}", b.kinds());
        assert_eq!(b.count(Kind::FleetOperatorResumed), 1);
        b.feed(Event::Queue(Ok(BTreeSet::new())), 3.0);
        assert_eq!(b.spawns(), 3);
    }
}
