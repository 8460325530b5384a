//! The supervisor's one door to the operating system's processes: starting a worker,
//! learning how it ended, signalling its group and asking whether the group is empty,
//! reaping, and measuring. `Fleet` decides, purely; the driver
//! carries its effects out through a [`Children`]; `crate::process` holds the facts about
//! processes this door is built on.
//!
//! [`Os`] is the real one (pidfds in one epoll set of their own, `crate::supervisor::os::pidfd_set`, which the
//! loop waits on; `waitid`, group signals through pidfds or pinned group ids).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use tokio::sync::mpsc::UnboundedSender;

use crate::cgroup::fleet::FleetCgroups;
use crate::cgroup::watch::Watcher;
use crate::cgroup::{Cgroup, Figures};
use crate::process::{self, ExitKind, Pidfd, Proc};
use crate::supervisor::core::event::{Event, Started};
use crate::supervisor::core::progress::Usage;
use crate::supervisor::core::reaper::{Done, Group, Order, Reaper, Stop};
use crate::supervisor::os::pidfd_set::Exits;
use crate::supervisor::os::spawn::{self, SpawnError, SpawnSpec, Spawned};
use crate::supervisor::os::tree_usage::{Members, Meter};

/// One spawn of a batch: the worker of spawn `seq` in `slot`.
pub struct Attempt<'a> {
    pub spec: SpawnSpec<'a>,
    pub slot: usize,
    pub seq: u64,
}

/// What a spawn answers: the worker (with its attempt cgroup, in cgroup mode), or why not.
pub type Attempted = Result<(Started, Option<Cgroup>), SpawnError>;

/// Where a batch's answers go ([`Children::spawn_attempts`]).
pub type Answer<'a> = dyn FnMut(Attempted, SystemTime) + 'a;

/// How our own child ended.
#[derive(Debug)]
pub enum Ended {
    Ran(ExitKind),
    /// Its `execve` failed: it never became the worker (its exit 127 is the spawn's).
    NotStarted(SpawnError),
}

/// The most children of a batch on their way to their `execve` at once: each holds its
/// slot log open and a stack, so a thousand-worker start keeps a bounded few.
const IN_FLIGHT: usize = 32;

pub trait Children {
    /// Starts a worker. Its end arrives later as [`Event::ChildEnded`] (or, where it cannot
    /// be watched, through [`Children::next_zombie`] on SIGCHLD).
    fn spawn(&mut self, spec: &SpawnSpec<'_>) -> Result<Started, SpawnError>;
    /// Watches a previous supervisor's worker; `None` when `pid` is no longer the process
    /// that started at `start`. Its end arrives as [`Event::Exited`].
    fn adopt(&mut self, pid: i32, start: u64) -> Option<Started>;
    /// Whether `pid` still is the live process that started at `start`.
    fn is_live(&mut self, pid: i32, start: u64) -> bool;
    /// How our own child ended, `None` while it runs. The child is reaped unless
    /// `keep_zombie` (its zombie then pins its group id). A worker whose `execve` failed
    /// after its spawn was answered (the spawn did not wait for it) ended as
    /// [`Ended::NotStarted`].
    fn exit_of(&mut self, pid: i32, keep_zombie: bool) -> Option<Ended>;
    /// A zombie child of ours, without reaping it: its pid, and whether it is a command
    /// the supervisor runs and waits for itself (never to be reaped here; a SIGCHLD event
    /// follows once its waiter has reaped it).
    fn next_zombie(&mut self) -> Option<(i32, bool)>;
    /// Reaps a zombie child of ours.
    fn reap(&mut self, pid: i32);
    /// Signals the group `leader` leads (or led).
    fn signal_group(&mut self, leader: i32, group: &Group, sig: Signal);
    /// Whether that group still has a live member.
    fn group_alive(&mut self, leader: i32, group: &Group) -> bool;
    /// CPU and memory of each session led by one of `leaders`.
    fn usage(&mut self, leaders: &[i32]) -> HashMap<i32, Usage>;
    /// Lets go of the pidfd held for worker (`pid`, `start`): the fleet no longer names
    /// it (its group is gone, or is not followed through it).
    fn forget(&mut self, _pid: i32, _start: u64) {}
    /// What a stop must end besides the worker groups, but for `keep`: our children that
    /// left their worker's group (reparented to us, the subreaper), and every other live
    /// process of the fleet of `lane` wherever it was reparented (after a takeover, what
    /// the adopted workers left went to init). Reads the process table: at a stop only.
    fn strays(&mut self, keep: &HashSet<i32>, lane: &Path) -> Vec<Proc>;
    /// The escaped descendants of ended workers, by worker id: for an own worker (`true`)
    /// among our children, for an adopted one among the fleet of `lane`. One table read
    /// for all of them.
    fn escapees(
        &mut self,
        ended: &[(String, bool)],
        keep: &HashSet<i32>,
        lane: &Path,
    ) -> Vec<(String, Proc)>;
    /// Signals a stray and its process group.
    fn signal_stray(&mut self, p: &Proc, sig: Signal);
    /// Where groups are pinned: reaps the zombies of our children outside our session
    /// but for `keep` (the leaders that pin their groups).
    fn reap_orphans(&mut self, keep: &HashSet<i32>);

    // ---- cgroup mode (README "Isolation"); the defaults are process-group mode ----

    /// Starts the worker of spawn `seq` in `slot`: in cgroup mode inside a fresh cgroup of
    /// its own, returned with it.
    fn spawn_attempt(
        &mut self,
        spec: &SpawnSpec<'_>,
        _slot: usize,
        _seq: u64,
    ) -> Result<(Started, Option<Cgroup>), SpawnError> {
        self.spawn(spec).map(|s| (s, None))
    }
    /// The spawns of one loop turn (a fleet's start, a resize), each answered through
    /// `answer`, in order, as [`Children::spawn_attempt`] answers it, with the wall time
    /// its worker was started at. The real one waits for none of the children's
    /// `execve`s: one that fails is reported at the child's end ([`Ended::NotStarted`]).
    fn spawn_attempts(&mut self, batch: &[Attempt<'_>], answer: &mut Answer<'_>) {
        for a in batch {
            let at = SystemTime::now();
            answer(self.spawn_attempt(&a.spec, a.slot, a.seq), at);
        }
    }
    /// Follows an adopted worker's cgroup: its figures and its emptying.
    fn follow_cgroup(&mut self, _pid: i32, _cg: &Cgroup) {}
    /// Whether a cgroup's emptying arrives as an event, so nothing re-checks it.
    fn watches_cgroups(&self) -> bool {
        false
    }
    /// What the kernel counted for an attempt whose cgroup is now empty; the cgroup is
    /// removed.
    fn finish_cgroup(&mut self, _leader: i32, _cg: &Cgroup) -> Figures {
        Figures::default()
    }
    /// The fleet's attempt cgroups that still hold processes but are none of `keep` (a
    /// dead attempt's leftovers): each is sent `sig` (SIGKILL as `cgroup.kill`). Returns
    /// how many there were.
    fn sweep_cgroups(&mut self, _keep: &[Cgroup], _sig: Signal) -> usize {
        0
    }
}

/// Carries out one of the reaper's orders.
pub fn carry_order(os: &mut dyn Children, order: Option<&Order>) {
    match order {
        Some(Order::Signal {
            leader,
            group,
            sig,
            if_alive,
        }) if !*if_alive || os.group_alive(*leader, group) => {
            os.signal_group(*leader, group, signal_of(*sig));
        }
        Some(Order::Reap { leader }) => os.reap(*leader),
        Some(Order::Forget { leader, start }) => os.forget(*leader, *start),
        _ => {}
    }
}

/// Asks whether each group the reaper follows still has members, advances it, and carries
/// out what it orders; returns the groups now gone.
pub fn poll_reaper(
    os: &mut dyn Children,
    reaper: &mut Reaper,
    now: std::time::Instant,
) -> Vec<Done> {
    let alive: HashMap<i32, bool> = reaper
        .groups()
        .map(|(leader, g)| (leader, os.group_alive(leader, g)))
        .collect();
    let (done, orders) = reaper.poll(&|l| alive.get(&l).copied().unwrap_or(true), now);
    for o in &orders {
        carry_order(os, Some(o));
    }
    done
}

/// The system's signal for the reaper's [`Stop`].
fn signal_of(stop: Stop) -> Signal {
    match stop {
        Stop::Term => Signal::SIGTERM,
        Stop::Kill => Signal::SIGKILL,
    }
}

/// A worker group of cgroup mode: SIGKILL is `cgroup.kill`, anything else goes to every
/// process in the cgroup.
/// Answers whether the cgroup was found empty (then nothing was signalled).
pub fn signal_cgroup(cg: &Cgroup, sig: Signal) -> bool {
    if sig == Signal::SIGKILL {
        if cg.kill().is_err() {
            cg.signal(sig);
        }
        false
    } else if !matches!(cg.populated(), Ok(false)) {
        cg.signal(sig);
        false
    } else {
        // A worker that exited alone left its cgroup empty (the common end): one read of
        // `cgroup.events` instead of its member list and a walk of its children.
        true
    }
}

/// The kernel's figures of an attempt in place of the sampled ones: its CPU count (what
/// exited included) and, where the memory controller is delegated, its memory.
fn kernel_figures(u: &mut Usage, f: &Figures) {
    if let Some(us) = f.cpu_usec {
        u.cpu_ms = us / 1000;
    }
    if let Some(b) = f.memory_current {
        u.rss_kib = b / 1024;
    }
    if let Some(b) = f.memory_peak {
        u.memory_peak_kib = Some(b / 1024);
    }
}

/// The real processes.
pub struct Os {
    tx: UnboundedSender<Event>,
    meter: Meter,
    my_sid: i32,
    /// The fleet's subtree in cgroup mode.
    cgroups: Option<Arc<FleetCgroups>>,
    /// Reports a change of any followed cgroup's `cgroup.events` as [`Event::CgroupChanged`].
    watcher: Option<Watcher>,
    /// Each followed worker's cgroup, by the worker's pid (for its figures).
    cgroup_of: HashMap<i32, Cgroup>,
    /// Each followed cgroup's CPU count (`usage_usec`) at its last reading and what that
    /// reading found, by the worker's pid: a tree whose count has not moved is not read.
    last_usage: HashMap<i32, (u64, Usage)>,
    /// What the cleanup of an ended worker (by pid) found of its cgroup so far.
    ending: HashMap<i32, CgroupEnd>,
    /// Where the workers' ends are reported to the loop; without it (no loop) an own
    /// worker's end comes by SIGCHLD and an adopted one's is looked for at the tick.
    exits: Option<Arc<Exits>>,
    /// The pidfd of each worker the fleet names by (pid, start) with `Started::pidfd`:
    /// held here, not in the fleet, until the fleet lets go of it ([`Order::Forget`]), so
    /// the fleet's decisions never open or close a descriptor.
    pidfds: HashMap<(i32, u64), Arc<Pidfd>>,
    /// Each slot's log as its last attempt had it open, by slot: see [`Os::slot_log`].
    slot_logs: HashMap<usize, KeptLog>,
    /// The most descriptors kept logs and pidfds may take together: half the open-files
    /// limit. Past it no log is kept (those kept are let go of), so under a low hard limit
    /// the pidfds, one per worker, keep the room they had and a fleet is not capped by its
    /// logs: a slot's log is then opened for each spawn.
    slot_logs_max: usize,
    /// The day's folder [`SlotLogs::open`] made for the first spawns, let go of at a new
    /// day or the end. Declared after `slot_logs`, so at the end it is dropped after the
    /// logs in it are taken back.
    made_day: Option<MadeDay>,
    /// Workers answered before their `execve` was seen, by pid: what each child reads
    /// until then. Let go of at a later spawn once landed, or at the child's end; never
    /// more than [`IN_FLIGHT`].
    detached: Vec<(i32, spawn::Detached)>,
}

/// The first spawns' slot logs, opened while the boot suite runs: creating a file is the
/// most a first spawn costs the supervisor (tens of microseconds, and more on a file system
/// with many recently deleted inodes, which ext4 steps over one by one), and the suite
/// leaves a core idle while it waits on `git`. A log that cannot be opened here is left to
/// its spawn, which reports why.
#[derive(Debug, Default)]
pub struct SlotLogs {
    /// By slot, each as [`Os`] will keep it: `unused` where nothing was at its path before.
    logs: Vec<(usize, KeptLog)>,
    /// The day's folder, when these logs made it (after `logs`: dropped after them).
    made_day: Option<MadeDay>,
}

impl SlotLogs {
    /// Today's logs of slots `0..slots`: as many as [`Os`] keeps beside a pidfd for each
    /// of the `slots` workers, all under half the open-files limit (none at all for a fleet
    /// that size limit leaves no room for).
    pub fn open(layout: &crate::layout::Layout, slots: usize) -> SlotLogs {
        let absent = |p: &Path| {
            matches!(std::fs::symlink_metadata(p),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        };
        let day = crate::timeutil::date_utc(SystemTime::now());
        let room = ((process::open_files_limit() / 2) as usize).saturating_sub(slots);
        let made_day = Some(layout.logs().join(&day))
            .filter(|d| slots > 0 && absent(d))
            .map(MadeDay);
        let logs = (0..slots.min(room))
            .filter_map(|slot| {
                let path = layout.slot_log(&day, slot);
                let unused = absent(&path);
                let file = Arc::new(spawn::open_log(&path).ok()?);
                Some((slot, KeptLog { path, file, unused }))
            })
            .collect();
        SlotLogs { logs, made_day }
    }
}

/// The day's folder [`SlotLogs::open`] made: removed when let go of, if every log in it was
/// taken back by then (`remove_dir` removes only an empty one), so a fleet that never
/// spawned that day leaves no empty day for `logs` to show.
#[derive(Debug)]
struct MadeDay(std::path::PathBuf);

impl Drop for MadeDay {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A slot's log as [`Os`] keeps it open between attempts. Let go of (dropped) wherever
/// that happens: never handed to an [`Os`] (a start that spawns nothing after all: a
/// halted boot, a stop during it, a refused isolation), past the limit on kept logs, at a
/// new day, replaced, or at the supervisor's end.
#[derive(Debug)]
struct KeptLog {
    path: std::path::PathBuf,
    file: Arc<std::fs::File>,
    /// Made (nothing was at its path) before the boot for a first spawn that has not come
    /// ([`SlotLogs`]): a slot that stays paused, parked or past the target keeps no empty
    /// log of the day.
    unused: bool,
}

impl Drop for KeptLog {
    /// No longer kept: a log made for a spawn that never came is taken back.
    fn drop(&mut self) {
        if self.unused {
            take_back(&self.path, &self.file);
        }
    }
}

/// Removes `path` if it is still the empty file `file` is: a log made for a spawn that
/// never came. Never one a worker wrote to, nor a file someone put in its place.
fn take_back(path: &Path, file: &std::fs::File) {
    use std::os::unix::fs::MetadataExt;
    let (Ok(held), Ok(there)) = (file.metadata(), std::fs::symlink_metadata(path)) else {
        return;
    };
    if held.len() == 0 && (held.dev(), held.ino()) == (there.dev(), there.ino()) {
        let _ = std::fs::remove_file(path);
    }
}

/// An ended worker's cgroup as its cleanup found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CgroupEnd {
    /// Still populated, so watched (inotify) from then on: only such a tree is, so a
    /// worker that ends alone (the common end) costs no watch and no wake-up for its
    /// cgroup filling or emptying.
    Watched,
    /// Empty at its SIGTERM; it stays empty (nothing joins it but through us), so it is
    /// not read again before its figures are taken.
    Empty,
}

impl Os {
    pub fn new(tx: UnboundedSender<Event>) -> Os {
        Os {
            tx,
            meter: Meter::new(),
            my_sid: process::own_sid(),
            cgroups: None,
            watcher: None,
            cgroup_of: HashMap::new(),
            last_usage: HashMap::new(),
            ending: HashMap::new(),
            exits: None,
            pidfds: HashMap::new(),
            slot_logs: HashMap::new(),
            slot_logs_max: (process::open_files_limit() / 2) as usize,
            made_day: None,
            detached: Vec::new(),
        }
    }

    /// Every worker's end reported through `exits`, which the loop waits on.
    pub fn with_exits(mut self, exits: Arc<Exits>) -> Os {
        self.exits = Some(exits);
        self
    }

    /// In cgroup mode: workers start in attempt cgroups of `cgroups`, and each one's
    /// emptying is an event of the loop (inotify), where the runtime allows.
    pub fn with_cgroups(mut self, cgroups: Arc<FleetCgroups>) -> Os {
        let tx = self.tx.clone();
        self.watcher = Watcher::start(move || {
            let _ = tx.send(Event::CgroupChanged);
        });
        self.cgroups = Some(cgroups);
        self
    }

    /// Logs opened before the first spawn ([`SlotLogs::open`]), kept as each slot's last
    /// attempt would have kept it; past the limit on kept logs the rest are let go of.
    pub fn with_slot_logs(mut self, mut logs: SlotLogs) -> Os {
        let room = self
            .slot_logs_max
            .saturating_sub(self.slot_logs.len() + self.pidfds.len());
        self.made_day = logs.made_day.take();
        self.slot_logs
            .extend(std::mem::take(&mut logs.logs).into_iter().take(room));
        self
    }

    /// Slot `slot`'s log at `path`, open: the one its last attempt wrote to while the path
    /// is the same (the day's) and the file is still there (not deleted: one `fstat`),
    /// else opened anew. A respawn then opens and closes no file (four system calls and a
    /// path walk of eight names); a day's first spawn closes what the days before left
    /// open.
    fn slot_log(&mut self, slot: usize, path: &Path) -> Result<Arc<std::fs::File>, SpawnError> {
        use std::os::unix::fs::MetadataExt;
        if let Some(kept) = self.slot_logs.get_mut(&slot)
            && kept.path == path
            && kept.file.metadata().is_ok_and(|m| m.nlink() > 0)
        {
            kept.unused = false;
            return Ok(Arc::clone(&kept.file));
        }
        let file = Arc::new(spawn::open_log(path)?);
        let day = path.parent();
        self.slot_logs.retain(|_, kept| kept.path.parent() == day);
        if self.made_day.as_ref().map(|d| d.0.as_path()) != day {
            self.made_day = None;
        }
        if self.slot_logs.len() + self.pidfds.len() < self.slot_logs_max {
            let kept = KeptLog {
                path: path.to_path_buf(),
                file: Arc::clone(&file),
                unused: false,
            };
            self.slot_logs.insert(slot, kept);
        } else {
            self.slot_logs.clear();
        }
        Ok(file)
    }

    /// A spawn up to its clone: in cgroup mode inside a fresh cgroup of its own.
    fn begin_attempt(
        &mut self,
        spec: &SpawnSpec<'_>,
        slot: usize,
        seq: u64,
        overlap: bool,
    ) -> Result<(spawn::Pending, Option<Cgroup>), SpawnError> {
        let log = self.slot_log(slot, spec.log)?;
        let Some(cgroups) = self.cgroups.clone() else {
            return spawn::begin_with_log(spec, log, None, overlap).map(|p| (p, None));
        };
        let program = spec.argv.first().cloned().unwrap_or_default();
        let cg = cgroups
            .attempt(slot, std::process::id() as i32, seq)
            .map_err(|e| SpawnError::Start {
                program: program.clone(),
                source: std::io::Error::other(format!("cannot create its cgroup: {e}")),
            })?;
        match spawn::begin_with_log(spec, log, Some(&cg), overlap) {
            Ok(p) => Ok((p, Some(cg))),
            Err(e) => {
                let _ = cg.remove_tree();
                Err(e)
            }
        }
    }

    /// The rest of a spawn: the worker watched, without waiting for its `execve` when the
    /// child is still on its way to it ([`spawn::Pending::finish_detached`]).
    fn finish_attempt(&mut self, pending: spawn::Pending, cg: Option<Cgroup>) -> Attempted {
        let finished = pending.finish_detached().map(|(s, detached)| {
            // An entry under this pid is of a child reaped elsewhere (its pid came back to
            // us): let go of without waiting, and never read as this child's end.
            if let Some(i) = self.detached.iter().position(|(p, _)| *p == s.pid) {
                let _ = self.detached.swap_remove(i).1.ended();
            }
            if let Some(d) = detached {
                self.detached.push((s.pid, d));
            }
            s
        });
        let Spawned { pid, start, pidfd } = match finished {
            Ok(s) => s,
            Err(e) => {
                if let Some(cg) = &cg {
                    let _ = cg.remove_tree();
                }
                return Err(e);
            }
        };
        let watched = self.hold(pid, start, pidfd.map(Arc::new), true);
        if let Some(cg) = &cg {
            self.cgroup_of.insert(pid, cg.clone());
            self.last_usage.remove(&pid);
            self.ending.remove(&pid);
        }
        let started = Started {
            pid,
            start,
            pidfd: self.pidfds.contains_key(&(pid, start)),
            watched,
        };
        Ok((started, cg))
    }

    /// Lets go of the detached children that ran their `execve`, and waits for the oldest
    /// until at most `keep` are left (each holds a stack and its slot log open). A failed
    /// one stays until its end is handled ([`Children::exit_of`]), which reports it, or
    /// until it is found reaped by another path (then nothing will report it).
    fn land_detached(&mut self, keep: usize) {
        let mut i = 0;
        while self.detached.len() > keep && i < self.detached.len() {
            self.detached[i].1.wait();
            i += 1;
        }
        let mut kept = Vec::with_capacity(self.detached.len());
        for (pid, d) in std::mem::take(&mut self.detached) {
            match d.landed() {
                Some(Ok(())) => {}
                Some(Err(_)) if process::child_exit(pid, false) == Some(ExitKind::Unknown) => {
                    let _ = d.ended();
                }
                _ => kept.push((pid, d)),
            }
        }
        self.detached = kept;
    }

    /// Holds the pidfd of worker (`pid`, `start`), and reports the worker's end through
    /// it in the loop's set of them: no thread and no task per worker. Whether the end is
    /// reported (`false` without a set or a pidfd).
    fn hold(&mut self, pid: i32, start: u64, fd: Option<Arc<Pidfd>>, own: bool) -> bool {
        let Some(fd) = fd else {
            return false;
        };
        let watched = self
            .exits
            .as_ref()
            .is_some_and(|exits| exits.watch(pid, start, &fd, own));
        self.pidfds.insert((pid, start), fd);
        watched
    }

    /// The pidfd held for worker (`leader`, `start`); none once forgotten, when its group
    /// is gone.
    fn pidfd(&self, leader: i32, start: u64) -> Option<&Arc<Pidfd>> {
        self.pidfds.get(&(leader, start))
    }
}

impl Children for Os {
    fn spawn(&mut self, spec: &SpawnSpec<'_>) -> Result<Started, SpawnError> {
        let pending = spawn::begin_in(spec, None, false)?;
        self.finish_attempt(pending, None).map(|(s, _)| s)
    }

    fn adopt(&mut self, pid: i32, start: u64) -> Option<Started> {
        // The pidfd must refer to the process we verified, not a successor with its pid.
        let pidfd = Pidfd::open(pid).map(Arc::new);
        if !self.is_live(pid, start) {
            return None;
        }
        let watched = self.hold(pid, start, pidfd, false);
        Some(Started {
            pid,
            start,
            pidfd: self.pidfds.contains_key(&(pid, start)),
            watched,
        })
    }

    fn is_live(&mut self, pid: i32, start: u64) -> bool {
        process::ProcId { pid, start }.is_live()
    }

    fn exit_of(&mut self, pid: i32, keep_zombie: bool) -> Option<Ended> {
        let kind = process::child_exit(pid, !keep_zombie)?;
        let at = self.detached.iter().position(|(p, _)| *p == pid);
        match at.and_then(|i| self.detached.swap_remove(i).1.ended()) {
            Some(e) => Some(Ended::NotStarted(e)),
            None => Some(Ended::Ran(kind)),
        }
    }

    fn next_zombie(&mut self) -> Option<(i32, bool)> {
        let (pid, _) = process::peek_zombie_child()?;
        // Only a command `cmd::run` still waits for is left alone; anything else (a
        // command's child reparented to us) would block every zombie behind it.
        let tx = self.tx.clone();
        let command = crate::cmd::is_running_then(pid, move || {
            let _ = tx.send(Event::Sigchld);
        });
        Some((pid, command))
    }

    fn reap(&mut self, pid: i32) {
        let _ = process::child_exit(pid, true);
    }

    fn signal_group(&mut self, leader: i32, group: &Group, sig: Signal) {
        match group {
            Group::Cgroup(cg) => {
                if signal_cgroup(cg, sig) {
                    self.ending.insert(leader, CgroupEnd::Empty);
                }
            }
            Group::Pidfd { start } => {
                if let Some(fd) = self.pidfd(leader, *start) {
                    let _ = fd.signal_group(Some(sig));
                }
            }
            Group::Pinned => {
                let _ = killpg(Pid::from_raw(leader), sig);
            }
        }
    }

    fn group_alive(&mut self, leader: i32, group: &Group) -> bool {
        match group {
            // Only a definite "empty" ends the wait: a read that fails keeps it going. A
            // tree still populated is watched from then on and read again, so an emptying
            // between the two reads is not missed: its end is an event (inotify).
            // An attempt cgroup found empty stays empty: nothing joins it but through us.
            Group::Cgroup(cg) => match (self.ending.get(&leader), &self.watcher) {
                (Some(CgroupEnd::Empty), _) => false,
                (Some(CgroupEnd::Watched), _) | (None, None) => {
                    !matches!(cg.populated(), Ok(false))
                }
                (None, Some(w)) => {
                    if matches!(cg.populated(), Ok(false)) {
                        return false;
                    }
                    self.ending.insert(leader, CgroupEnd::Watched);
                    w.watch(cg);
                    !matches!(cg.populated(), Ok(false))
                }
            },
            Group::Pidfd { start } => self
                .pidfd(leader, *start)
                .is_some_and(|fd| fd.group_alive()),
            Group::Pinned => process::group_has_live_member(&process::table(), leader),
        }
    }

    fn usage(&mut self, leaders: &[i32]) -> HashMap<i32, Usage> {
        let memory = self.memory_counted();
        let mut out = HashMap::new();
        let mut trees: Vec<(i32, Members)> = Vec::with_capacity(leaders.len());
        let mut figures: HashMap<i32, Figures> = HashMap::new();
        for pid in leaders {
            let Some(cg) = self.cgroup_of.get(pid) else {
                trees.push((*pid, Members::Session));
                continue;
            };
            // cgroup mode: the kernel's count for the whole attempt (what exited included).
            // A cgroup whose count has not moved ran no instruction since it was last read:
            // no member came or went and none touched its memory, so the last reading
            // stands and a still tree costs one read, not a read per member.
            let f = cg.figures_with(memory);
            if let (Some(us), Some((was, last))) = (f.cpu_usec, self.last_usage.get(pid))
                && us == *was
            {
                let mut u = *last;
                kernel_figures(&mut u, &f);
                out.insert(*pid, u);
                continue;
            }
            figures.insert(*pid, f);
            // The tree is the attempt cgroup's members (one read), not a walk.
            trees.push((*pid, Members::Listed(cg.procs())));
        }
        let measured = self.meter.measure(&trees);
        out.extend(measured);
        // The kernel's figures replace the sampled ones; memory too where the controller
        // is delegated.
        for (pid, members) in &trees {
            let (Some(f), Members::Listed(procs)) = (figures.get(pid), members) else {
                continue;
            };
            let u = out.entry(*pid).or_default();
            kernel_figures(u, f);
            u.procs = procs.len();
            if let Some(us) = f.cpu_usec {
                self.last_usage.insert(*pid, (us, *u));
            }
        }
        out
    }

    fn forget(&mut self, pid: i32, start: u64) {
        self.pidfds.remove(&(pid, start));
    }

    fn strays(&mut self, keep: &HashSet<i32>, lane: &Path) -> Vec<Proc> {
        let mut strays = self.stray_children(keep);
        for m in process::fleet_members(lane) {
            if !keep.contains(&m.proc.pid) && !strays.iter().any(|p| p.pid == m.proc.pid) {
                strays.push(m.proc);
            }
        }
        strays
    }

    fn escapees(
        &mut self,
        ended: &[(String, bool)],
        keep: &HashSet<i32>,
        lane: &Path,
    ) -> Vec<(String, Proc)> {
        let mut out = Vec::new();
        if ended.iter().any(|e| e.1) {
            for p in self.stray_children(keep) {
                let Some(env) = process::environ(p.pid) else {
                    continue;
                };
                let id = process::env_value(&env, crate::afk_env::WORKER_ID);
                if let Some(e) = ended.iter().find(|e| e.1 && id == Some(e.0.as_bytes())) {
                    out.push((e.0.clone(), p));
                }
            }
        }
        if ended.iter().any(|e| !e.1) {
            for m in process::fleet_members(lane) {
                if keep.contains(&m.proc.pid) {
                    continue;
                }
                if let Some(e) = ended
                    .iter()
                    .find(|e| !e.1 && m.worker_id.as_deref() == Some(e.0.as_str()))
                {
                    out.push((e.0.clone(), m.proc));
                }
            }
        }
        out
    }

    fn signal_stray(&mut self, p: &Proc, sig: Signal) {
        // Never our own group: a stray is outside our session, so its group is too.
        let _ = killpg(Pid::from_raw(p.pgid), sig);
        let _ = nix::sys::signal::kill(Pid::from_raw(p.pid), sig);
    }

    fn reap_orphans(&mut self, keep: &HashSet<i32>) {
        let me = std::process::id() as i32;
        for p in process::table() {
            if p.ppid == me && p.is_zombie() && p.sid != self.my_sid && !keep.contains(&p.pid) {
                let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
            }
        }
    }

    fn spawn_attempt(&mut self, spec: &SpawnSpec<'_>, slot: usize, seq: u64) -> Attempted {
        let (pending, cg) = self.begin_attempt(spec, slot, seq, false)?;
        self.finish_attempt(pending, cg)
    }

    fn spawn_attempts(&mut self, batch: &[Attempt<'_>], answer: &mut Answer<'_>) {
        for chunk in batch.chunks(IN_FLIGHT) {
            self.land_detached(IN_FLIGHT - chunk.len());
            let begun: Vec<_> = chunk
                .iter()
                .map(|a| {
                    (
                        SystemTime::now(),
                        self.begin_attempt(&a.spec, a.slot, a.seq, true),
                    )
                })
                .collect();
            for (at, b) in begun {
                answer(
                    b.and_then(|(pending, cg)| self.finish_attempt(pending, cg)),
                    at,
                );
            }
        }
    }

    fn follow_cgroup(&mut self, pid: i32, cg: &Cgroup) {
        self.cgroup_of.insert(pid, cg.clone());
        self.last_usage.remove(&pid);
        self.ending.remove(&pid);
    }

    fn watches_cgroups(&self) -> bool {
        self.watcher.is_some()
    }

    fn finish_cgroup(&mut self, leader: i32, cg: &Cgroup) -> Figures {
        self.cgroup_of.remove(&leader);
        self.ending.remove(&leader);
        self.last_usage.remove(&leader);
        let f = cg.figures_with(self.memory_counted());
        let _ = cg.remove_tree();
        f
    }

    fn sweep_cgroups(&mut self, keep: &[Cgroup], sig: Signal) -> usize {
        let Some(cgroups) = &self.cgroups else {
            return 0;
        };
        let mut n = 0;
        for (_, cg) in cgroups.attempts() {
            if keep.contains(&cg) {
                continue;
            }
            if cg.populated().unwrap_or(true) {
                n += 1;
                signal_cgroup(&cg, sig);
            } else {
                let _ = cg.remove_tree();
            }
        }
        n
    }
}

impl Os {
    /// Whether the attempt cgroups have the memory controller's files to read.
    fn memory_counted(&self) -> bool {
        self.cgroups.as_ref().is_none_or(|c| c.has_memory())
    }

    /// Live children of ours outside our session, but for `keep`: descendants that left
    /// their worker's group and were reparented to us when their parent died.
    fn stray_children(&self, keep: &HashSet<i32>) -> Vec<Proc> {
        let me = std::process::id() as i32;
        process::table()
            .into_iter()
            .filter(|p| {
                p.ppid == me && !p.is_zombie() && p.sid != self.my_sid && !keep.contains(&p.pid)
            })
            .collect()
    }
}

#[cfg(test)]
mod reaper_tests {
    //! The reaper's orders carried out on real processes (the reaper itself is bookkeeping).
    use super::*;
    use crate::process;
    use crate::supervisor::os::spawn::SpawnSpec;
    use std::time::{Duration, Instant};

    /// The worker leaves a grandchild in its group and exits at once: the grandchild is
    /// terminated, the group is seen empty, and the leader is reaped, whichever way the
    /// group is signalled.
    #[test]
    fn group_leftovers_are_terminated_and_leader_reaped() {
        for pidfd in [true, false] {
            if pidfd && !process::pidfd_groups() {
                assert!(std::env::var_os("CI").is_none(), "no pidfd group signals");
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let gc = dir.path().join("gc.pid");
            let script = format!("sleep 300 & echo $! > {}; exit 3", gc.display());
            let argv: Vec<String> = vec!["sh".into(), "-c".into(), script];
            let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
            let mut os = super::Os::new(tx);
            let s = os
                .spawn(&SpawnSpec {
                    argv: &argv,
                    cwd: dir.path(),
                    log: &dir.path().join("log"),
                    env: vec![],
                })
                .unwrap();
            assert!(s.pidfd, "its pidfd held by the Os");
            let deadline = Instant::now() + Duration::from_secs(20);
            // Reaped at once when the group is signalled through the pidfd; kept a zombie
            // (pinning the group id) otherwise.
            let exit = loop {
                if let Some(k) = process::child_exit(s.pid, pidfd) {
                    break k;
                }
                assert!(Instant::now() < deadline, "worker never ended");
                std::thread::sleep(Duration::from_millis(10));
            };
            assert_eq!(exit, process::ExitKind::Code(3));
            let gc: i32 = std::fs::read_to_string(&gc)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(process::read(gc).is_some_and(|p| !p.is_zombie()));
            let group = if pidfd {
                Group::Pidfd { start: s.start }
            } else {
                Group::Pinned
            };
            let mut r = Reaper::new(Duration::from_secs(30));
            let order = r.terminate(s.pid, group, true, true, false, Instant::now());
            super::carry_order(&mut os, order.as_ref());
            let mut done = Vec::new();
            while done.is_empty() {
                assert!(Instant::now() < deadline, "group never emptied");
                done = super::poll_reaper(&mut os, &mut r, Instant::now());
                std::thread::sleep(Duration::from_millis(20));
            }
            assert_eq!(
                done,
                vec![Done {
                    leader: s.pid,
                    killed: false
                }]
            );
            // The pidfd a group was followed through is let go of with the group.
            assert_eq!(os.pidfds.contains_key(&(s.pid, s.start)), !pidfd);
            assert!(process::read(s.pid).is_none(), "leader reaped");
            assert!(r.is_empty());
        }
    }
}

#[cfg(test)]
mod exits_tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A worker spawned by an `Os` given the loop's set is watched there: its end is
    /// reported by the set, as our own child's, and read by `exit_of`.
    #[test]
    fn a_spawned_worker_is_watched_in_the_loops_set() {
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<String> = vec!["sh".into(), "-c".into(), "exit 4".into()];
        let spec = SpawnSpec {
            argv: &argv,
            cwd: dir.path(),
            log: &dir.path().join("log"),
            env: vec![],
        };
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let exits = Arc::new(crate::supervisor::os::pidfd_set::Exits::new().unwrap());
        let mut os = Os::new(tx).with_exits(exits.clone());
        let s = os.spawn(&spec).unwrap();
        assert!(s.watched, "watched in the set");
        let deadline = Instant::now() + Duration::from_secs(20);
        let ends = loop {
            let (ends, _) = exits.take().unwrap();
            if !ends.is_empty() {
                break ends;
            }
            assert!(Instant::now() < deadline, "the end never came");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(
            matches!(ends[..], [Event::ChildEnded { pid, start }] if pid == s.pid && start == s.start),
            "{ends:?}"
        );
        assert!(
            matches!(
                os.exit_of(s.pid, false),
                Some(Ended::Ran(ExitKind::Code(4)))
            ),
            "exit 4"
        );
    }
}

#[cfg(test)]
mod batch_tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// More spawns than may be in flight at once, one of them of a missing program: every
    /// answer comes in order, the missing one as its start error, each other a worker of
    /// its own slot (its log says which) that ends with its slot's exit code.
    #[test]
    fn a_batch_answers_every_spawn_in_order_with_its_own_worker_or_error() {
        let dir = tempfile::tempdir().unwrap();
        let n = IN_FLIGHT + 8;
        let missing = 5;
        let argvs: Vec<Vec<String>> = (0..n)
            .map(|i| match i == missing {
                true => vec!["/nonexistent/worker".into()],
                false => vec![
                    "sh".into(),
                    "-c".into(),
                    format!("echo slot $SLOT; exit {i}"),
                ],
            })
            .collect();
        let logs: Vec<_> = (0..n)
            .map(|i| dir.path().join(format!("{i}.log")))
            .collect();
        let batch: Vec<Attempt<'_>> = (0..n)
            .map(|i| Attempt {
                spec: SpawnSpec {
                    argv: &argvs[i],
                    cwd: dir.path(),
                    log: &logs[i],
                    env: vec![("SLOT".into(), i.to_string())],
                },
                slot: i,
                seq: i as u64,
            })
            .collect();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut os = Os::new(tx);
        let mut answers = Vec::new();
        os.spawn_attempts(&batch, &mut |a, _| answers.push(a));
        assert_eq!(answers.len(), n);
        let deadline = Instant::now() + Duration::from_secs(30);
        for (i, a) in answers.into_iter().enumerate() {
            if i == missing {
                // Answered as its start error, or as a worker whose end says so.
                let err = match a {
                    Err(e) => e.to_string(),
                    Ok((started, _)) => match end_of(&mut os, started.pid, deadline) {
                        Ended::NotStarted(e) => e.to_string(),
                        other => panic!("{other:?}"),
                    },
                };
                assert!(err.contains("cannot start `/nonexistent/worker`"), "{err}");
                continue;
            }
            let (started, cgroup) = a.unwrap();
            assert!(cgroup.is_none());
            let exit = match end_of(&mut os, started.pid, deadline) {
                Ended::Ran(k) => k,
                other => panic!("worker {i}: {other:?}"),
            };
            assert_eq!(exit, ExitKind::Code(i as i32));
            let text = std::fs::read_to_string(&logs[i]).unwrap();
            assert_eq!(text, format!("slot {i}\n"));
        }
        assert!(os.detached.is_empty(), "every child let go");
    }

    /// One spawn as the loop asks for it (a batch of one), answered.
    fn lone(
        os: &mut Os,
        argv: &[String],
        cwd: &Path,
        log: &Path,
        slot: usize,
        seq: u64,
    ) -> Attempted {
        let batch = [Attempt {
            spec: SpawnSpec {
                argv,
                cwd,
                log,
                env: vec![],
            },
            slot,
            seq,
        }];
        let mut answers = Vec::new();
        os.spawn_attempts(&batch, &mut |a, _| answers.push(a));
        answers.pop().expect("one answer")
    }

    /// How our child `pid` ended, as the loop reads it, waited for until `deadline`.
    fn end_of(os: &mut Os, pid: i32, deadline: Instant) -> Ended {
        loop {
            if let Some(e) = os.exit_of(pid, false) {
                return e;
            }
            assert!(Instant::now() < deadline, "{pid} never ended");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The logs opened beside the boot are the ones the first spawns write to. One made
    /// for a spawn that never came is taken back when it is let go of (a start that spawns
    /// nothing, a new day, the supervisor's end), with the day's folder where a start made
    /// it; a log that was there before, or that a worker wrote to, stays.
    #[test]
    fn the_logs_opened_beside_the_boot_are_the_first_spawns_and_taken_back_if_none_comes() {
        let dir = tempfile::tempdir().unwrap();
        let layout = crate::layout::Layout::new(dir.path());
        let day = crate::timeutil::date_utc(SystemTime::now());
        let log = |slot| layout.slot_log(&day, slot);
        let logs = SlotLogs::open(&layout, 2);
        assert!(log(0).is_file() && log(1).is_file() && !log(2).exists());
        drop(logs);
        assert!(
            !log(0).parent().unwrap().exists(),
            "the day's folder made and taken back"
        );

        std::fs::create_dir_all(log(1).parent().unwrap()).unwrap();
        std::fs::write(log(1), "before\n").unwrap();
        drop(SlotLogs::open(&layout, 3));
        assert!(!log(0).exists() && !log(2).exists());
        assert_eq!(std::fs::read_to_string(log(1)).unwrap(), "before\n");

        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut os = Os::new(tx).with_slot_logs(SlotLogs::open(&layout, 4));
        let opened = Arc::clone(&os.slot_logs[&2].file);
        let deadline = Instant::now() + Duration::from_secs(30);
        let attempt = |os: &mut Os, slot, path: &Path, n| {
            let argv: Vec<String> = vec!["sh".into(), "-c".into(), format!("echo attempt {n}")];
            let (started, _) = lone(os, &argv, dir.path(), path, slot, n).unwrap();
            let end = end_of(os, started.pid, deadline);
            assert!(matches!(end, Ended::Ran(ExitKind::Code(0))), "{end:?}");
        };
        attempt(&mut os, 2, &log(2), 1);
        assert!(
            Arc::ptr_eq(&opened, &os.slot_logs[&2].file),
            "the log opened beside the boot"
        );
        assert_eq!(std::fs::read_to_string(log(2)).unwrap(), "attempt 1\n");
        // A new day lets go of the day before's logs: those made for slot 0's and slot 3's
        // spawns, which never came that day, are taken back; slot 1's (there before) and
        // slot 2's (written) stay.
        let tomorrow = dir.path().join("tomorrow").join("slot-3.log");
        attempt(&mut os, 3, &tomorrow, 2);
        assert!(!log(0).exists() && !log(3).exists());
        assert!(log(1).exists() && log(2).exists());
        assert_eq!(std::fs::read_to_string(&tomorrow).unwrap(), "attempt 2\n");
        drop(os);
        assert!(
            tomorrow.exists() && log(2).exists(),
            "written logs stay at the end"
        );

        std::fs::remove_dir_all(dir.path().join(".red")).unwrap();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let os = Os::new(tx).with_slot_logs(SlotLogs::open(&layout, 2));
        assert!(log(0).exists() && log(1).exists());
        drop(os);
        assert!(
            !log(0).exists() && !log(1).exists(),
            "taken back at the end"
        );
        assert!(
            !log(0).parent().unwrap().exists(),
            "with the day's folder it made"
        );

        // A new day takes back the folder made for the day before, once empty.
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut os = Os::new(tx).with_slot_logs(SlotLogs::open(&layout, 2));
        let next_day = dir.path().join("next-day").join("slot-0.log");
        attempt(&mut os, 0, &next_day, 3);
        assert!(
            !log(0).parent().unwrap().exists(),
            "taken back at a new day"
        );
        drop(os);
        assert!(next_day.exists(), "a written log stays, with its folder");
    }

    /// A slot's attempts write to one open log while its path (the day's) stays and the
    /// file is there: a deleted log is made anew at the next attempt, and a new day's
    /// first spawn lets go of the logs of the days before.
    #[test]
    fn a_slots_log_stays_open_from_one_attempt_to_the_next_until_it_goes_or_the_day_does() {
        let dir = tempfile::tempdir().unwrap();
        let (day1, day2) = (dir.path().join("d1"), dir.path().join("d2"));
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut os = Os::new(tx);
        let deadline = Instant::now() + Duration::from_secs(30);
        let attempt = |os: &mut Os, slot: usize, log: &Path, n: u64| {
            let argv: Vec<String> = vec!["sh".into(), "-c".into(), format!("echo attempt {n}")];
            let (started, _) = lone(os, &argv, dir.path(), log, slot, n).unwrap();
            let Ended::Ran(k) = end_of(os, started.pid, deadline) else {
                panic!("attempt {n} did not start");
            };
            assert_eq!(k, ExitKind::Code(0));
        };
        let log0 = day1.join("slot-0.log");
        attempt(&mut os, 0, &log0, 1);
        let opened = Arc::clone(&os.slot_logs[&0].file);
        attempt(&mut os, 0, &log0, 2);
        assert!(
            Arc::ptr_eq(&opened, &os.slot_logs[&0].file),
            "the same open log"
        );
        drop(opened);
        assert_eq!(
            std::fs::read_to_string(&log0).unwrap(),
            "attempt 1\nattempt 2\n"
        );
        std::fs::remove_file(&log0).unwrap();
        attempt(&mut os, 0, &log0, 3);
        assert_eq!(std::fs::read_to_string(&log0).unwrap(), "attempt 3\n");
        attempt(&mut os, 1, &day2.join("slot-1.log"), 4);
        assert_eq!(
            os.slot_logs.keys().copied().collect::<Vec<_>>(),
            vec![1],
            "the day before's logs let go of"
        );
        assert_eq!(
            std::fs::read_to_string(day2.join("slot-1.log")).unwrap(),
            "attempt 4\n"
        );
        // Past the most kept open (logs and pidfds together), a slot's log is opened for
        // its spawn alone, and those kept are let go of.
        os.slot_logs_max = os.pidfds.len() + 1;
        attempt(&mut os, 2, &day2.join("slot-2.log"), 5);
        assert!(os.slot_logs.is_empty());
        assert_eq!(
            std::fs::read_to_string(day2.join("slot-2.log")).unwrap(),
            "attempt 5\n"
        );
    }

    /// A lone spawn of a missing program is answered before the child's `execve` is seen
    /// (the spawn does not wait for it); the failure then comes as the child's end, with
    /// the error a waited-for spawn gives. A child fast enough to fail before the answer is
    /// answered as the error itself; at least one of 20 must take the later path.
    #[test]
    fn an_execve_that_fails_after_the_answer_is_reported_at_the_childs_end() {
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<String> = vec!["/nonexistent/worker".into()];
        let log = dir.path().join("log");
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut os = Os::new(tx);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut later = 0;
        for seq in 0..20 {
            let err = match lone(&mut os, &argv, dir.path(), &log, 0, seq) {
                Err(e) => e.to_string(),
                Ok((started, _)) => {
                    later += 1;
                    match end_of(&mut os, started.pid, deadline) {
                        Ended::NotStarted(e) => e.to_string(),
                        other => panic!("{other:?}"),
                    }
                }
            };
            assert!(err.contains("cannot start `/nonexistent/worker`"), "{err}");
            assert!(err.contains("No such file"), "{err}");
        }
        assert!(later >= 1, "every failure was seen before the answer");
        assert!(os.detached.is_empty());
        // A failed child reaped by another path (the zombie pass) is let go of by the next
        // landing, not kept for an end that will never be read.
        let mut reaped_elsewhere = false;
        for seq in 20..40 {
            let Ok((started, _)) = lone(&mut os, &argv, dir.path(), &log, 0, seq) else {
                continue;
            };
            while process::child_exit(started.pid, true).is_none() {
                assert!(Instant::now() < deadline, "{} never ended", started.pid);
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(os.detached.len(), 1);
            os.land_detached(IN_FLIGHT);
            assert!(os.detached.is_empty(), "let go of once reaped elsewhere");
            reaped_elsewhere = true;
            break;
        }
        assert!(reaped_elsewhere, "every failure was seen before the answer");
    }
}

#[cfg(test)]
mod reaper_cgroup_tests {
    use super::*;
    use crate::cgroup::Cgroup;
    use crate::cgroup::watch::Watcher;
    use crate::process;
    use crate::supervisor::os::spawn::{SpawnSpec, spawn_in};
    use std::time::{Duration, Instant};

    /// Removes the test's cgroup whatever happens.
    struct Scratch(Cgroup);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = self.0.kill();
            for _ in 0..500 {
                if self.0.remove_tree().is_ok() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// A still cgroup's reading is its last one (its CPU count did not move), and a
    /// process that joins it moves the count, so the next reading sees the new member.
    #[test]
    #[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
    fn a_still_cgroup_keeps_its_reading_until_its_cpu_moves() {
        let (_, own) = crate::cgroup::hierarchy::own().unwrap();
        let cg = Scratch(own.child(&format!("afk-unit-usage-{}", std::process::id())));
        cg.0.create().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<String> = vec!["sh".into(), "-c".into(), "exec sleep 300".into()];
        let spec = SpawnSpec {
            argv: &argv,
            cwd: dir.path(),
            log: &dir.path().join("log"),
            env: vec![],
        };
        let s = spawn_in(&spec, Some(&cg.0)).unwrap();
        let (otx, _orx) = tokio::sync::mpsc::unbounded_channel();
        let mut os = Os::new(otx);
        os.follow_cgroup(s.pid, &cg.0);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut last = os.usage(&[s.pid])[&s.pid];
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let u = os.usage(&[s.pid])[&s.pid];
            if u == last && u.procs == 1 {
                break;
            }
            last = u;
            assert!(Instant::now() < deadline, "never still: {u:?}");
        }
        assert_eq!(os.last_usage[&s.pid].1, last);
        let second = spawn_in(&spec, Some(&cg.0)).unwrap();
        let joined = loop {
            let u = os.usage(&[s.pid])[&s.pid];
            if u.procs == 2 {
                break u;
            }
            assert!(
                Instant::now() < deadline,
                "the second member never counted: {u:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(joined.cpu_ms >= last.cpu_ms);
        let _ = cg.0.kill();
        for pid in [s.pid, second.pid] {
            let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
        }
        os.finish_cgroup(s.pid, &cg.0);
        assert!(!os.last_usage.contains_key(&s.pid));
    }

    /// A worker in its own cgroup leaves a descendant in a new session with a cleared
    /// environment and exits: the reaper's SIGTERM (ignored) and then `cgroup.kill` end it,
    /// and the cgroup's emptying arrives through inotify, not a re-check.
    #[test]
    #[cfg_attr(not(afk_has_cgroup_v2), ignore = "no writable cgroup v2 subtree")]
    fn a_cgroup_group_is_killed_whole_and_its_emptying_is_an_event() {
        let (_, own) = crate::cgroup::hierarchy::own().unwrap();
        let cg = Scratch(own.child(&format!("afk-unit-reaper-{}", std::process::id())));
        cg.0.create().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let gc = dir.path().join("gc.pid");
        let script = format!(
            "setsid -f env -i sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 300'; exit 3",
            gc.display()
        );
        let argv: Vec<String> = vec!["sh".into(), "-c".into(), script];
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
            let w = Watcher::start(move || {
                let _ = tx.send(());
            })
            .unwrap();
            assert!(w.watch(&cg.0));
            let s = spawn_in(
                &SpawnSpec {
                    argv: &argv,
                    cwd: dir.path(),
                    log: &dir.path().join("log"),
                    env: vec![],
                },
                Some(&cg.0),
            )
            .unwrap();
            let deadline = Instant::now() + Duration::from_secs(20);
            // The escaper writes its pid after the shell created the file: wait for a
            // number, not just the file.
            let written = |p: &std::path::Path| {
                std::fs::read_to_string(p).is_ok_and(|t| t.trim().parse::<i32>().is_ok())
            };
            while !written(&gc) || process::child_exit(s.pid, false).is_none() {
                assert!(Instant::now() < deadline, "worker never ended");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(
                process::child_exit(s.pid, true),
                Some(process::ExitKind::Code(3))
            );
            let gc: i32 = std::fs::read_to_string(&gc)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert_eq!(cg.0.procs(), vec![gc], "the escaper is still in the cgroup");
            let (otx, _orx) = tokio::sync::mpsc::unbounded_channel();
            let mut os = Os::new(otx);
            let mut r = Reaper::new(Duration::from_millis(200));
            let order = r.terminate(
                s.pid,
                Group::Cgroup(cg.0.clone()),
                true,
                true,
                true,
                Instant::now(),
            );
            super::carry_order(&mut os, order.as_ref());
            while rx.try_recv().is_ok() {}
            // The SIGTERM is ignored; past the grace the next poll sends `cgroup.kill`.
            let mut done = Vec::new();
            while done.is_empty() && !r.killed(s.pid) {
                assert!(Instant::now() < deadline, "never killed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                done = super::poll_reaper(&mut os, &mut r, Instant::now());
            }
            // The kernel says the cgroup emptied: an inotify event, nothing polled.
            let ev = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await;
            assert!(
                matches!(ev, Ok(Some(()))),
                "no cgroup.events change arrived"
            );
            while done.is_empty() {
                assert!(Instant::now() < deadline, "cgroup never emptied");
                done = super::poll_reaper(&mut os, &mut r, Instant::now());
                if done.is_empty() {
                    let _ = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await;
                }
            }
            assert!(done[0].killed, "SIGTERM was ignored: cgroup.kill ended it");
            assert!(!cg.0.populated().unwrap());
            assert!(process::read(gc).is_none_or(|p| p.is_zombie()));
        });
    }
}
