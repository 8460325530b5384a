use std::sync::mpsc;

use super::*;

#[test]
fn every_spawn_is_in_the_heartbeat_before_anything_else_happens() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    std::fs::create_dir_all(layout.supervisor_lane()).unwrap();
    let journal = Journal::open(&layout.event_log(), false).unwrap();
    let mut config = Config::default();
    config.fleet.workers = 2;
    let argv: Vec<String> = vec!["sleep".into(), "600".into()];
    let (tx, _rx) = mpsc::channel();
    let (queue_tx, _queue_rx) = mpsc::channel();
    let me = std::process::id() as i32;
    let start = crate::pidfile::process_start_time(me).unwrap();
    let mut fleet = Fleet::new(
        layout.clone(),
        &config,
        argv,
        (me, start),
        journal,
        tx,
        queue_tx,
    );
    fleet.start(Vec::new(), 0, false);
    // No tick and no loop turn yet: the state file already names both workers.
    let state = state_file::read(&layout.state_file()).unwrap().unwrap();
    let pids: Vec<i32> = state.slot_pids.iter().map(|p| p.pid).collect();
    assert_eq!(pids.len(), 2, "{state:?}");
    for pid in pids {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
    }
}
