//! The first hour on an own repo (issue 26): `init`, `issue new`, `run`, through the binary,
//! on a real checkout with a bare origin. The traps a new user met are each pinned here: an
//! unlabelled issue nobody takes, `.red/` showing in `git status`, a relative agent path that
//! passed the check and failed in every worktree.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT};
use crate::support::{TestEnv, text, wait_until};
use afk_supervisor::event_log::Kind;

#[test]
fn init_writes_the_documented_defaults_with_the_choices_and_refuses_to_overwrite() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin().path;
    // `init` checks the agent as `run` does: a `claude` on PATH.
    let bin = env.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    fs::write(bin.join("claude"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(bin.join("claude"), fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let args = [
        "init",
        "--agent",
        "claude -p",
        "--tracker",
        "local",
        "--workers",
        "3",
    ];
    let out = env
        .bin()
        .current_dir(&repo)
        .env("PATH", &path)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = text(&out.stdout);
    let cfg = repo.join(".red/afk-supervisor.toml");
    assert!(
        out.starts_with(&format!("wrote {}\n", cfg.display())),
        "{out}"
    );
    assert!(
        out.contains(".gitignore: created with .red/tmp/ .red/state/"),
        "{out}"
    );
    let next: Vec<&str> = out.lines().skip_while(|l| *l != "next:").skip(1).collect();
    assert_eq!(next.len(), 3, "{out}");
    assert!(next[0].contains("afk-supervisor config"), "{out}");
    assert!(
        next[1].contains("afk-supervisor issue new --title"),
        "{out}"
    );
    assert!(next[2].contains("afk-supervisor run --workers 3"), "{out}");
    let written = fs::read_to_string(&cfg).unwrap();
    assert!(
        written.contains("command = [\"claude\", \"-p\"]\n"),
        "{written}"
    );
    // What `config` reads back is what init was told, from the file.
    let shown = env.ok_in(&repo, &["config"]);
    for want in [
        "fleet.workers = 3  # file",
        "tracker.kind = local  # file",
        "agent.command = [\"claude\", \"-p\"]  # file",
        "timing.tick_s = 15  # file",
    ] {
        assert!(shown.contains(want), "{want}\n{shown}");
    }
    let gitignore = fs::read_to_string(repo.join(".gitignore")).unwrap();
    assert_eq!(gitignore, ".red/tmp/\n.red/state/\n");

    // A second init keeps the file and says how to replace it.
    fs::write(&cfg, "# mine\n").unwrap();
    let again = env.run_in(&repo, &["init"]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        text(&again.stderr),
        format!(
            "afk-supervisor: {}: already exists; `afk-supervisor init --force` overwrites it\n",
            cfg.display()
        )
    );
    assert_eq!(fs::read_to_string(&cfg).unwrap(), "# mine\n");
    let forced = env.ok_in(&repo, &["init", "--force"]);
    assert!(
        forced.contains("no agent yet: set [agent] command"),
        "{forced}"
    );
    assert!(forced.contains("run --workers 2"), "{forced}");
    let defaults = fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/afk-supervisor.toml"),
    )
    .unwrap();
    assert_eq!(fs::read_to_string(&cfg).unwrap(), defaults);
}

#[test]
fn issue_new_is_ready_for_agent_unless_told_and_red_never_shows_in_git_status() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin().path;
    assert_eq!(env.ok_in(&repo, &["issue", "new", "--title", "a"]), "1\n");
    assert_eq!(
        env.ok_in(&repo, &["issue", "new", "--title", "b", "--no-label"]),
        "2\n"
    );
    assert_eq!(
        env.ok_in(&repo, &["issue", "new", "--title", "c", "--label", "bug"]),
        "3\n"
    );
    let listed = env.ok_in(&repo, &["issue", "list"]);
    assert_eq!(
        listed, "#3 OPEN c [bug]\n#2 OPEN b\n#1 OPEN a [ready-for-agent]\n",
        "{listed}"
    );
    let both = env.run_in(
        &repo,
        &["issue", "new", "--title", "d", "--no-label", "--label", "x"],
    );
    assert_eq!(both.status.code(), Some(2));
    env.ok_in(&repo, &["config"]);
    // The local store lives in .red/state/, which the command ignored as it created it.
    let status = env.git(&repo, &["status", "--short", "--untracked-files=all"]);
    assert_eq!(status, "?? .gitignore\n", "{status}");
    env.git(&repo, &["add", ".gitignore"]);
    env.git(&repo, &["commit", "-q", "-m", "ignore .red"]);
    env.ok_in(&repo, &["issue", "new", "--title", "e"]);
    assert_eq!(env.git(&repo, &["status", "--short"]), "");
}

/// Issue 52, item 11: `init` checks `--agent` as `run` does: one that cannot be run is
/// refused (exit 78, nothing written) with the path it was looked for at, unless `--force`
/// writes it with a warning; `run` then names the resolved path too.
#[test]
fn init_refuses_an_agent_that_cannot_run_unless_forced() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin().path;
    let cfg = repo.join(".red/afk-supervisor.toml");
    let out = env.run_in(&repo, &["init", "--agent", "./nope.sh"]);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let err = text(&out.stderr);
    let resolved = repo.join("nope.sh");
    assert_eq!(
        err,
        format!(
            "afk-supervisor: init --agent: \"./nope.sh\": {} does not exist; nothing written \
             (`init --force` writes it anyway)\n",
            resolved.display()
        )
    );
    assert!(text(&out.stdout).is_empty(), "{out:?}");
    assert!(!cfg.exists());
    let out = env.run_in(&repo, &["init", "--agent", "no-such-agent-52 -p"]);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    assert!(text(&out.stderr).contains("not found on PATH"), "{out:?}");

    let forced = env.run_in(&repo, &["init", "--force", "--agent", "./nope.sh"]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    assert!(
        text(&forced.stderr).contains("warning: init --agent: \"./nope.sh\""),
        "{forced:?}"
    );
    assert!(fs::read_to_string(&cfg).unwrap().contains("\"./nope.sh\""));
    let run = env.run_in(&repo, &["run"]);
    assert_eq!(run.status.code(), Some(78), "{run:?}");
    assert!(
        text(&run.stderr).contains(&format!("{} does not exist", resolved.display())),
        "{run:?}"
    );

    // Once the script is there and executable, init takes it.
    fs::write(&resolved, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&resolved, fs::Permissions::from_mode(0o755)).unwrap();
    let out = env.run_in(&repo, &["init", "--force", "--agent", "./nope.sh"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stderr).is_empty(), "{out:?}");
}

/// A relative `agent.command[0]`, an untracked script in the repo (so absent from every
/// worktree): the check and the run both use the repo's file, and the issue is worked. An
/// issue nobody can take is named once by the supervisor.
#[test]
fn a_relative_agent_runs_from_the_repo_and_stragglers_are_named_at_boot() {
    let mut f = Fleet::new("exit 0\n", FAST_TIMING);
    let agent = f.repo.join("scripts/agent.sh");
    fs::create_dir_all(agent.parent().unwrap()).unwrap();
    fs::write(
        &agent,
        "#!/bin/sh\nset -e\necho \"worked $RED_AFK_ISSUE\" > \"notes-$RED_AFK_ISSUE.md\"\n\
         git add \"notes-$RED_AFK_ISSUE.md\"\ngit commit -q -m \"notes for #$RED_AFK_ISSUE\"\n",
    )
    .unwrap();
    fs::set_permissions(&agent, fs::Permissions::from_mode(0o755)).unwrap();
    f.write_config(&format!(
        "[agent]\ncommand = [\"./scripts/agent.sh\"]\n\n[tracker]\nkind = \"local\"\n\n{FAST_TIMING}"
    ));
    let out = f.run_cmd(&["issue", "new", "--title", "work"]);
    assert!(out.status.success(), "{out:?}");
    let out = f.run_cmd(&["issue", "new", "--title", "untriaged", "--no-label"]);
    assert!(out.status.success(), "{out:?}");
    f.start(&["--workers", "1"]);
    assert!(
        wait_until(WAIT, || f
            .labels_of(1)
            .contains(&"ready-for-human".to_string())),
        "#1 not worked: {:?}\n{}",
        f.labels_of(1),
        f.dump()
    );
    let warned = f.events_of(Kind::SupervisorStragglers);
    assert_eq!(warned.len(), 1, "{}", f.dump());
    assert_eq!(
        warned[0].msg,
        "stragglers: 1 open issue AFK cannot take (unlabeled=1 triage=0 info=0): #2"
    );
    assert_eq!(f.count(Kind::SlotParked), 0, "{}", f.dump());
    let out = f.run_cmd(&["stop"]);
    assert!(out.status.success(), "{out:?}");
    f.wait_exit();
}
