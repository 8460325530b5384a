//! The slots and the target they converge on.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::lanes::state_file::ShrinkMode;
use crate::supervisor::core::circuit;
use crate::supervisor::core::slot::Slot;

/// Every slot, the retired ones kept aside, and the target with its shrink mode. One part
/// because a spawn, a resize, a wake-up and the heartbeat all read the slots against the
/// target, and a slot moves between `slots` and `retired` only with it.
pub(super) struct Pool {
    pub(super) slots: BTreeMap<usize, Slot>,
    /// Slots whose circuit may be open or probing: every slot whose circuit wants
    /// attention is here (a closed one leaves when it is next looked at). The work of a
    /// loop turn on the circuits, and the loop's next deadline, look at these alone: over
    /// every slot, a thousand-worker fleet paid for a walk of a thousand slots twice a
    /// turn, with nearly every circuit closed.
    pub(super) unsettled: BTreeSet<usize>,
    /// The slot of each running worker, by its pid and start token (which no other worker
    /// shares): a worker's end finds its slot here, not by a walk over every slot. Every
    /// running worker is in it; an entry whose slot now runs another worker is stale and
    /// answers nothing (pruned at the tick).
    pub(super) by_worker: HashMap<(i32, u64), usize>,
    /// Retired slots, kept so a slot that comes back keeps its circuit and its park.
    pub(super) retired: HashMap<usize, Slot>,
    pub(super) target: usize,
    pub(super) shrink_mode: ShrinkMode,
    /// Every slot's circuit is made with these.
    pub(super) params: circuit::Params,
}

impl Pool {
    pub(super) fn new(target: usize, params: circuit::Params) -> Self {
        Pool {
            slots: BTreeMap::new(),
            unsettled: BTreeSet::new(),
            by_worker: HashMap::new(),
            retired: HashMap::new(),
            target,
            shrink_mode: ShrinkMode::default(),
            params,
        }
    }

    /// Workers that count against the target: live, in a slot that is not retiring.
    pub(super) fn live_in_target(&self) -> usize {
        self.slots
            .values()
            .filter(|s| s.occupied() && !s.retiring)
            .count()
    }

    /// Whether the live workers already meet the target, asked before a spawn into one of
    /// the slots that is not occupied. With no more slots than the target that cannot be
    /// (that slot is one of them), and no slot is walked: only a fleet holding surplus
    /// slots (a shrink under way) counts them, where every spawn of a thousand-worker fleet
    /// counted a thousand slots.
    pub(super) fn target_met(&self) -> bool {
        self.slots.len() > self.target && self.live_in_target() >= self.target
    }

    /// Idle slots a queue with work would wake, lowest first.
    pub(super) fn wakeable(&self) -> Vec<usize> {
        self.slots
            .values()
            .filter(|s| {
                s.is_idle()
                    && s.index < self.target
                    && !s.retiring
                    && !s.stopped
                    && s.unclaimable.is_none()
            })
            .map(|s| s.index)
            .collect()
    }

    /// The slot whose running worker is `pid`, started at `start`.
    pub(super) fn slot_of(&self, pid: i32, start: u64) -> Option<usize> {
        let idx = *self.by_worker.get(&(pid, start))?;
        let w = self.slots.get(&idx)?.worker()?;
        (w.pid == pid && w.start == start).then_some(idx)
    }

    /// Drops the entries of workers no longer running where they were.
    pub(super) fn prune_workers(&mut self) {
        let slots = &self.slots;
        self.by_worker.retain(|(pid, start), idx| {
            slots
                .get(idx)
                .and_then(Slot::worker)
                .is_some_and(|w| w.pid == *pid && w.start == *start)
        });
    }

    /// Whether every running worker is found by [`Pool::slot_of`].
    pub(super) fn workers_indexed(&self) -> bool {
        self.slots.iter().all(|(i, s)| {
            s.worker()
                .is_none_or(|w| self.by_worker.get(&(w.pid, w.start)) == Some(i))
        })
    }

    /// Notes that slot `idx`'s circuit may have opened.
    pub(super) fn unsettle(&mut self, idx: usize) {
        self.unsettled.insert(idx);
    }

    /// Whether every slot whose circuit wants attention is among the unsettled ones.
    pub(super) fn unsettled_complete(&self) -> bool {
        self.slots
            .iter()
            .all(|(i, s)| s.circuit.next_deadline().is_none() || self.unsettled.contains(i))
    }

    /// The start token of the running worker `pid` when it is our own child.
    pub(super) fn own_worker_start(&self, pid: i32) -> Option<u64> {
        self.slots
            .values()
            .filter_map(|s| s.worker())
            .find(|w| w.pid == pid && w.own_child)
            .map(|w| w.start)
    }
}
