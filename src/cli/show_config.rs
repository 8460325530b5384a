//! `afk-supervisor config`: what the supervisor would run with, so an operator can check
//! which file and which variables took effect before starting a fleet. Every value is
//! followed by its source: `default`, `file PATH:LINE:COL`, `env RED_AFK_…` or `flag --…`.

use crate::cli::Ctx;
use crate::config::Overrides;
use crate::exit::Failure;

pub fn run(ctx: &Ctx) -> Result<i32, Failure> {
    let (c, src) = ctx.config_with_sources(Overrides::default())?;
    let file = c.file.as_ref().map_or(
        format!(
            "none ({} does not exist): built-in defaults",
            ctx.layout.repo_config().display()
        ),
        |p| p.display().to_string(),
    );
    println!("# repo: {}", ctx.layout.repo().display());
    println!("# config file: {file}");
    let line = |key: &str, value: String| println!("{key} = {value}  # {}", src.describe(key));
    line("fleet.workers", c.fleet.workers.to_string());
    line("fleet.base", format!("{:?}", c.fleet.base));
    line(
        "worker.command",
        c.worker
            .command
            .as_ref()
            .map_or("(built-in worker)".into(), |cmd| format!("{cmd:?}")),
    );
    line("worker.runner", format!("{:?}", c.worker.runner));
    line(
        "worker.max_failed_attempts",
        c.worker.max_failed_attempts.to_string(),
    );
    line(
        "agent.command",
        c.agent
            .command
            .as_ref()
            .map_or("(none)".into(), |cmd| format!("{cmd:?}")),
    );
    line("tracker.kind", c.tracker.kind.to_string());
    line(
        "tracker.repo",
        c.tracker.repo.clone().unwrap_or("(from origin)".into()),
    );
    line("tracker.timeout_s", c.tracker.timeout_s.to_string());
    let t = &c.timing;
    for (k, v) in [
        ("timing.tick_s", t.tick_s),
        ("timing.fast_death_s", t.fast_death_s),
        ("timing.circuit_k", u64::from(t.circuit_k)),
        ("timing.circuit_window_s", t.circuit_window_s),
        ("timing.half_open_base_s", t.half_open_base_s),
        ("timing.half_open_cap_s", t.half_open_cap_s),
        ("timing.stop_grace_s", t.stop_grace_s),
        ("timing.stall_s", t.stall_s),
        ("timing.stall_kill_s", t.stall_kill_s),
        ("timing.unblock_interval_s", t.unblock_interval_s),
        ("timing.attempt_max_s", t.attempt_max_s),
    ] {
        line(k, v.to_string());
    }
    line(
        "sweeps.attempt_max_age_days",
        c.sweeps.attempt_max_age_days.to_string(),
    );
    line(
        "sweeps.attempt_max_count",
        c.sweeps.attempt_max_count.to_string(),
    );
    line("log.max_bytes", c.log.max_bytes.to_string());
    line("log.keep", c.log.keep.to_string());
    line("log.slot_log_days", c.log.slot_log_days.to_string());
    line("claims.stale_after_s", c.claims.stale_after_s.to_string());
    Ok(0)
}
