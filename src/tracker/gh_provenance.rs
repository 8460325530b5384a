//! The one GitHub call that tells whose words an issue's text is (SPEC §7, §11.20): a
//! GraphQL query through `gh api graphql`, because `gh issue view --json` knows neither
//! the edit history nor who applied a label. One call answers the text, the author, every
//! body edit with its editor, every `ready-for-agent` label event and title rename with its
//! actor, and the newest comments, so a judgement costs one GraphQL request.

use serde::Deserialize;

use super::gh_output::OutputError;
use super::labels;
use super::provenance::{Change, Hand, Part, Provenance, Said};
use super::trust::Author;

/// The query, exactly as SPEC §7 gives it (the fake `gh` of the tests accepts only this).
pub const QUERY: &str = "query($owner:String!,$repo:String!,$number:Int!){repository(owner:$owner,name:$repo){issue(number:$number){title body createdAt lastEditedAt editor{login} author{login} authorAssociation userContentEdits(last:100){totalCount nodes{editedAt editor{login}}} timelineItems(last:100,itemTypes:[LABELED_EVENT,RENAMED_TITLE_EVENT]){filteredCount nodes{__typename ... on LabeledEvent{createdAt actor{login} label{name}} ... on RenamedTitleEvent{createdAt actor{login}}}} comments(last:100){nodes{author{login} authorAssociation body createdAt}}}}}";

/// `gh api [--hostname H] graphql -f query=<QUERY> -F owner=<O> -F repo=<R> -F number=<N>`.
/// Without a configured repository gh fills `{owner}` and `{repo}` from the checkout's
/// remotes, as its other calls do without `--repo`.
pub fn argv(repo: Option<&str>, number: u64) -> Vec<String> {
    let parts: Vec<&str> = repo.map(|r| r.split('/').collect()).unwrap_or_default();
    let (host, owner, name) = match parts.as_slice() {
        [h, o, n] => (Some(*h), *o, *n),
        [o, n] => (None, *o, *n),
        _ => (None, "{owner}", "{repo}"),
    };
    let mut v = vec!["api".to_string()];
    if let Some(h) = host {
        v.extend(["--hostname".to_string(), h.to_string()]);
    }
    v.extend([
        "graphql".to_string(),
        "-f".to_string(),
        format!("query={QUERY}"),
        "-F".to_string(),
        format!("owner={owner}"),
        "-F".to_string(),
        format!("repo={name}"),
        "-F".to_string(),
        format!("number={number}"),
    ]);
    v
}

#[derive(Deserialize)]
struct Reply {
    data: Option<Data>,
}

#[derive(Deserialize)]
struct Data {
    repository: Option<Repository>,
}

#[derive(Deserialize)]
struct Repository {
    issue: Option<Issue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Issue {
    title: String,
    body: String,
    created_at: String,
    last_edited_at: Option<String>,
    editor: Option<Login>,
    author: Option<Login>,
    author_association: Option<String>,
    user_content_edits: Edits,
    timeline_items: Timeline,
    comments: Comments,
}

#[derive(Deserialize)]
struct Login {
    login: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Edits {
    total_count: usize,
    nodes: Vec<Edit>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Edit {
    edited_at: String,
    editor: Option<Login>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Timeline {
    filtered_count: usize,
    nodes: Vec<Item>,
}

#[derive(Deserialize)]
#[serde(tag = "__typename")]
enum Item {
    LabeledEvent {
        #[serde(rename = "createdAt")]
        created_at: String,
        actor: Option<Login>,
        label: LabelName,
    },
    RenamedTitleEvent {
        #[serde(rename = "createdAt")]
        created_at: String,
        actor: Option<Login>,
    },
}

#[derive(Deserialize)]
struct LabelName {
    name: String,
}

#[derive(Deserialize)]
struct Comments {
    nodes: Vec<Comment>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Comment {
    author: Option<Login>,
    author_association: Option<String>,
    body: String,
    created_at: String,
}

fn epoch(s: &str) -> Result<u64, OutputError> {
    crate::timeutil::parse_rfc3339(s)
        .map(crate::timeutil::epoch_secs)
        .ok_or_else(|| {
            OutputError::Json(format!("not an RFC 3339 time: {}", crate::text::excerpt(s)))
        })
}

fn login(l: Option<Login>) -> Option<String> {
    l.map(|l| l.login).filter(|l| !l.is_empty())
}

/// The query's answer. `Ok(None)`: no such issue (GitHub answers `issue: null`).
pub fn parse(text: &str) -> Result<Option<Provenance>, OutputError> {
    let r: Reply = serde_json::from_str(text)
        .map_err(|e| OutputError::Json(crate::text::clip_quoted(&e.to_string())))?;
    let Some(i) = r.data.and_then(|d| d.repository).and_then(|r| r.issue) else {
        return Ok(None);
    };
    let edits_seen = i.user_content_edits.nodes.len();
    let truncated = i.user_content_edits.total_count > edits_seen
        || i.timeline_items.filtered_count > i.timeline_items.nodes.len();
    let mut changes = Vec::new();
    let mut newest_edit = None;
    for e in i.user_content_edits.nodes {
        let at = epoch(&e.edited_at)?;
        newest_edit = newest_edit.max(Some(at));
        changes.push(Change {
            part: Part::Body,
            by: Hand {
                login: login(e.editor),
                at,
            },
        });
    }
    // `lastEditedAt` guards the history: an edit newer than every listed one is its editor's.
    if let Some(last) = i.last_edited_at.as_deref() {
        let at = epoch(last)?;
        if newest_edit.is_none_or(|n| at > n) {
            changes.push(Change {
                part: Part::Body,
                by: Hand {
                    login: login(i.editor),
                    at,
                },
            });
        }
    }
    let mut labelled = Vec::new();
    for item in i.timeline_items.nodes {
        match item {
            Item::LabeledEvent {
                created_at,
                actor,
                label,
            } => {
                if label.name == labels::READY_FOR_AGENT {
                    labelled.push(Hand {
                        login: login(actor),
                        at: epoch(&created_at)?,
                    });
                }
            }
            Item::RenamedTitleEvent { created_at, actor } => changes.push(Change {
                part: Part::Title,
                by: Hand {
                    login: login(actor),
                    at: epoch(&created_at)?,
                },
            }),
        }
    }
    changes.sort_by_key(|c| c.by.at);
    labelled.sort_by_key(|h| h.at);
    let comments = i
        .comments
        .nodes
        .into_iter()
        .map(|c| {
            Ok(Said {
                author: c.author.map(|a| Author {
                    login: a.login,
                    association: c.author_association.unwrap_or_default(),
                }),
                body: c.body,
                at: epoch(&c.created_at)?,
            })
        })
        .collect::<Result<Vec<_>, OutputError>>()?;
    Ok(Some(Provenance {
        title: i.title,
        body: i.body,
        author: i.author.map(|a| Author {
            login: a.login,
            association: i.author_association.unwrap_or_default(),
        }),
        created_at: epoch(&i.created_at)?,
        changes,
        labelled,
        comments,
        truncated,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_the_one_spec_section_7_names() {
        let spec = include_str!("../../docs/SPEC.md");
        assert!(
            spec.contains(QUERY),
            "SPEC §7 must quote tracker::gh_provenance::QUERY verbatim"
        );
    }

    #[test]
    fn argv_names_the_repository_or_lets_gh_fill_it() {
        let a = argv(Some("acme/widgets"), 7);
        assert_eq!(a[..3], ["api", "graphql", "-f"]);
        assert_eq!(
            a[4..],
            ["-F", "owner=acme", "-F", "repo=widgets", "-F", "number=7"]
        );
        let a = argv(Some("ghe.example.com/acme/widgets"), 7);
        assert_eq!(a[..4], ["api", "--hostname", "ghe.example.com", "graphql"]);
        let a = argv(None, 7);
        assert_eq!(
            a[4..],
            ["-F", "owner={owner}", "-F", "repo={repo}", "-F", "number=7"]
        );
    }

    #[test]
    fn an_answer_reads_into_its_hands_in_order() {
        let text = r#"{"data":{"repository":{"issue":{
          "title":"Fix it","body":"Body","createdAt":"2026-01-01T00:00:00Z",
          "lastEditedAt":"2026-01-03T00:00:00Z","editor":{"login":"mallory"},
          "author":{"login":"maint"},"authorAssociation":"OWNER",
          "userContentEdits":{"totalCount":1,"nodes":[{"editedAt":"2026-01-02T00:00:00Z","editor":null}]},
          "timelineItems":{"filteredCount":2,"nodes":[
            {"__typename":"LabeledEvent","createdAt":"2026-01-01T01:00:00Z","actor":{"login":"maint"},"label":{"name":"ready-for-agent"}},
            {"__typename":"RenamedTitleEvent","createdAt":"2026-01-01T02:00:00Z","actor":{"login":"maint"}}]},
          "comments":{"nodes":[{"author":{"login":"maint"},"authorAssociation":"OWNER","body":"/afk approve","createdAt":"2026-01-04T00:00:00Z"}]}}}}}"#;
        let p = parse(text).expect("parses").expect("an issue");
        assert_eq!(p.title, "Fix it");
        assert_eq!(p.labelled.len(), 1);
        let who: Vec<(Part, Option<&str>)> = p
            .changes
            .iter()
            .map(|c| (c.part, c.by.login.as_deref()))
            .collect();
        assert_eq!(
            who,
            [
                (Part::Title, Some("maint")),
                (Part::Body, None),
                (Part::Body, Some("mallory"))
            ]
        );
        assert!(!p.truncated);
        assert_eq!(
            p.comments[0]
                .author
                .as_ref()
                .map(|a| a.association.as_str()),
            Some("OWNER")
        );
    }

    #[test]
    fn missing_issue_and_bad_answers_are_told_apart() {
        assert_eq!(parse(r#"{"data":{"repository":{"issue":null}}}"#), Ok(None));
        assert!(parse("<html>").is_err());
        assert!(parse(r#"{"data":{"repository":{"issue":{"title":1}}}}"#).is_err());
    }
}
