//! Which of the test suite's outside prerequisites this machine has, as `cfg`s the tests
//! use to `#[ignore]` themselves with the reason where one is missing.
//!
//! Under `CI=true` every prerequisite counts as present: `.ci/run` installs them, so a
//! missing one makes its tests fail there rather than pass unseen. Installing a tool later
//! without a change of `PATH` needs a rebuild of this script (`touch build.rs`).

use std::process::{Command, Stdio};

/// (cfg name, program, its version flag).
const TOOLS: [(&str, &str, &str); 4] = [
    ("afk_has_tmux", "tmux", "-V"),
    ("afk_has_jq", "jq", "--version"),
    ("afk_has_systemd_analyze", "systemd-analyze", "--version"),
    ("afk_has_gh", "gh", "--version"),
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
fn can_bind_mount() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"0");
    root && runs("mount", "--version")
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=PATH");
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let mut found: Vec<(&str, bool)> = TOOLS
        .iter()
        .map(|&(cfg, program, arg)| (cfg, ci || runs(program, arg)))
        .collect();
    found.push(("afk_can_bind_mount", ci || can_bind_mount()));
    for (cfg, present) in found {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if present {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}
