//! The event log `supervisor.log.toonl` (`docs/SPEC.md` §5), the one home of everything
//! about it: what a record is and how its row is written ([`record`]), every kind a record
//! can have ([`kind`]), appending ([`writer`]), and reading it as a stream with a cursor
//! that survives rotation ([`stream`]) or followed for people ([`tail`]). The TOONL codec
//! underneath is `crate::toonl`'s.

pub mod kind;
pub mod record;
pub mod stream;
pub mod tail;
pub mod writer;

pub use kind::{Kind, UnknownKind};
pub use record::{FIELDS, MAX_READ_BYTES, Record, decode_events, encode_row, read_events};
pub use writer::{EventLog, append_event, generations, rotated};

#[cfg(test)]
mod tests;
