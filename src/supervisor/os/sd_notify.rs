//! The service manager's notify protocol (`Type=notify` under systemd), through the
//! `sd-notify` crate: `READY=1` once the boot suite has run and the first workers are
//! spawned, `STATUS=` with the tick line, `WATCHDOG=1` from the event loop at half of
//! `WATCHDOG_USEC` (so a wedged loop, not only a dead process, gets restarted) and
//! `STOPPING=1` when a stop begins. Without `NOTIFY_SOCKET` every call is a no-op.

use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::time::{Interval, MissedTickBehavior};

/// The variables through which the service manager talks to the supervisor; workers do
/// not inherit them.
pub const SERVICE_MANAGER_VARS: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// Messages waiting for the sender thread; past this, new ones are dropped.
const QUEUE: usize = 64;

/// How long the end of the supervisor waits for the last messages (`STOPPING=1`) to go.
const FLUSH: Duration = Duration::from_secs(2);

/// One message, owned, for the sender thread.
#[derive(Debug)]
enum Note {
    Ready(String),
    Status(String),
    Watchdog,
    Stopping,
}

/// One supervisor's channel to its service manager. The datagrams are sent by a thread of
/// their own (started only when `NOTIFY_SOCKET` is set): a send to a socket whose reader
/// stalls blocks once its queue is full, and that must never stop the event loop. If that
/// thread is stuck, messages are dropped, the watchdog pings stop arriving, and systemd
/// restarts the supervisor, as it should for a supervisor it cannot hear.
#[derive(Debug)]
pub struct Notifier {
    tx: Option<SyncSender<Note>>,
    done: Option<Receiver<()>>,
    watchdog: Option<Interval>,
    stopping_sent: bool,
    dropped: bool,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET` and `WATCHDOG_USEC` (with `WATCHDOG_PID`, when set, naming
    /// this process). Must be called inside the runtime (the watchdog is a tokio timer).
    pub fn from_env() -> Notifier {
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty());
        let watchdog = sd_notify::watchdog_enabled()
            .filter(|d| enabled && !d.is_zero())
            .map(|d| {
                let half = (d / 2).max(Duration::from_millis(1));
                let mut timer = tokio::time::interval(half);
                timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
                timer
            });
        let (tx, done) = match enabled.then(start_sender).flatten() {
            Some((tx, done)) => (Some(tx), Some(done)),
            None => (None, None),
        };
        Notifier {
            tx,
            done,
            watchdog,
            stopping_sent: false,
            dropped: false,
        }
    }

    /// `READY=1`, with the fleet's first summary.
    pub fn ready(&mut self, status: &str) {
        self.send(Note::Ready(crate::text::escape(status)));
    }

    /// `STATUS=<line>`: one line, control characters escaped.
    pub fn status(&mut self, line: &str) {
        self.send(Note::Status(crate::text::escape(line)));
    }

    /// `STOPPING=1`, once.
    pub fn stopping(&mut self) {
        if !self.stopping_sent {
            self.stopping_sent = true;
            self.send(Note::Stopping);
        }
    }

    /// Resolves at the next watchdog ping due; never without a watchdog. Cancel-safe, so
    /// it can be an arm of the event loop's `select!`.
    pub async fn watchdog_due(&mut self) {
        match &mut self.watchdog {
            Some(t) => {
                t.tick().await;
            }
            None => std::future::pending().await,
        }
    }

    /// `WATCHDOG=1`.
    pub fn watchdog(&mut self) {
        self.send(Note::Watchdog);
    }

    /// Lets the messages still queued go (at most [`FLUSH`]), then ends the sender.
    pub fn finish(mut self) {
        self.tx = None;
        if let Some(done) = self.done.take() {
            let _ = done.recv_timeout(FLUSH);
        }
    }

    fn send(&mut self, note: Note) {
        let Some(tx) = &self.tx else {
            return;
        };
        match tx.try_send(note) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) if !self.dropped => {
                self.dropped = true;
                report("the service manager is not reading; messages dropped");
            }
            Err(_) => {}
        }
    }
}

fn report(msg: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "afk-supervisor: notifying the service manager: {msg}"
    );
}

/// The sender thread: one datagram per message, in order, through `sd-notify`. Its
/// receiver of `done` hears when the queue is drained and closed.
fn start_sender() -> Option<(SyncSender<Note>, Receiver<()>)> {
    let (tx, rx) = mpsc::sync_channel::<Note>(QUEUE);
    let (done_tx, done) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("afk-notify".into())
        .spawn(move || {
            let mut failed = false;
            for note in rx {
                let sent = match &note {
                    Note::Ready(s) => {
                        sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(s)])
                    }
                    Note::Status(s) => sd_notify::notify(&[NotifyState::Status(s)]),
                    Note::Watchdog => sd_notify::notify(&[NotifyState::Watchdog]),
                    Note::Stopping => sd_notify::notify(&[NotifyState::Stopping]),
                };
                if let Err(e) = sent
                    && !failed
                {
                    failed = true;
                    report(&e.to_string());
                }
            }
            let _ = done_tx.send(());
        });
    match spawned {
        Ok(_) => Some((tx, done)),
        Err(e) => {
            report(&format!("cannot start the sender thread: {e}"));
            None
        }
    }
}
