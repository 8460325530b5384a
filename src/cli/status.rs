//! `afk-supervisor status [--json] [--watch]`.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::Args;

use crate::cli::Ctx;
use crate::exit::{self, Failure};
use crate::supervisor::control::{self, ControlError};

/// Between two frames of `--watch`.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Home the cursor, draw, clear whatever the previous, longer frame left below.
const REDRAW_HOME: &str = "\x1b[H";
const CLEAR_TO_END: &str = "\x1b[J";
const CLEAR_LINE_END: &str = "\x1b[K";

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Print the stable JSON form (documented in the README).
    #[arg(long)]
    pub json: bool,
    /// Show the status again every second until interrupted (redrawn in place on a
    /// terminal, one plain snapshot after another otherwise). Ctrl-C ends the view only.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
}

pub fn run(ctx: &Ctx, args: &StatusArgs) -> Result<i32, Failure> {
    if args.watch {
        return watch(ctx);
    }
    match control::status(&ctx.layout) {
        Ok(report) => {
            if args.json {
                let text = serde_json::to_string_pretty(&report)
                    .map_err(|e| Failure::failed(format!("cannot encode status: {e}")))?;
                println!("{text}");
            } else {
                print!("{}", control::render_status(&report));
            }
            Ok(exit::OK)
        }
        Err(e @ ControlError::NotRunning(_)) => {
            if args.json {
                println!("{{\"supervisor\": null}}");
            }
            eprintln!("{e}");
            Ok(exit::NOT_RUNNING)
        }
        Err(e) => Err(Failure::failed(e.to_string())),
    }
}

/// One frame: the time, then the table, or why there is none (the view keeps going: a
/// fleet being restarted comes back into it).
fn frame(ctx: &Ctx) -> String {
    let now = crate::timeutil::now_rfc3339_millis();
    let body = match control::status(&ctx.layout) {
        Ok(report) => control::render_status(&report),
        Err(e) => format!("{e}\n"),
    };
    format!(
        "afk-supervisor status  {now}  {}\n{body}",
        ctx.layout.repo().display()
    )
}

fn watch(ctx: &Ctx) -> Result<i32, Failure> {
    let tty = std::io::stdout().is_terminal();
    loop {
        let text = frame(ctx);
        let out = if tty {
            // The table has no colour; NO_COLOR needs nothing turned off.
            let lines: String = text
                .lines()
                .map(|l| format!("{l}{CLEAR_LINE_END}\n"))
                .collect();
            format!("{REDRAW_HOME}{lines}{CLEAR_TO_END}")
        } else {
            format!("{text}\n")
        };
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout
            .write_all(out.as_bytes())
            .and_then(|()| stdout.flush())
        {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(exit::OK);
            }
            return Err(Failure::failed(format!("stdout: {e}")));
        }
        drop(stdout);
        std::thread::sleep(WATCH_EVERY);
    }
}
