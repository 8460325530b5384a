//! `afk-supervisor demo` and the `demo-agent` it runs (see `crate::demo_project`), which is
//! dispatched before the command line is parsed (`crate::cli::main`): no command offers it.

use clap::Args;

use crate::cli::Failure;
use crate::demo_project::{self, DemoError, DemoOpts};
use crate::exit_code;

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Worker slots in the demo fleet (1 to 16).
    #[arg(long, value_name = "W", default_value_t = 3)]
    pub workers: usize,
    /// Issues to file (1 to 50); when more than one, the last is blocked by #1.
    #[arg(long, value_name = "N", default_value_t = 6)]
    pub issues: usize,
    /// Build the scratch project here (must be absent or empty) instead of a new temp dir.
    #[arg(long, value_name = "D")]
    pub dir: Option<std::path::PathBuf>,
    /// Keep the scratch project (repo, origin, logs) after a successful run.
    #[arg(long)]
    pub keep: bool,
}

pub fn run(args: &DemoArgs) -> Result<i32, Failure> {
    let exe = std::env::current_exe().map_err(|e| {
        Failure::about(exit_code::FAILED, "demo: this binary's path is unknown", &e)
    })?;
    let opts = DemoOpts {
        workers: args.workers,
        issues: args.issues,
        dir: args.dir.clone(),
        keep: args.keep,
    };
    let mut out = std::io::stdout();
    match demo_project::run(&opts, &exe, &mut out) {
        Ok(_) => Ok(exit_code::OK),
        Err(DemoError::Usage(m)) => Err(Failure::usage(m)),
        Err(DemoError::Failed { what, kept }) => Err(Failure::failed(match kept {
            Some(dir) => format!(
                "demo failed: {what}; logs kept in {} (supervisor.out, repo/.red/tmp/supervisors/default/supervisor.log.toonl, repo/.red/tmp/logs/)",
                dir.display()
            ),
            None => format!("demo failed: {what}"),
        })),
    }
}

/// `demo-check`: the demo's `[checks] command`, run in the issue's worktree.
pub fn check() -> Result<i32, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::about(exit_code::FAILED, "demo-check: working directory", &e))?;
    match demo_project::demo_check(&cwd) {
        Ok(failures) if failures.is_empty() => {
            outln!("demo checks: every note is checked");
            Ok(exit_code::OK)
        }
        Ok(failures) => {
            for f in &failures {
                outln!("error: {f}");
            }
            Ok(exit_code::FAILED)
        }
        Err(e) => Err(Failure::about(exit_code::FAILED, "demo-check", &e)),
    }
}

/// `demo-agent`: what the demo's workers run as their agent.
pub fn agent() -> Result<i32, Failure> {
    match demo_project::demo_agent(&crate::config::process_env()) {
        Ok(line) => {
            outln!("{line}");
            Ok(exit_code::OK)
        }
        Err(e) => Err(Failure::about(exit_code::FAILED, "demo-agent", &e)),
    }
}
