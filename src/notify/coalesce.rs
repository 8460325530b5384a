//! One sink's coalescing (`docs/SPEC.md` §11.21): at most one message per class per
//! `min_interval_s`. Notices are offered as the log is read and held per class; a class
//! whose last message went out at least the interval ago sends what it holds as one message
//! (one notice as itself, several summed up: `200 issues quarantined: #3, #5, … and 195
//! more`). A burst read at once is one message; a burst spread over time is the first
//! notices at once and the rest in one message an interval later. With an interval of 0
//! every notice is its own message. Pure: the caller gives the time, in epoch milliseconds.
//!
//! What a class holds is bounded whatever the burst: the count, the first and last notice
//! and up to [`MAX_LISTED`] issue and slot numbers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::classes::{Class, Notice};

/// The most issue (and slot) numbers a coalesced message lists.
pub const MAX_LISTED: usize = 50;
/// The most numbers its one line names before `and N more`.
const LINE_LISTED: usize = 10;

/// One message for a sink: what its `text` says and the structured fields beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Unique per sink: the cursor of the message's newest record (a receiver seeing an id
    /// twice has seen the same message twice).
    pub id: String,
    pub class: Class,
    /// One line, without the repository's name (the sink adds it).
    pub line: String,
    /// How many notices it stands for.
    pub count: u64,
    /// The newest notice's fields, and for several: `issues`, `slots`, `first_ts`.
    pub fields: Map<String, Value>,
}

impl Message {
    /// One notice as its own message.
    pub fn single(n: Notice) -> Message {
        let mut fields = n.fields;
        fields.insert("count".into(), json!(1));
        Message {
            id: n.cursor,
            class: n.class,
            line: n.line,
            count: 1,
            fields,
        }
    }
}

/// What a class holds between its messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Held {
    count: u64,
    first: Notice,
    last: Notice,
    issues: Vec<u64>,
    slots: Vec<u64>,
}

impl Held {
    fn new(n: Notice) -> Held {
        let mut h = Held {
            count: 0,
            first: n.clone(),
            last: n.clone(),
            issues: Vec::new(),
            slots: Vec::new(),
        };
        h.add(n);
        h
    }

    fn add(&mut self, n: Notice) {
        self.count += 1;
        let num = |k: &str| n.fields.get(k).and_then(Value::as_u64);
        for (list, v) in [
            (&mut self.issues, num("issue")),
            (&mut self.slots, num("slot")),
        ] {
            if let Some(v) = v
                && !list.contains(&v)
                && list.len() < MAX_LISTED
            {
                list.push(v);
            }
        }
        self.last = n;
    }

    fn message(self) -> Message {
        if self.count == 1 {
            return Message::single(self.last);
        }
        let class = self.last.class;
        let line = summary(
            class,
            self.count,
            &self.issues,
            &self.slots,
            &self.last.line,
        );
        let mut fields = self.last.fields;
        fields.insert("count".into(), json!(self.count));
        fields.insert("issues".into(), json!(self.issues));
        fields.insert("slots".into(), json!(self.slots));
        fields.insert(
            "first_ts".into(),
            self.first.fields.get("ts").cloned().unwrap_or(Value::Null),
        );
        Message {
            id: self.last.cursor,
            class,
            line,
            count: self.count,
            fields,
        }
    }
}

/// The one line of `count` notices of `class`.
fn summary(class: Class, count: u64, issues: &[u64], slots: &[u64], last: &str) -> String {
    let list = |nums: &[u64], prefix: &str| {
        let shown: Vec<String> = nums
            .iter()
            .take(LINE_LISTED)
            .map(|n| format!("{prefix}{n}"))
            .collect();
        let more = count.saturating_sub(shown.len() as u64);
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    };
    match class {
        Class::PrReady if !issues.is_empty() => {
            format!("{count} issues ready for review: {}", list(issues, "#"))
        }
        Class::HandedOff if !issues.is_empty() => {
            format!("{count} issues need a person: {}", list(issues, "#"))
        }
        Class::Quarantined if !issues.is_empty() => {
            format!("{count} issues quarantined: {}", list(issues, "#"))
        }
        Class::HostLost if !issues.is_empty() => format!(
            "{count} claims of lost hosts taken over: {}",
            list(issues, "#")
        ),
        Class::SlotParked if !slots.is_empty() => {
            format!(
                "{count} slot parkings (slots {}); latest: {last}",
                list(slots, "")
            )
        }
        _ => format!("{count} × {}; latest: {last}", class.title()),
    }
}

/// Per class: when its last message went out, and what it holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ClassState {
    last_ms: Option<u64>,
    held: Option<Held>,
}

/// One sink's coalescing state (kept across restarts in the notifier's state file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Coalescer {
    classes: BTreeMap<Class, ClassState>,
    /// With an interval of 0: every notice, in order, as its own message.
    #[serde(default)]
    direct: Vec<Notice>,
}

impl Coalescer {
    /// Takes a notice in.
    pub fn offer(&mut self, n: Notice, interval_ms: u64) {
        if interval_ms == 0 {
            self.direct.push(n);
            return;
        }
        let st = self.classes.entry(n.class).or_default();
        match &mut st.held {
            Some(h) => h.add(n),
            None => st.held = Some(Held::new(n)),
        }
    }

    /// The messages due at `now_ms`: one per class whose last message is at least
    /// `interval_ms` old (or that never sent one); with `flush`, every class that holds
    /// anything (the supervisor is stopping). Classes in their order.
    pub fn due(&mut self, now_ms: u64, interval_ms: u64, flush: bool) -> Vec<Message> {
        let mut out: Vec<Message> = self.direct.drain(..).map(Message::single).collect();
        for st in self.classes.values_mut() {
            let open = st
                .last_ms
                .is_none_or(|t| now_ms >= t.saturating_add(interval_ms));
            if st.held.is_some() && (open || flush) {
                if let Some(h) = st.held.take() {
                    out.push(h.message());
                }
                st.last_ms = Some(now_ms);
            }
        }
        out
    }

    /// When the next held class may send (epoch ms), if one holds anything.
    pub fn next_due(&self, interval_ms: u64) -> Option<u64> {
        if !self.direct.is_empty() {
            return Some(0);
        }
        self.classes
            .values()
            .filter(|st| st.held.is_some())
            .map(|st| st.last_ms.map_or(0, |t| t.saturating_add(interval_ms)))
            .min()
    }

    /// Whether anything is held.
    pub fn holds(&self) -> bool {
        !self.direct.is_empty() || self.classes.values().any(|st| st.held.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(class: Class, issue: Option<u64>, i: u64) -> Notice {
        let mut fields = Map::new();
        fields.insert("ts".into(), json!(format!("t{i}")));
        fields.insert("issue".into(), json!(issue));
        Notice {
            class,
            line: format!("line {i}"),
            fields,
            cursor: format!("c{i}"),
        }
    }

    const MIN: u64 = 60_000;

    #[test]
    fn a_burst_read_at_once_is_one_message_per_class() {
        let mut c = Coalescer::default();
        for i in 1..=200 {
            c.offer(notice(Class::Quarantined, Some(i), i), MIN);
        }
        c.offer(notice(Class::BudgetReached, None, 201), MIN);
        let out = c.due(1_000, MIN, false);
        assert_eq!(out.len(), 2);
        let q = &out[0];
        assert_eq!(q.class, Class::Quarantined);
        assert_eq!(q.count, 200);
        assert_eq!(q.id, "c200");
        assert_eq!(
            q.line,
            "200 issues quarantined: #1, #2, #3, #4, #5, #6, #7, #8, #9, #10 and 190 more"
        );
        assert_eq!(q.fields["issues"].as_array().unwrap().len(), MAX_LISTED);
        assert_eq!(q.fields["first_ts"], "t1");
        assert_eq!(q.fields["ts"], "t200");
        assert_eq!(out[1].count, 1);
        assert_eq!(out[1].line, "line 201");
        assert!(!c.holds());
    }

    #[test]
    fn within_the_interval_notices_wait_for_one_message() {
        let mut c = Coalescer::default();
        c.offer(notice(Class::Quarantined, Some(1), 1), MIN);
        assert_eq!(c.due(0, MIN, false).len(), 1);
        for i in 2..=5 {
            c.offer(notice(Class::Quarantined, Some(i), i), MIN);
            assert!(c.due(i * 1000, MIN, false).is_empty(), "held at {i}");
        }
        // Another class is not held back by this one.
        c.offer(notice(Class::PrReady, Some(9), 9), MIN);
        assert_eq!(c.due(10_000, MIN, false)[0].class, Class::PrReady);
        assert_eq!(c.next_due(MIN), Some(MIN));
        let out = c.due(MIN, MIN, false);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].count, 4);
        assert_eq!(out[0].line, "4 issues quarantined: #2, #3, #4, #5");
        assert_eq!(c.next_due(MIN), None);
        // A stop flushes what is held at once.
        c.offer(notice(Class::Quarantined, Some(6), 6), MIN);
        assert!(c.due(MIN + 1, MIN, false).is_empty());
        assert_eq!(c.due(MIN + 1, MIN, true).len(), 1);
    }

    #[test]
    fn an_interval_of_zero_sends_every_notice() {
        let mut c = Coalescer::default();
        for i in 1..=3 {
            c.offer(notice(Class::SlotParked, None, i), 0);
        }
        let out = c.due(0, 0, false);
        assert_eq!(out.iter().map(|m| m.count).collect::<Vec<_>>(), [1, 1, 1]);
        assert_eq!(out[2].id, "c3");
    }

    #[test]
    fn the_state_survives_its_file() {
        let mut c = Coalescer::default();
        c.offer(notice(Class::Quarantined, Some(1), 1), MIN);
        c.due(5, MIN, false);
        c.offer(notice(Class::Quarantined, Some(2), 2), MIN);
        let back: Coalescer = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.next_due(MIN), Some(5 + MIN));
    }
}
