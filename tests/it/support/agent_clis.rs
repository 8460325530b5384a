//! The real agent CLIs, installed once from the npm registry at pinned versions under the
//! target dir and reused by later runs: Claude Code (`@anthropic-ai/claude-code`, a native
//! binary the package ships) and Codex (`@openai/codex`, a Node wrapper around its native
//! binary). Installing needs `npm` and the registry; a failure fails the test with npm's
//! words, never skips it.

use std::path::PathBuf;
use std::process::Command;

/// The pinned versions; the corpus under `tests/corpus/agents/real/` is recorded from them.
pub const CLAUDE_VERSION: &str = "2.1.332";
pub const CODEX_VERSION: &str = "0.171.0";

/// The install's directory name: a new pin installs afresh beside the old one.
fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("agent-clis-{CLAUDE_VERSION}-{CODEX_VERSION}"))
}

const MARKER: &str = "afk-ready";

/// The installed CLIs' `bin` dir (`claude`, `codex`), installing them the first time
/// (under an exclusive lock, so tests running at once install once).
pub fn bin_dir() -> PathBuf {
    let dir = dir();
    let bin = dir.join("node_modules/.bin");
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    lock.lock().unwrap();
    if dir.join(MARKER).exists() {
        return bin;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--prefix",
        ])
        .arg(&dir)
        .arg(format!("@anthropic-ai/claude-code@{CLAUDE_VERSION}"))
        .arg(format!("@openai/codex@{CODEX_VERSION}"))
        .output()
        .unwrap_or_else(|e| panic!("npm: cannot run (the agent CLI tests need node and npm): {e}"));
    assert!(
        out.status.success(),
        "npm install of the agent CLIs failed (the tests need the npm registry):\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for (cli, want) in [("claude", CLAUDE_VERSION), ("codex", CODEX_VERSION)] {
        let v = Command::new(bin.join(cli)).arg("--version").output();
        let v = v.unwrap_or_else(|e| panic!("{cli} --version: cannot run: {e}"));
        let text = String::from_utf8_lossy(&v.stdout);
        assert!(
            v.status.success() && text.contains(want),
            "{cli} --version said {text:?} {:?}",
            String::from_utf8_lossy(&v.stderr)
        );
    }
    std::fs::write(dir.join(MARKER), "").unwrap();
    bin
}
