//! The operator's acts on a fleet, one home for the CLI and `afk-supervisor mcp`: the
//! operator pause, one slot's stop or restart, and the record of who asked (`via=cli` or
//! `via=mcp`) in the event log. Each act goes through the lane's files and a verified
//! signal, like `scale`, and is refused with a one-line reason when no supervisor runs or the
//! slot is not in the fleet.

use std::time::Duration;

use super::{ControlError, nudge, running};
use crate::event_log::Kind;
use crate::event_log::Record;
use crate::lanes::pause_file::{self, OperatorPause, OperatorPauseError};
use crate::lanes::slot_control::{self, Ack, Action, Found, Request};
use crate::lanes::state_file::{self, ShrinkMode};
use crate::layout::Layout;
use crate::supervisor::os::lock::running_supervisor;

/// Who asked for an act: shown in its event as `via=cli` or `via=mcp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Cli,
    Mcp,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Cli => "cli",
            Via::Mcp => "mcp",
        }
    }
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// What every client of the supervisor can meet: none runs, its state or a file it
    /// reads cannot be read or written.
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("slot {slot} is not in the fleet (target {target}: {})", slots_words(*.target))]
    OutOfRange { slot: usize, target: usize },
    #[error("the supervisor has not written its state yet (boot sweeps running); try again")]
    NoHeartbeat,
    #[error(transparent)]
    Pause(#[from] OperatorPauseError),
    /// The supervisor answered and refused (its reason).
    #[error("{0}")]
    Refused(String),
}

/// The slots a target makes, both ends named: `slots 0 to 2`, `slot 0`, `no slots`.
fn slots_words(target: usize) -> String {
    match target {
        0 => "no slots".into(),
        1 => "slot 0".into(),
        t => format!("slots 0 to {}", t - 1),
    }
}

/// Appends the request to the event log as `control.request`, ending `(via=…)`, through
/// [`crate::event_log::append_event`] (one line from a process that is not the log's writer). A log
/// that cannot be written is a warning on stderr, never a failed act.
pub fn log_request(layout: &Layout, via: Via, what: &str, slot: Option<usize>, issue: Option<u64>) {
    let mut ev = Record::now(Kind::ControlRequest, format!("{what} (via={via})"));
    ev.slot = slot.map(|s| s as u64);
    ev.issue = issue;
    if let Err(e) = crate::event_log::append_event(&layout.event_log(), &ev) {
        eprintln!("afk-supervisor: warning: {e}");
    }
}

/// An `--until` that is neither a time nor a span; the message says which forms are taken.
#[derive(Debug, thiserror::Error)]
#[error("--until {given}: not an RFC 3339 time or a span (90m, 2h, 1d)")]
pub struct BadUntil {
    pub given: String,
    #[source]
    source: crate::slot_log_view::LogsError,
}

/// `--until`'s epoch seconds: an RFC 3339 time or a span from now.
pub fn parse_until(s: &str) -> Result<u64, BadUntil> {
    if let Some(t) = crate::timeutil::parse_rfc3339(s) {
        return Ok(crate::timeutil::epoch_secs(t));
    }
    let span =
        crate::slot_log_view::parse_duration(s.trim_start_matches('+')).map_err(|source| {
            BadUntil {
                given: s.to_string(),
                source,
            }
        })?;
    Ok(crate::timeutil::now_epoch().saturating_add(span.as_secs()))
}

/// What a pause or resume found: whether a supervisor runs to act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseOutcome {
    pub pause: Option<OperatorPause>,
    /// The running supervisor's pid; `None`: the file holds for the next start.
    pub supervisor: Option<i32>,
}

/// `afk-supervisor pause`: records the operator pause and nudges the supervisor. With
/// `require_running` (MCP), refused when no fleet runs; the CLI may pause ahead of a start.
pub fn pause(
    layout: &Layout,
    reason: Option<&str>,
    until_epoch: Option<u64>,
    via: Via,
    require_running: bool,
) -> Result<PauseOutcome, OperatorError> {
    let sup = running_supervisor(layout);
    if require_running && let Err(e) = &sup {
        return Err(ControlError::NotRunning(e.clone()).into());
    }
    let p = pause_file::pause_operator(&layout.state(), reason, until_epoch, via.as_str())?;
    log_request(layout, via, &format!("pause {}", p.span()), None, None);
    let sup = sup.ok();
    if let Some((pid, start)) = sup {
        nudge(pid, start);
    }
    Ok(PauseOutcome {
        pause: Some(p),
        supervisor: sup.map(|(p, _)| p),
    })
}

/// `afk-supervisor resume`: lifts the operator pause; the outcome holds the pause lifted.
pub fn resume(
    layout: &Layout,
    via: Via,
    require_running: bool,
) -> Result<PauseOutcome, OperatorError> {
    let sup = running_supervisor(layout);
    if require_running && let Err(e) = &sup {
        return Err(ControlError::NotRunning(e.clone()).into());
    }
    let was = pause_file::resume_operator(&layout.state(), via.as_str())?;
    log_request(layout, via, "resume", None, None);
    let sup = sup.ok();
    if let Some((pid, start)) = sup {
        nudge(pid, start);
    }
    Ok(PauseOutcome {
        pause: was,
        supervisor: sup.map(|(p, _)| p),
    })
}

/// How a slot act ended: answered by the supervisor, or still unanswered at the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotOutcome {
    Done { pid: i32, message: String },
    Pending { pid: i32 },
}

/// `stop --slot N` / `restart N`: writes the request, nudges the supervisor and waits (at
/// most `timeout`) for its acknowledgement of this request. Refused before anything is
/// written when no supervisor runs or the slot is outside the target.
pub fn slot_act(
    layout: &Layout,
    slot: usize,
    action: Action,
    mode: ShrinkMode,
    via: Via,
    timeout: Duration,
) -> Result<SlotOutcome, OperatorError> {
    let (pid, start) = running(layout)?;
    let target = state_file::read(&layout.state_file())
        .map_err(ControlError::from)?
        .filter(|s| s.pid == pid && s.pid_start_time == start)
        .map(|s| s.target)
        .ok_or(OperatorError::NoHeartbeat)?;
    if slot >= target {
        return Err(OperatorError::OutOfRange { slot, target });
    }
    let req = Request {
        id: slot_control::new_id(),
        slot,
        action,
        shrink_mode: mode,
        via: via.to_string(),
    };
    slot_control::write_request(layout, &req).map_err(|source| ControlError::Io {
        path: slot_control::request_path(layout).display().to_string(),
        source,
    })?;
    log_request(
        layout,
        via,
        &format!("{action} slot {slot} (shrink-mode={mode})"),
        Some(slot),
        None,
    );
    nudge(pid, start);
    let deadline = crate::timeutil::deadline(std::time::Instant::now(), timeout);
    loop {
        if let Found::Some(Ack { id, ok, message }) = slot_control::read_ack(layout)
            && id == req.id
        {
            return if ok {
                Ok(SlotOutcome::Done { pid, message })
            } else {
                Err(OperatorError::Refused(message))
            };
        }
        if std::time::Instant::now() >= deadline {
            return Ok(SlotOutcome::Pending { pid });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Why an issue act was refused, in words for the asker.
fn refuse(msg: String) -> OperatorError {
    OperatorError::Refused(msg)
}

/// Issue `n` as the tracker has it now, refused unless open.
fn open_issue(
    tracker: &dyn crate::tracker::Tracker,
    n: u64,
) -> Result<crate::tracker::IssueView, OperatorError> {
    let v = tracker
        .view(n)
        .map_err(|e| refuse(format!("issue #{n}: {e}")))?;
    if v.state != crate::tracker::IssueState::Open {
        return Err(refuse(format!("issue #{n} is closed")));
    }
    Ok(v)
}

/// Gives issue `n` back to the queue: `ready-for-agent` on, `ready-for-human` off. Refused
/// when it is closed, already queued, held by a worker (`running`: stop its slot first) or
/// quarantined (that is [`release_quarantine`]).
pub fn give_back(
    layout: &Layout,
    tracker: &dyn crate::tracker::Tracker,
    n: u64,
    via: Via,
) -> Result<String, OperatorError> {
    use crate::tracker::labels;
    let v = open_issue(tracker, n)?;
    if v.has_label(labels::RUNNING) {
        return Err(refuse(format!(
            "issue #{n} is running (a worker holds it): stop its slot first"
        )));
    }
    if v.has_label(labels::QUARANTINED) {
        return Err(refuse(format!(
            "issue #{n} is quarantined: release_quarantine gives it back"
        )));
    }
    if v.has_label(labels::READY_FOR_AGENT) {
        return Err(refuse(format!("issue #{n} is already ready-for-agent")));
    }
    let msg = format!("give back #{n}: ready-for-agent");
    let (add, remove) = ([labels::READY_FOR_AGENT], [labels::READY_FOR_HUMAN]);
    relabel(layout, via, tracker, n, &add, &remove, msg)
}

/// Lifts issue `n`'s quarantine: `afk:quarantined` and `ready-for-human` off,
/// `ready-for-agent` on. Its failed attempts before the `quarantined` ledger marker no
/// longer count (SPEC §11.10), so it gets `worker.max_failed_attempts` fresh tries.
pub fn release_quarantine(
    layout: &Layout,
    tracker: &dyn crate::tracker::Tracker,
    n: u64,
    via: Via,
) -> Result<String, OperatorError> {
    use crate::tracker::labels;
    let v = open_issue(tracker, n)?;
    if !v.has_label(labels::QUARANTINED) {
        return Err(refuse(format!("issue #{n} is not quarantined")));
    }
    let msg = format!("release quarantine of #{n}: ready-for-agent");
    let add = [labels::READY_FOR_AGENT];
    let remove = [labels::QUARANTINED, labels::READY_FOR_HUMAN];
    relabel(layout, via, tracker, n, &add, &remove, msg)
}

/// An issue act's one write: the labels changed, then the request logged as `msg`.
fn relabel(
    layout: &Layout,
    via: Via,
    tracker: &dyn crate::tracker::Tracker,
    n: u64,
    add: &[&str],
    remove: &[&str],
    msg: String,
) -> Result<String, OperatorError> {
    tracker
        .edit_labels(n, add, remove)
        .map_err(|e| refuse(format!("issue #{n}: {e}")))?;
    log_request(layout, via, &msg, None, Some(n));
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 52, item 14: the last slot is named, not the target (which reads as included).
    #[test]
    fn out_of_range_names_the_last_slot() {
        let e = |slot, target| OperatorError::OutOfRange { slot, target }.to_string();
        assert_eq!(
            e(9, 3),
            "slot 9 is not in the fleet (target 3: slots 0 to 2)"
        );
        assert_eq!(e(1, 1), "slot 1 is not in the fleet (target 1: slot 0)");
        assert_eq!(e(0, 0), "slot 0 is not in the fleet (target 0: no slots)");
    }

    /// Who asked is said once, by `log_request`'s `(via=…)`: the pause's own words leave
    /// it out (issue 52: `pause until resumed (lunch, via=cli) (via=cli)`).
    #[test]
    fn a_pause_request_says_via_once() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.state()).unwrap();
        let out = pause(&layout, Some("lunch"), None, Via::Cli, false).unwrap();
        assert_eq!(out.supervisor, None);
        resume(&layout, Via::Mcp, false).unwrap();
        let said: Vec<String> = crate::event_log::read_events(&layout.event_log())
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == Kind::ControlRequest)
            .map(|e| e.msg)
            .collect();
        assert_eq!(
            said,
            ["pause until resumed (lunch) (via=cli)", "resume (via=mcp)"]
        );
    }
}
