//! What the supervisor adds to its heartbeat for the live view, read back through
//! `status --json` from a real fleet: the issue's title from the attempt's state file, the
//! CPU rate of a computing worker's tree against a sleeping one, each slot's last event,
//! the boot suite and the tracker; and an open circuit's reason in words with its probe time.

use crate::support::fleet::{Fleet, StatusExit, WAIT};
use crate::support::{fleet, wait_until};
use afk_supervisor::event_log::Kind;

/// Short usage reads (every `stall_s / 4` = 2 s) and a stall kill far away.
const TIMING: &str = "[timing]\ntick_s = 1\nfast_death_s = 1\ncircuit_k = 3\n\
circuit_window_s = 60\nhalf_open_base_s = 600\nhalf_open_cap_s = 600\nstop_grace_s = 2\n\
stall_s = 8\nstall_kill_s = 1200\n";

#[test]
fn status_shows_the_title_the_cpu_rate_the_last_event_the_boot_suite_and_the_tracker() {
    // Slot 0 records an attempt on #17 with its title and computes; slot 1 sleeps.
    let script = r#"if [ "$RED_AFK_SLOT" = 0 ]; then
  d="$PWD/.red/tmp/workers/$RED_AFK_WORKER_ID/17-a1"
  mkdir -p "$d"
  printf '{"version":1,"current":{"number":17,"title":"Fix the parser"}}' > "$d/afk.state.json"
  while :; do :; done
fi
exec sleep 600
"#;
    let mut f = Fleet::new(script, TIMING);
    let sup = f.start(&["--workers", "2"]);
    f.wait_workers(2);
    let mut v = serde_json::Value::Null;
    let shown = wait_until(WAIT, || {
        v = f.status_json(StatusExit::Any);
        v["slots"][0]["title"] == "Fix the parser"
            && v["slots"][0]["cpu_permille"]
                .as_u64()
                .is_some_and(|c| c > 0)
            && v["slots"][1]["cpu_permille"] == 0
    });
    assert!(shown, "{v:#}");
    assert_eq!(v["slots"][0]["issue"], 17);
    assert!(v["slots"][1]["title"].is_null(), "{v:#}");
    assert_eq!(v["fleet"]["tracker_kind"], "local", "{v:#}");
    assert_eq!(v["fleet"]["boot_suite"]["result"], "clean", "{v:#}");
    assert!(v["fleet"]["boot_suite"]["elapsed_ms"].is_u64(), "{v:#}");
    assert_eq!(v["fleet"]["idle"], 0);
    assert!(v["supervisor"]["uptime_s"].is_u64(), "{v:#}");
    for i in 0..2 {
        let last = &v["slots"][i]["last_event"];
        assert_eq!(last["slot"], i, "{v:#}");
        assert!(
            last["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("slot.")),
            "{v:#}"
        );
    }
    // And the plain table says the same in words.
    let text = String::from_utf8_lossy(&f.run_cmd(&["status"]).stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("0 ") && l.ends_with("#17 Fix the parser") && l.contains('%')),
        "{text}"
    );
    assert!(text.contains("boot suite: clean "), "{text}");
    assert!(text.contains("tracker: local"), "{text}");
    fleet::kill(sup, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143));
}

#[test]
fn an_open_circuit_says_how_many_fast_deaths_and_when_the_probe_is_due() {
    let mut f = Fleet::new("exit 1\n", TIMING);
    let sup = f.start(&["--workers", "1"]);
    let mut v = serde_json::Value::Null;
    let parked = wait_until(WAIT, || {
        v = f.status_json(StatusExit::Any);
        v["slots"][0]["state"] == "parked"
    });
    assert!(parked, "{v:#}");
    assert_eq!(
        v["slots"][0]["reason"], "circuit open: 3 fast deaths within 60s",
        "{v:#}"
    );
    let probe = v["slots"][0]["probe_epoch"].as_u64().expect("probe_epoch");
    let now = v["epoch"].as_u64().unwrap();
    // half_open_base_s = 600: due later, at most ten minutes on.
    assert!(probe > now && probe <= now + 600, "{v:#}");
    assert_eq!(v["fleet"]["parked"], 1);
    let text = String::from_utf8_lossy(&f.run_cmd(&["status"]).stdout).into_owned();
    assert!(
        text.lines().any(|l| l
            .trim()
            .strip_prefix("parked: circuit open: 3 fast deaths within 60s, probe in ")
            .is_some_and(|d| d.ends_with('m') || d.ends_with('s'))),
        "{text}"
    );
    fleet::kill(sup, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143));
}

/// Issue 52, item 3: a claim made after the last heartbeat shows in `status` at once (the
/// supervisor itself reads it at its next tick, two minutes away here).
#[test]
fn status_shows_a_claim_made_since_the_last_tick() {
    let script = r#"while [ ! -f "$AFK_TEST_DIR/go" ]; do sleep 0.1; done
if [ "$RED_AFK_SLOT" = 1 ]; then
  d="$PWD/.red/tmp/workers/$RED_AFK_WORKER_ID/9-a1"
  mkdir -p "$d"
  printf '{"version":1,"current":{"number":9,"title":"Mind the gap"}}' > "$d/afk.state.json"
  touch "$AFK_TEST_DIR/claimed"
fi
exec sleep 600
"#;
    let timing = TIMING.replace("tick_s = 1\n", "tick_s = 120\n");
    let mut f = Fleet::new(script, &timing);
    let sup = f.start(&["--workers", "2"]);
    f.wait_workers(2);
    assert!(wait_until(WAIT, || f
        .state()
        .is_some_and(|s| s.slots.busy == 2)));
    std::fs::write(f.file("go"), "").unwrap();
    assert!(wait_until(WAIT, || f.file("claimed").exists()));
    let v = f.status_json(StatusExit::Any);
    assert_eq!(v["slots"][1]["issue"], 9, "{v:#}");
    assert_eq!(v["slots"][1]["title"], "Mind the gap", "{v:#}");
    assert!(v["slots"][0]["issue"].is_null(), "{v:#}");
    assert_eq!(
        f.count(Kind::SupervisorTick),
        0,
        "a tick came: {}",
        f.dump()
    );
    let text = String::from_utf8_lossy(&f.run_cmd(&["status"]).stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("1 ") && l.ends_with("#9 Mind the gap")),
        "{text}"
    );
    fleet::kill(sup, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143));
}
