//! Whose fault a failed or stall-killed attempt is (`docs/SPEC.md` §11.13): the issue's,
//! counted towards its quarantine, or the account's or the fleet's, excused, so a
//! provider's outage does not quarantine the issues it happened to meet.

use std::fs;

use super::Worker;
use crate::agent_profile::{self, End};
use crate::ledger;

impl Worker<'_> {
    /// Why a failure of issue `n` now is not the issue's own (`docs/SPEC.md` §11.13), if
    /// it is not: an account-wide condition holds or began while the attempt (started at
    /// `started`, RFC 3339) ran, or within the circuit window the agent failed on other
    /// issues and finished none.
    pub(super) fn excuse(&self, n: u64, started: Option<&str>) -> Option<String> {
        let now = crate::timeutil::now_epoch();
        let window = self.config.timing.circuit_window_s;
        let began = started
            .and_then(crate::timeutil::parse_rfc3339)
            .map_or(now, crate::timeutil::epoch_secs);
        if let Ok(Some(p)) = crate::lanes::pause_file::agent_read(&self.layout.state())
            && (p.active_at(now) || p.since_epoch >= began)
        {
            return Some(format!("an account-wide condition was known ({})", p.kind));
        }
        let (all, _) = ledger::read_all(self.layout);
        let since = now.saturating_sub(window);
        let recent = |r: &&ledger::Record| {
            crate::timeutil::parse_rfc3339(&r.end)
                .map(crate::timeutil::epoch_secs)
                .is_some_and(|e| e >= since)
        };
        let mut failing = Vec::new();
        let mut finished = false;
        for (m, records) in &all {
            for r in records.iter().filter(recent) {
                match r.outcome {
                    ledger::Outcome::AgentFailed(_) if *m != n => failing.push(format!("#{m}")),
                    ledger::Outcome::Done => finished = true,
                    _ => {}
                }
            }
        }
        failing.dedup();
        (!failing.is_empty() && !finished).then(|| {
            format!(
                "the agent was failing on other issues too ({}) within {window}s",
                failing.join(", ")
            )
        })
    }

    /// Whose fault a stall-killed attempt of issue `n` (started at `started`) is, from
    /// what its agent last said (`ends`: stdout and stderr) and from the fleet around it
    /// (`docs/SPEC.md` §11.13). The agent's own last words naming the provider
    /// (`Reconnecting... waiting for network`, an outage it was riding out) make it the
    /// account's: the fleet pauses (recorded here). Else, when the supervisor's `mark`
    /// says most busy slots stalled at once, or when other issues stalled or failed within
    /// `timing.circuit_window_s` and none finished, the stall is the fleet's, not this
    /// issue's: excused, and the fleet pauses on the backoff instead of killing slot after
    /// slot. Else it is the issue's.
    pub(super) fn stall_blame(
        &self,
        n: u64,
        started: Option<&str>,
        ends: Option<&(Vec<u8>, Vec<u8>)>,
        mark: Option<crate::attempt_state::StallMark>,
    ) -> StallBlame {
        let state = self.layout.state();
        if let Some((stdout, stderr)) = ends {
            let seen = agent_profile::Seen {
                exit_code: crate::exit_code::SIGTERM,
                stdout,
                stderr,
                result_file: None,
                now_epoch: crate::timeutil::now_epoch(),
            };
            if let (
                End::AccountWide {
                    why,
                    reset_epoch,
                    detail,
                },
                _,
            ) = agent_profile::classify(self.config.agent.profile, &seen)
            {
                let _ = crate::lanes::pause_file::agent_record(
                    &state,
                    &why.to_string(),
                    &detail,
                    reset_epoch,
                );
                return StallBlame::Provider(detail);
            }
        }
        // The supervisor saw most busy slots stall at once and stopped them together: its
        // judgement, made with every slot in view, comes before this worker's own look
        // back at the ledger (which cannot excuse the first stall of an outage).
        let supervisor = match mark {
            Some(crate::attempt_state::StallMark::FleetWide(why)) => Some(why),
            _ => None,
        };
        match supervisor.or_else(|| self.excuse_stall(n, started)) {
            Some(why) => {
                let kind = agent_profile::AccountWide::Unreachable.to_string();
                let _ = crate::lanes::pause_file::agent_record(&state, &kind, &why, None);
                StallBlame::FleetWide(why)
            }
            None => StallBlame::Issue,
        }
    }

    /// Why a stall of issue `n` is not the issue's own: within the circuit window other
    /// issues' attempts stalled (or failed) and no issue's finished.
    pub(super) fn excuse_stall(&self, n: u64, started: Option<&str>) -> Option<String> {
        if let Some(why) = self.excuse(n, started) {
            return Some(why);
        }
        let now = crate::timeutil::now_epoch();
        let window = self.config.timing.circuit_window_s;
        let since = now.saturating_sub(window);
        let (all, _) = ledger::read_all(self.layout);
        let mut stalled = Vec::new();
        let mut finished = false;
        for (m, records) in &all {
            let recent = records.iter().filter(|r| {
                crate::timeutil::parse_rfc3339(&r.end)
                    .map(crate::timeutil::epoch_secs)
                    .is_some_and(|e| e >= since)
            });
            for r in recent {
                match r.outcome {
                    ledger::Outcome::Stalled if *m != n => stalled.push(format!("#{m}")),
                    ledger::Outcome::Done => finished = true,
                    _ => {}
                }
            }
        }
        // Slots stopped in the same sweep have no ledger record yet: the supervisor's
        // marks in their attempt dirs say they stalled.
        for (m, mark) in self.stall_marks() {
            if m != n && mark >= since && !stalled.contains(&format!("#{m}")) {
                stalled.push(format!("#{m}"));
            }
        }
        stalled.dedup();
        (!stalled.is_empty() && !finished).then(|| {
            format!(
                "other issues' agents stalled too ({}) within {window}s: the provider's, not the issues'",
                stalled.join(", ")
            )
        })
    }

    /// The stall marks (`stall-killed`) the supervisor left in any worker's attempt dirs:
    /// each attempt's issue and when it was marked (epoch seconds). Never through a link.
    pub(super) fn stall_marks(&self) -> Vec<(u64, u64)> {
        let mut marks = Vec::new();
        for ns in crate::layout::WORKER_NAMESPACES {
            let Ok(workers) = fs::read_dir(self.layout.worker_namespace(ns)) else {
                continue;
            };
            for w in workers.flatten() {
                let Ok(attempts) = fs::read_dir(w.path()) else {
                    continue;
                };
                for a in attempts.flatten() {
                    let Some((issue, _)) = a
                        .file_name()
                        .to_str()
                        .and_then(crate::layout::parse_attempt_dir)
                    else {
                        continue;
                    };
                    let mark = a.path().join(crate::attempt_state::STALL_KILLED_FILE);
                    let at = fs::symlink_metadata(&mark)
                        .ok()
                        .filter(fs::Metadata::is_file)
                        .and_then(|m| m.modified().ok())
                        .map(crate::timeutil::epoch_secs);
                    if let Some(at) = at {
                        marks.push((issue, at));
                    }
                }
            }
        }
        marks
    }
}

/// Whose fault a stall-killed attempt is.
pub(super) enum StallBlame {
    /// The issue's: recorded `stalled`, counted towards quarantine.
    Issue,
    /// The provider's, by the agent's own last words: `account-limited`, the fleet paused.
    Provider(String),
    /// The fleet's: other issues stalled too; `stalled` but excused, the fleet paused.
    FleetWide(String),
}
