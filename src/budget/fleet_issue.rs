//! One issue's spend kept for the whole fleet (`docs/SPEC.md` §11.13, §11.23): on a cluster
//! an issue's attempts run on whichever host claims it, each recorded in that host's
//! ledger, so `budget.usd_per_issue` is weighed against every host's records of it. The key
//! `P/spend/<N>` holds a JSON document: each host's spend of issue N since the issue's last
//! `over-budget` hand-off (each host rewrites only its own entry, after each attempt it
//! records), and `since_epoch`, when that hand-off was: the hand-off empties the document,
//! and a host's records ending before it no longer count, as the marker does in one ledger.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::fleet_day::HostSpend;
use super::{Spend, issue_spend};
use crate::cluster::Cluster;
use crate::cluster::cas::{self, CasError, Change};
use crate::config::Usd;
use crate::layout::Layout;
use crate::ledger::Record;

/// The value of an issue's key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IssueDoc {
    /// When the issue last went to a person over its budget (epoch seconds); 0: never.
    #[serde(default)]
    pub since_epoch: u64,
    #[serde(default)]
    pub hosts: BTreeMap<String, HostSpend>,
}

impl IssueDoc {
    pub fn parse(value: Option<&str>) -> Result<IssueDoc, String> {
        cas::parse_doc(value, "an issue's spend document")
    }

    /// What one host's `records` of the issue spent since the last hand-off over budget,
    /// the fleet's (`since_epoch`) or the host's own (its ledger's marker).
    pub fn own(&self, records: &[Record]) -> Spend {
        let after: Vec<Record> = records
            .iter()
            .filter(|r| {
                crate::timeutil::parse_rfc3339(&r.end)
                    .is_some_and(|t| crate::timeutil::epoch_secs(t) > self.since_epoch)
            })
            .cloned()
            .collect();
        issue_spend(&after)
    }

    /// The fleet's spend of the issue: the other hosts' entries and `own`, this host's.
    pub fn fleet(&self, here: &str, own: &Spend) -> Spend {
        let mut usd_micros = Usd::from_f64(own.usd).0;
        let mut s = *own;
        for (_, h) in self.hosts.iter().filter(|(h, _)| h.as_str() != here) {
            usd_micros = usd_micros.saturating_add(h.usd_micros);
            s.tokens = s.tokens.saturating_add(h.tokens);
            s.runs = s.runs.saturating_add(h.runs);
        }
        s.usd = Usd(usd_micros).get();
        s
    }
}

/// The key of issue `n`'s spend: `P/spend/<n>`.
pub fn key(c: &Cluster, n: u64) -> String {
    format!("{}spend/{n}", c.prefix())
}

/// Writes this host's entry of issue `n` from its ledger's `records` of it (after an
/// attempt was recorded).
pub fn publish(c: &Cluster, layout: &Layout, n: u64, records: &[Record]) -> Result<(), CasError> {
    let host = crate::claim::tracked::this_host(layout);
    cas::update(&c.etcd, &key(c, n), |value| {
        let mut doc = IssueDoc::parse(value)?;
        let own = HostSpend::of(&doc.own(records));
        if doc.hosts.get(&host) == Some(&own) {
            return Ok(Change::Keep(()));
        }
        doc.hosts.insert(host.clone(), own);
        let v = serde_json::to_string(&doc).map_err(|e| format!("cannot encode: {e}"))?;
        Ok(Change::Put(v, ()))
    })
}

/// Issue `n` went to a person over its budget at `at` (epoch seconds): the fleet's spend of
/// it counts afresh from then.
pub fn reset(c: &Cluster, n: u64, at: u64) -> Result<(), CasError> {
    let doc = IssueDoc {
        since_epoch: at,
        hosts: BTreeMap::new(),
    };
    let v = serde_json::to_string(&doc).map_err(|e| CasError::Value {
        key: key(c, n),
        why: format!("cannot encode: {e}"),
    })?;
    cas::update(&c.etcd, &key(c, n), |_| Ok(Change::Put(v.clone(), ())))
}

/// What issue `n` spent since its last hand-off over budget: on a cluster every host's
/// spend (this host's from `records`, its ledger's), else the ledger's alone. etcd not
/// answering leaves this host's ledger's figure, said in one line.
pub fn spent(layout: &Layout, n: u64, records: &[Record]) -> Spend {
    match crate::cluster::active() {
        Some(c) => spent_in(c, layout, n, records),
        None => issue_spend(records),
    }
}

/// [`spent`] on cluster `c`.
pub fn spent_in(c: &Cluster, layout: &Layout, n: u64, records: &[Record]) -> Spend {
    let here = crate::claim::tracked::this_host(layout);
    let doc = c
        .etcd
        .get(&key(c, n))
        .map_err(|e| e.to_string())
        .and_then(|kv| IssueDoc::parse(kv.as_ref().map(|kv| kv.value.as_str())));
    match doc {
        Ok(doc) => doc.fleet(&here, &doc.own(records)),
        Err(why) => {
            eprintln!(
                "afk-supervisor: issue #{n}'s spend on other hosts not read ({}: {why}); weighing this host's",
                key(c, n)
            );
            issue_spend(records)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Outcome;

    fn at(epoch: u64, outcome: Outcome, cost: f64) -> Record {
        let mut r = Record::now(None, None, outcome);
        r.end =
            crate::timeutil::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(epoch));
        r.usage.cost_usd = Some(cost);
        r
    }

    #[test]
    fn every_hosts_spend_counts_since_the_fleets_last_hand_off_over_budget() {
        let failed = || Outcome::AgentFailed(1);
        let mine = vec![
            at(100, failed(), 0.5),
            at(200, Outcome::OverBudget, 0.0),
            at(300, failed(), 0.25),
            at(400, failed(), 0.25),
        ];
        let mut doc = IssueDoc::default();
        // This host's own marker counts: $0.50 after it.
        assert_eq!(doc.own(&mine).usd, 0.5);
        doc.hosts.insert(
            "b".into(),
            HostSpend {
                usd_micros: 300_000,
                tokens: 0,
                runs: 1,
            },
        );
        doc.hosts.insert("a".into(), HostSpend::default());
        let f = doc.fleet("a", &doc.own(&mine));
        assert_eq!((Usd::from_f64(f.usd), f.runs), (Usd::from_f64(0.8), 3));
        // Another host handed it to a person at 350: only the run after counts, and no
        // host's entry from before.
        let doc = IssueDoc {
            since_epoch: 350,
            hosts: BTreeMap::new(),
        };
        let f = doc.fleet("a", &doc.own(&mine));
        assert_eq!((f.usd, f.runs), (0.25, 1));
        let v = serde_json::to_string(&doc).unwrap();
        assert_eq!(IssueDoc::parse(Some(&v)).unwrap(), doc);
        assert!(IssueDoc::parse(Some("1")).is_err());
    }
}
