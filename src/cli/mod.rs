//! The command line. Parsing and dispatch only: each subcommand's work lives in the
//! library module named for it, and every failure is reported here, once, as one line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::config::{self, Config, Overrides, TrackerKind};
use crate::exit::{self, Failure};
use crate::layout::Layout;

mod issue;
mod logs;
mod reap;
mod run;
mod scale;
mod show_config;
mod status;
mod stop;
mod sweep;
mod systemd;
mod tmux;
mod unblock;
mod worker;

#[derive(Debug, Parser)]
#[command(
    name = "afk-supervisor",
    version,
    about = "Supervise a fleet of AFK coding-agent workers"
)]
pub struct Cli {
    /// The repository to work in (default: the git top-level of the working directory).
    #[arg(long, global = true, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Config file (default: <repo>/.red/afk-supervisor.toml, else built-in defaults).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Issue tracker backend: auto, gh or local.
    #[arg(long, global = true, value_name = "KIND")]
    pub tracker: Option<TrackerKind>,
    /// With no subcommand, `afk-supervisor --workers N` runs the fleet (same as `run`).
    #[command(flatten)]
    pub run: run::RunArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the resolved configuration and where each part came from.
    Config,
    /// Run the fleet in the foreground (the default when no subcommand is given).
    Run(run::RunArgs),
    /// Show the running fleet: one row per slot, then the fleet totals.
    Status(status::StatusArgs),
    /// Change the running fleet's target size.
    Scale(scale::ScaleArgs),
    /// Stop the running fleet and wait until every worker is gone.
    Stop(stop::StopArgs),
    /// Read and change issues on the tracker (`issue new|list|show|label|close|reopen|comment`).
    Issue(issue::IssueArgs),
    /// Run the built-in worker (what each supervisor slot runs by default).
    Worker(worker::WorkerArgs),
    /// Run boot sweeps by hand: `sweep [--only orphans,attempt-cap] [--dry-run] [--json]`.
    Sweep(sweep::SweepArgs),
    /// Delete afk/* branches of closed issues (and merged ones), locally and on origin.
    Reap(reap::ReapArgs),
    /// Promote blocked:dependency issues whose blockers are all closed (once, or --watch).
    Unblock(unblock::UnblockArgs),
    /// Show the event log (`--follow`, `--slot I`, `--kind K`, `--since 15m`, `--json`),
    /// or a slot's worker output (`--slot I --worker-output`).
    Logs(logs::LogsArgs),
    /// Run the fleet in a tmux session: the supervisor, and `status --watch` beside it.
    Tmux(tmux::TmuxArgs),
    /// Install or remove the systemd user unit of this repo's fleet.
    Systemd(systemd::SystemdArgs),
}

/// What every subcommand gets: where the repo is and how to load the config.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub layout: Layout,
    pub config_file: Option<PathBuf>,
    pub tracker: Option<TrackerKind>,
}

impl Ctx {
    /// Loads the config with command-line overrides applied on top; errors are exit 78.
    pub fn config(&self, mut overrides: Overrides) -> Result<Config, Failure> {
        if overrides.tracker.is_none() {
            overrides.tracker = self.tracker;
        }
        config::load(
            self.config_file.as_deref(),
            &self.layout,
            &config::process_env(),
            &overrides,
        )
        .map_err(|e| Failure::config(e.0))
    }
}

/// Runs the program and returns its exit code.
pub fn main<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let _diagnostics = crate::diagnostics::init();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
        }
    };
    match dispatch(cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("afk-supervisor: {}", f.message);
            f.code
        }
    }
}

fn dispatch(cli: Cli) -> Result<i32, Failure> {
    let repo = resolve_repo(cli.repo.as_deref())?;
    let ctx = Ctx {
        layout: Layout::new(repo),
        config_file: cli.config,
        tracker: cli.tracker,
    };
    let top_run_args = cli.run.workers.is_some();
    match cli.command {
        Some(Command::Run(args)) if top_run_args && args.workers.is_none() => {
            run::run(&ctx, &cli.run)
        }
        Some(_) if top_run_args => Err(Failure::usage(
            "--workers belongs to `run` (or to no subcommand at all)",
        )),
        Some(Command::Config) => show_config::run(&ctx),
        Some(Command::Run(args)) => run::run(&ctx, &args),
        Some(Command::Status(args)) => status::run(&ctx, &args),
        Some(Command::Scale(args)) => scale::run(&ctx, &args),
        Some(Command::Stop(args)) => stop::run(&ctx, &args),
        Some(Command::Issue(args)) => issue::run(&ctx, args),
        Some(Command::Worker(args)) => worker::run(&ctx, args),
        Some(Command::Sweep(args)) => sweep::run(&ctx, &args),
        Some(Command::Reap(args)) => reap::run(&ctx, &args),
        Some(Command::Unblock(args)) => unblock::run(&ctx, &args),
        Some(Command::Logs(args)) => logs::run(&ctx, &args),
        Some(Command::Tmux(args)) => tmux::run(&ctx, &args),
        Some(Command::Systemd(args)) => systemd::run(&ctx, &args),
        None => run::run(&ctx, &cli.run),
    }
}

/// `--repo DIR`, else the git top-level of the working directory.
pub fn resolve_repo(explicit: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(dir) = explicit {
        if !dir.is_dir() {
            return Err(Failure::usage(format!(
                "--repo {}: not a directory",
                dir.display()
            )));
        }
        return std::fs::canonicalize(dir)
            .map_err(|e| Failure::usage(format!("--repo {}: {e}", dir.display())));
    }
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .output()
        .map_err(|e| {
            Failure::failed(format!(
                "git rev-parse --show-toplevel: cannot run git: {e}"
            ))
        })?;
    if !out.status.success() {
        return Err(Failure::usage(
            "not inside a git repository: run from a checkout or pass --repo DIR",
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}
