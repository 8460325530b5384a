//! One slot's stop or restart by the operator (`slot-control.toon`, `docs/SPEC.md` §4.3):
//! read at each tick and SIGUSR1, answered once per request id.

use std::time::Instant;

use super::*;
use crate::event_log::Kind;
use crate::lanes::slot_control::{Ack, Action, Found, Request};

/// What an operator's request to one slot came to.
enum Acted {
    /// Done; what to answer.
    Done(String),
    /// Done once the slot's worker is asked to retire: what to answer then, the line that
    /// says so, and the slot's marks before the request.
    Drain {
        msg: String,
        done: event_log::Record,
        before: SlotMarks,
    },
}

impl Fleet {
    /// Acts on a new slot-control request (as the driver read it, with the answer file)
    /// and acknowledges it. A request already answered (its id in the acknowledgement,
    /// e.g. from before a restart of the supervisor) is left alone; a corrupt file is
    /// reported once.
    pub(super) fn apply_slot_control(
        &mut self,
        request: Found<Request>,
        answered: Found<Ack>,
        now: Instant,
    ) {
        let req = match request {
            Found::None => return,
            Found::Corrupt(why) => {
                if self.record.slot_control_seen.as_deref() != Some(why.as_str()) {
                    self.log(line(
                        Kind::SupervisorError,
                        format!("{why}; request ignored"),
                    ));
                    self.record.slot_control_seen = Some(why);
                }
                return;
            }
            Found::Some(r) => r,
        };
        if self.record.slot_control_seen.as_deref() == Some(req.id.as_str()) {
            return;
        }
        self.record.slot_control_seen = Some(req.id.clone());
        if matches!(answered, Found::Some(a) if a.id == req.id) {
            return;
        }
        let ack = |ok, message| Ack {
            id: req.id.clone(),
            ok,
            message,
        };
        match self.slot_act(&req, now) {
            Ok(Acted::Done(m)) => self.emit(Effect::AnswerSlotControl(ack(true, m))),
            Err(m) => self.emit(Effect::AnswerSlotControl(ack(false, m))),
            Ok(Acted::Drain { msg, done, before }) => {
                let asker = RetireAsker::SlotControl {
                    ack: ack(true, msg),
                    done: Box::new(done),
                    before,
                };
                self.ask_retire(req.slot, asker);
            }
        }
    }

    /// The answer to asking the worker of a slot the operator stops or restarts by drain
    /// to retire: the request is answered (and its line logged) only now, so neither says
    /// it was done before the file is there. A file that could not be written answers
    /// the request as failed and puts the slot's marks back, so the slot is not left
    /// waiting on a worker that was never asked.
    pub(super) fn slot_retire_asked(
        &mut self,
        idx: usize,
        mut ack: Ack,
        done: event_log::Record,
        before: SlotMarks,
        error: Option<String>,
    ) {
        match error {
            None => self.log(done),
            Some(e) => {
                if let Some(s) = self.pool.slots.get_mut(&idx) {
                    s.stopped = before.stopped;
                    s.restart_pending = before.restart_pending;
                }
                self.record.dirty = true;
                ack.ok = false;
                ack.message = format!(
                    "slot {idx}: its worker could not be asked to finish its issue ({e}); nothing changed"
                );
                self.log(line(Kind::SupervisorError, ack.message.clone()).slot(idx));
            }
        }
        self.emit(Effect::AnswerSlotControl(ack));
    }

    /// What was done, or is to be done once the worker is asked to retire, or why not.
    fn slot_act(&mut self, req: &Request, now: Instant) -> Result<Acted, String> {
        let idx = req.slot;
        let target = self.pool.target;
        if self.stopping.is_some() {
            return Err("the fleet is stopping".into());
        }
        if idx >= target || !self.pool.slots.contains_key(&idx) {
            return Err(format!(
                "slot {idx} is not in the fleet (target {target}: slots 0..{target})"
            ));
        }
        let Some(slot) = self.pool.slots.get_mut(&idx) else {
            return Err(format!("slot {idx} is not in the fleet"));
        };
        let mode = req.shrink_mode;
        let via = &req.via;
        let before = SlotMarks {
            stopped: slot.stopped,
            restart_pending: slot.restart_pending,
        };
        match req.action {
            Action::Stop => slot.stopped = true,
            Action::Restart => {
                slot.stopped = false;
                if slot.is_parked() {
                    // A restart is the operator's word that the cause is fixed.
                    slot.circuit.reset();
                    slot.phase = Phase::Idle { confirmed: false };
                }
            }
        }
        let Some(w) = slot.worker_mut() else {
            let msg = match req.action {
                Action::Stop => format!("slot {idx} stopped (no worker was running) (via={via})"),
                Action::Restart => format!("slot {idx} starting a worker (via={via})"),
            };
            let k = match req.action {
                Action::Stop => Kind::SlotStopped,
                Action::Restart => Kind::SlotRestart,
            };
            self.log(line(k, msg.clone()).slot(idx));
            if req.action == Action::Restart {
                self.spawn_in(idx, now);
            }
            return Ok(Acted::Done(msg));
        };
        if w.kill.is_some() {
            return Err(format!("slot {idx}'s worker is already being stopped"));
        }
        let (pid, own, id) = (w.pid, w.own_child, w.id.clone());
        let mut drain = false;
        let msg = match mode {
            ShrinkMode::HardKill => {
                w.kill = Some(KillReason::Operator);
                // Its process group, even in cgroup mode (as this always did).
                let group = match w.pidfd {
                    true if self.groups.pidfd_groups => Group::Pidfd { start: w.start },
                    _ => Group::Pinned,
                };
                let out = &mut self.out;
                groups::terminate_into(&mut self.groups, out, pid, group, own, false, now);
                format!(
                    "slot {idx}: {} worker {id} now (hard-kill) (via={via})",
                    req.action
                )
            }
            ShrinkMode::DrainThenRetire => {
                if req.action == Action::Restart {
                    slot.restart_pending = true;
                }
                drain = true;
                format!(
                    "slot {idx}: worker {id} finishes its issue, then the slot {} (via={via})",
                    match req.action {
                        Action::Stop => "stays stopped",
                        Action::Restart => "starts a fresh worker",
                    }
                )
            }
        };
        let k = match req.action {
            Action::Stop => Kind::SlotStopped,
            Action::Restart => Kind::SlotRestart,
        };
        let done = line(k, msg.clone()).slot(idx).pid(pid);
        if drain {
            return Ok(Acted::Drain { msg, done, before });
        }
        self.log(done);
        Ok(Acted::Done(msg))
    }

    /// A worker of a slot the operator acted on ended: a stopped slot stays empty, a
    /// restarted one starts afresh (no death counted either way). Whether it handled it.
    pub(super) fn operator_exit(
        &mut self,
        idx: usize,
        kill: Option<KillReason>,
        now: Instant,
    ) -> bool {
        let Some(slot) = self.pool.slots.get_mut(&idx) else {
            return false;
        };
        let restart = kill == Some(KillReason::Operator) || slot.restart_pending;
        if !slot.stopped && !restart {
            return false;
        }
        slot.restart_pending = false;
        let stopped = slot.stopped;
        self.emit(Effect::RemoveRetire { slot: idx });
        if stopped {
            self.log(
                line(
                    Kind::SlotStopped,
                    format!("slot {idx} stopped: empty until `afk-supervisor restart {idx}`"),
                )
                .slot(idx),
            );
        } else {
            self.spawn_in(idx, now);
        }
        true
    }
}
