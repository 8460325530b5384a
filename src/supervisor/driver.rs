//! The thin driver between the pure fleet and the world: it feeds
//! [`Fleet::handle`] the loop's events, carries out the [`Effect`]s it returns, in order,
//! through `children` (the one door to processes), the journal, the filesystem and the
//! blocking pool, and feeds each answer back as an [`Event`] at once, before the next
//! outside event, so a spawn's answer is decided on exactly where the spawn was asked.
//!
//! It also gathers the facts an event needs before feeding it: the zombies on SIGCHLD,
//! the control files on SIGUSR1, which dying groups still have members at each turn, and
//! the files, CPU readings and identities the tick asks for. Escaped descendants are
//! searched for and swept here (`strays`), since that reads the process table.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::UnboundedSender;

use crate::config::Config;
use crate::event_log::Kind;
use crate::event_log::Record;
use crate::fsutil::{atomic_write, remove_file_if_exists};
use crate::lanes::scale_directive;
use crate::lanes::slot_control::{self, Found};
use crate::lanes::state_file;
use crate::layout::Layout;
use crate::process;
use crate::supervisor::claim_holds;
use crate::supervisor::core::effect::Effect;
use crate::supervisor::core::event::{
    Adopted, Adoptee, ControlFiles, Event, Now, PauseCause, QueueError, TickFacts,
    TrackerUnavailable, WorkerFiles,
};
use crate::supervisor::core::fleet::Fleet;
use crate::supervisor::core::fleet_circuit;
use crate::supervisor::journal::Journal;
use crate::supervisor::os::children::{self, Attempt, Children, Ended};
use crate::supervisor::os::spawn::SpawnSpec;
use crate::supervisor::os::stall;
use crate::supervisor::os::strays::{Scope, Strays};
use crate::timeutil::date_utc;
use crate::tracker::{self, Tracker};

/// Most open `ready-for-agent` issues counted per queue check.
const QUEUE_LIMIT: usize = 1000;

/// The least time between two heartbeats written after a worker's start, end or progress.
/// A busy fleet's transitions (dozens of respawns a second) each made the whole
/// `state.toon` be encoded and replaced; `status` is a person's or a program's look
/// (`status --watch` redraws once a second), and a second behind is never a tick behind.
/// The first transition after a quiet second is written at the end of its turn; those of a
/// busy second are written together. Five writes a second were a seventh of a respawn's
/// cost under churn: on ext4 each replace makes and frees an inode and starts the new
/// data's write-back.
pub const HEARTBEAT_GAP: Duration = Duration::from_millis(1000);

/// The same after anything rarer (a pause, a circuit, a resize, a stop), which `status`
/// should show as soon as the event log does: still bounded, should such records come
/// by the dozen.
pub const URGENT_HEARTBEAT_GAP: Duration = Duration::from_millis(200);

/// The heartbeat gap for what the fleet has still to write.
fn heartbeat_gap(fleet: &Fleet) -> Duration {
    match fleet.heartbeat_urgent() {
        true => URGENT_HEARTBEAT_GAP,
        false => HEARTBEAT_GAP,
    }
}

/// What the driver holds to carry effects out.
pub struct Driver {
    layout: Layout,
    journal: Journal,
    children: Box<dyn Children>,
    /// Where the blocking pool's jobs send their results.
    tx: UnboundedSender<Event>,
    tracker: Result<Arc<dyn Tracker>, TrackerUnavailable>,
    budget: crate::config::Budget,
    /// The tick, seconds: how far ahead a cluster hold is set (`cluster_hold`).
    tick_s: u64,
    /// `rescue.max_file_bytes`, for the rescue of a dead worker's attempt.
    rescue_max_file_bytes: u64,
    grace: Duration,
    strays: Strays,
    /// The last report of a heartbeat that cannot be written (disk full, lane removed), so
    /// it is logged once.
    state_error: Option<String>,
    /// When the heartbeat was last written (see [`HEARTBEAT_GAP`]).
    state_written_at: Option<Instant>,
    /// The zombie pass of SIGCHLD (see [`Driver::sigchld`]).
    zombie_pass: ZombiePass,
}

/// The least time between two zombie passes (see [`Driver::sigchld`]), in a fleet of up
/// to a hundred workers.
pub const ZOMBIE_PASS_GAP: Duration = Duration::from_millis(100);

/// The most: a fleet of a thousand workers or more.
pub const ZOMBIE_PASS_GAP_MAX: Duration = Duration::from_secs(1);

/// The gap between passes in a fleet of `workers` (about the children a pass walks): a
/// millisecond for each, within [`ZOMBIE_PASS_GAP`] and [`ZOMBIE_PASS_GAP_MAX`], so the
/// walks cost about the same each second at any size instead of growing with it. A longer
/// gap delays only the reaping of orphans' zombies, which keep a pid each; but while
/// `waiting` (a group is being waited out, or the fleet stops) the gap is the least, since
/// an orphan's zombie can be the last member a slot, its claims or the stop wait for.
pub fn zombie_pass_gap(workers: usize, waiting: bool) -> Duration {
    if waiting {
        return ZOMBIE_PASS_GAP;
    }
    let per_worker = Duration::from_millis(u64::try_from(workers).unwrap_or(u64::MAX));
    per_worker.clamp(ZOMBIE_PASS_GAP, ZOMBIE_PASS_GAP_MAX)
}

/// [`zombie_pass_gap`] for the fleet as it is.
fn fleet_zombie_gap(fleet: &Fleet) -> Duration {
    let waiting = fleet.groups_dying() || fleet.stopping().is_some();
    zombie_pass_gap(fleet.worker_count(), waiting)
}

/// When the zombie pass last ran, and whether a SIGCHLD asks for another.
#[derive(Debug, Default)]
struct ZombiePass {
    last: Option<Instant>,
    due: bool,
}

impl ZombiePass {
    /// When the pass asked for may run: now, or once `gap` since the last is over.
    fn at(&self, now: Instant, gap: Duration) -> Option<Instant> {
        self.due
            .then(|| self.last.map_or(now, |l| (l + gap).max(now)))
    }
}

impl Driver {
    pub fn new(
        layout: Layout,
        config: &Config,
        journal: Journal,
        children: Box<dyn Children>,
        tx: UnboundedSender<Event>,
        tracker: Result<Arc<dyn Tracker>, TrackerUnavailable>,
    ) -> Self {
        Driver {
            layout,
            journal,
            children,
            tx,
            tracker,
            budget: config.budget.clone(),
            tick_s: config.timing.tick_s,
            rescue_max_file_bytes: config.rescue.max_file_bytes,
            grace: Duration::from_secs(config.timing.stop_grace_s),
            strays: Strays::default(),
            state_error: None,
            state_written_at: None,
            zombie_pass: ZombiePass::default(),
        }
    }

    /// Writes a line to the event log (not through the fleet: nothing it decides by).
    pub fn log(&mut self, line: Record) {
        self.journal.write(line);
    }

    /// Holds the records of each turn for one write (`true`), or writes each as it comes
    /// (`false`, which writes what is held first): see [`crate::supervisor::journal::Journal::hold`].
    pub fn hold_log(&mut self, yes: bool) {
        self.journal.hold(yes);
    }

    /// Writes the turn's held records: the loop calls it before it sleeps.
    pub fn flush_log(&mut self) {
        self.journal.flush();
    }

    /// Watches the previous supervisor's live workers, then starts the fleet: every spawn
    /// of the start-up is asked for at once and carried out in one batch, and the
    /// heartbeat is written once after it.
    pub fn start(
        &mut self,
        fleet: &mut Fleet,
        adoptees: Vec<Adoptee>,
        dead: usize,
        had_state: bool,
        now: Instant,
    ) {
        let today = date_utc(SystemTime::now());
        let adopted = adoptees
            .into_iter()
            .map(|a| {
                let log = std::fs::read_link(format!("/proc/{}/fd/1", a.pid))
                    .unwrap_or_else(|_| self.layout.slot_log(&today, a.slot));
                let watch = self.children.adopt(a.pid, a.start);
                if watch.is_some()
                    && let Some(cg) = &a.cgroup
                {
                    self.children.follow_cgroup(a.pid, cg);
                }
                Adopted {
                    adoptee: a,
                    watch,
                    log,
                }
            })
            .collect();
        let effects = fleet.start(adopted, dead, had_state, Now::system(now));
        self.carry(fleet, effects, now);
    }

    /// Feeds one outside event; answers to its effects are fed at once.
    pub fn feed(&mut self, fleet: &mut Fleet, event: Event, now: Instant) {
        match event {
            // How it ended is read here (reaping it unless its zombie pins its group).
            Event::ChildEnded { pid, start } => self.child_ended(fleet, pid, start, now),
            Event::Sigchld => self.sigchld(fleet, now),
            event => {
                let effects = fleet.handle(event, Now::system(now));
                self.carry(fleet, effects, now);
            }
        }
    }

    /// SIGUSR1: the operator's pause file, then `resize.toon` and `slot-control.toon`, are
    /// read and fed. The pause first: a `scale` sent while a `pause` was just written
    /// (one signal may answer both) must find the fleet paused and start nothing.
    pub fn control(&mut self, fleet: &mut Fleet, now: Instant) {
        for e in claim_holds::read_operator_pause(&self.layout) {
            self.feed(fleet, e, now);
        }
        let files = self.control_files();
        self.feed(fleet, Event::Control(Box::new(files)), now);
    }

    /// The end of a loop turn: the dying groups are looked at, what is due runs, the
    /// escaped descendants due their SIGKILL or another search get it, and the tick runs
    /// when due.
    pub fn turn(&mut self, fleet: &mut Fleet, now: Instant) {
        if self
            .zombie_pass
            .at(now, fleet_zombie_gap(fleet))
            .is_some_and(|at| at <= now)
        {
            self.reap_zombies(fleet, now);
        }
        let alive = fleet
            .dying_groups()
            .into_iter()
            .map(|(leader, g)| (leader, self.children.group_alive(leader, &g)))
            .collect();
        self.feed(fleet, Event::Turn { alive }, now);
        if fleet.stopping().is_none() {
            self.strays.kill_due(&mut *self.children, now);
            // Every turn, so the set of workers to spare is built only when a search runs.
            if self.strays.retry_is_due(now) {
                self.with_strays(fleet, now, |strays, scope| strays.retry_due(scope, now));
            }
        }
        if fleet.tick_due(now) {
            // The operator pause's own end (`--until`) is learnt here, before the tick's
            // queue check.
            for e in claim_holds::read_operator_pause(&self.layout) {
                self.feed(fleet, e, now);
            }
            let facts = self.tick_facts(fleet, now);
            self.feed(fleet, Event::Tick(Box::new(facts)), now);
        }
    }

    /// When the loop must wake next without an event: a heartbeat held back by the gap
    /// is one of them.
    pub fn next_deadline(&self, fleet: &Fleet, now: Instant) -> Instant {
        let mut d = fleet.next_deadline(now);
        if fleet.heartbeat_due()
            && let Some(at) = self.state_written_at
        {
            d = d.min((at + heartbeat_gap(fleet)).max(now));
        }
        if let Some(at) = self.zombie_pass.at(now, fleet_zombie_gap(fleet)) {
            d = d.min(at);
        }
        match self.strays.next_deadline(fleet.stopping().is_some()) {
            Some(s) => d.min(s.max(now)),
            None => d,
        }
    }

    /// Writes the heartbeat if a transition happened since the last one and the last one
    /// is [`HEARTBEAT_GAP`] old ([`URGENT_HEARTBEAT_GAP`] after more than churn).
    pub fn heartbeat_if_changed(&mut self, fleet: &mut Fleet, now: Instant) {
        let gap_over = self
            .state_written_at
            .is_none_or(|at| now.saturating_duration_since(at) >= heartbeat_gap(fleet));
        if fleet.heartbeat_due() && gap_over {
            self.write_state(fleet, now);
        }
    }

    /// Writes the heartbeat now. One that fails (a full disk) is owed: the fleet keeps it
    /// due, so it is tried again a gap later, and at every gap until it lands, whether or
    /// not anything changes meanwhile (`status`, `stop` and a takeover read the file: the
    /// dead pids it would keep naming are not the live workers).
    pub fn write_state(&mut self, fleet: &mut Fleet, now: Instant) {
        self.state_written_at = Some(now);
        let snap = fleet.snapshot_written(now);
        match state_file::write(&self.layout.state_file(), &snap) {
            Ok(()) => {
                if let Some(e) = self.state_error.take() {
                    let msg = format!("heartbeat written again after: {e}");
                    self.journal
                        .write(Record::now(Kind::SupervisorHousekeeping, msg));
                }
            }
            Err(e) => {
                fleet.heartbeat_owed();
                let e = e.to_string();
                if self.state_error.as_deref() != Some(e.as_str()) {
                    self.journal
                        .write(Record::now(Kind::SupervisorError, e.clone()));
                    self.state_error = Some(e);
                }
            }
        }
    }

    /// Every worker ended, every group is empty, and no descendant that escaped its group
    /// (`setsid`) is left. Drives the escaped ones' termination.
    pub fn stop_complete(&mut self, fleet: &mut Fleet, now: Instant) -> bool {
        if !fleet.stop_settled() {
            return false;
        }
        let kept = fleet.cgroup_mode().then(|| fleet.ended_cgroups());
        let mut none_left = false;
        self.with_strays(fleet, now, |strays, scope| {
            let (none, lines) = strays.sweep(scope, kept.as_deref(), now);
            none_left = none;
            lines
        });
        none_left
    }

    /// What is still alive when giving up on a stop.
    pub fn leftovers(&mut self, fleet: &Fleet) -> Vec<i32> {
        let keep = fleet.covered();
        let strays = self
            .children
            .strays(&keep, &self.layout.supervisor_lane())
            .into_iter()
            .map(|p| p.pid);
        let mut left: Vec<i32> = fleet.live_pids().into_iter().chain(strays).collect();
        left.sort_unstable();
        left.dedup();
        left
    }

    /// SIGCHLD: our own workers that ended without a pidfd watch at once, and the zombie
    /// pass (below) when [`ZOMBIE_PASS_GAP`] has gone by since the last one, else at the
    /// end of that gap.
    ///
    /// Our own workers' ends come through their pidfds (`waitid` on one pid, which the
    /// kernel answers without looking at the others); what the pass is for is the orphans
    /// of the workers' trees reparented to us (the child subreaper), whose zombies only
    /// keep a pid each until it runs. A pass asks the kernel for any zombie child, and the
    /// kernel answers that by walking every child we have: on every SIGCHLD, a fleet of
    /// a thousand workers paid for two walks of a thousand children with every respawn.
    /// With the gap it pays for at most ten passes a second, however busy, and fewer in a
    /// bigger fleet ([`zombie_pass_gap`]): a thousand workers, one a second.
    pub fn sigchld(&mut self, fleet: &mut Fleet, now: Instant) {
        self.zombie_pass.due = true;
        if self
            .zombie_pass
            .at(now, fleet_zombie_gap(fleet))
            .is_some_and(|at| at <= now)
        {
            return self.reap_zombies(fleet, now);
        }
        for (pid, start) in fleet.unwatched_own() {
            self.child_ended(fleet, pid, start, now);
        }
    }

    /// The zombie pass, now.
    ///
    /// Where groups are signalled through pidfds, nothing is pinned: the kernel is asked
    /// for our zombie children one at a time (`waitid` without reaping) and each is reaped,
    /// a worker's as its exit. The first zombie that belongs to a command the supervisor
    /// runs itself (its own waiter reaps it) ends the pass, and a SIGCHLD is fed again once
    /// that waiter has reaped it ([`crate::cmd::is_running_then`]), so the zombies behind
    /// it wait for that, never for a tick. Elsewhere `/proc` is read, sparing the pinned
    /// leaders.
    pub fn reap_zombies(&mut self, fleet: &mut Fleet, now: Instant) {
        self.zombie_pass = ZombiePass {
            last: Some(now),
            due: false,
        };
        for (pid, start) in fleet.unwatched_own() {
            self.child_ended(fleet, pid, start, now);
        }
        if !process::pidfd_groups() {
            let keep = fleet.kept_from_reaping();
            self.children.reap_orphans(&keep);
            return;
        }
        // Bounded: each round reaps one zombie, and at most this many arrive per event.
        for _ in 0..4096 {
            let Some((pid, commands)) = self.children.next_zombie() else {
                return;
            };
            if let Some(start) = fleet.own_worker_start(pid) {
                self.child_ended(fleet, pid, start, now);
                continue;
            }
            if commands {
                return;
            }
            self.children.reap(pid);
        }
    }

    /// Our own worker `pid` (started at `start`) has ended: how is read (reaping it unless
    /// its zombie pins its group id) and fed as its exit.
    fn child_ended(&mut self, fleet: &mut Fleet, pid: i32, start: u64, now: Instant) {
        let Some(keep_zombie) = fleet.own_child_wait(pid, start) else {
            return;
        };
        let event = match self.children.exit_of(pid, keep_zombie) {
            Some(Ended::Ran(kind)) => Event::Exited { pid, start, kind },
            Some(Ended::NotStarted(e)) => Event::NotStarted {
                pid,
                start,
                error: e.to_string(),
            },
            None => return,
        };
        let effects = fleet.handle(event, Now::system(now));
        self.carry(fleet, effects, now);
    }

    /// Runs `f` on the strays with what a search must leave alone (the fleet's workers),
    /// and logs what it says through the fleet.
    fn with_strays(
        &mut self,
        fleet: &mut Fleet,
        now: Instant,
        f: impl FnOnce(&mut Strays, Scope<'_>) -> Vec<Record>,
    ) {
        let keep = fleet.covered();
        let lane = self.layout.supervisor_lane();
        let scope = Scope {
            os: &mut *self.children,
            keep: &keep,
            lane: &lane,
            grace: self.grace,
        };
        let lines = f(&mut self.strays, scope);
        self.log_through(fleet, lines, now);
    }

    fn log_through(&mut self, fleet: &mut Fleet, lines: Vec<Record>, now: Instant) {
        for l in lines {
            self.feed(fleet, Event::Log(l), now);
        }
    }

    /// Carries out `effects` in order; an effect's answer is handled (and its own effects
    /// carried out) before the next one. Spawns asked for together (a start-up, a grown
    /// target, a wake-up) are started in one batch and answered after it, so no event-log
    /// write sits between two forks. Each answer keeps the wall time it came at: a spawn's
    /// record says when that worker started, not when the batch of 64 ended.
    pub fn carry(&mut self, fleet: &mut Fleet, effects: Vec<Effect>, now: Instant) {
        let mut effects = effects.into_iter().peekable();
        while let Some(e) = effects.next() {
            let answers: Vec<(Event, Now)> = match e {
                Effect::Spawn { .. } => {
                    let mut batch = vec![e];
                    while matches!(effects.peek(), Some(Effect::Spawn { .. })) {
                        batch.extend(effects.next());
                    }
                    self.spawn_batch(batch, now)
                }
                e => self
                    .effect(fleet, e, now)
                    .map(|a| (a, Now::system(now)))
                    .into_iter()
                    .collect(),
            };
            for (answer, at) in answers {
                let more = fleet.handle(answer, at);
                self.carry(fleet, more, now);
            }
        }
    }

    /// Starts the workers of consecutive [`Effect::Spawn`]s together (see
    /// [`Children::spawn_attempts`]); each answer is stamped with the time its worker was
    /// started, not the time the batch ended.
    fn spawn_batch(&mut self, spawns: Vec<Effect>, now: Instant) -> Vec<(Event, Now)> {
        let day = date_utc(SystemTime::now());
        let mut asked = Vec::with_capacity(spawns.len());
        let mut envs = Vec::with_capacity(spawns.len());
        for e in spawns {
            if let Effect::Spawn {
                slot,
                seq,
                argv,
                env,
            } = e
            {
                asked.push((slot, seq, argv, self.layout.slot_log(&day, slot)));
                envs.push(env);
            }
        }
        let batch: Vec<Attempt<'_>> = asked
            .iter()
            .zip(envs)
            .map(|((slot, seq, argv, log), env)| Attempt {
                spec: SpawnSpec {
                    argv,
                    cwd: self.layout.repo(),
                    log,
                    env,
                },
                slot: *slot,
                seq: *seq,
            })
            .collect();
        let mut answers = Vec::with_capacity(batch.len());
        let mut of = asked.iter();
        self.children.spawn_attempts(&batch, &mut |answer, wall| {
            let Some(&(slot, seq, _, ref log)) = of.next() else {
                return;
            };
            let event = match answer {
                Ok((started, cgroup)) => Event::Spawned {
                    slot,
                    seq,
                    started,
                    log: log.clone(),
                    cgroup,
                },
                Err(e) => Event::SpawnFailed {
                    slot,
                    seq,
                    error: e.to_string(),
                },
            };
            answers.push((event, Now { at: now, wall }));
        });
        answers
    }

    fn effect(&mut self, fleet: &mut Fleet, e: Effect, now: Instant) -> Option<Event> {
        match e {
            Effect::Log(line) => self.journal.write(line),
            Effect::WriteState => self.write_state(fleet, now),
            Effect::CheckQueue { count_quarantined } => self.check_queue(count_quarantined),
            Effect::ReleaseClaims(dead) => self.release_claims(dead),
            Effect::WriteRetire { slot, token, asker } => {
                let path = self.layout.retire_file(slot);
                let error = atomic_write(&path, token.as_bytes())
                    .err()
                    .map(|e| format!("{}: {e}", path.display()));
                return Some(Event::RetireAsked { slot, asker, error });
            }
            Effect::RemoveRetire { slot } => {
                let _ = remove_file_if_exists(&self.layout.retire_file(slot));
            }
            Effect::MarkStall {
                attempt_dir,
                fleet_wide,
            } => {
                let mark = attempt_dir.join(crate::attempt_state::STALL_KILLED_FILE);
                let text = crate::attempt_state::StallMark::text(fleet_wide.as_deref());
                if let Err(e) = atomic_write(&mark, text.as_bytes()) {
                    self.journal.write(Record::now(
                        Kind::SupervisorError,
                        format!("{}: {e}", mark.display()),
                    ));
                }
            }
            Effect::AnswerSlotControl(ack) => {
                if let Err(e) = slot_control::write_ack(&self.layout, &ack) {
                    let path = slot_control::ack_path(&self.layout);
                    let line =
                        Record::now(Kind::SupervisorError, format!("{}: {e}", path.display()));
                    return Some(Event::Log(line));
                }
            }
            // Carried out in batches: `spawn_batch`.
            spawn @ Effect::Spawn { .. } => {
                return self.spawn_batch(vec![spawn], now).pop().map(|(a, _)| a);
            }
            Effect::Group(order) => children::carry_order(&mut *self.children, Some(&order)),
            Effect::ReadFatalReason { slot, log } => {
                let reason = stall::fatal_reason_from_log(&log);
                return Some(Event::FatalReason { slot, reason });
            }
            Effect::ReadCircuitLog { tripped, log } => {
                let lines = stall::last_lines(&log, fleet_circuit::REASON_LINES);
                return Some(Event::CircuitLog {
                    tripped,
                    log,
                    lines,
                });
            }
            Effect::FinishCgroup { leader, cgroup } => {
                let figures = self.children.finish_cgroup(leader, &cgroup);
                return Some(Event::CgroupFinished { leader, figures });
            }
            Effect::SearchStrays(ended) => {
                self.with_strays(fleet, now, |strays, scope| strays.search(scope, ended, now));
            }
            Effect::ReapOrphans => self.reap_zombies(fleet, now),
        }
        None
    }

    /// The control files as they are now (the answer file only beside a request).
    fn control_files(&self) -> ControlFiles {
        let slot_request = slot_control::read_request(&self.layout);
        let slot_ack = match slot_request {
            Found::Some(_) => slot_control::read_ack(&self.layout),
            _ => Found::None,
        };
        ControlFiles {
            scale: scale_directive::read(&self.layout.resize_file()),
            slot_request,
            slot_ack,
        }
    }

    /// What the tick asks for: the stop sentinel, the control files, the files of the
    /// workers it names, their CPU when a reading is due, and which unwatched adopted
    /// workers are gone.
    fn tick_facts(&mut self, fleet: &Fleet, now: Instant) -> TickFacts {
        let stop_file = self.layout.supervisor_stop();
        let stop_file = crate::fsutil::regular_file_present(&stop_file)
            .map_err(|e| format!("{}: {e}; not a stop request, ignored", stop_file.display()));
        // One listing of the worker directories answers, for every worker whose issue is
        // not known, whether it has any (an idle worker, a custom one that keeps no
        // attempts, has none).
        let with_dirs = std::cell::OnceCell::new();
        let queries = fleet.progress_wanted(now, |id| {
            with_dirs
                .get_or_init(|| stall::workers_with_dirs(&self.layout))
                .contains(id)
        });
        let progress = queries
            .into_iter()
            .map(|q| {
                let attempt = stall::current_attempt(&self.layout, &q.worker_id);
                let files_epoch = stall::progress_epoch(q.started_epoch, &q.log, attempt.as_ref());
                let title = attempt
                    .as_ref()
                    .filter(|a| q.title_of != Some(a.issue))
                    .and_then(stall::attempt_title);
                (
                    q.pid,
                    WorkerFiles {
                        attempt,
                        files_epoch,
                        title,
                    },
                )
            })
            .collect();
        let usage = fleet
            .usage_wanted(now)
            .map(|leaders| self.children.usage(&leaders));
        let gone = fleet
            .unwatched_adopted()
            .into_iter()
            .filter(|(pid, start)| !self.children.is_live(*pid, *start))
            .collect();
        TickFacts {
            stop_file,
            control: self.control_files(),
            progress,
            usage,
            gone,
        }
    }

    /// Asks the tracker for the claimable issues, off the loop (a slow tracker never
    /// delays noticing a death); the fleet keeps it to one check at a time.
    fn check_queue(&self, count_quarantined: bool) {
        let (layout, tx) = (self.layout.clone(), self.tx.clone());
        let budget = self.budget.clone();
        let tracker = self.tracker.clone();
        let tick_s = self.tick_s;
        blocking(move || {
            // The holds are read first: a paused or held fleet's queue check costs no call.
            let holds = claim_holds::read_tracker_holds(&layout, &budget, tick_s);
            let held = holds.held();
            for e in holds.events {
                let _ = tx.send(e);
            }
            if held {
                return;
            }
            if count_quarantined
                && let Ok(t) = &tracker
                && let Ok(q) = t.list_open_with_label(tracker::labels::QUARANTINED, QUEUE_LIMIT)
            {
                let _ = tx.send(Event::Quarantined(q.len() as u64));
            }
            let r = match tracker {
                Ok(t) => t
                    .list_open_with_label(tracker::labels::READY_FOR_AGENT, QUEUE_LIMIT)
                    .map(|v| claim_holds::claimable(&layout, &v))
                    .map_err(QueueError::from),
                Err(e) => Err(QueueError::Unavailable(e)),
            };
            // A rate-limited answer has just recorded the pause (the gh backend does); a
            // file that cannot be read was reported by `read_holds` a moment ago.
            if r.is_err()
                && let Some(p) = crate::lanes::pause_file::active(&layout.state())
            {
                let _ = tx.send(Event::Paused(p, PauseCause::RateLimit));
                return;
            }
            let _ = tx.send(Event::Queue(r));
        });
    }

    /// Gives the claims of dead workers whose group is gone back, on the blocking pool
    /// (git work for the rescue, tracker calls for the restore); what it did comes back
    /// as [`Event::Log`].
    ///
    /// The loop only looks whether any claim is there (one directory read, stopping at the
    /// first): which claims name a dead worker takes a pid file read per claim, a cost
    /// that grows with the fleet, so it is read on the blocking pool.
    fn release_claims(&self, dead: Vec<crate::claim::release::DeadWorker>) {
        let Ok(tracker) = self.tracker.clone() else {
            return;
        };
        if dead.is_empty() || !crate::claim::release::any_claims(&self.layout) {
            return;
        }
        for w in dead {
            let (layout, tx, tracker) = (self.layout.clone(), self.tx.clone(), tracker.clone());
            let keeper = crate::rescue::Keeper::new(
                layout.repo(),
                self.rescue_max_file_bytes,
                tracker.shared_across_checkouts(),
            );
            blocking(move || {
                for ev in crate::supervisor::release_dead::release_rescuing(
                    &layout,
                    tracker.as_ref(),
                    &w,
                    &keeper,
                ) {
                    let _ = tx.send(Event::Log(ev));
                }
            });
        }
    }
}

/// Runs `job` on the runtime's blocking pool, or on this thread outside a runtime.
fn blocking(job: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn_blocking(job);
        }
        Err(_) => job(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_pass_runs_at_once_then_at_most_once_a_gap() {
        let t0 = Instant::now();
        let gap = ZOMBIE_PASS_GAP;
        let mut pass = ZombiePass::default();
        assert_eq!(pass.at(t0, gap), None, "nothing asked for");
        pass.due = true;
        assert_eq!(pass.at(t0, gap), Some(t0), "the first runs at once");
        pass = ZombiePass {
            last: Some(t0),
            due: true,
        };
        let soon = t0 + gap / 4;
        assert_eq!(pass.at(soon, gap), Some(t0 + gap));
        let late = t0 + gap * 3;
        assert_eq!(pass.at(late, gap), Some(late));
    }

    /// A pass walks every child, so the gap after it grows with the fleet: the walks cost
    /// about the same each second at 100 workers and at 1,000.
    #[test]
    fn the_gap_after_a_pass_grows_with_the_children_it_walks() {
        assert_eq!(zombie_pass_gap(0, false), ZOMBIE_PASS_GAP);
        assert_eq!(zombie_pass_gap(16, false), ZOMBIE_PASS_GAP);
        assert_eq!(zombie_pass_gap(100, false), ZOMBIE_PASS_GAP);
        assert_eq!(zombie_pass_gap(400, false), Duration::from_millis(400));
        assert_eq!(zombie_pass_gap(1_000, false), ZOMBIE_PASS_GAP_MAX);
        assert_eq!(zombie_pass_gap(usize::MAX, false), ZOMBIE_PASS_GAP_MAX);
        let t0 = Instant::now();
        let pass = ZombiePass {
            last: Some(t0),
            due: true,
        };
        let soon = t0 + ZOMBIE_PASS_GAP * 2;
        assert_eq!(
            pass.at(soon, zombie_pass_gap(1_000, false)),
            Some(t0 + ZOMBIE_PASS_GAP_MAX)
        );
        // A group waited out (or a stop) takes the least gap at any size: an orphan's
        // zombie may be what keeps it.
        assert_eq!(zombie_pass_gap(1_000, true), ZOMBIE_PASS_GAP);
    }
}
