//! Fault injection: hostile files under `.red/` against the real binary.
//!
//! For each file the supervisor and the control commands read or write, each hostile form
//! (a FIFO, a symlink to `/dev/zero` or to a file outside the repo, a directory, a huge
//! file, garbage) is planted, and the test checks that nothing wedges (SIGTERM or `stop`
//! is answered before a deadline), memory stays bounded (the supervisor's peak RSS), the
//! one-line error names the file, the exit code is right and nothing is deleted that the
//! `docs/SPEC.md` does not allow.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::SystemTime;

use afk_supervisor::layout::tmp_file;
use afk_supervisor::timeutil::date_utc;
use nix::sys::signal::Signal;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT, kill};
use crate::support::{fleet, wait_until};
use afk_supervisor::event_log::Kind;

/// A worker that just lives until it is stopped.
const SLEEPER: &str = "sleep 1000 &\nwait\n";

/// Peak resident memory allowed to the supervisor while a `/dev/zero` link is in place: a
/// few tens of MiB are normal; reading `/dev/zero` reaches gigabytes within a tick.
const RSS_CAP_KB: u64 = 200 * 1024;

/// Address space allowed to every supervisor and command a test here starts: reading
/// `/dev/zero` whole fails at this size instead of exhausting the machine's memory, so a
/// regression ends in a failed test, not an out-of-memory host. Set on those children only:
/// the test process is shared with every other test module.
const ADDRESS_SPACE_LIMIT: u64 = 3 << 30;

/// A fleet of [`SLEEPER`]s whose commands run under [`ADDRESS_SPACE_LIMIT`].
fn bounded_fleet() -> Fleet {
    let mut f = Fleet::new(SLEEPER, FAST_TIMING);
    f.address_space = Some(ADDRESS_SPACE_LIMIT);
    f
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Fifo,
    DevZero,
    /// A symlink to a regular file outside the repo, which must be left as it is.
    LinkOut,
    Dir,
    /// Larger than any cap.
    Huge,
    Garbage,
}

const VICTIM: &[u8] = b"not yours\n";

/// Puts `form` at `path` (creating its parent); a `LinkOut` points at `victim`.
fn plant(path: &Path, form: Form, victim: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    match form {
        Form::Fifo => nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).unwrap(),
        Form::DevZero => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        Form::LinkOut => {
            fs::write(victim, VICTIM).unwrap();
            std::os::unix::fs::symlink(victim, path).unwrap();
        }
        Form::Dir => fs::create_dir(path).unwrap(),
        Form::Huge => fs::write(path, vec![b'9'; 20 << 20]).unwrap(),
        Form::Garbage => fs::write(path, b"\x01: [not {toon\n\"").unwrap(),
    }
}

/// The victim of a `LinkOut`, outside the repo.
fn victim(f: &Fleet) -> PathBuf {
    f.file("victim.txt")
}

/// Files outside every lane a sweep or the supervisor may delete from.
fn plant_durable(f: &Fleet) -> Vec<PathBuf> {
    let keep = f.repo.join(".red/state/keep.txt");
    fs::create_dir_all(keep.parent().unwrap()).unwrap();
    fs::write(&keep, "durable").unwrap();
    vec![keep, f.repo.join("README.md")]
}

fn assert_intact(f: &Fleet, durable: &[PathBuf], forms: &[(PathBuf, Form)]) {
    for p in durable {
        assert!(p.is_file(), "{} was deleted", p.display());
    }
    for (p, form) in forms {
        match form {
            // Never the supervisor's to delete: it stays.
            Form::Dir => assert!(p.is_dir(), "{} was deleted", p.display()),
            Form::LinkOut => assert_eq!(fs::read(victim(f)).unwrap(), VICTIM),
            _ => {}
        }
    }
}

/// The supervisor's peak resident set (`VmHWM`), in KiB.
fn peak_rss_kb(pid: i32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn assert_bounded_memory(f: &Fleet) {
    let kb = peak_rss_kb(f.sup_pid()).expect("supervisor status");
    assert!(kb < RSS_CAP_KB, "supervisor peak RSS {kb} KiB");
}

/// A finished command: its exit code (None: killed by a signal) and output.
struct Done {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs a control command (under the address-space limit); a command still running after
/// `WAIT` is killed and fails the test as wedged. Output goes to files, so a huge message
/// cannot block the command on a full pipe.
fn run_bounded(f: &Fleet, args: &[&str]) -> Done {
    let n = fs::read_dir(f.env.path()).unwrap().count();
    let (out_p, err_p) = (
        f.file(&format!("cmd-{n}.out")),
        f.file(&format!("cmd-{n}.err")),
    );
    let mut cmd = f.cmd(args);
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&out_p).unwrap())
        .stderr(fs::File::create(&err_p).unwrap());
    let mut child = cmd.spawn().unwrap();
    let mut status = None;
    let finished = wait_until(WAIT, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !finished {
        let _ = child.kill();
        let _ = child.wait();
        panic!("`{}` wedged", args.join(" "));
    }
    Done {
        code: status.unwrap().code(),
        stdout: fleet::read(&out_p),
        stderr: fleet::read(&err_p),
    }
}

fn sigterm_and_expect_143(f: &mut Fleet) {
    kill(f.sup_pid(), Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143), "log:\n{}", f.dump());
}

/// The stderr of the `n`th supervisor started in this test.
fn sup_stderr(f: &Fleet, n: usize) -> String {
    fleet::read(&f.file(&format!("supervisor-{n}.err")))
}

fn remove_planted(p: &Path) {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p).unwrap(),
        Ok(_) => fs::remove_file(p).unwrap(),
        Err(_) => {}
    }
}

/// Files without which the supervisor cannot run: a clear one-line error naming the file,
/// exit 1, the pid files gone again (so `status` says nothing runs) and the file kept.
#[test]
fn start_up_files_that_make_running_impossible_fail_at_once_naming_the_file() {
    let mut f = bounded_fleet();
    let l = f.layout.clone();
    let durable = plant_durable(&f);
    let cases = [
        (l.event_log(), Form::Fifo, "not a regular file (a FIFO)"),
        (l.event_log(), Form::DevZero, "is a symlink"),
        (l.event_log(), Form::Dir, "a directory"),
        (
            l.supervisor_lock(),
            Form::Fifo,
            "not a regular file (a FIFO)",
        ),
        (l.supervisor_lock(), Form::DevZero, "is a symlink"),
        (l.state_file(), Form::Dir, "is a directory"),
        (tmp_file(&l.state_file()), Form::Dir, "is a directory"),
        (l.supervisor_pid(), Form::Dir, "afk-supervisor.pid"),
    ];
    for (n, (path, form, why)) in cases.iter().enumerate() {
        // The lock file an earlier case's supervisor created is the test's to replace.
        remove_planted(path);
        plant(path, *form, &victim(&f));
        f.start(&["--workers", "1"]);
        let code = f.wait_exit().code();
        let err = sup_stderr(&f, n);
        let case = format!("{} as {form:?}: {err}", path.display());
        assert_eq!(code, Some(1), "{case}");
        assert_eq!(err.lines().count(), 1, "{case}");
        let name = path.file_name().unwrap().to_string_lossy();
        assert!(err.contains(&*name) && err.contains(why), "{case}");
        if *path != l.supervisor_pid() {
            assert!(!l.supervisor_pid().exists(), "pid file left: {case}");
        }
        let token = afk_supervisor::layout::start_file(&l.supervisor_pid());
        assert!(!token.exists(), "start token left: {case}");
        assert_eq!(run_bounded(&f, &["status"]).code, Some(3), "{case}");
        assert_intact(&f, &durable, &[(path.clone(), *form)]);
        assert!(fs::symlink_metadata(path).is_ok(), "deleted: {case}");
        assert_eq!(f.live_script_processes(), 0, "{case}");
        remove_planted(path);
    }
}

/// The config file in every hostile form: exit 78, one short line naming the file, for the
/// supervisor and for `stop` alike.
#[test]
fn hostile_config_file_is_one_short_line_and_exit_78() {
    let f = bounded_fleet();
    let cfg = f.repo.join(".red/afk-supervisor.toml");
    // Under the 1 MiB read cap, so the parser sees it and quotes it.
    let huge_key = format!("[fleet]\n{} = 2\n", "k".repeat(1 << 19));
    let cases: [(Option<Form>, &str); 6] = [
        (Some(Form::Fifo), "not a regular file (a FIFO)"),
        (
            Some(Form::DevZero),
            "not a regular file (a character device)",
        ),
        (Some(Form::Dir), "not a regular file (a directory)"),
        (Some(Form::Huge), "larger than"),
        (Some(Form::Garbage), "afk-supervisor.toml:1:"),
        (None, "unknown field"),
    ];
    for (form, why) in cases {
        remove_planted(&cfg);
        match form {
            Some(form) => plant(&cfg, form, &victim(&f)),
            None => fs::write(&cfg, &huge_key).unwrap(),
        }
        for args in [&["--workers", "1"][..], &["stop"][..]] {
            let d = run_bounded(&f, args);
            let case = format!("{form:?} {args:?}: {}", d.stderr);
            assert_eq!(d.code, Some(78), "{case}");
            assert_eq!(d.stderr.lines().count(), 1, "{case}");
            assert!(d.stderr.len() < 400, "{} bytes: {form:?}", d.stderr.len());
            assert!(
                d.stderr.contains("afk-supervisor.toml") && d.stderr.contains(why),
                "{case}"
            );
        }
        assert_eq!(f.live_script_processes(), 0);
    }
}

/// Hostile lane files at start that the supervisor can run with: each is reported as one
/// line naming the file, the fleet starts, its own files are replaced (the `docs/SPEC.md` lets the
/// supervisor rewrite them), nothing else is deleted, memory stays bounded, and SIGTERM is
/// answered.
fn start_with(planted: &[(LanePath, Form)], logged: &[&str]) {
    let mut f = bounded_fleet();
    let durable = plant_durable(&f);
    let forms: Vec<(PathBuf, Form)> = planted.iter().map(|(p, form)| (p(&f), *form)).collect();
    for (p, form) in &forms {
        plant(p, *form, &victim(&f));
    }
    f.start(&["--workers", "1"]);
    // Waited for through the event log and a look at the lane that cannot block (the
    // heartbeat helper reads `state.toon`, which may still be the planted file).
    f.wait_events(Kind::SlotSpawn, 1);
    let is_file = || fs::symlink_metadata(f.layout.state_file()).is_ok_and(|m| m.is_file());
    assert!(
        wait_until(WAIT, is_file),
        "state.toon not rewritten as a file"
    );
    f.wait_workers(1);
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    let errors: Vec<String> = f
        .events_of(Kind::SupervisorError)
        .into_iter()
        .map(|e| e.msg)
        .collect();
    for needle in logged {
        let hits = errors.iter().filter(|m| m.contains(needle)).count();
        assert_eq!(
            hits,
            1,
            "{needle:?} logged {hits} times; log:\n{}",
            f.dump()
        );
    }
    assert_bounded_memory(&f);
    sigterm_and_expect_143(&mut f);
    assert_intact(&f, &durable, &forms);
    assert_eq!(f.live_script_processes(), 0);
}

/// A lane file of a test's repo.
type LanePath = fn(&Fleet) -> PathBuf;

fn state(f: &Fleet) -> PathBuf {
    f.layout.state_file()
}
fn state_tmp(f: &Fleet) -> PathBuf {
    tmp_file(&f.layout.state_file())
}
fn resize(f: &Fleet) -> PathBuf {
    f.layout.resize_file()
}
fn resize_tmp(f: &Fleet) -> PathBuf {
    tmp_file(&f.layout.resize_file())
}
fn pid(f: &Fleet) -> PathBuf {
    f.layout.supervisor_pid()
}
fn pid_tmp(f: &Fleet) -> PathBuf {
    tmp_file(&f.layout.supervisor_pid())
}
fn start_token(f: &Fleet) -> PathBuf {
    afk_supervisor::layout::start_file(&f.layout.supervisor_pid())
}
fn stop_file(f: &Fleet) -> PathBuf {
    f.layout.supervisor_stop()
}

#[test]
fn state_file_as_a_fifo_at_start_is_reported_not_waited_on() {
    start_with(
        &[(state, Form::Fifo)],
        &["state.toon: not a regular file (a FIFO); no worker adopted"],
    );
}

#[test]
fn state_file_linked_to_dev_zero_at_start_is_not_followed() {
    start_with(
        &[(state, Form::DevZero)],
        &["state.toon: is a symlink (not followed); no worker adopted"],
    );
}

#[test]
fn state_tmp_as_a_fifo_does_not_wedge_the_heartbeat() {
    start_with(&[(state_tmp, Form::Fifo)], &[]);
}

#[test]
fn huge_or_garbage_lane_files_and_directories_at_start_are_survived() {
    start_with(
        &[
            (state, Form::Huge),
            (start_token, Form::Garbage),
            (resize, Form::Dir),
            (stop_file, Form::Dir),
        ],
        &[
            "state.toon: larger than",
            "resize.toon: is a directory, not a control file; left in place",
            "afk-supervisor.stop: is a directory, not a control file; left in place",
            "afk-supervisor.stop: not a regular file (a directory); not a stop request",
            "resize.toon: not read: not a regular file (a directory)",
        ],
    );
}

#[test]
fn pid_files_fifos_and_links_at_start_are_replaced_never_followed() {
    start_with(
        &[
            (pid, Form::Fifo),
            (pid_tmp, Form::Fifo),
            (start_token, Form::DevZero),
            (resize, Form::Fifo),
            (resize_tmp, Form::Fifo),
            (state_tmp, Form::LinkOut),
        ],
        &[
            "afk-supervisor.pid: not a regular file (a FIFO)",
            "resize.toon: stale file removed",
        ],
    );
}

/// While the fleet runs: `resize.toon` in every hostile form is logged once and ignored,
/// the tick keeps running (a dead worker is respawned), memory stays bounded; a stop
/// sentinel that is not a file is no stop request; `status`, `scale` and `stop` answer with
/// hostile files in place.
#[test]
fn hostile_control_files_at_runtime_are_logged_once_and_never_wedge_the_loop() {
    let mut f = bounded_fleet();
    let durable = plant_durable(&f);
    f.start(&["--workers", "1"]);
    let mut worker = f.wait_workers(1)[0];
    let resize_p = f.layout.resize_file();
    for (form, why) in [
        (Form::Fifo, "not a regular file (a FIFO)"),
        (Form::DevZero, "is a symlink"),
        (Form::Dir, "not a regular file (a directory)"),
        (Form::Huge, "larger than 65536 bytes"),
        (Form::Garbage, "target stays 1"),
    ] {
        let errors = f.count(Kind::SupervisorError);
        plant(&resize_p, form, &victim(&f));
        let evs = f.wait_events(Kind::SupervisorError, errors + 1);
        let msg = &evs.last().unwrap().msg;
        assert!(
            msg.contains("resize.toon: ") && msg.contains(why),
            "{form:?}: {msg}"
        );
        assert_eq!(msg.lines().count(), 1);
        assert!(msg.len() < 400, "{form:?}: {} bytes", msg.len());
        // The loop still turns: a killed worker is respawned, the error is not repeated.
        kill(worker, Signal::SIGKILL);
        assert!(
            wait_until(WAIT, || f
                .worker_pids()
                .first()
                .is_some_and(|p| *p != worker)),
            "{form:?}: no respawn; log:\n{}",
            f.dump()
        );
        worker = f.worker_pids()[0];
        let ticks = f.count(Kind::SupervisorTick);
        f.wait_events(Kind::SupervisorTick, ticks + 2);
        assert_eq!(f.count(Kind::SupervisorError), errors + 1, "{}", f.dump());
        assert_bounded_memory(&f);
        assert_eq!(f.state().unwrap().target, 1);
        if form == Form::Dir {
            assert!(
                resize_p.is_dir(),
                "the directory is not the supervisor's to delete"
            );
        }
        remove_planted(&resize_p);
    }

    // A stop sentinel that is not a regular file is reported once, and is no stop.
    let errors = f.count(Kind::SupervisorError);
    plant(&f.layout.supervisor_stop(), Form::Fifo, &victim(&f));
    let evs = f.wait_events(Kind::SupervisorError, errors + 1);
    assert!(
        evs.last()
            .unwrap()
            .msg
            .contains("afk-supervisor.stop: not a regular file")
    );
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    assert_eq!(f.count(Kind::SupervisorError), errors + 1);
    assert_eq!(f.count(Kind::SupervisorStop), 0);

    // `status` with the heartbeat replaced by a FIFO answers (the supervisor may already
    // have rewritten it); `scale` writes through a FIFO planted at `resize.toon.tmp`.
    remove_planted(&f.layout.state_file());
    plant(&f.layout.state_file(), Form::Fifo, &victim(&f));
    let d = run_bounded(&f, &["status"]);
    assert!(
        d.code == Some(0) || (d.code == Some(1) && d.stderr.contains("state.toon: not a regular")),
        "{:?} {}",
        d.code,
        d.stderr
    );
    plant(&tmp_file(&resize_p), Form::Fifo, &victim(&f));
    let d = run_bounded(&f, &["scale", "2"]);
    assert_eq!(d.code, Some(0), "{} {}", d.stdout, d.stderr);
    assert!(d.stdout.contains("directive applied"), "{}", d.stdout);
    f.wait_workers(2);

    // `stop` through the FIFO sentinel (replaced by its atomic write) stops the fleet.
    let d = run_bounded(&f, &["stop"]);
    assert_eq!(d.code, Some(0), "{} {}", d.stdout, d.stderr);
    assert_eq!(f.wait_exit().code(), Some(143));
    assert_intact(&f, &durable, &[]);
    assert_eq!(f.live_script_processes(), 0);
}

/// `stop` after a SIGKILLed supervisor, with `state.toon` linked to `/dev/zero` (it once
/// grew to 23 GB): it answers in bounded memory, warning that the file was not read.
#[test]
fn stop_with_the_state_file_linked_to_dev_zero_stays_small() {
    let mut f = bounded_fleet();
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    kill(f.sup_pid(), Signal::SIGKILL);
    f.wait_exit();
    remove_planted(&f.layout.state_file());
    plant(&f.layout.state_file(), Form::DevZero, &victim(&f));
    // The worker that outlived its supervisor is still found (by its environment, not by
    // the unreadable state file), so `stop` does not claim there is no fleet.
    let d = run_bounded(&f, &["stop"]);
    assert_eq!(d.code, Some(1), "{:?} {}", d.code, d.stderr);
    assert!(
        d.stderr.contains("state.toon: is a symlink (not followed)"),
        "{}",
        d.stderr
    );
    assert!(
        d.stderr.contains("processes of the fleet are live"),
        "{}",
        d.stderr
    );
    assert_eq!(d.stderr.lines().count(), 2, "{}", d.stderr);
    let d = run_bounded(&f, &["stop", "--force"]);
    assert_eq!(d.code, Some(0), "{:?} {}", d.code, d.stderr);
    assert_eq!(f.live_script_processes(), 0);
    let d = run_bounded(&f, &["stop"]);
    assert_eq!(d.stdout.trim(), "no fleet running", "{}", d.stderr);
    // Not the command's to delete: the link stays.
    assert!(fs::symlink_metadata(f.layout.state_file()).is_ok());
}

/// A slot log that is a FIFO or a link out of the repo: the spawn fails naming the log
/// (the circuit then parks the slot), nothing is written through the link, and the
/// supervisor answers SIGTERM.
#[test]
fn hostile_slot_logs_fail_the_spawn_not_the_supervisor() {
    let mut f = bounded_fleet();
    let durable = plant_durable(&f);
    let date = date_utc(SystemTime::now());
    let fifo = f.layout.slot_log(&date, 0);
    let link = f.layout.slot_log(&date, 1);
    plant(&fifo, Form::Fifo, &victim(&f));
    plant(&link, Form::LinkOut, &victim(&f));
    f.start(&["--workers", "2"]);
    let fails = f.wait_events(Kind::SlotSpawnFailed, 2);
    for (slot, why) in [(0, "not a regular file (a FIFO)"), (1, "is a symlink")] {
        assert!(
            fails.iter().any(|e| e.slot == Some(slot)
                && e.msg.contains("afk-supervisor-slot-")
                && e.msg.contains(why)),
            "slot {slot}; log:\n{}",
            f.dump()
        );
    }
    f.wait_events(Kind::CircuitTrip, 2);
    assert_eq!(f.live_script_processes(), 0);
    sigterm_and_expect_143(&mut f);
    assert_intact(&f, &durable, &[(link.clone(), Form::LinkOut)]);
    assert!(fs::symlink_metadata(&fifo).is_ok() && fs::symlink_metadata(&link).is_ok());
}
