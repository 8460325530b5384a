//! The git layer: `git -C <repo> …` with argv, a deadline, and errors that carry git's
//! stderr. Sweeps never shell out to git themselves; they call the operations here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cmd::{self, Argv, RunOpts};

/// Default deadline of one git call; fetch and push get the same, local reads rarely need it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{0}")]
    Run(#[from] cmd::RunError),
    #[error("`{argv}` failed (exit {code}): {stderr}")]
    Failed {
        argv: String,
        code: String,
        stderr: String,
    },
    #[error("`{argv}`: unexpected output: {what}")]
    Parse { argv: String, what: String },
}

pub type GitResult<T> = Result<T, GitError>;

/// A repository (or worktree) that git commands run against.
#[derive(Debug, Clone)]
pub struct Git {
    repo: PathBuf,
    timeout: Duration,
}

impl Git {
    pub fn new(repo: impl Into<PathBuf>) -> Self {
        Git {
            repo: repo.into(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn repo(&self) -> &Path {
        &self.repo
    }

    /// Runs `git -C <repo> <args>`; a non-zero exit is a [`GitError::Failed`] carrying stderr.
    pub fn run<S: AsRef<str>>(&self, args: &[S]) -> GitResult<String> {
        let mut full: Vec<String> = vec!["-C".into(), self.repo.display().to_string()];
        full.extend(args.iter().map(|a| a.as_ref().to_string()));
        let argv = Argv::new("git", full);
        let out = cmd::run(&argv, self.timeout, &RunOpts::default())?;
        if !out.status.success() {
            return Err(GitError::Failed {
                argv: argv.to_string(),
                code: out.status.code().map_or("signal".into(), |c| c.to_string()),
                stderr: out.stderr_str(),
            });
        }
        Ok(out.stdout_str())
    }
}
