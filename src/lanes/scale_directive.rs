//! The scale directive: what `scale` asks of a running fleet (a target, a shrink mode, a
//! runner), in the lane's `resize.toon` (`docs/SPEC.md` §4 keeps that file name), written by
//! `crate::control::fleet_scale` and read by the fleet at every tick and SIGUSR1.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::fsutil::{atomic_write, read_small_text};
use crate::lanes::state_file::ShrinkMode;
use crate::text::clip_quoted;

/// Largest `resize.toon` read: a directive is a few lines.
const MAX_BYTES: u64 = 64 << 10;

/// The largest fleet a directive may ask for, the same bound as `fleet.workers`.
pub const MAX_TARGET: usize = 1024;

/// Unknown fields are ignored: another tool may add its own, and rejecting them would void
/// the whole directive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScaleDirective {
    pub target: usize,
    #[serde(default)]
    pub shrink_mode: ShrinkMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
}

pub fn encode(r: &ScaleDirective) -> Result<String, reddb_io_toon::SerdeError> {
    reddb_io_toon::to_string(r).map(|s| s + "\n")
}

/// Why a directive is refused; its text is one line, for a one-line report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectiveError {
    /// Not TOON of a directive (the parser's words, clipped to one line).
    #[error("{0}")]
    Syntax(String),
    #[error("target {0} is above {MAX_TARGET}")]
    TooLarge(usize),
    #[error("runner must not be empty")]
    EmptyRunner,
}

/// Parses a directive; the error says what is wrong, for a one-line report.
pub fn decode(text: &str) -> Result<ScaleDirective, DirectiveError> {
    let r: ScaleDirective = reddb_io_toon::from_str(text)
        .map_err(|e| DirectiveError::Syntax(clip_quoted(&e.to_string())))?;
    if r.target > MAX_TARGET {
        return Err(DirectiveError::TooLarge(r.target));
    }
    if r.runner.as_deref().is_some_and(|s| s.trim().is_empty()) {
        return Err(DirectiveError::EmptyRunner);
    }
    Ok(r)
}

pub fn write(path: &Path, r: &ScaleDirective) -> io::Result<()> {
    let text = encode(r).map_err(io::Error::other)?;
    atomic_write(path, text.as_bytes())
}

/// What the lane holds: nothing, a valid directive, or a corrupt file (with its text kept
/// so the same corruption is reported once, not every tick). A file that is not read (a
/// symlink, a FIFO, a directory, over [`MAX_BYTES`]) is corrupt with no text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    None,
    Directive(ScaleDirective),
    Corrupt { raw: String, why: String },
}

pub fn read(path: &Path) -> Found {
    match read_small_text(path, MAX_BYTES) {
        Ok(None) => Found::None,
        Err(e) => Found::Corrupt {
            raw: String::new(),
            why: format!("not read: {e}"),
        },
        Ok(Some(raw)) => match decode(&raw) {
            Ok(r) => Found::Directive(r),
            Err(why) => Found::Corrupt {
                raw,
                why: why.to_string(),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn roundtrip_and_defaults() {
        let r = ScaleDirective {
            target: 3,
            shrink_mode: ShrinkMode::HardKill,
            runner: None,
        };
        let text = encode(&r).unwrap();
        assert_eq!(text, "target: 3\nshrink_mode: hard-kill\n");
        assert_eq!(decode(&text).unwrap(), r);
        assert_eq!(
            decode("target: 0\n").unwrap(),
            ScaleDirective {
                target: 0,
                shrink_mode: ShrinkMode::DrainThenRetire,
                runner: None
            }
        );
        let extra = decode("target: 2\nrequested_by: ops-bot\nshrink_mode: hard-kill\n").unwrap();
        assert_eq!((extra.target, extra.shrink_mode), (2, ShrinkMode::HardKill));
        let with_runner = decode("target: 1\nrunner: codex\n").unwrap();
        assert_eq!(with_runner.runner.as_deref(), Some("codex"));
    }

    #[test]
    fn bad_directives_are_rejected() {
        for bad in [
            "",
            "target: -1\n",
            "target: two\n",
            "shrink_mode: hard-kill\n",
            "shrink_mode: hard-kill\nother: 1\n",
            "target: 2\nshrink_mode: gently\n",
            "target: 5000\n",
            "target: 2\nrunner: \"\"\n",
        ] {
            let e = decode(bad).expect_err(bad).to_string();
            assert!(!e.contains('\n'), "not one line: {e:?}");
        }
    }

    #[test]
    fn read_distinguishes_missing_valid_and_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("resize.toon");
        assert_eq!(read(&p), Found::None);
        fs::write(&p, "target: x\n").unwrap();
        assert!(matches!(read(&p), Found::Corrupt { .. }));
        write(
            &p,
            &ScaleDirective {
                target: 4,
                shrink_mode: ShrinkMode::DrainThenRetire,
                runner: None,
            },
        )
        .unwrap();
        assert!(matches!(
            read(&p),
            Found::Directive(ScaleDirective { target: 4, .. })
        ));
        fs::remove_file(&p).unwrap();
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(
            read(&p),
            Found::Corrupt {
                raw: String::new(),
                why: "not read: not a regular file (a FIFO)".into()
            }
        );
    }
}
