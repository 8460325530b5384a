//! `[cluster]`'s client against a real 3-member etcd (`docs/SPEC.md` §11.23): the claim
//! transaction and its fencing token, the done key of a hand-off, the lease that takes its
//! claims with it, and a client that goes on through another member when the leader dies.

use std::time::Duration;

use afk_supervisor::cluster::{Cluster, Ending};
use afk_supervisor::config::{ClusterCfg, cluster::Engine};

use crate::support::etcd::EtcdCluster;
use crate::support::{TestEnv, wait_until};

fn cluster(etcd: &EtcdCluster, lease_s: u64) -> Cluster {
    let cfg = ClusterCfg {
        engine: Engine::Etcd,
        endpoints: etcd.endpoints(),
        lease_s,
        prefix: None,
        username: None,
        password_file: None,
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
