//! Several checkouts of one repository on this machine, each its own "host": the clones,
//! the kill of one host's every process, and the dump a failing multi-host test prints.
//! Used by the claims-by-marks tests (`claims_multi_host`) and the cluster's
//! (`cluster_fleet`).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::fake_gh::{FakeGh, FakeIssue};
use super::netns::Netns;
use super::{TestEnv, fleet};

/// `n` checkouts of one repository with a bare `origin`: the first made by
/// [`TestEnv::repo_with_origin`], the others clones of its origin beside it.
pub fn clones(env: &TestEnv, n: usize) -> Vec<PathBuf> {
    let first = env.repo_with_origin();
    let mut clones = vec![first.path.clone()];
    for i in 1..n {
        let c = env.path().join(format!("repo{}", i + 1));
        env.git(
            env.path(),
            &[
                "clone",
                "-q",
                first.origin.to_str().unwrap(),
                c.to_str().unwrap(),
            ],
        );
        clones.push(c);
    }
    clones
}

/// SIGKILLs every process carrying `tag` in its environment, three times over so a fork in
/// flight is caught too.
pub fn kill_tagged(tag: &str) {
    for _ in 0..3 {
        for pid in fleet::tagged_processes(tag) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The runs log, every issue with its labels and comments, and each host's supervisor
/// stderr (`sup-<i>.err` in `dir`) and event log.
pub fn dump(dir: &Path, runs: &str, gh: &FakeGh, clones: &[PathBuf]) -> String {
    let mut out = format!("runs:\n{runs}\nissues:\n");
    for i in gh.issues() {
        out += &format!("#{} {:?}\n", i.number, i.labels);
        for c in &i.comments {
            out += &format!("    {}\n", c.body.replace('\n', " | "));
        }
    }
    for (i, clone) in clones.iter().enumerate() {
        out += &format!(
            "sup-{i}.err:\n{}\n",
            fs::read_to_string(dir.join(format!("sup-{i}.err"))).unwrap_or_default()
        );
        let log = clone.join(".red/tmp/supervisors/default/supervisor.log.toonl");
        out += &format!(
            "log {i}:\n{}\n",
            fs::read_to_string(log).unwrap_or_default()
        );
    }
    out
}

/// Starts `run` in checkout `clone` as host `h<i>` of the test tagged `tag`: its stderr
/// appended to `sup-<i>.err`, the fake `gh` first on `PATH`, and the stand-in agent told
/// where to log (`AFK_TEST_RUNS`), which host it is (`AFK_HOST`) and how long to run
/// (`AFK_AGENT_S`). In network namespace `netns` when one is given: the supervisor, its
/// workers and their agents reach the rest of the machine only over its link (the files,
/// git's origin and the fake `gh` among them, are all on disk).
pub fn start_supervisor(
    env: &TestEnv,
    gh: &FakeGh,
    tag: &str,
    i: usize,
    clone: &Path,
    agent_s: u64,
    netns: Option<&Netns>,
) -> std::process::Child {
    let err = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env.path().join(format!("sup-{i}.err")))
        .unwrap();
    match netns {
        None => env.bin(),
        Some(ns) => {
            let mut c = ns.command(env!("CARGO_BIN_EXE_afk-supervisor"));
            env.isolate(&mut c);
            c
        }
    }
    .env("PATH", gh.path_env())
    .env("AFK_TEST_TAG", tag)
    .env("AFK_TEST_RUNS", env.path().join("runs"))
    .env("AFK_HOST", format!("h{i}"))
    // A state directory of its own, as on a machine of its own: what the hosts share
    // goes through etcd, never through a file one of them keeps.
    .env("XDG_STATE_HOME", env.path().join(format!("state-h{i}")))
    .env("AFK_AGENT_S", agent_s.to_string())
    .arg("--repo")
    .arg(clone)
    .arg("run")
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(err)
    .spawn()
    .unwrap()
}

/// The fake `gh` every host shares, with issues `1..=n` ready (`# task N` bodies).
pub fn gh_with_tasks(env: &TestEnv, n: u64) -> FakeGh {
    let gh = FakeGh::install(env);
    let list: Vec<FakeIssue> = (1..=n).map(task).collect();
    gh.set_issues(&list);
    gh
}

/// Issue `k`, ready for an agent, its body `# task k`.
pub fn task(k: u64) -> FakeIssue {
    FakeIssue::open(k, &["ready-for-agent"]).with_body(&format!("# task {k}\n"))
}

/// A tag unique to this test run (`AFK_TEST_TAG`, `-h<i>` appended per host).
pub fn run_tag(env: &TestEnv) -> String {
    format!(
        "{}-{}",
        std::process::id(),
        env.path().file_name().unwrap().to_string_lossy()
    )
}
