//! Fleet-wide pacing of content-creating gh calls (comments, label edits, pull requests):
//! at most `tracker.max_writes_per_min` in any `tracker.pace_window_s` (60 s) across every
//! process of every checkout of one GitHub account on the host, well below GitHub's
//! secondary limit of 80 a minute (`docs/SPEC.md` §11.11). GitHub counts per account, not
//! per checkout: ten checkouts each allowed 20 would make 200.
//!
//! The budget is shared through one file per account, `$XDG_STATE_HOME/afk-supervisor/
//! pace-<login>` (`~/.local/state/…` without the variable; [`account_dir`]), the login being
//! the one `gh api user` names; a pace built without an account dir (tests, tools) uses the
//! checkout's `.red/state/tracker-pace`. The file holds the
//! recent write times (epoch milliseconds, one a line) and is read and rewritten only
//! under an exclusive `flock` of itself, so several workers respect one budget. A caller
//! over budget waits for the oldest time to leave the window, bounded by its deadline:
//! a wait that cannot end in time fails as transient, and nothing was written.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The pace file's name under `.red/state/`.
pub const FILE_NAME: &str = "tracker-pace";

/// Largest pace file read: far more lines than any budget keeps (an hour of the largest
/// hourly budget is 1.5 MB).
const MAX_BYTES: u64 = 2 << 20;

/// Where a GitHub identity's recent write times live when hosts beyond this one write with
/// it (`[cluster]`: etcd, `docs/SPEC.md` §11.23). GitHub counts per identity, not per host:
/// three hosts each keeping 500 an hour on their own would send 1,500. The store is the
/// cluster's; the rule (which writes count, when the next slot opens) stays here.
pub trait SharedWindows: Send + Sync {
    /// Where `login`'s times are kept, for the messages that name the budget.
    fn place(&self, login: &str) -> String;
    /// `login`'s recent write times (epoch milliseconds) and the version they were read at.
    fn load(&self, login: &str) -> Result<(Vec<u64>, i64), SharedError>;
    /// Stores `times` when nobody stored since `version`; `Ok(false)` when someone did
    /// (the caller looks again), an error when the store could not be asked.
    fn store(&self, login: &str, times: &[u64], version: i64) -> Result<bool, SharedError>;
}

/// The shared windows could not be read or written: where, and the store's own error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{place}: {source}")]
pub struct SharedError {
    pub place: String,
    #[source]
    pub source: std::sync::Arc<dyn std::error::Error + Send + Sync>,
}

/// Two failures are the same when they say the same of the same place.
impl PartialEq for SharedError {
    fn eq(&self, other: &Self) -> bool {
        self.place == other.place && self.source.to_string() == other.source.to_string()
    }
}

impl Eq for SharedError {}

static SHARED: OnceLock<Box<dyn SharedWindows>> = OnceLock::new();

/// From now on this process keeps every identity's write windows in `store` (once per
/// process; a second call changes nothing).
pub fn share_through(store: Box<dyn SharedWindows>) {
    let _ = SHARED.set(store);
}

fn shared() -> Option<&'static dyn SharedWindows> {
    SHARED.get().map(|b| b.as_ref())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pace {
    file: PathBuf,
    /// The identity the budget is for, once known ([`Pace::for_login`]): the key of the
    /// shared windows.
    login: Option<String>,
    budget: usize,
    window: Duration,
    /// The hourly budget (GitHub's 500 writes an hour per identity) and its window.
    hourly: usize,
    hour: Duration,
    /// Where the per-account budgets live; `None`: this checkout's file is the budget.
    account_dir: Option<PathBuf>,
}

/// The host's directory of per-account budgets: `$XDG_STATE_HOME/afk-supervisor` (an
/// absolute path only, as the XDG spec asks), else `$HOME/.local/state/afk-supervisor`;
/// `None` without either.
pub fn account_dir() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".local/state"))
        })?;
    Some(state.join("afk-supervisor"))
}

/// A login as one path component, of a file or of a key: GitHub's alphabet (`A-Z a-z 0-9
/// -`, an app's `[bot]`) lower-cased (logins are case-insensitive), anything else `_`, at
/// most 64 characters.
pub fn login_slug(login: &str) -> String {
    login
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// A login's pace file name.
fn login_file_name(login: &str) -> String {
    format!("pace-{}", login_slug(login))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaceError {
    /// The budget stays spent past the caller's deadline.
    #[error(
        "{file}: {budget} writes in the last {window_s}s; the next slot opens past the call's deadline"
    )]
    Exhausted {
        file: String,
        budget: usize,
        window_s: u64,
    },
    /// Another process held the pace file's lock until the caller's deadline (a stopped
    /// process mid-write, or someone's `flock`): waiting on it blindly would outlive the
    /// call's deadline.
    #[error("{file}: locked by another process past the call's deadline")]
    Locked { file: String },
    /// The hourly budget is spent: the next slot opens in `wait_s`, too long to wait in a
    /// call; the caller pauses the fleet until then.
    #[error(
        "{file}: {budget} writes in the last {hour_s}s (tracker.max_writes_per_hour); the next slot opens in {wait_s}s"
    )]
    HourSpent {
        file: String,
        budget: usize,
        hour_s: u64,
        wait_s: u64,
    },
    #[error("{0}")]
    File(String),
    /// The shared windows could not be read or written (etcd unavailable): nothing was
    /// written, and the call is tried again later.
    #[error("shared write windows: {0}")]
    Shared(#[from] SharedError),
}

/// What the hourly window counts beyond its length (see `try_take`).
const HOUR_MARGIN_MS: u64 = 2000;

/// How often a held pace lock is tried again.
const LOCK_POLL: Duration = Duration::from_millis(20);

/// One look at the budget.
enum Look {
    /// A write was taken and recorded.
    Taken,
    /// The budget is spent until the oldest write leaves the window, this long from now.
    Spent(Duration),
    /// The hourly budget is spent until this long from now.
    HourSpent(Duration),
    /// Another process holds the lock.
    Busy,
}

fn now_ms() -> u64 {
    crate::timeutil::now_epoch_ms()
}

impl Pace {
    /// `budget` writes per `window` through the pace file under `state_dir`.
    pub fn new(state_dir: &Path, budget: u64, window: Duration) -> Pace {
        Pace {
            file: state_dir.join(FILE_NAME),
            budget: usize::try_from(budget.max(1)).unwrap_or(usize::MAX),
            window: window.max(Duration::from_millis(1)),
            hourly: usize::MAX,
            hour: Duration::from_secs(3600),
            account_dir: None,
            login: None,
        }
    }

    /// At most `budget` writes per `hour` as well (`tracker.max_writes_per_hour`): spent, a
    /// write waits for the next slot when it opens within the call's deadline, and is
    /// refused at once ([`PaceError::HourSpent`]) when it does not.
    pub fn hourly(mut self, budget: u64, hour: Duration) -> Pace {
        self.hourly = usize::try_from(budget.max(1)).unwrap_or(usize::MAX);
        self.hour = hour.max(Duration::from_millis(1));
        self
    }

    /// The budget is the account's on this host, in `dir` ([`account_dir`]), once the
    /// login is known ([`Pace::for_login`]); `None` keeps the checkout's file.
    pub fn per_account(mut self, dir: Option<PathBuf>) -> Pace {
        self.account_dir = dir;
        self
    }

    /// Whether the budget is per account (the login must be known before a write): on
    /// this host's account file, or in the windows the hosts share.
    pub fn is_per_account(&self) -> bool {
        self.account_dir.is_some() || shared().is_some()
    }

    /// This pace for the account `login`: `pace-<login>` in the account dir, shared by every
    /// checkout on the host; unchanged when the pace is not per account.
    pub fn for_login(&self, login: &str) -> Pace {
        let login = Some(login.to_string());
        let Some(dir) = &self.account_dir else {
            return Pace {
                login,
                ..self.clone()
            };
        };
        Pace {
            file: dir.join(login_file_name(&login.clone().unwrap_or_default())),
            account_dir: None,
            login,
            ..self.clone()
        }
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Takes one write from the budget, waiting while it is spent, until `deadline`.
    pub fn acquire(&self, deadline: Instant) -> Result<(), PaceError> {
        loop {
            let wait = match self.try_take()? {
                Look::Taken => return Ok(()),
                Look::Spent(wait) => wait,
                // Waited for like the minute's when the slot opens within the call's
                // deadline; else refused at once, and the caller pauses the fleet.
                Look::HourSpent(wait) if Instant::now() + wait <= deadline => wait,
                Look::HourSpent(wait) => {
                    return Err(PaceError::HourSpent {
                        file: self.place(),
                        budget: self.hourly,
                        hour_s: self.hour.as_secs(),
                        // Whole seconds, rounded up: the pause it becomes ends no earlier.
                        wait_s: u64::try_from(wait.as_millis().div_ceil(1000))
                            .unwrap_or(u64::MAX)
                            .max(1),
                    });
                }
                Look::Busy => {
                    if Instant::now() + LOCK_POLL > deadline {
                        return Err(PaceError::Locked { file: self.place() });
                    }
                    LOCK_POLL
                }
            };
            if Instant::now() + wait > deadline {
                return Err(PaceError::Exhausted {
                    file: self.place(),
                    budget: self.budget,
                    window_s: self.window.as_secs(),
                });
            }
            // Never under the lock: the others keep taking and freeing slots meanwhile.
            std::thread::sleep(wait);
        }
    }

    /// Where the budget is kept, for a message: the shared windows' key or the file.
    fn place(&self) -> String {
        match (shared(), &self.login) {
            (Some(store), Some(login)) => store.place(login),
            _ => self.file.display().to_string(),
        }
    }

    /// One look at the budget, never waiting: in the shared windows when the hosts share
    /// them and the identity is known, else under the file's lock.
    fn try_take(&self) -> Result<Look, PaceError> {
        match (shared(), &self.login) {
            (Some(store), Some(login)) => self.try_take_shared(store, login),
            _ => self.try_take_file(),
        }
    }

    /// One compare-and-swap of the shared windows: a write taken only when nobody changed
    /// them since they were read, so the hosts together keep one budget.
    fn try_take_shared(&self, store: &dyn SharedWindows, login: &str) -> Result<Look, PaceError> {
        let (times, version) = store.load(login)?;
        let (look, keep) = self.judge(times, now_ms());
        match keep {
            Some(times) => match store.store(login, &times, version)? {
                true => Ok(look),
                false => Ok(Look::Busy),
            },
            None => Ok(look),
        }
    }

    /// One look under the file's lock, never waiting for it.
    fn try_take_file(&self) -> Result<Look, PaceError> {
        let named =
            |e: &dyn std::fmt::Display| PaceError::File(format!("{}: {e}", self.file.display()));
        if let Some(dir) = self.file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| named(&e))?;
        }
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(false);
        let mut f = crate::fsutil::open_regular(&self.file, opts, crate::fsutil::Links::Refuse)
            .map_err(|e| named(&e))?
            .ok_or_else(|| named(&"vanished while opened"))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(Look::Busy),
            Err(std::fs::TryLockError::Error(e)) => return Err(named(&e)),
        }
        let mut bytes = Vec::new();
        (&mut f)
            .take(MAX_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| named(&e))?;
        let text = String::from_utf8_lossy(&bytes);
        let times: Vec<u64> = text
            .lines()
            .filter_map(|l| l.trim().parse::<u64>().ok())
            .collect();
        let (look, keep) = self.judge(times, now_ms());
        if let Some(times) = keep {
            let body: String = times.iter().map(|t| format!("{t}\n")).collect();
            f.set_len(0).map_err(|e| named(&e))?;
            f.seek(SeekFrom::Start(0)).map_err(|e| named(&e))?;
            f.write_all(body.as_bytes()).map_err(|e| named(&e))?;
        }
        Ok(look)
    }

    /// The rule, wherever the times are kept: the answer for a write at `now`, and the
    /// times to keep when it was taken (`None`: nothing to store).
    fn judge(&self, times: Vec<u64>, now: u64) -> (Look, Option<Vec<u64>>) {
        let window_ms = u64::try_from(self.window.as_millis()).unwrap_or(u64::MAX);
        // A write reaches GitHub a moment after its stamp here (gh's start, the network):
        // the hour counts that much longer, so a slot never opens here before GitHub's.
        let hour_ms = u64::try_from(self.hour.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(HOUR_MARGIN_MS);
        let kept_ms = window_ms.max(if self.hourly == usize::MAX {
            0
        } else {
            hour_ms
        });
        let mut times: Vec<u64> = times
            .into_iter()
            // A time in the future is another clock's or garbage: it is kept no longer
            // than a window from now.
            .map(|t| t.min(now))
            .filter(|t| now.saturating_sub(*t) < kept_ms)
            .collect();
        times.sort_unstable();
        let within = |w: u64| -> Vec<u64> {
            times
                .iter()
                .copied()
                .filter(|t| now.saturating_sub(*t) < w)
                .collect()
        };
        let hour = within(hour_ms);
        if self.hourly != usize::MAX && hour.len() >= self.hourly {
            let oldest = hour[hour.len() - self.hourly];
            let wait_ms = (oldest + hour_ms).saturating_sub(now).max(1);
            return (Look::HourSpent(Duration::from_millis(wait_ms)), None);
        }
        let minute = within(window_ms);
        if minute.len() >= self.budget {
            let oldest = minute[minute.len() - self.budget];
            let wait_ms = (oldest + window_ms).saturating_sub(now).max(1);
            return (Look::Spent(Duration::from_millis(wait_ms)), None);
        }
        times.push(now);
        (Look::Taken, Some(times))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The shared windows of a cluster as one value with a version, losing the race once
    /// when told to (another host stored between the read and the write).
    #[derive(Default)]
    struct Store {
        kept: Mutex<(Vec<u64>, i64)>,
        lose_next: Mutex<bool>,
    }

    impl SharedWindows for Store {
        fn place(&self, login: &str) -> String {
            format!("store {login}")
        }
        fn load(&self, _: &str) -> Result<(Vec<u64>, i64), SharedError> {
            Ok(self.kept.lock().unwrap().clone())
        }
        fn store(&self, _: &str, times: &[u64], version: i64) -> Result<bool, SharedError> {
            let mut kept = self.kept.lock().unwrap();
            if std::mem::take(&mut *self.lose_next.lock().unwrap()) || kept.1 != version {
                kept.1 += 1;
                return Ok(false);
            }
            *kept = (times.to_vec(), version + 1);
            Ok(true)
        }
    }

    #[test]
    fn hosts_sharing_the_windows_keep_one_budget_and_a_lost_race_looks_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::default();
        // Two hosts, each with its own state dir, one identity.
        let a = Pace::new(&dir.path().join("a"), 100, Duration::from_secs(60))
            .hourly(3, Duration::from_secs(600))
            .for_login("bot");
        let b = Pace::new(&dir.path().join("b"), 100, Duration::from_secs(60))
            .hourly(3, Duration::from_secs(600))
            .for_login("bot");
        assert!(matches!(a.try_take_shared(&store, "bot"), Ok(Look::Taken)));
        *store.lose_next.lock().unwrap() = true;
        assert!(matches!(b.try_take_shared(&store, "bot"), Ok(Look::Busy)));
        assert!(matches!(b.try_take_shared(&store, "bot"), Ok(Look::Taken)));
        assert!(matches!(a.try_take_shared(&store, "bot"), Ok(Look::Taken)));
        assert!(matches!(
            b.try_take_shared(&store, "bot"),
            Ok(Look::HourSpent(_))
        ));
        assert_eq!(store.kept.lock().unwrap().0.len(), 3);
        // Neither host's own file was used.
        assert!(!dir.path().join("a").join(FILE_NAME).exists());
        assert!(!dir.path().join("b").join(FILE_NAME).exists());
    }

    #[test]
    fn an_accounts_budget_is_one_file_whatever_the_checkout() {
        let dir = tempfile::tempdir().unwrap();
        let accounts = dir.path().join("accounts");
        let a = Pace::new(&dir.path().join("a"), 2, Duration::from_secs(600))
            .per_account(Some(accounts.clone()));
        let b = Pace::new(&dir.path().join("b"), 2, Duration::from_secs(600))
            .per_account(Some(accounts.clone()));
        assert_eq!(
            a.for_login("Fleet-Bot").file(),
            accounts.join("pace-fleet-bot")
        );
        assert_eq!(a.for_login("../x").file(), accounts.join("pace-___x"));
        let now = Instant::now();
        a.for_login("fleet-bot").acquire(now).unwrap();
        b.for_login("FLEET-BOT").acquire(now).unwrap();
        assert!(a.for_login("fleet-bot").acquire(now).is_err());
        // Another account has its own budget.
        b.for_login("other").acquire(now).unwrap();
    }

    #[test]
    fn the_budget_holds_within_a_window_and_frees_as_writes_age() {
        let dir = tempfile::tempdir().unwrap();
        let pace = Pace::new(dir.path(), 3, Duration::from_millis(400));
        let far = Instant::now() + Duration::from_secs(30);
        for _ in 0..3 {
            pace.acquire(far).unwrap();
        }
        // Spent: a caller with no time to wait fails, nothing recorded.
        let e = pace.acquire(Instant::now()).unwrap_err();
        assert!(matches!(e, PaceError::Exhausted { budget: 3, .. }), "{e}");
        let recorded = std::fs::read_to_string(pace.file()).unwrap();
        assert_eq!(recorded.lines().count(), 3);
        let first: u64 = recorded.lines().next().unwrap().parse().unwrap();
        // One that may wait gets the slot once the oldest write leaves the window: its
        // stamp (the file's own clock, not the test's) lies a whole window after it.
        pace.acquire(far).unwrap();
        let times: Vec<u64> = std::fs::read_to_string(pace.file())
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        // Aged-out writes are dropped: what is left lies within one window of the newest.
        assert!((1..=3).contains(&times.len()), "{times:?}");
        let newest = *times.last().unwrap();
        assert!(newest >= first + 400, "{first} then {times:?}");
        assert!(times.iter().all(|t| newest - t < 400), "{times:?}");
    }

    #[test]
    fn the_hourly_budget_refuses_at_once_and_frees_as_writes_age() {
        let dir = tempfile::tempdir().unwrap();
        let pace = Pace::new(dir.path(), 10, Duration::from_millis(100))
            .hourly(3, Duration::from_millis(600));
        // (the window counts HOUR_MARGIN_MS more)
        let far = Instant::now() + Duration::from_secs(30);
        for _ in 0..3 {
            pace.acquire(far).unwrap();
        }
        // Spent for the hour: refused at once when the slot opens past the deadline.
        let asked = Instant::now();
        let e = pace
            .acquire(asked + Duration::from_millis(500))
            .unwrap_err();
        assert!(asked.elapsed() < Duration::from_millis(300), "waited");
        assert!(matches!(e, PaceError::HourSpent { budget: 3, .. }), "{e}");
        assert!(e.to_string().contains("tracker.max_writes_per_hour"), "{e}");
        assert_eq!(
            std::fs::read_to_string(pace.file())
                .unwrap()
                .lines()
                .count(),
            3
        );
        // A caller that may wait that long gets the slot.
        pace.acquire(far).unwrap();
        assert!(asked.elapsed() >= Duration::from_millis(600), "no wait");
    }

    #[test]
    fn a_lock_held_elsewhere_fails_the_call_at_its_deadline_not_never() {
        let dir = tempfile::tempdir().unwrap();
        let pace = Pace::new(dir.path(), 5, Duration::from_secs(60));
        pace.acquire(Instant::now()).unwrap();
        // Another open of the file holds the flock (as a stopped process mid-write would).
        let holder = std::fs::File::open(pace.file()).unwrap();
        holder.lock().unwrap();
        let e = pace
            .acquire(Instant::now() + Duration::from_millis(200))
            .unwrap_err();
        assert!(matches!(e, PaceError::Locked { .. }), "{e}");
        assert!(e.to_string().contains(FILE_NAME), "{e}");
        drop(holder);
        pace.acquire(Instant::now()).unwrap();
        let recorded = std::fs::read_to_string(pace.file()).unwrap();
        assert_eq!(
            recorded.lines().count(),
            2,
            "the refused call took no write"
        );
    }

    #[test]
    fn garbage_lines_are_ignored_and_a_fifo_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let pace = Pace::new(dir.path(), 2, Duration::from_secs(60));
        std::fs::write(pace.file(), "junk\n\u{0}\n99999999999999999999999\n").unwrap();
        pace.acquire(Instant::now()).unwrap();
        pace.acquire(Instant::now()).unwrap();
        assert!(pace.acquire(Instant::now()).is_err());
        std::fs::remove_file(pace.file()).unwrap();
        nix::unistd::mkfifo(pace.file(), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = pace.acquire(Instant::now()).unwrap_err();
        assert!(
            matches!(&e, PaceError::File(m) if m.contains(FILE_NAME)),
            "{e}"
        );
    }
}
