//! The landing of a finished issue (`docs/SPEC.md` §11.22): the fleet's record of each
//! issue's pull request, the texts of the pull request and of the comment that links it, and
//! the events that follow it.
//!
//! The record, `.red/state/landing/<N>.toon`, is the checkout's own: the worker that opens a
//! pull request writes it, a later attempt of the issue (a fix round) reads it to push to the
//! same branch, and the supervisor's landing belt keeps it up to date. Every change is one
//! read-modify-write under the `flock` of `.red/state/landing/lock`, ending in an atomic
//! rename, so the worker and the belt never lose each other's updates. On a cluster the
//! records are the fleet's, in etcd instead ([`cluster`]): the same functions read and
//! change them there.

pub mod belt;
pub mod etcd_records;
pub mod pr_text;

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::event_log::Kind;
use crate::fsutil::{atomic_write, open_lock_file, read_small_text};
use crate::layout::Layout;

/// The most bytes one record read may have (a body and guidance of a few KiB each).
pub const MAX_RECORD_BYTES: u64 = 1 << 20;

/// Where an issue's pull request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PrState {
    /// The branch is pushed but opening the pull request failed: the belt retries it.
    Pending,
    Open,
    Merged,
    /// Closed unmerged.
    Closed,
}

impl std::fmt::Display for PrState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PrState::Pending => "pending",
            PrState::Open => "open",
            PrState::Merged => "merged",
            PrState::Closed => "closed",
        })
    }
}

/// The fleet's record of one issue's pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrRecord {
    pub issue: u64,
    pub state: PrState,
    /// The pull request's URL (gh) or local id (`local-pr-<K>`); null while pending.
    #[serde(default)]
    pub url: Option<String>,
    /// Its head branch on `origin`.
    pub branch: String,
    pub base: String,
    pub title: String,
    /// Its text, kept to open it again after a refusal.
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub draft: bool,
    /// Opened as a draft only because its checks failed (`checks.on_failure = "draft"`),
    /// not by `landing.draft`: the belt marks it ready for review, once, when they pass.
    #[serde(default)]
    pub ready_when_green: bool,
    /// The last result of the `[checks] command` (`passed`, `failed …`, `none`).
    #[serde(default)]
    pub checks: String,
    /// Whether the last checks (the command's, or CI's) failed.
    #[serde(default)]
    pub failing: bool,
    /// Agent rounds the checks asked for across the issue's attempts, beyond each first.
    #[serde(default)]
    pub check_rounds: u64,
    /// Fix attempts the landing belt asked for (CI, reviews, `/afk fix`, `/afk requeue`).
    #[serde(default)]
    pub fix_rounds: u64,
    /// What the next attempt is told, set when the issue goes back to the queue for a fix
    /// round and taken by the attempt that reads it.
    #[serde(default)]
    pub guidance: Option<String>,
    /// Why the last opening failed (pending).
    #[serde(default)]
    pub failure: Option<String>,
    /// The CI, review and comment events the belt acted on or reported, by key.
    #[serde(default)]
    pub seen: Vec<String>,
    /// The fix rounds or the budget ran out and a person was told.
    #[serde(default)]
    pub needs_person: bool,
    /// The merge was asked for.
    #[serde(default)]
    pub merge_requested: bool,
    pub created_epoch: u64,
    #[serde(default)]
    pub updated_epoch: u64,
    #[serde(default)]
    pub merged_epoch: Option<u64>,
}

impl PrRecord {
    /// A new record of issue `n`'s pull request from `branch` into `base`, not opened yet,
    /// with nothing checked, failed or asked.
    pub fn pending(n: u64, branch: &str, base: &str, title: &str, body: &str) -> PrRecord {
        let now = crate::timeutil::now_epoch();
        PrRecord {
            issue: n,
            state: PrState::Pending,
            url: None,
            branch: branch.to_string(),
            base: base.to_string(),
            title: title.to_string(),
            body: body.to_string(),
            draft: false,
            ready_when_green: false,
            checks: String::new(),
            failing: false,
            check_rounds: 0,
            fix_rounds: 0,
            guidance: None,
            failure: None,
            seen: Vec::new(),
            needs_person: false,
            merge_requested: false,
            created_epoch: now,
            updated_epoch: now,
            merged_epoch: None,
        }
    }

    /// The pull request's name in texts: its URL or id, else the branch it waits on.
    pub fn name(&self) -> String {
        self.url
            .clone()
            .unwrap_or_else(|| format!("(not opened yet; branch {})", self.branch))
    }

    /// Whether the belt still watches it.
    pub fn is_live(&self) -> bool {
        matches!(self.state, PrState::Pending | PrState::Open)
    }

    /// Whether `key` (a CI failure, a review, a comment) was acted on or reported before.
    pub fn saw(&self, key: &str) -> bool {
        self.seen.iter().any(|k| k == key)
    }

    /// Notes `key` as acted on; the list keeps its newest 200 keys.
    pub fn note(&mut self, key: &str) {
        if !self.saw(key) {
            self.seen.push(key.to_string());
        }
        let over = self.seen.len().saturating_sub(200);
        self.seen.drain(..over);
    }
}

/// What `issue show` and the MCP `show_issue` say of an issue's pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct PrView {
    /// The pull request's URL (gh) or local id; null while its opening waits for a retry.
    pub url: Option<String>,
    /// pending, open, merged or closed.
    pub state: PrState,
    pub branch: String,
    pub base: String,
    pub draft: bool,
    /// The last `[checks] command` result.
    pub checks: String,
    pub failing: bool,
    /// Agent rounds the checks asked for beyond each attempt's first.
    pub check_rounds: u64,
    /// Fix attempts the landing belt asked for.
    pub fix_rounds: u64,
    pub needs_person: bool,
    pub merge_requested: bool,
    /// Why the last opening failed, while pending.
    pub failure: Option<String>,
}

impl From<&PrRecord> for PrView {
    fn from(r: &PrRecord) -> Self {
        PrView {
            url: r.url.clone(),
            state: r.state,
            branch: r.branch.clone(),
            base: r.base.clone(),
            draft: r.draft,
            checks: r.checks.clone(),
            failing: r.failing,
            check_rounds: r.check_rounds,
            fix_rounds: r.fix_rounds,
            needs_person: r.needs_person,
            merge_requested: r.merge_requested,
            failure: r.failure.clone(),
        }
    }
}

impl PrView {
    /// One line for a terminal: `<url> open draft failing branch=<b> checks=<…> check
    /// rounds=1 fix rounds=0`, every outside text escaped.
    pub fn line(&self) -> String {
        let e = crate::text::escape;
        let mut s = format!(
            "{} {}",
            e(self.url.as_deref().unwrap_or("(not opened)")),
            self.state
        );
        for (on, word) in [
            (self.draft, "draft"),
            (self.failing, "failing"),
            (self.merge_requested, "merge-requested"),
            (self.needs_person, "needs-person"),
        ] {
            if on {
                s.push(' ');
                s.push_str(word);
            }
        }
        s.push_str(&format!(
            " branch={} checks={} check-rounds={} fix-rounds={}",
            e(&self.branch),
            e(if self.checks.is_empty() {
                "-"
            } else {
                &self.checks
            }),
            self.check_rounds,
            self.fix_rounds
        ));
        if let Some(f) = &self.failure {
            s.push_str(&format!(" failure={}", e(f)));
        }
        s
    }
}

/// Why a record could not be read or written; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{}: {why}", path.display())]
    Io { path: PathBuf, why: String },
    #[error("{}: not a landing record: {}", path.display(), crate::text::clip_quoted(why))]
    Parse { path: PathBuf, why: String },
    /// On a cluster: the record's etcd key, and why.
    #[error("etcd key {key}: {why}")]
    Etcd { key: String, why: String },
    /// On a cluster whose etcd did not answer: the record was kept in the checkout's file
    /// instead, and goes to etcd at the cluster belt's first pass that reaches it.
    #[error("{why}; kept in {} until etcd answers", path.display())]
    KeptHere { path: PathBuf, why: String },
}

/// The records' directory, `.red/state/landing/`.
pub fn dir(layout: &Layout) -> PathBuf {
    layout.state().join("landing")
}

/// Issue `n`'s record file.
pub fn path(layout: &Layout, n: u64) -> PathBuf {
    dir(layout).join(format!("{n}.toon"))
}

/// Issue `n`'s record; `Ok(None)` when the fleet never handed it over with a branch.
pub fn read(layout: &Layout, n: u64) -> Result<Option<PrRecord>, RecordError> {
    match crate::cluster::active() {
        Some(c) => etcd_records::read(c, n),
        None => read_file(&path(layout, n)),
    }
}

fn read_file(p: &Path) -> Result<Option<PrRecord>, RecordError> {
    let text = match read_small_text(p, MAX_RECORD_BYTES) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(RecordError::Io {
                path: p.to_path_buf(),
                why: e.to_string(),
            });
        }
    };
    reddb_io_toon::from_str::<PrRecord>(&text)
        .map(Some)
        .map_err(|e| RecordError::Parse {
            path: p.to_path_buf(),
            why: e.to_string(),
        })
}

/// Every record, by issue number; a file (or key) that cannot be read is named in the
/// errors. On a cluster, every record of the fleet.
pub fn list(layout: &Layout) -> (Vec<PrRecord>, Vec<RecordError>) {
    if let Some(c) = crate::cluster::active() {
        return etcd_records::list(c);
    }
    list_files(layout)
}

/// Every record file of the checkout.
fn list_files(layout: &Layout) -> (Vec<PrRecord>, Vec<RecordError>) {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir(layout)) else {
        return (out, errors);
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|s| s.strip_suffix(".toon"))
            .and_then(crate::layout::parse_positive)
        else {
            continue;
        };
        match read_file(&path(layout, n)) {
            Ok(Some(r)) => out.push(r),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    out.sort_by_key(|r| r.issue);
    (out, errors)
}

/// The exclusive lock of every change, held until dropped.
fn lock(layout: &Layout) -> Result<File, RecordError> {
    let d = dir(layout);
    let io = |p: &Path, e: &dyn std::fmt::Display| RecordError::Io {
        path: p.to_path_buf(),
        why: e.to_string(),
    };
    std::fs::create_dir_all(&d).map_err(|e| io(&d, &e))?;
    let p = d.join("lock");
    let f = open_lock_file(&p).map_err(|e| io(&p, &e))?;
    f.lock().map_err(|e| io(&p, &e))?;
    Ok(f)
}

/// One locked read-modify-write of issue `n`'s record: `change` gets the record (`None`
/// when there is none) and leaves what is to be written (`None`: nothing). Returns what
/// was written, else the record as it was. On a cluster it is a compare-and-swap in etcd,
/// where `change` runs again after a lost race: it must derive everything from the record
/// it is given.
pub fn update(
    layout: &Layout,
    n: u64,
    change: impl FnMut(Option<PrRecord>) -> Option<PrRecord>,
) -> Result<Option<PrRecord>, RecordError> {
    if let Some(c) = crate::cluster::active() {
        return etcd_records::update(c, n, change);
    }
    update_file(layout, n, change)
}

/// [`update`] of the checkout's file, under its lock.
fn update_file(
    layout: &Layout,
    n: u64,
    mut change: impl FnMut(Option<PrRecord>) -> Option<PrRecord>,
) -> Result<Option<PrRecord>, RecordError> {
    let _lock = lock(layout)?;
    let p = path(layout, n);
    let before = read_file(&p)?;
    let Some(mut after) = change(before.clone()) else {
        return Ok(before);
    };
    after.updated_epoch = crate::timeutil::now_epoch();
    let text = reddb_io_toon::to_string(&after).map_err(|e| RecordError::Io {
        path: p.clone(),
        why: format!("cannot encode: {e}"),
    })?;
    atomic_write(&p, format!("{text}\n").as_bytes()).map_err(|e| RecordError::Io {
        path: p.clone(),
        why: e.to_string(),
    })?;
    Ok(Some(after))
}

/// Replaces issue `n`'s record with `record`. On a cluster whose etcd does not answer the
/// record is kept in the checkout's file instead, never lost: the error says so, and the
/// cluster belt moves it to etcd ([`move_to_etcd`]).
pub fn write(layout: &Layout, record: PrRecord) -> Result<(), RecordError> {
    write_in(layout, crate::cluster::active(), record)
}

/// [`write`] on `cluster` (or the checkout's file without one).
pub fn write_in(
    layout: &Layout,
    cluster: Option<&crate::cluster::Cluster>,
    record: PrRecord,
) -> Result<(), RecordError> {
    let n = record.issue;
    let Some(c) = cluster else {
        return update_file(layout, n, |_| Some(record.clone())).map(|_| ());
    };
    match etcd_records::update(c, n, |_| Some(record.clone())) {
        Ok(_) => Ok(()),
        Err(RecordError::Etcd { key, why }) => {
            update_file(layout, n, |_| Some(record.clone()))?;
            Err(RecordError::KeptHere {
                path: path(layout, n),
                why: format!("etcd key {key}: {why}"),
            })
        }
        Err(e) => Err(e),
    }
}

/// The records a checkout on a cluster still keeps in its files (written while etcd did
/// not answer, or before `[cluster]` was set), moved to etcd: each is put unless etcd
/// holds a record of the issue changed later, then its file goes. Under the files' lock,
/// so a record kept meanwhile is not lost. Returns the issues whose record was put, those
/// whose file went for a later one in etcd, and what could not be done.
pub fn move_to_etcd(layout: &Layout, c: &crate::cluster::Cluster) -> Moved {
    let mut moved = Moved::default();
    if !dir(layout).is_dir() {
        return moved;
    }
    let (records, errors) = list_files(layout);
    moved.errors = errors;
    if records.is_empty() {
        return moved;
    }
    let _lock = match lock(layout) {
        Ok(l) => l,
        Err(e) => {
            moved.errors.push(e);
            return moved;
        }
    };
    for kept in records {
        let n = kept.issue;
        // Read again under the lock: a worker may have kept a newer one meanwhile.
        let kept = match read_file(&path(layout, n)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                moved.errors.push(e);
                continue;
            }
        };
        let mut put = false;
        let result = etcd_records::update(c, n, |there| {
            put = there
                .as_ref()
                .is_none_or(|t| t.updated_epoch <= kept.updated_epoch);
            put.then(|| kept.clone())
        });
        match result {
            Ok(_) => {
                if let Err(e) = std::fs::remove_file(path(layout, n)) {
                    moved.errors.push(RecordError::Io {
                        path: path(layout, n),
                        why: e.to_string(),
                    });
                    continue;
                }
                if put {
                    moved.put.push(n);
                } else {
                    moved.superseded.push(n);
                }
            }
            // etcd away again: the file stays for the next pass.
            Err(e) => {
                moved.errors.push(e);
                break;
            }
        }
    }
    moved
}

/// What [`move_to_etcd`] did.
#[derive(Debug, Default)]
pub struct Moved {
    pub put: Vec<u64>,
    pub superseded: Vec<u64>,
    pub errors: Vec<RecordError>,
}

/// Takes the guidance a fix round left for the next attempt of issue `n`: returned once,
/// then gone from the record.
pub fn take_guidance(layout: &Layout, n: u64) -> Result<Option<String>, RecordError> {
    let mut taken = None;
    update(layout, n, |r| {
        let mut r = r?;
        taken = r.guidance.take();
        taken.is_some().then_some(r)
    })?;
    Ok(taken)
}

/// How many of the fleet's pull requests are open, open with failing checks, and merged:
/// `status`'s counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PrCounts {
    pub open: u64,
    pub failing: u64,
    pub merged: u64,
    /// Branches pushed whose pull request could not be opened yet.
    pub pending: u64,
}

/// The counts over every record.
pub fn counts(layout: &Layout) -> Result<PrCounts, RecordError> {
    let (records, mut errors) = list(layout);
    if let Some(e) = errors.pop() {
        return Err(e);
    }
    let mut c = PrCounts::default();
    for r in &records {
        match r.state {
            PrState::Open => {
                c.open += 1;
                if r.failing {
                    c.failing += 1;
                }
            }
            PrState::Merged => c.merged += 1,
            PrState::Pending => c.pending += 1,
            PrState::Closed => {}
        }
    }
    Ok(c)
}

/// Appends one landing event for issue `n` to the event log (one whole line, as every
/// process that is not the supervisor's loop writes it); a failure is one line on stderr.
pub fn log_event(layout: &Layout, kind: Kind, n: u64, msg: String, slot: Option<usize>) {
    let mut ev = crate::event_log::Record::now(kind, msg).issue(n);
    ev.slot = slot.map(|s| s as u64);
    ev.pid = Some(i64::from(std::process::id()));
    if let Err(e) = crate::event_log::append_event(&layout.event_log(), &ev) {
        eprintln!("afk-supervisor: warning: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u64) -> PrRecord {
        PrRecord {
            issue: n,
            state: PrState::Open,
            url: Some("https://github.com/o/r/pull/9".into()),
            branch: format!("afk/w1/{n}-x"),
            base: "main".into(),
            title: "Fix: the \"thing\", with commas".into(),
            body: "Closes #3\n\nline two: a, b\n".into(),
            draft: false,
            ready_when_green: false,
            checks: "passed".into(),
            failing: false,
            check_rounds: 1,
            fix_rounds: 0,
            guidance: Some("make `cargo test` pass:\n  --> src/x.rs:1".into()),
            failure: None,
            seen: vec!["ci:abc".into()],
            needs_person: false,
            merge_requested: false,
            created_epoch: 1,
            updated_epoch: 0,
            merged_epoch: None,
        }
    }

    #[test]
    fn a_record_round_trips_and_guidance_is_taken_once() {
        let d = tempfile::tempdir().unwrap();
        let layout = Layout::new(d.path());
        assert!(read(&layout, 3).unwrap().is_none());
        write(&layout, record(3)).unwrap();
        let got = read(&layout, 3).unwrap().unwrap();
        assert_eq!(got.body, record(3).body);
        assert_eq!(got.title, record(3).title);
        assert_eq!(got.seen, vec!["ci:abc"]);
        assert!(got.updated_epoch > 0);
        assert_eq!(
            take_guidance(&layout, 3).unwrap().as_deref(),
            record(3).guidance.as_deref()
        );
        assert_eq!(take_guidance(&layout, 3).unwrap(), None);
        assert_eq!(take_guidance(&layout, 4).unwrap(), None);
        let mut merged = record(5);
        merged.state = PrState::Merged;
        write(&layout, merged).unwrap();
        let mut failing = record(6);
        failing.failing = true;
        write(&layout, failing).unwrap();
        std::fs::write(dir(&layout).join("notes.txt"), "x").unwrap();
        let c = counts(&layout).unwrap();
        assert_eq!((c.open, c.failing, c.merged, c.pending), (2, 1, 1, 0));
    }

    #[test]
    fn seen_keys_stay_bounded() {
        let mut r = record(1);
        for i in 0..500 {
            r.note(&format!("k{i}"));
        }
        r.note("k499");
        assert_eq!(r.seen.len(), 200);
        assert!(r.saw("k499") && !r.saw("k0"));
    }
}
