//! A throw-away Python venv with the official MCP SDK (`mcp`) and `jsonschema`, made once
//! under the target dir and reused by later runs: the real clients the MCP and status
//! schema tests drive the binary with. Making it needs `python3 -m venv` and PyPI; a
//! failure fails the test (with pip's words), never skips it.

use std::path::PathBuf;
use std::process::Command;

/// What pip installs; bump the marker name when this list changes.
const PACKAGES: [&str; 2] = ["mcp", "jsonschema"];
const MARKER: &str = "afk-ready-v1";

/// The venv's `python`, creating the venv the first time (under an exclusive lock, so
/// tests running at once make it once).
pub fn venv_python() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv");
    let python = dir.join("bin/python");
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    lock.lock().unwrap();
    if dir.join(MARKER).exists() {
        return python;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let run = |cmd: &mut Command, what: &str| {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
        assert!(
            out.status.success(),
            "{what} failed (the MCP and schema tests need python3-venv and PyPI):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&dir),
        "python3 -m venv",
    );
    run(
        Command::new(dir.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(PACKAGES),
        "pip install mcp jsonschema",
    );
    std::fs::write(dir.join(MARKER), "").unwrap();
    python
}

/// One session of the official MCP SDK (`tests/it/support/mcp_session.py`) with
/// `afk-supervisor --repo <repo> mcp` in `mode` (`read`, or `write` with `--allow-writes`),
/// the binary's environment `vars`; what the script printed, as JSON.
pub fn mcp_session(
    repo: &std::path::Path,
    mode: &str,
    vars: Vec<(std::ffi::OsString, std::ffi::OsString)>,
) -> serde_json::Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/support/mcp_session.py"
    );
    let out = Command::new(venv_python())
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_afk-supervisor"))
        .arg(repo)
        .arg(mode)
        .envs(vars)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
