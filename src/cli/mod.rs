//! The command line. Parsing and dispatch only: each subcommand's work lives in the
//! library module named for it, and every failure is reported here, once, as one line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::config::{self, Config, Overrides, TrackerKind};
use crate::exit_code;
use crate::layout::Layout;

#[macro_use]
mod out;

mod demo;
mod events;
mod failure;
mod init;
mod issue;
mod list;
mod logs;
mod mcp;
mod notify;
mod pause;
mod reap;
mod restart;
mod run;
mod scale;
mod shell;
mod show_config;
mod spend;
mod start;
mod status;
mod stop;
mod sweep;
mod systemd;
mod tmux;
mod unblock;
mod worker;

pub use failure::{Failure, chain};

/// `--version`: the package version, the git revision it was built from (`unknown` from a
/// tarball) and the build date, so a bug report names the exact build.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("AFK_GIT_REV"),
    " ",
    env!("AFK_BUILD_DATE"),
    ")"
);

/// `--help`'s footer: the exit codes (`docs/SPEC.md` §9), where scripts look for them, from
/// the one table ([`exit_code::Exit::ALL`]).
pub fn exit_codes_footer() -> String {
    let mut out = String::from("Exit codes:");
    for e in exit_code::Exit::ALL {
        out.push_str(&format!("\n  {:<4} {}", e.code(), e.meaning()));
    }
    out
}

#[derive(Debug, Parser)]
#[command(
    name = "afk-supervisor",
    version = VERSION,
    about = "Supervise a fleet of AFK coding-agent workers",
    after_help = exit_codes_footer()
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
    /// How diagnostics (`RUST_LOG`) are written on stderr: text or json (one object per
    /// line). The event log is TOONL either way.
    #[arg(long, global = true, value_name = "FORMAT", default_value = "text")]
    pub log_format: crate::diagnostics::LogFormat,
    /// With no subcommand, `afk-supervisor --workers N` runs the fleet (same as `run`).
    #[command(flatten)]
    pub run: run::RunArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write .red/afk-supervisor.toml from the documented defaults (--agent, --tracker,
    /// --workers fill in values) and the .gitignore lines; refuses to overwrite without --force.
    Init(init::InitArgs),
    /// Print the resolved configuration and where each part came from.
    Config,
    /// Run the fleet in the foreground (the default when no subcommand is given).
    Run(run::RunArgs),
    /// Run the fleet in the background (setsid, output to the lane's supervisor.out);
    /// returns once the supervisor holds the lane.
    Start(run::RunArgs),
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
    /// A scratch repo, a local tracker with issues, a real fleet and a summary: the first run.
    Demo(demo::DemoArgs),
    /// Show the event log (`--follow`, `--slot I`, `--kind K`, `--since 15m`, `--json`),
    /// or a slot's worker output (`--slot I --worker-output`).
    Logs(logs::LogsArgs),
    /// Run the fleet in a tmux session: the supervisor, and `status --watch` beside it.
    Tmux(tmux::TmuxArgs),
    /// Install or remove the systemd user unit of this repo's fleet.
    Systemd(systemd::SystemdArgs),
    /// What the agent's attempts cost, from the attempt ledger
    /// (`spend [--since DATE] [--by issue|day] [--json]`).
    Spend(spend::SpendArgs),
    /// Print a shell completion script (bash, elvish, fish, powershell, zsh).
    Completions(shell::CompletionsArgs),
    /// Print the man page (roff): `afk-supervisor man | man -l -`.
    Man,
    /// Every fleet of this user on this host: the checkouts supervisors ran in, and which
    /// run now.
    List(list::ListArgs),
    /// Operator pause: no new claims or spawns; workers in flight finish their issue.
    Pause(pause::PauseArgs),
    /// Lift the operator pause.
    Resume,
    /// Restart one slot's worker (a stopped or parked slot starts again).
    Restart(restart::RestartArgs),
    /// The event log with a cursor per record, to resume exactly where a reader stopped.
    Events(events::EventsArgs),
    /// Serve this checkout's fleet over MCP on stdio (read-only unless --allow-writes).
    Mcp(mcp::McpArgs),
    /// The [[notify]] sinks: `notify test [--sink NAME]` sends each a sample message.
    Notify(notify::NotifyArgs),
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
    pub fn config(&self, overrides: Overrides) -> Result<Config, Failure> {
        self.config_with_sources(overrides).map(|(c, _)| c)
    }

    /// [`Ctx::config`], and where each value came from.
    pub fn config_with_sources(
        &self,
        mut overrides: Overrides,
    ) -> Result<(Config, config::Sources), Failure> {
        if overrides.tracker.is_none() {
            overrides.tracker = self.tracker;
        }
        let (c, sources) = config::load_with_sources(
            self.config_file.as_deref(),
            &self.layout,
            &config::process_env(),
            &overrides,
        )?;
        // `[cluster]`: every command that claims, restores or reports does it through etcd
        // (`docs/SPEC.md` §11.23); nothing is called until a command needs it.
        crate::cluster::install_for(&c, &self.layout)?;
        Ok((c, sources))
    }
}

/// Runs the program and returns its exit code.
pub fn main<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // The demo's stand-in agent (`<exe> demo-agent`, which commits `notes/issue-<N>.md` in
    // its worktree) is no command of the CLI: no help, completion or man page offers it.
    if args
        .get(1)
        .is_some_and(|a| a == crate::demo_project::AGENT_COMMAND)
    {
        return finish(demo::agent());
    }
    if args
        .get(1)
        .is_some_and(|a| a == crate::demo_project::CHECK_COMMAND)
    {
        return finish(demo::check());
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit_code::USAGE
            } else {
                exit_code::OK
            };
        }
    };
    let _diagnostics = crate::diagnostics::init(cli.log_format);
    // JSON diagnostics own stderr; the human echo of the event log goes to stdout.
    crate::supervisor::journal::echo_on_stdout(
        cli.log_format == crate::diagnostics::LogFormat::Json,
    );
    finish(dispatch(cli))
}

/// A command's end: its failure said in one line, and stdout finished ([`out::finish`]).
fn finish(end: Result<i32, Failure>) -> i32 {
    let code = match end {
        Ok(code) => code,
        Err(f) => {
            eprintln!("afk-supervisor: {}", f.message);
            f.code
        }
    };
    match out::finish() {
        Err(e) if code == exit_code::OK => {
            eprintln!("afk-supervisor: {e}");
            exit_code::FAILED
        }
        _ => code,
    }
}

fn dispatch(cli: Cli) -> Result<i32, Failure> {
    // The demo makes its own repo; its agent runs in a worktree it is given.
    let command = match cli.command {
        Some(Command::Demo(args)) => return demo::run(&args),
        Some(Command::Completions(args)) => return shell::completions(&args),
        Some(Command::Man) => return shell::man(),
        Some(Command::List(args)) => return list::run(&args),
        other => other,
    };
    let repo = resolve_repo(cli.repo.as_deref())?;
    let ctx = Ctx {
        layout: Layout::new(repo),
        config_file: cli.config,
        tracker: cli.tracker,
    };
    let top_run_args = cli.run.workers.is_some();
    match command {
        Some(Command::Run(args)) if top_run_args && args.workers.is_none() => {
            run::run(&ctx, &cli.run)
        }
        Some(_) if top_run_args => Err(Failure::usage(
            "--workers belongs to `run` (or to no subcommand at all)",
        )),
        Some(Command::Init(args)) => init::run(&ctx, &args),
        Some(Command::Config) => ignoring_red(&ctx, show_config::run(&ctx)),
        Some(Command::Run(args)) => run::run(&ctx, &args),
        Some(Command::Start(args)) => start::run(&ctx, &args),
        Some(Command::Status(args)) => status::run(&ctx, &args),
        Some(Command::Scale(args)) => scale::run(&ctx, &args),
        Some(Command::Stop(args)) => stop::run(&ctx, &args),
        Some(Command::Issue(args)) => {
            let end = issue::run(&ctx, args);
            ignoring_red(&ctx, end)
        }
        Some(Command::Worker(args)) => worker::run(&ctx, args),
        Some(Command::Sweep(args)) => sweep::run(&ctx, &args),
        Some(Command::Reap(args)) => reap::run(&ctx, &args),
        Some(Command::Unblock(args)) => unblock::run(&ctx, &args),
        Some(Command::Demo(_) | Command::Completions(_) | Command::Man | Command::List(_)) => {
            unreachable_demo()
        }
        Some(Command::Logs(args)) => logs::run(&ctx, &args),
        Some(Command::Tmux(args)) => tmux::run(&ctx, &args),
        Some(Command::Systemd(args)) => systemd::run(&ctx, &args),
        Some(Command::Spend(args)) => spend::run(&ctx, &args),
        Some(Command::Pause(args)) => pause::pause(&ctx, &args),
        Some(Command::Resume) => pause::resume(&ctx),
        Some(Command::Restart(args)) => restart::run(&ctx, &args),
        Some(Command::Events(args)) => events::run(&ctx, &args),
        Some(Command::Mcp(args)) => mcp::run(&ctx, &args),
        Some(Command::Notify(args)) => notify::run(&ctx, &args),
        None => run::run(&ctx, &cli.run),
    }
}

/// After a command that may have created `.red/`: its `.gitignore` lines, quietly (stderr
/// stays the backend's one line; the README says these commands add them).
fn ignoring_red(ctx: &Ctx, end: Result<i32, Failure>) -> Result<i32, Failure> {
    let _ = crate::bootstrap::ignore_if_present(&ctx.layout);
    end
}

/// A tracker that could not be chosen: exit 78 when the fix is the operator's
/// configuration (`gh auth login`, `tracker.kind`), else exit 1.
pub fn select_failure(e: crate::tracker::SelectError) -> Failure {
    if e.is_config() {
        Failure::of(exit_code::CONFIG, &e)
    } else {
        Failure::about(exit_code::FAILED, "issue tracker", &e)
    }
}

/// The demo commands were dispatched before the repo was resolved.
fn unreachable_demo() -> Result<i32, Failure> {
    Err(Failure::failed("internal error: demo dispatched twice"))
}

/// `--repo DIR`, else the working directory: either way the git top-level of a work tree.
/// Anything else is a usage error (exit 2) before anything is created, so a mistyped
/// `--repo` never grows a `.red/` in a directory that is not a checkout.
pub fn resolve_repo(explicit: Option<&Path>) -> Result<PathBuf, Failure> {
    let (dir, name) = match explicit {
        Some(dir) => {
            if !dir.is_dir() {
                return Err(Failure::usage(format!(
                    "--repo {}: not a directory",
                    dir.display()
                )));
            }
            (dir.to_path_buf(), format!("--repo {}", dir.display()))
        }
        None => (PathBuf::from("."), "the working directory".to_string()),
    };
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(&dir)
        .args(["rev-parse", "--is-inside-work-tree", "--show-toplevel"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            Failure::about(
                exit_code::FAILED,
                "git rev-parse --show-toplevel: cannot run git",
                &e,
            )
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let inside = lines.next() == Some("true");
    let top = lines.next().map(str::trim).filter(|t| !t.is_empty());
    match (out.status.success() && inside, top) {
        (true, Some(top)) => Ok(PathBuf::from(top)),
        _ if explicit.is_some() => Err(Failure::usage(format!(
            "{name}: not a git work tree; pass a checkout's directory (git init, or git clone)"
        ))),
        _ => Err(Failure::usage(
            "not inside a git repository: run from a checkout or pass --repo DIR",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::state_file::ShrinkMode;
    use clap::CommandFactory;

    /// Issue 52, item 14: `restart` takes `--mode` (a restart shrinks nothing); the old
    /// `--shrink-mode` is still taken, unlisted.
    #[test]
    fn restart_takes_mode_not_shrink_mode() {
        let parse = |flag: &str| {
            Cli::try_parse_from(["afk-supervisor", "restart", "0", flag, "drain-then-retire"]).map(
                |c| match c.command {
                    Some(Command::Restart(a)) => a.mode,
                    other => panic!("{other:?}"),
                },
            )
        };
        assert_eq!(parse("--mode").unwrap(), ShrinkMode::DrainThenRetire);
        assert_eq!(parse("--shrink-mode").unwrap(), ShrinkMode::DrainThenRetire);
        let help = Cli::command()
            .find_subcommand_mut("restart")
            .expect("restart")
            .render_long_help()
            .to_string();
        assert!(help.contains("--mode <MODE>"), "{help}");
        assert!(!help.contains("--shrink-mode"), "{help}");
    }

    /// Every flag and positional of every (sub)command says what it is for, and a flag
    /// with a fixed set of values names them.
    #[test]
    fn every_argument_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                if help.trim().is_empty() {
                    missing.push(format!("{path} {id}: no help"));
                }
                let flag = matches!(
                    arg.get_action(),
                    clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count
                );
                let values: Vec<String> = if flag {
                    Vec::new()
                } else {
                    arg.get_possible_values()
                        .iter()
                        .map(|v| v.get_name().to_string())
                        .collect()
                };
                for v in &values {
                    if !help.contains(v.as_str()) {
                        missing.push(format!("{path} {id}: help does not name {v}"));
                    }
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.is_hide_set() {
                    continue;
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        let cli = Cli::command();
        walk(&cli, "afk-supervisor", &mut missing);
        // Values clap cannot list (parsed with FromStr) are named in the help by hand.
        let scale = cli.find_subcommand("scale").expect("scale");
        let mode = scale
            .get_arguments()
            .find(|a| a.get_id() == "shrink_mode")
            .and_then(|a| a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        for v in ["drain-then-retire", "hard-kill"] {
            if !mode.contains(v) {
                missing.push(format!("scale --shrink-mode: help does not name {v}"));
            }
        }
        assert!(missing.is_empty(), "{missing:#?}");
    }
}
