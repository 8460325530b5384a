//! `afk-supervisor notify test [--sink NAME]`: one sample message to each `[[notify]]` sink
//! (or the one named), and what each answered (`docs/SPEC.md` §11.21). Exit 0 when every
//! sink tried took it, 1 when one did not, 2 for a sink name the config does not have.

use clap::{Args, Subcommand};

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::exit_code;

#[derive(Debug, Clone, Args)]
pub struct NotifyArgs {
    #[command(subcommand)]
    pub action: NotifyAction,
}

#[derive(Debug, Clone, Subcommand)]
pub enum NotifyAction {
    /// Send one sample message to every sink (or --sink NAME) and say what each answered.
    Test(TestArgs),
}

#[derive(Debug, Clone, Args)]
pub struct TestArgs {
    /// Only the sink of this name (a `[[notify]]` table's `name`).
    #[arg(long, value_name = "NAME")]
    pub sink: Option<String>,
}

pub fn run(ctx: &Ctx, args: &NotifyArgs) -> Result<i32, Failure> {
    let NotifyAction::Test(t) = &args.action;
    let config = ctx.config(Overrides::default())?;
    let file = config.file.as_ref().map_or(
        format!(
            "no config file; {} does not exist",
            ctx.layout.repo_config().display()
        ),
        |p| p.display().to_string(),
    );
    if config.notify.is_empty() {
        return Err(Failure::failed(format!(
            "no [[notify]] sinks in the config ({file}): add one (docs/guide/notifications.md)"
        )));
    }
    let sinks: Vec<_> = match &t.sink {
        None => config.notify.clone(),
        Some(name) => {
            let found: Vec<_> = config
                .notify
                .iter()
                .filter(|s| &s.name == name)
                .cloned()
                .collect();
            if found.is_empty() {
                let names: Vec<&str> = config.notify.iter().map(|s| s.name.as_str()).collect();
                return Err(Failure::usage(format!(
                    "--sink {name}: no such sink in {file} (sinks: {})",
                    names.join(", ")
                )));
            }
            found
        }
    };
    let mut failed = 0;
    for r in crate::notify::test(&ctx.layout, &sinks) {
        let secs = r.elapsed.as_secs_f64();
        match r.result {
            Ok(answer) => outln!("{}: delivered ({secs:.2}s): {answer}", r.sink),
            Err(why) => {
                failed += 1;
                outln!("{}: not delivered ({secs:.2}s): {why}", r.sink);
            }
        }
    }
    Ok(if failed == 0 {
        exit_code::OK
    } else {
        exit_code::FAILED
    })
}
