//! `afk-supervisor events`: a cursor per record that resumes exactly after it, across the
//! event log's rotation, on a real fleet's log.

use std::collections::HashSet;
use std::process::Stdio;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT};
use crate::support::{fleet, wait_until};
use afk_supervisor::event_log::Kind;

/// (cursor, kind, msg) of every record `events --json <args>` prints.
fn events(f: &Fleet, args: &[&str]) -> Vec<(String, String, String)> {
    let mut all = vec!["events", "--json"];
    all.extend_from_slice(args);
    let out = f.run_cmd(&all);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let s = |k: &str| v[k].as_str().unwrap().to_string();
            (s("cursor"), s("kind"), s("msg"))
        })
        .collect()
}

#[test]
fn a_consumer_resuming_from_its_cursor_gets_each_event_once_across_rotations() {
    let mut f = Fleet::new(
        "exec sleep 1000\n",
        &format!("{FAST_TIMING}\n[log]\nmax_bytes = 1024\nkeep = 5\n"),
    );
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    let first = events(&f, &[]);
    assert!(first.len() >= 3, "{first:?}");
    let mid = first.len() / 2;
    let cursor = first[mid].0.clone();
    // Wait until the log has rotated at least twice past the cursor's generation.
    let rotated = |i: usize| afk_supervisor::event_log::rotated(&f.layout.event_log(), i);
    assert!(wait_until(WAIT, || rotated(2).exists()), "{}", f.dump());
    let resumed = events(&f, &["--since", &cursor]);
    // Exactly what followed the cursor: the rest of the first read, then newer records.
    assert_eq!(resumed[..first.len() - mid - 1], first[mid + 1..]);
    assert!(
        resumed.len() > first.len() - mid - 1,
        "nothing newer: {resumed:?}"
    );
    let cursors: HashSet<&String> = resumed.iter().map(|e| &e.0).collect();
    assert_eq!(cursors.len(), resumed.len(), "a record twice");
    // Resuming in steps (each from the last cursor seen) reads the same records as one read.
    let mut stepped = Vec::new();
    let mut at = cursor.clone();
    loop {
        let next = events(&f, &["--since", &at]);
        let Some(one) = next.first().cloned() else {
            break;
        };
        if stepped.len() >= resumed.len() {
            break;
        }
        at = one.0.clone();
        stepped.push(one);
    }
    assert_eq!(stepped[..], resumed[..stepped.len()]);
    // The full read from the start is the first read's records and then the resumed ones,
    // minus what rotated out of the kept generations.
    let all = events(&f, &[]);
    let tail: Vec<_> = all
        .iter()
        .skip_while(|e| e.0 != resumed[0].0)
        .take(resumed.len())
        .cloned()
        .collect();
    assert_eq!(tail, resumed);

    // Kind filter and bad cursors.
    let ticks = events(&f, &["--kind", Kind::SupervisorTick.as_str()]);
    assert!(!ticks.is_empty() && ticks.iter().all(|e| e.1 == Kind::SupervisorTick.as_str()));
    let out = f.run_cmd(&["events", "--since", "e1-zz"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a cursor"));

    // --follow from the end sees a control request as it is logged.
    let sink = f.file("follow.out");
    let mut follow = f
        .cmd(&["events", "--follow", "--since", "end", "--kind", "control"])
        .stdout(std::fs::File::create(&sink).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // It sleeps between looks only once its first look has found the end: a pause logged
    // before that would be older than the end it starts from.
    let wchan = format!("/proc/{}/wchan", follow.id());
    assert!(
        wait_until(WAIT, || std::fs::read_to_string(&wchan)
            .is_ok_and(|w| w.contains("nanosleep"))),
        "the follower never settled at the end ({wchan})"
    );
    // Nothing older is printed; the pause is.
    assert!(
        f.run_cmd(&["pause", "--reason", "follow me"])
            .status
            .success()
    );
    let seen = wait_until(WAIT, || fleet::read(&sink).contains("follow me"));
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(seen, "{}", fleet::read(&sink));
    let text = fleet::read(&sink);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("e1-") && text.contains(Kind::ControlRequest.as_str()),
        "{text}"
    );
    assert_eq!(f.run_cmd(&["stop"]).status.code(), Some(0));
}
