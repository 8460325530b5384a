//! One compare-and-swap read-modify-write of one etcd key, the shape every shared record of
//! the fleet is changed in (`docs/SPEC.md` §11.23): read the key with its mod revision, let
//! the caller change the value, put it if the key still has that revision (absent, for a
//! new one), else read again and redo the change. A put whose answer was lost (a member
//! gone mid-call) is looked for before anything is said to have failed, so a change is
//! never applied twice.

use super::etcd::{Cmp, Etcd, EtcdError, Op};

/// How many conflicting writers in a row a change outlasts before it gives up (each lost
/// race means another writer's change landed: the fleet moved on, this one tries again).
pub const CAS_TRIES: usize = 32;

/// What a change makes of the value it was shown.
pub enum Change<T> {
    /// Put this value; the change's answer is `T`.
    Put(String, T),
    /// Leave the key as it is.
    Keep(T),
}

/// Why a change was not made; each names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CasError {
    #[error("etcd {key}: {source}")]
    Etcd {
        key: String,
        #[source]
        source: EtcdError,
    },
    /// The change refused the value it was shown (it is not what the key must hold).
    #[error("etcd {key}: {why}")]
    Value { key: String, why: String },
    #[error("etcd {key}: changed by another writer at each of {CAS_TRIES} tries")]
    Contended { key: String },
}

impl CasError {
    /// Whether etcd did not answer (try later) rather than refused or held garbage.
    pub fn unavailable(&self) -> bool {
        matches!(
            self,
            CasError::Etcd {
                source: EtcdError::Unavailable(_),
                ..
            }
        )
    }
}

/// Changes `key` by `change`, which sees the value as etcd holds it (`None`: no key) and
/// runs again whenever another writer changed it in between.
pub fn update<T>(
    etcd: &Etcd,
    key: &str,
    mut change: impl FnMut(Option<&str>) -> Result<Change<T>, String>,
) -> Result<T, CasError> {
    let failed = |source: EtcdError| CasError::Etcd {
        key: key.to_string(),
        source,
    };
    for _ in 0..CAS_TRIES {
        let kv = etcd.get(key).map_err(failed)?;
        let changed =
            change(kv.as_ref().map(|kv| kv.value.as_str())).map_err(|why| CasError::Value {
                key: key.to_string(),
                why,
            })?;
        let (value, answer) = match changed {
            Change::Keep(answer) => return Ok(answer),
            Change::Put(value, answer) => (value, answer),
        };
        let cmp = match &kv {
            Some(kv) => Cmp::ModifiedAt(key.to_string(), kv.mod_revision),
            None => Cmp::Absent(key.to_string()),
        };
        let put = Op::Put {
            key: key.to_string(),
            value: value.clone(),
            lease: 0,
        };
        match etcd.txn(&[cmp], &[put], &[]) {
            Ok(t) if t.succeeded => return Ok(answer),
            Ok(_) => continue,
            Err(e @ EtcdError::Unavailable(_)) => {
                // Applied after all? Then the key holds exactly the value put.
                let there = etcd.get(key).map_err(failed)?;
                if there.is_some_and(|kv| kv.value == value) {
                    return Ok(answer);
                }
                return Err(failed(e));
            }
            Err(e) => return Err(failed(e)),
        }
    }
    Err(CasError::Contended {
        key: key.to_string(),
    })
}

/// A JSON document as a key holds it: no key is `T::default()`; a value that is not one is
/// refused in words naming `what` it must be.
pub fn parse_doc<T: Default + serde::de::DeserializeOwned>(
    value: Option<&str>,
    what: &str,
) -> Result<T, String> {
    match value {
        None => Ok(T::default()),
        Some(v) => serde_json::from_str(v)
            .map_err(|e| format!("not {what}: {}", crate::text::clip_quoted(&e.to_string()))),
    }
}
