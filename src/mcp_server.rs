//! `afk-supervisor mcp`: the fleet as an MCP server on stdio (the official Rust SDK,
//! `rmcp`), for agents and scripts (`docs/SPEC.md` §11.18). Read tools by default; the
//! write tools answer only with `--allow-writes`, which `initialize`'s instructions name.
//!
//! Every tool does its work through the same library code as the CLI command of the same
//! job (`status`, `events`, `logs`, `scale`, `pause`, `stop --slot`), on the blocking pool
//! under a deadline: a slow tracker or a hostile file never stalls the server's loop, and no
//! call hangs past [`DEADLINE`]. Refusals (no fleet, input out of range) are tool errors
//! with one line of text, never a panic.

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, Implementation, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    ErrorData, Json, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::control;
use crate::control::operator::{self, Via};
use crate::event_log::Kind;
use crate::event_log::stream::{EventStream, Start};
use crate::lanes::scale_directive::MAX_TARGET;
use crate::lanes::slot_control::Action;
use crate::lanes::state_file::ShrinkMode;
use crate::layout::Layout;
use crate::tracker::Tracker as _;

/// Longest any tool call may take before it is answered with an error.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Longest text argument taken (a reason, a cursor, a label): anything longer is refused.
const MAX_TEXT: usize = 4096;

/// Most events one `tail_events` answer holds, and its default.
const MAX_EVENTS: usize = 1000;
const DEFAULT_EVENTS: usize = 100;

/// Most lines one `slot_log` answer holds, and the most bytes of the log's end read.
const MAX_LINES: usize = 2000;
const SLOT_LOG_TAIL_BYTES: u64 = 1 << 20;

/// Most issues one `list_issues` answer holds, and how many are listed to filter from.
const MAX_ISSUES: usize = 500;
const LIST_ALL: usize = 1000;

const EVENT_LOG_URI: &str = "afk://event-log";
const STATE_URI: &str = "afk://state.toon";

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("MCP stdio transport: {0}")]
    Initialize(#[source] Box<rmcp::service::ServerInitializeError>),
    #[error("MCP stdio transport: {0}")]
    Serve(#[source] tokio::task::JoinError),
}

#[derive(Clone)]
pub struct AfkMcp {
    layout: Layout,
    config: Arc<Config>,
    allow_writes: bool,
    tool_router: ToolRouter<AfkMcp>,
}

// ---- inputs and outputs ----

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListIssuesIn {
    /// Only issues carrying this label (e.g. ready-for-agent, afk:quarantined).
    pub label: Option<String>,
    /// open (the default), closed or all.
    pub state: Option<String>,
    /// At most this many (default 100, at most 500).
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct IssueRow {
    pub number: u64,
    /// The issue's title; null on the gh tracker, whose listing does not carry it
    /// (`show_issue` has the rest).
    pub title: Option<String>,
    pub state: String,
    pub labels: Vec<String>,
    pub closed_at: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct IssueList {
    pub issues: Vec<IssueRow>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct IssueIn {
    /// The issue number.
    pub number: i64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Attempt {
    pub worker: Option<String>,
    pub start: Option<String>,
    pub end: String,
    /// done, set-aside, agent-failed exit N, wall-clock-capped, worker-died, stalled,
    /// given-back, or the marker quarantined.
    pub outcome: String,
    pub branch: Option<String>,
    pub head: Option<String>,
    /// What the agent's profile reported the run cost, where it knows.
    pub cost_usd: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub turns: Option<u64>,
    pub model: Option<String>,
    pub session_id: Option<String>,
    /// Why this failure did not count towards quarantine, when it did not.
    pub excused: Option<String>,
    /// `<ref> <sha>` where the attempt's work was rescued.
    pub rescued: Option<String>,
    /// The pull request the attempt opened or pushed to (SPEC §11.22).
    pub pr: Option<String>,
    /// What the `[checks] command` said after this round (`passed (round 2)`, `failed: exit 1`).
    pub checks: Option<String>,
    /// cgroup mode: the attempt's CPU time (ms) and memory peak (KiB) from the kernel.
    pub cpu_ms: Option<u64>,
    pub memory_peak_kib: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SpendIn {
    /// One row per `day` (the default, in `budget.timezone`) or per `issue`.
    pub by: Option<String>,
    /// Only attempts that ended on or after this day (`yyyy-mm-dd`).
    pub since: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SpendRow {
    /// The day (`yyyy-mm-dd`), the issue (`#N`) or `total`.
    pub key: String,
    pub usd: f64,
    pub tokens: u64,
    /// The attempts that reported a cost or tokens (what `usd` and `tokens` add up).
    pub runs: u64,
    /// Every attempt that ended in the row, whether or not it reported a cost.
    pub attempts: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SpendReport {
    pub by: String,
    pub timezone: String,
    pub rows: Vec<SpendRow>,
    pub total: SpendRow,
    /// What the running attempts of this host (on a cluster with a daily budget: of the
    /// fleet) hold reserved against the day's budget, not in the rows until they end
    /// (`docs/SPEC.md` §11.13).
    pub reserved: SpendReserved,
    /// On a cluster with a daily budget: the fleet's spend today, every host's (the rows
    /// are this host's ledger) (`docs/SPEC.md` §11.23).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet_today: Option<FleetToday>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct FleetToday {
    pub usd: f64,
    pub tokens: u64,
    /// Attempts that reported a cost or tokens, on every host.
    pub runs: u64,
    /// Hosts with an entry in the day's key.
    pub hosts: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SpendReserved {
    pub usd: f64,
    pub tokens: u64,
    /// Attempts holding a reservation.
    pub attempts: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct IssueDetail {
    pub number: u64,
    /// The issue's title; null on the gh tracker (`gh issue view N` shows it).
    pub title: Option<String>,
    pub state: String,
    pub labels: Vec<String>,
    /// The issue's text (Markdown); null on the gh tracker.
    pub body: Option<String>,
    /// RFC 3339; null where the tracker does not say.
    pub created_at: Option<String>,
    pub closed_at: Option<String>,
    /// The comments, oldest first.
    pub comments: Vec<CommentOut>,
    /// The attempt ledger (`.red/state/attempts/<N>.toonl`), oldest first.
    pub attempts: Vec<Attempt>,
    /// The issue's pull request as this checkout's fleet knows it (SPEC §11.22); null when none.
    pub pr: Option<crate::landing::PrView>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CommentOut {
    /// RFC 3339 when the tracker stored it; null where it does not say.
    pub at: Option<String>,
    pub body: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TailIn {
    /// Resume after the event this cursor came with; `start` (default) or `end`.
    pub since: Option<String>,
    /// At most this many events (default 100, at most 1000).
    pub limit: Option<i64>,
    /// Only these kinds, or dotted prefixes of kinds (`slot`, `fleet.operator-paused`).
    pub kinds: Option<Vec<String>>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct EventOut {
    /// Pass as `since` to resume right after this record.
    pub cursor: String,
    #[serde(flatten)]
    pub event: crate::event_log::Record,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct EventsOut {
    pub events: Vec<EventOut>,
    /// Pass as `since` to get what follows; null while the log does not exist.
    pub next_cursor: Option<String>,
    /// A cursor whose log generation rotated away, lines that are not records.
    pub notes: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SlotLogIn {
    /// The slot's index, 0 up to the fleet's target (excluded), as `fleet_status` lists them.
    pub slot: i64,
    /// The last this many lines (default 50, at most 2000).
    pub lines: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SlotLogOut {
    pub slot: usize,
    pub path: String,
    pub lines: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ScaleIn {
    /// The new number of worker slots, 0..=1024.
    pub target: i64,
    /// drain-then-retire (default) or hard-kill.
    pub mode: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct PauseIn {
    /// Why (shown in status and the event log).
    pub reason: Option<String>,
    /// When the fleet resumes by itself: RFC 3339 or a span (90m, 2h); default: until resume_fleet.
    pub until: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct Empty {}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct StopSlotIn {
    /// The slot's index, 0 up to the fleet's target (excluded), as `fleet_status` lists them.
    pub slot: i64,
    /// drain-then-retire (default: the worker finishes its issue) or hard-kill.
    pub mode: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Done {
    /// What was done, in one line.
    pub message: String,
}

// ---- checks ----

/// Why a tool call was refused or failed: the one line of text its error result carries
/// (`is_error: true`), naming the argument, issue, slot or file.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{name}: {len} bytes is longer than {MAX_TEXT}")]
    TooLong { name: &'static str, len: usize },
    #[error("{name} {value} is out of range {lo}..={hi}")]
    OutOfRange {
        name: &'static str,
        value: i64,
        lo: i64,
        hi: i64,
    },
    /// An argument that is none of the words the tool takes (`expected` lists them).
    #[error("{name} {:?}: expected {expected}", crate::text::excerpt(.given))]
    Unexpected {
        name: &'static str,
        given: String,
        expected: &'static str,
    },
    #[error("mode: {0}")]
    Mode(#[source] crate::lanes::state_file::UnknownShrinkMode),
    #[error(transparent)]
    Until(#[from] operator::BadUntil),
    #[error(
        "{tool}: this server is read-only; start it with `afk-supervisor mcp --allow-writes` to allow writes"
    )]
    ReadOnly { tool: &'static str },
    #[error("no supervisor running for this project ({0})")]
    NotRunning(#[source] crate::pidfile::NotLive),
    #[error("issue tracker: {0}")]
    Tracker(#[source] crate::tracker::SelectError),
    #[error("issue #{number}: {source}")]
    Issue {
        number: u64,
        #[source]
        source: crate::tracker::TrackerError,
    },
    #[error(transparent)]
    Issues(#[from] crate::tracker::TrackerError),
    #[error("cluster: {0}")]
    Cluster(#[from] crate::cluster::etcd::EtcdError),
    #[error("budget reservations: {0}")]
    Reservations(#[source] crate::budget::reserve::ReserveError),
    #[error("the fleet's spend: {0}")]
    FleetSpend(#[source] crate::cluster::cas::CasError),
    #[error(transparent)]
    Ledger(#[from] crate::toonl::LogError),
    #[error(transparent)]
    Landing(#[from] crate::landing::RecordError),
    #[error(transparent)]
    Events(#[from] crate::event_log::stream::EventsError),
    #[error(transparent)]
    Logs(#[from] crate::slot_log_view::LogsError),
    #[error(transparent)]
    Control(#[from] control::ControlError),
    #[error(transparent)]
    Operator(#[from] operator::OperatorError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// `scale` wrote the directive but the heartbeat did not show it in time.
    #[error("{0}")]
    ScalePending(control::ScaleOutcome),
    #[error(
        "stop slot {slot}: no answer from the supervisor (pid={pid}) yet; it acts at its next tick"
    )]
    SlotPending { slot: usize, pid: i32 },
    #[error("{}: {source}", .path.display())]
    File {
        path: std::path::PathBuf,
        #[source]
        source: crate::fsutil::SmallFileError,
    },
    #[error("{}: not found", .path.display())]
    Missing { path: std::path::PathBuf },
    #[error("internal error: {0}")]
    Internal(#[source] tokio::task::JoinError),
    #[error("no answer within {}s", DEADLINE.as_secs())]
    NoAnswer,
}

/// A refusal is the tool's result, marked an error, with its one line as the text.
impl rmcp::model::IntoContents for ToolError {
    fn into_contents(self) -> Vec<rmcp::model::ContentBlock> {
        vec![rmcp::model::ContentBlock::text(self.to_string())]
    }
}

fn text_arg<'a>(name: &'static str, s: &'a str) -> Result<&'a str, ToolError> {
    if s.len() > MAX_TEXT {
        return Err(ToolError::TooLong { name, len: s.len() });
    }
    Ok(s)
}

fn ranged(name: &'static str, value: i64, lo: i64, hi: i64) -> Result<i64, ToolError> {
    if value < lo || value > hi {
        return Err(ToolError::OutOfRange {
            name,
            value,
            lo,
            hi,
        });
    }
    Ok(value)
}

fn mode_arg(m: Option<&str>) -> Result<ShrinkMode, ToolError> {
    match m {
        None => Ok(ShrinkMode::DrainThenRetire),
        Some(m) => text_arg("mode", m)?.parse().map_err(ToolError::Mode),
    }
}

/// Runs `f` on the blocking pool, answered within [`DEADLINE`].
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    match tokio::time::timeout(DEADLINE, tokio::task::spawn_blocking(f)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(ToolError::Internal(e)),
        Err(_) => Err(ToolError::NoAnswer),
    }
}

/// The published `status --json` schema, the `fleet_status` tool's output schema.
fn status_schema() -> Arc<rmcp::model::JsonObject> {
    let text = include_str!("../docs/status.schema.json");
    Arc::new(serde_json::from_str(text).unwrap_or_default())
}

// ---- tools ----

#[tool_router]
impl AfkMcp {
    pub fn new(layout: Layout, config: Config, allow_writes: bool) -> AfkMcp {
        AfkMcp {
            layout,
            config: Arc::new(config),
            allow_writes,
            tool_router: Self::tool_router(),
        }
    }

    fn writes(&self, tool: &'static str) -> Result<(), ToolError> {
        if self.allow_writes {
            Ok(())
        } else {
            Err(ToolError::ReadOnly { tool })
        }
    }

    fn tracker(&self) -> Result<Box<dyn crate::tracker::Tracker>, ToolError> {
        crate::tracker::select::open(&self.config, &self.layout)
            .map(|s| s.tracker)
            .map_err(ToolError::Tracker)
    }

    /// The backend itself, as `afk-supervisor issue` uses it: the local store's issues
    /// carry their titles, bodies and comments.
    fn backend(&self) -> Result<crate::tracker::select::Backend, ToolError> {
        crate::tracker::select::resolve(&self.config, &self.layout)
            .map(|(b, _)| b)
            .map_err(ToolError::Tracker)
    }

    #[tool(
        description = "The running fleet: the same JSON as `afk-supervisor status --json` (schema_version, supervisor, fleet, slots; docs/status.schema.json); with [cluster], `cluster` holds every host, the leader, the claims, the shared pauses and each GitHub identity's writes left, as `status --fleet --json`.",
        output_schema = status_schema(),
        annotations(read_only_hint = true)
    )]
    async fn fleet_status(&self) -> Result<CallToolResult, ToolError> {
        let layout = self.layout.clone();
        let report = blocking(move || Ok(control::status(&layout)?)).await?;
        let mut v = crate::status::health::report_json(&report)?;
        // On a cluster, every host too: what `status --fleet --json` shows.
        if let Some(c) = crate::cluster::active() {
            let budgets = self.config.tracker.write_budgets();
            let (layout, budget) = (self.layout.clone(), self.config.budget.clone());
            v["cluster"] = blocking(move || {
                let mut view = c.fleet_view(budgets)?;
                view["budget"] = crate::budget::fleet_day::view(&layout, &budget);
                Ok(view)
            })
            .await?;
        }
        Ok(CallToolResult::structured(v))
    }

    #[tool(
        description = "Issues on the tracker, filtered by label and state (open, closed, all).",
        annotations(read_only_hint = true)
    )]
    async fn list_issues(
        &self,
        Parameters(p): Parameters<ListIssuesIn>,
    ) -> Result<Json<IssueList>, ToolError> {
        let label = p
            .label
            .map(|l| text_arg("label", &l).map(str::to_string))
            .transpose()?;
        let state = match p.state.as_deref() {
            None | Some("open") => Some(crate::tracker::IssueState::Open),
            Some("closed") => Some(crate::tracker::IssueState::Closed),
            Some("all") => None,
            Some(s) => {
                return Err(ToolError::Unexpected {
                    name: "state",
                    given: s.to_string(),
                    expected: "open, closed or all",
                });
            }
        };
        let limit = ranged("limit", p.limit.unwrap_or(100), 1, MAX_ISSUES as i64)? as usize;
        let this = self.clone();
        blocking(move || {
            let wanted = |s: crate::tracker::IssueState, labels: &[String]| {
                state.is_none_or(|want| s == want)
                    && label
                        .as_deref()
                        .is_none_or(|l| labels.iter().any(|x| x == l))
            };
            let issues = match this.backend()? {
                crate::tracker::select::Backend::Local(t) => t
                    .list(&crate::tracker::local::ListFilter {
                        state: crate::tracker::local::StateFilter::All,
                        labels: Vec::new(),
                    })?
                    .into_iter()
                    .filter(|i| wanted(i.state, &i.labels))
                    .take(limit)
                    .map(|i| IssueRow {
                        number: i.number,
                        title: Some(i.title),
                        state: i.state.to_string(),
                        labels: i.labels,
                        closed_at: i.closed_at,
                    })
                    .collect(),
                crate::tracker::select::Backend::Gh(t) => t
                    .list_all(LIST_ALL.max(limit))?
                    .into_iter()
                    .filter(|i| wanted(i.state, &i.labels))
                    .take(limit)
                    .map(|i| IssueRow {
                        number: i.number,
                        title: None,
                        state: i.state.to_string(),
                        labels: i.labels,
                        closed_at: i.closed_at,
                    })
                    .collect(),
            };
            Ok(Json(IssueList { issues }))
        })
        .await
    }

    #[tool(
        description = "What the agent's attempts cost, from the attempt ledger: rows by day (in budget.timezone) or by issue, with dollars, tokens, runs (attempts that reported a cost or tokens) and attempts, the total, and what running attempts hold reserved against the day's budget (as `afk-supervisor spend --json`).",
        annotations(read_only_hint = true)
    )]
    async fn spend(
        &self,
        Parameters(p): Parameters<SpendIn>,
    ) -> Result<Json<SpendReport>, ToolError> {
        let by = match p.by.as_deref() {
            None | Some("day") => crate::budget::By::Day,
            Some("issue") => crate::budget::By::Issue,
            Some(b) => {
                return Err(ToolError::Unexpected {
                    name: "by",
                    given: b.to_string(),
                    expected: "day or issue",
                });
            }
        };
        if let Some(s) = &p.since
            && time::Date::parse(s, time::macros::format_description!("[year]-[month]-[day]"))
                .is_err()
        {
            return Err(ToolError::Unexpected {
                name: "since",
                given: s.to_string(),
                expected: "a day as yyyy-mm-dd",
            });
        }
        let this = self.clone();
        blocking(move || {
            let (all, _unreadable) = crate::ledger::read_all(&this.layout);
            let offset = this.config.budget.utc_offset_s;
            let rows = crate::budget::report(&all, p.since.as_deref(), by, offset);
            let total = crate::budget::total(&rows);
            let live = crate::budget::reserve::read_live(
                &this.layout.state(),
                crate::timeutil::now_epoch(),
            )
            .map_err(ToolError::Reservations)?;
            let mut held = crate::budget::reserve::Reserved::of(&live);
            let fleet =
                crate::budget::fleet_day::for_report(&this.layout, &this.config.budget, &all)
                    .transpose()
                    .map_err(ToolError::FleetSpend)?;
            if let Some(f) = &fleet {
                held = f.reserved;
            }
            let row = |r: crate::budget::Row| SpendRow {
                key: r.key,
                usd: r.usd,
                tokens: r.tokens,
                runs: r.runs,
                attempts: r.attempts,
            };
            Ok(Json(SpendReport {
                by: match by {
                    crate::budget::By::Day => "day".into(),
                    crate::budget::By::Issue => "issue".into(),
                },
                timezone: crate::budget::offset_words(offset),
                rows: rows.into_iter().map(row).collect(),
                total: row(total),
                reserved: SpendReserved {
                    usd: crate::config::Usd(held.usd_micros).get(),
                    tokens: held.tokens,
                    attempts: held.attempts,
                },
                fleet_today: fleet.map(|f| FleetToday {
                    usd: f.spend.usd,
                    tokens: f.spend.tokens,
                    runs: f.spend.runs,
                    hosts: f.hosts as u64,
                }),
            }))
        })
        .await
    }

    #[tool(
        description = "One issue: its state and labels, and its attempts from the ledger (worker, start, end, outcome, branch, head, cost and tokens, why a failure was excused, the rescued ref and sha, kernel CPU and memory figures, its pull request and checks), and its pull request with its checks and fix rounds (SPEC §11.22).",
        annotations(read_only_hint = true)
    )]
    async fn show_issue(
        &self,
        Parameters(p): Parameters<IssueIn>,
    ) -> Result<Json<IssueDetail>, ToolError> {
        let n = ranged("number", p.number, 1, i64::MAX)? as u64;
        let this = self.clone();
        blocking(move || {
            let mut detail = match this.backend()? {
                crate::tracker::select::Backend::Local(t) => {
                    let i = t
                        .show(n)
                        .map_err(|source| ToolError::Issue { number: n, source })?;
                    IssueDetail {
                        number: n,
                        title: Some(i.title),
                        state: i.state.to_string(),
                        labels: i.labels,
                        body: Some(i.body),
                        created_at: Some(i.created_at),
                        closed_at: i.closed_at,
                        comments: i
                            .comments
                            .into_iter()
                            .map(|c| CommentOut {
                                at: Some(c.at),
                                body: c.body,
                            })
                            .collect(),
                        attempts: Vec::new(),
                        pr: None,
                    }
                }
                crate::tracker::select::Backend::Gh(t) => {
                    let th = t
                        .thread(n)
                        .map_err(|source| ToolError::Issue { number: n, source })?;
                    IssueDetail {
                        number: n,
                        title: None,
                        state: th.state.to_string(),
                        labels: th.labels,
                        body: None,
                        created_at: None,
                        closed_at: None,
                        comments: th
                            .comments
                            .into_iter()
                            .map(|c| CommentOut {
                                at: c.at.map(|t| {
                                    crate::timeutil::rfc3339(
                                        std::time::UNIX_EPOCH + Duration::from_secs(t),
                                    )
                                }),
                                body: c.body,
                            })
                            .collect(),
                        attempts: Vec::new(),
                        pr: None,
                    }
                }
            };
            detail.attempts = crate::ledger::read(&this.layout, n)?
                .into_iter()
                .map(|r| Attempt {
                    worker: r.worker,
                    start: r.start,
                    end: r.end,
                    outcome: r.outcome.to_string(),
                    branch: r.branch,
                    head: r.head,
                    cost_usd: r.usage.cost_usd,
                    input_tokens: r.usage.input_tokens,
                    output_tokens: r.usage.output_tokens,
                    turns: r.usage.turns,
                    model: r.usage.model,
                    session_id: r.usage.session_id,
                    excused: r.excused,
                    rescued: r.rescued,
                    cpu_ms: r.cpu_ms,
                    memory_peak_kib: r.memory_peak_kib,
                    pr: r.pr,
                    checks: r.checks,
                })
                .collect();
            detail.pr = crate::landing::read(&this.layout, n)?
                .as_ref()
                .map(crate::landing::PrView::from);
            Ok(Json(detail))
        })
        .await
    }

    #[tool(
        description = "Event-log records after a cursor (each with the cursor that resumes after it, valid across log rotation), optionally only some kinds.",
        annotations(read_only_hint = true)
    )]
    async fn tail_events(
        &self,
        Parameters(p): Parameters<TailIn>,
    ) -> Result<Json<EventsOut>, ToolError> {
        let since = text_arg("since", p.since.as_deref().unwrap_or("start"))?;
        let start = Start::parse(since)?;
        let limit = ranged(
            "limit",
            p.limit.unwrap_or(DEFAULT_EVENTS as i64),
            1,
            MAX_EVENTS as i64,
        )? as usize;
        let kinds = p.kinds.unwrap_or_default();
        for k in &kinds {
            text_arg("kinds", k)?;
        }
        let (log, keep) = (self.layout.event_log(), self.config.log.keep);
        blocking(move || {
            let mut stream = EventStream::new(&log, keep, start);
            let batch = stream.poll()?;
            let matches = |kind: &Kind| kinds.is_empty() || kinds.iter().any(|k| kind.is_under(k));
            let mut events = Vec::new();
            let mut next = stream.position();
            for p in batch.events {
                if !matches(&p.event.kind) {
                    continue;
                }
                if events.len() == limit {
                    // Resume right after the last one returned, not past what was left.
                    next = events.last().map(|e: &EventOut| e.cursor.clone());
                    break;
                }
                events.push(EventOut {
                    cursor: p.cursor,
                    event: p.event,
                });
            }
            Ok(Json(EventsOut {
                events,
                next_cursor: next,
                notes: batch.notes,
            }))
        })
        .await
    }

    #[tool(
        description = "The last lines of one slot's worker output (its newest slot log).",
        annotations(read_only_hint = true)
    )]
    async fn slot_log(
        &self,
        Parameters(p): Parameters<SlotLogIn>,
    ) -> Result<Json<SlotLogOut>, ToolError> {
        let slot = ranged("slot", p.slot, 0, MAX_TARGET as i64)? as usize;
        let n = ranged("lines", p.lines.unwrap_or(50), 1, MAX_LINES as i64)? as usize;
        let layout = self.layout.clone();
        blocking(move || {
            let path = crate::slot_log_view::newest_slot_log(&layout, slot)?;
            let bytes = tail_bytes(&path, SLOT_LOG_TAIL_BYTES)?;
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            let lines = all[all.len().saturating_sub(n)..]
                .iter()
                .map(|l| l.to_string())
                .collect();
            Ok(Json(SlotLogOut {
                slot,
                path: path.display().to_string(),
                lines,
            }))
        })
        .await
    }

    #[tool(
        description = "Write (needs --allow-writes): change the running fleet's target size, as `afk-supervisor scale`.",
        annotations(read_only_hint = false, destructive_hint = true)
    )]
    async fn scale(&self, Parameters(p): Parameters<ScaleIn>) -> Result<Json<Done>, ToolError> {
        self.writes("scale")?;
        let target = ranged("target", p.target, 0, MAX_TARGET as i64)? as usize;
        let mode = mode_arg(p.mode.as_deref())?;
        let layout = self.layout.clone();
        let wait = Duration::from_secs((3 * self.config.timing.tick_s).clamp(10, 30));
        blocking(move || {
            operator::log_request(
                &layout,
                Via::Mcp,
                &format!("scale {target} (shrink-mode={mode})"),
                None,
                None,
            );
            let out = control::scale(&layout, target, mode, wait)?;
            match out {
                control::ScaleOutcome::Applied { .. } => Ok(Json(Done {
                    message: out.to_string(),
                })),
                control::ScaleOutcome::Pending { .. } => Err(ToolError::ScalePending(out)),
            }
        })
        .await
    }

    #[tool(
        description = "Write (needs --allow-writes): operator pause of the running fleet: no new claims or spawns; workers in flight finish.",
        annotations(read_only_hint = false)
    )]
    async fn pause_fleet(
        &self,
        Parameters(p): Parameters<PauseIn>,
    ) -> Result<Json<Done>, ToolError> {
        self.writes("pause_fleet")?;
        let reason = p
            .reason
            .map(|r| text_arg("reason", &r).map(str::to_string))
            .transpose()?;
        let until = p
            .until
            .map(|u| text_arg("until", &u).and_then(|u| Ok(operator::parse_until(u)?)))
            .transpose()?;
        let layout = self.layout.clone();
        blocking(move || {
            let out = operator::pause(&layout, reason.as_deref(), until, Via::Mcp, true)?;
            let what = out.pause.map(|p| p.describe()).unwrap_or_default();
            Ok(Json(Done {
                message: format!("fleet paused {what}"),
            }))
        })
        .await
    }

    #[tool(
        description = "Write (needs --allow-writes): lift the operator pause.",
        annotations(read_only_hint = false)
    )]
    async fn resume_fleet(
        &self,
        Parameters(_): Parameters<Empty>,
    ) -> Result<Json<Done>, ToolError> {
        self.writes("resume_fleet")?;
        let layout = self.layout.clone();
        blocking(move || {
            let out = operator::resume(&layout, Via::Mcp, true)?;
            Ok(Json(Done {
                message: match out.pause {
                    Some(p) => format!("fleet resumed (the pause was {})", p.describe()),
                    None => "no operator pause was in force".into(),
                },
            }))
        })
        .await
    }

    #[tool(
        description = "Write (needs --allow-writes): give an issue back to ready-for-agent (not one a worker holds, nor a quarantined one).",
        annotations(read_only_hint = false)
    )]
    async fn give_back(&self, Parameters(p): Parameters<IssueIn>) -> Result<Json<Done>, ToolError> {
        self.writes("give_back")?;
        let n = ranged("number", p.number, 1, i64::MAX)? as u64;
        let this = self.clone();
        blocking(move || {
            this.require_running()?;
            let t = this.tracker()?;
            operator::give_back(&this.layout, t.as_ref(), n, Via::Mcp)
                .map(|message| Json(Done { message }))
                .map_err(ToolError::from)
        })
        .await
    }

    #[tool(
        description = "Write (needs --allow-writes): lift an issue's quarantine (afk:quarantined) and give it back to ready-for-agent.",
        annotations(read_only_hint = false)
    )]
    async fn release_quarantine(
        &self,
        Parameters(p): Parameters<IssueIn>,
    ) -> Result<Json<Done>, ToolError> {
        self.writes("release_quarantine")?;
        let n = ranged("number", p.number, 1, i64::MAX)? as u64;
        let this = self.clone();
        blocking(move || {
            this.require_running()?;
            let t = this.tracker()?;
            operator::release_quarantine(&this.layout, t.as_ref(), n, Via::Mcp)
                .map(|message| Json(Done { message }))
                .map_err(ToolError::from)
        })
        .await
    }

    #[tool(
        description = "Write (needs --allow-writes): stop one slot's worker (drain-then-retire or hard-kill); the slot stays empty until restarted (`afk-supervisor restart N`).",
        annotations(read_only_hint = false, destructive_hint = true)
    )]
    async fn stop_slot(
        &self,
        Parameters(p): Parameters<StopSlotIn>,
    ) -> Result<Json<Done>, ToolError> {
        self.writes("stop_slot")?;
        let slot = ranged("slot", p.slot, 0, MAX_TARGET as i64)? as usize;
        let mode = mode_arg(p.mode.as_deref())?;
        let layout = self.layout.clone();
        let wait = Duration::from_secs((3 * self.config.timing.tick_s).clamp(10, 30));
        blocking(move || {
            match operator::slot_act(&layout, slot, Action::Stop, mode, Via::Mcp, wait)? {
                operator::SlotOutcome::Done { message, .. } => Ok(Json(Done { message })),
                operator::SlotOutcome::Pending { pid } => Err(ToolError::SlotPending { slot, pid }),
            }
        })
        .await
    }
}

impl AfkMcp {
    fn require_running(&self) -> Result<(), ToolError> {
        crate::supervisor::os::lock::running_supervisor(&self.layout)
            .map(|_| ())
            .map_err(ToolError::NotRunning)
    }

    fn instructions(&self) -> String {
        let mode = if self.allow_writes {
            "Writes are ALLOWED (started with --allow-writes): scale, pause_fleet, resume_fleet, give_back, release_quarantine and stop_slot act on the running fleet, each logged as an event with via=mcp."
        } else {
            "Read-only: the write tools (scale, pause_fleet, resume_fleet, give_back, release_quarantine, stop_slot) refuse until the server is started with --allow-writes."
        };
        format!(
            "afk-supervisor fleet of {}. Read tools: fleet_status, list_issues, show_issue, tail_events, slot_log, spend. {mode} Resources: {EVENT_LOG_URI} (the event log) and {STATE_URI} (the heartbeat), read-only.",
            self.layout.repo().display()
        )
    }
}

/// The last `max` bytes of a file (no link followed), from the start of a line.
fn tail_bytes(path: &std::path::Path, max: u64) -> Result<Vec<u8>, ToolError> {
    use std::io::{Read, Seek, SeekFrom};
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    let err = |e: std::io::Error| ToolError::File {
        path: path.to_path_buf(),
        source: e.into(),
    };
    let mut f = crate::fsutil::open_regular(path, opts, crate::fsutil::Links::Refuse)
        .map_err(|source| ToolError::File {
            path: path.to_path_buf(),
            source,
        })?
        .ok_or_else(|| ToolError::Missing {
            path: path.to_path_buf(),
        })?;
    let len = f.metadata().map_err(err)?.len();
    let from = len.saturating_sub(max);
    let mut buf = Vec::new();
    f.seek(SeekFrom::Start(from))
        .and_then(|_| f.take(max).read_to_end(&mut buf))
        .map_err(err)?;
    if from > 0
        && let Some(i) = buf.iter().position(|b| *b == b'\n')
    {
        buf.drain(..=i);
    }
    Ok(buf)
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for AfkMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new(
            "afk-supervisor",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(self.instructions())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new(EVENT_LOG_URI, "event log")
                .with_description("supervisor.log.toonl, the live generation (TOONL), read-only")
                .with_mime_type("text/plain"),
            Resource::new(STATE_URI, "state.toon")
                .with_description("the supervisor's heartbeat (TOON), read-only")
                .with_mime_type("text/plain"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let path = match request.uri.as_str() {
            EVENT_LOG_URI => self.layout.event_log(),
            STATE_URI => self.layout.state_file(),
            other => {
                return Err(ErrorData::resource_not_found(
                    format!("no resource {}", crate::text::excerpt(other)),
                    None,
                ));
            }
        };
        let uri = request.uri.clone();
        let text = blocking(move || {
            tail_bytes(&path, SLOT_LOG_TAIL_BYTES).map(|b| String::from_utf8_lossy(&b).into_owned())
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri)]).into())
    }
}

/// Serves MCP on stdin/stdout until the client closes stdin.
pub fn serve(layout: Layout, config: Config, allow_writes: bool) -> Result<(), McpError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(McpError::Runtime)?;
    rt.block_on(async move {
        let server = AfkMcp::new(layout, config, allow_writes);
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| McpError::Initialize(Box::new(e)))?;
        running.waiting().await.map_err(McpError::Serve)?;
        Ok(())
    })
}
