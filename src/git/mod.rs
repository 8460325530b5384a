//! The git layer: `git -C <repo> …` with argv, a deadline, and errors that carry git's
//! stderr. Sweeps never shell out to git themselves; they call the operations here.
//!
//! Every operation costs a fixed number of git calls whatever the number of branches or
//! paths it is given (argv is chunked only when it would exceed [`ARGV_BUDGET`]), so a sweep
//! over thousands of branches stays a handful of processes. [`Git::calls`] counts them.

mod branches;
mod objects;
pub mod parse;
mod paths;
mod snapshot;
mod worktree;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::cmd::{self, Argv, RunOpts};
use crate::text::{clip, one_line};

pub use parse::{ChangeKind, Changes, Names, PathChange, Worktree};
pub use snapshot::{FLEET_EMAIL, FLEET_NAME};

/// Default deadline of one git call; fetch and push get the same, local reads rarely need it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The remote every branch operation talks to.
pub const REMOTE: &str = "origin";

/// Upper bound on the bytes of names passed in one git argv. Linux allows far more in total
/// (`ARG_MAX`, usually 2 MiB shared with the environment), so this only splits lists of
/// several thousand long names.
pub const ARGV_BUDGET: usize = 256 * 1024;

/// Bytes counted per name on top of its length: the `refs/heads/` a refspec adds, the
/// terminating NUL and the pointer in the argv array.
const ARG_OVERHEAD: usize = 24;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{0}")]
    Run(#[from] cmd::RunError),
    #[error("`{argv}` failed (exit {code}): {}", one_line(stderr))]
    Failed {
        argv: String,
        code: String,
        stderr: String,
    },
    #[error("`{argv}`: unexpected output: {what}")]
    Parse { argv: String, what: String },
    /// Refused before running git: the name could be taken as an option or is not a valid
    /// ref name.
    #[error("refusing {what} {name:?}: {why}")]
    BadName {
        what: &'static str,
        name: String,
        why: &'static str,
    },
    /// A batch deletion left some branches in place (checked out, protected by a hook,
    /// rejected by the remote). Branches that were already gone count as deleted.
    #[error(
        "{side} branch deletion left {} of {requested} in place ({}): {cause}",
        remaining.len(),
        clip(remaining.join(", "), remaining.len(), "branches")
    )]
    PartialDelete {
        side: &'static str,
        requested: usize,
        deleted: Vec<String>,
        remaining: Vec<String>,
        cause: Box<GitError>,
    },
    /// A repo-wide lock this layer takes around git operations that race with themselves.
    #[error("{path}: {why}")]
    Lock { path: String, why: String },
}

impl GitError {
    /// Git's stderr, when git ran and failed.
    pub fn stderr(&self) -> Option<&str> {
        match self {
            GitError::Failed { stderr, .. } => Some(stderr),
            GitError::Run(cmd::RunError::Timeout { stderr, .. }) => Some(stderr),
            GitError::PartialDelete { cause, .. } => cause.stderr(),
            _ => None,
        }
    }

    /// The call was killed at its deadline.
    pub fn is_timeout(&self) -> bool {
        match self {
            GitError::Run(cmd::RunError::Timeout { .. }) => true,
            GitError::PartialDelete { cause, .. } => cause.is_timeout(),
            _ => false,
        }
    }
}

/// The command as a message shows it, clipped after [`crate::text::MESSAGE_MAX`] characters.
fn short_argv(argv: &Argv) -> String {
    clip(argv.to_string(), argv.args.len(), "args")
}

pub type GitResult<T> = Result<T, GitError>;

/// A repository (or linked worktree) that git commands run against. Relative paths given
/// to its operations are taken from that directory, as `git -C` does. Needs git 2.36 or
/// later (`worktree list -z`).
#[derive(Debug, Clone)]
pub struct Git {
    repo: PathBuf,
    timeout: Duration,
    env: Vec<(OsString, OsString)>,
    calls: Arc<AtomicU64>,
}

/// What one git call produced, successful or not.
struct Done {
    argv: Argv,
    out: cmd::Output,
}

impl Done {
    fn code(&self) -> Option<i32> {
        self.out.status.code()
    }

    fn failed(&self) -> GitError {
        GitError::Failed {
            argv: short_argv(&self.argv),
            code: self
                .out
                .status
                .code()
                .map_or("signal".into(), |c| c.to_string()),
            stderr: self.out.stderr_str(),
        }
    }

    fn parse_err(&self, what: impl Into<String>) -> GitError {
        GitError::Parse {
            argv: short_argv(&self.argv),
            what: what.into(),
        }
    }

    fn stdout(&self) -> String {
        self.out.stdout_str()
    }
}

impl Git {
    pub fn new(repo: impl Into<PathBuf>) -> Self {
        Git {
            repo: repo.into(),
            timeout: DEFAULT_TIMEOUT,
            env: Vec::new(),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Extra environment for every git call (tests pass an isolated HOME and git config).
    pub fn with_env<K, V>(mut self, vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// The same settings pointed at another checkout (a linked worktree of this repo). The
    /// call counter is shared.
    pub fn at(&self, repo: impl Into<PathBuf>) -> Self {
        Git {
            repo: repo.into(),
            ..self.clone()
        }
    }

    pub fn repo(&self) -> &Path {
        &self.repo
    }

    /// Git processes started by this handle and its clones so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Runs `git -C <repo> <args>`; a non-zero exit is a [`GitError::Failed`] carrying stderr.
    pub fn run<S: AsRef<str>>(&self, args: &[S]) -> GitResult<String> {
        let args = args.iter().map(|a| OsString::from(a.as_ref())).collect();
        Ok(self.ok(args)?.stdout())
    }

    /// Runs git and hands back the result whatever the exit status.
    fn exec(&self, args: Vec<OsString>, stdin: Option<Vec<u8>>) -> GitResult<Done> {
        let mut full: Vec<OsString> = vec!["-C".into(), self.repo.clone().into_os_string()];
        full.extend(args);
        let argv = Argv::new("git", full);
        let mut env = self.env.clone();
        // A remote that wants credentials must fail, not wait for a human at a terminal.
        env.push(("GIT_TERMINAL_PROMPT".into(), "0".into()));
        // Reads such as `status` must not take index.lock behind a working agent's back.
        env.push(("GIT_OPTIONAL_LOCKS".into(), "0".into()));
        env.extend(hardening().iter().cloned());
        let opts = RunOpts {
            env,
            stdin,
            ..RunOpts::default()
        };
        self.calls.fetch_add(1, Ordering::Relaxed);
        let out = cmd::run(&argv, self.timeout, &opts)?;
        Ok(Done { argv, out })
    }

    /// Runs git and requires exit 0.
    fn ok(&self, args: Vec<OsString>) -> GitResult<Done> {
        let done = self.exec(args, None)?;
        if done.out.status.success() {
            Ok(done)
        } else {
            Err(done.failed())
        }
    }

    /// Runs git whose exit code answers a yes/no question: `yes` → true, `no` → false,
    /// anything else is a failure.
    fn yes_no(&self, args: Vec<OsString>, yes: i32, no: i32) -> GitResult<(bool, Done)> {
        let done = self.exec(args, None)?;
        match done.code() {
            Some(c) if c == yes => Ok((true, done)),
            Some(c) if c == no => Ok((false, done)),
            _ => Err(done.failed()),
        }
    }
}

/// The settings every git call of the fleet runs with, so nothing an agent planted in the
/// repository runs outside its sandbox (issue 47): no hook (`core.hooksPath` pointed at an
/// empty place) and no file-system monitor (`core.fsmonitor` names a program git would
/// start on any index refresh). Given through `GIT_CONFIG_COUNT` (git 2.31+), after any
/// the operator set there, so they win over every config file, the shared one included,
/// and the argv that messages show stays the command itself.
pub const HARDENING: [(&str, &str); 2] =
    [("core.hooksPath", "/dev/null"), ("core.fsmonitor", "false")];

/// [`HARDENING`] as environment variables, appended to the operator's own
/// `GIT_CONFIG_COUNT` entries (read once per process).
pub fn hardening() -> &'static [(OsString, OsString)] {
    static VARS: std::sync::OnceLock<Vec<(OsString, OsString)>> = std::sync::OnceLock::new();
    VARS.get_or_init(|| {
        let have: usize = std::env::var("GIT_CONFIG_COUNT")
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        hardening_vars(have)
    })
}

fn hardening_vars(have: usize) -> Vec<(OsString, OsString)> {
    let mut vars = Vec::new();
    for (i, (key, value)) in HARDENING.iter().enumerate() {
        vars.push((format!("GIT_CONFIG_KEY_{}", have + i).into(), (*key).into()));
        vars.push((
            format!("GIT_CONFIG_VALUE_{}", have + i).into(),
            (*value).into(),
        ));
    }
    vars.push((
        "GIT_CONFIG_COUNT".into(),
        (have + HARDENING.len()).to_string().into(),
    ));
    vars
}

/// Builds an argv from string pieces.
fn args<const N: usize>(fixed: [&str; N]) -> Vec<OsString> {
    fixed.iter().map(OsString::from).collect()
}

/// Checks a branch name against git's ref-name rules (git-check-ref-format) before it is
/// placed on a command line, so it can never be read as an option or a refspec.
pub fn check_branch_name(name: &str) -> GitResult<()> {
    let bad = |why| {
        Err(GitError::BadName {
            what: "branch name",
            name: name.to_string(),
            why,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.starts_with('-') {
        return bad("starts with '-' and would be read as an option");
    }
    if name.starts_with("refs/") {
        return bad("give the short branch name, not a full ref");
    }
    if name == "@" || name == "HEAD" {
        return bad("not a branch");
    }
    if name.starts_with('/') || name.ends_with('/') || name.ends_with('.') {
        return bad("starts or ends with '/' or ends with '.'");
    }
    match name.split('/').find_map(ref_component_problem) {
        Some(why) => bad(why),
        None => Ok(()),
    }
}

/// Why `component` cannot be one `/`-separated component of a ref name under git's
/// ref-format rules (git-check-ref-format), or `None` when it can: it must not be empty,
/// start with `.`, end with `.lock`, contain `..` or `@{`, a control character, a space or
/// any of `~ ^ : ? * [ \ /`. (That the whole name must not end with `.` or be `@` is the
/// caller's concern.)
pub fn ref_component_problem(component: &str) -> Option<&'static str> {
    if component.is_empty() {
        Some("has an empty component ('//')")
    } else if component.starts_with('.') || component.ends_with(".lock") {
        Some("a component starts with '.' or ends with '.lock'")
    } else if component.contains("..") || component.contains("@{") {
        Some("contains '..' or '@{'")
    } else if component.bytes().any(|b| b < 0x20 || b == 0x7f) {
        Some("contains a control character")
    } else if component
        .chars()
        .any(|c| matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\' | '/'))
    {
        Some("contains a character git forbids in ref names")
    } else {
        None
    }
}

/// Checks a revision (`origin/main`, a sha, `HEAD~1`) before it is placed on a command line.
pub fn check_rev(rev: &str) -> GitResult<()> {
    let bad = |why| {
        Err(GitError::BadName {
            what: "revision",
            name: rev.to_string(),
            why,
        })
    };
    if rev.is_empty() {
        return bad("empty");
    }
    if rev.starts_with('-') {
        return bad("starts with '-' and would be read as an option");
    }
    if rev.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return bad("contains a control character");
    }
    Ok(())
}

/// A pathspec for everything under `prefix` (a directory or file, relative to the
/// repository root), matched literally whatever the current directory or glob characters.
fn top_literal(prefix: &str) -> OsString {
    let p = prefix.trim_start_matches("./");
    if p.is_empty() || p == "." {
        ":(top)".into()
    } else {
        format!(":(top,literal){p}").into()
    }
}

/// Splits `items` into runs whose total length stays within [`ARGV_BUDGET`] (always at least
/// one item per run).
fn chunks<T: AsRef<str>>(items: &[T]) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut size = 0;
    for (i, it) in items.iter().enumerate() {
        let len = it.as_ref().len() + ARG_OVERHEAD;
        if i > start && size + len > ARGV_BUDGET {
            out.push(&items[start..i]);
            start = i;
            size = 0;
        }
        size += len;
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::MESSAGE_MAX;

    #[test]
    fn branch_names_are_checked() {
        // '+x' is a valid ref name and harmless: refspecs are always written in full
        // (`refs/heads/+x:refs/heads/+x`), so a leading '+' can never mean "force".
        for ok in [
            "afk/12-fix",
            "afk/worker-1/12-x",
            "main",
            "a.b/c_d",
            "é",
            "+x",
        ] {
            check_branch_name(ok).unwrap();
        }
        for bad in [
            "",
            "-D",
            "--force",
            "refs/heads/x",
            "a b",
            "a..b",
            "a:b",
            "x.lock",
            "a/.hidden",
            "a//b",
            "a/",
            "x.",
            "HEAD",
            "@",
            "a@{1}",
            "a\nb",
            "a*",
        ] {
            let e = check_branch_name(bad).unwrap_err();
            assert!(matches!(e, GitError::BadName { .. }), "{bad:?}: {e}");
        }
        let e = check_branch_name("-x").unwrap_err().to_string();
        assert!(e.contains("would be read as an option"), "{e}");
    }

    #[test]
    fn hardening_follows_the_operators_own_config_entries() {
        let v = hardening_vars(2);
        let get = |k: &str| {
            v.iter()
                .find(|(n, _)| n == k)
                .map(|(_, x)| x.to_string_lossy().into_owned())
        };
        assert_eq!(get("GIT_CONFIG_KEY_2").as_deref(), Some("core.hooksPath"));
        assert_eq!(get("GIT_CONFIG_VALUE_3").as_deref(), Some("false"));
        assert_eq!(get("GIT_CONFIG_COUNT").as_deref(), Some("4"));
        assert_eq!(
            get("GIT_CONFIG_KEY_0"),
            None,
            "the operator's own are left alone"
        );
    }

    #[test]
    fn revs_are_checked() {
        check_rev("origin/main").unwrap();
        check_rev("HEAD~1").unwrap();
        assert!(check_rev("--all").is_err());
        assert!(check_rev("").is_err());
    }

    #[test]
    fn pathspecs_are_literal_and_rooted() {
        assert_eq!(top_literal(".red/"), OsString::from(":(top,literal).red/"));
        assert_eq!(top_literal("./a*"), OsString::from(":(top,literal)a*"));
        assert_eq!(top_literal(""), OsString::from(":(top)"));
        assert_eq!(top_literal("."), OsString::from(":(top)"));
    }

    #[test]
    fn chunks_respect_the_budget() {
        let names: Vec<String> = (0..20_000).map(|i| format!("afk/{i}-some-slug")).collect();
        let parts = chunks(&names);
        assert!(parts.len() > 1);
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), names.len());
        for p in &parts {
            let size: usize = p.iter().map(|n| n.len() + ARG_OVERHEAD).sum();
            assert!(size <= ARGV_BUDGET);
        }
        // A reap over 2,000 typical AFK branches is one call per side.
        let reap: Vec<String> = (0..2000)
            .map(|i| format!("afk/worker-{}/{i}-a-typical-issue-slug", i % 8))
            .collect();
        assert_eq!(chunks(&reap).len(), 1);
        let few = ["a", "b"];
        assert_eq!(chunks(&few), vec![&few[..]]);
        assert!(chunks::<&str>(&[]).is_empty());
        let huge = ["x".repeat(ARGV_BUDGET * 2)];
        assert_eq!(chunks(&huge).len(), 1);
    }

    #[test]
    fn failed_message_is_one_line() {
        let e = GitError::Failed {
            argv: "git fetch origin".into(),
            code: "128".into(),
            stderr: "fatal: 'x' does not appear to be a git repository\n\nfatal: Could not read"
                .into(),
        };
        let s = e.to_string();
        assert_eq!(
            s,
            "`git fetch origin` failed (exit 128): fatal: 'x' does not appear to be a git \
             repository | fatal: Could not read"
        );
        assert_eq!(e.stderr().unwrap().lines().count(), 3);
    }

    #[test]
    fn huge_argv_and_stderr_are_clipped_in_messages_only() {
        let names: Vec<String> = (0..2000).map(|i| format!("afk/{i}-x")).collect();
        let argv = Argv::new("git", names.clone());
        let shown = short_argv(&argv);
        assert!(shown.len() < MESSAGE_MAX + 100, "{}", shown.len());
        assert!(shown.ends_with("2000 args in all)"), "{shown}");
        let stderr: String = names.iter().map(|n| format!("error: {n}\n")).collect();
        let e = GitError::Failed {
            argv: shown,
            code: "1".into(),
            stderr: stderr.clone(),
        };
        assert!(e.to_string().len() < 2 * MESSAGE_MAX + 200);
        assert!(e.to_string().contains("2000 lines in all"));
        assert_eq!(e.stderr(), Some(stderr.as_str()));
    }
}
