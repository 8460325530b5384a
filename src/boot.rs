//! The path `worker.rs` imports the suite by; the suite itself is [`crate::sweeps::suite`].

pub use crate::sweeps::suite::{BootError, BootReport, SuiteRun, run_suite};
