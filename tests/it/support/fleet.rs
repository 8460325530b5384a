//! Driving a real supervisor binary with small shell-script workers.
//!
//! Every process of a test carries `AFK_TEST_TAG=<unique>` in its environment (the
//! supervisor passes it on; it strips only `RED_AFK_*`), so the guard can find and kill
//! the supervisor, its workers and their grandchildren even when an assertion failed.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use afk_supervisor::event_log::{self, Record};
use afk_supervisor::lanes::state_file::{self, StateFile};
use afk_supervisor::layout::Layout;
use afk_supervisor::process;

use crate::support::{TestEnv, json_comments, json_labels, wait_until};
use afk_supervisor::event_log::Kind;

/// Generous: CI shares two cores with other builds.
pub const WAIT: Duration = Duration::from_secs(30);

/// Small timings for tests (durations are whole seconds in the config).
pub const FAST_TIMING: &str = "[timing]\ntick_s = 1\nfast_death_s = 1\ncircuit_k = 3\n\
circuit_window_s = 60\nhalf_open_base_s = 1\nhalf_open_cap_s = 4\nstop_grace_s = 2\n\
stall_s = 600\nstall_kill_s = 1200\n";

/// What [`Fleet::status_json`] holds `status`'s exit code to.
pub enum StatusExit {
    /// Nothing, and output that is not JSON reads as `Null`: for polling.
    Any,
    /// This code.
    Is(i32),
    /// The code the document's health means: 1 degraded (an operator pause is one reason),
    /// 0 else.
    OfHealth,
}

pub struct Fleet {
    pub env: TestEnv,
    pub repo: PathBuf,
    pub layout: Layout,
    pub tag: String,
    pub script: PathBuf,
    pub sup: Option<Child>,
    /// Extra variables for the supervisor (e.g. `RED_AFK_*` that must not reach workers).
    pub extra_env: Vec<(String, String)>,
    /// An address-space limit (bytes) for every command of [`Fleet::cmd`] and so for its
    /// workers: set on the child, never on the test process the other tests share.
    pub address_space: Option<u64>,
    /// A soft open-files limit for every command of [`Fleet::cmd`] (the hard one kept).
    pub open_files: Option<u64>,
    /// The user (and group of the same number) every command of [`Fleet::cmd`] runs as,
    /// for a fleet of an unprivileged operator in a root test (see [`Fleet::hand_to`]).
    pub run_as: Option<u32>,
}

impl Fleet {
    /// A repo whose config runs `sh <dir>/worker.sh` with `timing` (TOML) appended.
    pub fn new(worker_script: &str, timing: &str) -> Fleet {
        let env = TestEnv::new();
        let repo = env.repo_with_origin().path;
        let script = env.path().join("worker.sh");
        fs::write(&script, worker_script).unwrap();
        let tag = format!(
            "{}-{}",
            std::process::id(),
            env.path().file_name().unwrap().to_string_lossy()
        );
        fs::create_dir_all(repo.join(".red")).unwrap();
        let config = format!(
            "[worker]\ncommand = [\"sh\", \"{}\"]\n\n{timing}",
            script.display()
        );
        fs::write(repo.join(".red/afk-supervisor.toml"), config).unwrap();
        let layout = Layout::new(&repo);
        Fleet {
            env,
            repo,
            layout,
            tag,
            script,
            sup: None,
            extra_env: Vec::new(),
            address_space: None,
            open_files: None,
            run_as: None,
        }
    }

    /// A path in the test's temp dir, for files the worker scripts write or watch.
    pub fn file(&self, name: &str) -> PathBuf {
        self.env.path().join(name)
    }

    /// The binary with the test environment, the tag and `--repo`.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.env.bin();
        c.env("AFK_TEST_TAG", &self.tag)
            .env("AFK_TEST_DIR", self.env.path())
            .arg("--repo")
            .arg(&self.repo)
            .args(args);
        for (k, v) in &self.extra_env {
            c.env(k, v);
        }
        if let Some(soft) = self.open_files {
            // SAFETY: as below: getrlimit and setrlimit in the forked child only.
            unsafe {
                c.pre_exec(move || {
                    let mut lim = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    lim.rlim_cur = soft;
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        if let Some(id) = self.run_as {
            // std drops the supplementary groups too when it changes the user as root.
            c.uid(id).gid(id);
        }
        if let Some(bytes) = self.address_space {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            // SAFETY: the closure runs in the forked child before exec and only calls
            // setrlimit, which is async-signal-safe and reads the struct copied into it.
            unsafe {
                c.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_AS, &lim) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        c
    }

    /// Makes everything of the test (its dir: the repo, `origin`, the home) the user
    /// `id`'s and runs every later command as that user; the test's own git calls accept
    /// the repo's new owner (`safe.directory`).
    pub fn hand_to(&mut self, id: u32) {
        let out = Command::new("chown")
            .arg("-R")
            .arg(format!("{id}:{id}"))
            .arg(self.env.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "chown: {out:?}");
        let mut cfg = fs::read_to_string(&self.env.gitconfig).unwrap();
        cfg.push_str("[safe]\n\tdirectory = *\n");
        fs::write(&self.env.gitconfig, cfg).unwrap();
        self.run_as = Some(id);
    }

    /// Every slot log of the fleet, concatenated.
    pub fn slot_logs(&self) -> String {
        let mut out = String::new();
        let logs = self.layout.tmp().join("logs");
        for day in fs::read_dir(&logs).into_iter().flatten().flatten() {
            for log in fs::read_dir(day.path()).into_iter().flatten().flatten() {
                out.push_str(&fs::read_to_string(log.path()).unwrap_or_default());
            }
        }
        out
    }

    /// `stop` (exit 0 required) and the supervisor's end.
    pub fn stop_fleet(&mut self) {
        let out = self.run_cmd(&["stop", "--timeout", "60"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}\n{}", self.dump());
        self.wait_exit();
    }

    pub fn run_cmd(&self, args: &[&str]) -> Output {
        self.cmd(args).stdin(Stdio::null()).output().unwrap()
    }

    /// `status --json`'s document, its exit code checked as `exit` says.
    pub fn status_json(&self, exit: StatusExit) -> serde_json::Value {
        let out = self.run_cmd(&["status", "--json"]);
        match exit {
            StatusExit::Any => {
                serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
            }
            StatusExit::Is(code) => {
                assert_eq!(out.status.code(), Some(code), "{out:?}");
                serde_json::from_slice(&out.stdout).unwrap()
            }
            StatusExit::OfHealth => {
                let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                let want = if j["health"] == "degraded" { 1 } else { 0 };
                assert_eq!(out.status.code(), Some(want), "{out:?}");
                j
            }
        }
    }

    /// `status`'s text once a line of it satisfies `line` (the heartbeat follows the event
    /// log within `HEARTBEAT_GAP`), or the last text at the deadline.
    pub fn wait_status_line(&self, line: impl Fn(&str) -> bool) -> String {
        let mut text = String::new();
        wait_until(WAIT, || {
            text = String::from_utf8_lossy(&self.run_cmd(&["status"]).stdout).into_owned();
            text.lines().any(&line)
        });
        text
    }

    /// Starts the supervisor in the background; its stderr goes to `supervisor-<n>.err`.
    pub fn start(&mut self, args: &[&str]) -> i32 {
        let n = fs::read_dir(self.env.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("supervisor-"))
            })
            .count();
        let err = fs::File::create(self.file(&format!("supervisor-{n}.err"))).unwrap();
        let child = self
            .cmd(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        self.sup = Some(child);
        pid
    }

    pub fn sup_pid(&self) -> i32 {
        self.sup.as_ref().expect("started").id() as i32
    }

    /// Waits for the supervisor to exit and returns its status.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.sup.take().expect("started");
        let mut status = None;
        assert!(
            wait_until(WAIT, || {
                status = child.try_wait().unwrap();
                status.is_some()
            }),
            "supervisor did not exit"
        );
        status.unwrap()
    }

    pub fn events(&self) -> Vec<Record> {
        match event_log::read_events(&self.layout.event_log()) {
            Ok(e) => e,
            // Not there yet when read, though it may be by now (the supervisor creates it
            // as it starts): judged by the read's own error, not by a second look.
            Err(afk_supervisor::toonl::LogError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Vec::new()
            }
            Err(e) => panic!("event log does not decode: {e}"),
        }
    }

    pub fn events_of(&self, kind: Kind) -> Vec<Record> {
        self.events()
            .into_iter()
            .filter(|e| e.kind == kind)
            .collect()
    }

    pub fn count(&self, kind: Kind) -> usize {
        self.events_of(kind).len()
    }

    /// Waits until at least `n` records of `kind` exist; panics with the log otherwise.
    pub fn wait_events(&self, kind: Kind, n: usize) -> Vec<Record> {
        let ok = wait_until(WAIT, || self.count(kind.clone()) >= n);
        assert!(ok, "waited for {n} x {kind}; log:\n{}", self.dump());
        self.events_of(kind)
    }

    /// Waits until a record of `kind` whose message contains `text` exists, and returns it;
    /// panics with the log otherwise. For what the supervisor logs after it acts (a stray is
    /// sent its SIGTERM before the line saying so is written).
    pub fn wait_event_with(&self, kind: Kind, text: &str) -> Record {
        let mut found = None;
        let ok = wait_until(WAIT, || {
            found = self
                .events_of(kind.clone())
                .into_iter()
                .find(|e| e.msg.contains(text));
            found.is_some()
        });
        assert!(ok, "waited for {kind} with {text:?}; log:\n{}", self.dump());
        found.expect("found when waited for")
    }

    pub fn state(&self) -> Option<StateFile> {
        state_file::read(&self.layout.state_file()).ok().flatten()
    }

    /// Live worker pids recorded in the heartbeat of the current supervisor.
    pub fn worker_pids(&self) -> Vec<i32> {
        let Some(s) = self.state() else {
            return Vec::new();
        };
        s.slot_pids.iter().map(|p| p.pid).collect()
    }

    /// Waits until the heartbeat shows exactly `n` live workers.
    pub fn wait_workers(&self, n: usize) -> Vec<i32> {
        let ok = wait_until(WAIT, || {
            self.state()
                .is_some_and(|s| s.slot_pids.len() == n && s.pid == self.sup_pid_or_zero())
        });
        assert!(ok, "waited for {n} workers; log:\n{}", self.dump());
        self.worker_pids()
    }

    fn sup_pid_or_zero(&self) -> i32 {
        self.sup.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// Workers (live group leaders running the worker script) as `/proc` shows them now.
    /// Only leaders count: a worker's own forks carry its command line until they exec.
    pub fn live_script_processes(&self) -> usize {
        let script = self.script.display().to_string();
        process::table()
            .into_iter()
            .filter(|p| !p.is_zombie() && p.pid == p.pgid)
            .filter(|p| {
                fs::read(format!("/proc/{}/cmdline", p.pid))
                    .map(|c| String::from_utf8_lossy(&c).contains(&script))
                    .unwrap_or(false)
            })
            .count()
    }

    /// Every live (non-zombie) process carrying this test's tag.
    pub fn tagged(&self) -> Vec<i32> {
        tagged_processes(&self.tag)
    }

    /// Zombies whose parent is `parent`.
    pub fn zombies_of(&self, parent: i32) -> Vec<i32> {
        process::table()
            .into_iter()
            .filter(|p| p.ppid == parent && p.is_zombie())
            .map(|p| p.pid)
            .collect()
    }

    pub fn dump(&self) -> String {
        let mut out = String::new();
        for e in self.events() {
            out.push_str(&format!(
                "{} {} slot={:?} pid={:?} {}\n",
                e.ts, e.kind, e.slot, e.pid, e.msg
            ));
        }
        out
    }

    /// One issue of the local tracker as `issue show --json` prints it.
    pub fn show_issue(&self, n: u64) -> serde_json::Value {
        let out = self.run_cmd(&["issue", "show", &n.to_string(), "--json"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn labels_of(&self, n: u64) -> Vec<String> {
        json_labels(&self.show_issue(n))
    }

    pub fn comments_of(&self, n: u64) -> Vec<String> {
        json_comments(&self.show_issue(n))
    }

    /// Makes the binary reachable from worker scripts as `$AFK_TEST_BIN`.
    pub fn with_bin(mut self) -> Fleet {
        self.extra_env.push((
            "AFK_TEST_BIN".into(),
            env!("CARGO_BIN_EXE_afk-supervisor").into(),
        ));
        self
    }

    /// Files an issue labelled `ready-for-agent` on the repo's tracker.
    pub fn new_issue(&self, title: &str) {
        let out = self.run_cmd(&[
            "issue",
            "new",
            "--title",
            title,
            "--label",
            "ready-for-agent",
        ]);
        assert!(out.status.success(), "{out:?}");
    }

    pub fn write_config(&self, text: &str) {
        fs::write(self.repo.join(".red/afk-supervisor.toml"), text).unwrap();
    }
}

pub fn tagged_processes(tag: &str) -> Vec<i32> {
    let needle = format!("AFK_TEST_TAG={tag}");
    process::table()
        .into_iter()
        .filter(|p| !p.is_zombie())
        .filter(|p| {
            fs::read(format!("/proc/{}/environ", p.pid))
                .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                .unwrap_or(false)
        })
        .map(|p| p.pid)
        .collect()
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for _ in 0..3 {
            for pid in tagged_processes(&self.tag) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        if let Some(mut c) = self.sup.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

pub fn kill(pid: i32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).unwrap();
}

pub fn alive(pid: i32) -> bool {
    process::read(pid).is_some_and(|p| !p.is_zombie())
}
