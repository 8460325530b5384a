//! A full disk under the event log (#22): a record cut short by ENOSPC must not glue the
//! first record after recovery onto itself (`logs` would drop both, and `read_events`
//! refuses the line), and each episode and its recovery are reported once, the second
//! episode as well as the first. A real tmpfs, small enough to fill in a moment.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use afk_supervisor::event_log::{self, Record};
use afk_supervisor::supervisor::journal::Journal;

use crate::support::fleet::{self, Fleet, WAIT};
use crate::support::wait_until;
use afk_supervisor::event_log::Kind;

/// A tmpfs of `size` mounted on a fresh directory; unmounted on drop.
struct Tmpfs {
    _dir: Option<tempfile::TempDir>,
    mnt: PathBuf,
}

impl Tmpfs {
    fn new(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Tmpfs::at(&dir.path().join("m"), size);
        t._dir = Some(dir);
        t
    }

    /// Mounted on `mnt` (made if missing), e.g. a checkout's `.red/tmp`.
    fn at(mnt: &Path, size: &str) -> Tmpfs {
        fs::create_dir_all(mnt).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(mnt)
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs failed: {st}");
        Tmpfs {
            _dir: None,
            mnt: mnt.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}

/// Fills the filesystem of `dir` with `filler` until a write fails, then frees `free`
/// bytes of it: less room than one long record needs.
fn fill(filler: &Path, free: u64) {
    let mut f = fs::File::create(filler).unwrap();
    let chunk = vec![b'x'; 4096];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.flush();
    let len = f.metadata().unwrap().len();
    f.set_len(len.saturating_sub(free)).unwrap();
}

#[test]
#[cfg_attr(
    not(afk_can_bind_mount),
    ignore = "needs mount -t tmpfs (root); under CI=true it always runs"
)]
fn a_record_torn_by_a_full_disk_leaves_no_glued_line_and_each_episode_is_reported() {
    let fs_ = Tmpfs::new("256k");
    let log = fs_.mnt.join("supervisor.log.toonl");
    let filler = fs_.mnt.join("filler");
    let mut j = Journal::open(&log, false).unwrap();
    j.write(Record::now(Kind::SupervisorStart, "before the disk filled"));
    let long = "y".repeat(12_000);
    for episode in 1..=2 {
        fill(&filler, 4096);
        // Longer than the room left: written part-way, then ENOSPC.
        j.write(Record::now(
            Kind::SlotExit,
            format!("torn {episode} {long}"),
        ));
        j.write(Record::now(
            Kind::SlotExit,
            format!("lost {episode} {long}"),
        ));
        fs::remove_file(&filler).unwrap();
        j.write(Record::now(
            Kind::SupervisorTick,
            format!("after recovery {episode}"),
        ));
    }
    let events = event_log::read_events(&log).unwrap_or_else(|e| {
        panic!(
            "{e}\n{}",
            String::from_utf8_lossy(&fs::read(&log).unwrap_or_default())
        )
    });
    let msgs: Vec<&str> = events.iter().map(|e| e.msg.as_str()).collect();
    for episode in 1..=2 {
        let after = format!("after recovery {episode}");
        assert!(msgs.contains(&after.as_str()), "{msgs:?}");
    }
    assert!(!msgs.iter().any(|m| m.starts_with("torn ")), "{msgs:?}");
    let recovered: Vec<&str> = msgs
        .iter()
        .copied()
        .filter(|m| m.starts_with("event log: writable again"))
        .collect();
    assert_eq!(recovered.len(), 2, "{msgs:?}");
    assert!(recovered[0].contains("2 record(s) lost"), "{recovered:?}");
    // Every line of the file is whole: no record glued onto a torn one.
    let text = fs::read_to_string(&log).unwrap();
    assert!(text.ends_with('\n'));
    assert!(
        text.lines()
            .all(|l| l.len() < 1000 || !l.contains("after recovery")),
        "{text}"
    );
}

/// Issue 52, item 15: a heartbeat that could not be written while the disk was full is
/// owed and lands once there is room, though nothing changes after: `state.toon` never
/// keeps naming workers that are dead while new ones run. The tick is two minutes away, so
/// only the retry can write it.
#[test]
#[cfg_attr(
    not(afk_can_bind_mount),
    ignore = "needs mount -t tmpfs (root); under CI=true it always runs"
)]
fn a_heartbeat_lost_to_a_full_disk_is_written_once_there_is_room() {
    let timing = "[timing]\ntick_s = 120\nfast_death_s = 1\ncircuit_k = 5\n\
                  circuit_window_s = 60\nhalf_open_base_s = 1\nhalf_open_cap_s = 4\n\
                  stop_grace_s = 2\nstall_s = 600\nstall_kill_s = 1200\n";
    let mut f = Fleet::new(
        "echo $$ >> \"$AFK_TEST_DIR/pids\"\nexec sleep 600\n",
        timing,
    );
    // `.red/tmp` (the lane with `state.toon`, the event log, the slot logs) on a small
    // tmpfs; unmounted after the fleet is stopped.
    let disk = Tmpfs::at(&f.layout.tmp(), "3m");
    let pids = |f: &Fleet| -> Vec<i32> {
        fleet::read(&f.file("pids"))
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    f.start(&["--workers", "2"]);
    let first = f.wait_workers(2);

    let filler = disk.mnt.join("filler");
    fill(&filler, 0);
    for p in &first {
        fleet::kill(*p, nix::sys::signal::Signal::SIGKILL);
    }
    // Both respawned while the disk is full: the heartbeat naming them cannot be written.
    let respawned = wait_until(WAIT, || {
        let all = pids(&f);
        all.len() >= 4 && all[2..].iter().all(|p| fleet::alive(*p))
    });
    assert!(respawned, "pids {:?}", pids(&f));
    let now: Vec<i32> = pids(&f)[2..].to_vec();
    // The heartbeat naming them was tried and failed: the supervisor's echo on stderr (a
    // file off the tmpfs) says so, where the full event log may not.
    let err = f.file("supervisor-0.err");
    let failed = wait_until(WAIT, || {
        fleet::read(&err)
            .lines()
            .any(|l| l.contains("state.toon") && l.contains("No space left on device"))
    });
    assert!(failed, "{}", fleet::read(&err));
    let mut recorded = f.worker_pids();
    recorded.sort_unstable();
    let mut was = first.clone();
    was.sort_unstable();
    assert_eq!(recorded, was, "the full disk took no write");

    fs::remove_file(&filler).unwrap();
    let mut want = now.clone();
    want.sort_unstable();
    let landed = wait_until(std::time::Duration::from_secs(20), || {
        let mut r = f.worker_pids();
        r.sort_unstable();
        r == want
    });
    assert!(
        landed,
        "state.toon names {:?}, the live workers are {want:?}\n{}",
        f.worker_pids(),
        f.dump()
    );
    // The log says the heartbeat is back (written in the same turn, flushed at its end).
    f.wait_event_with(
        Kind::SupervisorHousekeeping,
        "heartbeat written again after: ",
    );
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
    drop(f);
    drop(disk);
}
