//! The `RED_AFK_*` contract (`docs/SPEC.md` §6, §10, §11.2): every variable's name. The
//! supervisor writes them ([`slot_vars`]), the worker (`worker::env`) and the config read
//! them, the worker passes the issue's to its agent; one list keeps the writer and the
//! readers spelling each the same. It depends on nothing else in the crate, so every
//! layer can name a variable.

use std::path::Path;

/// What every variable of the contract starts with: the supervisor strips the caller's from
/// a worker's environment, the demo from its supervisor's.
pub const PREFIX: &str = "RED_AFK_";

// Supervisor → worker (SPEC §6).
pub const SWEEPS_DONE: &str = "RED_AFK_SWEEPS_DONE";
pub const SLOT: &str = "RED_AFK_SLOT";
pub const WORKER_ID: &str = "RED_AFK_WORKER_ID";
pub const RUNNER: &str = "RED_AFK_RUNNER";
pub const RETIRE_FILE: &str = "RED_AFK_RETIRE_FILE";
/// Seconds between a worker's liveness records while its agent runs (default 30).
pub const LIVENESS_S: &str = "RED_AFK_LIVENESS_S";

// Worker → agent (SPEC §6, §11.2).
pub const ISSUE: &str = "RED_AFK_ISSUE";
pub const BRANCH: &str = "RED_AFK_BRANCH";
pub const WORKTREE: &str = "RED_AFK_WORKTREE";
pub const ATTEMPT_DIR: &str = "RED_AFK_ATTEMPT_DIR";
pub const RESUME_BRANCH: &str = "RED_AFK_RESUME_BRANCH";
/// The file holding what this round must address (`docs/SPEC.md` §11.22), when it has guidance.
pub const GUIDANCE_FILE: &str = "RED_AFK_GUIDANCE_FILE";
/// Which round of an attempt the `[checks] command` checks (1 for the first).
pub const CHECKS_ROUND: &str = "RED_AFK_CHECKS_ROUND";
pub const ISSUE_TITLE: &str = "RED_AFK_ISSUE_TITLE";
pub const ISSUE_BODY: &str = "RED_AFK_ISSUE_BODY";
pub const ISSUE_TITLE_FILE: &str = "RED_AFK_ISSUE_TITLE_FILE";
pub const ISSUE_BODY_FILE: &str = "RED_AFK_ISSUE_BODY_FILE";
pub const ISSUE_TITLE_TRUNCATED: &str = "RED_AFK_ISSUE_TITLE_TRUNCATED";
pub const ISSUE_BODY_TRUNCATED: &str = "RED_AFK_ISSUE_BODY_TRUNCATED";
/// Where a generic agent may write its JSON result (reset, cost, tokens; SPEC §11.13).
pub const RESULT_FILE: &str = "RED_AFK_RESULT_FILE";

// Operator → config (SPEC §10).
pub const TRUNK: &str = "RED_AFK_TRUNK";
/// `isolation.mode` (`auto`, `cgroup` or `process-group`).
pub const ISOLATION: &str = "RED_AFK_ISOLATION";

/// The numeric config variables and the key each sets; they pass the file's bound check.
pub const NUMERIC: [(&str, &str); 11] = [
    ("RED_AFK_TARGET", "fleet.workers"),
    ("RED_AFK_POLL_S", "timing.tick_s"),
    ("RED_AFK_FAST_DEATH_S", "timing.fast_death_s"),
    ("RED_AFK_CIRCUIT_K", "timing.circuit_k"),
    ("RED_AFK_CIRCUIT_WINDOW_S", "timing.circuit_window_s"),
    ("RED_AFK_HALF_OPEN_BASE_S", "timing.half_open_base_s"),
    ("RED_AFK_HALF_OPEN_CAP_S", "timing.half_open_cap_s"),
    ("RED_AFK_STOP_GRACE_S", "timing.stop_grace_s"),
    ("RED_AFK_STALL_THRESHOLD_S", "timing.stall_s"),
    ("RED_AFK_STALL_KILL_THRESHOLD_S", "timing.stall_kill_s"),
    (
        "RED_AFK_UNBLOCK_SWEEP_INTERVAL_S",
        "timing.unblock_interval_s",
    ),
];

/// Whether `name` belongs to the contract.
pub fn is_ours(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// The SPEC §6 variables of one slot, as the supervisor sets them.
pub fn slot_vars(
    slot: usize,
    worker_id: &str,
    runner: &str,
    retire_file: &Path,
) -> Vec<(String, String)> {
    vec![
        (SWEEPS_DONE.into(), "1".into()),
        (SLOT.into(), slot.to_string()),
        (WORKER_ID.into(), worker_id.into()),
        (RUNNER.into(), runner.into()),
        (RETIRE_FILE.into(), retire_file.display().to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_carries_the_prefix() {
        let names = [
            SWEEPS_DONE,
            SLOT,
            WORKER_ID,
            RUNNER,
            RETIRE_FILE,
            LIVENESS_S,
            ISSUE,
            BRANCH,
            WORKTREE,
            ATTEMPT_DIR,
            RESUME_BRANCH,
            GUIDANCE_FILE,
            CHECKS_ROUND,
            ISSUE_TITLE,
            ISSUE_BODY,
            ISSUE_TITLE_FILE,
            ISSUE_BODY_FILE,
            ISSUE_TITLE_TRUNCATED,
            ISSUE_BODY_TRUNCATED,
            RESULT_FILE,
            TRUNK,
        ];
        for n in names.into_iter().chain(NUMERIC.iter().map(|(v, _)| *v)) {
            assert!(is_ours(n), "{n}");
        }
        assert_eq!(ISSUE_TITLE_FILE, format!("{ISSUE_TITLE}_FILE"));
        assert_eq!(ISSUE_BODY_TRUNCATED, format!("{ISSUE_BODY}_TRUNCATED"));
    }
}
