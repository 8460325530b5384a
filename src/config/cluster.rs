//! `[cluster]` (`docs/SPEC.md` §11.23): where the fleet's shared state lives when it runs on
//! more than one box. Absent, the fleet is what it always was: one box, its state in files.

use std::path::PathBuf;

use serde::Deserialize;

use super::{Builder, ConfigError, S};
use crate::text::excerpt;

/// The engine the shared state lives in. Only etcd for now: operators past one box already
/// run it (Kubernetes keeps its leases there), and its leases, transactions and revisions are
/// exactly the claim, the fencing token and the liveness this needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Etcd,
}

/// The resolved `[cluster]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCfg {
    pub engine: Engine,
    /// The client URLs of the members (`http://host:port`), tried in order.
    pub endpoints: Vec<String>,
    /// The host's lease: a host silent this long loses its claims to the others.
    pub lease_s: u64,
    /// Every key of this fleet lives under it; one repository, one prefix.
    pub prefix: Option<String>,
    /// etcd's own authentication (`etcdctl user add`): the user and a file holding its
    /// password (a file, so the secret is in neither the config nor the environment).
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
    /// `https://` endpoints: the CA that signed the members' certificates, and the
    /// host's own certificate and key when the members ask for one (`--client-cert-auth`).
    pub tls: Option<ClusterTls>,
}

/// TLS to the members: a private CA's certificate to check them by (etcd's certificates are
/// the operator's own, not a public CA's), and optionally this host's client certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTls {
    pub ca_file: PathBuf,
    /// The certificate (with its chain) and its key, PEM, both or neither.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// The default lease: long enough to ride out a loaded box's pauses, short enough that a
/// dead host's issues are back in seconds, not in `claims.stale_after_s`.
pub const DEFAULT_LEASE_S: u64 = 12;

/// The shortest lease: the keepalive runs every third of it, and below 2 s a loaded box's
/// scheduling hiccup would cost a host its claims.
pub const MIN_LEASE_S: u64 = 2;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCluster {
    engine: S<Engine>,
    endpoints: S<Vec<String>>,
    lease_s: S<u64>,
    prefix: S<String>,
    username: S<String>,
    password_file: S<PathBuf>,
    ca_file: S<PathBuf>,
    cert_file: S<PathBuf>,
    key_file: S<PathBuf>,
}

impl FileCluster {
    fn is_empty(&self) -> bool {
        self.engine.is_none()
            && self.endpoints.is_none()
            && self.lease_s.is_none()
            && self.prefix.is_none()
            && self.username.is_none()
            && self.password_file.is_none()
            && self.ca_file.is_none()
            && self.cert_file.is_none()
            && self.key_file.is_none()
    }
}

impl ClusterCfg {
    /// The prefix every key of this fleet goes under: `cluster.prefix`, else `afk/` and the
    /// tracker's repository (`owner/name`), so two repositories on one etcd never meet.
    pub fn key_prefix(&self, repo: &str) -> String {
        let p = self.prefix.clone().unwrap_or_else(|| format!("afk/{repo}"));
        format!("{}/", p.trim_end_matches('/'))
    }
}

/// `http://host:port` or `https://host:port`, with nothing after the port but an optional
/// `/`.
fn endpoint_ok(e: &str) -> bool {
    let Some(rest) = e
        .strip_prefix("http://")
        .or_else(|| e.strip_prefix("https://"))
    else {
        return false;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    match rest.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        None => false,
    }
}

impl Builder {
    pub(super) fn apply_cluster(&mut self, c: Option<FileCluster>) -> Result<(), ConfigError> {
        let Some(c) = c else { return Ok(()) };
        if c.is_empty() {
            return Err(ConfigError(format!(
                "{}: [cluster] is empty: set engine = \"etcd\" and endpoints, or remove the table",
                self.file
                    .as_ref()
                    .map_or(String::new(), |(p, _)| p.display().to_string())
            )));
        }
        let Some(engine) = self.take("cluster.engine", c.engine) else {
            return Err(ConfigError(format!(
                "{}: [cluster] needs engine = \"etcd\"",
                self.file
                    .as_ref()
                    .map_or(String::new(), |(p, _)| p.display().to_string())
            )));
        };
        let endpoints = self
            .take("cluster.endpoints", c.endpoints)
            .unwrap_or_default();
        if endpoints.is_empty() {
            return Err(ConfigError(format!(
                "{}: cluster.endpoints is empty: name the etcd members' client URLs (http://host:2379)",
                self.origin_of("cluster.engine")
            )));
        }
        if let Some(bad) = endpoints.iter().find(|e| !endpoint_ok(e)) {
            return Err(ConfigError(format!(
                "{}: cluster.endpoints: {:?}: expected http://host:port or https://host:port",
                self.origin_of("cluster.endpoints"),
                excerpt(bad)
            )));
        }
        let https = endpoints
            .iter()
            .filter(|e| e.starts_with("https://"))
            .count();
        if https != 0 && https != endpoints.len() {
            return Err(ConfigError(format!(
                "{}: cluster.endpoints: all http:// or all https://, not both",
                self.origin_of("cluster.endpoints")
            )));
        }
        let lease_s = match self.take("cluster.lease_s", c.lease_s) {
            Some(x) => {
                super::check_range(
                    &self.origin_of("cluster.lease_s"),
                    "cluster.lease_s",
                    x,
                    (MIN_LEASE_S, 3600),
                )?;
                x
            }
            None => DEFAULT_LEASE_S,
        };
        let prefix = self.take("cluster.prefix", c.prefix);
        if let Some(p) = &prefix
            && (p.trim_matches('/').is_empty() || p.chars().any(char::is_control))
        {
            return Err(ConfigError(format!(
                "{}: cluster.prefix: {:?} is not a key prefix (non-empty, no control characters)",
                self.origin_of("cluster.prefix"),
                excerpt(p)
            )));
        }
        let username = self.take("cluster.username", c.username);
        let password_file = self.take("cluster.password_file", c.password_file);
        if username.is_some() != password_file.is_some() {
            return Err(ConfigError(format!(
                "{}: cluster.username and cluster.password_file go together",
                self.origin_of(if username.is_some() {
                    "cluster.username"
                } else {
                    "cluster.password_file"
                })
            )));
        }
        let ca_file = self.take("cluster.ca_file", c.ca_file);
        let cert_file = self.take("cluster.cert_file", c.cert_file);
        let key_file = self.take("cluster.key_file", c.key_file);
        if cert_file.is_some() != key_file.is_some() {
            return Err(ConfigError(format!(
                "{}: cluster.cert_file and cluster.key_file go together",
                self.origin_of(if cert_file.is_some() {
                    "cluster.cert_file"
                } else {
                    "cluster.key_file"
                })
            )));
        }
        let tls = match (https > 0, ca_file) {
            (true, Some(ca_file)) => Some(ClusterTls {
                ca_file,
                client: cert_file.zip(key_file),
            }),
            (true, None) => {
                return Err(ConfigError(format!(
                    "{}: cluster.endpoints are https://: set cluster.ca_file to the CA that signed the members' certificates",
                    self.origin_of("cluster.endpoints")
                )));
            }
            (false, Some(_)) => {
                return Err(ConfigError(format!(
                    "{}: cluster.ca_file is set but the endpoints are http://: use https:// endpoints or remove it",
                    self.origin_of("cluster.ca_file")
                )));
            }
            (false, None) if cert_file.is_some() => {
                return Err(ConfigError(format!(
                    "{}: cluster.cert_file needs https:// endpoints and cluster.ca_file",
                    self.origin_of("cluster.cert_file")
                )));
            }
            (false, None) => None,
        };
        self.cfg.cluster = Some(ClusterCfg {
            engine,
            endpoints,
            lease_s,
            prefix,
            username,
            password_file,
            tls,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;
    use crate::config::{Overrides, resolve};

    fn parse(text: &str) -> Result<Option<ClusterCfg>, ConfigError> {
        resolve(
            Some((Path::new("/c.toml"), text)),
            &HashMap::new(),
            &Overrides::default(),
        )
        .map(|c| c.cluster)
    }

    #[test]
    fn without_the_table_there_is_no_cluster() {
        assert_eq!(parse("").unwrap(), None);
    }

    #[test]
    fn a_cluster_with_its_defaults() {
        let c = parse("[cluster]\nengine = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n")
            .unwrap()
            .unwrap();
        assert_eq!(c.lease_s, DEFAULT_LEASE_S);
        assert_eq!(c.key_prefix("o/r"), "afk/o/r/");
        let c = parse(
            "[cluster]\nengine = \"etcd\"\nendpoints = [\"http://a:1\", \"http://b:2/\"]\n\
             lease_s = 2\nprefix = \"/fleets/x/\"\nusername = \"u\"\npassword_file = \"/p\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.key_prefix("o/r"), "/fleets/x/");
        assert_eq!(c.username.as_deref(), Some("u"));
        assert_eq!(c.tls, None);
        let c = parse(
            "[cluster]\nengine = \"etcd\"\nendpoints = [\"https://a:1\"]\nca_file = \"/ca\"\n\
             cert_file = \"/c\"\nkey_file = \"/k\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.tls,
            Some(ClusterTls {
                ca_file: "/ca".into(),
                client: Some(("/c".into(), "/k".into()))
            })
        );
    }

    #[test]
    fn bad_tables_are_refused_naming_the_key() {
        for (text, words) in [
            ("[cluster]\n", "[cluster] is empty"),
            ("[cluster]\nendpoints = [\"http://a:1\"]\n", "needs engine"),
            ("[cluster]\nengine = \"zk\"\n", "/c.toml:2:"),
            (
                "[cluster]\nengine = \"etcd\"\n",
                "cluster.endpoints is empty",
            ),
            (
                "[cluster]\nengine = \"etcd\"\nendpoints = [\"https://a:1\"]\n",
                "set cluster.ca_file",
            ),
            (
                "[cluster]\nengine = \"etcd\"\nendpoints = [\"https://a:1\", \"http://b:1\"]\nca_file = \"/ca\"\n",
                "not both",
            ),
            (
                "[cluster]\nengine = \"etcd\"\nendpoints = [\"http://a:1\"]\nca_file = \"/ca\"\n",
                "use https:// endpoints",
            ),
            (
                "[cluster]\nengine = \"etcd\"\nendpoints = [\"https://a:1\"]\nca_file = \"/ca\"\ncert_file = \"/c\"\n",
                "cluster.cert_file and cluster.key_file go together",
            ),
            (
                "[cluster]\nengine = \"etcd\"\nendpoints = [\"a:1\"]\n",
                "expected http://host:port",
            ),
            (
                "[cluster]\nengine = \"etcd\"\nendpoints = [\"http://a:1\"]\nlease_s = 1\n",
                "cluster.lease_s = 1 is out of range (2..=3600)",
            ),
            (
                "[cluster]\nengine = \"etcd\"\nendpoints = [\"http://a:1\"]\nusername = \"u\"\n",
                "go together",
            ),
            (
                "[cluster]\nengine = \"etcd\"\nendpoints = [\"http://a:1\"]\ntls = true\n",
                "unknown field",
            ),
        ] {
            let e = parse(text).unwrap_err().0;
            assert!(e.contains(words), "{text:?}: {e}");
        }
    }
}
