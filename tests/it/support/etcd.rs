//! A real 3-member etcd cluster for the `[cluster]` tests: Debian's `etcd-server`, each
//! member on free loopback ports with its data in the test's temp dir, `--pre-vote=true`
//! (a member back from a partition does not disrupt the leader). Started with a deadline,
//! killed and its data removed on drop. For the network-cut tests (`support::netns`): a
//! cluster a host in a namespace reaches listens for clients on the namespace link's root
//! end too; and one member can run in a namespace of its own, the others then on the link's
//! root end (which stays theirs while the link is down), so cutting the link cuts that
//! member off from its peers and the fleet.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use afk_supervisor::cluster::Etcd;

use super::netns::Netns;
use super::wait_until;

pub struct Member {
    pub name: String,
    /// What it listens on, advertises and is reached at: peers and clients.
    pub addr: Ipv4Addr,
    pub client: u16,
    pub peer: u16,
    pub child: Option<Child>,
    /// The namespace it runs in, if any (deleted after the member is killed).
    netns: Option<Netns>,
}

pub struct EtcdCluster {
    pub dir: PathBuf,
    pub members: Vec<Member>,
    /// Addresses besides its own every member outside a namespace answers clients on.
    also_on: Vec<Ipv4Addr>,
}

/// A loopback port nothing listens on now (the listener is dropped at once; the member binds
/// it a moment later).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl EtcdCluster {
    /// Three members under `dir/etcd`, answering within the deadline.
    pub fn start(dir: &Path) -> EtcdCluster {
        EtcdCluster::start_reachable_from(dir, &[])
    }

    /// [`EtcdCluster::start`], the members answering clients also on each of `also_on`
    /// (a namespace link's root end, [`Netns::host_addr`]), on the same port.
    pub fn start_reachable_from(dir: &Path, also_on: &[Ipv4Addr]) -> EtcdCluster {
        EtcdCluster::start_on(dir, [Ipv4Addr::LOCALHOST; 3], also_on, None)
    }

    /// [`EtcdCluster::start`] with member `cut_off` in a network namespace of its own and
    /// the others on its link's root end: [`EtcdCluster::cut`] takes that member off the
    /// network.
    pub fn start_with_member_in_netns(dir: &Path, cut_off: usize) -> EtcdCluster {
        let ns = Netns::new();
        let mut addrs = [ns.host_addr; 3];
        addrs[cut_off] = ns.inner_addr;
        EtcdCluster::start_on(dir, addrs, &[Ipv4Addr::LOCALHOST], Some((cut_off, ns)))
    }

    fn start_on(
        dir: &Path,
        addrs: [Ipv4Addr; 3],
        also_on: &[Ipv4Addr],
        mut netns: Option<(usize, Netns)>,
    ) -> EtcdCluster {
        let dir = dir.join("etcd");
        std::fs::create_dir_all(&dir).unwrap();
        let members: Vec<Member> = (0..3)
            .map(|i| Member {
                name: format!("m{i}"),
                addr: addrs[i],
                client: free_port(),
                peer: free_port(),
                child: None,
                netns: netns.take_if(|(at, _)| *at == i).map(|(_, ns)| ns),
            })
            .collect();
        let mut c = EtcdCluster {
            dir,
            members,
            also_on: (also_on.iter().copied())
                .filter(|a| !addrs.contains(a))
                .collect(),
        };
        for i in 0..3 {
            c.start_member(i, "new");
        }
        c.wait_healthy();
        c
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://{}:{}", m.name, m.addr, m.peer))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts member `i` (again): `state` is `new` for the first start, `existing` after.
    pub fn start_member(&mut self, i: usize, state: &str) {
        let initial = self.initial_cluster();
        let m = &self.members[i];
        let data = self.dir.join(&m.name);
        let also = if m.netns.is_some() {
            &[][..]
        } else {
            &self.also_on[..]
        };
        let listen: Vec<String> = std::iter::once(m.addr)
            .chain(also.iter().copied())
            .map(|a| format!("http://{a}:{}", m.client))
            .collect();
        let at = |port: u16| format!("http://{}:{port}", m.addr);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", m.name)))
            .unwrap();
        let child = match &m.netns {
            None => Command::new("etcd"),
            Some(ns) => ns.command("etcd"),
        }
        .args(["--name", &m.name])
        .arg("--data-dir")
        .arg(&data)
        .args([
            "--listen-client-urls",
            &listen.join(","),
            "--advertise-client-urls",
            &at(m.client),
            "--listen-peer-urls",
            &at(m.peer),
            "--initial-advertise-peer-urls",
            &at(m.peer),
            "--initial-cluster",
            &initial,
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            "afk-test",
            "--pre-vote=true",
            "--heartbeat-interval=100",
            "--election-timeout=1000",
            "--log-level=warn",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("etcd (apt-get install etcd-server)");
        self.members[i].child = Some(child);
    }

    /// `http://<addr>:<port>` of every member (loopback unless one is in a namespace), for
    /// `cluster.endpoints`.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// Member `i`'s client URL.
    pub fn endpoint(&self, i: usize) -> String {
        let m = &self.members[i];
        format!("http://{}:{}", m.addr, m.client)
    }

    /// `http://<addr>:<port>` of every member: `addr` is loopback or one of the addresses
    /// the cluster was started reachable from.
    pub fn endpoints_at(&self, addr: Ipv4Addr) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://{addr}:{}", m.client))
            .collect()
    }

    /// The `[cluster]` table of a fleet on this cluster with a `lease_s` lease.
    pub fn config(&self, lease_s: u64) -> String {
        self.config_at(Ipv4Addr::LOCALHOST, lease_s)
    }

    /// [`EtcdCluster::config`] for a host that reaches the members at `addr`.
    pub fn config_at(&self, addr: Ipv4Addr, lease_s: u64) -> String {
        let eps: Vec<String> = (self.endpoints_at(addr).iter())
            .map(|e| format!("{e:?}"))
            .collect();
        format!(
            "[cluster]\nengine = \"etcd\"\nendpoints = [{}]\nlease_s = {lease_s}\n",
            eps.join(", ")
        )
    }

    pub fn client(&self) -> Etcd {
        Etcd::new(self.endpoints(), Duration::from_secs(2), None)
    }

    /// Waits until a write through the cluster succeeds.
    pub fn wait_healthy(&self) {
        let c = self.client();
        assert!(
            wait_until(Duration::from_secs(60), || c
                .put("afk-test/ping", "1", 0)
                .is_ok()),
            "etcd did not become healthy; logs in {}",
            self.dir.display()
        );
    }

    /// Member `i` alone, as a client.
    pub fn member_client(&self, i: usize) -> Etcd {
        Etcd::new(vec![self.endpoint(i)], Duration::from_secs(2), None)
    }

    /// Index of the member that is the raft leader now.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().enumerate().find_map(|(i, m)| {
            m.child.as_ref()?;
            let (me, leader) = self.member_client(i).status().ok()?;
            (me == leader && me != "null").then_some(i)
        })
    }

    /// Makes member `to` the leader (etcd's own leadership transfer, asked of the leader).
    pub fn move_leader(&self, to: usize) {
        let now = self.leader().expect("an etcd leader");
        if now == to {
            return;
        }
        let (id, _) = (self.member_client(to).status()).expect("the member's status");
        let url = format!("{}/v3/maintenance/transfer-leadership", self.endpoint(now));
        let body = format!("{{\"targetID\":\"{id}\"}}");
        ureq::post(&url)
            .header("Content-Type", "application/json")
            .send(&body)
            .unwrap_or_else(|e| panic!("move the etcd leader to m{to}: {e}"));
        let moved = wait_until(Duration::from_secs(30), || self.leader() == Some(to));
        assert!(moved, "m{to} did not become the etcd leader");
    }

    /// The network namespace the cut-off member runs in.
    fn netns(&self) -> &Netns {
        (self.members.iter().find_map(|m| m.netns.as_ref()))
            .expect("an etcd member in a network namespace")
    }

    /// Cuts the member in a namespace off from its peers and every client.
    pub fn cut(&self) {
        self.netns().cut();
    }

    /// Gives it its link back.
    pub fn restore(&self) {
        self.netns().restore();
    }

    pub fn kill_member(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill_member(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
