//! The service manager's notify protocol (`Type=notify` under systemd), through the
//! `sd-notify` crate: `READY=1` once the boot suite has run and the first workers are
//! spawned, `STATUS=` with the tick line, `WATCHDOG=1` from the event loop at half of
//! `WATCHDOG_USEC` (so a wedged loop, not only a dead process, gets restarted) and
//! `STOPPING=1` when a stop begins. Without `NOTIFY_SOCKET` every call is a no-op.

use std::time::Duration;

use sd_notify::NotifyState;
use tokio::time::{Interval, MissedTickBehavior};

/// The variables through which the service manager talks to the supervisor; workers do
/// not inherit them.
pub const SERVICE_MANAGER_VARS: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// One supervisor's channel to its service manager.
#[derive(Debug)]
pub struct Notifier {
    enabled: bool,
    watchdog: Option<Interval>,
    stopping_sent: bool,
    failed: bool,
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
        Notifier {
            enabled,
            watchdog,
            stopping_sent: false,
            failed: false,
        }
    }

    /// `READY=1`, with the fleet's first summary.
    pub fn ready(&mut self, status: &str) {
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// `STATUS=<line>`: one line, control characters escaped.
    pub fn status(&mut self, line: &str) {
        let line = crate::text::escape(line);
        self.send(&[NotifyState::Status(&line)]);
    }

    /// `STOPPING=1`, once.
    pub fn stopping(&mut self) {
        if !self.stopping_sent {
            self.stopping_sent = true;
            self.send(&[NotifyState::Stopping]);
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
        self.send(&[NotifyState::Watchdog]);
    }

    /// A failed send is reported once and never fatal: the fleet runs on.
    fn send(&mut self, states: &[NotifyState]) {
        if !self.enabled {
            return;
        }
        if let Err(e) = sd_notify::notify(states)
            && !self.failed
        {
            self.failed = true;
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "afk-supervisor: notifying the service manager: {e}"
            );
        }
    }
}
