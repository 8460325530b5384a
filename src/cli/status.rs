//! `afk-supervisor status [--json]`.

use clap::Args;

use crate::cli::Ctx;
use crate::exit::{self, Failure};
use crate::supervisor::control::{self, ControlError};

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Print the stable JSON form (documented in the README).
    #[arg(long)]
    pub json: bool,
}

pub fn run(ctx: &Ctx, args: &StatusArgs) -> Result<i32, Failure> {
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
