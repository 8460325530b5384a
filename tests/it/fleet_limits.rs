//! What holds the whole fleet back (SPEC §11.11, §11.12): a rate-limited tracker pauses
//! it until the reset, comment pacing holds one budget across workers, and a broken agent
//! costs one probe per backoff step once the fleet circuit is open.

use std::time::Duration;

use afk_supervisor::timeutil::now_epoch;

use crate::support::fake_gh::{FakeGh, FakeIssue};
use crate::support::fleet::Fleet;
use crate::support::wait_until;
use afk_supervisor::event_log::Kind;

const WAIT: Duration = Duration::from_secs(60);

/// The built-in worker with a quick agent, on the fake gh.
fn gh_fleet(workers: usize, extra_tracker: &str) -> (Fleet, FakeGh) {
    let mut f = Fleet::new("", "");
    let agent = f.file("agent.sh");
    std::fs::write(&agent, "echo working on \"$RED_AFK_ISSUE\"\n").unwrap();
    f.write_config(&format!(
        "[fleet]\nworkers = {workers}\n\n[agent]\ncommand = [\"sh\", \"{}\"]\n\n\
         [tracker]\nkind = \"gh\"\nrepo = \"fake-owner/fake-repo\"\ntimeout_s = 20\n{extra_tracker}\n\
         [timing]\ntick_s = 1\nfast_death_s = 1\ncircuit_k = 3\ncircuit_window_s = 60\n\
         half_open_base_s = 1\nhalf_open_cap_s = 2\nstop_grace_s = 2\nunblock_interval_s = 3600\n",
        agent.display()
    ));
    let gh = FakeGh::install(&f.env);
    f.extra_env
        .push(("PATH".into(), gh.path_env().to_string_lossy().into_owned()));
    (f, gh)
}

fn is_write(argv: &[String]) -> bool {
    matches!(
        argv.get(..2).map(|a| (a[0].as_str(), a[1].as_str())),
        Some(("issue", "comment") | ("issue", "edit") | ("pr", "create"))
    )
}

/// The time of every write the fake gh took, and the most of them within any `span` s.
pub(crate) fn writes_and_most_within(gh: &FakeGh, span: f64) -> (Vec<f64>, usize) {
    let writes: Vec<f64> = gh
        .stamped_calls()
        .into_iter()
        .filter(|(_, a)| is_write(a))
        .map(|(t, _)| t)
        .collect();
    let most = writes
        .iter()
        .map(|t0| {
            writes
                .iter()
                .filter(|t| **t >= *t0 && **t < t0 + span)
                .count()
        })
        .max()
        .unwrap_or(0);
    (writes, most)
}

/// GitHub answers "rate limit exceeded" until a reset a few seconds ahead: the fleet logs
/// one `fleet.paused` with that reset, makes no API call until it (but `gh api
/// rate_limit`), counts no death and trips no circuit, then resumes by itself and works
/// the queue.
#[test]
fn a_rate_limited_tracker_pauses_the_fleet_until_the_reset() {
    let (mut f, gh) = gh_fleet(2, "");
    gh.set_issues(&[]);
    f.start(&[]);
    f.wait_events(Kind::SupervisorTick, 1);
    let reset = now_epoch() + 5;
    gh.set_rate_limit(Some(reset));
    gh.set_issues(&[
        FakeIssue::open(1, &["ready-for-agent"]).with_body("# one\n"),
        FakeIssue::open(2, &["ready-for-agent"]).with_body("# two\n"),
    ]);
    let paused = f.wait_events(Kind::FleetPaused, 1);
    assert!(
        paused[0].msg.contains("rate limit exceeded"),
        "{}",
        paused[0].msg
    );
    let pause = afk_supervisor::lanes::pause_file::read(&f.layout.state())
        .unwrap()
        .unwrap();
    assert_eq!(pause.until_epoch, reset, "the reset from gh api rate_limit");
    // While paused: `status` says so, in one line.
    let out = f.run_cmd(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("paused: rate limited"))
            .count(),
        1,
        "{text}"
    );
    f.wait_events(Kind::FleetResumed, 1);
    assert!(
        wait_until(WAIT, || [1, 2].iter().all(|n| gh
            .issue(*n)
            .is_some_and(|i| i.labels.iter().any(|l| l == "ready-for-human")))),
        "{}",
        f.dump()
    );
    assert_eq!(f.count(Kind::FleetPaused), 1, "{}", f.dump());
    assert_eq!(f.count(Kind::FleetResumed), 1);
    assert_eq!(f.count(Kind::CircuitTrip), 0);
    assert_eq!(f.count(Kind::FleetCircuitOpen), 0);
    // No death: every worker that ended exited 0 or 75.
    let deaths: Vec<String> = f
        .events_of(Kind::SlotExit)
        .into_iter()
        .map(|e| e.msg)
        .filter(|m| !m.contains(" exit 0 after") && !m.contains(" exit 75 after"))
        .collect();
    assert!(deaths.is_empty(), "{deaths:?}");
    // Between the pause and its reset (a second's margin each side), no repository call.
    let during: Vec<Vec<String>> = gh
        .stamped_calls()
        .into_iter()
        .filter(|(t, argv)| {
            *t > (pause.since_epoch + 1) as f64
                && *t < (reset - 1) as f64
                && argv[..2] != ["api", "rate_limit"]
        })
        .map(|(_, a)| a)
        .collect();
    assert!(during.is_empty(), "{during:?}");
    let hits = gh.rate_limit_hits();
    assert!((1..=4).contains(&hits), "rate-limited calls: {hits}");
    eprintln!("rate-limited calls: {hits}");
}

/// GitHub's rate limit met at a finished attempt's hand-off: the work is done, so the
/// worker waits for the reset and writes then. The issue is handed off once, its agent ran
/// once, and nothing is left `running` to be worked again.
#[test]
fn a_rate_limit_at_the_hand_off_is_waited_out_and_the_work_is_not_redone() {
    let (mut f, gh) = gh_fleet(1, "");
    let agent = f.file("agent.sh");
    // The agent's file system is read-only but its worktree: it says it runs on its
    // output (the slot log), and waits for a file it can read.
    let go = f.file("agent-go");
    std::fs::write(
        &agent,
        format!(
            "echo agent-running\nwhile [ ! -e '{}' ]; do sleep 0.05; done\necho done\n",
            go.display()
        ),
    )
    .unwrap();
    gh.set_issues(&[FakeIssue::open(1, &["ready-for-agent"]).with_body("# one\n")]);
    f.start(&[]);
    let runs = |f: &Fleet| f.slot_logs().matches("agent-running").count();
    assert!(wait_until(WAIT, || runs(&f) == 1), "{}", f.dump());
    // The limit comes while the agent works; its end meets it.
    let reset = now_epoch() + 4;
    gh.set_rate_limit(Some(reset));
    std::fs::write(&go, "").unwrap();
    // The hand-off's labels, then its comment.
    assert!(
        wait_until(WAIT, || gh.issue(1).is_some_and(|i| i
            .labels
            .iter()
            .any(|l| l == "ready-for-human")
            && i.comments
                .iter()
                .any(|c| c.body.contains("/afk finished attempt")))),
        "{}\n{}",
        f.dump(),
        f.slot_logs()
    );
    let issue = gh.issue(1).unwrap();
    assert!(
        !issue.labels.iter().any(|l| l == "running"),
        "{:?}",
        issue.labels
    );
    assert!(gh.rate_limit_hits() >= 1, "the hand-off met no limit");
    // The hand-off's comment, once, and the agent ran once.
    let handoffs = issue
        .comments
        .iter()
        .filter(|c| c.body.contains("/afk finished attempt"))
        .count();
    assert_eq!(handoffs, 1, "{:#?}\n{}", issue.comments, f.slot_logs());
    assert_eq!(runs(&f), 1);
    // A later tick does not find it again.
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 2);
    assert_eq!(runs(&f), 1);
    assert_eq!(f.count(Kind::AttemptClaimed), 1, "{}", f.dump());
    assert!(
        f.slot_logs()
            .contains("rate limited; the work is done, so it waits"),
        "{}",
        f.slot_logs()
    );
}

/// Three workers share one write budget: with 6 writes per 4 s window, no 3.5 s span of
/// the fake's log holds more than 6 comments and label edits (the half second allows for
/// the fake's start-up between the budget's stamp and its own), while the run needs
/// several windows' worth.
#[test]
fn the_write_pace_holds_across_three_workers() {
    let (mut f, gh) = gh_fleet(3, "max_writes_per_min = 6\npace_window_s = 4\n");
    let issues: Vec<FakeIssue> = (1..=6)
        .map(|n| FakeIssue::open(n, &["ready-for-agent"]).with_body(&format!("# task {n}\n")))
        .collect();
    gh.set_issues(&issues);
    f.start(&[]);
    assert!(
        wait_until(Duration::from_secs(120), || (1..=6).all(|n| gh
            .issue(n)
            .is_some_and(|i| i.labels.iter().any(|l| l == "ready-for-human")))),
        "{}",
        f.dump()
    );
    let (writes, most) = writes_and_most_within(&gh, 3.5);
    assert!(
        writes.len() > 12,
        "needs more than two windows: {}",
        writes.len()
    );
    eprintln!("writes: {}; most in a 3.5 s span: {most}", writes.len());
    assert!(most <= 6, "{most} writes in 3.5 s: {writes:?}");
}

/// GitHub's 500 writes an hour per identity, kept on one box without a cluster (the
/// per-minute pace alone would allow 1,200): with the fake's hour narrowed to 8 writes in
/// 10 s and `tracker.max_writes_per_hour` the same, four issues (about 4 writes each) take
/// more than one such hour; the writes wait for the hour's next slot instead of meeting
/// GitHub's limit (a slot further off than a call's deadline pauses the fleet instead,
/// `tracker::pace`'s unit tests and SPEC §11.11).
#[test]
fn the_hourly_write_budget_holds_and_github_never_refuses_a_write() {
    let (mut f, gh) = gh_fleet(
        3,
        "max_writes_per_min = 20\nmax_writes_per_hour = 8\npace_hour_s = 10\n",
    );
    gh.set_write_limits(80, 8, 60.0, 10.0);
    let issues: Vec<FakeIssue> = (1..=4)
        .map(|n| FakeIssue::open(n, &["ready-for-agent"]).with_body(&format!("# task {n}\n")))
        .collect();
    gh.set_issues(&issues);
    f.start(&[]);
    assert!(
        wait_until(Duration::from_secs(180), || (1..=4).all(|n| gh
            .issue(n)
            .is_some_and(|i| i.labels == ["ready-for-human"]
                && i.comments
                    .iter()
                    .any(|c| c.body.contains("/afk finished"))))),
        "{}",
        f.dump()
    );
    let (writes, most) = writes_and_most_within(&gh, 10.0);
    assert!(
        writes.len() > 8,
        "needs more than one hour's budget: {}",
        writes.len()
    );
    assert_eq!(
        gh.write_limit_hits(),
        0,
        "GitHub refused a write\n{}",
        f.dump()
    );
    eprintln!("writes: {}; most in a 10 s span: {most}", writes.len());
    assert!(most <= 8, "{most} writes in one 10 s hour: {writes:?}");
}

/// Four slots whose worker always exits 1 at once: once the fleet circuit is open, each
/// backoff step (1, 2, 4, 4 s) spawns exactly one probe, counted in the event log between
/// the circuit's records.
#[test]
fn a_broken_agent_costs_one_probe_per_backoff_step() {
    let mut f = Fleet::new(
        "exit 1\n",
        "[tracker]\nkind = \"local\"\n\n[timing]\ntick_s = 1\nfast_death_s = 1\ncircuit_k = 2\n\
         circuit_window_s = 60\nhalf_open_base_s = 1\nhalf_open_cap_s = 4\nstop_grace_s = 2\n",
    );
    f.start(&["--workers", "4"]);
    f.wait_events(Kind::FleetCircuitReparked, 4);
    let events = f.events();
    let open = events
        .iter()
        .position(|e| e.kind == Kind::FleetCircuitOpen)
        .expect("the fleet circuit opened");
    assert_eq!(f.count(Kind::FleetCircuitOpen), 1, "{}", f.dump());
    // Spawns between one circuit record and the next, from the open one on.
    let mut per_step = Vec::new();
    let mut n = 0;
    for e in &events[open + 1..] {
        match e.kind {
            Kind::SlotSpawn | Kind::SlotSpawnFailed => n += 1,
            Kind::FleetCircuitReparked => {
                per_step.push(n);
                n = 0;
            }
            _ => {}
        }
    }
    eprintln!("spawns per backoff step: {per_step:?}");
    assert!(per_step.len() >= 4, "{per_step:?}");
    assert!(
        per_step.iter().all(|n| *n == 1),
        "{per_step:?}\n{}",
        f.dump()
    );
    let state = f.state().expect("state.toon");
    let fc = state.fleet_circuit.expect("fleet_circuit in state.toon");
    assert_eq!(fc.tripped_slots, 2);
    assert!(fc.reason.contains("exit"), "{}", fc.reason);
}

/// A repository that has only `ready-for-agent` (a new one, set up by hand): the
/// supervisor creates the fleet's other labels at start, so the hand-off's `running` and
/// `ready-for-human` are not refused; a second start creates none.
#[test]
fn a_fleet_on_a_new_repository_creates_its_labels_once() {
    let (mut f, gh) = gh_fleet(1, "");
    gh.set_repo_labels(&["ready-for-agent"]);
    gh.set_issues(&[FakeIssue::open(1, &["ready-for-agent"]).with_body("# task 1\n")]);
    f.start(&[]);
    assert!(
        wait_until(Duration::from_secs(120), || gh
            .issue(1)
            .is_some_and(|i| i.labels == ["ready-for-human"])),
        "{}",
        f.dump()
    );
    let creates = |gh: &FakeGh| {
        gh.calls()
            .iter()
            .filter(|c| c.starts_with(&["label".to_string(), "create".to_string()]))
            .count()
    };
    let names = afk_supervisor::tracker::labels::FLEET.len();
    assert_eq!(creates(&gh), names - 1, "{:?}", gh.calls());
    assert_eq!(gh.repo_labels().len(), names);
    assert_eq!(
        f.events_of(Kind::SupervisorHousekeeping)
            .iter()
            .filter(|e| e
                .msg
                .starts_with("tracker labels created: running, ready-for-human"))
            .count(),
        1,
        "{}",
        f.dump()
    );
    f.stop_fleet();
    f.start(&[]);
    f.wait_events(Kind::SupervisorBootSweep, 2);
    assert_eq!(creates(&gh), names - 1, "a second start creates none");
}
