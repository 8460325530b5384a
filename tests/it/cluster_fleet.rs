//! `[cluster]` (`docs/SPEC.md` §11.23): three supervisors on three clones of one origin,
//! two built-in workers each, one fake `gh` shared by all, claims in a real 3-member etcd
//! with a 2 s lease. Each fault in its own test (a host or an etcd member cut off runs in a
//! network namespace, `support::netns`, whose link the test takes down); the properties are
//! read from what the runs and the tracker recorded:
//! - no two agents ever work one issue at once (each run's start and end, in epoch ms,
//!   checked for overlap; and each run looks for a live run of its issue as it starts),
//! - every issue is handed off once,
//! - a lost host's issues are back to `ready-for-agent` within the lease TTL + 2 s of the
//!   fault (the tracker's own time stamps of the restore, against the test's fault time).

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use crate::support::etcd::EtcdCluster;
use crate::support::fake_gh::FakeGh;
use crate::support::netns::Netns;
use crate::support::{TestEnv, hosts, wait_until};
use afk_supervisor::event_log::Kind;

/// The lease of every test here: short, so the faults are seconds long. The figures of a
/// real default lease are measured by hand with `AFK_CLUSTER_TEST_LEASE_S=12` (every bound
/// below scales with it).
fn lease_s() -> u64 {
    std::env::var("AFK_CLUSTER_TEST_LEASE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}
/// The tick of every fleet here.
const TICK_MS: u64 = 1000;
/// A bound on waiting, not a speed claim: a loaded 2-core box runs three supervisors,
/// six workers and three etcd members.
const DEADLINE: Duration = Duration::from_secs(240);

const AGENT: &str = r#"
d="$AFK_TEST_RUNS"; n="$RED_AFK_ISSUE"
now() { date +%s%3N; }
trap 'echo "end $n $$ $(now) stopped" >> "$d/log"; exit 143' TERM
mkdir -p "$d/$n"
for f in "$d/$n"/*; do
  [ -e "$f" ] || continue
  if kill -0 "$(basename "$f")" 2>/dev/null; then echo "$n" >> "$d/overlaps"; fi
done
echo $$ > "$d/$n/$$"
echo "start $n $$ $(now) $AFK_HOST" >> "$d/log"
if [ -e "$d/limited-$AFK_HOST" ]; then
  # The account ran out on this host: a usage limit with its reset, as the CLIs report it.
  echo "{\"kind\":\"usage-limit\",\"reset_epoch\":$(( $(date +%s) + 60 ))}" > "$RED_AFK_RESULT_FILE"
  echo "end $n $$ $(now) limited" >> "$d/log"
  exit 75
fi
sleep "$(cat "$d/agent_s" 2>/dev/null || echo "${AFK_AGENT_S:-1}")" &
wait $!
echo "end $n $$ $(now) done" >> "$d/log"
"#;

/// The hand-off comment's words (`worker::texts::finished`).
const FINISHED: &str = "/afk finished attempt";

/// One agent run as the runs log tells it.
#[derive(Debug, Clone)]
struct Run {
    issue: u64,
    pid: u64,
    host: String,
    start_ms: u64,
    end_ms: Option<u64>,
}

/// What a test runs in a network namespace of its own, to cut it off the network.
enum CutOff {
    Nothing,
    /// Host `.0`, in namespace `.1`: it reaches the etcd members on the link's root end.
    Host(usize, Netns),
    /// etcd member `.0` (`EtcdCluster::start_with_member_in_netns`).
    EtcdMember(usize),
}

struct Hosts {
    /// Dropped (killed) before the temp dir that holds its data.
    etcd: EtcdCluster,
    /// The host in a network namespace, if one is: deleted after etcd's members, which
    /// listen on its link too, and after every host's processes (`Drop for Hosts`).
    netns: Option<(usize, Netns)>,
    env: TestEnv,
    gh: FakeGh,
    clones: Vec<PathBuf>,
    tag: String,
    sups: Vec<Option<Child>>,
    issues: u64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

impl Hosts {
    fn new(hosts: usize, workers: usize, issues: u64) -> Hosts {
        Hosts::with_lease(hosts, workers, issues, lease_s())
    }

    fn with_lease(hosts: usize, workers: usize, issues: u64, lease_s: u64) -> Hosts {
        Hosts::with(
            hosts,
            workers,
            issues,
            lease_s,
            3600,
            "max_writes_per_min = 600\n",
        )
    }

    /// `unblock_s`: the unblock belt's interval; `tracker`: the `[tracker]` lines beside the
    /// kind, the repo and the timeout.
    fn with(
        hosts: usize,
        workers: usize,
        issues: u64,
        lease_s: u64,
        unblock_s: u64,
        tracker: &str,
    ) -> Hosts {
        Hosts::with_agent(
            hosts,
            workers,
            issues,
            lease_s,
            unblock_s,
            tracker,
            AGENT,
            "",
            CutOff::Nothing,
        )
    }

    /// [`Hosts::new`] with `cut_off` (a host, or an etcd member) in a network namespace of
    /// its own, whose link the test can cut ([`Hosts::netns`], [`EtcdCluster::cut`]).
    fn cut_off(hosts: usize, workers: usize, issues: u64, lease_s: u64, cut_off: CutOff) -> Hosts {
        let (tracker, agent) = ("max_writes_per_min = 600\n", AGENT);
        Hosts::with_agent(
            hosts, workers, issues, lease_s, 3600, tracker, agent, "", cut_off,
        )
    }

    /// `agent`: the stand-in agent's shell text; `extra`: config tables after the others;
    /// `cut_off`: what runs in a network namespace of its own.
    #[allow(clippy::too_many_arguments)]
    fn with_agent(
        hosts: usize,
        workers: usize,
        issues: u64,
        lease_s: u64,
        unblock_s: u64,
        tracker: &str,
        agent_text: &str,
        extra: &str,
        cut_off: CutOff,
    ) -> Hosts {
        let env = TestEnv::new();
        let etcd = match &cut_off {
            CutOff::Nothing => EtcdCluster::start(env.path()),
            CutOff::Host(_, ns) => EtcdCluster::start_reachable_from(env.path(), &[ns.host_addr]),
            CutOff::EtcdMember(i) => EtcdCluster::start_with_member_in_netns(env.path(), *i),
        };
        let netns = match cut_off {
            CutOff::Host(i, ns) => Some((i, ns)),
            _ => None,
        };
        let clones = hosts::clones(&env, hosts);
        let agent = env.path().join("agent.sh");
        fs::write(&agent, agent_text).unwrap();
        fs::create_dir_all(env.path().join("runs")).unwrap();
        for (i, c) in clones.iter().enumerate() {
            let cluster = match &netns {
                Some((at, ns)) if *at == i => etcd.config_at(ns.host_addr, lease_s),
                _ => etcd.config(lease_s),
            };
            fs::create_dir_all(c.join(".red")).unwrap();
            let config = format!(
                "[fleet]\nworkers = {workers}\n\n[agent]\ncommand = [\"sh\", \"{}\"]\n\
                 sandbox = \"none\"\nenv = [\"AFK_TEST_*\", \"AFK_HOST\", \"AFK_AGENT_S\"]\n\n\
                 [tracker]\nkind = \"gh\"\nrepo = \"fake-owner/fake-repo\"\ntimeout_s = 20\n\
                 {tracker}\n\
                 [timing]\ntick_s = 1\nfast_death_s = 1\ncircuit_k = 1000\ncircuit_window_s = 60\n\
                 half_open_base_s = 1\nhalf_open_cap_s = 2\nstop_grace_s = 2\n\
                 unblock_interval_s = {unblock_s}\n\n{}\n{extra}",
                agent.display(),
                cluster
            );
            fs::write(c.join(".red/afk-supervisor.toml"), config).unwrap();
        }
        let gh = hosts::gh_with_tasks(&env, issues);
        let tag = hosts::run_tag(&env);
        Hosts {
            env,
            etcd,
            netns,
            gh,
            clones,
            tag,
            sups: Vec::new(),
            issues,
        }
    }

    fn host_tag(&self, i: usize) -> String {
        format!("{}-h{i}", self.tag)
    }

    /// Starts the supervisor of clone `i` (in its network namespace if it has one); its
    /// agents run `agent_s` seconds.
    fn start(&mut self, i: usize, agent_s: u64) {
        let child = hosts::start_supervisor(
            &self.env,
            &self.gh,
            &self.host_tag(i),
            i,
            &self.clones[i],
            agent_s,
            self.netns
                .as_ref()
                .filter(|(at, _)| *at == i)
                .map(|(_, ns)| ns),
        );
        if self.sups.len() <= i {
            self.sups.resize_with(i + 1, || None);
        }
        self.sups[i] = Some(child);
    }

    /// The namespace the cut-off host runs in.
    fn netns(&self) -> &Netns {
        &self
            .netns
            .as_ref()
            .expect("a host in a network namespace")
            .1
    }

    /// SIGKILLs every process of host `i` (its supervisor, workers and agents).
    fn kill_host(&mut self, i: usize) {
        hosts::kill_tagged(&self.host_tag(i));
        if let Some(mut c) = self.sups.get_mut(i).and_then(Option::take) {
            let _ = c.wait();
        }
    }

    /// Sends `sig` to host `i`'s supervisor only (not its workers or agents).
    fn signal_supervisor(&self, i: usize, sig: nix::sys::signal::Signal) {
        let pid = self.sups[i].as_ref().unwrap().id() as i32;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).unwrap();
    }

    /// From now on every agent run (a new one) lasts `secs`.
    fn agent_runs(&self, secs: u64) {
        fs::write(self.env.path().join("runs/agent_s"), secs.to_string()).unwrap();
    }

    /// Host `i`'s event log.
    fn event_log(&self, i: usize) -> String {
        let log = self.clones[i].join(".red/tmp/supervisors/default/supervisor.log.toonl");
        fs::read_to_string(log).unwrap_or_default()
    }

    fn log(&self) -> String {
        fs::read_to_string(self.env.path().join("runs/log")).unwrap_or_default()
    }

    fn runs(&self) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for line in self.log().lines() {
            let w: Vec<&str> = line.split(' ').collect();
            match w.as_slice() {
                ["start", n, pid, ms, host] => runs.push(Run {
                    issue: n.parse().unwrap(),
                    pid: pid.parse().unwrap(),
                    host: host.to_string(),
                    start_ms: ms.parse().unwrap(),
                    end_ms: None,
                }),
                ["end", n, pid, ms, _] => {
                    let (n, pid): (u64, u64) = (n.parse().unwrap(), pid.parse().unwrap());
                    if let Some(r) = runs.iter_mut().find(|r| r.issue == n && r.pid == pid) {
                        r.end_ms = Some(ms.parse().unwrap());
                    }
                }
                _ => panic!("bad run record {line:?}"),
            }
        }
        runs
    }

    fn all_handed_off(&self) -> bool {
        let issues = self.gh.issues();
        issues.len() == self.issues as usize
            && issues.iter().all(|i| {
                // The hand-off's labels, then its comment.
                i.labels == ["ready-for-human"]
                    && i.comments.iter().any(|c| c.body.contains(FINISHED))
            })
    }

    fn wait_done(&self) {
        let ok = wait_until(DEADLINE, || self.all_handed_off());
        assert!(ok, "not every issue handed off:\n{}", self.dump());
    }

    fn dump(&self) -> String {
        hosts::dump(self.env.path(), &self.log(), &self.gh, &self.clones)
    }

    /// The tracker's time (epoch ms) of each give-back of issue `n` to the queue.
    fn restores(&self, n: u64) -> Vec<u64> {
        self.stamps(&[
            "issue",
            "edit",
            &n.to_string(),
            "--add-label",
            "ready-for-agent",
        ])
    }

    /// The tracker's time (epoch ms) of each restore comment on issue `n`: the give-back
    /// has begun (found, guarded, the issue read).
    fn restore_comments(&self, n: u64) -> Vec<u64> {
        self.stamps(&["issue", "comment", &n.to_string(), "--body"])
    }

    /// The tracker's times (epoch ms) of the calls whose argv starts with `prefix` (a
    /// comment: only the restore's).
    fn stamps(&self, prefix: &[&str]) -> Vec<u64> {
        self.gh
            .stamped_calls()
            .into_iter()
            .filter(|(_, a)| {
                let a: Vec<&str> = a.iter().map(String::as_str).collect();
                a.starts_with(prefix)
                    && (prefix[1] != "comment"
                        || a.iter().any(|b| b.contains("orchestrator died mid-issue")))
            })
            .map(|(t, _)| (t * 1000.0) as u64)
            .collect()
    }

    /// The properties every fault keeps: each issue handed off once by one finished run,
    /// and no two runs of one issue at once.
    fn assert_once_each_no_overlap(&self, stopped_at: &BTreeMap<String, u64>) {
        let runs = self.runs();
        for n in 1..=self.issues {
            let finished = self
                .log()
                .lines()
                .filter(|l| l.starts_with(&format!("end {n} ")) && l.ends_with(" done"))
                .count();
            assert_eq!(finished, 1, "#{n} finished runs\n{}", self.dump());
            let handoffs = (self.gh.issue(n).unwrap().comments.iter())
                .filter(|c| c.body.contains(FINISHED))
                .count();
            assert_eq!(handoffs, 1, "#{n} hand-offs\n{}", self.dump());
            let mut mine: Vec<&Run> = runs.iter().filter(|r| r.issue == n).collect();
            mine.sort_by_key(|r| r.start_ms);
            for pair in mine.windows(2) {
                // A run with no end line was killed with its host: it ended then.
                let end = pair[0]
                    .end_ms
                    .or_else(|| stopped_at.get(&pair[0].host).copied())
                    .unwrap_or(u64::MAX);
                assert!(
                    end <= pair[1].start_ms,
                    "#{n}: runs overlap: {:?} and {:?}\n{}",
                    pair[0],
                    pair[1],
                    self.dump()
                );
            }
        }
        let overlaps =
            fs::read_to_string(self.env.path().join("runs/overlaps")).unwrap_or_default();
        assert_eq!(overlaps, "", "{}", self.dump());
    }
}

impl Hosts {
    /// A lost host's issue is being given back within the lease and 2 s of the fault (its
    /// lease runs out, etcd's expiry check, the belt's pass, the guard and the read), back
    /// in the queue a tick later at most (the comment, then the labels), and runs again
    /// within 2 s more (the idle slots wake at the queue check).
    fn assert_recovery(&self, figures: &[(u64, u64, u64, u64)]) {
        for (n, began, back, again) in figures {
            assert!(
                *began <= lease_s() * 1000 + 2000,
                "#{n}'s give-back began {began} ms after the fault, past the lease + 2 s\n{}",
                self.dump()
            );
            // Then its label change, a tracker call or two later.
            assert!(
                *back <= lease_s() * 1000 + 2000 + TICK_MS,
                "#{n} back {back} ms after the fault, past the lease + a tick + 2 s\n{}",
                self.dump()
            );
            assert!(
                *again <= lease_s() * 1000 + 2000 + TICK_MS + 2000,
                "#{n} ran again {again} ms after the fault\n{}",
                self.dump()
            );
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for i in 0..self.clones.len() {
            if self.sups.get(i).is_some_and(Option::is_some) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(self.sups[i].as_ref().unwrap().id() as i32),
                    nix::sys::signal::Signal::SIGCONT,
                );
            }
            self.kill_host(i);
        }
    }
}

/// The issues host `h` was running: started there, with no end.
fn running_on(h: &Hosts, host: &str) -> Vec<u64> {
    h.runs()
        .iter()
        .filter(|r| r.host == host && r.end_ms.is_none())
        .map(|r| r.issue)
        .collect()
}

/// Starts host 0 with agents that run until stopped and waits until it runs two.
fn host_0_busy(h: &mut Hosts) {
    h.start(0, 600);
    let ok = wait_until(DEADLINE, || running_on(h, "h0").len() == 2);
    assert!(ok, "host 0 never ran two agents\n{}", h.dump());
}

/// The test's issues not in `these`.
fn all_but(h: &Hosts, these: &[u64]) -> Vec<u64> {
    (1..=h.issues).filter(|n| !these.contains(n)).collect()
}

/// Whether every issue of `these` is handed to a person (`ready-for-human`).
fn with_a_person(h: &Hosts, these: &[u64]) -> bool {
    these.iter().all(|&n| {
        h.gh.issue(n)
            .is_some_and(|i| i.labels == ["ready-for-human"])
    })
}

/// For each issue in `lost`: ms from `fault_ms` to its give-back's first write (the restore
/// comment), to the give-back's end (`ready-for-agent`), and to its next run's start.
fn recovery(h: &Hosts, lost: &[u64], fault_ms: u64) -> Vec<(u64, u64, u64, u64)> {
    lost.iter()
        .map(|&n| {
            let began = h
                .restore_comments(n)
                .into_iter()
                .find(|&t| t >= fault_ms)
                .unwrap_or_else(|| panic!("#{n} never given back\n{}", h.dump()));
            let back = h
                .restores(n)
                .into_iter()
                .find(|&t| t >= fault_ms)
                .unwrap_or_else(|| panic!("#{n} never given back\n{}", h.dump()));
            let again = h
                .runs()
                .iter()
                .filter(|r| r.issue == n && r.start_ms >= back)
                .map(|r| r.start_ms)
                .min()
                .unwrap_or_else(|| panic!("#{n} never ran again\n{}", h.dump()));
            (n, began - fault_ms, back - fault_ms, again - fault_ms)
        })
        .collect()
}

#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn a_killed_hosts_issues_are_back_within_the_lease_and_none_runs_twice_at_once() {
    let mut h = Hosts::new(3, 2, 6);
    // Host 0's agents run long enough to be killed mid-issue; the others' briefly, and
    // they are idle when host 0 dies, so its issues' restart measures the recovery, not
    // the queue.
    host_0_busy(&mut h);
    h.start(1, 1);
    h.start(2, 1);
    let lost = running_on(&h, "h0");
    let others = all_but(&h, &lost);
    let others_done = wait_until(DEADLINE, || with_a_person(&h, &others));
    assert!(others_done, "{}", h.dump());
    let fault_ms = now_ms();
    h.kill_host(0);
    h.wait_done();
    h.assert_once_each_no_overlap(&BTreeMap::from([("h0".to_string(), fault_ms)]));
    let figures = recovery(&h, &lost, fault_ms);
    eprintln!(
        "SIGKILL host 0 (lease {}s): (issue, ms to the give-back's comment, to ready-for-agent, to its next run) {figures:?}",
        lease_s()
    );
    h.assert_recovery(&figures);
    // The leader tells a person the host is lost: one record per issue it held.
    let told: usize = (1..=2)
        .map(|i| {
            h.event_log(i)
                .lines()
                .filter(|l| l.contains(Kind::ClaimsHostLost.as_str()) && l.contains("lease ended"))
                .count()
        })
        .sum();
    assert_eq!(told, lost.len(), "{}", h.dump());
}

#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn a_supervisor_stopped_past_its_lease_stops_its_own_agents_before_another_host_starts() {
    let mut h = Hosts::new(3, 2, 6);
    host_0_busy(&mut h);
    let lost = running_on(&h, "h0");
    h.start(1, 2);
    h.start(2, 2);
    // The supervisor only: its workers and agents go on, and must stop by themselves.
    let fault_ms = now_ms();
    h.signal_supervisor(0, nix::sys::signal::Signal::SIGSTOP);
    std::thread::sleep(Duration::from_secs(2 * lease_s()));
    // Back, host 0 may take its own issues again before the others do (they are busy with
    // the rest of the queue): every run from now on is short, wherever it runs.
    h.agent_runs(2);
    h.signal_supervisor(0, nix::sys::signal::Signal::SIGCONT);
    h.wait_done();
    h.assert_once_each_no_overlap(&BTreeMap::new());
    for n in &lost {
        let stopped = h
            .log()
            .lines()
            .any(|l| l.starts_with(&format!("end {n} ")) && l.ends_with(" stopped"));
        assert!(
            stopped,
            "#{n}'s agent on host 0 was not stopped\n{}",
            h.dump()
        );
    }
    let figures = recovery(&h, &lost, fault_ms);
    eprintln!(
        "SIGSTOP host 0's supervisor for {}s (lease {}s): (issue, ms to the give-back's comment, to ready-for-agent, to its next run) {figures:?}",
        2 * lease_s(),
        lease_s()
    );
    h.assert_recovery(&figures);
    // Host 0 comes back by itself: its old lease found gone, a new one granted.
    let granted = || h.event_log(0).matches("granted").count();
    let back = wait_until(DEADLINE, || granted() >= 2);
    assert!(back, "host 0 took no new lease\n{}", h.dump());
}

#[test]
#[cfg_attr(
    not(all(afk_has_etcd, afk_can_netns)),
    ignore = "needs etcd (apt-get install etcd-server), root and iproute2 (a network namespace)"
)]
fn a_host_cut_off_past_its_lease_stops_its_agents_its_issues_run_elsewhere_and_it_comes_back_by_itself()
 {
    // Host 0 reaches etcd only over its namespace's link; git's origin and the fake `gh`
    // are files, so only etcd is cut off from it (GitHub is not: the fencing must hold).
    let mut h = Hosts::cut_off(3, 2, 6, lease_s(), CutOff::Host(0, Netns::new()));
    host_0_busy(&mut h);
    let lost = running_on(&h, "h0");
    // The others take the rest and are idle at the cut, so the lost issues' restart
    // measures the recovery, not the queue.
    h.start(1, 1);
    h.start(2, 1);
    let others = all_but(&h, &lost);
    let others_done = wait_until(DEADLINE, || with_a_person(&h, &others));
    assert!(others_done, "{}", h.dump());
    let fault_ms = now_ms();
    h.netns().cut();
    // Its agents stop by themselves; the others give its issues back and finish them.
    h.wait_done();
    // Cut off for three lease lengths at least.
    let cut_for = 3 * lease_s() * 1000;
    std::thread::sleep(Duration::from_millis(
        (fault_ms + cut_for).saturating_sub(now_ms()),
    ));
    // Host 0 alone is left to take new work: the others, idle and holding no claim, go.
    h.kill_host(1);
    h.kill_host(2);
    h.agent_runs(1);
    let restored_ms = now_ms();
    h.netns().restore();
    let open = || h.event_log(0).matches("claims are open").count();
    let back = wait_until(DEADLINE, || open() >= 2);
    assert!(back, "host 0 took no new lease\n{}", h.dump());
    let back_ms = now_ms();
    h.gh.add_issues(&[hosts::task(7), hosts::task(8)]);
    h.issues = 8;
    h.wait_done();
    h.assert_once_each_no_overlap(&BTreeMap::new());
    let runs = h.runs();
    for n in [7, 8] {
        let hosts: Vec<&str> = (runs.iter().filter(|r| r.issue == n))
            .map(|r| r.host.as_str())
            .collect();
        assert_eq!(hosts, ["h0"], "#{n} after the link came back\n{}", h.dump());
    }
    let mut stopped_after = Vec::new();
    for &n in &lost {
        let mine: Vec<&Run> = runs.iter().filter(|r| r.issue == n).collect();
        // Stopped on host 0 by its lease's deadline (SPEC §11.23), whatever etcd said.
        let cut_off = mine[0];
        let stopped = (h.log().lines()).any(|l| {
            l.starts_with(&format!("end {n} {} ", cut_off.pid)) && l.ends_with(" stopped")
        });
        assert!(
            cut_off.host == "h0" && stopped,
            "#{n}'s agent on host 0 was not stopped\n{}",
            h.dump()
        );
        let after = cut_off.end_ms.unwrap() - fault_ms;
        assert!(
            after <= lease_s() * 1000,
            "#{n}'s agent stopped {after} ms after the cut, past the lease\n{}",
            h.dump()
        );
        stopped_after.push(after);
        // Then run once more, on another host.
        assert!(
            mine.len() == 2 && mine[1].host != "h0",
            "#{n}'s runs {mine:?}\n{}",
            h.dump()
        );
    }
    let figures = recovery(&h, &lost, fault_ms);
    eprintln!(
        "host 0's link cut for {} ms (lease {}s): its agents stopped {stopped_after:?} ms after the cut; \
         (issue, ms to the give-back's comment, to ready-for-agent, to its next run) {figures:?}; \
         lease granted again {} ms after the link came back; overlaps: 0",
        restored_ms - fault_ms,
        lease_s(),
        back_ms - restored_ms
    );
    h.assert_recovery(&figures);
    // One line for the outage (and one when its lease ran out), not one per tick.
    let log = h.event_log(0);
    let told: Vec<&str> = log.lines().filter(|l| l.contains("cluster: ")).collect();
    eprintln!("host 0's event log on the cluster:\n{}", told.join("\n"));
    let said = log.matches("cluster: etcd unavailable").count();
    assert!(
        (1..=2).contains(&said),
        "host 0 said it {said} times\n{log}"
    );
    // "stop in <ms>", or "stopped at the lease's deadline" when the renewal's call
    // outlasted it.
    let stopping = log.matches("running agents stop").count();
    assert_eq!(stopping, 1, "host 0 said it {stopping} times\n{log}");
    let paused = log.matches(Kind::FleetPaused.as_str()).count();
    assert!(paused <= 3, "host 0 paused {paused} times\n{log}");
}

#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn with_all_of_etcd_down_agents_stop_at_the_deadline_nothing_is_claimed_and_the_fleet_resumes_by_itself()
 {
    let mut h = Hosts::new(2, 2, 4);
    host_0_busy(&mut h);
    h.start(1, 600);
    let ok = wait_until(DEADLINE, || running_on(&h, "h1").len() == 2);
    assert!(ok, "host 1 never ran two agents\n{}", h.dump());
    let lost: Vec<u64> = h.runs().iter().map(|r| r.issue).collect();
    let down_ms = now_ms();
    for i in 0..3 {
        h.etcd.kill_member(i);
    }
    // Every agent stops by its host's deadline, before its lease can end.
    let ok = wait_until(DEADLINE, || h.runs().iter().all(|r| r.end_ms.is_some()));
    assert!(ok, "agents still running with etcd down\n{}", h.dump());
    for r in h.runs() {
        let stopped = r.end_ms.unwrap() - down_ms;
        assert!(
            stopped <= lease_s() * 1000,
            "{r:?} stopped {stopped} ms after etcd went down\n{}",
            h.dump()
        );
    }
    // Down for three leases: nothing new is claimed meanwhile.
    std::thread::sleep(Duration::from_secs(3 * lease_s()));
    assert_eq!(
        h.runs().len(),
        lost.len(),
        "a claim with etcd down\n{}",
        h.dump()
    );
    h.agent_runs(1);
    let up_ms = now_ms();
    for i in 0..3 {
        h.etcd.start_member(i, "existing");
    }
    h.wait_done();
    h.assert_once_each_no_overlap(&BTreeMap::new());
    let first_again = h
        .runs()
        .iter()
        .map(|r| r.start_ms)
        .filter(|&t| t >= up_ms)
        .min()
        .unwrap();
    eprintln!(
        "all etcd down {} ms (lease {}s): agents stopped within {:?} ms; first run {} ms after etcd was back",
        up_ms - down_ms,
        lease_s(),
        h.runs()
            .iter()
            .filter(|r| r.start_ms < down_ms)
            .map(|r| r.end_ms.unwrap() - down_ms)
            .collect::<Vec<_>>(),
        first_again - up_ms
    );
    for i in 0..2 {
        // One line for the outage, not one per tick.
        let log = h.event_log(i);
        let said = log.matches("cluster: etcd unavailable").count();
        assert!(
            (1..=2).contains(&said),
            "host {i} said it {said} times\n{log}"
        );
        let paused = log.matches(Kind::FleetPaused.as_str()).count();
        assert!(paused <= 3, "host {i} paused {paused} times\n{log}");
    }
}

#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn the_etcd_leader_killed_and_restarted_stops_no_agent() {
    // A 5 s lease: its deadline (3.75 s after a renewal) outlasts an election.
    let mut h = Hosts::with_lease(2, 2, 6, 5);
    h.start(0, 4);
    h.start(1, 4);
    let ok = wait_until(DEADLINE, || h.runs().len() >= 3);
    assert!(ok, "no agents ran\n{}", h.dump());
    let leader = h.etcd.leader().expect("an etcd leader");
    h.etcd.kill_member(leader);
    std::thread::sleep(Duration::from_secs(3));
    h.etcd.start_member(leader, "existing");
    h.wait_done();
    h.assert_once_each_no_overlap(&BTreeMap::new());
    let stopped = h.log().lines().filter(|l| l.ends_with(" stopped")).count();
    assert_eq!(stopped, 0, "an agent was stopped\n{}", h.dump());
    assert_eq!(h.runs().len(), 6, "each issue ran once\n{}", h.dump());
}

/// Cuts etcd member 0 off the network (its peers and every host) for two leases mid-run,
/// having made it the raft leader when `leader`, a follower otherwise. The two others keep
/// the quorum (electing a new leader when it led); the hosts, whose calls went to it first
/// (it is first in `endpoints`), go on through the others: no agent stops, no lease is lost,
/// every issue runs once; and the member is back in the cluster once its link is.
fn an_etcd_member_cut_off_stops_no_agent(leader: bool) {
    // A 5 s lease, as with the leader killed: its deadline (3.75 s after a renewal)
    // outlasts a call to the cut member (a third of the lease) and an election.
    let lease_s = 5;
    let mut h = Hosts::cut_off(2, 2, 6, lease_s, CutOff::EtcdMember(0));
    match (leader, h.etcd.leader()) {
        (true, _) => h.etcd.move_leader(0),
        (false, Some(0)) => h.etcd.move_leader(1),
        (false, _) => {}
    }
    let was = h.etcd.leader();
    h.start(0, 8);
    h.start(1, 8);
    let ok = wait_until(DEADLINE, || h.runs().len() >= 3);
    assert!(ok, "no agents ran\n{}", h.dump());
    let cut_ms = now_ms();
    h.etcd.cut();
    let led = wait_until(DEADLINE, || matches!(h.etcd.leader(), Some(1 | 2)));
    assert!(led, "no etcd leader among the two others");
    let led_ms = now_ms() - cut_ms;
    let cut_for = 2 * lease_s * 1000;
    std::thread::sleep(Duration::from_millis(
        (cut_ms + cut_for).saturating_sub(now_ms()),
    ));
    h.etcd.restore();
    let back_ms = now_ms();
    let ping = || h.etcd.member_client(0).put("afk-test/ping", "2", 0).is_ok();
    let rejoined = wait_until(DEADLINE, ping);
    assert!(rejoined, "member 0 did not come back\n{}", h.dump());
    let rejoined_ms = now_ms() - back_ms;
    h.wait_done();
    h.assert_once_each_no_overlap(&BTreeMap::new());
    let stopped = h.log().lines().filter(|l| l.ends_with(" stopped")).count();
    assert_eq!(stopped, 0, "an agent was stopped\n{}", h.dump());
    assert_eq!(h.runs().len(), 6, "each issue ran once\n{}", h.dump());
    let said: Vec<(usize, usize)> = (0..2)
        .map(|i| {
            let log = h.event_log(i);
            (
                log.matches("cluster: etcd unavailable").count(),
                log.matches("cluster: lease lost").count(),
            )
        })
        .collect();
    assert!(
        said.iter().all(|&(_, lost)| lost == 0),
        "a host lost its lease: {said:?}\n{}",
        h.dump()
    );
    eprintln!(
        "etcd member 0 ({}) cut off for {cut_for} ms (lease {lease_s}s; leader before {was:?}): \
         leader among the others {led_ms} ms after the cut, now {:?}; member 0 answering again \
         {rejoined_ms} ms after the link came back; agents stopped: {stopped}; runs: {}; \
         per host (etcd-unavailable notes, leases lost): {said:?}; overlaps: 0",
        if leader { "the leader" } else { "a follower" },
        h.etcd.leader(),
        h.runs().len()
    );
}

#[test]
#[cfg_attr(
    not(all(afk_has_etcd, afk_can_netns)),
    ignore = "needs etcd (apt-get install etcd-server), root and iproute2 (a network namespace)"
)]
fn an_etcd_follower_cut_off_from_its_peers_and_the_hosts_stops_no_agent() {
    an_etcd_member_cut_off_stops_no_agent(false);
}

#[test]
#[cfg_attr(
    not(all(afk_has_etcd, afk_can_netns)),
    ignore = "needs etcd (apt-get install etcd-server), root and iproute2 (a network namespace)"
)]
fn the_etcd_leader_cut_off_from_its_peers_and_the_hosts_is_replaced_and_stops_no_agent() {
    an_etcd_member_cut_off_stops_no_agent(true);
}

/// The epoch ms of the first record of `kind` in an event log whose message contains
/// `words`.
fn first_event_ms(log: &str, kind: Kind, words: &str) -> Option<u64> {
    log.lines()
        .find(|l| l.contains(&format!(",{kind},")) && l.contains(words))
        .and_then(|l| l.split('"').nth(1))
        .and_then(afk_supervisor::timeutil::parse_rfc3339)
        .map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64)
}

#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn an_account_pause_on_one_host_stops_claims_on_every_host_within_two_seconds() {
    let mut h = Hosts::new(2, 1, 12);
    fs::write(h.env.path().join("runs/limited-h0"), "").unwrap();
    h.start(1, 1);
    assert!(
        wait_until(DEADLINE, || !h.runs().is_empty()),
        "{}",
        h.dump()
    );
    h.start(0, 1);
    let limited = || h.log().lines().any(|l| l.ends_with(" limited"));
    assert!(
        wait_until(DEADLINE, limited),
        "host 0 never met the limit\n{}",
        h.dump()
    );
    // Host 0's worker exits 76 once it recorded the pause; host 1 holds within 2 s.
    let log0 = || h.event_log(0);
    assert!(wait_until(DEADLINE, || first_event_ms(
        &log0(),
        Kind::SlotExit,
        "exit 76"
    )
    .is_some()));
    let paused_at = first_event_ms(&log0(), Kind::SlotExit, "exit 76").unwrap();
    let held = wait_until(Duration::from_secs(10), || {
        first_event_ms(&h.event_log(1), Kind::FleetAgentPaused, "").is_some()
    });
    assert!(held, "host 1 never held\n{}", h.dump());
    let held_at = first_event_ms(&h.event_log(1), Kind::FleetAgentPaused, "").unwrap();
    // Nothing starts anywhere once the pause is 2 s old (a run started just before
    // finishes its issue).
    std::thread::sleep(Duration::from_secs(4));
    let late: Vec<Run> = h
        .runs()
        .into_iter()
        .filter(|r| r.start_ms > paused_at + 2000)
        .collect();
    eprintln!(
        "account pause on host 0: host 1 held {} ms later; runs started after +2 s: {}",
        held_at.saturating_sub(paused_at),
        late.len()
    );
    assert!(
        held_at <= paused_at + 2000,
        "host 1 held {} ms after\n{}",
        held_at - paused_at,
        h.dump()
    );
    assert!(late.is_empty(), "claims went on: {late:?}\n{}", h.dump());
}

#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn the_repo_wide_belt_runs_on_the_leader_only_and_a_new_leader_takes_over_within_the_lease() {
    let mut h = Hosts::with(3, 1, 1, lease_s(), 1, "max_writes_per_min = 600\n");
    h.start(0, 1);
    let leads = |h: &Hosts, i: usize| h.event_log(i).contains("this host leads the fleet");
    assert!(wait_until(DEADLINE, || leads(&h, 0)), "{}", h.dump());
    h.start(1, 1);
    h.start(2, 1);
    h.wait_done();
    let belt = |h: &Hosts, i: usize| -> Vec<u64> {
        h.event_log(i)
            .lines()
            .filter(|l| l.contains("unblock-belt"))
            .filter_map(|l| first_event_ms(l, Kind::SupervisorPeriodic, ""))
            .collect()
    };
    assert!(
        wait_until(DEADLINE, || belt(&h, 0).len() >= 2),
        "{}",
        h.dump()
    );
    // The boot's repo-wide sweeps and the belt: the leader's alone.
    for i in [1, 2] {
        assert!(
            belt(&h, i).is_empty(),
            "host {i} ran the belt\n{}",
            h.event_log(i)
        );
        assert!(!leads(&h, i), "two leaders\n{}", h.dump());
    }
    let fault_ms = now_ms();
    h.kill_host(0);
    let ok = wait_until(DEADLINE, || [1, 2].iter().any(|&i| !belt(&h, i).is_empty()));
    assert!(ok, "no new leader ran the belt\n{}", h.dump());
    let (new, first) = [1, 2]
        .iter()
        .filter_map(|&i| belt(&h, i).first().map(|&t| (i, t)))
        .min_by_key(|(_, t)| *t)
        .unwrap();
    let other = 3 - new;
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        belt(&h, other).is_empty(),
        "two hosts ran the belt\n{}",
        h.dump()
    );
    eprintln!(
        "leader killed: host {new} leads and runs the belt {} ms later (lease {}s)",
        first - fault_ms,
        lease_s()
    );
    // The lease runs out, a follower's next renewal campaigns, its next belt turn runs.
    assert!(
        first - fault_ms <= lease_s() * 1000 + 2000,
        "the new leader's belt came {} ms after the kill\n{}",
        first - fault_ms,
        h.dump()
    );
}

/// The tracker calls of a run, by who makes them: per issue (the workers' view, label,
/// comment, provenance and pull request calls) and what does not grow with the issues:
/// the supervisors' own polling (the boot's listings, the quarantine count, the login)
/// and the workers' queue listings, which on a cluster only claims made before the
/// steward's first look send to GitHub (at most one per worker; how many depends on when
/// the first look lands, so they are counted apart).
fn calls_per_issue(h: &Hosts) -> (f64, usize, BTreeMap<String, usize>) {
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_issue = 0;
    for argv in h.gh.calls() {
        let a: Vec<&str> = argv.iter().map(String::as_str).collect();
        let a: Vec<&str> = match a.iter().position(|x| *x == "--repo") {
            Some(i) => [&a[..i], &a[i + 2..]].concat(),
            None => a,
        };
        let kind = match a.as_slice() {
            [
                "issue",
                "list",
                ..,
                "--search",
                "sort:created-asc",
                "--json",
                _,
            ] => "worker-queue",
            ["issue", "view", ..] => "view",
            ["issue", "edit", ..] => "edit",
            ["issue", "comment", ..] => "comment",
            ["issue", "list", ..] => "supervisor-list",
            // Whose words each claimed issue is (SPEC §11.20), and its pull request (§11.22).
            ["api", "graphql", ..] => "provenance",
            ["pr", ..] => "pr",
            // The leader's steward: the queue read with conditional requests (§11.23).
            ["api", "-i", ..] => "steward",
            ["api", "user"] => "login",
            ["auth", "status"] => "auth",
            // The fleet's labels, once per supervisor start (SPEC §7).
            ["label", "list", ..] => "labels",
            _ => panic!("gh argv outside SPEC §7: {argv:?}"),
        };
        if ["view", "edit", "comment", "provenance", "pr"].contains(&kind) {
            per_issue += 1;
        }
        *kinds.entry(kind.to_string()).or_default() += 1;
    }
    (per_issue as f64 / h.issues as f64, per_issue, kinds)
}

#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn tracker_calls_per_issue_are_no_higher_with_three_hosts_than_with_one() {
    let mut one = Hosts::new(1, 6, 12);
    one.start(0, 1);
    one.wait_done();
    one.assert_once_each_no_overlap(&BTreeMap::new());
    let (one_each, _, one_kinds) = calls_per_issue(&one);
    drop(one);
    let mut three = Hosts::new(3, 2, 12);
    for i in 0..3 {
        three.start(i, 1);
    }
    three.wait_done();
    three.assert_once_each_no_overlap(&BTreeMap::new());
    let (three_each, _, three_kinds) = calls_per_issue(&three);
    eprintln!(
        "calls per issue: 1 host x 6 workers {one_each:.2} {one_kinds:?}; 3 hosts x 2 workers {three_each:.2} {three_kinds:?}"
    );
    assert!(
        three_each <= one_each,
        "3 hosts {three_each:.2} calls per issue, 1 host {one_each:.2}"
    );
    // The queue listed on GitHub by claims made before the steward's first look only
    // (2 to 6 of 12 here; `the_leaders_steward…` shows none after it): never more than
    // the one per claim a fleet without a steward sends.
    for kinds in [&one_kinds, &three_kinds] {
        let listed = kinds.get("worker-queue").copied().unwrap_or(0);
        assert!(listed <= 12, "{listed} queue listings: {kinds:?}");
    }
    assert_eq!(
        three.gh.write_limit_hits(),
        0,
        "a write beyond GitHub's limits"
    );
}

/// The GitHub steward (SPEC §11.23): once the leader published the queue, no host lists
/// the ready queue on GitHub (the workers before their claims, the supervisors at their
/// queue checks read etcd), the leader's looks cost a read only when the queue moved (a
/// 304 otherwise), and when the leader dies the next one stewards.
#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn the_leaders_steward_reads_the_queue_for_every_host_with_conditional_requests() {
    let mut h = Hosts::new(3, 2, 12);
    h.start(0, 1);
    let stewards = |h: &Hosts, i: usize| {
        h.event_log(i)
            .contains("steward: this host reads the queue")
    };
    assert!(wait_until(DEADLINE, || stewards(&h, 0)), "{}", h.dump());
    // Host 0's first two claims may have listed GitHub before the first look: counted
    // from when both runs started.
    assert!(wait_until(DEADLINE, || h.runs().len() >= 2), "{}", h.dump());
    h.gh.clear_calls();
    let (fresh0, same0) = h.gh.conditional_answers();
    h.start(1, 1);
    h.start(2, 1);
    h.wait_done();
    h.assert_once_each_no_overlap(&BTreeMap::new());
    // Idle now: the queue is still, and each look is a 304.
    assert!(
        wait_until(DEADLINE, || h.gh.conditional_answers().1 >= same0 + 3),
        "{}",
        h.dump()
    );
    let ready_listings =
        h.gh.calls()
            .iter()
            .filter(|a| {
                a.starts_with(&[
                    "issue".to_string(),
                    "list".into(),
                    "--label".into(),
                    "ready-for-agent".into(),
                ])
            })
            .count();
    let (fresh, same) = h.gh.conditional_answers();
    let (fresh, same) = (fresh - fresh0, same - same0);
    eprintln!(
        "steward: 3 hosts x 2 workers, {} issues: ready-queue listings on GitHub after the first publish {ready_listings}, the steward's looks 200: {fresh}, 304: {same}",
        h.issues
    );
    // Every claim reads etcd; a listing on GitHub is the fallback of an etcd read that
    // timed out, which a loaded machine may see once or twice.
    assert!(
        ready_listings <= 2,
        "{ready_listings} listings\n{}",
        h.dump()
    );
    // A read that counts only when the queue moved: each claim takes one issue out.
    assert!(
        fresh <= h.issues as usize + 2,
        "{fresh} fresh answers\n{}",
        h.dump()
    );
    // The leader dies with its keys: the next leader stewards.
    h.kill_host(0);
    assert!(
        wait_until(DEADLINE, || stewards(&h, 1) || stewards(&h, 2)),
        "no new steward\n{}",
        h.dump()
    );
    assert!(
        !(stewards(&h, 1) && stewards(&h, 2)),
        "two stewards\n{}",
        h.dump()
    );
}

impl Hosts {
    /// `status --fleet --json` run from clone `i`.
    /// One read-only session of the official MCP SDK with clone `i`'s `afk-supervisor mcp`.
    fn mcp_read_session(&self, i: usize) -> serde_json::Value {
        let mut vars = self.env.vars();
        vars.push(("PATH".into(), self.gh.path_env()));
        crate::support::python::mcp_session(&self.clones[i], "read", vars)
    }

    fn fleet_status(&self, i: usize) -> serde_json::Value {
        let out = self
            .env
            .bin()
            .env("PATH", self.gh.path_env())
            .arg("--repo")
            .arg(&self.clones[i])
            .args(["status", "--fleet", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// The issues each clone's slots hold in a `status --fleet` view, by clone index.
fn issues_by_clone(h: &Hosts, v: &serde_json::Value) -> BTreeMap<usize, Vec<u64>> {
    let mut out = BTreeMap::new();
    for host in v["hosts"].as_array().into_iter().flatten() {
        let repo = PathBuf::from(host["repo"].as_str().unwrap_or_default());
        let Some(i) = h.clones.iter().position(|c| *c == repo) else {
            continue;
        };
        let mut issues: Vec<u64> = (host["slots"].as_array().into_iter().flatten())
            .filter_map(|s| s["issue"].as_u64())
            .collect();
        issues.sort_unstable();
        out.insert(i, issues);
    }
    out
}

#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn status_fleet_shows_every_host_its_issues_and_the_leader_from_any_host() {
    let mut h = Hosts::new(3, 1, 3);
    for i in 0..3 {
        h.start(i, 600);
    }
    assert!(wait_until(DEADLINE, || h.runs().len() == 3), "{}", h.dump());
    let started = h.runs().iter().map(|r| r.start_ms).max().unwrap();
    let want: BTreeMap<usize, Vec<u64>> = (0..3)
        .map(|i| {
            let host = format!("h{i}");
            (
                i,
                h.runs()
                    .iter()
                    .filter(|r| r.host == host)
                    .map(|r| r.issue)
                    .collect(),
            )
        })
        .collect();
    let right = |from: usize| issues_by_clone(&h, &h.fleet_status(from)) == want;
    assert!(
        wait_until(DEADLINE, || right(2)),
        "{:?}\n{}",
        h.fleet_status(2),
        h.dump()
    );
    let shown = now_ms() - started;
    for from in 0..3 {
        let v = h.fleet_status(from);
        assert_eq!(issues_by_clone(&h, &v), want, "from clone {from}: {v}");
        let leaders = (v["hosts"].as_array().unwrap().iter())
            .filter(|x| x["leader"] == true)
            .count();
        assert_eq!(leaders, 1, "{v}");
        assert_eq!(v["claims"].as_array().unwrap().len(), 3, "{v}");
        // The leader's steward, and the queue the hosts read.
        assert_eq!(v["queue"]["steward"], v["leader"], "{v}");
        assert_eq!(v["queue"]["fresh"], true, "{v}");
    }
    let plain = h
        .env
        .bin()
        .env("PATH", h.gh.path_env())
        .arg("--repo")
        .arg(&h.clones[2])
        .args(["status", "--fleet"])
        .output()
        .unwrap();
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(
        plain
            .lines()
            .any(|l| l.starts_with("queue: ") && l.contains("'s steward ")),
        "{plain}"
    );
    eprintln!("status --fleet right {shown} ms after the last claim");
    assert!(
        shown <= 2000 + TICK_MS,
        "right only {shown} ms after the last claim"
    );
    // The MCP `fleet_status`, asked by the official SDK on another host, carries the same
    // view under `cluster` (SPEC §11.23).
    let mcp = h.mcp_read_session(1);
    let status = mcp["calls"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["label"] == "status"))
        .unwrap_or_else(|| panic!("no fleet_status call: {mcp}"));
    let cluster = &status["structured"]["cluster"];
    assert_eq!(
        issues_by_clone(&h, cluster),
        want,
        "MCP fleet_status: {status}"
    );
    assert_eq!(
        cluster["claims"].as_array().map(Vec::len),
        Some(3),
        "{status}"
    );
    // A dead host drops out with its lease.
    h.kill_host(0);
    let gone = wait_until(DEADLINE, || {
        !issues_by_clone(&h, &h.fleet_status(1)).contains_key(&0)
    });
    assert!(gone, "{}", h.fleet_status(1));
}

/// A stand-in agent that commits one file per run of its issue and logs its start and end
/// as [`AGENT`] does.
const COMMITTING_AGENT: &str = r#"
d="$AFK_TEST_RUNS"; n="$RED_AFK_ISSUE"
echo "start $n $$ $(date +%s%3N) $AFK_HOST" >> "$d/log"
k=$(grep -c "^start $n " "$d/log")
echo "round $k on $AFK_HOST" > "work-$n-$k.txt"
git add -A && git commit -q -m "afk: #$n round $k"
echo "end $n $$ $(date +%s%3N) done" >> "$d/log"
"#;

/// Every host's event log records of `kind`.
fn events_of(h: &Hosts, kind: &str) -> Vec<String> {
    (0..h.clones.len())
        .flat_map(|i| {
            h.event_log(i)
                .lines()
                .filter(|l| l.contains(&format!(",{kind},")))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Issue 50 on a cluster: the landing records are the fleet's (etcd), the landing belt the
/// leader's. Host 0, the leader, opens the pull request and is SIGKILLed; its CI then
/// fails; the new leader (another host) sends the issue back, another host's fix round
/// pushes to the SAME branch (no second pull request), and with `merge = "auto"` it is
/// merged once.
#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn a_dead_hosts_pull_request_is_followed_fixed_on_another_host_and_merged_once() {
    let mut h = Hosts::with_agent(
        3,
        1,
        1,
        lease_s(),
        3600,
        "max_writes_per_min = 600\n",
        COMMITTING_AGENT,
        "[landing]\nmerge = \"auto\"\nwatch_interval_s = 1\n",
        CutOff::Nothing,
    );
    for c in &h.clones {
        fs::write(c.join(".git/info/exclude"), ".red/tmp/\n.red/state/\n").unwrap();
    }
    // CI is running on the pull request as it opens: nothing to fix or merge yet.
    h.gh.set_new_pr_checks(serde_json::json!([
        {"name": "test", "bucket": "pending", "required": true}
    ]));
    h.start(0, 1);
    let handed = |h: &Hosts| {
        h.gh.issue(1).is_some_and(|i| {
            let mut l = i.labels.clone();
            l.sort();
            l == ["afk:pr-open", "ready-for-human"]
        })
    };
    assert!(wait_until(DEADLINE, || handed(&h)), "{}", h.dump());
    assert!(
        h.event_log(0).contains("this host leads the fleet"),
        "{}",
        h.dump()
    );
    let prs = h.gh.prs();
    assert_eq!(prs.len(), 1, "{}", h.dump());
    let (pr, head) = (prs[0].number, prs[0].head.clone());
    h.start(1, 1);
    h.start(2, 1);
    h.kill_host(0);
    // Its CI fails once the host is gone: only the fleet's record can say whose it is.
    h.gh.set_pr(
        pr,
        "checks",
        serde_json::json!([{"name": "test", "bucket": "fail", "required": true,
            "link": "https://github.com/fake-owner/fake-repo/actions/runs/77/job/1"}]),
    );
    h.gh.set_pr(pr, "headRefOid", serde_json::json!("a1"));
    h.gh.set_run_log("77", "thread 'parser::tabs' panicked: tabs are spaces\n");
    let failed_ms = now_ms();
    // The pull request's branch on origin, as the fix round leaves it.
    let commits = |h: &Hosts| -> Vec<String> {
        let o = std::process::Command::new("git")
            .arg("-C")
            .arg(h.env.path().join("origin.git"))
            .args(["log", "--format=%s", &format!("main..{head}")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    let fixed = || commits(&h).len() == 2 && handed(&h);
    assert!(wait_until(DEADLINE, fixed), "{}", h.dump());
    assert_eq!(commits(&h), ["afk: #1 round 2", "afk: #1 round 1"]);
    let fixed_ms = now_ms();
    h.gh.set_pr(
        pr,
        "checks",
        serde_json::json!([{"name": "test", "bucket": "pass", "required": true}]),
    );
    h.gh.set_pr(pr, "headRefOid", serde_json::json!("b2"));
    let merged =
        || h.gh.prs()[0].state == "MERGED" && events_of(&h, Kind::PrMerged.as_str()).len() == 1;
    assert!(wait_until(DEADLINE, merged), "{}", h.dump());
    eprintln!(
        "dead host's pull request (lease {}s, watch 1s): CI red to the fix pushed by another host {} ms; green to merged {} ms",
        lease_s(),
        fixed_ms - failed_ms,
        now_ms() - fixed_ms
    );
    // One pull request, opened once, fixed once on another host, merged once.
    assert_eq!(h.gh.prs().len(), 1);
    let creates =
        h.gh.calls()
            .iter()
            .filter(|c| c[..2] == ["pr", "create"])
            .count();
    assert_eq!(creates, 1, "{}", h.dump());
    let merges =
        h.gh.calls()
            .iter()
            .filter(|c| c[..2] == ["pr", "merge"])
            .count();
    assert_eq!(merges, 1, "{}", h.dump());
    let runs = h.runs();
    assert_eq!(runs.len(), 2, "{}", h.dump());
    assert_eq!(runs[0].host, "h0");
    assert_ne!(runs[1].host, "h0", "the fix round ran on a live host");
    for (kind, want) in [
        (Kind::PrOpened.as_str(), 1),
        (Kind::PrChecksFailed.as_str(), 1),
        (Kind::PrFixRequested.as_str(), 1),
        (Kind::PrUpdated.as_str(), 1),
        (Kind::PrMergeRequested.as_str(), 1),
        (Kind::PrMerged.as_str(), 1),
    ] {
        assert_eq!(events_of(&h, kind).len(), want, "{kind}\n{}", h.dump());
    }
    // The dead host opened it; the new leader's belt did the rest.
    assert!(h.event_log(0).contains(",pr.opened,"));
    assert!(!h.event_log(0).contains(",pr.fix-requested,"));
    let fixer: usize = runs[1].host.trim_start_matches('h').parse().unwrap();
    assert!(
        events_of(&h, Kind::PrUpdated.as_str())[0].contains(&format!("pushed 1 commit(s) to https://github.com/fake-owner/fake-repo/pull/{pr} (branch {head})")),
        "{}",
        h.dump()
    );
    // The fleet's record, read from the host that fixed it: merged after one fix round.
    let mut c = h.env.bin_on(&h.clones[fixer]);
    h.gh.apply(&mut c);
    let o = c.args(["issue", "show", "1", "--json"]).output().unwrap();
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("{}", crate::support::stderr(&o)));
    assert_eq!(shown["pr"]["state"], "merged", "{shown}");
    assert_eq!(shown["pr"]["fix_rounds"], 1, "{shown}");
    assert_eq!(shown["pr"]["branch"], head.as_str(), "{shown}");
    assert_eq!(h.gh.issue(1).unwrap().state, "CLOSED", "Closes #1");
}

/// GitHub counts writes per identity: three hosts, each with a state directory of its own (as
/// on three machines, so no file of one host is seen by another), keep ONE budget through
/// etcd. An hour scaled to 10 s with 8 writes in it: GitHub refuses none, no 10 s span
/// holds more than 8 of the three hosts' writes together, and `status --fleet` shows the
/// identity's writes and what is left.
#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn three_hosts_keep_one_identitys_hourly_write_budget_through_etcd() {
    let mut h = Hosts::with(
        3,
        1,
        4,
        lease_s(),
        3600,
        "max_writes_per_min = 20\nmax_writes_per_hour = 8\npace_hour_s = 10\n",
    );
    h.gh.set_write_limits(80, 8, 60.0, 10.0);
    for i in 0..3 {
        h.start(i, 1);
    }
    h.wait_done();
    let (writes, most) = crate::fleet_limits::writes_and_most_within(&h.gh, 10.0);
    eprintln!("writes: {}; most in a 10 s span: {most}", writes.len());
    assert!(
        writes.len() > 8,
        "needs more than one hour's budget: {}",
        writes.len()
    );
    assert_eq!(
        h.gh.write_limit_hits(),
        0,
        "GitHub refused a write\n{}",
        h.dump()
    );
    assert!(most <= 8, "{most} writes in one 10 s hour: {writes:?}");
    let v = h.fleet_status(1);
    let ids = v["github"].as_array().cloned().unwrap_or_default();
    assert_eq!(ids.len(), 1, "one identity: {v}");
    assert_eq!(ids[0]["per_hour"], 8, "{v}");
    assert_eq!(
        ids[0]["hour_left"].as_u64().unwrap() + ids[0]["hour"].as_u64().unwrap(),
        8,
        "{v}"
    );
}

/// A stand-in agent whose every run costs $0.25 (its result file says so, as the generic
/// profile reads it) and lasts `AFK_AGENT_S`, logging its start and end as [`AGENT`] does.
const PRICED_AGENT: &str = r#"
d="$AFK_TEST_RUNS"; n="$RED_AFK_ISSUE"
echo "start $n $$ $(date +%s%3N) $AFK_HOST" >> "$d/log"
sleep "${AFK_AGENT_S:-1}" &
wait $!
echo '{"cost_usd": 0.25}' > "$RED_AFK_RESULT_FILE"
echo "end $n $$ $(date +%s%3N) done" >> "$d/log"
"#;

/// `afk-supervisor <args>` in clone `i`: its stdout, whatever its exit (`status` exits 1
/// while the budget holds the fleet).
fn cli(h: &Hosts, i: usize, args: &[&str]) -> String {
    let out = h
        .env
        .bin()
        .env("PATH", h.gh.path_env())
        .arg("--repo")
        .arg(&h.clones[i])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Issue 49, item 4: on a cluster the day's budget is the fleet's. Three hosts of two
/// workers each, twelve issues, runs of $0.25 and `budget.usd_per_day = 1.00` (with
/// `estimate_usd = 0.25`, so the first runs reserve too): four runs in all, not four per
/// host (at most one more by the reservation rule); every host logs
/// `fleet.budget-reached`, and `spend` and `status` on every host (and the MCP `spend`)
/// show the fleet's $1.00.
#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn the_days_budget_holds_for_the_whole_fleet_not_per_host() {
    let mut h = Hosts::with_agent(
        3,
        2,
        12,
        lease_s(),
        3600,
        "max_writes_per_min = 600\n",
        PRICED_AGENT,
        "[budget]\nusd_per_day = 1.0\nestimate_usd = 0.25\n",
        CutOff::Nothing,
    );
    for i in 0..3 {
        h.start(i, 3);
    }
    let reached =
        |i: usize| first_event_ms(&h.event_log(i), Kind::FleetBudgetReached, "").is_some();
    assert!(
        wait_until(DEADLINE, || (0..3).all(reached)),
        "not every host reached the fleet's budget\n{}",
        h.dump()
    );
    let runs = h.runs();
    let per_host: Vec<usize> = (0..3)
        .map(|i| runs.iter().filter(|r| r.host == format!("h{i}")).count())
        .collect();
    eprintln!(
        "fleet budget $1.00, runs of $0.25: per host {per_host:?}, total {} (without sharing: up to 4 per host)",
        runs.len()
    );
    assert!(
        (4..=5).contains(&runs.len()),
        "{} runs for a budget of four\n{}",
        runs.len(),
        h.dump()
    );
    assert!(
        runs.iter().all(|r| r.end_ms.is_some()),
        "every run ended\n{}",
        h.dump()
    );
    let fleet_usd = 0.25 * runs.len() as f64;
    for (i, mine) in per_host.iter().enumerate() {
        let spent = format!("spend today ${fleet_usd:.2} of $1.00");
        let log = h.event_log(i);
        assert!(
            log.lines()
                .any(|l| l.contains(",fleet.budget-reached,") && l.contains(&spent)),
            "host {i}: {spent}\n{log}"
        );
        let v: serde_json::Value = serde_json::from_str(&cli(&h, i, &["spend", "--json"])).unwrap();
        let f = &v["fleet_today"];
        assert_eq!(f["usd"].as_f64(), Some(fleet_usd), "host {i}: {v}");
        assert_eq!(f["runs"].as_u64(), Some(runs.len() as u64), "host {i}: {v}");
        assert_eq!(f["hosts"].as_u64(), Some(3), "host {i}: {v}");
        // This host's own rows: its runs only.
        assert_eq!(
            v["total"]["runs"].as_u64(),
            Some(*mine as u64),
            "host {i}: {v}"
        );
        let plain = cli(&h, i, &["spend"]);
        assert!(
            plain.contains(&format!("fleet: {spent} over 3 hosts")),
            "host {i}: {plain}"
        );
        // The state file follows the event log within a tick.
        let shown = wait_until(DEADLINE, || {
            cli(&h, i, &["status"]).contains(&format!("budget reached: {spent}"))
        });
        assert!(shown, "host {i}: {}", cli(&h, i, &["status"]));
        // `status --fleet`, from any host: the fleet's day beside its budget.
        let b = &h.fleet_status(i)["budget"];
        assert_eq!(b["usd"].as_f64(), Some(fleet_usd), "host {i}: {b}");
        assert_eq!(b["usd_per_day"].as_f64(), Some(1.0), "host {i}: {b}");
        assert_eq!(b["hosts"].as_u64(), Some(3), "host {i}: {b}");
        let plain = cli(&h, i, &["status", "--fleet"]);
        assert!(
            plain.contains(&format!("budget today: ${fleet_usd:.2} of $1.00 and ")),
            "host {i}: {plain}"
        );
    }
    // The MCP `spend`, asked by the official SDK, carries the same figure.
    let mcp = h.mcp_read_session(1);
    let spend = mcp["calls"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["label"] == "spend"))
        .unwrap_or_else(|| panic!("no spend call: {mcp}"));
    let f = &spend["structured"]["fleet_today"];
    assert_eq!(f["usd"].as_f64(), Some(fleet_usd), "MCP spend: {spend}");
    assert_eq!(f["hosts"].as_u64(), Some(3), "MCP spend: {spend}");
}
