//! On a cluster (`[cluster]`, `docs/SPEC.md` §11.22–§11.23) the landing records live in etcd,
//! not in each checkout: `P/landing/<N>`, the record as JSON, bound to no lease. A pull
//! request outlives the host that opened it, so its record must too: the leader's landing
//! belt follows every open pull request of the fleet (a dead host's included), and a fix
//! round claimed on any host finds the branch to push to and the rounds so far. Every
//! change is one compare-and-swap on the key's mod revision, retried on a conflict, so the
//! worker and the belt never lose each other's updates, as the file's lock guarantees on
//! one box.

use super::{PrRecord, RecordError};
use crate::cluster::cas::{self, CAS_TRIES, CasError, Change};
use crate::cluster::{Cluster, EtcdError};

/// Issue `n`'s key.
pub fn key(c: &Cluster, n: u64) -> String {
    format!("{}landing/{n}", c.prefix())
}

fn prefix(c: &Cluster) -> String {
    format!("{}landing/", c.prefix())
}

fn etcd_error(key: &str, e: &EtcdError) -> RecordError {
    RecordError::Etcd {
        key: key.to_string(),
        why: e.to_string(),
    }
}

fn decode(key: &str, value: &str) -> Result<PrRecord, RecordError> {
    parse(value).map_err(|why| RecordError::Etcd {
        key: key.to_string(),
        why,
    })
}

fn parse(value: &str) -> Result<PrRecord, String> {
    serde_json::from_str(value).map_err(|e| {
        format!(
            "not a landing record: {}",
            crate::text::clip_quoted(&e.to_string())
        )
    })
}

/// The record at `key` and its mod revision.
fn get(c: &Cluster, key: &str) -> Result<Option<(PrRecord, i64)>, RecordError> {
    let kv = c.etcd.get(key).map_err(|e| etcd_error(key, &e))?;
    kv.map(|kv| decode(key, &kv.value).map(|r| (r, kv.mod_revision)))
        .transpose()
}

/// Issue `n`'s record.
pub fn read(c: &Cluster, n: u64) -> Result<Option<PrRecord>, RecordError> {
    Ok(get(c, &key(c, n))?.map(|(r, _)| r))
}

/// Every record of the fleet, by issue number (one etcd range); a value that is no record
/// is named in the errors.
pub fn list(c: &Cluster) -> (Vec<PrRecord>, Vec<RecordError>) {
    let p = prefix(c);
    let kvs = match c.etcd.get_prefix(&p) {
        Ok(kvs) => kvs,
        Err(e) => return (Vec::new(), vec![etcd_error(&p, &e)]),
    };
    let (mut out, mut errors) = (Vec::new(), Vec::new());
    for kv in kvs {
        match decode(&kv.key, &kv.value) {
            Ok(r) => out.push(r),
            Err(e) => errors.push(e),
        }
    }
    out.sort_by_key(|r| r.issue);
    (out, errors)
}

/// One compare-and-swap read-modify-write of issue `n`'s record (see [`super::update`],
/// [`crate::cluster::cas`]): `change` sees the record as etcd holds it and runs again when
/// another writer changed it in between; a change is never applied twice.
pub fn update(
    c: &Cluster,
    n: u64,
    mut change: impl FnMut(Option<PrRecord>) -> Option<PrRecord>,
) -> Result<Option<PrRecord>, RecordError> {
    let k = key(c, n);
    cas::update(&c.etcd, &k, |value| {
        let before = match value {
            Some(v) => Some(parse(v)?),
            None => None,
        };
        let Some(mut after) = change(before.clone()) else {
            return Ok(Change::Keep(before));
        };
        // The value is ours to the second, so a put whose answer was lost is recognised.
        after.updated_epoch = crate::timeutil::now_epoch();
        let value = serde_json::to_string(&after).map_err(|e| format!("cannot encode: {e}"))?;
        Ok(Change::Put(value, Some(after)))
    })
    .map_err(|e| match e {
        CasError::Etcd { key, source } => etcd_error(&key, &source),
        CasError::Value { key, why } => RecordError::Etcd { key, why },
        CasError::Contended { key } => RecordError::Etcd {
            key,
            why: format!("changed by another writer at each of {CAS_TRIES} tries"),
        },
    })
}
