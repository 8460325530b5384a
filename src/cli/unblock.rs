//! `afk-supervisor unblock [--dry-run]` runs one unblock pass; `unblock --watch
//! [--interval S]` is the belt on its own: one pass at once, then one per interval, until
//! SIGINT or SIGTERM (exit 130 / 143). Both promote through the shared core in
//! [`crate::sweeps::unblock_sweep`].

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::exit_code;
use crate::host_lock as lock;
use crate::supervisor::unblock_belt::{Belt, BeltPass};
use crate::sweeps::unblock_sweep::{self, Exclusive, UnblockReport};
use crate::timeutil::now_rfc3339_millis;
use crate::tracker::{Tracker, select};

/// Default pause between two `--watch` passes.
pub const DEFAULT_WATCH_INTERVAL_S: u64 = 300;

#[derive(Debug, Clone, clap::Args)]
pub struct UnblockArgs {
    /// Keep sweeping: one pass now, then one every --interval seconds, until stopped.
    #[arg(long, conflicts_with = "dry_run")]
    pub watch: bool,
    /// Seconds between two --watch passes.
    #[arg(long, value_name = "S", requires = "watch",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub interval: Option<u64>,
    /// Say what would be promoted; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(ctx: &Ctx, args: &UnblockArgs) -> Result<i32, Failure> {
    let config = ctx.config(Overrides::default())?;
    let selected = select::open(&config, &ctx.layout).map_err(crate::cli::select_failure)?;
    eprintln!("{}", selected.reason);
    let tracker = selected.tracker.as_ref();
    let label = ctx.layout.repo().display().to_string();
    if args.watch {
        let interval = Duration::from_secs(args.interval.unwrap_or(DEFAULT_WATCH_INTERVAL_S));
        return watch(tracker, &label, interval);
    }
    once(tracker, &label, args.dry_run)
}

fn once(tracker: &dyn Tracker, label: &str, dry_run: bool) -> Result<i32, Failure> {
    let outcome = unblock_sweep::exclusive_pass(tracker, dry_run, &lock::runtime_dir(), label)?;
    match outcome {
        Exclusive::Busy(holder) => {
            outln!("unblock: skipped, another pass is running ({holder})");
            Ok(exit_code::OK)
        }
        Exclusive::Done(r) => {
            print_report(&r, dry_run);
            match r.write_error {
                Some(e) => Err(Failure::of(exit_code::FAILED, &e)),
                None => Ok(exit_code::OK),
            }
        }
    }
}

fn print_report(r: &UnblockReport, dry_run: bool) {
    for line in r.lines(dry_run) {
        outln!("{line}");
    }
    outln!("unblocked={}", r.promoted.len());
}

/// The belt loop. The wait between passes listens for the stop signals, so a stop is
/// honoured at once between passes and right after a pass in flight.
fn watch(tracker: &dyn Tracker, label: &str, interval: Duration) -> Result<i32, Failure> {
    let stop = StopSignals::install()?;
    let mut belt = Belt::new(&tracker.identity()).with_label(label);
    loop {
        if let Some(code) = stop.poll() {
            return Ok(code);
        }
        let pass = belt.pass(tracker);
        let ts = now_rfc3339_millis();
        if let BeltPass::Swept(r) = &pass {
            for line in r.lines(false) {
                outln!("{ts} {line}");
            }
        }
        if pass.is_failure() {
            eprintln!("{ts} {}", pass.log_line());
        } else {
            outln!("{ts} {}", pass.log_line());
        }
        if let Some(code) = stop.wait(interval) {
            return Ok(code);
        }
    }
}

/// SIGINT and SIGTERM delivered as exit codes on a channel, so waits can time out on them.
struct StopSignals {
    rx: mpsc::Receiver<i32>,
}

impl StopSignals {
    fn install() -> Result<Self, Failure> {
        let mut signals = Signals::new([SIGINT, SIGTERM])
            .map_err(|e| Failure::about(exit_code::FAILED, "cannot install signal handlers", &e))?;
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for sig in signals.forever() {
                let code = if sig == SIGINT {
                    exit_code::SIGINT
                } else {
                    exit_code::SIGTERM
                };
                if tx.send(code).is_err() {
                    break;
                }
            }
        });
        Ok(StopSignals { rx })
    }

    fn poll(&self) -> Option<i32> {
        self.rx.try_recv().ok()
    }

    /// Waits up to `d`; the exit code of a stop signal that arrived meanwhile.
    fn wait(&self, d: Duration) -> Option<i32> {
        match self.rx.recv_timeout(d) {
            Ok(code) => Some(code),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            // The listener is gone (it never ends on its own); keep the pace without it.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                thread::sleep(d);
                None
            }
        }
    }
}
