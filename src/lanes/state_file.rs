//! `state.toon`, the heartbeat snapshot (`docs/SPEC.md` §4).
//!
//! Written atomically every tick and after every transition; `status`, `scale`, `stop` and
//! the next supervisor's takeover read it. The `docs/SPEC.md` §4 fields come first, exactly as named
//! there; `slot_detail` is this tool's addition for `status` and takeover, and readers
//! that do not know it ignore it.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::{SmallFileError, read_small_text, replace_file};
use crate::text::clip_quoted;

/// Largest `state.toon` read: a full fleet of 1024 slots is a few hundred KiB.
pub const MAX_STATE_BYTES: u64 = 4 << 20;

/// How surplus slots go when the target shrinks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShrinkMode {
    /// Ask the worker to finish its issue (`.retire` file) and do not respawn it.
    #[default]
    DrainThenRetire,
    /// Stop the surplus workers at once.
    HardKill,
}

impl ShrinkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ShrinkMode::DrainThenRetire => "drain-then-retire",
            ShrinkMode::HardKill => "hard-kill",
        }
    }
}

impl std::str::FromStr for ShrinkMode {
    type Err = UnknownShrinkMode;
    fn from_str(s: &str) -> Result<Self, UnknownShrinkMode> {
        match s {
            "drain-then-retire" => Ok(ShrinkMode::DrainThenRetire),
            "hard-kill" => Ok(ShrinkMode::HardKill),
            other => Err(UnknownShrinkMode(other.to_string())),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown shrink mode {0:?} (expected drain-then-retire or hard-kill)")]
pub struct UnknownShrinkMode(pub String);

impl std::fmt::Display for ShrinkMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotCounts {
    /// Slots with a live worker.
    pub busy: usize,
    /// Slots neither busy nor parked: idle, or between a death and the respawn.
    pub free: usize,
    pub total: usize,
    /// Slots parked for good (exit 78) or by an open circuit.
    pub parked: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotPid {
    pub slot: usize,
    pub pid: i32,
    /// Start time in clock ticks (`/proc/<pid>/stat` field 22): with the pid, the identity.
    pub start: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Churn {
    pub deaths: usize,
    pub respawns: usize,
    pub window_s: u64,
}

/// A slot's state, as `state.toon` and `status` word it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlotState {
    Running,
    Idle,
    Parked,
    HalfOpen,
    Retiring,
    Stalled,
    /// Stopped by the operator (`stop --slot`): empty until `restart`.
    Stopped,
    /// A word this version does not know (a newer writer): read, never written.
    #[serde(other)]
    Unknown,
}

impl SlotState {
    pub fn as_str(self) -> &'static str {
        match self {
            SlotState::Running => "running",
            SlotState::Idle => "idle",
            SlotState::Parked => "parked",
            SlotState::HalfOpen => "half-open",
            SlotState::Retiring => "retiring",
            SlotState::Stalled => "stalled",
            SlotState::Stopped => "stopped",
            SlotState::Unknown => "unknown",
        }
    }
}

/// Readers (and tests) compare against the word the file holds.
impl PartialEq<&str> for SlotState {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for SlotState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The fleet circuit's state while it is not closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FleetCircuitState {
    /// Every slot parked, waiting for the probe.
    Open,
    /// One slot probes.
    Probing,
    /// A word this version does not know: read, never written.
    #[serde(other)]
    Unknown,
}

impl std::fmt::Display for FleetCircuitState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            FleetCircuitState::Open => "open",
            FleetCircuitState::Probing => "probing",
            FleetCircuitState::Unknown => "unknown",
        })
    }
}

/// One slot as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotDetail {
    pub slot: usize,
    pub state: SlotState,
    pub pid: Option<i32>,
    pub worker_id: Option<String>,
    /// When the current worker started (epoch seconds).
    pub started_epoch: Option<u64>,
    pub restarts: u64,
    pub issue: Option<u64>,
    /// CPU time of the worker's process tree at the last tick, milliseconds (live
    /// processes only). Absent in files written before it existed.
    #[serde(default)]
    pub cpu_ms: Option<u64>,
    /// Resident memory of the worker's process tree at the last tick, KiB.
    #[serde(default)]
    pub rss_kib: Option<u64>,
    /// Why a parked slot is parked (project addition, `docs/SPEC.md` §11.7); absent
    /// otherwise. Readers that do not know the field ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The title of `issue`, as the worker's attempt state records it (§11.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The worker tree's CPU use between the last two usage reads (or since its start
    /// when there is one read), in thousandths of one core: 1000 is one core busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_permille: Option<u64>,
    /// When an open circuit's half-open probe is due (epoch seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_epoch: Option<u64>,
    /// cgroup mode: the worker's attempt cgroup (a directory of the v2 hierarchy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// cgroup mode with the memory controller: the attempt's `memory.peak`, KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak_kib: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    pub ts: String,
    pub epoch: u64,
    pub pid: i32,
    pub pid_start_time: u64,
    pub target: usize,
    pub runner: String,
    pub shrink_mode: ShrinkMode,
    /// Open `ready-for-agent` issues at the last successful check; null when unknown.
    pub ready_for_agent: Option<u64>,
    /// Why `ready_for_agent` is null (project addition, §11.7); absent when it is a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_for_agent_unknown: Option<String>,
    pub slots: SlotCounts,
    pub slot_pids: Vec<SlotPid>,
    pub churn: Churn,
    pub last_progress_epoch: u64,
    #[serde(default)]
    pub slot_detail: Vec<SlotDetail>,
    /// The fleet waits out a tracker rate limit (project addition, §11.7); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<FleetPause>,
    /// The fleet-wide circuit, when open or probing (project addition, §11.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_circuit: Option<FleetCircuit>,
    /// Open issues labelled `afk:quarantined` at the last successful queue check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined: Option<u64>,
    /// How this supervisor's boot suite ended (§11.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_suite: Option<BootSuite>,
    /// The tracker backend the fleet uses (`gh` or `local`); absent when it could not be
    /// opened (`ready_for_agent_unknown` then says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracker_kind: Option<String>,
    /// The fleet holds its claims for the agent's account or the day's budget (project
    /// addition, §11.13); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<AgentHold>,
    /// The day's spend, when a daily budget is set (§11.13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<SpendToday>,
    /// How workers are isolated: `cgroup` or `process-group (<why>)` (README
    /// "Isolation"); absent in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
}

/// Why the fleet claims nothing until `until_epoch` (`docs/SPEC.md` §11.13).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentHold {
    /// `agent` (the account: then one probe at the end) or `budget` (the day's budget).
    pub hold: String,
    /// `usage limit`, `login missing or expired`, … or `daily budget reached: …`.
    pub kind: String,
    /// The agent's words, one line.
    pub reason: String,
    pub until_epoch: u64,
    /// The offset of `budget.timezone`, in which `status` gives the resume time.
    #[serde(default)]
    pub utc_offset_s: i32,
}

impl AgentHold {
    /// `agent paused: usage limit, resumes 17:00 (in 42m)`, or for the budget
    /// `budget reached: spend today $1.20 of $1.00, resumes 00:00 (in 3h02m)`; the clock time
    /// in `budget.timezone`.
    pub fn words(&self, now: u64) -> String {
        let local = (self.until_epoch as i64 + i64::from(self.utc_offset_s)).rem_euclid(86_400);
        let at = format!("{:02}:{:02}", local / 3600, (local % 3600) / 60);
        let left = match self.until_epoch.checked_sub(now) {
            Some(s) if s > 0 => format!("in {}", crate::timeutil::coarse_duration(s)),
            _ => "now".into(),
        };
        let what = crate::text::excerpt(&crate::text::escape(&self.kind));
        match self.hold.as_str() {
            "budget" => format!(
                "budget reached: {}, resumes {at} ({left})",
                what.trim_start_matches("daily budget reached: ")
            ),
            _ => format!("agent paused: {what}, resumes {at} ({left})"),
        }
    }
}

/// What the fleet spent today, as `status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendToday {
    /// `spend today $3.20 of $10.00`.
    pub words: String,
    /// Dollars in millionths.
    pub usd_micros: u64,
    pub tokens: u64,
    /// What the running attempts of this host hold reserved against the day's budget,
    /// apart from what was spent (`docs/SPEC.md` §11.13): `reserved $0.40 for 1 running
    /// attempt`; absent when nothing is reserved (and in files written before
    /// reservations existed). Flat, not a nested table: the heartbeat's direct writer
    /// (`toon_doc`) writes one level of objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<String>,
    /// The reservations' dollars in millionths, tokens and attempts (0 when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reserved_usd_micros: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reserved_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reserved_attempts: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The boot suite's end as `status` shows it: `clean`, `failed: <why>` or
/// `precheck failed: <check>` (a halted suite starts no fleet), and how long it took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootSuite {
    pub result: String,
    pub elapsed_ms: u64,
}

/// Why and until when the whole fleet holds back what costs tracker calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetPause {
    /// One line, e.g. `rate limited: API rate limit exceeded for user ID 1`.
    pub reason: String,
    /// When the fleet resumes by itself (epoch seconds); null when no reset time is known
    /// and the pause lasts one backoff step.
    pub until_epoch: Option<u64>,
}

/// The fleet parked as a whole because most slots tripped their circuits in one window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetCircuit {
    pub state: FleetCircuitState,
    /// The last exit codes and the last lines of one slot log, as one line.
    pub reason: String,
    /// When the single probe is (or was) spawned (epoch seconds).
    pub probe_epoch: Option<u64>,
    /// Slots whose circuits tripped within the window.
    pub tripped_slots: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// Not read: a symlink, not a regular file, or over [`MAX_STATE_BYTES`].
    #[error("{path}: {source}")]
    Unsafe {
        path: PathBuf,
        source: SmallFileError,
    },
    #[error("{path}: not a valid state file: {msg}")]
    Decode { path: PathBuf, msg: String },
    #[error("{path}: cannot encode state: {msg}")]
    Encode { path: PathBuf, msg: String },
}

pub fn encode(state: &StateFile) -> Result<String, reddb_io_toon::SerdeError> {
    // The heartbeat's shape is one `toon_doc` writes, at a fraction of the general
    // encoder's cost (which clones every value while it checks shapes): at 1,000 slots,
    // the difference between a fraction of a millisecond and 10 to 20 per heartbeat.
    let fast = crate::toon_doc::encode_serialize(state);
    match fast {
        Some(mut s) => {
            s.push('\n');
            Ok(s)
        }
        None => reddb_io_toon::to_string(state).map(|mut s| {
            s.push('\n');
            s
        }),
    }
}

pub fn decode(text: &str) -> Result<StateFile, reddb_io_toon::SerdeError> {
    reddb_io_toon::from_str(text)
}

/// Replaces the snapshot atomically, without waiting for the disk: it is rewritten after
/// every loop turn that changed something, and is worth nothing after a reboot (the workers
/// it lists are gone, and the next supervisor writes its own at start-up). A crash of the
/// supervisor alone loses nothing written (`fsutil::replace_file`).
pub fn write(path: &Path, state: &StateFile) -> Result<(), StateFileError> {
    let text = encode(state).map_err(|e| StateFileError::Encode {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })?;
    replace_file(path, text.as_bytes()).map_err(|source| StateFileError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads the snapshot (safely: see [`read_small_text`]); `Ok(None)` when there is none.
pub fn read(path: &Path) -> Result<Option<StateFile>, StateFileError> {
    let text = match read_small_text(path, MAX_STATE_BYTES) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(source) => {
            return Err(StateFileError::Unsafe {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    decode(&text).map(Some).map_err(|e| StateFileError::Decode {
        path: path.to_path_buf(),
        msg: clip_quoted(&e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_says_what_and_when_in_the_configured_zone() {
        let h = AgentHold {
            hold: "agent".into(),
            kind: "usage limit".into(),
            reason: "Claude AI usage limit reached|1796144400".into(),
            until_epoch: 1_796_144_400, // 2026-12-01T17:00:00Z
            utc_offset_s: 0,
        };
        assert_eq!(
            h.words(1_796_144_400 - 42 * 60),
            "agent paused: usage limit, resumes 17:00 (in 42m)"
        );
        let b = AgentHold {
            hold: "budget".into(),
            kind: "daily budget reached: spend today $1.20 of $1.00".into(),
            reason: String::new(),
            until_epoch: 1_796_169_600, // 2026-12-02T00:00:00Z
            utc_offset_s: 3600,
        };
        assert_eq!(
            b.words(1_796_169_600 - 3600),
            "budget reached: spend today $1.20 of $1.00, resumes 01:00 (in 1h00m)"
        );
    }
    use std::fs;

    pub(crate) fn sample() -> StateFile {
        StateFile {
            ts: "2026-01-02T03:04:05.678Z".into(),
            epoch: 1_767_323_045,
            pid: 4242,
            pid_start_time: 99,
            target: 2,
            runner: "claude".into(),
            shrink_mode: ShrinkMode::DrainThenRetire,
            ready_for_agent: Some(3),
            ready_for_agent_unknown: None,
            slots: SlotCounts {
                busy: 1,
                free: 0,
                total: 2,
                parked: 1,
            },
            slot_pids: vec![SlotPid {
                slot: 0,
                pid: 5000,
                start: 1234,
            }],
            churn: Churn {
                deaths: 4,
                respawns: 3,
                window_s: 90,
            },
            last_progress_epoch: 1_767_323_000,
            slot_detail: vec![
                SlotDetail {
                    slot: 0,
                    state: SlotState::Running,
                    pid: Some(5000),
                    worker_id: Some("sup-4242-slot-0-1".into()),
                    started_epoch: Some(1_767_322_000),
                    restarts: 0,
                    issue: Some(17),
                    cpu_ms: Some(1250),
                    rss_kib: Some(20480),
                    reason: None,
                    title: Some("Fix the thing".into()),
                    cpu_permille: Some(125),
                    probe_epoch: None,
                    cgroup: None,
                    memory_peak_kib: None,
                },
                SlotDetail {
                    slot: 1,
                    state: SlotState::Parked,
                    pid: None,
                    worker_id: None,
                    started_epoch: None,
                    restarts: 5,
                    issue: None,
                    cpu_ms: None,
                    rss_kib: None,
                    reason: Some("agent.command is not set (x): set it".into()),
                    title: None,
                    cpu_permille: None,
                    probe_epoch: None,
                    cgroup: None,
                    memory_peak_kib: None,
                },
            ],
            paused: None,
            fleet_circuit: None,
            quarantined: None,
            boot_suite: Some(BootSuite {
                result: "clean".into(),
                elapsed_ms: 1200,
            }),
            tracker_kind: Some("local".into()),
            held: None,
            spend: None,
            isolation: None,
        }
    }

    #[test]
    fn states_round_trip_as_their_words_and_an_unknown_word_still_reads() {
        let text = encode(&sample()).unwrap();
        let back = decode(&text).unwrap();
        let states: Vec<SlotState> = back.slot_detail.iter().map(|d| d.state).collect();
        assert_eq!(states, vec![SlotState::Running, SlotState::Parked]);
        assert!(
            text.contains("running") && text.contains("parked"),
            "{text}"
        );
        // A newer writer's word: the file is still read, the slot shows as unknown.
        let newer = decode(&text.replace("running", "hibernating")).unwrap();
        assert_eq!(newer.slot_detail[0].state, SlotState::Unknown);
        assert_eq!(SlotState::HalfOpen.to_string(), "half-open");
        assert_eq!(format!("{:<9}|", SlotState::Idle), "idle     |");
    }

    /// The heartbeat written without a `serde_json::Value` is byte for byte what the
    /// general encoder writes, for every optional part and for a table of many slots
    /// whose rows share a shape (and one that does not).
    #[test]
    fn the_direct_writer_writes_what_the_general_encoder_writes() {
        let mut full = sample();
        full.paused = Some(FleetPause {
            reason: "rate limited: API rate limit exceeded for user ID 1".into(),
            until_epoch: Some(1_767_323_999),
        });
        full.fleet_circuit = Some(FleetCircuit {
            state: FleetCircuitState::Probing,
            reason: "exit 1, exit 1, exit 1: \"boom\", no such file".into(),
            probe_epoch: None,
            tripped_slots: 3,
        });
        full.quarantined = Some(2);
        full.held = Some(AgentHold {
            hold: "agent".into(),
            kind: "usage limit".into(),
            reason: "Claude AI usage limit reached|1767330000".into(),
            until_epoch: 1_767_330_000,
            utc_offset_s: -18_000,
        });
        full.spend = Some(SpendToday {
            words: "spend today $3.20 of $10.00".into(),
            usd_micros: 3_200_000,
            tokens: 12_345,
            reserved: Some("reserved $0.80 for 2 running attempts".into()),
            reserved_usd_micros: 800_000,
            reserved_tokens: 0,
            reserved_attempts: 2,
        });
        full.isolation = Some("process-group (no cgroup v2 delegation)".into());
        let mut many = sample();
        let row = many.slot_detail[0].clone();
        many.slot_detail = (0..200)
            .map(|i| SlotDetail {
                slot: i,
                cgroup: Some(format!("/sys/fs/cgroup/afk-repo-1/slot-{i}/attempt-9-{i}")),
                ..row.clone()
            })
            .collect();
        let mut mixed = many.clone();
        mixed.slot_detail[7] = sample().slot_detail[1].clone();
        for s in [sample(), full, many, mixed] {
            let general = reddb_io_toon::to_string(&s).unwrap();
            let direct = crate::toon_doc::encode_serialize(&s).expect("a heartbeat's shape");
            assert_eq!(direct, general);
            assert_eq!(encode(&s).unwrap(), general + "\n");
        }
    }

    #[test]
    fn roundtrip_and_spec_field_names() {
        let s = sample();
        let text = encode(&s).unwrap();
        assert_eq!(decode(&text).unwrap(), s);
        for field in [
            "ts:",
            "epoch:",
            "pid:",
            "pid_start_time:",
            "target:",
            "runner:",
            "shrink_mode: drain-then-retire",
            "ready_for_agent: 3",
            "slots:",
            "busy:",
            "free:",
            "total:",
            "parked:",
            "slot_pids[1]{slot,pid,start}:",
            "churn:",
            "deaths:",
            "respawns:",
            "window_s:",
            "last_progress_epoch:",
        ] {
            assert!(text.contains(field), "{field} missing in:\n{text}");
        }
    }

    /// What a reader from before `reason` and `ready_for_agent_unknown` knew.
    #[derive(Debug, Deserialize)]
    struct OldDetail {
        slot: usize,
        state: String,
        restarts: u64,
    }

    #[derive(Debug, Deserialize)]
    struct OldState {
        target: usize,
        ready_for_agent: Option<u64>,
        #[serde(default)]
        slot_detail: Vec<OldDetail>,
    }

    #[test]
    fn the_added_fields_stay_readable_by_older_readers() {
        let mut s = sample();
        s.ready_for_agent = None;
        s.ready_for_agent_unknown = Some("no tracker check has answered yet".into());
        let text = encode(&s).unwrap();
        assert!(
            text.contains("agent.command is not set (x): set it"),
            "{text}"
        );
        assert_eq!(decode(&text).unwrap(), s);
        let old: OldState = reddb_io_toon::from_str(&text).unwrap();
        assert_eq!((old.target, old.ready_for_agent), (2, None));
        let details: Vec<(usize, &str, u64)> = old
            .slot_detail
            .iter()
            .map(|d| (d.slot, d.state.as_str(), d.restarts))
            .collect();
        assert_eq!(details, vec![(0, "running", 0), (1, "parked", 5)]);
        // And a file without them (an older writer) reads as "not known".
        let mut plain = sample();
        plain.slot_detail[1].reason = None;
        let text = encode(&plain).unwrap();
        assert!(!text.contains("reason"), "{text}");
        assert_eq!(decode(&text).unwrap(), plain);
    }

    #[test]
    fn unknown_extra_and_missing_detail_are_tolerated() {
        let mut s = sample();
        s.slot_detail.clear();
        s.slot_pids.clear();
        s.ready_for_agent = None;
        let text = encode(&s).unwrap();
        let stripped: String = text
            .lines()
            .filter(|l| !l.starts_with("slot_detail"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(decode(&stripped).unwrap(), s);
    }

    #[test]
    fn corrupt_file_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.toon");
        assert!(read(&p).unwrap().is_none());
        fs::write(&p, "epoch: [not, toon\n\u{0}").unwrap();
        let err = read(&p).unwrap_err().to_string();
        assert!(err.contains("state.toon: not a valid state file"), "{err}");
        write(&p, &sample()).unwrap();
        assert_eq!(read(&p).unwrap(), Some(sample()));
        fs::remove_file(&p).unwrap();
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = read(&p).unwrap_err().to_string();
        assert!(
            err.ends_with("state.toon: not a regular file (a FIFO)"),
            "{err}"
        );
        fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
        let err = read(&p).unwrap_err().to_string();
        assert!(
            err.ends_with("state.toon: is a symlink (not followed)"),
            "{err}"
        );
        fs::remove_file(&p).unwrap();
        fs::write(&p, vec![b'x'; MAX_STATE_BYTES as usize + 1]).unwrap();
        let err = read(&p).unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");
    }

    /// A heartbeat written before the usage fields existed still decodes.
    #[test]
    fn a_state_file_without_usage_fields_decodes() {
        let mut s = sample();
        for d in &mut s.slot_detail {
            d.cpu_ms = None;
            d.rss_kib = None;
        }
        let text = encode(&s).unwrap();
        // As written before the fields existed: their lines gone.
        let old: String = text
            .lines()
            .filter(|l| {
                let t = l.trim_start().trim_start_matches("- ");
                !t.starts_with("cpu_ms:") && !t.starts_with("rss_kib:")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(!old.contains("cpu_ms"), "{old}");
        assert_eq!(decode(&old).unwrap(), s, "{old}");
    }
}
