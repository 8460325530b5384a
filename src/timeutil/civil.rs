//! The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
//! `civil_from_days`). Kept in a file of its own, with nothing but core arithmetic, so the
//! build script includes the same one (`#[path]`) for `--version`'s build date.

/// `(year, month, day)` of `days` since 1970-01-01, negative days included.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
