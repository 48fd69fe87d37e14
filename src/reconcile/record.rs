//! The reconciler's side of the ledger: intents before effects, outcomes
//! after them, the audit trail, backups and keyed hashes.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use super::outcome::{next_record, unchanged, Outcome};
use super::pause::Paused;

use crate::ledger::{
    AuditEntry, AuditLog, AuditRotation, BackupStore, Digest, HashKey, Ledger, LedgerError,
    ResourceRecord,
};
use crate::model::{Backup, Desired, Live, Observed, ResourceId, Spec};

pub struct Recorder {
    pub ledger: Ledger,
    backups: BackupStore,
    audit: AuditLog,
    key: HashKey,
    /// The ledger holds [`TEMP_SWEPT`]: no temp file of tend's is left.
    swept: bool,
    /// A target was asked to write since this recorder was opened.
    touched: bool,
    /// Each failing hook's backoff.
    pub(super) hook_retries: super::hooks::Retries,
}

/// Asked about fewer identities than this, a pass looks each digest up.
const ASKED_FEW: usize = 64;
/// Up to this many digests of a kind, and no more than [`READ_PER_ASKED`]
/// per identity asked about, a pass asking about many reads them all at
/// once (none at all, on a first sync); beyond, it looks each up.
const READ_WHOLE: u64 = 4096;
const READ_PER_ASKED: u64 = 4;

/// The applied or blocked digests, as one pass looks them up.
pub struct Digests<'r> {
    ledger: &'r Ledger,
    which: Digest,
    /// All of them, when read at once.
    all: Option<HashMap<String, String>>,
}

impl Digests<'_> {
    pub fn get(&self, id: &ResourceId) -> Result<Option<String>, LedgerError> {
        match &self.all {
            Some(all) => Ok(all.get(id.as_str()).cloned()),
            None => self.ledger.digest(self.which, id.as_str()),
        }
    }
}

/// The fields of a structured resource tend set (its managed fields, as
/// server-side apply keeps them): what it removes when a declaration drops
/// them. Empty when tend never set any.
pub fn managed_fields(ledger: &Ledger, id: &ResourceId) -> Result<Vec<String>, LedgerError> {
    let Some(raw) = ledger.managed_fields(id.as_str())? else {
        return Ok(Vec::new());
    };
    serde_json::from_str(&raw).map_err(|e| LedgerError::Corrupt {
        path: ledger.path().to_path_buf(),
        detail: format!("managed fields of {id}: {e}"),
    })
}

/// In the intent transaction before a batch of writes: temp files may be
/// left from here on, until the next sweep.
pub fn clear_temp_swept(tx: &crate::ledger::Tx<'_>) -> Result<(), LedgerError> {
    tx.set_temp_swept(false)
}

impl Recorder {
    pub fn open(ledger: Ledger) -> Result<Recorder, LedgerError> {
        let dir = ledger.state_dir().to_path_buf();
        Ok(Recorder {
            backups: BackupStore::new(&dir)?,
            audit: AuditLog::open(&dir)?,
            key: HashKey::load_or_create(&dir)?,
            swept: ledger.temp_swept()?,
            touched: false,
            hook_retries: Default::default(),
            ledger,
        })
    }

    /// Just before a target is asked to write.
    pub(super) fn touching(&mut self) {
        self.touched = true;
    }

    /// Whether any target may have been changed since this recorder was
    /// opened: an error before then changed nothing.
    pub fn touched(&self) -> bool {
        self.touched
    }

    /// No temp file of tend's is left beside managed paths: none was made
    /// since a sweep that left none.
    pub fn temp_swept(&self) -> bool {
        self.swept
    }

    /// Records a sweep that left no temp files.
    pub fn mark_temp_swept(&mut self) -> Result<(), LedgerError> {
        if !self.swept {
            self.ledger.set_temp_swept(true)?;
            self.swept = true;
        }
        Ok(())
    }

    /// After [`clear_temp_swept`] committed.
    pub fn temp_swept_cleared(&mut self) {
        self.swept = false;
    }

    /// The pauses in force at `now`: one that ran out pauses nothing.
    pub fn paused(&self, now: SystemTime) -> Result<Paused, LedgerError> {
        Ok(Paused::from_records(self.ledger.pauses_at(now)?))
    }

    /// The digests of the declarations resources were last applied from,
    /// for a pass about to ask about `asked` identities.
    pub fn applied_digests(&self, asked: usize) -> Result<Digests<'_>, LedgerError> {
        self.digests(Digest::Applied, asked)
    }

    /// The declarations terminal errors blocked; each stays blocked until
    /// its declaration changes.
    pub fn blocked_digests(&self, asked: usize) -> Result<Digests<'_>, LedgerError> {
        self.digests(Digest::Blocked, asked)
    }

    fn digests(&self, which: Digest, asked: usize) -> Result<Digests<'_>, LedgerError> {
        let mut digests = Digests {
            ledger: &self.ledger,
            which,
            all: None,
        };
        let most = READ_WHOLE.min(READ_PER_ASKED.saturating_mul(asked as u64));
        if asked >= ASKED_FEW && self.ledger.digest_count(which, most + 1)? <= most {
            digests.all = Some(self.ledger.digests(which)?.into_iter().collect());
        }
        Ok(digests)
    }

    pub fn set_blocked_digest(&self, id: &ResourceId, digest: &str) -> Result<(), LedgerError> {
        self.ledger.set_blocked_digest(id.as_str(), digest)
    }

    pub fn set_managed(&self, id: &ResourceId, fields: &[String]) -> Result<(), LedgerError> {
        let text = serde_json::to_string(fields).expect("strings serialize");
        self.ledger.set_managed_fields(id.as_str(), &text)
    }

    /// Drops everything tend knew of identities it no longer manages.
    pub fn forget_all(&mut self, ids: &[ResourceId]) -> Result<(), LedgerError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.ledger.transaction(|tx| {
            for id in ids {
                tx.inventory_remove(id.as_str())?;
                tx.remove_resource(id.as_str())?;
                tx.forget_declared(id.as_str())?;
            }
            Ok(())
        })
    }

    /// Remembers what was applied, for many resources in one transaction.
    pub fn set_applied_digests(
        &mut self,
        digests: &[(ResourceId, String)],
    ) -> Result<(), LedgerError> {
        if digests.is_empty() {
            return Ok(());
        }
        self.ledger.transaction(|tx| {
            for (id, digest) in digests {
                tx.set_applied_digest(id.as_str(), digest)?;
            }
            Ok(())
        })
    }

    /// Sets the bounds the audit log is kept within.
    pub fn set_audit_rotation(&self, rotation: AuditRotation) {
        self.audit.set_rotation(rotation);
    }

    /// Rotates and trims the audit log if its bounds say so.
    pub fn maintain_audit(&self) -> Result<(), LedgerError> {
        self.audit.maintain()
    }

    pub fn audit_all(&self, entries: &[AuditEntry]) -> Result<(), LedgerError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.audit.append_all(entries)
    }

    pub fn backups(&self) -> &dyn Backup {
        &self.backups
    }

    pub fn backup_store(&self) -> &BackupStore {
        &self.backups
    }

    /// The state dir's key for hashes of sensitive content.
    pub fn hash_key(&self) -> &HashKey {
        &self.key
    }

    /// The hash shown for live content: a keyed hash of its blob id when
    /// sensitive, so nothing about the content can be checked without the key.
    pub fn hash_observed(&self, observed: &Observed, sensitive: bool) -> Option<String> {
        match observed {
            Observed::Present(Live::File { blob, .. }) if sensitive => {
                Some(self.key.hash(blob.as_bytes()))
            }
            Observed::Present(Live::File { blob, .. }) => Some(format!("git:{blob}")),
            Observed::Present(Live::Symlink { target }) if !sensitive => {
                Some(format!("symlink:{target}"))
            }
            Observed::Present(Live::Structured { state, .. }) => {
                Some(self.object_hash(state, sensitive))
            }
            _ => None,
        }
    }

    pub fn hash_desired(&self, d: &Desired) -> String {
        match &d.spec {
            Spec::File(f) if d.sensitive => self.key.hash(f.blob.as_bytes()),
            Spec::File(f) => format!("git:{}", f.blob),
            Spec::Symlink { target } => format!("symlink:{target}"),
            Spec::Structured(s) => self.object_hash(&s.spec, d.sensitive),
        }
    }

    /// A structured object's hash: of its JSON text, keyed when sensitive.
    fn object_hash(&self, value: &serde_json::Value, sensitive: bool) -> String {
        use sha2::Digest;
        let text = value.to_string();
        if sensitive {
            self.key.hash(text.as_bytes())
        } else {
            format!(
                "json:{}",
                hex::encode(sha2::Sha256::digest(text.as_bytes()))
            )
        }
    }

    /// Writes every outcome of a pass (only records that change); the drift
    /// ledger keeps `drift_since` from the first observation of a divergence
    /// until it is InSync again. A full pass also drops the records of
    /// identities it no longer covers. `previous` holds the records of the
    /// pass's scope; `None` means every record, read one at a time from the
    /// ledger while pairing (a full pass does not hold them all). Returns
    /// the retry time each failure's record was given, by identity.
    pub fn record_all(
        &mut self,
        outcomes: &super::Outcomes,
        previous: Option<&BTreeMap<String, ResourceRecord>>,
        now: SystemTime,
        drop_stale: bool,
    ) -> Result<HashMap<String, SystemTime>, LedgerError> {
        // A full pass that found everything settled, over the identities
        // whose records the ledger says are settled and untouched since,
        // has nothing to write: the records are not read.
        let settled = (previous.is_none() && drop_stale && outcomes.values().all(Outcome::settled))
            .then(|| identities_digest(outcomes.keys()));
        if let Some(digest) = &settled {
            if self.ledger.records_settled()?.as_deref() == Some(digest.as_str()) {
                return Ok(HashMap::new());
            }
        }
        let mut pairing = Pairing {
            outcomes: outcomes.iter().peekable(),
            now,
            writes: Vec::new(),
            stale: Vec::new(),
        };
        match previous {
            Some(map) => map.values().for_each(|r| pairing.older(r)),
            None => self.ledger.for_each_resource(|r| {
                pairing.older(&r);
                Ok(())
            })?,
        }
        let (writes, mut stale) = pairing.finish();
        if !drop_stale {
            stale.clear();
        }
        // Every failure is written (no failed record is left unchanged).
        let retries = writes
            .iter()
            .filter_map(|r| Some((r.id.clone(), r.next_retry?)))
            .collect();
        if writes.is_empty() && stale.is_empty() {
            if let Some(digest) = &settled {
                self.ledger.settle_records(digest)?;
            }
            return Ok(retries);
        }
        self.ledger.transaction(|tx| {
            for r in &writes {
                tx.put_resource(r)?;
            }
            for id in &stale {
                tx.remove_resource(id)?;
            }
            // Written from settled outcomes, with the stale ones gone, the
            // records are settled and are exactly the outcomes' identities.
            if let Some(digest) = &settled {
                tx.settle_records(digest)?;
            }
            Ok(())
        })?;
        Ok(retries)
    }
}

/// Names a set of identities (given in order): their count and the SHA-256
/// of them all, so no crafted set of paths can pass for another.
fn identities_digest<'a>(ids: impl Iterator<Item = &'a ResourceId>) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut count = 0u64;
    for id in ids {
        h.update(id.as_str().as_bytes());
        h.update([0]);
        count += 1;
    }
    format!("{count}:{}", hex::encode(h.finalize()))
}

/// Pairs a pass's outcomes with the previous records, both in identity
/// order, one record at a time: what changed is kept to be written, and the
/// records no outcome covers are kept (their identities only) as stale.
struct Pairing<'a, I: Iterator<Item = (&'a ResourceId, &'a Outcome)>> {
    outcomes: std::iter::Peekable<I>,
    now: SystemTime,
    writes: Vec<ResourceRecord>,
    stale: Vec<String>,
}

impl<'a, I: Iterator<Item = (&'a ResourceId, &'a Outcome)>> Pairing<'a, I> {
    /// The next previous record, in identity order.
    fn older(&mut self, old: &ResourceRecord) {
        let now = self.now;
        while let Some((id, o)) = self
            .outcomes
            .next_if(|(id, _)| id.as_str() < old.id.as_str())
        {
            self.writes.push(next_record(None, id, o, now));
        }
        match self
            .outcomes
            .next_if(|(id, _)| id.as_str() == old.id.as_str())
        {
            Some((_, o)) if unchanged(old, o, now) => {}
            Some((id, o)) => self.writes.push(next_record(Some(old), id, o, now)),
            None => self.stale.push(old.id.clone()),
        }
    }

    fn finish(mut self) -> (Vec<ResourceRecord>, Vec<String>) {
        for (id, o) in self.outcomes {
            self.writes.push(next_record(None, id, o, self.now));
        }
        (self.writes, self.stale)
    }
}

/// Records the fields of a structured resource that tend now manages (its
/// declared fields, once live state holds them), when they changed.
pub(super) fn claim_fields(
    rec: &Recorder,
    d: &Desired,
    before: Option<&Vec<String>>,
) -> Result<(), LedgerError> {
    if let Spec::Structured(s) = &d.spec {
        let now = crate::ownership::managed_fields(&s.spec);
        if before != Some(&now) {
            rec.set_managed(&d.id, &now)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
