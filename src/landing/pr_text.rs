//! The landing's fixed texts (`docs/SPEC.md` §11.22): the pull request's body and the issue
//! comments that link it or say why there is none.

use std::fmt::Write as _;

/// The most characters of the agent's final message a pull request's body quotes.
pub const MESSAGE_MAX: usize = 4000;

/// The most characters of a failing output's tail quoted in a body or a comment.
pub const TAIL_MAX: usize = 3000;

/// What the checks said about an attempt's last round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChecksWord {
    /// No `[checks] command`.
    None,
    Passed {
        round: u64,
    },
    /// Still failing after the last round: the words (`exit 1`, `timed out after 60s`) and
    /// the output's tail.
    Failing {
        rounds: u64,
        why: String,
        tail: String,
    },
}

impl ChecksWord {
    /// One line: `none`, `passed (round 2)`, `failing after 2 round(s): exit 1`.
    pub fn words(&self) -> String {
        match self {
            ChecksWord::None => "none".into(),
            ChecksWord::Passed { round } => format!("passed (round {round})"),
            ChecksWord::Failing { rounds, why, .. } => {
                format!("failing after {rounds} round(s): {why}")
            }
        }
    }

    pub fn failing(&self) -> bool {
        matches!(self, ChecksWord::Failing { .. })
    }

    /// The agent rounds the checks asked for beyond the attempt's first.
    pub fn extra_rounds(&self) -> u64 {
        match self {
            ChecksWord::None => 0,
            ChecksWord::Passed { round } => round.saturating_sub(1),
            ChecksWord::Failing { rounds, .. } => rounds.saturating_sub(1),
        }
    }
}

/// The attempt's figures a body lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// The attempt, `<N>-a<K>`.
    pub attempt: String,
    /// The issue's attempts so far, this one included.
    pub attempts: u64,
    pub duration_s: u64,
    pub cost_usd: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// `s` cut to at most `max` characters, on a character boundary, with a note when cut.
pub fn bounded(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.chars().count() <= max {
        return s.to_string();
    }
    let head: String = s.chars().take(max).collect();
    format!("{head}\n… (cut at {max} characters)")
}

/// The last `max` characters of `s` (a failing output's end), marked when cut.
pub fn tail(s: &str, max: usize) -> String {
    let s = s.trim_end();
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let rest: String = s.chars().skip(n - max).collect();
    format!("… (the last {max} characters)\n{rest}")
}

/// `3m12s`, `45s`, `1h02m`.
pub fn duration(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// A fenced block whose fence no line of `text` can close.
fn fenced(text: &str) -> String {
    let mut fence = "```".to_string();
    while text.contains(&fence) {
        fence.push('`');
    }
    format!("{fence}\n{text}\n{fence}")
}

/// The pull request's body: `Closes #N`, the agent's final message (bounded), then what was
/// checked and the attempt's figures.
pub fn body(n: u64, message: Option<&str>, checks: &ChecksWord, f: &Figures) -> String {
    let mut b = format!("Closes #{n}\n\n");
    if checks.failing() {
        b.push_str("**The checks still fail:** this pull request is a draft for a person.\n\n");
    }
    b.push_str("## What the agent said\n\n");
    match message.map(str::trim).filter(|m| !m.is_empty()) {
        Some(m) => {
            for line in bounded(m, MESSAGE_MAX).lines() {
                let _ = writeln!(b, "> {line}");
            }
        }
        None => b.push_str("(no final message)\n"),
    }
    b.push_str("\n## The attempt\n\n");
    let _ = writeln!(b, "- checks: {}", checks.words());
    let _ = writeln!(b, "- attempt: {} ({} of the issue)", f.attempt, f.attempts);
    let _ = writeln!(b, "- duration: {}", duration(f.duration_s));
    let _ = writeln!(
        b,
        "- cost: {}",
        f.cost_usd.map_or("unknown".into(), |c| format!("${c:.2}"))
    );
    let tokens = match (f.input_tokens, f.output_tokens) {
        (None, None) => "unknown".to_string(),
        (i, o) => format!("{} in, {} out", i.unwrap_or(0), o.unwrap_or(0)),
    };
    let _ = writeln!(b, "- tokens: {tokens}");
    if let ChecksWord::Failing { tail: t, .. } = checks
        && !t.trim().is_empty()
    {
        let _ = write!(
            b,
            "\n## The failing output's end\n\n{}\n",
            fenced(&tail(t, TAIL_MAX))
        );
    }
    b.push_str("\n🤖 opened by afk-supervisor\n");
    b
}

/// The one comment linking a newly opened pull request.
pub fn opened(attempt: &str, url: &str, branch: &str, commits: u64, checks: &ChecksWord) -> String {
    let what = if checks.failing() {
        "a draft pull request"
    } else {
        "pull request"
    };
    format!(
        "🤖 /afk finished attempt {attempt} and opened {what} {url}: {commits} commit(s) on branch `{branch}`; checks: {}. Ready for human review.",
        checks.words()
    )
}

/// A fix round's comment: pushed to the issue's open pull request.
pub fn pushed(attempt: &str, url: &str, branch: &str, commits: u64, checks: &ChecksWord) -> String {
    format!(
        "🤖 /afk attempt {attempt} pushed {commits} commit(s) to pull request {url} (branch `{branch}`); checks: {}. Ready for human review.",
        checks.words()
    )
}

/// The branch is pushed but the pull request could not be opened.
pub fn refused(attempt: &str, branch: &str, commits: u64, why: &str) -> String {
    format!(
        "🤖 /afk finished attempt {attempt}: {commits} commit(s) pushed to branch `{branch}`, but opening the pull request failed ({why}); the branch is kept and the pull request is opened again by the landing belt."
    )
}

/// The checks still fail and `checks.on_failure = "person"`: no pull request.
pub fn checks_to_person(attempt: &str, branch: &str, commits: u64, checks: &ChecksWord) -> String {
    let mut s = format!(
        "🤖 /afk finished attempt {attempt}: {commits} commit(s) on branch `{branch}`, but the checks are {}; no pull request was opened (checks.on_failure = \"person\"). Ready for human review.",
        checks.words()
    );
    if let ChecksWord::Failing { tail: t, .. } = checks
        && !t.trim().is_empty()
    {
        let _ = write!(s, "\n\n{}", fenced(&tail(t, TAIL_MAX)));
    }
    s
}

/// A belt-retried opening that succeeded.
pub fn opened_late(url: &str, branch: &str) -> String {
    format!("🤖 /afk opened pull request {url} for branch `{branch}` (retried).")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_close_the_issue_and_carry_the_figures() {
        let f = Figures {
            attempt: "7-a2".into(),
            attempts: 2,
            duration_s: 192,
            cost_usd: Some(0.4242),
            input_tokens: Some(1200),
            output_tokens: None,
        };
        let b = body(
            7,
            Some("Done.\nAll tests pass."),
            &ChecksWord::Passed { round: 2 },
            &f,
        );
        assert!(b.starts_with("Closes #7\n"), "{b}");
        for want in [
            "> Done.\n> All tests pass.",
            "- checks: passed (round 2)",
            "- attempt: 7-a2 (2 of the issue)",
            "- duration: 3m12s",
            "- cost: $0.42",
            "- tokens: 1200 in, 0 out",
        ] {
            assert!(b.contains(want), "{want:?} in {b}");
        }
        let failing = ChecksWord::Failing {
            rounds: 3,
            why: "exit 1".into(),
            tail: "```\nerror[E0308]".into(),
        };
        let b = body(7, None, &failing, &Figures::default());
        assert!(b.contains("The checks still fail"), "{b}");
        assert!(b.contains("(no final message)"));
        assert!(b.contains("````\n```\nerror[E0308]\n````"), "{b}");
        assert!(b.contains("- cost: unknown") && b.contains("- tokens: unknown"));
    }

    #[test]
    fn long_texts_are_bounded_on_character_boundaries() {
        let long = "é".repeat(MESSAGE_MAX + 10);
        let b = bounded(&long, MESSAGE_MAX);
        assert!(b.starts_with(&"é".repeat(MESSAGE_MAX)));
        assert!(b.ends_with("(cut at 4000 characters)"));
        let t = tail(&format!("start{}", "x".repeat(50)), 10);
        assert_eq!(t, format!("… (the last 10 characters)\n{}", "x".repeat(10)));
        assert_eq!(duration(59), "59s");
        assert_eq!(duration(3720), "1h02m");
    }
}
