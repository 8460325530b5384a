//! Reservations against the day's budget (`docs/SPEC.md` §11.13): a worker about to claim
//! reserves what an attempt is expected to cost, so N workers checking the budget at once
//! cannot each start a run that the others' runs already pay for. Without them every slot
//! that claims while the day's spend is under the budget overshoots by a run; with them
//! the overshoot is at most one attempt's cost, whatever the number of workers.
//!
//! The reservations of one host are one file, `.red/state/budget-reservations.toon`,
//! read without following symlinks and replaced atomically, always under the flock of
//! `budget-reservations.lock` beside it: the check of the budget and the reservation
//! happen under that one lock, so two workers cannot both see room for one run. A
//! reservation names its worker's pid and process start time; one whose process is gone
//! (a crash, a kill) or older than the attempt cap (`timing.attempt_max_s`, and a minute)
//! no longer counts and is dropped at the next write, so a dead worker never holds the
//! budget for good.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Reached, Spend, daily_reached, spend_today};
use crate::config::{Budget, Usd};
use crate::ledger::Record;

/// The file's name under `.red/state/`.
pub const FILE_NAME: &str = "budget-reservations.toon";

/// The lock's name beside it (the file is replaced by rename, so it cannot carry the lock).
const LOCK_NAME: &str = "budget-reservations.lock";

/// Largest reservation file read: one short record per worker of the host.
const MAX_BYTES: u64 = 256 << 10;

/// How many of the latest priced runs the expected cost is the median of.
pub const HISTORY_RUNS: usize = 20;

/// How long a worker waits for the lock: other holders only read the ledger and write a
/// small file, so this long means something is wrong, and the claim is not made.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// A reservation outlives the attempt cap by this much before it is dropped as stale.
const STALE_SLACK_S: u64 = 60;

/// One attempt's reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The worker id (`w3-…`), for people reading the file.
    pub worker: String,
    /// The worker's pid and process start time: the reservation lives as long as it does.
    pub pid: i32,
    pub start: u64,
    /// When it was taken (epoch seconds).
    pub since_epoch: u64,
    /// When it lapses even if its process still runs: the attempt cap
    /// (`timing.attempt_max_s`) and a minute after it was taken.
    pub until_epoch: u64,
    /// Dollars in millionths.
    pub usd_micros: u64,
    pub tokens: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Book {
    #[serde(default)]
    reservations: Vec<Reservation>,
}

/// What the live reservations hold back, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    pub usd_micros: u64,
    pub tokens: u64,
    /// Attempts holding a reservation.
    pub attempts: u64,
}

impl Reserved {
    pub fn of(list: &[Reservation]) -> Reserved {
        list.iter().fold(Reserved::default(), |s, r| Reserved {
            usd_micros: s.usd_micros.saturating_add(r.usd_micros),
            tokens: s.tokens.saturating_add(r.tokens),
            attempts: s.attempts + 1,
        })
    }

    /// `reserved $0.40 for 2 running attempts` (and the tokens when a token budget is set).
    pub fn words(&self, budget: &Budget) -> String {
        let mut what = Usd(self.usd_micros).to_string();
        if budget.tokens_per_day.is_some() {
            what.push_str(&format!(" and {} tokens", self.tokens));
        }
        let s = if self.attempts == 1 { "" } else { "s" };
        format!("reserved {what} for {} running attempt{s}", self.attempts)
    }

    /// As `spend --json` and `status --json` give it.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "usd": Usd(self.usd_micros).get(),
            "tokens": self.tokens,
            "attempts": self.attempts,
        })
    }
}

/// What one attempt is expected to cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expected {
    pub usd_micros: u64,
    pub tokens: u64,
}

/// The median of `v`; the lower middle of an even count (an estimate that errs low
/// reserves less, never blocks a run the history does not support).
fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    let n = v.len();
    (n > 0).then(|| v[(n - 1) / 2])
}

/// What the next attempt is expected to cost: the median of the last [`HISTORY_RUNS`] runs
/// of the ledger that reported dollars (by their end), else `budget.estimate_usd`, else
/// nothing; its tokens, the median of the last runs that reported tokens, else none.
pub fn expected(all: &[(u64, Vec<Record>)], budget: &Budget) -> Expected {
    let mut runs: Vec<(u64, &Record)> = all
        .iter()
        .flat_map(|(_, rs)| rs)
        .filter_map(|r| {
            crate::timeutil::parse_rfc3339(&r.end).map(|t| (crate::timeutil::epoch_secs(t), r))
        })
        .collect();
    runs.sort_by_key(|(end, _)| *end);
    let latest = |f: &dyn Fn(&Record) -> Option<u64>| {
        median(
            runs.iter()
                .rev()
                .filter_map(|(_, r)| f(r))
                .take(HISTORY_RUNS)
                .collect(),
        )
    };
    let usd = latest(&|r| {
        r.usage
            .cost_usd
            .filter(|c| c.is_finite() && *c >= 0.0)
            .map(|c| Usd::from_f64(c).0)
    })
    .or(budget.estimate_usd.map(|u| u.0))
    .unwrap_or(0);
    let tokens = latest(&|r| {
        (r.usage.input_tokens.is_some() || r.usage.output_tokens.is_some())
            .then(|| r.usage.tokens())
    })
    .unwrap_or(0);
    Expected {
        usd_micros: usd,
        tokens,
    }
}

/// Why the reservations could not be read or written; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    #[error("{}: lock not had within {}s: {why}", path.display(), LOCK_WAIT.as_secs())]
    Lock { path: PathBuf, why: String },
    /// Not read safely (a link, not a regular file, too large) or not readable.
    #[error("{}: {why}", path.display())]
    Unreadable { path: PathBuf, why: String },
    #[error("{}: not a reservation record: {}", path.display(), crate::text::clip_quoted(why))]
    NotReservations { path: PathBuf, why: String },
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE_NAME)
}

/// Every reservation in the file, live or not; none when there is no file.
fn read_book(state_dir: &Path) -> Result<Book, ReserveError> {
    let p = path(state_dir);
    let text = match crate::fsutil::read_small_text(&p, MAX_BYTES) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(Book::default()),
        Err(e) => {
            return Err(ReserveError::Unreadable {
                path: p,
                why: e.to_string(),
            });
        }
    };
    if text.trim().is_empty() {
        return Ok(Book::default());
    }
    reddb_io_toon::from_str::<Book>(&text).map_err(|e| ReserveError::NotReservations {
        path: p,
        why: e.to_string(),
    })
}

/// Whether `r` still holds the budget at `now`: its process runs (the same one: pid and
/// start time) and it has not lapsed.
pub(crate) fn live(r: &Reservation, now: u64) -> bool {
    now < r.until_epoch && crate::pidfile::process_start_time(r.pid) == Some(r.start)
}

/// The live reservations of this host at `now`, read without the lock (for `status` and
/// `spend`: a figure a moment old is fine there).
pub fn read_live(state_dir: &Path, now: u64) -> Result<Vec<Reservation>, ReserveError> {
    let mut book = read_book(state_dir)?;
    book.reservations.retain(|r| live(r, now));
    Ok(book.reservations)
}

fn write_book(state_dir: &Path, book: &Book) -> Result<(), ReserveError> {
    let p = path(state_dir);
    let text = reddb_io_toon::to_string(book).map_err(|e| ReserveError::Write {
        path: p.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    crate::fsutil::atomic_write(&p, format!("{text}\n").as_bytes())
        .map_err(|source| ReserveError::Write { path: p, source })
}

/// The flock every read-modify-write of the reservations holds, tried for [`LOCK_WAIT`].
fn lock(state_dir: &Path) -> Result<std::fs::File, ReserveError> {
    let p = state_dir.join(LOCK_NAME);
    let err = |why: String| ReserveError::Lock {
        path: p.clone(),
        why,
    };
    let f = crate::fsutil::open_lock_file(&p).map_err(|e| err(e.to_string()))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(err(e.to_string())),
        }
    }
}

/// What the budget says to a worker about to claim.
#[derive(Debug)]
pub enum Decision {
    /// The day's spend alone reached the budget: nothing is claimed until the next day.
    Reached(Reached),
    /// Spent and reserved together reach it: other workers' attempts may leave room when
    /// they end, so the worker waits for them rather than claim. The words say why.
    Wait(String),
    /// Claim; the attempt's reservation (none when nothing is expected) is held until the
    /// guard is dropped.
    Go(Option<Guard>),
}

/// Who reserves: this process.
#[derive(Debug, Clone)]
pub struct Holder {
    pub worker: String,
    pub pid: i32,
    pub start: u64,
}

impl Holder {
    /// Its reservation of `e` at `now`, lapsing at the attempt cap `max_age_s` and a minute.
    pub fn reserve(&self, e: Expected, max_age_s: u64, now: u64) -> Reservation {
        Reservation {
            worker: self.worker.clone(),
            pid: self.pid,
            start: self.start,
            since_epoch: now,
            until_epoch: now.saturating_add(max_age_s.saturating_add(STALE_SLACK_S)),
            usd_micros: e.usd_micros,
            tokens: e.tokens,
        }
    }

    /// This process, with `worker` its id; `None` when its start time cannot be read.
    pub fn this(worker: &str) -> Option<Holder> {
        let pid = i32::try_from(std::process::id()).ok()?;
        Some(Holder {
            worker: worker.to_string(),
            pid,
            start: crate::pidfile::process_start_time(pid)?,
        })
    }
}

/// Checks the day's budget against the ledger's spend and the host's live reservations,
/// and reserves `holder`'s attempt when it may claim: all under one lock, so workers of
/// one host checking at once see each other's reservations. `max_age_s` is the attempt cap.
pub fn check_and_reserve(
    layout: &crate::layout::Layout,
    budget: &Budget,
    holder: &Holder,
    max_age_s: u64,
    now: u64,
) -> Result<Decision, ReserveError> {
    let state = layout.state();
    let _lock = lock(&state)?;
    let (all, _) = crate::ledger::read_all(layout);
    let today = spend_today(&all, now, budget.utc_offset_s);
    if let Some(r) = daily_reached(budget, &today, now) {
        return Ok(Decision::Reached(r));
    }
    let mut book = read_book(&state)?;
    book.reservations
        .retain(|r| live(r, now) && !(r.pid == holder.pid && r.start == holder.start));
    let reserved = Reserved::of(&book.reservations);
    let e = match judge(budget, &today, &reserved, expected(&all, budget), now) {
        Verdict::Reached(r) => return Ok(Decision::Reached(r)),
        Verdict::Wait(why) => return Ok(Decision::Wait(why)),
        Verdict::Reserve(e) => e,
    };
    if e == Expected::default() {
        write_book(&state, &book)?;
        return Ok(Decision::Go(None));
    }
    book.reservations.push(holder.reserve(e, max_age_s, now));
    write_book(&state, &book)?;
    Ok(Decision::Go(Some(Guard::File(FileGuard {
        state_dir: state,
        pid: holder.pid,
        start: holder.start,
    }))))
}

/// What the day's budget says to a worker about to claim.
#[derive(Debug)]
pub enum Verdict {
    /// The day's spend alone reached it.
    Reached(Reached),
    /// Spend and the others' reservations reach it: wait for them (the words say why).
    Wait(String),
    /// Claim, reserving this much (nothing of a limit not set).
    Reserve(Expected),
}

/// The check every reservation makes, wherever the reservations are kept: `today` is the
/// day's spend, `reserved` what the other live reservations hold, `e` what the asker's
/// attempt is expected to cost.
pub fn judge(
    budget: &Budget,
    today: &Spend,
    reserved: &Reserved,
    e: Expected,
    now: u64,
) -> Verdict {
    if let Some(r) = daily_reached(budget, today, now) {
        return Verdict::Reached(r);
    }
    if reserved.attempts > 0 && with_reserved_reached(budget, today, reserved) {
        return Verdict::Wait(format!(
            "daily budget held by running attempts: {}, {}",
            super::spend_words(budget, today),
            reserved.words(budget)
        ));
    }
    Verdict::Reserve(Expected {
        usd_micros: if budget.usd_per_day.is_some() {
            e.usd_micros
        } else {
            0
        },
        tokens: if budget.tokens_per_day.is_some() {
            e.tokens
        } else {
            0
        },
    })
}

/// Whether spend and reservations together reach a daily limit.
fn with_reserved_reached(budget: &Budget, today: &Spend, reserved: &Reserved) -> bool {
    budget.usd_per_day.is_some_and(|l| {
        Usd::from_f64(today.usd)
            .0
            .saturating_add(reserved.usd_micros)
            >= l.0
    }) || budget
        .tokens_per_day
        .is_some_and(|l| today.tokens.saturating_add(reserved.tokens) >= l)
}

/// Removes the reservations of the process `pid` started at `start`.
pub fn release(state_dir: &Path, pid: i32, start: u64) -> Result<(), ReserveError> {
    let _lock = lock(state_dir)?;
    let mut book = read_book(state_dir)?;
    let before = book.reservations.len();
    book.reservations
        .retain(|r| !(r.pid == pid && r.start == start));
    if book.reservations.len() == before {
        return Ok(());
    }
    write_book(state_dir, &book)
}

/// An attempt's reservation: released when dropped, i.e. when the attempt has ended and
/// its cost is in the ledger (or when no issue was claimed after all), on every path out
/// of the worker's loop, errors included. Kept in this host's file, or on a cluster in the
/// fleet's day key (`crate::budget::fleet_day`).
#[derive(Debug)]
pub enum Guard {
    File(FileGuard),
    Fleet(crate::budget::fleet_day::FleetGuard),
}

/// A reservation in this host's file.
#[derive(Debug)]
pub struct FileGuard {
    state_dir: PathBuf,
    pid: i32,
    start: u64,
}

impl Drop for FileGuard {
    fn drop(&mut self) {
        if let Err(e) = release(&self.state_dir, self.pid, self.start) {
            // A reservation not released lapses when this process ends or at the cap.
            eprintln!("afk-supervisor: releasing the budget reservation: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Outcome;

    fn run(end: u64, cost: Option<f64>) -> Record {
        let mut r = Record::now(None, None, Outcome::Done);
        r.end = crate::timeutil::rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(end));
        r.usage.cost_usd = cost;
        r
    }

    #[test]
    fn the_expected_cost_is_the_median_of_the_latest_runs_else_the_estimate() {
        let mut budget = Budget::default();
        assert_eq!(expected(&[], &budget), Expected::default());
        budget.estimate_usd = Some(Usd::from_f64(0.5));
        assert_eq!(expected(&[], &budget).usd_micros, 500_000);
        // 25 runs: the 5 oldest cost 9 dollars and fall out of the window of 20.
        let mut rs: Vec<Record> = (0..5).map(|i| run(1000 + i, Some(9.0))).collect();
        rs.extend((0..20).map(|i| run(2000 + i, Some(0.1 + 0.01 * (i % 3) as f64))));
        rs.push(run(3000, None));
        let all = vec![(1, rs)];
        assert_eq!(expected(&all, &budget).usd_micros, 110_000);
    }

    fn holder(pid: i32, start: u64) -> Holder {
        Holder {
            worker: format!("w{pid}"),
            pid,
            start,
        }
    }

    #[test]
    fn reservations_hold_the_budget_so_n_workers_overshoot_by_at_most_one_run() {
        let dir = tempfile::tempdir().unwrap();
        let layout = crate::layout::Layout::new(dir.path());
        std::fs::create_dir_all(layout.state()).unwrap();
        let budget = Budget {
            usd_per_day: Some(Usd::from_f64(1.0)),
            estimate_usd: Some(Usd::from_f64(0.4)),
            ..Budget::default()
        };
        let now = crate::timeutil::now_epoch();
        // Twenty workers claiming one after another while nothing has ended. Each is this
        // test's process under another start time (so a check never takes a reservation
        // for its own); after each, the file is rewritten to the real start, so every
        // reservation is of a live process.
        let me = Holder::this("w").unwrap();
        let at = |k: u64| holder(me.pid, me.start + k);
        let mut guards = Vec::new();
        let mut went = 0;
        for k in 0..20 {
            match check_and_reserve(&layout, &budget, &at(k), 7200, now).unwrap() {
                Decision::Go(g) => {
                    went += 1;
                    guards.push(g);
                }
                Decision::Wait(why) => {
                    assert!(why.contains("reserved $"), "{why}");
                    break;
                }
                Decision::Reached(r) => panic!("{r:?}"),
            }
            let mut book = read_book(&layout.state()).unwrap();
            for r in &mut book.reservations {
                r.start = me.start;
                r.pid = me.pid;
            }
            write_book(&layout.state(), &book).unwrap();
        }
        assert_eq!(
            went, 3,
            "$1.00 at $0.40 a run: three runs, not one per worker"
        );
        let live = read_live(&layout.state(), now).unwrap();
        assert_eq!(Reserved::of(&live).usd_micros, 1_200_000);
        assert_eq!(
            Reserved::of(&live).words(&budget),
            "reserved $1.20 for 3 running attempts"
        );
        // A reservation older than the cap, or of a process gone, holds nothing.
        assert!(
            read_live(&layout.state(), now + 7200 + 61)
                .unwrap()
                .is_empty()
        );
        let mut book = read_book(&layout.state()).unwrap();
        book.reservations[0].pid = i32::MAX;
        write_book(&layout.state(), &book).unwrap();
        assert_eq!(read_live(&layout.state(), now).unwrap().len(), 2);
        // Released: all of this process's reservations go (the guards were taken under
        // the starts the test rewrote, so the release names the live one).
        drop(guards);
        release(&layout.state(), me.pid, me.start).unwrap();
        assert!(read_live(&layout.state(), now).unwrap().is_empty());
    }

    #[test]
    fn a_symlinked_reservation_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "reservations[0]:\n").unwrap();
        std::os::unix::fs::symlink(&target, path(dir.path())).unwrap();
        assert!(matches!(
            read_live(dir.path(), 0),
            Err(ReserveError::Unreadable { .. })
        ));
    }
}
