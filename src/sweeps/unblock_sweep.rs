//! The unblock sweep: promotes an open `blocked:dependency` issue to `ready-for-agent` once
//! every issue it depends on is closed (`docs/SPEC.md` §7, seed *Unblock belt*).
//!
//! There is ONE promotion core, [`pass`]; the boot suite, `afk-supervisor unblock` and the
//! belt ([`crate::supervisor::unblock_belt::Belt`]) all call it, so the rules and the audit comment are the same
//! whichever trigger fired.
//!
//! Dependencies of a blocked issue: its `req:<N>` labels; with none, the `#N` references
//! listed under a `## Blocked by` heading of its body. A malformed `req:` label, or no
//! dependency at all, keeps the issue blocked: it is never promoted on a guess.
//!
//! Tracker cost of one pass: one `list_open_with_label("blocked:dependency", 200)` call;
//! when some blocker's state is not already known from that listing (every issue in it is
//! open), one batch `list_all` for the states. So a pass costs one list call when nothing
//! is blocked, two otherwise, plus per promotion one read of the issue's comments and two
//! writes (comment first, then the label edit). A
//! blocker missing from the batch, or any listing failure, counts as not closed.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::Path;

use crate::host_lock as lock;
use crate::layout::parse_positive;
use crate::sweeps::transition::{self, Posted, Transition};
use crate::sweeps::{Decision, Disposition, SweepName};
use crate::text;
use crate::tracker::{DEFAULT_LIST_LIMIT, IssueState, LabeledIssue, Tracker, TrackerError, labels};

/// `--limit` of the blocked listing (`docs/SPEC.md` §7).
pub const BLOCKED_LIMIT: usize = 200;

/// The `docs/SPEC.md` §7 audit comment, naming the blockers.
pub fn comment_text(blockers: &[u64]) -> String {
    format!(
        "🤖 /afk unblocked: all dependencies closed ({}).",
        refs(blockers)
    )
}

fn refs(numbers: &[u64]) -> String {
    numbers
        .iter()
        .map(|n| format!("#{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a blocked issue depends on, and where that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dependencies {
    /// From `req:<N>` labels, ascending.
    Labels(Vec<u64>),
    /// From the `## Blocked by` list of the body, ascending.
    Body(Vec<u64>),
    /// A `req:` label whose number cannot be read; the issue stays blocked.
    Malformed(String),
    /// Nothing names a dependency; the issue stays blocked.
    None,
}

impl Dependencies {
    pub fn of(issue: &LabeledIssue) -> Self {
        let mut numbers = BTreeSet::new();
        for label in &issue.labels {
            if let Some(n) = label.strip_prefix(labels::REQ_PREFIX) {
                match parse_positive(n) {
                    Some(n) => numbers.insert(n),
                    None => return Dependencies::Malformed(label.clone()),
                };
            }
        }
        if !numbers.is_empty() {
            return Dependencies::Labels(numbers.into_iter().collect());
        }
        let body = blocked_by_section(&issue.body);
        if body.is_empty() {
            Dependencies::None
        } else {
            Dependencies::Body(body)
        }
    }

    pub fn numbers(&self) -> &[u64] {
        match self {
            Dependencies::Labels(v) | Dependencies::Body(v) => v,
            Dependencies::Malformed(_) | Dependencies::None => &[],
        }
    }
}

/// The `#N` references under a `## Blocked by` heading (any case, optional trailing colon),
/// up to the next heading. Cross-repo references (`owner/repo#N`) and HTML entities (`&#N;`)
/// are not this tracker's issues and are skipped.
pub fn blocked_by_section(body: &str) -> Vec<u64> {
    let mut out = BTreeSet::new();
    let mut inside = false;
    for line in body.lines() {
        let t = line.trim();
        if let Some(level) = heading_level(t) {
            let text = t[level..].trim().trim_end_matches(':').trim();
            inside = level == 2 && text.eq_ignore_ascii_case("blocked by");
            continue;
        }
        if inside {
            out.extend(issue_refs(t));
        }
    }
    out.into_iter().collect()
}

/// `Some(k)` when the line is an ATX heading of level k (`#` × k, then a space or the end).
fn heading_level(line: &str) -> Option<usize> {
    let k = line.bytes().take_while(|&b| b == b'#').count();
    let after = line.as_bytes().get(k);
    ((1..=6).contains(&k) && after.is_none_or(|b| b.is_ascii_whitespace())).then_some(k)
}

fn issue_refs(line: &str) -> Vec<u64> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    for (i, _) in line.match_indices('#') {
        let prev_ok = i == 0 || {
            let p = b[i - 1];
            !(p.is_ascii_alphanumeric() || matches!(p, b'/' | b'&' | b'#' | b'_'))
        };
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let end = i + 1 + digits;
        let next_ok = b
            .get(end)
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || *c == b'_'));
        if prev_ok
            && next_ok
            && let Some(n) = parse_positive(&line[i + 1..end])
        {
            out.push(n);
        }
    }
    out
}

/// A blocker as the pass sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockerState {
    Open,
    Closed,
    /// Missing from the batch listing.
    NotFound,
}

impl fmt::Display for BlockerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BlockerState::Open => "open",
            BlockerState::Closed => "closed",
            BlockerState::NotFound => "not found",
        })
    }
}

/// The verdict on one blocked issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Every blocker is closed; the blockers, ascending.
    Promote(Vec<u64>),
    Keep(String),
}

/// Judges one blocked issue from its dependencies and the blockers' states.
pub fn readiness(deps: &Dependencies, state: impl Fn(u64) -> BlockerState) -> Readiness {
    match deps {
        Dependencies::Malformed(label) => Readiness::Keep(format!(
            "malformed dependency label {:?}",
            text::excerpt(label)
        )),
        Dependencies::None => Readiness::Keep(
            "no dependency named (no req:<N> label, no `## Blocked by` list)".into(),
        ),
        Dependencies::Labels(v) | Dependencies::Body(v) => {
            let waiting: Vec<String> = v
                .iter()
                .filter_map(|&n| match state(n) {
                    BlockerState::Closed => None,
                    s => Some(format!("#{n} ({s})")),
                })
                .collect();
            if waiting.is_empty() {
                Readiness::Promote(v.clone())
            } else {
                let count = waiting.len();
                Readiness::Keep(format!(
                    "waiting on {}",
                    text::clip(waiting.join(", "), count, "blockers")
                ))
            }
        }
    }
}

/// Why a pass could not judge the blocked issues.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnblockError {
    #[error("unblock: listing blocked issues failed: {0}")]
    ListBlocked(TrackerError),
    #[error("unblock: listing blocker states failed: {0}")]
    ListStates(TrackerError),
    #[error("unblock: {0}")]
    Lock(String),
}

/// One issue's write failed; the pass stopped there so an outage costs one timeout, not one
/// per blocked issue. Issues before it were promoted, the rest wait for the next pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unblock: promoting #{issue} failed: {error}")]
pub struct WriteError {
    pub issue: u64,
    pub error: TrackerError,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnblockReport {
    /// Promoted issues (in a dry run: those that would be), in the order done.
    pub promoted: Vec<u64>,
    /// One per blocked issue judged: verdict `promote` or `keep`.
    pub decisions: Vec<Decision>,
    /// Tracker list calls made (1 or 2); writes are not counted here.
    pub list_calls: usize,
    /// Set when a write failed; the pass stopped at that issue.
    pub write_error: Option<WriteError>,
}

impl UnblockReport {
    /// Human lines for the command line: `promoted #12 — …` / `kept #13 — …`.
    pub fn lines(&self, dry_run: bool) -> Vec<String> {
        self.decisions
            .iter()
            .map(|d| {
                let verb = match (d.verdict, dry_run) {
                    (Disposition::Promote, false) => "promoted",
                    (Disposition::Promote, true) => "would promote",
                    _ => "kept",
                };
                format!(
                    "{verb} {} — {}",
                    text::escape(&d.subject),
                    text::escape(&d.reason)
                )
            })
            .collect()
    }
}

/// One unblock pass: list, judge, promote. The lock that keeps two processes from
/// promoting the same issue at once is the caller's ([`lock::PassLock`]); a dry run writes
/// nothing.
pub fn pass(tracker: &dyn Tracker, dry_run: bool) -> Result<UnblockReport, UnblockError> {
    let mut report = UnblockReport::default();
    let mut blocked = tracker
        .list_open_with_label(labels::BLOCKED_DEPENDENCY, BLOCKED_LIMIT)
        .map_err(UnblockError::ListBlocked)?;
    report.list_calls = 1;
    blocked.sort_by_key(|i| i.number);

    // Everything in the blocked listing is open; only other blockers need the batch.
    let mut states: HashMap<u64, BlockerState> = blocked
        .iter()
        .map(|i| (i.number, BlockerState::Open))
        .collect();
    let deps: Vec<Dependencies> = blocked.iter().map(Dependencies::of).collect();
    let unknown = deps
        .iter()
        .flat_map(|d| d.numbers())
        .any(|n| !states.contains_key(n));
    if unknown {
        let batch = tracker
            .list_all(DEFAULT_LIST_LIMIT)
            .map_err(UnblockError::ListStates)?;
        report.list_calls += 1;
        for i in batch {
            let s = match i.state {
                IssueState::Open => BlockerState::Open,
                IssueState::Closed => BlockerState::Closed,
            };
            states.entry(i.number).or_insert(s);
        }
    }
    let state_of = |n: u64| states.get(&n).copied().unwrap_or(BlockerState::NotFound);

    for (issue, deps) in blocked.iter().zip(&deps) {
        let subject = format!("#{}", issue.number);
        let decision = |verdict: Disposition, reason: String| Decision {
            sweep: SweepName::Unblock,
            subject: subject.clone(),
            issue: Some(issue.number),
            state: Some(labels::BLOCKED_DEPENDENCY.into()),
            verdict,
            reason,
        };
        match readiness(deps, state_of) {
            Readiness::Keep(reason) => report.decisions.push(decision(Disposition::Keep, reason)),
            Readiness::Promote(blockers) => {
                let source = match deps {
                    Dependencies::Body(_) => " (from `## Blocked by`)",
                    _ => "",
                };
                let reason = format!("all dependencies closed ({}){source}", refs(&blockers));
                if !dry_run && let Err(error) = promote(tracker, issue.number, &blockers) {
                    report.decisions.push(decision(
                        Disposition::Keep,
                        format!("promotion failed: {}", error.error),
                    ));
                    report.write_error = Some(error);
                    break;
                }
                report.promoted.push(issue.number);
                report
                    .decisions
                    .push(decision(Disposition::Promote, reason));
            }
        }
    }
    Ok(report)
}

/// The outcome of a pass taken under the pass lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exclusive {
    Done(UnblockReport),
    /// Another process is running a pass on the same tracker right now; this one is
    /// redundant and was skipped.
    Busy(lock::Holder),
}

/// [`pass`] under the host-wide pass lock of `tracker` (in `lock_dir`, normally
/// [`lock::runtime_dir`]); `label` names this checkout in a loser's message. Every caller
/// that writes goes through here; a dry run writes nothing and takes no lock.
pub fn exclusive_pass(
    tracker: &dyn Tracker,
    dry_run: bool,
    lock_dir: &Path,
    label: &str,
) -> Result<Exclusive, UnblockError> {
    if dry_run {
        return pass(tracker, true).map(Exclusive::Done);
    }
    let path = lock::pass_lock_path(lock_dir, &tracker.identity());
    match lock::try_acquire(&path, label).map_err(|e| UnblockError::Lock(e.to_string()))? {
        lock::Acquired::Busy(holder) => Ok(Exclusive::Busy(holder)),
        lock::Acquired::Held(_held) => pass(tracker, false).map(Exclusive::Done),
    }
}

impl Exclusive {
    /// How many issues the pass promoted (none when it was skipped).
    pub fn unblocked(&self) -> usize {
        match self {
            Exclusive::Done(r) => r.promoted.len(),
            Exclusive::Busy(_) => 0,
        }
    }

    /// The decisions the boot suite records: the pass's, or one `skip` when another
    /// process is mid-pass on the same tracker (its pass does this one's work).
    pub fn decisions(&self) -> Vec<Decision> {
        match self {
            Exclusive::Done(r) => r.decisions.clone(),
            Exclusive::Busy(holder) => vec![Decision {
                sweep: SweepName::Unblock,
                subject: "blocked issues".into(),
                issue: None,
                state: None,
                verdict: Disposition::Skip,
                reason: format!("another unblock pass is running ({holder})"),
            }],
        }
    }

    /// The write that stopped the pass, when one did.
    pub fn write_error(&self) -> Option<&WriteError> {
        match self {
            Exclusive::Done(r) => r.write_error.as_ref(),
            Exclusive::Busy(_) => None,
        }
    }
}

/// Posts the audit comment, then swaps the labels ([`transition::make`]): a pass that
/// fails after the comment leaves the issue blocked, and the next pass sees the comment as
/// the issue's newest and only swaps the labels.
fn promote(tracker: &dyn Tracker, issue: u64, blockers: &[u64]) -> Result<(), WriteError> {
    let comment = comment_text(blockers);
    let t = Transition {
        issue,
        comment: &comment,
        add: &[labels::READY_FOR_AGENT],
        remove: &[labels::BLOCKED_DEPENDENCY],
    };
    transition::make(tracker, &t, Posted::Newest, &mut 0).map_err(|e| WriteError {
        issue,
        error: e.tracker_error().clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(number: u64, body: &str, l: &[&str]) -> LabeledIssue {
        LabeledIssue {
            number,
            title: Some(format!("issue {number}")),
            body: body.into(),
            labels: l.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn comment_is_exact() {
        assert_eq!(
            comment_text(&[3, 14]),
            "🤖 /afk unblocked: all dependencies closed (#3, #14)."
        );
        assert_eq!(
            comment_text(&[7]),
            "🤖 /afk unblocked: all dependencies closed (#7)."
        );
    }

    #[test]
    fn labels_win_over_body() {
        let i = blocked(
            9,
            "## Blocked by\n- #1\n",
            &["blocked:dependency", "req:4", "req:2", "req:4"],
        );
        assert_eq!(Dependencies::of(&i), Dependencies::Labels(vec![2, 4]));
        let body_only = blocked(9, "## Blocked by\n- #1\n", &["blocked:dependency"]);
        assert_eq!(Dependencies::of(&body_only), Dependencies::Body(vec![1]));
        assert_eq!(
            Dependencies::of(&blocked(9, "", &["req:x"])),
            Dependencies::Malformed("req:x".into())
        );
        assert_eq!(
            Dependencies::of(&blocked(9, "", &["req:0"])),
            Dependencies::Malformed("req:0".into())
        );
        assert_eq!(
            Dependencies::of(&blocked(9, "see #3", &[])),
            Dependencies::None
        );
    }

    #[test]
    fn body_section_is_read_strictly() {
        let body = "Intro mentions #99.\n\
                    \n\
                    ## Blocked by:\n\
                    - #12 (login)\n\
                    - #7, #30\n\
                    - other/repo#5 and &#38; and a#6 and #8x and #0 and #010\n\
                    #41\n\
                    ### Notes\n\
                    - #100\n\
                    ## blocked BY\n\
                    * [#13](x)\n\
                    ## Context\n\
                    - #55\n";
        assert_eq!(blocked_by_section(body), vec![7, 12, 13, 30, 41]);
        assert!(blocked_by_section("## Blocked\n- #1\n").is_empty());
        assert!(blocked_by_section("# Blocked by\n- #1\n").is_empty());
        assert!(blocked_by_section("##Blocked by\n- #1\n").is_empty());
    }

    #[test]
    fn readiness_of_every_case() {
        let state = |n: u64| match n {
            1 | 2 => BlockerState::Closed,
            3 => BlockerState::Open,
            _ => BlockerState::NotFound,
        };
        assert_eq!(
            readiness(&Dependencies::Labels(vec![1, 2]), state),
            Readiness::Promote(vec![1, 2])
        );
        assert_eq!(
            readiness(&Dependencies::Body(vec![1, 3]), state),
            Readiness::Keep("waiting on #3 (open)".into())
        );
        assert_eq!(
            readiness(&Dependencies::Labels(vec![2, 3, 8]), state),
            Readiness::Keep("waiting on #3 (open), #8 (not found)".into())
        );
        assert!(matches!(
            readiness(&Dependencies::None, state),
            Readiness::Keep(_)
        ));
        assert!(matches!(
            readiness(&Dependencies::Malformed("req:x".into()), state),
            Readiness::Keep(_)
        ));
    }

    /// 10,000 open blockers make one short line, not 188 KB, that still says how many.
    #[test]
    fn a_long_wait_list_is_clipped() {
        let many: Vec<u64> = (1..=10_000).collect();
        let Readiness::Keep(reason) =
            readiness(&Dependencies::Labels(many), |_| BlockerState::Open)
        else {
            panic!("promoted with open blockers");
        };
        assert!(
            reason.len() < 2 * crate::text::MESSAGE_MAX,
            "{}",
            reason.len()
        );
        assert!(
            reason.starts_with("waiting on #1 (open), #2 (open)"),
            "{reason}"
        );
        assert!(reason.ends_with("10000 blockers in all)"), "{reason}");
        let Readiness::Keep(reason) = readiness(
            &Dependencies::Malformed(format!("req:{}", "x".repeat(100_000))),
            |_| BlockerState::Open,
        ) else {
            panic!("promoted a malformed label");
        };
        assert!(reason.len() < 200, "{}", reason.len());
    }
}
