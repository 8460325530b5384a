//! Is a worker still making progress? Progress is the newest of: the worker's start, its
//! current attempt's last `liveness.toonl` record, its slot log's modification time, and
//! the last reading at which its tree's CPU moved above a floor ([`cpu_progressed`]; under
//! the built-in worker only the agent's processes count, not the worker's own polling).
//! The attempt dir also tells which issue the worker is on, for `status`, and the slot
//! log's last line why a worker exited 78. All of it is what a worker's files say, read by
//! the driver for the fleet.

use std::fs;
use std::path::Path;
use std::time::SystemTime;

use crate::fsutil::read_small_text;
use crate::layout::{self, Layout, WORKER_NAMESPACES};
use crate::supervisor::core::progress::Attempt;
use crate::timeutil::{epoch_secs, parse_rfc3339};

/// Largest `liveness.toonl` whose records are read (one record per agent move, so a
/// legitimate one stays far below); past it the file's modification time counts.
pub const MAX_LIVENESS_BYTES: u64 = 4 << 20;

/// A worker id is used as a path component: only ids that cannot escape the namespace.
fn safe_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The ids of the workers that have a directory in any worker namespace: one `readdir`
/// per namespace, whatever the fleet's size.
pub fn workers_with_dirs(layout: &Layout) -> std::collections::HashSet<String> {
    WORKER_NAMESPACES
        .iter()
        .filter_map(|ns| fs::read_dir(layout.worker_namespace(ns)).ok())
        .flat_map(|rd| rd.flatten())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// The most recently modified attempt dir of `worker_id` in any worker namespace.
pub fn current_attempt(layout: &Layout, worker_id: &str) -> Option<Attempt> {
    if !safe_id(worker_id) {
        return None;
    }
    let mut best: Option<(SystemTime, Attempt)> = None;
    for ns in WORKER_NAMESPACES {
        let dir = layout.worker_namespace(ns).join(worker_id);
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Some((issue, attempt)) = e.file_name().to_str().and_then(layout::parse_attempt_dir)
            else {
                continue;
            };
            // symlink_metadata: a symlinked "attempt" is not an attempt.
            let Ok(meta) = fs::symlink_metadata(e.path()) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if best.as_ref().is_none_or(|(t, _)| mtime > *t) {
                best = Some((
                    mtime,
                    Attempt {
                        dir: e.path(),
                        issue,
                        attempt,
                    },
                ));
            }
        }
    }
    best.map(|(_, a)| a)
}

/// The time of the last complete record of `liveness.toonl` (its `ts` or `epoch` field),
/// else the file's modification time.
pub fn liveness_time(attempt_dir: &Path) -> Option<SystemTime> {
    let path = attempt_dir.join("liveness.toonl");
    // Only a regular file is looked at (a symlinked or FIFO "liveness" is no sign of life),
    // and at most MAX_LIVENESS_BYTES of it; a longer one counts by its modification time.
    let meta = fs::symlink_metadata(&path)
        .ok()
        .filter(fs::Metadata::is_file)?;
    let from_record = read_small_text(&path, MAX_LIVENESS_BYTES)
        .ok()
        .flatten()
        .and_then(|text| last_record_time(&text));
    from_record.or_else(|| meta.modified().ok())
}

fn last_record_time(text: &str) -> Option<SystemTime> {
    let value = crate::toonl::last_record(text)?;
    if let Some(ts) = value.get("ts").and_then(|v| v.as_str()) {
        return parse_rfc3339(ts);
    }
    let epoch = value.get("epoch").and_then(serde_json::Value::as_u64)?;
    Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(epoch))
}

/// The newest sign of life, in epoch seconds.
pub fn progress_epoch(started_epoch: u64, log: &Path, attempt: Option<&Attempt>) -> u64 {
    let log_t = fs::metadata(log)
        .and_then(|m| m.modified())
        .map(epoch_secs)
        .unwrap_or(0);
    let live_t = attempt
        .and_then(|a| liveness_time(&a.dir))
        .map(epoch_secs)
        .unwrap_or(0);
    started_epoch.max(log_t).max(live_t)
}

/// Longest issue title kept for `status` (the whole title reaches the agent as a file).
const TITLE_MAX_CHARS: usize = 200;

/// The title of the issue `a` works, from its `afk.state.json` (read once per issue by the
/// caller), cut to [`TITLE_MAX_CHARS`]; `None` while the worker has not recorded it.
pub fn attempt_title(a: &Attempt) -> Option<String> {
    let t = crate::attempt_state::AttemptState::read(&a.dir)
        .ok()
        .flatten()
        .and_then(|st| st.current)
        .filter(|c| c.number.is_none_or(|n| n == a.issue))
        .and_then(|c| c.title)
        .filter(|t| !t.trim().is_empty())?;
    Some(match t.char_indices().nth(TITLE_MAX_CHARS) {
        Some((end, _)) => format!("{}…", &t[..end]),
        None => t,
    })
}

/// Most bytes of a slot log's end read for a reason (a parked slot's, the fleet
/// circuit's).
const REASON_TAIL_BYTES: u64 = 4096;
/// Longest reason kept: a worker's one-line error naming a key and a file fits.
const REASON_MAX_CHARS: usize = 400;

/// The last [`REASON_TAIL_BYTES`] of a slot log as text: never through a link, never
/// anything but a regular file; `None` when it cannot be read.
fn log_end(log: &std::path::Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    let mut f = crate::fsutil::open_regular(log, opts, crate::fsutil::Links::Refuse).ok()??;
    let len = f.metadata().map_or(0, |m| m.len());
    let mut tail = Vec::new();
    f.seek(SeekFrom::Start(len.saturating_sub(REASON_TAIL_BYTES)))
        .and_then(|_| f.take(REASON_TAIL_BYTES).read_to_end(&mut tail))
        .ok()?;
    Some(String::from_utf8_lossy(&tail).into_owned())
}

/// The reason an exit-78 worker gave: the last non-empty line of its slot log (a worker
/// reports its failure there as one line), bounded, never following a link.
pub fn fatal_reason_from_log(log: &std::path::Path) -> String {
    let fallback = || {
        format!(
            "worker exited {} (host misconfigured); see {}",
            crate::exit_code::CONFIG,
            log.display()
        )
    };
    let Some(text) = log_end(log) else {
        return fallback();
    };
    text.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(|l| {
            let l = l.strip_prefix("afk-supervisor: ").unwrap_or(l);
            match l.char_indices().nth(REASON_MAX_CHARS) {
                Some((end, _)) => format!("{}…", &l[..end]),
                None => l.to_string(),
            }
        })
        .unwrap_or_else(fallback)
}

/// The last `n` non-empty lines of a slot log, each an excerpt, read as
/// [`fatal_reason_from_log`] reads it; none when it cannot be read.
pub fn last_lines(log: &std::path::Path, n: usize) -> Vec<String> {
    let Some(text) = log_end(log) else {
        return Vec::new();
    };
    let lines: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(crate::text::excerpt)
        .collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn newest_attempt_and_its_liveness_record() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let wdir = layout.worker_namespace("workers").join("w-1");
        fs::create_dir_all(wdir.join("7-a1")).unwrap();
        fs::create_dir_all(wdir.join("not-an-attempt")).unwrap();
        assert_eq!(current_attempt(&layout, "w-1").unwrap().issue, 7);
        std::thread::sleep(Duration::from_millis(20));
        fs::create_dir_all(wdir.join("9-a2")).unwrap();
        let a = current_attempt(&layout, "w-1").unwrap();
        assert_eq!((a.issue, a.attempt), (9, 2));
        assert!(current_attempt(&layout, "../w-1").is_none());
        assert!(current_attempt(&layout, "nobody").is_none());

        fs::write(
            a.dir.join("liveness.toonl"),
            "[]{ts,stage}:\n\"2030-01-01T00:00:00.000Z\",work\n\"2030-01-01T00:00:10Z\",work\n\"2030-01-01T00:0",
        )
        .unwrap();
        let t = liveness_time(&a.dir).unwrap();
        assert_eq!(epoch_secs(t), 1_893_456_010);
        assert_eq!(
            progress_epoch(5, &dir.path().join("nolog"), Some(&a)),
            1_893_456_010
        );
        // A log written after the record wins; the start wins over both when newer.
        assert_eq!(
            progress_epoch(2_000_000_000, &dir.path().join("nolog"), Some(&a)),
            2_000_000_000
        );
        // Garbage records fall back to the file's mtime.
        fs::write(a.dir.join("liveness.toonl"), "junk\n").unwrap();
        let mt = fs::metadata(a.dir.join("liveness.toonl"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(liveness_time(&a.dir), Some(mt));
    }

    #[test]
    fn a_liveness_file_that_is_not_a_regular_file_is_no_sign_of_life() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("liveness.toonl");
        // Neither waited on nor followed (a /dev/zero link would be read without end).
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(liveness_time(dir.path()), None);
        fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
        assert_eq!(liveness_time(dir.path()), None);
        // Past the cap only the modification time counts.
        fs::remove_file(&p).unwrap();
        let mut text = String::from("[]{ts,stage}:\n\"2030-01-01T00:00:00.000Z\",work\n");
        text.push_str(&"#".repeat(MAX_LIVENESS_BYTES as usize));
        text.push('\n');
        fs::write(&p, text).unwrap();
        let mt = fs::metadata(&p).unwrap().modified().unwrap();
        assert_eq!(liveness_time(dir.path()), Some(mt));
    }

    #[test]
    fn the_reason_is_the_logs_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("slot.log");
        std::fs::write(
            &log,
            "tracker: local (requested)\nafk-supervisor: agent.command is not set (x)\n\n",
        )
        .unwrap();
        assert_eq!(fatal_reason_from_log(&log), "agent.command is not set (x)");
        let missing = dir.path().join("none.log");
        let fallback = format!("worker exited {} ", crate::exit_code::CONFIG);
        assert!(fatal_reason_from_log(&missing).starts_with(&fallback));
        let big = "y".repeat(10_000);
        std::fs::write(&log, format!("{big}\nlast one")).unwrap();
        assert_eq!(fatal_reason_from_log(&log), "last one");
    }

    #[test]
    fn a_logs_last_lines_are_read_without_following_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("slot-0.log");
        std::fs::write(&log, "one\ntwo\n\nthree\nError: token expired\n").unwrap();
        assert_eq!(
            last_lines(&log, 3),
            ["two", "three", "Error: token expired"]
        );
        assert_eq!(last_lines(&log, 9).len(), 4);
        let link = dir.path().join("link.log");
        std::os::unix::fs::symlink(&log, &link).unwrap();
        assert!(last_lines(&link, 3).is_empty());
        assert!(last_lines(&dir.path().join("none.log"), 3).is_empty());
    }
}
