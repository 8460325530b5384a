//! What an agent says when the account, not the issue, stops it: read only from what
//! the CLI itself reports (an error result, error events, the last lines of stderr or of
//! plain output), never from the conversation, where an agent may well discuss limits. The phrases are the real CLIs'
//! (recorded in `tests/corpus/agents/real/`); a phrase not listed is the issue's failure, so a
//! new wording costs at worst a retry, never a pause of a healthy fleet.

use super::AccountWide;

/// The account-wide condition `text` reports, with the reset when it names one.
pub fn account_wide(text: &str, now_epoch: u64) -> Option<(AccountWide, Option<u64>)> {
    let lower = text.to_ascii_lowercase().replace('’', "'");
    // Claude Code: `Claude AI usage limit reached|1764684000` (epoch seconds).
    if let Some(i) = lower.find("usage limit reached|") {
        let digits: String = lower[i + "usage limit reached|".len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        return Some((AccountWide::UsageLimit, digits.parse().ok()));
    }
    const USAGE: [&str; 11] = [
        "usage limit reached",
        "hit your usage limit",
        "you've hit your limit",
        "hit your session limit",
        "hit your weekly limit",
        "hit your opus limit",
        "5-hour limit reached",
        "weekly limit reached",
        "session limit reached",
        "usage_limit_reached",
        "limit will reset",
    ];
    // Claude Code on a subscription: `You've hit your 5-hour limit · resets 1:48pm (UTC)`
    // (also session, weekly, Opus limits).
    let hit_limit = lower.match_indices("hit your ").any(|(i, _)| {
        let after = &lower[i + "hit your ".len()..];
        let near = &after.as_bytes()[..after.len().min(24)];
        near.windows(5).any(|w| w == b"limit")
    });
    if hit_limit || USAGE.iter().any(|p| lower.contains(p)) {
        return Some((AccountWide::UsageLimit, reset(&lower, now_epoch)));
    }
    const CREDIT: [&str; 5] = [
        "credit balance is too low",
        "insufficient_quota",
        "exceeded your current quota",
        // Codex: `Quota exceeded. Check your plan and billing details.`
        "quota exceeded",
        "check your plan and billing",
    ];
    if CREDIT.iter().any(|p| lower.contains(p)) {
        return Some((AccountWide::Credit, None));
    }
    const LOGIN: [&str; 11] = [
        "invalid api key",
        "incorrect api key",
        "fix external api key",
        "please run /login",
        "oauth token has expired",
        "authentication_error",
        "not logged in",
        "401 unauthorized",
        "403 forbidden",
        "token_expired",
        "invalid_api_key",
    ];
    if LOGIN.iter().any(|p| lower.contains(p)) {
        return Some((AccountWide::Login, None));
    }
    const OVERLOADED: [&str; 7] = [
        "overloaded_error",
        "api error: 529",
        "529 overloaded",
        "server is overloaded",
        "server_is_overloaded",
        // Codex, on 503 and capacity errors.
        "selected model is at capacity",
        "service unavailable",
    ];
    if OVERLOADED.iter().any(|p| lower.contains(p)) {
        return Some((AccountWide::Overloaded, None));
    }
    // Retries given up: Codex `exceeded retry limit, last status: 429 Too Many Requests`
    // (or a 5xx), Claude Code `API Error: Request rejected (429) · …`.
    if let Some(i) = lower.find("last status: ") {
        let status = &lower[i + "last status: ".len()..];
        if status.starts_with("429") {
            return Some((AccountWide::RateLimited, reset(&lower, now_epoch)));
        }
        if status.starts_with('5') {
            return Some((AccountWide::Overloaded, None));
        }
    }
    const RATE: [&str; 4] = [
        "request rejected (429)",
        "rate_limit_error",
        "rate_limit_exceeded",
        "429 too many requests",
    ];
    if RATE.iter().any(|p| lower.contains(p)) {
        return Some((AccountWide::RateLimited, reset(&lower, now_epoch)));
    }
    const UNREACHABLE: [&str; 15] = [
        "connection refused",
        "econnrefused",
        "econnreset",
        "connection to the api was lost",
        "enotfound",
        "getaddrinfo",
        "unable to connect",
        "waiting for network",
        "stream disconnected before completion",
        "error sending request",
        "network is unreachable",
        "dns error",
        "certificate",
        "api returned an empty or malformed response",
        "timed out waiting for",
    ];
    if UNREACHABLE.iter().any(|p| lower.contains(p)) {
        return Some((AccountWide::Unreachable, None));
    }
    None
}

/// The reset `lower` names in any of the CLIs' forms: relative (`try again in 2 days 3
/// hours`, `resets in 42m`) or wall-clock (`try again at 9:57 AM.`, `resets 9:54am (UTC)`).
pub fn reset(lower: &str, now_epoch: u64) -> Option<u64> {
    relative_reset(lower, now_epoch).or_else(|| wall_clock_reset(lower, now_epoch))
}

/// `try again in 2 days 3 hours 4 minutes` (Codex), `resets in 42m`: `now` plus that.
fn relative_reset(lower: &str, now_epoch: u64) -> Option<u64> {
    let at = ["try again in ", "resets in ", "reset in "]
        .iter()
        .find_map(|p| lower.find(p).map(|i| i + p.len()))?;
    let mut total: u64 = 0;
    let mut words = lower[at..].split(|c: char| c.is_whitespace() || c == ',' || c == '.');
    let mut found = false;
    while let Some(w) = words.next() {
        if w.is_empty() || w == "and" {
            continue;
        }
        let (num, unit) = match w.find(|c: char| !c.is_ascii_digit()) {
            Some(0) => break,
            Some(i) => (&w[..i], w[i..].to_string()),
            None => (w, words.next().unwrap_or("").to_string()),
        };
        let Ok(n) = num.parse::<u64>() else { break };
        let secs = match unit.trim_end_matches('s') {
            "day" | "d" => 86_400,
            "hour" | "h" | "hr" => 3600,
            "minute" | "m" | "min" => 60,
            "second" | "sec" => 1,
            _ => break,
        };
        total = total.saturating_add(n.saturating_mul(secs));
        found = true;
    }
    found.then(|| now_epoch.saturating_add(total))
}

/// `try again at 1:42 PM.` (Codex, in its own local time), `resets 9:54am (UTC)` (Claude
/// Code, naming the zone): the next such time of day after `now`, read in the zone the
/// text names (`UTC`, `GMT`, `UTC+2`, `+05:30`), else in the host's (its `TZ`, which the
/// agent inherits, so both read the clock alike).
fn wall_clock_reset(lower: &str, now_epoch: u64) -> Option<u64> {
    let (at, date) = ["try again at ", "resets at ", "resets ", "reset at "]
        .iter()
        .find_map(|p| {
            let i = lower.find(p)? + p.len();
            if lower[i..].starts_with(|c: char| c.is_ascii_digit()) {
                return Some((i, None));
            }
            let (month, day, n) = date_prefix(&lower[i..])?;
            Some((i + n, Some((month, day))))
        })?;
    let rest = &lower[at..];
    let digits = |s: &str| -> (u32, usize) {
        let n = s.bytes().take_while(u8::is_ascii_digit).count().min(2);
        (s[..n].parse().unwrap_or(0), n)
    };
    let (hour, n) = digits(rest);
    let mut rest = &rest[n..];
    let mut minutes = None;
    if let Some(r) = rest.strip_prefix(':') {
        let (m, n) = digits(r);
        if n != 2 || m > 59 {
            return None;
        }
        minutes = Some(m);
        rest = &r[n..];
    }
    let rest = rest.trim_start();
    let meridiem = ["am", "a.m.", "pm", "p.m."].into_iter().find(|p| {
        rest.strip_prefix(p)
            .is_some_and(|r| !r.starts_with(|c: char| c.is_ascii_alphabetic()))
    });
    let (hour, rest) = match meridiem {
        Some(p) if (1..=12).contains(&hour) => {
            let pm = p.starts_with('p');
            (hour % 12 + if pm { 12 } else { 0 }, &rest[p.len()..])
        }
        Some(_) => return None,
        // A bare number is no time of day: `resets 2 days from now` is not 2 o'clock.
        None if minutes.is_none() || hour > 23 => return None,
        None => (hour, rest),
    };
    let minute = minutes.unwrap_or(0);
    let offset = named_offset(rest).unwrap_or_else(|| host_offset(now_epoch));
    let day = 86_400i64;
    let now = i64::try_from(now_epoch).ok()?;
    let local_now = now + offset;
    let midnight = local_now - local_now.rem_euclid(day);
    let mut at = midnight + i64::from(hour) * 3600 + i64::from(minute) * 60 - offset;
    if at <= now {
        at += day;
    }
    // A reset on another day names its date (`Dec 8th, 2026 12:10 AM`): the first such
    // time of day on that date, within a year.
    if let Some((month, mday)) = date {
        let on_date = |t: i64| {
            let (_, m, d) = crate::timeutil::civil_from_days((t + offset).div_euclid(day));
            (m, d) == (month, mday)
        };
        let days = (0..=366).find(|k| on_date(at + k * day))?;
        at += days * day;
    }
    u64::try_from(at).ok()
}

/// The date Codex puts before the time of a reset on another day: `dec 8th, 2026 ` (the
/// text already lower-cased). Its month and day, and the bytes it takes.
fn date_prefix(s: &str) -> Option<(i64, i64, usize)> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let month = MONTHS.iter().position(|m| s.starts_with(m))? as i64 + 1;
    let mut i = s.find(|c: char| !c.is_ascii_alphabetic())?;
    i += s[i..].len() - s[i..].trim_start_matches('.').trim_start().len();
    let n = s[i..].bytes().take_while(u8::is_ascii_digit).count();
    let mday: i64 = s[i..i + n].parse().ok()?;
    if !(1..=31).contains(&mday) {
        return None;
    }
    i += n;
    for suffix in ["st", "nd", "rd", "th"] {
        if s[i..].starts_with(suffix) {
            i += 2;
            break;
        }
    }
    i += s[i..].len() - s[i..].trim_start_matches(',').trim_start().len();
    // The year, when the date gives one: not the hour that follows (no colon after it).
    let y = s[i..].bytes().take_while(u8::is_ascii_digit).count();
    if y == 4 && !s[i + y..].starts_with(':') {
        i += y;
        i += s[i..].len() - s[i..].trim_start_matches(',').trim_start().len();
    }
    s[i..]
        .starts_with(|c: char| c.is_ascii_digit())
        .then_some((month, mday, i))
}

/// The zone the text after a time names, as seconds east of UTC: `(utc)`, `utc`, `gmt`,
/// `z`, `utc+2`, `(utc-05:00)`, `+05:30`. `None` when it names none (or one it cannot
/// read, such as an IANA name: the host's zone is used then).
fn named_offset(after: &str) -> Option<i64> {
    let s = after.trim_start().trim_start_matches('(').trim_start();
    let s = s.trim_end_matches(|c: char| c == '.' || c == ')' || c.is_whitespace());
    let word: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "+-:".contains(*c))
        .collect();
    let signed = if let Some(r) = word
        .strip_prefix("utc")
        .or_else(|| word.strip_prefix("gmt"))
    {
        if r.is_empty() {
            return Some(0);
        }
        r
    } else if word == "z" {
        return Some(0);
    } else {
        word.as_str()
    };
    let (sign, r) = match signed.as_bytes().first()? {
        b'+' => (1, &signed[1..]),
        b'-' => (-1, &signed[1..]),
        _ => return None,
    };
    let (h, m) = match r.split_once(':') {
        Some((h, m)) => (h.parse::<i64>().ok()?, m.parse::<i64>().ok()?),
        None if r.len() == 4 => (r[..2].parse().ok()?, r[2..].parse().ok()?),
        None => (r.parse().ok()?, 0),
    };
    (h <= 14 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

/// The host's offset from UTC at `epoch`, seconds east (its `TZ` or `/etc/localtime`).
fn host_offset(epoch: u64) -> i64 {
    let Ok(t) = libc::time_t::try_from(epoch) else {
        return 0;
    };
    // SAFETY: localtime_r only writes the `tm` handed to it; both live on this stack.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if ok { tm.tm_gmtoff } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_phrases_are_account_wide() {
        assert_eq!(
            account_wide("Claude AI usage limit reached|1764684000", 0),
            Some((AccountWide::UsageLimit, Some(1_764_684_000)))
        );
        assert_eq!(
            account_wide(
                "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again in 2 days 3 hours 4 minutes.",
                100
            ),
            Some((
                AccountWide::UsageLimit,
                Some(100 + 2 * 86_400 + 3 * 3600 + 4 * 60)
            ))
        );
        // 2027-01-15T08:00:00Z.
        let now = 1_800_000_000;
        let host = host_offset(now);
        let at = |h: i64, m: i64, offset: i64| {
            let local = now as i64 + offset;
            let mut t = local - local.rem_euclid(86_400) + h * 3600 + m * 60 - offset;
            if t <= now as i64 {
                t += 86_400;
            }
            Some(t as u64)
        };
        assert_eq!(
            account_wide(
                "You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at 3:45 PM.",
                now
            ),
            Some((AccountWide::UsageLimit, at(15, 45, host)))
        );
        assert_eq!(
            account_wide("You've hit your session limit · resets 9:54am (UTC)", now),
            Some((AccountWide::UsageLimit, at(9, 54, 0)))
        );
        // A reset on another day, as Codex names it: that date's 12:10 AM.
        let dated = account_wide(
            "You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at Jan 17th, 2027 12:10 AM.",
            now,
        );
        let want = 1_800_000_000 - 8 * 3600 + 2 * 86_400 + 10 * 60 - host;
        assert_eq!(dated, Some((AccountWide::UsageLimit, Some(want as u64))));
        // Earlier in the day than now: tomorrow's.
        assert_eq!(
            account_wide("You've hit your weekly limit · resets 7am (UTC+1)", now),
            Some((AccountWide::UsageLimit, at(7, 0, 3600)))
        );
        assert_eq!(
            account_wide(
                "You've hit your session limit · resets 17:05 (GMT-05:30)",
                now
            ),
            Some((AccountWide::UsageLimit, at(17, 5, -(5 * 3600 + 1800))))
        );
        // No time of day: a backoff, not a guess.
        assert_eq!(
            account_wide("You've hit your session limit · resets 2 (UTC)", now),
            Some((AccountWide::UsageLimit, None))
        );
        assert_eq!(
            account_wide("You've hit your session limit · resets 13pm", now),
            Some((AccountWide::UsageLimit, None))
        );
        assert_eq!(
            account_wide("Credit balance is too low", 0),
            Some((AccountWide::Credit, None))
        );
        assert_eq!(
            account_wide("Invalid API key · Please run /login", 0),
            Some((AccountWide::Login, None))
        );
        assert_eq!(
            account_wide(
                r#"API Error: 529 {"type":"error","error":{"type":"overloaded_error"}}"#,
                0
            ),
            Some((AccountWide::Overloaded, None))
        );
        assert_eq!(account_wide("error: tests failed", 0), None);
    }

    #[test]
    fn the_real_clis_words_are_read_for_every_condition() {
        let kind = |t: &str| account_wide(t, 0).map(|x| x.0);
        for (text, want) in [
            (
                "Quota exceeded. Check your plan and billing details.",
                AccountWide::Credit,
            ),
            (
                "You've hit your 5-hour limit · resets 1:48pm (UTC)",
                AccountWide::UsageLimit,
            ),
            (
                "Selected model is at capacity. Please try a different model.",
                AccountWide::Overloaded,
            ),
            (
                "exceeded retry limit, last status: 429 Too Many Requests",
                AccountWide::RateLimited,
            ),
            (
                "exceeded retry limit, last status: 503 Service Unavailable",
                AccountWide::Overloaded,
            ),
            (
                "API Error: Request rejected (429) · This request would exceed the rate limit",
                AccountWide::RateLimited,
            ),
            ("Invalid API key · Fix external API key", AccountWide::Login),
            (
                "unexpected status 401 Unauthorized: Incorrect API key provided",
                AccountWide::Login,
            ),
            (
                "API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)",
                AccountWide::Unreachable,
            ),
            (
                "Reconnecting... waiting for network (Connection failed: error sending request)",
                AccountWide::Unreachable,
            ),
            (
                "stream disconnected before completion: stream closed before response.completed",
                AccountWide::Unreachable,
            ),
        ] {
            assert_eq!(kind(text), Some(want), "{text}");
        }
        assert_eq!(kind("error: tests failed"), None);
    }
}
