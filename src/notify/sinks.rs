//! Sending one message to one sink, once (`docs/SPEC.md` §11.21): what each kind of sink
//! is given and what counts as delivered. Retries, backoff and giving up are the delivery
//! thread's (`deliver`).
//!
//! - `webhook`: `POST <url>` of a JSON object: `text` (the one line, with the repository's
//!   name: what Slack's incoming webhooks, Mattermost, Rocket.Chat and Discord's Slack
//!   endpoint show) beside the structured fields. Any 2xx is delivered.
//! - `ntfy`: `POST <topic url>` of the line, with `Title`, `Tags`, `Priority` and `Click`
//!   (the link, when there is one) as ntfy reads them. Any 2xx is delivered.
//! - `command`: the argv, run in the repository with the same JSON on stdin and each field
//!   as an `AFK_NOTIFY_<FIELD>` variable; exit 0 is delivered.
//!
//! HTTP goes through `ureq` (rustls with the webpki roots, so `https://hooks.slack.com`
//! and `https://ntfy.sh` work with no system TLS library; `HTTPS_PROXY`/`NO_PROXY` are
//! honoured), on the calling thread only: connecting, sending and each wait for the answer
//! are bounded by the sink's `timeout_s`; the name lookup is the system resolver's. A 4xx other than 408 and 429 is final: the same request would be refused
//! again, so it is not retried.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::coalesce::Message;
use crate::config::notify_sinks::{Sink, SinkKind, SinkUrl};

/// Who is sending: the repository and host a person reads first.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The checkout's directory.
    pub repo: String,
    /// Its last path component: the name in every line.
    pub repo_name: String,
    pub host: String,
}

impl Origin {
    pub fn of(layout: &crate::layout::Layout) -> Origin {
        let repo = layout.repo();
        Origin {
            repo: repo.display().to_string(),
            repo_name: repo
                .file_name()
                .map_or("repo".into(), |n| n.to_string_lossy().into_owned()),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "localhost".into()),
        }
    }
}

/// Why a send did not deliver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct Failed {
    pub why: String,
    /// The same request would fail the same way: no retry.
    pub permanent: bool,
}

impl Failed {
    fn retry(why: impl Into<String>) -> Failed {
        Failed {
            why: why.into(),
            permanent: false,
        }
    }

    fn fatal(why: impl Into<String>) -> Failed {
        Failed {
            why: why.into(),
            permanent: true,
        }
    }
}

/// The message's one line as a person reads it: `<repo>: <line>`.
pub fn text(msg: &Message, from: &Origin) -> String {
    format!("{}: {}", from.repo_name, msg.line)
}

/// The JSON a webhook is posted and a command reads on stdin: `text` first, then the
/// message's own keys, then its fields (a field never replaces one of those keys).
pub fn payload(msg: &Message, from: &Origin, sink: &str) -> Value {
    let mut o = Map::new();
    o.insert("text".into(), json!(text(msg, from)));
    o.insert("id".into(), json!(msg.id));
    o.insert("class".into(), json!(msg.class.name()));
    o.insert("title".into(), json!(msg.class.title()));
    o.insert("count".into(), json!(msg.count));
    o.insert("repo".into(), json!(from.repo));
    o.insert("repo_name".into(), json!(from.repo_name));
    o.insert("host".into(), json!(from.host));
    o.insert("sink".into(), json!(sink));
    for (k, v) in &msg.fields {
        o.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Value::Object(o)
}

/// `env` reads a variable of the supervisor's environment (a test passes its own).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// One try of one message at one sink.
pub struct Delivery<'a> {
    pub sink: &'a Sink,
    pub msg: &'a Message,
    pub from: &'a Origin,
    /// The longest the try may take.
    pub timeout: Duration,
    pub env: Env<'a>,
}

/// Sends once, within the delivery's `timeout`: what the sink answered (`HTTP 200 OK`,
/// `exit 0`), or why it was not delivered.
pub fn send(d: &Delivery<'_>) -> Result<String, Failed> {
    match d.sink.kind {
        SinkKind::Webhook | SinkKind::Ntfy => http(d),
        SinkKind::Command => command(d),
    }
}

fn http(d: &Delivery<'_>) -> Result<String, Failed> {
    let (sink, msg, from, timeout, env) = (d.sink, d.msg, d.from, d.timeout, d.env);
    let url = match &sink.url {
        Some(SinkUrl::Literal(u)) => u.clone(),
        Some(SinkUrl::Env(var)) => env(var)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Failed::fatal(format!("url_env: ${var} is not set")))?,
        None => return Err(Failed::fatal("no url")),
    };
    // Each phase after the name lookup within `timeout`, never a global deadline: with one,
    // ureq resolves the host on a thread of its own per request, and the notifier must stay
    // one thread. The lookup is the system resolver's, with its own timeouts.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(timeout))
        .timeout_send_request(Some(timeout))
        .timeout_send_body(Some(timeout))
        .timeout_recv_response(Some(timeout))
        .timeout_recv_body(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("afk-supervisor/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let mut req = agent.post(&url);
    for (h, var) in &sink.headers_from_env {
        let v = env(var)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Failed::fatal(format!("headers_from_env.{h}: ${var} is not set")))?;
        req = req.header(h.as_str(), v.as_str());
    }
    let result = match sink.kind {
        SinkKind::Ntfy => {
            req = req
                .header(
                    "Title",
                    ascii(&format!("{}: {}", from.repo_name, msg.class.title())),
                )
                .header("Tags", msg.class.tag())
                .header(
                    "Priority",
                    if msg.class.urgent() {
                        "high"
                    } else {
                        "default"
                    },
                )
                .header("Content-Type", "text/plain; charset=utf-8");
            if let Some(link) = msg.fields.get("link").and_then(Value::as_str)
                && link.is_ascii()
            {
                req = req.header("Click", link);
            }
            req.send(text(msg, from).as_bytes())
        }
        _ => req
            .header("Content-Type", "application/json")
            .send(payload(msg, from, &sink.name).to_string().as_bytes()),
    };
    let mut resp = result.map_err(|e| Failed::retry(redact(&e.to_string(), &url)))?;
    let status = resp.status();
    let mut body = Vec::new();
    let _ = resp.body_mut().as_reader().take(512).read_to_end(&mut body);
    let said = String::from_utf8_lossy(&body);
    let said = crate::text::excerpt(said.trim());
    let answer = format!(
        "HTTP {}{}{}",
        status.as_u16(),
        status
            .canonical_reason()
            .map(|r| format!(" {r}"))
            .unwrap_or_default(),
        if said.is_empty() {
            String::new()
        } else {
            format!(": {said}")
        }
    );
    match status.as_u16() {
        200..=299 => Ok(answer),
        408 | 429 => Err(Failed::retry(answer)),
        300..=499 => Err(Failed::fatal(answer)),
        _ => Err(Failed::retry(answer)),
    }
}

/// A header value ntfy can read: ASCII, control characters dropped.
fn ascii(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// An error's text without the URL's path and query (a Slack webhook's path is its secret).
fn redact(why: &str, url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let path_at = url[scheme_end..]
        .find('/')
        .map_or(url.len(), |i| scheme_end + i);
    let mut out = why.replace(url, &format!("{}/…", &url[..path_at]));
    if path_at < url.len() {
        out = out.replace(&url[path_at..], "/…");
    }
    out
}

fn command(d: &Delivery<'_>) -> Result<String, Failed> {
    let (sink, msg, from, timeout) = (d.sink, d.msg, d.from, d.timeout);
    let Some(argv) = sink.command.as_ref().filter(|c| !c.is_empty()) else {
        return Err(Failed::fatal("no command"));
    };
    let body = payload(msg, from, &sink.name);
    let mut vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = Vec::new();
    if let Value::Object(o) = &body {
        for (k, v) in o {
            let value = match v {
                Value::Null => continue,
                Value::String(s) => s.clone(),
                Value::Array(a) => a
                    .iter()
                    .map(|x| x.as_str().map_or(x.to_string(), str::to_string))
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            let name: String = k
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_uppercase()
                    } else {
                        '_'
                    }
                })
                .collect();
            vars.push((
                format!("AFK_NOTIFY_{name}").into(),
                value.replace('\0', "").into(),
            ));
        }
    }
    let opts = crate::cmd::RunOpts {
        cwd: Some(from.repo.clone().into()),
        env: vars,
        stdin: Some(format!("{body}\n").into_bytes()),
    };
    let started = Instant::now();
    let run = crate::cmd::Argv::new(&argv[0], &argv[1..]);
    match crate::cmd::run_capped(&run, timeout, &opts, 64 << 10) {
        Ok(out) if out.status.success() => {
            Ok(format!("exit 0 ({:.1}s)", started.elapsed().as_secs_f64()))
        }
        Ok(out) => {
            let last = out.stderr_str();
            let line = last.lines().last().unwrap_or("");
            Err(Failed::retry(format!(
                "{}{}",
                out.status,
                if line.is_empty() {
                    String::new()
                } else {
                    format!(": {}", crate::text::excerpt(line))
                }
            )))
        }
        Err(e @ crate::cmd::RunError::Spawn { .. }) => Err(Failed::fatal(e.to_string())),
        Err(e) => Err(Failed::retry(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_url_is_never_in_an_error() {
        let url = "https://hooks.slack.com/services/T000/B000/SECRET";
        let why = format!("io: connection refused connecting to {url}");
        let r = redact(&why, url);
        assert!(!r.contains("SECRET"), "{r}");
        assert!(r.contains("https://hooks.slack.com/…"), "{r}");
        assert_eq!(redact("no url here", url), "no url here");
        assert_eq!(ascii("café: ok\n"), "caf?: ok?");
    }
}
