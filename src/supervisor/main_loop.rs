//! `afk-supervisor run`: start-up in the SPEC order, the event loop, and the stop.
//!
//! Start-up: the supervisor lock, the pid file, the boot sweep suite exactly once, takeover of a
//! previous supervisor's live workers, then a worker in every empty slot. The loop then
//! waits (one thread, a current-thread tokio runtime) on the workers' pidfds, the signals,
//! the messages of the blocking pool (tracker calls, the belt) and one timer at the next
//! due deadline (tick, circuit probe, group kill).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::config::Config;
use crate::event_log::Kind;
use crate::event_log::Record;
use crate::exit_code;
use crate::git::Git;
use crate::lanes::state_file;
use crate::layout::Layout;
use crate::process;
use crate::supervisor::claim_holds::{HoldsRead, read_holds};
use crate::supervisor::core::event;
use crate::supervisor::core::fleet::Fleet;
use crate::supervisor::driver::Driver;
use crate::supervisor::journal::{Journal, Rotation};
use crate::supervisor::os::children::{Os, SlotLogs};
use crate::supervisor::os::isolation::{CgroupRequired, Entering};
use crate::supervisor::os::lock::{LockError, SupervisorLock};
use crate::supervisor::os::pidfd_set::Exits;
use crate::supervisor::os::sd_notify::Notifier;
use crate::supervisor::os::signals::{Descriptor, Heard, Signals, heard};
use crate::supervisor::os::spawn;
use crate::supervisor::takeover::{end_left_workers, takeover_candidates, unrecorded_workers};
use crate::supervisor::timers::{Periodic, housekeeping_tasks, periodic_tasks, start_periodic};
use crate::sweeps::suite::{self, SuiteRun};
use crate::sweeps::{Disposition, SweepCtx, SweepName};
use crate::timeutil;
use crate::tracker::Tracker;
use crate::tracker::select::SelectError;

/// How the supervisor reaches the tracker (injected so the CLI chooses): the backend and
/// the one-line reason it was chosen.
pub type TrackerOpener =
    Box<dyn FnOnce(&Config, &Layout) -> Result<(Arc<dyn Tracker>, String), SelectError> + Send>;

/// How a supervisor run ended; `src/cli/run.rs` turns it into the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The fleet stopped with this status: 128 + the stop signal, or 1 when the loop
    /// lost its event source (`docs/SPEC.md` §9).
    Stopped(i32),
    /// The boot suite halted (docs sweep or probe); nothing was spawned.
    BootHalted,
}

/// Why the supervisor could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No `worker.command` and no path to this binary's built-in worker.
    #[error(
        "worker.command is not set and this binary's path is unknown ({0}); set worker.command"
    )]
    NoWorkerCommand(#[source] std::io::Error),
    #[error("cannot start the event loop: {0}")]
    EventLoop(#[source] std::io::Error),
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Log(#[from] crate::toonl::LogError),
    #[error(transparent)]
    StateFile(#[from] crate::fsutil::NotReplaceable),
    #[error(transparent)]
    Isolation(#[from] crate::supervisor::os::isolation::CgroupRequired),
}

/// `worker.command`, else this binary's built-in worker for this repo, config and tracker
/// (`<exe> --repo R [--config F] --tracker K worker --once`).
pub fn worker_argv(config: &Config, layout: &Layout) -> Result<Vec<String>, RunError> {
    if let Some(cmd) = &config.worker.command {
        return Ok(cmd.clone());
    }
    let exe = std::env::current_exe().map_err(RunError::NoWorkerCommand)?;
    let mut argv = vec![
        exe.display().to_string(),
        "--repo".into(),
        layout.repo().display().to_string(),
    ];
    if let Some(file) = &config.file {
        argv.push("--config".into());
        argv.push(file.display().to_string());
    }
    argv.extend([
        "--tracker".into(),
        config.tracker.kind.to_string(),
        "worker".into(),
        "--once".into(),
    ]);
    Ok(argv)
}

/// What the loop hears besides its signals and timers: the events of the supervisor's
/// own tasks (a channel) and the workers' ends (the set of their pidfds).
struct Inbox {
    rx: UnboundedReceiver<event::Event>,
    /// `None` where the kernel has no epoll set to give (then an own worker's end comes by
    /// SIGCHLD, an adopted one's is looked for at the tick).
    exits: Option<AsyncFd<Arc<Exits>>>,
}

impl Inbox {
    fn new(rx: UnboundedReceiver<event::Event>) -> Inbox {
        let exits = Exits::new().map(Arc::new).and_then(|set| {
            // SAFETY: the set's descriptor is owned by the value moved in, which keeps it
            // open and the same for as long as the AsyncFd holds it.
            unsafe { AsyncFd::register_with_interest(set, tokio::io::Interest::READABLE) }
                .map_err(std::io::Error::from)
        });
        if let Err(e) = &exits {
            tracing::warn!(error = %e, "no set of the workers' pidfds; their ends come by SIGCHLD");
        }
        Inbox {
            rx,
            exits: exits.ok(),
        }
    }

    /// The set the workers' pidfds go into.
    fn exits(&self) -> Option<Arc<Exits>> {
        self.exits.as_ref().map(|fd| fd.get_ref().clone())
    }

    /// The events that arrived, at least one. Cancel-safe: an end taken from the set is
    /// returned in the same poll.
    async fn next(&mut self) -> Result<Vec<event::Event>, InboxError> {
        let Inbox { rx, exits } = self;
        let ended = async {
            match exits {
                Some(fd) => ended(fd).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            msg = rx.recv() => {
                let first = msg.ok_or(InboxError::Closed)?;
                let mut events = vec![first];
                while let Ok(msg) = rx.try_recv() {
                    events.push(msg);
                }
                Ok(events)
            }
            ends = ended => ends.map_err(InboxError::Exits),
        }
    }
}

/// The workers' ends reported by the set, waiting for at least one.
async fn ended(fd: &AsyncFd<Arc<Exits>>) -> std::io::Result<Vec<event::Event>> {
    loop {
        let mut ready = fd.readable().await?;
        match ready.get_inner().take() {
            Ok((ends, drained)) => {
                // A read that did not fill its buffer took every end there was: the next
                // makes the set readable again.
                if drained {
                    ready.clear_ready();
                }
                if !ends.is_empty() {
                    return Ok(ends);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => ready.clear_ready(),
            Err(e) => return Err(e),
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum InboxError {
    #[error("the loop's event channel closed")]
    Closed,
    #[error("the set of the workers' pidfds failed: {0}")]
    Exits(std::io::Error),
}

/// Threads of the blocking pool (tracker and git calls, the boot suite, the belt); the
/// loop itself is one thread, so the supervisor runs at most this many plus one.
const BLOCKING_THREADS: usize = 4;

/// How long an idle blocking thread waits for more work before it ends: two ticks, so a
/// quiet fleet's tick (its queue check and stall reads) finds one waiting instead of making
/// a thread and ending it again every tick (tokio's default is 10 s, under the 15 s tick).
fn blocking_keep_alive(tick_s: u64) -> std::time::Duration {
    std::time::Duration::from_secs(tick_s.saturating_mul(2).max(30))
}

/// The loop's runtime: one thread for the loop, and a pool for what blocks, whose threads
/// leave the loop's signals to the loop's thread.
fn runtime(tick_s: u64) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_keep_alive(blocking_keep_alive(tick_s))
        .thread_name("afk-blocking")
        .on_thread_start(crate::process::leave_loop_signals_to_the_loop)
        .build()
}

/// Runs the fleet until it is stopped; returns the exit code.
///
/// One thread runs the event loop (a current-thread tokio runtime): each worker's end
/// arrives through its pidfd, signals through one signalfd, tracker results from the
/// blocking pool as [`event::Event`]s, and every deadline (tick, probe, group kill) from one timer.
pub fn run(
    layout: &Layout,
    config: Config,
    open_tracker: TrackerOpener,
) -> Result<RunEnd, RunError> {
    let argv = worker_argv(&config, layout)?;
    // Before any thread of the runtime exists, so every one inherits the block: the loop's
    // signals are read from a descriptor, and a thread that did not block one would take
    // its default action instead (see `process::LoopSignalFd`).
    process::leave_loop_signals_to_the_loop();
    if let Some((from, to)) = crate::process::raise_open_files_limit() {
        tracing::debug!(
            from,
            to,
            "open-files limit raised (workers keep the one inherited)"
        );
    }
    let rt = runtime(config.timing.tick_s).map_err(RunError::EventLoop)?;
    let code = rt.block_on(run_fleet(layout, config, argv, open_tracker));
    // A boot suite abandoned by a stop signal keeps running its git and gh calls to their
    // own timeouts; the process does not wait for them.
    rt.shutdown_background();
    code
}

async fn run_fleet(
    layout: &Layout,
    config: Config,
    argv: Vec<String>,
    open_tracker: TrackerOpener,
) -> Result<RunEnd, RunError> {
    // Signals are blocked (and read from their descriptor) before anything is written, so
    // none can end the process between the pid file and its removal.
    let mut signals = Signals::new(Descriptor::install().map_err(RunError::Signals)?);
    let (tx, rx) = unbounded_channel::<event::Event>();
    let (lock, notes) = SupervisorLock::acquire(layout)?;
    // Without its event log, or with no way to write its heartbeat (a directory where
    // `state.toon` or its `.tmp` goes), the supervisor cannot run: one line, exit 1, and
    // the lock is released before anything is spawned.
    let rotation = Rotation {
        max_bytes: config.log.max_bytes,
        keep: config.log.keep,
    };
    let journal = Journal::open(&layout.event_log(), true)
        .map(|j| j.rotating(rotation))
        .map_err(RunError::from)
        .and_then(|j| {
            crate::fsutil::check_replaceable(&layout.state_file())?;
            Ok(j)
        });
    // From here every early return drops `lock`, which removes the pid files.
    let mut journal = journal?;
    // The notifier (`[[notify]]`) is placed on the log before this run's first record, so
    // it reads all of them, and it is dropped before the lock: its last sends (at most
    // `notify::deliver::DRAIN`) happen while no successor can start one of its own.
    let (notify_out, notify_line) = match crate::notify::start(layout, &config) {
        Some((handle, line)) => (handle, Some(line)),
        None => (None, None),
    };
    if let Err(e) = spawn::become_subreaper() {
        journal.write(Record::now(
            Kind::SupervisorError,
            format!("cannot become child subreaper ({e}); orphaned grandchildren go to init"),
        ));
    }
    journal.write(
        Record::now(
            Kind::SupervisorStart,
            format!(
                "supervisor started: target={} tick={}s worker={:?}",
                config.fleet.workers, config.timing.tick_s, argv
            ),
        )
        .pid(lock.pid),
    );
    for n in notes {
        journal.write(Record::now(n.kind(), n.text()));
    }
    if let Some(line) = notify_line {
        journal.write(line);
    }
    // This checkout joins the user's list of fleets (`afk-supervisor list`).
    if let Err(e) = crate::fleets::path().and_then(|f| crate::fleets::record(&f, layout.repo())) {
        journal.write(Record::now(
            Kind::SupervisorError,
            format!("list of fleets: {e}"),
        ));
    }
    // The bootstrap every worker also runs: `.red/state/` and the `.gitignore` lines.
    match crate::bootstrap::ensure(layout) {
        Ok(g) => {
            if let Some(note) = g.note() {
                journal.write(Record::now(Kind::SupervisorHousekeeping, note));
            }
        }
        Err(e) => journal.write(Record::now(Kind::SupervisorError, e.to_string())),
    }

    let tracker = match open_tracker(&config, layout) {
        Ok((t, reason)) => {
            journal.write(Record::now(Kind::SupervisorTracker, reason));
            Ok(t)
        }
        Err(e) => {
            journal.write(Record::now(
                Kind::TrackerError,
                format!("tracker unavailable: {e}"),
            ));
            Err(e)
        }
    };

    // `[cluster]`: the host's lease, kept from here to the end (`docs/SPEC.md` §11.23);
    // granted before the boot sweeps so the first workers find it.
    let _keeper = crate::cluster::active().map(|c| LeaseKeeper::start(c, layout, &tx));

    // Boot suite: exactly once in this supervisor's life, before anything is spawned. The
    // isolation is entered on this thread while the suite runs on the pool: in cgroup mode
    // moving this process into its leaf waits out an RCU grace period (about 10 ms), which
    // the suite's git calls now hide instead of adding to the start. Its controllers are
    // enabled after the suite (`Entering::settle`): the suite's calls forked before the
    // move stay in the cgroup the supervisor started in, which the kernel will not enable
    // a controller in while they run.
    let boot_began = Instant::now();
    let (boot, (entered, leaders, logs)) =
        run_boot(layout, &config, tracker.as_ref().ok(), &mut signals, || {
            beside_boot(&config, layout)
        })
        .await;
    let (boot, holds, labels) = match boot {
        BootWait::Done(done) => *done,
        BootWait::Signalled(code) => {
            let grace = std::time::Duration::from_secs(config.timing.stop_grace_s);
            let left = end_left_workers(layout, grace, leaders, &mut journal).await;
            forget_isolation(entered, &mut journal);
            let mut notifier = Notifier::from_env();
            notifier.stopping();
            notifier.finish();
            journal.write(Record::now(
                Kind::SupervisorStop,
                "stopped by signal during the boot sweeps",
            ));
            if !left.is_empty() {
                let msg = format!("stop: giving up on processes that would not die: {left:?}");
                let _ = writeln!(std::io::stderr(), "afk-supervisor: {msg}");
                journal.write(Record::now(Kind::SupervisorError, msg));
                return Ok(RunEnd::Stopped(exit_code::FAILED));
            }
            return Ok(RunEnd::Stopped(code));
        }
    };
    match labels {
        Some(Ok(made)) if !made.is_empty() => journal.write(Record::now(
            Kind::SupervisorHousekeeping,
            format!("tracker labels created: {}", made.join(", ")),
        )),
        // Not fatal: a write of a missing label fails and is retried as any tracker error.
        Some(Err(e)) => journal.write(Record::now(
            Kind::TrackerError,
            format!("tracker labels: cannot list or create them: {e}"),
        )),
        _ => {}
    }
    journal.write(Record::now(Kind::SupervisorBootSweep, boot.log_message()));
    for r in &boot.report.rescued {
        journal.write(r.event());
    }
    if boot.end.is_err() {
        // What the halted or failing sweeps decided, with their causes (e.g. the git or
        // gh error behind `landing-failed`), so the log alone explains the outcome.
        for d in boot
            .report
            .decisions
            .iter()
            .filter(|d| d.verdict != Disposition::Keep)
        {
            journal.write(Record::now(Kind::SupervisorBootSweepDetail, d.line()));
        }
    } else {
        // The issues no worker will take, by number, once per supervisor: from the suite's
        // one listing, so the warning costs no tracker call of its own.
        for d in boot
            .report
            .decisions
            .iter()
            .filter(|d| d.sweep == SweepName::Stragglers && d.verdict == Disposition::Warn)
        {
            journal.write(Record::now(Kind::SupervisorStragglers, d.reason.clone()));
        }
    }
    if boot.is_halted() {
        forget_isolation(entered, &mut journal);
        return Ok(RunEnd::BootHalted);
    }

    let (isolation, notes) = match entered {
        Ok(x) => x.settle(&config),
        Err(e) => {
            journal.write(Record::now(Kind::SupervisorError, e.to_string()));
            return Err(e.into());
        }
    };
    for n in notes {
        journal.write(Record::now(Kind::SupervisorIsolation, n));
    }
    if config.worker.command.is_none() {
        // Which sandbox the built-in worker's agents get, and why (`docs/SPEC.md` §11.19);
        // a worker that cannot have it exits 78 before any claim.
        let from = config
            .file
            .as_ref()
            .map_or("the default".to_string(), |f| f.display().to_string());
        let line = match crate::sandbox::probe(
            config.agent.sandbox,
            std::env::var_os("PATH").as_deref(),
            config.agent.network,
            &from,
        ) {
            Ok(in_force) => in_force.describe(&from),
            Err(e) => e.to_string(),
        };
        journal.write(Record::now(Kind::SupervisorIsolation, line));
    }
    let (mut adoptees, dead, had_state, recorded) = takeover_candidates(layout, &mut journal);
    if let Some(cg) = isolation.cgroups() {
        let t = crate::supervisor::os::isolation::adopt_by_cgroups(cg, &mut adoptees, &recorded);
        for n in t.notes {
            journal.write(Record::now(Kind::SupervisorTakeover, n));
        }
        adoptees.extend(t.found);
    }
    let mut unrecorded = unrecorded_workers(leaders, &adoptees);
    if let Some(cg) = isolation.cgroups() {
        // What the attempt cgroups hold was judged above: adopted, or a dead attempt's
        // leftovers being killed (not yet gone, and never a worker).
        let held: Vec<i32> = cg.attempts().iter().flat_map(|(_, c)| c.procs()).collect();
        unrecorded.retain(|a| !held.contains(&a.pid));
    }
    if !unrecorded.is_empty() {
        let pids: Vec<i32> = unrecorded.iter().map(|a| a.pid).collect();
        journal.write(Record::now(
            Kind::SupervisorTakeover,
            format!(
                "found {} live workers not recorded in state.toon: {pids:?}; adopting them",
                pids.len()
            ),
        ));
    }
    let had_state = had_state || !unrecorded.is_empty();
    adoptees.extend(unrecorded);
    let mut inbox = Inbox::new(rx);
    let mut children = Os::new(tx.clone()).with_slot_logs(logs);
    if let Some(exits) = inbox.exits() {
        children = children.with_exits(exits);
    }
    if let Some(cg) = isolation.cgroups() {
        children = children.with_cgroups(cg.clone());
    }
    let evented = crate::supervisor::os::children::Children::watches_cgroups(&children);
    let mut fleet = Fleet::new(
        layout.clone(),
        &config,
        argv,
        (lock.pid, lock.start),
        process::pidfd_groups(),
        event::Now::system(Instant::now()),
    );
    fleet.set_isolation(isolation.describe(), isolation.cgroups().is_some(), evented);
    fleet.set_tracker(tracker.clone());
    fleet.set_boot_suite(boot.shown(boot_began.elapsed()));
    let mut driver = Driver::new(
        layout.clone(),
        &config,
        journal,
        Box::new(children),
        tx.clone(),
        tracker.clone().map_err(event::TrackerUnavailable::from),
    );
    // The start-up's records are held as a turn's are: 64 spawns cost a few writes to the
    // log and the echo, not two each, while the workers already started want the CPU.
    driver.hold_log(true);
    // The holds in force before the first spawn: a pause or an agent's hold written while
    // no fleet ran holds this start (`pause` says so), where the first queue check would
    // only have stopped the respawns after every slot had started once.
    for e in holds.events {
        driver.feed(&mut fleet, e, Instant::now());
    }
    driver.start(&mut fleet, adoptees, dead, had_state, Instant::now());
    driver.flush_log();
    let mut notifier = Notifier::from_env();
    let live = fleet.snapshot(Instant::now()).slot_pids.len();
    notifier.ready(&format!(
        "started: target={} live={live}",
        config.fleet.workers
    ));
    let mut periodic = match &tracker {
        Ok(t) => periodic_tasks(&config, layout, t),
        Err(_) => Vec::new(),
    };
    periodic.extend(housekeeping_tasks(&config, layout));

    let code = event_loop(
        &mut fleet,
        &mut driver,
        &mut inbox,
        &mut signals,
        &mut notifier,
        &mut periodic,
        &tx,
    )
    .await;
    driver.hold_log(false);
    notifier.finish();
    driver.reap_zombies(&mut fleet, Instant::now());
    driver.write_state(&mut fleet, Instant::now());
    if let Some(cg) = isolation.cgroups()
        && let Err(e) = cg.teardown()
    {
        driver.log(Record::now(
            Kind::SupervisorError,
            format!("fleet cgroups left: {e}"),
        ));
    }
    driver.log(
        Record::now(Kind::SupervisorStop, format!("fleet stopped (exit {code})")).pid(lock.pid),
    );
    // The slot logs made for spawns that never came are taken back while the lock is still
    // held: a successor never finds one it could mistake for its own.
    drop(driver);
    // What the last records mean is sent (or kept for the next start) before the lock goes.
    drop(notify_out);
    // The pid files and the stop request go with the lock, here and on every early return.
    drop(lock);
    Ok(RunEnd::Stopped(code))
}

/// The loop: each arm only turns its source into an [`event::Event`] the driver feeds the fleet,
/// which decides. After every turn what is due runs and the heartbeat is written if
/// anything changed (at most one write per turn). With nothing running and nothing due it
/// sleeps in the kernel.
async fn event_loop(
    fleet: &mut Fleet,
    driver: &mut Driver,
    inbox: &mut Inbox,
    signals: &mut Signals<Descriptor>,
    notifier: &mut Notifier,
    periodic: &mut [Periodic],
    tx: &UnboundedSender<event::Event>,
) -> i32 {
    let mut due: Vec<Instant> = periodic
        .iter()
        .map(|p| match p.at_start {
            true => Instant::now(),
            false => timeutil::deadline(Instant::now(), p.interval),
        })
        .collect();
    let running: Vec<Arc<AtomicBool>> = periodic
        .iter()
        .map(|_| Arc::new(AtomicBool::new(false)))
        .collect();
    loop {
        // What the last turn logged is written before the loop may sleep.
        driver.flush_log();
        let now = Instant::now();
        let mut deadline = driver.next_deadline(fleet, now);
        if fleet.stopping().is_none() {
            for d in &due {
                deadline = deadline.min(*d);
            }
        }
        tokio::select! {
            arrived = inbox.next() => match arrived {
                Ok(events) => {
                    for e in events {
                        driver.feed(fleet, e, Instant::now());
                    }
                }
                Err(e) => {
                    // Workers' ends would go unheard, or (every sender lives in this
                    // process) the channel closed, which cannot happen while we loop.
                    let _ = writeln!(std::io::stderr(), "afk-supervisor: {e}");
                    driver.log(Record::now(Kind::SupervisorError, e.to_string()));
                    return exit_code::FAILED;
                }
            },
            sig = signals.next() => match sig.map(heard) {
                Ok(Some(Heard::Control)) => driver.control(fleet, Instant::now()),
                Ok(Some(h)) => {
                    if let Some(e) = h.event() {
                        driver.feed(fleet, e, Instant::now());
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    // No signal can reach the loop any more: no stop would be obeyed.
                    let msg = format!("the signal descriptor failed: {e}");
                    let _ = writeln!(std::io::stderr(), "afk-supervisor: {msg}");
                    driver.log(Record::now(Kind::SupervisorError, msg));
                    return exit_code::FAILED;
                }
            },
            _ = notifier.watchdog_due() => notifier.watchdog(),
            _ = tokio::time::sleep_until(deadline.into()) => {}
        }
        let now = Instant::now();
        driver.turn(fleet, now);
        if fleet.stopping().is_none() {
            for (i, p) in periodic.iter_mut().enumerate() {
                if now >= due[i] {
                    due[i] = timeutil::deadline(now, p.interval);
                    start_periodic(p, &running[i], tx);
                }
            }
        }
        driver.heartbeat_if_changed(fleet, Instant::now());
        if let Some(line) = fleet.take_tick_line() {
            // The tick's record is in the event log before the service manager hears of it.
            driver.flush_log();
            notifier.status(&line);
        }
        if let Some(stop) = fleet.stopping() {
            notifier.stopping();
            if driver.stop_complete(fleet, Instant::now()) {
                return stop.code;
            }
            if Instant::now() >= stop.give_up_at {
                // Exiting as if the stop succeeded would let a service manager believe the
                // fleet is gone while these still run.
                let left = driver.leftovers(fleet);
                let msg = format!("stop: giving up on processes that would not die: {left:?}");
                let _ = writeln!(std::io::stderr(), "afk-supervisor: {msg}");
                driver.log(Record::now(Kind::SupervisorError, msg));
                return exit_code::FAILED;
            }
        }
    }
}

/// The labels the tracker lacked and the boot created, or why it could not.
type LabelsMade = Result<Vec<String>, crate::tracker::TrackerError>;

enum BootWait {
    /// The suite's run, the holds read after it on its thread, and the fleet's labels made
    /// sure of before it (`None` without a tracker; boxed: the enum lives once, and its
    /// other variant is a number).
    Done(Box<(SuiteRun, HoldsRead, Option<LabelsMade>)>),
    Signalled(i32),
}

/// What a boot that ends the supervisor does with the isolation entered beside it: the
/// fleet's cgroups are taken down as a stop takes them down. A `git` call of a suite
/// abandoned to a stop signal, still running in the supervisor's leaf, keeps that leaf:
/// the log says what is left, as a stop's does.
fn forget_isolation(entered: Result<Entering, CgroupRequired>, journal: &mut Journal) {
    if let Ok(entered) = entered
        && let Err(e) = entered.abandon()
    {
        journal.write(Record::now(
            Kind::SupervisorError,
            format!("fleet cgroups left: {e}"),
        ));
    }
}

/// Runs the suite on the blocking pool so a stop signal during a long sweep is obeyed at
/// once (nothing has been spawned yet; what a killed supervisor left is ended by the caller,
/// [`end_left_workers`]), then, on the same
/// thread, reads the holds the start must obey before its first spawn ([`read_holds`]):
/// after the suite, so a rate limit one of its tracker calls met is among them, and on its
/// thread, so the start asks the pool for no second one.
///
/// `meanwhile` runs on this thread while the suite runs: what else the start needs that
/// does not wait on the suite.
async fn run_boot<T>(
    layout: &Layout,
    config: &Config,
    tracker: Option<&Arc<dyn Tracker>>,
    signals: &mut Signals<Descriptor>,
    meanwhile: impl FnOnce() -> T,
) -> (BootWait, T) {
    let tracker = tracker.cloned();
    let (layout2, config2) = (layout.clone(), config.clone());
    let began = Instant::now();
    // Progress of a boot that may take minutes: a line per sweep start and end for the
    // operator, and the same in systemd's STATUS= while the unit is still starting.
    let mut notifier = Notifier::from_env();
    let suite = tokio::task::spawn_blocking(move || {
        // GitHub refuses to add a label the repository does not have: the fleet's are
        // created before anything writes one (`docs/SPEC.md` §7).
        let labels = tracker
            .as_ref()
            .map(|t| t.ensure_labels(crate::tracker::labels::FLEET));
        let run = match tracker {
            Some(tracker) => {
                let git = Git::new(layout2.repo());
                let ctx = SweepCtx::new(&layout2, &config2, tracker.as_ref(), &git, false);
                let only = boot_sweeps(&layout2);
                suite::run_suite_with(&ctx, &only, &mut |p| {
                    let line = p.line();
                    crate::supervisor::journal::echo_line(&line);
                    notifier.status(&line);
                })
            }
            None => SuiteRun::precheck_failed("tracker unavailable"),
        };
        notifier.finish();
        (
            run,
            read_holds(&layout2, &config2.budget, config2.timing.tick_s),
            labels,
        )
    });
    let beside = meanwhile();
    tracing::info!(
        elapsed_us = began.elapsed().as_micros() as u64,
        "work beside the boot suite finished"
    );
    let wait = tokio::select! {
        r = suite => match r {
            Ok((r, holds, labels)) => {
                tracing::info!(elapsed_us = began.elapsed().as_micros() as u64, "boot suite finished");
                BootWait::Done(Box::new((r, holds, labels)))
            }
            // The holds go unread: the first queue check reads them.
            Err(e) => BootWait::Done(Box::new((
                SuiteRun::failed(format!("the boot suite did not finish: {e}")),
                HoldsRead::default(),
                None,
            ))),
        },
        code = signals.stop() => BootWait::Signalled(code),
    };
    (wait, beside)
}

/// What the start does while the boot suite runs, none of which waits on the suite or
/// changes what it sees: entering the isolation; reading the host's process table for
/// workers a killed supervisor left unrecorded (no sweep starts or ends a process); and
/// opening the first spawns' slot logs. The entering mostly sleeps (a cgroup move waits
/// out an RCU grace period), so the other two run on a thread of their own that ends with
/// this call: on this box the three take about as long as the suite's `git` calls.
fn beside_boot(
    config: &Config,
    layout: &Layout,
) -> (
    Result<Entering, CgroupRequired>,
    Vec<process::FleetMember>,
    SlotLogs,
) {
    let prepare = || {
        (
            process::fleet_leaders(&layout.supervisor_lane()),
            SlotLogs::open(layout, config.fleet.workers),
        )
    };
    std::thread::scope(|scope| {
        let prepared = std::thread::Builder::new()
            .name("afk-boot-beside".into())
            .spawn_scoped(scope, prepare);
        let entered = crate::supervisor::os::isolation::enter(config, layout);
        let (leaders, logs) = match prepared.map(|t| t.join()) {
            Ok(Ok(done)) => done,
            // No thread to be had: the same work, here.
            Err(_) => prepare(),
            // It died: the process table is read again (the adoption must not miss a
            // worker), and the first spawns open their logs themselves.
            Ok(Err(_)) => (
                process::fleet_leaders(&layout.supervisor_lane()),
                SlotLogs::default(),
            ),
        };
        (entered, leaders, logs)
    })
}

/// This host's status as `status --fleet` shows it (`docs/SPEC.md` §11.23): from the
/// heartbeat (`state.toon`), its slots with their state, worker and issue.
fn host_status(state: &std::path::Path, repo: &str, host: &str, leader: bool) -> Option<String> {
    let s = state_file::read(state).ok().flatten();
    let slots: Vec<serde_json::Value> = s
        .as_ref()
        .map(|s| {
            s.slot_detail
                .iter()
                .map(|d| {
                    serde_json::json!({
                        "slot": d.slot, "state": d.state.as_str(), "pid": d.pid, "issue": d.issue
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let value = serde_json::json!({
        "host": host,
        "repo": repo,
        "pid": std::process::id(),
        "leader": leader,
        "target": s.as_ref().map(|s| s.target),
        "slots": slots,
        "epoch": timeutil::now_epoch(),
    });
    Some(value.to_string())
}

/// The boot sweeps this host runs: all of them, but on a cluster (`docs/SPEC.md` §11.23) a
/// host that does not lead the fleet runs only its own checkout's (orphan cleanup, the
/// attempt cap, the stragglers' warning): the repo-wide ones (the branch reaper, the docs
/// sweep, the unblock sweep) are the leader's. The keeper's first lease and campaign are
/// waited for, at most a lease's length (etcd down: this host's own sweeps only).
fn boot_sweeps(layout: &Layout) -> Vec<SweepName> {
    let Some(c) = crate::cluster::active() else {
        return SweepName::ALL.to_vec();
    };
    let lane = layout.supervisor_lane();
    let until = Instant::now() + std::time::Duration::from_secs(c.lease_s);
    while Instant::now() < until && !crate::cluster::lease::read(&lane).is_some_and(|r| r.live()) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    if crate::cluster::lease::leads(&lane) {
        return SweepName::ALL.to_vec();
    }
    vec![
        SweepName::Orphans,
        SweepName::AttemptCap,
        SweepName::Stragglers,
    ]
}

/// The thread that keeps the host's cluster lease ([`crate::cluster::keeper`]); dropped
/// when the supervisor ends, which revokes the lease once its workers are gone.
struct LeaseKeeper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LeaseKeeper {
    fn start(
        cluster: &'static crate::cluster::Cluster,
        layout: &Layout,
        tx: &UnboundedSender<event::Event>,
    ) -> LeaseKeeper {
        let stop = Arc::new(AtomicBool::new(false));
        let (lane, host) = (
            layout.supervisor_lane(),
            crate::claim::tracked::this_host(layout),
        );
        let (flag, tx) = (Arc::clone(&stop), tx.clone());
        let (state, repo, me) = (
            layout.state_file(),
            layout.repo().display().to_string(),
            host.clone(),
        );
        let status = move |leader: bool| host_status(&state, &repo, &me, leader);
        let thread = std::thread::Builder::new()
            .name("afk-cluster-lease".into())
            .spawn(move || {
                let report = |note: crate::cluster::keeper::Note| {
                    let _ = tx.send(event::Event::Log(Record::now(
                        Kind::ClusterLease,
                        note.line(),
                    )));
                };
                crate::cluster::keeper::run(cluster, lane, host, flag, report, status)
            })
            .ok();
        LeaseKeeper { stop, thread }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked_here() -> Vec<nix::sys::signal::Signal> {
        let mask = nix::sys::signal::SigSet::thread_get_mask().unwrap();
        crate::process::LOOP_SIGNALS
            .into_iter()
            .filter(|s| mask.contains(*s))
            .collect()
    }

    /// A signal for the process goes to a thread that does not block it: the pool's
    /// threads block the loop's, so only the loop's thread is woken by them.
    #[test]
    fn the_blocking_pool_leaves_the_loop_signals_to_the_loop_thread() {
        let rt = runtime(15).unwrap();
        let on_loop = std::thread::spawn(blocked_here).join().unwrap();
        assert!(on_loop.is_empty(), "a new thread starts with none blocked");
        let in_pool = rt
            .block_on(async { tokio::task::spawn_blocking(blocked_here).await })
            .unwrap();
        assert_eq!(in_pool, crate::process::LOOP_SIGNALS.to_vec());
    }
}
