//! The agent boundary against the real CLIs (issue 48): Claude Code and Codex installed
//! from the npm registry at pinned versions (`support::agent_clis`), unmodified, pointed at
//! the suite's scripted model server (`support::model_server`) on 127.0.0.1, one provider
//! scenario a test. What each CLI prints is classified by the worker's own profiles; with
//! `AFK_RECORD_CORPUS=1` it is also written to `tests/corpus/agents/real/`, the corpus the
//! offline tests and the fuzzing read.
//!
//! The CLIs run with only the environment the worker gives an agent (an allowlist: `PATH`,
//! `HOME` private, the profile's own variables) and their retries scaled down through
//! their own knobs (`CLAUDE_CODE_MAX_RETRIES`; Codex's provider `request_max_retries`,
//! `stream_max_retries`), so a scenario takes seconds. The same scenarios at the CLIs'
//! default timings are run by hand with `AFK_REAL_DEFAULTS=1` (docs/guide/agents-and-spend.md, "Running real agents").

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use afk_supervisor::agent_profile::{self, AccountWide, End, ProfileKind, Seen, Usage};

use afk_supervisor::lanes::pause_file;
use afk_supervisor::ledger;

use crate::support::agent_clis::{self, CLAUDE_VERSION, CODEX_VERSION};
use crate::support::fleet::{FAST_TIMING, Fleet, StatusExit};
use crate::support::model_server::{Api, ModelServer, Scenario, TURN_USAGE, refused_port};
use crate::support::{TestEnv, wait_until};
use afk_supervisor::event_log::Kind;

/// The longest one CLI run may take before the test kills it and fails: at the CLIs'
/// default timings (by hand) an hour.
fn run_max() -> Duration {
    Duration::from_secs(if real_defaults() { 3600 } else { 150 })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    Claude,
    Codex,
}

impl Cli {
    pub fn name(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
        }
    }

    fn version(self) -> &'static str {
        match self {
            Cli::Claude => CLAUDE_VERSION,
            Cli::Codex => CODEX_VERSION,
        }
    }

    pub fn kind(self) -> ProfileKind {
        match self {
            Cli::Claude => ProfileKind::Claude,
            Cli::Codex => ProfileKind::Codex,
        }
    }

    /// The arguments of the guide's `agent.command` for this CLI.
    fn args(self) -> Vec<String> {
        match self {
            Cli::Claude => vec!["--dangerously-skip-permissions".into()],
            Cli::Codex => Vec::new(),
        }
    }

    /// The `agent.command` the guide gives for this CLI, with the installed program.
    pub fn command(self) -> Vec<String> {
        let program = agent_clis::bin_dir().join(self.name());
        let mut c = vec![program.display().to_string()];
        c.extend(self.args());
        c
    }
}

/// Whether the CLIs run at their own default retry timings (by hand, slow).
fn real_defaults() -> bool {
    std::env::var("AFK_REAL_DEFAULTS").as_deref() == Ok("1")
}

/// The agent's environment for `cli` against the provider at `base_url`: the names the
/// worker's allowlist passes (issue 47), and the CLI's config in `home`. Retries scaled
/// down unless [`real_defaults`].
pub fn agent_env(cli: Cli, home: &Path, base_url: &str) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        ),
        ("HOME".into(), home.display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
        ("TZ".into(), "UTC".into()),
        ("TMPDIR".into(), home.join("tmp").display().to_string()),
    ];
    fs::create_dir_all(home.join("tmp")).unwrap();
    match cli {
        Cli::Claude => {
            env.extend(
                [
                    ("ANTHROPIC_BASE_URL", base_url),
                    ("ANTHROPIC_API_KEY", "sk-ant-afk-test"),
                    // Claude Code refuses --dangerously-skip-permissions as root without it.
                    ("IS_SANDBOX", "1"),
                    ("DISABLE_AUTOUPDATER", "1"),
                    ("DISABLE_TELEMETRY", "1"),
                    ("DISABLE_ERROR_REPORTING", "1"),
                    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
                ]
                .map(|(k, v)| (k.to_string(), v.to_string())),
            );
            if !real_defaults() {
                env.push(("CLAUDE_CODE_MAX_RETRIES".into(), "2".into()));
            }
            if SUBSCRIPTION.with(std::cell::Cell::get) {
                // A subscriber's login as `claude /login` leaves it: the CLI then reads the
                // plan's rate-limit windows from the provider's headers.
                env.retain(|(k, _)| k != "ANTHROPIC_API_KEY");
                let dir = home.join(".claude");
                fs::create_dir_all(&dir).unwrap();
                let expires = (afk_supervisor::timeutil::now_epoch() + 30 * 86_400) * 1000;
                fs::write(
                    dir.join(".credentials.json"),
                    serde_json::json!({"claudeAiOauth": {
                        "accessToken": "sk-ant-oat01-afk-test",
                        "refreshToken": "sk-ant-ort01-afk-test",
                        "expiresAt": expires,
                        "scopes": ["user:inference", "user:profile", "user:sessions:claude_code"],
                        "subscriptionType": "max"}})
                    .to_string(),
                )
                .unwrap();
            }
        }
        Cli::Codex => {
            env.push(("OPENAI_API_KEY".into(), "sk-afk-test".into()));
            let retries = if real_defaults() {
                String::new()
            } else {
                "request_max_retries = 2\nstream_max_retries = 2\nstream_idle_timeout_ms = 5000\n"
                    .to_string()
            };
            let dir = home.join(".codex");
            fs::create_dir_all(&dir).unwrap();
            // The guide's config, as written, with the test's provider before it (top-level
            // keys first: TOML puts every key after a table header into that table).
            fs::write(
                dir.join("config.toml"),
                format!(
                    "model = \"gpt-5.5\"\nmodel_provider = \"afk\"\n{}\n\
                     [model_providers.afk]\nname = \"afk-test\"\nbase_url = \"{base_url}/v1\"\n\
                     wire_api = \"responses\"\nenv_key = \"OPENAI_API_KEY\"\n{retries}",
                    readme_block("<!-- codex-config -->")
                ),
            )
            .unwrap();
        }
    }
    env
}

/// The fenced block right after `marker` in the guide's page on real agents: the setup it
/// documents is the one the suite runs.
fn readme_block(marker: &str) -> String {
    crate::support::docs::block_after(&crate::support::docs::guide("agents-and-spend.md"), marker)
}

/// The guide's `[agent] command` for each CLI is the one the suite runs (with the
/// installed program in place of the bare name).
#[test]
fn the_readme_agent_setup_is_the_tested_one() {
    for cli in [Cli::Claude, Cli::Codex] {
        let block = readme_block(&format!("<!-- agent-setup: {} -->", cli.name()));
        let v: toml::Value = toml::from_str(&block).unwrap();
        let command: Vec<String> = v["agent"]["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        assert_eq!(command[0], cli.name());
        let tested = cli.args();
        assert_eq!(command[1..], tested[..], "{}", cli.name());
    }
    let codex: toml::Value = toml::from_str(&readme_block("<!-- codex-config -->")).unwrap();
    assert_eq!(codex["approval_policy"].as_str(), Some("never"));
}

/// What one run of a CLI printed.
pub struct Run {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub took: Duration,
}

impl Run {
    fn classify(&self, cli: Cli) -> (End, Usage) {
        agent_profile::classify(
            cli.kind(),
            &Seen {
                exit_code: self.code,
                stdout: &self.stdout,
                stderr: &self.stderr,
                result_file: None,
                now_epoch: afk_supervisor::timeutil::now_epoch(),
            },
        )
    }

    fn show(&self) -> String {
        format!(
            "exit {} after {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.took,
            String::from_utf8_lossy(&self.stdout),
            String::from_utf8_lossy(&self.stderr)
        )
    }
}

/// A git repo with one commit for the CLI to work in.
fn work_repo(env: &TestEnv) -> PathBuf {
    let dir = env.path().join("work");
    fs::create_dir_all(&dir).unwrap();
    env.git(&dir, &["init", "-q", "-b", "main"]);
    fs::write(dir.join("README.md"), "seed\n").unwrap();
    env.git(&dir, &["add", "README.md"]);
    env.git(&dir, &["commit", "-q", "-m", "seed"]);
    dir
}

/// Runs `cli` once, as the worker would (the profile's argv, stdin closed), against the
/// provider at `base_url`, in a fresh repo; the repo's commit count after is returned too.
/// With `stop_when`, the CLI is stopped (SIGTERM to its group, as a stall kill does) once
/// its stdout holds that text or that long has passed: how a test ends a CLI that never
/// ends by itself.
fn run_cli(cli: Cli, base_url: &str, stop_when: Option<Stop>) -> (Run, usize) {
    let env = TestEnv::new();
    let repo = work_repo(&env);
    let home = env.path().join("agent-home");
    fs::create_dir_all(&home).unwrap();
    let mut command = cli.command();
    command.extend(EXTRA_ARGS.with(|a| a.borrow().clone()));
    let argv = agent_profile::argv(
        cli.kind(),
        &command,
        "Work on issue #1: write afk-done.txt and commit it.",
        false,
        None,
    );
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(&repo)
        .env_clear()
        .envs(agent_env(cli, &home, base_url))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let pid = child.id() as i32;
    let pump = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let b = std::sync::Arc::clone(&buf);
        let h = std::thread::spawn(move || {
            let Some(mut pipe) = pipe else { return };
            let mut chunk = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                b.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        (buf, h)
    };
    use std::io::Read;
    let (out, out_h) = pump(child.stdout.take().map(|p| Box::new(p) as _));
    let (err, err_h) = pump(child.stderr.take().map(|p| Box::new(p) as _));
    let group = |sig: i32| {
        // SAFETY: kill(2) on the process group the test made for this child.
        unsafe { libc::kill(-pid, sig) };
    };
    let deadline = Instant::now() + run_max();
    let mut stopped = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        let said = match stop_when {
            Some(Stop::Says(t)) => String::from_utf8_lossy(&out.lock().unwrap()).contains(t),
            Some(Stop::After(d)) => started.elapsed() >= d,
            None => false,
        };
        if (said && !stopped) || Instant::now() >= deadline {
            group(if said { libc::SIGTERM } else { libc::SIGKILL });
            stopped = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever the CLI left running in its group goes with it.
    group(libc::SIGKILL);
    let _ = out_h.join();
    let _ = err_h.join();
    use std::os::unix::process::ExitStatusExt;
    let run = Run {
        code: status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        stdout: std::mem::take(&mut *out.lock().unwrap()),
        stderr: std::mem::take(&mut *err.lock().unwrap()),
        took: started.elapsed(),
    };
    let commits = env
        .git(&repo, &["rev-list", "--count", "HEAD"])
        .trim()
        .parse()
        .unwrap_or(0);
    record(cli, scenario_name(base_url), &run);
    (run, commits)
}

/// When a test stops a CLI that has not ended by itself.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Once its stdout holds this.
    Says(&'static str),
    /// After this long.
    After(Duration),
}

thread_local! {
    static SCENARIO: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    /// Whether Claude Code runs on a subscription login (OAuth) instead of an API key.
    static SUBSCRIPTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Arguments added to the CLI's command for one test (`--max-turns 1`).
    static EXTRA_ARGS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn scenario_name(_base_url: &str) -> String {
    SCENARIO.with(|s| s.borrow().clone())
}

/// With `AFK_RECORD_CORPUS=1`, what the CLI printed goes to
/// `tests/corpus/agents/real/<cli>-<version>/<scenario>.{stdout,stderr}` (and its exit code
/// in `.exit`): the real output the offline tests and the fuzzing read.
fn record(cli: Cli, scenario: String, run: &Run) {
    if std::env::var("AFK_RECORD_CORPUS").as_deref() != Ok("1") || scenario.is_empty() {
        return;
    }
    let dir = corpus_dir(cli);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(format!("{scenario}.stdout")), &run.stdout).unwrap();
    fs::write(dir.join(format!("{scenario}.stderr")), &run.stderr).unwrap();
    fs::write(
        dir.join(format!("{scenario}.exit")),
        format!("{}\n", run.code),
    )
    .unwrap();
}

pub fn corpus_dir(cli: Cli) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/agents/real")
        .join(format!("{}-{}", cli.name(), cli.version()))
}

/// Runs `cli` against a server playing `scenario` (or, for `None`, a port where nothing
/// listens), recorded under `name`.
fn play(cli: Cli, name: &str, scenario: Option<Scenario>) -> (Run, usize, Option<ModelServer>) {
    play_until(cli, name, scenario, None)
}

fn play_until(
    cli: Cli,
    name: &str,
    scenario: Option<Scenario>,
    stop_when: Option<Stop>,
) -> (Run, usize, Option<ModelServer>) {
    SCENARIO.with(|s| *s.borrow_mut() = name.to_string());
    let server = scenario.map(ModelServer::start);
    let url = match &server {
        Some(s) => s.base_url(),
        None => format!("http://127.0.0.1:{}", refused_port()),
    };
    let (run, commits) = run_cli(cli, &url, stop_when);
    (run, commits, server)
}

fn success(cli: Cli) {
    let (run, commits, server) = play(cli, "success", Some(Scenario::Success));
    let (end, usage) = run.classify(cli);
    assert_eq!(end, End::Done, "{}", run.show());
    assert_eq!(
        commits,
        2,
        "the model's tool call committed: {}",
        run.show()
    );
    let server = server.unwrap();
    assert_eq!(server.model_successes(), 2, "{:?}", server.requests());
    let (api, path) = match cli {
        Cli::Claude => (Api::Anthropic, "/v1/messages"),
        Cli::Codex => (Api::OpenAi, "/v1/responses"),
    };
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.api == api && r.path.starts_with(path)),
        "{:?}",
        server.requests()
    );
    // Two turns of the scripted model: its tokens, summed.
    let (input, output, _) = TURN_USAGE;
    assert!(
        usage.input_tokens.unwrap_or(0) >= 2 * input
            && usage.output_tokens.unwrap_or(0) >= 2 * output,
        "{usage:?}\n{}",
        run.show()
    );
}

#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn claude_success_is_done_with_its_tokens() {
    success(Cli::Claude);
}

#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn codex_success_is_done_with_its_tokens() {
    success(Cli::Codex);
}

fn account_wide(end: &End) -> Option<AccountWide> {
    match end {
        End::AccountWide { why, .. } => Some(*why),
        _ => None,
    }
}

/// Runs `cli` against `scenario` (recorded as `name`) and returns the run and its end.
fn classified(cli: Cli, name: &str, scenario: Option<Scenario>) -> (Run, End, usize) {
    let (run, commits, _server) = play(cli, name, scenario);
    let (end, _) = run.classify(cli);
    (run, end, commits)
}

fn expect_account_wide(cli: Cli, name: &str, scenario: Option<Scenario>, want: AccountWide) {
    let (run, end, commits) = classified(cli, name, scenario);
    assert_eq!(account_wide(&end), Some(want), "{end:?}\n{}", run.show());
    assert_eq!(commits, 1, "nothing was committed");
}

fn expect_done(cli: Cli, name: &str, scenario: Scenario) {
    let (run, end, commits) = classified(cli, name, Some(scenario));
    assert_eq!(end, End::Done, "{}", run.show());
    assert_eq!(commits, 2, "{}", run.show());
}

macro_rules! both {
    ($claude:ident, $codex:ident, |$cli:ident| $body:expr) => {
        #[test]
        #[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
        fn $claude() {
            let $cli = Cli::Claude;
            $body
        }
        #[test]
        #[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
        fn $codex() {
            let $cli = Cli::Codex;
            $body
        }
    };
}

both!(
    claude_rides_out_a_429_burst,
    codex_rides_out_a_429_burst,
    |cli| expect_done(cli, "burst-429", Scenario::Burst429 { n: 1 })
);

both!(
    claude_stream_cut_once_is_done,
    codex_stream_cut_once_is_done,
    |cli| expect_done(cli, "stream-cut-once", Scenario::StreamCutOnce)
);

both!(
    claude_sustained_429_is_account_wide,
    codex_sustained_429_is_account_wide,
    |cli| {
        expect_account_wide(
            cli,
            "sustained-429",
            Some(Scenario::Sustained429 { retry_after: 1 }),
            AccountWide::RateLimited,
        )
    }
);

both!(
    claude_credit_is_account_wide,
    codex_credit_is_account_wide,
    |cli| expect_account_wide(cli, "credit", Some(Scenario::Credit), AccountWide::Credit)
);

both!(claude_401_is_login, codex_401_is_login, |cli| {
    expect_account_wide(
        cli,
        "unauthorized",
        Some(Scenario::Unauthorized),
        AccountWide::Login,
    )
});

both!(
    claude_overloaded_is_account_wide,
    codex_overloaded_is_account_wide,
    |cli| {
        let status = if cli == Cli::Claude { 529 } else { 503 };
        expect_account_wide(
            cli,
            &format!("overloaded-{status}"),
            Some(Scenario::Overloaded { status }),
            AccountWide::Overloaded,
        )
    }
);

both!(
    claude_refused_is_unreachable,
    codex_refused_is_unreachable,
    |cli| {
        // Codex never ends by itself ("Reconnecting... waiting for network"): stopped as a
        // stall kill would, what it printed says whose fault it was.
        let stop = (cli == Cli::Codex).then_some(Stop::Says("waiting for network"));
        let (run, _, _) = play_until(cli, "connection-refused", None, stop);
        let (end, _) = run.classify(cli);
        assert_eq!(
            account_wide(&end),
            Some(AccountWide::Unreachable),
            "{end:?}\n{}",
            run.show()
        );
    }
);

both!(
    claude_stream_cut_always_is_unreachable,
    codex_stream_cut_always_is_unreachable,
    |cli| {
        expect_account_wide(
            cli,
            "stream-cut-always",
            Some(Scenario::StreamCutAlways),
            AccountWide::Unreachable,
        )
    }
);

/// A usage limit with its reset as each CLI reports it: Codex's words (`try again at 1:42
/// PM.`, in its local time) and Claude Code's on a subscription (`You've hit your 5-hour
/// limit · resets 1:48pm (UTC)`, with the window's `resetsAt`).
fn usage_limit(cli: Cli, name: &str) {
    let reset = afk_supervisor::timeutil::now_epoch() + 3 * 3600;
    let (run, end, _) = classified(cli, name, Some(Scenario::UsageLimit { reset_epoch: reset }));
    match end {
        End::AccountWide {
            why: AccountWide::UsageLimit,
            reset_epoch: Some(r),
            detail,
        } => {
            // Wall-clock words have minutes: the reset is read to the minute.
            assert!(
                r.abs_diff(reset) <= 60,
                "reset {r} vs {reset}\n{}",
                run.show()
            );
            assert!(detail.contains("limit"), "the CLI's own words: {detail}");
        }
        other => panic!("{other:?}\n{}", run.show()),
    }
}

#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn codex_usage_limit_names_its_reset() {
    usage_limit(Cli::Codex, "usage-limit");
}

#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn claude_subscription_usage_limit_names_its_reset() {
    SUBSCRIPTION.with(|s| s.set(true));
    usage_limit(Cli::Claude, "usage-limit-subscription");
}

/// On an API key Claude Code names no reset: a rate limit, paused on the backoff.
#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn claude_api_key_usage_limit_is_a_rate_limit() {
    let reset = afk_supervisor::timeutil::now_epoch() + 3 * 3600;
    let (run, end, _) = classified(
        Cli::Claude,
        "usage-limit",
        Some(Scenario::UsageLimit { reset_epoch: reset }),
    );
    assert_eq!(
        account_wide(&end),
        Some(AccountWide::RateLimited),
        "{end:?}\n{}",
        run.show()
    );
}

/// The provider sends its headers, then nothing; or never answers at all. Codex gives up
/// on its own idle timeout (`stream_idle_timeout_ms`, scaled down here; 300 s by default)
/// after its stream retries: the provider's fault, nobody's issue.
#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn codex_silence_after_headers_is_unreachable() {
    let (run, _, _) = play(
        Cli::Codex,
        "headers-then-silence",
        Some(Scenario::HeadersThenSilence),
    );
    let (end, _) = run.classify(Cli::Codex);
    assert_eq!(
        account_wide(&end),
        Some(AccountWide::Unreachable),
        "{end:?}\n{}",
        run.show()
    );
}

/// A request never answered: Codex waits without a word (no timeout of its own before the
/// headers), so nothing it prints moves the slot log and the fleet's stall check sees the
/// hang; stopped here after a while, it has said nothing but that the turn started.
#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn codex_waits_silently_for_headers_that_never_come() {
    let (run, _, _) = play_until(
        Cli::Codex,
        "no-headers",
        Some(Scenario::NoHeaders),
        Some(Stop::After(Duration::from_secs(12))),
    );
    let text = String::from_utf8_lossy(&run.stdout);
    let kinds: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["type"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(kinds, ["thread.started", "turn.started"], "{}", run.show());
    assert_eq!(run.code, 128 + libc::SIGTERM, "{}", run.show());
}

/// The provider refuses this conversation (400, too long): the issue's failure, retried on
/// another attempt, never a pause.
fn bad_request(cli: Cli) {
    let (run, end, _) = classified(cli, "bad-request", Some(Scenario::BadRequest));
    assert!(matches!(end, End::Failed { .. }), "{end:?}\n{}", run.show());
}

both!(
    claude_bad_request_is_the_issues_failure,
    codex_bad_request_is_the_issues_failure,
    |cli| bad_request(cli)
);

/// Claude Code stopped by its own `--max-turns`: the issue's failure, with what it cost.
#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn claude_max_turns_is_the_issues_failure() {
    EXTRA_ARGS.with(|a| *a.borrow_mut() = vec!["--max-turns".into(), "1".into()]);
    let (run, end, _) = classified(Cli::Claude, "max-turns", Some(Scenario::Success));
    assert!(matches!(end, End::Failed { .. }), "{end:?}\n{}", run.show());
    let (_, usage) = run.classify(Cli::Claude);
    assert!(usage.cost_usd.unwrap_or(0.0) > 0.0, "{usage:?}");
}

/// The recorded corpus, read back without the CLIs: every recording is classified as its
/// scenario means, so a profile change that misreads what a real CLI printed fails here
/// even where npm is out of reach.
#[test]
fn the_recorded_corpus_classifies_as_each_scenario_means() {
    use AccountWide::*;
    /// What a recording must read as.
    #[derive(Debug, PartialEq)]
    enum Want {
        Done,
        Failed,
        Paused(AccountWide),
    }
    let want = |cli: Cli, scenario: &str| -> Option<Want> {
        Some(match scenario {
            "success" | "burst-429" | "stream-cut-once" => Want::Done,
            "bad-request" | "max-turns" => Want::Failed,
            "sustained-429" => Want::Paused(RateLimited),
            "credit" => Want::Paused(Credit),
            "unauthorized" => Want::Paused(Login),
            "overloaded-529" | "overloaded-503" => Want::Paused(Overloaded),
            "connection-refused" | "stream-cut-always" | "headers-then-silence" => {
                Want::Paused(Unreachable)
            }
            "usage-limit" if cli == Cli::Claude => Want::Paused(RateLimited),
            "usage-limit" | "usage-limit-subscription" => Want::Paused(UsageLimit),
            // Killed while silent: the stall check's case, not the profile's.
            "no-headers" => return None,
            other => panic!("a recording of an unknown scenario: {other}"),
        })
    };
    let mut count = 0;
    for cli in [Cli::Claude, Cli::Codex] {
        let dir = corpus_dir(cli);
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "stdout") {
                continue;
            }
            let scenario = path.file_stem().unwrap().to_string_lossy().into_owned();
            let Some(want) = want(cli, &scenario) else {
                continue;
            };
            let read = |ext: &str| fs::read(path.with_extension(ext)).unwrap();
            let run = Run {
                code: String::from_utf8_lossy(&read("exit"))
                    .trim()
                    .parse()
                    .unwrap(),
                stdout: read("stdout"),
                stderr: read("stderr"),
                took: Duration::ZERO,
            };
            let (end, usage) = run.classify(cli);
            let got = match &end {
                End::Done => Want::Done,
                End::Failed { .. } => Want::Failed,
                End::AccountWide { why, .. } => Want::Paused(*why),
                End::Interrupted => panic!("{}: interrupted", path.display()),
            };
            assert_eq!(got, want, "{}: {end:?}", path.display());
            if want == Want::Done {
                assert!(usage.input_tokens.unwrap_or(0) > 0, "{usage:?}");
                // The model's words about limits stay the conversation's.
                let (end, _) = Run { code: 1, ..run }.classify(cli);
                assert!(
                    matches!(end, End::Failed { .. }),
                    "{}: {end:?}",
                    path.display()
                );
            }
            count += 1;
        }
    }
    assert!(count >= 25, "{count} recordings");
}

// ---- The fleet running the real CLIs ----

/// A fleet on the local tracker whose `agent.command` is `cli`'s, as the guide gives it,
/// against the provider at `base_url`: `workers` slots, `n` ready issues. The CLI's
/// variables reach it through the supervisor and the worker (names on the agent
/// allowlist); its config lives in the test's HOME.
fn real_fleet(cli: Cli, base_url: &str, workers: usize, n: u64) -> Fleet {
    real_fleet_timed(cli, base_url, workers, n, FAST_TIMING)
}

/// [`FAST_TIMING`] with the stall check at 3 s and its kill at 6 s.
fn stall_timing() -> String {
    FAST_TIMING.replace(
        "stall_s = 600\nstall_kill_s = 1200\n",
        "stall_s = 3\nstall_kill_s = 6\n",
    )
}

fn real_fleet_timed(cli: Cli, base_url: &str, workers: usize, n: u64, timing: &str) -> Fleet {
    let mut f = Fleet::new("", "");
    let home = f.env.home.clone();
    for (k, v) in agent_env(cli, &home, base_url) {
        // HOME and PATH stay the test environment's own.
        if !matches!(k.as_str(), "HOME" | "PATH") {
            f.extra_env.push((k, v));
        }
    }
    let command = cli
        .command()
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    f.write_config(&format!(
        "[fleet]\nworkers = {workers}\n\n[tracker]\nkind = \"local\"\n\n\
         [agent]\ncommand = [{command}]\n\n\
         [budget.prices.\"*\"]\ninput = 2.0\ncached_input = 1.0\noutput = 20.0\n\n{timing}"
    ));
    for i in 1..=n {
        f.new_issue(&format!("issue {i}"));
    }
    f
}

fn outcomes(f: &Fleet, n: u64) -> Vec<ledger::Outcome> {
    ledger::read(&f.layout, n)
        .unwrap_or_default()
        .iter()
        .map(|r| r.outcome)
        .collect()
}

/// Long enough for two real CLIs on two shared cores to work a few issues.
fn fleet_wait() -> Duration {
    if real_defaults() {
        run_max()
    } else {
        Duration::from_secs(180)
    }
}

/// The fleet's one agent pause, waited for as long as a CLI may retry before it gives up:
/// seconds scaled down, many minutes at the CLIs' own defaults (Claude Code's ten retries).
fn wait_paused(f: &Fleet) -> Vec<afk_supervisor::event_log::Record> {
    let ok = wait_until(run_max(), || f.count(Kind::FleetAgentPaused) >= 1);
    assert!(ok, "no fleet.agent-paused; log:\n{}", f.dump());
    f.events_of(Kind::FleetAgentPaused)
}

/// Each issue's work is done and published, its ledger says `done` with the tokens the
/// model reported, whatever the CLI printed on the way (`scenario`).
fn fleet_done(cli: Cli, scenario: Scenario) {
    let server = ModelServer::start(scenario.clone());
    let mut f = real_fleet(cli, &server.base_url(), 2, 2);
    f.start(&[]);
    let done = wait_until(fleet_wait(), || {
        (1..=2).all(|n| outcomes(&f, n).contains(&ledger::Outcome::Done))
    });
    assert!(
        done,
        "{scenario:?}: not every issue done; log:\n{}",
        f.dump()
    );
    // The real CLI did its work inside the fleet's sandbox, the default (issue 47).
    let sandbox = f.wait_event_with(Kind::SupervisorIsolation, "agent sandbox:");
    assert!(
        sandbox.msg.starts_with("agent sandbox: bwrap"),
        "{}",
        sandbox.msg
    );
    for n in 1..=2 {
        assert_eq!(
            outcomes(&f, n),
            [ledger::Outcome::Done],
            "#{n}\n{}",
            f.dump()
        );
        let r = ledger::read(&f.layout, n).unwrap();
        let u = &r[0].usage;
        let (input, output, _) = TURN_USAGE;
        assert!(
            u.input_tokens.unwrap_or(0) >= 2 * input && u.output_tokens.unwrap_or(0) >= 2 * output,
            "#{n}: {u:?}"
        );
        let labels = f.labels_of(n);
        assert!(
            labels.iter().any(|l| l == "ready-for-human"),
            "#{n}: {labels:?}"
        );
        // Claude Code prices its run itself; a Codex run is priced at `budget.prices`
        // (its output names no model: the `"*"` entry, set in the fleet's config).
        let cost = u.cost_usd.unwrap_or(0.0);
        match cli {
            Cli::Claude => assert!(cost > 0.0, "#{n}: {u:?}"),
            // 2 turns: (1600 × $2 + 400 × $1 + 100 × $20) / 1e6 = $0.0056.
            Cli::Codex => assert!((cost - 0.0056).abs() < 1e-9, "#{n}: {u:?}"),
        }
    }
    eprintln!(
        "fleet {} {scenario:?}: ledger {:?} {:?}; agent pause: {:?}",
        cli.name(),
        outcomes(&f, 1),
        outcomes(&f, 2),
        pause_file::agent_read(&f.layout.state()).ok().flatten()
    );
    assert_eq!(f.count(Kind::FleetAgentPaused), 0, "{}", f.dump());
}

/// An account-wide condition: the fleet pauses once, in the CLI's own words; every
/// attempt is `account-limited` (none failed, none stalled), no issue gets a failure
/// comment or is quarantined, and each goes back to the queue.
fn fleet_pauses(cli: Cli, scenario: Option<Scenario>, kind: &str) {
    fleet_pauses_timed(cli, scenario, kind, FAST_TIMING)
}

fn fleet_pauses_timed(cli: Cli, scenario: Option<Scenario>, kind: &str, timing: &str) {
    let server = scenario.clone().map(ModelServer::start);
    let url = match &server {
        Some(s) => s.base_url(),
        None => format!("http://127.0.0.1:{}", refused_port()),
    };
    let mut f = real_fleet_timed(cli, &url, 2, 2, timing);
    f.start(&[]);
    let paused = wait_paused(&f);
    assert!(
        paused[0].msg.contains(kind),
        "{}\n{}",
        paused[0].msg,
        f.dump()
    );
    // Both slots' attempts end (the second may have started before the pause).
    let settled = wait_until(fleet_wait(), || {
        let all: Vec<_> = (1..=2).flat_map(|n| outcomes(&f, n)).collect();
        !all.is_empty()
            && f.status_json(StatusExit::Any)["workers"]
                .as_array()
                .is_none_or(|w| w.iter().all(|w| w["issue"].is_null()))
    });
    assert!(settled, "{}", f.dump());
    let p = pause_file::agent_read(&f.layout.state()).unwrap().unwrap();
    eprintln!(
        "fleet {} {scenario:?}: ledger {:?} {:?}; agent pause: {} ({})",
        cli.name(),
        outcomes(&f, 1),
        outcomes(&f, 2),
        p.kind,
        p.reason
    );
    assert_eq!(p.kind, kind, "{p:?}");
    for n in 1..=2 {
        let o = outcomes(&f, n);
        assert!(
            o.iter().all(|o| *o == ledger::Outcome::AccountLimited),
            "#{n}: {o:?}\n{}",
            f.dump()
        );
        let comments = f.comments_of(n);
        assert!(
            comments.iter().all(|c| !c.contains("failed")),
            "#{n}: {comments:?}"
        );
        assert!(!f.labels_of(n).iter().any(|l| l == "afk:quarantined"));
    }
    assert_eq!(f.count(Kind::FleetAgentPaused), 1, "{}", f.dump());
}

#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn fleet_of_codex_riding_out_429s_is_done() {
    fleet_done(Cli::Codex, Scenario::Burst429 { n: 1 });
}

#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn fleet_of_claude_after_a_cut_stream_is_done_with_its_tokens() {
    fleet_done(Cli::Claude, Scenario::StreamCutOnce);
}

#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn fleet_of_codex_out_of_credit_pauses_blaming_nobody() {
    fleet_pauses(Cli::Codex, Some(Scenario::Credit), "credit exhausted");
}

#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn fleet_of_claude_with_the_provider_unreachable_pauses_blaming_nobody() {
    fleet_pauses(Cli::Claude, None, "provider unreachable");
}

/// Codex never exits while the provider is unreachable: it prints `Reconnecting...
/// waiting for network` for ever. Those notices are not progress, so the stall check
/// stops it (here at 6 s), and its last words make the stall the provider's: the fleet
/// pauses once, every attempt `account-limited`, none `stalled`.
#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn fleet_of_codex_waiting_for_the_network_is_stopped_and_pauses_blaming_nobody() {
    fleet_pauses_timed(Cli::Codex, None, "provider unreachable", &stall_timing());
}

/// The provider takes every request and answers none: both CLIs wait in silence, every
/// slot stalls. Most busy slots stalling at once is the provider's: the supervisor stops
/// them together, every attempt excused (none counts towards quarantine), and the fleet
/// pauses instead of killing slot after slot. The kill comes well after the stall check
/// (3 s, 12 s), so both slots are seen stalling whatever their start-up on a loaded host.
/// Scaled down, the CPU is read every second, where a CLI's own retry every ~10 s reads as
/// work: the progress floor is raised so only real work counts.
fn fleet_stalls_on_a_silent_provider(cli: Cli) {
    let server = ModelServer::start(Scenario::NoHeaders);
    let timing = FAST_TIMING.replace(
        "stall_s = 600\nstall_kill_s = 1200\n",
        "stall_s = 3\nstall_kill_s = 12\nstall_cpu_floor_permille = 900\n",
    );
    let mut f = real_fleet_timed(cli, &server.base_url(), 2, 2, &timing);
    f.start(&[]);
    let paused = wait_paused(&f);
    assert!(
        paused[0].msg.contains("provider unreachable"),
        "{}",
        paused[0].msg
    );
    let records: Vec<ledger::Record> = (1..=2)
        .flat_map(|n| ledger::read(&f.layout, n).unwrap_or_default())
        .collect();
    eprintln!(
        "fleet {} NoHeaders: ledger {:?}; agent pause: {:?}",
        cli.name(),
        records
            .iter()
            .map(|r| (r.outcome, r.excused.is_some()))
            .collect::<Vec<_>>(),
        pause_file::agent_read(&f.layout.state()).ok().flatten()
    );
    assert!(
        records
            .iter()
            .all(|r| r.outcome == ledger::Outcome::Stalled),
        "{records:?}"
    );
    // The supervisor saw both slots stall and stopped them together: every stall is
    // excused, the first of the outage included, and the fleet pauses.
    assert!(records.iter().all(|r| r.excused.is_some()), "{records:?}");
    let kills = f.events_of(Kind::SlotStallKill);
    assert!(
        kills
            .iter()
            .all(|k| k.msg.contains("busy slots made no progress")),
        "{kills:?}"
    );
    for n in 1..=2 {
        assert!(!f.labels_of(n).iter().any(|l| l == "afk:quarantined"));
    }
}

#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn fleet_of_claude_on_a_silent_provider_pauses_instead_of_blaming_issues() {
    fleet_stalls_on_a_silent_provider(Cli::Claude);
}

#[test]
#[cfg_attr(not(afk_has_npm), ignore = "needs node and npm (the real agent CLIs)")]
fn fleet_of_codex_on_a_silent_provider_pauses_instead_of_blaming_issues() {
    fleet_stalls_on_a_silent_provider(Cli::Codex);
}
