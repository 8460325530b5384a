//! The fleet supervisor (SPEC §4–§6): start-up, slots, the tick, and the control files.

pub mod circuit;
pub mod procs;
pub mod resize;
pub mod state_file;
pub mod lane;
pub mod reaper;
pub mod spawn;
