//! `afk-supervisor start [--workers N]`: the fleet in the background, as `pm2 start` does.
//! The supervisor is this binary's `run`, started in a session of its own (`setsid`: no
//! terminal, no hangup when the shell that started it goes), stdin from /dev/null and its
//! output appended to the lane's `supervisor.out`. `start` returns once that supervisor
//! holds the lane (its pid file names it), or reports how it ended if it ended first.
//! For restarts after a crash or a reboot, the systemd unit (`afk-supervisor systemd
//! install`) is the tool; for a terminal to come back to, `afk-supervisor tmux`.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::cli::run::RunArgs;
use crate::control;
use crate::exit_code;

/// How long `start` waits for the supervisor to take its lane (it does so before the boot
/// sweeps, so this is process start-up and one config load).
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Between two looks at the child and the pid file.
const POLL: Duration = Duration::from_millis(50);

/// Lines of `supervisor.out` shown when the supervisor ended before it was ready.
const TAIL_LINES: usize = 5;

pub fn run(ctx: &Ctx, args: &RunArgs) -> Result<i32, Failure> {
    // What `run` would refuse, refused here, before anything is spawned or created.
    crate::cli::run::checked_config(ctx, args)?;
    if let Ok(r) = control::status(&ctx.layout) {
        return Err(Failure::failed(format!(
            "supervisor already running for this project (pid={})",
            r.supervisor.pid
        )));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::about(exit_code::FAILED, "this binary's path is unknown", &e))?;
    let out_path = ctx.layout.supervisor_out();
    let lane = ctx.layout.supervisor_lane();
    std::fs::create_dir_all(&lane).map_err(|e| {
        Failure::about(
            exit_code::FAILED,
            format!("{}: cannot create", lane.display()),
            &e,
        )
    })?;
    let out = crate::fsutil::open_append(&out_path)
        .map_err(|e| Failure::about(exit_code::FAILED, out_path.display(), &e))?;
    let err = out
        .try_clone()
        .map_err(|e| Failure::about(exit_code::FAILED, out_path.display(), &e))?;
    let started_at = out.metadata().map_or(0, |m| m.len());
    let mut cmd = Command::new(&exe);
    cmd.arg("--repo").arg(ctx.layout.repo());
    if let Some(c) = &ctx.config_file {
        cmd.arg("--config").arg(c);
    }
    if let Some(t) = ctx.tracker {
        cmd.arg("--tracker").arg(t.to_string());
    }
    cmd.arg("run");
    if let Some(n) = args.workers {
        cmd.arg("--workers").arg(n.to_string());
    }
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd.spawn().map_err(|e| {
        Failure::about(
            exit_code::FAILED,
            format!("cannot start {}", exe.display()),
            &e,
        )
    })?;
    let pid = child.id() as i32;
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| Failure::about(exit_code::FAILED, format!("supervisor pid={pid}"), &e))?
        {
            let code = status.code().unwrap_or(exit_code::FAILED);
            let tail = output_tail(&out_path, started_at);
            return Err(Failure::new(
                if code == exit_code::OK {
                    exit_code::FAILED
                } else {
                    code
                },
                format!(
                    "the supervisor ended at once (exit {code}): {}; its output: {}",
                    tail.unwrap_or_else(|| "no output".into()),
                    out_path.display()
                ),
            ));
        }
        if control::status(&ctx.layout).is_ok_and(|r| r.supervisor.pid == pid) {
            break;
        }
        if Instant::now() >= deadline {
            return Err(Failure::failed(format!(
                "supervisor pid={pid} started but has not taken its lane after {}s; its output: {}",
                READY_WITHIN.as_secs(),
                out_path.display()
            )));
        }
        std::thread::sleep(POLL);
    }
    outln!(
        "started: supervisor pid={pid} in the background; output: {}",
        out_path.display()
    );
    outln!("  afk-supervisor status    afk-supervisor logs -f    afk-supervisor stop");
    Ok(exit_code::OK)
}

/// The last lines this start appended to `supervisor.out`, joined with ` | `.
fn output_tail(path: &std::path::Path, from: u64) -> Option<String> {
    let bytes = crate::fsutil::read_small_file(path, 16 << 20).ok()??;
    let new = bytes.get(from as usize..)?;
    let text = String::from_utf8_lossy(new);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(TAIL_LINES)..];
    (!tail.is_empty()).then(|| crate::text::escape(&tail.join(" | ")))
}
