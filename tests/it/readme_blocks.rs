//! The documents' tested blocks, run as written (issues 26 and 53). The rule, as
//! `docs/guide/testing.md` states it: a ```` ```console ```` block right after a line
//! `<!-- tested -->`, in `README.md` or a page of `docs/guide/`, is run; the tested blocks of
//! the README and then of each guide page (file-name order) run in order in one scratch
//! checkout with a bare `origin`; each `$ ` line goes through `sh -c` with the binary first
//! on `PATH`, stdout and stderr together; the lines after it are its documented output, where
//! `…` in a line stands for any text and a line of only `…` for any number of lines. Every
//! command must exit 0. Unmarked blocks are left alone, except in the README, which shows no
//! command that is not checked: a console block there must be tested, and an `sh` block must
//! follow `<!-- ci -->` with every command one `.ci/run` runs. The README stays under 600
//! lines, and every relative link of the documents names a file that exists.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::support::{self, TestEnv, docs};

const MARKER: &str = "<!-- tested -->";
const CI_MARKER: &str = "<!-- ci -->";
/// The README is the newcomer's page: what it is, the quick start, the main commands, links.
const README_MAX_LINES: usize = 600;

/// One `$ ` command and its documented output.
#[derive(Debug)]
struct Step {
    file: PathBuf,
    line: usize,
    command: String,
    expected: Vec<String>,
}

impl Step {
    fn at(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }
}

/// The steps of every marked block of `file` (whose text is `text`), in order.
fn tested_steps(file: &Path, text: &str) -> Vec<Step> {
    let lines: Vec<&str> = text.lines().collect();
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
            "{}:{}: {MARKER} must be followed by a ```console block",
            file.display(),
            i + 1
        );
        i = fence + 1;
        while i < lines.len() && lines[i].trim() != "```" {
            let l = lines[i];
            match l.strip_prefix("$ ") {
                Some(cmd) => steps.push(Step {
                    file: file.to_path_buf(),
                    line: i + 1,
                    command: cmd.to_string(),
                    expected: Vec::new(),
                }),
                None => steps
                    .last_mut()
                    .unwrap_or_else(|| {
                        panic!("{}:{}: output before a command", file.display(), i + 1)
                    })
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

/// A fenced block: the line of its opening fence (1-based), its language, the line before
/// it, and its lines.
struct Block<'a> {
    line: usize,
    lang: &'a str,
    before: &'a str,
    body: Vec<&'a str>,
}

/// The fenced blocks of `text`, in order.
fn blocks(text: &str) -> Vec<Block<'_>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].trim().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let open = i;
        i += 1;
        let start = i;
        while i < lines.len() && lines[i].trim() != "```" {
            i += 1;
        }
        out.push(Block {
            line: open + 1,
            lang,
            before: if open == 0 {
                ""
            } else {
                lines[open - 1].trim()
            },
            body: lines[start..i.min(lines.len())].to_vec(),
        });
        i += 1;
    }
    out
}

/// What is wrong with the README's shell blocks: a console block not marked tested, an `sh`
/// block not marked `<!-- ci -->`, or a command of one that `ci` (the text of `.ci/run`)
/// does not run as written. Each entry names its line.
fn unchecked_commands(readme: &str, ci: &str) -> Vec<String> {
    let ci_lines: Vec<&str> = ci.lines().map(str::trim).collect();
    let mut wrong = Vec::new();
    for b in blocks(readme) {
        match b.lang {
            "console" if b.before != MARKER => {
                wrong.push(format!("{}: a console block without {MARKER}", b.line))
            }
            "sh" | "bash" | "shell" if b.before != CI_MARKER => wrong.push(format!(
                "{}: a ```{} block without {CI_MARKER} (or make it a tested console block)",
                b.line, b.lang
            )),
            "sh" | "bash" | "shell" => {
                for (k, l) in b.body.iter().enumerate() {
                    let command = l.split("  #").next().unwrap_or("").trim();
                    if !command.is_empty()
                        && !command.starts_with('#')
                        && !ci_lines.contains(&command)
                    {
                        wrong.push(format!(
                            "{}: `{command}` is not a line .ci/run runs",
                            b.line + 1 + k
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    wrong
}

/// The relative link targets of `text` outside fenced blocks, with their lines.
fn relative_links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if !target.contains("://") && !target.starts_with("mailto:") {
                out.push((n + 1, target.to_string()));
            }
            rest = &rest[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of `text`'s headings (outside fenced blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The links of `file` (relative to the crate root) whose file or anchor does not exist.
fn broken_links(root: &Path, file: &Path) -> Vec<String> {
    let text = docs::read(file);
    let dir = file.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for (line, target) in relative_links(&text) {
        let (path, frag) = match target.split_once('#') {
            Some((p, f)) => (p, Some(f)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        let at = format!("{}:{line}: ({target})", file.display());
        if !root.join(&resolved).exists() {
            broken.push(format!("{at}: no file {}", resolved.display()));
            continue;
        }
        if let Some(frag) = frag {
            let heads = anchors(&std::fs::read_to_string(root.join(&resolved)).unwrap_or_default());
            if !heads.iter().any(|h| h == frag) {
                broken.push(format!(
                    "{at}: no heading #{frag} in {}",
                    resolved.display()
                ));
            }
        }
    }
    broken
}

#[test]
fn the_matcher_means_what_the_guide_says() {
    assert!(line_matches("a…c", "abbbc"));
    assert!(line_matches("wrote …/x.toml", "wrote /tmp/r/x.toml"));
    assert!(!line_matches("a…c", "abd"));
    assert!(line_matches("…", ""));
    let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(&p(&["…", "z"]), &["x", "y", "z"]));
    assert!(lines_match(&p(&["…", "z"]), &["z"]));
    assert!(!lines_match(&p(&["a"]), &["a", "b"]));
    let f = Path::new("x.md");
    let steps = tested_steps(
        f,
        "x\n<!-- tested -->\n```console\n$ echo hi\nhi\n$ true\n```\n",
    );
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].expected, ["hi"]);
    assert_eq!(steps[1].at(), "x.md:6");
    assert!(steps[1].expected.is_empty());
}

#[test]
fn the_checks_of_the_readme_find_what_they_look_for() {
    let ci = "set -e\ncargo test --all-targets\n";
    let readme = "<!-- ci -->\n```sh\ncargo test --all-targets   # the suite\n```\n\
                  <!-- tested -->\n```console\n$ true\n```\n```text\nnot a command\n```\n";
    assert!(unchecked_commands(readme, ci).is_empty());
    let wrong = unchecked_commands(
        "```console\n$ ls\n```\n```sh\nls\n```\n<!-- ci -->\n```bash\ncargo build\n```\n",
        ci,
    );
    assert_eq!(wrong.len(), 3, "{wrong:?}");
    assert!(wrong[0].starts_with("1: a console block"), "{wrong:?}");
    assert!(wrong[2].starts_with("9: `cargo build`"), "{wrong:?}");
    let links =
        relative_links("[a](x.md) [b](https://e.org) `x`\n```\n[c](y.md)\n```\n[d](z.md#h)");
    assert_eq!(links, [(1, "x.md".into()), (5, "z.md#h".into())]);
    assert_eq!(
        anchor("On your own repo: `init`, `issue new`"),
        "on-your-own-repo-init-issue-new"
    );
}

#[test]
fn the_readme_shows_no_unchecked_command() {
    let wrong = unchecked_commands(
        &docs::read(Path::new("README.md")),
        &docs::read(Path::new(".ci/run")),
    );
    assert!(wrong.is_empty(), "README.md:{}", wrong.join("\nREADME.md:"));
}

#[test]
fn the_readme_stays_short() {
    let lines = docs::read(Path::new("README.md")).lines().count();
    assert!(
        lines < README_MAX_LINES,
        "README.md has {lines} lines, not under {README_MAX_LINES}: move operator detail to docs/guide/"
    );
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = docs::linked_files();
    assert!(files.len() >= 5, "too few documents: {files:?}");
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(root, f)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_docs_tested_blocks_run_as_documented() {
    let steps: Vec<Step> = docs::tested_files()
        .iter()
        .flat_map(|f| tested_steps(f, &docs::read(f)))
        .collect();
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
            "{}: `{}` exited {:?}:\n{got}",
            step.at(),
            step.command,
            out.status.code()
        );
        assert!(
            lines_match(&step.expected, &got_lines),
            "{}: `{}`\n--- documented\n{}\n--- got\n{got}",
            step.at(),
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

/// The source files `docs/ARCHITECTURE.md` sends a maintainer to, `src/…` anywhere on the
/// page and the "now" column of its walks (paths under `src/`): the file names of the
/// walks before the move stay as written, as history.
fn architecture_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .filter(|t| t.ends_with(".rs") || t.ends_with('/'))
            .map(str::to_string)
            .collect()
    };
    let mut in_walks = false;
    for line in text.lines() {
        if line.starts_with("## ") {
            in_walks = line == "## Five walks";
        }
        for t in ticked(line) {
            if t.starts_with("src/") {
                out.push(t);
            }
        }
        let cells: Vec<&str> = line.split('|').collect();
        if in_walks && cells.len() == 7 && !line.contains("---") && !line.contains("question") {
            for t in ticked(cells[4]) {
                if !t.starts_with("src/") {
                    out.push(format!("src/{t}"));
                }
            }
        }
    }
    out
}

#[test]
fn the_architecture_names_only_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = docs::read(Path::new("docs/ARCHITECTURE.md"));
    let paths = architecture_paths(&text);
    assert!(
        paths.len() > 20,
        "only {} paths read: {paths:?}",
        paths.len()
    );
    let missing: Vec<&String> = paths.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names missing files: {missing:?}"
    );
}
