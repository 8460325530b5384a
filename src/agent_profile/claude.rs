//! Claude Code's result: `claude -p … --output-format stream-json --verbose` prints one
//! JSON object a line (`system`/`init` with the model and session, `assistant`, `user`,
//! and last the `result`); `--output-format json` prints the `result` object alone:
//! `{"type":"result","subtype":"success","is_error":false,"num_turns":3,
//! "session_id":"…","total_cost_usd":0.12,"usage":{"input_tokens":…,"output_tokens":…,
//! "cache_read_input_tokens":…},"modelUsage":{"claude-…":{"costUSD":…}},"result":"…"}`.

use super::{AccountWide, End, Seen, Usage, f64_at, json_lines, limits, str_at, u64_at};

/// How many last lines of plain output or stderr are read for the CLI's own error.
pub(crate) const TAIL_LINES: usize = 20;

pub fn classify(seen: &Seen) -> (End, Usage) {
    let events = json_lines(seen.stdout);
    let init = events
        .iter()
        .find(|e| e["type"] == "system" && e["subtype"] == "init");
    let result = events.iter().rev().find(|e| e["type"] == "result");
    let mut usage = result.map(usage_of).unwrap_or_default();
    if let Some(init) = init {
        usage = usage.or(Usage {
            model: str_at(init, "model"),
            session_id: str_at(init, "session_id"),
            ..Usage::default()
        });
    }
    let is_error = result.is_some_and(|r| {
        r["is_error"].as_bool().unwrap_or(false)
            || r.get("subtype")
                .and_then(|s| s.as_str())
                .is_some_and(|s| s != "success")
    });
    if seen.exit_code == 0 && !is_error {
        return (End::Done, usage);
    }
    // What the CLI itself said: the error result's text, the last lines of stderr and of
    // any plain (non-JSON) output; its own words name the condition best (a usage limit's
    // reset), and the API error it recorded names it where its words are new.
    let mut said = String::new();
    // A successful result's text is the model's last message, the conversation: read only
    // an error result's.
    if let Some(r) = result.filter(|_| is_error) {
        if let Some(t) = r["result"].as_str() {
            said.push_str(t);
            said.push('\n');
        }
        if let Some(errs) = r["errors"].as_array() {
            for e in errs.iter().filter_map(|e| e.as_str()) {
                said.push_str(e);
                said.push('\n');
            }
        }
    }
    let end = match not_done(said.clone(), seen) {
        // The stream's own record of a rejected rate-limit window names the reset exactly
        // (`rate_limit_event`, `resetsAt` epoch seconds) where the words give a time of day.
        End::AccountWide {
            why,
            reset_epoch,
            detail,
        } => {
            let exact = rejected_window_reset(&events)
                .filter(|_| matches!(why, AccountWide::UsageLimit | AccountWide::RateLimited));
            let why = if exact.is_some() {
                AccountWide::UsageLimit
            } else {
                why
            };
            return (
                End::AccountWide {
                    why,
                    reset_epoch: exact.or(reset_epoch),
                    detail,
                },
                usage,
            );
        }
        end => end,
    };
    let api_error = result.and_then(api_error_of).or_else(|| {
        events
            .iter()
            .rev()
            .filter(|e| e["type"] == "assistant")
            .find_map(api_error_of)
    });
    if let Some(why) = api_error {
        let detail = match said.lines().find(|l| !l.trim().is_empty()) {
            Some(l) => super::detail_line(l),
            None => super::detail_line(&format!("API error: {why}")),
        };
        return (
            End::AccountWide {
                why,
                reset_epoch: None,
                detail,
            },
            usage,
        );
    }
    (end, usage)
}

/// When the last `rate_limit_event` that rejected the request says its window resets.
fn rejected_window_reset(events: &[serde_json::Value]) -> Option<u64> {
    events
        .iter()
        .rev()
        .filter(|e| e["type"] == "rate_limit_event")
        .map(|e| &e["rate_limit_info"])
        .find(|i| i["status"] == "rejected")
        .and_then(|i| u64_at(i, "resetsAt"))
}

/// The account-wide condition an error result or an API-error message of the stream
/// records: its HTTP status (`api_error_status`), its connection failure (`api_error`),
/// or the message's `error` code.
fn api_error_of(e: &serde_json::Value) -> Option<AccountWide> {
    let by_status = u64_at(e, "api_error_status").and_then(|s| match s {
        401 | 403 => Some(AccountWide::Login),
        402 => Some(AccountWide::Credit),
        429 => Some(AccountWide::RateLimited),
        500..=599 => Some(AccountWide::Overloaded),
        _ => None,
    });
    let connection = matches!(
        e["api_error"].as_str(),
        Some("connection_failed" | "connection_error" | "timeout")
    )
    .then_some(AccountWide::Unreachable);
    by_status
        .or(connection)
        .or_else(|| e["error"].as_str().and_then(error_code))
}

/// The end of a run that did not succeed, from what the CLI `said` (its error result or
/// events) and the last lines of stderr and of plain stdout: account-wide when those name
/// the account's condition, else failed (exit 1 for an agent that exited 0).
pub(crate) fn not_done(mut said: String, seen: &Seen) -> End {
    said.push_str(&tail(seen.stderr, false));
    said.push_str(&tail(seen.stdout, true));
    if let Some((why, reset_epoch)) = limits::account_wide(&said, seen.now_epoch) {
        return End::AccountWide {
            why,
            reset_epoch,
            detail: first_line_naming(&said),
        };
    }
    let code = if seen.exit_code == 0 {
        1
    } else {
        seen.exit_code
    };
    End::Failed { code }
}

/// The stream's `error` codes on an assistant message that are the account's.
fn error_code(code: &str) -> Option<AccountWide> {
    match code {
        "rate_limit" => Some(AccountWide::RateLimited),
        "authentication_failed" => Some(AccountWide::Login),
        "billing_error" => Some(AccountWide::Credit),
        "overloaded" => Some(AccountWide::Overloaded),
        _ => None,
    }
}

/// The run's usage. Tokens come from `modelUsage` (per model, what the CLI priced the run
/// from) when it counts more than `usage`, which holds only the last request's figures
/// after a non-streaming fallback and zeros in some error ends.
fn usage_of(r: &serde_json::Value) -> Usage {
    let u = &r["usage"];
    let per_model = r["modelUsage"].as_object();
    let model = per_model.and_then(|m| {
        m.iter()
            .max_by(|a, b| {
                let cost = |v: &serde_json::Value| f64_at(v, "costUSD").unwrap_or(0.0);
                cost(a.1).total_cmp(&cost(b.1))
            })
            .map(|(k, _)| super::detail_line(k))
    });
    let sum = |key: &str| -> Option<u64> {
        let m = per_model.filter(|m| !m.is_empty())?;
        Some(m.values().filter_map(|v| u64_at(v, key)).sum())
    };
    let from_usage = (
        u64_at(u, "input_tokens"),
        u64_at(u, "output_tokens"),
        u64_at(u, "cache_read_input_tokens"),
    );
    let from_models = (
        sum("inputTokens"),
        sum("outputTokens"),
        sum("cacheReadInputTokens"),
    );
    let total = |t: &(Option<u64>, Option<u64>, Option<u64>)| {
        t.0.unwrap_or(0).saturating_add(t.1.unwrap_or(0))
    };
    let (input_tokens, output_tokens, cache_read_tokens) =
        if from_models.0.is_some() && total(&from_models) > total(&from_usage) {
            from_models
        } else {
            from_usage
        };
    Usage {
        cost_usd: f64_at(r, "total_cost_usd").or_else(|| f64_at(r, "cost_usd")),
        input_tokens,
        output_tokens,
        cache_read_tokens,
        turns: u64_at(r, "num_turns"),
        model,
        session_id: str_at(r, "session_id"),
    }
}

/// The last [`TAIL_LINES`] lines of `bytes`; with `plain_only`, those that are not JSON.
pub(crate) fn tail(bytes: &[u8], plain_only: bool) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !plain_only || !l.trim_start().starts_with('{'))
        .collect();
    let from = lines.len().saturating_sub(TAIL_LINES);
    let mut out = lines[from..].join("\n");
    out.push('\n');
    out
}

/// The first line of `said` that the limits recognise, else its first non-empty line.
pub(crate) fn first_line_naming(said: &str) -> String {
    let line = said
        .lines()
        .find(|l| limits::account_wide(l, 0).is_some())
        .or_else(|| said.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("");
    super::detail_line(line)
}
