//! Shared test scaffolding: an isolated environment (HOME, git identity and config) and
//! real git repositories with a local bare `origin`; the fleet fixture, the fake `gh`, the
//! `.red/tmp` tree builders, the binary's runners, the MCP venv beside it, and the network
//! namespaces that cut a host off. Every test module has them as `crate::support`.

pub mod agent_clis;
pub mod cli;
pub mod docs;
pub mod etcd;
pub mod fake_gh;
pub mod fleet;
pub mod hosts;
pub mod model_server;
pub mod netns;
pub mod python;
pub mod receiver;
pub mod sweep_fixtures;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A temp dir with its own HOME and git config, so no test depends on the machine.
/// `[agent]` lines for a stub agent that reports to its test outside its worktree (files
/// under the test's dir, `AFK_TEST_*` variables): it runs outside the sandbox, which has its
/// own tests (`agent_reach`), and keeps the test's variables.
pub const REPORTING_AGENT: &str = "sandbox = \"none\"\nenv = [\"AFK_TEST_*\"]\n";

pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub gitconfig: PathBuf,
}

impl TestEnv {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        // Host-wide locks (the unblock belt's) live under XDG_RUNTIME_DIR: keep them per test.
        std::fs::create_dir_all(dir.path().join("run")).expect("run dir");
        let gitconfig = home.join(".gitconfig");
        std::fs::write(
            &gitconfig,
            "[user]\n\tname = AFK Test\n\temail = afk-test@example.invalid\n\
             [init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n\
             [commit]\n\tgpgsign = false\n[protocol \"file\"]\n\tallow = always\n",
        )
        .expect("gitconfig");
        TestEnv {
            dir,
            home,
            gitconfig,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The variables every child process of a test gets.
    pub fn vars(&self) -> Vec<(OsString, OsString)> {
        vec![
            ("HOME".into(), self.home.clone().into()),
            ("GIT_CONFIG_GLOBAL".into(), self.gitconfig.clone().into()),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
            ("GIT_TERMINAL_PROMPT".into(), "0".into()),
            ("GH_PROMPT_DISABLED".into(), "1".into()),
            ("NO_COLOR".into(), "1".into()),
            ("XDG_RUNTIME_DIR".into(), self.dir.path().join("run").into()),
            // The list of fleets (`afk-supervisor list`) stays the test's own.
            (
                "XDG_STATE_HOME".into(),
                self.dir.path().join("state").into(),
            ),
            // Today's tests pin process-group isolation (the mode every host has); the
            // cgroup mode's tests (tests/it/isolation_cgroup.rs) ask for it explicitly.
            ("RED_AFK_ISOLATION".into(), "process-group".into()),
        ]
    }

    /// A command with the isolated environment applied and every inherited `RED_AFK_*`
    /// variable removed.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        self.isolate(&mut c);
        c
    }

    /// Gives `c` the isolated environment [`TestEnv::command`] does.
    pub fn isolate(&self, c: &mut Command) {
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("RED_AFK_")
                || k.to_string_lossy().starts_with("GIT_")
            {
                c.env_remove(k);
            }
        }
        c.envs(self.vars());
    }

    /// Runs git in `dir` and panics with its stderr on failure.
    pub fn git(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.git_output(dir, args);
        assert!(
            out.status.success(),
            "git {args:?} in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn git_output(&self, dir: &Path, args: &[&str]) -> Output {
        self.command("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .expect("run git")
    }

    /// A work repo at `<tmp>/repo` with one commit on `main`, cloned from a bare
    /// `<tmp>/origin.git`, so `origin/main` exists.
    pub fn repo_with_origin(&self) -> Repo {
        let origin = self.path().join("origin.git");
        let seed = self.path().join("seed");
        let repo = self.path().join("repo");
        self.git(
            self.path(),
            &[
                "init",
                "-q",
                "--bare",
                "-b",
                "main",
                origin.to_str().unwrap(),
            ],
        );
        self.git(
            self.path(),
            &["init", "-q", "-b", "main", seed.to_str().unwrap()],
        );
        std::fs::write(seed.join("README.md"), "seed\n").unwrap();
        self.git(&seed, &["add", "README.md"]);
        self.git(&seed, &["commit", "-q", "-m", "seed"]);
        self.git(&seed, &["push", "-q", origin.to_str().unwrap(), "main"]);
        self.git(
            self.path(),
            &[
                "clone",
                "-q",
                origin.to_str().unwrap(),
                repo.to_str().unwrap(),
            ],
        );
        Repo { path: repo, origin }
    }

    /// The built binary under test, run with the isolated environment.
    pub fn bin(&self) -> Command {
        self.command(env!("CARGO_BIN_EXE_afk-supervisor"))
    }

    /// [`TestEnv::bin`] without `XDG_RUNTIME_DIR`, so the host-wide locks take their other
    /// home, `$TMPDIR/afk-supervisor-<uid>/`, with `TMPDIR` inside the test's temp dir.
    pub fn bin_locks_in_tmpdir(&self) -> Command {
        let mut c = self.bin();
        c.env("TMPDIR", self.path().join("run"))
            .env_remove("XDG_RUNTIME_DIR");
        c
    }

    /// Branches under `afk/` in a repo (`refs/heads/afk/…`), short names.
    pub fn afk_refs(&self, git_dir: &Path) -> BTreeSet<String> {
        self.git(
            git_dir,
            &[
                "for-each-ref",
                "--format=%(refname:short)",
                "refs/heads/afk/",
            ],
        )
        .lines()
        .map(str::to_string)
        .collect()
    }
}

/// Runs `c` to its end: its exit code (-1 when a signal ended it), stdout and stderr.
pub fn run(mut c: Command) -> (i32, String, String) {
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// Bytes a command printed, as text (invalid UTF-8 replaced, so a failure still shows).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn stdout(o: &Output) -> String {
    text(&o.stdout)
}

/// The stdout of a command that must have exited 0 (all of its output shown if not).
pub fn stdout_ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    stdout(o)
}

pub fn stderr(o: &Output) -> String {
    text(&o.stderr)
}

pub fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

pub fn set(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// An event stamped `ts`, for event logs written by hand.
pub fn ev(
    ts: &str,
    kind: afk_supervisor::event_log::Kind,
    msg: &str,
) -> afk_supervisor::event_log::Record {
    afk_supervisor::event_log::Record {
        ts: ts.into(),
        ..afk_supervisor::event_log::Record::now(kind, msg)
    }
}

/// `PATH` with the binary under test's directory first, so a shell line's
/// `afk-supervisor` (a README or guide example run as written) is this build.
pub fn path_with_bin() -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_afk-supervisor"));
    format!(
        "{}:{}",
        bin.parent().unwrap_or(Path::new("/")).display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

pub struct Repo {
    pub path: PathBuf,
    pub origin: PathBuf,
}

/// The git commands a `GIT_TRACE` file recorded, in order, each as its words after `git`
/// (`fetch --quiet …`); none when the file is not there.
pub fn git_trace_commands(trace: &Path) -> Vec<String> {
    std::fs::read_to_string(trace)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_once("trace: built-in: git ")
                .map(|(_, c)| c.to_string())
        })
        .collect()
}

/// How many of `cmds` start with `prefix` (`"fetch "`, `"remote get-url"`).
pub fn count_prefixed(cmds: &[String], prefix: &str) -> usize {
    cmds.iter().filter(|c| c.starts_with(prefix)).count()
}

/// Every attempt dir under the worker namespaces of the checkout `repo`
/// (`.red/tmp/workers/<worker>/<attempt>/`).
pub fn attempt_dirs(repo: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let root = repo.join(".red/tmp/workers");
    for w in std::fs::read_dir(root).into_iter().flatten().flatten() {
        for a in std::fs::read_dir(w.path()).into_iter().flatten().flatten() {
            if a.path().is_dir() {
                out.push(a.path());
            }
        }
    }
    out
}

/// The label names of an issue as `issue show --json` prints it.
pub fn json_labels(issue: &serde_json::Value) -> Vec<String> {
    issue["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

/// The comment bodies of an issue as `issue show --json` prints it, oldest first.
pub fn json_comments(issue: &serde_json::Value) -> Vec<String> {
    issue["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["body"].as_str().unwrap().to_string())
        .collect()
}

/// A child's stdout lines, read on a thread so every wait for one can have a deadline
/// (`recv_timeout`); the channel closes at its end or the first unreadable line.
pub fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufRead::lines(std::io::BufReader::new(out)) {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

impl TestEnv {
    /// The library's git layer pointed at `dir`, running with this environment's HOME and
    /// git config, and git's messages untranslated so tests can match them.
    pub fn lib_git(&self, dir: &Path) -> afk_supervisor::git::Git {
        afk_supervisor::git::Git::new(dir)
            .with_env(self.vars())
            .with_env([("LC_ALL", "C")])
    }

    /// The real local tracker of the checkout `repo`, its git run by [`TestEnv::lib_git`].
    pub fn local_tracker(&self, repo: &Path) -> afk_supervisor::tracker::LocalTracker {
        afk_supervisor::tracker::LocalTracker::new(
            &afk_supervisor::layout::Layout::new(repo),
            self.lib_git(repo),
        )
    }

    /// Writes `content` to `dir/rel`, creating parent directories.
    pub fn write(&self, dir: &Path, rel: &str, content: &str) {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(p, content).expect("write");
    }

    /// Stages everything in `dir` and commits it; returns the new sha.
    pub fn commit(&self, dir: &Path, msg: &str) -> String {
        self.git(dir, &["add", "-A"]);
        self.git(dir, &["commit", "-q", "--allow-empty", "-m", msg]);
        self.git(dir, &["rev-parse", "HEAD"]).trim().to_string()
    }

    /// Pushes a branch `head` one commit (a file of its own) ahead of `origin/main` to
    /// origin, for a pull request to land; returns its sha. The checkout is back on `main`.
    pub fn push_branch(&self, repo: &Repo, head: &str) -> String {
        let p = &repo.path;
        let file = format!("{}.md", head.replace('/', "-"));
        self.git(p, &["checkout", "-q", "-b", head, "origin/main"]);
        std::fs::write(p.join(&file), "doc\n").unwrap();
        self.git(p, &["add", &file]);
        self.git(p, &["commit", "-q", "-m", &format!("docs: {head}")]);
        self.git(p, &["push", "-q", "origin", head]);
        self.git(p, &["checkout", "-q", "main"]);
        self.git(p, &["rev-parse", head]).trim().to_string()
    }
}

/// A bind mount, unmounted (lazily if busy) when dropped.
pub struct BindMount(PathBuf);

impl BindMount {
    /// Bind-mounts `source` on `target`. Tests that need it are ignored where the build
    /// script found no way to mount (`afk_can_bind_mount`); where they run, a refused mount
    /// fails them.
    pub fn new(source: &Path, target: &Path) -> BindMount {
        let out = std::process::Command::new("mount")
            .arg("--bind")
            .arg(source)
            .arg(target)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount --bind {} {}: {}",
            source.display(),
            target.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        BindMount(target.to_path_buf())
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut c = std::process::Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c.arg(&self.0).status().is_ok_and(|s| s.success())
        };
        if !umount(false) {
            umount(true);
        }
    }
}

/// An issue's labels on the local tracker, sorted.
pub fn local_labels(t: &afk_supervisor::tracker::LocalTracker, n: u64) -> Vec<String> {
    let mut l = t.show(n).expect("issue").labels;
    l.sort();
    l
}

/// An issue's comment bodies on the local tracker, oldest first.
pub fn local_comments(t: &afk_supervisor::tracker::LocalTracker, n: u64) -> Vec<String> {
    t.show(n)
        .expect("issue")
        .comments
        .into_iter()
        .map(|c| c.body)
        .collect()
}
