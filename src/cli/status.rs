//! `afk-supervisor status [--json] [--watch]`.

use std::io::{IsTerminal, Write};

use clap::Args;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::control::{self, ControlError};
use crate::exit_code;
use crate::status::{self, health, live, view};

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Exit status, as `systemctl is-active`: 0 running and healthy; 1 running \
but degraded (a slot parked or probing, the fleet circuit open, the fleet paused; `degraded:` \
says which); 3 no supervisor running (live fleet processes it left are listed)."
)]
pub struct StatusArgs {
    /// Print the stable JSON form (documented in docs/guide/running.md).
    #[arg(long)]
    pub json: bool,
    /// The live view: redrawn in place every second on a terminal (q or Ctrl-C quits the
    /// view, never the fleet), one plain snapshot after another otherwise.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
    /// `[cluster]`: every host of the fleet as etcd holds it (its slots and issues, the
    /// leader, the claims and the shared pauses), from any host.
    #[arg(long, conflicts_with = "watch")]
    pub fleet: bool,
}

pub fn run(ctx: &Ctx, args: &StatusArgs) -> Result<i32, Failure> {
    if args.watch {
        return watch(ctx);
    }
    if args.fleet {
        return fleet(ctx, args.json);
    }
    match control::status(&ctx.layout) {
        Ok(report) => {
            let why = health::degraded(&report);
            if args.json {
                let value = health::report_json(&report)
                    .map_err(|e| Failure::about(exit_code::FAILED, "cannot encode status", &e))?;
                outln!("{}", encode(&value)?);
            } else {
                out!("{}", status::render_status(&report));
                if !why.is_empty() {
                    outln!("degraded: {}", why.join("; "));
                }
            }
            Ok(if why.is_empty() {
                exit_code::OK
            } else {
                exit_code::FAILED
            })
        }
        Err(e @ ControlError::NotRunning(_)) => {
            // Workers a killed supervisor left behind are the fleet all the same.
            let live = control::live_fleet_processes(&ctx.layout);
            if args.json {
                let value = serde_json::json!({"supervisor": null, "live_processes": live});
                outln!("{}", encode(&value)?);
            }
            eprintln!("{e}");
            if !live.is_empty() {
                let pids: Vec<String> = live.iter().map(i32::to_string).collect();
                eprintln!(
                    "but {} processes of the fleet are live (pids {}): `afk-supervisor stop --force` kills them",
                    live.len(),
                    pids.join(", ")
                );
            }
            Ok(exit_code::NOT_RUNNING)
        }
        Err(e) => Err(Failure::of(exit_code::FAILED, &e)),
    }
}

/// `status --fleet`: the cluster's view (`docs/SPEC.md` §11.23); exit 1 when etcd does not
/// answer, 78 without `[cluster]`.
fn fleet(ctx: &Ctx, json: bool) -> Result<i32, Failure> {
    let cfg = ctx.config(crate::config::Overrides::default())?;
    let Some(c) = crate::cluster::active() else {
        return Err(Failure::config(
            "status --fleet: no [cluster] in the config: this fleet is one box (`status` shows it)",
        ));
    };
    let mut v = c
        .fleet_view(cfg.tracker.write_budgets())
        .map_err(|e| Failure::about(exit_code::FAILED, "status --fleet", &e))?;
    v["budget"] = crate::budget::fleet_day::view(&ctx.layout, &cfg.budget);
    if json {
        outln!("{}", encode(&v)?);
        return Ok(exit_code::OK);
    }
    out!("{}", render_fleet(&v));
    Ok(exit_code::OK)
}

/// The plain form of `status --fleet`: one line per host, one per slot with an issue.
fn render_fleet(v: &serde_json::Value) -> String {
    let mut out = format!(
        "cluster {}  leader: {}  claims: {}\n",
        v["prefix"].as_str().unwrap_or("?"),
        v["leader"].as_str().unwrap_or("none"),
        v["claims"].as_array().map_or(0, Vec::len)
    );
    for (what, key) in [
        ("agent paused", "agent_paused"),
        ("rate limited", "rate_paused"),
    ] {
        if !v[key].is_null() {
            out += &format!(
                "{what}: {} until {}\n",
                v[key]["reason"].as_str().unwrap_or(""),
                v[key]["until_epoch"]
            );
        }
    }
    if let Some(b) = v["budget"].as_object() {
        match b.get("error") {
            Some(e) => out += &format!("budget: {}\n", e.as_str().unwrap_or("?")),
            None => {
                let limit = |k: &str| {
                    b.get(k)
                        .filter(|x| !x.is_null())
                        .map_or("no limit".to_string(), |x| x.to_string())
                };
                out += &format!(
                    "budget today: ${:.2} of {} and {} tokens of {} over {} hosts; reserved ${:.2} for {} attempts\n",
                    b.get("usd").and_then(|x| x.as_f64()).unwrap_or(0.0),
                    b.get("usd_per_day")
                        .and_then(|x| x.as_f64())
                        .map_or("no limit".to_string(), |x| format!("${x:.2}")),
                    b.get("tokens").and_then(|x| x.as_u64()).unwrap_or(0),
                    limit("tokens_per_day"),
                    b.get("hosts").and_then(|x| x.as_u64()).unwrap_or(0),
                    b.get("reserved_usd")
                        .and_then(|x| x.as_f64())
                        .unwrap_or(0.0),
                    b.get("reserved_attempts")
                        .and_then(|x| x.as_u64())
                        .unwrap_or(0),
                );
            }
        }
    }
    if let Some(q) = v["queue"].as_object() {
        out += &format!(
            "queue: {} ready, read by {}'s steward {:.1}s ago{}\n",
            q.get("issues")
                .and_then(|n| n.as_u64())
                .map_or("?".into(), |n| n.to_string()),
            q.get("steward").and_then(|h| h.as_str()).unwrap_or("?"),
            q.get("looked_ms_ago").and_then(|m| m.as_u64()).unwrap_or(0) as f64 / 1000.0,
            if q.get("fresh").and_then(|f| f.as_bool()) == Some(true) {
                ""
            } else {
                " (stale: the hosts ask GitHub)"
            }
        );
    }
    for id in v["github"].as_array().into_iter().flatten() {
        out += &format!(
            "github {}: {} of {} writes this hour ({} left), {} of {} this minute\n",
            id["login"].as_str().unwrap_or("?"),
            id["hour"],
            id["per_hour"],
            id["hour_left"],
            id["minute"],
            id["per_minute"]
        );
    }
    for h in v["hosts"].as_array().into_iter().flatten() {
        let slots = h["slots"].as_array().cloned().unwrap_or_default();
        let busy: Vec<String> = slots
            .iter()
            .filter_map(|s| {
                s["issue"]
                    .as_u64()
                    .map(|n| format!("slot {} #{n}", s["slot"]))
            })
            .collect();
        out += &format!(
            "{}{}  pid {}  slots {}  {}\n",
            h["host"].as_str().unwrap_or("?"),
            if h["leader"].as_bool() == Some(true) {
                " (leader)"
            } else {
                ""
            },
            h["pid"],
            slots.len(),
            if busy.is_empty() {
                "idle".to_string()
            } else {
                busy.join(", ")
            }
        );
    }
    out
}

fn encode(value: &serde_json::Value) -> Result<String, Failure> {
    serde_json::to_string_pretty(value)
        .map_err(|e| Failure::about(exit_code::FAILED, "cannot encode status", &e))
}

fn watch(ctx: &Ctx) -> Result<i32, Failure> {
    let repo = ctx.layout.repo().display().to_string();
    let fetch = || control::status(&ctx.layout);
    let stdout = std::io::stdout();
    if stdout.is_terminal() && std::io::stdin().is_terminal() {
        let no_color = std::env::var_os("NO_COLOR");
        let colour = view::colour_wanted(true, no_color.as_deref());
        live::run(&repo, colour, fetch)
            .map_err(|e| Failure::about(exit_code::FAILED, "status --watch: terminal", &e))?;
        return Ok(exit_code::OK);
    }
    // Off a terminal: one plain snapshot after another (a log, a pipe), no escape codes.
    loop {
        let now = crate::timeutil::now_rfc3339_millis();
        let body = match fetch() {
            Ok(report) => status::render_status(&report),
            Err(e) => format!("{e}\n"),
        };
        let text = format!("afk-supervisor status  {now}  {repo}\n{body}\n");
        let mut out = stdout.lock();
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(exit_code::OK);
            }
            return Err(Failure::about(exit_code::FAILED, "stdout", &e));
        }
        drop(out);
        std::thread::sleep(live::EVERY);
    }
}
