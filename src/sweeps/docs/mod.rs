//! The docs sweep (seed BOOT-SWEEPS.md, *Docs Sweep*): source-of-truth docs under `.red/`
//! must be visible from the freshly fetched base before any worker starts.

pub mod classify;
pub mod fsops;
pub mod judge;
pub mod probe;
