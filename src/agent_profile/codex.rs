//! Codex CLI's events: `codex exec --json` prints one JSON object a line:
//! `{"type":"thread.started","thread_id":"…"}`, `turn.started`, `item.*`,
//! `{"type":"turn.completed","usage":{"input_tokens":…,"cached_input_tokens":…,
//! "output_tokens":…}}`, and on failure `{"type":"turn.failed","error":{"message":"…"}}`
//! or `{"type":"error","message":"…"}`. It reports tokens, never dollars.

use super::claude::not_done;
use super::{End, Seen, Usage, json_lines, str_at, u64_at};

/// Codex prints `{"type":"error","message":"Reconnecting... 2/5 (…)"}` while it retries
/// a request or a stream by itself: chatter on the way, not how the run ended.
pub(crate) fn is_retry_notice(message: &str) -> bool {
    message.trim_start().starts_with("Reconnecting")
}

/// Done when Codex exited 0 and its last word on the turn was `turn.completed`, whatever
/// retry notices it printed before; else what its failure (or, for a run that never
/// ended, its last retry notice: "waiting for network") says.
pub fn classify(seen: &Seen) -> (End, Usage) {
    let events = json_lines(seen.stdout);
    let mut usage = Usage::default();
    let mut said = String::new();
    let mut last_notice = None;
    // The last word on the turn: `Some(true)` completed, `Some(false)` failed.
    let mut completed = None;
    let add = |slot: &mut Option<u64>, v: Option<u64>| {
        if let Some(v) = v {
            *slot = Some(slot.unwrap_or(0).saturating_add(v));
        }
    };
    for e in &events {
        match e["type"].as_str().unwrap_or("") {
            "thread.started" => {
                usage.session_id = usage.session_id.or_else(|| str_at(e, "thread_id"));
            }
            "turn.completed" => {
                let u = &e["usage"];
                add(&mut usage.input_tokens, u64_at(u, "input_tokens"));
                add(&mut usage.output_tokens, u64_at(u, "output_tokens"));
                add(
                    &mut usage.cache_read_tokens,
                    u64_at(u, "cached_input_tokens"),
                );
                usage.turns = Some(usage.turns.unwrap_or(0) + 1);
                completed = Some(true);
            }
            "turn.failed" => {
                completed = Some(false);
                if let Some(m) = e["error"]["message"].as_str() {
                    said.push_str(m);
                    said.push('\n');
                }
            }
            "error" => {
                let m = e["message"].as_str().unwrap_or("");
                if is_retry_notice(m) {
                    last_notice = Some(m.to_string());
                } else {
                    completed = Some(false);
                    said.push_str(m);
                    said.push('\n');
                }
            }
            _ => {}
        }
    }
    if seen.exit_code == 0 && completed != Some(false) {
        return (End::Done, usage);
    }
    if completed.is_none()
        && let Some(n) = last_notice
    {
        said.push_str(&n);
        said.push('\n');
    }
    (not_done(said, seen), usage)
}
