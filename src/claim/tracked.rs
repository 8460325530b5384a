//! The claim on a tracker several checkouts share (SPEC §11.5): the calls around the pure
//! fold of [`super::marks`].
//!
//! After its local claim and the label switch, a worker posts its claim mark and re-reads
//! the issue with its comments: two calls. It proceeds only when its mark holds the issue
//! and the issue is still open and not handed off; otherwise it posts a `yielded` mark and
//! takes the next issue. A restore (orphan cleanup, the supervisor's release of a dead
//! worker's claims) first asks [`held_elsewhere`], so no checkout gives back an issue that
//! another checkout holds.

use std::path::Path;
use std::time::Duration;

use super::marks::{self, Holder, Mark, Standing};
use crate::layout::Layout;
use crate::tracker::{IssueState, IssueThread, Tracker, TrackerError, TrackerResult, labels};

/// How often one read or one mark is tried before the claim step gives up. A mark posted
/// twice changes nothing (its nonce is the same), so a retried post is safe.
const TRIES: u32 = 3;

/// A failed step of the claim protocol. The worker keeps its local claim and exits, so the
/// supervisor's release (or orphan cleanup) gives the issue back, marks checked first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("posting the claim mark of #{issue} failed: {source}")]
    Mark { issue: u64, source: TrackerError },
    #[error("reading #{issue} with its comments after the claim mark failed: {source}")]
    Read { issue: u64, source: TrackerError },
}

impl ClaimError {
    /// The tracker failure behind it.
    pub fn tracker_error(&self) -> &TrackerError {
        match self {
            ClaimError::Mark { source, .. } | ClaimError::Read { source, .. } => source,
        }
    }
}

/// This checkout's name in marks: the host name and a hash of the canonical repo path, so
/// two checkouts on one box are two names and one checkout keeps its name across restarts.
pub fn this_host(layout: &Layout) -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let mut name: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    if name.is_empty() {
        name = "host".into();
    }
    let repo = std::fs::canonicalize(layout.repo()).unwrap_or_else(|_| layout.repo().into());
    format!("{name}-{:08x}", fnv32(&repo))
}

fn fnv32(p: &Path) -> u32 {
    use std::os::unix::ffi::OsStrExt;
    p.as_os_str()
        .as_bytes()
        .iter()
        .fold(0x811c_9dc5u32, |h, b| {
            (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
        })
}

/// A claim this worker won: the release mark it leaves when the issue leaves its hands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WonClaim {
    pub holder: Holder,
    pub nonce: String,
}

impl WonClaim {
    /// `🤖 /afk release <worker>@<host> <nonce>`.
    pub fn release_mark(&self) -> String {
        Mark::Release {
            holder: self.holder.clone(),
            nonce: self.nonce.clone(),
        }
        .text()
    }

    /// `🤖 /afk handoff <worker>@<host> <nonce>`.
    pub fn handoff_mark(&self) -> String {
        Mark::Handoff {
            holder: self.holder.clone(),
            nonce: self.nonce.clone(),
        }
        .text()
    }

    /// `body` with the hand-off mark (`to_human`) or the release mark as its last line, so
    /// the comment that gives the issue up ends the claim.
    pub fn ending(&self, body: &str, to_human: bool) -> String {
        let mark = if to_human {
            self.handoff_mark()
        } else {
            self.release_mark()
        };
        format!("{body}\n\n{mark}")
    }
}

/// How the race for a claim went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRace {
    Won(WonClaim),
    /// Another mark holds the issue (or it was handed off meanwhile): the `yielded` mark
    /// is posted (best effort) and the worker goes on.
    Lost {
        holder: Option<Holder>,
    },
    /// A stop came while the claim waited on a hand-off's label change: the claim was
    /// released (its release mark, `running` back to `ready-for-agent`, each retried) so a
    /// person's fast requeue stays a requeue, and the worker takes nothing.
    Stopped,
}

/// The name `worker.rs` imports the race's outcome by.
pub use ClaimRace as Verdict;

/// How long a hand-off's label change may take to land after its mark (the hand-off
/// posts its mark first, then switches `running` to `ready-for-human`, retried).
pub const HANDOFF_SETTLE: Duration = Duration::from_secs(60);

/// How a claim that holds right after a hand-off mark waits for that hand-off's label
/// change: at most `within` after the mark, and no longer once `stopped` says so.
pub struct Settle<'a> {
    pub within: Duration,
    pub stopped: &'a dyn Fn() -> bool,
}

/// The claim step: the claim mark, the re-read, and the decision.
///
/// A claim posted between another checkout's hand-off mark and its label change holds
/// (nobody else does) on an issue that does not look handed off yet. So a claim whose
/// thread's last event before it is a hand-off less than `settle.within` old counts as
/// won only when the issue still is not `ready-for-human` once that time has passed
/// (read again every few seconds until then): a person who gave a handed-off issue back to
/// the queue that fast waits a minute at most, a late claimant never works a handed-off
/// issue. A stop while it waits gives the issue back to the queue ([`ClaimRace::Stopped`]).
pub fn claim(
    tracker: &dyn Tracker,
    issue: u64,
    worker: &str,
    host: &str,
    settle: &Settle<'_>,
) -> Result<ClaimRace, ClaimError> {
    let me = Holder::new(worker, host);
    let nonce = marks::new_nonce();
    let mark = Mark::Claim {
        holder: me.clone(),
        nonce: nonce.clone(),
    };
    retry(|| tracker.comment(issue, &mark.text()))
        .map_err(|source| ClaimError::Mark { issue, source })?;
    let read = || read_thread(tracker, issue).map_err(|source| ClaimError::Read { issue, source });
    let is_open =
        |t: &IssueThread| t.state == IssueState::Open && !t.has_label(labels::READY_FOR_HUMAN);
    let mut thread = read()?;
    let mut standing = marks::standing(&thread.comments);
    let mut open = is_open(&thread);
    let mut stopped = false;
    if let Some(wait) = handoff_unsettled(&standing, &nonce, settle.within)
        && open
    {
        let deadline = std::time::Instant::now() + wait;
        let every = (settle.within / 4).min(Duration::from_secs(5));
        while open && std::time::Instant::now() < deadline {
            if sleep_unless(
                every.min(deadline - std::time::Instant::now()),
                settle.stopped,
            ) {
                stopped = true;
                break;
            }
            thread = read()?;
            standing = marks::standing(&thread.comments);
            open = is_open(&thread);
        }
    }
    if standing.holds(&nonce) && open {
        let won = WonClaim { holder: me, nonce };
        if !stopped {
            return Ok(ClaimRace::Won(won));
        }
        // Ours, and nobody handed it off after all (as far as the last read showed): a
        // `yielded` would leave the fold at the hand-off before us, whose end the claims
        // belt would then finish as `ready-for-human`. The release says it is back in the
        // queue; the labels follow (a hand-off still landing adds `ready-for-human`, which
        // keeps every claimant off it).
        // Retried as every release is: a lost release mark would leave the fold at our
        // claim, a lost label change `running` for the claims belt to requeue.
        let _ = post(tracker, issue, &won.release_mark());
        let _ = edit_labels_settled(
            tracker,
            issue,
            &[labels::READY_FOR_AGENT],
            &[labels::RUNNING],
        );
        return Ok(ClaimRace::Stopped);
    }
    let yielded = Mark::Yielded {
        holder: me,
        nonce: nonce.clone(),
    };
    // Retried like a release: a claim posted after a hand-off is the thread's last event
    // until its `yielded` voids it, so a lost `yielded` would leave the handed-off issue
    // looking claimed by a worker that moved on.
    let _ = post(tracker, issue, &yielded.text());
    let others_hold = standing.holder.as_ref().is_some_and(|h| h.nonce != nonce);
    if !others_hold && !open && thread.has_label(labels::RUNNING) {
        // Handed off between our check and our label switch (our mark then held, since
        // nobody else did, and our `yielded` voids it): take back our `running`.
        let _ = tracker.edit_labels(issue, &[], &[labels::RUNNING]);
    }
    Ok(ClaimRace::Lost {
        holder: holder_of(&standing).filter(|_| others_hold),
    })
}

/// How long our claim (`nonce`) must wait for the label change of the hand-off just
/// before it: `None` when the event before it was no hand-off or one `settle` old (by the
/// tracker's comment times; unknown times wait the whole of it).
fn handoff_unsettled(s: &Standing, nonce: &str, settle: Duration) -> Option<Duration> {
    let held = s.holder.as_ref().filter(|h| h.nonce == nonce)?;
    let Some((marks::Event::HandedOff, handed_at)) = held.before else {
        return None;
    };
    let gap = match (handed_at, held.at) {
        (Some(h), Some(c)) => Duration::from_secs(c.saturating_sub(h)),
        _ => Duration::ZERO,
    };
    settle.checked_sub(gap).filter(|w| !w.is_zero())
}

/// Sleeps `d` in short steps; whether `stopped` said so before the end.
fn sleep_unless(d: Duration, stopped: &dyn Fn() -> bool) -> bool {
    let end = std::time::Instant::now() + d;
    loop {
        if stopped() {
            return true;
        }
        let now = std::time::Instant::now();
        if now >= end {
            return false;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(100)));
    }
}

fn holder_of(s: &Standing) -> Option<Holder> {
    s.holder.as_ref().map(|h| h.holder.clone())
}

/// The holder of issue `n` when it is a checkout other than `host`; `Ok(None)` on a tracker
/// no other checkout shares (no call is made) or when nobody else holds it. A restore asks
/// this first, at the cost of one read of a `running` issue.
pub fn held_elsewhere(tracker: &dyn Tracker, n: u64, host: &str) -> TrackerResult<Option<Holder>> {
    // On a cluster the claim is the key in etcd (`docs/SPEC.md` §11.23), asked there: no
    // tracker call. etcd unreachable is a transient failure: nothing is restored on a guess.
    if let Some(c) = crate::cluster::active() {
        let key = c.claim_of(n).map_err(|e| {
            TrackerError::new(
                crate::tracker::ErrorKind::Transient,
                "etcd",
                format!("who holds #{n}: {e}"),
            )
        })?;
        return Ok(key.filter(|k| k.host() != host).map(|k| {
            let (worker, host) = k.holder.split_once('@').unwrap_or(("-", k.holder.as_str()));
            Holder::new(worker, host)
        }));
    }
    if !tracker.shared_across_checkouts() {
        return Ok(None);
    }
    let thread = tracker.thread(n)?;
    Ok(holder_of(&marks::standing(&thread.comments)).filter(|h| h.host != host))
}

/// Posts `body` (a mark or a comment ending in one), retried: the mark's nonce makes a
/// duplicate harmless.
pub fn post(tracker: &dyn Tracker, issue: u64, body: &str) -> TrackerResult<()> {
    retry_n(POST_TRIES, || tracker.comment(issue, body))
}

/// How often a mark or a comment ending in one is tried: a lost end mark leaves a thread
/// that no longer says who holds the issue, and a repeat is harmless (its nonce).
const POST_TRIES: u32 = 5;

/// One read of the thread, retried on a transient failure (a read changes nothing).
pub fn read_thread(tracker: &dyn Tracker, issue: u64) -> TrackerResult<IssueThread> {
    retry(|| tracker.thread(issue))
}

/// A label edit that may land though its answer fails (a 502 or a timeout after GitHub
/// applied it): tried up to three times (an edit is idempotent), and when it still fails,
/// the issue re-read and the edit taken as done when its labels show it. A rate limit is
/// waited out, never retried; it is returned as is.
pub fn edit_labels_settled(
    tracker: &dyn Tracker,
    n: u64,
    add: &[&str],
    remove: &[&str],
) -> TrackerResult<()> {
    let err = match retry(|| tracker.edit_labels(n, add, remove)) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind == crate::tracker::ErrorKind::RateLimited => return Err(e),
        Err(e) => e,
    };
    match retry(|| tracker.view(n)) {
        Ok(v) if add.iter().all(|l| v.has_label(l)) && !remove.iter().any(|l| v.has_label(l)) => {
            Ok(())
        }
        _ => Err(err),
    }
}

/// `f` tried up to three times while it fails transiently, for calls a repeat cannot harm
/// (reads, marks, label edits).
pub fn retry<T>(f: impl FnMut() -> TrackerResult<T>) -> TrackerResult<T> {
    retry_n(TRIES, f)
}

fn retry_n<T>(max: u32, mut f: impl FnMut() -> TrackerResult<T>) -> TrackerResult<T> {
    let mut tries = 0;
    loop {
        tries += 1;
        match f() {
            Err(e) if e.is_transient() && tries < max => {
                std::thread::sleep(Duration::from_millis(300 * u64::from(tries)));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_are_mark_safe_and_per_checkout() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let ha = this_host(&Layout::new(a.path()));
        let hb = this_host(&Layout::new(b.path()));
        assert!(marks::valid_host(&ha), "{ha}");
        assert_ne!(ha, hb);
        assert_eq!(ha, this_host(&Layout::new(a.path())));
    }

    #[test]
    fn the_release_mark_ends_the_hand_off_comment() {
        let w = WonClaim {
            holder: Holder::new("w1", "box"),
            nonce: "0123456789abcdef".into(),
        };
        let body = w.ending("🤖 /afk attempt 1-a1 failed.", false);
        assert_eq!(
            Mark::parse(&body),
            Some(Mark::Release {
                holder: w.holder.clone(),
                nonce: w.nonce.clone()
            })
        );
    }
}
