//! The errors a new user meets first (issue 11): each one line naming the key, file or
//! command to fix, with its documented exit code (`docs/SPEC.md` §9), and nothing created
//! or changed in the repo. Real processes, real git; the only stand-in is the fake gh.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::fake_gh::FakeGh;
use crate::support::fleet::{FAST_TIMING, Fleet, WAIT};
use crate::support::{self, wait_until};
use afk_supervisor::event_log::Kind;

/// Every path under `dir` with its content (files) or `<dir>` (directories), `.git`
/// excluded: two snapshots are equal when nothing was created or changed.
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel == ".git" {
                continue;
            }
            let meta = fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                out.insert(rel, "<dir>".into());
                walk(root, &p, out);
            } else {
                out.insert(rel, String::from_utf8_lossy(&fs::read(&p).unwrap()).into());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The one `afk-supervisor:` line of a refusal (stderr must hold nothing else).
fn one_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr).into_owned();
    assert_eq!(text.lines().count(), 1, "not one line: {text:?}");
    let line = text.trim_end().to_string();
    assert!(line.starts_with("afk-supervisor: "), "{line}");
    line
}

/// A repo whose config has the built-in worker (no `worker.command`), the local tracker,
/// and `agent` as its `[agent]` table body (or none).
fn built_in(agent: Option<String>) -> Fleet {
    let f = Fleet::new("exit 0\n", FAST_TIMING);
    let agent = agent.map_or(String::new(), |a| format!("[agent]\ncommand = [{a:?}]\n\n"));
    f.write_config(&format!(
        "[tracker]\nkind = \"local\"\n\n{agent}{FAST_TIMING}"
    ));
    f
}

#[test]
fn a_supervisor_without_an_agent_is_refused_with_78_and_creates_nothing() {
    let f = built_in(None);
    let before = snapshot(&f.repo);
    let out = f.run_cmd(&["--workers", "2"]);
    assert_eq!(out.status.code(), Some(78));
    let cfg = f.repo.join(".red/afk-supervisor.toml");
    assert_eq!(
        one_line(&out.stderr),
        format!(
            "afk-supervisor: agent.command is not set ({}): the built-in worker has no agent to run; set [agent] command = [\"/path/to/agent\", ...] there",
            cfg.display()
        )
    );
    assert_eq!(snapshot(&f.repo), before, "nothing created or changed");
}

#[test]
fn a_supervisor_whose_agent_cannot_be_executed_is_refused_with_78_and_creates_nothing() {
    let scratch = support::TestEnv::new();
    let not_exec = scratch.path().join("agent.sh");
    fs::write(&not_exec, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&not_exec, fs::Permissions::from_mode(0o644)).unwrap();
    let a_dir = scratch.path().to_path_buf();
    for (program, why) in [
        ("/no/such/agent".to_string(), "does not exist"),
        (
            not_exec.display().to_string(),
            "is not executable (chmod +x it)",
        ),
        (a_dir.display().to_string(), "is a directory, not a program"),
        ("no-such-agent-on-path".to_string(), "not found on PATH"),
    ] {
        let f = built_in(Some(program.clone()));
        let before = snapshot(&f.repo);
        let out = f.run_cmd(&["run", "--workers", "1"]);
        assert_eq!(out.status.code(), Some(78), "{program}");
        let cfg = f.repo.join(".red/afk-supervisor.toml");
        assert_eq!(
            one_line(&out.stderr),
            format!(
                "afk-supervisor: agent.command[0] = {program:?} ({}): {why}",
                cfg.display()
            )
        );
        assert_eq!(snapshot(&f.repo), before, "{program}: nothing created");
    }
}

#[test]
fn a_github_origin_with_gh_logged_out_is_78_for_run_and_worker_and_creates_nothing() {
    let mut f = built_in(Some("/bin/true".into()));
    let cfg = format!("[agent]\ncommand = [\"/bin/true\"]\n\n{FAST_TIMING}");
    f.write_config(&cfg); // tracker.kind = auto (the default)
    f.env.git(
        &f.repo,
        &[
            "remote",
            "set-url",
            "origin",
            "https://github.com/acme/widgets.git",
        ],
    );
    let gh = FakeGh::install(&f.env);
    gh.set_auth(false);
    f.extra_env
        .push(("PATH".into(), gh.path_env().to_string_lossy().into_owned()));
    let before = snapshot(&f.repo);
    let want = "afk-supervisor: tracker.kind = auto: origin is on GitHub but gh is not logged in \
        (`gh auth status`: exit 1: You are not logged into any GitHub hosts. Run gh auth login to \
        authenticate.): run gh auth login, or set tracker.kind = \"local\"";
    for args in [&["--workers", "1"][..], &["worker", "--once"][..]] {
        let out = f.run_cmd(args);
        assert_eq!(out.status.code(), Some(78), "{args:?}");
        assert_eq!(one_line(&out.stderr), want, "{args:?}");
        assert_eq!(snapshot(&f.repo), before, "{args:?}: nothing created");
    }
    // Only `gh auth status` was asked: no listing of an empty store, no issue touched.
    let calls = gh.calls();
    assert!(!calls.is_empty());
    assert!(
        calls
            .iter()
            .all(|c| c.len() >= 2 && c[..2] == ["auth", "status"]),
        "{calls:?}"
    );
}

#[test]
fn zero_workers_warns_and_a_parked_slot_carries_its_reason_into_state_and_status() {
    let mut f = built_in(Some("/bin/true".into()));
    f.start(&["--workers", "0"]);
    assert!(wait_until(WAIT, || f.state().is_some()), "{}", f.dump());
    let err = fs::read_to_string(f.file("supervisor-0.err")).unwrap();
    assert_eq!(
        err.lines().next(),
        Some(
            "afk-supervisor: warning: fleet.workers = 0 (flag --workers): the fleet starts with no worker; grow it with `afk-supervisor scale N`"
        ),
        "{err}"
    );
    // The bootstrap ran: dirs and exactly the two ignore lines.
    assert!(f.repo.join(".red/tmp").is_dir() && f.repo.join(".red/state").is_dir());
    assert_eq!(
        fs::read_to_string(f.repo.join(".gitignore")).unwrap(),
        ".red/tmp/\n.red/state/\n"
    );

    // The agent goes bad after the start check: each worker reads the config afresh, exits
    // 78 before claiming, and its slot is parked with the worker's own line as the reason.
    let cfg = f.repo.join(".red/afk-supervisor.toml");
    f.write_config(&format!(
        "[tracker]\nkind = \"local\"\n\n[agent]\ncommand = [\"/no/such/agent\"]\n\n{FAST_TIMING}"
    ));
    let out = f.run_cmd(&["scale", "1"]);
    assert!(out.status.success(), "{out:?}");
    f.wait_events(Kind::SlotParked, 1);
    let want = format!(
        "agent.command[0] = \"/no/such/agent\" ({}): does not exist",
        cfg.display()
    );
    assert!(
        wait_until(WAIT, || f.state().is_some_and(|s| s
            .slot_detail
            .iter()
            .any(
                |d| d.state == "parked" && d.reason.as_deref() == Some(want.as_str())
            ))),
        "{:?}\n{}",
        f.state(),
        f.dump()
    );
    let raw = fs::read_to_string(f.layout.state_file()).unwrap();
    assert!(raw.contains("reason"), "{raw}");

    // Parked for good: no second worker, and nothing was claimed.
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    let out = f.run_cmd(&["status"]);
    // Running but degraded, as `systemctl is-active` would say: exit 1.
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines()
            .filter(|l| l.trim() == format!("parked: {want}"))
            .count(),
        1,
        "{text}"
    );
    // The queue was checked: a number, not `unknown`.
    assert!(text.contains(" ready-for-agent=0 "), "{text}");
    let out = f.run_cmd(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let slots = v["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 1, "{v}");
    assert_eq!(slots[0]["state"], "parked");
    assert_eq!(slots[0]["reason"], serde_json::Value::String(want.clone()));
    // The runner is the agent's program name, not a hard-coded `claude`.
    assert_eq!(v["fleet"]["runner"], "true");
    assert_eq!(f.count(Kind::SlotSpawn), 1);
    let claims = f.repo.join(".red/tmp/claims");
    assert_eq!(fs::read_dir(&claims).map_or(0, |d| d.count()), 0);

    let out = f.run_cmd(&["stop"]);
    assert!(out.status.success(), "{out:?}");
    let status = f.wait_exit();
    assert_eq!(status.code(), Some(143));
}
