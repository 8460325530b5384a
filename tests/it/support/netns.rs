//! A network namespace joined to the root namespace by one veth pair, for the fault tests
//! that cut a host or an etcd member off (`ip netns`, iproute2, root): the root end holds
//! the first address of a free `/30` in `10.231.0.0/16` (the etcd members listen there
//! too, `EtcdCluster`), the inner end the second, and a process started through
//! [`Netns::command`] reaches the root namespace only over that link, so taking the root
//! end down is a real network cut: its packets go nowhere, its calls time out (or find no
//! route once the neighbour entry is gone). Deleted on drop, also when the test panics.
//!
//! Tests run in parallel, in this process and in others (other checkouts' suites): the
//! names carry the pid and a counter, and the subnet is chosen under a host-wide lock
//! from the ones no interface holds now. Namespaces a killed test run left behind (their
//! pid gone) are deleted on the way.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The test prefix of every namespace made here (`afk-<pid>-<n>`).
const PREFIX: &str = "afk-";
/// `10.231.0.0/16`, split into /30 links.
const NET: [u8; 2] = [10, 231];
const LINKS: u32 = 1 << 14;

static NEXT: AtomicUsize = AtomicUsize::new(0);

pub struct Netns {
    /// `afk-<pid>-<n>`, as `ip netns list` shows it.
    pub name: String,
    /// The veth end in the root namespace, the one [`Netns::cut`] takes down.
    host_if: String,
    /// The root end's address: what the namespace reaches the rest of the machine by.
    pub host_addr: Ipv4Addr,
    /// The inner end's: what the rest of the machine reaches the namespace by.
    pub inner_addr: Ipv4Addr,
}

/// Runs `ip args`, panicking with what it said and what the test needs when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap_or_else(|e| {
        panic!(
            "ip {}: {e} (needs iproute2: apt-get install iproute2)",
            args.join(" ")
        )
    });
    assert!(
        out.status.success(),
        "ip {}: {} (needs root and iproute2)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// `ip args`'s stdout, empty when it fails (only for looking, never for acting).
fn ip_text(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The `/30` link number `k`'s two ends.
fn link(k: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = (k % LINKS) * 4;
    let (c, d) = ((base >> 8) as u8, (base & 0xff) as u8);
    (
        Ipv4Addr::new(NET[0], NET[1], c, d + 1),
        Ipv4Addr::new(NET[0], NET[1], c, d + 2),
    )
}

/// The IPv4 addresses every interface of the root namespace holds now.
fn addresses_in_use() -> BTreeSet<Ipv4Addr> {
    ip_text(&["-o", "-4", "addr", "show"])
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = w.iter().position(|&x| x == "inet")?;
            w.get(at + 1)?.split('/').next()?.parse().ok()
        })
        .collect()
}

/// Deletes the namespaces of test runs whose process is gone (a run killed mid-test
/// never dropped its own).
fn delete_orphans() {
    for line in ip_text(&["netns", "list"]).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let pid = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}

impl Netns {
    /// A new namespace with its link up (both ends and the inner `lo`).
    pub fn new() -> Netns {
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let name = format!("{PREFIX}{pid}-{n}");
        // Interface names are 15 bytes at most.
        let host_if = format!("afh{pid}n{n}");
        let inner_if = format!("afi{pid}n{n}");
        // One chooser at a time on this machine: the subnet is free when the veth holds it.
        let lock = File::options()
            .create(true)
            .append(true)
            .open(std::env::temp_dir().join("afk-netns.lock"))
            .expect("open the netns lock");
        lock.lock().expect("take the netns lock");
        delete_orphans();
        let used = addresses_in_use();
        let k = (0..LINKS)
            .map(|i| (i + pid * 7 + n as u32) % LINKS)
            .find(|&k| !used.contains(&link(k).0))
            .expect("a free 10.231.0.0/16 link");
        let (host_addr, inner_addr) = link(k);
        ip(&["netns", "add", &name]);
        // From here on a failure still deletes what was made.
        let ns = Netns {
            name,
            host_if,
            host_addr,
            inner_addr,
        };
        let name = ns.name.as_str();
        ip(&[
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &inner_if,
        ]);
        ip(&["link", "set", &inner_if, "netns", name]);
        ip(&[
            "addr",
            "add",
            &format!("{host_addr}/30"),
            "dev",
            &ns.host_if,
        ]);
        ip(&["link", "set", &ns.host_if, "up"]);
        let inner = |args: &[&str]| {
            let mut all = vec!["-n", name];
            all.extend_from_slice(args);
            ip(&all);
        };
        inner(&["addr", "add", &format!("{inner_addr}/30"), "dev", &inner_if]);
        inner(&["link", "set", &inner_if, "up"]);
        inner(&["link", "set", "lo", "up"]);
        drop(lock);
        ns
    }

    /// Takes the root end down: nothing passes between the namespace and the rest.
    pub fn cut(&self) {
        ip(&["link", "set", &self.host_if, "down"]);
    }

    /// Brings the root end back up.
    pub fn restore(&self) {
        ip(&["link", "set", &self.host_if, "up"]);
    }

    /// `program` run inside the namespace (`ip netns exec <name> program`, which execs it:
    /// the child's pid is the program's).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The veth goes with the namespace, but only once the kernel gets to it: delete it
        // first so its address is free for the next test at once.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
