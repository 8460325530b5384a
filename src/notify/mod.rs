//! Telling the humans (`docs/SPEC.md` §11.21): `[[notify]]` sinks (a webhook with a
//! Slack-compatible `text`, an ntfy topic, a command) told when work is ready or the fleet
//! needs a person, derived from the event log the fleet already writes, never in its way.
//!
//! One job per file, in the order a record travels: `classes` (which records mean what a
//! person wants to know, and the line and fields of each; pure), `coalesce` (a sink's
//! burst of one class as one message per interval; pure), `sinks` (one send to one sink),
//! `state` (the cursor, the coalescing and the undelivered messages, kept across
//! restarts) and `deliver` (the one thread that follows the log from the cursor and sends,
//! with bounded retries). The fleet's core knows nothing of it: the supervisor starts the
//! thread beside its loop and stops it last; a worker or the claims belt only writes the
//! records they always would.

pub mod classes;
pub mod coalesce;
pub mod deliver;
pub mod sinks;
pub mod state;

pub use deliver::{Handle, start, test};
