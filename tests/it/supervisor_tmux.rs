//! An operator's tmux pane: the supervisor runs in the foreground of a real tmux session,
//! Ctrl-C in that pane stops the whole fleet (exit 130), and nothing of it is left behind;
//! `status --watch` in a pane is the live view, and `q` or Ctrl-C there ends the view only.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT};
use crate::support::{fleet, wait_until};
use afk_supervisor::event_log::Kind;

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
#[cfg_attr(
    not(afk_has_tmux),
    ignore = "needs tmux (apt-get install tmux); under CI=true it always runs"
)]
fn ctrl_c_in_a_tmux_pane_stops_the_fleet() {
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
    let stops = f.events_of(Kind::SupervisorStop);
    assert!(
        stops.iter().any(|e| e.msg.contains("SIGINT")),
        "{}",
        f.dump()
    );
}

#[test]
#[cfg_attr(
    not(afk_has_tmux),
    ignore = "needs tmux (apt-get install tmux); under CI=true it always runs"
)]
fn the_tmux_command_runs_the_supervisor_and_the_live_view_and_kill_session_stops_all() {
    let f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    let tmpdir = f.file("tmux-tmp");
    fs::create_dir_all(&tmpdir).unwrap();
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let tmux = Tmux {
        socket: tmpdir.join(format!("tmux-{uid}/default")),
    };
    let run = |args: &[&str]| {
        let out = f
            .cmd(args)
            .env("TMUX_TMPDIR", &tmpdir)
            .env_remove("TMUX")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = run(&["tmux", "--session", "afk.test", "--workers", "2"]);
    assert_eq!(
        out.lines().collect::<Vec<_>>()[..2],
        [
            "tmux session afk_test: window 0 the supervisor, window 1 status --watch",
            "attach:  tmux attach -t 'afk_test'",
        ]
    );
    let started = wait_until(WAIT, || {
        f.state().is_some_and(|s| s.slot_pids.len() == 2)
            && supervisor_pid(&f).is_some_and(fleet::alive)
    });
    assert!(started, "fleet did not start in tmux; log:\n{}", f.dump());
    let sup = supervisor_pid(&f).unwrap();
    let workers = f.worker_pids();

    // The second window shows the live table with both workers running.
    let mut pane = String::new();
    let shown = wait_until(WAIT, || {
        pane = tmux.run(&["capture-pane", "-p", "-t", "=afk_test:status"]);
        pane.contains("SLOT") && pane.matches(" running ").count() == 2
    });
    assert!(shown, "status pane:\n{pane}");
    assert!(pane.contains(&format!("supervisor pid={sup}")), "{pane}");
    // The whole history: the boot progress lines may have scrolled the start off the screen.
    let first = tmux.run(&[
        "capture-pane",
        "-p",
        "-S",
        "-",
        "-t",
        "=afk_test:supervisor",
    ]);
    assert!(
        first.contains(Kind::SupervisorStart.as_str()),
        "supervisor pane:\n{first}"
    );

    // Asked again: the session is reused, nothing new started.
    let again = run(&["tmux", "--session", "afk.test"]);
    assert!(
        again.starts_with("tmux session afk_test exists; reusing it\n"),
        "{again}"
    );
    assert_eq!(supervisor_pid(&f), Some(sup));
    // A new target on the existing session goes to its fleet, as `scale` sends it.
    let scaled = run(&["tmux", "--session", "afk.test", "--workers", "3"]);
    assert!(
        scaled.contains("--workers 3: applied to the running fleet"),
        "{scaled}"
    );
    assert!(f.state().is_some_and(|s| s.target == 3));
    assert_eq!(supervisor_pid(&f), Some(sup));

    tmux.run(&["kill-session", "-t", "=afk_test"]);
    assert!(
        wait_until(WAIT, || !fleet::alive(sup)),
        "supervisor outlived its session"
    );
    for w in workers {
        assert!(
            wait_until(WAIT, || !fleet::alive(w)),
            "worker {w} outlived the session"
        );
    }
    assert!(
        wait_until(WAIT, || f.tagged().is_empty()),
        "left behind: {:?}",
        f.tagged()
    );
    assert!(
        f.events_of(Kind::SupervisorStop)
            .iter()
            .any(|e| e.msg.contains("SIGHUP")),
        "{}",
        f.dump()
    );
    assert!(!f.layout.supervisor_pid().exists());
}

#[test]
fn status_watch_off_a_terminal_prints_plain_snapshots() {
    use std::io::{BufRead, BufReader};
    let mut f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    f.start(&["--workers", "1"]);
    let pids = f.wait_workers(1);
    let mut child = f
        .cmd(&["status", "--watch"])
        .stdout(std::process::Stdio::piped())
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let mut frames = 0;
    let mut seen = Vec::new();
    while frames < 2 {
        let line = lines.next().expect("status --watch ended").unwrap();
        if line.starts_with("afk-supervisor status  ") {
            frames += 1;
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = seen.join("\n");
    assert!(
        !text.contains('\u{1b}'),
        "escape codes off a terminal: {text:?}"
    );
    assert!(text.contains(&format!("{:<5} {:<8}", 0, pids[0])), "{text}");
    fleet::kill(f.sup_pid(), nix::sys::signal::Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143));
}

/// The pane's shell line: the test's isolated environment, then `args` to the binary, then
/// its exit code written to `exit_file`.
fn pane_line(f: &Fleet, extra_env: &str, args: &str, exit_file: &std::path::Path) -> String {
    // NO_COLOR only where the round asks for it (the test environment sets it for all).
    let mut line = String::from("env -u NO_COLOR");
    for (k, v) in f.env.vars().into_iter().filter(|(k, _)| k != "NO_COLOR") {
        line.push_str(&format!(
            " {}={}",
            k.to_string_lossy(),
            shell_quote(&v.to_string_lossy())
        ));
    }
    line.push_str(&format!(
        " AFK_TEST_TAG={} {extra_env} {} --repo {} {args}; echo $? > {}",
        shell_quote(&f.tag),
        shell_quote(env!("CARGO_BIN_EXE_afk-supervisor")),
        shell_quote(&f.repo.display().to_string()),
        shell_quote(&exit_file.display().to_string()),
    ));
    line
}

/// The rows of the live view whose state cell is `running`.
fn running_rows(pane: &str) -> Vec<&str> {
    pane.lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("running"))
        .collect()
}

#[test]
#[cfg_attr(
    not(afk_has_tmux),
    ignore = "needs tmux (apt-get install tmux); under CI=true it always runs"
)]
fn status_watch_in_a_tmux_pane_is_live_and_q_or_ctrl_c_end_the_view_not_the_fleet() {
    let mut f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    let sup = f.start(&["--workers", "2"]);
    let workers = f.wait_workers(2);
    let tmux = Tmux {
        socket: f.env.path().join("tmux.sock"),
    };
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "view",
        "-x",
        "200",
        "-y",
        "30",
        "sh",
    ]);
    for (round, (env, key)) in [("", "q"), ("NO_COLOR=1", "C-c")].into_iter().enumerate() {
        let exit_file = f.file(&format!("view-exit-{round}"));
        let line = pane_line(&f, env, "status --watch", &exit_file);
        tmux.run(&["send-keys", "-t", "view", &line, "Enter"]);

        // The live rows: both workers running, by pid, under the fleet line.
        let mut pane = String::new();
        let shown = wait_until(WAIT, || {
            pane = tmux.run(&["capture-pane", "-p", "-t", "view"]);
            let rows = running_rows(&pane);
            // The whole frame: the rows and the footer below them (a capture can land
            // between the two while the view draws).
            rows.len() == 2
                && workers
                    .iter()
                    .all(|w| rows.iter().any(|r| r.contains(&format!(" {w} "))))
                && pane.contains("q or Ctrl-C: quit this view")
        });
        assert!(shown, "round {round}: live view:\n{pane}");
        assert!(pane.contains(&format!("supervisor pid={sup}")), "{pane}");
        assert!(
            pane.contains("fleet: target 2  live 2  idle 0  parked 0"),
            "{pane}"
        );
        assert!(pane.contains("boot suite: clean "), "{pane}");
        assert!(pane.contains("slot.spawn: spawned worker"), "{pane}");
        assert!(pane.contains("q or Ctrl-C: quit this view"), "{pane}");
        // Redrawn in place: the title line's clock moves, the screen does not scroll.
        let title = |p: &str| p.lines().next().unwrap_or_default().to_string();
        let first = title(&pane);
        assert!(
            first.starts_with("afk-supervisor status  "),
            "round {round}:\n{pane}"
        );
        let mut again = String::new();
        assert!(
            wait_until(WAIT, || {
                again = tmux.run(&["capture-pane", "-p", "-t", "view"]);
                title(&again) != first && title(&again).starts_with("afk-supervisor status  ")
            }),
            "no redraw:\n{again}"
        );
        assert_eq!(running_rows(&again).len(), 2, "{again}");
        // Colour on a terminal; none under NO_COLOR (green, as tmux reports it: SGR 32
        // or 38;5;2; bold alone is not colour).
        let styled = tmux.run(&["capture-pane", "-p", "-e", "-t", "view"]);
        let coloured = [
            "\u{1b}[32m",
            "\u{1b}[38;5;2m",
            "\u{1b}[31m",
            "\u{1b}[38;5;1m",
        ]
        .iter()
        .any(|sgr| styled.contains(sgr));
        assert_eq!(
            coloured,
            env.is_empty(),
            "round {round} ({env}):\n{styled:?}"
        );

        tmux.run(&["send-keys", "-t", "view", key]);
        assert!(
            wait_until(WAIT, || exit_file.exists()),
            "round {round}: the view did not end on {key}:\n{}",
            tmux.run(&["capture-pane", "-p", "-t", "view"])
        );
        assert!(
            wait_until(WAIT, || fs::read_to_string(&exit_file)
                .is_ok_and(|t| t.trim() == "0")),
            "round {round}: exit {:?}",
            fs::read_to_string(&exit_file)
        );
        // The terminal is given back: the view's screen is gone from the pane.
        let after = tmux.run(&["capture-pane", "-p", "-t", "view"]);
        assert!(!after.contains("LAST EVENT"), "round {round}:\n{after}");
        // And the fleet never noticed.
        assert!(fleet::alive(sup), "the supervisor ended with the view");
        for w in &workers {
            assert!(fleet::alive(*w), "worker {w} ended with the view");
        }
        assert_eq!(f.worker_pids().len(), 2);
        assert_eq!(f.count(Kind::SupervisorStop), 0, "{}", f.dump());
    }
    fleet::kill(sup, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(f.wait_exit().code(), Some(143));
}
