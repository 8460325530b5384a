//! Slots that are shrunk away and grown back.

use std::collections::HashSet;

use crate::support::fleet::{FAST_TIMING, Fleet};
use crate::support::{self, fleet};
use afk_supervisor::event_log::Kind;

/// On SIGTERM, waits for the test's `release` file before it exits, so a grow can arrive
/// while it is being hard-killed.
const SLOW_TO_DIE: &str = r#"
trap 'while [ ! -e "$AFK_TEST_DIR/release" ]; do sleep 0.05; done; exit 0' TERM
sleep 600 &
wait
"#;

fn scale(f: &Fleet, args: &[&str]) {
    let mut all = vec!["scale"];
    all.extend_from_slice(args);
    let out = f.run_cmd(&all);
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{}", f.dump());
}

fn spawned_ids(f: &Fleet) -> Vec<String> {
    f.events_of(Kind::SlotSpawn)
        .into_iter()
        .map(|e| e.msg.trim_start_matches("spawned worker ").to_string())
        .collect()
}

/// Shrunk and grown back, twice: once after the surplus slots retired, once while their
/// workers were still being hard-killed (the tick is far away, so only the workers' ends
/// can respawn them). No worker id is ever used twice.
#[test]
fn slots_grown_back_respawn_at_once_with_new_worker_ids() {
    let timing = FAST_TIMING
        .replace("tick_s = 1\n", "tick_s = 600\n")
        .replace("stop_grace_s = 2", "stop_grace_s = 60");
    let mut f = Fleet::new(SLOW_TO_DIE, &timing);
    let release = f.file("release");
    f.start(&["--workers", "3"]);
    f.wait_workers(3);

    std::fs::write(&release, "").unwrap();
    scale(&f, &["1", "--shrink-mode", "hard-kill"]);
    f.wait_events(Kind::SlotRetired, 2);
    scale(&f, &["3", "--shrink-mode", "hard-kill"]);
    f.wait_events(Kind::SlotSpawn, 5);
    f.wait_workers(3);

    std::fs::remove_file(&release).unwrap();
    scale(&f, &["1", "--shrink-mode", "hard-kill"]);
    scale(&f, &["3", "--shrink-mode", "hard-kill"]);
    std::fs::write(&release, "").unwrap();
    f.wait_events(Kind::SlotSpawn, 7);
    f.wait_workers(3);
    assert_eq!(f.count(Kind::SlotRetired), 2, "{}", f.dump());

    let ids = spawned_ids(&f);
    assert_eq!(ids.len(), 7, "{}", f.dump());
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "worker id reused: {ids:?}");
}

/// Exit 78 parks a slot for good; shrinking it away and growing it back does not unpark it.
#[test]
fn a_parked_slot_stays_parked_across_shrink_and_grow() {
    let mut f = Fleet::new(
        "[ \"$RED_AFK_SLOT\" = 1 ] && exit 78\nexec sleep 600\n",
        FAST_TIMING,
    );
    f.start(&["--workers", "2"]);
    f.wait_events(Kind::SlotParked, 1);
    scale(&f, &["1"]);
    f.wait_events(Kind::SlotRetired, 1);
    scale(&f, &["2"]);
    let parked = f.wait_events(Kind::SlotParked, 2);
    assert_eq!(
        parked[1].msg,
        "slot 1 back within the target and still parked"
    );
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    let slot1_spawns = f
        .events_of(Kind::SlotSpawn)
        .iter()
        .filter(|e| e.slot == Some(1))
        .count();
    assert_eq!(slot1_spawns, 1, "{}", f.dump());
    let s = f.state().unwrap();
    assert_eq!(s.slot_detail[1].state, "parked");
}

/// A `drain-then-retire` shrink cut short by `stop` leaves its retire files (#22): they
/// belong to that supervisor run, so the next run clears them at start-up and its workers
/// see no retire request.
#[test]
fn a_previous_runs_retire_files_are_cleared_at_start_up() {
    let script = r#"
if [ -e "$RED_AFK_RETIRE_FILE" ]; then r=yes; else r=no; fi
echo "$RED_AFK_SLOT $r" >> "$AFK_TEST_DIR/seen"
exec sleep 600
"#;
    let mut f = Fleet::new(script, FAST_TIMING);
    std::fs::create_dir_all(f.layout.supervisor_lane()).unwrap();
    for slot in 0..3 {
        std::fs::write(f.layout.retire_file(slot), "").unwrap();
    }
    f.start(&["--workers", "2"]);
    f.wait_workers(2);
    let seen = f.file("seen");
    assert!(
        support::wait_until(fleet::WAIT, || fleet::read(&seen).lines().count() >= 2),
        "{}",
        f.dump()
    );
    let text = fleet::read(&seen);
    assert!(
        text.lines().all(|l| l.ends_with(" no")),
        "{text}\n{}",
        f.dump()
    );
    for slot in 0..3 {
        assert!(!f.layout.retire_file(slot).exists(), "slot {slot}");
    }
}
