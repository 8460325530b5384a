//! Under systemd: the notify protocol a real supervisor speaks on `NOTIFY_SOCKET`, and the
//! user unit `systemd install` writes, checked by `systemd-analyze verify`.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::fleet::{self, FAST_TIMING, Fleet, WAIT};
use crate::support::stdout_ok;
use afk_supervisor::event_log::Kind;

/// Notes what of the service manager's environment reached it, then waits.
const WORKER: &str = r#"
echo "${NOTIFY_SOCKET:-none} ${WATCHDOG_USEC:-none}" > "$AFK_TEST_DIR/env-$RED_AFK_SLOT"
exec sleep 600
"#;

/// The next datagram, or `None` once `deadline` passes.
fn next_message(sock: &UnixDatagram, deadline: Instant) -> Option<String> {
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match sock.recv(&mut buf) {
            Ok(n) => return Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("notify socket: {e}"),
        }
    }
    None
}

#[test]
fn ready_after_the_workers_then_status_per_tick_watchdog_and_stopping() {
    let mut f = Fleet::new(WORKER, FAST_TIMING);
    let path = f.file("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    f.extra_env
        .push(("NOTIFY_SOCKET".into(), path.display().to_string()));
    // A ping every half second.
    f.extra_env.push(("WATCHDOG_USEC".into(), "1000000".into()));
    f.start(&["--workers", "2"]);

    let deadline = Instant::now() + WAIT;
    // The boot suite's progress first: a STATUS= as each sweep starts and ends.
    let mut boot = Vec::new();
    let first = loop {
        let m = next_message(&sock, deadline).expect("no message from the supervisor");
        if !m.starts_with("STATUS=boot sweeps: ") {
            break m;
        }
        boot.push(m);
    };
    assert_eq!(boot.len(), 12, "{boot:?}");
    assert_eq!(boot[0], "STATUS=boot sweeps: 1/6 orphans started\n");
    assert!(
        boot[11].starts_with("STATUS=boot sweeps: 6/6 stragglers done in "),
        "{boot:?}"
    );
    // READY=1 comes once the workers are recorded in the heartbeat, not before.
    let state = f.state().expect("state.toon written before READY=1");
    assert_eq!(state.slot_pids.len(), 2, "{state:?}");
    assert_eq!(first, "READY=1\nSTATUS=started: target=2 live=2\n");

    let mut seen: Vec<String> = Vec::new();
    while seen.iter().filter(|m| m.starts_with("STATUS=")).count() < 2
        || !seen.iter().any(|m| m == "WATCHDOG=1\n")
    {
        seen.push(next_message(&sock, deadline).unwrap_or_else(|| {
            panic!(
                "waited for STATUS= and WATCHDOG=1, got {seen:?}\n{}",
                f.dump()
            )
        }));
    }
    for m in &seen {
        assert!(
            m == "WATCHDOG=1\n" || m.starts_with("STATUS=tick: slots=2 "),
            "unexpected {m:?} in {seen:?}"
        );
    }
    // One STATUS= per tick: as many as the tick lines logged so far (at most one more
    // tick may have been logged after the last datagram was read).
    let statuses = seen.iter().filter(|m| m.starts_with("STATUS=")).count();
    let ticks = f.count(Kind::SupervisorTick);
    assert!(
        ticks == statuses || ticks == statuses + 1,
        "{ticks} ticks, {statuses} STATUS= in {seen:?}"
    );

    fleet::kill(f.sup_pid(), Signal::SIGTERM);
    let mut after: Vec<String> = Vec::new();
    while !after.iter().any(|m| m == "STOPPING=1\n") {
        after.push(
            next_message(&sock, deadline)
                .unwrap_or_else(|| panic!("no STOPPING=1 after SIGTERM: {after:?}")),
        );
    }
    assert_eq!(f.wait_exit().code(), Some(143));
    assert!(!after.iter().any(|m| m.contains("READY=1")), "{after:?}");

    for slot in 0..2 {
        let env = fleet::read(&f.file(&format!("env-{slot}")));
        assert_eq!(
            env.trim(),
            "none none",
            "slot {slot} inherited the notify env"
        );
    }
}

/// A service manager that never reads: its socket's queue fills, and the fleet must still
/// run its loop (ticks, a stop) instead of blocking on a send.
#[test]
fn a_notify_socket_nobody_reads_never_blocks_the_event_loop() {
    let mut f = Fleet::new(WORKER, FAST_TIMING);
    let path = f.file("notify.sock");
    let _sock = UnixDatagram::bind(&path).unwrap();
    f.extra_env
        .push(("NOTIFY_SOCKET".into(), path.display().to_string()));
    // A ping every 10 ms fills any queue within the first tick.
    f.extra_env.push(("WATCHDOG_USEC".into(), "20000".into()));
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 3);
    fleet::kill(f.sup_pid(), Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143), "{}", f.dump());
    let err = fleet::read(&f.file("supervisor-0.err"));
    assert_eq!(
        err.matches(
            "notifying the service manager: the service manager is not reading; messages dropped"
        )
        .count(),
        1,
        "{err}"
    );
}

#[test]
fn without_notify_socket_the_fleet_runs_and_stops_as_before() {
    let mut f = Fleet::new(WORKER, FAST_TIMING);
    f.start(&["--workers", "1"]);
    f.wait_workers(1);
    f.wait_events(Kind::SupervisorTick, 1);
    fleet::kill(f.sup_pid(), Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143));
}

struct Installed {
    f: Fleet,
    config_home: PathBuf,
}

impl Installed {
    fn new() -> Installed {
        let f = Fleet::new(WORKER, FAST_TIMING);
        let config_home = f.file("config");
        Installed { f, config_home }
    }

    fn run(&self, args: &[&str]) -> Output {
        self.f
            .cmd(args)
            .env("XDG_CONFIG_HOME", &self.config_home)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn unit(&self) -> String {
        let ours = afk_supervisor::service_unit::escape_path(&self.f.repo);
        // Checked against systemd's own escaping wherever the systemd tools are (always
        // under CI=true; build.rs): `systemd-escape` ships beside `systemd-analyze`.
        if cfg!(afk_has_systemd_analyze) {
            let out = Command::new("systemd-escape")
                .arg("--path")
                .arg(&self.f.repo)
                .output()
                .expect("systemd-escape (the systemd package)");
            assert!(out.status.success(), "{out:?}");
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), ours);
        }
        format!("afk-supervisor@{ours}.service")
    }

    fn unit_dir(&self) -> PathBuf {
        self.config_home.join("systemd/user")
    }
}

#[test]
fn install_print_shows_both_files_and_the_commands_and_writes_nothing() {
    let i = Installed::new();
    let out = stdout_ok(&i.run(&["systemd", "install", "--workers", "3", "--print"]));
    let unit = i.unit();
    let bin = Path::new(env!("CARGO_BIN_EXE_afk-supervisor"));
    let git =
        afk_supervisor::service_unit::find_program("git", std::env::var_os("PATH").as_deref())
            .unwrap();
    let lines: Vec<&str> = out.lines().collect();
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| *l == needle)
            .unwrap_or_else(|| panic!("no line {needle:?} in:\n{out}"))
    };
    let template = at(&format!(
        "# {}",
        i.unit_dir().join("afk-supervisor@.service").display()
    ));
    let start = at(&format!("ExecStart={} --repo %f run", bin.display()));
    let dropin = at(&format!(
        "# {}",
        i.unit_dir()
            .join(format!("{unit}.d/afk-supervisor.conf"))
            .display()
    ));
    // The drop-in's PATH (the template has a generic one that it overrides).
    let path_line = lines
        .iter()
        .rposition(|l| l.starts_with("Environment=PATH="))
        .unwrap();
    let target = at("Environment=RED_AFK_TARGET=3");
    let enable = at(&format!("systemctl --user enable --now '{unit}'"));
    let journal = at(&format!("journalctl --user -u '{unit}' -f"));
    let linger = lines
        .iter()
        .position(|l| l.starts_with("loginctl enable-linger"))
        .unwrap();
    assert!(template < start && start < dropin && dropin < path_line);
    assert!(path_line < target && target < enable && enable < journal && journal < linger);
    let dirs: Vec<&str> = lines[path_line]["Environment=PATH=".len()..]
        .split(':')
        .collect();
    assert_eq!(dirs[0], bin.parent().unwrap().to_str().unwrap());
    assert!(
        dirs.contains(&git.parent().unwrap().to_str().unwrap()),
        "{dirs:?}"
    );
    assert!(out.contains("KillMode=process"), "{out}");
    assert!(!i.config_home.exists(), "--print wrote files");
}

fn verify(i: &Installed, unit: &str) -> Output {
    let run = i.f.file("xdg-run");
    std::fs::create_dir_all(&run).unwrap();
    i.f.env
        .command("systemd-analyze")
        .args(["--user", "verify", unit])
        .env("XDG_CONFIG_HOME", &i.config_home)
        .env("XDG_RUNTIME_DIR", &run)
        .env("SYSTEMD_LOG_COLOR", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
#[cfg_attr(
    not(afk_has_systemd_analyze),
    ignore = "needs systemd-analyze (apt-get install systemd); under CI=true it always runs"
)]
fn the_installed_unit_passes_systemd_analyze_verify_without_a_warning() {
    let i = Installed::new();
    stdout_ok(&i.run(&["systemd", "install", "--workers", "2"]));
    let unit = i.unit();
    let out = verify(&i, &unit);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");

    // The drop-in is part of what was verified: a bad key in it is reported.
    let dropin = i.unit_dir().join(format!("{unit}.d/afk-supervisor.conf"));
    let text = fleet::read(&dropin);
    std::fs::write(&dropin, format!("{text}NoSuchKey=1\n")).unwrap();
    let out = verify(&i, &unit);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unknown key 'NoSuchKey'"),
        "{out:?}"
    );
}

#[test]
fn uninstall_removes_the_instance_and_then_the_template() {
    let i = Installed::new();
    stdout_ok(&i.run(&["systemd", "install"]));
    let unit = i.unit();
    let dir = i.unit_dir();
    let wants = dir.join("default.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink(dir.join("afk-supervisor@.service"), wants.join(&unit)).unwrap();
    let out = stdout_ok(&i.run(&["systemd", "uninstall"]));
    assert!(
        out.contains(&format!("removed {}", wants.join(&unit).display())),
        "{out}"
    );
    assert!(!dir.join(format!("{unit}.d")).exists());
    assert!(!dir.join("afk-supervisor@.service").exists());
    assert!(std::fs::symlink_metadata(wants.join(&unit)).is_err());
    let out = stdout_ok(&i.run(&["systemd", "uninstall"]));
    assert!(
        out.starts_with(&format!("{unit}: nothing installed\n")),
        "{out}"
    );
}
