//! The delivery thread (`docs/SPEC.md` §11.21): one thread for every sink, started with the
//! supervisor when `[[notify]]` names any, that follows the event log from its persisted
//! cursor, turns records into notices, coalesces them per sink and class, and sends.
//!
//! Why a thread of its own: a send may wait on a sink for `timeout_s` (a webhook that
//! never answers, a command that hangs), and the event loop must never wait on one; the
//! blocking pool is the loop's, for the calls whose answers the fleet acts on. So it is one
//! more thread, whatever the number of sinks or events: the sinks are served in turn, each
//! send bounded by its sink's `timeout_s`. Between sends it sleeps in the kernel until the
//! log changes (inotify on the lane), a retry or a coalesced message is due, or the stop.
//!
//! Nothing here touches the fleet: it only reads the log and appends `notify.failed` lines
//! to it, so a stuck sink delays nothing but other notifications. The queue is bounded per
//! sink ([`MAX_OUTBOX`] messages; coalescing keeps a burst to one message per class), and
//! a failing message is retried with backoff (1 s doubling to 60 s) for its sink's
//! `retry_for_s`, then dropped with one `notify.failed` line.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::classes;
use super::coalesce::Message;
use super::sinks::{self, Origin};
use super::state::{self, Pending, State};
use crate::config::Config;
use crate::config::notify_sinks::Sink;
use crate::event_log::Kind;
use crate::event_log::Record;
use crate::event_log::stream::{EventStream, Start};
use crate::layout::Layout;

/// Messages one sink may have waiting; past it the oldest is dropped (said once a turn).
pub const MAX_OUTBOX: usize = 64;

/// How long the end of the supervisor waits for what its last records mean to be sent.
pub const DRAIN: Duration = Duration::from_secs(5);

/// The longest sleep with nothing due: a look at the log even if inotify said nothing.
const IDLE_LOOK: Duration = Duration::from_secs(60);

/// The first retry's wait; each next one doubles, up to [`MAX_BACKOFF_MS`].
const FIRST_BACKOFF_MS: u64 = 1_000;
const MAX_BACKOFF_MS: u64 = 60_000;

/// The running notifier: stopping it (drop) lets it send what the last records mean, for
/// at most [`DRAIN`], then keeps the rest for the next start.
pub struct Handle {
    wake: Arc<EventFd>,
    stop: Arc<AtomicBool>,
    done: Receiver<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.wake.write(1);
        if self
            .done
            .recv_timeout(DRAIN + Duration::from_secs(2))
            .is_ok()
            && let Some(t) = self.thread.take()
        {
            let _ = t.join();
        }
    }
}

/// Starts the notifier when `config` names sinks: its state read, its cursor placed (the
/// log's end on a first start, so nothing older is sent), its thread running. Returns the
/// handle and the line for the event log (`notify.start`); `None` without sinks.
pub fn start(layout: &Layout, config: &Config) -> Option<(Option<Handle>, Record)> {
    if config.notify.is_empty() {
        return None;
    }
    let state_file = state::path(&layout.state());
    let (state, note) = match state::read(&state_file) {
        Ok(Some(s)) => (s, None),
        Ok(None) => (State::default(), None),
        Err(e) => (
            State::default(),
            Some(format!(
                "; its state was unreadable ({e}): starting afresh at the log's end"
            )),
        ),
    };
    let start = match state.cursor.as_deref().map(Start::parse) {
        Some(Ok(s)) => s,
        _ => Start::End,
    };
    let mut stream = EventStream::new(&layout.event_log(), config.log.keep, start);
    let resumed = state.cursor.is_some() && start != Start::End;
    if !resumed {
        // Placed now, before this run's first record, so the notifier reads all of them.
        let _ = stream.poll();
    }
    let mut n = Notifier {
        sinks: config.notify.clone(),
        from: Origin::of(layout),
        layout: layout.clone(),
        stream,
        state_file,
        dirty: false,
        state,
        log_name: layout
            .event_log()
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default(),
        drain_until: None,
    };
    n.state
        .sinks
        .retain(|name, _| config.notify.iter().any(|s| &s.name == name));
    let pending: usize = n.state.sinks.values().map(|s| s.outbox.len()).sum();
    let sinks: Vec<String> = config
        .notify
        .iter()
        .map(|s| format!("{} ({}, {})", s.name, s.kind, s.events.join(" ")))
        .collect();
    let mut line = format!(
        "notifications: {} sink(s): {}; {}",
        sinks.len(),
        sinks.join(", "),
        if resumed {
            format!(
                "resuming after {} with {pending} message(s) pending",
                n.state.cursor.as_deref().unwrap_or("?")
            )
        } else {
            "from the log's end".to_string()
        }
    );
    line.push_str(note.as_deref().unwrap_or(""));
    let wake =
        match EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK) {
            Ok(w) => Arc::new(w),
            Err(e) => {
                line.push_str(&format!("; not started: no eventfd ({e})"));
                return Some((None, Record::now(Kind::NotifyStart, line)));
            }
        };
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done) = mpsc::channel();
    let (w2, s2) = (wake.clone(), stop.clone());
    let thread = std::thread::Builder::new()
        .name("afk-notify-out".into())
        .spawn(move || {
            n.run(&w2, &s2);
            let _ = done_tx.send(());
        });
    match thread {
        Ok(t) => Some((
            Some(Handle {
                wake,
                stop,
                done,
                thread: Some(t),
            }),
            Record::now(Kind::NotifyStart, line),
        )),
        Err(e) => {
            line.push_str(&format!("; not started: no thread ({e})"));
            Some((None, Record::now(Kind::NotifyStart, line)))
        }
    }
}

struct Notifier {
    layout: Layout,
    sinks: Vec<Sink>,
    from: Origin,
    stream: EventStream,
    state: State,
    state_file: PathBuf,
    /// Something worth keeping changed since the state was last written.
    dirty: bool,
    log_name: std::ffi::OsString,
    /// Stopping: send what is due until then.
    drain_until: Option<u64>,
}

fn now_ms() -> u64 {
    crate::timeutil::now_epoch_ms()
}

/// The wait before retry `tries` (1-based).
fn backoff_ms(tries: u32) -> u64 {
    FIRST_BACKOFF_MS
        .saturating_mul(1u64 << tries.saturating_sub(1).min(16))
        .min(MAX_BACKOFF_MS)
}

impl Notifier {
    fn run(&mut self, wake: &EventFd, stop: &AtomicBool) {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .ok()
            .filter(|i| {
                i.add_watch(
                    &self.layout.supervisor_lane(),
                    AddWatchFlags::IN_MODIFY
                        | AddWatchFlags::IN_CREATE
                        | AddWatchFlags::IN_MOVED_TO,
                )
                .is_ok()
            });
        let mut look = true;
        loop {
            if stop.load(Ordering::SeqCst) && self.drain_until.is_none() {
                self.drain_until = Some(now_ms() + DRAIN.as_millis() as u64);
                look = true;
            }
            if look {
                self.read_log();
            }
            let now = now_ms();
            self.collect(now);
            self.deliver();
            self.save();
            let now = now_ms();
            if let Some(until) = self.drain_until
                && (now >= until || !self.anything_due_before(until))
            {
                return;
            }
            let mut wait = self.next_wake(now).unwrap_or(IDLE_LOOK.as_millis() as u64);
            wait = wait.min(IDLE_LOOK.as_millis() as u64);
            if let Some(until) = self.drain_until {
                wait = wait.min(until.saturating_sub(now));
            }
            look = self.sleep(inotify.as_ref(), wake, wait) || wait >= IDLE_LOOK.as_millis() as u64;
        }
    }

    /// Sleeps up to `ms`; whether the event log changed (or may have).
    fn sleep(&self, inotify: Option<&Inotify>, wake: &EventFd, ms: u64) -> bool {
        let timeout = PollTimeout::from(u16::try_from(ms.max(1)).unwrap_or(u16::MAX));
        let Some(ino) = inotify else {
            // No inotify: look every second.
            let mut fds = [PollFd::new(wake.as_fd(), PollFlags::POLLIN)];
            let _ = poll(
                &mut fds,
                PollTimeout::from(u16::try_from(ms.clamp(1, 1000)).unwrap_or(1000)),
            );
            let _ = wake.read();
            return true;
        };
        let mut fds = [
            PollFd::new(ino.as_fd(), PollFlags::POLLIN),
            PollFd::new(wake.as_fd(), PollFlags::POLLIN),
        ];
        if poll(&mut fds, timeout).is_err() {
            return true;
        }
        let woken = fds[1].revents().is_some_and(|r| !r.is_empty());
        if woken {
            let _ = wake.read();
        }
        let mut changed = woken;
        while let Ok(events) = ino.read_events() {
            if events.is_empty() {
                break;
            }
            changed |= events.iter().any(|e| {
                e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                    || e.name.as_ref().is_some_and(|n| {
                        n.as_encoded_bytes()
                            .starts_with(self.log_name.as_encoded_bytes())
                    })
            });
        }
        changed
    }

    /// Everything appended since the last look, classified and offered to the sinks.
    fn read_log(&mut self) {
        for _ in 0..64 {
            let batch = match self.stream.poll() {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(error = %e, "notify: reading the event log");
                    return;
                }
            };
            if batch.events.is_empty() {
                return;
            }
            for p in &batch.events {
                let before = self.state.memory.clone();
                if let Some(n) = classes::classify(&p.event, &p.cursor, &mut self.state.memory) {
                    for s in &self.sinks {
                        if s.wants(n.class.name()) {
                            let st = self.state.sinks.entry(s.name.clone()).or_default();
                            st.coalescer.offer(n.clone(), s.min_interval_s * 1000);
                        }
                    }
                    self.dirty = true;
                }
                self.dirty |= self.state.memory != before;
            }
            self.state.cursor = self.stream.position();
        }
    }

    /// Messages the coalescers let go now (all they hold when stopping) into the outboxes.
    fn collect(&mut self, now: u64) {
        let flush = self.drain_until.is_some();
        let mut dropped: Vec<(String, usize)> = Vec::new();
        for s in &self.sinks {
            let st = self.state.sinks.entry(s.name.clone()).or_default();
            let out = st.coalescer.due(now, s.min_interval_s * 1000, flush);
            if out.is_empty() {
                continue;
            }
            self.dirty = true;
            st.outbox.extend(out.into_iter().map(Pending::new));
            let over = st.outbox.len().saturating_sub(MAX_OUTBOX);
            if over > 0 {
                st.outbox.drain(..over);
                dropped.push((s.name.clone(), over));
            }
        }
        for (sink, n) in dropped {
            self.log_failed(
                None,
                format!(
                    "sink {sink}: {n} message(s) dropped: more than {MAX_OUTBOX} waiting (the sink is slower than the fleet)"
                ),
            );
        }
    }

    /// Sends, sink by sink, every message whose time has come, in order; a failing one
    /// waits for its retry and holds its sink's later ones behind it.
    fn deliver(&mut self) {
        let env = |v: &str| std::env::var(v).ok();
        for i in 0..self.sinks.len() {
            let sink = self.sinks[i].clone();
            loop {
                let now = now_ms();
                if self.drain_until.is_some_and(|u| now >= u) {
                    return;
                }
                let st = self.state.sinks.entry(sink.name.clone()).or_default();
                let Some(front) = st.outbox.front_mut() else {
                    break;
                };
                if front.next_try_ms > now {
                    break;
                }
                let mut timeout = Duration::from_secs(sink.timeout_s);
                if let Some(u) = self.drain_until {
                    timeout = timeout.min(Duration::from_millis(u.saturating_sub(now).max(1)));
                }
                let first = *front.first_try_ms.get_or_insert(now);
                front.tries += 1;
                let result = sinks::send(&sinks::Delivery {
                    sink: &sink,
                    msg: &front.message,
                    from: &self.from,
                    timeout,
                    env: &env,
                });
                self.dirty = true;
                match result {
                    Ok(_) => {
                        st.outbox.pop_front();
                        // Kept at once: a restart must not send it again.
                        self.save();
                    }
                    Err(f) => {
                        let after = now_ms();
                        let next = after + backoff_ms(front.tries);
                        let out_of_time = next > first + sink.retry_for_s * 1000;
                        if f.permanent || out_of_time {
                            let tries = front.tries;
                            let Some(p) = st.outbox.pop_front() else {
                                break;
                            };
                            let why = if f.permanent { "refused" } else { "gave up" };
                            let msg = format!(
                                "sink {}: {why} after {tries} tr{} over {}s: {}; dropped the {} message {} ({})",
                                sink.name,
                                if tries == 1 { "y" } else { "ies" },
                                after.saturating_sub(first) / 1000,
                                f.why,
                                p.message.class.name(),
                                p.message.id,
                                crate::text::excerpt(&p.message.line),
                            );
                            let issue = p.message.fields.get("issue").and_then(|v| v.as_u64());
                            self.log_failed(issue.filter(|_| p.message.count == 1), msg);
                            continue;
                        }
                        front.next_try_ms = next;
                        front.last_error = Some(f.why);
                        break;
                    }
                }
            }
        }
    }

    /// When something next falls due (ms from `now`): a held class or a retry.
    fn next_wake(&self, now: u64) -> Option<u64> {
        let mut at: Option<u64> = None;
        for s in &self.sinks {
            let Some(st) = self.state.sinks.get(&s.name) else {
                continue;
            };
            let due = [
                st.coalescer.next_due(s.min_interval_s * 1000),
                st.outbox.front().map(|p| p.next_try_ms),
            ];
            for d in due.into_iter().flatten() {
                at = Some(at.map_or(d, |a| a.min(d)));
            }
        }
        at.map(|a| a.saturating_sub(now))
    }

    fn anything_due_before(&self, until: u64) -> bool {
        self.state.sinks.values().any(|st| {
            st.coalescer.holds() || st.outbox.front().is_some_and(|p| p.next_try_ms < until)
        })
    }

    fn save(&mut self) {
        if !self.dirty {
            return;
        }
        match state::write(&self.state_file, &self.state) {
            Ok(()) => self.dirty = false,
            Err(e) => tracing::warn!(error = %e, "notify: the state file"),
        }
    }

    /// One `notify.failed` line in the event log.
    fn log_failed(&self, issue: Option<u64>, msg: String) {
        let mut ev = Record::now(Kind::NotifyFailed, msg);
        ev.issue = issue;
        if let Err(e) = crate::event_log::append_event(&self.layout.event_log(), &ev) {
            tracing::warn!(error = %e, "notify: the event log");
        }
    }
}

/// What `notify test` did with one sink.
#[derive(Debug, Clone)]
pub struct Tested {
    pub sink: String,
    pub result: Result<String, sinks::Failed>,
    pub elapsed: Duration,
}

/// `afk-supervisor notify test`: one sample message to each sink (or the one named), one
/// try each with the sink's `timeout_s`, and what each answered. Nothing is logged or kept.
pub fn test(layout: &Layout, sinks: &[Sink]) -> Vec<Tested> {
    let from = Origin::of(layout);
    let env = |v: &str| std::env::var(v).ok();
    let mut msg = Message::single(classes::sample(&from.host));
    msg.id = format!("test-{}", now_ms());
    msg.fields.insert("test".into(), serde_json::json!(true));
    sinks
        .iter()
        .map(|s| {
            let started = std::time::Instant::now();
            let result = sinks::send(&sinks::Delivery {
                sink: s,
                msg: &msg,
                from: &from,
                timeout: Duration::from_secs(s.timeout_s),
                env: &env,
            });
            Tested {
                sink: s.name.clone(),
                result,
                elapsed: started.elapsed(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_minute() {
        let waits: Vec<u64> = (1..=8).map(backoff_ms).collect();
        assert_eq!(
            waits,
            [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]
        );
    }
}
