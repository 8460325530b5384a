//! `afk-supervisor logs [--follow] [--slot I [--worker-output]] [--kind K] [--since W]
//! [--until W] [-n N] [--all] [--json]`. Ticks are left out unless asked for: one a tick,
//! they would drown everything else.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::event_log::Kind;
use crate::event_log::tail::{Filter, Tail};
use crate::exit_code;
use crate::slot_log_view::{self, LogsError, SlotLogFollower};

/// Between two looks at a followed file (a CLI command, not the supervisor's loop).
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Args)]
pub struct LogsArgs {
    /// Keep reading as the log grows (and across its rotation) until interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only the records of this slot.
    #[arg(long, value_name = "I")]
    pub slot: Option<usize>,
    /// With --slot: that slot's worker output (its newest slot log) instead of the events;
    /// with --follow it moves on to a newer day's log of the slot when one appears.
    #[arg(long, requires = "slot")]
    pub worker_output: bool,
    /// Only this kind, or every kind under a dotted prefix (`slot`, `circuit`); an unknown
    /// one is a usage error that lists the kinds.
    #[arg(long, value_name = "K")]
    pub kind: Option<String>,
    /// Only records newer than this: a time ago (90s, 15m, 2h, 1d) or an RFC 3339 time.
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// One JSON object per line (for jq).
    #[arg(long, conflicts_with = "worker_output")]
    pub json: bool,
    /// Only records at or before this: a time ago (90s, 15m, 2h, 1d) or an RFC 3339 time.
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// Only the last N records that match (then, with --follow, everything new).
    #[arg(long, short = 'n', visible_alias = "tail", value_name = "N")]
    pub lines: Option<usize>,
    /// Show supervisor.tick records too (hidden unless --kind supervisor.tick).
    #[arg(long)]
    pub all: bool,
}

/// `--since`/`--until`: an RFC 3339 time, or that long before now.
fn when(s: &str) -> Result<SystemTime, Failure> {
    if let Some(t) = crate::timeutil::parse_rfc3339(s.trim()) {
        return Ok(t);
    }
    Ok(SystemTime::now() - slot_log_view::parse_duration(s).map_err(failed)?)
}

/// `--kind` names a known kind or a dotted prefix of some; anything else would print
/// nothing and look like a quiet fleet.
fn check_kind(k: &str) -> Result<(), Failure> {
    if Kind::is_known(k) {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "logs --kind {k:?}: no such kind or prefix (kinds: {})",
        Kind::ALL
            .iter()
            .map(Kind::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

fn failed(e: impl Into<LogsError>) -> Failure {
    let e = e.into();
    match e {
        LogsError::Duration(_) => Failure::of(exit_code::USAGE, &e),
        _ => Failure::of(exit_code::FAILED, &e),
    }
}

/// Writes lines to stdout; a closed pipe (`| head`) ends the command quietly.
fn emit(lines: impl IntoIterator<Item = String>) -> Result<bool, Failure> {
    let mut out = std::io::stdout().lock();
    for l in lines {
        if let Err(e) = writeln!(out, "{l}") {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(false);
            }
            return Err(Failure::about(exit_code::FAILED, "stdout", &e));
        }
    }
    out.flush().map(|()| true).or_else(|e| match e.kind() {
        std::io::ErrorKind::BrokenPipe => Ok(false),
        _ => Err(Failure::about(exit_code::FAILED, "stdout", &e)),
    })
}

fn report_skipped(path: &Path, skipped: &[String]) {
    for s in skipped {
        eprintln!(
            "afk-supervisor: {}: skipped a line that is not a record: {}",
            path.display(),
            crate::text::excerpt(&crate::text::escape(s))
        );
    }
}

pub fn run(ctx: &Ctx, args: &LogsArgs) -> Result<i32, Failure> {
    if args.worker_output {
        return worker_output(ctx, args);
    }
    if let Some(k) = &args.kind {
        check_kind(k)?;
    }
    let filter = Filter {
        slot: args.slot.map(|s| s as u64),
        kind: args.kind.clone(),
        since: args.since.as_deref().map(when).transpose()?,
        until: args.until.as_deref().map(when).transpose()?,
    };
    let hide_ticks = !args.all && args.kind.as_deref() != Some(Kind::SupervisorTick.as_str());
    let shown = |e: &crate::event_log::Record| {
        filter.matches(e) && !(hide_ticks && e.kind == Kind::SupervisorTick)
    };
    let config = ctx.config(Overrides::default())?;
    let log = ctx.layout.event_log();
    // With -n, the last N lines are held back until the history is read, then printed.
    let mut held: Option<VecDeque<String>> = args.lines.map(VecDeque::with_capacity);
    // The rotated generations first, oldest first; then the live log (followed).
    for path in crate::event_log::generations(&log, config.log.keep) {
        let mut tail = Tail::new(&path);
        loop {
            let batch = tail.poll().map_err(failed)?;
            report_skipped(&path, &batch.skipped);
            let lines = batch.events.iter().filter(|e| shown(e)).map(|e| {
                if args.json {
                    serde_json::to_string(e).unwrap_or_default()
                } else {
                    e.human_line()
                }
            });
            let keep_going = match (&mut held, args.lines) {
                (Some(ring), Some(n)) => {
                    for l in lines {
                        if ring.len() == n {
                            ring.pop_front();
                        }
                        if n > 0 {
                            ring.push_back(l);
                        }
                    }
                    true
                }
                _ => emit(lines)?,
            };
            if !keep_going {
                return Ok(exit_code::OK);
            }
            if !(args.follow && path == log) {
                report_skipped(&path, &tail.finish());
                break;
            }
            // Following: the history is read, so what was held back goes out now.
            if let Some(ring) = held.take()
                && !emit(ring)?
            {
                return Ok(exit_code::OK);
            }
            std::thread::sleep(FOLLOW_EVERY);
        }
    }
    if let Some(ring) = held {
        emit(ring)?;
    }
    Ok(exit_code::OK)
}

fn worker_output(ctx: &Ctx, args: &LogsArgs) -> Result<i32, Failure> {
    let slot = args.slot.unwrap_or_default();
    let mut follower = SlotLogFollower::new(&ctx.layout, slot).map_err(failed)?;
    loop {
        let polled = follower.poll().map_err(failed)?;
        let mut lines: Vec<String> = polled
            .lines
            .iter()
            .map(|l| crate::text::escape_bytes(l))
            .collect();
        if !args.follow && !follower.partial().is_empty() {
            lines.push(crate::text::escape_bytes(follower.partial()));
        }
        if let Some(p) = &polled.switched_to {
            // On stderr, so the output stays the worker's alone.
            eprintln!("afk-supervisor: slot {slot}: now following {}", p.display());
        }
        if !emit(lines)? || !args.follow {
            return Ok(exit_code::OK);
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}
