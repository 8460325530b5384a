//! `afk-supervisor tmux [--session NAME] [--workers N] [--attach]`: a tmux session whose
//! first window runs the supervisor in the foreground and whose second runs
//! `status --watch`. Killing the session hangs up the supervisor's pane: SIGHUP stops the
//! fleet cleanly, like Ctrl-C in that pane.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use clap::Args;

use std::time::Duration;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::control::{self, ScaleOutcome};
use crate::exit_code;
use crate::lanes::state_file::ShrinkMode;

#[derive(Debug, Clone, Args)]
pub struct TmuxArgs {
    /// Session name (default: afk-<repo folder name>).
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,
    /// Number of worker slots for the supervisor (default: the config's); on a session that
    /// exists, sent to its running fleet as `scale N` does (an error when none runs there).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub workers: Option<u16>,
    /// Attach to the session (or switch to it from inside tmux) once it is there.
    #[arg(long)]
    pub attach: bool,
}

/// tmux refuses `.` and `:` in a session name; anything unprintable is dropped too.
fn session_name(ctx: &Ctx, args: &TmuxArgs) -> String {
    let raw = match &args.session {
        Some(s) => s.clone(),
        None => {
            let base = ctx
                .layout
                .repo()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "fleet".into());
            format!("afk-{base}")
        }
    };
    raw.chars()
        .filter(|c| !c.is_control())
        .map(|c| if matches!(c, '.' | ':') { '_' } else { c })
        .collect()
}

fn tmux(args: &[OsString]) -> Result<std::process::Output, Failure> {
    Command::new("tmux")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Failure::about(exit_code::FAILED, "cannot run tmux", &e))
}

fn checked(args: Vec<OsString>) -> Result<(), Failure> {
    let out = tmux(&args)?;
    if out.status.success() {
        return Ok(());
    }
    Err(Failure::failed(format!(
        "tmux {}: {}",
        args.first()
            .map(|a| a.to_string_lossy())
            .unwrap_or_default(),
        crate::text::escape(String::from_utf8_lossy(&out.stderr).trim())
    )))
}

/// `-e VAR=value` for this process's environment, so the panes run as if started here
/// (a tmux server started earlier would otherwise hand them its own environment).
fn env_flags() -> Vec<OsString> {
    let mut flags = Vec::new();
    for (k, v) in std::env::vars_os() {
        if k == "TMUX" || k == "TMUX_PANE" || k.to_string_lossy().contains('=') {
            continue;
        }
        let mut kv = k;
        kv.push("=");
        kv.push(v);
        flags.push("-e".into());
        flags.push(kv);
    }
    flags
}

/// `--workers N` on a session that already runs: the new target goes to its supervisor
/// the way `scale` sends it; when none runs there, say so instead of keeping the old one.
fn apply_target(ctx: &Ctx, n: usize) -> Result<(), Failure> {
    let config = ctx.config(Overrides::default())?;
    let timeout = Duration::from_secs((3 * config.timing.tick_s).max(10));
    match control::scale(&ctx.layout, n, ShrinkMode::default(), timeout) {
        Ok(ScaleOutcome::Applied { .. }) => {
            outln!("--workers {n}: applied to the running fleet (as `afk-supervisor scale {n}`)");
            Ok(())
        }
        Ok(outcome @ ScaleOutcome::Pending { .. }) => Err(Failure::failed(format!(
            "--workers {n}: sent to the running fleet but not yet applied: {outcome}"
        ))),
        Err(e) => Err(Failure::failed(format!(
            "--workers {n} not applied: {e}; the session's supervisor window is not running a \
             fleet (tmux kill-session, then run this again)"
        ))),
    }
}

pub fn run(ctx: &Ctx, args: &TmuxArgs) -> Result<i32, Failure> {
    let name = session_name(ctx, args);
    if name.is_empty() {
        return Err(Failure::usage("--session: empty name"));
    }
    let target: OsString = format!("={name}").into();
    let exe = std::env::current_exe()
        .map_err(|e| Failure::about(exit_code::FAILED, "this binary's path is unknown", &e))?;
    let repo = ctx.layout.repo();
    let exists = tmux(&["has-session".into(), "-t".into(), target.clone()])?
        .status
        .success();
    if exists {
        outln!("tmux session {name} exists; reusing it");
        if let Some(n) = args.workers {
            apply_target(ctx, usize::from(n))?;
        }
    } else {
        let mut sup: Vec<OsString> = vec!["new-session".into(), "-d".into()];
        sup.extend(env_flags());
        sup.extend([
            "-s".into(),
            name.clone().into(),
            "-n".into(),
            "supervisor".into(),
        ]);
        sup.extend(["-c".into(), repo.as_os_str().to_owned()]);
        sup.extend([exe.as_os_str().to_owned(), "--repo".into(), repo.into()]);
        sup.push("run".into());
        if let Some(n) = args.workers {
            sup.extend(["--workers".into(), n.to_string().into()]);
        }
        checked(sup)?;
        let mut status: Vec<OsString> = vec!["new-window".into(), "-d".into()];
        status.extend(env_flags());
        let mut window = target.clone();
        window.push(":");
        status.extend(["-t".into(), window, "-n".into(), "status".into()]);
        status.extend(["-c".into(), repo.as_os_str().to_owned()]);
        status.extend([exe.as_os_str().to_owned(), "--repo".into(), repo.into()]);
        status.extend(["status".into(), "--watch".into()]);
        checked(status)?;
        outln!("tmux session {name}: window 0 the supervisor, window 1 status --watch");
    }
    outln!("attach:  tmux attach -t '{name}'");
    outln!(
        "stop:    tmux kill-session -t '{name}'   (or: afk-supervisor --repo '{}' stop)",
        repo.display()
    );
    if args.attach {
        let verb = if std::env::var_os("TMUX").is_some() {
            "switch-client"
        } else {
            "attach-session"
        };
        let err = Command::new("tmux")
            .args([verb.into(), "-t".into(), target])
            .exec();
        return Err(Failure::about(
            exit_code::FAILED,
            format!("cannot run tmux {verb}"),
            &err,
        ));
    }
    Ok(exit_code::OK)
}
