//! The README's tested blocks, run as written (issue 26). The rule, as the README states it:
//! a ```` ```console ```` block right after a line `<!-- tested -->` is run; the tested blocks
//! run in order in one scratch checkout with a bare `origin`; each `$ ` line goes through
//! `sh -c` with the binary first on `PATH`, stdout and stderr together; the lines after it are
//! its documented output, where `…` in a line stands for any text and a line of only `…` for
//! any number of lines. Every command must exit 0. Unmarked blocks are left alone, so other
//! sections can be added without being run.

use std::path::Path;
use std::process::Stdio;

use crate::support::{self, TestEnv};

const MARKER: &str = "<!-- tested -->";

/// One `$ ` command and its documented output.
#[derive(Debug)]
struct Step {
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// The steps of every marked block, in README order.
fn tested_steps(readme: &str) -> Vec<Step> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut steps: Vec<Step> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != MARKER {
            i += 1;
            continue;
        }
        let fence = i + 1;
        assert!(
            lines.get(fence).is_some_and(|l| l.trim() == "```console"),
            "README.md:{}: {MARKER} must be followed by a ```console block",
            i + 1
        );
        i = fence + 1;
        while i < lines.len() && lines[i].trim() != "```" {
            let l = lines[i];
            match l.strip_prefix("$ ") {
                Some(cmd) => steps.push(Step {
                    line: i + 1,
                    command: cmd.to_string(),
                    expected: Vec::new(),
                }),
                None => steps
                    .last_mut()
                    .unwrap_or_else(|| panic!("README.md:{}: output before a command", i + 1))
                    .expected
                    .push(l.to_string()),
            }
            i += 1;
        }
    }
    steps
}

/// `line` matches `pattern`, where each `…` is any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || !line[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    true
}

/// `lines` match `pattern` lines, a line of only `…` taking any number of lines.
fn lines_match(pattern: &[String], lines: &[&str]) -> bool {
    match pattern.split_first() {
        None => lines.is_empty(),
        Some((p, rest)) if p.trim() == "…" => {
            (0..=lines.len()).any(|skip| lines_match(rest, &lines[skip..]))
        }
        Some((p, rest)) => {
            !lines.is_empty() && line_matches(p, lines[0]) && lines_match(rest, &lines[1..])
        }
    }
}

#[test]
fn the_matcher_means_what_the_readme_says() {
    assert!(line_matches("a…c", "abbbc"));
    assert!(line_matches("wrote …/x.toml", "wrote /tmp/r/x.toml"));
    assert!(!line_matches("a…c", "abd"));
    assert!(line_matches("…", ""));
    let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(&p(&["…", "z"]), &["x", "y", "z"]));
    assert!(lines_match(&p(&["…", "z"]), &["z"]));
    assert!(!lines_match(&p(&["a"]), &["a", "b"]));
    let steps = tested_steps("x\n<!-- tested -->\n```console\n$ echo hi\nhi\n$ true\n```\n");
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].expected, ["hi"]);
    assert!(steps[1].expected.is_empty());
}

#[test]
fn the_readme_tested_blocks_run_as_documented() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let steps = tested_steps(&readme);
    assert!(steps.len() >= 5, "too few tested commands: {steps:?}");
    let env = TestEnv::new();
    let repo = env.repo_with_origin().path;
    let path = support::path_with_bin();
    let tag = format!("readme-{}", std::process::id());
    let _stop = StopFleet {
        env: &env,
        repo: &repo,
    };
    for step in &steps {
        let out = env
            .command("sh")
            .arg("-c")
            .arg(format!("exec 2>&1\n{}", step.command))
            .current_dir(&repo)
            .env("PATH", &path)
            .env("AFK_TEST_TAG", &tag)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let got = String::from_utf8_lossy(&out.stdout).into_owned();
        let got_lines: Vec<&str> = got.lines().collect();
        assert!(
            out.status.success(),
            "README.md:{}: `{}` exited {:?}:\n{got}",
            step.line,
            step.command,
            out.status.code()
        );
        assert!(
            lines_match(&step.expected, &got_lines),
            "README.md:{}: `{}`\n--- documented\n{}\n--- got\n{got}",
            step.line,
            step.command,
            step.expected.join("\n")
        );
    }
}

/// Whatever the blocks left running is ended, even when a step failed before their `stop`.
struct StopFleet<'a> {
    env: &'a TestEnv,
    repo: &'a Path,
}

impl Drop for StopFleet<'_> {
    fn drop(&mut self) {
        let _ = self
            .env
            .bin()
            .arg("--repo")
            .arg(self.repo)
            .args(["stop", "--force"])
            .output();
    }
}
