//! A GitHub identity's write windows kept in etcd (`docs/SPEC.md` §11.23): every host of
//! the cluster takes its writes from one list of recent write times per identity, changed by
//! compare-and-swap, so GitHub's 80 a minute and 500 an hour hold for the identity however
//! many hosts write with it. The rule (which times count, when the next slot opens) is
//! `tracker::pace`'s; this is where the times are kept and how they are changed.
//!
//! The key is the identity's, not the repository's: `afk/github/<login>/writes` under the
//! default prefix, so the repositories of one identity share it; with `cluster.prefix` set
//! it goes under that prefix (`<prefix>github/<login>/writes`), the operator having asked
//! for a fleet of its own. The value is a JSON list of epoch milliseconds, the last hour's
//! only (pruned at every write), a few KiB at GitHub's 500.

use crate::config::WriteBudgets;
use crate::tracker::pace::{SharedError, SharedWindows, login_slug};

use super::Cluster;
use super::etcd::{Cmp, Op};

/// The longest list of times a value is read into: far above any hourly budget.
const MAX_TIMES: usize = 100_000;

/// Where identity `login`'s write times live under `root` (`afk/` or the fleet's prefix).
pub fn key(root: &str, login: &str) -> String {
    format!("{root}github/{}/writes", login_slug(login))
}

/// The times a value holds: numbers only, a garbled value counting as none (its next write
/// replaces it; GitHub's own limit still refuses what would go past it).
pub fn parse(value: &str) -> Vec<u64> {
    serde_json::from_str::<Vec<serde_json::Value>>(value)
        .unwrap_or_default()
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .take(MAX_TIMES)
        .collect()
}

/// The cluster as the shared store of the tracker's write windows.
pub struct EtcdWindows(pub &'static Cluster);

impl SharedWindows for EtcdWindows {
    fn place(&self, login: &str) -> String {
        format!("etcd {}", key(self.0.identity_root(), login))
    }

    fn load(&self, login: &str) -> Result<(Vec<u64>, i64), SharedError> {
        let k = key(self.0.identity_root(), login);
        match self.0.etcd.get(&k) {
            Ok(Some(kv)) => Ok((parse(&kv.value), kv.mod_revision)),
            Ok(None) => Ok((Vec::new(), 0)),
            Err(e) => Err(named(&k, e)),
        }
    }

    fn store(&self, login: &str, times: &[u64], version: i64) -> Result<bool, SharedError> {
        let k = key(self.0.identity_root(), login);
        let value = serde_json::to_string(times).map_err(|e| named(&k, e))?;
        let cmp = if version == 0 {
            Cmp::Absent(k.clone())
        } else {
            Cmp::ModifiedAt(k.clone(), version)
        };
        let put = Op::Put {
            key: k.clone(),
            value,
            lease: 0,
        };
        self.0
            .etcd
            .txn(&[cmp], &[put], &[])
            .map(|a| a.succeeded)
            .map_err(|e| named(&k, e))
    }
}

/// The etcd key a failure was met at, with the failure.
fn named(key: &str, e: impl std::error::Error + Send + Sync + 'static) -> SharedError {
    SharedError {
        place: format!("etcd {key}"),
        source: std::sync::Arc::new(e),
    }
}

/// One identity's use of its windows, for `status --fleet`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Use {
    pub login: String,
    /// Writes in the last window (`tracker.pace_window_s`, a minute) and in the last hour
    /// (`tracker.pace_hour_s`), by every host.
    pub minute: u64,
    pub hour: u64,
    /// The budgets they count against (the asking host's `tracker.max_writes_per_min` and
    /// `tracker.max_writes_per_hour`: every host of a cluster should set the same), and what
    /// is left of them.
    pub per_minute: u64,
    pub per_hour: u64,
    pub minute_left: u64,
    pub hour_left: u64,
}

/// Every identity's use at `now_ms` from the values under the windows' root, against
/// `budgets`.
pub fn uses(values: &[(String, String)], root: &str, now_ms: u64, b: WriteBudgets) -> Vec<Use> {
    let (per_minute, per_hour) = (b.per_window, b.per_hour);
    values
        .iter()
        .filter_map(|(k, v)| {
            let login = k
                .strip_prefix(&format!("{root}github/"))?
                .strip_suffix("/writes")?;
            let times = parse(v);
            let within = |ms: u64| {
                times
                    .iter()
                    .filter(|t| now_ms.saturating_sub(**t) < ms)
                    .count() as u64
            };
            let (minute, hour) = (within(b.window_s * 1000), within(b.hour_s * 1000));
            Some(Use {
                login: login.to_string(),
                minute,
                hour,
                per_minute,
                per_hour,
                minute_left: per_minute.saturating_sub(minute),
                hour_left: per_hour.saturating_sub(hour),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_is_one_key_whatever_its_case_and_nothing_escapes_the_root() {
        assert_eq!(key("afk/", "Octo-Cat"), "afk/github/octo-cat/writes");
        assert_eq!(key("afk/", "app[bot]"), "afk/github/app_bot_/writes");
        assert_eq!(key("p/", "../x"), "p/github/___x/writes");
    }

    #[test]
    fn garbage_counts_as_no_times_and_numbers_are_kept() {
        assert_eq!(parse("[1, 2, \"x\", 3]"), vec![1, 2, 3]);
        assert!(parse("not json").is_empty());
        assert!(parse("{\"a\": 1}").is_empty());
    }

    #[test]
    fn use_counts_the_minute_and_the_hour_per_identity() {
        let now = 10_000_000;
        let values = vec![
            (
                "afk/github/a/writes".to_string(),
                serde_json::to_string(&[now - 1_000, now - 120_000, now - 4_000_000]).unwrap(),
            ),
            ("afk/github/b/other".to_string(), "[1]".to_string()),
        ];
        assert_eq!(
            uses(
                &values,
                "afk/",
                now,
                WriteBudgets {
                    per_window: 20,
                    window_s: 60,
                    per_hour: 500,
                    hour_s: 3600
                }
            ),
            vec![Use {
                login: "a".into(),
                minute: 1,
                hour: 2,
                per_minute: 20,
                per_hour: 500,
                minute_left: 19,
                hour_left: 498,
            }]
        );
    }
}
