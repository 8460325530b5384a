//! The plain `status` table: what `status` prints, and each snapshot of `status --watch`
//! off a terminal (no escape codes, no colour).

use super::{alerts, boot_words, cpu_words, issue_words, slot_reason_words};
use crate::control::StatusReport;
use crate::text;

/// `812K`, `14.2M`, `1.3G`.
pub fn human_kib(k: u64) -> String {
    match k {
        0..1024 => format!("{k}K"),
        1024..1_048_576 => format!("{:.1}M", k as f64 / 1024.0),
        _ => format!("{:.1}G", k as f64 / 1_048_576.0),
    }
}

/// `1h02m`, `3m05s`, `42s`.
pub fn human_duration(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The human table: the supervisor line, the fleet line, the boot suite and tracker, the
/// pause and fleet circuit when there are any, then one row per slot (a parked slot's row
/// followed by `      parked: <reason>`). `PEAK` is the attempt's `memory.peak` (cgroup
/// mode with the memory controller), `-` elsewhere: the sampled `MEM` misses a compile's
/// peak between two samples, the kernel's figure does not.
pub fn render_status(r: &StatusReport) -> String {
    let mut out = String::new();
    let hb = match (r.supervisor.heartbeat_age_s, r.supervisor.heartbeat_epoch) {
        (Some(age), Some(_)) => format!("heartbeat {} ago", human_duration(age)),
        _ => "no heartbeat yet (boot sweeps running)".to_string(),
    };
    let up = r
        .supervisor
        .uptime_s
        .map_or(String::new(), |s| format!(" up {}", human_duration(s)));
    out.push_str(&format!("supervisor pid={} {hb}{up}\n", r.supervisor.pid));
    let f = &r.fleet;
    let ready = match (f.ready_for_agent, &f.ready_for_agent_unknown) {
        (Some(n), _) => n.to_string(),
        (None, Some(why)) => format!("unknown ({})", text::excerpt(&text::escape(why))),
        (None, None) => "unknown".to_string(),
    };
    out.push_str(&format!(
        "fleet: target={} live={} parked={} idle={} deaths={} respawns={} (last {}s) ready-for-agent={ready} shrink-mode={} runner={}\n",
        f.target,
        f.live,
        f.parked,
        f.idle,
        f.deaths,
        f.respawns,
        f.window_s,
        f.shrink_mode,
        text::excerpt(&text::escape(&f.runner))
    ));
    let mut facts = Vec::new();
    if let Some(b) = &f.boot_suite {
        facts.push(format!("boot suite: {}", boot_words(b)));
    }
    if let Some(k) = &f.tracker_kind {
        facts.push(format!("tracker: {}", text::escape(k)));
    }
    if let Some(q) = f.quarantined {
        facts.push(format!("quarantined: {q}"));
    }
    if let Some(i) = &f.isolation {
        facts.push(format!("isolation: {}", text::excerpt(&text::escape(i))));
    }
    if let Some(p) = f.prs.filter(|p| *p != Default::default()) {
        facts.push(format!(
            "pull requests: open {} (failing {}), merged {}{}",
            p.open,
            p.failing,
            p.merged,
            if p.pending > 0 {
                format!(", {} waiting to be opened", p.pending)
            } else {
                String::new()
            }
        ));
    }
    if !facts.is_empty() {
        out.push_str(&facts.join("  "));
        out.push('\n');
    }
    for a in alerts(r) {
        out.push_str(&a);
        out.push('\n');
    }
    out.push_str(&format!(
        "{:<5} {:<8} {:<28} {:<10} {:>8} {:>8} {:>8} {:>8} {:>8}  {}\n",
        "SLOT", "PID", "WORKER", "STATE", "UPTIME", "RESPAWNS", "CPU", "MEM", "PEAK", "ISSUE"
    ));
    for s in &r.slots {
        out.push_str(&format!(
            "{:<5} {:<8} {:<28} {:<10} {:>8} {:>8} {:>8} {:>8} {:>8}  {}\n",
            s.slot,
            s.pid.map_or("-".into(), |p| p.to_string()),
            s.worker_id
                .as_deref()
                .map_or("-".into(), |w| text::excerpt(&text::escape(w))),
            s.state,
            s.uptime_s.map_or("-".into(), human_duration),
            s.restarts,
            s.cpu_permille.map_or("-".into(), cpu_words),
            s.rss_kib.map_or("-".into(), human_kib),
            s.memory_peak_kib.map_or("-".into(), human_kib),
            issue_words(s),
        ));
        if let Some(why) = slot_reason_words(s, r.epoch) {
            out.push_str(&format!("      parked: {why}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::tests::report;

    #[test]
    fn the_pull_requests_are_counted_once_there_are_any() {
        let mut r = report();
        r.fleet.prs = Some(crate::landing::PrCounts::default());
        assert!(!render_status(&r).contains("pull requests"));
        r.fleet.prs = Some(crate::landing::PrCounts {
            open: 3,
            failing: 1,
            merged: 7,
            pending: 1,
        });
        let text = render_status(&r);
        assert!(
            text.contains(
                "quarantined: 2  pull requests: open 3 (failing 1), merged 7, 1 waiting to be opened"
            ),
            "{text}"
        );
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(65), "1m05s");
        assert_eq!(human_duration(3725), "1h02m");
        assert_eq!(human_kib(812), "812K");
        assert_eq!(human_kib(20_480), "20.0M");
    }

    #[test]
    fn the_plain_table_says_it_all_in_words_without_escape_codes() {
        let text = render_status(&report());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "supervisor pid=4242 heartbeat 1s ago up 1h02m");
        assert!(
            lines[1].starts_with("fleet: target=4 live=1 parked=2 idle=1 deaths=6 respawns=5 (last 120s) ready-for-agent=7 "),
            "{text}"
        );
        assert_eq!(
            lines[2],
            "boot suite: clean 1.2s  tracker: local  quarantined: 2"
        );
        assert_eq!(
            lines[3],
            "paused: rate limited: API rate limit exceeded, resumes in 4m"
        );
        assert!(lines[4].starts_with("fleet circuit open: "), "{text}");
        assert_eq!(
            lines[5],
            "SLOT  PID      WORKER                       STATE        UPTIME RESPAWNS      CPU      MEM     PEAK  ISSUE",
            "{text}"
        );
        // PEAK is the cgroup's memory.peak where there is one, `-` where there is none.
        assert_eq!(
            lines[6],
            "0     5001     sup-4242-slot-0-3            running       3m05s        2    12.5%    20.0M    96.0M  #17 Fix the \\e[2Jparser",
            "{text}"
        );
        assert_eq!(
            lines[7],
            "1     -        -                            idle              -        0        -        -        -  -",
            "{text}"
        );
        assert_eq!(lines[9].trim(), "parked: agent.command not configured");
        assert_eq!(
            lines[11].trim(),
            "parked: circuit open: 5 fast deaths within 120s, probe in 3m"
        );
        assert!(!text.contains('\u{1b}'), "{text:?}");
    }
}
