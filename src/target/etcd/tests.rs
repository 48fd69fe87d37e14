//! The etcd target against a real one-member etcd (Debian's etcd-server):
//! a writer between observe and write, and an unreachable cluster.

#[path = "../../../tests/util/certs.rs"]
#[allow(dead_code)]
mod certs;
#[path = "../../../tests/util/ports.rs"]
mod ports;
#[path = "../../../tests/util/etcd.rs"]
#[allow(dead_code)]
mod server;

use std::collections::HashMap;
use std::sync::Mutex;

use git2::Oid;

use super::{EtcdConfig, EtcdTarget};
use crate::duration::Dur;
use crate::model::role::{Fence, Token};
use crate::model::{
    blob_id, Action, Backup, Change, ContentSource, Desired, Field, FileSpec, Observed, RelPath,
    ResourceId, Spec,
};
use crate::target::{Probe, Target, TargetError};

/// Whether the test may go on: etcd is installed, or it is not and this
/// is neither CI nor root (where scripts/test installs it).
fn etcd_here() -> bool {
    crate::test_gate::can_run(
        server::installed(),
        "etcd is not installed (etcd-server, etcd-client)",
    )
}

#[derive(Default)]
struct Backups(Mutex<Vec<Vec<u8>>>);
impl Backup for Backups {
    fn save(&self, _id: &ResourceId, bytes: &[u8]) -> std::io::Result<String> {
        let mut b = self.0.lock().unwrap();
        b.push(bytes.to_vec());
        Ok(format!("backup-{}", b.len()))
    }
}

struct Content(HashMap<Oid, Vec<u8>>);
impl ContentSource for Content {
    fn read(&self, blob: Oid) -> std::io::Result<Vec<u8>> {
        self.0
            .get(&blob)
            .cloned()
            .ok_or_else(|| std::io::Error::other("no blob"))
    }
}

fn config(endpoint: String) -> EtcdConfig {
    EtcdConfig {
        endpoints: vec![endpoint],
        prefix: "/app/".into(),
        auth: None,
        tls: None,
        timeout: Dur(std::time::Duration::from_secs(2)),
    }
}

fn value(key: &str, bytes: &[u8]) -> Desired {
    let id = ResourceId::new("kv", "key", key);
    Desired::new(
        id,
        RelPath::parse(key).unwrap().as_str(),
        Spec::File(FileSpec {
            blob: blob_id(bytes),
            size: bytes.len() as u64,
            mode: crate::model::VALUE_MODE,
            uid: None.into(),
            gid: None.into(),
            secret: false,
        }),
        Default::default(),
        false,
        false,
    )
}

fn observe(t: &EtcdTarget, d: &Desired) -> Observed {
    let probe = Probe {
        id: &d.id,
        path: d.path(),
        spec: Some(&d.spec),
    };
    t.observe(&[probe]).remove(0)
}

fn update(d: &Desired, observed: Observed) -> Change {
    Change {
        id: d.id.clone(),
        target: "kv".into(),
        path: d.path(),
        action: Action::Update,
        fields: vec![Field::Content],
        desired: Some(d.clone()),
        observed,
    }
}

#[test]
fn a_writer_between_observe_and_write_is_not_overwritten() {
    if !etcd_here() {
        return;
    }
    let etcd = server::Etcd::start();
    etcd.put("/app/flags", "old");
    let t = EtcdTarget::build("kv", &config(etcd.endpoint()), Fence::off()).unwrap();
    let want = value("flags", b"declared");
    let content = Content([(blob_id(b"declared"), b"declared".to_vec())].into());
    let observed = observe(&t, &want);
    assert!(matches!(observed, Observed::Present(_)), "{observed:?}");
    // Another writer, after tend looked and before it writes.
    etcd.put("/app/flags", "theirs");
    let before = etcd.revision();
    let backups = Backups::default();
    let err = t
        .apply(&update(&want, observed), &content, &backups)
        .unwrap_err();
    assert!(
        matches!(&err, TargetError::Transient(m) if m.contains("another writer")),
        "{err:?}"
    );
    assert_eq!(etcd.get("/app/flags").as_deref(), Some("theirs"));
    assert_eq!(etcd.revision(), before, "nothing was written");
    // Observed again, the write goes through, and the overwritten value
    // is the one backed up.
    let observed = observe(&t, &want);
    let applied = t
        .apply(&update(&want, observed), &content, &backups)
        .unwrap();
    assert_eq!(applied.writes, 1);
    assert_eq!(etcd.get("/app/flags").as_deref(), Some("declared"));
    assert_eq!(backups.0.lock().unwrap().last().unwrap(), b"theirs");
}

#[test]
fn a_create_loses_to_a_key_made_meanwhile() {
    if !etcd_here() {
        return;
    }
    let etcd = server::Etcd::start();
    let t = EtcdTarget::build("kv", &config(etcd.endpoint()), Fence::off()).unwrap();
    let want = value("new", b"declared");
    let content = Content([(blob_id(b"declared"), b"declared".to_vec())].into());
    assert_eq!(observe(&t, &want), Observed::Absent);
    etcd.put("/app/new", "theirs");
    let mut change = update(&want, Observed::Absent);
    change.action = Action::Create;
    let err = t.apply(&change, &content, &Backups::default()).unwrap_err();
    assert!(matches!(err, TargetError::Transient(_)), "{err:?}");
    assert_eq!(etcd.get("/app/new").as_deref(), Some("theirs"));
}

#[test]
fn an_unreachable_cluster_is_unknown() {
    if !etcd_here() {
        return;
    }
    let mut etcd = server::Etcd::start();
    let t = EtcdTarget::build("kv", &config(etcd.endpoint()), Fence::off()).unwrap();
    let want = value("flags", b"x");
    assert_eq!(observe(&t, &want), Observed::Absent);
    etcd.kill();
    let observed = observe(&t, &want);
    assert!(
        matches!(&observed, Observed::Unknown(why) if why.contains("etcd")),
        "{observed:?}"
    );
    etcd.resume();
    assert!(server::wait(10, || observe(&t, &want) == Observed::Absent));
}

#[test]
fn a_batch_writes_the_others_when_one_lost_to_another_writer() {
    if !etcd_here() {
        return;
    }
    let etcd = server::Etcd::start();
    let t = EtcdTarget::build("kv", &config(etcd.endpoint()), Fence::off()).unwrap();
    let wants: Vec<Desired> = ["a", "b", "c"].iter().map(|k| value(k, b"v")).collect();
    let content = Content([(blob_id(b"v"), b"v".to_vec())].into());
    let changes: Vec<Change> = wants
        .iter()
        .map(|w| {
            let mut c = update(w, observe(&t, w));
            c.action = Action::Create;
            c
        })
        .collect();
    etcd.put("/app/b", "theirs");
    let refs: Vec<&Change> = changes.iter().collect();
    let results = t.apply_batch(&refs, &content, &Backups::default());
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(
        matches!(results[1], Err(TargetError::Transient(_))),
        "{results:?}"
    );
    assert_eq!(etcd.get("/app/a").as_deref(), Some("v"));
    assert_eq!(etcd.get("/app/b").as_deref(), Some("theirs"));
    assert_eq!(etcd.get("/app/c").as_deref(), Some("v"));
    // Nothing in the way: one transaction for all.
    let before = etcd.revision();
    let wants: Vec<Desired> = ["d", "e"].iter().map(|k| value(k, b"v")).collect();
    let changes: Vec<Change> = wants
        .iter()
        .map(|w| {
            let mut c = update(w, observe(&t, w));
            c.action = Action::Create;
            c
        })
        .collect();
    let refs: Vec<&Change> = changes.iter().collect();
    let results = t.apply_batch(&refs, &content, &Backups::default());
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(etcd.revision(), before + 1, "one transaction");
}

#[test]
fn with_ha_a_write_is_fenced_by_the_leader_key_in_the_same_transaction() {
    if !etcd_here() {
        return;
    }
    let etcd = server::Etcd::start();
    etcd.put("/tend/web/leader", "web-1");
    let token = Token {
        key: b"/tend/web/leader".to_vec(),
        revision: etcd.revision(),
    };
    let fence = Fence::on("web-1");
    fence.lead(
        token.clone(),
        std::time::Instant::now() + std::time::Duration::from_secs(60),
    );
    let t = EtcdTarget::build("kv", &config(etcd.endpoint()), fence.clone()).unwrap();
    let content = Content(
        [
            (blob_id(b"one"), b"one".to_vec()),
            (blob_id(b"two"), b"two".to_vec()),
        ]
        .into(),
    );
    let one = value("flags", b"one");
    let observed = observe(&t, &one);
    let create = Change {
        action: Action::Create,
        ..update(&one, observed)
    };
    t.apply(&create, &content, &Backups::default()).unwrap();
    assert_eq!(etcd.get("/app/flags").as_deref(), Some("one"));
    // Another replica's key now: the lease ran out and someone else won.
    etcd.ctl(&["del", "/tend/web/leader"]);
    etcd.put("/tend/web/leader", "web-2");
    let two = value("flags", b"two");
    let observed = observe(&t, &two);
    let before = etcd.revision();
    let err = t
        .apply(&update(&two, observed), &content, &Backups::default())
        .unwrap_err();
    assert!(
        matches!(&err, TargetError::Transient(m) if m.contains("not the leader")),
        "{err:?}"
    );
    assert_eq!(etcd.get("/app/flags").as_deref(), Some("one"));
    assert_eq!(etcd.revision(), before, "nothing was written");
    assert!(!fence.may_write(), "the refusal makes the replica follow");
    assert!(fence.take_refused());
    // A follower sends nothing at all.
    let observed = observe(&t, &two);
    let err = t
        .apply(&update(&two, observed), &content, &Backups::default())
        .unwrap_err();
    assert!(matches!(&err, TargetError::Transient(m) if m.contains("not the leader")));
    assert_eq!(etcd.revision(), before);
}
