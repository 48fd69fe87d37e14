//! The `etcd` target's block in the config: `{type: etcd, endpoints: [URL],
//! prefix: /app/, auth: {user, password_file}, tls: {ca_file, cert_file,
//! key_file}, timeout: 5s}`. Its fields alone; a key of another adapter is
//! an unknown key here. [`ClusterConfig`] is the connection part alone, as
//! `ha.etcd` names the cluster replicas elect a writer on.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::duration::Dur;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdConfig {
    /// The cluster's client URLs (`http://` or, with `tls`, `https://`).
    pub endpoints: Vec<String>,
    /// Every key tend touches is under it; declared keys are relative to it.
    pub prefix: String,
    #[serde(default)]
    pub auth: Option<AuthConfig>,
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Bound on one call to the cluster (connecting included): past it the
    /// keys asked about are unknown, nothing is written.
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
}

/// etcd's own users: the password is read from a file, never the config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    pub user: String,
    pub password_file: PathBuf,
}

/// The cluster's CA, and a client certificate when the cluster asks for one.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// How to reach a cluster: what the target's block and `ha.etcd` share.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub endpoints: Vec<String>,
    #[serde(default)]
    pub auth: Option<AuthConfig>,
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
}

fn default_timeout() -> Dur {
    Dur(Duration::from_secs(5))
}

impl EtcdConfig {
    /// The connection part of the block.
    pub fn cluster(&self) -> ClusterConfig {
        ClusterConfig {
            endpoints: self.endpoints.clone(),
            auth: self.auth.clone(),
            tls: self.tls.clone(),
            timeout: self.timeout,
        }
    }

    /// What is wrong with the block, without reading a file or connecting:
    /// each problem with the key of the block it is about.
    pub fn validate(&self) -> Vec<(&'static str, String)> {
        let mut problems = self.cluster().validate();
        if !self.prefix.starts_with('/') || !self.prefix.ends_with('/') {
            problems.push((
                "prefix",
                format!(
                    "`prefix` {:?} must start and end with `/` (like /app/config/), so no key outside it can match",
                    self.prefix
                ),
            ));
        }
        problems
    }
}

impl ClusterConfig {
    /// What is wrong with the connection settings, without reading a file
    /// or connecting: each problem with its key.
    pub fn validate(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.endpoints.is_empty() {
            problems.push((
                "endpoints",
                "`endpoints` needs at least one URL".to_string(),
            ));
        }
        for e in &self.endpoints {
            let scheme_ok = e.starts_with("http://") || e.starts_with("https://");
            if !scheme_ok {
                problems.push((
                    "endpoints",
                    format!("endpoint {e:?} must be an http:// or https:// URL"),
                ));
            } else if e.starts_with("https://") && self.tls.is_none() {
                problems.push((
                    "endpoints",
                    format!("endpoint {e:?} is https:// but there is no `tls`"),
                ));
            }
        }
        if let Some(a) = &self.auth {
            if a.user.is_empty() {
                problems.push(("auth.user", "`auth.user` is empty".to_string()));
            }
            if a.password_file.as_os_str().is_empty() {
                problems.push((
                    "auth.password_file",
                    "`auth.password_file` is empty".to_string(),
                ));
            }
        }
        if let Some(t) = &self.tls {
            if t.cert_file.is_some() != t.key_file.is_some() {
                problems.push((
                    "tls.cert_file",
                    "`tls.cert_file` and `tls.key_file` go together".to_string(),
                ));
            }
        }
        if self.timeout.0.is_zero() {
            problems.push(("timeout", "`timeout` must be more than zero".to_string()));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::EtcdConfig;

    fn parse(yaml: &str) -> Result<EtcdConfig, serde_yaml::Error> {
        serde_yaml::from_str(yaml)
    }

    #[test]
    fn a_minimal_block_is_valid() {
        let c = parse("endpoints: [http://127.0.0.1:2379]\nprefix: /app/\n").unwrap();
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        assert_eq!(c.timeout.0, std::time::Duration::from_secs(5));
    }

    #[test]
    fn every_problem_is_named_at_once() {
        let c = parse(
            "endpoints: [ftp://x, https://y]\nprefix: app\nauth: {user: '', password_file: ''}\ntls: {cert_file: c}\n",
        )
        .unwrap();
        let p = c.validate();
        assert_eq!(p.len(), 5, "{p:?}");
        assert!(p.iter().any(|(_, m)| m.contains("ftp://x")), "{p:?}");
        assert!(p.iter().any(|(k, _)| *k == "prefix"), "{p:?}");
        assert!(p.iter().any(|(_, m)| m.contains("go together")), "{p:?}");
    }

    #[test]
    fn keys_of_other_adapters_are_refused() {
        let e = parse("endpoints: [http://a:1]\nprefix: /a/\nroot: /srv\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `root`"), "{e}");
    }
}
