//! The format and the writer together: rows read back as written, torn tails skipped.

use std::fs;
use std::io::Write;

use proptest::prelude::*;

use super::*;
use crate::toonl::{decode_records, encode_record, header_line};

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9/ .:_,=|-]{0,16}",
        any::<String>(),
        prop::sample::select(crate::toon_doc::TRICKY_TEXTS.to_vec()).prop_map(str::to_string),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    (
        text(),
        text(),
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<i64>()),
        proptest::option::of(any::<u64>()),
        text(),
    )
        .prop_map(|(ts, kind, slot, pid, issue, msg)| Record {
            ts,
            kind: Kind::read(&kind),
            slot,
            pid,
            issue,
            msg,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    /// The event log's own row writer writes what the general encoder does, and what
    /// it writes reads back as the same record: a kind this crate does not know too.
    #[test]
    fn an_event_row_is_the_general_encoders_row(ev in record()) {
        let general = encode_record(&FIELDS, serde_json::to_value(&ev).unwrap()).unwrap();
        let fast = encode_row(&ev);
        prop_assert_eq!(&fast, &general);
        let text = format!("{}{fast}", header_line(&FIELDS));
        let back: Vec<Record> = decode_records(text.as_bytes()).unwrap();
        prop_assert_eq!(back, vec![ev]);
    }
}

#[test]
fn roundtrip_with_reopen_and_truncated_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("lane/supervisor.log.toonl");
    let tricky = Record::now(
        Kind::SupervisorBootSweep,
        "boot sweeps complete: orphans removed=1 restored=0 kept=2 | x, \"q\" | docs-sweep clean files=0",
    );
    let num_like = Record::now(Kind::SlotExit, "123")
        .slot(3)
        .pid(4242)
        .issue(17);
    {
        let mut log = EventLog::open(&p).unwrap();
        log.append(&tricky).unwrap();
    }
    {
        let mut log = EventLog::open(&p).unwrap();
        log.append(&num_like).unwrap();
    }
    // A crash mid-write leaves a partial line.
    let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(b"\"2026-01-01T00:00:00.000Z\",slot.sp")
        .unwrap();
    let events = read_events(&p).unwrap();
    assert_eq!(events, vec![tricky, num_like]);
    // Reopening after the torn line still yields a readable log.
    let mut log = EventLog::open(&p).unwrap();
    let after = Record::now(Kind::SupervisorTick, "tick: slots=1");
    log.append(&after).unwrap();
    assert_eq!(read_events(&p).unwrap().last(), Some(&after));
    let text = fs::read_to_string(&p).unwrap();
    assert!(
        text.starts_with("[]{ts,kind,slot,pid,issue,msg}:\n"),
        "{text}"
    );
}

#[test]
fn a_log_that_is_not_a_regular_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("supervisor.log.toonl");
    nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let err = EventLog::open(&p).unwrap_err().to_string();
    assert!(
        err.contains("supervisor.log.toonl: not a regular file (a FIFO)"),
        "{err}"
    );
    fs::remove_file(&p).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
    let err = EventLog::open(&p).unwrap_err().to_string();
    assert!(err.contains("supervisor.log.toonl: is a symlink"), "{err}");
}

#[test]
fn malformed_line_is_reported_with_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("log.toonl");
    fs::write(&p, "[]{ts,kind,slot,pid,issue,msg}:\n\"unterminated,x\n").unwrap();
    let err = read_events(&p).unwrap_err().to_string();
    assert!(err.contains("log.toonl:"), "{err}");
}
