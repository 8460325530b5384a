//! Choosing the tracker backend (`--tracker auto|gh|local`, `tracker.kind`).
//!
//! `auto` uses GitHub when the project is on github.com (`origin` points there, or
//! `tracker.repo` names it) and `gh` is installed; anything else gets the embedded store, and
//! the one-line reason says why. A GitHub project whose `gh` is not logged in is refused
//! ([`SelectError::NotLoggedIn`], exit 78: `run gh auth login, or set tracker.kind =
//! "local"`), and so is one whose `gh auth status` fails transiently (timeout, network):
//! either way a silent switch to an empty local store would make every GitHub issue look
//! missing.

use std::time::Duration;

use super::{GhTracker, LocalTracker, Tracker, TrackerError};
use crate::config::{Config, TrackerKind};
use crate::git::Git;
use crate::layout::Layout;

/// Why no backend was chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// A GitHub project, `tracker.kind = auto`, and `gh` is not logged in: a configuration
    /// error (exit 78), never a silent empty local store.
    #[error(
        "tracker.kind = auto: {because} but gh is not logged in ({detail}): run gh auth login, or set tracker.kind = \"local\""
    )]
    NotLoggedIn {
        because: &'static str,
        detail: String,
    },
    #[error(transparent)]
    Tracker(#[from] TrackerError),
}

impl SelectError {
    /// Whether this is the operator's configuration to fix (exit 78).
    pub fn is_config(&self) -> bool {
        matches!(self, SelectError::NotLoggedIn { .. })
    }
}

/// The chosen backend, boxed, and why it was chosen (e.g. `tracker: local (origin is not on
/// GitHub)`), for commands to print once on stderr.
pub struct Selected {
    pub tracker: Box<dyn Tracker>,
    pub reason: String,
}

/// The chosen backend as its concrete type, for callers that need backend-only operations
/// (the `issue` command creates and closes issues on the local store).
pub enum Backend {
    Gh(GhTracker),
    Local(LocalTracker),
}

impl Backend {
    pub fn as_tracker(&self) -> &dyn Tracker {
        match self {
            Backend::Gh(t) => t,
            Backend::Local(t) => t,
        }
    }

    pub fn into_boxed(self) -> Box<dyn Tracker> {
        match self {
            Backend::Gh(t) => Box::new(t),
            Backend::Local(t) => Box::new(t),
        }
    }
}

/// Opens the backend the configuration asks for; see [`resolve`].
pub fn open(config: &Config, layout: &Layout) -> Result<Selected, SelectError> {
    let (backend, reason) = resolve(config, layout)?;
    Ok(Selected {
        tracker: backend.into_boxed(),
        reason,
    })
}

/// Picks the backend and says why. For `gh`, the repository passed as `--repo` is
/// `tracker.repo`, else the one `origin` names, so gh never guesses from other remotes and
/// `pr merge --delete-branch` never touches the local checkout.
pub fn resolve(config: &Config, layout: &Layout) -> Result<(Backend, String), SelectError> {
    let timeout = Duration::from_secs(config.tracker.timeout_s);
    let git = Git::new(layout.repo());
    // `origin` names the gh repository; a requested local tracker does not ask (one git
    // call fewer at every boot of a local fleet).
    let origin = match config.tracker.kind {
        TrackerKind::Local => None,
        TrackerKind::Gh | TrackerKind::Auto => origin_url(&git),
    };
    let from_origin = origin.as_deref().and_then(repo_from_url);
    let pace = super::pace::Pace::new(
        &layout.state(),
        config.tracker.max_writes_per_min,
        Duration::from_secs(config.tracker.pace_window_s),
    )
    .hourly(
        config.tracker.max_writes_per_hour,
        Duration::from_secs(config.tracker.pace_hour_s),
    )
    .per_account(super::pace::account_dir());
    let gh = |repo: Option<String>| {
        GhTracker::new(repo, timeout)
            .in_dir(layout.repo().to_path_buf())
            .with_fleet(layout.state(), pace.clone())
            .with_trust(super::trust::Trust::from_config(&config.claims))
    };
    let local = || Backend::Local(LocalTracker::new(layout, git.clone()).with_timeout(timeout));
    match config.tracker.kind {
        TrackerKind::Local => Ok((local(), "tracker: local (requested)".into())),
        TrackerKind::Gh => {
            let repo = config
                .tracker
                .repo
                .clone()
                .or_else(|| from_origin.as_ref().map(|(host, r)| with_host(host, r)));
            let reason = match &repo {
                Some(r) => format!("tracker: gh {r} (requested)"),
                None => "tracker: gh (requested; origin names no repository, gh picks one from the remotes)".into(),
            };
            Ok((Backend::Gh(gh(repo)), reason))
        }
        TrackerKind::Auto => {
            let github = from_origin.filter(|(host, _)| host == "github.com");
            let (repo, because) = match (&config.tracker.repo, github) {
                (Some(r), _) => (r.clone(), "tracker.repo is set"),
                (None, Some((_, r))) => (r, "origin is on GitHub"),
                (None, None) => {
                    let why = if origin.is_none() {
                        "no origin remote"
                    } else {
                        "origin is not on GitHub"
                    };
                    return Ok((local(), format!("tracker: local ({why})")));
                }
            };
            let t = gh(Some(repo.clone()));
            if !t.program_found() {
                return Ok((
                    local(),
                    format!("tracker: local ({because} but gh is not installed)"),
                ));
            }
            match t.auth_status() {
                Ok(()) => Ok((
                    Backend::Gh(t),
                    format!("tracker: gh {repo} ({because} and gh is logged in)"),
                )),
                // A timeout or network failure says nothing about the login. Falling back
                // to an empty local store would make every GitHub issue look missing, so
                // the choice is refused until gh can answer.
                Err(e) if e.is_transient() || e.is_rate_limited() => {
                    Err(SelectError::Tracker(TrackerError::new(
                        e.kind,
                        e.command,
                        format!(
                            "{because} but gh could not say whether it is logged in \
                         (retry, or pass --tracker gh|local): {}",
                            e.detail
                        ),
                    )))
                }
                Err(e) => Err(SelectError::NotLoggedIn {
                    because,
                    detail: format!("`gh auth status`: {}", first_line(&e.detail)),
                }),
            }
        }
    }
}

/// The first non-empty line of a tool's message, so an error stays one line.
fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("failed")
}

fn with_host(host: &str, repo: &str) -> String {
    if host == "github.com" {
        repo.to_string()
    } else {
        format!("{host}/{repo}")
    }
}

/// `origin`'s fetch URL, or `None` when there is no such remote (or no git repo).
pub fn origin_url(git: &Git) -> Option<String> {
    git.run(&["remote", "get-url", "origin"])
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Splits a remote URL into (lower-cased host, `OWNER/NAME`) for the https, ssh, git and
/// scp-like (`git@host:owner/name.git`) forms; `None` for local paths and file URLs.
pub fn repo_from_url(url: &str) -> Option<(String, String)> {
    let url = url.trim();
    let (host, path) = if let Some((scheme, rest)) = url.split_once("://") {
        if !matches!(
            scheme,
            "https" | "http" | "ssh" | "git" | "git+ssh" | "ssh+git"
        ) {
            return None;
        }
        let (authority, path) = rest.split_once('/')?;
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let host = host.split_once(':').map_or(host, |(h, _)| h);
        (host, path)
    } else {
        // scp-like: [user@]host:path, where host has no '/' before the ':'.
        let (before, path) = url.split_once(':')?;
        if before.contains('/') || before.is_empty() {
            return None;
        }
        let host = before.rsplit_once('@').map_or(before, |(_, h)| h);
        (host, path)
    };
    let host = host.to_ascii_lowercase();
    let host = host.strip_prefix("www.").unwrap_or(&host).to_string();
    if host.is_empty() {
        return None;
    }
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let (owner, name) = path.split_once('/')?;
    if owner.is_empty() || name.is_empty() || name.contains('/') {
        return None;
    }
    Some((host, format!("{owner}/{name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_url_forms() {
        let gh = |u: &str| {
            repo_from_url(u)
                .filter(|(h, _)| h == "github.com")
                .map(|(_, r)| r)
        };
        for u in [
            "https://github.com/o/r.git",
            "https://github.com/o/r",
            "https://github.com/o/r/",
            "http://www.github.com/o/r.git",
            "https://user:tok@github.com/o/r.git",
            "ssh://git@github.com/o/r.git",
            "ssh://git@github.com:22/o/r.git",
            "git@github.com:o/r.git",
            "git@GitHub.com:o/r",
            "git://github.com/o/r.git",
        ] {
            assert_eq!(gh(u).as_deref(), Some("o/r"), "{u}");
        }
        for u in [
            "/tmp/origin.git",
            "file:///tmp/origin.git",
            "../origin.git",
            "https://gitlab.com/o/r.git",
            "git@github.example.com:o/r.git",
            "https://github.com/o",
            "https://github.com/o/r/extra",
            "C:/x/y",
        ] {
            assert_eq!(gh(u), None, "{u}");
        }
        assert_eq!(
            repo_from_url("git@ghe.corp:team/app.git"),
            Some(("ghe.corp".into(), "team/app".into()))
        );
    }
}
