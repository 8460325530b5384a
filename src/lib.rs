//! `afk-supervisor`: a process supervisor for fleets of unattended coding-agent workers.
//!
//! The binary is a thin shell over this library so that tests drive the same code paths
//! an operator does. The contract it keeps with other tools is `docs/SPEC.md`.
//!
//! Module map (imports point down this list; the exceptions left are `sweeps` importing
//! `boot`'s report types and `claim` importing the restore text and lane from `sweeps`):
//! - `cli`: parsing, dispatch, exit codes and the one printed line per failure.
//! - `status`: how `status` looks to a person: the plain table and the live view (ratatui).
//! - `supervisor`: the fleet: `run` (start-up and the tokio event loop), `fleet` (the state
//!   machine), `children` (its only door to processes), `reaper`, `circuit` (one slot's),
//!   `fleet_circuit` (the whole fleet's), `control` (`status`/`scale`/`stop`), `lane`,
//!   `state_file`, `journal`, `usage`, `stall`.
//! - `worker` (the built-in worker), `claim` (claims, local and on the tracker), `boot` and
//!   `sweeps` (the boot sweep suite and the belts).
//! - `tracker` (gh and the local store; `tracker::pace`, the fleet-wide write budget), `git`,
//!   `cmd` (running a command with a deadline).
//! - `pause` (the fleet-wide rate-limit pause file, shared by every process of a checkout).
//! - `process` (every OS-process fact: `/proc`, pidfds, identities, signals), `pidfile`,
//!   `attempt_state`, `toonl`, `logs` (reading the event log and slot logs), `config`,
//!   `layout`, `fsutil`, `text`, `timeutil`, `exit`, `diagnostics`.

pub mod attempt_state;
pub mod boot;
pub mod bootstrap;
pub mod claim;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod demo;
pub mod diagnostics;
pub mod exit;
pub mod fsutil;
pub mod git;
pub mod layout;
pub mod ledger;
pub mod logs;
pub mod pause;
pub mod pidfile;
pub mod process;
pub mod program;
pub mod service_unit;
pub mod status;
pub mod supervisor;
pub mod sweeps;
pub mod text;
pub mod timeutil;
pub mod toonl;
pub mod tracker;
pub mod worker;
