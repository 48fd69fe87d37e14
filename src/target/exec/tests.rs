//! The exec target against real plugin processes (the fixture plugins in
//! fixtures/plugins), and the protocol's line parser.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::protocol::{parse_line, Incoming, ObjectRef, ProtocolError};
use super::*;
use crate::model::{Desired, StructuredSpec};

fn plugin(name: &str) -> String {
    format!("{}/fixtures/plugins/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn desired(target: &str, kind: &str, name: &str, spec: Value) -> Desired {
    Desired::new(
        ResourceId::new(target, kind, name),
        RelPath::parse(&format!("{kind}/{name}")).unwrap().as_str(),
        Spec::Structured(Box::new(StructuredSpec {
            kind: kind.into(),
            name: name.into(),
            spec,
            ignore: vec![],
        })),
        Default::default(),
        false,
        false,
    )
}

fn observe_one(t: &ExecTarget, d: &Desired) -> Observed {
    t.observe(&[Probe {
        id: &d.id,
        path: d.path(),
        spec: Some(&d.spec),
    }])
    .pop()
    .unwrap()
}

struct NoBackup;
impl Backup for NoBackup {
    fn save(&self, _: &ResourceId, _: &[u8]) -> std::io::Result<String> {
        Ok("none".into())
    }
}
struct NoContent;
impl ContentSource for NoContent {
    fn read(&self, _: git2::Oid) -> std::io::Result<Vec<u8>> {
        Err(std::io::ErrorKind::NotFound.into())
    }
}

fn create(t: &ExecTarget, d: &Desired) -> Result<Applied, TargetError> {
    let fields = match crate::diff::compare(d, &Observed::Absent, &[]) {
        crate::diff::Comparison::Differs { fields, .. } => fields,
        other => panic!("{other:?}"),
    };
    let change = Change {
        id: d.id.clone(),
        target: d.target().to_string(),
        path: d.path(),
        action: Action::Create,
        fields,
        desired: Some(d.clone()),
        observed: Observed::Absent,
    };
    t.apply(&change, &NoContent, &NoBackup)
}

#[test]
fn lines_parse_into_replies_notifications_or_errors() {
    let ok = parse_line(r#"{"jsonrpc":"2.0","id":7,"result":{"x":1}}"#).unwrap();
    assert_eq!(
        ok,
        Incoming::Response {
            id: Some(7),
            result: Ok(json!({"x": 1}))
        }
    );
    let err = parse_line(
        r#"{"jsonrpc":"2.0","id":8,"error":{"code":-32000,"message":"busy","data":{"class":"terminal"}}}"#,
    )
    .unwrap();
    match err {
        Incoming::Response {
            id: Some(8),
            result: Err(e),
        } => assert!(e.is_terminal()),
        other => panic!("{other:?}"),
    }
    let changed = parse_line(
        r#"{"jsonrpc":"2.0","method":"changed","params":{"resources":[{"kind":"k","name":"n"}]}}"#,
    )
    .unwrap();
    assert_eq!(
        changed,
        Incoming::Changed(vec![ObjectRef {
            kind: "k".into(),
            name: "n".into()
        }])
    );
    assert!(matches!(
        parse_line("Traceback (most recent call last):"),
        Err(ProtocolError::NotJson { .. })
    ));
    assert_eq!(
        parse_line(r#"{"jsonrpc":"1.0","id":1,"result":null}"#).unwrap_err(),
        ProtocolError::Version("1.0".into())
    );
    let e = parse_line(r#"{"jsonrpc":"2.0","id":1,"method":"observe"}"#).unwrap_err();
    assert_eq!(e, ProtocolError::Request("observe".into()));
    assert!(e.to_string().contains("only send notifications"), "{e}");
    assert_eq!(
        parse_line(r#"{"jsonrpc":"2.0","id":-1,"result":null}"#).unwrap_err(),
        ProtocolError::Id("-1".into())
    );
}

#[test]
fn a_crashing_plugin_is_unknown_and_restarts_only_after_its_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("flags.json");
    let cmd: Vec<String> = [
        &plugin("faulty"),
        "--store",
        store.to_str().unwrap(),
        "--fault",
        "crash",
        "--on",
        "observe",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let t = ExecTarget::start("flags", &cmd, Duration::from_secs(5)).unwrap();
    assert_eq!(t.kinds(), Ok(vec!["flag".to_string()]));
    let d = desired("flags", "flag", "beta", json!({"on": true}));
    match observe_one(&t, &d) {
        Observed::Unknown(r) => assert!(r.contains("exit status: 3"), "{r}"),
        other => panic!("{other:?}"),
    }
    // Within the backoff no process is started: the answer is immediate.
    let started = Instant::now();
    match observe_one(&t, &d) {
        Observed::Unknown(r) => assert!(
            r.contains("the plugin is down") && r.contains("next start in"),
            "{r}"
        ),
        other => panic!("{other:?}"),
    }
    // Starting the plugin would mean `initialize` with a 5 s timeout; the
    // message above is what proves no start, the bound only a coarse check.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Once the backoff has passed, the next look starts the plugin again
    // (and it crashes again). Looks within the backoff answer at once, so
    // polling does not start it sooner.
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        match observe_one(&t, &d) {
            Observed::Unknown(r)
                if r.contains("the plugin is down") && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20))
            }
            other => break other,
        }
    };
    match again {
        Observed::Unknown(r) => assert!(
            r.contains("exit status: 3"),
            "restarted and crashed again: {r}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(!store.exists());
}

#[test]
fn changed_notifications_reach_the_subscriber_as_identities() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("r");
    let cmd: Vec<String> = [
        &plugin("replicas"),
        "--dir",
        store.to_str().unwrap(),
        "--poll",
        "0.05",
        "--",
        "sleep",
        "300",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let t = ExecTarget::start("svc", &cmd, Duration::from_secs(5)).unwrap();
    let (tx, rx) = mpsc::channel();
    let sink: ChangeSink = Arc::new(move |r| {
        if let Recheck::Keys(ids) = r {
            drop(tx.send(ids))
        }
    });
    assert!(t.subscribe(sink, true).is_none(), "a plugin has no watch");
    let d = desired("svc", "replicaset", "web", json!({"replicas": 1}));
    assert_eq!(observe_one(&t, &d), Observed::Absent);
    let applied = create(&t, &d).unwrap();
    assert_eq!(applied.writes, 1);
    let pid_file = std::fs::read_to_string(store.join("web/0.pid")).unwrap();
    let pid: i32 = pid_file.split_whitespace().next().unwrap().parse().unwrap();
    match observe_one(&t, &d) {
        Observed::Present(Live::Structured { state, version }) => {
            assert_eq!(state, json!({"replicas": 1}));
            assert!(version.is_some());
        }
        other => panic!("{other:?}"),
    }
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let ids = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a changed notification");
    assert_eq!(ids, vec![ResourceId::new("svc", "replicaset", "web")]);
    match observe_one(&t, &d) {
        Observed::Present(Live::Structured { state, .. }) => {
            assert_eq!(state, json!({"replicas": 0}))
        }
        other => panic!("{other:?}"),
    }
    // Clean up through the plugin, as a prune would.
    let change = Change {
        id: d.id.clone(),
        target: d.target().to_string(),
        path: d.path(),
        action: Action::Delete,
        fields: vec![],
        desired: None,
        observed: Observed::Present(Live::Structured {
            state: json!({"replicas": 0}),
            version: None,
        }),
    };
    t.apply(&change, &NoContent, &NoBackup).unwrap();
    assert!(!store.join("web").exists());
}

#[test]
fn with_ha_each_apply_carries_the_fencing_token_and_a_follower_sends_none() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("flags.json");
    let cmd: Vec<String> = [&plugin("faulty"), "--store", store.to_str().unwrap()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let fence = crate::model::role::Fence::on("web-1");
    fence.lead(
        crate::model::role::Token {
            key: b"tend/web/694d".to_vec(),
            revision: 42,
        },
        Instant::now() + Duration::from_secs(60),
    );
    let t = ExecTarget::start("flags", &cmd, Duration::from_secs(5))
        .unwrap()
        .fenced(fence.clone());
    let d = desired("flags", "flag", "beta", json!({"on": true}));
    create(&t, &d).unwrap();
    let doc: Value = serde_json::from_slice(&std::fs::read(&store).unwrap()).unwrap();
    assert_eq!(
        doc["fence"],
        json!({"key": "tend/web/694d", "revision": 42})
    );
    assert_eq!(doc["objects"]["beta"], json!({"on": true}));

    fence.follow(Some("web-2".into()));
    std::fs::remove_file(&store).unwrap();
    let err = create(&t, &d).unwrap_err();
    assert!(
        matches!(&err, TargetError::Transient(m) if m.contains("not the leader: web-2 is")),
        "{err:?}"
    );
    assert!(!store.exists(), "a follower sends no apply");
}
