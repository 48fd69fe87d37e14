//! The etcd target's watch on its prefix, behind `Target::subscribe`: a
//! key changed by another writer is sent to the daemon at once. The client
//! crate does not make a broken watch again (etcd-client #54), so this
//! does: it resumes from the revision after the last one it saw, with
//! backoff by the one retry rule, and when that revision was compacted
//! away it asks for a full pass instead (what happened in between is gone).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};

use super::client::{describe, Connection};
use crate::backoff::Failures;
use crate::model::ResourceId;
use crate::target::{ChangeSink, Recheck, Subscription};

/// Longest wait between two attempts to watch again.
const MAX_RECONNECT: Duration = Duration::from_secs(10);

/// What tend's own writes leave, per key, noted before each write and
/// forgotten when the watch shows it: an event leaving exactly that (the
/// value put, or the key gone) is tend's write coming back, however soon
/// it arrives. The value is compared, not the revision, which is known
/// only once the write has answered.
#[derive(Clone, Default)]
pub struct Echoes(Arc<Mutex<HashMap<String, Option<Vec<u8>>>>>);

impl Echoes {
    /// Before writing `value` at `key` (`None`: deleting it).
    pub fn writing(&self, key: &str, value: Option<&[u8]>) {
        self.0
            .lock()
            .expect("echoes lock")
            .insert(key.to_string(), value.map(<[u8]>::to_vec));
    }

    /// Whether an event leaving `value` (`None`: a delete) at `key` is
    /// tend's own write; either way what was noted for the key is done.
    fn is_echo(&self, key: &str, value: Option<&[u8]>) -> bool {
        let mut echoes = self.0.lock().expect("echoes lock");
        match echoes.remove(key) {
            Some(left) => left.as_deref() == value,
            None => false,
        }
    }
}

/// What the watch knows, shared between its task and its subscription.
#[derive(Default)]
struct State {
    /// Managed keys (relative to the prefix) and their identities.
    managed: HashMap<String, ResourceId>,
    /// Keys changed while not managed: the next `manage` names those it
    /// now manages, since the pass that made them managed may have looked
    /// before the change.
    unclaimed: HashMap<String, i64>,
    /// The revision the watch follows from; 0 until it has begun.
    revision: i64,
    /// Why it is down, when it is.
    down: Option<String>,
}

/// What a watch needs to run.
pub struct Watch {
    pub conn: Arc<Connection>,
    pub prefix: String,
    pub echoes: Echoes,
    pub sink: ChangeSink,
}

/// The subscription: the watch runs until it is dropped.
pub struct EtcdWatch {
    prefix: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::AbortHandle,
}

impl Drop for EtcdWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why one watch stream ended.
enum Ended {
    /// Its start revision is compacted away: resync in full.
    Compacted(i64),
    Failed(String),
}

impl Watch {
    /// Begins watching from just after `observed` (the revision of the last
    /// range read), or from now when nothing was read yet.
    pub fn start(self, observed: i64) -> EtcdWatch {
        let state = Arc::new(Mutex::new(State::default()));
        let prefix = self.prefix.clone();
        let handle = self.conn.handle().clone();
        let shared = state.clone();
        let task = handle.spawn(async move { self.run(shared, observed + 1).await });
        EtcdWatch {
            prefix,
            state,
            task: task.abort_handle(),
        }
    }

    async fn run(self, state: Arc<Mutex<State>>, mut from: i64) {
        let mut failures = Failures::default();
        loop {
            let began = from;
            match self.follow(&state, &mut from).await {
                Ended::Compacted(at) => {
                    tracing::warn!(prefix = %self.prefix, from = began, compacted = at, "etcd watch resumed past a compaction; resyncing in full");
                    from = 0;
                    failures.succeeded();
                    (self.sink)(Recheck::All);
                }
                Ended::Failed(reason) => {
                    if from > began {
                        failures.succeeded();
                    }
                    let delay = failures.failed(MAX_RECONNECT);
                    tracing::warn!(prefix = %self.prefix, error = %reason, retry_in = ?delay, "etcd watch down");
                    state.lock().expect("watch state").down = Some(reason);
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// One watch stream, from `from` (0: now) until it breaks; `from`
    /// follows the events seen.
    async fn follow(&self, state: &Mutex<State>, from: &mut i64) -> Ended {
        let client = match self.conn.connect().await {
            Ok(c) => c,
            Err(e) => return Ended::Failed(e.reason),
        };
        if *from <= 1 {
            let mut kv = client.kv_client();
            let now = kv
                .get(
                    self.prefix.clone(),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
                .await;
            match now {
                Ok(r) => *from = r.header().map_or(1, |h| h.revision() + 1),
                Err(e) => return Ended::Failed(describe(&e)),
            }
        }
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(*from)
            .with_progress_notify();
        let mut stream = match client
            .watch_client()
            .watch(self.prefix.clone(), Some(options))
            .await
        {
            Ok(s) => s,
            Err(e) => return Ended::Failed(describe(&e)),
        };
        loop {
            let message = match stream.message().await {
                Ok(Some(m)) => m,
                Ok(None) => return Ended::Failed("the watch stream ended".into()),
                Err(e) => return Ended::Failed(describe(&e)),
            };
            if message.canceled() {
                if message.compact_revision() > 0 {
                    return Ended::Compacted(message.compact_revision());
                }
                return Ended::Failed(format!("watch canceled: {}", message.cancel_reason()));
            }
            let mut changed = Vec::new();
            {
                let mut st = state.lock().expect("watch state");
                st.down = None;
                for event in message.events() {
                    let Some(kv) = event.kv() else { continue };
                    let revision = kv.mod_revision();
                    *from = (*from).max(revision + 1);
                    let Some(rel) = kv
                        .key()
                        .strip_prefix(self.prefix.as_bytes())
                        .and_then(|k| std::str::from_utf8(k).ok())
                    else {
                        continue;
                    };
                    let left = match event.event_type() {
                        EventType::Delete => None,
                        EventType::Put => Some(kv.value()),
                    };
                    if self.echoes.is_echo(rel, left) {
                        continue;
                    }
                    match st.managed.get(rel) {
                        Some(id) => changed.push(id.clone()),
                        None => {
                            st.unclaimed.insert(rel.to_string(), revision);
                        }
                    }
                }
                if let Some(h) = message.header() {
                    *from = (*from).max(h.revision() + 1);
                }
                st.revision = *from;
            }
            if !changed.is_empty() {
                (self.sink)(Recheck::Keys(changed));
            }
        }
    }
}

impl Subscription for EtcdWatch {
    fn manage(&mut self, managed: &mut dyn Iterator<Item = (&ResourceId, &str)>) -> Recheck {
        let mut st = self.state.lock().expect("watch state");
        st.managed = managed
            .map(|(id, path)| (path.to_string(), id.clone()))
            .collect();
        let unclaimed = std::mem::take(&mut st.unclaimed);
        let ids: Vec<ResourceId> = unclaimed
            .keys()
            .filter_map(|k| st.managed.get(k).cloned())
            .collect();
        if ids.is_empty() {
            Recheck::Nothing
        } else {
            Recheck::Keys(ids)
        }
    }

    fn patch(&mut self, changes: &mut dyn Iterator<Item = (&ResourceId, Option<&str>)>) -> Recheck {
        let mut st = self.state.lock().expect("watch state");
        let mut ids = Vec::new();
        for (id, path) in changes {
            st.managed.retain(|_, v| v != id);
            if let Some(p) = path {
                if st.unclaimed.remove(p).is_some() {
                    ids.push(id.clone());
                }
                st.managed.insert(p.to_string(), id.clone());
            }
        }
        if ids.is_empty() {
            Recheck::Nothing
        } else {
            Recheck::Keys(ids)
        }
    }

    fn healthy(&self) -> bool {
        let st = self.state.lock().expect("watch state");
        st.down.is_none() && st.revision > 0
    }

    fn describe(&self) -> String {
        let st = self.state.lock().expect("watch state");
        match (&st.down, st.revision) {
            (Some(why), _) => format!("etcd watch on {} down ({why}); reconnecting", self.prefix),
            (None, 0) => format!("etcd watch on {} starting", self.prefix),
            (None, rev) => format!("etcd watch on {} at revision {rev}", self.prefix),
        }
    }
}
