//! Building `.red/tmp` trees for the orphan and attempt-cap tests: worker dirs with live,
//! dead, reused or corrupt pids, attempt dirs with state files and mtimes set relative to
//! an injected "now". The benches that build such trees include this file by `#[path]`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, SystemTime};

use afk_supervisor::layout::{Layout, start_file};
use afk_supervisor::pidfile;

pub const DAY: Duration = Duration::from_secs(86_400);
pub const MIN: Duration = Duration::from_secs(60);

/// The pid of a process that has exited. It is left a zombie, never reaped while the test
/// binary runs, so the kernel cannot hand its pid to a new process: a reaped pid could be
/// reused under load (pid_max may be 32768) and read as live, a test of "dead" turning
/// into a test of whatever took the number.
pub fn dead_pid() -> i32 {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    let c = Command::new("true").spawn().expect("spawn true");
    let pid = c.id();
    // Wait for the exit but leave the zombie in place (WNOWAIT); dropping `c` reaps nothing.
    waitid(
        Id::Pid(nix::unistd::Pid::from_raw(pid as i32)),
        WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
    )
    .expect("waitid true");
    drop(c);
    pid as i32
}

/// A live `sleep` that is killed and reaped when dropped.
pub struct LiveProc(Child);

impl LiveProc {
    pub fn spawn() -> Self {
        LiveProc(
            Command::new("sleep")
                .arg("60")
                .spawn()
                .expect("spawn sleep"),
        )
    }

    pub fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for LiveProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a pid file holds.
#[derive(Debug, Clone, Copy)]
pub enum Pid {
    /// Written with its real `.start`.
    Live(i32),
    /// A live process's pid with a `.start` that does not match: the pid was reused.
    Reused(i32),
    /// An exited pid, with a `.start` no process can match (robust against pid reuse
    /// while the test runs).
    Dead(i32),
    /// An exited pid with no `.start`: existence alone decides.
    DeadNoStart(i32),
    Corrupt,
    Missing,
    /// A directory where the pid file should be: it cannot be judged.
    NotAFile,
    /// A FIFO where the pid file should be: reading it must not wait for a writer.
    Fifo,
    /// A pid with a `.start` that is not a number: identity cannot be judged.
    BadStart(i32),
}

pub fn write_pid(file: &Path, pid: Pid) {
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    // Whatever an earlier call left in the pid file's place (a dir, a FIFO) goes first.
    match fs::symlink_metadata(file) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(file).unwrap(),
        Ok(_) => fs::remove_file(file).unwrap(),
        Err(_) => {}
    }
    let _ = fs::remove_file(start_file(file));
    match pid {
        Pid::Live(p) => {
            pidfile::write_pid_file(file, p).unwrap();
        }
        Pid::Reused(p) => {
            let start = pidfile::process_start_time(p).unwrap();
            fs::write(file, format!("{p}\n")).unwrap();
            fs::write(start_file(file), format!("{}\n", start + 12345)).unwrap();
        }
        Pid::Dead(p) => {
            fs::write(file, format!("{p}\n")).unwrap();
            fs::write(start_file(file), "1\n").unwrap();
        }
        Pid::DeadNoStart(p) => fs::write(file, format!("{p}\n")).unwrap(),
        Pid::Corrupt => fs::write(file, "not-a-pid\n").unwrap(),
        Pid::Missing => {}
        Pid::NotAFile => fs::create_dir(file).unwrap(),
        Pid::Fifo => mkfifo(file),
        Pid::BadStart(p) => {
            fs::write(file, format!("{p}\n")).unwrap();
            fs::write(start_file(file), "garbage\n").unwrap();
        }
    }
}

pub fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
}

/// Sets the mtime of `path` (file or real dir) to `now - age`.
pub fn set_age(path: &Path, now: SystemTime, age: Duration) {
    let f = fs::File::open(path).unwrap();
    f.set_modified(now - age).unwrap();
}

/// A `.red/tmp` tree under a temp repo dir.
pub struct Tree {
    pub layout: Layout,
    pub now: SystemTime,
}

impl Tree {
    pub fn new(repo: &Path) -> Self {
        let layout = Layout::new(repo);
        fs::create_dir_all(layout.tmp()).unwrap();
        Tree {
            layout,
            now: SystemTime::now(),
        }
    }

    pub fn worker(&self, ns: &str, id: &str, pid: Pid) -> PathBuf {
        let dir = self.layout.worker_namespace(ns).join(id);
        fs::create_dir_all(&dir).unwrap();
        write_pid(&dir.join("worker.pid"), pid);
        dir
    }

    /// An attempt dir with optional state JSON and a `worktree/` file, aged `age`.
    pub fn attempt(
        &self,
        worker: &Path,
        name: &str,
        state: Option<&str>,
        age: Duration,
    ) -> PathBuf {
        let dir = worker.join(name);
        fs::create_dir_all(dir.join("worktree")).unwrap();
        fs::write(dir.join("worktree/notes.md"), format!("notes of {name}\n")).unwrap();
        if let Some(s) = state {
            fs::write(dir.join("afk.state.json"), s).unwrap();
        }
        set_age(&dir, self.now, age);
        dir
    }

    /// An attempt dir holding only its state file (cheaper, for trees of thousands).
    pub fn bare_attempt(&self, worker: &Path, name: &str, state: &str, age: Duration) -> PathBuf {
        let dir = worker.join(name);
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("afk.state.json"), state).unwrap();
        set_age(&dir, self.now, age);
        dir
    }

    pub fn claim(&self, n: u64, pid: Pid) -> PathBuf {
        let f = self.layout.claim_pid(n);
        fs::create_dir_all(f.parent().unwrap()).unwrap();
        write_pid(&f, pid);
        f.parent().unwrap().to_path_buf()
    }
}

/// One exited pid shared by a test binary's state files.
pub fn shared_dead_pid() -> i32 {
    static PID: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *PID.get_or_init(dead_pid)
}

/// A state file for a finished attempt with the envelope flag given. Its owner is an exited
/// pid with a start time no process can have, so pid reuse cannot revive it.
pub fn state_json(posted: Option<bool>) -> String {
    let pid = shared_dead_pid();
    match posted {
        Some(p) => format!(
            r#"{{"version":1,"worker_id":"w","pid":{pid},"pid_start_time":1,"envelope":{{"posted":{p}}}}}"#
        ),
        None => format!(r#"{{"version":1,"worker_id":"w","pid":{pid},"pid_start_time":1}}"#),
    }
}

/// A state file whose owner is `pid` (with its start time, so identity is checked).
pub fn live_state_json(pid: i32) -> String {
    let start = pidfile::process_start_time(pid).unwrap();
    format!(
        r#"{{"version":1,"worker_id":"w","pid":{pid},"pid_start_time":{start},"current":null}}"#
    )
}

/// A file-system node as a snapshot records it: enough to tell whether anything changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(Vec<u8>),
    Link(PathBuf),
}

/// Every path below `root` (relative), never following symlinks.
pub fn snapshot(root: &Path) -> std::collections::BTreeMap<PathBuf, Node> {
    let mut out = std::collections::BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<PathBuf, Node>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                out.insert(rel, Node::Link(fs::read_link(&p).unwrap()));
            } else if ft.is_dir() {
                out.insert(rel, Node::Dir);
                walk(root, &p, out);
            } else {
                out.insert(rel, Node::File(fs::read(&p).unwrap()));
            }
        }
    }
    walk(root, root, &mut out);
    out
}

/// A decorator that records every tracker call made through it, then delegates to the real
/// backend: counting calls on the local tracker, not a mock.
pub struct Counting<'a> {
    inner: &'a dyn afk_supervisor::tracker::Tracker,
    calls: std::sync::Mutex<Vec<String>>,
}

impl<'a> Counting<'a> {
    pub fn new(inner: &'a dyn afk_supervisor::tracker::Tracker) -> Self {
        Counting {
            inner,
            calls: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    pub fn count(&self, prefix: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.starts_with(prefix))
            .count()
    }

    fn log(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

impl afk_supervisor::tracker::Tracker for Counting<'_> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn identity(&self) -> String {
        self.inner.identity()
    }
    fn list_all(
        &self,
        limit: usize,
    ) -> afk_supervisor::tracker::TrackerResult<Vec<afk_supervisor::tracker::IssueSummary>> {
        self.log(format!("list {limit}"));
        self.inner.list_all(limit)
    }
    fn view(
        &self,
        n: u64,
    ) -> afk_supervisor::tracker::TrackerResult<afk_supervisor::tracker::IssueView> {
        self.log(format!("view {n}"));
        self.inner.view(n)
    }
    fn edit_labels(
        &self,
        n: u64,
        add: &[&str],
        remove: &[&str],
    ) -> afk_supervisor::tracker::TrackerResult<()> {
        self.log(format!("edit {n} +{add:?} -{remove:?}"));
        self.inner.edit_labels(n, add, remove)
    }
    fn comment(&self, n: u64, body: &str) -> afk_supervisor::tracker::TrackerResult<()> {
        self.log(format!("comment {n} {body}"));
        self.inner.comment(n, body)
    }
    fn comments(&self, n: u64) -> afk_supervisor::tracker::TrackerResult<Vec<String>> {
        self.log(format!("read-comments {n}"));
        self.inner.comments(n)
    }
    fn list_open_with_label(
        &self,
        label: &str,
        limit: usize,
    ) -> afk_supervisor::tracker::TrackerResult<Vec<afk_supervisor::tracker::LabeledIssue>> {
        self.log(format!("list-label {label}"));
        self.inner.list_open_with_label(label, limit)
    }
    fn list_open_with_label_oldest_first(
        &self,
        label: &str,
        limit: usize,
    ) -> afk_supervisor::tracker::TrackerResult<Vec<afk_supervisor::tracker::LabeledIssue>> {
        self.log(format!("list-label-oldest {label}"));
        self.inner.list_open_with_label_oldest_first(label, limit)
    }
    fn pr_create(
        &self,
        base: &str,
        head: &str,
        title: &str,
        body: &str,
    ) -> afk_supervisor::tracker::TrackerResult<String> {
        self.log(format!("pr-create {head}"));
        self.inner.pr_create(base, head, title, body)
    }
    fn pr_merge(&self, head: &str) -> afk_supervisor::tracker::TrackerResult<()> {
        self.log(format!("pr-merge {head}"));
        self.inner.pr_merge(head)
    }
    // The landing's calls (issue 50), counted and passed on like the rest.
    fn pr_status(
        &self,
        pr: &str,
    ) -> afk_supervisor::tracker::TrackerResult<afk_supervisor::tracker::PrStatus> {
        self.log(format!("pr-status {pr}"));
        self.inner.pr_status(pr)
    }
    fn pr_checks(
        &self,
        pr: &str,
        required: bool,
    ) -> afk_supervisor::tracker::TrackerResult<Vec<afk_supervisor::tracker::PrCheck>> {
        self.log(format!("pr-checks {pr}"));
        self.inner.pr_checks(pr, required)
    }
    fn run_failed_log(&self, run: &str) -> afk_supervisor::tracker::TrackerResult<String> {
        self.log(format!("run-log {run}"));
        self.inner.run_failed_log(run)
    }
    fn pr_ready(&self, pr: &str) -> afk_supervisor::tracker::TrackerResult<()> {
        self.log(format!("pr-ready {pr}"));
        self.inner.pr_ready(pr)
    }

    fn pr_merge_auto(
        &self,
        pr: &str,
        method: afk_supervisor::config::MergeMethod,
    ) -> afk_supervisor::tracker::TrackerResult<()> {
        self.log(format!("pr-merge-auto {pr}"));
        self.inner.pr_merge_auto(pr, method)
    }
    fn pr_comment(&self, pr: &str, body: &str) -> afk_supervisor::tracker::TrackerResult<()> {
        self.log(format!("pr-comment {pr}"));
        self.inner.pr_comment(pr, body)
    }
    fn pr_add_label(&self, pr: &str, label: &str) -> afk_supervisor::tracker::TrackerResult<()> {
        self.log(format!("pr-label {pr} {label}"));
        self.inner.pr_add_label(pr, label)
    }
}
