//! `afk-supervisor list [--json] [--forget-gone]`: every fleet of this user on this host, as `pm2 list`
//! shows every app: the checkouts recorded by their supervisors, each with whether one runs
//! now (from that checkout's pid file and heartbeat) and how it is doing.

use clap::Args;
use serde::Serialize;

use crate::cli::Failure;
use crate::control::{self, ControlError};
use crate::exit_code;
use crate::layout::Layout;
use crate::status::health;

#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// A JSON array, one object per checkout (repo, state, pid, target, live, health).
    #[arg(long)]
    pub json: bool,
    /// Forget the checkouts that are gone (no longer there), then list the rest.
    #[arg(long)]
    pub forget_gone: bool,
}

/// One row of `list`.
#[derive(Debug, Serialize)]
struct Row {
    repo: String,
    /// running, stopped, or gone (the checkout is no longer there).
    state: &'static str,
    pid: Option<i32>,
    target: Option<usize>,
    live: Option<usize>,
    /// healthy or degraded while running; null otherwise.
    health: Option<&'static str>,
    /// Live fleet processes without a supervisor (what `stop --force` would end).
    orphans: usize,
}

pub fn run(args: &ListArgs) -> Result<i32, Failure> {
    let file = crate::fleets::path()?;
    if args.forget_gone {
        let forgotten = crate::fleets::forget(&file, |repo| !repo.is_dir())?;
        // On stderr: stdout stays the list (`--json` parses as before).
        for repo in &forgotten {
            eprintln!(
                "forgot {} (gone)",
                crate::text::escape(&repo.display().to_string())
            );
        }
    }
    let repos = crate::fleets::read(&file)?;
    let rows: Vec<Row> = repos
        .iter()
        .map(|repo| {
            let mut row = Row {
                repo: repo.display().to_string(),
                state: "gone",
                pid: None,
                target: None,
                live: None,
                health: None,
                orphans: 0,
            };
            if !repo.is_dir() {
                return row;
            }
            let layout = Layout::new(repo);
            match control::status(&layout) {
                Ok(r) => {
                    row.state = "running";
                    row.pid = Some(r.supervisor.pid);
                    row.target = Some(r.fleet.target);
                    row.live = Some(r.fleet.live);
                    row.health = Some(health::verdict(&r));
                }
                Err(ControlError::NotRunning(_)) | Err(_) => {
                    row.state = "stopped";
                    row.orphans = control::live_fleet_processes(&layout).len();
                }
            }
            row
        })
        .collect();
    if args.json {
        let text = serde_json::to_string_pretty(&rows)
            .map_err(|e| Failure::about(exit_code::FAILED, "cannot encode the list", &e))?;
        outln!("{text}");
        return Ok(exit_code::OK);
    }
    if rows.is_empty() {
        outln!(
            "no fleet recorded yet ({} lists every checkout a supervisor ran in)",
            file.display()
        );
        return Ok(exit_code::OK);
    }
    outln!(
        "{:<8} {:>8} {:>6} {:>4} {:<9} REPO",
        "STATE",
        "PID",
        "TARGET",
        "LIVE",
        "HEALTH"
    );
    for r in &rows {
        let num = |v: Option<usize>| v.map_or("-".into(), |n| n.to_string());
        let health = match (r.health, r.orphans) {
            (Some(h), _) => h.to_string(),
            (None, 0) => "-".into(),
            (None, n) => format!("{n} orphans"),
        };
        outln!(
            "{:<8} {:>8} {:>6} {:>4} {:<9} {}",
            r.state,
            r.pid.map_or("-".into(), |p| p.to_string()),
            num(r.target),
            num(r.live),
            health,
            crate::text::escape(&r.repo)
        );
    }
    Ok(exit_code::OK)
}
