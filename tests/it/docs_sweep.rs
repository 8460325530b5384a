//! The docs sweep against real git: a bare `origin`, a primary clone, the real `local`
//! tracker for landings (a real fast-forward of `main` on the bare origin) and the fake
//! `gh` for failures of the PR lane. Every case checks that the primary checkout is
//! byte-for-byte the same afterwards (see [`Fx::sweep`]).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use afk_supervisor::config::Config;
use afk_supervisor::git::Git;
use afk_supervisor::layout::Layout;
use afk_supervisor::sweeps::docs::DocsOutcome;
use afk_supervisor::sweeps::docs::{self, DocsReport};
use afk_supervisor::sweeps::suite::{self, BootError};
use afk_supervisor::sweeps::{SweepCtx, SweepName};
use afk_supervisor::tracker::local::PrState;
use afk_supervisor::tracker::{LocalTracker, Tracker};

use crate::support::fake_gh::FakeGh;
use crate::support::{Repo, TestEnv, fleet, git_trace_commands, text};
use afk_supervisor::event_log::Kind;

struct Fx {
    env: TestEnv,
    repo: Repo,
    layout: Layout,
    config: Config,
    git: Git,
}

impl Fx {
    fn new() -> Self {
        let env = TestEnv::new();
        let repo = env.repo_with_origin();
        let layout = Layout::new(&repo.path);
        let git = env.lib_git(&repo.path);
        Fx {
            env,
            repo,
            layout,
            config: Config::default(),
            git,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        rel.split('/')
            .fold(self.repo.path.clone(), |p, c| p.join(c))
    }

    fn write(&self, rel: &str, content: &str) {
        self.env.write(&self.repo.path, rel, content);
    }

    fn git(&self, args: &[&str]) -> String {
        self.env.git(&self.repo.path, args)
    }

    /// Writes, force-adds (the repo may ignore `.red/`), commits and pushes to origin.
    fn publish(&self, files: &[(&str, &str)]) {
        for (rel, content) in files {
            self.write(rel, content);
            self.git(&["add", "-f", "--", rel]);
        }
        self.git(&["commit", "-q", "-m", "publish"]);
        self.git(&["push", "-q", "origin", "main"]);
    }

    /// Ignores all of `.red/` from the repo's own tracked `.gitignore`, published.
    fn ignore_red(&self) {
        self.write(".gitignore", ".red/\n");
        self.git(&["add", ".gitignore"]);
        self.git(&["commit", "-q", "-m", "ignore .red"]);
        self.git(&["push", "-q", "origin", "main"]);
    }

    /// Another clone that changes origin behind the primary's back.
    fn upstream_commit(&self, files: &[(&str, Option<&str>)]) {
        let other = self.env.path().join("other");
        if !other.exists() {
            self.env.git(
                self.env.path(),
                &[
                    "clone",
                    "-q",
                    self.repo.origin.to_str().unwrap(),
                    other.to_str().unwrap(),
                ],
            );
        }
        self.env.git(&other, &["pull", "-q", "origin", "main"]);
        for (rel, content) in files {
            let p = rel.split('/').fold(other.clone(), |p, c| p.join(c));
            match content {
                Some(c) => {
                    fs::create_dir_all(p.parent().unwrap()).unwrap();
                    fs::write(&p, c).unwrap();
                    self.env.git(&other, &["add", "-f", "--", rel]);
                }
                None => {
                    self.env.git(&other, &["rm", "-q", "--", rel]);
                }
            }
        }
        self.env.git(&other, &["commit", "-q", "-m", "upstream"]);
        self.env.git(&other, &["push", "-q", "origin", "main"]);
    }

    /// `main:<rel>` on the bare origin, `None` when absent.
    fn on_origin(&self, rel: &str) -> Option<String> {
        let out = self.env.git_output(
            &self.repo.origin,
            &["cat-file", "-p", &format!("main:{rel}")],
        );
        out.status
            .success()
            .then(|| String::from_utf8(out.stdout).unwrap())
    }

    fn origin_main(&self) -> String {
        self.env
            .git(&self.repo.origin, &["rev-parse", "main"])
            .trim()
            .to_string()
    }

    /// A `pre-receive` hook on the bare origin refusing every update of `main`: a landing's
    /// branch push goes through, its fast-forward merge is refused.
    fn refuse_pushes_to_main(&self) {
        let hook = self.repo.origin.join("hooks").join("pre-receive");
        fs::create_dir_all(hook.parent().unwrap()).unwrap();
        fs::write(
            &hook,
            "#!/bin/sh\nwhile read old new ref; do\n  if [ \"$ref\" = refs/heads/main ]; then\n    \
             echo 'main is protected' >&2\n    exit 1\n  fi\ndone\nexit 0\n",
        )
        .unwrap();
        fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }

    /// Every `afk-docs/*` branch on the bare origin, one full refname a line.
    fn lane_branches_on_origin(&self) -> String {
        self.env.git(
            &self.repo.origin,
            &["for-each-ref", "--format=%(refname)", "refs/heads/afk-docs"],
        )
    }

    /// The real local tracker, its store outside the checkout so that the store's own
    /// files (a PR record) do not count as a change to the primary work tree.
    fn local_tracker(&self) -> LocalTracker {
        LocalTracker::new(
            &Layout::new(self.env.path().join("tracker-home")),
            self.git.clone(),
        )
    }

    fn ctx<'a>(&'a self, tracker: &'a dyn Tracker, dry_run: bool) -> SweepCtx<'a> {
        SweepCtx::new(&self.layout, &self.config, tracker, &self.git, dry_run)
    }

    /// Runs the sweep between two snapshots of the primary checkout and checks that they
    /// are identical and that the lane left nothing behind.
    fn sweep_with(&self, tracker: &dyn Tracker, dry_run: bool) -> DocsReport {
        let before = Primary::take(self);
        let report = docs::run(&self.ctx(tracker, dry_run)).expect("docs sweep runs");
        self.assert_untouched(&before);
        report
    }

    fn sweep(&self) -> DocsReport {
        self.sweep_with(&self.local_tracker(), false)
    }

    fn suite(&self, tracker: &dyn Tracker) -> Result<suite::BootReport, BootError> {
        let before = Primary::take(self);
        let r = suite::run_suite(&self.ctx(tracker, false), &[SweepName::DocsSweep]).into_result();
        self.assert_untouched(&before);
        r
    }

    fn assert_untouched(&self, before: &Primary) {
        let after = Primary::take(self);
        assert_eq!(before.head, after.head, "HEAD changed");
        assert_eq!(before.branch, after.branch, "current branch changed");
        assert_eq!(before.index, after.index, "index (ls-files -s) changed");
        assert_eq!(before.stash, after.stash, "stash list changed");
        assert_eq!(
            String::from_utf8_lossy(&before.status),
            String::from_utf8_lossy(&after.status),
            "work-tree status changed"
        );
        assert_eq!(before.files, after.files, "work-tree files changed");
        // Nothing of the lane survives: no worktree, no local branch, no tracking ref.
        assert!(!self.layout.docs_sweep().exists(), "lane dir left behind");
        let worktrees = self.git(&["worktree", "list", "--porcelain"]);
        assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
        assert_eq!(before.lane_refs, after.lane_refs, "lane refs left behind");
    }
}

/// What must not change in the primary checkout, as raw bytes.
#[derive(Debug, PartialEq, Eq)]
struct Primary {
    head: Vec<u8>,
    branch: Vec<u8>,
    index: Vec<u8>,
    stash: Vec<u8>,
    status: Vec<u8>,
    /// Every file and symlink of the work tree, with content or target; outside `.git`,
    /// the sweep's own lane (a stale lane there is the sweep's to remove, and its absence
    /// afterwards is checked on its own) and the local tracker's store (the binary keeps
    /// it in the repo, and a PR record there is the tracker's doing).
    files: BTreeMap<PathBuf, Vec<u8>>,
    /// Local `afk-docs/*` branches and their tracking refs: a run adds none for good.
    lane_refs: Vec<u8>,
}

impl Primary {
    fn take(fx: &Fx) -> Self {
        let raw = |args: &[&str]| fx.env.git_output(&fx.repo.path, args).stdout;
        let mut files = BTreeMap::new();
        let skip = [fx.layout.docs_sweep(), fx.layout.tracker_dir()];
        walk(&fx.repo.path, &fx.repo.path, &skip, &mut files);
        Primary {
            head: raw(&["rev-parse", "HEAD"]),
            branch: raw(&["symbolic-ref", "-q", "HEAD"]),
            index: raw(&["ls-files", "-s"]),
            stash: raw(&["stash", "list"]),
            status: raw(&["status", "--porcelain=v1", "-z", "--ignored"]),
            files,
            lane_refs: raw(&[
                "for-each-ref",
                "--format=%(refname)",
                "refs/heads/afk-docs",
                "refs/remotes/origin/afk-docs",
            ]),
        }
    }
}

fn walk(root: &Path, dir: &Path, skip: &[PathBuf], out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let rel = p.strip_prefix(root).unwrap().to_path_buf();
        if rel == Path::new(".git") || skip.contains(&p) {
            continue;
        }
        let m = fs::symlink_metadata(&p).unwrap();
        if m.file_type().is_symlink() {
            let t = fs::read_link(&p).unwrap();
            out.insert(rel, t.into_os_string().into_encoded_bytes());
        } else if m.is_dir() {
            walk(root, &p, skip, out);
        } else {
            out.insert(rel, fs::read(&p).unwrap());
        }
    }
}

fn verdicts(r: &DocsReport) -> Vec<(String, String, String)> {
    r.decisions
        .iter()
        .map(|d| {
            (
                d.subject.clone(),
                d.state.clone().unwrap_or_default(),
                d.verdict.to_string(),
            )
        })
        .collect()
}

fn row(path: &str, signal: &str, verdict: &str) -> (String, String, String) {
    (path.into(), signal.into(), verdict.into())
}

fn assert_outcome(r: &DocsReport, outcome: DocsOutcome, files: usize) {
    assert_eq!(
        (r.counts.outcome, r.counts.files),
        (outcome, files),
        "{r:#?}"
    );
}

// ---------------------------------------------------------------- clean

#[test]
fn nothing_stranded_is_clean() {
    let f = Fx::new();
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Clean, 0);
    assert!(r.decisions.is_empty());

    // Published docs, unchanged locally: still clean, origin untouched.
    f.publish(&[(".red/adr/1.md", "one\n"), (".red/CONTEXT.md", "ctx\n")]);
    let head = f.origin_main();
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Clean, 0);
    assert_eq!(f.origin_main(), head);
}

// ---------------------------------------------------------------- each signal alone

#[test]
fn a_modified_tracked_doc_lands() {
    let f = Fx::new();
    f.publish(&[(".red/CONTEXT.md", "old\n")]);
    f.write(".red/CONTEXT.md", "new\n");
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Land, 1);
    assert_eq!(
        verdicts(&r),
        vec![row(".red/CONTEXT.md", "modified", "land")]
    );
    assert_eq!(f.on_origin(".red/CONTEXT.md").as_deref(), Some("new\n"));
}

#[test]
fn a_deleted_tracked_doc_is_deleted_on_the_base() {
    let f = Fx::new();
    f.publish(&[(".red/adr/1.md", "one\n"), (".red/adr/2.md", "two\n")]);
    fs::remove_file(f.path(".red/adr/2.md")).unwrap();
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Land, 1);
    assert_eq!(verdicts(&r), vec![row(".red/adr/2.md", "deleted", "land")]);
    assert_eq!(f.on_origin(".red/adr/2.md"), None);
    assert_eq!(f.on_origin(".red/adr/1.md").as_deref(), Some("one\n"));
}

#[test]
fn an_untracked_doc_lands() {
    let f = Fx::new();
    f.write(".red/adr/0001-use-git.md", "# Use git\n");
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Land, 1);
    assert_eq!(
        verdicts(&r),
        vec![row(".red/adr/0001-use-git.md", "untracked", "land")]
    );
    assert_eq!(
        f.on_origin(".red/adr/0001-use-git.md").as_deref(),
        Some("# Use git\n")
    );
}

#[test]
fn ignored_docs_land_when_the_repo_ignores_all_of_red() {
    let f = Fx::new();
    f.ignore_red();
    // Precedent for both classes, tracked despite the ignore rule.
    f.publish(&[(".red/adr/0000.md", "a\n"), (".red/CONTEXT.md", "c\n")]);
    f.write(".red/adr/deep/er/0002.md", "nested adr\n");
    f.write(".red/contexts/billing/CONTEXT.md", "billing\n");
    f.write(".red/CONTEXT-MAP.md", "map\n");
    // `git status` reports the ignored `.red/` as a whole unless asked for files.
    let coarse = f.git(&["status", "--porcelain", "--ignored=matching"]);
    assert!(coarse.contains("!! .red/"), "{coarse}");

    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Land, 3);
    assert_eq!(
        verdicts(&r),
        vec![
            row(".red/CONTEXT-MAP.md", "ignored", "land"),
            row(".red/adr/deep/er/0002.md", "ignored", "land"),
            row(".red/contexts/billing/CONTEXT.md", "ignored", "land"),
        ]
    );
    assert_eq!(
        f.on_origin(".red/adr/deep/er/0002.md").as_deref(),
        Some("nested adr\n")
    );
    assert_eq!(
        f.on_origin(".red/contexts/billing/CONTEXT.md").as_deref(),
        Some("billing\n")
    );
    assert_eq!(f.on_origin(".red/CONTEXT-MAP.md").as_deref(), Some("map\n"));
}

#[test]
fn a_doc_changed_by_a_commit_ahead_lands() {
    let f = Fx::new();
    f.publish(&[(".red/adr/1.md", "one\n")]);
    f.write(".red/adr/1.md", "one, amended\n");
    f.write(".red/adr/2.md", "two\n");
    f.git(&["add", "."]);
    f.git(&["commit", "-q", "-m", "local docs, never pushed"]);
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Land, 2);
    assert_eq!(
        verdicts(&r),
        vec![
            row(".red/adr/1.md", "ahead", "land"),
            row(".red/adr/2.md", "ahead", "land")
        ]
    );
    assert_eq!(
        f.on_origin(".red/adr/1.md").as_deref(),
        Some("one, amended\n")
    );
    assert_eq!(f.on_origin(".red/adr/2.md").as_deref(), Some("two\n"));
    // The primary's own commit is still only local: the sweep landed copies, not it.
    let local = f.git(&["rev-parse", "HEAD"]);
    let contains = f
        .env
        .git_output(&f.repo.origin, &["cat-file", "-e", local.trim()]);
    assert!(
        !contains.status.success(),
        "the primary's commit must not be pushed"
    );
}

#[test]
fn a_renamed_doc_lands_as_an_add_and_a_delete() {
    let f = Fx::new();
    f.publish(&[(".red/adr/a.md", "same text\n")]);
    f.git(&["mv", ".red/adr/a.md", ".red/adr/b.md"]);
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Land, 2);
    assert_eq!(
        verdicts(&r),
        vec![
            row(".red/adr/a.md", "deleted", "land"),
            row(".red/adr/b.md", "renamed", "land")
        ]
    );
    assert_eq!(f.on_origin(".red/adr/a.md"), None);
    assert_eq!(f.on_origin(".red/adr/b.md").as_deref(), Some("same text\n"));
}

#[test]
fn names_with_spaces_and_glob_characters_are_taken_literally() {
    let f = Fx::new();
    f.publish(&[
        (".red/adr/star*.md", "star\n"),
        (".red/adr/starfish.md", "fish\n"),
    ]);
    fs::remove_file(f.path(".red/adr/star*.md")).unwrap();
    f.write(".red/adr/draft [1] ?.md", "draft\n");
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Land, 2);
    assert_eq!(f.on_origin(".red/adr/star*.md"), None);
    assert_eq!(
        f.on_origin(".red/adr/starfish.md").as_deref(),
        Some("fish\n")
    );
    assert_eq!(
        f.on_origin(".red/adr/draft [1] ?.md").as_deref(),
        Some("draft\n")
    );
}

// ---------------------------------------------------------------- together

#[test]
fn all_signals_land_in_one_docs_commit_checked_on_origin() {
    let f = Fx::new();
    f.publish(&[
        (".red/CONTEXT.md", "glossary v1\n"),
        (".red/adr/0001-keep.md", "keep\n"),
        (".red/adr/0002-drop.md", "drop me\n"),
        (".red/adr/0003-ahead.md", "v1\n"),
        ("src/code.rs", "fn main() {}\n"),
    ]);
    let before = f.origin_main();
    // ahead
    f.write(".red/adr/0003-ahead.md", "v2 committed\n");
    f.git(&["commit", "-q", "-am", "ahead"]);
    // changed, deleted, added (untracked), ignored (info/exclude), plus non-docs
    f.write(".red/CONTEXT.md", "glossary v2\n");
    fs::remove_file(f.path(".red/adr/0002-drop.md")).unwrap();
    f.write(".red/adr/0004-new.md", "brand new\n");
    fs::write(f.repo.path.join(".git/info/exclude"), ".red/contexts/\n").unwrap();
    f.write(".red/contexts/ordering.md", "ordering\n");
    f.write("src/code.rs", "fn main() { changed() }\n");
    f.write("notes.txt", "not a doc\n");
    // A staged change and a stash exist too, and must survive untouched.
    f.write("staged.txt", "staged\n");
    f.git(&["add", "staged.txt"]);
    f.write("stashed.txt", "x\n");
    f.git(&["stash", "push", "-q", "-u", "--", "stashed.txt"]);

    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Land, 5);
    assert_eq!(
        verdicts(&r),
        vec![
            row(".red/CONTEXT.md", "modified", "land"),
            row(".red/adr/0002-drop.md", "deleted", "land"),
            row(".red/adr/0003-ahead.md", "ahead", "land"),
            row(".red/adr/0004-new.md", "untracked", "land"),
            row(".red/contexts/ordering.md", "ignored", "land"),
        ]
    );

    // Exactly one commit on top of the old base, a `docs:` commit with exactly these paths.
    let after = f.origin_main();
    let o = &f.repo.origin;
    assert_eq!(f.env.git(o, &["rev-parse", "main~1"]).trim(), before);
    let msg = f.env.git(o, &["log", "-1", "--format=%B", "main"]);
    assert!(
        msg.starts_with("docs: land 5 stranded .red docs\n"),
        "{msg}"
    );
    let changed = f.env.git(o, &["diff", "--name-status", &before, &after]);
    assert_eq!(
        changed,
        "M\t.red/CONTEXT.md\nD\t.red/adr/0002-drop.md\nM\t.red/adr/0003-ahead.md\nA\t.red/adr/0004-new.md\nA\t.red/contexts/ordering.md\n"
    );
    assert_eq!(
        f.on_origin(".red/CONTEXT.md").as_deref(),
        Some("glossary v2\n")
    );
    assert_eq!(
        f.on_origin(".red/adr/0003-ahead.md").as_deref(),
        Some("v2 committed\n")
    );
    assert_eq!(
        f.on_origin(".red/adr/0004-new.md").as_deref(),
        Some("brand new\n")
    );
    assert_eq!(f.on_origin(".red/adr/0002-drop.md"), None);
    assert_eq!(
        f.on_origin("src/code.rs").as_deref(),
        Some("fn main() {}\n")
    );
    assert_eq!(f.on_origin("notes.txt"), None);
    let landed = r.landed.expect("landed");
    assert!(
        landed.branch.starts_with("afk-docs/sweep-"),
        "{}",
        landed.branch
    );
    assert_eq!(landed.commit, after);
    // The local tracker deleted the lane branch on origin after merging.
    let heads = f
        .env
        .git(o, &["for-each-ref", "--format=%(refname)", "refs/heads/"]);
    assert_eq!(heads, "refs/heads/main\n");
    // The local base ref was fetched again.
    assert_eq!(f.git(&["rev-parse", "origin/main"]).trim(), after);

    // Idempotent: the next boot finds everything visible on the base.
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Clean, 0);
    assert_eq!(f.origin_main(), after);
}

#[test]
fn the_suite_reports_the_landing_in_its_summary() {
    let f = Fx::new();
    f.write(".red/adr/1.md", "one\n");
    f.write(".red/CONTEXT.md", "ctx\n");
    let t = f.local_tracker();
    let report = f.suite(&t).expect("suite completes");
    assert!(
        report.summary().contains("| docs-sweep land files=2 |"),
        "{}",
        report.summary()
    );
    assert_eq!(report.decisions.len(), 2);
    let report = f.suite(&t).expect("suite completes");
    assert!(report.summary().contains("| docs-sweep clean files=0 |"));
}

// ---------------------------------------------------------------- excluded lanes

#[test]
fn excluded_lanes_are_ignored() {
    let f = Fx::new();
    f.publish(&[
        (".red/wiki/adr/1.md", "wiki\n"),
        (".red/memory/CONTEXT.md", "m\n"),
    ]);
    for lane in ["tmp", "wiki", "memory", "brain", "state"] {
        f.write(&format!(".red/{lane}/CONTEXT.md"), "lane\n");
        f.write(&format!(".red/{lane}/adr/9.md"), "lane\n");
        f.write(&format!(".red/{lane}/contexts/x.md"), "lane\n");
    }
    f.write(".red/brain/adr/ahead.md", "ahead\n");
    f.git(&["add", "-f", ".red/brain/adr/ahead.md"]);
    f.git(&["commit", "-q", "-m", "ahead in an excluded lane"]);
    fs::write(
        f.repo.path.join(".git/info/exclude"),
        ".red/tmp/\n.red/state/\n",
    )
    .unwrap();
    // Look-alikes outside the doc roots.
    f.write(".red/adrs/1.md", "no\n");
    f.write(".red/context.md", "no\n");
    f.write("docs/.red/adr/1.md", "no\n");
    let head = f.origin_main();
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Clean, 0);
    assert!(r.decisions.is_empty(), "{:?}", r.decisions);
    assert_eq!(f.origin_main(), head);
}

// ---------------------------------------------------------------- halts

#[test]
fn an_unreachable_origin_halts_with_the_local_paths() {
    let f = Fx::new();
    f.write(".red/adr/1.md", "one\n");
    f.write(".red/CONTEXT.md", "ctx\n");
    let gone = f.env.path().join("nowhere.git");
    f.git(&["remote", "set-url", "origin", gone.to_str().unwrap()]);
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Halt, 2);
    let h = r.halt.as_ref().expect("halt");
    assert_eq!(
        h.message(),
        "Docs Sweep halted (origin-unreachable): .red/CONTEXT.md, .red/adr/1.md"
    );
    assert!(r.decisions.iter().all(|d| d.verdict == "halt"));
    assert!(
        r.decisions[0].reason.contains("could not be fetched"),
        "{}",
        r.decisions[0].reason
    );

    let t = f.local_tracker();
    assert_eq!(
        f.suite(&t).unwrap_err(),
        BootError::Halted(
            "Docs Sweep halted (origin-unreachable): .red/CONTEXT.md, .red/adr/1.md".into()
        )
    );
}

#[test]
fn a_repo_without_any_origin_is_clean_not_halted() {
    let f = Fx::new();
    f.write(".red/adr/1.md", "one\n");
    f.git(&["remote", "remove", "origin"]);
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Clean, 0);
    assert!(r.halt.is_none());
    assert_eq!(r.decisions.len(), 1);
    assert_eq!(r.decisions[0].verdict, "skip");
    assert!(r.decisions[0].reason.contains("no `origin` remote"));
    let t = f.local_tracker();
    assert_eq!(f.suite(&t).unwrap().docs.outcome, DocsOutcome::Clean);
}

#[test]
fn an_unreachable_origin_halts_even_with_nothing_local() {
    let f = Fx::new();
    f.git(&["remote", "set-url", "origin", "/nonexistent/origin.git"]);
    let r = f.sweep();
    assert_eq!(
        r.halt.unwrap().message(),
        "Docs Sweep halted (origin-unreachable): (none)"
    );
}

#[test]
fn an_ignored_doc_without_precedent_halts() {
    let f = Fx::new();
    f.ignore_red();
    f.write(".red/adr/0001.md", "first ADR\n");
    f.write(".red/adr/0002.md", "second ADR\n");
    let head = f.origin_main();
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Halt, 2);
    assert_eq!(
        r.halt.as_ref().unwrap().message(),
        "Docs Sweep halted (zero-precedent): .red/adr/0001.md, .red/adr/0002.md"
    );
    assert_eq!(
        verdicts(&r),
        vec![
            row(".red/adr/0001.md", "ignored", "halt"),
            row(".red/adr/0002.md", "ignored", "halt"),
        ]
    );
    assert_eq!(f.origin_main(), head);
    let t = f.local_tracker();
    assert!(matches!(f.suite(&t), Err(BootError::Halted(m)) if m.contains("zero-precedent")));
}

#[test]
fn precedent_is_per_class() {
    let f = Fx::new();
    f.ignore_red();
    f.publish(&[(".red/adr/0000.md", "adr precedent\n")]);
    f.write(".red/adr/0001.md", "lands fine alone\n");
    f.write(".red/contexts/orders.md", "no glossary precedent\n");
    let head = f.origin_main();
    let r = f.sweep();
    assert_eq!(
        r.halt.as_ref().unwrap().message(),
        "Docs Sweep halted (zero-precedent): .red/contexts/orders.md"
    );
    assert_eq!(
        verdicts(&r),
        vec![
            row(".red/adr/0001.md", "ignored", "halt"),
            row(".red/contexts/orders.md", "ignored", "halt"),
        ]
    );
    assert_eq!(f.origin_main(), head, "nothing lands while the boot halts");

    // Untracked (not ignored) docs need no precedent.
    let g = Fx::new();
    g.write(".red/contexts/orders.md", "fine\n");
    assert_outcome(&g.sweep(), DocsOutcome::Land, 1);
}

#[test]
fn a_failing_pr_lane_halts_and_cleans_up() {
    let f = Fx::new();
    f.write(".red/adr/1.md", "one\n");
    f.write(".red/adr/2.md", "two\n");
    let head = f.origin_main();
    let gh = FakeGh::install(&f.env);
    gh.fail_next(
        1,
        1,
        "HTTP 502: Bad Gateway (https://api.github.com/graphql)",
    );
    let t = gh.tracker(None);
    let r = f.sweep_with(&t, false);
    assert_outcome(&r, DocsOutcome::Halt, 2);
    let h = r.halt.as_ref().unwrap();
    assert_eq!(
        h.message(),
        "Docs Sweep halted (landing-failed): .red/adr/1.md, .red/adr/2.md"
    );
    assert!(
        h.detail
            .as_deref()
            .unwrap()
            .contains("opening the pull request failed"),
        "{h:?}"
    );
    assert!(
        r.decisions[0].reason.contains("HTTP 502"),
        "{}",
        r.decisions[0].reason
    );
    let calls = gh.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(&calls[0][..4], ["pr", "create", "--base", "main"]);
    assert_eq!(f.origin_main(), head);
    // The pushed branch is taken off origin again (on GitHub that also closes any PR).
    assert_eq!(f.lane_branches_on_origin(), "");
}

#[test]
fn a_merge_that_does_not_reach_the_base_halts() {
    // The fake gh records the merge but moves nothing on origin: the sweep must notice.
    let f = Fx::new();
    f.write(".red/CONTEXT.md", "ctx\n");
    let gh = FakeGh::install(&f.env);
    let t = gh.tracker(None);
    let r = f.sweep_with(&t, false);
    let h = r.halt.as_ref().unwrap();
    assert_eq!(
        h.message(),
        "Docs Sweep halted (landing-failed): .red/CONTEXT.md"
    );
    assert!(
        h.detail.as_deref().unwrap().contains("does not contain"),
        "{h:?}"
    );
    let calls = gh.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0][..2], ["pr", "create"]);
    assert!(calls[0].contains(&"docs: land 1 stranded .red doc".to_string()));
    assert_eq!(
        calls[1],
        [
            "pr",
            "merge",
            &gh.prs()[0].head,
            "--merge",
            "--delete-branch"
        ]
    );
    assert_eq!(f.lane_branches_on_origin(), "");
}

#[test]
fn a_refused_merge_leaves_no_branch_or_open_pr_and_names_never_repeat() {
    // The reviewer's repro in-process: origin refuses updates of main, so every landing
    // pushes its branch, opens a local PR and then fails to merge it.
    let f = Fx::new();
    f.write(".red/CONTEXT.md", "ctx\n");
    f.refuse_pushes_to_main();
    let head = f.origin_main();
    let t = f.local_tracker();
    for _ in 0..2 {
        let r = f.sweep_with(&t, false);
        assert_outcome(&r, DocsOutcome::Halt, 1);
        let h = r.halt.as_ref().unwrap();
        assert_eq!(
            h.message(),
            "Docs Sweep halted (landing-failed): .red/CONTEXT.md"
        );
        // The original cause, with no cleanup note: the cleanup itself succeeded.
        let detail = h.detail.as_deref().unwrap();
        assert!(detail.contains("merging it failed"), "{detail}");
        assert!(detail.contains("main is protected"), "{detail}");
        assert!(!detail.contains("cleaning up"), "{detail}");
        assert!(r.decisions[0].reason.contains("main is protected"));
        assert_eq!(f.lane_branches_on_origin(), "");
    }
    assert_eq!(f.origin_main(), head);
    let prs = t.pull_requests().unwrap();
    assert_eq!(prs.len(), 2, "{prs:#?}");
    assert!(
        prs.iter()
            .all(|p| p.state == PrState::Closed && p.closed_at.is_some()),
        "{prs:#?}"
    );
    // Back to back in one process (usually within one second): two distinct branches.
    assert_ne!(prs[0].head, prs[1].head);
    assert!(
        prs.iter()
            .all(|p| p.head.starts_with(docs::land::BRANCH_PREFIX))
    );

    // Once origin accepts the merge, the next run lands normally.
    fs::remove_file(f.repo.origin.join("hooks").join("pre-receive")).unwrap();
    let r = f.sweep_with(&t, false);
    assert_outcome(&r, DocsOutcome::Land, 1);
    assert_eq!(f.on_origin(".red/CONTEXT.md").as_deref(), Some("ctx\n"));
    assert_eq!(f.lane_branches_on_origin(), "");
}

#[test]
fn a_cleanup_that_fails_too_keeps_the_original_cause_first() {
    // Origin refuses the merge and also refuses deleting branches.
    let f = Fx::new();
    f.write(".red/CONTEXT.md", "ctx\n");
    let hook = f.repo.origin.join("hooks").join("pre-receive");
    fs::create_dir_all(hook.parent().unwrap()).unwrap();
    fs::write(
        &hook,
        "#!/bin/sh\nwhile read old new ref; do\n  case \"$ref:$new\" in\n    \
         refs/heads/main:*) echo 'main is protected' >&2; exit 1 ;;\n    \
         *:0000000000000000000000000000000000000000) echo 'no deletions' >&2; exit 1 ;;\n  \
         esac\ndone\nexit 0\n",
    )
    .unwrap();
    fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let t = f.local_tracker();
    let r = f.sweep_with(&t, false);
    let h = r.halt.as_ref().unwrap();
    assert_eq!(
        h.message(),
        "Docs Sweep halted (landing-failed): .red/CONTEXT.md"
    );
    let detail = h.detail.as_deref().unwrap();
    assert!(detail.starts_with("pushed afk-docs/sweep-"), "{detail}");
    let (cause, note) = detail
        .split_once("(cleaning up the lane also failed: ")
        .unwrap();
    assert!(cause.contains("merging it failed") && cause.contains("main is protected"));
    assert!(
        note.contains("on origin") && note.contains("no deletions"),
        "{note}"
    );
    // The branch the remote would not let go is the one the note names; the PR is closed.
    let left = f.lane_branches_on_origin();
    assert_eq!(left.lines().count(), 1, "{left}");
    let prs = t.pull_requests().unwrap();
    assert_eq!(prs.len(), 1);
    assert_eq!(prs[0].state, PrState::Closed);
    assert!(note.contains(&prs[0].head), "{note}");
    assert_eq!(left.trim(), format!("refs/heads/{}", prs[0].head));
}

#[test]
fn a_failing_gh_merge_removes_the_branch_each_time_with_distinct_names() {
    let f = Fx::new();
    f.write(".red/adr/1.md", "one\n");
    let head = f.origin_main();
    let gh = FakeGh::install(&f.env);
    let t = gh.tracker(None);
    for _ in 0..2 {
        // `pr create` answers normally, `pr merge` fails.
        gh.delay_next(1, 0.0);
        gh.fail_next(
            1,
            1,
            "GraphQL: Pull request is not mergeable (mergePullRequest)",
        );
        let r = f.sweep_with(&t, false);
        let h = r.halt.as_ref().unwrap();
        assert_eq!(
            h.message(),
            "Docs Sweep halted (landing-failed): .red/adr/1.md"
        );
        let detail = h.detail.as_deref().unwrap();
        assert!(detail.contains("merging it failed"), "{detail}");
        assert!(detail.contains("not mergeable"), "{detail}");
        assert!(!detail.contains("cleaning up"), "{detail}");
        assert_eq!(f.lane_branches_on_origin(), "");
    }
    assert_eq!(f.origin_main(), head);
    // No gh call beyond `docs/SPEC.md` §7's: the PR closes on GitHub when its head branch goes.
    let calls = gh.calls();
    let verbs: Vec<_> = calls.iter().map(|c| c[..2].join(" ")).collect();
    assert_eq!(verbs, ["pr create", "pr merge", "pr create", "pr merge"]);
    let prs = gh.prs();
    assert_eq!(prs.len(), 2);
    assert_ne!(prs[0].head, prs[1].head);
}

/// A commit that fails (here: signing, required by the repository's config, fails) halts
/// the sweep with git's words. A hook planted in the repository is not what fails it: the
/// fleet's git runs with hooks off (SPEC §11.19), so the hook never runs.
#[test]
fn a_failing_commit_halts_and_removes_the_worktree() {
    let f = Fx::new();
    f.write(".red/adr/1.md", "one\n");
    let hooks = f.repo.path.join(".git/hooks");
    fs::create_dir_all(&hooks).unwrap();
    let hook = hooks.join("pre-commit");
    let ran = f.repo.path.join("HOOK-RAN");
    fs::write(
        &hook,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", ran.display()),
    )
    .unwrap();
    fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let signer = f.repo.path.join(".git/refusing-signer");
    fs::write(
        &signer,
        "#!/bin/sh\necho 'refusing: signer says no' >&2\nexit 1\n",
    )
    .unwrap();
    fs::set_permissions(&signer, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = |k: &str, v: &str| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&f.repo.path)
            .args(["config", k, v])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    config("commit.gpgsign", "true");
    config("gpg.program", &signer.display().to_string());
    let head = f.origin_main();
    let r = f.sweep();
    let h = r.halt.as_ref().unwrap();
    assert_eq!(
        h.message(),
        "Docs Sweep halted (landing-failed): .red/adr/1.md"
    );
    assert!(
        h.detail.as_deref().unwrap().contains("failed to sign"),
        "{h:?}"
    );
    assert!(!ran.exists(), "the planted hook ran in the fleet's git");
    assert_eq!(f.origin_main(), head);
}

#[test]
fn a_doc_changed_on_both_sides_halts_as_diverged() {
    let f = Fx::new();
    f.publish(&[(".red/CONTEXT.md", "v1\n")]);
    f.upstream_commit(&[(".red/CONTEXT.md", Some("v2 from someone else\n"))]);
    f.write(".red/CONTEXT.md", "v2 from here\n");
    let head = f.origin_main();
    let r = f.sweep();
    assert_eq!(
        r.halt.as_ref().unwrap().message(),
        "Docs Sweep halted (diverged): .red/CONTEXT.md"
    );
    assert_eq!(f.origin_main(), head);
    assert_eq!(
        f.on_origin(".red/CONTEXT.md").as_deref(),
        Some("v2 from someone else\n")
    );
}

// ---------------------------------------------------------------- judged, not landed

#[test]
fn an_older_local_copy_is_stale_not_stranded() {
    let f = Fx::new();
    f.ignore_red();
    f.publish(&[(".red/adr/0.md", "precedent\n")]);
    // Landed earlier, then edited upstream; the primary still has the first version as
    // an ignored file it never pulled.
    f.write(".red/adr/1.md", "first\n");
    let t = f.local_tracker();
    assert_outcome(&f.sweep_with(&t, false), DocsOutcome::Land, 1);
    f.upstream_commit(&[(".red/adr/1.md", Some("second\n"))]);
    let head = f.origin_main();
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Clean, 0);
    assert_eq!(verdicts(&r), vec![row(".red/adr/1.md", "ignored", "keep")]);
    assert_eq!(f.origin_main(), head);
}

#[test]
fn a_symlinked_doc_is_skipped_and_reported() {
    let f = Fx::new();
    let outside = f.env.path().join("private-notes.md");
    fs::write(&outside, "private\n").unwrap();
    fs::create_dir_all(f.path(".red/adr")).unwrap();
    symlink(&outside, f.path(".red/adr/9.md")).unwrap();
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Clean, 0);
    assert_eq!(
        verdicts(&r),
        vec![row(".red/adr/9.md", "untracked", "skip")]
    );
    assert_eq!(f.on_origin(".red/adr/9.md"), None);
    assert_eq!(fs::read(&outside).unwrap(), b"private\n");
}

#[test]
fn dry_run_fetches_and_judges_but_lands_nothing() {
    let f = Fx::new();
    f.write(".red/adr/1.md", "one\n");
    f.upstream_commit(&[("other.txt", Some("moved on\n"))]);
    let head = f.origin_main();
    let gh = FakeGh::install(&f.env);
    let t = gh.tracker(None);
    let r = f.sweep_with(&t, true);
    assert_outcome(&r, DocsOutcome::Land, 1);
    assert!(r.decisions[0].reason.contains("dry run"));
    assert!(r.landed.is_none());
    assert!(gh.calls().is_empty());
    assert_eq!(f.origin_main(), head);
    // It did fetch.
    assert_eq!(f.git(&["rev-parse", "origin/main"]).trim(), head);
}

#[test]
fn a_doc_the_base_filters_to_its_own_blob_lands_nothing() {
    // The base gained an eol rule the primary's checkout does not have yet: the CRLF copy
    // here differs byte-wise, but committed under the base's rules it is the same blob.
    let f = Fx::new();
    f.publish(&[(".red/adr/1.md", "a\nb\n")]);
    f.upstream_commit(&[(".gitattributes", Some("*.md text\n"))]);
    f.write(".red/adr/1.md", "a\r\nb\r\n");
    let head = f.origin_main();
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Clean, 0);
    assert_eq!(verdicts(&r), vec![row(".red/adr/1.md", "modified", "keep")]);
    assert_eq!(f.origin_main(), head);
}

// ---------------------------------------------------------------- the lane itself

#[test]
fn a_stale_lane_from_a_crashed_run_is_cleared_safely() {
    let f = Fx::new();
    f.write(".red/adr/1.md", "one\n");
    // A registered worktree left by a crash, with junk in it...
    let lane = f.layout.docs_sweep();
    f.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "afk-docs/sweep-crashed",
        lane.to_str().unwrap(),
        "origin/main",
    ]);
    fs::write(lane.join("junk.md"), "junk\n").unwrap();
    // ...and a symlink in it pointing outside, whose target must survive.
    let outside = f.env.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("keep.txt"), "keep\n").unwrap();
    symlink(&outside, lane.join("link")).unwrap();
    let r = f.sweep_with(&f.local_tracker(), false);
    assert_outcome(&r, DocsOutcome::Land, 1);
    assert_eq!(fs::read(outside.join("keep.txt")).unwrap(), b"keep\n");
    // The crashed run's branch is not this run's to delete (it may hold a commit).
    assert!(
        f.git(&["branch", "--list", "afk-docs/*"])
            .contains("afk-docs/sweep-crashed")
    );
}

#[test]
fn a_stale_unregistered_lane_dir_is_removed_without_following_symlinks() {
    let f = Fx::new();
    f.write(".red/CONTEXT.md", "ctx\n");
    let lane = f.layout.docs_sweep();
    fs::create_dir_all(lane.join("sub")).unwrap();
    let outside = f.env.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("keep.txt"), "keep\n").unwrap();
    symlink(&outside, lane.join("sub/link")).unwrap();
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Land, 1);
    assert_eq!(fs::read(outside.join("keep.txt")).unwrap(), b"keep\n");
}

#[test]
fn a_stale_lane_that_is_a_symlink_is_removed_as_a_link() {
    let f = Fx::new();
    f.write(".red/CONTEXT.md", "ctx\n");
    let outside = f.env.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("keep.txt"), "keep\n").unwrap();
    fs::create_dir_all(f.layout.tmp()).unwrap();
    symlink(&outside, f.layout.docs_sweep()).unwrap();
    let r = f.sweep();
    assert_outcome(&r, DocsOutcome::Land, 1);
    assert_eq!(fs::read(outside.join("keep.txt")).unwrap(), b"keep\n");
}

#[test]
fn a_symlinked_red_tmp_refuses_the_landing() {
    let f = Fx::new();
    f.write(".red/adr/1.md", "one\n");
    let elsewhere = f.env.path().join("scratch-disk");
    fs::create_dir_all(&elsewhere).unwrap();
    symlink(&elsewhere, f.layout.tmp()).unwrap();
    let head = f.origin_main();
    let r = f.sweep();
    let h = r.halt.as_ref().unwrap();
    assert_eq!(
        h.message(),
        "Docs Sweep halted (landing-failed): .red/adr/1.md"
    );
    assert!(h.detail.as_deref().unwrap().contains("symlink"), "{h:?}");
    assert_eq!(f.origin_main(), head);
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
}

#[test]
fn a_concurrent_landing_is_refused() {
    use nix::fcntl::{Flock, FlockArg};
    let f = Fx::new();
    f.write(".red/CONTEXT.md", "ctx\n");
    let lock = fs::File::create(f.repo.path.join(".git").join(docs::land::LOCK_FILE)).unwrap();
    let held = Flock::lock(lock, FlockArg::LockExclusiveNonblock).unwrap();
    let r = f.sweep();
    let h = r.halt.as_ref().unwrap();
    assert_eq!(
        h.message(),
        "Docs Sweep halted (landing-failed): .red/CONTEXT.md"
    );
    assert!(
        h.detail.as_deref().unwrap().contains("another docs sweep"),
        "{h:?}"
    );
    drop(held);
    assert_outcome(&f.sweep(), DocsOutcome::Land, 1);
}

// ---------------------------------------------------------------- through the binary

impl Fx {
    /// `afk-supervisor --repo <repo> --tracker local sweep --only docs-sweep <extra>`.
    fn sweep_bin(&self, extra: &[&str]) -> std::process::Output {
        let before = Primary::take(self);
        let out = self
            .env
            .bin()
            .arg("--repo")
            .arg(&self.repo.path)
            .args(["--tracker", "local", "sweep", "--only", "docs-sweep"])
            .args(extra)
            .output()
            .unwrap();
        self.assert_untouched(&before);
        out
    }

    /// The binary opens the local tracker in the repo, as in production, and its store
    /// (`.red/state/tracker/`) gains a PR record on a landing. Ignoring `.red/state/` and
    /// seeding the store makes `git status` show the same `!! .red/state/` before and
    /// after; the file walk leaves the store out.
    fn exclude_tracker_store(&self) {
        fs::write(self.repo.path.join(".git/info/exclude"), ".red/state/\n").unwrap();
        LocalTracker::new(&self.layout, self.git.clone())
            .create("seed", "", &[])
            .unwrap();
    }
}

#[test]
fn binary_halt_prints_the_message_and_exits_4() {
    let f = Fx::new();
    f.exclude_tracker_store();
    f.ignore_red();
    f.write(".red/adr/0001-use-postgres.md", "# Use Postgres\n");
    f.write(".red/adr/0002-queue.md", "# Queue\n");
    let head = f.origin_main();
    let out = f.sweep_bin(&[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    // The tracker choice `sweep` always prints, then the halt in one line.
    assert_eq!(
        text(&out.stderr),
        "tracker: local (requested)\nafk-supervisor: Docs Sweep halted (zero-precedent): .red/adr/0001-use-postgres.md, .red/adr/0002-queue.md\n"
    );
    // Stdout carries each decision made before the halt, and no "complete" summary.
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(
        stdout.lines().all(|l| l.starts_with("docs-sweep ")),
        "{stdout}"
    );
    assert!(
        stdout.contains(" .red/adr/0001-use-postgres.md"),
        "{stdout}"
    );
    assert!(!stdout.contains("boot sweeps complete"), "{stdout}");
    assert_eq!(f.origin_main(), head);
}

#[test]
fn binary_dry_run_lists_then_a_real_run_lands() {
    let f = Fx::new();
    f.exclude_tracker_store();
    f.publish(&[(".red/CONTEXT.md", "v1\n")]);
    f.write(".red/CONTEXT.md", "v2\n");
    f.write(".red/adr/1.md", "one\n");
    let head = f.origin_main();

    let out = f.sweep_bin(&["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "docs-sweep land .red/CONTEXT.md [modified]: changed here; updating it on origin/main (dry run: nothing changed)\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "docs-sweep land .red/adr/1.md [untracked]: missing on origin/main; adding it"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("| docs-sweep land files=2 |"), "{stdout}");
    assert_eq!(f.origin_main(), head);

    let out = f.sweep_bin(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("| docs-sweep land files=2 |"));
    assert_eq!(f.on_origin(".red/CONTEXT.md").as_deref(), Some("v2\n"));
    assert_eq!(f.on_origin(".red/adr/1.md").as_deref(), Some("one\n"));

    let out = f.sweep_bin(&["--json"]);
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["report"]["docs"]["outcome"], "clean");
    assert_eq!(doc["report"]["docs"]["files"], 0);
}

#[test]
fn binary_landing_failures_leave_no_branch_on_origin_or_open_pr() {
    // The reviewer's repro through the binary: three boots, each exit 4, nothing piles up.
    let f = Fx::new();
    f.exclude_tracker_store();
    f.write(".red/adr/1.md", "one\n");
    f.refuse_pushes_to_main();
    let head = f.origin_main();
    for _ in 0..3 {
        let out = f.sweep_bin(&[]);
        assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr)
                .contains("afk-supervisor: Docs Sweep halted (landing-failed): .red/adr/1.md\n"),
            "{}",
            text(&out.stderr)
        );
        assert!(text(&out.stdout).contains("main is protected"));
        assert_eq!(f.lane_branches_on_origin(), "");
    }
    assert_eq!(f.origin_main(), head);
    let prs = LocalTracker::new(&f.layout, f.git.clone())
        .pull_requests()
        .unwrap();
    assert_eq!(prs.len(), 3, "{prs:#?}");
    assert!(prs.iter().all(|p| p.state == PrState::Closed), "{prs:#?}");
    let heads: std::collections::BTreeSet<_> = prs.iter().map(|p| &p.head).collect();
    assert_eq!(heads.len(), 3, "{prs:#?}");
}

#[test]
fn a_supervisor_whose_docs_sweep_halts_spawns_nothing_and_exits_4() {
    let marker = "spawned";
    let mut fl = fleet::Fleet::new(
        &format!("touch \"$AFK_TEST_DIR/{marker}\"\nsleep 30\n"),
        fleet::FAST_TIMING,
    );
    // The config file lives in `.red/`; ignoring `.red/` hides it from git, as intended.
    let git = |fl: &fleet::Fleet, args: &[&str]| fl.env.git(&fl.repo, args);
    fs::write(fl.repo.join(".gitignore"), ".red/\n").unwrap();
    git(&fl, &["add", ".gitignore"]);
    git(&fl, &["commit", "-q", "-m", "ignore .red"]);
    git(&fl, &["push", "-q", "origin", "main"]);
    fs::create_dir_all(fl.repo.join(".red/adr")).unwrap();
    fs::write(fl.repo.join(".red/adr/0001.md"), "private?\n").unwrap();
    let head = git(&fl, &["rev-parse", "HEAD"]);

    fl.start(&["--workers", "2"]);
    let status = fl.wait_exit();
    assert_eq!(status.code(), Some(4), "log:\n{}", fl.dump());
    let boot = fl.events_of(Kind::SupervisorBootSweep);
    assert_eq!(boot.len(), 1, "{}", fl.dump());
    assert_eq!(
        boot[0].msg,
        "boot sweeps halted: Docs Sweep halted (zero-precedent): .red/adr/0001.md"
    );
    // The halting decision follows, with its reason, so the log alone explains the halt.
    let detail = fl.events_of(Kind::SupervisorBootSweepDetail);
    assert_eq!(detail.len(), 1, "{}", fl.dump());
    assert!(
        detail[0]
            .msg
            .starts_with("docs-sweep halt .red/adr/0001.md [ignored]: "),
        "{}",
        detail[0].msg
    );
    assert_eq!(fl.count(Kind::SlotSpawn), 0, "{}", fl.dump());
    assert!(!fl.file(marker).exists(), "a worker ran");
    assert_eq!(git(&fl, &["rev-parse", "HEAD"]), head);
    // The slot logs opened beside the sweeps are taken back: no log for a fleet that never ran.
    let logs = fl.repo.join(".red/tmp/logs");
    let left: Vec<_> = fs::read_dir(&logs)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// How often `fetch` and `remote` ran, read from a `GIT_TRACE` file.
fn traced(trace: &Path) -> (usize, usize) {
    let cmds = git_trace_commands(trace);
    let runs = |cmd: &str| {
        cmds.iter()
            .filter(|c| c.split(' ').next() == Some(cmd))
            .count()
    };
    (runs("fetch"), runs("remote"))
}

/// The reap and the docs sweep in one suite run, through a git whose every call is traced.
fn reap_then_docs(fx: &Fx) -> ((usize, usize), Result<suite::BootReport, BootError>) {
    let trace = fx.env.path().join("git-trace");
    let _ = fs::remove_file(&trace);
    let git = fx.git.clone().with_env([("GIT_TRACE", &trace)]);
    let tracker = fx.local_tracker();
    let ctx = SweepCtx::new(&fx.layout, &fx.config, &tracker, &git, false);
    let run = suite::run_suite(&ctx, &[SweepName::Branches, SweepName::DocsSweep]);
    (traced(&trace), run.into_result())
}

#[test]
fn a_suite_run_fetches_the_base_once_for_the_reap_and_the_docs_sweep() {
    let fx = Fx::new();
    fx.publish(&[(".red/adr/0001.md", "# precedent\n")]);
    let ((fetches, remotes), end) = reap_then_docs(&fx);
    let report = end.expect("suite passes");
    assert_eq!(report.docs.outcome, DocsOutcome::Clean);
    assert_eq!((fetches, remotes), (1, 1), "one remote listing, one fetch");

    // Run apart, each sweep fetches for itself: the saving is the suite's shared fetch.
    let trace = fx.env.path().join("git-trace-apart");
    let git = fx.git.clone().with_env([("GIT_TRACE", &trace)]);
    let tracker = fx.local_tracker();
    for only in [SweepName::Branches, SweepName::DocsSweep] {
        let ctx = SweepCtx::new(&fx.layout, &fx.config, &tracker, &git, false);
        suite::run_suite(&ctx, &[only])
            .into_result()
            .expect("sweep passes");
    }
    assert_eq!(traced(&trace), (2, 2));
}

#[test]
fn without_origin_a_suite_run_lists_the_remotes_once_and_fetches_nothing() {
    let fx = Fx::new();
    fx.git(&["remote", "remove", "origin"]);
    let ((fetches, remotes), end) = reap_then_docs(&fx);
    let report = end.expect("a local-only checkout passes");
    assert_eq!(
        (fetches, remotes),
        (0, 1),
        "one remote listing, no fetch (which would take `origin` for a path)"
    );
    assert!(
        report
            .decisions
            .iter()
            .any(|d| d.sweep == SweepName::DocsSweep && d.reason.starts_with("no `origin` remote")),
        "{:?}",
        report.decisions
    );
}

/// A failed fetch is not remembered: the docs sweep tries again, and halts only on its own
/// failure.
#[test]
fn an_unreachable_origin_is_tried_again_by_the_docs_sweep() {
    let fx = Fx::new();
    let gone = fx.env.path().join("no-such-origin.git");
    fx.git(&["remote", "set-url", "origin", gone.to_str().unwrap()]);
    let ((fetches, remotes), end) = reap_then_docs(&fx);
    assert_eq!((fetches, remotes), (2, 2));
    match end {
        Err(BootError::Halted(msg)) => assert!(msg.contains("origin"), "{msg}"),
        other => panic!("expected the docs sweep's halt, got {other:?}"),
    }
}
