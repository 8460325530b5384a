//! What an agent says when the account, not the issue, stops it: read only from what
//! the CLI itself reports (an error result, error events, the last lines of stderr or of
//! plain output), never from the conversation, where an agent may well discuss limits. The phrases are the real CLIs'
//! (samples in `tests/corpus/agents/`); a phrase not listed is the issue's failure, so a
//! new wording costs at worst a retry, never a pause of a healthy fleet.

use super::AccountWide;

/// The account-wide condition `text` reports, with the reset when it names one.
pub fn account_wide(text: &str, now_epoch: u64) -> Option<(AccountWide, Option<u64>)> {
    let lower = text.to_ascii_lowercase();
    // Claude Code: `Claude AI usage limit reached|1764684000` (epoch seconds).
    if let Some(i) = lower.find("usage limit reached|") {
        let digits: String = text[i + "usage limit reached|".len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        return Some((AccountWide::UsageLimit, digits.parse().ok()));
    }
    const USAGE: [&str; 9] = [
        "usage limit reached",
        "hit your usage limit",
        "you've hit your limit",
        "you’ve hit your limit",
        "5-hour limit reached",
        "weekly limit reached",
        "usage_limit_reached",
        "rate_limit_error",
        "limit will reset",
    ];
    if USAGE.iter().any(|p| lower.contains(p)) {
        return Some((AccountWide::UsageLimit, relative_reset(&lower, now_epoch)));
    }
    const CREDIT: [&str; 3] = [
        "credit balance is too low",
        "insufficient_quota",
        "exceeded your current quota",
    ];
    if CREDIT.iter().any(|p| lower.contains(p)) {
        return Some((AccountWide::Credit, None));
    }
    const LOGIN: [&str; 7] = [
        "invalid api key",
        "please run /login",
        "oauth token has expired",
        "authentication_error",
        "not logged in",
        "401 unauthorized",
        "token_expired",
    ];
    if LOGIN.iter().any(|p| lower.contains(p)) {
        return Some((AccountWide::Login, None));
    }
    const OVERLOADED: [&str; 3] = ["overloaded_error", "api error: 529", "server is overloaded"];
    if OVERLOADED.iter().any(|p| lower.contains(p)) {
        return Some((AccountWide::Overloaded, None));
    }
    None
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
        assert_eq!(
            account_wide("You've hit your usage limit. try again at 3:45 PM.", 0),
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
}
