//! A real 3-member etcd cluster for the `[cluster]` tests: Debian's `etcd-server`, each
//! member on free loopback ports with its data in the test's temp dir, `--pre-vote=true`
//! (a member back from a partition does not disrupt the leader). Started with a deadline,
//! killed and its data removed on drop. A cluster for a host in a network namespace
//! (`support::netns`) listens for clients on the namespace link's root end too.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use afk_supervisor::cluster::Etcd;

use super::wait_until;

pub struct Member {
    pub name: String,
    pub client: u16,
    pub peer: u16,
    pub child: Option<Child>,
}

pub struct EtcdCluster {
    pub dir: PathBuf,
    pub members: Vec<Member>,
    /// Addresses besides loopback every member answers clients on.
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
    /// (a namespace link's root end, [`super::netns::Netns::host_addr`]), on the same port.
    pub fn start_reachable_from(dir: &Path, also_on: &[Ipv4Addr]) -> EtcdCluster {
        let dir = dir.join("etcd");
        std::fs::create_dir_all(&dir).unwrap();
        let members: Vec<Member> = (0..3)
            .map(|i| Member {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                child: None,
            })
            .collect();
        let mut c = EtcdCluster {
            dir,
            members,
            also_on: also_on.to_vec(),
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
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts member `i` (again): `state` is `new` for the first start, `existing` after.
    pub fn start_member(&mut self, i: usize, state: &str) {
        let initial = self.initial_cluster();
        let m = &self.members[i];
        let data = self.dir.join(&m.name);
        let listen: Vec<String> = std::iter::once(Ipv4Addr::LOCALHOST)
            .chain(self.also_on.iter().copied())
            .map(|a| format!("http://{a}:{}", m.client))
            .collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", m.name)))
            .unwrap();
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--listen-client-urls",
                &listen.join(","),
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{}", m.client),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{}", m.peer),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", m.peer),
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

    /// `http://127.0.0.1:<port>` of every member, for `cluster.endpoints`.
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints_at(Ipv4Addr::LOCALHOST)
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

    /// Index of the member that is the raft leader now.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().enumerate().find_map(|(i, m)| {
            m.child.as_ref()?;
            let one = Etcd::new(
                vec![format!("http://127.0.0.1:{}", m.client)],
                Duration::from_secs(2),
                None,
            );
            let (me, leader) = one.status().ok()?;
            (me == leader && me != "null").then_some(i)
        })
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
