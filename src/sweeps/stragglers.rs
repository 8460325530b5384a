//! The straggler check: open issues AFK cannot take because nobody has triaged them. It
//! changes nothing; it makes the backlog a worker will never pick up visible in the boot
//! summary, with one warning naming the first few.

use crate::sweeps::{Decision, Disposition, SweepName};
use crate::tracker::{
    DEFAULT_LIST_LIMIT, IssueState, IssueSummary, Tracker, TrackerResult, labels,
};

/// How many issue numbers the warning names before `…`.
pub const WARN_MAX: usize = 10;

/// The boot summary's `stragglers unlabeled=N triage=N info=N`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StragglerCounts {
    pub unlabeled: usize,
    pub triage: usize,
    pub info: usize,
}

/// The open issues in each straggler class, ascending. An issue carrying both
/// `needs-triage` and `needs-info` is in both lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StragglerReport {
    pub unlabeled: Vec<u64>,
    pub triage: Vec<u64>,
    pub info: Vec<u64>,
}

impl StragglerReport {
    pub fn from_issues(issues: &[IssueSummary]) -> Self {
        let mut r = StragglerReport::default();
        for i in issues.iter().filter(|i| i.state == IssueState::Open) {
            if i.labels.is_empty() {
                r.unlabeled.push(i.number);
            }
            if i.has_label(labels::NEEDS_TRIAGE) {
                r.triage.push(i.number);
            }
            if i.has_label(labels::NEEDS_INFO) {
                r.info.push(i.number);
            }
        }
        for v in [&mut r.unlabeled, &mut r.triage, &mut r.info] {
            v.sort_unstable();
            v.dedup();
        }
        r
    }

    pub fn counts(&self) -> StragglerCounts {
        StragglerCounts {
            unlabeled: self.unlabeled.len(),
            triage: self.triage.len(),
            info: self.info.len(),
        }
    }

    /// Every straggler once, ascending.
    pub fn issues(&self) -> Vec<u64> {
        let mut all: Vec<u64> = [&self.unlabeled, &self.triage, &self.info]
            .into_iter()
            .flatten()
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The one warning line, when there is any straggler, e.g.
    /// `stragglers: 3 open issues AFK cannot take (unlabeled=1 triage=2 info=0): #3, #5, #9`.
    pub fn warning(&self) -> Option<String> {
        let all = self.issues();
        if all.is_empty() {
            return None;
        }
        let mut named: Vec<String> = all.iter().take(WARN_MAX).map(|n| format!("#{n}")).collect();
        if all.len() > WARN_MAX {
            named.push("…".into());
        }
        let c = self.counts();
        let noun = if all.len() == 1 { "issue" } else { "issues" };
        Some(format!(
            "stragglers: {} open {noun} AFK cannot take (unlabeled={} triage={} info={}): {}",
            all.len(),
            c.unlabeled,
            c.triage,
            c.info,
            named.join(", ")
        ))
    }

    /// The warning as the suite records it (verdict `warn`); nothing when there is none.
    pub fn decisions(&self) -> Vec<Decision> {
        self.warning()
            .map(|reason| Decision {
                sweep: SweepName::Stragglers,
                subject: "open issues".into(),
                issue: None,
                state: None,
                verdict: Disposition::Warn,
                reason,
            })
            .into_iter()
            .collect()
    }
}

/// One batch listing, counted.
pub fn run(tracker: &dyn Tracker) -> TrackerResult<StragglerReport> {
    Ok(StragglerReport::from_issues(
        &tracker.list_all(DEFAULT_LIST_LIMIT)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(number: u64, state: IssueState, l: &[&str]) -> IssueSummary {
        IssueSummary {
            number,
            state,
            labels: l.iter().map(|s| s.to_string()).collect(),
            closed_at: None,
        }
    }

    #[test]
    fn counts_only_open_stragglers() {
        let r = StragglerReport::from_issues(&[
            issue(1, IssueState::Open, &[]),
            issue(2, IssueState::Closed, &[]),
            issue(3, IssueState::Open, &["needs-triage"]),
            issue(4, IssueState::Open, &["needs-triage", "needs-info"]),
            issue(5, IssueState::Open, &["ready-for-agent"]),
            issue(6, IssueState::Closed, &["needs-info"]),
            issue(7, IssueState::Open, &["needs-info", "bug"]),
        ]);
        assert_eq!(r.unlabeled, vec![1]);
        assert_eq!(r.triage, vec![3, 4]);
        assert_eq!(r.info, vec![4, 7]);
        assert_eq!(
            r.warning().unwrap(),
            "stragglers: 4 open issues AFK cannot take (unlabeled=1 triage=2 info=2): #1, #3, #4, #7"
        );
        let d = r.decisions();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].verdict, "warn");
    }

    #[test]
    fn none_means_no_warning() {
        let r = StragglerReport::from_issues(&[issue(5, IssueState::Open, &["ready-for-agent"])]);
        assert_eq!(r.counts(), StragglerCounts::default());
        assert_eq!(r.warning(), None);
        assert!(r.decisions().is_empty());
    }

    #[test]
    fn warning_names_at_most_ten() {
        let issues: Vec<IssueSummary> = (1..=12)
            .rev()
            .map(|n| issue(n, IssueState::Open, &[]))
            .collect();
        let w = StragglerReport::from_issues(&issues).warning().unwrap();
        assert!(
            w.ends_with(": #1, #2, #3, #4, #5, #6, #7, #8, #9, #10, …"),
            "{w}"
        );
        assert!(w.starts_with("stragglers: 12 open issues"), "{w}");
        let one = StragglerReport::from_issues(&[issue(9, IssueState::Open, &["needs-info"])]);
        assert_eq!(
            one.warning().unwrap(),
            "stragglers: 1 open issue AFK cannot take (unlabeled=0 triage=0 info=1): #9"
        );
    }
}
