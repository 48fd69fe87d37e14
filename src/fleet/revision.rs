//! One fetch for the fleet (SPEC §12): the revision id the fleet's poller
//! fetched last, kept under `tend/fleet/revision`. Every host watches it
//! and is told when it changes to one it has not fetched; a host that
//! fetched a revision the key does not show puts it there. While the watch
//! is down (etcd unreachable) the host is told so, and polls on its own.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{EventType, WatchOptions};

use super::REVISION_KEY;
use crate::backoff::Failures;
use crate::target::etcd::{describe, Connection};

/// Longest wait between two attempts to watch again.
const MAX_RECONNECT: Duration = Duration::from_secs(10);

/// Called when the fleet's revision changes to one this host has not
/// fetched: the daemon fetches.
pub type OnChange = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct State {
    /// The key's value as last seen.
    seen: Option<String>,
    /// The revision this host fetched last.
    fetched: Option<String>,
    /// The watch is up: the key's changes are seen.
    watching: bool,
}

/// The watch of the fleet's revision; it ends when this is dropped.
pub struct RevisionWatch {
    conn: Arc<Connection>,
    state: Arc<Mutex<State>>,
    task: tokio::task::AbortHandle,
}

impl Drop for RevisionWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RevisionWatch {
    pub fn start(conn: Arc<Connection>, on_change: OnChange) -> RevisionWatch {
        let state = Arc::new(Mutex::new(State::default()));
        let follower = Follower {
            conn: conn.clone(),
            state: state.clone(),
            on_change,
        };
        let task = conn.handle().spawn(async move { follower.run().await });
        RevisionWatch {
            conn,
            state,
            task: task.abort_handle(),
        }
    }

    /// Whether the key's changes are seen now: when not, the host polls
    /// on its own.
    pub fn watching(&self) -> bool {
        self.state.lock().expect("fleet revision").watching
    }

    /// Whether the fleet's revision is one this host has not fetched (a
    /// change seen while its own fetch ran may be one it now has).
    pub fn news(&self) -> bool {
        let st = self.state.lock().expect("fleet revision");
        st.seen.is_some() && st.seen != st.fetched
    }

    /// The fleet's revision as last seen.
    pub fn seen(&self) -> Option<String> {
        self.state.lock().expect("fleet revision").seen.clone()
    }

    /// This host fetched `id`: put it under the key unless the key shows
    /// it already (in the background; a failure leaves it for the next).
    pub fn fetched(&self, id: &str) {
        {
            let mut st = self.state.lock().expect("fleet revision");
            st.fetched = Some(id.to_string());
            if st.seen.as_deref() == Some(id) {
                return;
            }
        }
        let (connect, id) = (self.conn.connect(), id.to_string());
        let timeout = self.conn.timeout();
        self.conn.handle().spawn(async move {
            let put = async {
                let mut c = connect.await.map_err(|e| e.reason)?;
                c.put(REVISION_KEY, id.clone(), None)
                    .await
                    .map_err(|e| describe(&e))
            };
            match tokio::time::timeout(timeout, put).await {
                // What the key holds is the watcher's to say: by the time
                // this answer comes, it may already hold a newer one.
                Ok(Ok(_)) => tracing::debug!(revision = %id, "the fleet's revision put"),
                Ok(Err(e)) => tracing::debug!(error = %e, "cannot put the fleet's revision"),
                Err(_) => tracing::debug!("cannot put the fleet's revision in time"),
            }
        });
    }
}

struct Follower {
    conn: Arc<Connection>,
    state: Arc<Mutex<State>>,
    on_change: OnChange,
}

impl Follower {
    async fn run(self) {
        let mut failures = Failures::default();
        let mut logged = false;
        loop {
            let why = self.follow(&mut failures, &mut logged).await;
            self.state.lock().expect("fleet revision").watching = false;
            let wait = failures.failed(MAX_RECONNECT);
            if logged {
                tracing::debug!(reason = %why, retry_in = ?wait, "the fleet's revision is still not watched");
            } else {
                tracing::warn!(reason = %why, retry_in = ?wait, "cannot watch the fleet's revision in etcd; polling the source on this host meanwhile");
                logged = true;
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// Records `value` as seen; tells the daemon when it is news here.
    fn saw(&self, value: Option<String>) {
        let news = {
            let mut st = self.state.lock().expect("fleet revision");
            let news = value.is_some() && value != st.fetched && value != st.seen;
            st.seen = value;
            news
        };
        if news {
            (self.on_change)();
        }
    }

    /// The key read, then watched from just after, until the watch breaks.
    async fn follow(&self, failures: &mut Failures, logged: &mut bool) -> String {
        let mut client = match self.conn.connect().await {
            Ok(c) => c,
            Err(e) => return e.reason,
        };
        let read = tokio::time::timeout(self.conn.timeout(), client.get(REVISION_KEY, None));
        let (value, revision) = match read.await {
            Ok(Ok(r)) => (
                r.kvs()
                    .first()
                    .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
                r.header().map_or(0, |h| h.revision()),
            ),
            Ok(Err(e)) => return describe(&e),
            Err(_) => return "no answer in time".into(),
        };
        let options = WatchOptions::new()
            .with_start_revision(revision + 1)
            .with_progress_notify();
        let mut stream = match client.watch(REVISION_KEY, Some(options)).await {
            Ok(stream) => stream,
            Err(e) => return describe(&e),
        };
        self.state.lock().expect("fleet revision").watching = true;
        if *logged {
            tracing::info!("watching the fleet's revision again");
            *logged = false;
        }
        failures.succeeded();
        // What changed while it was not watched counts as a change.
        self.saw(value);
        loop {
            let message = match stream.message().await {
                Ok(Some(m)) => m,
                Ok(None) => return "the watch stream ended".into(),
                Err(e) => return describe(&e),
            };
            if message.canceled() {
                return format!("watch canceled: {}", message.cancel_reason());
            }
            for event in message.events() {
                let Some(kv) = event.kv() else { continue };
                match event.event_type() {
                    EventType::Put => self.saw(Some(String::from_utf8_lossy(kv.value()).into())),
                    EventType::Delete => self.saw(None),
                }
            }
        }
    }
}
