//! The signals that stop the worker: each sets one flag the loops poll, its number kept so
//! the exit code can say which (`128 + signal`, `docs/SPEC.md` §9).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone)]
pub struct StopFlag(Arc<AtomicUsize>);

impl StopFlag {
    /// Registers SIGTERM, SIGINT and SIGHUP.
    pub fn install() -> io::Result<Self> {
        let flag = Arc::new(AtomicUsize::new(0));
        for sig in [
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGHUP,
        ] {
            signal_hook::flag::register_usize(sig, Arc::clone(&flag), sig as usize)?;
        }
        Ok(StopFlag(flag))
    }

    /// The signal that arrived, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            sig => Some(sig as i32),
        }
    }
}
