//! `[[notify]]`: where the fleet tells a person what happened (`docs/SPEC.md` §10, §11.21).
//! Each table is one sink: a webhook (Slack-compatible JSON), an ntfy topic, or a command
//! fed the event as JSON. What a sink sends and when is `crate::notify`'s; this file only
//! reads and checks the tables.
//!
//! Secrets are never written in the config: a header's value (and, with `url_env`, the URL
//! itself, which for a Slack webhook is the secret) is named by an environment variable,
//! read only when a message is sent. `config` prints the variable's name, never its value.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::ConfigError;
use crate::text::{excerpt, line_col};

/// The classes of events a sink may ask for, in the order `docs/SPEC.md` §11.21 lists
/// them; `all` in `events` asks for every one.
pub const CLASSES: [&str; 12] = [
    "pr-ready",
    "handed-off",
    "quarantined",
    "budget-reached",
    "budget-resumed",
    "agent-paused",
    "agent-resumed",
    "fleet-circuit-open",
    "slot-parked",
    "rate-limited",
    "supervisor-stopped",
    "host-lost",
];

/// Defaults of a sink's optional keys.
pub const DEFAULT_MIN_INTERVAL_S: u64 = 60;
pub const DEFAULT_TIMEOUT_S: u64 = 10;
pub const DEFAULT_RETRY_FOR_S: u64 = 600;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// POST of a JSON object whose `text` is the Slack-compatible line.
    Webhook,
    /// POST of the line to an ntfy topic URL, the title, tags and priority as headers.
    Ntfy,
    /// A program run with the event as JSON on stdin and in `AFK_NOTIFY_*` variables.
    Command,
}

impl std::fmt::Display for SinkKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SinkKind::Webhook => "webhook",
            SinkKind::Ntfy => "ntfy",
            SinkKind::Command => "command",
        })
    }
}

/// Where a sink's URL comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkUrl {
    /// Written in the config.
    Literal(String),
    /// The value of this environment variable, read at each send.
    Env(String),
}

/// One `[[notify]]` table, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sink {
    pub name: String,
    pub kind: SinkKind,
    /// Webhook and ntfy.
    pub url: Option<SinkUrl>,
    /// Command: its argv (never through a shell).
    pub command: Option<Vec<String>>,
    /// The classes asked for; `["all"]` means every one.
    pub events: Vec<String>,
    /// At most one message per class per this many seconds; what comes between is
    /// coalesced into the next one.
    pub min_interval_s: u64,
    /// Header name to the environment variable holding its value (webhook and ntfy).
    pub headers_from_env: BTreeMap<String, String>,
    /// The longest one delivery attempt may take.
    pub timeout_s: u64,
    /// How long a failing message is retried (with backoff) before it is dropped with one
    /// `notify.failed` line.
    pub retry_for_s: u64,
    /// Where the table begins, `PATH:LINE:COL`, for messages and `config`.
    pub at: String,
}

impl Sink {
    /// Whether this sink asked for `class`.
    pub fn wants(&self, class: &str) -> bool {
        self.events.iter().any(|e| e == "all" || e == class)
    }

    /// The environment variables this sink reads when it sends: `url_env`'s and each
    /// header's, with what each is for (`url_env`, `headers_from_env.Authorization`).
    pub fn env_vars(&self) -> Vec<(String, &str)> {
        let mut v = Vec::new();
        if let Some(SinkUrl::Env(var)) = &self.url {
            v.push(("url_env".to_string(), var.as_str()));
        }
        for (h, var) in &self.headers_from_env {
            v.push((format!("headers_from_env.{h}"), var.as_str()));
        }
        v
    }

    /// The variables this sink reads that `env` lacks (or holds empty), as one line each:
    /// a fleet whose sink cannot authenticate is refused at `run` (exit 78), not found out
    /// at its first message.
    pub fn missing_env(&self, env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
        self.env_vars()
            .into_iter()
            .filter(|(_, var)| env(var).is_none_or(|v| v.is_empty()))
            .map(|(what, var)| {
                format!(
                    "notify {:?} ({}): {what} names ${var}, which is not set in the supervisor's environment",
                    self.name, self.at
                )
            })
            .collect()
    }
}

/// A `[[notify]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSink {
    name: Option<String>,
    kind: Option<String>,
    url: Option<String>,
    url_env: Option<String>,
    command: Option<Vec<String>>,
    events: Option<Vec<String>>,
    min_interval_s: Option<u64>,
    headers_from_env: Option<BTreeMap<String, String>>,
    timeout_s: Option<u64>,
    retry_for_s: Option<u64>,
}

/// The sinks of the file at `path` with text `text`, checked: every error names the
/// table's place and the key.
pub(super) fn resolve(
    path: &std::path::Path,
    text: &str,
    tables: Vec<Spanned<FileSink>>,
) -> Result<Vec<Sink>, ConfigError> {
    let mut sinks: Vec<Sink> = Vec::new();
    for t in tables {
        let (line, col) = line_col(text, t.span().start);
        let at = format!("{}:{line}:{col}", path.display());
        let sink = check(t.into_inner(), at)?;
        if let Some(other) = sinks.iter().find(|s| s.name == sink.name) {
            return Err(ConfigError(format!(
                "{}: notify.name {:?} is used twice (also at {})",
                sink.at, sink.name, other.at
            )));
        }
        sinks.push(sink);
    }
    Ok(sinks)
}

fn check(f: FileSink, at: String) -> Result<Sink, ConfigError> {
    let err = |msg: String| ConfigError(format!("{at}: {msg}"));
    let name = f
        .name
        .ok_or_else(|| err("[[notify]] needs a name (letters, digits, . _ -)".into()))?;
    if name.is_empty()
        || name.len() > 40
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(err(format!(
            "notify.name {:?} must be 1 to 40 of letters, digits, . _ -",
            excerpt(&name)
        )));
    }
    let err = |msg: String| ConfigError(format!("{at}: notify {name:?}: {msg}"));
    let kind = match f.kind.as_deref() {
        Some("webhook") => SinkKind::Webhook,
        Some("ntfy") => SinkKind::Ntfy,
        Some("command") => SinkKind::Command,
        Some(other) => {
            return Err(err(format!(
                "kind = {:?} is not webhook, ntfy or command",
                excerpt(other)
            )));
        }
        None => return Err(err("kind is missing (webhook, ntfy or command)".into())),
    };
    let url = match (kind, f.url, f.url_env) {
        (SinkKind::Command, None, None) => None,
        (SinkKind::Command, _, _) => {
            return Err(err(
                "url and url_env are for webhook and ntfy; a command sink has command".into(),
            ));
        }
        (_, Some(_), Some(_)) => return Err(err("set url or url_env, not both".into())),
        (_, None, None) => {
            return Err(err(format!(
                "a {kind} sink needs url (or url_env, the variable holding it)"
            )));
        }
        (_, Some(u), None) => {
            check_url(&u).map_err(|why| err(format!("url {:?}: {why}", excerpt(&u))))?;
            Some(SinkUrl::Literal(u))
        }
        (_, None, Some(var)) => {
            if !var_name_ok(&var) {
                return Err(err(format!(
                    "url_env {:?} is not a variable name (letters, digits and _)",
                    excerpt(&var)
                )));
            }
            Some(SinkUrl::Env(var))
        }
    };
    let command = match (kind, f.command) {
        (SinkKind::Command, Some(c)) if c.first().is_some_and(|p| !p.is_empty()) => Some(c),
        (SinkKind::Command, _) => {
            return Err(err(
                "a command sink needs command = [\"/path/to/program\", ...]".into(),
            ));
        }
        (_, Some(_)) => return Err(err("command is for kind = \"command\"".into())),
        (_, None) => None,
    };
    let headers = f.headers_from_env.unwrap_or_default();
    if kind == SinkKind::Command && !headers.is_empty() {
        return Err(err(
            "headers_from_env is for webhook and ntfy (a command reads its own environment)".into(),
        ));
    }
    for (h, var) in &headers {
        let token = !h.is_empty()
            && h.len() <= 64
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
        if !token {
            return Err(err(format!(
                "headers_from_env: {:?} is not a header name",
                excerpt(h)
            )));
        }
        if [
            "content-type",
            "content-length",
            "host",
            "transfer-encoding",
        ]
        .contains(&h.to_ascii_lowercase().as_str())
        {
            return Err(err(format!(
                "headers_from_env: {h} is set by the sender itself"
            )));
        }
        if !var_name_ok(var) {
            return Err(err(format!(
                "headers_from_env.{h} = {:?}: the value names an environment variable \
                 (letters, digits and _), never the header's value itself",
                excerpt(var)
            )));
        }
    }
    let events = f.events.unwrap_or_else(|| vec!["all".into()]);
    if events.is_empty() {
        return Err(err(
            "events is empty: name classes, or [\"all\"] (the default)".into(),
        ));
    }
    if let Some(bad) = events
        .iter()
        .find(|e| *e != "all" && !CLASSES.contains(&e.as_str()))
    {
        return Err(err(format!(
            "events: {:?} is not a class (all, {})",
            excerpt(bad),
            CLASSES.join(", ")
        )));
    }
    let bounded = |key: &str, v: Option<u64>, default: u64, lo: u64, hi: u64| {
        let x = v.unwrap_or(default);
        if x < lo || x > hi {
            return Err(err(format!("{key} = {x} is out of range ({lo}..={hi})")));
        }
        Ok(x)
    };
    Ok(Sink {
        min_interval_s: bounded(
            "min_interval_s",
            f.min_interval_s,
            DEFAULT_MIN_INTERVAL_S,
            0,
            86_400,
        )?,
        timeout_s: bounded("timeout_s", f.timeout_s, DEFAULT_TIMEOUT_S, 1, 300)?,
        retry_for_s: bounded("retry_for_s", f.retry_for_s, DEFAULT_RETRY_FOR_S, 0, 86_400)?,
        name,
        kind,
        url,
        command,
        events,
        headers_from_env: headers,
        at,
    })
}

/// `http://` or `https://` with a host, and nothing a request line could not carry.
fn check_url(u: &str) -> Result<(), &'static str> {
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .ok_or("must start with https:// or http://")?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err("names no host");
    }
    if u.bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        || !u.is_ascii()
    {
        return Err("must be ASCII without spaces (percent-encode the rest)");
    }
    Ok(())
}

/// An environment variable's name: letters, digits and `_`, not starting with a digit.
fn var_name_ok(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with(|c: char| c.is_ascii_digit())
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::Path;

    fn sinks(text: &str) -> Result<Vec<Sink>, ConfigError> {
        super::super::resolve(
            Some((Path::new("cfg.toml"), text)),
            &HashMap::new(),
            &super::super::Overrides::default(),
        )
        .map(|c| c.notify)
    }

    #[test]
    fn the_three_kinds_with_their_defaults() {
        let s = sinks(
            "[[notify]]\nname = \"slack\"\nkind = \"webhook\"\nurl_env = \"SLACK_URL\"\n\
             headers_from_env = { Authorization = \"SLACK_TOKEN\" }\n\
             [[notify]]\nname = \"phone\"\nkind = \"ntfy\"\nurl = \"https://ntfy.sh/afk\"\n\
             events = [\"quarantined\", \"supervisor-stopped\"]\nmin_interval_s = 0\n\
             [[notify]]\nname = \"mail\"\nkind = \"command\"\ncommand = [\"/bin/mailer\", \"-s\"]\n",
        )
        .unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].url, Some(SinkUrl::Env("SLACK_URL".into())));
        assert_eq!(s[0].events, ["all"]);
        assert_eq!(
            (s[0].min_interval_s, s[0].timeout_s, s[0].retry_for_s),
            (60, 10, 600)
        );
        assert_eq!(s[0].at, "cfg.toml:1:1");
        assert!(s[1].wants("quarantined") && !s[1].wants("pr-ready"));
        assert!(s[0].wants("pr-ready"));
        assert_eq!(s[2].command.as_deref().unwrap()[0], "/bin/mailer");
        let vars: HashMap<&str, &str> = [("SLACK_URL", "https://hooks.example/x")].into();
        let missing = s[0].missing_env(&|v| vars.get(v).map(|s| s.to_string()));
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(
            missing[0].contains("headers_from_env.Authorization names $SLACK_TOKEN"),
            "{missing:?}"
        );
    }

    #[test]
    fn mistakes_are_refused_where_they_are() {
        for (text, want) in [
            ("[[notify]]\nkind = \"ntfy\"\n", "needs a name"),
            (
                "[[notify]]\nname = \"a\"\nkind = \"mail\"\n",
                "is not webhook",
            ),
            ("[[notify]]\nname = \"a\"\nkind = \"ntfy\"\n", "needs url"),
            (
                "[[notify]]\nname = \"a\"\nkind = \"webhook\"\nurl = \"ftp://x\"\n",
                "must start with https://",
            ),
            (
                "[[notify]]\nname = \"a\"\nkind = \"webhook\"\nurl = \"https://x\"\nheaders_from_env = { Authorization = \"Bearer abc\" }\n",
                "never the header's value itself",
            ),
            (
                "[[notify]]\nname = \"a\"\nkind = \"webhook\"\nurl = \"https://x\"\nheaders = { A = \"B\" }\n",
                "unknown field `headers`",
            ),
            (
                "[[notify]]\nname = \"a\"\nkind = \"webhook\"\nurl = \"https://x\"\nevents = [\"quarantine\"]\n",
                "is not a class",
            ),
            (
                "[[notify]]\nname = \"a\"\nkind = \"command\"\n",
                "needs command",
            ),
            (
                "[[notify]]\nname = \"a\"\nkind = \"ntfy\"\nurl = \"https://x\"\n[[notify]]\nname = \"a\"\nkind = \"ntfy\"\nurl = \"https://y\"\n",
                "used twice",
            ),
            (
                "[[notify]]\nname = \"a\"\nkind = \"ntfy\"\nurl = \"https://x\"\ntimeout_s = 0\n",
                "out of range",
            ),
        ] {
            let e = sinks(text).unwrap_err().0;
            assert!(e.contains(want), "{text}: {e}");
            assert!(e.starts_with("cfg.toml:"), "{e}");
        }
    }
}
