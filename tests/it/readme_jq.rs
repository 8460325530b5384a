//! The `jq` lines of the guide's "Logs" (`docs/guide/running.md`), run as written on a real
//! fleet (issue 26): the JSON diagnostics file parses line by line, and the parked-slot
//! filter finds both kinds of parking. Needs `jq` (`.ci/run` installs it; under `CI=true` a
//! missing one fails the test).

use std::process::Stdio;

use nix::sys::signal::Signal;

use crate::support::fleet::{FAST_TIMING, Fleet};
use crate::support::{self, fleet};
use afk_supervisor::event_log::Kind;

/// The line of the guide's "Logs" that starts with `prefix` (inside its ```sh blocks),
/// comment removed.
fn readme_line(prefix: &str) -> String {
    support::docs::line_starting(&support::docs::guide("running.md"), prefix)
}

/// `sh -c line` in the repo, with the binary first on PATH as `afk-supervisor`.
fn shell(f: &Fleet, line: &str) -> std::process::Command {
    let mut c = f.env.command("sh");
    c.arg("-c")
        .arg(line)
        .current_dir(&f.repo)
        .env("PATH", support::path_with_bin())
        .env("AFK_TEST_TAG", &f.tag)
        .stdin(Stdio::null());
    c
}

#[test]
#[cfg_attr(
    not(afk_has_jq),
    ignore = "needs jq (apt-get install jq); under CI=true it always runs"
)]
fn the_readme_jq_lines_run_as_written() {
    // One slot parked for good (exit 78), the other by its circuit (fast deaths).
    let mut f = Fleet::new(
        "if [ \"$RED_AFK_SLOT\" = 0 ]; then exit 78; fi\nexit 1\n",
        FAST_TIMING,
    );
    let run = readme_line("RUST_LOG=afk_supervisor=debug afk-supervisor --log-format json run");
    let run = run.replace("--workers 4", "--workers 2");
    let echo = std::fs::File::create(f.file("echo.out")).unwrap();
    let child = shell(&f, &format!("exec env {run}"))
        .stdout(echo)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    f.sup = Some(child);
    f.wait_events(Kind::SlotParked, 1);
    f.wait_events(Kind::CircuitTrip, 1);
    fleet::kill(f.sup_pid(), Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143));

    let diag = f.repo.join("diag.jsonl");
    assert!(std::fs::metadata(&diag).unwrap().len() > 0);
    let jq = readme_line("jq -r 'select(.level == \"DEBUG\")");
    let out = shell(&f, &jq).output().unwrap();
    assert!(out.status.success(), "{jq}: {out:?}");
    let messages = String::from_utf8_lossy(&out.stdout);
    assert!(
        messages.lines().any(|l| l == "command finished"),
        "{messages}"
    );
    // The echo went to stdout, not into the JSON.
    let echo = std::fs::read_to_string(f.file("echo.out")).unwrap();
    assert!(echo.contains(Kind::SupervisorStart.as_str()), "{echo}");

    let logs = readme_line("afk-supervisor logs --json | jq");
    let out = shell(&f, &logs).output().unwrap();
    assert!(out.status.success(), "{logs}: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fatal host configuration: slot 0"), "{text}");
    assert!(text.contains("circuit open: slot 1"), "{text}");
}
