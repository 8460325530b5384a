//! The worker's fixed texts: what `--boot-only` prints, the comments that end an attempt
//! (`docs/SPEC.md` §11.4, §11.10), and the names an issue's title gives its branch and dir.

use std::fmt::Display;

use crate::tracker::LabeledIssue;

pub const BOOT_ONLY_SWEPT: &str = "boot complete (--boot-only): sweeps ran, no issues processed";
pub const BOOT_ONLY_SKIPPED: &str =
    "boot complete (--boot-only): sweeps skipped (supervisor-owned), no issues processed";

/// An attempt stopped at `timing.attempt_max_s`; `pushed` says where its commits are when
/// the push failed (empty when it did not).
pub fn capped(n: u64, attempt: u64, cap_s: u64, branch: &str, pushed: &str) -> String {
    format!(
        "🤖 /afk attempt {n}-a{attempt} reached the wall-clock cap ({cap_s}s) and was stopped; its work is on branch `{branch}`{pushed}, where the next attempt resumes. Returning to ready-for-agent."
    )
}

/// The suffix of [`capped`] when the push failed.
pub fn push_failed(e: &dyn Display) -> String {
    format!(" (push failed: {e}; the commits are in the local branch)")
}

pub fn set_aside(why: &str) -> String {
    format!(
        "🤖 /afk set this issue aside: the agent could not be started for this issue ({why}). The full title and body reach the agent as files, so this needs a person to look at the issue before an agent takes it again."
    )
}

/// A finished attempt: `commits` new commits pushed, or the push's error.
pub fn finished<E: Display>(
    n: u64,
    attempt: u64,
    branch: &str,
    commits: &Result<u64, E>,
) -> String {
    match commits {
        Ok(0) => format!(
            "🤖 /afk finished attempt {n}-a{attempt}: the agent made no commits; ready for human review."
        ),
        Ok(k) => format!(
            "🤖 /afk finished attempt {n}-a{attempt}: {k} commit(s) on branch `{branch}`; ready for human review."
        ),
        Err(e) => format!(
            "🤖 /afk finished attempt {n}-a{attempt} but could not push `{branch}` ({e}); the work is in the local branch."
        ),
    }
}

pub fn failed(n: u64, attempt: u64, code: i32) -> String {
    format!(
        "🤖 /afk attempt {n}-a{attempt} failed (agent exit {code}); returning to ready-for-agent."
    )
}

/// The most items a refusal's comment lists; the rest are counted.
const REFUSAL_ITEMS: usize = 10;

/// The comment of an attempt refused for tampering (`found`, each change) or held for its
/// sensitive paths (`docs/SPEC.md` §11.19). What the agent named is escaped and quoted:
/// it is the agent's text.
pub fn refused(
    n: u64,
    attempt: u64,
    tampered: bool,
    found: &[String],
    branch: &str,
    worktree: &std::path::Path,
) -> String {
    let mut items: Vec<String> = found
        .iter()
        .take(REFUSAL_ITEMS)
        .map(|f| format!("`{}`", crate::text::escape(f).replace('`', "'")))
        .collect();
    if found.len() > REFUSAL_ITEMS {
        items.push(format!("and {} more", found.len() - REFUSAL_ITEMS));
    }
    let items = items.join(", ");
    if tampered {
        format!(
            "🤖 /afk refused attempt {n}-a{attempt}: its agent changed what an agent must not: {items}. Nothing of this attempt was pushed; refs it moved were put back, and a planted hook or git setting never runs in the fleet's git (hooks and core.fsmonitor are off there) but is still in the repository for a person to remove. Its worktree is kept at `{}`. The issue's text may be hostile: read it before adding `ready-for-agent` back.",
            worktree.display()
        )
    } else {
        format!(
            "🤖 /afk held attempt {n}-a{attempt} for a person: it changes {items} (agent.sensitive_paths), which a push could run with the repository's secrets. Nothing was pushed; the work is on the local branch `{branch}` and in `{}`. Review it and push it by hand, or add `ready-for-agent` back to retry.",
            worktree.display()
        )
    }
}

/// The one comment of an issue whose spend passed `budget.usd_per_issue` (SPEC §11.13).
pub fn over_budget(spent_usd: f64, runs: u64, limit: &str) -> String {
    format!(
        "🤖 /afk handed this issue to a person: its attempts cost ${spent_usd:.2} over {runs} run(s), reaching the budget of {limit} per issue (budget.usd_per_issue). To retry, add `ready-for-agent` back; its spend then counts afresh."
    )
}

/// What ends [`over_budget`] after a capped attempt: where its work is (`pushed` as in
/// [`capped`]), since no later attempt resumes it by itself.
pub fn over_budget_work(branch: &str, pushed: &str) -> String {
    format!(
        " The last attempt reached the wall-clock cap; its work is on branch `{branch}`{pushed}."
    )
}

/// A branch/dir-safe slug of an issue title.
pub fn slugify(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 40 {
            break;
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() { "issue".into() } else { out }
}

/// The title of a listed issue; the gh listing carries only the body, so there the first
/// line of the body stands in.
pub fn issue_title(issue: &LabeledIssue) -> String {
    if let Some(t) = issue.title.as_ref().filter(|t| !t.trim().is_empty()) {
        return t.trim().to_string();
    }
    issue
        .body
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.trim_start_matches('#').trim().chars().take(80).collect())
        .unwrap_or_else(|| format!("issue {}", issue.number))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(slugify("Fix the Login page!"), "fix-the-login-page");
        assert_eq!(slugify("  ## ?? "), "issue");
        assert_eq!(slugify("Ünïcode and stuff"), "n-code-and-stuff");
        assert!(slugify(&"x".repeat(100)).len() <= 40);
    }
}
