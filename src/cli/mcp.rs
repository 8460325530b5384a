//! `afk-supervisor mcp [--allow-writes]`: the MCP server on stdio (`crate::mcp_server`).

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::exit_code;

#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Allow the write tools (scale, pause_fleet, resume_fleet, give_back,
    /// release_quarantine, stop_slot); without it the server is read-only.
    #[arg(long)]
    pub allow_writes: bool,
}

pub fn run(ctx: &Ctx, args: &McpArgs) -> Result<i32, Failure> {
    let config = ctx.config(Overrides::default())?;
    crate::mcp_server::serve(ctx.layout.clone(), config, args.allow_writes)?;
    Ok(exit_code::OK)
}
