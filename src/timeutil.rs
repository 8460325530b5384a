//! Timestamps in the formats the shared files use.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;

mod civil;
pub use civil::civil_from_days;

/// About a century: where a deadline lands when `now + d` does not fit in an `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `now + d` without the panic of `Instant + Duration` on overflow: a `d` too large for
/// the clock (a huge configured grace or interval) gives a deadline about a century away,
/// which in practice is never. Every deadline built from a configured duration uses it.
pub fn deadline(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

/// RFC 3339 UTC with milliseconds, e.g. `2026-11-30T07:40:35.123Z` (`docs/SPEC.md` §5 `ts`).
pub fn now_rfc3339_millis() -> String {
    rfc3339_millis(SystemTime::now())
}

/// Written by hand for the years 1970 to 9999 (every record of the event log carries
/// one, a busy fleet makes dozens a second, and the `time` crate's formatting, driven by a
/// format description, cost a twentieth of a respawn); the crate's for any other time.
pub fn rfc3339_millis(t: SystemTime) -> String {
    if let Ok(d) = t.duration_since(UNIX_EPOCH)
        && d.as_secs() < YEAR_10000
    {
        return rfc3339_millis_since_epoch(d);
    }
    let dt = OffsetDateTime::from(t);
    let fmt =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    dt.format(&fmt)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000Z".into())
}

/// 10000-01-01T00:00:00Z, in seconds since the epoch.
const YEAR_10000: u64 = 253_402_300_800;

fn rfc3339_millis_since_epoch(d: Duration) -> String {
    let secs = d.as_secs();
    let rem = secs % 86_400;
    let mut s = String::with_capacity(24);
    push_date(&mut s, secs / 86_400);
    for (sep, n) in [('T', rem / 3600), (':', rem / 60 % 60), (':', rem % 60)] {
        s.push(sep);
        push_digits(&mut s, n, 2);
    }
    s.push('.');
    push_digits(&mut s, u64::from(d.subsec_millis()), 3);
    s.push('Z');
    s
}

/// `yyyy-mm-dd` of day `days` since the epoch (a year below 10000).
fn push_date(s: &mut String, days: u64) {
    let (y, m, dd) = civil::civil_from_days(days as i64);
    push_digits(s, y as u64, 4);
    for n in [m, dd] {
        s.push('-');
        push_digits(s, n as u64, 2);
    }
}

fn push_digits(s: &mut String, n: u64, width: u32) {
    for i in (0..width).rev() {
        s.push(char::from(b'0' + (n / 10u64.pow(i) % 10) as u8));
    }
}

/// RFC 3339 UTC to the second, for `started_at`-style fields.
pub fn rfc3339(t: SystemTime) -> String {
    OffsetDateTime::from(t)
        .replace_nanosecond(0)
        .ok()
        .and_then(|d| d.format(&Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".into())
}

pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    OffsetDateTime::parse(s, &Rfc3339)
        .ok()
        .map(SystemTime::from)
}

/// `45s`, `4m`, `1h02m`: how far away something is, as a person says it.
pub fn coarse_duration(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// `yyyy-mm-dd` in UTC, the slot-log directory name: by hand for 1970 to 9999 like
/// [`rfc3339_millis`] (every spawn names its log by it), the `time` crate's elsewhere.
pub fn date_utc(t: SystemTime) -> String {
    if let Ok(d) = t.duration_since(UNIX_EPOCH)
        && d.as_secs() < YEAR_10000
    {
        let mut s = String::with_capacity(10);
        push_date(&mut s, d.as_secs() / 86_400);
        return s;
    }
    let fmt = format_description!("[year]-[month]-[day]");
    OffsetDateTime::from(t)
        .format(&fmt)
        .unwrap_or_else(|_| "1970-01-01".into())
}

pub fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

pub fn now_epoch() -> u64 {
    epoch_secs(SystemTime::now())
}

/// Now, in epoch milliseconds.
pub fn now_epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written formats (the timestamp and the date) agree with the `time` crate's, across leap days, century
    /// years, the ends of days and the range's ends.
    #[test]
    fn millisecond_timestamps_match_the_time_crates_format() {
        let fmt = format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
        );
        let by_crate = |t: SystemTime| OffsetDateTime::from(t).format(&fmt).unwrap();
        let mut secs: Vec<u64> = vec![
            0,
            59,
            86_399,
            86_400,
            951_782_400,   // 2000-02-29
            4_107_542_400, // 2100-03-01
            1_798_675_200, // 2026-12-31
            YEAR_10000 - 1,
        ];
        // A walk over four centuries at a step that visits every time of day in turn.
        let mut t = 0u64;
        while t < 13_000_000_000 {
            secs.push(t);
            t += 3_599_993;
        }
        for s in secs {
            for ms in [0u64, 7, 999] {
                let at = UNIX_EPOCH + Duration::from_millis(s * 1000 + ms);
                assert_eq!(rfc3339_millis(at), by_crate(at), "at {s}.{ms:03}");
                assert_eq!(date_utc(at), by_crate(at)[..10], "date at {s}.{ms:03}");
            }
        }
        assert_eq!(
            rfc3339_millis(UNIX_EPOCH + Duration::from_millis(1_796_300_435_123)),
            "2026-12-03T12:20:35.123Z"
        );
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(rfc3339_millis(before), "1969-12-31T23:59:59.000Z");
        assert_eq!(date_utc(before), "1969-12-31");
    }

    #[test]
    fn deadlines_never_overflow() {
        let now = Instant::now();
        let d = Duration::from_secs(5);
        assert_eq!(deadline(now, d), now + d);
        let far = deadline(now, Duration::from_secs(u64::MAX));
        assert!(far >= now + FAR_FUTURE);
        assert_eq!(deadline(now, Duration::MAX), far);
    }

    #[test]
    fn formats() {
        let t = UNIX_EPOCH + Duration::from_millis(1_764_488_435_123);
        assert_eq!(rfc3339_millis(t), "2025-11-30T07:40:35.123Z");
        assert_eq!(rfc3339(t), "2025-11-30T07:40:35Z");
        assert_eq!(date_utc(t), "2025-11-30");
        assert_eq!(
            parse_rfc3339("2025-11-30T07:40:35Z"),
            Some(UNIX_EPOCH + Duration::from_secs(1_764_488_435))
        );
        assert_eq!(parse_rfc3339("nope"), None);
    }
}
