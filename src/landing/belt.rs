//! The landing belt (`docs/SPEC.md` §11.20): the supervisor's pass over the checkout's live
//! landing records, once at start and every `landing.watch_interval_s`. A pull request whose
//! opening failed is opened again; one that is open is followed until it is merged or closed.
//!
//! The belt is the checkout's: one supervisor per repo runs it (the repo's lock), and it
//! watches the pull requests this checkout's workers opened. Each pass reads the records,
//! asks the tracker, and writes what changed under the records' lock; a record's failure
//! costs that record only, and the next pass tries again.

use std::sync::Arc;

use super::text as ltext;
use super::{PrRecord, PrState};
use crate::config::Config;
use crate::layout::Layout;
use crate::tracker::{Tracker, TrackerError};

/// What one pass did, for its `supervisor.periodic` line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// Live records looked at.
    pub watched: usize,
    /// Pull requests opened after an earlier refusal.
    pub opened: usize,
    /// Records whose step failed this pass (retried next pass), with why.
    pub failed: Vec<String>,
}

impl Pass {
    /// `watched=3 opened=1 failed=0`, then each failure.
    pub fn line(&self) -> String {
        let mut s = format!(
            "watched={} opened={} failed={}",
            self.watched,
            self.opened,
            self.failed.len()
        );
        for f in &self.failed {
            s.push_str("; ");
            s.push_str(f);
        }
        s
    }
}

/// One checkout's landing belt.
pub struct Belt {
    tracker: Arc<dyn Tracker>,
    layout: Layout,
}

impl Belt {
    pub fn new(tracker: Arc<dyn Tracker>, layout: &Layout, _config: &Config) -> Belt {
        Belt {
            tracker,
            layout: layout.clone(),
        }
    }

    /// One pass over every live record. A record that cannot be read is a failure of the
    /// pass's line, never a reason to touch the others.
    pub fn pass(&mut self) -> Pass {
        let (records, errors) = super::list(&self.layout);
        let mut pass = Pass {
            failed: errors.iter().map(ToString::to_string).collect(),
            ..Pass::default()
        };
        for r in records.into_iter().filter(PrRecord::is_live) {
            pass.watched += 1;
            let n = r.issue;
            let step = match r.state {
                PrState::Pending => self.open(r).map(|opened| {
                    pass.opened += usize::from(opened);
                }),
                _ => Ok(()),
            };
            if let Err(e) = step {
                pass.failed.push(format!("#{n}: {e}"));
            }
        }
        pass
    }

    /// Opens a pending record's pull request again; `Ok(true)` once it is open.
    fn open(&self, r: PrRecord) -> Result<bool, TrackerError> {
        let n = r.issue;
        let opened = self
            .tracker
            .pr_open(&r.base, &r.branch, &r.title, &r.body, r.draft);
        let url = match opened {
            Ok(url) => url,
            Err(e) => {
                let why = crate::text::one_line(&e.to_string());
                let _ = super::update(&self.layout, n, |rec| {
                    let mut rec = rec?;
                    rec.failure = Some(why.clone());
                    Some(rec)
                });
                return Err(e);
            }
        };
        let updated = super::update(&self.layout, n, |rec| {
            let mut rec = rec?;
            rec.state = PrState::Open;
            rec.url = Some(url.clone());
            rec.failure = None;
            Some(rec)
        });
        if let Err(e) = updated {
            eprintln!("afk-supervisor: landing record of #{n}: {e}");
        }
        super::log_event(
            &self.layout,
            super::kind::OPENED,
            n,
            format!(
                "#{n} pull request {url} opened from {} into {} (retried after: {})",
                r.branch,
                r.base,
                r.failure.as_deref().unwrap_or("an earlier failure")
            ),
            None,
        );
        // The comment is the hand-off's second word on the issue: it names the pull request
        // the first one could not.
        self.tracker
            .comment(n, &ltext::opened_late(&url, &r.branch))?;
        Ok(true)
    }
}

/// The belt as a periodic task for the supervisor loop: each call is one pass, its line.
pub fn task(
    tracker: Arc<dyn Tracker>,
    layout: &Layout,
    config: &Config,
) -> impl FnMut() -> Result<String, String> + Send + use<> {
    let mut belt = Belt::new(tracker, layout, config);
    move || {
        let p = belt.pass();
        if p.failed.is_empty() {
            Ok(p.line())
        } else {
            Err(p.line())
        }
    }
}
