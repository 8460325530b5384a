//! Learning that a cgroup emptied: the kernel changes its `cgroup.events` (`populated 0`)
//! and inotify says so, so nothing polls. One inotify descriptor for the whole fleet,
//! registered with the event loop; each change calls the owner back, who then reads the
//! `populated` of the cgroups it waits for.

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Arc;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;

use super::Cgroup;

pub struct Watcher {
    inotify: Arc<AsyncFd<Ino>>,
}

/// The inotify descriptor as `AsyncFd` wants it.
struct Ino(Inotify);

impl AsRawFd for Ino {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl Watcher {
    /// Starts watching on the current tokio runtime; `on_change` runs (on the loop's
    /// thread) after every batch of changes. `None` outside a runtime or without inotify.
    pub fn start(on_change: impl Fn() + Send + 'static) -> Option<Watcher> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let _guard = rt.enter();
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        // SAFETY: the `Ino` owns the inotify descriptor, which is closed only when the
        // AsyncFd (which deregisters it first) drops it.
        let afd = Arc::new(unsafe { AsyncFd::register(Ino(ino)) }.ok()?);
        let task = afd.clone();
        rt.spawn(async move {
            let afd = task;
            loop {
                let Ok(mut guard) = afd.readable().await else {
                    return;
                };
                // Drained in full: the events themselves say nothing the owner does not
                // read from the files.
                loop {
                    match guard.get_inner().0.read_events() {
                        Ok(ev) if !ev.is_empty() => continue,
                        _ => break,
                    }
                }
                guard.clear_ready();
                on_change();
            }
        });
        Some(Watcher { inotify: afd })
    }

    /// Watches `cg`'s `cgroup.events`. The watch ends by itself when the cgroup is removed.
    pub fn watch(&self, cg: &Cgroup) -> bool {
        self.inotify
            .get_ref()
            .0
            .add_watch(&cg.dir().join("cgroup.events"), AddWatchFlags::IN_MODIFY)
            .is_ok()
    }
}
