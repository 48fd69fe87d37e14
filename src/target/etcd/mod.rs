//! The `etcd` target (SPEC §11): keys under a prefix, observed by one range
//! read, each written by one transaction that compares the revision it was
//! observed at, so another writer's change is seen, never overwritten
//! blindly. A cluster that does not answer (no quorum, unreachable, auth
//! refused) makes every key `Unknown`.

mod client;
mod config;
mod value;
mod watch;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use config::{AuthConfig, EtcdConfig, TlsConfig};
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};

use crate::model::{Action, Backup, Change, ContentSource, Live, Observed, RelPath, Spec};
use crate::target::{Applied, ChangeSink, Probe, Subscription, Swept, Target, TargetError};
use client::Connection;
use value::Seen;
pub use value::VALUE_MODE;

/// The one kind this target serves.
pub const KIND: &str = "key";

pub struct EtcdTarget {
    name: String,
    prefix: String,
    conn: Arc<Connection>,
    /// Each key as the last range read saw it: a write compares the
    /// revision of what its change was planned from.
    seen: Mutex<HashMap<String, Seen>>,
    /// The revision each of tend's own writes left at a key, until the
    /// watch has seen it: an event showing exactly that is no drift.
    echoes: watch::Echoes,
    /// The revision of the last range read: a watch begun later starts
    /// just after it, so no change between the two is missed.
    observed_at: Arc<std::sync::atomic::AtomicI64>,
}

impl EtcdTarget {
    /// The target; nothing is connected until it is first used.
    pub fn build(name: &str, config: &EtcdConfig) -> Result<EtcdTarget, String> {
        Ok(EtcdTarget {
            name: name.to_string(),
            prefix: config.prefix.clone(),
            conn: Connection::new(config)?,
            seen: Mutex::new(HashMap::new()),
            echoes: watch::Echoes::default(),
            observed_at: Arc::new(std::sync::atomic::AtomicI64::new(0)),
        })
    }

    fn key(&self, path: &RelPath) -> String {
        format!("{}{}", self.prefix, path)
    }

    /// Every key under the prefix, relative to it, in one range read.
    fn read_all(&self) -> Result<HashMap<String, Seen>, String> {
        use std::sync::atomic::Ordering;
        let prefix = self.prefix.clone();
        let kvs = self
            .conn
            .call(move |c| async move {
                let mut kv = c
                    .kv_client()
                    .max_decoding_message_size(Connection::max_message());
                kv.get(prefix, Some(GetOptions::new().with_prefix())).await
            })
            .map_err(|e| e.to_string())?;
        if let Some(h) = kvs.header() {
            self.observed_at.fetch_max(h.revision(), Ordering::Relaxed);
        }
        let mut out = HashMap::with_capacity(kvs.kvs().len());
        for kv in kvs.kvs() {
            let Some(rel) = kv.key().strip_prefix(self.prefix.as_bytes()) else {
                continue;
            };
            let Ok(rel) = std::str::from_utf8(rel) else {
                continue;
            };
            out.insert(
                rel.to_string(),
                Seen {
                    value: kv.value().to_vec(),
                    mod_revision: kv.mod_revision(),
                },
            );
        }
        Ok(out)
    }

    /// The revision the key must still be at for `change` to be written:
    /// 0 (absent) for a create, the observed one otherwise.
    fn expected(&self, change: &Change) -> Result<(i64, Option<Vec<u8>>), TargetError> {
        let moved = || {
            TargetError::Transient(format!(
                "{}: changed by another writer since it was observed; it is observed again",
                change.id
            ))
        };
        match &change.observed {
            Observed::Absent => Ok((0, None)),
            Observed::Unknown(why) => Err(TargetError::Transient(why.clone())),
            Observed::Present(Live::Structured { state, version }) => {
                let rev = version
                    .as_deref()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(moved)?;
                Ok((
                    rev,
                    Some(serde_json::to_vec(state).expect("JSON serializes")),
                ))
            }
            observed => {
                let seen = self.seen.lock().expect("seen lock");
                let s = seen
                    .get(change.path.as_str())
                    .filter(|s| value::still(observed, s))
                    .ok_or_else(moved)?;
                Ok((s.mod_revision, Some(s.value.clone())))
            }
        }
    }
}

impl Target for EtcdTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn kinds(&self) -> Result<Vec<String>, String> {
        Ok(vec![KIND.to_string()])
    }

    fn observe(&self, probes: &[Probe]) -> Vec<Observed> {
        let all = match self.read_all() {
            Ok(all) => all,
            Err(why) => return vec![Observed::Unknown(why); probes.len()],
        };
        let out = probes
            .iter()
            .map(|p| value::observe(all.get(p.path.as_str()), p.spec))
            .collect();
        *self.seen.lock().expect("seen lock") = all;
        out
    }

    fn read_live(&self, path: &RelPath) -> std::io::Result<Option<Vec<u8>>> {
        let key = self.key(path);
        let got = self
            .conn
            .call(move |mut c| async move { c.get(key, None).await })
            .map_err(std::io::Error::other)?;
        Ok(got.kvs().first().map(|kv| kv.value().to_vec()))
    }

    fn apply(
        &self,
        change: &Change,
        content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Result<Applied, TargetError> {
        if let Some(d) = &change.desired {
            if !matches!(d.spec, Spec::File(_) | Spec::Structured(_)) {
                return Err(TargetError::Terminal(format!(
                    "{}: kind {} is not served by an etcd target",
                    change.id,
                    d.spec.kind()
                )));
            }
        }
        let (revision, previous) = self.expected(change)?;
        let put = match change.action {
            Action::Delete => None,
            _ => Some(value::desired(change, content).map_err(TargetError::Terminal)?),
        };
        let mut backups = Vec::new();
        if let Some(bytes) = &previous {
            let reference = backup
                .save(&change.id, bytes)
                .map_err(|e| TargetError::Transient(format!("{}: back up: {e}", change.id)))?;
            backups.push(reference);
        }
        let key = self.key(&change.path);
        let op = match put {
            Some(bytes) => TxnOp::put(key.clone(), bytes, None),
            None => TxnOp::delete(key.clone(), None),
        };
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                revision,
            )])
            .and_then(vec![op]);
        let answer = self
            .conn
            .call(move |mut c| async move { c.txn(txn).await })
            .map_err(|e| TargetError::Transient(e.to_string()))?;
        if !answer.succeeded() {
            return Err(TargetError::Transient(format!(
                "{}: changed by another writer since it was observed at revision {revision}; nothing was written, it is observed again",
                change.id
            )));
        }
        if let Some(h) = answer.header() {
            self.echoes.wrote(change.path.as_str(), h.revision());
        }
        Ok(Applied {
            writes: 1,
            backups,
            left: None,
        })
    }

    fn clean_temp(&self, _paths: &[&RelPath]) -> Swept {
        Swept::default()
    }

    fn subscribe(&self, sink: ChangeSink, watch: bool) -> Option<Box<dyn Subscription>> {
        // Without watching, etcd tells tend nothing: there is no sink to feed.
        if !watch {
            return None;
        }
        let from = self.observed_at.load(std::sync::atomic::Ordering::Relaxed);
        let w = watch::Watch {
            conn: self.conn.clone(),
            prefix: self.prefix.clone(),
            echoes: self.echoes.clone(),
            sink,
        };
        Some(Box::new(w.start(from)))
    }
}
