//! `afk-supervisor logs`: the event log for people, from real files.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use afk_supervisor::event_log::{EventLog, Record};
use afk_supervisor::layout::Layout;

use crate::support::{TestEnv, ev, stdout_lines};
use afk_supervisor::event_log::Kind;

const WAIT: Duration = Duration::from_secs(30);

struct Logs {
    env: TestEnv,
    repo: PathBuf,
    layout: Layout,
}

impl Logs {
    fn new() -> Logs {
        let env = TestEnv::new();
        let repo = env.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        // `--repo` must name a checkout.
        env.git(&repo, &["init", "-q"]);
        let layout = Layout::new(&repo);
        Logs { env, repo, layout }
    }

    fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = self.env.bin();
        c.arg("--repo").arg(&self.repo).arg("logs").args(args);
        c.stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn lines(&self, args: &[&str]) -> Vec<String> {
        let out = self.run(args);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Kills the follower even when an assertion failed.
struct Follower(Child);

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn one_escaped_line_per_record_with_filters_json_and_a_truncated_tail() {
    let l = Logs::new();
    let path = l.layout.event_log();
    {
        let mut log = EventLog::open(&path).unwrap();
        log.append(&ev(
            "2026-01-01T00:00:00.000Z",
            Kind::SupervisorStart,
            "started, target=2",
        ))
        .unwrap();
        log.append(
            &ev("2026-01-01T00:00:01.000Z", Kind::SlotSpawn, "w1")
                .slot(0)
                .pid(41),
        )
        .unwrap();
        log.append(
            &ev(
                "2026-01-01T00:00:02.000Z",
                Kind::SlotExit,
                "red \u{1b}[31mX\nY",
            )
            .slot(1)
            .pid(42)
            .issue(7),
        )
        .unwrap();
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"\"2026-01-01T00:00:03.000Z\",slot.sp")
        .unwrap();

    assert_eq!(
        l.lines(&[]),
        [
            "2026-01-01T00:00:00.000Z supervisor.start: started, target=2",
            "2026-01-01T00:00:01.000Z slot.spawn slot=0 pid=41: w1",
            "2026-01-01T00:00:02.000Z slot.exit slot=1 pid=42 issue=7: red \\e[31mX\\nY",
        ]
    );
    assert_eq!(
        l.lines(&["--slot", "0"]),
        ["2026-01-01T00:00:01.000Z slot.spawn slot=0 pid=41: w1"]
    );
    assert_eq!(l.lines(&["--kind", "slot"]).len(), 2);
    assert_eq!(l.lines(&["--kind", Kind::SlotExit.as_str()]).len(), 1);
    // Not a kind nor a dotted prefix of one: a usage error, not an empty output.
    assert_eq!(l.run(&["--kind", "slo"]).status.code(), Some(2));
    let json = l.lines(&["--json", "--kind", Kind::SlotExit.as_str()]);
    assert_eq!(json.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&json[0]).unwrap();
    assert_eq!(v["msg"], "red \u{1b}[31mX\nY");
    assert_eq!(
        (v["slot"].as_u64(), v["issue"].as_u64()),
        (Some(1), Some(7))
    );
    // Everything is older than a minute.
    assert!(l.lines(&["--since", "1m"]).is_empty());
    let out = l.run(&["--since", "1w"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn since_keeps_the_recent_records_and_rotated_logs_come_first() {
    let l = Logs::new();
    let path = l.layout.event_log();
    let mut old = path.as_os_str().to_os_string();
    old.push(".1");
    {
        let mut log = EventLog::open(std::path::Path::new(&old)).unwrap();
        log.append(&ev(
            "2026-01-01T00:00:00.000Z",
            Kind::SupervisorResize,
            "rotated",
        ))
        .unwrap();
        let mut log = EventLog::open(&path).unwrap();
        log.append(&Record::now(Kind::SupervisorResize, "live"))
            .unwrap();
    }
    let all = l.lines(&[]);
    assert_eq!(all.len(), 2);
    assert!(
        all[0].ends_with(": rotated") && all[1].ends_with(": live"),
        "{all:?}"
    );
    let recent = l.lines(&["--since", "1h"]);
    assert_eq!(recent.len(), 1);
    assert!(recent[0].ends_with("supervisor.resize: live"), "{recent:?}");
}

#[test]
fn follow_sees_growth_a_completed_line_and_a_rotation() {
    let l = Logs::new();
    let path = l.layout.event_log();
    let mut log = EventLog::open(&path).unwrap();
    log.append(&ev(
        "2026-01-01T00:00:00.000Z",
        Kind::SupervisorStart,
        "one",
    ))
    .unwrap();
    let mut child = Follower(
        l.cmd(&["--follow"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let rx = stdout_lines(&mut child.0);
    let next = || rx.recv_timeout(WAIT).expect("no line from logs --follow");
    assert!(next().ends_with(": one"));

    log.append(&ev("2026-01-01T00:00:01.000Z", Kind::SlotSpawn, "two"))
        .unwrap();
    assert!(next().ends_with(": two"));

    // A record written in two parts is shown once, when complete.
    let row = afk_supervisor::event_log::encode_row(&ev(
        "2026-01-01T00:00:02.000Z",
        Kind::SlotExit,
        "three",
    ));
    let (a, b) = row.split_at(row.len() / 2);
    let mut raw = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    raw.write_all(a.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    raw.write_all(b.as_bytes()).unwrap();
    assert!(next().ends_with(": three"));

    // Rotation: rename, then a new file with its header.
    let mut rotated = path.as_os_str().to_os_string();
    rotated.push(".1");
    std::fs::rename(&path, &rotated).unwrap();
    log.append(&ev(
        "2026-01-01T00:00:03.000Z",
        Kind::SlotExit,
        "four, before the reopen",
    ))
    .unwrap();
    let mut log = EventLog::open(&path).unwrap();
    log.append(&ev("2026-01-01T00:00:04.000Z", Kind::SlotSpawn, "five"))
        .unwrap();
    assert!(next().ends_with(": four, before the reopen"));
    assert!(next().ends_with(": five"));
}

#[test]
fn worker_output_prints_the_newest_slot_log_escaped() {
    let l = Logs::new();
    for (day, text) in [
        ("2026-01-01", "old\n"),
        ("2026-01-02", "new \u{1b}]0;x\u{7}\nlast"),
    ] {
        let p = l.layout.slot_log(day, 3);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
    }
    assert_eq!(
        l.lines(&["--slot", "3", "--worker-output"]),
        ["new \\e]0;x\\x07", "last"]
    );
    let out = l.run(&["--slot", "4", "--worker-output"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no worker output for slot 4"));
}
