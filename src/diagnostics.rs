//! Diagnostics for developers and operators chasing a problem: `tracing` events, off
//! unless `RUST_LOG` asks for them (e.g. `RUST_LOG=afk_supervisor=debug`), written to stderr
//! by a background writer so a slow terminal never stalls the event loop.
//!
//! They are not the event log: `supervisor.log.toonl` is the record of what the fleet did
//! (a contract other tools read); these say why and how long, for whoever debugs it.
//! `--log-format json` makes them one JSON object per line, for a log collector; the event
//! log stays TOONL whatever the format.

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

/// How diagnostics are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human line per event.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields`, span data).
    Json,
}

/// Installs the subscriber when `RUST_LOG` is set. Keep the guard until the process ends:
/// dropping it flushes what is still queued.
pub fn init(format: LogFormat) -> Option<WorkerGuard> {
    let filter = std::env::var_os("RUST_LOG")?;
    let filter = EnvFilter::try_new(filter.to_string_lossy()).unwrap_or_else(|e| {
        eprintln!("afk-supervisor: RUST_LOG ignored: {e}");
        EnvFilter::new("off")
    });
    // The writer's thread is started before a supervisor's loop exists and must never take
    // one of its signals: the loop reads them from a descriptor, with no handler installed.
    let (writer, guard) = crate::process::with_loop_signals_blocked(|| {
        tracing_appender::non_blocking(std::io::stderr())
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_target(true);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.ok().map(|()| guard)
}
