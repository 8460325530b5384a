//! The event log of a real supervisor rotates by size, and old slot log folders expire at
//! start-up.

use std::fs;
use std::os::unix::fs::MetadataExt;

use afk_supervisor::event_log;
use nix::sys::signal::Signal;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT};
use crate::support::{fleet, wait_until};
use afk_supervisor::event_log::Kind;

const WORKER: &str = "exec sleep 600\n";

#[test]
fn the_event_log_rotates_by_rename_keeps_two_and_logs_reads_across_them() {
    let timing = format!("{FAST_TIMING}\n[log]\nmax_bytes = 1024\nkeep = 2\n");
    let mut f = Fleet::new(WORKER, &timing);
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    let log = f.layout.event_log();
    let (one, two, three) = (
        event_log::rotated(&log, 1),
        event_log::rotated(&log, 2),
        event_log::rotated(&log, 3),
    );
    assert!(wait_until(WAIT, || two.exists()), "{}", f.dump());
    // One more rotation: what was `.1` becomes `.2` (the same file, renamed).
    let first_one = fs::metadata(&one).unwrap().ino();
    assert!(
        wait_until(WAIT, || fs::metadata(&two)
            .is_ok_and(|m| m.ino() == first_one)),
        "no second rotation"
    );
    // Stopped first: a running supervisor may be between the rename and the reopen.
    fleet::kill(f.sup_pid(), Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143));
    assert!(!three.exists(), "keep = 2 kept a third");
    for p in [&two, &one, &log] {
        let text = fs::read_to_string(p).unwrap();
        assert!(
            text.starts_with("[]{ts,kind,slot,pid,issue,msg}:\n"),
            "{}: {text}",
            p.display()
        );
    }

    // `logs` reads the generations oldest first: the ticks come out in order.
    let out = f.run_cmd(&["logs", "--kind", Kind::SupervisorTick.as_str(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ts: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["ts"].to_string())
        .collect();
    assert!(ts.len() >= 4, "{ts:?}");
    let mut sorted = ts.clone();
    sorted.sort();
    assert_eq!(ts, sorted);
}

#[test]
fn slot_log_folders_past_their_age_are_deleted_at_start_up() {
    let mut f = Fleet::new(WORKER, FAST_TIMING);
    let old = f.layout.logs().join("2020-01-01");
    fs::create_dir_all(&old).unwrap();
    fs::write(old.join("afk-supervisor-slot-0.log"), "old output\n").unwrap();
    let other = f.layout.logs().join("keep-me");
    fs::create_dir_all(&other).unwrap();
    f.start(&["--workers", "1"]);
    let evs = f.wait_events(Kind::SupervisorPeriodic, 1);
    assert!(
        evs.iter().any(|e| e
            .msg
            .starts_with("slot-logs: removed 1 day folders older than 7 days")),
        "{}",
        f.dump()
    );
    assert!(!old.exists());
    assert!(other.exists());
    // The folder the worker writes in now stays.
    let days: Vec<String> = fs::read_dir(f.layout.logs())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| afk_supervisor::slot_log_view::is_day(n))
        .collect();
    assert_eq!(days.len(), 1, "{days:?}");
    assert!(
        f.layout
            .logs()
            .join(&days[0])
            .join("afk-supervisor-slot-0.log")
            .exists()
    );
    fleet::kill(f.sup_pid(), Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143));
}
