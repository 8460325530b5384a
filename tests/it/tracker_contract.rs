//! One behavioural suite, run against both backends: `gh` (the real `GhTracker` driving the
//! fake gh) and `local` (the real store in a real repo with a bare `origin`). Whatever a
//! sweep relies on must hold for both.

use afk_supervisor::tracker::local::PrState;
use afk_supervisor::tracker::{
    ErrorKind, GhTracker, IssueState, LocalTracker, Tracker, TrackerError,
};

use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::{Repo, TestEnv, local_comments};

const RESTORE: &str = "🤖 /afk orchestrator died mid-issue; restoring ready-for-agent.";

/// An issue to seed; numbers are 1..=n in order.
struct Seed {
    open: bool,
    labels: &'static [&'static str],
    body: &'static str,
}

fn open(labels: &'static [&'static str]) -> Seed {
    Seed {
        open: true,
        labels,
        body: "",
    }
}

fn closed(labels: &'static [&'static str]) -> Seed {
    Seed {
        open: false,
        labels,
        body: "",
    }
}

trait Fixture {
    fn tracker(&self) -> &dyn Tracker;
    fn seed(&self, issues: &[Seed]);
    /// Comment bodies on issue `n`, oldest first, read behind the tracker's back.
    fn comments(&self, n: u64) -> Vec<String>;
    /// Whether the PR with this head was merged.
    fn merged(&self, head: &str) -> bool;
    fn env(&self) -> &TestEnv;
    fn repo(&self) -> &Repo;
    fn expected_kind(&self) -> &'static str;
}

struct GhFixture {
    env: TestEnv,
    repo: Repo,
    fake: FakeGh,
    tracker: GhTracker,
}

impl GhFixture {
    fn new() -> Self {
        let env = TestEnv::new();
        let repo = env.repo_with_origin();
        let fake = FakeGh::install(&env);
        let tracker = fake.tracker(Some("o/r"));
        GhFixture {
            env,
            repo,
            fake,
            tracker,
        }
    }
}

impl Fixture for GhFixture {
    fn tracker(&self) -> &dyn Tracker {
        &self.tracker
    }
    fn seed(&self, issues: &[Seed]) {
        let v: Vec<FakeIssue> = issues
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let n = i as u64 + 1;
                let f = if s.open {
                    FakeIssue::open(n, s.labels)
                } else {
                    FakeIssue::closed(n, s.labels)
                };
                f.with_body(s.body)
            })
            .collect();
        self.fake.set_issues(&v);
    }
    fn comments(&self, n: u64) -> Vec<String> {
        self.fake
            .issue(n)
            .map(|i| i.comments.into_iter().map(|c| c.body).collect())
            .unwrap_or_default()
    }
    fn merged(&self, head: &str) -> bool {
        self.fake
            .prs()
            .iter()
            .any(|p| p.head == head && p.state == "MERGED")
    }
    fn env(&self) -> &TestEnv {
        &self.env
    }
    fn repo(&self) -> &Repo {
        &self.repo
    }
    fn expected_kind(&self) -> &'static str {
        "gh"
    }
}

struct LocalFixture {
    env: TestEnv,
    repo: Repo,
    tracker: LocalTracker,
}

impl LocalFixture {
    fn new() -> Self {
        let env = TestEnv::new();
        let repo = env.repo_with_origin();
        let tracker = env.local_tracker(&repo.path);
        LocalFixture { env, repo, tracker }
    }
}

impl Fixture for LocalFixture {
    fn tracker(&self) -> &dyn Tracker {
        &self.tracker
    }
    fn seed(&self, issues: &[Seed]) {
        for (i, s) in issues.iter().enumerate() {
            let n = self
                .tracker
                .create(&format!("issue {}", i + 1), s.body, s.labels)
                .unwrap();
            assert_eq!(n, i as u64 + 1);
            if !s.open {
                self.tracker.close(n).unwrap();
            }
        }
    }
    fn comments(&self, n: u64) -> Vec<String> {
        local_comments(&self.tracker, n)
    }
    fn merged(&self, head: &str) -> bool {
        self.tracker
            .pull_requests()
            .unwrap()
            .iter()
            .any(|p| p.head == head && p.state == PrState::Merged)
    }
    fn env(&self) -> &TestEnv {
        &self.env
    }
    fn repo(&self) -> &Repo {
        &self.repo
    }
    fn expected_kind(&self) -> &'static str {
        "local"
    }
}

fn kind_of(r: Result<impl std::fmt::Debug, TrackerError>) -> ErrorKind {
    r.expect_err("expected a failure").kind
}

// ---- the contract ----

fn list_all_returns_every_issue_newest_first(f: &impl Fixture) {
    f.seed(&[
        open(&["ready-for-agent"]),
        closed(&[]),
        open(&["running", "req:1"]),
    ]);
    let all = f.tracker().list_all(100).unwrap();
    let nums: Vec<u64> = all.iter().map(|i| i.number).collect();
    assert_eq!(nums, vec![3, 2, 1]);
    assert_eq!(all[0].state, IssueState::Open);
    assert_eq!(all[0].labels, vec!["running", "req:1"]);
    assert!(all[0].has_label("req:1"));
    assert_eq!(all[0].closed_at, None);
    assert_eq!(all[1].state, IssueState::Closed);
    assert!(all[1].closed_at.is_some());
    assert!(all[1].labels.is_empty());
    assert_eq!(all[2].labels, vec!["ready-for-agent"]);
}

fn list_all_honours_the_limit(f: &impl Fixture) {
    f.seed(&[open(&[]), open(&[]), open(&[])]);
    let nums: Vec<u64> = f
        .tracker()
        .list_all(2)
        .unwrap()
        .iter()
        .map(|i| i.number)
        .collect();
    assert_eq!(nums, vec![3, 2]);
}

fn list_all_of_an_empty_tracker_is_empty(f: &impl Fixture) {
    assert!(f.tracker().list_all(10).unwrap().is_empty());
}

fn view_reports_state_and_labels(f: &impl Fixture) {
    f.seed(&[open(&["running"]), closed(&["ready-for-human"])]);
    let v = f.tracker().view(1).unwrap();
    assert_eq!(v.state, IssueState::Open);
    assert!(v.has_label("running"));
    let v = f.tracker().view(2).unwrap();
    assert_eq!(v.state, IssueState::Closed);
    assert_eq!(v.labels, vec!["ready-for-human"]);
}

fn view_of_a_missing_issue_is_not_found(f: &impl Fixture) {
    f.seed(&[open(&[])]);
    assert_eq!(kind_of(f.tracker().view(9)), ErrorKind::NotFound);
}

fn edit_labels_adds_and_removes_in_one_call(f: &impl Fixture) {
    f.seed(&[open(&["running", "keep"])]);
    f.tracker()
        .edit_labels(1, &["ready-for-agent"], &["running"])
        .unwrap();
    assert_eq!(
        f.tracker().view(1).unwrap().labels,
        vec!["keep", "ready-for-agent"]
    );
    // Several at once; adding a present label and removing an absent one are no-ops.
    f.tracker()
        .edit_labels(1, &["a", "b", "keep"], &["ready-for-agent", "never-there"])
        .unwrap();
    assert_eq!(f.tracker().view(1).unwrap().labels, vec!["keep", "a", "b"]);
    f.tracker().edit_labels(1, &[], &["a", "b"]).unwrap();
    f.tracker()
        .edit_labels(1, &["blocked:dependency"], &[])
        .unwrap();
    assert_eq!(
        f.tracker().view(1).unwrap().labels,
        vec!["keep", "blocked:dependency"]
    );
}

fn edit_labels_refuses_an_empty_change_and_commas(f: &impl Fixture) {
    f.seed(&[open(&["x"])]);
    assert_eq!(
        kind_of(f.tracker().edit_labels(1, &[], &[])),
        ErrorKind::Failed
    );
    assert_eq!(
        kind_of(f.tracker().edit_labels(1, &["a,b"], &[])),
        ErrorKind::Failed
    );
    assert_eq!(f.tracker().view(1).unwrap().labels, vec!["x"]);
}

fn edits_and_comments_on_a_missing_issue_are_not_found(f: &impl Fixture) {
    f.seed(&[open(&[])]);
    assert_eq!(
        kind_of(f.tracker().edit_labels(5, &["a"], &[])),
        ErrorKind::NotFound
    );
    assert_eq!(kind_of(f.tracker().comment(5, "hi")), ErrorKind::NotFound);
}

fn comments_are_recorded_verbatim(f: &impl Fixture) {
    f.seed(&[open(&["running"]), open(&[])]);
    f.tracker().comment(1, RESTORE).unwrap();
    let unblock = "🤖 /afk unblocked: all dependencies closed (#2, #3).";
    f.tracker().comment(1, unblock).unwrap();
    f.tracker()
        .comment(2, "line one\n\n- line 'two' \"quoted\"")
        .unwrap();
    assert_eq!(f.comments(1), vec![RESTORE, unblock]);
    assert_eq!(f.comments(2), vec!["line one\n\n- line 'two' \"quoted\""]);
}

fn list_open_with_label_returns_open_matches_with_bodies(f: &impl Fixture) {
    let body = "Needs these first.\n\n## Blocked by\n- #1\n- #2\n";
    f.seed(&[
        closed(&["blocked:dependency"]),
        Seed {
            open: true,
            labels: &["blocked:dependency", "req:1"],
            body,
        },
        open(&["ready-for-agent"]),
        open(&["blocked:dependency"]),
    ]);
    let got = f
        .tracker()
        .list_open_with_label("blocked:dependency", 200)
        .unwrap();
    let nums: Vec<u64> = got.iter().map(|i| i.number).collect();
    assert_eq!(nums, vec![4, 2]);
    assert_eq!(got[1].body, body);
    assert_eq!(got[1].labels, vec!["blocked:dependency", "req:1"]);
    assert_eq!(
        f.tracker()
            .list_open_with_label("blocked:dependency", 1)
            .unwrap()
            .len(),
        1
    );
    assert!(
        f.tracker()
            .list_open_with_label("nope", 200)
            .unwrap()
            .is_empty()
    );
}

fn pull_requests_are_created_and_merged_once(f: &impl Fixture) {
    f.env().push_branch(f.repo(), "docs-sweep/1");
    let id = f
        .tracker()
        .pr_create(
            "main",
            "docs-sweep/1",
            "docs: land stranded docs",
            "files:\n- a",
        )
        .unwrap();
    assert!(!id.is_empty());
    // A second PR for the same head and base is refused.
    assert_eq!(
        kind_of(f.tracker().pr_create("main", "docs-sweep/1", "again", "")),
        ErrorKind::Failed
    );
    assert!(!f.merged("docs-sweep/1"));
    f.tracker().pr_merge("docs-sweep/1").unwrap();
    assert!(f.merged("docs-sweep/1"));
    assert_eq!(
        kind_of(f.tracker().pr_merge("docs-sweep/1")),
        ErrorKind::NotFound
    );
    assert_eq!(
        kind_of(f.tracker().pr_merge("no-such")),
        ErrorKind::NotFound
    );
}

/// A draft pull request marked ready for review (`docs/SPEC.md` §11.22): no draft any more,
/// and asking again is no error; a merged one is refused.
fn a_draft_is_marked_ready_for_review(f: &impl Fixture) {
    f.env().push_branch(f.repo(), "afk/w1/1-x");
    let t = f.tracker();
    let url = t
        .pr_open("main", "afk/w1/1-x", "t", "Closes #1\n", true)
        .unwrap();
    let pr = afk_supervisor::landing::belt::pr_ref(&url);
    assert!(t.pr_status(&pr).unwrap().draft);
    t.pr_ready(&pr).unwrap();
    assert!(!t.pr_status(&pr).unwrap().draft);
    t.pr_ready(&pr).unwrap();
    t.pr_merge("afk/w1/1-x").unwrap();
    assert_eq!(kind_of(t.pr_ready(&pr)), ErrorKind::Failed);
}

fn kind_and_identity(f: &impl Fixture) {
    let t = f.tracker();
    assert_eq!(t.kind(), f.expected_kind());
    let id = t.identity();
    match t.kind() {
        "gh" => assert_eq!(id, "github:o/r"),
        _ => {
            assert!(id.starts_with("local:/"), "{id}");
            assert!(id.ends_with("/.red/state/tracker"), "{id}");
        }
    }
    assert_eq!(id, t.identity());
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod gh {
            $( #[test] fn $name() { super::$name(&super::GhFixture::new()) } )*
        }
        mod local {
            $( #[test] fn $name() { super::$name(&super::LocalFixture::new()) } )*
        }
    };
}

contract!(
    a_draft_is_marked_ready_for_review,
    list_all_returns_every_issue_newest_first,
    list_all_honours_the_limit,
    list_all_of_an_empty_tracker_is_empty,
    view_reports_state_and_labels,
    view_of_a_missing_issue_is_not_found,
    edit_labels_adds_and_removes_in_one_call,
    edit_labels_refuses_an_empty_change_and_commas,
    edits_and_comments_on_a_missing_issue_are_not_found,
    comments_are_recorded_verbatim,
    list_open_with_label_returns_open_matches_with_bodies,
    pull_requests_are_created_and_merged_once,
    kind_and_identity,
);
