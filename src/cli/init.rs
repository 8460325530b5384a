//! `afk-supervisor init`: the first config of a checkout, from the documented defaults, and
//! the `.gitignore` lines, so a new user's first run is `init`, `issue new`, `run`.

use clap::Args;

use crate::bootstrap;
use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::TrackerKind;
use crate::config::template::{self, Choices};
use crate::exit_code;

#[derive(Debug, Clone, Args)]
pub struct InitArgs {
    /// The agent's command line, split on whitespace (e.g. "claude -p"); for arguments with
    /// spaces edit [agent] command in the file. Unset: the file says how to set it.
    #[arg(long, value_name = "COMMAND")]
    pub agent: Option<String>,
    /// Number of worker slots written as fleet.workers (default 2).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub workers: Option<u16>,
    /// Overwrite an existing .red/afk-supervisor.toml, and write an --agent that cannot be
    /// run (yet) with a warning instead of refusing it.
    #[arg(long)]
    pub force: bool,
}

pub fn run(ctx: &Ctx, args: &InitArgs) -> Result<i32, Failure> {
    let path = ctx.layout.repo_config();
    let present = std::fs::symlink_metadata(&path).is_ok();
    if present && !args.force {
        return Err(Failure::failed(format!(
            "{}: already exists; `afk-supervisor init --force` overwrites it",
            path.display()
        )));
    }
    let agent = match args.agent.as_deref().map(str::split_whitespace) {
        Some(words) => {
            let argv: Vec<String> = words.map(str::to_string).collect();
            if argv.is_empty() {
                return Err(Failure::usage("init --agent: the command is empty"));
            }
            Some(argv)
        }
        None => None,
    };
    if let Some(program) = agent.as_ref().and_then(|a| a.first()) {
        // As `run` checks it (from the repo, or on PATH), before anything is written: a
        // file naming an agent that cannot run only fails later, at the first `run`.
        let path = std::env::var_os("PATH");
        if let Err(why) = crate::program::find_program(program, path.as_deref(), ctx.layout.repo())
        {
            let msg = format!("init --agent: {program:?}: {why}");
            if !args.force {
                return Err(Failure::config(format!(
                    "{msg}; nothing written (`init --force` writes it anyway)"
                )));
            }
            eprintln!("afk-supervisor: warning: {msg}; `run` refuses it until it can be run");
        }
    }
    let choices = Choices {
        agent,
        tracker: ctx.tracker,
        workers: args.workers.map(usize::from),
    };
    let text = template::render(&choices);
    crate::fsutil::atomic_write(&path, text.as_bytes()).map_err(|e| {
        Failure::about(
            exit_code::FAILED,
            format!("{}: cannot write", path.display()),
            &e,
        )
    })?;
    outln!("wrote {}", path.display());
    match bootstrap::ensure(&ctx.layout) {
        Ok(g) => {
            if let Some(note) = g.note() {
                outln!("{note}");
            }
        }
        Err(e) => eprintln!("afk-supervisor: warning: {e}"),
    }
    if choices.agent.is_none() {
        outln!(
            "no agent yet: set [agent] command in {} (or `afk-supervisor init --force --agent \"PROGRAM ARGS\"`)",
            path.display()
        );
    }
    let workers = choices.workers.unwrap_or(2);
    let new_issue = if choices.tracker == Some(TrackerKind::Gh) {
        "gh issue create --label ready-for-agent --title \"…\" --body \"…\""
    } else {
        "afk-supervisor issue new --title \"…\" --body \"…\"  # labelled ready-for-agent"
    };
    outln!("next:");
    outln!("  afk-supervisor config   # what the fleet will run with, each value's source");
    outln!("  {new_issue}");
    outln!("  afk-supervisor run --workers {workers}   # the fleet, in the foreground");
    Ok(exit_code::OK)
}
