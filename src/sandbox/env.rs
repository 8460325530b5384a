//! The agent's environment: an allowlist, never the worker's whole environment.
//!
//! The operator's shell carries the tracker's token (`GH_TOKEN`), cloud keys and whatever
//! else; an agent that reads hostile text must see none of it. It gets the basics a
//! program needs (`PATH` with its absolute entries only, the locale, `TERM`, `TZ`, who it
//! runs as), the fleet's `RED_AFK_*` variables, the names its profile needs to reach its
//! provider (its API key and base URL, proxies and certificates), the names the operator
//! adds in `agent.env`, and a private `HOME` and `TMPDIR`. A name ending in `*` takes every
//! variable with that prefix.

use std::collections::BTreeMap;
use std::path::Path;

use crate::agent_profile::ProfileKind;

/// Passed to every agent when set.
const BASICS: &[&str] = &[
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "NO_COLOR",
    // The fleet's own (SPEC §6, §11.1): a process of the fleet is known by them.
    "RED_AFK_*",
    // Reaching a provider through a proxy or a private certificate authority.
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    // The identity the agent's commits carry, when the operator set one this way.
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
];

/// What each profile's CLI needs besides [`BASICS`].
pub fn profile_names(profile: ProfileKind) -> &'static [&'static str] {
    match profile {
        ProfileKind::Claude => &[
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_MODEL",
            "ANTHROPIC_SMALL_FAST_MODEL",
            "ANTHROPIC_DEFAULT_*",
            "IS_SANDBOX",
            "DISABLE_AUTOUPDATER",
            "DISABLE_TELEMETRY",
            "DISABLE_ERROR_REPORTING",
            "DISABLE_NON_ESSENTIAL_MODEL_CALLS",
            "CLAUDE_CODE_*",
            "API_TIMEOUT_MS",
        ],
        ProfileKind::Codex => &[
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "OPENAI_ORG_ID",
            "CODEX_*",
        ],
        ProfileKind::Generic => &[],
    }
}

/// Never passed, whatever a pattern says: where the CLI keeps its state is the private
/// home's (see [`super::home`]).
const NEVER: &[&str] = &["CODEX_HOME"];

/// Whether `name` matches `pattern` (exact, or a prefix before a final `*`).
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// The agent's environment from the worker's `parent`: the allowlist (the basics, the
/// profile's names, `extra` from `agent.env`), `PATH` with relative entries dropped, and
/// `HOME` and `TMPDIR` pointed at the attempt's private ones. The task's own variables are
/// set on top by the caller.
pub fn agent_env<'a>(
    parent: impl IntoIterator<Item = (&'a str, &'a str)>,
    profile: ProfileKind,
    extra: &[String],
    home: &Path,
    tmp: &Path,
) -> BTreeMap<String, String> {
    let wanted = |name: &str| {
        !NEVER.contains(&name)
            && BASICS
                .iter()
                .chain(profile_names(profile))
                .copied()
                .chain(extra.iter().map(String::as_str))
                .any(|p| matches(p, name))
    };
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in parent {
        if k == "PATH" {
            env.insert(k.into(), clean_path(v));
        } else if wanted(k) {
            env.insert(k.into(), v.into());
        }
    }
    env.entry("PATH".into())
        .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
    env.insert("HOME".into(), home.display().to_string());
    env.insert("TMPDIR".into(), tmp.display().to_string());
    env
}

/// `PATH` with only its absolute entries: an empty or relative one (`.`) would run
/// whatever the agent put in its working directory under a common command's name.
pub fn clean_path(path: &str) -> String {
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent() -> Vec<(&'static str, &'static str)> {
        vec![
            ("PATH", ".:/usr/bin::bin:/bin"),
            ("HOME", "/home/op"),
            ("GH_TOKEN", "ghp_secret"),
            ("GITHUB_TOKEN", "ghs_secret"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("OPENAI_API_KEY", "sk-oai"),
            ("LC_ALL", "C.UTF-8"),
            ("RED_AFK_SLOT", "1"),
            ("CLAUDE_CODE_MAX_RETRIES", "2"),
            ("CODEX_HOME", "/home/op/.codex"),
            ("MY_TOOL_TOKEN", "x"),
        ]
    }

    #[test]
    fn only_the_allowlist_reaches_the_agent() {
        let env = agent_env(
            parent(),
            ProfileKind::Claude,
            &[],
            Path::new("/a/home"),
            Path::new("/a/tmp"),
        );
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "ANTHROPIC_API_KEY",
                "CLAUDE_CODE_MAX_RETRIES",
                "HOME",
                "LC_ALL",
                "PATH",
                "RED_AFK_SLOT",
                "TMPDIR"
            ]
        );
        assert_eq!(env["PATH"], "/usr/bin:/bin");
        assert_eq!(env["HOME"], "/a/home");
    }

    #[test]
    fn codex_gets_its_key_not_its_home_and_extra_names_are_added() {
        let env = agent_env(
            parent(),
            ProfileKind::Codex,
            &["MY_TOOL_*".into()],
            Path::new("/h"),
            Path::new("/t"),
        );
        assert!(env.contains_key("OPENAI_API_KEY"));
        assert!(!env.contains_key("ANTHROPIC_API_KEY"));
        assert!(!env.contains_key("CODEX_HOME"));
        assert_eq!(env.get("MY_TOOL_TOKEN").map(String::as_str), Some("x"));
        for secret in ["GH_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"] {
            assert!(!env.contains_key(secret), "{secret}");
        }
    }

    #[test]
    fn a_missing_path_gets_the_usual_one() {
        let env = agent_env(
            Vec::<(&str, &str)>::new(),
            ProfileKind::Generic,
            &[],
            Path::new("/h"),
            Path::new("/t"),
        );
        assert_eq!(env["PATH"], "/usr/local/bin:/usr/bin:/bin");
    }
}
