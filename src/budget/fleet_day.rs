//! The day's budget kept for the whole fleet (`docs/SPEC.md` §11.13, §11.23): on a cluster
//! `budget.usd_per_day` and `budget.tokens_per_day` hold for every host together, not for
//! each. One key per budget day, `P/budget/<yyyy-mm-dd>` (the day in `budget.timezone`),
//! holds a JSON document: each host's spend of the day as its ledger sums it (each host
//! rewrites only its own entry) and the live reservations of every host. A worker about to
//! claim checks the fleet's spend and reservations and reserves its attempt in one
//! compare-and-swap of that key ([`crate::cluster::cas`]), which takes the place of the reservation
//! file's flock; its release, when the attempt has ended, removes the reservation and
//! writes the host's spend with the attempt's cost in the same swap, so the fleet's figure
//! never counts the attempt twice or not at all. The rule (spend, reservations, the
//! expected cost) is `budget::reserve`'s; this is where they are kept.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::reserve::{self, Decision, Expected, Guard, Holder, Reservation, Reserved};
use super::{Spend, day_of, spend_today};
use crate::cluster::Cluster;
use crate::cluster::cas::{self, CasError, Change};
use crate::config::{Budget, Usd};
use crate::layout::Layout;

/// One host's spend of the day, as its ledger sums it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSpend {
    /// Dollars in millionths.
    pub usd_micros: u64,
    pub tokens: u64,
    /// Attempts that reported a cost or tokens.
    pub runs: u64,
}

impl HostSpend {
    pub fn of(s: &Spend) -> HostSpend {
        HostSpend {
            usd_micros: Usd::from_f64(s.usd).0,
            tokens: s.tokens,
            runs: s.runs,
        }
    }
}

/// A reservation of the fleet: the reservation file's record and the host of its process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetReservation {
    pub host: String,
    #[serde(flatten)]
    pub r: Reservation,
}

/// The value of a day's key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DayDoc {
    #[serde(default)]
    pub hosts: BTreeMap<String, HostSpend>,
    #[serde(default)]
    pub reservations: Vec<FleetReservation>,
}

/// Whether a day's key is changed or only read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// This host's entry is brought up to date with its ledger, and the reservations that
    /// hold nothing (a crashed worker's, whose release never came) dropped, when either
    /// changes the document (the supervisor, each queue check).
    Tidy,
    /// Nothing is written (`status`, `spend`).
    Nothing,
}

/// The fleet's day as one host sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FleetDay {
    /// Every host's spend, this host's brought up to what its ledger has now.
    pub spend: Spend,
    /// The live reservations of every host.
    pub reserved: Reserved,
    /// Hosts with an entry (this one included).
    pub hosts: usize,
}

impl DayDoc {
    /// The document a key holds; no key is an empty day. A value that is no document is
    /// refused (money is at stake: no host claims on a guess).
    pub fn parse(value: Option<&str>) -> Result<DayDoc, String> {
        cas::parse_doc(value, "a day's budget document")
    }

    pub fn to_value(&self) -> Result<String, String> {
        serde_json::to_string(self).map_err(|e| format!("cannot encode: {e}"))
    }

    /// Drops the reservations that hold nothing any more at `now`: lapsed (older than the
    /// attempt cap and a minute), of a host whose lease is gone (not in `live_hosts`), or of
    /// this host (`here`) whose process is gone (`process_live`).
    pub fn prune(
        &mut self,
        live_hosts: &BTreeSet<String>,
        here: &str,
        now: u64,
        process_live: impl Fn(&Reservation) -> bool,
    ) {
        self.reservations.retain(|f| {
            now < f.r.until_epoch
                && live_hosts.contains(&f.host)
                && (f.host != here || process_live(&f.r))
        });
    }

    /// Host `host`'s entry brought up to `spend`. A host's spend of a day only grows (its
    /// ledger is appended to), so a figure a worker read before another worker's release
    /// wrote a larger one never lowers the entry.
    pub fn set_spend(&mut self, host: &str, spend: HostSpend) {
        let e = self.hosts.entry(host.to_string()).or_default();
        e.usd_micros = e.usd_micros.max(spend.usd_micros);
        e.tokens = e.tokens.max(spend.tokens);
        e.runs = e.runs.max(spend.runs);
    }

    /// Removes the reservations of the process `pid` started at `start` on `host`.
    pub fn release(&mut self, host: &str, pid: i32, start: u64) {
        self.reservations
            .retain(|f| !(f.host == host && f.r.pid == pid && f.r.start == start));
    }

    /// Every host's spend.
    pub fn total(&self) -> Spend {
        let mut usd_micros = 0u64;
        let mut s = Spend::default();
        for h in self.hosts.values() {
            usd_micros = usd_micros.saturating_add(h.usd_micros);
            s.tokens = s.tokens.saturating_add(h.tokens);
            s.runs = s.runs.saturating_add(h.runs);
        }
        s.usd = Usd(usd_micros).get();
        s
    }

    /// What every live reservation holds.
    pub fn reserved(&self) -> Reserved {
        let list: Vec<Reservation> = self.reservations.iter().map(|f| f.r.clone()).collect();
        Reserved::of(&list)
    }

    /// The check and the reservation of one worker (see [`Ask`]) against the fleet's day
    /// at `now`: the host's entry is brought up to date, the worker's own earlier
    /// reservation dropped, and when the budget leaves room its attempt's reservation
    /// (possibly of nothing: its release then still publishes the host's spend) added.
    /// Call [`DayDoc::prune`] first.
    pub fn check_and_reserve(&mut self, budget: &Budget, ask: &Ask, now: u64) -> reserve::Verdict {
        self.set_spend(ask.host, ask.own);
        self.release(ask.host, ask.holder.pid, ask.holder.start);
        let v = reserve::judge(budget, &self.total(), &self.reserved(), ask.expected, now);
        if let reserve::Verdict::Reserve(e) = v {
            self.reservations.push(FleetReservation {
                host: ask.host.to_string(),
                r: ask.holder.reserve(e, ask.max_age_s, now),
            });
        }
        v
    }
}

/// A worker about to claim, as the day's document weighs it.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// Its host.
    pub host: &'a str,
    pub holder: &'a Holder,
    /// What its host's ledger spent today.
    pub own: HostSpend,
    /// What its attempt is expected to cost.
    pub expected: Expected,
    /// The attempt cap: the reservation lapses a minute after it.
    pub max_age_s: u64,
}

/// The key of budget day `day` (`yyyy-mm-dd`): `P/budget/<day>`.
pub fn key(c: &Cluster, day: &str) -> String {
    format!("{}budget/{day}", c.prefix())
}

/// The hosts holding a lease now: those whose status key (`P/hosts/<host>`, bound to the
/// lease) exists.
fn live_hosts(c: &Cluster) -> Result<BTreeSet<String>, CasError> {
    let p = c.host_key("");
    let kvs = c.etcd.get_prefix(&p).map_err(|source| CasError::Etcd {
        key: p.clone(),
        source,
    })?;
    Ok(kvs
        .iter()
        .filter_map(|kv| kv.key.strip_prefix(&p).map(str::to_string))
        .collect())
}

/// `value` changed by `edit` as a compare-and-swap answer: put when the text differs.
fn put_if_changed<T>(
    value: Option<&str>,
    edit: impl FnOnce(&mut DayDoc) -> T,
) -> Result<Change<T>, String> {
    let mut doc = DayDoc::parse(value)?;
    let answer = edit(&mut doc);
    let after = doc.to_value()?;
    Ok(if value == Some(after.as_str()) {
        Change::Keep(answer)
    } else {
        Change::Put(after, answer)
    })
}

/// What the fleet's day's budget says to `holder`, a worker of this host about to claim
/// (see [`DayDoc::check_and_reserve`]), in one compare-and-swap of the day's key; the
/// reservation is held until the returned guard is dropped. `max_age_s` is the attempt cap.
pub fn check_and_reserve(
    c: &'static Cluster,
    layout: &Layout,
    budget: &Budget,
    holder: &Holder,
    max_age_s: u64,
    now: u64,
) -> Result<Decision, CasError> {
    let (all, _) = crate::ledger::read_all(layout);
    let own = HostSpend::of(&spend_today(&all, now, budget.utc_offset_s));
    let e = reserve::expected(&all, budget);
    let host = crate::claim::tracked::this_host(layout);
    let live_hosts = live_hosts(c)?;
    let key = key(c, &day_of(now, budget.utc_offset_s));
    let verdict = cas::update(&c.etcd, &key, |value| {
        put_if_changed(value, |doc| {
            doc.prune(&live_hosts, &host, now, |r| reserve::live(r, now));
            let ask = Ask {
                host: &host,
                holder,
                own,
                expected: e,
                max_age_s,
            };
            doc.check_and_reserve(budget, &ask, now)
        })
    })?;
    Ok(match verdict {
        reserve::Verdict::Reached(r) => Decision::Reached(r),
        reserve::Verdict::Wait(why) => Decision::Wait(why),
        reserve::Verdict::Reserve(_) => Decision::Go(Some(Guard::Fleet(FleetGuard {
            cluster: c,
            layout: layout.clone(),
            offset_s: budget.utc_offset_s,
            host,
            since_epoch: now,
            pid: holder.pid,
            start: holder.start,
        }))),
    })
}

/// The fleet's day at `now` as this host sees it: every host's entry, this host's replaced
/// by its ledger's `own`, and the live reservations; `publish` says whether what differs
/// is written.
pub fn fleet_day(
    c: &Cluster,
    layout: &Layout,
    own: &Spend,
    budget: &Budget,
    now: u64,
    publish: Publish,
) -> Result<FleetDay, CasError> {
    let host = crate::claim::tracked::this_host(layout);
    let live_hosts = live_hosts(c)?;
    let key = key(c, &day_of(now, budget.utc_offset_s));
    let own = HostSpend::of(own);
    cas::update(&c.etcd, &key, |value| {
        let change = put_if_changed(value, |doc| {
            doc.set_spend(&host, own);
            doc.prune(&live_hosts, &host, now, |r| reserve::live(r, now));
            FleetDay {
                spend: doc.total(),
                reserved: doc.reserved(),
                hosts: doc.hosts.len(),
            }
        })?;
        Ok(match (change, publish) {
            (Change::Put(v, day), Publish::Tidy) => Change::Put(v, day),
            (Change::Put(_, day) | Change::Keep(day), _) => Change::Keep(day),
        })
    })
}

/// `[cluster]` with a daily budget: the fleet's day now, as `spend` and the MCP `spend`
/// show it beside this host's ledger `all` (nothing written); `None` without one.
pub fn for_report(
    layout: &Layout,
    budget: &Budget,
    all: &[(u64, Vec<crate::ledger::Record>)],
) -> Option<Result<FleetDay, CasError>> {
    let c = crate::cluster::active()?;
    if !budget.daily() {
        return None;
    }
    let now = crate::timeutil::now_epoch();
    let own = spend_today(all, now, budget.utc_offset_s);
    Some(fleet_day(c, layout, &own, budget, now, Publish::Nothing))
}

/// The fleet's day beside its budget, for `status --fleet` and the MCP `fleet_status`:
/// null without a daily budget; `{"error"}` when etcd did not answer.
pub fn view(layout: &Layout, budget: &Budget) -> serde_json::Value {
    let (all, _) = crate::ledger::read_all(layout);
    match for_report(layout, budget, &all) {
        None => serde_json::Value::Null,
        Some(Err(e)) => serde_json::json!({"error": e.to_string()}),
        Some(Ok(day)) => {
            let mut v = day.json();
            v["usd_per_day"] = serde_json::json!(budget.usd_per_day.map(Usd::get));
            v["tokens_per_day"] = serde_json::json!(budget.tokens_per_day);
            v["reserved_usd"] = serde_json::json!(Usd(day.reserved.usd_micros).get());
            v["reserved_attempts"] = serde_json::json!(day.reserved.attempts);
            v
        }
    }
}

/// As `spend --json` and the MCP `spend` give it.
impl FleetDay {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "usd": self.spend.usd,
            "tokens": self.spend.tokens,
            "runs": self.spend.runs,
            "hosts": self.hosts,
        })
    }
}

/// Releases the reservation of the process `pid` started at `start` taken on the day
/// `since_epoch` fell on, and writes this host's spend of that day (and of today, when the
/// day turned meanwhile) from its ledger, which now holds the attempt's cost.
fn release(g: &FleetGuard) -> Result<(), CasError> {
    let (all, _) = crate::ledger::read_all(&g.layout);
    let now = crate::timeutil::now_epoch();
    let mut days = vec![g.since_epoch];
    if day_of(now, g.offset_s) != day_of(g.since_epoch, g.offset_s) {
        days.push(now);
    }
    for at in days {
        let own = HostSpend::of(&spend_today(&all, at, g.offset_s));
        let key = key(g.cluster, &day_of(at, g.offset_s));
        cas::update(&g.cluster.etcd, &key, |value| {
            put_if_changed(value, |doc| {
                doc.release(&g.host, g.pid, g.start);
                doc.set_spend(&g.host, own);
            })
        })?;
    }
    Ok(())
}

/// An attempt's reservation in the fleet's day key: released when dropped (see
/// [`reserve::Guard`]).
#[derive(Debug)]
pub struct FleetGuard {
    cluster: &'static Cluster,
    layout: Layout,
    offset_s: i32,
    host: String,
    since_epoch: u64,
    pid: i32,
    start: u64,
}

impl Drop for FleetGuard {
    fn drop(&mut self) {
        if let Err(e) = release(self) {
            // A reservation not released lapses at the cap, or when this host's lease ends.
            eprintln!("afk-supervisor: releasing the budget reservation: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pid: i32) -> Holder {
        Holder {
            worker: format!("w{pid}"),
            pid,
            start: 7,
        }
    }

    fn budget(usd: f64) -> Budget {
        Budget {
            usd_per_day: Some(Usd::from_f64(usd)),
            ..Budget::default()
        }
    }

    /// Worker `pid` of `host` (whose ledger spent `own`) asks at 100, expecting `e`, under
    /// a cap of `max_age_s`.
    fn ask(
        doc: &mut DayDoc,
        b: &Budget,
        host: &str,
        (pid, own): (i32, HostSpend),
        (e, max_age_s): (Expected, u64),
    ) -> reserve::Verdict {
        let holder = holder(pid);
        let a = Ask {
            host,
            holder: &holder,
            own,
            expected: e,
            max_age_s,
        };
        doc.check_and_reserve(b, &a, 100)
    }

    const E: Expected = Expected {
        usd_micros: 400_000,
        tokens: 0,
    };

    fn hosts(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn spent(usd: f64) -> HostSpend {
        HostSpend {
            usd_micros: Usd::from_f64(usd).0,
            tokens: 0,
            runs: 1,
        }
    }

    #[test]
    fn the_fleets_spend_and_reservations_decide_not_one_hosts() {
        let b = budget(1.0);
        let mut doc = DayDoc::default();
        // Host a spent $0.30, host b $0.20: together $0.50, room for two $0.40 runs (the
        // last one may overshoot by its own cost, as on one host).
        doc.set_spend("b", spent(0.2));
        let v = ask(&mut doc, &b, "a", (1, spent(0.3)), (E, 3600));
        assert!(matches!(v, reserve::Verdict::Reserve(_)), "{v:?}");
        let v = ask(&mut doc, &b, "b", (2, spent(0.2)), (E, 3600));
        assert!(matches!(v, reserve::Verdict::Reserve(_)), "{v:?}");
        assert_eq!(doc.reserved().usd_micros, 800_000);
        // A worker of host c sees $1.30 spent and reserved: it waits.
        let c = |doc: &mut DayDoc| ask(doc, &b, "c", (3, HostSpend::default()), (E, 3600));
        let v = c(&mut doc);
        let reserve::Verdict::Wait(why) = v else {
            panic!("{v:?}")
        };
        assert_eq!(
            why,
            "daily budget held by running attempts: spend today $0.50 of $1.00, \
             reserved $0.80 for 2 running attempts"
        );
        assert_eq!(doc.reservations.len(), 2);
        // Host a's run ends costing $0.45: released, its entry now $0.75; still held.
        doc.release("a", 1, 7);
        doc.set_spend("a", spent(0.75));
        assert_eq!(Usd::from_f64(doc.total().usd), Usd::from_f64(0.95));
        assert!(matches!(c(&mut doc), reserve::Verdict::Wait(_)));
        // Host b's ends at $0.30: the fleet's spend alone reaches the budget.
        doc.release("b", 2, 7);
        doc.set_spend("b", spent(0.5));
        assert_eq!(doc.reserved(), Reserved::default());
        assert_eq!(doc.total().runs, 2);
        let v = c(&mut doc);
        let reserve::Verdict::Reached(r) = v else {
            panic!("{v:?}")
        };
        assert_eq!(r.reason, "daily budget reached: spend today $1.25 of $1.00");
        assert!(
            doc.reservations.is_empty(),
            "a reached budget reserves nothing"
        );
    }

    #[test]
    fn a_stale_ledger_reading_never_lowers_a_hosts_entry() {
        let mut doc = DayDoc::default();
        doc.set_spend("a", spent(0.5));
        doc.set_spend("a", spent(0.25));
        assert_eq!(doc.hosts["a"], spent(0.5));
        doc.set_spend("a", spent(0.75));
        assert_eq!(doc.hosts["a"], spent(0.75));
    }

    #[test]
    fn a_workers_second_check_replaces_its_reservation_and_nothing_expected_still_reserves() {
        let b = budget(1.0);
        let mut doc = DayDoc::default();
        ask(&mut doc, &b, "a", (1, HostSpend::default()), (E, 3600));
        ask(&mut doc, &b, "a", (1, HostSpend::default()), (E, 3600));
        assert_eq!(doc.reservations.len(), 1);
        // Nothing expected yet (no history, no estimate): a reservation of nothing, whose
        // release publishes the host's spend.
        let v = ask(
            &mut doc,
            &b,
            "b",
            (2, HostSpend::default()),
            (Expected::default(), 3600),
        );
        assert!(matches!(v, reserve::Verdict::Reserve(_)));
        assert_eq!(doc.reservations.len(), 2);
        assert_eq!(doc.reserved().usd_micros, 400_000);
        assert_eq!(doc.reservations[1].r.until_epoch, 100 + 3600 + 60);
    }

    #[test]
    fn dead_hosts_lapsed_and_gone_processes_reservations_hold_nothing_but_spend_stays() {
        let b = budget(10.0);
        let mut doc = DayDoc::default();
        for (h, pid) in [("a", 1), ("b", 2), ("c", 3)] {
            ask(&mut doc, &b, h, (pid, spent(1.0)), (E, 100));
        }
        ask(&mut doc, &b, "a", (4, spent(1.0)), (E, 3600));
        assert_eq!(doc.reservations.len(), 4);
        // Host c's lease is gone; on host a process 4 is gone; at 260 the 100 s cap and
        // its minute have passed for the first three (taken at 100).
        doc.prune(&hosts(&["a", "b"]), "a", 259, |r| r.pid != 4);
        let left: Vec<(&str, i32)> = doc
            .reservations
            .iter()
            .map(|f| (f.host.as_str(), f.r.pid))
            .collect();
        assert_eq!(left, vec![("a", 1), ("b", 2)]);
        doc.prune(&hosts(&["a", "b"]), "a", 260, |_| true);
        assert!(doc.reservations.is_empty());
        // What a dead host spent was spent: it still counts.
        assert_eq!(doc.total().usd, 3.0);
        assert_eq!(doc.hosts.len(), 3);
    }

    #[test]
    fn a_document_round_trips_and_garbage_is_refused_by_name() {
        let mut doc = DayDoc::default();
        ask(&mut doc, &budget(1.0), "h-1", (5, spent(0.1)), (E, 60));
        let v = doc.to_value().unwrap();
        assert!(v.contains("\"host\":\"h-1\""), "{v}");
        assert!(v.contains("\"usd_micros\":400000"), "{v}");
        assert_eq!(DayDoc::parse(Some(&v)).unwrap(), doc);
        assert_eq!(DayDoc::parse(None).unwrap(), DayDoc::default());
        let e = DayDoc::parse(Some("[1,2]")).unwrap_err();
        assert!(e.starts_with("not a day's budget document: "), "{e}");
        let kept = put_if_changed(Some(&v), |_| ()).unwrap();
        assert!(matches!(kept, Change::Keep(())));
    }
}
