//! The agent's output on its way to the slot log, capped per attempt at
//! `log.slot_log_max_bytes`: the first half is written as it comes, the last half is kept
//! and written when the agent ends, and one line marks the cut between them. An agent that
//! prints a gigabyte leaves a slot log of the cap, with its start and its end.
//!
//! The agent's stdout and stderr are pipes read on two threads (blocking reads: the worker
//! is no event loop), so a chatty agent never waits on the worker's 100 ms poll. While bytes
//! are being cut the slot log is not written, so its modification time is moved at most once
//! a second: the output is the agent's sign of life for the supervisor's stall check.
//!
//! Apart from the slot log's cap, the last bytes of each stream are kept for the agent's
//! profile to read how the run ended (the structured result is stdout's last line).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long [`OutputCap::finish`] waits for the pipes to close after the agent ended (a
/// background process it left may hold them open).
const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// The most bytes kept of the end of the agent's stdout and of its stderr for the profile;
/// what the slot log gets is capped apart, by `log.slot_log_max_bytes`.
pub const STDOUT_TAIL_BYTES: usize = 4 << 20;
pub const STDERR_TAIL_BYTES: usize = 64 << 10;

/// The newest bytes of one stream, at most `cap` once trimmed.
#[derive(Clone)]
struct Kept {
    buf: Arc<Mutex<Vec<u8>>>,
    cap: usize,
}

impl Kept {
    fn new(cap: usize) -> Kept {
        Kept {
            buf: Arc::new(Mutex::new(Vec::new())),
            cap,
        }
    }

    fn push(&self, bytes: &[u8]) {
        if let Ok(mut b) = self.buf.lock() {
            b.extend_from_slice(bytes);
            // Trimmed in halves' worth, not per chunk, so a chatty agent costs no memmove
            // per read.
            if b.len() > 2 * self.cap {
                let cut = b.len() - self.cap;
                b.drain(..cut);
            }
        }
    }

    fn take(&self) -> Vec<u8> {
        let mut b = self
            .buf
            .lock()
            .map(|mut b| std::mem::take(&mut *b))
            .unwrap_or_default();
        if b.len() > self.cap {
            let cut = b.len() - self.cap;
            b.drain(..cut);
        }
        b
    }
}

/// The shared budget of one attempt's output.
struct Budget {
    /// Bytes that may still be written as they come.
    head_left: u64,
    /// The newest bytes past the head, at most `tail_max`.
    tail: VecDeque<u8>,
    tail_max: usize,
    /// Bytes dropped between the head and the tail.
    cut: u64,
    max: u64,
    touched: Option<Instant>,
}

impl Budget {
    fn new(max: u64) -> Budget {
        let tail_max = usize::try_from(max / 2).unwrap_or(usize::MAX);
        Budget {
            head_left: max - max / 2,
            tail: VecDeque::new(),
            tail_max,
            cut: 0,
            max,
            touched: None,
        }
    }

    /// Takes `bytes`: returns the part to write now; the rest goes to the tail.
    fn take<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        let now = usize::try_from(self.head_left)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        self.head_left -= now as u64;
        let rest = &bytes[now..];
        self.tail.extend(rest);
        let over = self.tail.len().saturating_sub(self.tail_max);
        if over > 0 {
            self.tail.drain(..over);
            self.cut += over as u64;
        }
        &bytes[..now]
    }

    /// The cut's mark and the tail, once the agent is done; nothing when nothing was cut.
    fn ending(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.cut > 0 {
            out.extend_from_slice(
                format!(
                    "\n[afk-supervisor: {} bytes of the agent's output cut here (log.slot_log_max_bytes = {})]\n",
                    self.cut, self.max
                )
                .as_bytes(),
            );
        }
        out.extend(self.tail.drain(..));
        out
    }

    /// Whether the slot log's modification time should be moved now (bytes are being cut).
    fn touch_due(&mut self) -> bool {
        if self.cut == 0
            || self
                .touched
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return false;
        }
        self.touched = Some(Instant::now());
        true
    }
}

/// The agent's two output pipes, copied to the worker's own stdout and stderr (the slot
/// log) within one budget.
pub(super) struct OutputCap {
    budget: Arc<Mutex<Budget>>,
    readers: Vec<JoinHandle<()>>,
    out: Kept,
    err: Kept,
}

impl OutputCap {
    /// Takes `child`'s piped stdout and stderr (spawned with `Stdio::piped()`).
    pub(super) fn attach(child: &mut Child, max_bytes: u64) -> OutputCap {
        let budget = Arc::new(Mutex::new(Budget::new(max_bytes)));
        let (out, err) = (Kept::new(STDOUT_TAIL_BYTES), Kept::new(STDERR_TAIL_BYTES));
        let mut readers = Vec::new();
        if let Some(pipe) = child.stdout.take() {
            readers.push(copy(pipe, Arc::clone(&budget), out.clone(), false));
        }
        if let Some(pipe) = child.stderr.take() {
            readers.push(copy(pipe, Arc::clone(&budget), err.clone(), true));
        }
        OutputCap {
            budget,
            readers,
            out,
            err,
        }
    }

    /// After the agent ended: the readers get a moment to drain the pipes, then the cut's
    /// mark and the kept tail are written to stdout. Returns the ends of the agent's stdout
    /// and stderr, for its profile.
    pub(super) fn finish(self) -> (Vec<u8>, Vec<u8>) {
        let deadline = Instant::now() + DRAIN_WAIT;
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Ok(mut b) = self.budget.lock() {
            let ending = b.ending();
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&ending);
            let _ = out.flush();
        }
        let ends = (self.out.take(), self.err.take());
        if let Ok(mut last) = LAST_ENDS.lock() {
            *last = Some(ends.clone());
        }
        ends
    }
}

/// One line of the worker's own on its stdout (the slot log, or a terminal). A write that
/// fails (a full disk, a closed pipe) is dropped: `println!` would panic, and a worker
/// holding a claim must finish its attempt whatever becomes of its log.
pub(super) fn say(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(format_args!("{args}\n"));
}

/// The ends of the last finished agent's stdout and stderr. An agent stopped by a signal
/// (a stall kill) ends the run without its output (`AgentEnd::Signalled`), yet what it
/// last said tells whose fault the hang was (`Reconnecting... waiting for network`): kept
/// here for [`take_last_ends`]. A worker runs one agent at a time, so one slot suffices.
static LAST_ENDS: Mutex<Option<(Vec<u8>, Vec<u8>)>> = Mutex::new(None);

/// The ends of the last finished agent's stdout and stderr, taken.
pub(super) fn take_last_ends() -> Option<(Vec<u8>, Vec<u8>)> {
    LAST_ENDS.lock().ok().and_then(|mut l| l.take())
}

fn copy(
    mut pipe: impl Read + Send + 'static,
    budget: Arc<Mutex<Budget>>,
    kept: Kept,
    err: bool,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut chunk = vec![0u8; 65536];
        loop {
            let n = match pipe.read(&mut chunk) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            kept.push(&chunk[..n]);
            let chatter = only_retry_chatter(&chunk[..n]);
            let Ok(mut b) = budget.lock() else { return };
            // Taken under the budget's lock, which every write to the slot log holds, so
            // the time put back is never a newer write's.
            let before = chatter.then(stdout_mtime).flatten();
            let now = b.take(&chunk[..n]);
            let touch = b.touch_due() && !chatter;
            let written = if err {
                let mut e = std::io::stderr().lock();
                e.write_all(now).and_then(|()| e.flush())
            } else {
                let mut o = std::io::stdout().lock();
                o.write_all(now).and_then(|()| o.flush())
            };
            if let Some(t) = before {
                set_stdout_mtime(t);
            }
            drop(b);
            if touch {
                touch_stdout();
            }
            // A slot log that cannot be written any more: keep reading, so the agent never
            // blocks on a full pipe.
            let _ = written;
        }
    })
}

/// Whether `bytes` are whole lines of the CLI's retry chatter and nothing else
/// ([`crate::agent_profile::is_retry_chatter`]): written to the slot log like any output,
/// but leaving its modification time, the stall check's sign of progress, where it was. A
/// partial line or any other line is progress.
fn only_retry_chatter(bytes: &[u8]) -> bool {
    bytes.ends_with(b"\n")
        && bytes
            .split(|b| *b == b'\n')
            .any(|l| !l.trim_ascii().is_empty())
        && bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.trim_ascii().is_empty())
            .all(crate::agent_profile::is_retry_chatter)
}

/// The modification time of the worker's stdout (the slot log), when it is a file.
fn stdout_mtime() -> Option<nix::sys::time::TimeSpec> {
    let st = nix::sys::stat::fstat(std::io::stdout()).ok()?;
    Some(nix::sys::time::TimeSpec::new(st.st_mtime, st.st_mtime_nsec))
}

/// Puts the slot log's modification time back to `t` (its access time left alone).
fn set_stdout_mtime(t: nix::sys::time::TimeSpec) {
    let _ = nix::sys::stat::futimens(std::io::stdout(), &nix::sys::time::TimeSpec::UTIME_OMIT, &t);
}

/// Moves the modification time of the worker's stdout (the slot log) to now.
fn touch_stdout() {
    use nix::sys::stat::futimens;
    use nix::sys::time::TimeSpec;
    let _ = futimens(
        std::io::stdout(),
        &TimeSpec::UTIME_NOW,
        &TimeSpec::UTIME_NOW,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_chatter_lines_are_chatter() {
        let notice = br#"{"type":"error","message":"Reconnecting... waiting for network (Connection failed: error sending request)"}"#;
        let line = [&notice[..], b"\n"].concat();
        assert!(only_retry_chatter(&line));
        assert!(only_retry_chatter(&[&line[..], &line[..]].concat()));
        assert!(!only_retry_chatter(notice), "a partial line is progress");
        assert!(!only_retry_chatter(b"\n"));
        let work = b"{\"type\":\"turn.completed\"}\n";
        assert!(!only_retry_chatter(&[&line[..], &work[..]].concat()));
    }

    #[test]
    fn keeps_the_head_and_the_tail_and_marks_the_cut() {
        let mut b = Budget::new(10);
        let mut written = Vec::new();
        for chunk in [&b"abc"[..], b"defgh", b"ijklmnopqrstuvwxyz"] {
            written.extend_from_slice(b.take(chunk));
        }
        assert_eq!(written, b"abcde");
        assert!(b.touch_due());
        assert!(!b.touch_due());
        let end = String::from_utf8(b.ending()).unwrap();
        assert!(
            end.starts_with("\n[afk-supervisor: 16 bytes of the agent's output cut here"),
            "{end}"
        );
        assert!(end.ends_with(")]\nvwxyz"), "{end}");
        // Within the cap nothing is cut and nothing is marked.
        let mut b = Budget::new(100);
        assert_eq!(b.take(b"hello"), b"hello");
        assert!(b.ending().is_empty());
        assert!(!b.touch_due());
    }
}
