use super::*;

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
