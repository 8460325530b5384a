//! Codex CLI's events: `codex exec --json` prints one JSON object a line:
//! `{"type":"thread.started","thread_id":"…"}`, `turn.started`, `item.*`,
//! `{"type":"turn.completed","usage":{"input_tokens":…,"cached_input_tokens":…,
//! "output_tokens":…}}`, and on failure `{"type":"turn.failed","error":{"message":"…"}}`
//! or `{"type":"error","message":"…"}`. It reports tokens, never dollars.

use super::claude::not_done;
use super::{End, Seen, Usage, json_lines, str_at, u64_at};

pub fn classify(seen: &Seen) -> (End, Usage) {
    let events = json_lines(seen.stdout);
    let mut usage = Usage::default();
    let mut said = String::new();
    let mut failed = false;
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
            }
            "turn.failed" => {
                failed = true;
                if let Some(m) = e["error"]["message"].as_str() {
                    said.push_str(m);
                    said.push('\n');
                }
            }
            "error" => {
                failed = true;
                if let Some(m) = e["message"].as_str() {
                    said.push_str(m);
                    said.push('\n');
                }
            }
            _ => {}
        }
    }
    if seen.exit_code == 0 && !failed {
        return (End::Done, usage);
    }
    (not_done(said, seen), usage)
}
