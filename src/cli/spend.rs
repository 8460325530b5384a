//! `afk-supervisor spend [--since DATE] [--by issue|day] [--json]`: what the agent's
//! attempts cost, read from the attempt ledger (`docs/SPEC.md` §11.13), by day in
//! `budget.timezone` or by issue, with the total.

use clap::{Args, ValueEnum};

use crate::budget::{self, By};
use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::exit_code;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ByArg {
    Day,
    Issue,
}

#[derive(Debug, Args)]
pub struct SpendArgs {
    /// Only attempts that ended on or after this day (`yyyy-mm-dd`, in `budget.timezone`).
    #[arg(long)]
    pub since: Option<String>,
    /// One row per day (the default) or per issue.
    #[arg(long, value_enum, default_value = "day")]
    pub by: ByArg,
    /// One JSON object: the rows and the total.
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Ctx, args: &SpendArgs) -> Result<i32, Failure> {
    let config = ctx.config(Overrides::default())?;
    if let Some(s) = &args.since
        && time::Date::parse(s, time::macros::format_description!("[year]-[month]-[day]")).is_err()
    {
        return Err(Failure::usage(format!(
            "--since {}: expected a day as yyyy-mm-dd",
            crate::text::excerpt(s)
        )));
    }
    let (all, errors) = crate::ledger::read_all(&ctx.layout);
    for e in &errors {
        eprintln!("afk-supervisor: skipped an unreadable ledger: {e}");
    }
    let by = match args.by {
        ByArg::Day => By::Day,
        ByArg::Issue => By::Issue,
    };
    let rows = budget::report(&all, args.since.as_deref(), by, config.budget.utc_offset_s);
    let total = budget::total(&rows);
    // Apart from the ledger's spend: what the running attempts of this host hold reserved
    // against the day's budget (`docs/SPEC.md` §11.13).
    let live = budget::reserve::read_live(&ctx.layout.state(), crate::timeutil::now_epoch())
        .unwrap_or_else(|e| {
            eprintln!("afk-supervisor: budget reservations not read: {e}");
            Vec::new()
        });
    let mut reserved = budget::reserve::Reserved::of(&live);
    // On a cluster the day's figure is the fleet's, of which the rows are this host's part.
    let fleet = match budget::fleet_day::for_report(&ctx.layout, &config.budget, &all) {
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            eprintln!("afk-supervisor: the fleet's spend not read: {e}");
            None
        }
        None => None,
    };
    if let Some(f) = &fleet {
        reserved = f.reserved;
    }
    if args.json {
        let mut out = serde_json::json!({
            "by": match by { By::Day => "day", By::Issue => "issue" },
            "timezone": budget::offset_words(config.budget.utc_offset_s),
            "rows": rows,
            "total": total,
            "reserved": reserved.json(),
        });
        if let Some(f) = &fleet {
            out["fleet_today"] = f.json();
        }
        outln!("{out}");
        return Ok(exit_code::OK);
    }
    let head = match by {
        By::Day => "day",
        By::Issue => "issue",
    };
    outln!(
        "{head:<12} {:>10} {:>12} {:>6} {:>8}",
        "usd",
        "tokens",
        "runs",
        "attempts"
    );
    for r in rows.iter().chain(std::iter::once(&total)) {
        outln!(
            "{:<12} {:>10} {:>12} {:>6} {:>8}",
            r.key,
            format!("${:.2}", r.usd),
            r.tokens,
            r.runs,
            r.attempts
        );
    }
    if let Some(f) = &fleet {
        outln!(
            "fleet: {} over {} host{} (the rows are this host's ledger)",
            budget::spend_words(&config.budget, &f.spend),
            f.hosts,
            if f.hosts == 1 { "" } else { "s" }
        );
    }
    if reserved.attempts > 0 {
        outln!(
            "{} (not in the rows until they end)",
            reserved.words(&config.budget)
        );
    }
    // What `runs` counts, said where it differs from the attempts.
    if total.runs < total.attempts {
        outln!(
            "runs: attempts that reported a cost or tokens; {} of {} reported neither              (an agent whose output carries no usage)",
            total.attempts - total.runs,
            total.attempts
        );
    }
    Ok(exit_code::OK)
}
