//! A late claimant on a handed-off issue. Two checkouts confirm one issue `ready-for-agent`;
//! one claims, works and hands it off before the other's label switch lands. The late one's
//! claim mark then holds (nobody else did), it finds `ready-for-human`, yields, and must
//! take its `running` back and leave the thread handed off. When its take-back fails, the
//! claims belt removes `running` and never requeues the issue (the 2026-12-02 CI failure
//! of `claims_multi_host`: #2 was requeued and claimed and yielded in a loop).

use std::sync::Arc;
use std::time::Duration;

use afk_supervisor::claim::marks::Event;
use afk_supervisor::claim::stale::StaleBelt;
use afk_supervisor::claim::tracked::{self, ClaimRace};
use afk_supervisor::layout::Layout;
use afk_supervisor::tracker::Tracker;

use crate::support::fake_gh::{FakeComment, FakeGh, FakeIssue};
use crate::support::{TestEnv, wait_until};

const CLAIM: &str = "🤖 /afk claim w1@box-a-0badc0de 0123456789abcdef";
const HANDOFF: &str =
    "🤖 /afk finished attempt 1-a1.\n\n🤖 /afk handoff w1@box-a-0badc0de 0123456789abcdef";

fn never() -> bool {
    false
}

fn settle(secs: u64, stopped: &dyn Fn() -> bool) -> tracked::Settle<'_> {
    tracked::Settle {
        within: Duration::from_secs(secs),
        stopped,
    }
}

/// Now, as the tracker stamps a comment.
fn stamp_now() -> String {
    afk_supervisor::timeutil::rfc3339(std::time::SystemTime::now())
}

/// Handed off just now: the mark is there, the label change is not (yet).
fn handed_off_just_now(gh: &FakeGh) {
    let mut handoff = FakeComment::by("fake", "OWNER", HANDOFF);
    handoff.created_at = stamp_now();
    gh.set_issues(&[FakeIssue::open(1, &["running"])
        .with_comment(FakeComment::by("fake", "OWNER", CLAIM))
        .with_comment(handoff)]);
}

/// A fake GitHub whose issue 1 was handed off just now (its environment first: it must
/// outlive the fake).
fn just_handed_off() -> (TestEnv, FakeGh) {
    let env = TestEnv::new();
    let gh = FakeGh::install(&env);
    handed_off_just_now(&gh);
    (env, gh)
}

/// `w2` claims issue 1 on a thread, settling for `secs` until `stopped`; `meanwhile` runs
/// once its claim mark is there (the thread's third comment). The race's outcome.
fn claim_while(
    gh: &FakeGh,
    secs: u64,
    stopped: &(dyn Fn() -> bool + Sync),
    meanwhile: impl FnOnce(),
) -> ClaimRace {
    let tracker = gh.tracker(Some("fake-owner/fake-repo"));
    std::thread::scope(|s| {
        let claimer = s.spawn(|| {
            tracked::claim(&tracker, 1, "w2", "box-b-0badc0de", &settle(secs, stopped)).unwrap()
        });
        assert!(wait_until(Duration::from_secs(30), || {
            gh.issue(1).unwrap().comments.len() == 3
        }));
        meanwhile();
        claimer.join().unwrap()
    })
}

fn thread_reads(gh: &FakeGh) -> usize {
    gh.calls()
        .iter()
        .filter(|c| c.iter().any(|a| a == "view"))
        .count()
}

/// A claim posted between a hand-off mark and its label change holds (nobody else does)
/// on an issue not yet `ready-for-human`: it waits for the change, finds it, yields and
/// takes its `running` back.
#[test]
fn a_claim_right_after_a_hand_off_mark_waits_for_its_label_change_and_yields() {
    let (_env, gh) = just_handed_off();
    // The hand-off's label change lands once the late claim mark is there, as the
    // hand-off's edit leaves it with this claimant's own switch landing after:
    // `ready-for-human`, and `running` again.
    let race = claim_while(&gh, 60, &never, || {
        let mut issue = gh.issue(1).unwrap();
        issue.labels = vec!["ready-for-human".into(), "running".into()];
        gh.set_issues(&[issue]);
    });
    assert_eq!(race, ClaimRace::Lost { holder: None });
    let issue = gh.issue(1).unwrap();
    assert_eq!(issue.labels, vec!["ready-for-human"]);
    let s = issue.standing();
    assert_eq!(s.holder, None);
    assert_eq!(s.last.map(|l| l.0), Some(Event::HandedOff));
}

/// The same race with the tracker failing the `yielded` mark once: it is posted again, so
/// the thread does not end at the late claim of a worker that moved on.
#[test]
fn a_late_claims_yield_is_retried_through_a_tracker_failure() {
    let (_env, gh) = just_handed_off();
    let race = claim_while(&gh, 60, &never, || {
        // Once the claimant has read the thread after its mark (`issue view`, and `api
        // user` the first time only), it sleeps before reading again: the change lands then.
        assert!(wait_until(Duration::from_secs(30), || gh.calls().len() >= 3));
        let mut issue = gh.issue(1).unwrap();
        issue.labels = vec!["ready-for-human".into(), "running".into()];
        gh.set_issues(&[issue]);
        // The claimant's next calls: the re-read (answered), then its `yielded` mark
        // (failed once).
        gh.delay_next(1, 0.0);
        gh.fail_next(1, 1, "HTTP 502: Bad Gateway");
    });
    assert_eq!(race, ClaimRace::Lost { holder: None });
    let issue = gh.issue(1).unwrap();
    let bodies: Vec<&str> = issue.comments.iter().map(|c| c.body.as_str()).collect();
    assert_eq!(bodies.len(), 4, "{bodies:?}");
    assert!(
        bodies[3].starts_with("🤖 /afk yielded w2@box-b-0badc0de "),
        "{bodies:?}"
    );
    let s = issue.standing();
    assert_eq!(s.holder, None);
    assert_eq!(s.last.map(|l| l.0), Some(Event::HandedOff));
    assert_eq!(issue.labels, vec!["ready-for-human"]);
}

/// A handed-off issue a person put back in the queue at once: the claim after the
/// hand-off mark waits out the settle, finds no `ready-for-human`, and wins.
#[test]
fn a_claim_right_after_a_hand_off_wins_once_the_settle_passes_without_its_label() {
    let (_env, gh) = just_handed_off();
    let tracker = gh.tracker(Some("fake-owner/fake-repo"));
    gh.clear_calls();
    let race = tracked::claim(&tracker, 1, "w2", "box-b-0badc0de", &settle(2, &never)).unwrap();
    assert!(matches!(race, ClaimRace::Won(_)), "{race:?}");
    assert!(
        thread_reads(&gh) >= 2,
        "read again after the wait: {:?}",
        gh.calls()
    );
    assert_eq!(gh.issue(1).unwrap().labels, vec!["running"]);
}

/// A hand-off older than the settle is a person's requeue: no wait, one read.
#[test]
fn a_claim_long_after_a_hand_off_wins_at_once() {
    let env = TestEnv::new();
    let gh = FakeGh::install(&env);
    // The hand-off stamped 2026-01-01 (the fake's default), the claim now.
    gh.set_issues(&[FakeIssue::open(1, &["running"])
        .with_comment(FakeComment::by("fake", "OWNER", CLAIM))
        .with_comment(FakeComment::by("fake", "OWNER", HANDOFF))]);
    let tracker = gh.tracker(Some("fake-owner/fake-repo"));
    gh.clear_calls();
    let race = tracked::claim(&tracker, 1, "w2", "box-b-0badc0de", &settle(60, &never)).unwrap();
    assert!(matches!(race, ClaimRace::Won(_)), "{race:?}");
    assert_eq!(thread_reads(&gh), 1, "{:?}", gh.calls());
}

/// A stop while a claim waits on a hand-off gives the issue back: the claim's release
/// mark ends it and `running` goes back to `ready-for-agent`, so a person's fast requeue
/// is not turned into a hand-off by the claims belt reading the fold.
#[test]
fn a_stop_while_a_claim_waits_on_a_hand_off_gives_the_issue_back() {
    stop_while_waiting(0);
}

/// The same through a tracker failing transiently as the stop comes: the release mark
/// and the label change are retried like every release.
#[test]
fn a_stop_while_a_claim_waits_gives_the_issue_back_through_tracker_failures() {
    stop_while_waiting(2);
}

/// A stop during the wait; the `failing` tracker calls made after the claimant sees it
/// fail (502), so they are the release's own.
fn stop_while_waiting(failing: usize) {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let (_env, gh) = just_handed_off();
    let (stop, seen) = (AtomicBool::new(false), AtomicBool::new(false));
    let stopped = || {
        let now = stop.load(SeqCst);
        if now && !seen.swap(true, SeqCst) && failing > 0 {
            gh.fail_next(failing, 1, "HTTP 502: Bad Gateway");
        }
        now
    };
    let race = claim_while(&gh, 60, &stopped, || stop.store(true, SeqCst));
    assert_eq!(race, ClaimRace::Stopped);
    let issue = gh.issue(1).unwrap();
    assert_eq!(issue.labels, vec!["ready-for-agent"]);
    assert_eq!(issue.comments.len(), 4);
    assert!(
        issue.comments[3]
            .body
            .starts_with("🤖 /afk release w2@box-b-0badc0de "),
        "{:?}",
        issue.comments[3].body
    );
    let s = issue.standing();
    assert_eq!(s.holder, None, "the release ends the late claim");
    assert_eq!(s.last.map(|l| l.0), Some(Event::Ended));
}

fn handed_off_and_switched(gh: &FakeGh) {
    gh.set_issues(&[FakeIssue::open(1, &["ready-for-human", "running"])
        .with_comment(FakeComment::by("fake", "OWNER", CLAIM))
        .with_comment(FakeComment::by("fake", "OWNER", HANDOFF))]);
}

#[test]
fn a_late_claim_on_a_handed_off_issue_yields_and_takes_its_running_back() {
    let env = TestEnv::new();
    let gh = FakeGh::install(&env);
    handed_off_and_switched(&gh);
    let tracker = gh.tracker(Some("fake-owner/fake-repo"));
    let race = tracked::claim(&tracker, 1, "w2", "box-b-0badc0de", &settle(30, &never)).unwrap();
    assert_eq!(race, ClaimRace::Lost { holder: None });
    let issue = gh.issue(1).unwrap();
    assert_eq!(issue.labels, vec!["ready-for-human"]);
    let bodies: Vec<&str> = issue.comments.iter().map(|c| c.body.as_str()).collect();
    assert_eq!(bodies.len(), 4, "{bodies:?}");
    assert!(
        bodies[3].starts_with("🤖 /afk yielded w2@box-b-0badc0de "),
        "{bodies:?}"
    );
    // The yield voids the late claim: the thread still stands handed off.
    let s = gh.issue(1).unwrap().standing();
    assert_eq!(s.holder, None);
    assert_eq!(s.last.map(|l| l.0), Some(Event::HandedOff));
}

#[test]
fn the_belt_removes_running_beside_ready_for_human_and_requeues_nothing() {
    let env = TestEnv::new();
    let repo = env.repo_with_origin();
    let gh = FakeGh::install(&env);
    handed_off_and_switched(&gh);
    // The late claimant's yield landed; its take-back did not.
    let yielded = "🤖 /afk yielded w2@box-b-0badc0de fedcba9876543210";
    let late = "🤖 /afk claim w2@box-b-0badc0de fedcba9876543210";
    let mut issue = gh.issue(1).unwrap();
    issue.comments.push(FakeComment::by("fake", "OWNER", late));
    issue
        .comments
        .push(FakeComment::by("fake", "OWNER", yielded));
    gh.set_issues(&[issue]);
    let tracker: Arc<dyn Tracker> = Arc::new(gh.tracker(Some("fake-owner/fake-repo")));
    // A stale age of two hours: only this rule can act within the test.
    let mut belt = StaleBelt::new(tracker, &Layout::new(&repo.path), 7200)
        .with_unmarked_grace(Duration::from_secs(1));
    let mut last = String::new();
    assert!(wait_until(Duration::from_secs(30), || {
        last = belt.pass().unwrap();
        last.contains("looked=1")
    }));
    assert!(last.contains("taken-over=1 errors=0"), "{last}");
    let issue = gh.issue(1).unwrap();
    assert_eq!(issue.labels, vec!["ready-for-human"]);
    // No takeover mark: nothing was requeued.
    assert_eq!(issue.comments.len(), 4, "{:?}", issue.comments);
    let next = belt.pass().unwrap();
    assert!(next.starts_with("running=0"), "{next}");
}
