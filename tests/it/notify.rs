//! Telling the humans (issue 51, `docs/SPEC.md` §11.21): a real supervisor with
//! `[[notify]]` sinks and a receiver on 127.0.0.1 (`support::receiver`) that records what
//! arrives. Records are the fleet's own (a real fleet's quarantine, budget stop and stop)
//! or appended to the log as the fleet's writers append them, with the fleet's own texts.

use std::collections::BTreeMap;
use std::io::Write;

use afk_supervisor::event_log::{self, Record};
use afk_supervisor::{claim, ledger};

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT};
use crate::support::receiver::{Answer, Receiver};
use crate::support::wait_until;
use afk_supervisor::event_log::Kind;

/// `[[notify]]` for a webhook at `url`, with `extra` lines.
fn webhook(name: &str, url: &str, extra: &str) -> String {
    format!("[[notify]]\nname = \"{name}\"\nkind = \"webhook\"\nurl = \"{url}\"\n{extra}\n")
}

/// A fleet of one `worker` with `sinks`, started past its boot sweeps, its notifier
/// placed on the log (its `notify.start` line written before them).
fn started(worker: &str, sinks: &str) -> Fleet {
    let mut f = Fleet::new(worker, &format!("{FAST_TIMING}\n{sinks}"));
    f.start(&["--workers", "1"]);
    f.wait_events(Kind::NotifyStart, 1);
    f.wait_events(Kind::SlotSpawn, 1);
    f
}

/// Appends one record as a worker or the claims belt does (one line, `append_event`).
fn plant(f: &Fleet, kind: Kind, msg: &str, issue: Option<u64>, slot: Option<u64>) {
    let mut ev = Record::now(kind, msg);
    ev.issue = issue;
    ev.slot = slot;
    event_log::append_event(&f.layout.event_log(), &ev).unwrap();
}

fn by_class(msgs: &[serde_json::Value]) -> BTreeMap<String, Vec<serde_json::Value>> {
    let mut m: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for v in msgs {
        m.entry(v["class"].as_str().unwrap_or("?").to_string())
            .or_default()
            .push(v.clone());
    }
    m
}

/// The messages by class, asserting they are exactly `classes`, each once.
fn each_once(msgs: &[serde_json::Value], classes: &[&str]) -> BTreeMap<String, serde_json::Value> {
    let by = by_class(msgs);
    let names: Vec<&str> = by.keys().map(String::as_str).collect();
    assert_eq!(names, classes, "{msgs:#?}");
    assert!(by.values().all(|v| v.len() == 1), "{msgs:#?}");
    by.into_iter().map(|(k, mut v)| (k, v.remove(0))).collect()
}

fn wait_messages(rx: &Receiver, n: usize, f: &Fleet) -> Vec<serde_json::Value> {
    let ok = wait_until(WAIT, || rx.messages().len() >= n);
    assert!(
        ok,
        "waited for {n} messages, got {:#?}\nlog:\n{}",
        rx.messages(),
        f.dump()
    );
    rx.messages()
}

/// Every class once, with its fields: the records a fleet writes for each (the worker's
/// and the belt's through their own text builders), then a real stop.
#[test]
fn every_class_arrives_once_with_its_fields() {
    let rx = Receiver::ok();
    let mut f = started("exec sleep 1000\n", &webhook("hook", &rx.url(), ""));
    let link = "https://github.com/o/r/compare/main...afk/w/12-fix?expand=1";
    let planted: [(Kind, String, Option<u64>, Option<u64>); 11] = [
        (
            Kind::AttemptReady,
            ledger::ready_text(12, 2, "afk/w/12-fix", Some(link)),
            Some(12),
            Some(0),
        ),
        (
            Kind::AttemptHandedOff,
            ledger::handed_off_text(13, "the agent made no commits", None),
            Some(13),
            Some(0),
        ),
        (
            Kind::AttemptQuarantined,
            ledger::quarantined_text(14, 3),
            Some(14),
            Some(0),
        ),
        (
            Kind::FleetBudgetReached,
            "daily budget reached: spend today $1.20 of $1.00; in-flight attempts finish, no new claims until 2030-01-02T00:00:00Z".into(),
            None,
            None,
        ),
        (
            Kind::FleetBudgetResumed,
            "a new budget day began: the fleet claims again".into(),
            None,
            None,
        ),
        (
            Kind::FleetAgentPaused,
            "agent paused: usage limit (You've hit your 5-hour limit · resets 1:48pm (UTC)); no spawns or claims until 2030-01-01T13:48:00Z, then one probe".into(),
            None,
            None,
        ),
        (
            Kind::FleetAgentResumed,
            "agent resumed: the probe in slot 0 ran the agent; every slot claims again".into(),
            None,
            None,
        ),
        (
            Kind::FleetCircuitOpen,
            "fleet circuit open: 2 of 2 slots tripped their circuits within 60s; the fleet is parked and one slot probes in 1s: last exits: slot 0 exit 1, slot 1 exit 1".into(),
            None,
            None,
        ),
        (
            Kind::SlotParked,
            afk_supervisor::supervisor::core::log_texts::fatal_parked(1),
            None,
            Some(1),
        ),
        (
            Kind::FleetPaused,
            "fleet paused until 2030-01-01T10:00:00Z (rate limited: API rate limit exceeded): no claims, queue checks, sweep writes or belts until then".into(),
            None,
            None,
        ),
        (
            Kind::ClaimsHostLost,
            claim::stale::host_lost_text(15, "sup-9-slot-0-1", "box-2-0b82b0dd", 7200),
            Some(15),
            None,
        ),
    ];
    // One thread more than a fleet without sinks, whatever the number of records, and it
    // leaves the loop's signals to the loop as every thread of the supervisor does.
    let tasks = |name: &str| -> Vec<String> {
        std::fs::read_dir(format!("/proc/{}/task", f.sup_pid()))
            .unwrap()
            .flatten()
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name)
            })
            .map(|t| std::fs::read_to_string(t.path().join("status")).unwrap())
            .collect()
    };
    let sigblk = |status: &str| {
        status
            .lines()
            .find(|l| l.starts_with("SigBlk:"))
            .unwrap()
            .to_string()
    };
    for (kind, msg, issue, slot) in &planted {
        plant(&f, kind.clone(), msg, *issue, *slot);
    }
    let notifier = tasks("afk-notify-out");
    assert_eq!(notifier.len(), 1);
    // The loop's thread blocks every signal for the instant of each spawn: compared at
    // rest, within a deadline.
    let main = || std::fs::read_to_string(format!("/proc/{}/status", f.sup_pid())).unwrap();
    assert!(
        wait_until(WAIT, || sigblk(&notifier[0]) == sigblk(&main())),
        "{} vs {}",
        sigblk(&notifier[0]),
        sigblk(&main())
    );
    wait_messages(&rx, 11, &f);
    f.stop_fleet();
    let msgs = wait_messages(&rx, 12, &f);
    let classes = each_once(
        &msgs,
        &[
            "agent-paused",
            "agent-resumed",
            "budget-reached",
            "budget-resumed",
            "fleet-circuit-open",
            "handed-off",
            "host-lost",
            "pr-ready",
            "quarantined",
            "rate-limited",
            "slot-parked",
            "supervisor-stopped",
        ],
    );
    let one = |c: &str| classes[c].clone();
    let repo = f.repo.file_name().unwrap().to_string_lossy().into_owned();
    for m in &msgs {
        let text = m["text"].as_str().unwrap();
        assert!(text.starts_with(&format!("{repo}: ")), "{m}");
        assert!(!text.contains('\n'), "{m}");
        assert_eq!(m["count"], 1, "{m}");
        assert!(m["id"].as_str().unwrap().starts_with("e1-"), "{m}");
    }
    let pr = one("pr-ready");
    assert_eq!(
        (
            pr["issue"].clone(),
            pr["branch"].clone(),
            pr["link"].clone(),
            pr["commits"].clone()
        ),
        (
            serde_json::json!(12),
            serde_json::json!("afk/w/12-fix"),
            serde_json::json!(link),
            serde_json::json!(2)
        )
    );
    assert!(pr["text"].as_str().unwrap().contains(link), "{pr}");
    assert_eq!(one("handed-off")["why"], "the agent made no commits");
    assert_eq!(one("quarantined")["failures"], 3);
    assert_eq!(one("quarantined")["issue"], 14);
    assert_eq!(one("budget-reached")["until"], "2030-01-02T00:00:00Z");
    assert_eq!(one("budget-reached")["spend"], "spend today $1.20 of $1.00");
    assert_eq!(one("agent-paused")["until"], "2030-01-01T13:48:00Z");
    assert_eq!(one("agent-paused")["agent_kind"], "usage limit");
    assert_eq!(one("fleet-circuit-open")["tripped"], 2);
    assert_eq!(one("slot-parked")["slot"], 1);
    assert_eq!(one("rate-limited")["until"], "2030-01-01T10:00:00Z");
    assert_eq!(one("host-lost")["lost_host"], "box-2-0b82b0dd");
    let stopped = one("supervisor-stopped");
    assert_eq!(
        (stopped["clean"].clone(), stopped["exit"].clone()),
        (serde_json::json!(true), serde_json::json!(143))
    );
    assert!(rx.requests().iter().all(|r| r.method == "POST"
        && r.path == "/hook"
        && r.header("content-type") == Some("application/json")));
}

/// A sink answering 500 three times and then 200 is sent the message four times, the
/// same id each time, and it arrives (is answered 200) once; nothing is logged as failed.
#[test]
fn a_sink_failing_three_times_then_answering_gets_the_message_once() {
    let rx = Receiver::start(|i| Answer::Status(if i < 3 { 500 } else { 200 }));
    let mut f = started("exec sleep 1000\n", &webhook("flaky", &rx.url(), ""));
    plant(
        &f,
        Kind::AttemptQuarantined,
        &ledger::quarantined_text(3, 3),
        Some(3),
        None,
    );
    wait_messages(&rx, 4, &f);
    // Its outbox empties once the 200 came (the state is written after each send).
    let state = f.layout.state().join("notify.json");
    let settled = wait_until(WAIT, || {
        std::fs::read_to_string(&state).is_ok_and(|s| {
            let v: serde_json::Value = serde_json::from_str(&s).unwrap_or_default();
            v["sinks"]["flaky"]["outbox"]
                .as_array()
                .is_some_and(|a| a.is_empty())
        })
    });
    assert!(
        settled,
        "{}",
        std::fs::read_to_string(&state).unwrap_or_default()
    );
    f.stop_fleet();
    let msgs: Vec<_> = rx
        .messages()
        .into_iter()
        .filter(|m| m["class"] == "quarantined")
        .collect();
    assert_eq!(msgs.len(), 4, "three 500s and one 200: {msgs:#?}");
    assert!(msgs.iter().all(|m| m["id"] == msgs[0]["id"]), "{msgs:#?}");
    assert_eq!(f.count(Kind::NotifyFailed), 0, "{}", f.dump());
}

/// A sink that never answers: while the notifier waits on it, the fleet's respawns go
/// on as before it was planted (counted in two windows of the same length), and the
/// message is given up with exactly one `notify.failed` line.
#[test]
fn a_sink_that_never_answers_delays_no_respawn_and_gives_up_with_one_line() {
    let rx = Receiver::start(|_| Answer::Never);
    let mut f = Fleet::new(
        "sleep 1.2\nexit 3\n",
        &format!(
            "{FAST_TIMING}\n{}",
            webhook("stuck", &rx.url(), "timeout_s = 2\nretry_for_s = 5")
        ),
    );
    f.start(&["--workers", "2"]);
    f.wait_events(Kind::NotifyStart, 1);
    // A baseline of respawns first.
    f.wait_events(Kind::SlotSpawn, 8);
    let planted_at = std::time::SystemTime::now();
    plant(
        &f,
        Kind::AttemptQuarantined,
        &ledger::quarantined_text(8, 3),
        Some(8),
        None,
    );
    let failed = f.wait_events(Kind::NotifyFailed, 1);
    let failed_at = afk_supervisor::timeutil::parse_rfc3339(&failed[0].ts).unwrap();
    let window = failed_at.duration_since(planted_at).unwrap();
    let spawns_in = |from: std::time::SystemTime, to: std::time::SystemTime| {
        f.events_of(Kind::SlotSpawn)
            .iter()
            .filter_map(|e| afk_supervisor::timeutil::parse_rfc3339(&e.ts))
            .filter(|t| *t >= from && *t < to)
            .count()
    };
    let during = spawns_in(planted_at, failed_at);
    let before = spawns_in(planted_at - window, planted_at);
    f.stop_fleet();
    assert!(
        rx.requests().len() >= 2,
        "tried more than once: {:?}",
        rx.requests().len()
    );
    assert!(
        during + 1 >= before,
        "respawns while the sink hung: {during}, in the same time before: {before}\n{}",
        f.dump()
    );
    // One line per message given up, never one per retry: the quarantine's, and the
    // stop's own message when its retries ran out within the stop's drain.
    let failed = f.events_of(Kind::NotifyFailed);
    let quarantine: Vec<_> = failed
        .iter()
        .filter(|e| e.msg.contains("the quarantined message"))
        .collect();
    assert_eq!(quarantine.len(), 1, "{}", f.dump());
    assert!(
        quarantine[0].msg.starts_with("sink stuck: gave up after "),
        "{}",
        quarantine[0].msg
    );
    assert_eq!(quarantine[0].issue, Some(8));
    assert!(
        failed
            .iter()
            .all(|e| e.msg.contains("the quarantined message")
                || e.msg.contains("the supervisor-stopped message")),
        "{}",
        f.dump()
    );
}

/// Across restarts (a clean stop, a SIGKILL) every record is told once: what came while
/// no supervisor ran is sent at the next start, nothing sent before is sent again, and
/// the start after the kill says the last supervisor died without stopping.
#[test]
fn a_restart_sends_nothing_twice() {
    let rx = Receiver::ok();
    let sink = webhook("hook", &rx.url(), "min_interval_s = 0");
    let mut f = started("exec sleep 1000\n", &sink);
    let quarantine = |f: &Fleet, n: u64| {
        plant(
            f,
            Kind::AttemptQuarantined,
            &ledger::quarantined_text(n, 3),
            Some(n),
            None,
        )
    };
    quarantine(&f, 1);
    wait_messages(&rx, 1, &f);
    f.stop_fleet();
    wait_messages(&rx, 2, &f);
    // A late worker's record while nothing runs.
    quarantine(&f, 2);
    f.start(&["--workers", "1"]);
    f.wait_events(Kind::NotifyStart, 2);
    wait_messages(&rx, 3, &f);
    quarantine(&f, 3);
    wait_messages(&rx, 4, &f);
    // Its delivery recorded (the state, written right after each answer, holds a cursor
    // at or past the message's record), then killed: no stop record, nothing sent for it.
    let sent = wait_messages(&rx, 4, &f)[3]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let at = |c: &str| {
        let p: Vec<u64> = c
            .split('-')
            .skip(1)
            .map(|x| u64::from_str_radix(x, 16).unwrap_or(0))
            .collect();
        (p[0], p[2])
    };
    let state = f.layout.state().join("notify.json");
    assert!(wait_until(WAIT, || {
        let v: serde_json::Value = std::fs::read_to_string(&state)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default();
        v["cursor"].as_str().is_some_and(|c| {
            let (ino, off) = at(c);
            ino == at(&sent).0 && off >= at(&sent).1
        })
    }));
    let pid = f.sup_pid();
    crate::support::fleet::kill(pid, nix::sys::signal::Signal::SIGKILL);
    f.wait_exit();
    f.start(&["--workers", "1"]);
    f.wait_events(Kind::NotifyStart, 3);
    wait_messages(&rx, 5, &f);
    f.stop_fleet();
    let msgs = wait_messages(&rx, 6, &f);
    let ids: std::collections::HashSet<&str> =
        msgs.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), msgs.len(), "an id twice: {msgs:#?}");
    let classes = by_class(&msgs);
    let issues: Vec<u64> = classes["quarantined"]
        .iter()
        .map(|m| m["issue"].as_u64().unwrap())
        .collect();
    assert_eq!(issues, [1, 2, 3], "{msgs:#?}");
    let stops: Vec<bool> = classes["supervisor-stopped"]
        .iter()
        .map(|m| m["clean"].as_bool().unwrap())
        .collect();
    assert_eq!(stops, [true, false, true], "{msgs:#?}");
    // Nothing more comes (the stop's message was the last).
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(rx.messages().len(), 6, "{:#?}", rx.messages());
}

/// 200 quarantines written at once (as many workers might) are one message per interval:
/// every issue counted, the first ten named in the line.
#[test]
fn a_burst_of_two_hundred_quarantines_is_coalesced() {
    let rx = Receiver::ok();
    let mut f = started(
        "exec sleep 1000\n",
        &webhook("hook", &rx.url(), "min_interval_s = 3"),
    );
    let mut rows = String::new();
    for n in 1..=200 {
        rows.push_str(&event_log::encode_row(
            &Record::now(Kind::AttemptQuarantined, ledger::quarantined_text(n, 3)).issue(n),
        ));
    }
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(f.layout.event_log())
        .unwrap();
    log.write_all(rows.as_bytes()).unwrap();
    let all_counted = wait_until(WAIT, || {
        rx.messages()
            .iter()
            .filter(|m| m["class"] == "quarantined")
            .map(|m| m["count"].as_u64().unwrap())
            .sum::<u64>()
            == 200
    });
    assert!(all_counted, "{:#?}", rx.messages());
    f.stop_fleet();
    let q: Vec<_> = rx
        .messages()
        .into_iter()
        .filter(|m| m["class"] == "quarantined")
        .collect();
    assert!(q.len() <= 2, "at most the first read and one more: {q:#?}");
    let last = q.last().unwrap();
    if q.len() == 1 {
        assert!(
            last["text"].as_str().unwrap().ends_with(
                "200 issues quarantined: #1, #2, #3, #4, #5, #6, #7, #8, #9, #10 and 190 more"
            ),
            "{last}"
        );
    }
    assert_eq!(last["issues"].as_array().unwrap().len(), 50, "{last}");
}

/// A command sink gets the message as JSON on stdin and its fields as `AFK_NOTIFY_*`.
#[test]
fn the_command_sink_gets_the_json_on_stdin() {
    let mut f = Fleet::new("exec sleep 1000\n", FAST_TIMING);
    let out = f.file("stdin.jsonl");
    let env_out = f.file("env.txt");
    let script = f.file("notify.sh");
    std::fs::write(
        &script,
        format!(
            "cat >> '{}'\necho \"$AFK_NOTIFY_CLASS $AFK_NOTIFY_ISSUE $AFK_NOTIFY_FAILURES $AFK_NOTIFY_SINK\" >> '{}'\n",
            out.display(),
            env_out.display()
        ),
    )
    .unwrap();
    let cfg = std::fs::read_to_string(f.repo.join(".red/afk-supervisor.toml")).unwrap();
    f.write_config(&format!(
        "{cfg}\n[[notify]]\nname = \"script\"\nkind = \"command\"\ncommand = [\"sh\", \"{}\"]\nevents = [\"quarantined\"]\n",
        script.display()
    ));
    f.start(&["--workers", "1"]);
    f.wait_events(Kind::NotifyStart, 1);
    plant(
        &f,
        Kind::AttemptQuarantined,
        &ledger::quarantined_text(5, 2),
        Some(5),
        None,
    );
    assert!(
        wait_until(WAIT, || crate::support::fleet::read(&env_out)
            .lines()
            .count()
            == 1),
        "{}",
        f.dump()
    );
    f.stop_fleet();
    let text = crate::support::fleet::read(&out);
    assert_eq!(text.lines().count(), 1, "only the class asked for: {text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["class"], "quarantined");
    assert_eq!(v["issue"], 5);
    assert_eq!(v["failures"], 2);
    assert!(
        v["text"]
            .as_str()
            .unwrap()
            .contains("#5 quarantined after 2 failed attempt(s)")
    );
    assert_eq!(
        crate::support::fleet::read(&env_out).trim(),
        "quarantined 5 2 script"
    );
}

/// A header's value comes from the variable the config names: the receiver gets it, and
/// it is in neither the event log, the notifier's state nor `config`'s output; without
/// the variable the fleet does not start.
#[test]
fn a_secret_header_comes_from_the_environment_and_is_never_written() {
    const SECRET: &str = "Bearer s3cr3t-9f2c1e";
    let rx = Receiver::ok();
    let sinks = webhook(
        "hook",
        &rx.url(),
        "headers_from_env = { Authorization = \"AFK_TEST_NOTIFY_TOKEN\" }",
    );
    let mut f = Fleet::new("exec sleep 1000\n", &format!("{FAST_TIMING}\n{sinks}"));
    let refused = f.run_cmd(&["run", "--workers", "1"]);
    assert_eq!(refused.status.code(), Some(78), "{refused:?}");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(
            "headers_from_env.Authorization names $AFK_TEST_NOTIFY_TOKEN, which is not set"
        ),
        "{err}"
    );
    f.extra_env
        .push(("AFK_TEST_NOTIFY_TOKEN".into(), SECRET.into()));
    f.start(&["--workers", "1"]);
    f.wait_events(Kind::NotifyStart, 1);
    plant(
        &f,
        Kind::AttemptQuarantined,
        &ledger::quarantined_text(4, 3),
        Some(4),
        None,
    );
    wait_messages(&rx, 1, &f);
    let config = f.run_cmd(&["config"]);
    f.stop_fleet();
    wait_messages(&rx, 2, &f);
    assert!(
        rx.requests()
            .iter()
            .all(|r| r.header("authorization") == Some(SECRET))
    );
    let shown = String::from_utf8_lossy(&config.stdout);
    assert!(
        shown.contains(
            "notify[0].headers_from_env = { \"Authorization\" = \"AFK_TEST_NOTIFY_TOKEN\" }"
        ),
        "{shown}"
    );
    let log = std::fs::read_to_string(f.layout.event_log()).unwrap();
    let state = std::fs::read_to_string(f.layout.state().join("notify.json")).unwrap();
    for (what, text) in [
        ("config", shown.as_ref()),
        ("log", log.as_str()),
        ("state", state.as_str()),
    ] {
        assert!(
            !text.contains("s3cr3t"),
            "the secret is in the {what}: {text}"
        );
    }
}

/// `notify test` sends each sink one sample and says what it answered.
#[test]
fn notify_test_reports_what_each_sink_answered() {
    let good = Receiver::ok();
    let bad = Receiver::start(|_| Answer::Status(404));
    let f = Fleet::new(
        "exec sleep 1000\n",
        &format!(
            "{FAST_TIMING}\n{}[[notify]]\nname = \"phone\"\nkind = \"ntfy\"\nurl = \"{}\"\n",
            webhook("good", &good.url(), ""),
            bad.url()
        ),
    );
    let out = f.run_cmd(&["notify", "test"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text.contains("good: delivered ("), "{text}");
    assert!(text.contains("HTTP 200"), "{text}");
    assert!(
        text.contains("phone: not delivered (") && text.contains("HTTP 404"),
        "{text}"
    );
    let m = &good.messages()[0];
    assert_eq!(m["class"], "test");
    assert!(
        m["text"]
            .as_str()
            .unwrap()
            .contains("Test message from afk-supervisor")
    );
    // ntfy: the line as the body, its title and tags as headers.
    let r = &bad.requests()[0];
    assert!(
        r.text().contains("Test message from afk-supervisor"),
        "{}",
        r.text()
    );
    assert!(
        r.header("title").is_some_and(|t| t.ends_with(": test")),
        "{r:?}"
    );
    let one = f.run_cmd(&["notify", "test", "--sink", "good"]);
    assert_eq!(one.status.code(), Some(0), "{one:?}");
    assert_eq!(good.messages().len(), 2);
    let unknown = f.run_cmd(&["notify", "test", "--sink", "nope"]);
    assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("sinks: good, phone"));
}

/// A real fleet on the local tracker (one worker, a fake `claude` replaying the recorded
/// runs): issue 1's work is ready for review, issue 2 fails and is quarantined, and their
/// cost reaches the day's budget; then the stop. The receiver gets each of the four once,
/// from the records the fleet wrote itself.
#[test]
fn a_real_fleet_tells_of_ready_work_a_quarantine_its_budget_and_its_stop() {
    use crate::agents_spend::{CLAUDE, agent_fleet};
    let rx = Receiver::ok();
    let script = format!(
        "if [ \"$RED_AFK_ISSUE\" = 2 ]; then\n\
           cat \"$AFK_TEST_CORPUS/{CLAUDE}/max-turns.stdout\"\n\
           exit 1\n\
         fi\n\
         echo \"notes for #$RED_AFK_ISSUE\" > \"notes-$RED_AFK_ISSUE.md\"\n\
         git add . && git commit -qm \"notes for #$RED_AFK_ISSUE\"\n\
         cat \"$AFK_TEST_CORPUS/{CLAUDE}/success.stdout\"\n"
    );
    let mut f = agent_fleet(
        "claude",
        &script,
        1,
        3,
        &format!(
            "[worker]\nmax_failed_attempts = 1\n\n[budget]\nusd_per_day = 0.015\n\n{}",
            webhook("hook", &rx.url(), "")
        ),
    );
    f.start(&[]);
    wait_messages(&rx, 3, &f);
    f.stop_fleet();
    let msgs = wait_messages(&rx, 4, &f);
    // What the receiver got, for the notes (`-- --nocapture`).
    for m in &msgs {
        eprintln!("received: {m}");
    }
    let classes = each_once(
        &msgs,
        &[
            "budget-reached",
            "pr-ready",
            "quarantined",
            "supervisor-stopped",
        ],
    );
    let pr = &classes["pr-ready"];
    assert_eq!(pr["issue"], 1);
    assert_eq!(pr["commits"], 1);
    assert!(
        pr["branch"].as_str().unwrap().starts_with("afk/")
            && pr["branch"].as_str().unwrap().contains("/1-issue-1"),
        "{pr}"
    );
    let q = &classes["quarantined"];
    assert_eq!(
        (q["issue"].clone(), q["failures"].clone()),
        (serde_json::json!(2), serde_json::json!(1))
    );
    let b = &classes["budget-reached"];
    assert!(b["spend"].as_str().unwrap().contains("of $0.01"), "{b}");
    assert!(b["until"].as_str().unwrap().ends_with("T00:00:00Z"), "{b}");
    assert_eq!(classes["supervisor-stopped"]["clean"], true);
}
