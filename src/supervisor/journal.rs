//! The supervisor's event log with an echo on stderr for an operator watching the
//! foreground. A failed append is reported once, never fatal: losing a log line must not
//! take the fleet down.

use std::path::Path;

use crate::toonl::{Event, EventLog, LogError};

#[derive(Debug)]
pub struct Journal {
    log: EventLog,
    echo: bool,
    failed: bool,
}

impl Journal {
    pub fn open(path: &Path, echo: bool) -> Result<Self, LogError> {
        Ok(Journal {
            log: EventLog::open(path)?,
            echo,
            failed: false,
        })
    }

    pub fn write(&mut self, ev: Event) {
        if self.echo {
            eprintln!("{}", ev.human_line());
        }
        if let Err(e) = self.log.append(&ev)
            && !self.failed
        {
            eprintln!("afk-supervisor: event log: {e}");
            self.failed = true;
        }
    }
}
