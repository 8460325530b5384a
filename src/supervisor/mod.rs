//! The fleet supervisor (`docs/SPEC.md` §4–§6), by role: `core` decides (pure), `os` acts on
//! processes, and the files here run the two together: `main_loop` (start-up and the tokio
//! event loop), `driver` (events in, effects out), `journal` (the event log's writer),
//! `timers` (the belts and expiries on a timer), `release_dead` (a dead worker's issues
//! back), `claim_holds` (what holds the fleet's claims, read for the fleet), the belts
//! (`unblock_belt`, `cluster_belt`), `slot_logs` and `texts`.

pub mod claim_holds;
pub mod cluster_belt;
pub mod core;
pub mod driver;
pub mod journal;
pub mod main_loop;
pub mod os;
pub mod release_dead;
pub mod slot_logs;
pub mod takeover;
pub mod timers;
pub mod unblock_belt;
