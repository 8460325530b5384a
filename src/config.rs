//! Configuration (`docs/SPEC.md` §10): built-in defaults, then one TOML file, then `RED_AFK_*`
//! variables, then command-line flags. Every error names where the bad value came from
//! (`FILE:LINE:COL: …` for the file, the variable's name for the environment) and is fatal
//! with exit 78, because a supervisor running on a half-understood config is worse than
//! one that refuses to start.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::afk_env;
use crate::agent_profile::ProfileKind;
use crate::fsutil::{Links, read_capped};
use crate::layout::Layout;
use crate::sandbox::SandboxMode;
use crate::text::{clip_quoted, excerpt, line_col};

pub mod cluster;
pub mod notify_sinks;
pub mod template;

pub use cluster::ClusterCfg;

/// Largest config file read: the documented file with every key is about 4 KiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrackerKind {
    Auto,
    Gh,
    Local,
}

impl std::str::FromStr for TrackerKind {
    type Err = UnknownTrackerKind;
    fn from_str(s: &str) -> Result<Self, UnknownTrackerKind> {
        match s {
            "auto" => Ok(TrackerKind::Auto),
            "gh" => Ok(TrackerKind::Gh),
            "local" => Ok(TrackerKind::Local),
            other => Err(UnknownTrackerKind(other.to_string())),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tracker kind {0:?} (expected auto, gh or local)")]
pub struct UnknownTrackerKind(pub String);

impl fmt::Display for TrackerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrackerKind::Auto => "auto",
            TrackerKind::Gh => "gh",
            TrackerKind::Local => "local",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetConfig {
    pub workers: usize,
    pub base: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// `None` means the built-in worker, where one exists.
    pub command: Option<Vec<String>>,
    pub runner: String,
    /// Failed attempts of one issue after which the worker quarantines it (`docs/SPEC.md` §11.10).
    pub max_failed_attempts: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    pub command: Option<Vec<String>>,
    /// What the worker knows of the agent CLI (`docs/SPEC.md` §11.13): `[agent] profile`,
    /// else from the file name of `command[0]`.
    pub profile: ProfileKind,
    /// `[agent] prompt`: the task's template (`{title}`, `{body_file}`, `{number}`,
    /// `{branch}`, `{resume}`); `None` is the profile's default.
    pub prompt: Option<String>,
    /// `[agent] sandbox` (`docs/SPEC.md` §11.19): bubblewrap unless `none` is chosen.
    pub sandbox: SandboxMode,
    /// `[agent] env`: variable names (a final `*` for a prefix) passed to the agent besides
    /// the basics and its profile's.
    pub env: Vec<String>,
    /// `[agent] home_files`: what the private home is seeded with, relative to the
    /// operator's home; `None` is the profile's list.
    pub home_files: Option<Vec<String>>,
    /// `[agent] sandbox_read`: absolute paths shown read-only inside the sandbox where the
    /// operator's home hides them.
    pub sandbox_read: Vec<PathBuf>,
    /// `[agent] network`: whether the sandboxed agent keeps the host's network.
    pub network: bool,
    /// `[agent] sensitive_paths`: changes under these are held for a person, not pushed.
    pub sensitive_paths: Vec<String>,
}

/// The default of `agent.sensitive_paths`: a pushed workflow runs with the repository's
/// secrets.
pub const SENSITIVE_PATHS: &[&str] = &[".github/workflows/"];

impl Agent {
    /// The files the private home is seeded with.
    pub fn home_files(&self) -> Vec<String> {
        self.home_files.clone().unwrap_or_else(|| {
            crate::sandbox::home::profile_files(self.profile)
                .iter()
                .map(|s| s.to_string())
                .collect()
        })
    }
}

/// Spend limits (`docs/SPEC.md` §11.13): at the day's budget the fleet claims nothing new
/// until the next day in `timezone`; an issue over `usd_per_issue` goes to a person.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Budget {
    pub usd_per_day: Option<Usd>,
    pub usd_per_issue: Option<Usd>,
    pub tokens_per_day: Option<u64>,
    /// `budget.estimate_usd`: what a claim reserves against the day's budget while the
    /// ledger has no run that reported dollars (after that, the median of the latest runs).
    pub estimate_usd: Option<Usd>,
    /// The day's offset from UTC in seconds (`budget.timezone`: `UTC` or `±HH:MM[:SS]`).
    pub utc_offset_s: i32,
    /// `[budget.prices."<model>"]`: dollars per million tokens, by model name, for agents
    /// that report tokens but no dollars (Codex), so the dollar budgets hold for them too.
    /// [`default_prices`] unless the config names an entry; `"*"` prices any other model.
    pub prices: std::collections::BTreeMap<String, Price>,
}

/// Dollars per million tokens of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input: Usd,
    /// Input tokens read from the provider's cache (part of the input count).
    pub cached_input: Usd,
    pub output: Usd,
}

/// The documented defaults of `budget.prices` (`docs/SPEC.md` §11.13): OpenAI's list prices
/// per million tokens for the models Codex runs, and `"*"` (the gpt-5 price) for any model
/// not named, such as a Codex run, whose output names none.
pub fn default_prices() -> std::collections::BTreeMap<String, Price> {
    let p = |input: f64, cached_input: f64, output: f64| Price {
        input: Usd::from_f64(input),
        cached_input: Usd::from_f64(cached_input),
        output: Usd::from_f64(output),
    };
    [
        ("*", p(1.25, 0.125, 10.0)),
        ("gpt-5", p(1.25, 0.125, 10.0)),
        ("gpt-5-codex", p(1.25, 0.125, 10.0)),
        ("gpt-5-mini", p(0.25, 0.025, 2.0)),
        ("gpt-5-nano", p(0.05, 0.005, 0.4)),
        ("codex-mini-latest", p(1.5, 0.375, 6.0)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

impl Budget {
    /// Whether any daily limit is set (only then does anything read the ledger for it).
    pub fn daily(&self) -> bool {
        self.usd_per_day.is_some() || self.tokens_per_day.is_some()
    }
}

/// Dollars kept as millionths, so the configuration stays `Eq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Usd(pub u64);

impl Usd {
    pub fn from_f64(x: f64) -> Usd {
        Usd((x.max(0.0) * 1e6).round() as u64)
    }
    pub fn get(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${:.2}", self.get())
    }
}

/// `UTC`, `Z`, `+02:00`, `-05:30`, `+01:00:30`: the offset in seconds.
pub fn parse_utc_offset(s: &str) -> Option<i32> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("utc") || s == "Z" {
        return Some(0);
    }
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let parts: Vec<&str> = rest.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.len() != 2) {
        return None;
    }
    let n: Vec<i32> = parts
        .iter()
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (h, m, sec) = (n[0], n[1], n.get(2).copied().unwrap_or(0));
    if h > 23 || m > 59 || sec > 59 {
        return None;
    }
    Some(sign * (h * 3600 + m * 60 + sec))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackerCfg {
    pub kind: TrackerKind,
    /// `OWNER/NAME`; `None` means "from origin".
    pub repo: Option<String>,
    pub timeout_s: u64,
    /// Content-creating gh calls (comments, label edits, pull requests) allowed across
    /// the checkout's processes in any `pace_window_s` (`docs/SPEC.md` §11.11).
    pub max_writes_per_min: u64,
    /// The pace's window: 60 s; shorter only to test the pace quickly.
    pub pace_window_s: u64,
    /// Content-creating gh calls allowed per `pace_hour_s` (GitHub allows 500 an hour per
    /// identity, `docs/SPEC.md` §11.11): the per-minute pace alone would permit 1,200.
    pub max_writes_per_hour: u64,
    /// The hourly window: 3600 s; shorter only to test it.
    pub pace_hour_s: u64,
}

/// The content-creating writes one GitHub identity is allowed: so many per window (the
/// minute) and per hour, each window's length in seconds (`tracker.pace_window_s`,
/// `tracker.pace_hour_s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteBudgets {
    pub per_window: u64,
    pub window_s: u64,
    pub per_hour: u64,
    pub hour_s: u64,
}

impl TrackerCfg {
    pub fn write_budgets(&self) -> WriteBudgets {
        WriteBudgets {
            per_window: self.max_writes_per_min,
            window_s: self.pace_window_s,
            per_hour: self.max_writes_per_hour,
            hour_s: self.pace_hour_s,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timing {
    pub tick_s: u64,
    pub fast_death_s: u64,
    pub circuit_k: u32,
    pub circuit_window_s: u64,
    pub half_open_base_s: u64,
    pub half_open_cap_s: u64,
    pub stop_grace_s: u64,
    pub stall_s: u64,
    pub stall_kill_s: u64,
    pub unblock_interval_s: u64,
    /// The longest one attempt's agent may run before the worker stops it (`docs/SPEC.md` §11.10).
    pub attempt_max_s: u64,
    /// The share of the slots whose circuits must trip within one circuit window for the
    /// whole fleet to park behind one probe (`docs/SPEC.md` §11.12), in (0, 1].
    pub fleet_circuit_fraction: Fraction,
    /// The stall check's CPU floor, thousandths of a core over the reading's window: a
    /// tree using less made no progress by CPU (a poll now and then is no work).
    pub stall_cpu_floor_permille: u64,
}

/// A number in (0, 1], kept as thousandths so the configuration stays `Eq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fraction(pub u32);

impl Fraction {
    pub fn get(self) -> f64 {
        f64::from(self.0) / 1000.0
    }

    /// `fraction` of `n`, rounded up, at least 1.
    pub fn of(self, n: usize) -> usize {
        let x = (n as u64).saturating_mul(u64::from(self.0)).div_ceil(1000);
        usize::try_from(x).unwrap_or(usize::MAX).max(1)
    }
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.get())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweeps {
    pub attempt_max_age_days: u64,
    pub attempt_max_count: usize,
}

/// Claims across checkouts and hosts (SPEC §11.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// A claim mark older than this, with no progress on its branch, may be taken over by
    /// another host.
    pub stale_after_s: u64,
    /// Logins besides the fleet's own (`gh api user`) whose marks count on GitHub (SPEC
    /// §11.5), and whose issues, edits, labels and `/afk approve` let an issue's text reach
    /// an agent (§11.20): on a public repository anyone may comment and file, so anyone
    /// else's words are held for a person.
    pub trusted_authors: Vec<String>,
    /// Whether the repository's owners, members and collaborators (GitHub's author
    /// association) are trusted too.
    pub trust_members: bool,
    /// A `running` issue that carries no claim mark at all (a label switch that landed
    /// though its answer failed) is restored by the claims belt after this long.
    pub unmarked_grace_s: u64,
}

/// The event log's rotation and the slot logs' age.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogCfg {
    /// `supervisor.log.toonl` is rotated once a write would take it past this size.
    pub max_bytes: u64,
    /// Rotated generations kept (`.1` the newest); 0 keeps none.
    pub keep: usize,
    /// Per-day slot log folders older than this many days are deleted.
    pub slot_log_days: u64,
    /// The most of one attempt's agent output a slot log keeps: its first and last halves,
    /// with the cut marked between them.
    pub slot_log_max_bytes: u64,
}

/// The rescue of a dead attempt's work (`docs/SPEC.md` §11.15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RescueCfg {
    /// A file bigger than this is left out of a rescue commit (and named in its message):
    /// a core dump or a build artefact must not land in the repository's history.
    pub max_file_bytes: u64,
}

/// `[checks]` (`docs/SPEC.md` §11.22): the project's own checks, run by the built-in worker
/// in the issue's worktree after the agent, inside the agent's sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChecksCfg {
    /// The argv run in the worktree; `None`: no checks.
    pub command: Option<Vec<String>>,
    /// The longest one run of the checks may take; then its process group is killed and
    /// the run counts as failed.
    pub timeout_s: u64,
    /// The most agent rounds one attempt takes (the first and the ones after a failing
    /// check), at least 1.
    pub max_rounds: u64,
    /// What a finished attempt whose checks still fail after `max_rounds` becomes.
    pub on_failure: ChecksFailure,
}

/// `checks.on_failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksFailure {
    /// The pull request is opened as a draft, marked as failing.
    Draft,
    /// No pull request: the pushed branch goes to a person with the failure.
    Person,
}

impl fmt::Display for ChecksFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChecksFailure::Draft => "draft",
            ChecksFailure::Person => "person",
        })
    }
}

/// `landing.merge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeMode {
    /// The fleet never merges: a person does.
    Off,
    /// GitHub is asked to merge once the repository's rules are met (`gh pr merge --auto`);
    /// the local tracker merges when the checks passed.
    Auto,
}

/// `landing.method`: how a pull request is merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeMethod {
    Squash,
    Merge,
    Rebase,
}

impl MergeMethod {
    /// `gh pr merge`'s flag for it.
    pub fn flag(self) -> &'static str {
        match self {
            MergeMethod::Squash => "--squash",
            MergeMethod::Merge => "--merge",
            MergeMethod::Rebase => "--rebase",
        }
    }
}

/// `landing.ci`: which of a pull request's checks the landing belt acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CiScope {
    /// The checks the base branch's rules require (`gh pr checks --required`).
    Required,
    /// Every check reported on the pull request.
    All,
}

macro_rules! word_display {
    ($t:ty { $($v:ident => $w:literal),* $(,)? }) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $(<$t>::$v => $w),* })
            }
        }
    };
}
word_display!(MergeMode { Off => "off", Auto => "auto" });
word_display!(MergeMethod { Squash => "squash", Merge => "merge", Rebase => "rebase" });
word_display!(CiScope { Required => "required", All => "all" });

/// `[landing]` (`docs/SPEC.md` §11.22): what becomes of a finished attempt's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandingCfg {
    /// A pull request per finished issue; `false`: the branch is pushed and the issue
    /// handed to a person, as before pull requests.
    pub pull_request: bool,
    /// Open pull requests as drafts (a failing check's pull request is a draft anyway).
    pub draft: bool,
    pub merge: MergeMode,
    pub method: MergeMethod,
    /// Fix attempts the landing belt asks for one pull request (CI, reviews, `/afk fix`)
    /// before it labels the pull request for a person.
    pub max_fix_rounds: u64,
    /// How often the landing belt looks at the fleet's pull requests.
    pub watch_interval_s: u64,
    pub ci: CiScope,
}

impl Default for ChecksCfg {
    fn default() -> Self {
        ChecksCfg {
            command: None,
            timeout_s: 1800,
            max_rounds: 2,
            on_failure: ChecksFailure::Draft,
        }
    }
}

impl Default for LandingCfg {
    fn default() -> Self {
        LandingCfg {
            pull_request: true,
            draft: false,
            merge: MergeMode::Off,
            method: MergeMethod::Squash,
            max_fix_rounds: 2,
            watch_interval_s: 60,
            ci: CiScope::Required,
        }
    }
}

/// How workers are kept apart and ended (`isolation.mode`; README "Isolation").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationMode {
    /// A cgroup v2 subtree where one is writable, else process groups.
    #[default]
    Auto,
    /// A cgroup v2 subtree, or the supervisor does not start.
    Cgroup,
    /// Process groups, sessions and the environment tag only.
    ProcessGroup,
}

impl std::str::FromStr for IsolationMode {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s.trim() {
            "auto" => Ok(IsolationMode::Auto),
            "cgroup" => Ok(IsolationMode::Cgroup),
            "process-group" => Ok(IsolationMode::ProcessGroup),
            other => Err(ConfigError(format!(
                "unknown isolation mode {:?} (expected auto, cgroup or process-group)",
                clip_quoted(other)
            ))),
        }
    }
}

/// The `[isolation]` table and the cgroup limits of `[worker]` and `[fleet]`: values as
/// the cgroup files take them (`"2G"`, `"max"`, `"50000 100000"`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IsolationCfg {
    pub mode: IsolationMode,
    /// The cgroup directory the fleet's subtree goes under instead of the supervisor's own.
    pub cgroup_root: Option<PathBuf>,
    pub worker_memory_high: Option<String>,
    pub worker_memory_max: Option<String>,
    pub worker_cpu_max: Option<String>,
    pub worker_pids_max: Option<String>,
    pub fleet_memory_max: Option<String>,
}

impl IsolationCfg {
    /// The per-attempt limits asked for: (key, cgroup file, value).
    pub fn worker_limits(&self) -> Vec<(&'static str, &'static str, String)> {
        [
            (
                "worker.memory_high",
                "memory.high",
                &self.worker_memory_high,
            ),
            ("worker.memory_max", "memory.max", &self.worker_memory_max),
            ("worker.cpu_max", "cpu.max", &self.worker_cpu_max),
            ("worker.pids_max", "pids.max", &self.worker_pids_max),
        ]
        .into_iter()
        .filter_map(|(k, f, v)| v.clone().map(|v| (k, f, v)))
        .collect()
    }

    /// The fleet-wide limits asked for, set on the fleet's subtree.
    pub fn fleet_limits(&self) -> Vec<(&'static str, &'static str, String)> {
        self.fleet_memory_max
            .clone()
            .map(|v| ("fleet.memory_max", "memory.max", v))
            .into_iter()
            .collect()
    }
}

/// A limit value the kernel would refuse: checked when the config is read, so a typo is
/// a config error, not a line at every spawn.
fn check_limit(file: &str, v: &str) -> bool {
    let num = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let v = v.trim();
    if v == "max" {
        return true;
    }
    match file {
        "cpu.max" => {
            let mut it = v.split_whitespace();
            let quota = it.next().is_some_and(|q| q == "max" || num(q));
            let period = it.next().is_none_or(num);
            quota && period && it.next().is_none()
        }
        "pids.max" => num(v),
        _ => {
            let digits = v.trim_end_matches(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']);
            num(digits) && v.len() - digits.len() <= 1
        }
    }
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The file it was read from; `None` for built-in defaults.
    pub file: Option<PathBuf>,
    pub fleet: FleetConfig,
    pub worker: WorkerConfig,
    pub agent: Agent,
    pub tracker: TrackerCfg,
    pub timing: Timing,
    pub sweeps: Sweeps,
    pub claims: Claims,
    pub log: LogCfg,
    pub budget: Budget,
    pub rescue: RescueCfg,
    pub isolation: IsolationCfg,
    /// `[[notify]]`: where the fleet tells a person what happened (`docs/SPEC.md` §11.21).
    pub notify: Vec<notify_sinks::Sink>,
    pub checks: ChecksCfg,
    pub landing: LandingCfg,
    /// `[cluster]`: the fleet's shared state in etcd; `None` runs on one box as always.
    pub cluster: Option<ClusterCfg>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            file: None,
            fleet: FleetConfig {
                workers: 2,
                base: "main".into(),
            },
            worker: WorkerConfig {
                command: None,
                runner: "claude".into(),
                max_failed_attempts: 3,
            },
            agent: Agent {
                command: None,
                profile: ProfileKind::Generic,
                prompt: None,
                sandbox: SandboxMode::Bwrap,
                env: Vec::new(),
                home_files: None,
                sandbox_read: Vec::new(),
                network: true,
                sensitive_paths: SENSITIVE_PATHS.iter().map(|s| s.to_string()).collect(),
            },
            tracker: TrackerCfg {
                kind: TrackerKind::Auto,
                repo: None,
                timeout_s: 30,
                max_writes_per_min: 20,
                pace_window_s: 60,
                max_writes_per_hour: 500,
                pace_hour_s: 3600,
            },
            timing: Timing {
                tick_s: 15,
                fast_death_s: 30,
                circuit_k: 5,
                circuit_window_s: 90,
                half_open_base_s: 60,
                half_open_cap_s: 3600,
                stop_grace_s: 10,
                stall_s: 600,
                stall_kill_s: 1800,
                unblock_interval_s: 60,
                attempt_max_s: 7200,
                fleet_circuit_fraction: Fraction(500),
                stall_cpu_floor_permille: 10,
            },
            sweeps: Sweeps {
                attempt_max_age_days: 14,
                attempt_max_count: 5,
            },
            claims: Claims {
                stale_after_s: 7200,
                trusted_authors: Vec::new(),
                trust_members: false,
                unmarked_grace_s: 120,
            },
            log: LogCfg {
                max_bytes: 10 << 20,
                keep: 5,
                slot_log_days: 7,
                slot_log_max_bytes: 64 << 20,
            },
            budget: Budget {
                prices: default_prices(),
                ..Budget::default()
            },
            rescue: RescueCfg {
                max_file_bytes: 50 << 20,
            },
            isolation: IsolationCfg::default(),
            notify: Vec::new(),
            checks: ChecksCfg::default(),
            landing: LandingCfg::default(),
            cluster: None,
        }
    }
}

/// The keys of the tracker timeout and every `timing.*` duration, in the documented order:
/// one list for reading them from the file and for showing them.
pub const TIMING_KEYS: [&str; 16] = [
    "tracker.timeout_s",
    "tracker.max_writes_per_min",
    "tracker.pace_window_s",
    "tracker.max_writes_per_hour",
    "tracker.pace_hour_s",
    "timing.tick_s",
    "timing.fast_death_s",
    "timing.circuit_k",
    "timing.circuit_window_s",
    "timing.half_open_base_s",
    "timing.half_open_cap_s",
    "timing.stop_grace_s",
    "timing.stall_s",
    "timing.stall_kill_s",
    "timing.unblock_interval_s",
    "timing.attempt_max_s",
];

impl Config {
    /// The value of one of [`TIMING_KEYS`] (or `fleet.workers`); `None` for other keys.
    pub fn number(&self, key: &str) -> Option<u64> {
        let t = &self.timing;
        Some(match key {
            "tracker.timeout_s" => self.tracker.timeout_s,
            "tracker.max_writes_per_min" => self.tracker.max_writes_per_min,
            "tracker.pace_window_s" => self.tracker.pace_window_s,
            "tracker.max_writes_per_hour" => self.tracker.max_writes_per_hour,
            "tracker.pace_hour_s" => self.tracker.pace_hour_s,
            "timing.tick_s" => t.tick_s,
            "timing.fast_death_s" => t.fast_death_s,
            "timing.circuit_k" => u64::from(t.circuit_k),
            "timing.circuit_window_s" => t.circuit_window_s,
            "timing.half_open_base_s" => t.half_open_base_s,
            "timing.half_open_cap_s" => t.half_open_cap_s,
            "timing.stop_grace_s" => t.stop_grace_s,
            "timing.stall_s" => t.stall_s,
            "timing.stall_kill_s" => t.stall_kill_s,
            "timing.unblock_interval_s" => t.unblock_interval_s,
            "timing.attempt_max_s" => t.attempt_max_s,
            "fleet.workers" => self.fleet.workers as u64,
            _ => return None,
        })
    }
}

/// A configuration error: always exit 78.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Command-line flags that override file and environment.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub workers: Option<usize>,
    pub base: Option<String>,
    pub tracker: Option<TrackerKind>,
    pub runner: Option<String>,
}

// ---- the file, as written ----

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    fleet: FileFleet,
    #[serde(default)]
    worker: FileWorker,
    #[serde(default)]
    agent: FileAgent,
    #[serde(default)]
    tracker: FileTracker,
    #[serde(default)]
    timing: FileTiming,
    #[serde(default)]
    sweeps: FileSweeps,
    #[serde(default)]
    claims: FileClaims,
    #[serde(default)]
    log: FileLog,
    #[serde(default)]
    budget: FileBudget,
    #[serde(default)]
    rescue: FileRescue,
    #[serde(default)]
    isolation: FileIsolation,
    #[serde(default)]
    notify: Vec<Spanned<notify_sinks::FileSink>>,
    #[serde(default)]
    checks: FileChecks,
    #[serde(default)]
    landing: FileLanding,
    cluster: Option<cluster::FileCluster>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileChecks {
    command: S<Vec<String>>,
    timeout_s: S<u64>,
    max_rounds: S<u64>,
    on_failure: S<ChecksFailure>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLanding {
    pull_request: S<bool>,
    draft: S<bool>,
    merge: S<MergeMode>,
    method: S<MergeMethod>,
    max_fix_rounds: S<u64>,
    watch_interval_s: S<u64>,
    ci: S<CiScope>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileIsolation {
    mode: S<IsolationMode>,
    cgroup_root: S<PathBuf>,
}

/// A limit as the file writes it: a string (`"2G"`, `"max"`) or, for counts, a number.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum LimitValue {
    Text(String),
    Number(u64),
}

impl LimitValue {
    fn text(self) -> String {
        match self {
            LimitValue::Text(s) => s.trim().to_string(),
            LimitValue::Number(n) => n.to_string(),
        }
    }
}

type S<T> = Option<Spanned<T>>;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFleet {
    workers: S<u64>,
    base: S<String>,
    memory_max: S<LimitValue>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWorker {
    command: S<Vec<String>>,
    runner: S<String>,
    max_failed_attempts: S<u64>,
    memory_high: S<LimitValue>,
    memory_max: S<LimitValue>,
    cpu_max: S<LimitValue>,
    pids_max: S<LimitValue>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAgent {
    command: S<Vec<String>>,
    profile: S<ProfileKind>,
    prompt: S<String>,
    sandbox: S<SandboxMode>,
    env: S<Vec<String>>,
    home_files: S<Vec<String>>,
    sandbox_read: S<Vec<PathBuf>>,
    network: S<bool>,
    sensitive_paths: S<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileBudget {
    usd_per_day: S<f64>,
    usd_per_issue: S<f64>,
    estimate_usd: S<f64>,
    tokens_per_day: S<u64>,
    timezone: S<String>,
    prices: S<std::collections::BTreeMap<String, FilePrice>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePrice {
    input: f64,
    #[serde(default)]
    cached_input: Option<f64>,
    output: f64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTracker {
    kind: S<TrackerKind>,
    repo: S<String>,
    timeout_s: S<u64>,
    max_writes_per_min: S<u64>,
    pace_window_s: S<u64>,
    max_writes_per_hour: S<u64>,
    pace_hour_s: S<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTiming {
    tick_s: S<u64>,
    fast_death_s: S<u64>,
    circuit_k: S<u64>,
    circuit_window_s: S<u64>,
    half_open_base_s: S<u64>,
    half_open_cap_s: S<u64>,
    stop_grace_s: S<u64>,
    stall_s: S<u64>,
    stall_kill_s: S<u64>,
    unblock_interval_s: S<u64>,
    attempt_max_s: S<u64>,
    fleet_circuit_fraction: S<f64>,
    stall_cpu_floor_permille: S<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSweeps {
    attempt_max_age_days: S<u64>,
    attempt_max_count: S<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileClaims {
    stale_after_s: S<u64>,
    trusted_authors: S<Vec<String>>,
    trust_members: S<bool>,
    unmarked_grace_s: S<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLog {
    max_bytes: S<u64>,
    keep: S<u64>,
    slot_log_days: S<u64>,
    slot_log_max_bytes: S<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRescue {
    max_file_bytes: S<u64>,
}

/// Where a value came from, for error messages and `config`.
#[derive(Debug, Clone)]
enum Origin {
    Default(&'static str),
    /// `worker.runner` unset: the file name of `agent.command[0]`.
    AgentProgram,
    File {
        path: PathBuf,
        line: usize,
        col: usize,
    },
    Env(&'static str),
    Flag(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default(key) => write!(f, "<defaults>: {key}"),
            Origin::AgentProgram => write!(f, "<defaults>: worker.runner from agent.command[0]"),
            Origin::File { path, line, col } => write!(f, "{}:{line}:{col}", path.display()),
            Origin::Env(var) => write!(f, "{var}"),
            Origin::Flag(flag) => write!(f, "{flag}"),
        }
    }
}

/// Where each resolved value came from, for `afk-supervisor config`.
#[derive(Debug, Clone, Default)]
pub struct Sources(HashMap<&'static str, Origin>);

impl Sources {
    /// `default`, `file PATH:LINE:COL`, `env RED_AFK_…`, `flag --…`, or for `worker.runner`
    /// taken from the agent, `default (the agent's program name, agent.command[0])`.
    pub fn describe(&self, key: &str) -> String {
        match self.0.get(key) {
            None | Some(Origin::Default(_)) => "default".into(),
            Some(Origin::AgentProgram) => {
                "default (the agent's program name, agent.command[0])".into()
            }
            Some(Origin::File { path, line, col }) => {
                format!("file {}:{line}:{col}", path.display())
            }
            Some(Origin::Env(var)) => format!("env {var}"),
            Some(Origin::Flag(flag)) => format!("flag {flag}"),
        }
    }
}

/// Finds the config file: `--config FILE`, then `<repo>/.red/afk-supervisor.toml`. Anything
/// at the repo path counts as the config file (so a FIFO or a directory there is an error
/// when it is read, not silently the defaults).
pub fn find_file(explicit: Option<&Path>, layout: &Layout) -> Result<Option<PathBuf>, ConfigError> {
    if let Some(p) = explicit {
        return Ok(Some(p.to_path_buf()));
    }
    let p = layout.repo_config();
    Ok(std::fs::symlink_metadata(&p).is_ok().then_some(p))
}

/// Reads the config file: a regular file (a symlink is followed: configs are often linked
/// from elsewhere), opened without blocking, at most [`MAX_CONFIG_BYTES`].
fn read_file(p: &Path) -> Result<String, ConfigError> {
    let cannot = |why: String| ConfigError(format!("{}: cannot read config: {why}", p.display()));
    match read_capped(p, MAX_CONFIG_BYTES, Links::Follow) {
        Ok(Some(bytes)) => String::from_utf8(bytes).map_err(|_| cannot("not UTF-8 text".into())),
        Ok(None) => Err(ConfigError(format!(
            "{}: config file not found",
            p.display()
        ))),
        Err(e) => Err(cannot(e.to_string())),
    }
}

/// Loads the full configuration with the `docs/SPEC.md` §10 precedence.
pub fn load(
    explicit: Option<&Path>,
    layout: &Layout,
    env: &HashMap<String, String>,
    flags: &Overrides,
) -> Result<Config, ConfigError> {
    load_with_sources(explicit, layout, env, flags).map(|(c, _)| c)
}

/// [`load`], and where each value came from.
pub fn load_with_sources(
    explicit: Option<&Path>,
    layout: &Layout,
    env: &HashMap<String, String>,
    flags: &Overrides,
) -> Result<(Config, Sources), ConfigError> {
    let file = find_file(explicit, layout)?;
    let text = match &file {
        Some(p) => Some(read_file(p)?),
        None => None,
    };
    resolve_with_sources(file.as_deref().zip(text.as_deref()), env, flags)
}

/// Resolves from an optional `(path, text)` file, an environment and flags. Pure, for tests.
pub fn resolve(
    file: Option<(&Path, &str)>,
    env: &HashMap<String, String>,
    flags: &Overrides,
) -> Result<Config, ConfigError> {
    resolve_with_sources(file, env, flags).map(|(c, _)| c)
}

/// [`resolve`], and where each value came from.
pub fn resolve_with_sources(
    file: Option<(&Path, &str)>,
    env: &HashMap<String, String>,
    flags: &Overrides,
) -> Result<(Config, Sources), ConfigError> {
    let mut b = Builder {
        cfg: Config::default(),
        origins: HashMap::new(),
        file: None,
    };
    if let Some((path, text)) = file {
        b.cfg.file = Some(path.to_path_buf());
        b.file = Some((path.to_path_buf(), text.to_string()));
        let doc: FileDoc = toml::from_str(text).map_err(|e| {
            let (line, col) = e.span().map_or((1, 1), |s| line_col(text, s.start));
            ConfigError(format!(
                "{}:{line}:{col}: {}",
                path.display(),
                clip_quoted(e.message())
            ))
        })?;
        b.apply_file(doc)?;
    }
    b.apply_env(env)?;
    b.apply_flags(flags);
    b.validate()?;
    b.default_runner();
    b.default_profile();
    Ok((b.cfg, Sources(b.origins)))
}

struct Builder {
    cfg: Config,
    origins: HashMap<&'static str, Origin>,
    file: Option<(PathBuf, String)>,
}

impl Builder {
    fn origin_of(&self, key: &'static str) -> Origin {
        self.origins
            .get(key)
            .cloned()
            .unwrap_or(Origin::Default(key))
    }

    fn file_origin<T>(&self, v: &Spanned<T>) -> Origin {
        let (path, text) = self
            .file
            .as_ref()
            .map(|(p, t)| (p.clone(), t.as_str()))
            .unwrap_or_default();
        let (line, col) = line_col(text, v.span().start);
        Origin::File { path, line, col }
    }

    fn take<T>(&mut self, key: &'static str, v: S<T>) -> Option<T> {
        let v = v?;
        let origin = self.file_origin(&v);
        self.origins.insert(key, origin);
        Some(v.into_inner())
    }

    fn take_u64(&mut self, key: &'static str, v: S<u64>) -> Result<Option<u64>, ConfigError> {
        let Some(x) = self.take(key, v) else {
            return Ok(None);
        };
        check_bounds(&self.origin_of(key), key, x)?;
        Ok(Some(x))
    }

    /// The agent's reach (`docs/SPEC.md` §11.19): its sandbox, environment and home.
    fn apply_agent_reach(&mut self, a: FileAgent) -> Result<(), ConfigError> {
        if let Some(x) = self.take("agent.sandbox", a.sandbox) {
            self.cfg.agent.sandbox = x;
        }
        if let Some(x) = self.take("agent.env", a.env) {
            if let Some(bad) = x.iter().find(|n| !env_name_ok(n)) {
                return Err(ConfigError(format!(
                    "{}: agent.env: {bad:?} is not a variable name (letters, digits and _, optionally ending in *)",
                    self.origin_of("agent.env")
                )));
            }
            self.cfg.agent.env = x;
        }
        if let Some(x) = self.take("agent.home_files", a.home_files) {
            if let Some(bad) = x
                .iter()
                .find(|f| f.is_empty() || f.starts_with('/') || f.split('/').any(|c| c == ".."))
            {
                return Err(ConfigError(format!(
                    "{}: agent.home_files: {bad:?} must be a path relative to the home, without ..",
                    self.origin_of("agent.home_files")
                )));
            }
            self.cfg.agent.home_files = Some(x);
        }
        if let Some(x) = self.take("agent.sandbox_read", a.sandbox_read) {
            if let Some(bad) = x.iter().find(|p| !p.is_absolute()) {
                return Err(ConfigError(format!(
                    "{}: agent.sandbox_read: {:?} is not an absolute path",
                    self.origin_of("agent.sandbox_read"),
                    bad.display().to_string()
                )));
            }
            self.cfg.agent.sandbox_read = x;
        }
        if let Some(x) = self.take("agent.network", a.network) {
            self.cfg.agent.network = x;
        }
        if let Some(x) = self.take("agent.sensitive_paths", a.sensitive_paths) {
            self.cfg.agent.sensitive_paths = x;
        }
        Ok(())
    }

    /// `[isolation]` and the cgroup limits of `[worker]` and `[fleet]`.
    fn apply_isolation(
        &mut self,
        i: FileIsolation,
        w: &mut FileWorker,
        f: &mut FileFleet,
    ) -> Result<(), ConfigError> {
        if let Some(x) = self.take("isolation.mode", i.mode) {
            self.cfg.isolation.mode = x;
        }
        if let Some(x) = self.take("isolation.cgroup_root", i.cgroup_root) {
            if !x.is_absolute() {
                return Err(ConfigError(format!(
                    "{}: isolation.cgroup_root must be an absolute path",
                    self.origin_of("isolation.cgroup_root")
                )));
            }
            self.cfg.isolation.cgroup_root = Some(x);
        }
        let limits = [
            ("worker.memory_high", "memory.high", w.memory_high.take()),
            ("worker.memory_max", "memory.max", w.memory_max.take()),
            ("worker.cpu_max", "cpu.max", w.cpu_max.take()),
            ("worker.pids_max", "pids.max", w.pids_max.take()),
            ("fleet.memory_max", "memory.max", f.memory_max.take()),
        ];
        for (key, file, v) in limits {
            let Some(v) = self.take(key, v).map(LimitValue::text) else {
                continue;
            };
            if !check_limit(file, &v) {
                return Err(ConfigError(format!(
                    "{}: {key} = {:?} is not a valid {file} value",
                    self.origin_of(key),
                    clip_quoted(&v)
                )));
            }
            let i = &mut self.cfg.isolation;
            let slot = match key {
                "worker.memory_high" => &mut i.worker_memory_high,
                "worker.memory_max" => &mut i.worker_memory_max,
                "worker.cpu_max" => &mut i.worker_cpu_max,
                "worker.pids_max" => &mut i.worker_pids_max,
                _ => &mut i.fleet_memory_max,
            };
            *slot = Some(v);
        }
        Ok(())
    }

    /// `[checks]` and `[landing]` (`docs/SPEC.md` §11.22).
    fn apply_landing(&mut self, c: FileChecks, l: FileLanding) -> Result<(), ConfigError> {
        if let Some(x) = self.take("checks.command", c.command) {
            if x.is_empty() || x[0].is_empty() {
                return Err(ConfigError(format!(
                    "{}: checks.command must name a program",
                    self.origin_of("checks.command")
                )));
            }
            self.cfg.checks.command = Some(x);
        }
        if let Some(x) = self.take_u64("checks.timeout_s", c.timeout_s)? {
            self.cfg.checks.timeout_s = x;
        }
        if let Some(x) = self.take_u64("checks.max_rounds", c.max_rounds)? {
            self.cfg.checks.max_rounds = x;
        }
        if let Some(x) = self.take("checks.on_failure", c.on_failure) {
            self.cfg.checks.on_failure = x;
        }
        if let Some(x) = self.take("landing.pull_request", l.pull_request) {
            self.cfg.landing.pull_request = x;
        }
        if let Some(x) = self.take("landing.draft", l.draft) {
            self.cfg.landing.draft = x;
        }
        if let Some(x) = self.take("landing.merge", l.merge) {
            self.cfg.landing.merge = x;
        }
        if let Some(x) = self.take("landing.method", l.method) {
            self.cfg.landing.method = x;
        }
        if let Some(x) = self.take_u64("landing.max_fix_rounds", l.max_fix_rounds)? {
            self.cfg.landing.max_fix_rounds = x;
        }
        if let Some(x) = self.take_u64("landing.watch_interval_s", l.watch_interval_s)? {
            self.cfg.landing.watch_interval_s = x;
        }
        if let Some(x) = self.take("landing.ci", l.ci) {
            self.cfg.landing.ci = x;
        }
        Ok(())
    }

    fn apply_file(&mut self, mut d: FileDoc) -> Result<(), ConfigError> {
        if let Some((path, text)) = &self.file {
            self.cfg.notify = notify_sinks::resolve(path, text, std::mem::take(&mut d.notify))?;
        }
        let (checks, landing) = (
            std::mem::take(&mut d.checks),
            std::mem::take(&mut d.landing),
        );
        self.apply_landing(checks, landing)?;
        let isolation = std::mem::take(&mut d.isolation);
        self.apply_cluster(d.cluster.take())?;
        self.apply_isolation(isolation, &mut d.worker, &mut d.fleet)?;
        if let Some(x) = self.take_u64("fleet.workers", d.fleet.workers)? {
            self.cfg.fleet.workers = x as usize;
        }
        if let Some(x) = self.take("fleet.base", d.fleet.base) {
            self.cfg.fleet.base = x;
        }
        if let Some(x) = self.take("worker.command", d.worker.command) {
            self.cfg.worker.command = Some(x);
        }
        if let Some(x) = self.take("worker.runner", d.worker.runner) {
            self.cfg.worker.runner = x;
        }
        if let Some(x) =
            self.take_u64("worker.max_failed_attempts", d.worker.max_failed_attempts)?
        {
            self.cfg.worker.max_failed_attempts = x;
        }
        if let Some(x) = self.take("agent.command", d.agent.command.take()) {
            self.cfg.agent.command = Some(x);
        }
        if let Some(x) = self.take("agent.profile", d.agent.profile.take()) {
            self.cfg.agent.profile = x;
        }
        if let Some(x) = self.take("agent.prompt", d.agent.prompt.take()) {
            self.cfg.agent.prompt = Some(x);
        }
        self.apply_agent_reach(d.agent)?;
        self.apply_budget(d.budget)?;
        if let Some(x) = self.take("tracker.kind", d.tracker.kind) {
            self.cfg.tracker.kind = x;
        }
        if let Some(x) = self.take("tracker.repo", d.tracker.repo) {
            self.cfg.tracker.repo = Some(x);
        }
        let t = d.timing;
        // In the order of TIMING_KEYS.
        let values: [S<u64>; 16] = [
            d.tracker.timeout_s,
            d.tracker.max_writes_per_min,
            d.tracker.pace_window_s,
            d.tracker.max_writes_per_hour,
            d.tracker.pace_hour_s,
            t.tick_s,
            t.fast_death_s,
            t.circuit_k,
            t.circuit_window_s,
            t.half_open_base_s,
            t.half_open_cap_s,
            t.stop_grace_s,
            t.stall_s,
            t.stall_kill_s,
            t.unblock_interval_s,
            t.attempt_max_s,
        ];
        for (key, v) in TIMING_KEYS.into_iter().zip(values) {
            if let Some(x) = self.take_u64(key, v)? {
                self.set_u64(key, x);
            }
        }
        if let Some(x) = self.take("timing.fleet_circuit_fraction", t.fleet_circuit_fraction) {
            if !(x > 0.0 && x <= 1.0) {
                return Err(ConfigError(format!(
                    "{}: timing.fleet_circuit_fraction = {x} is out of range (above 0, at most 1)",
                    self.origin_of("timing.fleet_circuit_fraction")
                )));
            }
            self.cfg.timing.fleet_circuit_fraction = Fraction(((x * 1000.0).round() as u32).max(1));
        }
        if let Some(x) = self.take_u64(
            "timing.stall_cpu_floor_permille",
            t.stall_cpu_floor_permille,
        )? {
            self.cfg.timing.stall_cpu_floor_permille = x;
        }
        if let Some(x) =
            self.take_u64("sweeps.attempt_max_age_days", d.sweeps.attempt_max_age_days)?
        {
            self.cfg.sweeps.attempt_max_age_days = x;
        }
        if let Some(x) = self.take_u64("sweeps.attempt_max_count", d.sweeps.attempt_max_count)? {
            self.cfg.sweeps.attempt_max_count = x as usize;
        }
        if let Some(x) = self.take_u64("claims.stale_after_s", d.claims.stale_after_s)? {
            self.cfg.claims.stale_after_s = x;
        }
        if let Some(x) = self.take("claims.trusted_authors", d.claims.trusted_authors) {
            if let Some(bad) = x.iter().find(|a| !valid_login(a)) {
                return Err(ConfigError(format!(
                    "{}: claims.trusted_authors: {:?} is not a GitHub login",
                    self.origin_of("claims.trusted_authors"),
                    excerpt(bad)
                )));
            }
            self.cfg.claims.trusted_authors = x;
        }
        if let Some(x) = self.take("claims.trust_members", d.claims.trust_members) {
            self.cfg.claims.trust_members = x;
        }
        if let Some(x) = self.take_u64("claims.unmarked_grace_s", d.claims.unmarked_grace_s)? {
            self.cfg.claims.unmarked_grace_s = x;
        }
        if let Some(x) = self.take_u64("log.max_bytes", d.log.max_bytes)? {
            self.cfg.log.max_bytes = x;
        }
        if let Some(x) = self.take_u64("log.keep", d.log.keep)? {
            self.cfg.log.keep = x as usize;
        }
        if let Some(x) = self.take_u64("log.slot_log_days", d.log.slot_log_days)? {
            self.cfg.log.slot_log_days = x;
        }
        if let Some(x) = self.take_u64("log.slot_log_max_bytes", d.log.slot_log_max_bytes)? {
            self.cfg.log.slot_log_max_bytes = x;
        }
        if let Some(x) = self.take_u64("rescue.max_file_bytes", d.rescue.max_file_bytes)? {
            self.cfg.rescue.max_file_bytes = x;
        }
        Ok(())
    }

    fn apply_budget(&mut self, b: FileBudget) -> Result<(), ConfigError> {
        for (key, v) in [
            ("budget.usd_per_day", b.usd_per_day),
            ("budget.usd_per_issue", b.usd_per_issue),
            ("budget.estimate_usd", b.estimate_usd),
        ] {
            let Some(x) = self.take(key, v) else { continue };
            if !(x.is_finite() && x > 0.0 && x < 1e9) {
                return Err(ConfigError(format!(
                    "{}: {key} = {x} must be a number of dollars above 0",
                    self.origin_of(key)
                )));
            }
            let usd = Some(Usd::from_f64(x));
            match key {
                "budget.usd_per_day" => self.cfg.budget.usd_per_day = usd,
                "budget.estimate_usd" => self.cfg.budget.estimate_usd = usd,
                _ => self.cfg.budget.usd_per_issue = usd,
            }
        }
        if let Some(x) = self.take_u64("budget.tokens_per_day", b.tokens_per_day)? {
            if x == 0 {
                return Err(ConfigError(format!(
                    "{}: budget.tokens_per_day must be at least 1",
                    self.origin_of("budget.tokens_per_day")
                )));
            }
            self.cfg.budget.tokens_per_day = Some(x);
        }
        if let Some(prices) = self.take("budget.prices", b.prices) {
            for (model, p) in prices {
                let dollars = [p.input, p.cached_input.unwrap_or(p.input), p.output];
                if dollars
                    .iter()
                    .any(|x| !(x.is_finite() && *x >= 0.0 && *x < 1e6))
                {
                    return Err(ConfigError(format!(
                        "{}: budget.prices.{model:?} must give dollars per million tokens \
                         (input, output, optional cached_input) of 0 or more",
                        self.origin_of("budget.prices")
                    )));
                }
                self.cfg.budget.prices.insert(
                    model,
                    Price {
                        input: Usd::from_f64(dollars[0]),
                        cached_input: Usd::from_f64(dollars[1]),
                        output: Usd::from_f64(dollars[2]),
                    },
                );
            }
        }
        if let Some(tz) = self.take("budget.timezone", b.timezone) {
            self.cfg.budget.utc_offset_s = parse_utc_offset(&tz).ok_or_else(|| {
                ConfigError(format!(
                    "{}: budget.timezone must be UTC or an offset like +02:00, got {:?}",
                    self.origin_of("budget.timezone"),
                    excerpt(&tz)
                ))
            })?;
        }
        Ok(())
    }

    fn set_u64(&mut self, key: &str, x: u64) {
        let t = &mut self.cfg.timing;
        match key {
            "tracker.timeout_s" => self.cfg.tracker.timeout_s = x,
            "tracker.max_writes_per_min" => self.cfg.tracker.max_writes_per_min = x,
            "tracker.pace_window_s" => self.cfg.tracker.pace_window_s = x,
            "tracker.max_writes_per_hour" => self.cfg.tracker.max_writes_per_hour = x,
            "tracker.pace_hour_s" => self.cfg.tracker.pace_hour_s = x,
            "timing.tick_s" => t.tick_s = x,
            "timing.fast_death_s" => t.fast_death_s = x,
            "timing.circuit_k" => t.circuit_k = u32::try_from(x).unwrap_or(u32::MAX),
            "timing.circuit_window_s" => t.circuit_window_s = x,
            "timing.half_open_base_s" => t.half_open_base_s = x,
            "timing.half_open_cap_s" => t.half_open_cap_s = x,
            "timing.stop_grace_s" => t.stop_grace_s = x,
            "timing.stall_s" => t.stall_s = x,
            "timing.stall_kill_s" => t.stall_kill_s = x,
            "timing.unblock_interval_s" => t.unblock_interval_s = x,
            "timing.attempt_max_s" => t.attempt_max_s = x,
            "fleet.workers" => self.cfg.fleet.workers = x as usize,
            _ => {}
        }
    }

    fn apply_env(&mut self, env: &HashMap<String, String>) -> Result<(), ConfigError> {
        for (var, key) in afk_env::NUMERIC {
            let Some(raw) = env.get(var) else { continue };
            let x = parse_env_u64(var, key, raw)?;
            check_bounds(&Origin::Env(var), key, x)?;
            self.set_u64(key, x);
            self.origins.insert(key, Origin::Env(var));
        }
        if let Some(v) = env.get(afk_env::TRUNK).filter(|v| !v.trim().is_empty()) {
            self.cfg.fleet.base = v.trim().to_string();
            self.origins
                .insert("fleet.base", Origin::Env(afk_env::TRUNK));
        }
        if let Some(v) = env.get(afk_env::ISOLATION).filter(|v| !v.trim().is_empty()) {
            self.cfg.isolation.mode = v
                .parse()
                .map_err(|e: ConfigError| ConfigError(format!("{}: {e}", afk_env::ISOLATION)))?;
            self.origins
                .insert("isolation.mode", Origin::Env(afk_env::ISOLATION));
        }
        if let Some(v) = env.get(afk_env::RUNNER).filter(|v| !v.trim().is_empty()) {
            self.cfg.worker.runner = v.trim().to_string();
            self.origins
                .insert("worker.runner", Origin::Env(afk_env::RUNNER));
        }
        Ok(())
    }

    fn apply_flags(&mut self, f: &Overrides) {
        if let Some(w) = f.workers {
            self.cfg.fleet.workers = w;
            self.origins
                .insert("fleet.workers", Origin::Flag("--workers"));
        }
        if let Some(b) = &f.base {
            self.cfg.fleet.base = b.clone();
            self.origins.insert("fleet.base", Origin::Flag("--base"));
        }
        if let Some(k) = f.tracker {
            self.cfg.tracker.kind = k;
            self.origins
                .insert("tracker.kind", Origin::Flag("--tracker"));
        }
        if let Some(r) = &f.runner {
            self.cfg.worker.runner = r.clone();
            self.origins
                .insert("worker.runner", Origin::Flag("--runner"));
        }
    }

    /// `worker.runner` set nowhere: the agent's program name (`claude` for
    /// `["/usr/local/bin/claude", ...]`), so `status` names what really runs; with no
    /// agent, the `docs/SPEC.md` default `claude`.
    fn default_runner(&mut self) {
        if self.origins.contains_key("worker.runner") {
            return;
        }
        let name = self
            .cfg
            .agent
            .command
            .as_ref()
            .and_then(|c| c.first())
            .and_then(|p| Path::new(p).file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty());
        if let Some(name) = name {
            self.cfg.worker.runner = name;
            self.origins.insert("worker.runner", Origin::AgentProgram);
        }
    }

    /// `agent.profile` set nowhere: the one `agent.command[0]`'s file name implies.
    fn default_profile(&mut self) {
        if self.origins.contains_key("agent.profile") {
            return;
        }
        if let Some(p) = self.cfg.agent.command.as_ref().and_then(|c| c.first()) {
            self.cfg.agent.profile = ProfileKind::from_program(p);
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let t = &self.cfg.timing;
        if t.circuit_k == 0 {
            return Err(ConfigError(format!(
                "{}: timing.circuit_k must be at least 1 (0 would trip the circuit before any death)",
                self.origin_of("timing.circuit_k")
            )));
        }
        if self.cfg.worker.max_failed_attempts == 0 {
            return Err(ConfigError(format!(
                "{}: worker.max_failed_attempts must be at least 1",
                self.origin_of("worker.max_failed_attempts")
            )));
        }
        if t.attempt_max_s == 0 {
            return Err(ConfigError(format!(
                "{}: timing.attempt_max_s must be at least 1",
                self.origin_of("timing.attempt_max_s")
            )));
        }
        if t.stall_kill_s <= t.stall_s {
            return Err(ConfigError(format!(
                "{}: timing.stall_kill_s ({}) must be greater than timing.stall_s ({})",
                self.origin_of("timing.stall_kill_s"),
                t.stall_kill_s,
                t.stall_s
            )));
        }
        if t.half_open_cap_s < t.half_open_base_s {
            return Err(ConfigError(format!(
                "{}: timing.half_open_cap_s ({}) must not be below timing.half_open_base_s ({})",
                self.origin_of("timing.half_open_cap_s"),
                t.half_open_cap_s,
                t.half_open_base_s
            )));
        }
        if self.cfg.fleet.base.trim().is_empty() {
            return Err(ConfigError(format!(
                "{}: fleet.base must not be empty",
                self.origin_of("fleet.base")
            )));
        }
        // The base is placed on git command lines (fetch refspecs, `origin/<base>`): a
        // value git would read as an option, or that is no branch name, is refused here,
        // naming where it came from, instead of failing later as an unreachable origin.
        if let Err(e) = crate::git::check_branch_name(&self.cfg.fleet.base) {
            let why = match e {
                crate::git::GitError::BadName { why, .. } => why,
                _ => "not a branch name",
            };
            return Err(ConfigError(format!(
                "{}: fleet.base must be a branch name, got {:?}: {why}",
                self.origin_of("fleet.base"),
                excerpt(&self.cfg.fleet.base)
            )));
        }
        for key in ["worker.command", "agent.command"] {
            let cmd = if key == "worker.command" {
                &self.cfg.worker.command
            } else {
                &self.cfg.agent.command
            };
            if cmd
                .as_ref()
                .is_some_and(|c| c.is_empty() || c[0].is_empty())
            {
                return Err(ConfigError(format!(
                    "{}: {key} must name a program",
                    self.origin_of(key)
                )));
            }
        }
        if let Some(r) = &self.cfg.tracker.repo {
            let ok = r
                .split_once('/')
                .is_some_and(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'));
            if !ok {
                return Err(ConfigError(format!(
                    "{}: tracker.repo must be OWNER/NAME, got {:?}",
                    self.origin_of("tracker.repo"),
                    excerpt(r)
                )));
            }
        }
        Ok(())
    }
}

/// A GitHub login as `claims.trusted_authors` may name it: 1 to 39 of `A-Z a-z 0-9 -`, plus
/// `[bot]` for an app's account (`github-actions[bot]`).
fn valid_login(s: &str) -> bool {
    let name = s.strip_suffix("[bot]").unwrap_or(s);
    !name.is_empty()
        && name.len() <= 39
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The numeric `RED_AFK_*` variables and the key each sets; they pass the file's bound
/// check ([`check_bounds`]). Named in [`afk_env`], their one home.
pub use crate::afk_env::NUMERIC as NUMERIC_ENV;

/// The longest duration any source may set: ten years, in seconds. Far beyond any sensible
/// value, and far enough from `u64::MAX` that no sum of durations overflows.
pub const MAX_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// The range of every numeric key. The file and the `RED_AFK_*` variables pass the same
/// check ([`check_bounds`]), so neither can set what the other would refuse.
fn bounds(key: &str) -> (u64, u64) {
    match key {
        "fleet.workers" => (0, 1024),
        "tracker.max_writes_per_min" => (1, 10_000),
        "tracker.max_writes_per_hour" => (1, 100_000),
        "tracker.timeout_s"
        | "tracker.pace_window_s"
        | "tracker.pace_hour_s"
        | "timing.tick_s"
        | "timing.unblock_interval_s"
        | "claims.stale_after_s"
        | "claims.unmarked_grace_s" => (1, MAX_SECONDS),
        "sweeps.attempt_max_age_days" => (0, 36500),
        "sweeps.attempt_max_count" => (1, 1_000_000),
        // Room for a header and a few records, and at most 1 TiB.
        "log.max_bytes" => (1024, 1 << 40),
        "log.keep" => (0, 1000),
        "log.slot_log_days" => (1, 36500),
        "rescue.max_file_bytes" => (1, u64::MAX),
        "log.slot_log_max_bytes" => (1024, 1 << 40),
        // At most a thousand cores.
        "timing.stall_cpu_floor_permille" => (0, 1_000_000),
        "checks.timeout_s" | "landing.watch_interval_s" => (1, MAX_SECONDS),
        "checks.max_rounds" => (1, 100),
        "landing.max_fix_rounds" => (0, 100),
        _ => (0, MAX_SECONDS),
    }
}

fn check_bounds(origin: &dyn fmt::Display, key: &str, x: u64) -> Result<(), ConfigError> {
    check_range(origin, key, x, bounds(key))
}

fn check_range(
    origin: &dyn fmt::Display,
    key: &str,
    x: u64,
    (min, max): (u64, u64),
) -> Result<(), ConfigError> {
    if x < min || x > max {
        return Err(ConfigError(format!(
            "{origin}: {key} = {x} is out of range ({min}..={max})"
        )));
    }
    Ok(())
}

/// A non-negative integer from variable `var` (which sets `key`); digits too many for
/// any integer are out of range, anything else is not a number.
fn parse_env_u64(var: &str, key: &str, raw: &str) -> Result<u64, ConfigError> {
    let t = raw.trim();
    t.parse().map_err(|_| {
        let digits = !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        ConfigError(if digits {
            format!("{var}: {key} = {} is out of range", excerpt(t))
        } else {
            format!(
                "{var}: expected a non-negative integer, got {:?}",
                excerpt(raw)
            )
        })
    })
}

/// A number of seconds from variable `var` that sets `what`, a setting outside the config
/// file (e.g. the worker's `RED_AFK_LIVENESS_S`), bounded like every duration:
/// `min..=MAX_SECONDS`. `None` when the variable is unset or blank.
pub fn env_seconds(
    env: &HashMap<String, String>,
    var: &'static str,
    what: &str,
    min: u64,
) -> Result<Option<u64>, ConfigError> {
    let Some(raw) = env.get(var).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    let x = parse_env_u64(var, what, raw)?;
    check_range(&var, what, x, (min, MAX_SECONDS))?;
    Ok(Some(x))
}

impl Timing {
    /// Half-open backoff for a step: `min(base·2^step, cap)` seconds.
    pub fn half_open_backoff_s(&self, step: u32) -> u64 {
        let factor = 1u64.checked_shl(step.min(63)).unwrap_or(u64::MAX);
        self.half_open_base_s
            .saturating_mul(factor)
            .min(self.half_open_cap_s)
    }
}

/// The process environment as a map, for [`load`].
pub fn process_env() -> HashMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// A variable name for `agent.env`: letters, digits and `_`, optionally ending in `*`.
fn env_name_ok(n: &str) -> bool {
    let base = n.strip_suffix('*').unwrap_or(n);
    !base.is_empty()
        && !base.starts_with(|c: char| c.is_ascii_digit())
        && base.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn from_file(text: &str) -> Result<Config, ConfigError> {
        resolve(
            Some((Path::new("cfg.toml"), text)),
            &HashMap::new(),
            &Overrides::default(),
        )
    }

    #[test]
    fn defaults() {
        let c = resolve(None, &HashMap::new(), &Overrides::default()).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.timing.half_open_backoff_s(0), 60);
        assert_eq!(c.timing.half_open_backoff_s(3), 480);
        assert_eq!(c.timing.half_open_backoff_s(10), 3600);
        assert_eq!(c.timing.half_open_backoff_s(200), 3600);
    }

    #[test]
    fn agent_profile_prompt_and_budget_keys_resolve_and_bad_ones_name_their_place() {
        let p = Path::new("c.toml");
        let text = "[agent]\ncommand = [\"/opt/bin/codex\"]\nprompt = \"do {number}\"\n\
                    [budget]\nusd_per_day = 10.0\nusd_per_issue = 2.5\ntokens_per_day = 9000\n\
                    estimate_usd = 0.4\ntimezone = \"+02:00\"\n";
        let c = resolve(Some((p, text)), &HashMap::new(), &Overrides::default()).unwrap();
        assert_eq!(
            c.agent.profile,
            ProfileKind::Codex,
            "from the program's name"
        );
        assert_eq!(c.agent.prompt.as_deref(), Some("do {number}"));
        assert_eq!(c.budget.usd_per_day, Some(Usd(10_000_000)));
        assert_eq!(
            c.budget.usd_per_issue.map(|u| u.to_string()),
            Some("$2.50".into())
        );
        assert_eq!(c.budget.tokens_per_day, Some(9000));
        assert_eq!(c.budget.estimate_usd, Some(Usd(400_000)));
        assert_eq!(c.budget.utc_offset_s, 7200);
        let set = "[agent]\ncommand = [\"claude\"]\nprofile = \"generic\"\n";
        let c = resolve(Some((p, set)), &HashMap::new(), &Overrides::default()).unwrap();
        assert_eq!(
            c.agent.profile,
            ProfileKind::Generic,
            "an explicit profile wins"
        );
        for (bad, says) in [
            (
                "[budget]\ntimezone = \"Mars/Olympus\"\n",
                "c.toml:2:12: budget.timezone must be UTC",
            ),
            (
                "[budget]\nusd_per_day = -1.0\n",
                "c.toml:2:15: budget.usd_per_day = -1",
            ),
            (
                "[budget]\nestimate_usd = 0.0\n",
                "c.toml:2:16: budget.estimate_usd = 0",
            ),
            ("[agent]\nprofile = \"gpt\"\n", "c.toml:2:"),
        ] {
            let e = resolve(Some((p, bad)), &HashMap::new(), &Overrides::default()).unwrap_err();
            assert!(e.0.starts_with(says), "{bad}: {e}");
        }
        assert_eq!(parse_utc_offset("-05:30"), Some(-(5 * 3600 + 30 * 60)));
        assert_eq!(parse_utc_offset("+24:00"), None);
    }

    #[test]
    fn documented_config_file_equals_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/afk-supervisor.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let mut c = resolve(Some((&path, &text)), &HashMap::new(), &Overrides::default()).unwrap();
        c.file = None;
        assert_eq!(c, Config::default());
    }

    #[test]
    fn isolation_mode_and_limits_are_read_and_checked() {
        let p = Path::new("c.toml");
        let text = "[isolation]\nmode = \"cgroup\"\ncgroup_root = \"/sys/fs/cgroup/x\"\n\
                    [worker]\nmemory_max = \"2G\"\ncpu_max = \"50000 100000\"\npids_max = 64\n\
                    [fleet]\nmemory_max = \"max\"\n";
        let c = resolve(Some((p, text)), &HashMap::new(), &Overrides::default()).unwrap();
        assert_eq!(c.isolation.mode, IsolationMode::Cgroup);
        assert_eq!(
            c.isolation.worker_limits(),
            vec![
                ("worker.memory_max", "memory.max", "2G".to_string()),
                ("worker.cpu_max", "cpu.max", "50000 100000".to_string()),
                ("worker.pids_max", "pids.max", "64".to_string()),
            ]
        );
        assert_eq!(
            c.isolation.fleet_limits(),
            vec![("fleet.memory_max", "memory.max", "max".to_string())]
        );
        let e = env(&[("RED_AFK_ISOLATION", "process-group")]);
        let c = resolve(Some((p, text)), &e, &Overrides::default()).unwrap();
        assert_eq!(c.isolation.mode, IsolationMode::ProcessGroup);
        for bad in [
            "[worker]\nmemory_max = \"2 G\"\n",
            "[worker]\ncpu_max = \"fast\"\n",
            "[worker]\npids_max = \"-1\"\n",
            "[isolation]\ncgroup_root = \"relative\"\n",
            "[isolation]\nmode = \"jail\"\n",
        ] {
            let err = resolve(Some((p, bad)), &HashMap::new(), &Overrides::default());
            assert!(err.is_err(), "{bad}");
        }
        let err = resolve(
            None,
            &env(&[("RED_AFK_ISOLATION", "jail")]),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(err.0.contains("RED_AFK_ISOLATION"), "{err}");
    }

    #[test]
    fn precedence_flag_env_file_default() {
        let text = "[fleet]\nworkers = 3\nbase = \"trunk\"\n[timing]\ntick_s = 7\n";
        let p = Path::new("c.toml");
        let c = resolve(Some((p, text)), &HashMap::new(), &Overrides::default()).unwrap();
        assert_eq!(
            (c.fleet.workers, c.fleet.base.as_str(), c.timing.tick_s),
            (3, "trunk", 7)
        );
        let e = env(&[
            ("RED_AFK_TARGET", "5"),
            ("RED_AFK_POLL_S", "2"),
            ("RED_AFK_TRUNK", "dev"),
        ]);
        let c = resolve(Some((p, text)), &e, &Overrides::default()).unwrap();
        assert_eq!(
            (c.fleet.workers, c.fleet.base.as_str(), c.timing.tick_s),
            (5, "dev", 2)
        );
        let f = Overrides {
            workers: Some(9),
            ..Default::default()
        };
        let c = resolve(Some((p, text)), &e, &f).unwrap();
        assert_eq!(c.fleet.workers, 9);
    }

    #[test]
    fn sources_name_flag_env_file_or_default() {
        let text = "[fleet]\nworkers = 3\n[timing]\ntick_s = 7\n";
        let p = Path::new("c.toml");
        let e = env(&[("RED_AFK_TARGET", "5"), ("RED_AFK_TRUNK", "dev")]);
        let f = Overrides {
            tracker: Some(TrackerKind::Local),
            ..Default::default()
        };
        let (c, src) = resolve_with_sources(Some((p, text)), &e, &f).unwrap();
        assert_eq!(c.fleet.workers, 5);
        assert_eq!(src.describe("fleet.workers"), "env RED_AFK_TARGET");
        assert_eq!(src.describe("fleet.base"), "env RED_AFK_TRUNK");
        assert_eq!(src.describe("timing.tick_s"), "file c.toml:4:10");
        assert_eq!(src.describe("tracker.kind"), "flag --tracker");
        assert_eq!(src.describe("timing.stall_s"), "default");
        let f = Overrides {
            workers: Some(1),
            ..Default::default()
        };
        let (_, src) = resolve_with_sources(None, &e, &f).unwrap();
        assert_eq!(src.describe("fleet.workers"), "flag --workers");
    }

    #[test]
    fn the_runner_defaults_to_the_agents_program_name() {
        let p = Path::new("c.toml");
        let text = "[agent]\ncommand = [\"/opt/bin/codex\", \"--yolo\"]\n";
        let (c, src) =
            resolve_with_sources(Some((p, text)), &HashMap::new(), &Overrides::default()).unwrap();
        assert_eq!(c.worker.runner, "codex");
        assert!(src.describe("worker.runner").contains("agent.command[0]"));
        // Set anywhere, it wins; with no agent it is the `docs/SPEC.md` default.
        let set = format!("{text}[worker]\nrunner = \"claude\"\n");
        assert_eq!(from_file(&set).unwrap().worker.runner, "claude");
        let e = env(&[("RED_AFK_RUNNER", "gemini")]);
        let c = resolve(Some((p, text)), &e, &Overrides::default()).unwrap();
        assert_eq!(c.worker.runner, "gemini");
        assert_eq!(from_file("").unwrap().worker.runner, "claude");
    }

    #[test]
    fn malformed_file_names_line_and_column() {
        let err = from_file("[timing]\ntick_s = \"fast\"\n").unwrap_err().0;
        assert!(err.starts_with("cfg.toml:2:"), "{err}");
        let err = from_file("[fleet]\nworkerz = 2\n").unwrap_err().0;
        assert!(err.starts_with("cfg.toml:2:1:"), "{err}");
        assert!(err.contains("workerz"), "{err}");
        let err = from_file("[fleet\n").unwrap_err().0;
        assert!(err.starts_with("cfg.toml:1:"), "{err}");
    }

    #[test]
    fn huge_outside_input_is_quoted_cut() {
        let key = "k".repeat(1 << 20);
        let err = from_file(&format!("[fleet]\n{key} = 2\n")).unwrap_err().0;
        assert!(err.starts_with("cfg.toml:2:1:"), "{err}");
        assert!(err.len() < 400, "{} bytes", err.len());
        assert!(
            err.contains(&format!("{}…", "k".repeat(crate::text::QUOTE_MAX))),
            "{err}"
        );
        let long = "x".repeat(1 << 20);
        let err = resolve(
            None,
            &env(&[("RED_AFK_POLL_S", &long)]),
            &Overrides::default(),
        )
        .unwrap_err()
        .0;
        assert!(err.len() < 200 && err.contains('…'), "{err}");
        let err = from_file(&format!("[tracker]\nrepo = \"{long}\"\n"))
            .unwrap_err()
            .0;
        assert!(err.len() < 200 && err.contains('…'), "{err}");
    }

    #[test]
    fn config_file_must_be_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let p = layout.repo_config();
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let load_err = || {
            load(None, &layout, &HashMap::new(), &Overrides::default())
                .unwrap_err()
                .0
        };
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(load_err().ends_with("cannot read config: not a regular file (a FIFO)"));
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
        assert!(load_err().ends_with("not a regular file (a character device)"));
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        assert!(load_err().contains("larger than"));
        // A link to a regular file is followed.
        let real = dir.path().join("real.toml");
        std::fs::write(&real, "[fleet]\nworkers = 3\n").unwrap();
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&real, &p).unwrap();
        let c = load(None, &layout, &HashMap::new(), &Overrides::default()).unwrap();
        assert_eq!(c.fleet.workers, 3);
    }

    #[test]
    fn impossible_combinations() {
        let err = from_file("[timing]\nstall_s = 100\nstall_kill_s = 100\n")
            .unwrap_err()
            .0;
        assert_eq!(
            err,
            "cfg.toml:3:16: timing.stall_kill_s (100) must be greater than timing.stall_s (100)"
        );
        let err = from_file("[timing]\ncircuit_k = 0\n").unwrap_err().0;
        assert!(
            err.starts_with("cfg.toml:2:13: timing.circuit_k must be at least 1"),
            "{err}"
        );
        let err = resolve(
            None,
            &env(&[("RED_AFK_CIRCUIT_K", "0")]),
            &Overrides::default(),
        )
        .unwrap_err()
        .0;
        assert!(err.starts_with("RED_AFK_CIRCUIT_K: "), "{err}");
        let err = resolve(
            None,
            &env(&[("RED_AFK_TARGET", "two")]),
            &Overrides::default(),
        )
        .unwrap_err()
        .0;
        assert_eq!(
            err,
            "RED_AFK_TARGET: expected a non-negative integer, got \"two\""
        );
        let err = from_file("[worker]\ncommand = []\n").unwrap_err().0;
        assert!(err.contains("worker.command must name a program"), "{err}");
        let err = from_file("[timing]\nstop_grace_s = 315360001\n")
            .unwrap_err()
            .0;
        assert_eq!(
            err,
            "cfg.toml:2:16: timing.stop_grace_s = 315360001 is out of range (0..=315360000)"
        );
        let err = from_file("[tracker]\nrepo = \"nope\"\n").unwrap_err().0;
        assert!(err.contains("OWNER/NAME"), "{err}");
    }

    /// The base goes on git command lines: a value git would take as an option, or that is
    /// no branch name, is a config error naming its source, from the environment and the
    /// file alike.
    #[test]
    fn a_base_that_is_no_branch_name_is_refused() {
        for bad in [
            "--upload-pack=x",
            "-x",
            "a..b",
            "a b",
            "x.lock",
            "a\u{1b}[2J",
            "refs/heads/x",
        ] {
            let err = resolve(None, &env(&[("RED_AFK_TRUNK", bad)]), &Overrides::default())
                .unwrap_err()
                .0;
            assert!(
                err.starts_with("RED_AFK_TRUNK: fleet.base must be a branch name"),
                "{err}"
            );
            assert_eq!(err.lines().count(), 1, "{err}");
        }
        let text = "[fleet]\nbase = \"--upload-pack=touch /tmp/x\"\n";
        let err = resolve(
            Some((Path::new("c.toml"), text)),
            &env(&[]),
            &Overrides::default(),
        )
        .unwrap_err()
        .0;
        assert!(
            err.starts_with("c.toml:2:8: fleet.base must be a branch name"),
            "{err}"
        );
        for good in ["main", "release/1.x", "dev-2"] {
            let c = resolve(
                None,
                &env(&[("RED_AFK_TRUNK", good)]),
                &Overrides::default(),
            )
            .unwrap();
            assert_eq!(c.fleet.base, good);
        }
    }

    /// The environment passes the file's bound check: a huge number in any variable is
    /// one line naming the variable, never a value that overflows a duration later.
    #[test]
    fn environment_numbers_are_bounded_like_the_file() {
        const VARS: [&str; 11] = [
            "RED_AFK_TARGET",
            "RED_AFK_POLL_S",
            "RED_AFK_FAST_DEATH_S",
            "RED_AFK_CIRCUIT_K",
            "RED_AFK_CIRCUIT_WINDOW_S",
            "RED_AFK_HALF_OPEN_BASE_S",
            "RED_AFK_HALF_OPEN_CAP_S",
            "RED_AFK_STOP_GRACE_S",
            "RED_AFK_STALL_THRESHOLD_S",
            "RED_AFK_STALL_KILL_THRESHOLD_S",
            "RED_AFK_UNBLOCK_SWEEP_INTERVAL_S",
        ];
        for var in VARS {
            for huge in [
                "18446744073709551615",
                "315360001",
                "99999999999999999999999",
            ] {
                let err = resolve(None, &env(&[(var, huge)]), &Overrides::default())
                    .unwrap_err()
                    .0;
                assert!(err.starts_with(&format!("{var}: ")), "{err}");
                assert!(err.contains("is out of range"), "{err}");
                assert_eq!(err.lines().count(), 1, "{err}");
            }
        }
        let err = resolve(
            None,
            &env(&[("RED_AFK_STOP_GRACE_S", "18446744073709551615")]),
            &Overrides::default(),
        )
        .unwrap_err()
        .0;
        assert_eq!(
            err,
            "RED_AFK_STOP_GRACE_S: timing.stop_grace_s = 18446744073709551615 is out of range (0..=315360000)"
        );
        let c = resolve(
            None,
            &env(&[("RED_AFK_STOP_GRACE_S", "315360000")]),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.timing.stop_grace_s, MAX_SECONDS);
        let e = env(&[("RED_AFK_LIVENESS_S", "18446744073709551615")]);
        let err = env_seconds(&e, "RED_AFK_LIVENESS_S", "liveness_s", 1)
            .unwrap_err()
            .0;
        assert_eq!(
            err,
            "RED_AFK_LIVENESS_S: liveness_s = 18446744073709551615 is out of range (1..=315360000)"
        );
        let e = env(&[("RED_AFK_LIVENESS_S", " 5 ")]);
        assert_eq!(
            env_seconds(&e, "RED_AFK_LIVENESS_S", "liveness_s", 1),
            Ok(Some(5))
        );
    }

    /// Every listed key reads back (the `config` command shows them all).
    #[test]
    fn every_timing_key_has_a_value() {
        let c = Config::default();
        for key in TIMING_KEYS {
            assert!(c.number(key).is_some(), "{key}");
        }
        assert_eq!(c.number("timing.tick_s"), Some(c.timing.tick_s));
        assert_eq!(c.number("no.such.key"), None);
    }
}
