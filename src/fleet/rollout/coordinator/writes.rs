//! What the coordinator's task writes to etcd besides its lease: each
//! write a decision asks for, conditional on the keys it was decided
//! from, and the deletion of superseded revisions' keys.

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};

use super::{CycleError, Task};
use crate::fleet::rollout::decide::Write;
use crate::fleet::rollout::keys;

impl Task {
    /// Deletes the keys of revisions older than the [`keys::KEPT`] newest
    /// (never `wanted`'s): the rollout's keys stay bounded however many
    /// commits roll out.
    pub(super) async fn prune(&self, wanted: Option<&str>) -> Result<(), CycleError> {
        let Some(mut client) = self.client.clone() else {
            return Ok(());
        };
        let listed = self
            .timed(
                "list",
                client.get(
                    keys::revs_prefix(),
                    Some(GetOptions::new().with_prefix().with_keys_only()),
                ),
            )
            .await?;
        let created: Vec<(String, i64)> = listed
            .kvs()
            .iter()
            .filter_map(|kv| Some((kv.key_str().ok()?.to_string(), kv.create_revision())))
            .collect();
        let gone = keys::superseded(created.iter().map(|(k, at)| (k.as_str(), *at)), wanted);
        for rev in gone {
            self.timed(
                "prune",
                client.delete(
                    keys::rev_prefix(&rev),
                    Some(DeleteOptions::new().with_prefix()),
                ),
            )
            .await?;
            tracing::debug!(revision = %rev, "rollout: a superseded revision's keys deleted");
        }
        Ok(())
    }

    /// Writes `w`; whether it took (a conditional write whose compare
    /// failed did not).
    pub(super) async fn write(
        &self,
        client: &mut Client,
        lease: i64,
        w: &Write,
    ) -> Result<bool, CycleError> {
        let absent = |key: &str| Compare::create_revision(key, CompareOp::Equal, 0);
        let txn = match w {
            Write::Canaries { rev, hosts } => {
                let key = keys::canaries(rev);
                let value = serde_json::to_vec(hosts).expect("names");
                tracing::info!(revision = %rev, canaries = ?hosts, "rollout: canaries chosen");
                Txn::new()
                    .when(vec![absent(&key)])
                    .and_then(vec![TxnOp::put(key, value, None)])
            }
            Write::Report { rev, report } => {
                let key = keys::report(rev, &self.me.name);
                let value = serde_json::to_vec(report).expect("report");
                let put = PutOptions::new().with_lease(lease);
                return self
                    .timed("report", client.put(key, value, Some(put)))
                    .await
                    .map(|_| true);
            }
            Write::Halt(h) => {
                let (key, promoted) = (keys::halted(&h.revision), keys::promoted(&h.revision));
                let value = serde_json::to_vec(h).expect("halt");
                tracing::warn!(revision = %h.revision, reason = %h.reason, host = %h.host, "rollout: halted");
                Txn::new()
                    .when(vec![absent(&key), absent(&promoted)])
                    .and_then(vec![TxnOp::put(key, value, None)])
            }
            Write::Promote { rev } => {
                let (key, halted) = (keys::promoted(rev), keys::halted(rev));
                tracing::info!(revision = %rev, "rollout: canaries soaked; promoted");
                Txn::new()
                    .when(vec![absent(&key), absent(&halted)])
                    .and_then(vec![TxnOp::put(key, rev.as_bytes().to_vec(), None)])
            }
        };
        self.timed("write", client.txn(txn))
            .await
            .map(|r| r.succeeded())
    }
}
