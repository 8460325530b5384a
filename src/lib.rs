//! `afk-supervisor`: a process supervisor for fleets of unattended coding-agent workers.
//!
//! The binary is a thin shell over this library so that tests drive the same code paths
//! an operator does.

pub mod attempt_state;
pub mod boot;
pub mod claim;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod diagnostics;
pub mod exit;
pub mod fsutil;
pub mod git;
pub mod layout;
pub mod logs;
pub mod pidfile;
pub mod process;
pub mod service_unit;
pub mod supervisor;
pub mod sweeps;
pub mod text;
pub mod timeutil;
pub mod toonl;
pub mod tracker;
pub mod worker;
