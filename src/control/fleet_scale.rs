//! `scale`: the scale directive written to `resize.toon` (the SPEC keeps that file name),
//! the supervisor nudged, and its heartbeat watched for the new target.

use std::time::Duration;

use super::{ControlError, nudge, running, wait_for};
use crate::lanes::scale_directive::{self, ScaleDirective};
use crate::lanes::state_file::{self, ShrinkMode};
use crate::layout::Layout;
use crate::timeutil::now_epoch;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleOutcome {
    Applied {
        pid: i32,
        target: usize,
        mode: ShrinkMode,
    },
    Pending {
        pid: i32,
        target: usize,
        mode: ShrinkMode,
    },
}

impl std::fmt::Display for ScaleOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (word, pid, target, mode) = match self {
            ScaleOutcome::Applied { pid, target, mode } => ("applied", pid, target, mode),
            ScaleOutcome::Pending { pid, target, mode } => ("pending", pid, target, mode),
        };
        write!(
            f,
            "directive {word} (supervisor pid={pid}, target={target}, shrink-mode={mode})"
        )
    }
}

/// Writes `resize.toon`, nudges the supervisor (SIGUSR1, after verifying it) and waits
/// for its heartbeat to show the new target.
pub fn scale(
    layout: &Layout,
    target: usize,
    mode: ShrinkMode,
    timeout: Duration,
) -> Result<ScaleOutcome, ControlError> {
    let (pid, start) = running(layout)?;
    let path = layout.resize_file();
    let directive = ScaleDirective {
        target,
        shrink_mode: mode,
        runner: None,
    };
    let written_at = now_epoch();
    scale_directive::write(&path, &directive).map_err(|source| ControlError::Io {
        path: path.display().to_string(),
        source,
    })?;
    nudge(pid, start);
    let applied = wait_for(timeout, || {
        matches!(
            state_file::read(&layout.state_file()),
            Ok(Some(s)) if s.pid == pid && s.target == target && s.shrink_mode == mode && s.epoch >= written_at
        )
    });
    Ok(if applied {
        ScaleOutcome::Applied { pid, target, mode }
    } else {
        ScaleOutcome::Pending { pid, target, mode }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_lines() {
        let a = ScaleOutcome::Applied {
            pid: 7,
            target: 3,
            mode: ShrinkMode::HardKill,
        };
        assert_eq!(
            a.to_string(),
            "directive applied (supervisor pid=7, target=3, shrink-mode=hard-kill)"
        );
        let p = ScaleOutcome::Pending {
            pid: 7,
            target: 1,
            mode: ShrinkMode::DrainThenRetire,
        };
        assert_eq!(
            p.to_string(),
            "directive pending (supervisor pid=7, target=1, shrink-mode=drain-then-retire)"
        );
    }
}
