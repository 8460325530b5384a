//! Supervising agents, not only processes (issue 20, `docs/SPEC.md` §11.13): the real
//! CLIs' outputs (`tests/corpus/agents/real/`) classified as their CLIs mean them; fake `claude`
//! and `codex` programs first on `PATH` that replay those outputs, run by a real fleet on
//! the local tracker: an account's usage limit pauses the whole fleet once and quarantines
//! nothing, a daily budget stops new claims after exactly the runs that reach it and
//! resumes when the day turns, an issue whose failed or capped attempts reach
//! `budget.usd_per_issue` goes to a person with one comment after exactly the runs that
//! reach it, and a poisoned issue among healthy ones is quarantined after exactly its own
//! K failures.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use afk_supervisor::agent_profile::{self, AccountWide, End, ProfileKind, Seen};
use afk_supervisor::ledger::{self, Outcome};
use afk_supervisor::timeutil::now_epoch;

use crate::support::REPORTING_AGENT;
use crate::support::fleet::{FAST_TIMING, Fleet};
use crate::support::{fleet, wait_until};
use afk_supervisor::event_log::Kind;

/// Long enough for a fleet on two shared cores to work a handful of issues.
const LONG: Duration = Duration::from_secs(120);

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/agents")
}

fn corpus(name: &str) -> Vec<u8> {
    fs::read(corpus_dir().join(name)).unwrap()
}

fn seen(exit_code: i32, stdout: &[u8]) -> Seen<'_> {
    Seen {
        exit_code,
        stdout,
        stderr: b"",
        result_file: None,
        now_epoch: 1_800_000_000,
    }
}

/// The real CLIs' recordings (`tests/corpus/agents/real/`, `tests/it/agents_real.rs`), by
/// path under `tests/corpus/agents/`: what the fake `claude` and `codex` below replay.
pub(crate) const CLAUDE: &str = "real/claude-2.1.332";
const CODEX: &str = "real/codex-0.171.0";

/// What the recorded Claude Code run cost (its `total_cost_usd`).
const CLAUDE_RUN_USD: f64 = 0.01008;

/// The session the recorded Claude Code run names in its `system`/`init` line.
fn claude_session() -> String {
    let first = corpus(&format!("{CLAUDE}/success.stdout"));
    let line = String::from_utf8_lossy(&first)
        .lines()
        .next()
        .unwrap()
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    v["session_id"].as_str().unwrap().to_string()
}

#[test]
fn the_recorded_outputs_classify_as_their_clis_mean_them() {
    let ok = corpus(&format!("{CLAUDE}/success.stdout"));
    let (end, u) = agent_profile::classify(ProfileKind::Claude, &seen(0, &ok));
    assert_eq!(end, End::Done);
    assert_eq!(u.cost_usd, Some(CLAUDE_RUN_USD));
    assert_eq!((u.input_tokens, u.output_tokens), (Some(2000), Some(100)));
    assert_eq!((u.cache_read_tokens, u.turns), (Some(400), Some(2)));
    assert_eq!(u.model.as_deref(), Some("claude-opus-5-5"));
    assert_eq!(u.session_id, Some(claude_session()));
    // The model's last words mention `rate_limit_error`: the conversation, not the CLI.
    let (end, _) = agent_profile::classify(ProfileKind::Claude, &seen(1, &ok));
    assert_eq!(end, End::Failed { code: 1 });

    let limit = corpus(&format!("{CLAUDE}/usage-limit-subscription.stdout"));
    let (end, _) = agent_profile::classify(ProfileKind::Claude, &seen(1, &limit));
    assert!(
        matches!(
            end,
            End::AccountWide {
                why: AccountWide::UsageLimit,
                reset_epoch: Some(1_796_652_284),
                ..
            }
        ),
        "{end:?}"
    );
    for (file, why) in [
        ("unauthorized", AccountWide::Login),
        ("overloaded-529", AccountWide::Overloaded),
        ("credit", AccountWide::Credit),
    ] {
        let (end, _) = agent_profile::classify(
            ProfileKind::Claude,
            &seen(1, &corpus(&format!("{CLAUDE}/{file}.stdout"))),
        );
        assert!(
            matches!(&end, End::AccountWide { why: w, .. } if *w == why),
            "{file}: {end:?}"
        );
    }
    let (end, u) = agent_profile::classify(
        ProfileKind::Claude,
        &seen(1, &corpus(&format!("{CLAUDE}/max-turns.stdout"))),
    );
    assert_eq!(end, End::Failed { code: 1 });
    assert_eq!((u.cost_usd, u.turns), (Some(0.00504), Some(2)));

    let (end, u) = agent_profile::classify(
        ProfileKind::Codex,
        &seen(0, &corpus(&format!("{CODEX}/success.stdout"))),
    );
    assert_eq!(end, End::Done);
    assert_eq!(
        (
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.turns
        ),
        (Some(2000), Some(100), Some(400), Some(1))
    );
    assert_eq!(u.cost_usd, None, "codex reports tokens, never dollars");
    // `… try again at 1:42 PM.`: the next 13:42 in the host's zone, within a day.
    let (end, _) = agent_profile::classify(
        ProfileKind::Codex,
        &seen(1, &corpus(&format!("{CODEX}/usage-limit.stdout"))),
    );
    assert!(
        matches!(end, End::AccountWide { why: AccountWide::UsageLimit, reset_epoch: Some(r), .. }
            if r > 1_800_000_000 && r <= 1_800_000_000 + 86_400),
        "{end:?}"
    );
    let (end, _) = agent_profile::classify(
        ProfileKind::Codex,
        &seen(1, &corpus(&format!("{CODEX}/bad-request.stdout"))),
    );
    assert_eq!(end, End::Failed { code: 1 });

    // The generic contract: exit 75 with the result file's reset and cost.
    let file = corpus("generic-result.json");
    let s = Seen {
        result_file: Some(&file),
        ..seen(75, b"")
    };
    let (end, u) = agent_profile::classify(ProfileKind::Generic, &s);
    assert!(
        matches!(
            end,
            End::AccountWide {
                reset_epoch: Some(1_764_684_000),
                ..
            }
        ),
        "{end:?}"
    );
    assert_eq!(
        (u.cost_usd, u.session_id.as_deref()),
        (Some(0.4), Some("s-1"))
    );
    let (end, _) = agent_profile::classify(ProfileKind::Generic, &seen(3, b""));
    assert_eq!(end, End::Failed { code: 3 });
}

/// A fleet on the local tracker running a fake agent named `program` (a shell script in
/// a bin dir first on `PATH`), with `n` ready issues and `extra` appended to the config.
pub(crate) fn agent_fleet(
    program: &str,
    script: &str,
    workers: usize,
    n: u64,
    extra: &str,
) -> Fleet {
    let mut f = Fleet::new("", "");
    let bin = f.file("bin");
    fs::create_dir_all(&bin).unwrap();
    let agent = bin.join(program);
    fs::write(&agent, format!("#!/bin/sh\n{script}")).unwrap();
    fs::set_permissions(&agent, fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    f.extra_env.push(("PATH".into(), path));
    f.extra_env
        .push(("AFK_TEST_CORPUS".into(), corpus_dir().display().to_string()));
    f.write_config(&format!(
        "[fleet]\nworkers = {workers}\n\n[tracker]\nkind = \"local\"\n\n\
         [agent]\ncommand = [\"{program}\"]\n{REPORTING_AGENT}\n{extra}\n{FAST_TIMING}"
    ));
    for i in 1..=n {
        f.new_issue(&format!("issue {i}"));
    }
    f
}

/// The agent's runs so far, one line each: `<issue> <epoch> <argv…>`.
fn runs(f: &Fleet) -> Vec<(u64, u64, String)> {
    fleet::read(&f.file("runs"))
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            Some((
                it.next()?.parse().ok()?,
                it.next()?.parse().ok()?,
                it.next().unwrap_or("").to_string(),
            ))
        })
        .collect()
}

const RECORD_RUN: &str = "echo \"$RED_AFK_ISSUE $(date +%s) $*\" >> \"$AFK_TEST_DIR/runs\"\n";

fn outcomes(f: &Fleet, n: u64) -> Vec<Outcome> {
    ledger::read(&f.layout, n)
        .unwrap()
        .iter()
        .map(|r| r.outcome)
        .collect()
}

fn done(f: &Fleet, n: u64) -> bool {
    outcomes(f, n).contains(&Outcome::Done)
}

/// The issue's measurement: 3 workers, 8 healthy issues, a `claude` that prints Claude
/// Code's usage-limit result until a reset 20 s ahead. The fleet runs the agent at most
/// once per slot before the reset, pauses once, probes once after it, then works every
/// issue: none quarantined, none handed to a person, no failure comment.
#[test]
fn a_usage_limit_pauses_the_whole_fleet_once_and_quarantines_nothing() {
    let script = format!(
        "{RECORD_RUN}reset=$(cat \"$AFK_TEST_DIR/reset\")\n\
         if [ \"$(date +%s)\" -lt \"$reset\" ]; then\n\
           sed \"s/\\\"resetsAt\\\":[0-9]*/\\\"resetsAt\\\":$reset/g\" \"$AFK_TEST_CORPUS/{CLAUDE}/usage-limit-subscription.stdout\"\n\
           exit 1\n\
         fi\n\
         cat \"$AFK_TEST_CORPUS/{CLAUDE}/success.stdout\"\n"
    );
    let mut f = agent_fleet("claude", &script, 3, 8, "");
    let reset = now_epoch() + 20;
    fs::write(f.file("reset"), reset.to_string()).unwrap();
    f.start(&[]);
    let paused = f.wait_events(Kind::FleetAgentPaused, 1);
    assert!(paused[0].msg.contains("usage limit"), "{}", paused[0].msg);
    // While paused, `status` says so in the issue's words.
    let text = f.wait_status_line(|l| l.starts_with("agent paused: usage limit, resumes "));
    assert!(
        text.lines()
            .any(|l| l.starts_with("agent paused: usage limit, resumes ")),
        "{text}"
    );
    let all_done = wait_until(LONG, || (1..=8).all(|n| done(&f, n)));
    assert!(all_done, "not every issue was worked; log:\n{}", f.dump());
    let before: Vec<_> = runs(&f).into_iter().filter(|r| r.1 < reset).collect();
    eprintln!(
        "usage-limit run: {} agent runs before the reset, {} after",
        before.len(),
        runs(&f).len() - before.len()
    );
    assert!(before.len() <= 3, "at most one run per slot: {before:?}");
    assert_eq!(f.count(Kind::FleetAgentPaused), 1, "{}", f.dump());
    assert_eq!(f.count(Kind::FleetAgentProbe), 1, "{}", f.dump());
    assert_eq!(f.count(Kind::FleetAgentResumed), 1, "{}", f.dump());
    let mut quarantined = 0;
    for n in 1..=8 {
        let labels = f.labels_of(n);
        quarantined += usize::from(labels.iter().any(|l| l == "afk:quarantined"));
        let o = outcomes(&f, n);
        assert!(
            o.iter()
                .all(|o| matches!(o, Outcome::Done | Outcome::AccountLimited)),
            "#{n}: {o:?}"
        );
        let comments = f.comments_of(n);
        assert_eq!(
            comments.len(),
            1,
            "#{n}: only the finished comment: {comments:?}"
        );
        assert!(comments[0].contains("finished attempt"), "{comments:?}");
    }
    eprintln!("usage-limit run: issues quarantined: {quarantined}");
    assert_eq!(quarantined, 0);
    // The probe ran first and alone after the reset: the next run started after it ended.
    let after: Vec<_> = runs(&f).into_iter().filter(|r| r.1 >= reset).collect();
    assert!(after.len() >= 8 - before.len(), "{after:?}");
    // The finished attempts recorded what they cost.
    let r = ledger::read(&f.layout, 1).unwrap();
    let finished = r.iter().find(|r| r.outcome == Outcome::Done).unwrap();
    assert_eq!(finished.usage.cost_usd, Some(CLAUDE_RUN_USD));
    assert_eq!(
        finished.usage.session_id.as_deref(),
        Some(claude_session().as_str())
    );
    // The claude profile passed the task as the real CLI takes it.
    let all_runs = fleet::read(&f.file("runs"));
    assert!(all_runs.contains(" -p Work on issue #"), "{all_runs}");
    assert!(
        all_runs.contains(" commit it there. --output-format stream-json --verbose\n"),
        "{all_runs}"
    );
}

/// `budget.timezone` whose day ends `secs` from now: the real clock, a zone chosen so the
/// test sees the day turn.
fn zone_ending_in(secs: u64) -> String {
    let now = now_epoch();
    let utc_of_day = (now % 86_400) as i64;
    let mut off = (86_400 - secs as i64 - utc_of_day).rem_euclid(86_400);
    if off > 43_200 {
        off -= 86_400;
    }
    let sign = if off < 0 { '-' } else { '+' };
    let a = off.unsigned_abs();
    format!("{sign}{:02}:{:02}:{:02}", a / 3600, (a % 3600) / 60, a % 60)
}

/// One worker, a run that costs what `sample` says; `budget` in the config. Exactly the
/// runs that reach the budget happen, then no claim, the reason in `status`, one
/// `fleet.budget-reached`; when the day turns (in the configured zone) the fleet claims
/// again by itself.
fn budget_run(program: &str, sample: &str, budget: &str, expect_runs: usize, words: &str) {
    let script = format!("{RECORD_RUN}cat \"$AFK_TEST_CORPUS/{sample}\"\n");
    let day_left = 30;
    let tz = zone_ending_in(day_left);
    let turn = now_epoch() + day_left;
    let mut f = agent_fleet(
        program,
        &script,
        1,
        6,
        &format!("[budget]\n{budget}\ntimezone = \"{tz}\"\n"),
    );
    f.start(&[]);
    let reached = f.wait_events(Kind::FleetBudgetReached, 1);
    assert!(
        now_epoch() < turn,
        "the runs took longer than the test's day"
    );
    assert!(reached[0].msg.contains(words), "{}", reached[0].msg);
    let n_runs = runs(&f).len();
    eprintln!("budget run ({budget}): runs: {n_runs}");
    assert_eq!(n_runs, expect_runs, "{}", f.dump());
    let text = f.wait_status_line(|l| l.starts_with("budget reached: ") && l.contains(words));
    assert!(
        text.lines()
            .any(|l| l.starts_with("budget reached: ") && l.contains(words)),
        "{text}"
    );
    // Held: ticks pass, nothing more runs, the event is not repeated.
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 3);
    if now_epoch() + 1 < turn {
        assert_eq!(runs(&f).len(), expect_runs, "{}", f.dump());
    }
    assert_eq!(f.count(Kind::FleetBudgetReached), 1);
    // The day turns: claims resume without anyone.
    assert!(
        wait_until(LONG, || f.count(Kind::FleetBudgetResumed) == 1),
        "the day did not turn; log:\n{}",
        f.dump()
    );
    assert!(
        wait_until(LONG, || runs(&f).len() > expect_runs),
        "no run after the day turned; log:\n{}",
        f.dump()
    );
    assert!(runs(&f).last().unwrap().1 >= turn);
    // `spend` reads the same ledger: the new day's attempt once it has ended.
    let spend = || {
        let out = f.run_cmd(&["spend", "--by", "day", "--json"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    assert!(
        wait_until(LONG, || spend()["rows"]
            .as_array()
            .is_some_and(|r| r.len() == 2)),
        "{}",
        spend()
    );
    let v = spend();
    assert_eq!(v["rows"][0]["runs"], expect_runs as u64, "{v}");
}

#[test]
fn a_daily_dollar_budget_stops_claims_after_three_runs_until_the_day_turns() {
    budget_run(
        "claude",
        &format!("{CLAUDE}/success.stdout"),
        "usd_per_day = 0.03",
        3,
        "spend today $0.03 of $0.03",
    );
}

#[test]
fn a_daily_token_budget_stops_claims_after_three_runs_until_the_day_turns() {
    budget_run(
        "codex",
        &format!("{CODEX}/success.stdout"),
        "tokens_per_day = 5000",
        3,
        "spend today 6300 of 5000 tokens",
    );
}

/// An agent that fails on issue 3 only while the others succeed: issue 3 is quarantined
/// after exactly `worker.max_failed_attempts` runs, every other issue is done.
#[test]
fn a_poisoned_issue_among_healthy_ones_is_quarantined_after_exactly_k_runs() {
    let script = format!(
        "{RECORD_RUN}if [ \"$RED_AFK_ISSUE\" = 3 ]; then\n\
           cat \"$AFK_TEST_CORPUS/{CLAUDE}/max-turns.stdout\"\n\
           exit 1\n\
         fi\n\
         cat \"$AFK_TEST_CORPUS/{CLAUDE}/success.stdout\"\n"
    );
    let mut f = agent_fleet(
        "claude",
        &script,
        2,
        5,
        "[worker]\nmax_failed_attempts = 2\n",
    );
    f.start(&[]);
    let quarantined = wait_until(LONG, || {
        f.labels_of(3).iter().any(|l| l == "afk:quarantined")
    });
    assert!(quarantined, "log:\n{}", f.dump());
    assert!(wait_until(LONG, || [1, 2, 4, 5]
        .iter()
        .all(|&n| done(&f, n))));
    let poisoned = runs(&f).iter().filter(|r| r.0 == 3).count();
    assert_eq!(poisoned, 2, "exactly K runs of the poisoned issue");
    let o = outcomes(&f, 3);
    assert_eq!(
        o,
        [
            Outcome::AgentFailed(1),
            Outcome::AgentFailed(1),
            Outcome::Quarantined
        ]
    );
    for n in [1, 2, 4, 5] {
        assert!(!f.labels_of(n).iter().any(|l| l == "afk:quarantined"));
    }
}

/// An attempt stopped at the wall-clock cap printed its session; the next attempt resumes
/// its branch and, with the claude profile, its session: `--resume <id>`, and the prompt's
/// `{resume}` sentence names the branch.
#[test]
fn an_attempt_resuming_a_capped_branch_resumes_its_claude_session() {
    let script = format!(
        "{RECORD_RUN}if [ -z \"$RED_AFK_RESUME_BRANCH\" ]; then\n\
           head -n 1 \"$AFK_TEST_CORPUS/{CLAUDE}/success.stdout\"\n\
           exec sleep 30\n\
         fi\n\
         cat \"$AFK_TEST_CORPUS/{CLAUDE}/success.stdout\"\n"
    );
    let mut f = agent_fleet(
        "claude",
        &script,
        1,
        1,
        "[worker]\nmax_failed_attempts = 3\n",
    );
    let config = fleet::read(&f.repo.join(".red/afk-supervisor.toml")).replace(
        "stop_grace_s = 2\n",
        "stop_grace_s = 2\nattempt_max_s = 2\n",
    );
    f.write_config(&config);
    f.start(&[]);
    assert!(wait_until(LONG, || done(&f, 1)), "log:\n{}", f.dump());
    let records = ledger::read(&f.layout, 1).unwrap();
    assert_eq!(records[0].outcome, Outcome::WallClockCapped);
    let sid = claude_session();
    assert_eq!(records[0].usage.session_id.as_deref(), Some(sid.as_str()));
    let all_runs = fleet::read(&f.file("runs"));
    let branch = records[0].branch.clone().unwrap();
    assert!(
        all_runs.contains(&format!(
            "continues earlier work already on branch {branch}"
        )),
        "{all_runs}"
    );
    assert!(
        all_runs.contains(&format!("--verbose --resume {sid}\n")),
        "{all_runs}"
    );
    assert_eq!(
        all_runs.matches("--resume").count(),
        1,
        "only the resuming attempt: {all_runs}"
    );
}

/// An agent that fails on every issue (a broken install) is the fleet's problem, not the
/// issues': a failure while the agent fails on other issues too and finishes none is
/// excused, so no issue reaches its quarantine limit. The fleet's very first failure has
/// no other failure to be excused by, and a worker that ends a second attempt before the
/// other worker's first one ends is not excused either, so the limit is 3 (the default),
/// not 2, where that ordering alone could quarantine an issue.
#[test]
fn an_agent_failing_on_every_issue_quarantines_none_of_them() {
    let script = format!("{RECORD_RUN}echo 'claude: cannot load module' >&2\nexit 1\n");
    let mut f = agent_fleet(
        "claude",
        &script,
        2,
        4,
        "[worker]\nmax_failed_attempts = 3\n",
    );
    f.start(&[]);
    assert!(
        wait_until(LONG, || runs(&f).len() >= 8),
        "log:\n{}",
        f.dump()
    );
    let excused: usize = (1..=4)
        .map(|n| {
            ledger::read(&f.layout, n)
                .unwrap()
                .iter()
                .filter(|r| r.excused.is_some())
                .count()
        })
        .sum();
    assert!(excused > 0, "{}", f.dump());
    for n in 1..=4 {
        assert!(
            !f.labels_of(n).iter().any(|l| l == "afk:quarantined"),
            "#{n} quarantined: {:?}",
            outcomes(&f, n)
        );
    }
}

/// Whether issue `n` carries `label`.
fn has_label(f: &Fleet, n: u64, label: &str) -> bool {
    f.labels_of(n).iter().any(|l| l == label)
}

/// The comments of issue `n` that hand it to a person over its budget.
fn over_budget_comments(f: &Fleet, n: u64) -> Vec<String> {
    f.comments_of(n)
        .into_iter()
        .filter(|c| c.contains("(budget.usd_per_issue)"))
        .collect()
}

/// `budget.usd_per_issue = 0.03` and an agent that fails on issue 2 at the recorded run's
/// $0.01008 while the others succeed: after exactly 3 runs ($0.03024) issue 2 goes to a person with one
/// comment giving its spend and the budget, `ready-for-human` in place of `running` and
/// `ready-for-agent`, its ledger ending with `over-budget`; no fourth run follows, and the
/// other issues are done.
#[test]
fn an_issue_whose_failed_attempts_reach_its_budget_goes_to_a_person_after_three_runs() {
    let script = format!(
        "{RECORD_RUN}cat \"$AFK_TEST_CORPUS/{CLAUDE}/success.stdout\"\n\
         if [ \"$RED_AFK_ISSUE\" = 2 ]; then exit 1; fi\n"
    );
    let mut f = agent_fleet(
        "claude",
        &script,
        2,
        4,
        "[worker]\nmax_failed_attempts = 10\n\n[budget]\nusd_per_issue = 0.03\n",
    );
    f.start(&[]);
    assert!(
        wait_until(LONG, || outcomes(&f, 2).contains(&Outcome::OverBudget)),
        "log:\n{}",
        f.dump()
    );
    assert!(
        wait_until(LONG, || [1, 3, 4].iter().all(|&n| done(&f, n))),
        "log:\n{}",
        f.dump()
    );
    // Ticks pass with issue 2 handed over: no fourth run of it.
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 3);
    let issue_runs = runs(&f).iter().filter(|r| r.0 == 2).count();
    assert_eq!(issue_runs, 3, "exactly the runs that reach $0.03");
    assert_eq!(
        outcomes(&f, 2),
        [
            Outcome::AgentFailed(1),
            Outcome::AgentFailed(1),
            Outcome::AgentFailed(1),
            Outcome::OverBudget
        ]
    );
    assert!(has_label(&f, 2, "ready-for-human"), "{:?}", f.labels_of(2));
    assert!(!has_label(&f, 2, "ready-for-agent"), "{:?}", f.labels_of(2));
    assert!(!has_label(&f, 2, "running"), "{:?}", f.labels_of(2));
    let handed = over_budget_comments(&f, 2);
    assert_eq!(handed.len(), 1, "{:?}", f.comments_of(2));
    assert!(
        handed[0].contains("its attempts cost $0.03 over 3 run(s)")
            && handed[0].contains("the budget of $0.03 per issue"),
        "{}",
        handed[0]
    );
    for n in [1, 3, 4] {
        assert!(over_budget_comments(&f, n).is_empty(), "#{n}");
        assert!(!outcomes(&f, n).contains(&Outcome::OverBudget), "#{n}");
    }
}

/// A capped attempt that reaches `budget.usd_per_issue` hands the issue to a person at
/// once, not back to `ready-for-agent`: one comment (the spend, the budget and where the
/// capped attempt's work is), no capped comment, no second run; the other issue is done.
#[test]
fn a_capped_attempt_that_reaches_the_issue_budget_goes_to_a_person_not_the_queue() {
    let script = format!(
        "{RECORD_RUN}cat \"$AFK_TEST_CORPUS/{CLAUDE}/success.stdout\"\n\
         if [ \"$RED_AFK_ISSUE\" = 1 ]; then exec sleep 30; fi\n"
    );
    let mut f = agent_fleet("claude", &script, 1, 2, "[budget]\nusd_per_issue = 0.01\n");
    let config = fleet::read(&f.repo.join(".red/afk-supervisor.toml")).replace(
        "stop_grace_s = 2\n",
        "stop_grace_s = 2\nattempt_max_s = 2\n",
    );
    f.write_config(&config);
    f.start(&[]);
    assert!(
        wait_until(LONG, || outcomes(&f, 1).contains(&Outcome::OverBudget)
            && done(&f, 2)),
        "log:\n{}",
        f.dump()
    );
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 3);
    assert_eq!(runs(&f).iter().filter(|r| r.0 == 1).count(), 1);
    let records = ledger::read(&f.layout, 1).unwrap();
    let o: Vec<_> = records.iter().map(|r| r.outcome).collect();
    assert_eq!(o, [Outcome::WallClockCapped, Outcome::OverBudget]);
    assert_eq!(records[0].usage.cost_usd, Some(CLAUDE_RUN_USD));
    assert!(has_label(&f, 1, "ready-for-human"), "{:?}", f.labels_of(1));
    assert!(!has_label(&f, 1, "ready-for-agent"), "{:?}", f.labels_of(1));
    assert!(!has_label(&f, 1, "running"), "{:?}", f.labels_of(1));
    let comments = f.comments_of(1);
    assert_eq!(comments.len(), 1, "only the hand-off: {comments:?}");
    let branch = records[0].branch.clone().unwrap();
    assert!(
        comments[0].contains("its attempts cost $0.01 over 1 run(s)")
            && comments[0].contains("the budget of $0.01 per issue")
            && comments[0].contains(&format!("its work is on branch `{branch}`")),
        "{}",
        comments[0]
    );
}

/// Four workers of the real Claude profile on eight issues, a daily budget of 2.5 runs
/// (`budget_extra` added to `[budget]`), each agent held until `$AFK_TEST_DIR/go` exists.
fn gated_four_workers(budget_extra: &str) -> (Fleet, f64) {
    let gate = "i=0\nwhile [ ! -e \"$AFK_TEST_DIR/go\" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n";
    let script = format!("{RECORD_RUN}{gate}cat \"$AFK_TEST_CORPUS/{CLAUDE}/success.stdout\"\n");
    let budget = CLAUDE_RUN_USD * 2.5;
    let f = agent_fleet(
        "claude",
        &script,
        4,
        8,
        &format!("[budget]\nusd_per_day = {budget}\n{budget_extra}"),
    );
    (f, budget)
}

/// Issue 48, item 4: a daily budget holds with N workers. Four workers, a budget of two
/// and a half recorded runs (`usd_per_day = 0.0252` at $0.01008 a run, the arithmetic of
/// $1.00 at $0.40), and `estimate_usd` the run's cost (the ledger has no history yet).
/// The agent holds every run open until the test lets it go, so all four workers check
/// the budget while nothing is spent: without reservations each would claim (four runs,
/// $0.04032); with them three claim, the fourth waits for them to settle, and the day
/// ends at three runs ($0.03024, under the budget plus one run). `status` and `spend`
/// show the reservations apart from the spend while the runs are open.
#[test]
fn four_workers_reserve_the_daily_budget_so_it_overshoots_by_at_most_one_run() {
    let (mut f, budget) = gated_four_workers(&format!("estimate_usd = {CLAUDE_RUN_USD}\n"));
    f.start(&[]);
    assert!(wait_until(LONG, || runs(&f).len() >= 3), "{}", f.dump());
    // The fourth worker met the reservations and waits; it claimed nothing.
    assert!(
        wait_until(LONG, || f
            .slot_logs()
            .contains("daily budget held by running attempts")),
        "{}\n{}",
        f.slot_logs(),
        f.dump()
    );
    assert_eq!(runs(&f).len(), 3, "{}", f.dump());
    let text = f.wait_status_line(|l| {
        l.starts_with("spend today $0.00 of $0.03; reserved $0.03 for 3 running attempts")
    });
    assert!(
        text.contains("reserved $0.03 for 3 running attempts"),
        "{text}"
    );
    let out = f.run_cmd(&["spend", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["reserved"]["attempts"], 3, "{v}");
    assert!((v["reserved"]["usd"].as_f64().unwrap() - 3.0 * CLAUDE_RUN_USD).abs() < 1e-9);
    assert_eq!(v["total"]["runs"], 0, "{v}");
    let plain = f.run_cmd(&["spend"]);
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("reserved $0.03 for 3 running attempts"),
        "{plain:?}"
    );
    // The runs end: their cost settles in the ledger, the day's budget is reached.
    fs::write(f.file("go"), "").unwrap();
    let reached = f.wait_events(Kind::FleetBudgetReached, 1);
    assert!(
        reached[0].msg.contains("spend today $0.03 of $0.03"),
        "{}",
        reached[0].msg
    );
    let ticks = f.count(Kind::SupervisorTick);
    f.wait_events(Kind::SupervisorTick, ticks + 3);
    let n_runs = runs(&f).len();
    let v: serde_json::Value =
        serde_json::from_slice(&f.run_cmd(&["spend", "--json"]).stdout).unwrap();
    let spent = v["total"]["usd"].as_f64().unwrap();
    eprintln!(
        "4 workers, budget ${budget:.5}: runs {n_runs}, spend ${spent:.5}, reserved {}",
        v["reserved"]
    );
    assert_eq!(n_runs, 3, "{}", f.dump());
    assert!(spent <= budget + CLAUDE_RUN_USD + 1e-9, "{v}");
    assert_eq!(v["reserved"]["attempts"], 0, "{v}");
}

/// The same fleet with nothing to reserve (no `estimate_usd` and no history): every worker
/// claims while nothing is spent, and the day overshoots by at least a run per extra
/// worker, as it did before reservations (and as the docs say it still does without an
/// estimate; the first run to end may even start a fifth, reserved against none of them).
#[test]
fn four_workers_with_nothing_to_reserve_overshoot_by_a_run_each() {
    let (mut f, budget) = gated_four_workers("");
    f.start(&[]);
    assert!(wait_until(LONG, || runs(&f).len() >= 4), "{}", f.dump());
    fs::write(f.file("go"), "").unwrap();
    f.wait_events(Kind::FleetBudgetReached, 1);
    let spend = || -> serde_json::Value {
        serde_json::from_slice(&f.run_cmd(&["spend", "--json"]).stdout).unwrap()
    };
    // Every run started has ended in the ledger.
    assert!(
        wait_until(LONG, || spend()["total"]["runs"] == runs(&f).len() as u64),
        "{}",
        spend()
    );
    let v = spend();
    let spent = v["total"]["usd"].as_f64().unwrap();
    eprintln!(
        "4 workers, nothing reserved, budget ${budget:.5}: runs {}, spend ${spent:.5}",
        runs(&f).len()
    );
    assert!(runs(&f).len() >= 4, "{}", f.dump());
    assert!(spent > budget + CLAUDE_RUN_USD, "{v}");
}
