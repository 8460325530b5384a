//! A full disk under the event log (#22): a record cut short by ENOSPC must not glue the
//! first record after recovery onto itself (`logs` would drop both, and `read_events`
//! refuses the line), and each episode and its recovery are reported once, the second
//! episode as well as the first. A real tmpfs, small enough to fill in a moment.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use afk_supervisor::supervisor::journal::Journal;
use afk_supervisor::toonl::{self, Event};

/// A tmpfs of `size` mounted on a fresh directory; unmounted on drop.
struct Tmpfs {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl Tmpfs {
    fn new(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("m");
        fs::create_dir(&mnt).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mnt)
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs failed: {st}");
        Tmpfs { _dir: dir, mnt }
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
    j.write(Event::now("supervisor.start", "before the disk filled"));
    let long = "y".repeat(12_000);
    for episode in 1..=2 {
        fill(&filler, 4096);
        // Longer than the room left: written part-way, then ENOSPC.
        j.write(Event::now("slot.death", format!("torn {episode} {long}")));
        j.write(Event::now("slot.death", format!("lost {episode} {long}")));
        fs::remove_file(&filler).unwrap();
        j.write(Event::now(
            "supervisor.tick",
            format!("after recovery {episode}"),
        ));
    }
    let events = toonl::read_events(&log).unwrap_or_else(|e| {
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
