//! The fleet's decisions, pure: [`fleet::Fleet`] takes an [`event::Event`] and answers
//! [`effect::Effect`]s, and everything here is only what it needs to decide (a slot and its
//! circuit, the fleet's circuit and its agent hold's probe, all on one `breaker`, a dying
//! group's bookkeeping, a worker's progress). Nothing here touches a file, a process, a
//! clock, tokio or nix: the driver
//! (`supervisor/driver.rs`) brings the readings in and carries the effects out, so every
//! decision is tested without an OS (`fleet/tests.rs`), and the rule is checked by
//! `module_order`.

pub mod breaker;
pub mod circuit;
pub mod effect;
pub mod event;
pub mod fleet;
pub mod fleet_circuit;
pub mod log_texts;
pub mod progress;
pub mod reaper;
pub mod slot;
