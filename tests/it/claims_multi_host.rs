//! Claims across checkouts (SPEC §11.5): three supervisors on three clones of one origin,
//! two built-in workers each, one fake `gh` store shared by all, twelve issues.
//!
//! The stand-in agent records every run in `runs/log` (`start N PID HOST`, `end N PID`)
//! and notes in `runs/overlaps` any run that found another live run of the same issue.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use afk_supervisor::claim::marks::{Event, Mark};
use afk_supervisor::layout::Layout;

use crate::support::fake_gh::FakeGh;
use crate::support::{TestEnv, hosts, wait_until};
use afk_supervisor::event_log::Kind;

const ISSUES: u64 = 12;
/// A bound on waiting, not a speed claim: with a fifth of tracker calls failing, every label
/// edit may be retried and settled by a re-read (SPEC §11.5), and a loaded 2-core CI box runs
/// three supervisors' worth of fake `gh` processes.
const DEADLINE: Duration = Duration::from_secs(240);

const AGENT: &str = r#"
d="$AFK_TEST_RUNS"; n="$RED_AFK_ISSUE"
mkdir -p "$d/$n"
for f in "$d/$n"/*; do
  [ -e "$f" ] || continue
  if kill -0 "$(basename "$f")" 2>/dev/null; then echo "$n" >> "$d/overlaps"; fi
done
echo $$ > "$d/$n/$$"
echo "start $n $$ $AFK_HOST" >> "$d/log"
sleep "${AFK_AGENT_S:-1}"
echo "end $n $$" >> "$d/log"
"#;

struct Hosts {
    env: TestEnv,
    gh: FakeGh,
    clones: Vec<PathBuf>,
    tag: String,
    sups: Vec<Child>,
}

impl Hosts {
    fn new(stale_after_s: u64) -> Hosts {
        let env = TestEnv::new();
        let clones = hosts::clones(&env, 3);
        let agent = env.path().join("agent.sh");
        fs::write(&agent, AGENT).unwrap();
        fs::create_dir_all(env.path().join("runs")).unwrap();
        // The write pace and GitHub's write limits are fleet_limits.rs's: here both are set
        // far above what these runs write (with a fifth of the calls failing and retried),
        // so the claims are measured at full speed.
        for c in &clones {
            fs::create_dir_all(c.join(".red")).unwrap();
            let config = format!(
                "[fleet]\nworkers = 2\n\n[agent]\ncommand = [\"sh\", \"{}\"]\n{}\n\
                 [tracker]\nkind = \"gh\"\nrepo = \"fake-owner/fake-repo\"\ntimeout_s = 20\n\
                 max_writes_per_min = 600\n\n\
                 [timing]\ntick_s = 1\nfast_death_s = 1\ncircuit_k = 1000\ncircuit_window_s = 60\n\
                 half_open_base_s = 1\nhalf_open_cap_s = 2\nstop_grace_s = 2\n\
                 unblock_interval_s = 3600\n\n[claims]\nstale_after_s = {stale_after_s}\n",
                agent.display(),
                // The agent reports as its host (`AFK_HOST`) for as long as it is told.
                "sandbox = \"none\"\nenv = [\"AFK_TEST_*\", \"AFK_HOST\", \"AFK_AGENT_S\"]\n"
            );
            fs::write(c.join(".red/afk-supervisor.toml"), config).unwrap();
        }
        let gh = hosts::gh_with_tasks(&env, ISSUES);
        gh.set_write_limits(600, 5000, 60.0, 3600.0);
        let tag = hosts::run_tag(&env);
        Hosts {
            env,
            gh,
            clones,
            tag,
            sups: Vec::new(),
        }
    }

    fn host_tag(&self, i: usize) -> String {
        format!("{}-h{i}", self.tag)
    }

    /// Starts the supervisor of clone `i`; `agent_s` is how long its agent runs.
    fn start(&mut self, i: usize, agent_s: u64) {
        let child = hosts::start_supervisor(
            &self.env,
            &self.gh,
            &self.host_tag(i),
            i,
            &self.clones[i],
            agent_s,
            None,
        );
        self.sups.push(child);
    }

    fn kill_host(&self, i: usize) {
        hosts::kill_tagged(&self.host_tag(i));
    }

    fn log(&self) -> String {
        fs::read_to_string(self.env.path().join("runs/log")).unwrap_or_default()
    }

    /// `(issue, host)` of every started run, and the issues of every finished run.
    fn runs(&self) -> (Vec<(u64, String)>, BTreeMap<u64, usize>) {
        let (mut started, mut ended) = (Vec::new(), BTreeMap::new());
        for line in self.log().lines() {
            let w: Vec<&str> = line.split(' ').collect();
            match w.as_slice() {
                ["start", n, _, host] => started.push((n.parse().unwrap(), host.to_string())),
                ["end", n, _] => *ended.entry(n.parse().unwrap()).or_default() += 1,
                _ => panic!("bad run record {line:?}"),
            }
        }
        (started, ended)
    }

    fn all_handed_off(&self) -> bool {
        let issues = self.gh.issues();
        issues.len() == ISSUES as usize
            && issues.iter().all(|i| {
                i.labels == ["ready-for-human"]
                    && matches!(i.standing().last, Some((Event::HandedOff, _)))
            })
    }

    fn wait_done(&self) {
        let ok = wait_until(DEADLINE, || self.all_handed_off());
        assert!(ok, "not every issue handed off:\n{}", self.dump());
    }

    fn dump(&self) -> String {
        hosts::dump(self.env.path(), &self.log(), &self.gh, &self.clones)
    }

    fn overlaps(&self) -> String {
        fs::read_to_string(self.env.path().join("runs/overlaps")).unwrap_or_default()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for i in 0..self.clones.len() {
            self.kill_host(i);
        }
        for c in &mut self.sups {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The kind of one gh call, or a panic for an argv outside SPEC §7 and §11.5.
fn kind(argv: &[String]) -> &'static str {
    let a: Vec<&str> = argv.iter().map(String::as_str).collect();
    let a: Vec<&str> = match a.iter().position(|x| *x == "--repo") {
        Some(i) => [&a[..i], &a[i + 2..]].concat(),
        None => a,
    };
    match a.as_slice() {
        ["auth", "status"] => "auth",
        // The fleet's own login, whose marks count (SPEC §11.5): once per process.
        ["api", "user"] => "viewer",
        [
            "issue",
            "list",
            "--state",
            "all",
            "--limit",
            _,
            "--json",
            "number,state,labels,closedAt",
        ] => "list-all",
        [
            "issue",
            "list",
            "--label",
            "ready-for-agent",
            "--state",
            "open",
            "--limit",
            "200",
            "--search",
            "sort:created-asc",
            "--json",
            "number,body,labels",
        ] => "queue",
        [
            "issue",
            "list",
            "--label",
            l,
            "--state",
            "open",
            "--limit",
            _,
            "--json",
            "number,body,labels",
        ] if ["ready-for-agent", "running", "blocked:dependency"].contains(l) => "list-label",
        // The supervisor's quarantine count, at most once a minute (SPEC §7).
        [
            "issue",
            "list",
            "--label",
            "afk:quarantined",
            "--state",
            "open",
            "--limit",
            _,
            "--json",
            "number,body,labels",
        ] => "list-quarantined",
        ["issue", "view", _, "--json", "state,labels"] => "view",
        // Whose words each claimed issue is, and the held issues' listing (SPEC §11.20).
        ["api", "graphql", ..] => "provenance",
        [
            "issue",
            "list",
            "--label",
            "afk:needs-approval",
            "--state",
            "open",
            "--limit",
            "200",
            "--json",
            "number,updatedAt",
        ] => "list-held",
        ["issue", "view", _, "--json", "state,labels,comments"] => "thread",
        ["issue", "edit", _, "--add-label", _, "--remove-label", _] => "edit",
        ["issue", "edit", _, "--remove-label", _] => "edit",
        ["issue", "comment", _, "--body", body] => match Mark::parse(body) {
            Some(Mark::Claim { .. }) => "claim-mark",
            Some(Mark::Yielded { .. }) => "yield-mark",
            _ => "comment",
        },
        // The fleet's labels, once per supervisor start (SPEC §7).
        ["label", "list", "--limit", "1000", "--json", "name"] => "labels",
        _ => panic!("gh argv outside the documented set: {argv:?}"),
    }
}

fn call_counts(gh: &FakeGh) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for c in gh.calls() {
        *m.entry(kind(&c)).or_default() += 1;
    }
    m
}

/// Every issue finished exactly once, none overlapping, all `ready-for-human`.
fn assert_once_each(h: &Hosts) {
    let (_, ended) = h.runs();
    for n in 1..=ISSUES {
        assert_eq!(ended.get(&n), Some(&1), "#{n} finished runs\n{}", h.dump());
    }
    assert_eq!(h.overlaps(), "", "{}", h.dump());
}

fn run_three(h: &mut Hosts) {
    for i in 0..3 {
        h.start(i, 1);
    }
    h.wait_done();
}

#[test]
fn three_hosts_work_every_issue_exactly_once() {
    let mut h = Hosts::new(3600);
    run_three(&mut h);
    assert_once_each(&h);
    let (started, _) = h.runs();
    assert_eq!(started.len(), ISSUES as usize, "{}", h.dump());
    let calls = call_counts(&h.gh);
    let marks = calls.get("claim-mark").copied().unwrap_or(0);
    let yields = calls.get("yield-mark").copied().unwrap_or(0);
    let threads = calls.get("thread").copied().unwrap_or(0);
    // Every claim mark is followed by one read, and every lost claim by one yield: a won
    // claim costs two calls more than before, a lost one three.
    assert_eq!(marks, ISSUES as usize + yields, "{calls:?}");
    assert_eq!(threads, marks, "{calls:?}");
    let extra = marks + threads + yields;
    assert!(
        extra <= 2 * ISSUES as usize + 3 * yields,
        "claim cost {extra} for {ISSUES} issues: {calls:?}"
    );
    let total: usize = calls.values().sum();
    eprintln!(
        "calls: {calls:?}; total {total}, {:.1} per issue; claim marks {marks}, lost {yields}",
        total as f64 / ISSUES as f64
    );
    // Every issue ends with its claim ended by the hand-off (the wait above).
}

#[test]
fn a_tracker_failing_a_fifth_of_calls_still_works_each_issue_once() {
    let mut h = Hosts::new(4);
    h.gh.set_chaos(Some((0.2, 15)));
    run_three(&mut h);
    let failed = h.gh.chaos_failures();
    h.gh.set_chaos(None);
    assert_once_each(&h);
    assert!(failed > 10, "only {failed} calls failed");
    eprintln!("chaos failed {failed} calls: {:?}", call_counts(&h.gh));
    let _ = call_counts(&h.gh);
}

#[test]
fn a_killed_hosts_issue_is_taken_over_after_the_stale_age() {
    let mut h = Hosts::new(4);
    // Host 0's agent runs long enough to be killed mid-issue.
    h.start(0, 600);
    let ok = wait_until(DEADLINE, || h.runs().0.iter().any(|(_, host)| host == "h0"));
    assert!(ok, "host 0 never started an agent\n{}", h.dump());
    h.kill_host(0);
    let killed: Vec<u64> = h
        .runs()
        .0
        .iter()
        .filter(|(_, host)| host == "h0")
        .map(|(n, _)| *n)
        .collect();
    h.start(1, 1);
    h.start(2, 1);
    h.wait_done();
    assert_once_each(&h);
    let (started, _) = h.runs();
    for n in 1..=ISSUES {
        let runs = started.iter().filter(|(m, _)| *m == n).count();
        let want = if killed.contains(&n) { 2 } else { 1 };
        assert_eq!(runs, want, "#{n} runs\n{}", h.dump());
    }
    for n in &killed {
        let issue = h.gh.issue(*n).unwrap();
        assert!(
            issue
                .comments
                .iter()
                .any(|c| matches!(Mark::parse(&c.body), Some(Mark::Takeover { .. }))),
            "#{n} has no takeover mark\n{}",
            h.dump()
        );
    }
    // The effective takeover of each issue host 0 held (its agents' and any it had claimed
    // but not started) says, once, that host 0 is presumed lost (what a `host-lost`
    // notification is made of, docs/SPEC.md §11.21).
    let lost_host = afk_supervisor::claim::tracked::this_host(&Layout::new(&h.clones[0]));
    let lost: Vec<afk_supervisor::event_log::Record> = h.clones[1..]
        .iter()
        .flat_map(|c| {
            afk_supervisor::event_log::read_events(&Layout::new(c).event_log()).unwrap_or_default()
        })
        .filter(|e| e.kind == Kind::ClaimsHostLost)
        .collect();
    let mut issues: Vec<u64> = lost.iter().filter_map(|e| e.issue).collect();
    issues.sort();
    let told = issues.len();
    issues.dedup();
    assert_eq!(told, issues.len(), "an issue told twice: {lost:?}");
    assert!(
        killed.iter().all(|n| issues.contains(n)),
        "{killed:?}: {lost:?}"
    );
    assert!(
        lost.iter().all(|e| e
            .msg
            .starts_with(&format!("host {lost_host} presumed lost: its claim on #"))),
        "{lost:?}"
    );
    let _ = call_counts(&h.gh);
}
