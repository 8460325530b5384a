//! Timestamps in the formats the shared files use.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;

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

pub fn rfc3339_millis(t: SystemTime) -> String {
    let dt = OffsetDateTime::from(t);
    let fmt =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    dt.format(&fmt)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000Z".into())
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

/// `yyyy-mm-dd` in UTC, the slot-log directory name.
pub fn date_utc(t: SystemTime) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
