//! The reconciler's side of the ledger: intents before effects, outcomes
//! after them, the audit trail, backups and keyed hashes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::SystemTime;

use super::backoff;

use crate::ledger::{
    next_drift_since, AuditEntry, AuditLog, AuditRotation, BackupStore, Digest, HashKey, Ledger,
    LedgerError, PauseRecord, ResourceRecord, State,
};
use crate::model::{Backup, Desired, Live, Observed, ResourceId, Spec};

/// Which resources are paused right now: the one pause rule. A resource is
/// paused by its own pause, or by the global one unless it was resumed while
/// the global pause lasts.
pub struct Paused {
    all: bool,
    ids: HashSet<String>,
    /// Resumed while the global pause lasts.
    excepted: HashSet<String>,
}

impl Paused {
    pub fn from_records(records: impl IntoIterator<Item = PauseRecord>) -> Paused {
        let mut p = Paused {
            all: false,
            ids: HashSet::new(),
            excepted: HashSet::new(),
        };
        for rec in records {
            match rec.id {
                None => p.all = true,
                Some(id) if rec.excepted => {
                    p.excepted.insert(id);
                }
                Some(id) => {
                    p.ids.insert(id);
                }
            }
        }
        p
    }

    pub fn is(&self, id: &ResourceId) -> bool {
        (self.all && !self.excepted.contains(id.as_str())) || self.ids.contains(id.as_str())
    }
}

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

/// How one resource came out of a pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub state: State,
    pub reason: Option<String>,
    /// tend wrote to it in this pass.
    pub applied: bool,
    /// Drift corrections inside the contested window, when this pass
    /// changed them.
    pub corrections: Option<Vec<SystemTime>>,
    /// When a failure is retried: set before recording only when not by
    /// the resource's own backoff (a failed hook retries all its resources
    /// together, at its own time); once recorded, the time its record was
    /// given, which the error policy ([`super::action_for`]) reads.
    pub retry_at: Option<SystemTime>,
}

impl Outcome {
    /// InSync, nothing written, nothing to remember: its record, once
    /// written, stays as it is.
    fn settled(&self) -> bool {
        self.state == State::InSync
            && self.reason.is_none()
            && !self.applied
            && self.corrections.is_none()
    }

    pub fn new(state: State, reason: Option<String>) -> Outcome {
        Outcome {
            state,
            reason,
            applied: false,
            corrections: None,
            retry_at: None,
        }
    }
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
        outcomes: &BTreeMap<ResourceId, Outcome>,
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

/// Whether [`next_record`] would give back `prev` unchanged, without
/// building it: a no-op pass compares every resource this way.
pub fn unchanged(prev: &ResourceRecord, o: &Outcome, now: SystemTime) -> bool {
    o.state != State::Failed
        && prev.state == o.state
        && prev.attempts == 0
        && prev.next_retry.is_none()
        && prev.reason == o.reason
        && !o.applied
        && next_drift_since(Some(prev), o.state, now) == prev.drift_since
        && o.corrections
            .as_ref()
            .is_none_or(|c| *c == prev.corrections)
}

/// The next record of a resource after a pass observed `o`.
pub fn next_record(
    prev: Option<&ResourceRecord>,
    id: &ResourceId,
    o: &Outcome,
    now: SystemTime,
) -> ResourceRecord {
    let attempts = match o.state {
        State::Failed => prev.map(|p| p.attempts).unwrap_or(0) + 1,
        _ => 0,
    };
    let next_retry = match o.state {
        State::Failed => Some(
            o.retry_at
                .unwrap_or_else(|| now + backoff::jittered(attempts)),
        ),
        _ => None,
    };
    ResourceRecord {
        id: id.to_string(),
        state: o.state,
        drift_since: next_drift_since(prev, o.state, now),
        attempts,
        reason: o.reason.clone(),
        next_retry,
        last_applied: if o.applied {
            Some(now)
        } else {
            prev.and_then(|p| p.last_applied)
        },
        corrections: o
            .corrections
            .clone()
            .unwrap_or_else(|| prev.map(|p| p.corrections.clone()).unwrap_or_default()),
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
mod tests {
    use std::time::Duration;

    use super::*;

    fn pause(id: Option<&str>, excepted: bool) -> PauseRecord {
        PauseRecord {
            id: id.map(String::from),
            until: None,
            excepted,
        }
    }

    #[test]
    fn the_pause_rule_at_its_boundaries() {
        let (a, b) = (
            ResourceId::new("files", "file", "a"),
            ResourceId::new("files", "file", "b"),
        );
        let none = Paused::from_records([]);
        assert!(!none.is(&a));
        let one = Paused::from_records([pause(Some(a.as_str()), false)]);
        assert!(one.is(&a) && !one.is(&b));
        let all = Paused::from_records([pause(None, false)]);
        assert!(all.is(&a) && all.is(&b));
        // Resumed under the global pause: corrected meanwhile.
        let except = Paused::from_records([pause(None, false), pause(Some(b.as_str()), true)]);
        assert!(except.is(&a) && !except.is(&b));
        // An exception alone pauses nothing.
        assert!(!Paused::from_records([pause(Some(a.as_str()), true)]).is(&a));
    }

    fn id(path: &str) -> ResourceId {
        ResourceId::from_string(format!("files/file/{path}"))
    }

    fn outcomes(items: &[(&str, State)]) -> BTreeMap<ResourceId, Outcome> {
        items
            .iter()
            .map(|(p, st)| (id(p), Outcome::new(*st, None)))
            .collect()
    }

    #[test]
    fn digests_read_at_once_or_one_by_one_agree() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = Recorder::open(Ledger::open(dir.path()).unwrap()).unwrap();
        let ids: Vec<ResourceId> = (0..100).map(|i| id(&format!("f{i}"))).collect();
        let answers = |rec: &Recorder, asked: usize| -> Vec<(Option<String>, Option<String>)> {
            let applied = rec.applied_digests(asked).unwrap();
            let blocked = rec.blocked_digests(asked).unwrap();
            ids.iter()
                .map(|id| (applied.get(id).unwrap(), blocked.get(id).unwrap()))
                .collect()
        };
        // Nothing recorded: both ways say so.
        assert!(answers(&rec, 1).iter().all(|a| *a == (None, None)));
        assert_eq!(answers(&rec, 1), answers(&rec, ids.len()));

        let digests: Vec<(ResourceId, String)> = ids
            .iter()
            .step_by(3)
            .map(|id| (id.clone(), format!("d-{id}")))
            .collect();
        rec.set_applied_digests(&digests).unwrap();
        rec.set_blocked_digest(&ids[7], "blocked-7").unwrap();
        rec.set_blocked_digest(&ids[8], "blocked-8").unwrap();
        // Applying clears a block.
        rec.set_applied_digests(&[(ids[8].clone(), "d-8".into())])
            .unwrap();
        let one_by_one = answers(&rec, 1);
        assert_eq!(one_by_one[3].0.as_deref(), Some("d-files/file/f3"));
        assert_eq!(one_by_one[4].0, None);
        assert_eq!(one_by_one[7].1.as_deref(), Some("blocked-7"));
        assert_eq!(
            one_by_one[8],
            (Some("d-8".into()), None),
            "applied, unblocked"
        );
        assert_eq!(answers(&rec, ids.len()), one_by_one, "read at once");
        assert!(rec.applied_digests(ids.len()).unwrap().all.is_some());
        assert!(rec.applied_digests(1).unwrap().all.is_none());
    }

    #[test]
    fn record_all_writes_changes_and_drops_only_uncovered_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = Recorder::open(Ledger::open(dir.path()).unwrap()).unwrap();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let previous_of = |rec: &Recorder| -> BTreeMap<String, ResourceRecord> {
            let rows = rec.ledger.resources().unwrap();
            rows.into_iter().map(|r| (r.id.clone(), r)).collect()
        };
        let first = outcomes(&[
            ("a", State::InSync),
            ("b", State::InSync),
            ("c/d", State::InSync),
            ("e", State::InSync),
        ]);
        rec.record_all(&first, Some(&BTreeMap::new()), now, true)
            .unwrap();
        assert_eq!(previous_of(&rec).len(), 4);
        // `a` and `e` are gone (first and last), `b` drifted, `bb` is new.
        let second = outcomes(&[
            ("b", State::Drifted),
            ("bb", State::InSync),
            ("c/d", State::InSync),
        ]);
        rec.record_all(&second, Some(&previous_of(&rec)), now, true)
            .unwrap();
        let after = previous_of(&rec);
        let ids: Vec<&str> = after.keys().map(String::as_str).collect();
        assert_eq!(ids, ["files/file/b", "files/file/bb", "files/file/c/d"]);
        assert_eq!(after["files/file/b"].state, State::Drifted);
        assert_eq!(after["files/file/b"].drift_since, Some(now));
        // A keyed pass keeps the records it does not cover.
        rec.record_all(&outcomes(&[("b", State::InSync)]), Some(&after), now, false)
            .unwrap();
        assert_eq!(previous_of(&rec).len(), 3);
        assert_eq!(previous_of(&rec)["files/file/b"].state, State::InSync);
    }

    #[test]
    fn a_settled_full_pass_is_not_read_again_until_a_record_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = Recorder::open(Ledger::open(dir.path()).unwrap()).unwrap();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ab = outcomes(&[("a", State::InSync), ("b", State::InSync)]);
        rec.record_all(&ab, None, now, true).unwrap();
        let marked = rec.ledger.records_settled().unwrap();
        assert!(marked.is_some(), "a settled full pass marks the records");
        // Changed behind the ledger's back (not through its writes), a
        // record is not read while the marker stands: the skip is real.
        let raw = rusqlite::Connection::open(rec.ledger.path()).unwrap();
        raw.execute(
            "UPDATE resources SET reason = 'tampered' WHERE id = 'files/file/b'",
            [],
        )
        .unwrap();
        rec.record_all(&ab, None, now, true).unwrap();
        let reason = |rec: &Recorder, id: &str| {
            let all = rec.ledger.resources().unwrap();
            all.into_iter().find(|r| r.id == id).unwrap().reason
        };
        assert_eq!(reason(&rec, "files/file/b").as_deref(), Some("tampered"));
        // Any write through the ledger removes the marker; the next full
        // pass reads every record and mends it.
        let mut a = rec.ledger.resources().unwrap().remove(0);
        a.state = State::Drifted;
        rec.ledger.put_resource(&a).unwrap();
        assert_eq!(rec.ledger.records_settled().unwrap(), None);
        rec.record_all(&ab, None, now, true).unwrap();
        assert_eq!(reason(&rec, "files/file/b"), None);
        let states: Vec<State> = rec
            .ledger
            .resources()
            .unwrap()
            .iter()
            .map(|r| r.state)
            .collect();
        assert_eq!(states, [State::InSync, State::InSync]);
        assert_eq!(rec.ledger.records_settled().unwrap(), marked);
        // Other identities: the marker does not match, records follow them.
        let ac = outcomes(&[("a", State::InSync), ("c", State::InSync)]);
        rec.record_all(&ac, None, now, true).unwrap();
        let ids: Vec<String> = rec
            .ledger
            .resources()
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, ["files/file/a", "files/file/c"]);
        assert!(rec.ledger.records_settled().unwrap().is_some());
        assert_ne!(rec.ledger.records_settled().unwrap(), marked);
        // A pass that is not settled leaves no marker.
        let drifted = outcomes(&[("a", State::InSync), ("c", State::Drifted)]);
        rec.record_all(&drifted, None, now, true).unwrap();
        assert_eq!(rec.ledger.records_settled().unwrap(), None);
        rec.record_all(&drifted, None, now, true).unwrap();
        assert_eq!(rec.ledger.records_settled().unwrap(), None);
    }

    #[test]
    fn record_all_reading_the_ledger_agrees_with_held_records() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let first = outcomes(&[
            ("a", State::InSync),
            ("b", State::InSync),
            ("c/d", State::Failed),
            ("e", State::InSync),
        ]);
        let second = outcomes(&[
            ("0", State::InSync),
            ("b", State::Drifted),
            ("bb", State::InSync),
            ("c/d", State::InSync),
        ]);
        let mut results = Vec::new();
        for streamed in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut rec = Recorder::open(Ledger::open(dir.path()).unwrap()).unwrap();
            rec.record_all(&first, None, now, true).unwrap();
            let held: BTreeMap<String, ResourceRecord> = rec
                .ledger
                .resources()
                .unwrap()
                .into_iter()
                .map(|r| (r.id.clone(), r))
                .collect();
            let previous = (!streamed).then_some(&held);
            rec.record_all(&second, previous, now, true).unwrap();
            results.push(rec.ledger.resources().unwrap());
        }
        let ids: Vec<&str> = results[1].iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "files/file/0",
                "files/file/b",
                "files/file/bb",
                "files/file/c/d"
            ]
        );
        assert_eq!(results[0], results[1]);
        assert_eq!(results[1][1].state, State::Drifted);
        assert_eq!(results[1][3].attempts, 0);
    }

    #[test]
    fn unchanged_agrees_with_next_record() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let earlier = now - Duration::from_secs(60);
        let id = ResourceId::from_string("files/file/a".into());
        let mut prevs = Vec::new();
        for state in State::ALL {
            for (drift, attempts, reason, retry, corrections) in [
                (None, 0, None, None, vec![]),
                (Some(earlier), 0, None, None, vec![]),
                (Some(earlier), 2, Some("EIO"), Some(now), vec![earlier]),
                (None, 0, Some("dry run"), None, vec![earlier]),
            ] {
                let mut r = ResourceRecord::new(id.as_str(), state);
                r.drift_since = drift;
                r.attempts = attempts;
                r.reason = reason.map(String::from);
                r.next_retry = retry;
                r.last_applied = Some(earlier);
                r.corrections = corrections;
                prevs.push(r);
            }
        }
        let mut outcomes = Vec::new();
        for state in State::ALL {
            for reason in [None, Some("dry run"), Some("EIO")] {
                for applied in [false, true] {
                    for corrections in [None, Some(vec![]), Some(vec![earlier])] {
                        let mut o = Outcome::new(state, reason.map(String::from));
                        o.applied = applied;
                        o.corrections = corrections;
                        outcomes.push(o);
                    }
                }
            }
        }
        let mut same = 0;
        for prev in &prevs {
            for o in &outcomes {
                let expected = next_record(Some(prev), &id, o, now) == *prev;
                assert_eq!(unchanged(prev, o, now), expected, "{prev:?} {o:?}");
                same += usize::from(expected);
            }
        }
        assert!(same > 0, "some outcomes leave the record as it was");
    }
}
