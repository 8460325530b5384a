//! The fleet supervisor (`docs/SPEC.md` §4–§6): start-up, slots, the tick, and the control files.

pub mod belt;
pub mod children;
pub mod circuit;
pub mod fleet;
pub mod fleet_circuit;
pub mod holds;
pub mod isolation;
pub mod journal;
pub mod lock;
pub mod notify;
pub mod periodic;
pub mod reaper;
pub mod release;
pub mod run;
pub mod scale_directive;
pub mod slot;
pub mod slot_control;
pub mod slot_logs;
pub mod spawn;
pub mod stall;
pub mod state_file;
pub mod texts;
pub mod usage;
