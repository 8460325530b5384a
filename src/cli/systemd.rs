//! `afk-supervisor systemd install [--workers N] [--print]` and `systemd uninstall`.

use clap::{Args, Subcommand};

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::exit_code;
use crate::service_unit::{self, UnitError};

#[derive(Debug, Clone, Args)]
pub struct SystemdArgs {
    #[command(subcommand)]
    pub action: SystemdAction,
}

#[derive(Debug, Clone, Subcommand)]
pub enum SystemdAction {
    /// Write the user unit for this repo (template + instance drop-in) and print the
    /// commands that enable it.
    Install(InstallArgs),
    /// Remove this repo's instance (and the template once no instance is left).
    Uninstall,
}

#[derive(Debug, Clone, Args)]
pub struct InstallArgs {
    /// Fleet size of this instance (RED_AFK_TARGET in the drop-in); default: the config's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub workers: Option<u16>,
    /// Print the files and the commands instead of writing anything.
    #[arg(long)]
    pub print: bool,
}

fn unit_dir() -> Result<std::path::PathBuf, Failure> {
    service_unit::user_unit_dir(
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
    .ok_or_else(|| Failure::failed("neither XDG_CONFIG_HOME nor HOME is set"))
}

fn unit_failure(e: UnitError) -> Failure {
    match e {
        UnitError::Io { .. } => Failure::of(exit_code::FAILED, &e),
        _ => Failure::of(exit_code::USAGE, &e),
    }
}

pub fn run(ctx: &Ctx, args: &SystemdArgs) -> Result<i32, Failure> {
    match &args.action {
        SystemdAction::Install(a) => install(ctx, a),
        SystemdAction::Uninstall => uninstall(ctx),
    }
}

fn install(ctx: &Ctx, args: &InstallArgs) -> Result<i32, Failure> {
    if ctx.config_file.is_some() || ctx.tracker.is_some() {
        return Err(Failure::usage(
            "the unit reads <repo>/.red/afk-supervisor.toml: put the config (and tracker.kind) \
             there instead of --config/--tracker",
        ));
    }
    let config = ctx.config(Overrides::default())?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::about(exit_code::FAILED, "this binary's path is unknown", &e))?;
    let agent = config
        .agent
        .command
        .as_ref()
        .and_then(|c| c.first())
        .map(String::as_str);
    let plan = service_unit::plan(
        ctx.layout.repo(),
        &exe,
        &unit_dir()?,
        args.workers.map(usize::from),
        agent,
        std::env::var_os("PATH").as_deref(),
    )
    .map_err(unit_failure)?;
    if args.print {
        outln!("# {}", plan.template_path.display());
        out!("{}", plan.template);
        outln!();
        outln!("# {}", plan.dropin_path.display());
        out!("{}", plan.dropin);
        outln!();
        outln!("# after writing both files:");
    } else {
        plan.write().map_err(unit_failure)?;
        outln!("wrote {}", plan.template_path.display());
        outln!("wrote {}", plan.dropin_path.display());
    }
    if !plan.missing.is_empty() {
        eprintln!(
            "afk-supervisor: not found on PATH: {}; the unit's PATH lacks them",
            plan.missing.join(", ")
        );
    }
    out!("{}", plan.next_steps());
    Ok(exit_code::OK)
}

fn uninstall(ctx: &Ctx) -> Result<i32, Failure> {
    let unit = service_unit::unit_name(ctx.layout.repo());
    let removed = service_unit::uninstall(ctx.layout.repo(), &unit_dir()?).map_err(unit_failure)?;
    if removed.files.is_empty() {
        outln!("{unit}: nothing installed");
    }
    for f in &removed.files {
        outln!("removed {}", f.display());
    }
    outln!("systemctl --user stop '{unit}'   # if it is still running");
    outln!("systemctl --user daemon-reload");
    Ok(exit_code::OK)
}
