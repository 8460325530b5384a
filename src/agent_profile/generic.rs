//! The generic contract any agent can meet (`docs/SPEC.md` §11.13): exit 0 done, exit 75
//! account-wide, anything else failed for this issue; and, optionally, one JSON object
//! written to `$RED_AFK_RESULT_FILE`:
//! `{"reset_epoch":1764684000,"reason":"usage limit","kind":"usage-limit",
//! "cost_usd":0.4,"input_tokens":1200,"output_tokens":300,"cache_read_tokens":0,
//! "turns":4,"model":"…","session_id":"…"}`, every field optional.

use super::{AccountWide, End, Seen, Usage, f64_at, str_at, u64_at};

/// The exit code by which a generic agent says "the account, not this issue". The agent's
/// contract, not one of the supervisor's codes (`exit`): that it equals the worker's
/// `RATE_LIMITED` (both EX_TEMPFAIL) is a coincidence nothing relies on, since the worker
/// answers it with its own `AGENT_PAUSED`.
pub const ACCOUNT_WIDE_EXIT: i32 = 75;

/// Largest result file read.
pub const MAX_RESULT_BYTES: u64 = 64 << 10;

/// What the agent wrote to its result file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultFile {
    pub usage: Usage,
    pub reset_epoch: Option<u64>,
    pub reason: Option<String>,
    pub kind: Option<AccountWide>,
}

/// The result file's fields; `None` when it is not one JSON object.
pub fn parse_result_file(bytes: &[u8]) -> Option<ResultFile> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    if !v.is_object() {
        return None;
    }
    Some(ResultFile {
        usage: Usage {
            cost_usd: f64_at(&v, "cost_usd"),
            input_tokens: u64_at(&v, "input_tokens"),
            output_tokens: u64_at(&v, "output_tokens"),
            cache_read_tokens: u64_at(&v, "cache_read_tokens"),
            turns: u64_at(&v, "turns"),
            model: str_at(&v, "model"),
            session_id: str_at(&v, "session_id"),
        },
        reset_epoch: u64_at(&v, "reset_epoch"),
        reason: str_at(&v, "reason"),
        kind: v
            .get("kind")
            .and_then(|k| serde_json::from_value::<AccountWide>(k.clone()).ok()),
    })
}

pub fn classify(seen: &Seen, file: Option<&ResultFile>) -> (End, Usage) {
    let end = match seen.exit_code {
        0 => End::Done,
        ACCOUNT_WIDE_EXIT => End::AccountWide {
            why: file.and_then(|f| f.kind).unwrap_or(AccountWide::UsageLimit),
            reset_epoch: file.and_then(|f| f.reset_epoch),
            detail: file
                .and_then(|f| f.reason.clone())
                .unwrap_or_else(|| format!("the agent exited {ACCOUNT_WIDE_EXIT}")),
        },
        code => End::Failed { code },
    };
    (end, Usage::default())
}
