//! The lease file, `cluster-lease.toon` in the supervisor lane: the supervisor's keeper
//! writes it after every renewal etcd answered, its workers read it before they claim and
//! while their agent runs.
//!
//! Times are milliseconds of `CLOCK_BOOTTIME`, one clock for every process of the host
//! that keeps counting through a suspend: a laptop that slept past its lease wakes with its
//! deadline already passed, where `CLOCK_MONOTONIC` would have stood still and let its
//! agents go on working issues other hosts took meanwhile.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::{read_small_text, replace_file};

/// The file's name in the supervisor lane.
pub const FILE_NAME: &str = "cluster-lease.toon";

const MAX_BYTES: u64 = 4 << 10;

/// One record: the host's lease, and when its agents must have stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The etcd lease id; 0 while the host holds none (etcd unavailable, or lost).
    pub lease: i64,
    /// The lease's TTL, milliseconds.
    pub ttl_ms: u64,
    /// `CLOCK_BOOTTIME` (ms) when the last renewal etcd answered was sent: etcd counts
    /// the TTL from when it received it, later, so the lease ends no earlier than this
    /// plus the TTL.
    pub renewed_boot_ms: u64,
    /// `<host>` of the holders (`<worker>@<host>`).
    pub host: String,
    /// Why there is no lease, while there is none.
    #[serde(default)]
    pub why: String,
    /// Whether this host holds the fleet's election under this lease (`P/leader`): the
    /// repo-wide sweeps and belts run on the leader only.
    #[serde(default)]
    pub leader: bool,
}

impl LeaseRecord {
    /// When the host's agents must have stopped (`CLOCK_BOOTTIME` ms): a quarter of the
    /// TTL (at least 250 ms) before the lease can end, time for an agent's SIGTERM, its
    /// grace, and the SIGKILL.
    pub fn stop_at_boot_ms(&self) -> u64 {
        (self.renewed_boot_ms + self.ttl_ms).saturating_sub(margin_ms(self.ttl_ms))
    }

    /// Whether a claim may be made or kept at `now_boot_ms`.
    pub fn live_at(&self, now_boot_ms: u64) -> bool {
        self.lease != 0 && now_boot_ms < self.stop_at_boot_ms()
    }

    /// Whether it is live now.
    pub fn live(&self) -> bool {
        self.live_at(boot_ms())
    }
}

/// What an agent's stop takes before the lease can end.
pub fn margin_ms(ttl_ms: u64) -> u64 {
    (ttl_ms / 4).max(250)
}

/// `CLOCK_BOOTTIME` now, milliseconds.
pub fn boot_ms() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
        .unwrap_or(0)
}

/// The lease file of the supervisor lane `lane`.
pub fn path(lane: &Path) -> PathBuf {
    lane.join(FILE_NAME)
}

/// The record in `lane`; `None` when there is none or it cannot be read (no lease then).
pub fn read(lane: &Path) -> Option<LeaseRecord> {
    let text = read_small_text(&path(lane), MAX_BYTES).ok()??;
    reddb_io_toon::from_str(&text).ok()
}

/// Whether this host leads the fleet now: a live lease won the election. Without a
/// cluster every host leads its own checkout (`true`).
pub fn leads(lane: &Path) -> bool {
    if super::active().is_none() {
        return true;
    }
    read(lane).is_some_and(|r| r.leader && r.live())
}

/// Replaces the record in `lane`.
pub fn write(lane: &Path, rec: &LeaseRecord) -> std::io::Result<()> {
    let text = reddb_io_toon::to_string(rec).map_err(std::io::Error::other)?;
    replace_file(&path(lane), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_comes_a_margin_before_the_lease_can_end() {
        let r = LeaseRecord {
            lease: 7,
            ttl_ms: 2000,
            renewed_boot_ms: 10_000,
            host: "h".into(),
            why: String::new(),
            leader: false,
        };
        assert_eq!(r.stop_at_boot_ms(), 11_500);
        assert!(r.live_at(11_499));
        assert!(!r.live_at(11_500));
        assert!(
            !LeaseRecord {
                lease: 0,
                ..r.clone()
            }
            .live_at(10_000)
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), None);
        write(dir.path(), &r).unwrap();
        assert_eq!(read(dir.path()), Some(r));
        assert!(boot_ms() > 0);
    }
}
