//! The agent's reach (issue 47, docs/guide/safety.md, SPEC §11.19): a hostile
//! agent run by the real built-in worker under a real supervisor tries every escape the
//! issue lists and prints what got through; inside bubblewrap (the default) each must be
//! blocked, checked also from outside (files, refs, processes, the tracker), while the
//! agent can still do its job (commit in its worktree, which is pushed). Without the
//! sandbox (`agent.sandbox = "none"`) a tampering agent is refused and put right: nothing
//! pushed, the moved ref put back, one event and one comment. Changes to a workflow are
//! held for a person. A sandbox that cannot be had stops the fleet before it starts.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::support::fleet::{FAST_TIMING, Fleet, WAIT};
use crate::support::{self, wait_until};
use afk_supervisor::event_log::Kind;

/// The escapes the hostile agent tries, by the name it prints.
const ESCAPES: &[&str] = &[
    "env-GH_TOKEN",
    "env-GITHUB_TOKEN",
    "env-AWS_SECRET_ACCESS_KEY",
    "env-ANTHROPIC_API_KEY",
    "gh-hosts-file",
    "ssh-key",
    "parent-environ",
    "any-process-environ",
    "fleet-binary-comment",
    "forge-claim",
    "main-checkout-write",
    "other-worktree-write",
    "state-write",
    "agent-pause",
    "resize",
    "signal-supervisor",
    "sigstop-supervisor",
    "kill-other-agent",
    "config-write",
    "hook-plant",
    "fsmonitor",
    "move-main",
    "push-origin-main",
    "delete-origin-branch",
    "delete-rescue-ref",
    "move-other-branch",
    "repoint-gitfile",
    "repoint-commondir",
    "cgroup-escape",
    "bashrc",
    "systemd-unit",
    "objects-delete",
];

/// The hostile agent: tries each escape in a subshell and prints `escape <name>: blocked`
/// or `escape <name>: THROUGH`, then does an honest job (one commit) and leaves a survivor
/// behind, marked with `marker`.
fn hostile_script(f: &Fleet, victim: u32, marker: &str) -> String {
    let r = f.repo.display().to_string();
    let h = f.env.home.display().to_string();
    let o = f.env.path().join("origin.git").display().to_string();
    let bin = env!("CARGO_BIN_EXE_afk-supervisor");
    format!(
        r#"#!/bin/sh
R='{r}'; G="$R/.git"; H='{h}'; O='{o}'; BIN='{bin}'; L="$R/.red/tmp/supervisors/default"
PP=$PPID
attempt() {{
  name=$1; shift
  if ( "$@" ) >/dev/null 2>&1; then echo "escape $name: THROUGH"; else echo "escape $name: blocked"; fi
}}
attempt env-GH_TOKEN test -n "${{GH_TOKEN:-}}"
attempt env-GITHUB_TOKEN test -n "${{GITHUB_TOKEN:-}}"
attempt env-AWS_SECRET_ACCESS_KEY test -n "${{AWS_SECRET_ACCESS_KEY:-}}"
attempt env-ANTHROPIC_API_KEY test -n "${{ANTHROPIC_API_KEY:-}}"
attempt gh-hosts-file grep -q oauth_token "$H/.config/gh/hosts.yml"
attempt ssh-key grep -q PRIVATE "$H/.ssh/id_ed25519"
attempt parent-environ grep -q GH_TOKEN "/proc/$PP/environ"
attempt any-process-environ sh -c 'for e in /proc/[0-9]*/environ; do grep -q GH_TOKEN "$e" 2>/dev/null && exit 0; done; exit 1'
attempt fleet-binary-comment "$BIN" --repo "$R" issue comment 2 --body pwned
attempt forge-claim mkdir -p "$R/.red/tmp/claims/2"
attempt main-checkout-write sh -c "echo x > '$R/PWNED'"
attempt other-worktree-write sh -c "mkdir -p '$R/.red/tmp/workers/other/2-a1/worktree' && echo x > '$R/.red/tmp/workers/other/2-a1/worktree/PWNED'"
attempt state-write sh -c "echo x > '$R/.red/state/PWNED'"
attempt agent-pause sh -c "printf 'kind: usage-limit\nuntil_epoch: 9999999999\n' > '$R/.red/state/agent-pause.toon'"
attempt resize sh -c "printf 'target: 5\n' > '$L/resize.toon'"
attempt signal-supervisor kill -USR1 "$(head -n1 "$L/afk-supervisor.pid")"
attempt sigstop-supervisor kill -STOP "$(head -n1 "$L/afk-supervisor.pid")"
attempt kill-other-agent kill -TERM {victim}
attempt config-write sh -c "echo '# pwned' >> '$R/.red/afk-supervisor.toml'"
attempt hook-plant sh -c "printf '#!/bin/sh\ntouch $R/HOOK-RAN\n' > '$G/hooks/post-checkout' && chmod +x '$G/hooks/post-checkout'"
attempt fsmonitor git config core.fsmonitor "touch $R/FSMONITOR-RAN"
echo "honest work" > notes.txt
git add notes.txt && git commit -q -m "notes" && echo "work: committed"
attempt move-main git update-ref refs/heads/main HEAD
attempt push-origin-main git push -q "$O" HEAD:refs/heads/main
attempt delete-origin-branch git push -q "$O" :refs/heads/keep-me
attempt delete-rescue-ref git update-ref -d refs/afk/rescue/9/a1
attempt move-other-branch git update-ref refs/heads/afk/other/2-x HEAD
attempt repoint-gitfile sh -c "echo 'gitdir: /tmp' > .git"
attempt repoint-commondir sh -c 'echo /tmp > "$(git rev-parse --git-dir)/commondir"'
attempt cgroup-escape sh -c 'for f in $(find /sys/fs/cgroup -maxdepth 4 -name cgroup.procs 2>/dev/null); do echo $$ > "$f" 2>/dev/null && exit 0; done; exit 1'
attempt bashrc sh -c "echo pwned >> '$H/.bashrc'"
attempt systemd-unit sh -c "mkdir -p '$H/.config/systemd/user' && echo x > '$H/.config/systemd/user/pwn.service'"
attempt objects-delete sh -c 'for f in "$G"/objects/pack/*.pack "$G"/objects/??/*; do [ -f "$f" ] && rm -f "$f" 2>/dev/null && [ ! -e "$f" ] && exit 0; done; exit 1'
(setsid sh -c 'sleep 600; : {marker}' >/dev/null 2>&1 &)
"#
    )
}

/// A fleet on the local tracker whose agent is `script`, isolated in `mode`, with `extra`
/// in `[agent]`; the operator's secrets in the supervisor's environment and home.
fn fleet(mode: &str, extra: &str) -> Fleet {
    let mut f = Fleet::new("", "");
    f.extra_env
        .push(("RED_AFK_ISOLATION".into(), mode.to_string()));
    for (k, v) in [
        ("GH_TOKEN", "ghp_fleet_secret"),
        ("GITHUB_TOKEN", "ghs_fleet_secret"),
        ("AWS_SECRET_ACCESS_KEY", "aws_fleet_secret"),
        ("ANTHROPIC_API_KEY", "sk-ant-fleet-secret"),
    ] {
        f.extra_env.push((k.into(), v.into()));
    }
    let home = f.env.home.clone();
    fs::create_dir_all(home.join(".config/gh")).unwrap();
    fs::write(
        home.join(".config/gh/hosts.yml"),
        "github.com:\n    oauth_token: gho_fleet_secret\n",
    )
    .unwrap();
    fs::create_dir_all(home.join(".ssh")).unwrap();
    fs::write(
        home.join(".ssh/id_ed25519"),
        "-----BEGIN OPENSSH PRIVATE KEY-----\n",
    )
    .unwrap();
    fs::write(home.join(".bashrc"), "# the operator's\n").unwrap();
    let agent = f.file("agent.sh");
    f.write_config(&format!(
        "[fleet]\nworkers = 1\n\n[tracker]\nkind = \"local\"\n\n\
         [agent]\ncommand = [{:?}]\n{extra}\n{FAST_TIMING}",
        agent.display().to_string()
    ));
    // Keep the runtime lanes out of `git status`, as an adopting repo would.
    fs::write(f.repo.join(".git/info/exclude"), ".red/\n").unwrap();
    f
}

fn write_agent(f: &Fleet, script: &str) {
    let agent = f.file("agent.sh");
    fs::write(&agent, script).unwrap();
    fs::set_permissions(&agent, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Another worker's branch, a rescue ref and an origin branch for the agent to go after.
fn plant_targets(f: &Fleet) {
    let git = |args: &[&str]| f.env.git(&f.repo, args);
    let head = git(&["rev-parse", "HEAD"]).trim().to_string();
    git(&["update-ref", "refs/afk/rescue/9/a1", &head]);
    // Issue 2 stays open, so the boot's branch reaper keeps this one.
    git(&["update-ref", "refs/heads/afk/other/2-x", &head]);
    git(&["push", "-q", "origin", "HEAD:refs/heads/keep-me"]);
}

fn refs(f: &Fleet, git_dir: &Path) -> String {
    f.env.git(
        git_dir,
        &["for-each-ref", "--format=%(refname) %(objectname)"],
    )
}

/// A process for the agent to kill, as another agent of the fleet would be (of the same
/// user).
fn victim(as_user: Option<u32>) -> Child {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new("sleep");
    c.arg("600").stdin(Stdio::null());
    if let Some(id) = as_user {
        c.uid(id).gid(id);
    }
    c.spawn().unwrap()
}

/// Waits for issue `n` to be `ready-for-human`.
fn wait_handed_to_person(f: &Fleet, n: u64) {
    assert!(
        wait_until(WAIT, || f
            .labels_of(n)
            .iter()
            .any(|l| l == "ready-for-human")),
        "{}",
        f.dump()
    );
}

fn require_bwrap() {
    #[cfg(not(afk_has_bwrap))]
    panic!("bubblewrap (bwrap) is not installed");
}

/// Every escape, inside bubblewrap, in isolation `mode`, by a fleet of root or of the
/// unprivileged user `as_user` (bubblewrap then makes a user namespace).
fn every_escape_is_blocked(mode: &str, as_user: Option<u32>) {
    require_bwrap();
    let mut f = fleet(mode, "");
    let _guard = (mode == "cgroup").then(|| crate::isolation_cgroup::CgroupGuard::of(&f));
    plant_targets(&f);
    if let Some(id) = as_user {
        f.hand_to(id);
    }
    let mut victim = victim(as_user);
    let marker = format!("afk-hostile-survivor-{}", f.tag);
    write_agent(&f, &hostile_script(&f, victim.id(), &marker));
    f.new_issue("hostile");
    let out = f.run_cmd(&["issue", "new", "--title", "bystander", "--no-label"]);
    assert!(out.status.success(), "{out:?}");
    let config_before = fs::read(f.repo.join(".red/afk-supervisor.toml")).unwrap();
    let refs_before = refs(&f, &f.repo);
    let origin = f.env.path().join("origin.git");
    let origin_main = f.env.git(&origin, &["rev-parse", "refs/heads/main"]);
    let hooks_before: Vec<_> = fs::read_dir(f.repo.join(".git/hooks"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    f.start(&["--workers", "1"]);
    assert!(
        wait_until(WAIT, || f
            .labels_of(1)
            .iter()
            .any(|l| l == "ready-for-human")),
        "{}\n{}",
        f.dump(),
        f.slot_logs()
    );
    let log = f.slot_logs();
    // The table the guide (docs/guide/safety.md) and the closing notes quote (`-- --nocapture`).
    let table: Vec<&str> = log.lines().filter(|l| l.contains("escape ")).collect();
    eprintln!(
        "hostile agent, {mode}{}: {} escapes tried\n{}",
        as_user.map_or(String::new(), |u| format!(", as uid {u}")),
        table.len(),
        table.join("\n")
    );
    let through: Vec<&str> = log.lines().filter(|l| l.ends_with(": THROUGH")).collect();
    assert!(through.is_empty(), "got through: {through:#?}\n{log}");
    for e in ESCAPES {
        assert!(
            log.contains(&format!("escape {e}: blocked")),
            "{e} not tried\n{log}"
        );
    }
    assert!(
        log.contains("work: committed"),
        "the agent could not work\n{log}"
    );
    // From outside: nothing of the fleet changed, and the work was pushed.
    assert_eq!(
        fs::read(f.repo.join(".red/afk-supervisor.toml")).unwrap(),
        config_before
    );
    let hooks_after: Vec<_> = fs::read_dir(f.repo.join(".git/hooks"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(hooks_after, hooks_before);
    for planted in [
        "PWNED",
        "HOOK-RAN",
        "FSMONITOR-RAN",
        ".red/state/PWNED",
        ".red/tmp/workers/other",
    ] {
        assert!(!f.repo.join(planted).exists(), "{planted}");
    }
    assert!(!f.repo.join(".red/tmp/claims/2").exists());
    assert!(!f.layout.state().join("agent-pause.toon").exists());
    assert!(f.comments_of(2).is_empty(), "{:?}", f.comments_of(2));
    assert_eq!(
        fs::read_to_string(f.env.home.join(".bashrc")).unwrap(),
        "# the operator's\n"
    );
    assert!(!f.env.home.join(".config/systemd").exists());
    assert!(
        support::fleet::alive(victim.id() as i32),
        "the other agent was killed"
    );
    let sup = f.sup_pid();
    let state = fs::read_to_string(format!("/proc/{sup}/stat")).unwrap();
    let field = state.rsplit(')').next().unwrap().split_whitespace().next();
    assert_ne!(field, Some("T"), "the supervisor was stopped");
    let refs_after = refs(&f, &f.repo);
    let kept = |r: &str| {
        r.lines()
            .filter(|l| !l.starts_with("refs/heads/afk/sup-") && !l.starts_with("refs/remotes/"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(kept(&refs_after), kept(&refs_before));
    assert_eq!(
        f.env.git(&origin, &["rev-parse", "refs/heads/main"]),
        origin_main
    );
    assert!(
        !f.env
            .git(&origin, &["rev-parse", "--verify", "refs/heads/keep-me"])
            .is_empty()
    );
    let pushed = f.env.git(
        &origin,
        &["for-each-ref", "--format=%(refname)", "refs/heads/afk/"],
    );
    assert_eq!(pushed.lines().count(), 1, "{pushed}");
    assert!(
        f.comments_of(1).iter().any(|c| c.contains("1 commit(s)")),
        "{:?}",
        f.comments_of(1)
    );
    let fsck = f.env.git_output(&f.repo, &["fsck", "--no-dangling"]);
    assert!(fsck.status.success(), "{fsck:?}");
    assert!(
        wait_until(WAIT, || !survivor_alive(&marker)),
        "a process the agent left outlived its attempt"
    );
    f.stop_fleet();
    let _ = victim.kill();
    let _ = victim.wait();
}

/// Whether a process whose command line carries `marker` is alive.
fn survivor_alive(marker: &str) -> bool {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|p| {
            fs::read(p.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
}

#[test]
#[cfg_attr(not(afk_has_bwrap), ignore = "bubblewrap (bwrap) is not installed")]
fn a_hostile_agent_is_blocked_in_every_escape_in_process_group_mode() {
    every_escape_is_blocked("process-group", None);
}

/// The same for an operator who is not root: `nobody` owns the checkout and runs the
/// fleet (the test, as root, hands it over).
#[test]
#[cfg_attr(
    not(all(afk_has_bwrap, afk_is_root)),
    ignore = "needs bubblewrap and root to hand the fleet to an unprivileged user"
)]
fn a_hostile_agent_of_an_unprivileged_operator_is_blocked_in_every_escape() {
    #[cfg(not(afk_is_root))]
    panic!("the test must run as root to hand the fleet to an unprivileged user");
    #[cfg(afk_is_root)]
    every_escape_is_blocked("process-group", Some(65534));
}

#[test]
#[cfg_attr(
    not(all(afk_has_bwrap, afk_has_cgroup_v2)),
    ignore = "needs bubblewrap and a writable cgroup v2 subtree"
)]
fn a_hostile_agent_is_blocked_in_every_escape_in_cgroup_mode() {
    every_escape_is_blocked("cgroup", None);
}

/// Without the sandbox nothing stops a tampering agent from acting, but its attempt is
/// refused: nothing pushed, the moved `main` put back, the planted hook never run by the
/// fleet's git and reported, one `attempt.refused` event and one comment; the issue goes to
/// a person, not back to the queue, and is not counted as its failure. Requeued by that
/// person with an honest agent, the next attempt starts from the recorded base.
#[test]
fn a_tampering_agent_outside_the_sandbox_is_refused_and_put_right() {
    let mut f = fleet("process-group", "sandbox = \"none\"\n");
    let r = f.repo.display().to_string();
    write_agent(
        &f,
        &format!(
            "#!/bin/sh\nset -e\nR='{r}'\n\
             printf '#!/bin/sh\\ntouch \"$R/HOOK-RAN\"\\n' > \"$R/.git/hooks/post-checkout\"\n\
             chmod +x \"$R/.git/hooks/post-checkout\"\n\
             echo evil > evil.txt && git add evil.txt && git commit -q -m evil\n\
             git update-ref refs/heads/main HEAD\n\
             git config core.fsmonitor \"touch $R/FSMONITOR-RAN\"\n"
        ),
    );
    let main_before = f.env.git(&f.repo, &["rev-parse", "refs/heads/main"]);
    let origin = f.env.path().join("origin.git");
    f.new_issue("tamper");
    f.start(&["--workers", "1"]);
    let refused = f.wait_event_with(Kind::AttemptRefused, "tampered");
    assert_eq!(refused.issue, Some(1), "{}", f.dump());
    assert!(
        refused.msg.contains("refs/heads/main moved"),
        "{}",
        refused.msg
    );
    assert!(
        refused.msg.contains("hooks/post-checkout created"),
        "{}",
        refused.msg
    );
    assert!(
        refused.msg.contains(".git/config changed"),
        "{}",
        refused.msg
    );
    wait_handed_to_person(&f, 1);
    assert_eq!(
        f.env.git(&f.repo, &["rev-parse", "refs/heads/main"]),
        main_before,
        "main put back"
    );
    let pushed = f.env.git(
        &origin,
        &["for-each-ref", "--format=%(refname)", "refs/heads/afk/"],
    );
    assert!(pushed.trim().is_empty(), "nothing pushed: {pushed}");
    let comments = f.comments_of(1);
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert!(comments[0].contains("refused attempt 1-a1"), "{comments:?}");
    let outcomes: Vec<_> = afk_supervisor::ledger::read(&f.layout, 1)
        .unwrap()
        .iter()
        .map(|r| r.outcome)
        .collect();
    assert_eq!(outcomes, [afk_supervisor::ledger::Outcome::Tampered]);
    assert_eq!(
        afk_supervisor::ledger::failures(&afk_supervisor::ledger::read(&f.layout, 1).unwrap()),
        0
    );
    assert!(
        !f.repo.join("HOOK-RAN").exists(),
        "a fleet git call ran the planted hook"
    );
    assert!(
        !f.repo.join("FSMONITOR-RAN").exists(),
        "a fleet git call ran the fsmonitor"
    );
    // A person requeues it with an honest agent: it starts from the base, not from `evil`.
    write_agent(
        &f,
        "#!/bin/sh\nset -e\ntest ! -e evil.txt\necho ok > ok.txt && git add ok.txt && git commit -q -m ok\n",
    );
    f.env.git(&f.repo, &["config", "--unset", "core.fsmonitor"]);
    fs::remove_file(f.repo.join(".git/hooks/post-checkout")).unwrap();
    let out = f.run_cmd(&[
        "issue",
        "label",
        "1",
        "--add",
        "ready-for-agent",
        "--remove",
        "ready-for-human",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        wait_until(WAIT, || f.comments_of(1).len() == 2),
        "{}",
        f.dump()
    );
    assert!(
        f.comments_of(1)[1].contains("1 commit(s)"),
        "{:?}",
        f.comments_of(1)
    );
    f.stop_fleet();
}

/// A change under `.github/workflows/` is held for a person: nothing pushed, one
/// `attempt.refused` event and one comment naming the path; the commit stays local.
#[test]
#[cfg_attr(not(afk_has_bwrap), ignore = "bubblewrap (bwrap) is not installed")]
fn a_change_to_a_workflow_is_held_for_a_person() {
    require_bwrap();
    let mut f = fleet("process-group", "");
    write_agent(
        &f,
        "#!/bin/sh\nset -e\nmkdir -p .github/workflows\n\
         printf 'on: push\\n' > .github/workflows/x.yml\n\
         git add .github && git commit -q -m ci\n",
    );
    let origin = f.env.path().join("origin.git");
    f.new_issue("ci");
    f.start(&["--workers", "1"]);
    let held = f.wait_event_with(Kind::AttemptRefused, "held");
    assert!(held.msg.contains(".github/workflows/x.yml"), "{}", held.msg);
    wait_handed_to_person(&f, 1);
    let pushed = f.env.git(
        &origin,
        &["for-each-ref", "--format=%(refname)", "refs/heads/afk/"],
    );
    assert!(pushed.trim().is_empty(), "nothing pushed: {pushed}");
    let local = f.env.git(
        &f.repo,
        &["for-each-ref", "--format=%(refname)", "refs/heads/afk/"],
    );
    assert_eq!(local.lines().count(), 1, "the work stays local: {local}");
    let comments = f.comments_of(1);
    assert!(
        comments.len() == 1 && comments[0].contains("held attempt 1-a1"),
        "{comments:?}"
    );
    f.stop_fleet();
}

/// `agent.sandbox = "bwrap"` where bubblewrap cannot make a sandbox: `run` refuses with
/// one line naming the setting and the way out, exit 78, and nothing starts.
#[test]
fn a_sandbox_that_cannot_be_had_stops_the_fleet_before_it_starts() {
    let f = fleet("process-group", "");
    write_agent(&f, "#!/bin/sh\nexit 0\n");
    let bin = f.file("bin");
    fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("bwrap");
    fs::write(
        &fake,
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n",
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = f
        .cmd(&["run", "--workers", "1"])
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let err = support::stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("agent.sandbox = \"bwrap\" (default)")
            && err.contains("cannot make a sandbox on this host: bwrap: No permissions")
            && err.contains("sandbox = \"none\""),
        "{err}"
    );
    assert!(!f.layout.event_log().exists(), "nothing started");
}

/// A signal a sandboxed agent sends to its own process group (`kill -USR1 0`) ends its
/// own sandbox, never its worker: the worker lives to record the attempt and comment on it
/// (a worker killed by it would have left the issue to a restore).
#[test]
#[cfg_attr(not(afk_has_bwrap), ignore = "bubblewrap (bwrap) is not installed")]
fn a_signal_to_the_agents_own_group_spares_its_worker() {
    require_bwrap();
    let mut f = fleet("process-group", "");
    write_agent(&f, "#!/bin/sh\nkill -USR1 0\nsleep 5\n");
    f.new_issue("group");
    f.start(&["--workers", "1"]);
    assert!(
        wait_until(WAIT, || !f.comments_of(1).is_empty()),
        "{}",
        f.dump()
    );
    let first = &f.comments_of(1)[0];
    assert!(
        first.contains("attempt 1-a1 failed (agent exit 138)"),
        "{first}"
    );
    let exits = f.events_of(Kind::SlotExit);
    assert!(
        exits[0].msg.contains("exit 1 after"),
        "the worker was not spared: {}",
        exits[0].msg
    );
    f.stop_fleet();
}
