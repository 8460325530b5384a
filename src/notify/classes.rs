//! What a person is told, derived from the event log the fleet already writes
//! (`docs/SPEC.md` §5, §11.21): each record whose kind and fixed text mean one of the
//! classes becomes a [`Notice`], one line a person understands on a phone's lock screen
//! plus the structured fields read from the record. Pure: no clock, no I/O.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::event_log::{Kind, Record};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    PrReady,
    HandedOff,
    Quarantined,
    BudgetReached,
    BudgetResumed,
    AgentPaused,
    AgentResumed,
    FleetCircuitOpen,
    SlotParked,
    RateLimited,
    SupervisorStopped,
    HostLost,
    /// `notify test`'s sample: no record means it.
    Test,
}

impl Class {
    /// In the order of `config::notify_sinks::CLASSES`.
    pub const ALL: [Class; 12] = [
        Class::PrReady,
        Class::HandedOff,
        Class::Quarantined,
        Class::BudgetReached,
        Class::BudgetResumed,
        Class::AgentPaused,
        Class::AgentResumed,
        Class::FleetCircuitOpen,
        Class::SlotParked,
        Class::RateLimited,
        Class::SupervisorStopped,
        Class::HostLost,
    ];

    /// The name `events` uses (`pr-ready`).
    pub fn name(self) -> &'static str {
        match Class::ALL.iter().position(|c| *c == self) {
            Some(i) => crate::config::notify_sinks::CLASSES[i],
            None => "test",
        }
    }

    /// A few words for a title (ntfy's) and a coalesced message.
    pub fn title(self) -> &'static str {
        match self {
            Class::PrReady => "ready for review",
            Class::HandedOff => "handed to a person",
            Class::Quarantined => "quarantined",
            Class::BudgetReached => "budget reached",
            Class::BudgetResumed => "budget day began",
            Class::AgentPaused => "agent paused",
            Class::AgentResumed => "agent resumed",
            Class::FleetCircuitOpen => "fleet circuit open",
            Class::SlotParked => "slot parked",
            Class::RateLimited => "rate limited",
            Class::SupervisorStopped => "supervisor stopped",
            Class::HostLost => "host lost",
            Class::Test => "test",
        }
    }

    /// Whether a person should look now (ntfy's priority `high`).
    pub fn urgent(self) -> bool {
        matches!(
            self,
            Class::Quarantined
                | Class::BudgetReached
                | Class::AgentPaused
                | Class::FleetCircuitOpen
                | Class::SupervisorStopped
                | Class::HostLost
        )
    }

    /// ntfy's tag (an emoji short code on the phone).
    pub fn tag(self) -> &'static str {
        match self {
            Class::PrReady => "white_check_mark",
            Class::HandedOff => "raising_hand",
            Class::Quarantined => "no_entry",
            Class::BudgetReached => "moneybag",
            Class::BudgetResumed | Class::AgentResumed => "arrow_forward",
            Class::AgentPaused | Class::RateLimited => "hourglass",
            Class::FleetCircuitOpen | Class::SlotParked => "warning",
            Class::SupervisorStopped => "stop_sign",
            Class::HostLost => "skull",
            Class::Test => "bell",
        }
    }
}

/// One record a person is told about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    pub class: Class,
    /// One line for a lock screen (without the repository's name, which the message adds).
    pub line: String,
    /// The structured fields: the record's `ts`, `kind`, `slot`, `pid`, `issue` where set,
    /// and what its text says (a branch, a link, a reset time, …).
    pub fields: Map<String, Value>,
    /// The cursor just past the record (`afk-supervisor events`).
    pub cursor: String,
}

/// What the classes remember between records: whether a supervisor's start was seen
/// without its end, so the next start can tell that the last one died unannounced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// The running supervisor's start record: its pid and time.
    pub run: Option<(Option<i64>, String)>,
}

/// The longest line a notice carries; a lock screen shows less.
const MAX_LINE: usize = 300;

/// The notice `ev` (at `cursor`) means, if any. `memory` follows the supervisor's runs.
pub fn classify(ev: &Record, cursor: &str, memory: &mut Memory) -> Option<Notice> {
    let msg = ev.msg.as_str();
    let mut f = Map::new();
    let (class, line) = match &ev.kind {
        Kind::AttemptReady => {
            let branch = word_after(msg, "on branch ");
            put(&mut f, "branch", branch);
            put(&mut f, "link", link_in(msg));
            let commits = msg
                .split_once(" commit(s)")
                .and_then(|(a, _)| a.rsplit(' ').next())
                .and_then(|n| n.parse::<u64>().ok());
            put_num(&mut f, "commits", commits);
            let line = match (commits, branch) {
                (Some(k), Some(b)) => format!(
                    "{} is ready for review: {k} commit(s) on {b}",
                    issue_ref(ev)
                ),
                _ => msg.to_string(),
            };
            (Class::PrReady, with_link(line, link_in(msg)))
        }
        Kind::AttemptHandedOff => {
            let why = after(msg, "handed to a person: ").map(|w| {
                w.split_once("; work on branch ")
                    .map_or(w, |(why, _)| why)
                    .to_string()
            });
            put(&mut f, "why", why.as_deref());
            put(&mut f, "branch", word_after(msg, "; work on branch "));
            let line = format!(
                "{} needs a person: {}",
                issue_ref(ev),
                why.as_deref().unwrap_or(msg)
            );
            (Class::HandedOff, line)
        }
        Kind::AttemptRefused => {
            let what = if msg.contains("(tampered)") {
                "tampered"
            } else {
                "held"
            };
            f.insert("why".into(), json!(what));
            put(&mut f, "attempt", word_after(msg, " attempt "));
            let line = match what {
                "tampered" => format!(
                    "{} needs a person: its attempt was refused (the agent changed what it must not); nothing pushed",
                    issue_ref(ev)
                ),
                _ => format!(
                    "{} needs a person: its attempt changed sensitive paths and was held, not pushed",
                    issue_ref(ev)
                ),
            };
            (Class::HandedOff, line)
        }
        Kind::AttemptQuarantined => {
            let failures = word_after(msg, "quarantined after ").and_then(|n| n.parse().ok());
            put_num(&mut f, "failures", failures);
            let line = match failures {
                Some(k) => format!(
                    "{} quarantined after {k} failed attempt(s); it waits for a person",
                    issue_ref(ev)
                ),
                None => msg.to_string(),
            };
            (Class::Quarantined, line)
        }
        Kind::FleetBudgetReached => {
            let spend = msg
                .split_once("; in-flight")
                .map(|(w, _)| w.trim_start_matches("daily budget reached: "));
            let until = time_after(msg, "no new claims until ");
            put(&mut f, "spend", spend);
            put(&mut f, "until", until);
            let line = format!(
                "Daily budget reached ({}): no new claims until {}",
                spend.unwrap_or("spend unknown"),
                until.unwrap_or("the next budget day")
            );
            (Class::BudgetReached, line)
        }
        Kind::FleetBudgetResumed => (
            Class::BudgetResumed,
            "A new budget day began: the fleet claims again".to_string(),
        ),
        Kind::FleetAgentPaused => {
            let until = time_after(msg, "no spawns or claims until ");
            let rest = after(msg, "agent paused: ").unwrap_or(msg);
            let (kind, reason) = match rest.split_once(" (") {
                Some((k, r)) => (
                    Some(k),
                    r.rsplit_once("); no spawns").map(|(r, _)| r).or(Some(r)),
                ),
                None => (None, None),
            };
            put(&mut f, "agent_kind", kind);
            put(&mut f, "reason", reason);
            put(&mut f, "until", until);
            let line = format!(
                "Agent paused ({}): nothing new starts until {}{}",
                kind.unwrap_or("account-wide"),
                until.unwrap_or("its reset"),
                reason.map(|r| format!(": {r}")).unwrap_or_default()
            );
            (Class::AgentPaused, line)
        }
        Kind::FleetAgentResumed => {
            put(&mut f, "why", after(msg, "agent resumed: "));
            (
                Class::AgentResumed,
                "Agent resumed: every slot claims again".to_string(),
            )
        }
        Kind::FleetCircuitOpen => {
            let tripped = after(msg, "fleet circuit open: ").and_then(|r| {
                let mut it = r.split(' ');
                Some((
                    it.next()?.parse::<u64>().ok()?,
                    it.nth(1)?.parse::<u64>().ok()?,
                ))
            });
            put_num(&mut f, "tripped", tripped.map(|t| t.0));
            put_num(&mut f, "slots", tripped.map(|t| t.1));
            let reason = msg.split_once("s: ").map(|(_, r)| r);
            put(&mut f, "reason", reason);
            let line = match tripped {
                Some((t, of)) => format!(
                    "Fleet circuit open: {t} of {of} slots failing fast; the fleet is parked{}",
                    reason.map(|r| format!(": {r}")).unwrap_or_default()
                ),
                None => msg.to_string(),
            };
            (Class::FleetCircuitOpen, line)
        }
        Kind::SlotParked if msg.starts_with("fatal host configuration") => {
            f.insert(
                "why".into(),
                json!("its worker exited 78 (host misconfigured): parked without retry"),
            );
            let line = format!(
                "Slot {} parked: its worker says the host is misconfigured (exit 78); it is not retried",
                slot_ref(ev)
            );
            (Class::SlotParked, line)
        }
        Kind::CircuitTrip => {
            let deaths = word_after(msg, "tripped after ").and_then(|n| n.parse().ok());
            put_num(&mut f, "fast_deaths", deaths);
            let probe = word_after(msg, "probe in ").map(|s| s.trim_end_matches('s'));
            put_num(&mut f, "probe_in_s", probe.and_then(|p| p.parse().ok()));
            f.insert("why".into(), json!("its circuit opened"));
            let line = format!(
                "Slot {} parked: {} fast deaths in a row; one probe in {}s",
                slot_ref(ev),
                deaths.map_or("repeated".to_string(), |d: u64| d.to_string()),
                probe.unwrap_or("?")
            );
            (Class::SlotParked, line)
        }
        Kind::FleetPaused => {
            let until = time_after(msg, "fleet paused until ");
            let reason = msg
                .split_once(" (")
                .and_then(|(_, r)| r.rsplit_once("): no claims").map(|(r, _)| r));
            put(&mut f, "until", until);
            put(&mut f, "reason", reason);
            let line = format!(
                "Tracker rate limit: the fleet waits until {}{}",
                until.unwrap_or("the reset"),
                reason.map(|r| format!(" ({r})")).unwrap_or_default()
            );
            (Class::RateLimited, line)
        }
        Kind::SupervisorStart => {
            let before = memory.run.replace((ev.pid, ev.ts.clone()));
            let (pid, since) = before?;
            f.insert("clean".into(), json!(false));
            f.insert("exit".into(), Value::Null);
            put_num(&mut f, "previous_pid", pid.map(|p| p as u64));
            f.insert("previous_start".into(), json!(since));
            f.insert(
                "why".into(),
                json!("the previous supervisor ended without a stop record (killed or crashed)"),
            );
            let line = format!(
                "Supervisor{} died without stopping (killed or crashed); a new one has started",
                pid.map(|p| format!(" pid {p}")).unwrap_or_default()
            );
            (Class::SupervisorStopped, line)
        }
        Kind::SupervisorStop => {
            let code = after(msg, "fleet stopped (exit ")
                .and_then(|r| r.strip_suffix(')'))
                .and_then(|c| c.parse::<i32>().ok());
            let during_boot = msg == "stopped by signal during the boot sweeps";
            if code.is_none() && !during_boot {
                // The stop's progress lines; only its last record ends the run.
                return None;
            }
            memory.run = None;
            let clean = during_boot || code.is_some_and(|c| c == 0 || c > 128);
            f.insert("clean".into(), json!(clean));
            f.insert("exit".into(), code.map_or(Value::Null, |c| json!(c)));
            let line = match (clean, code) {
                (true, Some(c)) => format!("Supervisor stopped (exit {c}): the fleet is down"),
                (true, None) => "Supervisor stopped during its boot sweeps".to_string(),
                (false, c) => format!(
                    "Supervisor stopped uncleanly (exit {}): look at its log",
                    c.map_or("?".to_string(), |c| c.to_string())
                ),
            };
            f.insert("why".into(), json!(msg));
            (Class::SupervisorStopped, line)
        }
        // A halted boot's summary ends the supervisor's run.
        Kind::SupervisorBootSweep if msg.starts_with("boot sweeps halted: ") => {
            memory.run = None;
            f.insert("clean".into(), json!(false));
            f.insert("exit".into(), json!(crate::exit_code::BOOT_HALTED));
            let why = msg.trim_start_matches("boot sweeps halted: ");
            f.insert("why".into(), json!(why));
            (
                Class::SupervisorStopped,
                format!("Supervisor halted at boot (exit 4), nothing spawned: {why}"),
            )
        }
        Kind::ClaimsHostLost => {
            let host = word_after(msg, "host ");
            put(&mut f, "lost_host", host);
            let worker = msg
                .split_once(") went stale")
                .and_then(|(a, _)| a.rsplit_once(" ("))
                .map(|(_, w)| w);
            put(&mut f, "worker", worker);
            let line = format!(
                "Host {} lost: its claim on {} went stale; the issue is back in the queue",
                host.unwrap_or("?"),
                issue_ref(ev)
            );
            (Class::HostLost, line)
        }
        _ => return None,
    };
    let mut fields = Map::new();
    fields.insert("ts".into(), json!(ev.ts));
    fields.insert("kind".into(), json!(ev.kind));
    fields.insert("slot".into(), json!(ev.slot));
    fields.insert("pid".into(), json!(ev.pid));
    fields.insert("issue".into(), json!(ev.issue));
    fields.extend(f);
    fields.insert("msg".into(), json!(ev.msg));
    Some(Notice {
        class,
        line: clip(&crate::text::escape(&line)),
        fields,
        cursor: cursor.to_string(),
    })
}

/// The sample `notify test` sends: every class's shape, one line.
pub fn sample(host: &str) -> Notice {
    let mut fields = Map::new();
    fields.insert("ts".into(), json!(crate::timeutil::now_rfc3339_millis()));
    fields.insert("kind".into(), json!("notify.test"));
    fields.insert("host".into(), json!(host));
    Notice {
        class: Class::Test,
        line: format!(
            "Test message from afk-supervisor on {host}: notifications reach you (nothing happened to the fleet)"
        ),
        fields,
        cursor: String::new(),
    }
}

fn issue_ref(ev: &Record) -> String {
    ev.issue.map_or("An issue".to_string(), |n| format!("#{n}"))
}

fn slot_ref(ev: &Record) -> String {
    ev.slot.map_or("?".to_string(), |s| s.to_string())
}

fn put(f: &mut Map<String, Value>, key: &str, v: Option<&str>) {
    if let Some(v) = v {
        f.insert(key.into(), json!(v));
    }
}

fn put_num(f: &mut Map<String, Value>, key: &str, v: Option<u64>) {
    if let Some(v) = v {
        f.insert(key.into(), json!(v));
    }
}

fn after<'a>(s: &'a str, pat: &str) -> Option<&'a str> {
    s.split_once(pat).map(|(_, r)| r)
}

/// The word after `pat`: up to a space, `,`, `;` or `)`.
fn word_after<'a>(s: &'a str, pat: &str) -> Option<&'a str> {
    let r = after(s, pat)?;
    let end = r.find([' ', ',', ';', ')']).unwrap_or(r.len());
    Some(&r[..end]).filter(|w| !w.is_empty())
}

/// An RFC 3339 time after `pat`.
fn time_after<'a>(s: &'a str, pat: &str) -> Option<&'a str> {
    word_after(s, pat).filter(|t| crate::timeutil::parse_rfc3339(t).is_some())
}

/// The `(https://…)` a text ends with.
fn link_in(s: &str) -> Option<&str> {
    let inner = s.strip_suffix(')')?.rsplit_once(" (")?.1;
    (inner.starts_with("https://") || inner.starts_with("http://")).then_some(inner)
}

fn with_link(line: String, link: Option<&str>) -> String {
    match link {
        Some(l) => format!("{line} {l}"),
        None => line,
    }
}

fn clip(s: &str) -> String {
    if s.len() <= MAX_LINE {
        return s.to_string();
    }
    let mut end = MAX_LINE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: Kind, msg: &str) -> Record {
        Record::now(kind, msg)
    }

    fn one(e: Record) -> Notice {
        classify(&e, "c", &mut Memory::default()).expect("a notice")
    }

    #[test]
    fn names_are_the_configs() {
        let names: Vec<&str> = Class::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names, crate::config::notify_sinks::CLASSES);
        for c in Class::ALL.into_iter().chain([Class::Test]) {
            let json = serde_json::to_value(c).unwrap();
            assert_eq!(json, c.name());
        }
    }

    #[test]
    fn the_workers_records() {
        let n = one(ev(
            Kind::AttemptReady,
            &crate::ledger::ready_text(
                12,
                2,
                "afk/w/12-fix",
                Some("https://github.com/o/r/compare/main...afk/w/12-fix?expand=1"),
            ),
        )
        .issue(12));
        assert_eq!(n.class, Class::PrReady);
        assert_eq!(n.fields["branch"], "afk/w/12-fix");
        assert_eq!(n.fields["commits"], 2);
        assert_eq!(
            n.fields["link"],
            "https://github.com/o/r/compare/main...afk/w/12-fix?expand=1"
        );
        assert!(
            n.line
                .starts_with("#12 is ready for review: 2 commit(s) on afk/w/12-fix https://"),
            "{}",
            n.line
        );
        let n = one(ev(
            Kind::AttemptHandedOff,
            &crate::ledger::handed_off_text(4, "the agent made no commits", Some("afk/x")),
        )
        .issue(4));
        assert_eq!(n.class, Class::HandedOff);
        assert_eq!(n.fields["why"], "the agent made no commits");
        assert_eq!(n.fields["branch"], "afk/x");
        let n = one(ev(
            Kind::AttemptQuarantined,
            &crate::ledger::quarantined_text(7, 3),
        )
        .issue(7));
        assert_eq!(n.class, Class::Quarantined);
        assert_eq!(n.fields["failures"], 3);
        assert_eq!(n.fields["issue"], 7);
        let n = one(ev(
            Kind::ClaimsHostLost,
            &crate::claim::stale::host_lost_text(9, "sup-1-slot-0-1", "box-2-0b82b0dd", 7200),
        ));
        assert_eq!(n.fields["lost_host"], "box-2-0b82b0dd");
        assert_eq!(n.fields["worker"], "sup-1-slot-0-1");
        // A cluster's lost lease reads the same.
        let n = one(ev(
            Kind::ClaimsHostLost,
            &crate::claim::stale::host_lost_by_lease_text(9, "w1", "box-3", 12),
        ));
        assert_eq!(n.fields["lost_host"], "box-3");
        assert_eq!(n.fields["worker"], "w1");
    }

    #[test]
    fn the_supervisors_records() {
        let n = one(ev(
            Kind::FleetBudgetReached,
            "daily budget reached: spend today $1.20 of $1.00; in-flight attempts finish, no new claims until 2026-05-02T00:00:00Z",
        ));
        assert_eq!(n.fields["spend"], "spend today $1.20 of $1.00");
        assert_eq!(n.fields["until"], "2026-05-02T00:00:00Z");
        let n = one(ev(
            Kind::FleetAgentPaused,
            "agent paused: usage limit (You've hit your limit · resets 1:48pm (UTC)); no spawns or claims until 2026-05-01T13:48:00Z, then one probe",
        ));
        assert_eq!(n.fields["agent_kind"], "usage limit");
        assert_eq!(
            n.fields["reason"],
            "You've hit your limit · resets 1:48pm (UTC)"
        );
        assert_eq!(n.fields["until"], "2026-05-01T13:48:00Z");
        let n = one(ev(
            Kind::FleetPaused,
            "fleet paused until 2026-05-01T10:00:00Z (rate limited: API rate limit exceeded): no claims, queue checks, sweep writes or belts until then",
        ));
        assert_eq!(n.class, Class::RateLimited);
        assert_eq!(n.fields["until"], "2026-05-01T10:00:00Z");
        assert_eq!(n.fields["reason"], "rate limited: API rate limit exceeded");
        let n = one(ev(
            Kind::FleetCircuitOpen,
            "fleet circuit open: 2 of 3 slots tripped their circuits within 90s; the fleet is parked and one slot probes in 60s: last exits: slot 0 exit 1",
        ));
        assert_eq!(
            (n.fields["tripped"].clone(), n.fields["slots"].clone()),
            (json!(2), json!(3))
        );
        assert_eq!(n.fields["reason"], "last exits: slot 0 exit 1");
        let n = one(ev(
            Kind::CircuitTrip,
            "circuit open: slot 1 tripped after 5 fast deaths within 90s, probe in 60s (step=0)",
        )
        .slot(1));
        assert_eq!(n.class, Class::SlotParked);
        assert_eq!(n.fields["probe_in_s"], 60);
        assert!(
            classify(
                &ev(
                    Kind::SlotParked,
                    "slot 2 back within the target and still parked"
                ),
                "c",
                &mut Memory::default()
            )
            .is_none()
        );
    }

    #[test]
    fn a_start_without_a_stop_is_a_supervisor_that_died() {
        let mut m = Memory::default();
        let mut see = |e: Record| classify(&e, "c", &mut m);
        let start = ev(Kind::SupervisorStart, "supervisor started").pid(10);
        assert!(see(start.clone()).is_none());
        let progress = ev(Kind::SupervisorStop, "stopping fleet (SIGTERM): 2 workers");
        assert!(see(progress).is_none());
        let stopped = see(ev(Kind::SupervisorStop, "fleet stopped (exit 143)")).unwrap();
        assert_eq!(stopped.fields["clean"], true);
        assert_eq!(stopped.fields["exit"], 143);
        assert!(see(start).is_none());
        // Killed: the next start says so.
        let next = see(ev(Kind::SupervisorStart, "supervisor started").pid(11)).unwrap();
        assert_eq!(next.class, Class::SupervisorStopped);
        assert_eq!(next.fields["clean"], false);
        assert_eq!(next.fields["previous_pid"], 10);
        let failed = see(ev(Kind::SupervisorStop, "fleet stopped (exit 1)")).unwrap();
        assert_eq!(failed.fields["clean"], false);
    }
}
