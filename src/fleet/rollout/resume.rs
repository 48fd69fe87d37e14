//! `tend rollout resume`: lifts every halt. A halted revision is marked
//! promoted in the same transaction, so every host applies it: the
//! operator who resumes has decided the revision is good (a fixing commit
//! needs no resume; it starts its own rollout).

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};

use super::keys::{self, Halt, Snapshot};
use crate::config::FleetSettings;
use crate::target::etcd::{ClientError, Connection, Unreachable};

/// Why the halts could not be read or lifted.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
}

/// Lifts each halt; returns the halts lifted.
pub fn resume(fleet: &FleetSettings) -> Result<Vec<Halt>, ResumeError> {
    let conn = Connection::new(&fleet.etcd)?;
    let got = conn.call(|mut c| async move {
        c.get(
            format!("{}rev/", keys::PREFIX),
            Some(GetOptions::new().with_prefix()),
        )
        .await
    })?;
    let kvs: Vec<(String, Vec<u8>, i64)> = got
        .kvs()
        .iter()
        .filter_map(|kv| {
            let key = kv.key_str().ok()?.to_string();
            Some((key, kv.value().to_vec(), kv.mod_revision()))
        })
        .collect();
    let snap = Snapshot::from_kvs(kvs.iter().map(|(k, v, _)| (k.as_str(), v.as_slice())));
    let mut lifted = Vec::new();
    for halt in snap.revs.values().filter_map(|r| r.halted.clone()) {
        let key = keys::halted(&halt.revision);
        let Some(at) = kvs.iter().find(|(k, _, _)| *k == key).map(|kv| kv.2) else {
            continue;
        };
        let rev = halt.revision.clone();
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                at,
            )])
            .and_then(vec![
                TxnOp::delete(key, None),
                TxnOp::put(keys::promoted(&rev), rev.as_bytes().to_vec(), None),
            ]);
        let answer = conn.call(move |mut c| async move { c.txn(txn).await })?;
        if answer.succeeded() {
            lifted.push(halt);
        }
    }
    Ok(lifted)
}
