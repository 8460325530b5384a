//! The supervisor loop's signals as one descriptor (`signalfd(2)`), not as handlers.
//!
//! Every worker's end raises a SIGCHLD. Caught by a handler (tokio's, through
//! signal-hook), each cost a signal frame and its `rt_sigreturn`, the handler's `send` on a
//! self-pipe, a wake of tokio's signal driver, two `recv`s to drain the pipe and a poll of
//! each of the five signal streams on every turn of the loop: about a tenth of the
//! supervisor's CPU per respawn. Blocked and read from a signalfd, the same SIGCHLD makes
//! one descriptor readable, and one `read` takes every signal pending at once.
//!
//! What that asks of the process: the signals stay blocked in every thread. A signal for
//! the process goes to any thread that does not block it, and with no handler installed
//! its default action applies there: SIGTERM would end the supervisor without its stop,
//! SIGCHLD would be dropped unseen. Threads inherit their creator's mask, so the
//! supervisor's first thread blocks them before it starts any other
//! ([`leave_loop_signals_to_the_loop`], also run by every thread of the blocking pool), and
//! the one thread a command may start earlier, the diagnostics writer, is started with them
//! blocked ([`with_loop_signals_blocked`]). Children start with an empty mask: the spawn
//! sets one, as std's `Command` does for every command the supervisor runs.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// The signals the supervisor's loop handles (SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1).
pub const LOOP_SIGNALS: [Signal; 5] = {
    use nix::sys::signal::Signal::*;
    [SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1]
};

fn loop_set() -> SigSet {
    let mut set = SigSet::empty();
    for s in LOOP_SIGNALS {
        set.add(s);
    }
    set
}

/// Blocks [`LOOP_SIGNALS`] in the calling thread, and so in every thread it starts from
/// then on: the kernel keeps them pending for the loop's [`LoopSignalFd`] instead of
/// delivering them to this thread.
pub fn leave_loop_signals_to_the_loop() {
    // Fails only for an invalid `how`, which this is not.
    let _ = loop_set().thread_block();
}

/// Runs `f` with [`LOOP_SIGNALS`] blocked in the calling thread, then restores its mask:
/// for a thread started before the supervisor's loop exists, which must never take one
/// of the loop's signals.
pub fn with_loop_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    let old = SigSet::thread_get_mask().ok();
    leave_loop_signals_to_the_loop();
    let out = f();
    if let Some(old) = old {
        let _ = old.thread_set_mask();
    }
    out
}

/// The loop's signals, pending, as a readable descriptor.
#[derive(Debug)]
pub struct LoopSignalFd(SignalFd);

/// `struct signalfd_siginfo`: 128 bytes, `ssi_signo` first.
const SIGINFO_BYTES: usize = 128;
/// More than the loop's signals can have pending (a standard signal is pending once).
const READ_AT_ONCE: usize = 8;

impl LoopSignalFd {
    /// Blocks the loop's signals in this thread ([`leave_loop_signals_to_the_loop`]) and
    /// opens the descriptor (non-blocking, close-on-exec) that reads them.
    pub fn open() -> io::Result<LoopSignalFd> {
        leave_loop_signals_to_the_loop();
        let flags = SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC;
        SignalFd::with_flags(&loop_set(), flags)
            .map(LoopSignalFd)
            .map_err(io::Error::from)
    }

    /// Takes every signal pending now, in one `read`: one bit per signal number (bit 17
    /// for SIGCHLD), and whether the read left nothing behind (it did not fill its
    /// buffer), so the caller need not read again to learn that it would block.
    pub fn take(&self) -> io::Result<(u64, bool)> {
        let mut buf = [0u8; SIGINFO_BYTES * READ_AT_ONCE];
        // SAFETY: reads at most `buf.len()` bytes into `buf`, which lives for the call.
        let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        let mut bits = 0u64;
        for info in buf[..n].chunks_exact(SIGINFO_BYTES) {
            let signo = u32::from_ne_bytes([info[0], info[1], info[2], info[3]]);
            if signo < 64 {
                bits |= 1 << signo;
            }
        }
        Ok((bits, n < buf.len()))
    }
}

/// The bit [`LoopSignalFd::take`] sets for `sig`.
pub const fn signal_bit(sig: Signal) -> u64 {
    1 << (sig as i32 as u32)
}

impl AsFd for LoopSignalFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for LoopSignalFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signal sent to the process while a thread blocks it waits in the descriptor, and
    /// one read takes every one pending, once.
    #[test]
    fn pending_signals_are_read_at_once_and_only_once() {
        // In a thread of its own, so the test harness's threads keep their masks; the
        // signals go to that thread alone (`tgkill`), which blocks them.
        std::thread::spawn(|| {
            let fd = LoopSignalFd::open().unwrap();
            assert_eq!(fd.take().unwrap_err().kind(), io::ErrorKind::WouldBlock);
            let tid = nix::unistd::gettid().as_raw();
            let pid = std::process::id() as libc::pid_t;
            for sig in [Signal::SIGUSR1, Signal::SIGCHLD, Signal::SIGUSR1] {
                // SAFETY: tgkill with valid ids and a signal number; no memory involved.
                let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, sig as i32) };
                assert_eq!(r, 0);
            }
            let (bits, drained) = fd.take().unwrap();
            assert_eq!(
                bits,
                signal_bit(Signal::SIGUSR1) | signal_bit(Signal::SIGCHLD)
            );
            assert!(drained);
            assert_eq!(fd.take().unwrap_err().kind(), io::ErrorKind::WouldBlock);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_started_inside_the_guard_blocks_the_loop_signals_and_the_caller_is_restored() {
        std::thread::spawn(|| {
            let before = SigSet::thread_get_mask().unwrap();
            assert!(!before.contains(Signal::SIGTERM));
            let inner = with_loop_signals_blocked(|| {
                std::thread::spawn(|| SigSet::thread_get_mask().unwrap())
                    .join()
                    .unwrap()
            });
            for s in LOOP_SIGNALS {
                assert!(inner.contains(s), "{s} not blocked in the inner thread");
            }
            let after = SigSet::thread_get_mask().unwrap();
            assert!(!after.contains(Signal::SIGTERM));
        })
        .join()
        .unwrap();
    }
}
