//! On a cluster (`[cluster]`, `docs/SPEC.md` §11.22–§11.23) the landing records live in etcd,
//! not in each checkout: `P/landing/<N>`, the record as JSON, bound to no lease. A pull
//! request outlives the host that opened it, so its record must too: the leader's landing
//! belt follows every open pull request of the fleet (a dead host's included), and a fix
//! round claimed on any host finds the branch to push to and the rounds so far. Every
//! change is one compare-and-swap on the key's mod revision, retried on a conflict, so the
//! worker and the belt never lose each other's updates, as the file's lock guarantees on
//! one box.

use super::{PrRecord, RecordError};
use crate::cluster::{Cluster, Cmp, EtcdError, Op};

/// How many conflicting writers in a row a change outlasts before it gives up (each lost
/// race means another writer's change landed: the fleet moved on, this one tries again).
const CAS_TRIES: usize = 32;

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
    serde_json::from_str(value).map_err(|e| RecordError::Etcd {
        key: key.to_string(),
        why: format!(
            "not a landing record: {}",
            crate::text::clip_quoted(&e.to_string())
        ),
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

/// One compare-and-swap read-modify-write of issue `n`'s record (see [`super::update`]):
/// `change` sees the record as etcd holds it and runs again when another writer changed
/// it in between. A put whose answer was lost (a member gone mid-call) is looked for
/// before anything is said to have failed, so a change is never applied twice.
pub fn update(
    c: &Cluster,
    n: u64,
    mut change: impl FnMut(Option<PrRecord>) -> Option<PrRecord>,
) -> Result<Option<PrRecord>, RecordError> {
    let k = key(c, n);
    for _ in 0..CAS_TRIES {
        let (before, revision) = match get(c, &k)? {
            Some((r, rev)) => (Some(r), Some(rev)),
            None => (None, None),
        };
        let Some(mut after) = change(before.clone()) else {
            return Ok(before);
        };
        after.updated_epoch = crate::timeutil::now_epoch();
        let value = serde_json::to_string(&after).map_err(|e| RecordError::Etcd {
            key: k.clone(),
            why: format!("cannot encode: {e}"),
        })?;
        let cmp = match revision {
            Some(rev) => Cmp::ModifiedAt(k.clone(), rev),
            None => Cmp::Absent(k.clone()),
        };
        let put = Op::Put {
            key: k.clone(),
            value: value.clone(),
            lease: 0,
        };
        match c.etcd.txn(&[cmp], &[put], &[]) {
            Ok(t) if t.succeeded => return Ok(Some(after)),
            Ok(_) => continue,
            Err(e @ EtcdError::Unavailable(_)) => {
                // Applied after all? The value is ours to the second (`updated_epoch`).
                let there = c.etcd.get(&k).map_err(|e| etcd_error(&k, &e))?;
                if there.is_some_and(|kv| kv.value == value) {
                    return Ok(Some(after));
                }
                return Err(etcd_error(&k, &e));
            }
            Err(e) => return Err(etcd_error(&k, &e)),
        }
    }
    Err(RecordError::Etcd {
        key: k,
        why: format!("changed by another writer at each of {CAS_TRIES} tries"),
    })
}
