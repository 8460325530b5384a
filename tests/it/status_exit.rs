//! `status` tells the truth and its exit code says it (issue 26), as `systemctl is-active`:
//! 0 healthy, 1 degraded, 3 not running, with the live processes a killed supervisor left.
//! Real supervisor, real workers, real signals.

use nix::sys::signal::Signal;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT, alive, kill};
use crate::support::wait_until;
use afk_supervisor::event_log::Kind;

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn healthy_is_0_and_workers_left_by_a_killed_supervisor_are_listed_with_3() {
    let mut f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    f.start(&["--workers", "2"]);
    let workers = f.wait_workers(2);
    assert!(wait_until(WAIT, || f.run_cmd(&["status"]).status.code() == Some(0)));
    let out = f.run_cmd(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = json(&out);
    assert_eq!(v["health"], "healthy", "{v}");
    assert_eq!(v["degraded"], serde_json::json!([]), "{v}");

    kill(f.sup_pid(), Signal::SIGKILL);
    f.wait_exit();
    assert!(workers.iter().all(|p| alive(*p)));
    let out = f.run_cmd(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let v = json(&out);
    assert_eq!(v["supervisor"], serde_json::Value::Null, "{v}");
    let live: Vec<i64> = v["live_processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_i64().unwrap())
        .collect();
    for w in &workers {
        assert!(live.contains(&i64::from(*w)), "{w} not in {live:?}");
    }
    let out = f.run_cmd(&["status"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no supervisor running"), "{err}");
    assert!(
        err.contains(&format!(
            "but {} processes of the fleet are live",
            live.len()
        )),
        "{err}"
    );
    assert!(
        err.contains("`afk-supervisor stop --force` kills them"),
        "{err}"
    );
    let out = f.run_cmd(&["stop", "--force"]);
    assert!(out.status.success(), "{out:?}");
    let out = f.run_cmd(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json(&out)["live_processes"], serde_json::json!([]));
}

#[test]
fn a_parked_slot_is_degraded_with_1() {
    let mut f = Fleet::new("exit 78\n", FAST_TIMING);
    f.start(&["--workers", "1"]);
    f.wait_events(Kind::SlotParked, 1);
    assert!(wait_until(WAIT, || f.run_cmd(&["status"]).status.code() == Some(1)));
    let out = f.run_cmd(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v = json(&out);
    assert_eq!(v["health"], "degraded", "{v}");
    assert_eq!(v["degraded"], serde_json::json!(["slots parked: 0"]), "{v}");
    let text = String::from_utf8_lossy(&f.run_cmd(&["status"]).stdout).into_owned();
    assert!(text.contains("degraded: slots parked: 0"), "{text}");
    let out = f.run_cmd(&["stop"]);
    assert!(out.status.success(), "{out:?}");
    f.wait_exit();
}
