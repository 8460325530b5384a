//! What the fleet spent, from the attempt ledger, and whether a budget holds it back
//! (`docs/SPEC.md` §11.13): the day's dollars and tokens in the configured time zone,
//! one issue's dollars, and the rows of `afk-supervisor spend`. The clock is a parameter
//! everywhere, so a test can turn the day.

pub mod fleet_day;
pub mod fleet_issue;
pub mod reserve;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::{Budget, Usd};
use crate::ledger::{Outcome, Record};
use crate::timeutil;

/// Seconds in a day.
const DAY_S: i64 = 86_400;

/// The day (`yyyy-mm-dd`) that `epoch` falls on at UTC offset `offset_s`.
pub fn day_of(epoch: u64, offset_s: i32) -> String {
    let local = (epoch as i64).saturating_add(i64::from(offset_s)).max(0) as u64;
    timeutil::date_utc(std::time::UNIX_EPOCH + std::time::Duration::from_secs(local))
}

/// When the day after the one `epoch` falls on begins (epoch seconds).
pub fn next_day_start(epoch: u64, offset_s: i32) -> u64 {
    let local = (epoch as i64).saturating_add(i64::from(offset_s));
    let start = local
        .div_euclid(DAY_S)
        .saturating_add(1)
        .saturating_mul(DAY_S);
    start.saturating_sub(i64::from(offset_s)).max(0) as u64
}

/// `UTC`, `+02:00`, `-05:30:15`.
pub fn offset_words(offset_s: i32) -> String {
    if offset_s == 0 {
        return "UTC".into();
    }
    let sign = if offset_s < 0 { '-' } else { '+' };
    let a = offset_s.unsigned_abs();
    let mut out = format!("{sign}{:02}:{:02}", a / 3600, (a % 3600) / 60);
    if !a.is_multiple_of(60) {
        out.push_str(&format!(":{:02}", a % 60));
    }
    out
}

/// A record's end, epoch seconds; `None` when it does not parse.
fn end_epoch(r: &Record) -> Option<u64> {
    timeutil::parse_rfc3339(&r.end).map(timeutil::epoch_secs)
}

/// What some attempts cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spend {
    pub usd: f64,
    pub tokens: u64,
    /// Attempts that reported a cost or tokens.
    pub runs: u64,
}

impl Spend {
    fn add(&mut self, r: &Record) {
        let u = &r.usage;
        if u.cost_usd.is_none() && u.input_tokens.is_none() && u.output_tokens.is_none() {
            return;
        }
        self.usd += u
            .cost_usd
            .filter(|c| c.is_finite() && *c >= 0.0)
            .unwrap_or(0.0);
        self.tokens = self.tokens.saturating_add(u.tokens());
        self.runs += 1;
    }
}

/// The spend of the day `now` falls on, over every issue's records.
pub fn spend_today(all: &[(u64, Vec<Record>)], now: u64, offset_s: i32) -> Spend {
    let today = day_of(now, offset_s);
    let mut s = Spend::default();
    for r in all.iter().flat_map(|(_, rs)| rs) {
        if end_epoch(r).is_some_and(|e| day_of(e, offset_s) == today) {
            s.add(r);
        }
    }
    s
}

/// What one issue spent since its last `over-budget` hand-off.
pub fn issue_spend(records: &[Record]) -> Spend {
    let from = records
        .iter()
        .rposition(|r| r.outcome == Outcome::OverBudget)
        .map_or(0, |i| i + 1);
    let mut s = Spend::default();
    for r in &records[from..] {
        s.add(r);
    }
    s
}

/// The day's budget is used up: nothing is claimed until `until_epoch`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reached {
    /// `daily budget reached: spend today $1.20 of $1.00`.
    pub reason: String,
    /// The start of the next day.
    pub until_epoch: u64,
}

/// Whether the day's dollar or token budget is used up at `now`.
pub fn daily_reached(budget: &Budget, today: &Spend, now: u64) -> Option<Reached> {
    let until_epoch = next_day_start(now, budget.utc_offset_s);
    if let Some(limit) = budget.usd_per_day
        && Usd::from_f64(today.usd) >= limit
    {
        return Some(Reached {
            reason: format!("daily budget reached: {}", spend_words(budget, today)),
            until_epoch,
        });
    }
    if let Some(limit) = budget.tokens_per_day
        && today.tokens >= limit
    {
        return Some(Reached {
            reason: format!("daily budget reached: {}", spend_words(budget, today)),
            until_epoch,
        });
    }
    None
}

/// `spend today $3.20 of $10.00`, `spend today 12000 of 50000 tokens`, or both.
pub fn spend_words(budget: &Budget, today: &Spend) -> String {
    let mut parts = Vec::new();
    match budget.usd_per_day {
        Some(l) => parts.push(format!("{} of {l}", Usd::from_f64(today.usd))),
        None if budget.tokens_per_day.is_none() => parts.push(Usd::from_f64(today.usd).to_string()),
        None => {}
    }
    if let Some(t) = budget.tokens_per_day {
        parts.push(format!("{} of {t} tokens", today.tokens));
    }
    format!("spend today {}", parts.join(", "))
}

/// How `spend` groups its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Day,
    Issue,
}

/// One row of `afk-supervisor spend`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The day (`yyyy-mm-dd`) or the issue number, as text.
    pub key: String,
    /// Never `-0.0`: a sum of nothing is `0.0` here (Rust's empty `f64` sum is `-0.0`,
    /// which prints as `$-0.00`).
    pub usd: f64,
    pub tokens: u64,
    /// The attempts that reported a cost or tokens: what `usd` and `tokens` add up.
    pub runs: u64,
    /// Every attempt that ended in the row, whether or not it reported a cost (an agent
    /// whose output carries none, e.g. a script, reports nothing).
    pub attempts: u64,
}

/// The spend of every record ending on or after the day `since` (`yyyy-mm-dd`), grouped.
pub fn report(all: &[(u64, Vec<Record>)], since: Option<&str>, by: By, offset_s: i32) -> Vec<Row> {
    let mut rows: BTreeMap<(String, u64), (Spend, u64)> = BTreeMap::new();
    for (n, records) in all {
        for r in records {
            let Some(day) = end_epoch(r).map(|e| day_of(e, offset_s)) else {
                continue;
            };
            if since.is_some_and(|s| day.as_str() < s) {
                continue;
            }
            let key = match by {
                By::Day => (day, 0),
                By::Issue => (String::new(), *n),
            };
            let (spend, attempts) = rows.entry(key).or_default();
            spend.add(r);
            *attempts += 1;
        }
    }
    rows.into_iter()
        .map(|((day, n), (s, attempts))| Row {
            key: match by {
                By::Day => day,
                By::Issue => format!("#{n}"),
            },
            usd: s.usd,
            tokens: s.tokens,
            runs: s.runs,
            attempts,
        })
        .collect()
}

/// The sum of `rows`, keyed `total`.
pub fn total(rows: &[Row]) -> Row {
    Row {
        key: "total".into(),
        // Folded from `0.0`: `Iterator::sum` of no `f64` is `-0.0`.
        usd: rows.iter().fold(0.0, |sum, r| sum + r.usd),
        tokens: rows.iter().map(|r| r.tokens).sum(),
        runs: rows.iter().map(|r| r.runs).sum(),
        attempts: rows.iter().map(|r| r.attempts).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(epoch: u64, cost: f64, tokens: u64) -> Record {
        let mut r = Record::now(None, None, Outcome::Done);
        r.end = timeutil::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(epoch));
        r.usage.cost_usd = Some(cost);
        r.usage.input_tokens = Some(tokens);
        r
    }

    /// 2026-12-01T23:00:00Z.
    const T: u64 = 1_796_166_000;

    #[test]
    fn the_day_turns_at_midnight_in_the_configured_zone() {
        assert_eq!(day_of(T, 0), "2026-12-01");
        assert_eq!(day_of(T, 3600), "2026-12-02");
        assert_eq!(next_day_start(T, 0), T + 3600);
        assert_eq!(next_day_start(T, 3600), T + 86_400);
        assert_eq!(next_day_start(T, -3600), T + 7200);
        assert_eq!(offset_words(-(5 * 3600 + 30 * 60)), "-05:30");
        assert_eq!(offset_words(3661), "+01:01:01");
    }

    #[test]
    fn a_day_budget_holds_until_the_next_day_with_an_injected_clock() {
        let budget = Budget {
            usd_per_day: Some(Usd::from_f64(1.0)),
            ..Budget::default()
        };
        let all = vec![
            (1, vec![at(T - 100, 0.4, 10), at(T - 90, 0.4, 10)]),
            (2, vec![at(T - 80, 0.4, 10), at(T - 86_400, 5.0, 10)]),
        ];
        let today = spend_today(&all, T, 0);
        assert_eq!(today.runs, 3);
        let r = daily_reached(&budget, &today, T).unwrap();
        assert_eq!(r.until_epoch, T + 3600);
        assert_eq!(r.reason, "daily budget reached: spend today $1.20 of $1.00");
        // The next day: nothing spent yet, nothing held.
        let tomorrow = spend_today(&all, T + 3600, 0);
        assert_eq!(tomorrow.runs, 0);
        assert!(daily_reached(&budget, &tomorrow, T + 3600).is_none());
        let tokens = Budget {
            tokens_per_day: Some(30),
            ..Budget::default()
        };
        assert!(daily_reached(&tokens, &today, T).is_some());
        assert_eq!(spend_words(&tokens, &today), "spend today 30 of 30 tokens");
        let by_day = report(&all, None, By::Day, 0);
        assert_eq!(by_day.len(), 2);
        assert_eq!(by_day[1].runs, 3);
        let by_issue = report(&all, Some("2026-12-01"), By::Issue, 0);
        assert_eq!(by_issue[0].key, "#1");
        assert_eq!(by_issue[1].runs, 1);
    }

    /// Issue 52, item 4: attempts that reported no cost give `0.0`, never `-0.0`, and are
    /// counted as attempts (not runs), in their rows and the total.
    #[test]
    fn attempts_without_a_cost_make_rows_of_zero_not_negative_zero() {
        let unpriced = |epoch: u64| {
            let mut r = at(epoch, 0.0, 0);
            r.usage = Default::default();
            r
        };
        let all = vec![
            (4, vec![unpriced(T - 100), unpriced(T - 50)]),
            (5, vec![unpriced(T)]),
        ];
        let rows = report(&all, None, By::Issue, 0);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!((rows[0].runs, rows[0].attempts), (0, 2));
        let t = total(&rows);
        assert_eq!((t.runs, t.attempts), (0, 3));
        assert!(t.usd.is_sign_positive(), "{t:?}");
        assert_eq!(format!("${:.2}", t.usd), "$0.00");
        let none = total(&[]);
        assert!(none.usd.is_sign_positive(), "{none:?}");
        assert_eq!(
            serde_json::to_value(&none).unwrap()["usd"].to_string(),
            "0.0"
        );
    }
}

/// What `usage` cost at `prices` (dollars per million tokens, by model; `"*"` for a model
/// not named or not known): for agents that report tokens but never dollars (Codex), so
/// `usd_per_day` and `usd_per_issue` hold for them too. Cached input tokens are part of
/// the input count and priced apart. `None` when no tokens are known or no price applies.
pub fn priced(
    usage: &crate::agent_profile::Usage,
    prices: &BTreeMap<String, crate::config::Price>,
) -> Option<f64> {
    if usage.input_tokens.is_none() && usage.output_tokens.is_none() {
        return None;
    }
    let price = usage
        .model
        .as_deref()
        .and_then(|m| prices.get(m))
        .or_else(|| prices.get("*"))?;
    let input = usage.input_tokens.unwrap_or(0);
    let cached = usage.cache_read_tokens.unwrap_or(0).min(input);
    let per_token = |usd: Usd| usd.0 as f64 / 1e6 / 1e6;
    Some(
        (input - cached) as f64 * per_token(price.input)
            + cached as f64 * per_token(price.cached_input)
            + usage.output_tokens.unwrap_or(0) as f64 * per_token(price.output),
    )
}

#[cfg(test)]
mod price_tests {
    use super::*;
    use crate::agent_profile::Usage;

    #[test]
    fn tokens_are_priced_by_model_else_by_the_star_entry() {
        let prices = crate::config::default_prices();
        let u = Usage {
            input_tokens: Some(2000),
            cache_read_tokens: Some(400),
            output_tokens: Some(100),
            ..Usage::default()
        };
        // 1600 × $1.25 + 400 × $0.125 + 100 × $10, per million.
        let star = priced(&u, &prices).unwrap();
        assert!((star - 0.00305).abs() < 1e-12, "{star}");
        let mini = Usage {
            model: Some("gpt-5-mini".into()),
            ..u.clone()
        };
        assert!((priced(&mini, &prices).unwrap() - 0.00061).abs() < 1e-12);
        assert_eq!(priced(&Usage::default(), &prices), None);
        assert_eq!(priced(&u, &BTreeMap::new()), None);
    }
}
