//! `afk-supervisor run`: start-up in the SPEC order, the event loop, and the stop.
//!
//! Start-up: the lane lock, the pid file, the boot sweep suite exactly once, takeover of a
//! previous supervisor's live workers, then a worker in every empty slot. The loop then
//! waits on one channel fed by the watcher, signal, queue and periodic threads, with a
//! timeout at the next due timer (tick, circuit probe, group kill).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

use super::fleet::{Adoptee, Fleet, Msg};
use super::journal::Journal;
use super::lane::{Lane, LaneError};
use super::spawn;
use super::state_file;
use super::texts::kind;
use crate::boot::{self, SuiteRun};
use crate::config::Config;
use crate::exit::{self, Failure};
use crate::git::Git;
use crate::layout::Layout;
use crate::pidfile;
use crate::sweeps::{SweepCtx, SweepName};
use crate::toonl::Event;
use crate::tracker::{self, LabeledIssue, Tracker, labels};

/// A task the loop runs on its own thread every `interval` (first run one interval after
/// start-up, the boot suite having just done the same work). Its `Ok` text or error is
/// logged as `supervisor.periodic`.
pub struct Periodic {
    pub name: &'static str,
    pub interval: Duration,
    pub task: Box<dyn FnMut() -> Result<String, String> + Send>,
}

/// How the supervisor reaches the tracker (injected so the CLI chooses): the backend and
/// the one-line reason it was chosen.
pub type TrackerOpener =
    Box<dyn FnOnce(&Config, &Layout) -> Result<(Arc<dyn Tracker>, String), String> + Send>;

/// Periodic work beside the fleet. The unblock belt runs here, independent of the boot
/// suite, so a blocker closed by hand while the fleet runs still promotes its dependents
/// (BOOT-SWEEPS.md, *Unblock belt*); its host-wide lock keeps one belt per tracker.
pub fn periodic_tasks(
    config: &Config,
    layout: &Layout,
    tracker: &Arc<dyn Tracker>,
) -> Vec<Periodic> {
    vec![Periodic {
        name: "unblock-belt",
        interval: Duration::from_secs(config.timing.unblock_interval_s),
        task: Box::new(crate::sweeps::unblock::belt::task(
            Arc::clone(tracker),
            layout.repo().display().to_string(),
        )),
    }]
}

/// `worker.command`, else this binary's built-in worker for this repo, config and tracker
/// (`<exe> --repo R [--config F] --tracker K worker --once`).
pub fn worker_argv(config: &Config, layout: &Layout) -> Result<Vec<String>, Failure> {
    if let Some(cmd) = &config.worker.command {
        return Ok(cmd.clone());
    }
    let exe = std::env::current_exe().map_err(|e| {
        Failure::config(format!(
            "worker.command is not set and this binary's path is unknown ({e}); set worker.command"
        ))
    })?;
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

/// Most open `ready-for-agent` issues counted per queue check.
const QUEUE_LIMIT: usize = 1000;

/// Runs the fleet until it is stopped; returns the exit code.
pub fn run(layout: &Layout, config: Config, open_tracker: TrackerOpener) -> Result<i32, Failure> {
    let argv = worker_argv(&config, layout)?;

    // Signals are caught before anything is written, so none can end the process between
    // the pid file and its removal.
    let (tx, rx) = mpsc::channel::<Msg>();
    let signals = listen_for_signals(tx.clone())
        .map_err(|e| Failure::failed(format!("cannot install signal handlers: {e}")))?;
    let (lane, notes) = Lane::acquire(layout).map_err(|e| match e {
        LaneError::Busy { .. } => Failure::failed(e.to_string()),
        LaneError::Io { .. } => Failure::failed(e.to_string()),
    })?;
    // Without its event log, or with no way to write its heartbeat (a directory where
    // `state.toon` or its `.tmp` goes), the supervisor cannot run: one line, exit 1, and
    // the lane is released before anything is spawned.
    let journal = Journal::open(&layout.event_log(), true)
        .map_err(|e| e.to_string())
        .and_then(|j| crate::fsutil::check_replaceable(&layout.state_file()).map(|()| j));
    let mut journal = match journal {
        Ok(j) => j,
        Err(e) => {
            let _ = lane.release();
            return Err(Failure::failed(e));
        }
    };
    if let Err(e) = spawn::become_subreaper() {
        journal.write(Event::now(
            kind::ERROR,
            format!("cannot become child subreaper ({e}); orphaned grandchildren go to init"),
        ));
    }
    journal.write(
        Event::now(
            kind::START,
            format!(
                "supervisor started: target={} tick={}s worker={:?}",
                config.fleet.workers, config.timing.tick_s, argv
            ),
        )
        .pid(lane.pid),
    );
    for n in notes {
        journal.write(Event::now(kind::ERROR, n));
    }

    let tracker = match open_tracker(&config, layout) {
        Ok((t, reason)) => {
            journal.write(Event::now(kind::TRACKER, reason));
            Ok(t)
        }
        Err(e) => {
            journal.write(Event::now(
                kind::TRACKER_ERROR,
                format!("tracker unavailable: {e}"),
            ));
            Err(e)
        }
    };

    // Boot suite: exactly once in this supervisor's life, before anything is spawned.
    let boot = run_boot(layout, &config, tracker.as_ref().ok(), &tx, &rx);
    let boot = match boot {
        BootWait::Done(r) => r,
        BootWait::Signalled(code) => {
            journal.write(Event::now(
                kind::STOP,
                "stopped by signal during the boot sweeps",
            ));
            let _ = lane.release();
            return Ok(code);
        }
    };
    journal.write(Event::now(kind::BOOT_SWEEP, boot.log_message()));
    if boot.end.is_err() {
        // What the halted or failing sweeps decided, with their causes (e.g. the git or
        // gh error behind `landing-failed`), so the log alone explains the outcome.
        for d in boot.report.decisions.iter().filter(|d| d.verdict != "keep") {
            journal.write(Event::now(kind::BOOT_SWEEP_DETAIL, d.line()));
        }
    }
    if boot.is_halted() {
        let _ = lane.release();
        return Ok(exit::BOOT_HALTED);
    }

    let queue_tx = start_queue_thread(
        layout.clone(),
        tracker.as_ref().ok().cloned(),
        tx.clone(),
        tracker.as_ref().err().cloned(),
    );
    let (adoptees, dead, had_state) = takeover_candidates(layout, &mut journal);
    let mut fleet = Fleet::new(
        layout.clone(),
        &config,
        argv,
        (lane.pid, lane.start),
        journal,
        tx.clone(),
        queue_tx,
    );
    fleet.set_tracker(tracker.as_ref().ok().cloned());
    fleet.start(adoptees, dead, had_state);
    if let Ok(t) = &tracker {
        for p in periodic_tasks(&config, layout, t) {
            start_periodic(p, tx.clone());
        }
    }
    fleet.heartbeat(Instant::now());

    let code = event_loop(&mut fleet, &rx);
    signals.close();
    fleet.reap_orphans();
    fleet.heartbeat(Instant::now());
    fleet.log(Event::now(kind::STOP, format!("fleet stopped (exit {code})")).pid(lane.pid));
    if let Err(e) = lane.release() {
        eprintln!("afk-supervisor: removing pid files: {e}");
    }
    Ok(code)
}

fn event_loop(fleet: &mut Fleet, rx: &Receiver<Msg>) -> i32 {
    loop {
        let now = Instant::now();
        let deadline = fleet.next_deadline(now);
        match rx.recv_timeout(deadline.saturating_duration_since(now)) {
            Ok(msg) => {
                handle(fleet, msg);
                while let Ok(msg) = rx.try_recv() {
                    handle(fleet, msg);
                }
                fleet.service(Instant::now());
            }
            Err(RecvTimeoutError::Timeout) => fleet.service(Instant::now()),
            // Every sender lives in this process; all gone cannot happen while we loop.
            Err(RecvTimeoutError::Disconnected) => return exit::FAILED,
        }
        fleet.heartbeat_if_changed(Instant::now());
        if let Some(stop) = fleet.stopping() {
            if fleet.stop_complete(Instant::now()) {
                return stop.code;
            }
            if Instant::now() >= stop.give_up_at {
                // Exiting as if the stop succeeded would let a service manager believe the
                // fleet is gone while these still run.
                let left = fleet.leftovers();
                let msg = format!("stop: giving up on processes that would not die: {left:?}");
                eprintln!("afk-supervisor: {msg}");
                fleet.log(Event::now(kind::ERROR, msg));
                return exit::FAILED;
            }
        }
    }
}

fn handle(fleet: &mut Fleet, msg: Msg) {
    let now = Instant::now();
    match msg {
        Msg::Exited { pid, start, kind } => fleet.on_exit(pid, start, kind, now),
        Msg::Queue(r) => fleet.on_queue(r, now),
        Msg::Log(ev) => fleet.log(ev),
        Msg::Signal(SIGCHLD) => fleet.reap_orphans(),
        Msg::Signal(SIGUSR1) => fleet.apply_resize(now),
        Msg::Signal(sig) => {
            let (code, name) = match sig {
                SIGHUP => (exit::SIGHUP, "SIGHUP"),
                SIGINT => (exit::SIGINT, "SIGINT"),
                _ => (exit::SIGTERM, "SIGTERM"),
            };
            fleet.begin_stop(code, name, now);
        }
        // The suite runs once, before the fleet exists.
        Msg::Boot(_) => {}
    }
}

fn listen_for_signals(tx: Sender<Msg>) -> std::io::Result<signal_hook::iterator::Handle> {
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1])?;
    let handle = signals.handle();
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if tx.send(Msg::Signal(sig)).is_err() {
                    break;
                }
            }
        })?;
    Ok(handle)
}

enum BootWait {
    Done(SuiteRun),
    Signalled(i32),
}

/// Runs the suite on its own thread so a stop signal during a long sweep is obeyed at
/// once (nothing has been spawned yet, so there is nothing else to stop).
fn run_boot(
    layout: &Layout,
    config: &Config,
    tracker: Option<&Arc<dyn Tracker>>,
    tx: &Sender<Msg>,
    rx: &Receiver<Msg>,
) -> BootWait {
    let Some(tracker) = tracker.cloned() else {
        return BootWait::Done(SuiteRun::precheck_failed("tracker unavailable"));
    };
    let (layout2, config2, tx2) = (layout.clone(), config.clone(), tx.clone());
    let spawned = thread::Builder::new().name("boot".into()).spawn(move || {
        let git = Git::new(layout2.repo());
        let ctx = SweepCtx {
            layout: &layout2,
            config: &config2,
            tracker: tracker.as_ref(),
            git: &git,
            dry_run: false,
        };
        let _ = tx2.send(Msg::Boot(boot::run_suite(&ctx, &SweepName::ALL)));
    });
    if let Err(e) = spawned {
        return BootWait::Done(SuiteRun::failed(format!(
            "cannot start the boot thread: {e}"
        )));
    }
    loop {
        match rx.recv() {
            Ok(Msg::Boot(r)) => return BootWait::Done(r),
            Ok(Msg::Signal(SIGTERM)) => return BootWait::Signalled(exit::SIGTERM),
            Ok(Msg::Signal(SIGINT)) => return BootWait::Signalled(exit::SIGINT),
            Ok(Msg::Signal(SIGHUP)) => return BootWait::Signalled(exit::SIGHUP),
            Ok(_) => {}
            Err(_) => {
                return BootWait::Done(SuiteRun::failed("boot thread vanished"));
            }
        }
    }
}

/// The queue checker: the claimable issues per request, off the loop's thread so a slow
/// tracker never delays noticing a death. "Claimable" is the worker's own filter
/// ([`crate::tracker::is_claimable`], and no claim dir): a count that included issues no
/// worker takes would wake slots whose workers exit 0 at once, forever.
fn start_queue_thread(
    layout: Layout,
    tracker: Option<Arc<dyn Tracker>>,
    tx: Sender<Msg>,
    open_error: Option<String>,
) -> Sender<()> {
    let (req_tx, req_rx) = mpsc::channel::<()>();
    let spawned = thread::Builder::new().name("queue".into()).spawn(move || {
        while req_rx.recv().is_ok() {
            // Coalesce requests that piled up while the last check ran.
            while req_rx.try_recv().is_ok() {}
            let r = match &tracker {
                Some(t) => t
                    .list_open_with_label(labels::READY_FOR_AGENT, QUEUE_LIMIT)
                    .map(|v| claimable(&layout, &v))
                    .map_err(|e| e.to_string()),
                None => Err(format!(
                    "tracker unavailable: {}",
                    open_error.as_deref().unwrap_or("unknown")
                )),
            };
            if tx.send(Msg::Queue(r)).is_err() {
                break;
            }
        }
    });
    if spawned.is_err() {
        // Requests then fail to send; slots keep their state, as with a tracker error.
        let (dead_tx, _) = mpsc::channel();
        return dead_tx;
    }
    req_tx
}

/// The numbers of the issues a worker would try to claim: claimable labels and no claim
/// dir (anything at that path makes the worker's exclusive `mkdir` fail).
pub fn claimable(layout: &Layout, issues: &[LabeledIssue]) -> BTreeSet<u64> {
    let claims = layout.claims();
    issues
        .iter()
        .filter(|i| tracker::is_claimable(&i.labels))
        .filter(|i| std::fs::symlink_metadata(claims.join(i.number.to_string())).is_err())
        .map(|i| i.number)
        .collect()
}

fn start_periodic(mut p: Periodic, tx: Sender<Msg>) {
    let _ = thread::Builder::new()
        .name(format!("periodic-{}", p.name))
        .spawn(move || {
            loop {
                thread::sleep(p.interval);
                let (ok, text) = match (p.task)() {
                    Ok(t) => (true, t),
                    Err(e) => (false, e),
                };
                let msg = if ok {
                    format!("{}: {text}", p.name)
                } else {
                    format!("{} failed: {text}", p.name)
                };
                if tx.send(Msg::Log(Event::now(kind::PERIODIC, msg))).is_err() {
                    break;
                }
            }
        });
}

/// The previous supervisor's workers that are still live (pid and start both match).
/// Returns them, how many recorded workers were dead, and whether there was a state file.
fn takeover_candidates(layout: &Layout, journal: &mut Journal) -> (Vec<Adoptee>, usize, bool) {
    let state = match state_file::read(&layout.state_file()) {
        Ok(Some(s)) => s,
        Ok(None) => return (Vec::new(), 0, false),
        Err(e) => {
            journal.write(Event::now(kind::ERROR, format!("{e}; no worker adopted")));
            return (Vec::new(), 0, false);
        }
    };
    let me = std::process::id() as i32;
    let mut adoptees: Vec<Adoptee> = Vec::new();
    let mut dead = 0;
    for sp in &state.slot_pids {
        let live = sp.pid != me && pidfile::judge_pid(sp.pid, Some(sp.start)).is_live();
        if !live
            || adoptees
                .iter()
                .any(|a| a.slot == sp.slot || a.pid == sp.pid)
        {
            dead += 1;
            continue;
        }
        let detail = state
            .slot_detail
            .iter()
            .find(|d| d.slot == sp.slot && d.pid == Some(sp.pid));
        adoptees.push(Adoptee {
            slot: sp.slot,
            pid: sp.pid,
            start: sp.start,
            worker_id: detail.and_then(|d| d.worker_id.clone()),
            started_epoch: detail.and_then(|d| d.started_epoch),
            restarts: detail.map_or(0, |d| d.restarts),
        });
    }
    (adoptees, dead, !state.slot_pids.is_empty())
}
