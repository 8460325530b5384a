//! The binary under test run to its end on one checkout, the two ways a user names it:
//! from inside it (`run_in`) or with `--repo` (`run_on`); and `worker --once` as a
//! supervisor starts it.

use std::path::Path;
use std::process::{Command, Output};

use super::{TestEnv, stderr, stdout, text};

/// What a supervisor sets for its workers that `worker --once` needs: the boot sweeps
/// already done, and a worker id.
pub const SUPERVISED: [(&str, &str); 2] =
    [("RED_AFK_SWEEPS_DONE", "1"), ("RED_AFK_WORKER_ID", "w1")];

impl TestEnv {
    /// The binary run from `dir` as its current directory, as a user in a checkout would.
    pub fn run_in(&self, dir: &Path, args: &[&str]) -> Output {
        self.bin().current_dir(dir).args(args).output().unwrap()
    }

    /// [`TestEnv::run_in`] that must succeed; its stdout.
    pub fn ok_in(&self, dir: &Path, args: &[&str]) -> String {
        succeeded(args, self.run_in(dir, args))
    }

    /// The binary aimed at `repo` with `--repo`.
    pub fn bin_on(&self, repo: &Path) -> Command {
        let mut c = self.bin();
        c.arg("--repo").arg(repo);
        c
    }

    /// [`TestEnv::bin_on`] with `args`, run to its end.
    pub fn run_on(&self, repo: &Path, args: &[&str]) -> Output {
        self.bin_on(repo).args(args).output().unwrap()
    }

    /// [`TestEnv::run_on`] that must succeed; its stdout.
    pub fn ok_on(&self, repo: &Path, args: &[&str]) -> String {
        succeeded(args, self.run_on(repo, args))
    }
}

fn succeeded(args: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `c` (the binary aimed at a checkout) run as `worker --once` under [`SUPERVISED`];
/// its exit code must be `want`.
pub fn work_once(mut c: Command, want: i32) -> Output {
    let o = c
        .args(["worker", "--once"])
        .envs(SUPERVISED)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(want),
        "{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    o
}
