//! The git revision and build date `--version` prints, and which of the test suite's
//! outside prerequisites this machine has, as `cfg`s the tests use to `#[ignore]`
//! themselves with the reason where one is missing.
//!
//! Under `CI=true` every prerequisite but the cgroup memory controller counts as present: `.ci/run` installs them, so a
//! missing one makes its tests fail there rather than pass unseen. Installing a tool later
//! without a change of `PATH` needs a rebuild of this script (`touch build.rs`).

use std::process::{Command, Stdio};

#[path = "src/timeutil/civil.rs"]
mod civil;

/// (cfg name, program, its version flag).
const TOOLS: [(&str, &str, &str); 9] = [
    ("afk_has_bwrap", "bwrap", "--version"),
    ("afk_has_tmux", "tmux", "-V"),
    ("afk_has_jq", "jq", "--version"),
    ("afk_has_systemd_analyze", "systemd-analyze", "--version"),
    ("afk_has_gh", "gh", "--version"),
    // The completion scripts are tried in the shells they are for.
    ("afk_has_zsh", "zsh", "--version"),
    ("afk_has_fish", "fish", "--version"),
    // The real agent CLIs are installed with npm and Codex's launcher runs on node.
    ("afk_has_npm", "npm", "--version"),
    // `[cluster]`'s tests start their own etcd members (Debian's etcd-server).
    ("afk_has_etcd", "etcd", "--version"),
];

fn runs(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `mount --bind` needs root (or a mount namespace the tests do not make).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"0")
}

fn can_bind_mount() -> bool {
    is_root() && runs("mount", "--version")
}

/// `git` in the manifest dir, its trimmed stdout when it succeeds.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// `yyyy-mm-dd` of a day count since 1970-01-01.
fn civil(days: i64) -> String {
    let (y, m, d) = civil::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `--version`'s revision and build date. A tarball without `.git` says `unknown`; the
/// date honours `SOURCE_DATE_EPOCH` so a reproducible build stays reproducible.
fn version_facts() {
    println!("cargo::rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A commit or checkout moves HEAD's reflog: rebuild the version then.
    if let Some(p) = git(&["rev-parse", "--git-path", "logs/HEAD"]) {
        println!("cargo::rerun-if-changed={p}");
    }
    if let Some(p) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo::rerun-if-changed={p}");
    }
    // Only this crate's own checkout counts: a tarball unpacked inside another repo is not it.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let own = git(&["rev-parse", "--show-toplevel"]).is_some_and(|top| {
        std::fs::canonicalize(top).ok() == std::fs::canonicalize(&manifest).ok()
    });
    let rev = own
        .then(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .flatten()
        .unwrap_or_else(|| "unknown".into());
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    println!("cargo::rustc-env=AFK_GIT_REV={rev}");
    println!(
        "cargo::rustc-env=AFK_BUILD_DATE={}",
        civil(secs.div_euclid(86_400))
    );
}

/// The cgroup v2 directory this build runs in (tests inherit it), from
/// `/proc/self/mountinfo` and `/proc/self/cgroup`.
fn own_v2_cgroup() -> Option<std::path::PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (root, point) = info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2").then_some(())?;
        let mut f = left.split_whitespace();
        Some((f.nth(3)?.to_string(), f.next()?.to_string()))
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let rest = path.strip_prefix(root.trim_end_matches('/'))?;
    Some(std::path::Path::new(&point).join(rest.trim_start_matches('/')))
}

/// Whether a cgroup can be made (and removed) below this process's own v2 cgroup.
fn cgroup_v2_writable() -> bool {
    let Some(dir) = own_v2_cgroup() else {
        return false;
    };
    let probe = dir.join(format!("afk-build-probe-{}", std::process::id()));
    let made = std::fs::create_dir(&probe).is_ok();
    made && std::fs::remove_dir(&probe).is_ok()
}

/// Whether the memory controller is offered in this process's own v2 cgroup.
fn memory_controller() -> bool {
    own_v2_cgroup()
        .and_then(|d| std::fs::read_to_string(d.join("cgroup.controllers")).ok())
        .is_some_and(|c| c.split_whitespace().any(|w| w == "memory"))
}

fn main() {
    version_facts();
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=PATH");
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let mut found: Vec<(&str, bool)> = TOOLS
        .iter()
        .map(|&(cfg, program, arg)| (cfg, ci || runs(program, arg)))
        .collect();
    found.push(("afk_can_bind_mount", ci || can_bind_mount()));
    // A test that hands a fleet to an unprivileged user needs root (CI runs as root).
    found.push(("afk_is_root", ci || is_root()));
    // The network-cut tests put a host or an etcd member in a network namespace (`ip netns`).
    found.push(("afk_can_netns", ci || (is_root() && runs("ip", "-V"))));
    found.push(("afk_has_cgroup_v2", ci || cgroup_v2_writable()));
    // Not assumed under CI: its v2 hierarchy has no memory controller, so the tests that
    // need one stay ignored there rather than fail.
    found.push(("afk_has_memory_cgroup", !ci && memory_controller()));
    for (cfg, present) in found {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if present {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}
