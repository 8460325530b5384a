//! The GitHub steward (`docs/SPEC.md` §11.23): the leader reads the ready queue for the
//! whole fleet and publishes it to etcd, and every host's listings of that queue (the
//! workers' before each claim, the supervisors' queue checks) read etcd while the copy is
//! fresh. Without it each host lists the queue through GraphQL at every check, so GitHub's
//! read cost grows with the hosts; with it GitHub sees one reader, whose conditional
//! requests are answered 304 (free) until the queue moves.
//!
//! Two keys, both bound to the leader's lease so they go with it: `P/queue` (the issues,
//! put only when they changed) and `P/queue-polled` (when the steward last looked, put at
//! every look). A reader trusts the queue while that stamp is younger than
//! [`FRESH_MS`]; otherwise (no leader, a steward whose looks fail, etcd not answering) it
//! asks GitHub itself, as without a cluster.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Cluster, EtcdError, Op};
use crate::tracker::gh_queue::{PAGES, Page, SharedQueue};
use crate::tracker::{LabeledIssue, Tracker, TrackerError};

/// How long a published queue is trusted after the steward's last look: three of its
/// longest intervals ([`MAX_EVERY`]), so one slow or failed look does not send every host
/// to GitHub, and clocks of the hosts a few seconds apart do not matter.
pub const FRESH_MS: u64 = 30_000;

/// The longest interval between two looks, whatever `timing.tick_s` is.
pub const MAX_EVERY: Duration = Duration::from_secs(10);

/// The largest queue document put: etcd refuses a request over 1.5 MiB by default, and a
/// queue this large (bodies of up to 64 KiB each) is better read from GitHub by each host.
pub const MAX_DOC_BYTES: usize = 1 << 20;

/// The queue as published: who looked, and the issues, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDoc {
    pub host: String,
    pub issues: Vec<LabeledIssue>,
}

/// When the steward last looked (epoch milliseconds, its clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolledDoc {
    pub host: String,
    pub epoch_ms: u64,
}

/// Why a look stopped: GitHub or etcd did not answer. The published queue then ages and
/// the hosts go back to GitHub once it is stale.
#[derive(Debug, thiserror::Error)]
pub enum StewardError {
    #[error("steward: {0}")]
    Tracker(#[from] TrackerError),
    #[error("steward: {0}")]
    Etcd(#[from] EtcdError),
}

/// What the steward answered of one look, for the log and the tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Look {
    /// Pages GitHub answered 200 (a read that counts) and 304 (free).
    pub fresh: usize,
    pub not_modified: usize,
    /// Whether the published queue changed.
    pub changed: bool,
}

/// One page as last answered.
#[derive(Debug, Clone)]
struct Held {
    etag: Option<String>,
    issues: Vec<LabeledIssue>,
    full: bool,
}

/// The leader's steward: the pages it holds with their ETags, and what it published.
#[derive(Debug)]
pub struct Steward {
    every: Duration,
    pages: Vec<Held>,
    last_look: Option<Instant>,
    /// The queue document last put, and under which lease.
    published: Option<(String, i64)>,
    /// The queue was too large to publish at the last look (said once).
    too_large: bool,
    /// Totals since this host began to steward.
    pub looks: Look,
    /// Whether the last look failed (a failure is said once, not once a look).
    failing: bool,
}

impl Steward {
    /// A steward that looks every `tick` (at least a second, at most [`MAX_EVERY`]).
    pub fn new(tick: Duration) -> Steward {
        Steward {
            every: tick.clamp(Duration::from_secs(1), MAX_EVERY),
            pages: Vec::new(),
            last_look: None,
            published: None,
            too_large: false,
            looks: Look::default(),
            failing: false,
        }
    }

    /// How often it looks.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// [`Self::look`], its failures said once: the first of a run of them is the error,
    /// the others say nothing, and the first look that works again says so.
    pub fn pass(
        &mut self,
        c: &Cluster,
        tracker: &dyn Tracker,
        host: &str,
        lease: i64,
    ) -> Result<String, StewardError> {
        match self.look(c, tracker, host, lease) {
            Ok(None) => Ok(String::new()),
            Ok(Some(t)) if std::mem::replace(&mut self.failing, false) => Ok(if t.is_empty() {
                "steward: GitHub and etcd answer again".into()
            } else {
                format!("steward: GitHub and etcd answer again; {t}")
            }),
            Ok(Some(t)) => Ok(t),
            Err(_) if self.failing => Ok(String::new()),
            Err(e) => {
                self.failing = true;
                Err(e)
            }
        }
    }

    /// Forgets everything: this host no longer leads, and what it held is the next
    /// leader's to look at again.
    pub fn step_down(&mut self) {
        *self = Steward::new(self.every);
    }

    /// One look when one is due, as `host` under `lease`: the queue's pages asked with
    /// their ETags, the queue put when it changed, the stamp put always. `Ok(None)` when
    /// no look was due or the tracker has no conditional listing; else what the look
    /// said worth logging (empty when nothing).
    pub fn look(
        &mut self,
        c: &Cluster,
        tracker: &dyn Tracker,
        host: &str,
        lease: i64,
    ) -> Result<Option<String>, StewardError> {
        if self.last_look.is_some_and(|t| t.elapsed() < self.every) {
            return Ok(None);
        }
        self.last_look = Some(Instant::now());
        let first = self.published.is_none() && !self.too_large;
        let mut look = Look::default();
        for page in 1..=PAGES {
            let etag = self.pages.get(page - 1).and_then(|h| h.etag.clone());
            let Some(answer) = tracker.ready_page(page, etag.as_deref())? else {
                return Ok(None);
            };
            match answer {
                Page::NotModified if self.pages.len() >= page => look.not_modified += 1,
                // A 304 for a page never held (its ETag was sent by nobody): read again.
                Page::NotModified => {
                    self.pages.truncate(page - 1);
                    break;
                }
                Page::Fresh { etag, issues, full } => {
                    look.fresh += 1;
                    let held = Held { etag, issues, full };
                    if self.pages.len() >= page {
                        self.pages[page - 1] = held;
                    } else {
                        self.pages.push(held);
                    }
                }
            }
            if !self.pages[page - 1].full {
                self.pages.truncate(page);
                break;
            }
        }
        let doc = QueueDoc {
            host: host.to_string(),
            issues: queue_of(&self.pages),
        };
        let text = serde_json::to_string(&doc).unwrap_or_default();
        let mut said = String::new();
        if text.len() > MAX_DOC_BYTES {
            // Too large to put: the hosts read GitHub, as with no steward.
            if !self.too_large {
                said = format!(
                    "steward: the queue of {} issues is {} bytes, over {MAX_DOC_BYTES}: not published; the hosts list it on GitHub",
                    doc.issues.len(),
                    text.len()
                );
            }
            self.too_large = true;
            if self.published.take().is_some() {
                c.etcd.txn(
                    &[],
                    &[Op::Delete(c.queue_key()), Op::Delete(c.queue_polled_key())],
                    &[],
                )?;
            }
            self.looks.fresh += look.fresh;
            self.looks.not_modified += look.not_modified;
            return Ok(Some(said));
        }
        self.too_large = false;
        let stamp = serde_json::to_string(&PolledDoc {
            host: host.to_string(),
            epoch_ms: crate::timeutil::now_epoch_ms(),
        })
        .unwrap_or_default();
        let mut ops = vec![Op::Put {
            key: c.queue_polled_key(),
            value: stamp,
            lease,
        }];
        look.changed = self.published.as_ref() != Some(&(text.clone(), lease));
        if look.changed {
            ops.push(Op::Put {
                key: c.queue_key(),
                value: text.clone(),
                lease,
            });
        }
        c.etcd.txn(&[], &ops, &[])?;
        if look.changed {
            self.published = Some((text, lease));
        }
        if first {
            said = format!(
                "steward: this host reads the queue for the fleet with conditional requests: {} issues published",
                doc.issues.len()
            );
        }
        self.looks.fresh += look.fresh;
        self.looks.not_modified += look.not_modified;
        self.looks.changed |= look.changed;
        Ok(Some(said))
    }
}

/// The pages' issues in order, each once (an issue that moved between two pages' looks
/// is kept where it was seen first).
fn queue_of(pages: &[Held]) -> Vec<LabeledIssue> {
    let mut seen = std::collections::BTreeSet::new();
    pages
        .iter()
        .flat_map(|p| p.issues.iter())
        .filter(|i| seen.insert(i.number))
        .cloned()
        .collect()
}

impl Cluster {
    pub fn queue_key(&self) -> String {
        format!("{}queue", self.prefix())
    }

    pub fn queue_polled_key(&self) -> String {
        format!("{}queue-polled", self.prefix())
    }

    /// What the steward put: its stamp and its queue, each when there and readable; one
    /// etcd range for both keys.
    fn published(&self) -> Result<(Option<PolledDoc>, Option<QueueDoc>), EtcdError> {
        let kvs = self.etcd.get_prefix(&self.queue_key())?;
        let find = |k: &str| {
            kvs.iter()
                .find(|kv| kv.key == k)
                .map(|kv| kv.value.as_str())
        };
        Ok((
            find(&self.queue_polled_key()).and_then(|v| serde_json::from_str(v).ok()),
            find(&self.queue_key()).and_then(|v| serde_json::from_str(v).ok()),
        ))
    }

    /// The published queue when its stamp is younger than [`FRESH_MS`] at `now_ms`.
    pub fn published_queue(&self, now_ms: u64) -> Result<Option<QueueDoc>, EtcdError> {
        let (polled, queue) = self.published()?;
        Ok(queue.filter(|_| polled.is_some_and(|p| now_ms.saturating_sub(p.epoch_ms) <= FRESH_MS)))
    }

    /// The steward's work as `status --fleet` shows it: who looked, how long ago, how
    /// many issues it published and whether the hosts read them (fresh); null when no
    /// steward published.
    pub fn queue_view(&self, now_ms: u64) -> Result<serde_json::Value, EtcdError> {
        let (Some(polled), queue) = self.published()? else {
            return Ok(serde_json::Value::Null);
        };
        let age_ms = now_ms.saturating_sub(polled.epoch_ms);
        let issues = queue.map(|d| d.issues.len());
        Ok(serde_json::json!({
            "steward": polled.host,
            "looked_ms_ago": age_ms,
            "issues": issues,
            "fresh": issues.is_some() && age_ms <= FRESH_MS,
        }))
    }
}

/// The hosts' reader of the published queue ([`SharedQueue`]): etcd not answering, or no
/// fresh queue, is `None`, and the caller lists the queue on GitHub.
pub struct EtcdQueue(pub &'static Cluster);

impl SharedQueue for EtcdQueue {
    fn ready(&self) -> Option<Vec<LabeledIssue>> {
        self.0
            .published_queue(crate::timeutil::now_epoch_ms())
            .ok()
            .flatten()
            .map(|d| d.issues)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(n: u64) -> LabeledIssue {
        LabeledIssue {
            number: n,
            body: String::new(),
            labels: vec!["ready-for-agent".into()],
            title: None,
        }
    }

    #[test]
    fn the_pages_make_one_queue_in_order_each_issue_once() {
        let held = |ns: &[u64]| Held {
            etag: None,
            issues: ns.iter().map(|n| issue(*n)).collect(),
            full: true,
        };
        let q = queue_of(&[held(&[1, 2, 3]), held(&[3, 4])]);
        assert_eq!(q.iter().map(|i| i.number).collect::<Vec<_>>(), [1, 2, 3, 4]);
    }

    #[test]
    fn the_interval_is_the_tick_within_its_bounds() {
        assert_eq!(
            Steward::new(Duration::from_millis(200)).every,
            Duration::from_secs(1)
        );
        assert_eq!(
            Steward::new(Duration::from_secs(5)).every,
            Duration::from_secs(5)
        );
        assert_eq!(Steward::new(Duration::from_secs(60)).every, MAX_EVERY);
    }
}
