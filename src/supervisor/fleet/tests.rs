use super::*;
use std::collections::BTreeSet;

#[test]
fn the_whole_start_up_is_in_one_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    std::fs::create_dir_all(layout.supervisor_lane()).unwrap();
    let journal = Journal::open(&layout.event_log(), false).unwrap();
    let mut config = Config::default();
    config.fleet.workers = 2;
    let argv: Vec<String> = vec!["sleep".into(), "600".into()];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_runtime = rt.enter();
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let me = std::process::id() as i32;
    let start = crate::pidfile::process_start_time(me).unwrap();
    let mut fleet = Fleet::new(layout.clone(), &config, argv, (me, start), journal, tx);
    fleet.start(Vec::new(), 0, false);
    // No tick and no loop turn yet: the one start-up write already names both workers.
    let state = state_file::read(&layout.state_file()).unwrap().unwrap();
    let pids: Vec<i32> = state.slot_pids.iter().map(|p| p.pid).collect();
    assert_eq!(pids.len(), 2, "{state:?}");
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    }
}

/// A queue check that finds work for every idle slot wakes them in batches of
/// [`UNIDLE_PER_TURN`], one batch per loop turn, not all at once.
#[test]
fn idle_slots_wake_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    std::fs::create_dir_all(layout.supervisor_lane()).unwrap();
    let journal = Journal::open(&layout.event_log(), false).unwrap();
    let mut config = Config::default();
    config.fleet.workers = 40;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_runtime = rt.enter();
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let me = std::process::id() as i32;
    let start = crate::pidfile::process_start_time(me).unwrap();
    let argv: Vec<String> = vec!["true".into()];
    let mut fleet = Fleet::new(layout, &config, argv, (me, start), journal, tx);
    fleet.start(Vec::new(), 0, false);
    let running = |f: &Fleet| -> Vec<(i32, u64)> {
        f.slots
            .values()
            .filter_map(|s| s.worker().map(|w| (w.pid, w.start)))
            .collect()
    };
    // Every worker exits 0 with no queue known: every slot idles.
    let end_all = |f: &mut Fleet| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !running(f).is_empty() {
            assert!(Instant::now() < deadline, "workers did not end");
            for (pid, start) in running(f) {
                f.own_child_ended(pid, start, Instant::now());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    assert_eq!(running(&fleet).len(), 40);
    end_all(&mut fleet);
    let work: BTreeSet<u64> = (1..=100).collect();
    fleet.on_queue(Ok(work), Instant::now());
    let mut woken = vec![running(&fleet).len()];
    for _ in 0..3 {
        fleet.service(Instant::now());
        woken.push(running(&fleet).len());
    }
    assert_eq!(woken, vec![16, 32, 40, 40]);
    end_all(&mut fleet);
}
