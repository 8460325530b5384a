//! `afk-supervisor config`: what the supervisor would run with, so an operator can check
//! which file and which variables took effect before starting a fleet. Every value is
//! followed by its source: `default`, `file PATH:LINE:COL`, `env RED_AFK_…` or `flag --…`.

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::{self, Overrides};
use crate::exit_code;

pub fn run(ctx: &Ctx) -> Result<i32, Failure> {
    let (c, src) = ctx.config_with_sources(Overrides::default())?;
    let file = c.file.as_ref().map_or(
        format!(
            "none ({} does not exist): built-in defaults",
            ctx.layout.repo_config().display()
        ),
        |p| p.display().to_string(),
    );
    outln!("# repo: {}", ctx.layout.repo().display());
    outln!("# config file: {file}");
    let line = |key: &str, value: String| outln!("{key} = {value}  # {}", src.describe(key));
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
    for key in config::TIMING_KEYS {
        line(key, c.number(key).unwrap_or_default().to_string());
    }
    line(
        "timing.fleet_circuit_fraction",
        c.timing.fleet_circuit_fraction.to_string(),
    );
    line(
        "timing.stall_cpu_floor_permille",
        c.timing.stall_cpu_floor_permille.to_string(),
    );
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
    line(
        "log.slot_log_max_bytes",
        c.log.slot_log_max_bytes.to_string(),
    );
    line("claims.stale_after_s", c.claims.stale_after_s.to_string());
    line("agent.profile", c.agent.profile.to_string());
    line(
        "agent.prompt",
        c.agent
            .prompt
            .as_ref()
            .map_or("(the profile's default)".into(), |p| format!("{p:?}")),
    );
    let a = &c.agent;
    line("agent.sandbox", format!("{:?}", a.sandbox.to_string()));
    line("agent.env", format!("{:?}", a.env));
    line(
        "agent.home_files",
        match &a.home_files {
            Some(f) => format!("{f:?}"),
            None => format!("{:?}  (the profile's)", a.home_files()),
        },
    );
    line(
        "agent.sandbox_read",
        format!(
            "{:?}",
            a.sandbox_read
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        ),
    );
    line("agent.network", a.network.to_string());
    line("agent.sensitive_paths", format!("{:?}", a.sensitive_paths));
    let usd = |u: Option<config::Usd>| u.map_or("(none)".into(), |u| u.to_string());
    line("budget.usd_per_day", usd(c.budget.usd_per_day));
    line("budget.usd_per_issue", usd(c.budget.usd_per_issue));
    line("budget.estimate_usd", usd(c.budget.estimate_usd));
    line(
        "budget.tokens_per_day",
        c.budget
            .tokens_per_day
            .map_or("(none)".into(), |t| t.to_string()),
    );
    line(
        "budget.timezone",
        crate::budget::offset_words(c.budget.utc_offset_s),
    );
    line("rescue.max_file_bytes", c.rescue.max_file_bytes.to_string());
    line(
        "claims.trusted_authors",
        format!("{:?}", c.claims.trusted_authors),
    );
    line("claims.trust_members", c.claims.trust_members.to_string());
    line(
        "claims.unmarked_grace_s",
        c.claims.unmarked_grace_s.to_string(),
    );
    let k = &c.checks;
    line(
        "checks.command",
        k.command
            .as_ref()
            .map_or("(none)".into(), |cmd| format!("{cmd:?}")),
    );
    line("checks.timeout_s", k.timeout_s.to_string());
    line("checks.max_rounds", k.max_rounds.to_string());
    line(
        "checks.on_failure",
        format!("{:?}", k.on_failure.to_string()),
    );
    let l = &c.landing;
    line("landing.pull_request", l.pull_request.to_string());
    line("landing.draft", l.draft.to_string());
    line("landing.merge", format!("{:?}", l.merge.to_string()));
    line("landing.method", format!("{:?}", l.method.to_string()));
    line("landing.max_fix_rounds", l.max_fix_rounds.to_string());
    line("landing.watch_interval_s", l.watch_interval_s.to_string());
    line("landing.ci", format!("{:?}", l.ci.to_string()));
    let cl = c.cluster.as_ref();
    let none = || "(none: one box)".to_string();
    line(
        "cluster.engine",
        cl.map_or_else(none, |_| "\"etcd\"".into()),
    );
    line(
        "cluster.endpoints",
        cl.map_or_else(none, |k| format!("{:?}", k.endpoints)),
    );
    line(
        "cluster.lease_s",
        cl.map_or_else(none, |k| k.lease_s.to_string()),
    );
    line(
        "cluster.prefix",
        cl.map_or_else(none, |k| match &k.prefix {
            Some(p) => format!("{p:?}"),
            None => "(afk/<tracker.repo>)".into(),
        }),
    );
    line(
        "cluster.username",
        cl.and_then(|k| k.username.clone())
            .map_or("(none)".into(), |u| format!("{u:?}")),
    );
    line(
        "cluster.password_file",
        cl.and_then(|k| k.password_file.as_ref())
            .map_or("(none)".into(), |p| {
                format!("{:?}", p.display().to_string())
            }),
    );
    let tls = cl.and_then(|k| k.tls.as_ref());
    let path = |p: &std::path::Path| format!("{:?}", p.display().to_string());
    line(
        "cluster.ca_file",
        tls.map_or("(none)".into(), |t| path(&t.ca_file)),
    );
    let client = tls.and_then(|t| t.client.as_ref());
    line(
        "cluster.cert_file",
        client.map_or("(none)".into(), |(c, _)| path(c)),
    );
    line(
        "cluster.key_file",
        client.map_or("(none)".into(), |(_, k)| path(k)),
    );
    let i = &c.isolation;
    let mode = match i.mode {
        config::IsolationMode::Auto => "auto",
        config::IsolationMode::Cgroup => "cgroup",
        config::IsolationMode::ProcessGroup => "process-group",
    };
    line("isolation.mode", format!("{mode:?}"));
    line(
        "isolation.cgroup_root",
        i.cgroup_root
            .as_ref()
            .map_or("(the supervisor's own cgroup)".into(), |p| {
                format!("{:?}", p.display().to_string())
            }),
    );
    for (key, v) in [
        ("worker.memory_high", &i.worker_memory_high),
        ("worker.memory_max", &i.worker_memory_max),
        ("worker.cpu_max", &i.worker_cpu_max),
        ("worker.pids_max", &i.worker_pids_max),
        ("fleet.memory_max", &i.fleet_memory_max),
    ] {
        line(
            key,
            v.as_ref().map_or("(none)".into(), |v| format!("{v:?}")),
        );
    }
    // Each sink as its table's keys; a secret is named by its variable, never shown.
    for (i, s) in c.notify.iter().enumerate() {
        let at = format!("file {}", s.at);
        let key = |k: &str, v: String| outln!("notify[{i}].{k} = {v}  # {at}");
        key("name", format!("{:?}", s.name));
        key("kind", format!("{:?}", s.kind.to_string()));
        match &s.url {
            Some(config::notify_sinks::SinkUrl::Literal(u)) => key("url", format!("{u:?}")),
            Some(config::notify_sinks::SinkUrl::Env(v)) => key("url_env", format!("{v:?}")),
            None => {}
        }
        if let Some(cmd) = &s.command {
            key("command", format!("{cmd:?}"));
        }
        key("events", format!("{:?}", s.events));
        key("min_interval_s", s.min_interval_s.to_string());
        if !s.headers_from_env.is_empty() {
            let h: Vec<String> = s
                .headers_from_env
                .iter()
                .map(|(h, v)| format!("{h:?} = {v:?}"))
                .collect();
            key(
                "headers_from_env",
                format!(
                    "{{ {} }}  (values read from these variables at each send)",
                    h.join(", ")
                ),
            );
        }
        key("timeout_s", s.timeout_s.to_string());
        key("retry_for_s", s.retry_for_s.to_string());
    }
    Ok(exit_code::OK)
}
