//! Writes that landed though their answer failed (#22): a label switch GitHub applied and
//! answered 502 must not strand an issue `running` with no claim mark and no worker. The
//! claims belt restores such an issue after `claims.unmarked_grace_s`, not after the stale
//! age, and its own label edits are settled by re-reading the issue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use afk_supervisor::claim::stale::StaleBelt;
use afk_supervisor::layout::Layout;
use afk_supervisor::tracker::Tracker;

use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::{self, TestEnv, wait_until};

#[test]
fn an_unmarked_running_issue_is_restored_after_the_grace_not_the_stale_age() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let gh = FakeGh::install(&env);
    gh.set_issues(&[FakeIssue::open(1, &["running"])]);
    let tracker: Arc<dyn Tracker> = Arc::new(gh.tracker(Some("fake-owner/fake-repo")));
    let layout = Layout::new(&repo.path);
    // The stale age is two hours: only the grace can restore the issue within the test.
    let mut belt = StaleBelt::new(Arc::clone(&tracker), &layout, 7200)
        .with_unmarked_grace(Duration::from_secs(1));
    let first = belt.pass().unwrap();
    assert!(first.contains("looked=0"), "{first}");
    // The belt measures the grace on its own clock from its first look, made within that
    // pass: a second after the pass, the next one reads the thread.
    let seen = Instant::now();
    std::thread::sleep(Duration::from_millis(1100).saturating_sub(seen.elapsed()));
    // The listing, the thread read, the takeover mark, its re-read and the fleet's login
    // (asked once the thread carries a mark) answer; the relabel lands but is answered 502
    // on every try.
    gh.pass_next(5);
    gh.apply_then_fail_next(3, 1, "HTTP 502: Bad Gateway");
    let last = belt.pass().unwrap();
    assert!(last.contains("looked=1 taken-over=1 errors=0"), "{last}");
    assert_eq!(gh.issue(1).unwrap().labels, vec!["ready-for-agent"]);
    let comments = gh.issue(1).unwrap().comments;
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert!(
        comments[0].body.starts_with("🤖 /afk takeover - - by "),
        "{comments:?}"
    );
}

/// A marked `running` issue still waits the stale age: the grace is only for issues with
/// no mark at all.
#[test]
fn a_marked_running_issue_is_not_restored_at_the_grace() {
    use support::fake_gh::FakeComment;
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let gh = FakeGh::install(&env);
    let mark = "🤖 /afk claim w1@other-box-0badc0de 0123456789abcdef";
    gh.set_issues(&[
        FakeIssue::open(1, &["running"]).with_comment(FakeComment::by("fake", "OWNER", mark))
    ]);
    let tracker: Arc<dyn Tracker> = Arc::new(gh.tracker(Some("fake-owner/fake-repo")));
    let mut belt = StaleBelt::new(tracker, &Layout::new(&repo.path), 7200)
        .with_unmarked_grace(Duration::from_secs(1));
    belt.pass().unwrap();
    let mut looked = String::new();
    assert!(wait_until(Duration::from_secs(30), || {
        looked = belt.pass().unwrap();
        looked.contains("looked=1")
    }));
    assert!(looked.contains("taken-over=0"), "{looked}");
    assert_eq!(gh.issue(1).unwrap().labels, vec!["running"]);
    // The next pass does not read the thread again before the stale age.
    let again = belt.pass().unwrap();
    assert!(again.contains("looked=0"), "{again}");
}
