//! A child's start token read off the clock instead of out of `/proc`.
//!
//! The token is field 22 of `/proc/<pid>/stat`: the kernel stamps `start_boottime` with the
//! boot-time clock inside `clone`, and `/proc` shows it in clock ticks, rounded down. Read
//! from `/proc`, every spawn paid an `open` of the new pid's procfs entry (a sixth of a
//! respawn's cost in the supervisor, and its `waitid` paid again to flush that entry when
//! the child was reaped). The same clock (`CLOCK_BOOTTIME`, in the same time namespace as
//! `/proc` reports for) read just before and just after the `clone` brackets the stamp, so
//! when both ends fall in one tick that tick is the token, exactly. When they straddle a
//! tick boundary (a few spawns in a hundred), or the clock has not yet been seen to agree
//! with `/proc` (the first spawns of the process are checked against it), `/proc` answers.
//! One disagreement and `/proc` answers for good: the token must be the one other tools
//! read from `/proc`.

use std::sync::atomic::{AtomicU8, Ordering};

/// How many spawns must agree with `/proc` before the clock answers alone.
const CHECKS: u8 = 3;
/// [`CHECKS`] agreements or fewer so far; this value once one disagreed.
const DISTRUSTED: u8 = u8::MAX;
static AGREED: AtomicU8 = AtomicU8::new(0);

/// Opened just before a child is started, closed with its pid just after.
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct StartWindow {
    before: Option<u64>,
}

impl StartWindow {
    pub fn open() -> StartWindow {
        StartWindow {
            before: boot_clock_ns(),
        }
    }

    /// The start token of `pid`, a child started (and not yet reaped) since [`open`]; 0 when
    /// `/proc` has no such process either.
    ///
    /// [`open`]: StartWindow::open
    pub fn close(self, pid: i32) -> u64 {
        let clock = self
            .before
            .zip(boot_clock_ns())
            .and_then(|(before, after)| tick_between(before, after, clock_ticks_per_second()));
        let agreed = AGREED.load(Ordering::Relaxed);
        if let Some(tick) = clock
            && agreed != DISTRUSTED
            && agreed >= CHECKS
        {
            #[cfg(test)]
            ANSWERED_BY_CLOCK.with(|n| n.set(n.get() + 1));
            return tick;
        }
        let proc = super::read(pid).map_or(0, |p| p.start);
        if let Some(tick) = clock
            && agreed != DISTRUSTED
        {
            let next = if tick == proc { agreed + 1 } else { DISTRUSTED };
            // A lost race with another thread's check only repeats a check.
            let _ = AGREED.compare_exchange(agreed, next, Ordering::Relaxed, Ordering::Relaxed);
            if next == DISTRUSTED {
                tracing::warn!(
                    pid,
                    clock = tick,
                    proc,
                    "the boot-time clock disagrees with /proc's start time; reading /proc from now on"
                );
            }
        }
        proc
    }
}

#[cfg(test)]
thread_local! {
    /// Spawns on this thread whose token the clock gave (a test's own count, as the tests run
    /// on threads of their own).
    static ANSWERED_BY_CLOCK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
pub(crate) fn answered_by_clock() -> u64 {
    ANSWERED_BY_CLOCK.with(std::cell::Cell::get)
}

/// The tick both ends of a window fall in, as the kernel rounds it (`nsec_to_clock_t`,
/// which for a tick rate dividing a second is plain division); `None` when they straddle a
/// boundary or the rate does not divide a second (the kernel rounds such rates otherwise).
fn tick_between(before_ns: u64, after_ns: u64, hz: u64) -> Option<u64> {
    if hz == 0 || 1_000_000_000 % hz != 0 {
        return None;
    }
    let per_tick = 1_000_000_000 / hz;
    let (a, b) = (before_ns / per_tick, after_ns / per_tick);
    (a == b).then_some(a)
}

fn boot_clock_ns() -> Option<u64> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let secs = u64::try_from(t.tv_sec()).ok()?;
    let nanos = u64::try_from(t.tv_nsec()).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// `sysconf(_SC_CLK_TCK)`, the unit of `/proc`'s start times (0 when unknown).
pub(crate) fn clock_ticks_per_second() -> u64 {
    static HZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // SAFETY: sysconf only reads a configuration value.
    *HZ.get_or_init(|| u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_inside_one_tick_names_it_and_one_across_a_boundary_names_none() {
        // 100 Hz: a tick is 10 ms.
        assert_eq!(tick_between(1_230_000_000, 1_239_999_999, 100), Some(123));
        assert_eq!(tick_between(1_239_999_999, 1_240_000_000, 100), None);
        assert_eq!(tick_between(5, 5, 100), Some(0));
        // A rate that does not divide a second is rounded otherwise by the kernel.
        assert_eq!(tick_between(1_000, 1_000, 7), None);
        assert_eq!(tick_between(1_000, 1_000, 0), None);
    }

    #[test]
    fn the_clock_gives_the_start_time_proc_shows_for_nearly_every_child() {
        let before = answered_by_clock();
        let n = 200;
        for _ in 0..n {
            let window = StartWindow::open();
            // A bare fork whose child only exits: the window is the fork alone (std's
            // `Command` would also wait for the exec, which a loaded machine stretches
            // across ticks).
            // SAFETY: the child calls only `_exit`, which is async-signal-safe.
            let pid = match unsafe { nix::unistd::fork() }.unwrap() {
                nix::unistd::ForkResult::Child => unsafe { libc::_exit(0) },
                nix::unistd::ForkResult::Parent { child } => child.as_raw(),
            };
            let token = window.close(pid);
            // Not reaped yet: a zombie still shows its start time.
            let proc = super::super::read(pid).unwrap().start;
            assert_eq!(token, proc, "pid {pid}");
            nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        }
        assert_ne!(AGREED.load(Ordering::Relaxed), DISTRUSTED);
        // The first spawns of the process are checked against /proc, and so is a window
        // that straddles a tick: how many do depends on the machine's load, but a fork is
        // a small part of a tick, so the clock answers for some.
        let by_clock = answered_by_clock() - before;
        assert!(by_clock > 0, "{by_clock} of {n} by the clock");
    }
}
