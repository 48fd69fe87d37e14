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

pub use client::{describe, ClientError, Connection, Unreachable};
pub use config::{AuthConfig, ClusterConfig, EtcdConfig, TlsConfig};
use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};

use crate::model::role::{Fence, NotLeader};
use crate::model::{Action, Backup, Change, ContentSource, Live, Observed, RelPath, Spec};
use crate::target::{Applied, ChangeSink, Probe, Subscription, Swept, Target, TargetError};
use value::Seen;

/// Most writes in one transaction: etcd refuses more than 128 operations
/// in one by default (`--max-txn-ops`).
const TXN_BATCH: usize = 128;

/// One key's write, ready for a transaction.
#[derive(Clone)]
struct Write {
    id: String,
    path: String,
    key: String,
    /// The key's observed revision (0: absent) it must still be at.
    revision: i64,
    /// The value to put; `None` deletes.
    put: Option<Vec<u8>>,
    backups: Vec<String>,
}

impl Write {
    fn applied(&self) -> Applied {
        Applied {
            writes: 1,
            backups: self.backups.clone(),
            left: None,
        }
    }

    fn fenced(&self, why: &NotLeader) -> TargetError {
        TargetError::Transient(format!("{}: {why}; nothing was written", self.id))
    }

    fn lost(&self) -> TargetError {
        TargetError::Transient(format!(
            "{}: changed by another writer since it was observed at revision {}; nothing was written, it is observed again",
            self.id, self.revision
        ))
    }
}

/// How a transaction ended.
enum Committed {
    /// Every compare held: all was written.
    Written,
    /// A key was changed by another writer: nothing was written.
    Lost,
    /// This replica may not write (`ha`): the leader key is gone or not
    /// its own, or its lease was not renewed in time. Nothing was written.
    Fenced(NotLeader),
}

/// The one kind this target serves.
pub use crate::model::KEY_KIND as KIND;

pub struct EtcdTarget {
    name: String,
    prefix: String,
    conn: Arc<Connection>,
    /// Each key as the last range read saw it: a write compares the
    /// revision of what its change was planned from.
    seen: Mutex<HashMap<String, Seen>>,
    /// What each of tend's own writes leaves at a key, until the watch has
    /// seen it: an event showing exactly that is no drift.
    echoes: watch::Echoes,
    /// The revision of the last range read: a watch begun later starts
    /// just after it, so no change between the two is missed.
    observed_at: Arc<std::sync::atomic::AtomicI64>,
    /// With `ha`, each write also compares the leader key's create
    /// revision with this replica's token.
    fence: Fence,
}

impl EtcdTarget {
    /// The target; nothing is connected until it is first used.
    pub fn build(name: &str, config: &EtcdConfig, fence: Fence) -> Result<EtcdTarget, ClientError> {
        Ok(EtcdTarget {
            name: name.to_string(),
            prefix: config.prefix.clone(),
            conn: Connection::new(&config.cluster())?,
            seen: Mutex::new(HashMap::new()),
            echoes: watch::Echoes::default(),
            observed_at: Arc::new(std::sync::atomic::AtomicI64::new(0)),
            fence,
        })
    }

    fn key(&self, path: &RelPath) -> String {
        format!("{}{}", self.prefix, path)
    }

    /// Every key under the prefix, relative to it, in one range read.
    fn read_all(&self) -> Result<HashMap<String, Seen>, client::Unreachable> {
        use std::sync::atomic::Ordering;
        let prefix = self.prefix.clone();
        let kvs = self.conn.call(move |c| async move {
            let mut kv = c
                .kv_client()
                .max_decoding_message_size(Connection::max_message());
            kv.get(prefix, Some(GetOptions::new().with_prefix())).await
        })?;
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

    /// What writing `change` takes: its compare, its operation, and the
    /// backup of what it overwrites (taken before the write).
    fn prepare(
        &self,
        change: &Change,
        content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Result<Write, TargetError> {
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
            _ => Some(value::desired(change, content)?),
        };
        let mut backups = Vec::new();
        if let Some(bytes) = &previous {
            let reference = backup
                .save(&change.id, bytes)
                .map_err(|e| TargetError::Transient(format!("{}: back up: {e}", change.id)))?;
            backups.push(reference);
        }
        Ok(Write {
            id: change.id.to_string(),
            path: change.path.as_str().to_string(),
            key: self.key(&change.path),
            revision,
            put,
            backups,
        })
    }

    /// One transaction of `writes`: all written, or none. With `ha` it
    /// also compares the leader key's create revision with this replica's
    /// token, and reads the leader key when a compare fails, to tell a
    /// lost leadership from another writer's change.
    fn commit(&self, writes: &[Write]) -> Result<Committed, client::Unreachable> {
        let token = match self.fence.token() {
            Ok(t) => t,
            Err(why) => return Ok(Committed::Fenced(why)),
        };
        let mut compares: Vec<Compare> = writes
            .iter()
            .map(|w| Compare::mod_revision(w.key.clone(), CompareOp::Equal, w.revision))
            .collect();
        if let Some(t) = &token {
            compares.push(Compare::create_revision(
                t.key.clone(),
                CompareOp::Equal,
                t.revision,
            ));
        }
        let ops: Vec<TxnOp> = writes
            .iter()
            .map(|w| match &w.put {
                Some(bytes) => TxnOp::put(w.key.clone(), bytes.clone(), None),
                None => TxnOp::delete(w.key.clone(), None),
            })
            .collect();
        for w in writes {
            self.echoes.writing(&w.path, w.put.as_deref());
        }
        let mut txn = Txn::new().when(compares).and_then(ops);
        if let Some(t) = &token {
            txn = txn.or_else(vec![TxnOp::get(t.key.clone(), None)]);
        }
        let answer = self
            .conn
            .call(move |mut c| async move { c.txn(txn).await })?;
        if answer.succeeded() {
            return Ok(Committed::Written);
        }
        let Some(t) = token else {
            return Ok(Committed::Lost);
        };
        let held = answer.op_responses().into_iter().any(|r| match r {
            TxnOpResponse::Get(g) => g
                .kvs()
                .first()
                .is_some_and(|kv| kv.create_revision() == t.revision),
            _ => false,
        });
        if held {
            return Ok(Committed::Lost);
        }
        self.fence.refused(&t);
        Ok(Committed::Fenced(NotLeader::Refused {
            key: String::from_utf8_lossy(&t.key).into_owned(),
            revision: t.revision,
        }))
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

    fn kinds(&self) -> Result<Vec<String>, TargetError> {
        Ok(vec![KIND.to_string()])
    }

    fn observe(&self, probes: &[Probe]) -> Vec<Observed> {
        let all = match self.read_all() {
            Ok(all) => all,
            Err(why) => return vec![Observed::Unknown(why.to_string()); probes.len()],
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
        let write = self.prepare(change, content, backup)?;
        match self.commit(std::slice::from_ref(&write)) {
            Ok(Committed::Written) => Ok(write.applied()),
            Ok(Committed::Lost) => Err(write.lost()),
            Ok(Committed::Fenced(why)) => Err(write.fenced(&why)),
            Err(e) => Err(TargetError::Transient(e.to_string())),
        }
    }

    /// Up to [`TXN_BATCH`] changes in one transaction, each still compared
    /// with its own observed revision: all are written, or none. When one
    /// of them lost to another writer, each is tried alone, so the others
    /// still go through and that one is told apart.
    fn apply_batch(
        &self,
        changes: &[&Change],
        content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Vec<Result<Applied, TargetError>> {
        let prepared: Vec<Result<Write, TargetError>> = changes
            .iter()
            .map(|c| self.prepare(c, content, backup))
            .collect();
        let mut out: Vec<Option<Result<Applied, TargetError>>> = vec![None; changes.len()];
        let ready: Vec<(usize, &Write)> = prepared
            .iter()
            .enumerate()
            .filter_map(|(i, w)| w.as_ref().ok().map(|w| (i, w)))
            .collect();
        for chunk in ready.chunks(TXN_BATCH) {
            let writes: Vec<Write> = chunk.iter().map(|(_, w)| (*w).clone()).collect();
            match self.commit(&writes) {
                Ok(Committed::Written) => {
                    for (i, w) in chunk {
                        out[*i] = Some(Ok(w.applied()));
                    }
                }
                // A lost leadership is no conflict to try again: nothing
                // of the batch is written.
                Ok(Committed::Fenced(why)) => {
                    for (i, w) in chunk {
                        out[*i] = Some(Err(w.fenced(&why)));
                    }
                }
                Ok(Committed::Lost) => {
                    for (i, w) in chunk {
                        out[*i] = Some(match self.commit(std::slice::from_ref(*w)) {
                            Ok(Committed::Written) => Ok(w.applied()),
                            Ok(Committed::Lost) => Err(w.lost()),
                            Ok(Committed::Fenced(why)) => Err(w.fenced(&why)),
                            Err(e) => Err(TargetError::Transient(e.to_string())),
                        });
                    }
                }
                Err(e) => {
                    for (i, _) in chunk {
                        out[*i] = Some(Err(TargetError::Transient(e.to_string())));
                    }
                }
            }
        }
        prepared
            .into_iter()
            .zip(out)
            .map(|(p, o)| match (p, o) {
                (Err(e), _) => Err(e),
                (Ok(_), Some(r)) => r,
                (Ok(_), None) => unreachable!("every prepared write is committed"),
            })
            .collect()
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
