//! The ready queue read with conditional requests (`docs/SPEC.md` §7, §11.23): the
//! cluster's steward asks GitHub's REST listing through `gh api -i`, sending the ETag of
//! the page's last answer as `If-None-Match`. GitHub answers 304 when nothing changed, and
//! a 304 does not count against the rate limit ("Rate limits for the REST API"), so a
//! steward that looks every few seconds costs a read only when the queue moved. `gh
//! issue list` (GraphQL) has no such answer: every listing costs points.
//!
//! gh prints the status line and the headers before the body with `-i`, and on a 304
//! prints them, says `gh: HTTP 304` and exits 1; the status line, not the exit code, tells
//! a 304 from a failure.

use serde::Deserialize;

use super::LabeledIssue;
use super::gh_output::OutputError;
use super::labels;

/// Issues per page: GitHub's largest.
pub const PER_PAGE: usize = 100;

/// Pages the steward reads at most: the queue's head, as long as the workers' listing
/// (`--limit 200`).
pub const PAGES: usize = 2;

/// `repos/<owner>/<name>/issues?…` for page `page` (from 1), oldest first, and the host
/// for `--hostname` of a `HOST/OWNER/NAME` repository. Without a configured repository
/// gh fills `{owner}` and `{repo}` from the checkout's remotes.
fn endpoint(repo: Option<&str>, page: usize) -> (Option<String>, String) {
    let parts: Vec<&str> = repo.map(|r| r.split('/').collect()).unwrap_or_default();
    let (host, owner, name) = match parts.as_slice() {
        [h, o, n] => (Some(h.to_string()), *o, *n),
        [o, n] => (None, *o, *n),
        _ => (None, "{owner}", "{repo}"),
    };
    (
        host,
        format!(
            "repos/{owner}/{name}/issues?labels={}&state=open&sort=created&direction=asc&per_page={PER_PAGE}&page={page}",
            labels::READY_FOR_AGENT
        ),
    )
}

/// `gh api [--hostname H] -i [-H "If-None-Match: <etag>"] <endpoint>` (never `--repo`).
pub fn argv(repo: Option<&str>, page: usize, etag: Option<&str>) -> Vec<String> {
    let (host, path) = endpoint(repo, page);
    let mut v = vec!["api".to_string()];
    if let Some(h) = host {
        v.extend(["--hostname".to_string(), h]);
    }
    v.push("-i".to_string());
    if let Some(e) = etag {
        v.extend(["-H".to_string(), format!("If-None-Match: {e}")]);
    }
    v.push(path);
    v
}

/// One page's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Page {
    /// 304: the page is what it was at the ETag sent.
    NotModified,
    /// 200: the page's issues (pull requests left out) and the ETag to send next time.
    Fresh {
        etag: Option<String>,
        issues: Vec<LabeledIssue>,
        /// The page held [`PER_PAGE`] entries (pull requests included): another may follow.
        full: bool,
    },
}

/// The HTTP status gh printed first with `-i` (`HTTP/2.0 304 Not Modified`), if any.
pub fn status(stdout: &str) -> Option<u16> {
    let first = stdout.lines().next()?;
    let mut words = first.split_whitespace();
    if !words.next()?.starts_with("HTTP/") {
        return None;
    }
    words.next()?.parse().ok()
}

#[derive(Deserialize)]
struct Row {
    number: u64,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    labels: Vec<RowLabel>,
    /// Present on a pull request: the issues listing carries them too.
    #[serde(default)]
    pull_request: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RowLabel {
    name: String,
}

/// Reads what `gh api -i` printed: the status line, the headers, a blank line, the body.
pub fn parse(stdout: &str) -> Result<Page, OutputError> {
    let bad = |why: &str| OutputError::Json(why.to_string());
    let code = status(stdout).ok_or_else(|| bad("no HTTP status line before the body"))?;
    if code == 304 {
        return Ok(Page::NotModified);
    }
    if code != 200 {
        return Err(bad(&format!("HTTP {code} where 200 or 304 was expected")));
    }
    let (head, body) = split_head(stdout).ok_or_else(|| bad("no blank line after the headers"))?;
    let etag = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("etag"))
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let rows: Vec<Row> = serde_json::from_str(body)
        .map_err(|e| OutputError::Json(crate::text::clip_quoted(&e.to_string())))?;
    let full = rows.len() >= PER_PAGE;
    let issues = rows
        .into_iter()
        .filter(|r| r.pull_request.is_none())
        .map(|r| LabeledIssue {
            number: r.number,
            body: r.body.unwrap_or_default(),
            labels: r.labels.into_iter().map(|l| l.name).collect(),
            title: None,
        })
        .collect();
    Ok(Page::Fresh { etag, issues, full })
}

/// The headers and the body, split at the first blank line (`\n\n` or `\r\n\r\n`).
fn split_head(s: &str) -> Option<(&str, &str)> {
    let lf = s.find("\n\n").map(|i| (i, 2));
    let crlf = s.find("\r\n\r\n").map(|i| (i, 4));
    let (i, n) = match (lf, crlf) {
        (Some(a), Some(b)) => {
            if a.0 < b.0 {
                a
            } else {
                b
            }
        }
        (a, b) => a.or(b)?,
    };
    Some((&s[..i], &s[i + n..]))
}

/// Where the hosts of a cluster read the queue the steward published (`[cluster]`: etcd,
/// `docs/SPEC.md` §11.23). The store is the cluster's; which listings it answers stays
/// here.
pub trait SharedQueue: Send + Sync {
    /// The ready queue, oldest first, while the steward's last look is recent; `None`
    /// when there is none to trust (no steward yet, a stale one, etcd not answering): the
    /// caller asks GitHub itself.
    fn ready(&self) -> Option<Vec<LabeledIssue>>;
}

static SHARED: std::sync::OnceLock<Box<dyn SharedQueue>> = std::sync::OnceLock::new();

/// From now on this process takes the ready queue from `store` while it has one (once per
/// process; a second call changes nothing).
pub fn share_through(store: Box<dyn SharedQueue>) {
    let _ = SHARED.set(store);
}

/// The shared ready queue, when this process has a store and it has a fresh queue.
pub fn shared_ready() -> Option<Vec<LabeledIssue>> {
    SHARED.get().and_then(|s| s.ready())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argv_names_the_page_the_etag_and_a_host_but_never_repo() {
        assert_eq!(
            argv(Some("o/r"), 1, None),
            [
                "api",
                "-i",
                "repos/o/r/issues?labels=ready-for-agent&state=open&sort=created&direction=asc&per_page=100&page=1"
            ]
        );
        let a = argv(Some("ghe.example.com/o/r"), 2, Some("W/\"abc\""));
        assert_eq!(
            a[..6],
            [
                "api",
                "--hostname",
                "ghe.example.com",
                "-i",
                "-H",
                "If-None-Match: W/\"abc\""
            ]
        );
        assert!(a[6].starts_with("repos/o/r/issues?") && a[6].ends_with("&page=2"));
        assert!(argv(None, 1, None)[2].starts_with("repos/{owner}/{repo}/issues?"));
    }

    #[test]
    fn a_200_gives_the_issues_without_pull_requests_and_the_etag() {
        let out = "HTTP/2.0 200 OK\nContent-Type: application/json; charset=utf-8\nEtag: W/\"9a\"\n\n\
                   [{\"number\":3,\"body\":\"b\",\"labels\":[{\"name\":\"ready-for-agent\"}]},\
                   {\"number\":4,\"body\":null,\"labels\":[],\"pull_request\":{\"url\":\"u\"}},\
                   {\"number\":5,\"labels\":[{\"name\":\"x\"}]}]";
        let Page::Fresh { etag, issues, full } = parse(out).unwrap() else {
            panic!("not fresh")
        };
        assert_eq!(etag.as_deref(), Some("W/\"9a\""));
        assert!(!full);
        assert_eq!(issues.iter().map(|i| i.number).collect::<Vec<_>>(), [3, 5]);
        assert_eq!(issues[0].body, "b");
        assert_eq!(issues[1].body, "");
        assert_eq!(issues[1].labels, ["x"]);
    }

    #[test]
    fn crlf_headers_and_a_304_are_read() {
        let out = "HTTP/1.1 200 OK\r\nETag: \"x\"\r\n\r\n[]";
        assert_eq!(
            parse(out).unwrap(),
            Page::Fresh {
                etag: Some("\"x\"".into()),
                issues: vec![],
                full: false
            }
        );
        assert_eq!(
            parse("HTTP/2.0 304 Not Modified\nEtag: W/\"9a\"\n\n").unwrap(),
            Page::NotModified
        );
    }

    #[test]
    fn what_is_no_answer_is_refused_with_a_reason() {
        for (out, why) in [
            ("[]", "no HTTP status line"),
            ("HTTP/2.0 404 Not Found\n\n{}", "HTTP 404"),
            ("HTTP/2.0 200 OK\nEtag: x", "no blank line"),
            ("HTTP/2.0 200 OK\n\n<html>", "expected"),
        ] {
            let e = parse(out).unwrap_err().to_string();
            assert!(e.contains(why), "{out:?}: {e}");
        }
    }
}
