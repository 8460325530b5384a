//! The boot sweeps (`docs/SPEC.md` §1, seed BOOT-SWEEPS.md). One module per sweep; each takes a
//! [`SweepCtx`] and returns its own report. Safety first: sweeps delete only inside the
//! registered lanes of `.red/tmp/`, never follow symlinks, and never act on a transient
//! tracker failure.

pub mod attempt_cap;
pub mod base_fetch;
pub mod branch_reaper;
pub mod docs;
pub mod guard;
pub mod issue_book;
pub mod orphans;
pub mod stragglers;
pub mod suite;
pub mod transition;
pub mod unblock_sweep;
pub mod worker_tree;

use std::fmt;
use std::str::FromStr;

use crate::config::Config;
use crate::git::Git;
use crate::layout::Layout;
use crate::text;
use crate::tracker::Tracker;
use base_fetch::BaseFetch;

/// What every sweep gets.
pub struct SweepCtx<'a> {
    pub layout: &'a Layout,
    pub config: &'a Config,
    pub tracker: &'a dyn Tracker,
    pub git: &'a Git,
    /// Decide and report, change nothing.
    pub dry_run: bool,
    /// The base fetch the reap and the docs sweep share, so a suite run fetches once.
    pub base_fetch: BaseFetch,
}

impl<'a> SweepCtx<'a> {
    /// A context for one suite run (or one sweep), with nothing fetched yet.
    pub fn new(
        layout: &'a Layout,
        config: &'a Config,
        tracker: &'a dyn Tracker,
        git: &'a Git,
        dry_run: bool,
    ) -> Self {
        SweepCtx {
            layout,
            config,
            tracker,
            git,
            dry_run,
            base_fetch: BaseFetch::default(),
        }
    }
}

/// One decision a sweep made about one subject (a path, a branch, an issue), for
/// `--dry-run` listings and `--json`. Real runs record the same decisions they acted on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Decision {
    pub sweep: SweepName,
    /// What was judged: a path relative to the repo, a branch name, or `#N`.
    pub subject: String,
    pub issue: Option<u64>,
    /// The tracker state or label the verdict rests on, when there is one.
    pub state: Option<String>,
    pub verdict: Disposition,
    pub reason: String,
}

impl Decision {
    /// One line for people: `orphans remove .red/tmp/workers/w1/5-a1 #5 [CLOSED]: issue closed`.
    /// Subject, state and reason carry outside text (paths, names, labels, titles), so
    /// they are shown through [`text::escape`].
    pub fn line(&self) -> String {
        let mut line = format!(
            "{} {} {}",
            self.sweep,
            self.verdict,
            text::escape(&self.subject)
        );
        if let Some(n) = self.issue
            && !self.subject.starts_with('#')
        {
            line.push_str(&format!(" #{n}"));
        }
        if let Some(s) = &self.state {
            line.push_str(&format!(" [{}]", text::escape(s)));
        }
        line.push_str(": ");
        line.push_str(&text::escape(&self.reason));
        line
    }
}

/// What a sweep did (or, in a dry run, would do) with one subject. The word it shows is
/// the contract (`--dry-run` lines, `--json`, the event log), so it compares equal to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Disposition {
    Remove,
    Keep,
    /// Put back to `ready-for-agent`, then removed.
    Restore,
    /// A dead holder's claim, removed.
    Release,
    /// Not this sweep's to judge, or redundant: untouched and not counted.
    Skip,
    /// A branch deleted.
    Reap,
    /// A branch kept.
    Spare,
    /// A branch whose delete failed.
    Failed,
    /// A blocked issue made `ready-for-agent`.
    Promote,
    /// Nothing changed; something an operator should know.
    Warn,
    /// A stranded doc landed on the base.
    Land,
    /// A doc that halts the boot.
    Halt,
}

impl Disposition {
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Remove => "remove",
            Disposition::Keep => "keep",
            Disposition::Restore => "restore",
            Disposition::Release => "release",
            Disposition::Skip => "skip",
            Disposition::Reap => "reap",
            Disposition::Spare => "spare",
            Disposition::Failed => "failed",
            Disposition::Promote => "promote",
            Disposition::Warn => "warn",
            Disposition::Land => "land",
            Disposition::Halt => "halt",
        }
    }
}

impl fmt::Display for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Disposition {
    fn eq(&self, word: &str) -> bool {
        self.as_str() == word
    }
}

impl PartialEq<&str> for Disposition {
    fn eq(&self, word: &&str) -> bool {
        self.as_str() == *word
    }
}

/// The sweeps, in boot-suite order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SweepName {
    Orphans,
    AttemptCap,
    Branches,
    DocsSweep,
    Unblock,
    Stragglers,
}

impl SweepName {
    pub const ALL: [SweepName; 6] = [
        SweepName::Orphans,
        SweepName::AttemptCap,
        SweepName::Branches,
        SweepName::DocsSweep,
        SweepName::Unblock,
        SweepName::Stragglers,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SweepName::Orphans => "orphans",
            SweepName::AttemptCap => "attempt-cap",
            SweepName::Branches => "branches",
            SweepName::DocsSweep => "docs-sweep",
            SweepName::Unblock => "unblock",
            SweepName::Stragglers => "stragglers",
        }
    }

    /// Parses `--only a,b`: names separated by commas, in any order; result in suite order.
    pub fn parse_list(s: &str) -> Result<Vec<SweepName>, SweepNameError> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let n: SweepName = part.parse()?;
            if !out.contains(&n) {
                out.push(n);
            }
        }
        if out.is_empty() {
            return Err(SweepNameError::NoneNamed);
        }
        out.sort();
        Ok(out)
    }
}

/// A `--only` list that names no sweep, or a name that is none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepNameError {
    #[error("unknown sweep {0:?} (expected one of: {names})", names = SweepName::names())]
    Unknown(String),
    #[error("no sweep named")]
    NoneNamed,
}

impl SweepName {
    fn names() -> String {
        let names: Vec<&str> = SweepName::ALL.iter().map(|n| n.as_str()).collect();
        names.join(", ")
    }
}

impl FromStr for SweepName {
    type Err = SweepNameError;
    fn from_str(s: &str) -> Result<Self, SweepNameError> {
        SweepName::ALL
            .into_iter()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| SweepNameError::Unknown(s.to_string()))
    }
}

impl fmt::Display for SweepName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_lines() {
        let mut d = Decision {
            sweep: SweepName::Orphans,
            subject: ".red/tmp/workers/w1/5-a1".into(),
            issue: Some(5),
            state: Some("CLOSED".into()),
            verdict: Disposition::Remove,
            reason: "issue closed".into(),
        };
        assert_eq!(
            d.line(),
            "orphans remove .red/tmp/workers/w1/5-a1 #5 [CLOSED]: issue closed"
        );
        d.subject = "#5".into();
        d.state = None;
        d.sweep = SweepName::AttemptCap;
        assert_eq!(d.line(), "attempt-cap remove #5: issue closed");
    }

    #[test]
    fn parse_list_orders_and_rejects() {
        assert_eq!(
            SweepName::parse_list("attempt-cap, orphans,orphans").unwrap(),
            vec![SweepName::Orphans, SweepName::AttemptCap]
        );
        assert!(
            SweepName::parse_list("orphan")
                .unwrap_err()
                .to_string()
                .contains("unknown sweep \"orphan\"")
        );
        assert!(SweepName::parse_list(" , ").is_err());
    }
}
