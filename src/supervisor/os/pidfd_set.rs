//! The ends of the fleet's workers as one descriptor: an epoll set of their pidfds, which
//! the loop waits on beside its signals.
//!
//! Each worker's pidfd was registered with tokio as a descriptor of its own, with a task
//! of its own waiting on it and a channel carrying its end to the loop: every respawn paid
//! for a task's allocation, two polls and its completion, tokio's registration of the
//! descriptor and its removal (an `epoll_ctl` each), a message, and an extra turn of the
//! runtime (an `epoll_wait` that returned nothing) after the task woke the loop. In a set
//! of its own, a pidfd is one `epoll_ctl` when its worker starts: `EPOLLONESHOT`, so it
//! reports once and never needs removing (closing it leaves the set), and one read of
//! the set takes every end that happened meanwhile.
//!
//! An entry keeps its pidfd open until it has reported, so a worker's end is heard even
//! when the fleet let go of the worker first.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

use crate::process::{ExitKind, Pidfd};
use crate::supervisor::core::event::Event;

/// The set, and what each of its entries stands for.
pub struct Exits {
    set: Epoll,
    /// By the token the set reports: only the loop's thread touches it (the lock is never
    /// contended, and lets the set be shared with the driver's `Children`).
    watched: Mutex<HashMap<u64, Watched>>,
    next_token: AtomicU64,
}

struct Watched {
    pid: i32,
    start: u64,
    /// Our own child (its end is read by `waitid`), or an adopted worker of a previous
    /// supervisor (whose end is only that: it ended).
    own: bool,
    _fd: Arc<Pidfd>,
}

/// At most this many ends are taken by one read; more wait for the next.
const BATCH: usize = 64;

impl Exits {
    pub fn new() -> io::Result<Exits> {
        let set = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(io::Error::from)?;
        Ok(Exits {
            set,
            watched: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(0),
        })
    }

    /// Reports the end of the process `fd` refers to (`pid`, started at `start`) once, as
    /// [`Event::ChildEnded`] for our own child, else as an [`Event::Exited`] of unknown
    /// kind. `false` when the kernel refuses the watch (its limit on watches reached).
    pub fn watch(&self, pid: i32, start: u64, fd: &Arc<Pidfd>, own: bool) -> bool {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let entry = Watched {
            pid,
            start,
            own,
            _fd: fd.clone(),
        };
        // Entered before the watch, so a report never names a token not yet known.
        self.entries().insert(token, entry);
        let ev = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLONESHOT, token);
        if self.set.add(fd.as_fd(), ev).is_err() {
            self.entries().remove(&token);
            return false;
        }
        true
    }

    /// The ends reported since the last call, without waiting, and whether that was all
    /// of them (a read that did not fill its buffer).
    pub fn take(&self) -> io::Result<(Vec<Event>, bool)> {
        let mut buf = [EpollEvent::empty(); BATCH];
        let n = loop {
            match self.set.wait(&mut buf, EpollTimeout::ZERO) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => break other.map_err(io::Error::from)?,
            }
        };
        let mut watched = self.entries();
        // Sized by the read: a filtered collect would start at four events, a wake-up's
        // usual one end paying for a block big enough to leave malloc's fast path.
        let mut ends = Vec::with_capacity(n);
        ends.extend(
            buf[..n]
                .iter()
                .filter_map(|e| watched.remove(&e.data()))
                .map(|w| match w.own {
                    true => Event::ChildEnded {
                        pid: w.pid,
                        start: w.start,
                    },
                    false => Event::Exited {
                        pid: w.pid,
                        start: w.start,
                        kind: ExitKind::Unknown,
                    },
                }),
        );
        Ok((ends, n < BATCH))
    }

    /// How many watches have not reported yet.
    pub fn pending(&self) -> usize {
        self.entries().len()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Watched>> {
        // A panic while holding it cannot leave the map half-changed: each use is one
        // insert or remove.
        self.watched.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl AsRawFd for Exits {
    fn as_raw_fd(&self) -> RawFd {
        self.set.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn ends_within(exits: &Exits, want: usize) -> Vec<Event> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = Vec::new();
        while got.len() < want {
            assert!(Instant::now() < deadline, "only {got:?} ended");
            got.extend(exits.take().unwrap().0);
            std::thread::sleep(Duration::from_millis(5));
        }
        got
    }

    /// Two real children: each end is reported once (the second read finds nothing), as
    /// ours or adopted, and the entry is gone once it reported.
    #[test]
    fn each_end_is_reported_once_with_its_process() {
        let exits = Exits::new().unwrap();
        let mut kids: Vec<std::process::Child> = (0..2)
            .map(|_| {
                std::process::Command::new("sh")
                    .args(["-c", "read x"])
                    .stdin(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (i, k) in kids.iter().enumerate() {
            let fd = Arc::new(Pidfd::open(k.id() as i32).expect("pidfds on this kernel"));
            assert!(exits.watch(k.id() as i32, 7, &fd, i == 0));
        }
        assert_eq!(exits.pending(), 2);
        assert!(exits.take().unwrap().0.is_empty(), "nothing ended yet");
        drop(kids[0].stdin.take());
        let first = ends_within(&exits, 1);
        let own = kids[0].id() as i32;
        assert!(matches!(first[..], [Event::ChildEnded { pid, start: 7 }] if pid == own));
        drop(kids[1].stdin.take());
        let second = ends_within(&exits, 1);
        let adopted = kids[1].id() as i32;
        assert!(matches!(
            second[..],
            [Event::Exited { pid, start: 7, kind: ExitKind::Unknown }] if pid == adopted
        ));
        for k in &mut kids {
            k.wait().unwrap();
        }
        let (rest, drained) = exits.take().unwrap();
        assert!(rest.is_empty() && drained, "each end once");
        assert_eq!(exits.pending(), 0);
    }
}
