//! An operator's tmux pane: the supervisor runs in the foreground of a real tmux session,
//! Ctrl-C in that pane stops the whole fleet (exit 130), and nothing of it is left behind.

mod fleet;
mod support;

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use fleet::{FAST_TIMING, Fleet, WAIT};
use support::wait_until;

/// A tmux server of this test's own (its own socket), killed on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn supervisor_pid(f: &Fleet) -> Option<i32> {
    fs::read_to_string(f.layout.supervisor_pid())
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[test]
fn ctrl_c_in_a_tmux_pane_stops_the_fleet() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("note: tmux is not installed; skipping (CI installs it)");
        return;
    }
    let f = Fleet::new("sleep 300 & wait\n", FAST_TIMING);
    let tmux = Tmux {
        socket: f.env.path().join("tmux.sock"),
    };
    let exit_file = f.file("exit-code");

    // The pane's shell gets the test's isolated environment and tag, as `Fleet::cmd` does.
    let mut line = String::from("env");
    for (k, v) in f.env.vars() {
        line.push_str(&format!(
            " {}={}",
            k.to_string_lossy(),
            shell_quote(&v.to_string_lossy())
        ));
    }
    line.push_str(&format!(
        " AFK_TEST_TAG={} {} --repo {} --workers 2; echo $? > {}",
        shell_quote(&f.tag),
        shell_quote(env!("CARGO_BIN_EXE_afk-supervisor")),
        shell_quote(&f.repo.display().to_string()),
        shell_quote(&exit_file.display().to_string()),
    ));
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "afk",
        "-x",
        "200",
        "-y",
        "50",
        "sh",
    ]);
    tmux.run(&["send-keys", "-t", "afk", &line, "Enter"]);

    let started = wait_until(WAIT, || {
        f.state().is_some_and(|s| s.slot_pids.len() == 2)
            && supervisor_pid(&f).is_some_and(fleet::alive)
    });
    assert!(started, "fleet did not start in tmux; log:\n{}", f.dump());
    let workers = f.worker_pids();
    let sup = supervisor_pid(&f).unwrap();

    // Ctrl-C reaches the pane's foreground process group: the supervisor alone, since each
    // worker runs in a session of its own; the supervisor stops them.
    tmux.run(&["send-keys", "-t", "afk", "C-c"]);
    assert!(
        wait_until(WAIT, || exit_file.exists()),
        "supervisor did not exit; pane:\n{}",
        tmux.run(&["capture-pane", "-p", "-t", "afk"])
    );
    assert_eq!(fs::read_to_string(&exit_file).unwrap().trim(), "130");
    assert!(!fleet::alive(sup));
    for w in workers {
        assert!(!fleet::alive(w), "worker {w} outlived the supervisor");
    }
    assert!(f.tagged().is_empty(), "left behind: {:?}", f.tagged());
    assert!(!f.layout.supervisor_pid().exists());
    let stops = f.events_of("supervisor.stop");
    assert!(
        stops.iter().any(|e| e.msg.contains("SIGINT")),
        "{}",
        f.dump()
    );
}
