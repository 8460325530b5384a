//! Every kind of record the crate writes to the event log (`docs/SPEC.md` §5), declared
//! once: the variant, its text and its doc line sit on one line of [`kinds!`], which
//! derives [`Kind::ALL`], [`Kind::as_str`] and the parse from it, so no list kept by hand
//! can drift from what is written.
//!
//! A reader meets kinds this crate does not write (a newer version's log, another tool's
//! line): those are kept as [`Kind::Unknown`] with their text, never a failed read, and
//! written back byte for byte. Only [`Kind::from_str`] (a name an operator typed) refuses
//! them.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// A name that is no kind the crate writes (`logs --kind bogus`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown event kind {0:?}")]
pub struct UnknownKind(pub String);

macro_rules! kinds {
    ($( $(#[doc = $doc:literal])+ $variant:ident = $text:literal, )+) => {
        /// The `kind` cell of an event-log record.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum Kind {
            $( $(#[doc = $doc])+ $variant, )+
            /// A kind this crate does not write, read from a log (a newer version's, another
            /// tool's line), kept as written.
            Unknown(Box<str>),
        }

        impl Kind {
            /// Every kind the crate writes, in declaration order (not [`Kind::Unknown`]).
            pub const ALL: &'static [Kind] = &[$(Kind::$variant),+];

            /// The text in the log's `kind` cell.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Kind::$variant => $text,)+
                    Kind::Unknown(text) => text,
                }
            }

            /// The kind this crate writes under `text`, if any.
            fn known(text: &str) -> Option<Kind> {
                match text {
                    $($text => Some(Kind::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

kinds! {
    /// The supervisor started (its lane locked, its fleet about to boot).
    SupervisorStart = "supervisor.start",
    /// The boot sweep suite's one summary line (§5's fixed `boot sweeps …` texts).
    SupervisorBootSweep = "supervisor.boot-sweep",
    /// One decision of a halted or failed suite, after its `boot-sweep` record.
    SupervisorBootSweepDetail = "supervisor.boot-sweep.detail",
    /// The straggler check's warning at boot: the open issues no worker will take.
    SupervisorStragglers = "supervisor.stragglers",
    /// A restarted supervisor adopted the live workers of the one before it.
    SupervisorTakeover = "supervisor.takeover",
    /// The per-tick counts line.
    SupervisorTick = "supervisor.tick",
    /// The fleet's target size changed (`scale`, `resize.toon`).
    SupervisorResize = "supervisor.resize",
    /// The supervisor stopped.
    SupervisorStop = "supervisor.stop",
    /// Something failed that the supervisor survives (a belt, a write, a reap).
    SupervisorError = "supervisor.error",
    /// Routine clean-up at start (a previous run's regular `resize.toon` removed): no error.
    SupervisorHousekeeping = "supervisor.housekeeping",
    /// Work on a timer reported something (a belt's pass, slot-log expiry).
    SupervisorPeriodic = "supervisor.periodic",
    /// `[cluster]`: the host's lease (granted, etcd unavailable, back, lost; §11.23).
    ClusterLease = "cluster.lease",
    /// The tracker the supervisor uses, at start-up.
    SupervisorTracker = "supervisor.tracker",
    /// A tracker call failed (the queue check, a label change).
    TrackerError = "tracker.error",
    /// A slot's worker was spawned.
    SlotSpawn = "slot.spawn",
    /// A slot's worker could not be spawned.
    SlotSpawnFailed = "slot.spawn-failed",
    /// A slot's worker exited (its code or signal and how long it lived).
    SlotExit = "slot.exit",
    /// A slot parked: no respawn (a fatal host configuration, its circuit open).
    SlotParked = "slot.parked",
    /// A slot idled: its worker exited 0 at once with nothing claimable.
    SlotIdle = "slot.idle",
    /// An idle slot woke up: the queue changed.
    SlotUnidle = "slot.unidle",
    /// A slot's worker made no progress for the stall timeout.
    SlotStalled = "slot.stalled",
    /// A stalled worker made progress again.
    SlotProgress = "slot.progress",
    /// A stalled worker killed.
    SlotStallKill = "slot.stall-kill",
    /// A slot asked to retire once its worker's attempt ends (scaling down).
    SlotRetire = "slot.retire",
    /// A retiring slot kept after all (scaling up again).
    SlotUnretire = "slot.unretire",
    /// A retiring slot's worker ended and the slot is gone.
    SlotRetired = "slot.retired",
    /// A worker that outlived its grace was killed.
    SlotHardKill = "slot.hard-kill",
    /// A dead worker's claim released and its issue given back.
    SlotRestore = "slot.restore",
    /// A slot's circuit opened after fast deaths.
    CircuitTrip = "circuit.trip",
    /// A slot's circuit cooled down: one probe spawned.
    CircuitHalfOpen = "circuit.half-open",
    /// A slot's probe died: the circuit parks again with a longer backoff.
    CircuitReParked = "circuit.re-parked",
    /// A slot's probe lived: its circuit closed.
    CircuitClosed = "circuit.closed",
    /// The whole fleet waits out a tracker rate limit (§11.11).
    FleetPaused = "fleet.paused",
    /// The rate-limit pause is over.
    FleetResumed = "fleet.resumed",
    /// The fleet-wide circuit opened (§11.12).
    FleetCircuitOpen = "fleet.circuit-open",
    /// The fleet-wide circuit probes with one slot.
    FleetCircuitProbe = "fleet.circuit-probe",
    /// The fleet-wide circuit's probe died.
    FleetCircuitReparked = "fleet.circuit-reparked",
    /// The fleet-wide circuit's probe lived: every slot reopens.
    FleetCircuitClosed = "fleet.circuit-closed",
    /// The agent's account holds the fleet (§11.13).
    FleetAgentPaused = "fleet.agent-paused",
    /// The agent pause is over: one probe before the whole fleet.
    FleetAgentProbe = "fleet.agent-probe",
    /// The agent probe ran the agent: every slot claims again.
    FleetAgentResumed = "fleet.agent-resumed",
    /// The day's budget is spent: no new claims until the next day.
    FleetBudgetReached = "fleet.budget-reached",
    /// A new budget day began.
    FleetBudgetResumed = "fleet.budget-resumed",
    /// The isolation chosen at start-up, and each limit that cannot be enforced (§11.16).
    SupervisorIsolation = "supervisor.isolation",
    /// What the kernel counted for an attempt whose cgroup emptied (§11.16).
    SlotFigures = "slot.figures",
    /// An operator paused the fleet (`afk-supervisor pause`, or MCP).
    FleetOperatorPaused = "fleet.operator-paused",
    /// An operator resumed the fleet.
    FleetOperatorResumed = "fleet.operator-resumed",
    /// A control command asked something of the fleet; its message ends `(via=cli|mcp)`.
    ControlRequest = "control.request",
    /// A slot stopped by `stop --slot` (it stays empty until `restart`).
    SlotStopped = "slot.stopped",
    /// A slot's worker restarted by `restart`.
    SlotRestart = "slot.restart",
    /// A dead attempt's work committed and kept on a rescue ref.
    AttemptRescued = "attempt.rescued",
    /// An attempt refused (§11.19): tampering found, or changes held for a person.
    AttemptRefused = "attempt.refused",
    /// A worker held an issue whose text may not reach an agent (§11.20).
    IssueHeld = "issue.held",
    /// An issue's work is ready for review: its branch pushed with commits (§11.21).
    AttemptReady = "attempt.ready",
    /// An issue handed to a person without work to review (no commits, a failed push,
    /// set aside, over its budget).
    AttemptHandedOff = "attempt.handed-off",
    /// An issue quarantined after its failed attempts (§11.10).
    AttemptQuarantined = "attempt.quarantined",
    /// Another checkout's stale claim taken over: its host presumed lost (§11.5, §11.21).
    ClaimsHostLost = "claims.host-lost",
    /// The notifier's start: its sinks and where it resumes.
    NotifyStart = "notify.start",
    /// A notification given up on (after its retries, refused for good) or dropped from a
    /// full queue: one line per message, never one per retry.
    NotifyFailed = "notify.failed",
    /// An attempt started: where an issue's path in the event log begins (§11.22).
    AttemptClaimed = "attempt.claimed",
    /// A pull request was opened for an issue (§11.22).
    PrOpened = "pr.opened",
    /// A fix round pushed to an issue's open pull request.
    PrUpdated = "pr.updated",
    /// Opening the pull request failed; the branch is kept and the opening retried.
    PrCreateFailed = "pr.create-failed",
    /// The checks (`[checks] command`, or a pull request's CI) failed.
    PrChecksFailed = "pr.checks-failed",
    /// The checks passed.
    PrChecksPassed = "pr.checks-passed",
    /// The issue went back to the queue for a fix round on its pull request's branch.
    PrFixRequested = "pr.fix-requested",
    /// The fix rounds or the issue's budget ran out: the pull request is a person's.
    PrNeedsPerson = "pr.needs-person",
    /// A draft opened only because its checks failed was marked ready for review once
    /// they passed.
    PrReady = "pr.ready",
    /// The merge was asked for (`landing.merge = "auto"`).
    PrMergeRequested = "pr.merge-requested",
    /// The pull request was merged.
    PrMerged = "pr.merged",
    /// The pull request was closed unmerged.
    PrClosed = "pr.closed",
}

impl Kind {
    /// The kind a log's `kind` cell names: one of [`Kind::ALL`], or [`Kind::Unknown`]
    /// carrying the text, so a record of a kind this version does not know is still read.
    pub fn read(text: &str) -> Kind {
        Kind::known(text).unwrap_or_else(|| Kind::Unknown(text.into()))
    }

    /// Whether `name` is a kind, or a dotted prefix of some (`slot`, `fleet`): what
    /// `logs --kind` and `events --kind` accept.
    pub fn is_known(name: &str) -> bool {
        Kind::ALL.iter().any(|kind| kind.is_under(name))
    }

    /// Whether this kind is `name` or falls under it as a dotted prefix (`slot` takes
    /// `slot.exit`, never `slots.x`).
    pub fn is_under(&self, name: &str) -> bool {
        let k = self.as_str();
        k == name
            || k.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('.'))
    }
}

impl FromStr for Kind {
    type Err = UnknownKind;

    /// Strict: only a kind the crate writes.
    fn from_str(s: &str) -> Result<Kind, UnknownKind> {
        Kind::known(s).ok_or_else(|| UnknownKind(s.to_string()))
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        let text = Cow::<'de, str>::deserialize(d)?;
        Ok(Kind::read(&text))
    }
}

impl schemars::JsonSchema for Kind {
    fn schema_name() -> Cow<'static, str> {
        "Kind".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_as_itself() {
        for kind in Kind::ALL {
            assert_eq!(Kind::read(kind.as_str()), *kind);
            assert_eq!(kind.as_str().parse::<Kind>(), Ok(kind.clone()));
            assert_eq!(kind.to_string(), kind.as_str());
        }
        let mut texts: Vec<&str> = Kind::ALL.iter().map(Kind::as_str).collect();
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), Kind::ALL.len(), "a text named twice");
    }

    /// A kind this version does not write is read and written back as it was; only a
    /// name typed by an operator is refused.
    #[test]
    fn an_unknown_kind_is_carried_not_refused() {
        let k = Kind::read("future.thing");
        assert_eq!(k, Kind::Unknown("future.thing".into()));
        assert_eq!(k.as_str(), "future.thing");
        assert!(!Kind::ALL.contains(&k));
        assert_eq!(
            "future.thing".parse::<Kind>(),
            Err(UnknownKind("future.thing".into()))
        );
        let json = serde_json::to_value(&k).unwrap();
        assert_eq!(json, serde_json::json!("future.thing"));
        assert_eq!(serde_json::from_value::<Kind>(json).unwrap(), k);
    }

    #[test]
    fn prefixes_end_at_a_dot() {
        assert!(Kind::is_known("slot"));
        assert!(Kind::is_known("fleet"));
        assert!(!Kind::is_known("fleet.circuit"), "a prefix ends at a dot");
        assert!(Kind::is_known("supervisor.tick"));
        assert!(!Kind::is_known("bogus"));
        assert!(!Kind::is_known("slot.ex"));
        assert!(Kind::SlotExit.is_under("slot"));
        assert!(!Kind::SlotExit.is_under("slo"));
    }

    /// `docs/SPEC.md` §5's list of kinds is `Kind::ALL`, in both directions.
    #[test]
    fn spec_section_5_lists_every_kind() {
        let spec = include_str!("../../docs/SPEC.md");
        let section = spec
            .split("\n## 5.")
            .nth(1)
            .and_then(|s| s.split("\n## 6.").next())
            .expect("SPEC §5");
        let list = section
            .split("Kinds (")
            .nth(1)
            .and_then(|s| s.split("\n\n").next())
            .expect("SPEC §5 has a `Kinds (…)` list");
        let mut in_spec: Vec<&str> = list
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|s| s.contains('.'))
            .collect();
        in_spec.sort_unstable();
        let mut ours: Vec<&str> = Kind::ALL.iter().map(Kind::as_str).collect();
        ours.sort_unstable();
        assert_eq!(in_spec, ours, "SPEC §5's kinds and Kind::ALL differ");
    }
}
