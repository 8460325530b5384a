//! The lane's files that more than one process reads or writes, in one home: the
//! supervisor's heartbeat (`state_file`, `state.toon`), the operator's directives
//! (`scale_directive`, `resize.toon`; `slot_control`, one slot's request and its answer) and
//! the fleet-wide pauses (`pause_file`: GitHub's rate limit, the agent's account, the
//! operator's). The supervisor writes or honours them; `cli`, `control`, `status`, `mcp`
//! and the workers read or write them through these modules only, so the formats in
//! `docs/SPEC.md` §4 have one reader and one writer each.

pub mod pause_file;
pub mod scale_directive;
pub mod slot_control;
pub mod state_file;
