//! `afk-supervisor issue …`: the operator's hands on the tracker. Everything works on the
//! local store; on `gh` only what the tracker interface covers (list, show, label, comment)
//! is offered, and the rest says so instead of half-working.

use clap::{Args, Subcommand};
use serde::Serialize;

use crate::cli::Ctx;
use crate::cli::Failure;
use crate::config::Overrides;
use crate::exit_code;
use crate::text;
use crate::tracker::local::{Issue, ListFilter, StateFilter};
use crate::tracker::select::{self, Backend};
use crate::tracker::{DEFAULT_LIST_LIMIT, IssueState, Tracker, TrackerError};

#[derive(Debug, Args)]
pub struct IssueArgs {
    #[command(subcommand)]
    pub command: IssueCommand,
}

#[derive(Debug, Subcommand)]
pub enum IssueCommand {
    /// Open an issue (local tracker); prints its number.
    New {
        /// The issue's title.
        #[arg(long)]
        title: String,
        /// The issue's body (Markdown); empty by default.
        #[arg(long, default_value = "")]
        body: String,
        /// A label to put on it; repeat for several. Without --label (and without
        /// --no-label) the issue is labelled ready-for-agent, so the fleet takes it.
        #[arg(long = "label", value_name = "LABEL")]
        labels: Vec<String>,
        /// File the issue with no label at all (the fleet does not take it).
        #[arg(long, conflicts_with = "labels")]
        no_label: bool,
    },
    /// List issues, newest first.
    List {
        /// open, closed or all.
        #[arg(long, default_value = "open")]
        state: StateFilter,
        /// Only issues carrying this label; repeat to require several.
        #[arg(long = "label", value_name = "LABEL")]
        labels: Vec<String>,
        /// At most this many issues are read from the tracker.
        #[arg(long, default_value_t = DEFAULT_LIST_LIMIT)]
        limit: usize,
        /// Print a JSON array (docs/guide/trackers.md shows the shape).
        #[arg(long)]
        json: bool,
    },
    /// Show one issue.
    Show {
        /// The issue's number.
        number: u64,
        /// Print JSON (labels, state, title, body and comments).
        #[arg(long)]
        json: bool,
    },
    /// Add and remove labels in one change.
    Label {
        /// The issue's number.
        number: u64,
        /// A label to add; repeat for several.
        #[arg(long = "add", value_name = "LABEL")]
        add: Vec<String>,
        /// A label to remove; repeat for several.
        #[arg(long = "remove", value_name = "LABEL")]
        remove: Vec<String>,
    },
    /// Close an issue (local tracker).
    Close {
        /// The issue's number.
        number: u64,
    },
    /// Reopen a closed issue (local tracker).
    Reopen {
        /// The issue's number.
        number: u64,
    },
    /// Add a comment.
    Comment {
        /// The issue's number.
        number: u64,
        /// The comment's text.
        #[arg(long)]
        body: String,
    },
}

/// One row of `issue list --json`. Fields the backend cannot supply are `null`.
#[derive(Debug, Serialize)]
struct ListRow {
    number: u64,
    title: Option<String>,
    state: IssueState,
    labels: Vec<String>,
    closed_at: Option<String>,
}

#[derive(Debug, Serialize)]
struct CommentJson {
    at: String,
    body: String,
}

/// `issue show --json`. Fields the backend cannot supply are `null`.
#[derive(Debug, Serialize)]
struct ShowJson {
    number: u64,
    title: Option<String>,
    state: IssueState,
    labels: Vec<String>,
    created_at: Option<String>,
    closed_at: Option<String>,
    body: Option<String>,
    comments: Option<Vec<CommentJson>>,
    /// The attempt ledger (`docs/SPEC.md` §11.10), oldest first.
    attempts: Vec<crate::ledger::Record>,
    /// The issue's pull request as the fleet knows it (`docs/SPEC.md` §11.22); null when
    /// none was opened from this checkout.
    pr: Option<crate::landing::PrView>,
}

impl From<Issue> for ShowJson {
    fn from(i: Issue) -> Self {
        ShowJson {
            number: i.number,
            title: Some(i.title),
            state: i.state,
            labels: i.labels,
            created_at: Some(i.created_at),
            closed_at: i.closed_at,
            body: Some(i.body),
            comments: Some(
                i.comments
                    .into_iter()
                    .map(|c| CommentJson {
                        at: c.at,
                        body: c.body,
                    })
                    .collect(),
            ),
            attempts: Vec::new(),
            pr: None,
        }
    }
}

pub fn run(ctx: &Ctx, args: IssueArgs) -> Result<i32, Failure> {
    let config = ctx.config(Overrides::default())?;
    let (backend, reason) =
        select::resolve(&config, &ctx.layout).map_err(crate::cli::select_failure)?;
    eprintln!("{reason}");
    match args.command {
        IssueCommand::New {
            title,
            body,
            labels,
            no_label,
        } => {
            let local = local_only(&backend, "issue new", "gh issue create")?;
            let labels = if labels.is_empty() && !no_label {
                vec![crate::tracker::labels::READY_FOR_AGENT.to_string()]
            } else {
                labels
            };
            let n = local
                .create(&title, &body, &strs(&labels))
                .map_err(tracker_failure)?;
            outln!("{n}");
        }
        IssueCommand::List {
            state,
            labels,
            limit,
            json,
        } => list(&backend, ListFilter { state, labels }, limit, json)?,
        IssueCommand::Show { number, json } => show(&backend, &ctx.layout, number, json)?,
        IssueCommand::Label {
            number,
            add,
            remove,
        } => {
            if add.is_empty() && remove.is_empty() {
                return Err(Failure::usage(
                    "issue label: give at least one --add or --remove",
                ));
            }
            backend
                .as_tracker()
                .edit_labels(number, &strs(&add), &strs(&remove))
                .map_err(tracker_failure)?;
        }
        IssueCommand::Close { number } => {
            local_only(&backend, "issue close", "gh issue close")?
                .close(number)
                .map_err(tracker_failure)?;
        }
        IssueCommand::Reopen { number } => {
            local_only(&backend, "issue reopen", "gh issue reopen")?
                .reopen(number)
                .map_err(tracker_failure)?;
        }
        IssueCommand::Comment { number, body } => {
            if body.trim().is_empty() {
                return Err(Failure::usage("issue comment: --body is empty"));
            }
            backend
                .as_tracker()
                .comment(number, &body)
                .map_err(tracker_failure)?;
        }
    }
    Ok(exit_code::OK)
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn tracker_failure(e: TrackerError) -> Failure {
    Failure::of(exit_code::FAILED, &e)
}

fn local_only<'a>(
    backend: &'a Backend,
    what: &str,
    instead: &str,
) -> Result<&'a crate::tracker::LocalTracker, Failure> {
    match backend {
        Backend::Local(t) => Ok(t),
        Backend::Gh(_) => Err(Failure::usage(format!(
            "{what} is not supported on the gh tracker (use `{instead}`, or --tracker local)"
        ))),
    }
}

fn print_json<T: Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::about(exit_code::FAILED, "cannot encode JSON", &e))?;
    outln!("{text}");
    Ok(())
}

fn list(backend: &Backend, filter: ListFilter, limit: usize, json: bool) -> Result<(), Failure> {
    let rows: Vec<ListRow> = match backend {
        Backend::Local(t) => t
            .list(&filter)
            .map_err(tracker_failure)?
            .into_iter()
            .take(limit)
            .map(|i| ListRow {
                number: i.number,
                title: Some(i.title),
                state: i.state,
                labels: i.labels,
                closed_at: i.closed_at,
            })
            .collect(),
        Backend::Gh(t) => t
            .list_all(limit)
            .map_err(tracker_failure)?
            .into_iter()
            .filter(|i| filter.matches(i.state, &i.labels))
            .map(|i| ListRow {
                number: i.number,
                title: None,
                state: i.state,
                labels: i.labels,
                closed_at: i.closed_at,
            })
            .collect(),
    };
    if json {
        return print_json(&rows);
    }
    for r in rows {
        let mut line = format!("#{} {}", r.number, r.state);
        if let Some(t) = &r.title {
            line.push(' ');
            line.push_str(&text::escape(t));
        }
        if !r.labels.is_empty() {
            line.push_str(&format!(" [{}]", text::escape(&r.labels.join(", "))));
        }
        outln!("{line}");
    }
    Ok(())
}

fn show(
    backend: &Backend,
    layout: &crate::layout::Layout,
    number: u64,
    json: bool,
) -> Result<(), Failure> {
    let mut issue: ShowJson = match backend {
        Backend::Local(t) => t.show(number).map_err(tracker_failure)?.into(),
        Backend::Gh(t) => {
            let v = t.view(number).map_err(tracker_failure)?;
            ShowJson {
                number,
                title: None,
                state: v.state,
                labels: v.labels,
                created_at: None,
                closed_at: None,
                body: None,
                comments: None,
                attempts: Vec::new(),
                pr: None,
            }
        }
    };
    issue.attempts = crate::ledger::read(layout, number)
        .map_err(|e| Failure::about(exit_code::FAILED, "attempt ledger", &e))?;
    issue.pr = crate::landing::read(layout, number)
        .map_err(|e| Failure::about(exit_code::FAILED, "landing record", &e))?
        .as_ref()
        .map(crate::landing::PrView::from);
    if json {
        return print_json(&issue);
    }
    match &issue.title {
        Some(t) => outln!("#{number} {}", text::escape(t)),
        None => outln!("#{number}"),
    }
    outln!("state: {}", issue.state);
    outln!("labels: {}", text::escape(&issue.labels.join(", ")));
    if let Some(c) = &issue.created_at {
        outln!("created: {}", text::escape(c));
    }
    if let Some(c) = &issue.closed_at {
        outln!("closed: {}", text::escape(c));
    }
    match (&issue.body, &issue.comments) {
        (Some(body), Some(comments)) => {
            if !body.is_empty() {
                outln!("\n{}", text::escape_lines(body.trim_end()));
            }
            for c in comments {
                outln!(
                    "\n--- comment {}\n{}",
                    text::escape(&c.at),
                    text::escape_lines(c.body.trim_end())
                );
            }
        }
        _ => outln!("(title, body and comments: `gh issue view {number}`)"),
    }
    if !issue.attempts.is_empty() {
        outln!("\n--- attempts");
    }
    for line in crate::ledger::attempt_lines(&issue.attempts) {
        outln!("{line}");
    }
    if let Some(pr) = &issue.pr {
        outln!("\n--- pull request\n{}", pr.line());
    }
    Ok(())
}
