//! The approval belt (SPEC §11.20): a held issue (`afk:needs-approval`) goes back to the
//! queue once a trusted `/afk approve` covers its text as it stands. Each pass lists the
//! held issues with their `updatedAt` and judges again only those that changed since the
//! last pass (a comment changes it), so a long list of held issues costs one call a pass,
//! not one per issue.

use std::collections::HashMap;
use std::sync::Arc;

use crate::tracker::provenance::Vetting;
use crate::tracker::{Tracker, TrackerError, labels};

/// How many held issues one pass lists.
const LIMIT: usize = 200;

pub struct ApprovalBelt {
    tracker: Arc<dyn Tracker>,
    /// The `updatedAt` each held issue had when last judged still held.
    seen: HashMap<u64, String>,
}

impl ApprovalBelt {
    pub fn new(tracker: Arc<dyn Tracker>) -> Self {
        ApprovalBelt {
            tracker,
            seen: HashMap::new(),
        }
    }

    /// One pass: `approved=N (#a, #b) held=M`. A failed call ends the pass; what it
    /// released stays released.
    pub fn pass(&mut self) -> Result<String, TrackerError> {
        let held = self
            .tracker
            .list_open_changed(labels::NEEDS_APPROVAL, LIMIT)?;
        self.seen.retain(|n, _| held.iter().any(|h| h.number == *n));
        let mut approved = Vec::new();
        for h in &held {
            let unchanged = h
                .updated_at
                .as_ref()
                .is_some_and(|t| self.seen.get(&h.number) == Some(t));
            if unchanged {
                continue;
            }
            match self.tracker.vet(h.number)? {
                Vetting::Held { .. } => {
                    if let Some(t) = &h.updated_at {
                        self.seen.insert(h.number, t.clone());
                    }
                }
                Vetting::Trusted { .. } | Vetting::NoOutsiders => {
                    self.tracker
                        .edit_labels(h.number, &[], &[labels::NEEDS_APPROVAL])?;
                    self.seen.remove(&h.number);
                    approved.push(h.number);
                }
            }
        }
        let mut line = format!("approved={}", approved.len());
        if !approved.is_empty() {
            let refs: Vec<String> = approved.iter().map(|n| format!("#{n}")).collect();
            line.push_str(&format!(" ({})", refs.join(", ")));
        }
        line.push_str(&format!(" held={}", held.len() - approved.len()));
        Ok(line)
    }
}
