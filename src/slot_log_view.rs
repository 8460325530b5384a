//! The slot logs for people (`logs --slot`): the newest one of a slot, followed across
//! the per-day folders; and `logs`' time spans. The event log's own reading is
//! `crate::event_log::tail`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::event_log::tail::{LineTail, Seen, TailError};
use crate::layout::Layout;

#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error(transparent)]
    Tail(#[from] TailError),
    #[error("{0}: not a duration (e.g. 90s, 15m, 2h, 1d)")]
    Duration(String),
    #[error("no worker output for slot {slot} under {dir}")]
    NoSlotLog { slot: usize, dir: PathBuf },
}

/// `90`, `90s`, `15m`, `2h`, `1d`.
pub fn parse_duration(s: &str) -> Result<Duration, LogsError> {
    let bad = || LogsError::Duration(s.to_string());
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(secs).map(Duration::from_secs).ok_or_else(bad)
}

/// The slot's newest slot log: the one in the latest `logs/<yyyy-mm-dd>/` folder that
/// has one.
pub fn newest_slot_log(layout: &Layout, slot: usize) -> Result<PathBuf, LogsError> {
    let dir = layout.logs();
    let none = || LogsError::NoSlotLog {
        slot,
        dir: dir.clone(),
    };
    let mut days: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|_| none())?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|d| is_day(d))
        .collect();
    days.sort();
    days.iter()
        .rev()
        .map(|d| layout.slot_log(d, slot))
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .ok_or_else(none)
}

/// Follows one slot's worker output across the per-day folders: a worker writes to the
/// folder of the day it started in, so when a newer day's log of the slot appears (the
/// slot's next worker after midnight), the rest of the current one is read and the newer
/// one is followed from its start.
#[derive(Debug)]
pub struct SlotLogFollower {
    layout: Layout,
    slot: usize,
    current: PathBuf,
    tail: LineTail,
}

/// What [`SlotLogFollower::poll`] read: lines, and the path it moved to, if it did.
#[derive(Debug, Default)]
pub struct SlotLogLines {
    pub lines: Vec<Vec<u8>>,
    pub switched_to: Option<PathBuf>,
}

impl SlotLogFollower {
    /// Starts at the slot's newest log.
    pub fn new(layout: &Layout, slot: usize) -> Result<SlotLogFollower, LogsError> {
        let current = newest_slot_log(layout, slot)?;
        Ok(SlotLogFollower {
            layout: layout.clone(),
            slot,
            tail: LineTail::new(&current),
            current,
        })
    }

    pub fn current(&self) -> &Path {
        &self.current
    }

    /// The last line read so far that has no newline yet.
    pub fn partial(&self) -> &[u8] {
        self.tail.partial()
    }

    /// Everything new: the current file's growth, then, when a newer day's log exists,
    /// that file from its start.
    pub fn poll(&mut self) -> Result<SlotLogLines, LogsError> {
        let mut out = SlotLogLines::default();
        self.drain(&mut out.lines)?;
        if let Ok(newest) = newest_slot_log(&self.layout, self.slot)
            && newest != self.current
            && newest.parent() > self.current.parent()
        {
            // A torn last line of the old file is shown as it is: nothing appends to it
            // once its worker is gone.
            if !self.tail.partial().is_empty() {
                out.lines.push(self.tail.partial().to_vec());
            }
            self.tail = LineTail::new(&newest);
            self.current = newest.clone();
            out.switched_to = Some(newest);
            self.drain(&mut out.lines)?;
        }
        Ok(out)
    }

    fn drain(&mut self, lines: &mut Vec<Vec<u8>>) -> Result<(), LogsError> {
        for s in self.tail.poll()? {
            if let Seen::Line(l) = s {
                lines.push(l);
            }
        }
        Ok(())
    }
}

/// `yyyy-mm-dd`.
pub fn is_day(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert!(parse_duration("1w").is_err());
        assert!(parse_duration("m").is_err());
    }

    #[test]
    fn days() {
        assert!(is_day("2026-12-01"));
        assert!(!is_day("2026-12-1"));
        assert!(!is_day("notadaydir"));
    }
}
