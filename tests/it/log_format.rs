//! `--log-format json`: the `tracing` diagnostics become JSON lines on stderr, while the
//! event log stays the SPEC's TOONL.

use std::fs;

use crate::support::fleet::{self, FAST_TIMING, Fleet};
use afk_supervisor::event_log::Kind;

#[test]
fn log_format_json_writes_json_diagnostics_and_the_event_log_stays_toonl() {
    let mut f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    f.extra_env
        .push(("RUST_LOG".into(), "afk_supervisor=debug".into()));
    f.start(&["--log-format", "json", "run", "--workers", "1"]);
    f.wait_workers(1);
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    fleet::kill(f.sup_pid(), nix::sys::signal::Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143));

    let stderr = fs::read_to_string(f.file("supervisor-0.err")).unwrap();
    let mut json = Vec::new();
    // Every line is a JSON object: the event echo went to stdout, and values are values,
    // never Rust debug text (`Some(Some(0))`).
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        json.push(v);
    }
    assert!(!stderr.contains("Some("), "{stderr}");
    assert!(
        json.iter()
            .filter(|v| v["fields"]["message"] == "command finished")
            .all(|v| v["fields"]["status"].is_number() || v["fields"]["status"].is_null()),
        "{stderr}"
    );
    assert!(!json.is_empty(), "no JSON diagnostics on stderr:\n{stderr}");
    for v in &json {
        assert!(v["timestamp"].is_string(), "{v}");
        assert!(v["level"].is_string(), "{v}");
        assert!(
            v["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("afk_supervisor")),
            "{v}"
        );
        assert!(v["fields"].is_object(), "{v}");
    }
    assert!(
        json.iter().any(|v| v["level"] == "DEBUG"),
        "RUST_LOG=debug let no debug event through:\n{stderr}"
    );
    assert!(
        json.iter()
            .any(|v| v["fields"]["message"] == "boot suite finished"),
        "{stderr}"
    );

    // The event log is TOONL: its header first, every line a record.
    let log = fs::read_to_string(f.layout.event_log()).unwrap();
    assert_eq!(
        log.lines().next(),
        Some("[]{ts,kind,slot,pid,issue,msg}:"),
        "{log}"
    );
    assert!(!log.lines().any(|l| l.starts_with('{')), "{log}");
    let events = afk_supervisor::event_log::read_events(&f.layout.event_log()).unwrap();
    assert!(events.iter().any(|e| e.kind == Kind::SupervisorStart));
    assert!(events.iter().any(|e| e.kind == Kind::SlotSpawn));
}

#[test]
fn an_unknown_log_format_is_a_usage_error() {
    let f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    let out = f.run_cmd(&["--log-format", "xml", "status"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("xml") && err.contains("json"), "{err}");
}
