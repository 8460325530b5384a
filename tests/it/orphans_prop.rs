//! Property: whatever `.red/` looks like — attempt dirs, stray files, symlinks into
//! `.red/state/` and out of the repo, live, dead, reused and corrupt pids — orphan cleanup
//! and the attempt cap change nothing outside the registered lanes, not a byte of a live
//! worker's dir, no file or link in a dead worker's dir that no pass judged, and no
//! symlink target.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use afk_supervisor::sweeps::attempt_cap::{self, Caps};
use afk_supervisor::sweeps::orphans;
use afk_supervisor::tracker::LocalTracker;
use proptest::prelude::*;

use crate::support::TestEnv;
use crate::support::sweep_fixtures::*;

const NS: [&str; 3] = ["workers", "go-workers", "scout-workers"];

#[derive(Debug, Clone, Copy)]
enum PidKind {
    Live,
    Dead,
    Corrupt,
    Missing,
    Reused,
    /// A directory in the pid file's place: cannot be judged.
    NotAFile,
    /// A `.start` that is not a number: cannot be judged.
    BadStart,
}

#[derive(Debug, Clone, Copy)]
enum StateKind {
    None,
    Posted,
    Unposted,
    NoField,
    Corrupt,
    LiveOwner,
}

#[derive(Debug, Clone)]
enum Child {
    Attempt {
        issue: u64,
        n: u64,
        state: StateKind,
        age_h: u64,
    },
    Unnumbered {
        age_h: u64,
    },
    Stray,
    LinkToState,
    LinkOutside,
    LinkOutsideFile,
}

#[derive(Debug, Clone)]
struct WorkerSpec {
    ns: usize,
    pid: PidKind,
    children: Vec<Child>,
}

#[derive(Debug, Clone, Copy)]
enum IssueKind {
    Closed,
    Running,
    Human,
    Agent,
}

#[derive(Debug, Clone)]
struct Spec {
    issues: Vec<IssueKind>,
    workers: Vec<WorkerSpec>,
    ns_links: Vec<(usize, bool)>,
    claims: Vec<(u64, PidKind)>,
    legacy: Vec<(u64, PidKind)>,
}

fn pid_kind() -> impl Strategy<Value = PidKind> {
    prop_oneof![
        Just(PidKind::Live),
        Just(PidKind::Dead),
        Just(PidKind::Corrupt),
        Just(PidKind::Missing),
        Just(PidKind::Reused),
        Just(PidKind::NotAFile),
        Just(PidKind::BadStart),
    ]
}

fn state_kind() -> impl Strategy<Value = StateKind> {
    prop_oneof![
        Just(StateKind::None),
        Just(StateKind::Posted),
        Just(StateKind::Unposted),
        Just(StateKind::NoField),
        Just(StateKind::Corrupt),
        Just(StateKind::LiveOwner),
    ]
}

fn child() -> impl Strategy<Value = Child> {
    prop_oneof![
        6 => (1..=7u64, 1..=7u64, state_kind(), 0..(24 * 20u64))
            .prop_map(|(issue, n, state, age_h)| Child::Attempt { issue, n, state, age_h }),
        1 => (0..48u64).prop_map(|age_h| Child::Unnumbered { age_h }),
        1 => Just(Child::Stray),
        1 => Just(Child::LinkToState),
        1 => Just(Child::LinkOutside),
        1 => Just(Child::LinkOutsideFile),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    let issue = prop_oneof![
        Just(IssueKind::Closed),
        Just(IssueKind::Running),
        Just(IssueKind::Human),
        Just(IssueKind::Agent),
    ];
    let worker = (0..3usize, pid_kind(), prop::collection::vec(child(), 0..8))
        .prop_map(|(ns, pid, children)| WorkerSpec { ns, pid, children });
    (
        prop::collection::vec(issue, 6),
        prop::collection::vec(worker, 0..6),
        prop::collection::vec((0..3usize, any::<bool>()), 0..3),
        prop::collection::vec((1..=7u64, pid_kind()), 0..4),
        prop::collection::vec((1..=9u64, pid_kind()), 0..3),
    )
        .prop_map(|(issues, workers, ns_links, claims, legacy)| Spec {
            issues,
            workers,
            ns_links,
            claims,
            legacy,
        })
}

fn pid_of(kind: PidKind, live: &LiveProc) -> Pid {
    match kind {
        PidKind::Live => Pid::Live(live.pid()),
        PidKind::Dead => Pid::Dead(shared_dead_pid()),
        PidKind::Corrupt => Pid::Corrupt,
        PidKind::Missing => Pid::Missing,
        PidKind::Reused => Pid::Reused(live.pid()),
        PidKind::NotAFile => Pid::NotAFile,
        PidKind::BadStart => Pid::BadStart(shared_dead_pid()),
    }
}

/// Whether the sweeps must leave everything the pid file guards untouched: it is live, or
/// it cannot be judged.
fn guarded(kind: PidKind) -> bool {
    matches!(kind, PidKind::Live | PidKind::NotAFile | PidKind::BadStart)
}

/// The world one case runs in: the repo, a dir outside it, and the tracker's own store
/// (kept outside the repo so every byte of the repo is accounted for).
struct World {
    _repo: tempfile::TempDir,
    outside: tempfile::TempDir,
    /// Holds the tracker's store, with the isolated HOME and git config its git runs with.
    _store: TestEnv,
    tree: Tree,
    tracker: LocalTracker,
    /// Paths (relative to the repo) below which a sweep may change things.
    mutable: Vec<PathBuf>,
    /// Paths inside `mutable` that must survive anyway: files and links in a dead worker's
    /// dir that no pass judges.
    pinned: Vec<PathBuf>,
}

fn build(spec: &Spec, live: &LiveProc) -> World {
    let repo = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let store = TestEnv::new();
    let tree = Tree::new(repo.path());
    let layout = &tree.layout;
    let tracker = store.local_tracker(store.path());
    for (i, kind) in spec.issues.iter().enumerate() {
        let l: &[&str] = match kind {
            IssueKind::Closed | IssueKind::Running => &["running"],
            IssueKind::Human => &["ready-for-human"],
            IssueKind::Agent => &["ready-for-agent"],
        };
        let n = tracker.create(&format!("issue {i}"), "", l).unwrap();
        if matches!(kind, IssueKind::Closed) {
            tracker.close(n).unwrap();
        }
    }
    // Durable state and things outside the repo that links point at.
    let castle = layout.state().join("castle");
    fs::create_dir_all(castle.join("3-a1")).unwrap();
    fs::write(castle.join("3-a1/afk.state.json"), "{}").unwrap();
    fs::write(castle.join("durable.md"), "durable").unwrap();
    fs::create_dir_all(layout.red().join("researches")).unwrap();
    fs::write(layout.red().join("researches/r.md"), "research").unwrap();
    fs::create_dir_all(outside.path().join("tree")).unwrap();
    fs::write(outside.path().join("tree/precious"), "mine").unwrap();
    fs::write(outside.path().join("file"), "outside file").unwrap();
    fs::create_dir_all(layout.tmp().join("other")).unwrap();
    fs::write(layout.tmp().join("other/keep"), "not a lane").unwrap();
    fs::create_dir_all(layout.tmp().join("work-manual")).unwrap();
    fs::write(
        layout.tmp().join("work-manual/afk.pid"),
        format!("{}", shared_dead_pid()),
    )
    .unwrap();

    let mut mutable = Vec::new();
    let mut pinned = Vec::new();
    let rel = |p: &Path| p.strip_prefix(repo.path()).unwrap().to_path_buf();
    for (i, w) in spec.workers.iter().enumerate() {
        let dir = tree.worker(NS[w.ns], &format!("w{i}"), pid_of(w.pid, live));
        if !guarded(w.pid) {
            mutable.push(rel(&dir));
        }
        let mut names = HashSet::new();
        for (j, c) in w.children.iter().enumerate() {
            match c {
                Child::Attempt {
                    issue,
                    n,
                    state,
                    age_h,
                } => {
                    let name = format!("{issue}-a{n}");
                    if !names.insert(name.clone()) {
                        continue;
                    }
                    let json = match state {
                        StateKind::None => None,
                        StateKind::Posted => Some(state_json(Some(true))),
                        StateKind::Unposted => Some(state_json(Some(false))),
                        StateKind::NoField => Some(state_json(None)),
                        StateKind::Corrupt => Some("{\"pid\":".to_string()),
                        StateKind::LiveOwner => Some(live_state_json(live.pid())),
                    };
                    tree.attempt(
                        &dir,
                        &name,
                        json.as_deref(),
                        Duration::from_secs(age_h * 3600),
                    );
                }
                Child::Unnumbered { age_h } => {
                    let d = dir.join(format!("scratch-{j}"));
                    fs::create_dir_all(d.join("x")).unwrap();
                    fs::write(d.join("x/f"), "scratch").unwrap();
                    set_age(&d, tree.now, Duration::from_secs(age_h * 3600));
                }
                Child::Stray => {
                    let p = dir.join(format!("stray-{j}.log"));
                    fs::write(&p, "log").unwrap();
                    pinned.push(rel(&p));
                }
                Child::LinkToState => {
                    let p = dir.join(format!("{}-a9", j + 1));
                    symlink(&castle, &p).unwrap();
                    pinned.push(rel(&p));
                }
                Child::LinkOutside => {
                    let p = dir.join(format!("link-{j}"));
                    symlink(outside.path().join("tree"), &p).unwrap();
                    pinned.push(rel(&p));
                }
                Child::LinkOutsideFile => {
                    let p = dir.join(format!("file-link-{j}"));
                    symlink(outside.path().join("file"), &p).unwrap();
                    pinned.push(rel(&p));
                }
            }
        }
        if matches!(w.pid, PidKind::Missing) && i % 2 == 0 {
            // Half the pid-less workers are old enough to count as dead.
            set_age(&dir, tree.now, Duration::from_secs(3600));
        }
    }
    for (k, (ns, to_state)) in spec.ns_links.iter().enumerate() {
        let nsdir = layout.worker_namespace(NS[*ns]);
        fs::create_dir_all(&nsdir).unwrap();
        let target = if *to_state {
            castle.clone()
        } else {
            outside.path().join("tree")
        };
        symlink(target, nsdir.join(format!("linked-{k}"))).unwrap();
    }
    for (n, kind) in &spec.claims {
        let c = tree.claim(*n, pid_of(*kind, live));
        if !guarded(*kind) {
            mutable.push(rel(&c));
        }
    }
    for (n, kind) in &spec.legacy {
        let d = layout.tmp().join(format!("work-{n}"));
        fs::create_dir_all(d.join("src")).unwrap();
        fs::write(d.join("src/main.rs"), "fn main() {}").unwrap();
        write_pid(&d.join("afk.pid"), pid_of(*kind, live));
        if matches!(kind, PidKind::Dead | PidKind::Reused) {
            mutable.push(rel(&d));
        }
    }
    World {
        _repo: repo,
        outside,
        _store: store,
        tree,
        tracker,
        mutable,
        pinned,
    }
}

/// Differences between two snapshots outside the mutable regions.
fn changed_outside(
    before: &BTreeMap<PathBuf, Node>,
    after: &BTreeMap<PathBuf, Node>,
    mutable: &[PathBuf],
    pinned: &[PathBuf],
) -> Vec<PathBuf> {
    let frozen = |p: &PathBuf| pinned.contains(p) || !mutable.iter().any(|m| p.starts_with(m));
    // The attempt ledger is durable and append-only: a restore adds its `worker-died`
    // record there, and nothing in it may ever go.
    let ledger = |p: &PathBuf| p.starts_with(".red/state/attempts");
    let mut out: Vec<PathBuf> = before
        .iter()
        .filter(|(p, n)| {
            frozen(p) && after.get(*p) != Some(n) && !(ledger(p) && after.contains_key(*p))
        })
        .map(|(p, _)| p.clone())
        .collect();
    out.extend(
        after
            .keys()
            .filter(|p| frozen(p) && !before.contains_key(*p) && !ledger(p))
            .cloned(),
    );
    out
}

fn check(
    world: &World,
    before: &BTreeMap<PathBuf, Node>,
    outside: &BTreeMap<PathBuf, Node>,
    what: &str,
) {
    let after = snapshot(world.tree.layout.repo());
    let diff = changed_outside(before, &after, &world.mutable, &world.pinned);
    assert!(diff.is_empty(), "{what} changed frozen paths: {diff:?}");
    assert_eq!(
        &snapshot(world.outside.path()),
        outside,
        "{what} touched a link target outside the repo"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn sweeps_touch_only_dead_things_inside_the_lanes(spec in spec()) {
        let live = LiveProc::spawn();
        let world = build(&spec, &live);
        let before = snapshot(world.tree.layout.repo());
        let outside = snapshot(world.outside.path());

        let dry = orphans::run(&world.tree.layout, &world.tracker, world.tree.now, true).unwrap();
        prop_assert_eq!(&snapshot(world.tree.layout.repo()), &before, "dry run changed the tree");

        let real = orphans::run(&world.tree.layout, &world.tracker, world.tree.now, false).unwrap();
        check(&world, &before, &outside, "orphan cleanup");
        prop_assert_eq!(dry.counts, real.counts);

        let caps = Caps { max_age: Duration::from_secs(14 * 86_400), max_count: 2 };
        attempt_cap::run(&world.tree.layout, caps, world.tree.now, false, &HashSet::new()).unwrap();
        check(&world, &before, &outside, "attempt cap");
        drop(live);
    }
}
