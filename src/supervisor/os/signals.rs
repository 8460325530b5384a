//! The loop's signals: what each asks of the fleet, and where they come from.
//!
//! The loop reads them from one signalfd ([`Descriptor`]; `process::LoopSignalFd` says why
//! not through handlers). What a signal means is decided here, by [`heard`], and nowhere
//! else, so the fleet's tests can send it the same events a real signal becomes; and
//! [`Signals`] can be read from a [`Scripted`] source, so the order in which signals that
//! arrived together are taken, and which wait while the boot suite runs, are tested
//! without sending one.

use std::future::Future;
use std::io;

use nix::sys::signal::Signal;
use tokio::io::unix::AsyncFd;

use crate::exit_code;
use crate::process::{self, signal_bit};
use crate::supervisor::core::event::Event;

/// What a signal asks of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// SIGCHLD: zombies to collect, our own workers' among them.
    Zombies,
    /// SIGUSR1: `resize.toon` and `slot-control.toon` to be read, then fed.
    Control,
    /// A stop, and the status the fleet ends with.
    Stop { code: i32, why: &'static str },
}

impl Heard {
    /// The event the fleet is fed; `None` for [`Heard::Control`], whose event carries what
    /// the driver reads first.
    pub fn event(self) -> Option<Event> {
        match self {
            Heard::Zombies => Some(Event::Sigchld),
            Heard::Control => None,
            Heard::Stop { code, why } => Some(Event::Stop { code, why }),
        }
    }
}

/// What `sig` asks of the loop; `None` for a signal the loop does not handle.
pub fn heard(sig: Signal) -> Option<Heard> {
    let stop = |why| Heard::Stop {
        code: stop_code(sig),
        why,
    };
    Some(match sig {
        Signal::SIGCHLD => Heard::Zombies,
        Signal::SIGUSR1 => Heard::Control,
        Signal::SIGTERM => stop("SIGTERM"),
        Signal::SIGINT => stop("SIGINT"),
        Signal::SIGHUP => stop("SIGHUP"),
        _ => return None,
    })
}

/// The status a fleet stopped by `sig` exits with (128 + its number, as a shell reports a
/// process that died of it).
pub fn stop_code(sig: Signal) -> i32 {
    match sig {
        Signal::SIGINT => exit_code::SIGINT,
        Signal::SIGHUP => exit_code::SIGHUP,
        _ => exit_code::SIGTERM,
    }
}

/// The signals that stop the fleet.
const STOP_SIGNALS: u64 =
    signal_bit(Signal::SIGTERM) | signal_bit(Signal::SIGINT) | signal_bit(Signal::SIGHUP);

/// Where the loop's signals come from.
pub trait SignalSource {
    /// Every signal that arrived since the last read, one bit per signal number; waits for
    /// at least one. Cancel-safe: what a read takes it returns in the same poll, so a
    /// `select!` that drops the future loses no signal.
    fn read(&mut self) -> impl Future<Output = io::Result<u64>>;
}

/// The process's own: the loop's signals blocked in every thread and read from their
/// signalfd.
pub struct Descriptor(AsyncFd<process::LoopSignalFd>);

impl Descriptor {
    /// Blocks the loop's signals in this thread (and every thread it starts from now on)
    /// and opens their descriptor.
    pub fn install() -> io::Result<Descriptor> {
        let fd = process::LoopSignalFd::open()?;
        // SAFETY: the descriptor is owned by the value moved in, which keeps it open and
        // the same for as long as the AsyncFd holds it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?;
        Ok(Descriptor(fd))
    }
}

impl SignalSource for Descriptor {
    async fn read(&mut self) -> io::Result<u64> {
        loop {
            let mut ready = self.0.readable().await?;
            match ready.get_inner().take() {
                Ok((bits, drained)) => {
                    // A read that did not fill its buffer took all there was: the next
                    // signal makes the descriptor readable again, so no read is spent
                    // only to hear "would block".
                    if drained {
                        ready.clear_ready();
                    }
                    if bits != 0 {
                        return Ok(bits);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Signals for a test: each read takes the next batch (bits, as [`Descriptor`] reads
/// them); once they are all taken, a read waits for ever, as a quiet process's does.
#[cfg(test)]
pub struct Scripted(pub std::collections::VecDeque<u64>);

#[cfg(test)]
impl SignalSource for Scripted {
    async fn read(&mut self) -> io::Result<u64> {
        match self.0.pop_front() {
            Some(bits) => Ok(bits),
            None => std::future::pending().await,
        }
    }
}

/// The loop's signals, one at a time, from `S`.
pub struct Signals<S> {
    source: S,
    /// Read and not yet taken, one bit per signal number: a read takes every pending
    /// signal, and one not wanted yet (a SIGCHLD during the boot suite) waits here for the
    /// loop.
    pending: u64,
}

impl<S: SignalSource> Signals<S> {
    pub fn new(source: S) -> Signals<S> {
        Signals { source, pending: 0 }
    }

    /// The next of the `wanted` signals (lowest number first when several are pending).
    /// Cancel-safe: a signal read is kept in `pending` until it is returned.
    pub async fn next_of(&mut self, wanted: u64) -> io::Result<Signal> {
        loop {
            let hit = self.pending & wanted;
            if hit != 0 {
                let n = hit.trailing_zeros();
                self.pending &= !(1 << n);
                if let Ok(sig) = Signal::try_from(n as i32) {
                    return Ok(sig);
                }
                continue;
            }
            self.pending |= self.source.read().await?;
        }
    }

    /// The next signal the loop handles.
    pub async fn next(&mut self) -> io::Result<Signal> {
        self.next_of(u64::MAX).await
    }

    /// The next stop signal only, as the code the fleet would exit with (during the boot
    /// suite nothing else matters; the others wait for the loop).
    pub async fn stop(&mut self) -> i32 {
        match self.next_of(STOP_SIGNALS).await {
            Ok(sig) => stop_code(sig),
            // The descriptor failed: nothing can stop the boot suite now, so it is not
            // waited for (the loop fails on the same descriptor).
            Err(_) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn block_on<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
            .block_on(f)
    }

    fn bits(sigs: &[Signal]) -> u64 {
        sigs.iter().fold(0, |b, s| b | signal_bit(*s))
    }

    #[test]
    fn each_handled_signal_asks_its_own_thing_and_the_rest_nothing() {
        let stop = |sig| match heard(sig).and_then(Heard::event) {
            Some(Event::Stop { code, why }) => Some((code, why)),
            _ => None,
        };
        assert_eq!(stop(Signal::SIGTERM), Some((143, "SIGTERM")));
        assert_eq!(stop(Signal::SIGINT), Some((130, "SIGINT")));
        assert_eq!(stop(Signal::SIGHUP), Some((129, "SIGHUP")));
        assert!(matches!(
            heard(Signal::SIGCHLD).and_then(Heard::event),
            Some(Event::Sigchld)
        ));
        assert_eq!(heard(Signal::SIGUSR1), Some(Heard::Control));
        assert!(Heard::Control.event().is_none());
        for other in [Signal::SIGUSR2, Signal::SIGPIPE, Signal::SIGWINCH] {
            assert!(heard(other).is_none(), "{other}");
        }
    }

    #[test]
    fn signals_read_together_come_lowest_number_first_and_none_is_lost() {
        let script = VecDeque::from([
            bits(&[Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGHUP]),
            bits(&[Signal::SIGUSR1]),
        ]);
        let mut signals = Signals::new(Scripted(script));
        let got = block_on(async {
            let mut got = Vec::new();
            for _ in 0..4 {
                got.push(signals.next().await.expect("scripted"));
            }
            got
        });
        // The first read's three before the second read's one.
        assert_eq!(
            got,
            [
                Signal::SIGHUP,
                Signal::SIGTERM,
                Signal::SIGCHLD,
                Signal::SIGUSR1
            ]
        );
    }

    #[test]
    fn during_the_boot_suite_a_stop_is_taken_and_the_others_wait_for_the_loop() {
        let script = VecDeque::from([
            bits(&[Signal::SIGCHLD, Signal::SIGUSR1]),
            bits(&[Signal::SIGINT]),
        ]);
        let mut signals = Signals::new(Scripted(script));
        let (code, then) = block_on(async {
            let code = signals.stop().await;
            let then = [
                signals.next().await.expect("kept"),
                signals.next().await.expect("kept"),
            ];
            (code, then)
        });
        assert_eq!(code, exit_code::SIGINT);
        assert_eq!(then, [Signal::SIGUSR1, Signal::SIGCHLD]);
    }
}
