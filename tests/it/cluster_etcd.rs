//! `[cluster]`'s client against a real 3-member etcd (`docs/SPEC.md` §11.23): the claim
//! transaction and its fencing token, the done key of a hand-off, the lease that takes its
//! claims with it, and a client that goes on through another member when the leader dies.

use std::time::Duration;

use afk_supervisor::cluster::{Cluster, Ending};
use afk_supervisor::config::{ClusterCfg, cluster::Engine};

use crate::support::etcd::EtcdCluster;
use crate::support::{TestEnv, wait_until};

fn cluster(etcd: &EtcdCluster, lease_s: u64) -> Cluster {
    cluster_at(etcd.endpoints(), lease_s)
}

fn cluster_at(endpoints: Vec<String>, lease_s: u64) -> Cluster {
    let cfg = ClusterCfg {
        engine: Engine::Etcd,
        endpoints,
        lease_s,
        prefix: None,
        username: None,
        password_file: None,
        tls: None,
    };
    Cluster::new(&cfg, "o/r").unwrap()
}

#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn one_claim_per_issue_fenced_by_its_revision_and_gone_with_its_lease() {
    let env = TestEnv::new();
    let etcd = EtcdCluster::start(env.path());
    let c = cluster(&etcd, 2);
    let a = c.etcd.grant(2).unwrap();
    let b = c.etcd.grant(2).unwrap();

    let won = c
        .claim(7, "w1@a", a)
        .unwrap()
        .expect("the first claim wins");
    assert_eq!(c.claim(7, "w2@b", b).unwrap(), None, "one claim per issue");
    assert!(c.holds(won).unwrap());
    let key = c.claim_of(7).unwrap().unwrap();
    assert_eq!(
        (key.holder.as_str(), key.host(), key.revision),
        ("w1@a", "a", won.revision)
    );

    // A hand-off ends the claim and leaves the done key: nobody claims the issue meanwhile.
    assert!(c.end(won, Ending::HandOff).unwrap());
    assert!(!c.holds(won).unwrap(), "the token no longer holds");
    assert!(
        !c.end(won, Ending::GiveBack).unwrap(),
        "an ended claim ends once"
    );
    assert_eq!(c.claim(7, "w2@b", b).unwrap(), None, "the done key blocks");
    assert_eq!(c.done().unwrap(), vec![7]);

    // A give-back leaves nothing: the next claim wins, with a newer token.
    let first = c.claim(8, "w1@a", a).unwrap().unwrap();
    assert!(c.end(first, Ending::GiveBack).unwrap());
    let second = c.claim(8, "w2@b", b).unwrap().unwrap();
    assert!(second.revision > first.revision);
    assert!(!c.holds(first).unwrap(), "an old token never holds again");

    // Renewed, a lease keeps its claims; left alone, it takes them with it.
    let held = c.claim(9, "w1@a", a).unwrap().unwrap();
    assert_eq!(c.etcd.keepalive(a).unwrap(), Some(2));
    assert!(
        wait_until(Duration::from_secs(10), || c.claim_of(9).unwrap().is_none()),
        "lease a's claims expire"
    );
    assert!(!c.holds(held).unwrap());
    assert_eq!(
        c.etcd.keepalive(a).unwrap(),
        None,
        "an expired lease is gone"
    );
    c.etcd.revoke(b).unwrap();
    assert!(
        c.claim_of(8).unwrap().is_none(),
        "a revoked lease's claims go at once"
    );
}

#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn the_client_goes_on_through_another_member_when_the_leader_dies() {
    let env = TestEnv::new();
    let mut etcd = EtcdCluster::start(env.path());
    let c = cluster(&etcd, 2);
    let lease = c.etcd.grant(30).unwrap();
    let fence = c.claim(3, "w@h", lease).unwrap().unwrap();
    let leader = etcd.leader().expect("a leader");
    etcd.kill_member(leader);
    // A new leader within the election timeout; the claim and its lease survive it.
    let mut last = None;
    let renewed = wait_until(Duration::from_secs(20), || {
        let r = c.etcd.keepalive(lease);
        let ok = r.as_ref().is_ok_and(|t| t.is_some());
        last = Some(r);
        ok
    });
    assert!(
        renewed,
        "the lease is renewed through another member: {last:?}"
    );
    assert!(c.holds(fence).unwrap());
    etcd.start_member(leader, "existing");
    etcd.wait_healthy();
    assert!(c.holds(fence).unwrap());
}

/// The landing records on a cluster (`docs/SPEC.md` §11.22): changes from four writers at
/// once (a worker and the belt, on several hosts) each land, none lost, by
/// compare-and-swap on the key's mod revision; the record outlives every lease (bound to
/// none) and is listed with the fleet's others.
#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn landing_records_change_by_compare_and_swap_and_lose_no_update() {
    use afk_supervisor::landing::{PrState, etcd_records as records};
    let env = TestEnv::new();
    let etcd = EtcdCluster::start(env.path());
    let c = cluster(&etcd, 2);
    assert_eq!(records::read(&c, 4).unwrap(), None);
    let opened = records::update(&c, 4, |r| {
        assert!(r.is_none());
        Some(afk_supervisor::landing::PrRecord {
            state: PrState::Open,
            url: Some("https://github.com/o/r/pull/9".into()),
            ..afk_supervisor::landing::PrRecord::pending(4, "afk/w1/4-x", "main", "t", "")
        })
    })
    .unwrap()
    .unwrap();
    assert!(opened.updated_epoch > 0);
    let kv = c.etcd.get(&records::key(&c, 4)).unwrap().unwrap();
    assert_eq!(kv.lease, 0, "bound to no lease: it outlives the host");
    assert!(kv.key.ends_with("/landing/4"), "{}", kv.key);
    let tries = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for w in 0..4 {
            let (c, tries) = (&c, &tries);
            s.spawn(move || {
                for k in 0..10 {
                    records::update(c, 4, |r| {
                        tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let mut r = r?;
                        r.fix_rounds += 1;
                        r.note(&format!("w{w}-{k}"));
                        Some(r)
                    })
                    .unwrap();
                }
            });
        }
    });
    let r = records::read(&c, 4).unwrap().unwrap();
    assert_eq!(r.fix_rounds, 40, "no update lost");
    assert_eq!(r.seen.len(), 40);
    eprintln!(
        "40 changes from 4 writers took {} tries",
        tries.load(std::sync::atomic::Ordering::Relaxed)
    );
    // A change that leaves nothing writes nothing.
    let before = c.etcd.get(&records::key(&c, 4)).unwrap().unwrap();
    let same = records::update(&c, 4, |_| None).unwrap().unwrap();
    assert_eq!(same.fix_rounds, 40);
    let after = c.etcd.get(&records::key(&c, 4)).unwrap().unwrap();
    assert_eq!(before.mod_revision, after.mod_revision);
    // A value that is no record is named, the others still listed.
    c.etcd
        .put(&format!("{}landing/5", c.prefix()), "not json", 0)
        .unwrap();
    let (listed, errors) = records::list(&c);
    assert_eq!(listed.iter().map(|r| r.issue).collect::<Vec<_>>(), [4]);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0]
            .to_string()
            .contains("landing/5: not a landing record"),
        "{}",
        errors[0]
    );
}

/// A landing record written while etcd does not answer is never lost: it is kept in the
/// checkout's file, and moved to etcd once etcd answers, unless etcd holds a later record
/// of the issue; a record from before `[cluster]` goes the same way.
#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn a_landing_record_written_while_etcd_is_away_is_kept_here_then_moved_to_etcd() {
    use afk_supervisor::landing::{self, PrRecord, PrState, RecordError, etcd_records as records};
    let env = TestEnv::new();
    let mut etcd = EtcdCluster::start(env.path());
    let c = cluster(&etcd, 2);
    let repo = env.path().join("checkout");
    std::fs::create_dir_all(&repo).unwrap();
    let layout = afk_supervisor::layout::Layout::new(&repo);
    let record = |n: u64, url: &str| PrRecord {
        state: PrState::Open,
        url: Some(url.into()),
        ..PrRecord::pending(n, &format!("afk/w1/{n}-x"), "main", "t", "")
    };
    // Before `[cluster]`: a checkout's file.
    landing::write_in(&layout, None, record(3, "https://github.com/o/r/pull/3")).unwrap();
    // Issue 6's record in etcd, changed later than what this checkout will keep of it.
    for i in 0..3 {
        etcd.kill_member(i);
    }
    let kept = landing::write_in(
        &layout,
        Some(&c),
        record(4, "https://github.com/o/r/pull/4"),
    );
    let Err(e @ RecordError::KeptHere { .. }) = kept else {
        panic!("not kept here: {kept:?}")
    };
    assert!(e.to_string().contains("until etcd answers"), "{e}");
    landing::write_in(
        &layout,
        Some(&c),
        record(6, "https://github.com/o/r/pull/60"),
    )
    .unwrap_err();
    assert!(landing::path(&layout, 4).is_file());
    // Nothing moves while etcd is away, and nothing is deleted.
    let moved = landing::move_to_etcd(&layout, &c);
    assert!(
        moved.put.is_empty() && !moved.errors.is_empty(),
        "{moved:?}"
    );
    assert!(landing::path(&layout, 4).is_file());
    for i in 0..3 {
        etcd.start_member(i, "existing");
    }
    etcd.wait_healthy();
    // Another host's later change of #6 (a minute on, so later to the second).
    let later = PrRecord {
        updated_epoch: afk_supervisor::timeutil::now_epoch() + 60,
        ..record(6, "https://github.com/o/r/pull/61")
    };
    c.etcd
        .put(
            &records::key(&c, 6),
            &serde_json::to_string(&later).unwrap(),
            0,
        )
        .unwrap();
    let moved = landing::move_to_etcd(&layout, &c);
    assert!(moved.errors.is_empty(), "{moved:?}");
    assert_eq!(moved.put, [3, 4]);
    assert_eq!(moved.superseded, [6]);
    for n in [3, 4, 6] {
        assert!(!landing::path(&layout, n).exists(), "#{n}'s file left");
    }
    let url = |n: u64| records::read(&c, n).unwrap().unwrap().url.unwrap();
    assert_eq!(url(3), "https://github.com/o/r/pull/3");
    assert_eq!(url(4), "https://github.com/o/r/pull/4");
    assert_eq!(url(6), "https://github.com/o/r/pull/61");
    // A second pass has nothing to do.
    let again = landing::move_to_etcd(&layout, &c);
    assert!(again.put.is_empty() && again.superseded.is_empty() && again.errors.is_empty());
}

/// One etcd member serving its clients over TLS with client certificates required, its
/// certificates made by `openssl` for this test (a CA, the member's for 127.0.0.1, this
/// host's client certificate, and a stranger CA that signed nothing of the member's).
struct TlsMember {
    dir: std::path::PathBuf,
    endpoint: String,
    child: std::process::Child,
}

impl Drop for TlsMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// `name`.pem and `name`.key, signed by `ca` (.pem/.key) with `ext` as its extensions.
fn signed(dir: &std::path::Path, name: &str, ca: &str, ext: &str) {
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "1",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

fn self_signed_ca(dir: &std::path::Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "1",
            "-subj",
            &format!("/CN={name}"),
        ],
    );
}

fn tls_member(env: &TestEnv) -> TlsMember {
    let dir = env.path().join("tls");
    std::fs::create_dir_all(&dir).unwrap();
    self_signed_ca(&dir, "ca");
    self_signed_ca(&dir, "stranger");
    signed(
        &dir,
        "member",
        "ca",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    );
    signed(&dir, "host", "ca", "extendedKeyUsage=clientAuth\n");
    let (client, peer) = (
        crate::support::etcd::free_port(),
        crate::support::etcd::free_port(),
    );
    let endpoint = format!("https://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
    let child = std::process::Command::new("etcd")
        .current_dir(&dir)
        .args(["--name", "t", "--data-dir", "data"])
        .args(["--listen-client-urls", &endpoint])
        .args(["--advertise-client-urls", &endpoint])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("t={peer_url}")])
        .args(["--cert-file", "member.pem", "--key-file", "member.key"])
        .args(["--client-cert-auth", "--trusted-ca-file", "ca.pem"])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("etcd (apt-get install etcd-server)");
    TlsMember {
        dir,
        endpoint,
        child,
    }
}

fn tls_cluster(m: &TlsMember, ca: &str, client: bool) -> Result<Cluster, String> {
    let cfg = ClusterCfg {
        engine: Engine::Etcd,
        endpoints: vec![m.endpoint.clone()],
        lease_s: 5,
        prefix: None,
        username: None,
        password_file: None,
        tls: Some(afk_supervisor::config::cluster::ClusterTls {
            ca_file: m.dir.join(format!("{ca}.pem")),
            client: client.then(|| (m.dir.join("host.pem"), m.dir.join("host.key"))),
        }),
    };
    Cluster::new(&cfg, "o/r").map_err(|e| e.to_string())
}

/// `https://` members, checked by the fleet's own CA, with this host's certificate: a claim
/// is one transaction as over plain HTTP. A member the CA did not sign, or a host without
/// the certificate the member asks for, gets nothing from it, and the error names the
/// endpoint; a CA file that holds no certificate is refused at setup, naming the key.
#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn https_members_are_reached_by_the_fleets_ca_and_this_hosts_certificate() {
    let env = TestEnv::new();
    let m = tls_member(&env);
    let c = tls_cluster(&m, "ca", true).unwrap();
    let up = wait_until(Duration::from_secs(30), || c.etcd.status().is_ok());
    assert!(
        up,
        "{:?}\n{}",
        c.etcd.status(),
        std::fs::read_to_string(m.dir.join("etcd.log")).unwrap_or_default()
    );
    let lease = c.etcd.grant(5).unwrap();
    let fence = c.claim(7, "w@h", lease).unwrap().expect("the claim is won");
    assert!(c.holds(fence).unwrap());
    assert_eq!(c.claim(7, "w2@h2", lease).unwrap(), None, "claimed once");

    let stranger = tls_cluster(&m, "stranger", true).unwrap();
    let e = stranger.etcd.status().unwrap_err().to_string();
    assert!(e.contains(&m.endpoint), "{e}");
    let anonymous = tls_cluster(&m, "ca", false).unwrap();
    let e = anonymous.etcd.status().unwrap_err().to_string();
    assert!(e.contains(&m.endpoint), "{e}");

    std::fs::write(m.dir.join("empty.pem"), "not a certificate\n").unwrap();
    let e = tls_cluster(&m, "empty", true).expect_err("refused");
    assert!(
        e.starts_with("cluster.ca_file ") && e.contains("no PEM certificate"),
        "{e}"
    );
}

/// Issue 49, item 4: the day's budget is one key of the fleet, changed by compare-and-swap.
/// Two hosts' workers check and reserve at the same moment (a barrier, 20 rounds) when the
/// fleet's spend leaves room for one attempt only: each round exactly one goes and the other
/// waits, never both. Released, the reservation is gone and the host's spend is in its entry.
#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn racing_reservations_of_two_hosts_never_both_pass_when_one_fits() {
    use afk_supervisor::budget::fleet_day::{DayDoc, HostSpend, check_and_reserve};
    use afk_supervisor::budget::reserve::{Decision, Holder};
    use afk_supervisor::config::{Budget, Usd};
    let env = TestEnv::new();
    let etcd = EtcdCluster::start(env.path());
    let c: &'static Cluster = Box::leak(Box::new(cluster(&etcd, 2)));
    let budget = Budget {
        usd_per_day: Some(Usd::from_f64(1.0)),
        estimate_usd: Some(Usd::from_f64(0.4)),
        ..Budget::default()
    };
    // Two checkouts, two host names; each host's status key says its lease is live.
    let layouts = host_layouts(&env, 2);
    let lease = c.etcd.grant(60).unwrap();
    for l in &layouts {
        let host = afk_supervisor::claim::tracked::this_host(l);
        c.etcd.put(&c.host_key(&host), "{}", lease).unwrap();
    }
    let now = afk_supervisor::timeutil::now_epoch();
    let key = afk_supervisor::budget::fleet_day::key(c, &afk_supervisor::budget::day_of(now, 0));
    // A host gone since spent $0.70 today: room for one $0.40 attempt, not two.
    let mut seed = DayDoc::default();
    seed.set_spend(
        "gone",
        HostSpend {
            usd_micros: 700_000,
            tokens: 0,
            runs: 2,
        },
    );
    let (mut went, mut waited) = (0, 0);
    for round in 0..20 {
        c.etcd.put(&key, &seed.to_value().unwrap(), 0).unwrap();
        let barrier = std::sync::Barrier::new(2);
        let decisions: Vec<Decision> = std::thread::scope(|s| {
            let handles: Vec<_> = layouts
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let (barrier, budget) = (&barrier, &budget);
                    s.spawn(move || {
                        let holder = Holder::this(&format!("w{i}-{round}")).unwrap();
                        barrier.wait();
                        check_and_reserve(c, l, budget, &holder, 3600, now).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let goes = decisions
            .iter()
            .filter(|d| matches!(d, Decision::Go(Some(_))))
            .count();
        let waits = decisions
            .iter()
            .filter(|d| matches!(d, Decision::Wait(w) if w.contains("reserved $0.40 for 1 running attempt")))
            .count();
        assert_eq!((goes, waits), (1, 1), "round {round}: {decisions:?}");
        let doc = DayDoc::parse(c.etcd.get(&key).unwrap().map(|kv| kv.value).as_deref()).unwrap();
        assert_eq!(doc.reservations.len(), 1, "round {round}: {doc:?}");
        assert_eq!(doc.hosts.len(), 3, "both hosts' entries and the gone one's");
        went += goes;
        waited += waits;
        // The attempt ends: its guard's release takes the reservation out.
        drop(decisions);
        let doc = DayDoc::parse(c.etcd.get(&key).unwrap().map(|kv| kv.value).as_deref()).unwrap();
        assert!(doc.reservations.is_empty(), "round {round}: {doc:?}");
    }
    eprintln!("20 rounds of two racing hosts: {went} went, {waited} waited");

    // etcd not answering: no decision, and the error says so.
    let dead = cluster_at(
        vec![format!(
            "http://127.0.0.1:{}",
            crate::support::etcd::free_port()
        )],
        2,
    );
    let dead: &'static Cluster = Box::leak(Box::new(dead));
    let holder = Holder::this("w9").unwrap();
    let e = check_and_reserve(dead, &layouts[0], &budget, &holder, 3600, now).unwrap_err();
    assert!(e.unavailable(), "{e}");
    assert!(e.to_string().contains("etcd unavailable"), "{e}");
}

/// Issue 49, item 4: one issue's spend is weighed over every host's ledger. Two hosts ran
/// issue 3 ($0.50 and $0.25 + $0.25); each publishes its entry to `P/spend/3` and each sees
/// the fleet's $1.00 over three runs; after one host hands it to a person over its budget,
/// the spend counts afresh on every host (the records' ends set around the hand-off).
#[test]
#[cfg_attr(
    not(afk_has_etcd),
    ignore = "etcd not installed (apt-get install etcd-server)"
)]
fn an_issues_spend_is_every_hosts_and_counts_afresh_after_an_over_budget_hand_off() {
    use afk_supervisor::budget::fleet_issue::{publish, reset, spent_in};
    use afk_supervisor::ledger::{self, Outcome, Record};
    let env = TestEnv::new();
    let etcd = EtcdCluster::start(env.path());
    let c = cluster(&etcd, 2);
    let layouts = host_layouts(&env, 2);
    // Records ending at `t0 + dt`: the runs before the hand-off at `t0`, the last after.
    let t0 = afk_supervisor::timeutil::now_epoch() - 50;
    let ended = |dt: i64, outcome: Outcome| {
        let mut r = Record::now(Some("w1"), None, outcome);
        r.end = afk_supervisor::timeutil::rfc3339(
            std::time::UNIX_EPOCH + Duration::from_secs((t0 as i64 + dt) as u64),
        );
        r
    };
    let run = |l: &afk_supervisor::layout::Layout, cost: f64, dt: i64| {
        let mut r = ended(dt, Outcome::AgentFailed(1));
        r.usage.cost_usd = Some(cost);
        ledger::append(l, 3, &r).unwrap();
        publish(&c, l, 3, &ledger::read(l, 3).unwrap()).unwrap();
    };
    run(&layouts[0], 0.5, -30);
    run(&layouts[1], 0.25, -20);
    run(&layouts[1], 0.25, -10);
    for l in &layouts {
        let s = spent_in(&c, l, 3, &ledger::read(l, 3).unwrap());
        assert_eq!((s.usd, s.runs), (1.0, 3), "{s:?}");
    }
    // Host 0 hands it to a person at t0: its ledger's marker, the fleet's reset.
    ledger::append(&layouts[0], 3, &ended(0, Outcome::OverBudget)).unwrap();
    reset(&c, 3, t0).unwrap();
    for l in &layouts {
        let s = spent_in(&c, l, 3, &ledger::read(l, 3).unwrap());
        assert_eq!((s.usd, s.runs), (0.0, 0), "{s:?}");
    }
    // A later run on host 1 counts alone, on either host.
    run(&layouts[1], 0.25, 10);
    for l in &layouts {
        let s = spent_in(&c, l, 3, &ledger::read(l, 3).unwrap());
        assert_eq!((s.usd, s.runs), (0.25, 1), "{s:?}");
    }
}

/// `n` checkouts' layouts under `env`, each its own host name (`this_host`).
fn host_layouts(env: &TestEnv, n: usize) -> Vec<afk_supervisor::layout::Layout> {
    (0..n)
        .map(|i| {
            let d = env.path().join(format!("host{i}"));
            std::fs::create_dir_all(d.join(".red/state")).unwrap();
            afk_supervisor::layout::Layout::new(&d)
        })
        .collect()
}

/// Issue 49, item 4: with a daily budget on a cluster, a worker about to claim checks and
/// reserves in etcd; etcd not answering, it claims nothing and exits 75 (a transient hold,
/// as without a live lease) with one line naming the key it could not read, and the issue
/// stays ready.
#[test]
fn a_worker_that_cannot_reach_etcd_for_the_days_budget_claims_nothing_and_exits_75() {
    let dead = format!("http://127.0.0.1:{}", crate::support::etcd::free_port());
    let f = crate::agents_spend::agent_fleet(
        "agent",
        "echo ran >> \"$AFK_TEST_DIR/ran\"\n",
        1,
        1,
        &format!(
            "[budget]\nusd_per_day = 1.0\nestimate_usd = 0.25\n\n\
             [cluster]\nengine = \"etcd\"\nendpoints = [\"{dead}\"]\nlease_s = 2\n"
        ),
    );
    let out = f.run_cmd(&["worker", "--once"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{err}");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("the fleet's day's budget cannot be checked"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].contains("etcd unavailable") && said[0].ends_with("; not claiming"),
        "{err}"
    );
    // Read from the store itself: `issue show` on a cluster asks etcd too.
    let t = f.env.local_tracker(&f.repo);
    assert_eq!(
        crate::support::local_labels(&t, 1),
        vec!["ready-for-agent".to_string()]
    );
    assert!(!f.file("ran").exists(), "no agent ran");
}
