//! `afk-supervisor`: a process supervisor for fleets of unattended coding-agent workers.
//!
//! The binary is a thin shell over this library so that tests drive the same code paths
//! an operator does. The contract it keeps with other tools is `docs/SPEC.md`.
//!
//! Module map (imports point down this list; the exceptions left are `sweeps` importing
//! `boot`'s report types and `claim` importing the restore text and lane from `sweeps`):
//! - `cli`: parsing, dispatch, exit codes and the one printed line per failure.
//! - `supervisor`: the fleet: `run` (start-up and the tokio event loop), `fleet` (the state
//!   machine), `children` (its only door to processes), `reaper`, `circuit`, `control`
//!   (`status`/`scale`/`stop`), `lane`, `state_file`, `journal`, `usage`, `stall`.
//! - `worker` (the built-in worker: one file per step, ending in a typed outcome or error
//!   the cli turns into its exit code), `claim` (claims, local and on the tracker), `boot` and
//!   `sweeps` (the boot sweep suite and the belts).
//! - `tracker` (gh and the local store), `git`, `cmd` (running a command with a deadline).
//! - `process` (every OS-process fact: `/proc`, pidfds, identities, signals), `pidfile`,
//!   `attempt_state`, `toonl`, `afk_env` (every `RED_AFK_*` name, for the supervisor that
//!   writes them and the worker, config and demo that read them), `config`, `layout`, `fsutil`, `text`, `timeutil`, `exit`,
//!   `diagnostics`.

pub mod afk_env;
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
pub mod pidfile;
pub mod process;
pub mod program;
pub mod service_unit;
pub mod supervisor;
pub mod sweeps;
pub mod text;
pub mod timeutil;
pub mod toonl;
pub mod tracker;
pub mod worker;
