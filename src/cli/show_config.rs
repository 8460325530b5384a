//! `afk-supervisor config`: what the supervisor would run with, so an operator can check
//! which file and which variables took effect before starting a fleet.

use crate::cli::Ctx;
use crate::config::Overrides;
use crate::exit::Failure;

pub fn run(ctx: &Ctx) -> Result<i32, Failure> {
    let c = ctx.config(Overrides::default())?;
    let source = c
        .file
        .as_ref()
        .map_or("built-in defaults".to_string(), |p| p.display().to_string());
    println!("# repo: {}", ctx.layout.repo().display());
    println!("# config: {source}");
    println!("fleet.workers = {}", c.fleet.workers);
    println!("fleet.base = {:?}", c.fleet.base);
    match &c.worker.command {
        Some(cmd) => println!("worker.command = {cmd:?}"),
        None => println!("worker.command = (built-in worker)"),
    }
    println!("worker.runner = {:?}", c.worker.runner);
    match &c.agent.command {
        Some(cmd) => println!("agent.command = {cmd:?}"),
        None => println!("agent.command = (none)"),
    }
    println!("tracker.kind = {}", c.tracker.kind);
    println!(
        "tracker.repo = {}",
        c.tracker.repo.as_deref().unwrap_or("(from origin)")
    );
    println!("tracker.timeout_s = {}", c.tracker.timeout_s);
    let t = &c.timing;
    for (k, v) in [
        ("tick_s", t.tick_s),
        ("fast_death_s", t.fast_death_s),
        ("circuit_k", u64::from(t.circuit_k)),
        ("circuit_window_s", t.circuit_window_s),
        ("half_open_base_s", t.half_open_base_s),
        ("half_open_cap_s", t.half_open_cap_s),
        ("stop_grace_s", t.stop_grace_s),
        ("stall_s", t.stall_s),
        ("stall_kill_s", t.stall_kill_s),
        ("unblock_interval_s", t.unblock_interval_s),
    ] {
        println!("timing.{k} = {v}");
    }
    println!(
        "sweeps.attempt_max_age_days = {}",
        c.sweeps.attempt_max_age_days
    );
    println!("sweeps.attempt_max_count = {}", c.sweeps.attempt_max_count);
    println!("log.max_bytes = {}", c.log.max_bytes);
    println!("log.keep = {}", c.log.keep);
    println!("log.slot_log_days = {}", c.log.slot_log_days);
    Ok(0)
}
