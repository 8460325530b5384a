//! One slot's stop or restart by the operator (`slot-control.toon`, `docs/SPEC.md` §4.3):
//! read at each tick and SIGUSR1, answered once per request id.

use std::time::Instant;

use super::*;
use crate::supervisor::slot_control::{Ack, Action, Found, Request};

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
                    self.log(line(kind::ERROR, format!("{why}; request ignored")));
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
        let (ok, message, retire_first) = match self.slot_act(&req, now) {
            Ok((m, retire)) => (true, m, retire),
            Err(m) => (false, m, None),
        };
        let ack = Ack {
            id: req.id.clone(),
            ok,
            message,
        };
        self.emit(Effect::AnswerSlotControl { ack, retire_first });
    }

    /// What was done (and the slot whose retire file the answer needs first), or why not.
    fn slot_act(&mut self, req: &Request, now: Instant) -> Result<(String, Option<usize>), String> {
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
        match req.action {
            Action::Stop => slot.stopped = true,
            Action::Restart => {
                slot.stopped = false;
                if slot.is_parked() {
                    // A restart is the operator's word that the cause is fixed.
                    slot.circuit.reset();
                    slot.fatal_reason = None;
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
                Action::Stop => kind::SLOT_STOPPED,
                Action::Restart => kind::SLOT_RESTART,
            };
            self.log(line(k, msg.clone()).slot(idx));
            if req.action == Action::Restart {
                self.spawn_in(idx, now);
            }
            return Ok((msg, None));
        };
        if w.kill.is_some() {
            return Err(format!("slot {idx}'s worker is already being stopped"));
        }
        let (pid, own, id) = (w.pid, w.own_child, w.id.clone());
        let mut retire = None;
        let msg = match mode {
            ShrinkMode::HardKill => {
                w.kill = Some(KillReason::Operator);
                // Its process group, even in cgroup mode (as this always did).
                let group = match &w.pidfd {
                    Some(fd) if self.procs.pidfd_groups => Group::Pidfd(Arc::clone(fd)),
                    _ => Group::Pinned,
                };
                let out = &mut self.out;
                groups::terminate_into(&mut self.procs, out, pid, group, own, false, now);
                format!(
                    "slot {idx}: {} worker {id} now (hard-kill) (via={via})",
                    req.action
                )
            }
            ShrinkMode::DrainThenRetire => {
                if req.action == Action::Restart {
                    slot.restart_pending = true;
                }
                retire = Some(idx);
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
            Action::Stop => kind::SLOT_STOPPED,
            Action::Restart => kind::SLOT_RESTART,
        };
        self.log(line(k, msg.clone()).slot(idx).pid(pid));
        Ok((msg, retire))
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
                    kind::SLOT_STOPPED,
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
