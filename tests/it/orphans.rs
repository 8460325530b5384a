//! Orphan cleanup against the real local tracker: every row of the fate table, both TTL
//! splits either side of the boundary, running issues with live and dead claims, legacy
//! dirs, stale claims, dead worker shells, corrupt files, reused pids, and dry runs.

use std::fs;

use afk_supervisor::safe_delete::{DeleteError, DeleteRoot};
use afk_supervisor::sweeps::orphans::{self, OrphanReport, RESTORE_COMMENT};
use afk_supervisor::tracker::{IssueState, LocalTracker, Tracker};

use crate::support::sweep_fixtures::*;
use crate::support::{BindMount, TestEnv, local_comments as comments, local_labels as labels};

fn sweep(tree: &Tree, t: &dyn Tracker, dry_run: bool) -> OrphanReport {
    orphans::run(&tree.layout, t, tree.now, dry_run).unwrap()
}

fn verdict_of<'r>(r: &'r OrphanReport, suffix: &str) -> &'r str {
    r.decisions
        .iter()
        .find(|d| d.subject.ends_with(suffix))
        .map(|d| d.verdict.as_str())
        .unwrap_or_else(|| panic!("no decision for {suffix}: {:#?}", r.decisions))
}

/// A repo whose local tracker holds one closed issue.
struct Small {
    env: TestEnv,
    tree: Tree,
    t: LocalTracker,
    closed: u64,
}

impl Small {
    fn new() -> Self {
        let env = TestEnv::new();
        let dir = env.path().join("repo");
        let tree = Tree::new(&dir);
        let t = env.local_tracker(&dir);
        let closed = t.create("closed", "", &[]).unwrap();
        t.close(closed).unwrap();
        Small {
            env,
            tree,
            t,
            closed,
        }
    }
}

/// The fate table, one issue per row, in one dead worker (plus shells around it).
struct FateTable {
    _env: TestEnv,
    tree: Tree,
    t: LocalTracker,
    live: LiveProc,
    closed: u64,
    human: u64,
    human_unposted: u64,
    human_nofield: u64,
    human_nostate: u64,
    run_live_claim: u64,
    run_dead_claim: u64,
    run_no_claim: u64,
    other: u64,
}

impl FateTable {
    fn build() -> Self {
        let env = TestEnv::new();
        let dir = &env.path().join("repo");
        let tree = Tree::new(dir);
        let t = env.local_tracker(dir);
        let live = LiveProc::spawn();
        let mk = |title: &str, l: &[&str]| t.create(title, "", l).unwrap();
        let closed = mk("closed", &["running"]);
        t.close(closed).unwrap();
        let human = mk("human posted", &["ready-for-human"]);
        let human_unposted = mk("human unposted", &["ready-for-human"]);
        let human_nofield = mk("human no field", &["ready-for-human"]);
        let human_nostate = mk("human no state", &["ready-for-human"]);
        let run_live_claim = mk("running, live claim", &["running"]);
        let run_dead_claim = mk("running, dead claim", &["running"]);
        let run_no_claim = mk("running, no claim", &["running"]);
        let other = mk("other", &["ready-for-agent"]);

        let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
        let posted = state_json(Some(true));
        let unposted = state_json(Some(false));
        let nofield = state_json(None);
        let a = |issue: u64, n: u32, state: Option<&str>, age| {
            tree.attempt(&w, &format!("{issue}-a{n}"), state, age);
        };
        a(closed, 1, Some(&posted), MIN);
        a(human, 1, Some(&posted), DAY - MIN);
        a(human, 2, Some(&posted), DAY + MIN);
        a(human_unposted, 1, Some(&unposted), 7 * DAY - MIN);
        a(human_unposted, 2, Some(&unposted), 7 * DAY + MIN);
        a(human_unposted, 3, Some(&unposted), 2 * DAY);
        a(human_nofield, 1, Some(&nofield), 7 * DAY - MIN);
        a(human_nofield, 2, Some(&nofield), DAY + MIN);
        a(human_nofield, 3, Some(&nofield), 7 * DAY + MIN);
        a(human_nostate, 1, None, 7 * DAY - MIN);
        a(human_nostate, 2, None, 7 * DAY + MIN);
        a(run_live_claim, 1, Some(&nofield), MIN);
        a(run_dead_claim, 1, Some(&nofield), MIN);
        a(run_dead_claim, 2, None, 3 * DAY);
        a(run_no_claim, 1, Some(&nofield), MIN);
        a(other, 1, Some(&posted), MIN);
        // An issue the tracker does not know: the mtime TTL decides, as on a failed call.
        a(9999, 1, Some(&posted), 7 * DAY - MIN);
        a(9999, 2, Some(&posted), 7 * DAY + MIN);
        a(9999, 3, None, DAY - MIN);
        a(9999, 4, None, DAY + MIN);
        // Cannot be judged: corrupt state file; and an attempt whose own state names a
        // live process although its worker is dead.
        a(closed, 2, Some("{\"pid\": 12, \"envelope\": "), 30 * DAY);
        a(other, 2, Some(&live_state_json(live.pid())), 30 * DAY);
        // Attempt-like dirs without an issue number: 1-day TTL.
        for (name, age) in [("scratch", DAY - MIN), ("junk", DAY + MIN)] {
            fs::create_dir_all(w.join(name).join("x")).unwrap();
            set_age(&w.join(name), tree.now, age);
        }
        tree.claim(run_live_claim, Pid::Live(live.pid()));
        tree.claim(run_dead_claim, Pid::Dead(dead_pid()));

        // Shells: corrupt pid, missing pid (old dir), reused pid: all dead.
        let w2 = tree.worker("go-workers", "w2", Pid::Corrupt);
        tree.attempt(&w2, &format!("{closed}-a3"), Some(&posted), MIN);
        let w4 = tree.worker("scout-workers", "w4", Pid::Missing);
        // Leftovers of the worker's own atomic writes do not keep a shell.
        fs::write(w4.join("worker.pid.tmp"), "12").unwrap();
        set_age(&w4, tree.now, DAY);
        let w5 = tree.worker("workers", "w5", Pid::Reused(live.pid()));
        tree.attempt(&w5, &format!("{closed}-a5"), None, MIN);
        // A dead worker holding only an empty kept attempt dir: the shell goes, and the
        // empty dir with it.
        let w6 = tree.worker("workers", "w6", Pid::DeadNoStart(dead_pid()));
        let empty = w6.join(format!("{human_unposted}-a9"));
        fs::create_dir(&empty).unwrap();
        set_age(&empty, tree.now, 2 * DAY);
        // A live worker: nothing in it is touched.
        let w3 = tree.worker("workers", "w3", Pid::Live(live.pid()));
        tree.attempt(&w3, &format!("{closed}-a4"), Some(&posted), 30 * DAY);

        FateTable {
            _env: env,
            tree,
            t,
            live,
            closed,
            human,
            human_unposted,
            human_nofield,
            human_nostate,
            run_live_claim,
            run_dead_claim,
            run_no_claim,
            other,
        }
    }

    fn p(&self, rel: &str) -> std::path::PathBuf {
        self.tree.layout.tmp().join(rel)
    }

    fn w1(&self, issue: u64, n: u32) -> std::path::PathBuf {
        self.p(&format!("workers/w1/{issue}-a{n}"))
    }
}

#[test]
fn every_row_of_the_fate_table() {
    let f = FateTable::build();
    let counting = Counting::new(&f.t);
    let r = sweep(&f.tree, &counting, false);

    let gone = |p: std::path::PathBuf| assert!(!p.exists(), "{} should be gone", p.display());
    let kept = |p: std::path::PathBuf| assert!(p.exists(), "{} should be kept", p.display());
    // CLOSED: removed.
    gone(f.w1(f.closed, 1));
    // ready-for-human, envelope posted: 1 day either side.
    kept(f.w1(f.human, 1));
    gone(f.w1(f.human, 2));
    // ready-for-human, envelope not posted / field missing / no state file: 7 days.
    kept(f.w1(f.human_unposted, 1));
    gone(f.w1(f.human_unposted, 2));
    kept(f.w1(f.human_unposted, 3));
    kept(f.w1(f.human_nofield, 1));
    kept(f.w1(f.human_nofield, 2));
    gone(f.w1(f.human_nofield, 3));
    kept(f.w1(f.human_nostate, 1));
    gone(f.w1(f.human_nostate, 2));
    // running with a live claim: dir removed, issue untouched.
    gone(f.w1(f.run_live_claim, 1));
    assert_eq!(labels(&f.t, f.run_live_claim), vec!["running"]);
    assert!(comments(&f.t, f.run_live_claim).is_empty());
    assert!(f.tree.layout.claim_pid(f.run_live_claim).exists());
    // running with a dead claim / no claim: restored once, dirs removed, claim released.
    for n in [f.run_dead_claim, f.run_no_claim] {
        gone(f.w1(n, 1));
        assert_eq!(labels(&f.t, n), vec!["ready-for-agent"]);
        assert_eq!(comments(&f.t, n), vec![RESTORE_COMMENT.to_string()]);
        // The dead worker's attempt ends in the issue's ledger, once.
        let ledger = afk_supervisor::ledger::read(&f.tree.layout, n).unwrap();
        let outcomes: Vec<_> = ledger.iter().map(|r| r.outcome).collect();
        assert_eq!(outcomes, vec![afk_supervisor::ledger::Outcome::WorkerDied]);
    }
    assert!(
        afk_supervisor::ledger::read(&f.tree.layout, f.run_live_claim)
            .unwrap()
            .is_empty()
    );
    gone(f.w1(f.run_dead_claim, 2));
    assert!(
        !f.tree
            .layout
            .claims()
            .join(f.run_dead_claim.to_string())
            .exists()
    );
    assert_eq!(
        RESTORE_COMMENT,
        "🤖 /afk orchestrator died mid-issue; restoring ready-for-agent."
    );
    // Any other state: removed.
    gone(f.w1(f.other, 1));
    // An issue the tracker does not know: 7 days with a state file, 1 day without.
    kept(f.p("workers/w1/9999-a1"));
    gone(f.p("workers/w1/9999-a2"));
    kept(f.p("workers/w1/9999-a3"));
    gone(f.p("workers/w1/9999-a4"));
    assert!(
        r.decisions
            .iter()
            .filter(|d| d.issue == Some(9999))
            .all(|d| d
                .reason
                .contains("issue not found by the tracker, mtime TTL")),
        "{:#?}",
        r.decisions
    );
    // Cannot judge / live owner: kept.
    kept(f.w1(f.closed, 2));
    kept(f.w1(f.other, 2));
    assert!(
        r.decisions
            .iter()
            .any(|d| d.subject.ends_with(&format!("{}-a2", f.closed))
                && d.reason.contains("afk.state.json"))
    );
    // Unnumbered: 1 day.
    kept(f.p("workers/w1/scratch"));
    gone(f.p("workers/w1/junk"));
    // Shells.
    kept(f.p("workers/w1/worker.pid"));
    gone(f.p("go-workers/w2"));
    gone(f.p("scout-workers/w4"));
    gone(f.p("workers/w5"));
    gone(f.p("workers/w6"));
    kept(f.p(&format!("workers/w3/{}-a4", f.closed)));
    kept(f.p("workers/w3/worker.pid"));
    // Issues whose dirs were only removed keep their labels.
    assert_eq!(f.t.show(f.closed).unwrap().state, IssueState::Closed);
    assert_eq!(labels(&f.t, f.other), vec!["ready-for-agent"]);

    let c = &r.counts;
    assert_eq!(
        (
            c.removed,
            c.restored,
            c.kept,
            c.claims_released,
            c.legacy_removed
        ),
        (16, 2, 11, 1, 0),
        "{:#?}",
        r.decisions
    );
    assert_eq!(r.shells_removed, 4);
    assert_eq!(
        verdict_of(&r, &format!("w1/{}-a1", f.run_dead_claim)),
        "restore"
    );
    assert_eq!(
        verdict_of(&r, &format!("w1/{}-a2", f.run_dead_claim)),
        "remove"
    );
    // One list call, one view (the unknown 9999), two writes per restore.
    assert_eq!(counting.count("list"), 1, "{:?}", counting.calls());
    assert_eq!(counting.count("view"), 1, "{:?}", counting.calls());
    assert_eq!(counting.count("edit"), 2);
    assert_eq!(counting.count("comment"), 2);
    assert_eq!((r.tracker_reads, r.tracker_writes), (2, 4));
    drop(f.live);
}

#[test]
fn dry_run_changes_nothing_and_decides_like_the_real_run() {
    let f = FateTable::build();
    let before = snapshot(f.tree.layout.repo());
    let counting = Counting::new(&f.t);
    let dry = sweep(&f.tree, &counting, true);
    assert_eq!(snapshot(f.tree.layout.repo()), before);
    assert!(
        counting
            .calls()
            .iter()
            .all(|c| c.starts_with("list") || c.starts_with("view")),
        "{:?}",
        counting.calls()
    );
    assert_eq!(dry.tracker_writes, 0);
    let real = sweep(&f.tree, &f.t, false);
    assert_eq!(dry.counts, real.counts);
    let verdicts = |r: &OrphanReport| -> Vec<(String, String)> {
        r.decisions
            .iter()
            .map(|d| (d.subject.clone(), d.verdict.to_string()))
            .collect()
    };
    assert_eq!(verdicts(&dry), verdicts(&real));
    // Every decision carries its path, issue, state and reason.
    let d = dry
        .decisions
        .iter()
        .find(|d| d.subject == format!(".red/tmp/workers/w1/{}-a1", f.human))
        .unwrap();
    assert_eq!(d.issue, Some(f.human));
    assert_eq!(d.state.as_deref(), Some("OPEN ready-for-human"));
    assert_eq!(d.verdict, "keep");
    assert!(d.reason.contains("envelope posted"), "{}", d.reason);
}

#[test]
fn a_second_pass_is_a_no_op() {
    let f = FateTable::build();
    sweep(&f.tree, &f.t, false);
    let before = snapshot(f.tree.layout.repo());
    let counting = Counting::new(&f.t);
    let r = sweep(&f.tree, &counting, false);
    assert_eq!(snapshot(f.tree.layout.repo()), before);
    assert_eq!((r.counts.removed, r.counts.restored), (0, 0));
    assert_eq!(counting.count("edit") + counting.count("comment"), 0);
}

#[test]
fn legacy_flat_dirs_only_numeric_and_dead() {
    let env = TestEnv::new();
    let dir = &env.path().join("repo");
    let tree = Tree::new(dir);
    let t = env.local_tracker(dir);
    let live = LiveProc::spawn();
    let tmp = tree.layout.tmp();
    let mk = |name: &str, pid: Pid| {
        let d = tmp.join(name);
        fs::create_dir_all(d.join("src")).unwrap();
        fs::write(d.join("src/lib.rs"), "fn x() {}").unwrap();
        write_pid(&d.join("afk.pid"), pid);
        d
    };
    let dead = mk("work-10", Pid::DeadNoStart(dead_pid()));
    let reused = mk("work-14", Pid::Reused(live.pid()));
    let alive = mk("work-11", Pid::Live(live.pid()));
    let nopid = mk("work-12", Pid::Missing);
    let corrupt = mk("work-13", Pid::Corrupt);
    let slug = mk("work-fix-login", Pid::Dead(dead_pid()));
    let zero = mk("work-010", Pid::Dead(dead_pid()));
    let counting = Counting::new(&t);
    let r = sweep(&tree, &counting, false);
    assert!(!dead.exists());
    assert!(!reused.exists());
    for kept in [&alive, &nopid, &corrupt, &slug, &zero] {
        assert!(kept.join("src/lib.rs").exists(), "{}", kept.display());
    }
    assert_eq!(r.counts.legacy_removed, 2);
    assert_eq!(r.counts.kept, 1);
    assert_eq!(verdict_of(&r, "work-13"), "keep");
    assert_eq!(verdict_of(&r, "work-fix-login"), "skip");
    // Nothing here needed the tracker.
    assert!(counting.calls().is_empty());
}

#[test]
fn stale_claims_are_released_and_running_issues_restored() {
    let env = TestEnv::new();
    let dir = &env.path().join("repo");
    let tree = Tree::new(dir);
    let t = env.local_tracker(dir);
    let live = LiveProc::spawn();
    let running_dead = t.create("running, dead holder", "", &["running"]).unwrap();
    let running_live = t.create("running, live holder", "", &["running"]).unwrap();
    let closed = t.create("closed, dead holder", "", &["running"]).unwrap();
    t.close(closed).unwrap();
    let idle = t
        .create("ready, corrupt holder", "", &["ready-for-agent"])
        .unwrap();
    let young = t
        .create("running, claim being made", "", &["running"])
        .unwrap();
    let old_empty = t
        .create("running, claim never finished", "", &["running"])
        .unwrap();
    let c_dead = tree.claim(running_dead, Pid::Dead(dead_pid()));
    let c_live = tree.claim(running_live, Pid::Live(live.pid()));
    let c_closed = tree.claim(closed, Pid::Reused(live.pid()));
    let c_idle = tree.claim(idle, Pid::Corrupt);
    let c_young = tree.claim(young, Pid::Missing);
    let c_old = tree.claim(old_empty, Pid::Missing);
    set_age(&c_old, tree.now, DAY);
    fs::create_dir_all(tree.layout.claims().join("not-a-number")).unwrap();

    let r = sweep(&tree, &t, false);
    for gone in [&c_dead, &c_closed, &c_idle, &c_old] {
        assert!(!gone.exists(), "{}", gone.display());
    }
    assert!(c_live.join("pid").exists());
    assert!(c_young.exists());
    assert!(tree.layout.claims().join("not-a-number").exists());
    assert_eq!(r.counts.claims_released, 4);
    assert_eq!(r.counts.restored, 2);
    for n in [running_dead, old_empty] {
        assert_eq!(labels(&t, n), vec!["ready-for-agent"]);
        assert_eq!(comments(&t, n), vec![RESTORE_COMMENT.to_string()]);
    }
    assert_eq!(labels(&t, running_live), vec!["running"]);
    assert_eq!(labels(&t, young), vec!["running"]);
    assert_eq!(labels(&t, closed), vec!["running"]);
    assert!(comments(&t, closed).is_empty());
    assert_eq!(labels(&t, idle), vec!["ready-for-agent"]);
}

#[test]
fn symlinks_are_never_walked_and_their_targets_survive() {
    let env = TestEnv::new();
    let dir = &env.path().join("repo");
    let outside = tempfile::tempdir().unwrap();
    let tree = Tree::new(dir);
    let t = env.local_tracker(dir);
    let closed = t.create("closed", "", &[]).unwrap();
    t.close(closed).unwrap();
    let castle = tree.layout.state().join("castle");
    fs::create_dir_all(castle.join(format!("{closed}-a1"))).unwrap();
    fs::write(castle.join("durable"), "keep me").unwrap();
    fs::write(outside.path().join("precious"), "mine").unwrap();
    let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    // A symlinked attempt dir, a symlinked worker dir, a link inside an attempt dir.
    std::os::unix::fs::symlink(&castle, w.join(format!("{closed}-a2"))).unwrap();
    fs::create_dir_all(tree.layout.worker_namespace("go-workers")).unwrap();
    std::os::unix::fs::symlink(
        &castle,
        tree.layout.worker_namespace("go-workers").join("wl"),
    )
    .unwrap();
    // A symlinked claims/ whose target holds a dead claim.
    let fake_claims = outside.path().join("claims");
    fs::create_dir_all(fake_claims.join("5")).unwrap();
    fs::write(fake_claims.join("5/pid"), format!("{}\n", dead_pid())).unwrap();
    std::os::unix::fs::symlink(&fake_claims, tree.layout.claims()).unwrap();
    let a1 = tree.attempt(&w, &format!("{closed}-a1"), None, MIN);
    std::os::unix::fs::symlink(outside.path(), a1.join("out")).unwrap();
    set_age(&a1, tree.now, MIN);
    let state_before = snapshot(&tree.layout.state());
    let outside_before = snapshot(outside.path());
    let r = sweep(&tree, &t, false);
    assert!(!a1.exists());
    // The worker dir still holds a link nobody judged: the shell is kept, the link with it.
    assert!(w.join(format!("{closed}-a2")).is_symlink());
    assert_eq!(r.shells_removed, 0);
    assert_eq!(verdict_of(&r, "workers/w1"), "keep");
    let mut state_after = snapshot(&tree.layout.state());
    // The tracker's own store is the only thing in .red/state that may change.
    state_after.retain(|p, _| !p.starts_with("tracker"));
    let mut state_before = state_before;
    state_before.retain(|p, _| !p.starts_with("tracker"));
    assert_eq!(state_after, state_before);
    assert_eq!(snapshot(outside.path()), outside_before);
    assert!(
        tree.layout
            .worker_namespace("go-workers")
            .join("wl")
            .is_symlink()
    );
    assert!(tree.layout.claims().is_symlink());
    assert!(fake_claims.join("5/pid").exists());
    assert_eq!(r.counts.claims_released, 0);
}

#[test]
fn a_symlinked_tmp_fails_the_sweep_and_deletes_nothing() {
    let env = TestEnv::new();
    let dir = &env.path().join("repo");
    let elsewhere = tempfile::tempdir().unwrap();
    let layout = afk_supervisor::layout::Layout::new(dir);
    fs::create_dir_all(layout.red()).unwrap();
    let w = elsewhere.path().join("workers/w1/5-a1");
    fs::create_dir_all(&w).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), layout.tmp()).unwrap();
    let t = env.local_tracker(dir);
    let err = orphans::run(&layout, &t, std::time::SystemTime::now(), false).unwrap_err();
    assert!(err.to_string().contains("symlink"), "{err}");
    assert!(w.exists());
}

/// Runs the sweep on another thread so a pid file that blocks its reader (a FIFO) fails the
/// test instead of hanging it.
fn sweep_with_watchdog(tree: &Tree, t: &LocalTracker) -> OrphanReport {
    let (layout, now, t) = (tree.layout.clone(), tree.now, t.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(orphans::run(&layout, &t, now, false));
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the sweep blocked on a pid file")
        .unwrap()
}

#[test]
fn pid_files_that_cannot_be_judged_keep_what_they_guard() {
    let Small {
        env: _env,
        tree,
        t,
        closed,
    } = Small::new();
    let running = t.create("running", "", &["running"]).unwrap();
    let st = state_json(Some(true));
    let mut guarded = Vec::new();
    for (id, pid) in [
        ("w-dir", Pid::NotAFile),
        ("w-fifo", Pid::Fifo),
        ("w-start", Pid::BadStart(dead_pid())),
    ] {
        let w = tree.worker("workers", id, pid);
        guarded.push(tree.attempt(&w, &format!("{closed}-a1"), Some(&st), 30 * DAY));
    }
    let legacy = tree.layout.tmp().join(format!("work-{closed}"));
    write_pid(&legacy.join("afk.pid"), Pid::Fifo);
    // A dead worker's attempt on a running issue whose claim cannot be judged: the holder
    // may be alive, so the issue is not restored and neither dir nor claim goes.
    let dead = tree.worker("workers", "w-dead", Pid::Dead(dead_pid()));
    let running_attempt = tree.attempt(&dead, &format!("{running}-a1"), Some(&st), MIN);
    let claim = tree.claim(running, Pid::NotAFile);

    let r = sweep_with_watchdog(&tree, &t);
    for p in guarded.iter().chain([&legacy, &running_attempt, &claim]) {
        assert!(p.exists(), "{} was removed", p.display());
    }
    for id in ["w-dir", "w-fifo", "w-start"] {
        let d = r
            .decisions
            .iter()
            .find(|d| d.subject.ends_with(id))
            .unwrap();
        assert_eq!(d.verdict, "keep", "{d:?}");
        assert!(d.reason.contains("cannot be judged"), "{d:?}");
    }
    assert_eq!(verdict_of(&r, &format!("work-{closed}")), "keep");
    assert_eq!(verdict_of(&r, &format!("w-dead/{running}-a1")), "keep");
    assert_eq!(verdict_of(&r, &format!("claims/{running}")), "keep");
    assert_eq!(labels(&t, running), vec!["running"]);
    assert!(comments(&t, running).is_empty());
    assert_eq!((r.counts.removed, r.counts.restored), (0, 0));
    assert_eq!(r.counts.claims_released, 0);
    assert_eq!(r.counts.kept, 6);
}

#[test]
#[cfg_attr(
    not(afk_can_bind_mount),
    ignore = "needs mount --bind (root); under CI=true it always runs"
)]
fn a_mount_inside_a_dead_attempt_is_kept_and_the_sweep_goes_on() {
    let Small {
        env,
        tree,
        t,
        closed,
    } = Small::new();
    let home = env.path().join("someones-home");
    fs::create_dir_all(&home).unwrap();
    fs::write(home.join("precious"), "mine").unwrap();
    let w = tree.worker("workers", "w1", Pid::Dead(dead_pid()));
    let st = state_json(Some(true));
    let sandboxed = tree.attempt(&w, &format!("{closed}-a1"), Some(&st), MIN);
    let plain = tree.attempt(&w, &format!("{closed}-a2"), Some(&st), MIN);
    let sandbox = sandboxed.join("sandbox");
    fs::create_dir_all(&sandbox).unwrap();
    let _mount = BindMount::new(&home, &sandbox);
    let r = sweep(&tree, &t, false);
    assert_eq!(fs::read_to_string(home.join("precious")).unwrap(), "mine");
    assert!(sandbox.join("precious").exists());
    assert!(!plain.exists());
    let d = r
        .decisions
        .iter()
        .find(|d| d.subject.ends_with(&format!("{closed}-a1")))
        .unwrap();
    assert_eq!(d.verdict, "keep", "{d:?}");
    assert!(d.reason.contains("another filesystem"), "{d:?}");
    assert_eq!((r.counts.removed, r.counts.kept), (1, 1));
    assert_eq!(verdict_of(&r, "workers/w1"), "skip");
}

#[test]
fn a_dead_shell_holding_files_nobody_judged_is_kept() {
    let Small {
        env: _env,
        tree,
        t,
        closed,
    } = Small::new();
    let st = state_json(Some(true));
    // A hand-off note beside a finished attempt: the attempt goes, the note and shell stay.
    let handoff = tree.worker("workers", "w-note", Pid::Dead(dead_pid()));
    let a = tree.attempt(&handoff, &format!("{closed}-a1"), Some(&st), MIN);
    fs::write(handoff.join("HANDOFF.md"), "read me").unwrap();
    // A symlink, even to something inside the lane, is not the shell's to drop.
    let linked = tree.worker("go-workers", "w-link", Pid::Dead(dead_pid()));
    std::os::unix::fs::symlink(tree.layout.tmp(), linked.join("elsewhere")).unwrap();
    // Only what a worker leaves itself, plus an empty dir: the shell goes.
    let bare = tree.worker("scout-workers", "w-bare", Pid::Dead(dead_pid()));
    fs::write(bare.join("worker.pid.tmp"), "1").unwrap();
    fs::write(bare.join("state.json.tmp"), "{").unwrap();
    fs::create_dir(bare.join("empty")).unwrap();

    let dry = sweep(&tree, &t, true);
    let r = sweep(&tree, &t, false);
    assert_eq!(dry.counts, r.counts);
    assert!(!a.exists());
    assert_eq!(
        fs::read_to_string(handoff.join("HANDOFF.md")).unwrap(),
        "read me"
    );
    assert!(linked.join("elsewhere").is_symlink());
    assert!(!bare.exists());
    for (suffix, names) in [("w-note", "HANDOFF.md"), ("w-link", "elsewhere (symlink)")] {
        let d = r
            .decisions
            .iter()
            .find(|d| d.subject.ends_with(suffix))
            .unwrap();
        assert_eq!(d.verdict, "keep", "{d:?}");
        assert!(d.reason.contains(names), "{d:?}");
    }
    assert_eq!(r.shells_removed, 1);
    // The attempt, and the empty dir that went with its shell; the two shells kept.
    assert_eq!((r.counts.removed, r.counts.kept), (2, 2));
}

#[test]
#[cfg_attr(
    not(afk_can_bind_mount),
    ignore = "needs mount --bind (root); under CI=true it always runs"
)]
fn the_lane_never_enters_a_mount_below_a_dir_it_removes() {
    let env = TestEnv::new();
    let tree = Tree::new(&env.path().join("repo"));
    let lane = DeleteRoot::open(&tree.layout).unwrap().unwrap();
    let home = env.path().join("home-elsewhere");
    fs::create_dir_all(home.join("src")).unwrap();
    fs::write(home.join("src/precious"), "mine").unwrap();
    let attempt = tree.layout.worker_namespace("workers").join("w1/5-a1");
    let sandbox = attempt.join("worktree/sandbox");
    fs::create_dir_all(&sandbox).unwrap();
    fs::write(attempt.join("worktree/file"), "x").unwrap();
    fs::write(attempt.join("afk.state.json"), "{}").unwrap();
    // Same filesystem as the lane (a bind mount), so only the mount id tells it apart.
    let _mount = BindMount::new(&home, &sandbox);
    let err = lane.remove(&attempt).unwrap_err();
    assert!(matches!(err, DeleteError::Kept { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("worktree/sandbox"), "{text}");
    assert!(text.contains("another filesystem"), "{text}");
    assert_eq!(
        fs::read_to_string(home.join("src/precious")).unwrap(),
        "mine"
    );
    // Everything else went; the mount point and its parents stay.
    assert!(!attempt.join("afk.state.json").exists());
    assert!(!attempt.join("worktree/file").exists());
    assert!(sandbox.join("src/precious").exists());
    // A path below the mount is refused outright.
    let below = sandbox.join("src");
    let err = lane.remove(&below).unwrap_err().to_string();
    assert!(err.contains("another filesystem"), "{err}");
    assert!(below.join("precious").exists());
}
