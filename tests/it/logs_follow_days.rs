//! `logs --slot I --worker-output --follow` follows the slot's output across the per-day
//! folders: when the next day's log of the slot appears, it moves on to it.

use std::fs;
use std::io::Write;
use std::process::Stdio;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT};
use crate::support::stdout_lines;

#[test]
fn following_a_slot_log_moves_to_the_next_days_file() {
    let f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    let day1 = f.layout.slot_log("2026-11-30", 2);
    let day2 = f.layout.slot_log("2026-12-01", 2);
    // Another slot's newer log is not this slot's.
    let other = f.layout.slot_log("2026-12-02", 3);
    fs::create_dir_all(day1.parent().unwrap()).unwrap();
    fs::create_dir_all(other.parent().unwrap()).unwrap();
    fs::write(&day1, "day one 1\nday one 2\n").unwrap();
    fs::write(&other, "slot three\n").unwrap();

    let mut child = f
        .cmd(&["logs", "--slot", "2", "--worker-output", "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stdout_lines(&mut child);
    let next = || {
        rx.recv_timeout(WAIT)
            .expect("logs --follow printed nothing more")
    };
    assert_eq!([next(), next()], ["day one 1", "day one 2"]);

    // Still on day one: what its worker appends shows.
    let mut old = fs::OpenOptions::new().append(true).open(&day1).unwrap();
    old.write_all(b"day one 3\n").unwrap();
    assert_eq!(next(), "day one 3");

    // The slot's next worker, after midnight, writes to the next day's folder.
    fs::create_dir_all(day2.parent().unwrap()).unwrap();
    fs::write(&day2, "day two 1\n").unwrap();
    assert_eq!(next(), "day two 1");
    let mut new = fs::OpenOptions::new().append(true).open(&day2).unwrap();
    new.write_all(b"day two 2\n").unwrap();
    assert_eq!(next(), "day two 2");
    // Nothing else came through: not the other slot's log, nothing twice.
    assert!(rx.try_recv().is_err());

    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(
        err.trim(),
        format!("afk-supervisor: slot 2: now following {}", day2.display())
    );
}
