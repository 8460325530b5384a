//! What people bring from supervisorctl, PM2 and systemctl (issue 26), through the binary:
//! completions and a man page, a `--version` that names the build, exit codes in `--help`,
//! `logs -n/--until/--kind` with ticks hidden, `start` in the background, `list` of the
//! fleets on the host, and the boot suite's progress.

use std::path::Path;
use std::process::Output;

use afk_supervisor::toonl::EventLog;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT};
use crate::support::{TestEnv, ev, fleet, text, wait_until};

fn bare(args: &[&str]) -> Output {
    let env = TestEnv::new();
    env.bin()
        .current_dir(env.path())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn completions_man_version_and_the_exit_codes_in_help() {
    for (shell, needle) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef afk-supervisor"),
        ("fish", "complete -c afk-supervisor"),
    ] {
        let out = bare(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let t = text(&out.stdout);
        assert!(t.contains(needle), "{shell}: {t}");
        for sub in ["init", "status", "logs", "start", "list"] {
            assert!(t.contains(sub), "{shell}: no {sub}");
        }
    }
    assert_eq!(bare(&["completions", "tcsh"]).status.code(), Some(2));

    let man = bare(&["man"]);
    assert!(man.status.success(), "{man:?}");
    let page = text(&man.stdout);
    assert!(page.contains(".TH afk-supervisor 1"), "{page}");
    assert!(page.contains("Exit codes"), "{page}");

    // `afk-supervisor 0.1.0 (<revision> <yyyy-mm-dd>)`, the revision this checkout's HEAD.
    let v = text(&bare(&["--version"]).stdout);
    let inner = v
        .trim()
        .strip_prefix(&format!("afk-supervisor {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{v}"));
    let (rev, date) = inner.split_once(' ').unwrap_or_else(|| panic!("{v}"));
    assert!(
        date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-',
        "{v}"
    );
    let head = std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=12",
            "HEAD",
        ])
        .output()
        .unwrap();
    if head.status.success() {
        assert_eq!(rev, text(&head.stdout).trim(), "{v}");
    } else {
        assert_eq!(rev, "unknown", "{v}");
    }

    let help = text(&bare(&["--help"]).stdout);
    let footer = help
        .split("Exit codes:")
        .nth(1)
        .unwrap_or_else(|| panic!("{help}"));
    for code in [
        "0 ",
        "1 ",
        "2 ",
        "3 ",
        "4 ",
        "69 ",
        "75 ",
        "78 ",
        "129/130/143",
    ] {
        assert!(
            footer.lines().any(|l| l.trim_start().starts_with(code)),
            "{code}: {help}"
        );
    }
    let status_help = text(&bare(&["status", "--help"]).stdout);
    assert!(status_help.contains("systemctl is-active"), "{status_help}");
}

#[test]
fn logs_tail_until_kind_and_hidden_ticks() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin().path;
    let layout = afk_supervisor::layout::Layout::new(&repo);
    std::fs::create_dir_all(layout.supervisor_lane()).unwrap();
    let mut log = EventLog::open(&layout.event_log()).unwrap();
    for (i, kind) in [
        "supervisor.start",
        "supervisor.tick",
        "slot.spawn",
        "supervisor.tick",
        "slot.exit",
        "circuit.trip",
    ]
    .iter()
    .enumerate()
    {
        log.append(&ev(
            &format!("2026-01-01T00:00:0{i}.000Z"),
            kind,
            &format!("m{i}"),
        ))
        .unwrap();
    }
    let logs = |args: &[&str]| {
        let out = env
            .bin()
            .arg("--repo")
            .arg(&repo)
            .arg("logs")
            .args(args)
            .output()
            .unwrap();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let msgs = |t: &str| -> Vec<String> {
        t.lines()
            .map(|l| l.rsplit(": ").next().unwrap().to_string())
            .collect()
    };
    let (code, out, _) = logs(&[]);
    assert_eq!(code, Some(0));
    assert_eq!(msgs(&out), ["m0", "m2", "m4", "m5"], "ticks hidden: {out}");
    assert_eq!(msgs(&logs(&["--all"]).1).len(), 6);
    assert_eq!(msgs(&logs(&["--kind", "supervisor.tick"]).1), ["m1", "m3"]);
    assert_eq!(msgs(&logs(&["-n", "2"]).1), ["m4", "m5"]);
    assert_eq!(msgs(&logs(&["--tail", "1", "--all"]).1), ["m5"]);
    assert_eq!(
        msgs(&logs(&["--until", "2026-01-01T00:00:02.000Z"]).1),
        ["m0", "m2"]
    );
    assert_eq!(
        msgs(
            &logs(&[
                "--since",
                "2026-01-01T00:00:02.000Z",
                "--until",
                "2026-01-01T00:00:04.000Z"
            ])
            .1
        ),
        ["m2", "m4"]
    );
    assert_eq!(msgs(&logs(&["--kind", "circuit"]).1), ["m5"]);
    let (code, out, err) = logs(&["--kind", "bogus"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(out, "");
    assert!(
        err.starts_with("afk-supervisor: logs --kind \"bogus\": no such kind or prefix (kinds: supervisor.start, "),
        "{err}"
    );
    assert_eq!(logs(&["--kind", "slot.ex"]).0, Some(2));
    assert_eq!(logs(&["--until", "yesterday"]).0, Some(2));
}

/// `start` detaches: it returns with the supervisor running in a session of its own, its
/// output in the lane's `supervisor.out`, the boot suite's progress there line by line; a
/// second `start` is refused; `list` shows the fleet, and after `stop` shows it stopped.
#[test]
fn start_detaches_list_shows_the_fleets_and_boot_progress_is_printed() {
    let f = Fleet::new("exec sleep 600\n", FAST_TIMING);
    let other = Fleet::new("exec sleep 600\n", FAST_TIMING);
    // Both fleets share one user state dir, as on one host.
    let state = f.env.path().join("state");
    let with_state = |mut c: std::process::Command| {
        c.env("XDG_STATE_HOME", &state);
        c
    };
    let out = with_state(f.cmd(&["start", "--workers", "2"]))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = text(&out.stdout);
    let pid: i32 = said
        .strip_prefix("started: supervisor pid=")
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        said.contains(&f.layout.supervisor_out().display().to_string()),
        "{said}"
    );
    // Its own session: no terminal, no hangup from the shell that started it.
    assert_eq!(
        nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid)))
            .unwrap()
            .as_raw(),
        pid
    );
    assert!(wait_until(WAIT, || f
        .state()
        .is_some_and(|s| s.slot_pids.len() == 2)));
    let again = with_state(f.cmd(&["start"])).output().unwrap();
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert!(text(&again.stderr).contains(&format!("already running for this project (pid={pid})")));

    let out_file = std::fs::read_to_string(f.layout.supervisor_out()).unwrap();
    let progress: Vec<&str> = out_file
        .lines()
        .filter(|l| l.starts_with("boot sweeps: "))
        .collect();
    assert_eq!(progress.len(), 12, "{out_file}");
    assert_eq!(progress[0], "boot sweeps: 1/6 orphans started");
    assert!(
        progress[1].starts_with("boot sweeps: 1/6 orphans done in "),
        "{out_file}"
    );

    // The other checkout ran a fleet once, and is stopped now.
    let mut other = other;
    other
        .extra_env
        .push(("XDG_STATE_HOME".into(), state.display().to_string()));
    other.start(&["--workers", "1"]);
    other.wait_workers(1);
    assert!(other.run_cmd(&["stop"]).status.success());
    other.wait_exit();

    let list = with_state(f.cmd(&["list", "--json"])).output().unwrap();
    assert!(list.status.success(), "{list:?}");
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let row = |repo: &Path| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["repo"] == repo.display().to_string())
            .cloned()
            .unwrap_or_else(|| panic!("{} not in {rows}", repo.display()))
    };
    let mine = row(&f.repo);
    assert_eq!(mine["state"], "running", "{rows}");
    assert_eq!(mine["pid"], pid, "{rows}");
    assert_eq!(mine["target"], 2, "{rows}");
    assert_eq!(mine["health"], "healthy", "{rows}");
    assert_eq!(row(&other.repo)["state"], "stopped", "{rows}");
    let plain = text(&with_state(f.cmd(&["list"])).output().unwrap().stdout);
    assert!(plain.starts_with("STATE "), "{plain}");
    assert!(
        plain
            .lines()
            .any(|l| l.starts_with("running") && l.ends_with(&f.repo.display().to_string())),
        "{plain}"
    );

    assert!(f.run_cmd(&["stop"]).status.success());
    assert!(wait_until(WAIT, || !fleet::alive(pid)));
}

#[test]
fn start_refuses_what_run_refuses_before_anything_starts() {
    let f = Fleet::new("exit 0\n", FAST_TIMING);
    f.write_config("[tracker]\nkind = \"local\"\n");
    let out = f.run_cmd(&["start"]);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    assert!(
        text(&out.stderr).contains("agent.command is not set"),
        "{out:?}"
    );
    assert!(!f.layout.supervisor_out().exists());
}
