//! Slot logs expire: the per-day folders `.red/tmp/logs/<yyyy-mm-dd>/` older than
//! `log.slot_log_days` are deleted, at start-up and daily (a periodic task on the blocking
//! pool). Only day-named entries directly inside `logs/` are candidates, and each goes
//! through [`DeleteRoot::remove`]: nothing outside `.red/tmp/logs/` is reachable, a symlink is
//! unlinked as a link and never followed, another mount is never entered.

use std::io;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::layout::Layout;
use crate::safe_delete::{DeleteError, DeleteRoot, RemovedKind};
use crate::slot_log_view::is_day;
use crate::timeutil::date_utc;

/// Once a day.
pub const INTERVAL: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum ExpireError {
    #[error(transparent)]
    Delete(#[from] DeleteError),
    #[error("{}: not a directory; not swept", .0.display())]
    NotADir(PathBuf),
    #[error("{}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    /// Some folders went (`done` says how many), these could not.
    #[error("{done}; kept: {}", kept.join("; "))]
    Kept { done: String, kept: Vec<String> },
}

/// Deletes the day folders older than `days` before `now`; the text says what it did.
pub fn expire(layout: &Layout, days: u64, now: SystemTime) -> Result<String, ExpireError> {
    let Some(root) = DeleteRoot::open(layout)? else {
        return Ok("nothing under .red/tmp".into());
    };
    let dir = layout.logs();
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(ExpireError::NotADir(dir)),
        Err(_) => return Ok("no slot logs".into()),
    }
    let age = Duration::from_secs(days.saturating_mul(86_400));
    let cutoff = date_utc(now.checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH));
    let mut old: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|source| ExpireError::Read {
            path: dir.clone(),
            source,
        })?
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|name| is_day(name) && name.as_str() < cutoff.as_str())
        .collect();
    old.sort();
    let mut removed = 0;
    let mut errors = Vec::new();
    for name in &old {
        match root.remove(&dir.join(name)) {
            Ok(r) if r.kind != RemovedKind::Absent => removed += 1,
            Ok(_) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    let text = format!("removed {removed} day folders older than {days} days (before {cutoff})");
    if errors.is_empty() {
        Ok(text)
    } else {
        Err(ExpireError::Kept {
            done: text,
            kept: errors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_day_folders_go_recent_ones_and_other_names_stay_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let logs = layout.logs();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep.log"), "mine").unwrap();
        for d in [
            "2026-11-20",
            "2026-11-23",
            "2026-11-24",
            "2026-12-01",
            "notes",
        ] {
            std::fs::create_dir_all(logs.join(d)).unwrap();
            std::fs::write(logs.join(d).join("afk-supervisor-slot-0.log"), "x").unwrap();
        }
        std::os::unix::fs::symlink(&outside, logs.join("2026-01-01")).unwrap();
        let now = crate::timeutil::parse_rfc3339("2026-12-01T12:00:00Z").unwrap();
        let text = expire(&layout, 7, now).unwrap();
        assert_eq!(
            text,
            "removed 3 day folders older than 7 days (before 2026-11-24)"
        );
        let mut left: Vec<String> = std::fs::read_dir(&logs)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["2026-11-24", "2026-12-01", "notes"]);
        // The link was removed as a link; what it pointed to is untouched.
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.log")).unwrap(),
            "mine"
        );
    }

    #[test]
    fn no_logs_folder_is_nothing_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.tmp()).unwrap();
        assert_eq!(
            expire(&layout, 7, SystemTime::now()).unwrap(),
            "no slot logs"
        );
    }
}
