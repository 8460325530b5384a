//! Agent profiles: what the built-in worker knows about the coding agent it runs, so the
//! fleet can tell *the account ran out* from *this issue failed* and record what an
//! attempt cost (`docs/SPEC.md` §11.13).
//!
//! A profile knows three things: how the agent gets its task ([`argv`], from the
//! [`prompt`] template), how to read the run's structured result (one parser per CLI:
//! [`claude`], [`codex`], and the generic contract's result file in [`generic`]), and how
//! the run ended ([`End`]). What counts as account-wide is read from the agent's own words
//! in [`limits`]. Pure: the worker hands it bytes and exit codes, it hands back facts.

pub mod claude;
pub mod codex;
pub mod generic;
pub mod limits;

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which agent CLI the worker runs, chosen by `[agent] profile` or by the file name of
/// `agent.command[0]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileKind {
    /// Claude Code (`claude -p … --output-format stream-json --verbose`).
    Claude,
    /// OpenAI Codex CLI (`codex exec --json …`).
    Codex,
    /// Any program meeting the generic contract (exit 0 done, 75 account-wide).
    Generic,
}

impl ProfileKind {
    /// The profile a program's file name implies: `claude` and `codex` (also as
    /// `claude-code`, `codex-cli`), anything else generic.
    pub fn from_program(program: &str) -> ProfileKind {
        let name = Path::new(program)
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        if name.starts_with("claude") {
            ProfileKind::Claude
        } else if name.starts_with("codex") {
            ProfileKind::Codex
        } else {
            ProfileKind::Generic
        }
    }
}

impl fmt::Display for ProfileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProfileKind::Claude => "claude",
            ProfileKind::Codex => "codex",
            ProfileKind::Generic => "generic",
        })
    }
}

/// A profile name that is none of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown agent profile {0:?} (expected claude, codex or generic)")]
pub struct UnknownProfile(pub String);

impl FromStr for ProfileKind {
    type Err = UnknownProfile;
    fn from_str(s: &str) -> Result<Self, UnknownProfile> {
        match s {
            "claude" => Ok(ProfileKind::Claude),
            "codex" => Ok(ProfileKind::Codex),
            "generic" => Ok(ProfileKind::Generic),
            other => Err(UnknownProfile(crate::text::excerpt(other))),
        }
    }
}

/// What one run cost and which session it was, where the agent said.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_tokens: Option<u64>,
    #[serde(default)]
    pub turns: Option<u64>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
}

impl Usage {
    /// Fills what `self` does not know from `other`.
    pub fn or(self, other: Usage) -> Usage {
        Usage {
            cost_usd: self.cost_usd.or(other.cost_usd),
            input_tokens: self.input_tokens.or(other.input_tokens),
            output_tokens: self.output_tokens.or(other.output_tokens),
            cache_read_tokens: self.cache_read_tokens.or(other.cache_read_tokens),
            turns: self.turns.or(other.turns),
            model: self.model.or(other.model),
            session_id: self.session_id.or(other.session_id),
        }
    }

    /// Input and output tokens together (what `budget.tokens_per_day` counts).
    pub fn tokens(&self) -> u64 {
        self.input_tokens
            .unwrap_or(0)
            .saturating_add(self.output_tokens.unwrap_or(0))
    }
}

/// Why the whole account, not the issue, stopped the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccountWide {
    /// The plan's usage window is used up (a reset time is often known).
    UsageLimit,
    /// No login, or it expired or was revoked.
    Login,
    /// The prepaid credit or quota is exhausted.
    Credit,
    /// The provider is overloaded (HTTP 529/503).
    Overloaded,
    /// The CLI gave up retrying on rate limits (429) or server errors (5xx): the account's
    /// request rate, not this issue.
    RateLimited,
    /// The provider cannot be reached: connection refused, DNS, TLS, a stream cut every
    /// time, the CLI waiting for the network.
    Unreachable,
}

impl fmt::Display for AccountWide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccountWide::UsageLimit => "usage limit",
            AccountWide::Login => "login missing or expired",
            AccountWide::Credit => "credit exhausted",
            AccountWide::Overloaded => "provider overloaded",
            AccountWide::RateLimited => "rate limited",
            AccountWide::Unreachable => "provider unreachable",
        })
    }
}

/// How one run of the agent ended.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// It did its work (exit 0, and no error result).
    Done,
    /// It failed on this issue (its exit code, or 1 when it exited 0 with an error result).
    Failed { code: i32 },
    /// The account cannot run any issue now: the whole fleet pauses.
    AccountWide {
        why: AccountWide,
        /// When the provider said the limit resets (epoch seconds).
        reset_epoch: Option<u64>,
        /// The agent's own words, one line.
        detail: String,
    },
    /// Stopped by a signal the worker passed on (a stop, a stall kill).
    Interrupted,
}

/// What the worker saw of a finished run.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub exit_code: i32,
    /// The end of the agent's stdout (the structured result is its last line).
    pub stdout: &'a [u8],
    /// The end of its stderr.
    pub stderr: &'a [u8],
    /// The bytes of `$RED_AFK_RESULT_FILE`, when the agent wrote one.
    pub result_file: Option<&'a [u8]>,
    /// Now, epoch seconds: relative resets ("try again in 2 hours") count from it.
    pub now_epoch: u64,
}

/// The run's end and its usage, as `kind` reads them.
pub fn classify(kind: ProfileKind, seen: &Seen) -> (End, Usage) {
    let file = seen.result_file.and_then(generic::parse_result_file);
    let (end, usage) = match kind {
        ProfileKind::Claude => claude::classify(seen),
        ProfileKind::Codex => codex::classify(seen),
        ProfileKind::Generic => generic::classify(seen, file.as_ref()),
    };
    let usage = match file {
        Some(f) => usage.or(f.usage),
        None => usage,
    };
    (end, usage)
}

/// The agent's final message to the person who will review its work (`docs/SPEC.md`
/// §11.22): Claude Code's successful `result` text, Codex's last `agent_message` item, else
/// the result file's `message`, else (a generic agent) the last 20 non-empty lines it printed
/// that are not JSON. Unbounded: the pull request's body cuts it.
pub fn final_message(kind: ProfileKind, seen: &Seen) -> Option<String> {
    let file_message = || {
        let v: serde_json::Value = serde_json::from_slice(seen.result_file?).ok()?;
        v.get("message")?
            .as_str()
            .map(str::to_string)
            .filter(|m| !m.trim().is_empty())
    };
    let events = json_lines(seen.stdout);
    let said = match kind {
        ProfileKind::Claude => events
            .iter()
            .rev()
            .find(|e| e["type"] == "result")
            .filter(|r| !r["is_error"].as_bool().unwrap_or(false))
            .and_then(|r| r["result"].as_str().map(str::to_string)),
        ProfileKind::Codex => events
            .iter()
            .rev()
            .filter(|e| e["type"] == "item.completed")
            .find(|e| e["item"]["type"] == "agent_message")
            .and_then(|e| e["item"]["text"].as_str().map(str::to_string)),
        ProfileKind::Generic => None,
    };
    said.filter(|m| !m.trim().is_empty())
        .or_else(file_message)
        .or_else(|| {
            (kind == ProfileKind::Generic).then(|| {
                let text = String::from_utf8_lossy(seen.stdout);
                let lines: Vec<&str> = text
                    .lines()
                    .map(str::trim_end)
                    .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('{'))
                    .collect();
                lines[lines.len().saturating_sub(20)..].join("\n")
            })
        })
        .filter(|m| !m.trim().is_empty())
}

/// What a prompt template may name.
#[derive(Debug, Clone)]
pub struct PromptVars<'a> {
    pub number: u64,
    pub title: &'a str,
    /// The file holding the issue's body (`RED_AFK_ISSUE_BODY_FILE`).
    pub body_file: &'a Path,
    pub branch: &'a str,
    /// The branch this attempt continues (`RED_AFK_RESUME_BRANCH`), if any.
    pub resume_branch: Option<&'a str>,
    /// What this round must address (`docs/SPEC.md` §11.22): a failing check's output, a
    /// CI failure, a review or a person's `/afk fix` / `/afk requeue` text.
    pub guidance: Option<&'a str>,
}

/// The template used when `[agent] prompt` is unset.
pub const DEFAULT_PROMPT: &str = "Work on issue #{number}: {title}\n\n\
The issue's full text is in the file {body_file}. You are in a git worktree on branch \
{branch}: make the change the issue asks for and commit it there.{resume}{guidance}";

/// The `{guidance}` text: empty without guidance, else a paragraph the agent must address.
pub fn guidance_paragraph(guidance: Option<&str>) -> String {
    match guidance.map(str::trim).filter(|g| !g.is_empty()) {
        Some(g) => format!("\n\nThis round must address the following before it is done:\n\n{g}"),
        None => String::new(),
    }
}

/// The `{resume}` sentence: names the branch being continued, empty for a fresh attempt.
pub fn resume_sentence(resume_branch: Option<&str>) -> String {
    match resume_branch {
        Some(b) => format!(
            " This attempt continues earlier work already on branch {b}: read its commits \
             first and carry on from them rather than starting over."
        ),
        None => String::new(),
    }
}

/// The prompt: `template` (or [`DEFAULT_PROMPT`]) with `{title}`, `{body_file}`,
/// `{number}`, `{branch}`, `{resume}` and `{guidance}` replaced, in one pass so a title containing
/// `{branch}` stays as written.
pub fn prompt(template: Option<&str>, v: &PromptVars) -> String {
    let template = template.unwrap_or(DEFAULT_PROMPT);
    let mut out = String::with_capacity(template.len() + v.title.len());
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let Some(j) = tail.find('}') else {
            out.push_str(tail);
            rest = "";
            break;
        };
        let name = &tail[1..j];
        let value = match name {
            "title" => Some(v.title.replace('\0', "")),
            "body_file" => Some(v.body_file.display().to_string()),
            "number" => Some(v.number.to_string()),
            "branch" => Some(v.branch.to_string()),
            "resume" => Some(resume_sentence(v.resume_branch)),
            "guidance" => Some(guidance_paragraph(v.guidance)),
            _ => None,
        };
        match value {
            Some(x) => out.push_str(&x),
            None => out.push_str(&tail[..=j]),
        }
        rest = &tail[j + 1..];
    }
    out.push_str(rest);
    out
}

/// The agent's argv: `command` and what `kind` adds so the real CLI takes the task
/// non-interactively and prints a result the worker can read: the prompt always (as the
/// CLI's positional argument), and no flag the command already sets (its own `-p`,
/// `--output-format`, `exec`, `--json`).
/// `session` resumes an earlier session (Claude Code's `--resume`).
pub fn argv(
    kind: ProfileKind,
    command: &[String],
    prompt: &str,
    prompt_set: bool,
    session: Option<&str>,
) -> Vec<String> {
    let mut out = command.to_vec();
    let has = |flag: &str| command.iter().skip(1).any(|a| a == flag);
    match kind {
        ProfileKind::Claude => {
            if !has("-p") && !has("--print") {
                out.push("-p".into());
            }
            out.push(prompt.to_string());
            if !has("--output-format") {
                out.extend(["--output-format".into(), "stream-json".into()]);
                if !has("--verbose") {
                    out.push("--verbose".into());
                }
            }
            if let Some(s) = session.filter(|_| !has("--resume") && !has("-r")) {
                out.extend(["--resume".into(), s.to_string()]);
            }
        }
        ProfileKind::Codex => {
            if !has("exec") && !has("e") {
                out.push("exec".into());
            }
            if !has("--json") {
                out.push("--json".into());
            }
            out.push(prompt.to_string());
        }
        ProfileKind::Generic => {
            if prompt_set {
                out.push(prompt.to_string());
            }
        }
    }
    out
}

/// Whether one line of an agent's output is its CLI's retry chatter, not the model's work:
/// Claude Code's `{"type":"system","subtype":"api_retry",…}` and Codex's
/// `{"type":"error","message":"Reconnecting... 2/5 (…)"}` (also `… waiting for network`).
/// A CLI riding out a provider's outage prints these for as long as the outage lasts, so
/// they must not count as progress for the stall check (`docs/SPEC.md` §11.13).
pub fn is_retry_chatter(line: &[u8]) -> bool {
    let line = line.trim_ascii();
    if !line.starts_with(b"{") {
        return false;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
        return false;
    };
    (v["type"] == "system" && v["subtype"] == "api_retry")
        || (v["type"] == "error" && v["message"].as_str().is_some_and(codex::is_retry_notice))
}

/// One line of an agent's words, bounded, for the event log and the pause file.
pub(crate) fn detail_line(s: &str) -> String {
    crate::text::excerpt(&crate::text::one_line(s.trim()))
}

/// Every line of `bytes` that parses as a JSON object, in order.
pub(crate) fn json_lines(bytes: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(serde_json::Value::is_object)
        .collect()
}

pub(crate) fn u64_at(v: &serde_json::Value, key: &str) -> Option<u64> {
    let x = v.get(key)?;
    x.as_u64().or_else(|| {
        x.as_f64()
            .filter(|f| *f >= 0.0 && f.is_finite())
            .map(|f| f as u64)
    })
}

pub(crate) fn f64_at(v: &serde_json::Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64().filter(|f| f.is_finite() && *f >= 0.0)
}

pub(crate) fn str_at(v: &serde_json::Value, key: &str) -> Option<String> {
    v.get(key)?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(|s| crate::text::excerpt(&crate::text::one_line(s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_chatter_is_told_from_work() {
        for chatter in [
            &br#"{"type":"system","subtype":"api_retry","error":"rate_limit","attempt":1,"max_retries":2,"retry_delay_ms":504,"error_status":429}"#[..],
            br#"{"type":"error","message":"Reconnecting... waiting for network (Connection failed: error sending request)"}"#,
            br#"  {"type":"error","message":"Reconnecting... 1/2 (exceeded retry limit, last status: 429 Too Many Requests)"}  "#,
        ] {
            assert!(is_retry_chatter(chatter), "{}", String::from_utf8_lossy(chatter));
        }
        for work in [
            &br#"{"type":"error","message":"Quota exceeded. Check your plan and billing details."}"#[..],
            br#"{"type":"assistant","message":{"content":[{"type":"text","text":"Reconnecting"}]}}"#,
            br#"{"type":"item.completed","item":{"type":"agent_message","text":"api_retry"}}"#,
            b"Reconnecting... (plain text)",
            b"{not json",
        ] {
            assert!(!is_retry_chatter(work), "{}", String::from_utf8_lossy(work));
        }
    }

    #[test]
    fn profiles_follow_the_program_name() {
        assert_eq!(
            ProfileKind::from_program("/usr/bin/claude"),
            ProfileKind::Claude
        );
        assert_eq!(ProfileKind::from_program("codex"), ProfileKind::Codex);
        assert_eq!(ProfileKind::from_program("sh"), ProfileKind::Generic);
        assert_eq!("codex".parse::<ProfileKind>(), Ok(ProfileKind::Codex));
        assert!("gpt".parse::<ProfileKind>().is_err());
    }

    #[test]
    fn the_final_message_is_each_clis_last_word() {
        let seen = |stdout: &'static [u8], file: Option<&'static [u8]>| Seen {
            exit_code: 0,
            stdout,
            stderr: b"",
            result_file: file,
            now_epoch: 0,
        };
        let claude = br#"{"type":"assistant","message":{"content":"thinking"}}
{"type":"result","subtype":"success","is_error":false,"result":"Fixed the parser."}"#;
        assert_eq!(
            final_message(ProfileKind::Claude, &seen(claude, None)).as_deref(),
            Some("Fixed the parser.")
        );
        let codex = br#"{"type":"item.completed","item":{"type":"agent_message","text":"first"}}
{"type":"item.completed","item":{"type":"command_execution","command":"ls"}}
{"type":"item.completed","item":{"type":"agent_message","text":"Done: committed."}}
{"type":"turn.completed","usage":{}}"#;
        assert_eq!(
            final_message(ProfileKind::Codex, &seen(codex, None)).as_deref(),
            Some("Done: committed.")
        );
        let generic = b"step 1\n{\"x\":1}\n\nall done\n";
        assert_eq!(
            final_message(ProfileKind::Generic, &seen(generic, None)).as_deref(),
            Some("step 1\nall done")
        );
        let file = br#"{"message":"from the file","cost_usd":1}"#;
        assert_eq!(
            final_message(ProfileKind::Generic, &seen(generic, Some(file))).as_deref(),
            Some("from the file")
        );
        assert_eq!(final_message(ProfileKind::Claude, &seen(b"", None)), None);
    }

    #[test]
    fn prompts_expand_once_and_resume_names_the_branch() {
        let v = PromptVars {
            number: 7,
            title: "Fix {branch} parsing",
            body_file: Path::new("/a/issue-body.md"),
            branch: "afk/w/7-x",
            resume_branch: None,
            guidance: None,
        };
        let p = prompt(
            Some("#{number} {title} {body_file} {branch}{resume} {other}"),
            &v,
        );
        assert_eq!(
            p,
            "#7 Fix {branch} parsing /a/issue-body.md afk/w/7-x {other}"
        );
        let v = PromptVars {
            resume_branch: Some("afk/w/7-x"),
            ..v
        };
        assert!(
            prompt(Some("{resume}"), &v)
                .contains("continues earlier work already on branch afk/w/7-x")
        );
        assert!(prompt(None, &v).contains("issue #7"));
        assert!(!prompt(None, &v).contains("must address"));
        let v = PromptVars {
            guidance: Some("cargo test: 1 failed {title}"),
            ..v
        };
        let p = prompt(None, &v);
        assert!(
            p.ends_with(
                "must address the following before it is done:\n\ncargo test: 1 failed {title}"
            ),
            "{p}"
        );
    }

    #[test]
    fn argv_adds_what_the_cli_needs_and_nothing_it_already_has() {
        let c = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            argv(
                ProfileKind::Claude,
                &c(&["claude"]),
                "do it",
                false,
                Some("s1")
            ),
            c(&[
                "claude",
                "-p",
                "do it",
                "--output-format",
                "stream-json",
                "--verbose",
                "--resume",
                "s1"
            ])
        );
        assert_eq!(
            argv(
                ProfileKind::Claude,
                &c(&["claude", "-p", "--output-format", "json"]),
                "do it",
                false,
                None
            ),
            c(&["claude", "-p", "--output-format", "json", "do it"])
        );
        assert_eq!(
            argv(ProfileKind::Codex, &c(&["codex"]), "do it", false, None),
            c(&["codex", "exec", "--json", "do it"])
        );
        assert_eq!(
            argv(ProfileKind::Generic, &c(&["sh", "a.sh"]), "p", false, None),
            c(&["sh", "a.sh"])
        );
        assert_eq!(
            argv(ProfileKind::Generic, &c(&["a"]), "p", true, None),
            c(&["a", "p"])
        );
    }
}
