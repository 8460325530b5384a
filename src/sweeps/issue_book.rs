//! Issue states for one sweep pass, answered by one batch `list all` call.
//!
//! A pass over thousands of attempt dirs must not cost thousands of tracker calls, so the
//! batch listing is fetched once (lazily, only when a decision needs it) and a single-issue
//! `view` is made only for a number the batch did not contain, at most once per number.
//! Failures are remembered: a failed batch is not retried within the pass.

use std::collections::HashMap;

use crate::tracker::{DEFAULT_LIST_LIMIT, ErrorKind, IssueState, Tracker, TrackerError, labels};

/// What the tracker said about one issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueFacts {
    Known {
        state: IssueState,
        labels: Vec<String>,
    },
    /// The tracker says the issue does not exist.
    NotFound,
    /// The tracker could not answer (transient or failed): act on nothing but time.
    Unavailable(TrackerError),
}

impl IssueFacts {
    pub fn has_label(&self, label: &str) -> bool {
        matches!(self, IssueFacts::Known { labels, .. } if labels.iter().any(|l| l == label))
    }

    pub fn is_closed(&self) -> bool {
        matches!(
            self,
            IssueFacts::Known {
                state: IssueState::Closed,
                ..
            }
        )
    }

    /// Short text for decision listings: `CLOSED`, `OPEN running`, `not-found`,
    /// `unavailable (transient)`.
    pub fn describe(&self) -> String {
        match self {
            IssueFacts::Known { state, labels } => {
                let notable: Vec<&str> = labels
                    .iter()
                    .map(String::as_str)
                    .filter(|l| {
                        [
                            labels::RUNNING,
                            labels::READY_FOR_HUMAN,
                            labels::READY_FOR_AGENT,
                        ]
                        .contains(l)
                    })
                    .collect();
                if notable.is_empty() {
                    state.to_string()
                } else {
                    format!("{state} {}", notable.join(","))
                }
            }
            IssueFacts::NotFound => "not-found".into(),
            IssueFacts::Unavailable(e) => format!("unavailable ({})", e.kind),
        }
    }
}

/// Tracker reads of one pass, cached.
pub struct IssueBook<'a> {
    tracker: &'a dyn Tracker,
    batch: Option<Result<HashMap<u64, IssueFacts>, TrackerError>>,
    views: HashMap<u64, IssueFacts>,
    reads: usize,
}

impl<'a> IssueBook<'a> {
    pub fn new(tracker: &'a dyn Tracker) -> Self {
        IssueBook {
            tracker,
            batch: None,
            views: HashMap::new(),
            reads: 0,
        }
    }

    /// The tracker behind the book, for writes.
    pub fn tracker(&self) -> &'a dyn Tracker {
        self.tracker
    }

    /// Tracker read calls made so far (list and view).
    pub fn reads(&self) -> usize {
        self.reads
    }

    fn batch(&mut self) -> &Result<HashMap<u64, IssueFacts>, TrackerError> {
        let tracker = self.tracker;
        let reads = &mut self.reads;
        self.batch.get_or_insert_with(|| {
            *reads += 1;
            tracker.list_all(DEFAULT_LIST_LIMIT).map(|rows| {
                rows.into_iter()
                    .map(|r| {
                        let facts = IssueFacts::Known {
                            state: r.state,
                            labels: r.labels,
                        };
                        (r.number, facts)
                    })
                    .collect()
            })
        })
    }

    /// The facts of issue `n`. When the batch failed, every issue is `Unavailable` with
    /// the batch's error (no per-issue calls: the tracker is down or refusing).
    pub fn facts(&mut self, n: u64) -> IssueFacts {
        match self.batch() {
            Err(e) => return IssueFacts::Unavailable(e.clone()),
            Ok(map) => {
                if let Some(f) = map.get(&n) {
                    return f.clone();
                }
            }
        }
        if let Some(f) = self.views.get(&n) {
            return f.clone();
        }
        self.reads += 1;
        let facts = match self.tracker.view(n) {
            Ok(v) => IssueFacts::Known {
                state: v.state,
                labels: v.labels,
            },
            Err(e) if e.kind == ErrorKind::NotFound => IssueFacts::NotFound,
            Err(e) => IssueFacts::Unavailable(e),
        };
        self.views.insert(n, facts.clone());
        facts
    }

    /// Records a label edit this pass made (or, in a dry run, would have made), so later
    /// decisions about the same issue see it and no transition is made twice.
    pub fn record_labels(&mut self, n: u64, add: &[&str], remove: &[&str]) {
        let apply = |f: &mut IssueFacts| {
            if let IssueFacts::Known { labels, .. } = f {
                labels.retain(|l| !remove.contains(&l.as_str()));
                for a in add {
                    if !labels.iter().any(|l| l == a) {
                        labels.push((*a).to_string());
                    }
                }
            }
        };
        if let Some(Ok(map)) = self.batch.as_mut()
            && let Some(f) = map.get_mut(&n)
        {
            apply(f);
        }
        if let Some(f) = self.views.get_mut(&n) {
            apply(f);
        }
    }
}
