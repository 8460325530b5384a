//! `resize.toon`: converging the slots on a new target.

use std::time::Instant;

use super::*;
use crate::event_log::Kind;

impl Fleet {
    // ---- resize ----

    /// Converges the slots on `resize.toon` as the driver read it. A corrupt directive is
    /// reported once per distinct content and otherwise ignored.
    pub(super) fn apply_scale(&mut self, found: Found, now: Instant) {
        match found {
            Found::None => self.record.resize_reported = None,
            Found::Corrupt { raw, why } => {
                // Keyed by content and cause: one line per distinct corruption.
                let key = format!("{why}\u{0}{raw}");
                if self.record.resize_reported.as_deref() != Some(key.as_str()) {
                    let msg = format!(
                        "{}: {why}; directive ignored, target stays {}",
                        self.layout.resize_file().display(),
                        self.pool.target
                    );
                    self.log(line(Kind::SupervisorError, msg));
                    self.record.resize_reported = Some(key);
                }
            }
            Found::Directive(ScaleDirective {
                target,
                shrink_mode,
                runner,
            }) => {
                self.record.resize_reported = None;
                // Answered by a heartbeat even when nothing changes: `scale` waits for one
                // that shows its target.
                self.record.dirty = true;
                if let Some(r) = runner
                    && r != self.launch.runner
                {
                    self.log(line(
                        Kind::SupervisorResize,
                        format!(
                            "runner {} -> {r} for workers spawned from now on",
                            self.launch.runner
                        ),
                    ));
                    self.launch.runner = r;
                }
                if (target, shrink_mode) != (self.pool.target, self.pool.shrink_mode) {
                    self.log(line(
                        Kind::SupervisorResize,
                        format!(
                            "resize: target {} -> {target} (shrink-mode={shrink_mode})",
                            self.pool.target
                        ),
                    ));
                }
                self.reconcile(target, shrink_mode, now);
            }
        }
    }

    /// Converges on `target`: slots below it exist (a retiring one is kept instead of a new
    /// spawn), slots at or above it drain or are killed.
    pub(super) fn reconcile(&mut self, target: usize, mode: ShrinkMode, now: Instant) {
        self.pool.target = target;
        self.pool.shrink_mode = mode;
        for idx in self
            .pool
            .slots
            .keys()
            .copied()
            .filter(|i| *i >= target)
            .collect::<Vec<_>>()
        {
            self.shrink_slot(idx, mode, now);
        }
        for idx in 0..target {
            match self.pool.slots.get_mut(&idx) {
                Some(s) if s.retiring && s.worker().is_some_and(|w| w.kill.is_none()) => {
                    self.unretire(idx);
                }
                Some(_) => {}
                None => self.regrow(idx, now),
            }
        }
    }

    fn shrink_slot(&mut self, idx: usize, mode: ShrinkMode, now: Instant) {
        let Some(slot) = self.pool.slots.get_mut(&idx) else {
            return;
        };
        let newly = !slot.retiring;
        slot.retiring = true;
        let Some(w) = slot.worker_mut() else {
            self.retire_slot(idx);
            return;
        };
        if w.kill.is_some() {
            return;
        }
        match mode {
            ShrinkMode::HardKill => {
                w.kill = Some(KillReason::Shrink);
                let (pid, own, id) = (w.pid, w.own_child, w.id.clone());
                let group = super::shutdown::group_for(self.groups.pidfd_groups, w);
                let out = &mut self.out;
                groups::terminate_into(&mut self.groups, out, pid, group, own, false, now);
                self.log(
                    line(
                        Kind::SlotHardKill,
                        format!("slot {idx} surplus: stopping worker {id}"),
                    )
                    .slot(idx)
                    .pid(pid),
                );
            }
            // Asked when it turns surplus; a file that could not be written is asked for
            // again by the next tick (`ask_retire_again`), not by each reading.
            ShrinkMode::DrainThenRetire if newly => self.ask_retire(idx, RetireAsker::Shrink),
            ShrinkMode::DrainThenRetire => {}
        }
    }

    /// Asks the worker of `idx` to finish its issue and exit (its retire file). The file
    /// holds the run's start token: it belongs to this run, and the next one clears it at
    /// start-up (`lock::SupervisorLock::acquire`).
    pub(super) fn ask_retire(&mut self, idx: usize, asker: RetireAsker) {
        let token = self.launch.me.1.to_string();
        self.emit(Effect::WriteRetire {
            slot: idx,
            token,
            asker,
        });
    }

    /// The surplus slots whose worker's retire file could not be written, asked again: at
    /// each tick, whether or not `resize.toon` is still there to be read (a restart with a
    /// smaller target has none). Only the slots at or above the target are looked at.
    pub(super) fn ask_retire_again(&mut self) {
        let due: Vec<usize> = self
            .pool
            .slots
            .range(self.pool.target..)
            .filter(|(_, s)| {
                s.retiring && !s.retire_asked && s.worker().is_some_and(|w| w.kill.is_none())
            })
            .map(|(idx, _)| *idx)
            .collect();
        for idx in due {
            self.ask_retire(idx, RetireAsker::Shrink);
        }
    }

    /// The answer to asking a surplus slot's worker to retire. Said once the file is
    /// there; a file that could not be written is said too (once per error), and the next
    /// tick asks again ([`Fleet::ask_retire_again`]): the slot stays surplus either way.
    pub(super) fn shrink_retire_asked(&mut self, idx: usize, error: Option<String>) {
        let Some(slot) = self.pool.slots.get_mut(&idx) else {
            return;
        };
        let Some(w) = slot.worker() else {
            return;
        };
        let (pid, id) = (w.pid, w.id.clone());
        let (k, msg) = match error {
            None => {
                slot.retire_asked = true;
                slot.retire_error = None;
                (
                    Kind::SlotRetire,
                    format!(
                        "slot {idx} surplus: worker {id} finishes its issue, then the slot retires"
                    ),
                )
            }
            Some(e) if slot.retire_error.as_ref() == Some(&e) => return,
            Some(e) => {
                let msg = format!(
                    "slot {idx} surplus: worker {id} could not be asked to retire ({e}); asking again at each tick"
                );
                slot.retire_error = Some(e);
                (Kind::SupervisorError, msg)
            }
        };
        self.log(line(k, msg).slot(idx).pid(pid));
    }

    pub(super) fn retire_slot(&mut self, idx: usize) {
        if let Some(slot) = self.pool.slots.remove(&idx) {
            self.emit(Effect::RemoveRetire { slot: idx });
            self.pool.retired.insert(idx, slot);
            self.log(line(Kind::SlotRetired, format!("slot {idx} retired")).slot(idx));
        }
    }

    /// A slot whose worker was being retired is within the target again.
    pub(super) fn unretire(&mut self, idx: usize) {
        if let Some(s) = self.pool.slots.get_mut(&idx) {
            s.retiring = false;
            s.retire_asked = false;
            s.retire_error = None;
            // The operator's drain (a slot stop, a drained restart) still wants its worker
            // to finish and go: its retire file stays.
            if !(s.stopped || s.restart_pending) {
                self.emit(Effect::RemoveRetire { slot: idx });
            }
            self.log(
                line(
                    Kind::SlotUnretire,
                    format!("slot {idx} kept: within the target again"),
                )
                .slot(idx),
            );
        }
    }

    /// Creates slot `idx` again: a slot retired earlier comes back with its circuit, and a
    /// parked one (exit 78 or an open circuit) stays parked instead of starting afresh.
    fn regrow(&mut self, idx: usize, now: Instant) {
        let Some(mut slot) = self.pool.retired.remove(&idx) else {
            self.pool
                .slots
                .insert(idx, Slot::new(idx, self.pool.params));
            self.spawn_in(idx, now);
            return;
        };
        // It comes back with its circuit, which may be open.
        self.pool.unsettle(idx);
        slot.retiring = false;
        slot.retire_asked = false;
        slot.retire_error = None;
        slot.unclaimable = None;
        if slot.is_parked() {
            self.pool.slots.insert(idx, slot);
            self.log(
                line(
                    Kind::SlotParked,
                    format!("slot {idx} back within the target and still parked"),
                )
                .slot(idx),
            );
            return;
        }
        slot.phase = Phase::Idle { confirmed: false };
        self.pool.slots.insert(idx, slot);
        self.spawn_in(idx, now);
    }
}
