//! The unblock belt: the unblock pass on its own timer, outside the boot suite, so a blocker
//! closed by hand on GitHub is noticed while the fleet runs (seed *Unblock belt*).
//!
//! The belt is a per-tracker singleton on the host: the first [`Belt`] to take the owner
//! lock keeps it for its whole life and sweeps every interval; every other belt of the same
//! tracker (another checkout, another supervisor) skips its passes and says who sweeps.
//! When the owner dies the kernel frees the lock and the next belt to try takes over. The
//! timer is the caller's (the supervisor loop, `unblock --watch`): call [`Belt::pass`] once
//! at start and once per interval; a failed pass costs itself only.

use std::path::PathBuf;
use std::sync::Arc;

use crate::host_lock::{self as lock, Acquired, HeldLock, Holder};
use crate::sweeps::unblock_sweep::{Exclusive, UnblockError, UnblockReport, exclusive_pass};
use crate::tracker::Tracker;

/// What one belt pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeltPass {
    /// This belt owns the tracker and ran the pass; the report may carry a write error.
    Swept(UnblockReport),
    /// Another belt owns the tracker, or another process is mid-pass on it.
    Skipped {
        holder: Holder,
    },
    Failed(UnblockError),
}

/// A pass as its one log line (what a failed pass says as an error).
impl std::fmt::Display for BeltPass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.log_line())
    }
}

impl BeltPass {
    /// How many issues this pass promoted.
    pub fn unblocked(&self) -> usize {
        match self {
            BeltPass::Swept(r) => r.promoted.len(),
            _ => 0,
        }
    }

    /// True when the pass, or one of its writes, failed.
    pub fn is_failure(&self) -> bool {
        match self {
            BeltPass::Swept(r) => r.write_error.is_some(),
            BeltPass::Skipped { .. } => false,
            BeltPass::Failed(_) => true,
        }
    }

    /// One line on its own (`unblock --watch`), e.g. `unblock belt: unblocked=1 (#12)`,
    /// `unblock belt: skipped, swept by pid 812 (/src/other-checkout)`,
    /// `unblock belt: pass failed: unblock: listing blocked issues failed: …`.
    pub fn log_line(&self) -> String {
        match self {
            BeltPass::Failed(e) => format!("unblock belt: pass failed: {e}"),
            _ => format!("unblock belt: {}", self.outcome()),
        }
    }

    /// What the pass did, without naming the belt: the supervisor's event log names it
    /// already (`unblock-belt: unblocked=1 (#12)`, `unblock-belt failed: unblock: …`).
    pub fn outcome(&self) -> String {
        match self {
            BeltPass::Swept(r) => {
                let mut line = format!("unblocked={}", r.promoted.len());
                if !r.promoted.is_empty() {
                    let refs: Vec<String> = r.promoted.iter().map(|n| format!("#{n}")).collect();
                    line.push_str(&format!(" ({})", refs.join(", ")));
                }
                if let Some(e) = &r.write_error {
                    line.push_str(&format!("; pass stopped: {e}"));
                }
                line
            }
            BeltPass::Skipped { holder } => format!("skipped, swept by {holder}"),
            BeltPass::Failed(e) => e.to_string(),
        }
    }
}

/// One tracker's belt in this process.
#[derive(Debug)]
pub struct Belt {
    identity: String,
    label: String,
    dir: PathBuf,
    owner: Option<HeldLock>,
}

impl Belt {
    /// A belt for the tracker with this identity ([`Tracker::identity`]), with its locks in
    /// [`lock::runtime_dir`].
    pub fn new(identity: &str) -> Self {
        Belt::in_dir(identity, lock::runtime_dir())
    }

    /// The same with the locks in `dir` (tests, or a host with an unusual runtime dir).
    pub fn in_dir(identity: &str, dir: PathBuf) -> Self {
        Belt {
            identity: identity.to_string(),
            label: String::new(),
            dir,
            owner: None,
        }
    }

    /// Names this belt's checkout in the message other belts log while this one owns the
    /// tracker (e.g. the repo path).
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this belt currently owns its tracker.
    pub fn owns(&self) -> bool {
        self.owner.is_some()
    }

    /// One pass: take (or keep) ownership, then run the shared unblock pass under the pass
    /// lock. Never panics and never returns early for good: the next call tries again.
    pub fn pass(&mut self, tracker: &dyn Tracker) -> BeltPass {
        if self.owner.is_none() {
            let path = lock::belt_lock_path(&self.dir, &self.identity);
            match lock::try_acquire(&path, &self.label) {
                Ok(Acquired::Held(h)) => self.owner = Some(h),
                Ok(Acquired::Busy(holder)) => return BeltPass::Skipped { holder },
                Err(e) => return BeltPass::Failed(UnblockError::Lock(e.to_string())),
            }
        }
        match exclusive_pass(tracker, false, &self.dir, &self.label) {
            Ok(Exclusive::Done(r)) => BeltPass::Swept(r),
            Ok(Exclusive::Busy(holder)) => BeltPass::Skipped { holder },
            Err(e) => BeltPass::Failed(e),
        }
    }
}

/// The belt as a periodic task for the supervisor loop: each call is one [`Belt::pass`],
/// `Ok(log line)` when it swept or skipped, `Err` with the pass when it or a write failed
/// (the loop's `periodic` wraps it; the belt knows nothing of the loop).
/// `label` names this checkout in other belts' "skipped" lines (the repo path).
pub fn task(
    tracker: Arc<dyn Tracker>,
    label: String,
) -> impl FnMut() -> Result<String, BeltPass> + Send {
    let belt = Belt::new(&tracker.identity()).with_label(label);
    task_with(belt, tracker)
}

/// [`task`] with a given belt (e.g. one whose locks live elsewhere).
pub fn task_with(
    mut belt: Belt,
    tracker: Arc<dyn Tracker>,
) -> impl FnMut() -> Result<String, BeltPass> + Send {
    move || {
        let pass = belt.pass(tracker.as_ref());
        if pass.is_failure() {
            Err(pass)
        } else {
            Ok(pass.outcome())
        }
    }
}
