//! `afk-supervisor events [--since CURSOR] [--follow] [--json] [--kind K]`: the event log
//! with a cursor per record (`crate::event_log::stream`, SPEC §11.18).

use std::io::Write;
use std::time::Duration;

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::event_log::stream::{EventStream, Positioned, Start};
use crate::event_log::tail::Filter;
use crate::exit_code;

/// Between two looks at the followed log.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Args)]
pub struct EventsArgs {
    /// Resume after the record this cursor was printed with (each record is exactly once
    /// across restarts and rotations); `start` (the default) is the oldest kept, `end` only
    /// what comes next.
    #[arg(long, value_name = "CURSOR", default_value = "start")]
    pub since: String,
    /// Keep reading as the log grows, across its rotation, until interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// One JSON object per line: `cursor` and the record's fields.
    #[arg(long)]
    pub json: bool,
    /// Only this kind, or every kind under a dotted prefix (`slot`, `fleet`).
    #[arg(long, value_name = "K")]
    pub kind: Option<String>,
}

/// `<cursor> <the record as logs prints it>`, or the JSON object.
pub fn line(p: &Positioned, json: bool) -> String {
    if json {
        let mut v = serde_json::json!({ "cursor": p.cursor });
        if let (Some(o), Ok(serde_json::Value::Object(ev))) =
            (v.as_object_mut(), serde_json::to_value(&p.event))
        {
            o.extend(ev);
        }
        v.to_string()
    } else {
        format!("{} {}", p.cursor, p.event.human_line())
    }
}

pub fn run(ctx: &Ctx, args: &EventsArgs) -> Result<i32, Failure> {
    let start = Start::parse(&args.since).map_err(|e| Failure::of(exit_code::USAGE, &e))?;
    let config = ctx.config(Overrides::default())?;
    let filter = Filter {
        kind: args.kind.clone(),
        ..Filter::default()
    };
    let mut stream = EventStream::new(&ctx.layout.event_log(), config.log.keep, start);
    loop {
        let batch = stream.poll()?;
        for n in &batch.notes {
            eprintln!("afk-supervisor: {n}");
        }
        let mut out = std::io::stdout().lock();
        for p in batch.events.iter().filter(|p| filter.matches(&p.event)) {
            if writeln!(out, "{}", line(p, args.json)).is_err() {
                // A closed pipe (`| head`): the consumer has what it wanted.
                return Ok(exit_code::OK);
            }
        }
        if out.flush().is_err() {
            return Ok(exit_code::OK);
        }
        drop(out);
        if !args.follow {
            return Ok(exit_code::OK);
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}
