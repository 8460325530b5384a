//! etcd's v3 API through its JSON gateway (`/v3/kv/txn`, `/v3/lease/keepalive`, …) on the
//! members' client port: keys and values travel base64-encoded, 64-bit numbers as strings.
//! Each call tries the members in turn from the last one that answered, so one member down
//! costs one failed connection, not the call.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::http;

/// Why a call did not do what it asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    /// No member answered, or none has a leader: try again later; nothing can be assumed.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
    /// A member answered no (a bad request, a permission, a lease that is gone).
    #[error("etcd refused: {0}")]
    Refused(String),
}

pub type EtcdResult<T> = Result<T, EtcdError>;

/// One key as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub key: String,
    pub value: String,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
}

/// One condition of a transaction.
#[derive(Debug, Clone)]
pub enum Cmp {
    /// The key does not exist.
    Absent(String),
    /// The key exists, created at this revision (a claim's fencing token).
    CreatedAt(String, i64),
    /// The key was last changed at this revision (a compare-and-swap).
    ModifiedAt(String, i64),
}

/// One operation of a transaction.
#[derive(Debug, Clone)]
pub enum Op {
    /// Put `value` at `key`, bound to `lease` when it is not 0.
    Put {
        key: String,
        value: String,
        lease: i64,
    },
    Delete(String),
}

/// How a transaction went: `succeeded` when every condition held (and the success
/// operations ran); `revision` is the store's revision after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnAnswer {
    pub succeeded: bool,
    pub revision: i64,
}

/// A client of one etcd cluster.
#[derive(Debug)]
pub struct Etcd {
    endpoints: Vec<String>,
    timeout: Duration,
    login: Option<(String, String)>,
    /// `https://` members: the agent that checks them by the fleet's CA.
    tls: Option<ureq::Agent>,
    token: Mutex<Option<String>>,
    next: AtomicUsize,
}

impl Etcd {
    /// A client of `endpoints` whose calls each give up after `timeout`; `login` is etcd's
    /// own user and password when the cluster has authentication on.
    pub fn new(endpoints: Vec<String>, timeout: Duration, login: Option<(String, String)>) -> Etcd {
        Etcd {
            endpoints,
            timeout,
            login,
            tls: None,
            token: Mutex::new(None),
            next: AtomicUsize::new(0),
        }
    }

    /// The same client over TLS: `agent` checks the `https://` members (see
    /// [`super::tls_agent`]).
    pub fn with_tls(mut self, agent: ureq::Agent) -> Etcd {
        self.tls = Some(agent);
        self
    }

    fn token(&self) -> Option<String> {
        self.token.lock().ok().and_then(|t| t.clone())
    }

    fn authenticate(&self, endpoint: &str) -> EtcdResult<()> {
        let Some((user, password)) = &self.login else {
            return Ok(());
        };
        let v = self.post_one(
            endpoint,
            "/v3/auth/authenticate",
            &json!({"name": user, "password": password}),
            None,
        )?;
        let token = v["token"]
            .as_str()
            .ok_or_else(|| EtcdError::Refused(format!("authenticate as {user}: no token")))?;
        if let Ok(mut t) = self.token.lock() {
            *t = Some(token.to_string());
        }
        Ok(())
    }

    /// One request to one member, its answer judged.
    fn post_one(
        &self,
        endpoint: &str,
        path: &str,
        body: &Value,
        token: Option<&str>,
    ) -> EtcdResult<Value> {
        let headers: Vec<(&str, &str)> = token.map(|t| ("Authorization", t)).into_iter().collect();
        let bytes = body.to_string();
        let a = match &self.tls {
            Some(agent) => http::post_tls(
                agent,
                endpoint,
                path,
                bytes.as_bytes(),
                &headers,
                self.timeout,
            ),
            None => http::post(endpoint, path, bytes.as_bytes(), &headers, self.timeout),
        }
        .map_err(|e| EtcdError::Unavailable(format!("{endpoint}: {e}")))?;
        let v: Value = serde_json::from_slice(&a.body).map_err(|_| {
            EtcdError::Unavailable(format!(
                "{endpoint}{path}: HTTP {} with no JSON answer",
                a.status
            ))
        })?;
        if a.status == 200 && v.get("error").is_none() {
            return Ok(v);
        }
        let msg = v["message"]
            .as_str()
            .or(v["error"].as_str())
            .unwrap_or("no message")
            .to_string();
        // gRPC's codes, as the gateway passes them: 14 unavailable, 4 deadline exceeded;
        // 16 unauthenticated (an expired token) is retried after logging in again.
        let code = v["code"].as_i64().unwrap_or(0);
        Err(match code {
            4 | 14 => EtcdError::Unavailable(format!("{endpoint}: {msg}")),
            16 => EtcdError::Refused(format!("unauthenticated: {msg}")),
            _ if a.status >= 500 && !msg.contains("requested lease not found") => {
                EtcdError::Unavailable(format!("{endpoint}: HTTP {}: {msg}", a.status))
            }
            _ => EtcdError::Refused(msg),
        })
    }

    /// `path` with `body`, tried on each member in turn from the last one that answered.
    fn call(&self, path: &str, body: Value) -> EtcdResult<Value> {
        let n = self.endpoints.len().max(1);
        let start = self.next.load(Ordering::Relaxed);
        let mut last = EtcdError::Unavailable("no endpoints".into());
        for i in 0..n {
            let at = (start + i) % n;
            let Some(endpoint) = self.endpoints.get(at) else {
                break;
            };
            if self.login.is_some() && self.token().is_none() {
                match self.authenticate(endpoint) {
                    Ok(()) => {}
                    Err(e @ EtcdError::Refused(_)) => return Err(e),
                    Err(e) => {
                        last = e;
                        continue;
                    }
                }
            }
            let mut answer = self.post_one(endpoint, path, &body, self.token().as_deref());
            if matches!(&answer, Err(EtcdError::Refused(m)) if m.starts_with("unauthenticated"))
                && self.login.is_some()
            {
                self.authenticate(endpoint)?;
                answer = self.post_one(endpoint, path, &body, self.token().as_deref());
            }
            match answer {
                Ok(v) => {
                    self.next.store(at, Ordering::Relaxed);
                    return Ok(v);
                }
                Err(e @ EtcdError::Refused(_)) => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The answering member's id and its leader's (`/v3/maintenance/status`), for
    /// `status --fleet` and the tests that stop the leader.
    pub fn status(&self) -> EtcdResult<(String, String)> {
        let v = self.call("/v3/maintenance/status", json!({}))?;
        // Member ids are unsigned 64-bit: kept as the gateway's text.
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        Ok((text(&v["header"]["member_id"]), text(&v["leader"])))
    }

    /// A lease of `ttl_s` seconds; its id.
    pub fn grant(&self, ttl_s: u64) -> EtcdResult<i64> {
        let v = self.call("/v3/lease/grant", json!({"TTL": ttl_s.to_string()}))?;
        let id = int(&v["ID"]);
        if id == 0 {
            return Err(EtcdError::Refused(format!("lease grant: {v}")));
        }
        Ok(id)
    }

    /// Renews lease `id`: its TTL from now, or `None` when the lease is gone (expired or
    /// revoked): every key bound to it is gone too.
    pub fn keepalive(&self, id: i64) -> EtcdResult<Option<u64>> {
        let v = self.call("/v3/lease/keepalive", json!({"ID": id.to_string()}))?;
        let ttl = int(&v["result"]["TTL"]);
        Ok((ttl > 0).then_some(ttl as u64))
    }

    /// Ends lease `id` and every key bound to it.
    pub fn revoke(&self, id: i64) -> EtcdResult<()> {
        match self.call("/v3/lease/revoke", json!({"ID": id.to_string()})) {
            Ok(_) => Ok(()),
            Err(EtcdError::Refused(m)) if m.contains("lease not found") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The key `key`, if it exists.
    pub fn get(&self, key: &str) -> EtcdResult<Option<Kv>> {
        let v = self.call("/v3/kv/range", json!({"key": b64(key)}))?;
        Ok(kvs(&v).into_iter().next())
    }

    /// Every key starting with `prefix`, in key order.
    pub fn get_prefix(&self, prefix: &str) -> EtcdResult<Vec<Kv>> {
        let v = self.call(
            "/v3/kv/range",
            json!({"key": b64(prefix), "range_end": b64_bytes(&prefix_end(prefix))}),
        )?;
        Ok(kvs(&v))
    }

    /// `key` = `value`, bound to `lease` when not 0.
    pub fn put(&self, key: &str, value: &str, lease: i64) -> EtcdResult<i64> {
        let mut body = json!({"key": b64(key), "value": b64(value)});
        if lease != 0 {
            body["lease"] = json!(lease.to_string());
        }
        let v = self.call("/v3/kv/put", body)?;
        Ok(int(&v["header"]["revision"]))
    }

    /// When every one of `cmp` holds, `then`, else `otherwise`, in one step.
    pub fn txn(&self, cmp: &[Cmp], then: &[Op], otherwise: &[Op]) -> EtcdResult<TxnAnswer> {
        let compare: Vec<Value> = cmp
            .iter()
            .map(|c| match c {
                Cmp::Absent(k) => json!({"key": b64(k), "target": "CREATE",
                    "result": "EQUAL", "create_revision": "0"}),
                Cmp::CreatedAt(k, rev) => json!({"key": b64(k), "target": "CREATE",
                    "result": "EQUAL", "create_revision": rev.to_string()}),
                Cmp::ModifiedAt(k, rev) => json!({"key": b64(k), "target": "MOD",
                    "result": "EQUAL", "mod_revision": rev.to_string()}),
            })
            .collect();
        let ops = |ops: &[Op]| -> Vec<Value> {
            ops.iter()
                .map(|o| match o {
                    Op::Put { key, value, lease } => {
                        let mut p = json!({"key": b64(key), "value": b64(value)});
                        if *lease != 0 {
                            p["lease"] = json!(lease.to_string());
                        }
                        json!({"request_put": p})
                    }
                    Op::Delete(k) => json!({"request_delete_range": {"key": b64(k)}}),
                })
                .collect()
        };
        let v = self.call(
            "/v3/kv/txn",
            json!({"compare": compare, "success": ops(then), "failure": ops(otherwise)}),
        )?;
        Ok(TxnAnswer {
            succeeded: v["succeeded"].as_bool().unwrap_or(false),
            revision: int(&v["header"]["revision"]),
        })
    }
}

/// A 64-bit number as the gateway writes it: a string, or a number, absent as 0.
fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn kvs(v: &Value) -> Vec<Kv> {
    let Some(list) = v["kvs"].as_array() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|kv| {
            Some(Kv {
                key: unb64(kv["key"].as_str()?)?,
                value: kv["value"].as_str().and_then(unb64).unwrap_or_default(),
                create_revision: int(&kv["create_revision"]),
                mod_revision: int(&kv["mod_revision"]),
                lease: int(&kv["lease"]),
            })
        })
        .collect()
}

/// The range end that makes a range of every key starting with `prefix`: the prefix with
/// its last byte below 0xff incremented.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn b64(s: &str) -> String {
    b64_bytes(s.as_bytes())
}

fn b64_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | u32::from(c) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn unb64(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut n, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        n = n << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((n >> bits & 0xff) as u8);
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_both_ways() {
        for s in ["", "a", "ab", "abc", "afk/o/r/claims/12", "é\u{1f916}"] {
            assert_eq!(unb64(&b64(s)).as_deref(), Some(s));
        }
        assert_eq!(b64("a"), "YQ==");
        assert_eq!(b64("abcd"), "YWJjZA==");
    }

    #[test]
    fn a_prefix_range_ends_past_every_key_under_it() {
        assert_eq!(prefix_end("afk/"), b"afk0".to_vec());
        assert_eq!(int(&json!("7")), 7);
        assert_eq!(int(&json!(7)), 7);
        assert_eq!(int(&Value::Null), 0);
    }
}
