//! The `exec` target: any executable named in the local config becomes an
//! adapter, speaking JSON-RPC 2.0 over its stdin and stdout (docs/plugins.md).
//! One long-lived process per target, restarted with backoff when it dies;
//! a crash, a timeout or malformed output makes the affected resources
//! `Unknown`, never a write.

pub mod check;
mod config;
mod process;
pub mod protocol;
#[cfg(test)]
mod tests;

pub use config::ExecConfig;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// Tokio's clock: the system's, but for a runtime whose clock a test holds.
use tokio::time::Instant;

use serde_json::{json, Value};

use crate::backoff::Failures;
use crate::model::role::Fence;
use crate::model::{
    Action, Backup, Change, ContentSource, Live, Observed, RelPath, ResourceId, Spec,
};
use crate::target::{
    Applied, ChangeSink, Probe, Recheck, Subscription, Swept, Target, TargetError,
};

pub use process::{CallError, Plugin};
use protocol::{ApplyResult, InitializeResult, ObjectRef, ObserveResult, ObservedItem};

/// Most resources asked about in one `observe` call.
const OBSERVE_BATCH: usize = 500;
/// Restarts back off as every retry does, up to this.
const MAX_RESTART_DELAY: Duration = Duration::from_secs(60);

/// A plugin that cannot serve this tend at all (wrong protocol version,
/// kinds it may not claim): an error at start, not a retry.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

/// The running process and what is known of its health.
#[derive(Default)]
struct Slot {
    plugin: Option<Plugin>,
    starts: Failures,
    retry_at: Option<Instant>,
    last_error: Option<String>,
}

pub struct ExecTarget {
    name: String,
    command: Vec<String>,
    timeout: Duration,
    slot: Mutex<Slot>,
    kinds: Mutex<Result<Vec<String>, TargetError>>,
    sink: Arc<Mutex<Option<ChangeSink>>>,
    /// Identities observed through this target: announced as possibly
    /// changed when the plugin dies on its own, since it can no longer say.
    watched: Arc<Mutex<BTreeSet<ResourceId>>>,
    /// With `ha`: the leader's fencing token goes in each `apply` and
    /// `delete`, so the plugin's own store can check it too.
    fence: Fence,
}

impl ExecTarget {
    /// Starts the plugin and runs `initialize`. A plugin that does not start
    /// or answer leaves the target down (its resources `Unknown`) and is
    /// retried later; one that answers with a protocol it cannot speak to
    /// tend is an error.
    pub fn start(
        name: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecTarget, StartError> {
        let t = ExecTarget {
            name: name.to_string(),
            command: command.to_vec(),
            timeout,
            slot: Mutex::new(Slot::default()),
            kinds: Mutex::new(Err(TargetError::Transient(
                "the plugin has not started".into(),
            ))),
            sink: Arc::new(Mutex::new(None)),
            watched: Arc::new(Mutex::new(BTreeSet::new())),
            fence: Fence::off(),
        };
        {
            let mut slot = t.slot.lock().expect("slot lock");
            match t.launch() {
                Ok(plugin) => slot.plugin = Some(plugin),
                Err(Launch::Fatal(e)) => return Err(StartError(e)),
                Err(Launch::Failed(e)) => t.failed(&mut slot, e),
            }
        }
        Ok(t)
    }

    /// The target, its writes fenced by `fence`.
    pub fn fenced(mut self, fence: Fence) -> ExecTarget {
        self.fence = fence;
        self
    }

    fn launch(&self) -> Result<Plugin, Launch> {
        let (name, sink) = (self.name.clone(), self.sink.clone());
        let on_changed: process::OnChanged = Arc::new(move |objects: Vec<ObjectRef>| {
            let ids: Vec<ResourceId> = objects
                .iter()
                .filter(|o| crate::declare::valid_kind(&o.kind) && !o.name.contains('/'))
                .map(|o| ResourceId::new(&name, &o.kind, &o.name))
                .collect();
            if let Some(f) = sink.lock().expect("sink lock").as_ref() {
                f(Recheck::Keys(ids));
            }
        });
        let (sink, watched) = (self.sink.clone(), self.watched.clone());
        let on_exit: process::OnExit = Arc::new(move || {
            let ids: Vec<ResourceId> = watched
                .lock()
                .expect("watched lock")
                .iter()
                .cloned()
                .collect();
            if let Some(f) = sink.lock().expect("sink lock").as_ref() {
                f(Recheck::Keys(ids));
            }
        });
        let mut plugin = Plugin::spawn(&self.name, &self.command, on_changed, Some(on_exit))
            .map_err(|e| Launch::Failed(format!("cannot start {:?}: {e}", self.command[0])))?;
        let answer = plugin
            .call(
                "initialize",
                protocol::initialize_params(&self.name),
                self.timeout,
            )
            .map_err(|e| Launch::Failed(format!("initialize: {e}")))?;
        let info: InitializeResult = serde_json::from_value(answer)
            .map_err(|e| Launch::Failed(format!("malformed `initialize` answer: {e}")))?;
        info.check().map_err(|e| Launch::Fatal(e.to_string()))?;
        tracing::info!(target = %self.name, plugin = %info.name, pid = plugin.pid(), kinds = ?info.kinds, "plugin started");
        *self.kinds.lock().expect("kinds lock") = Ok(info.kinds);
        Ok(plugin)
    }

    fn failed(&self, slot: &mut Slot, reason: String) {
        let delay = slot.starts.failed(MAX_RESTART_DELAY);
        slot.retry_at = Some(Instant::now() + delay);
        tracing::warn!(target = %self.name, error = %reason, restart_in = ?delay, "plugin failed");
        let mut kinds = self.kinds.lock().expect("kinds lock");
        if kinds.is_err() {
            *kinds = Err(TargetError::Transient(reason.clone()));
        }
        slot.last_error = Some(reason);
    }

    /// One call, starting the plugin first when it is down and its backoff
    /// has passed. A broken session is killed; the next call restarts it.
    fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        let mut slot = self.slot.lock().expect("slot lock");
        if slot.plugin.is_none() {
            if let Some(at) = slot.retry_at.filter(|at| Instant::now() < *at) {
                return Err(CallError::Broken(format!(
                    "the plugin is down ({}); next start in {}s",
                    slot.last_error.as_deref().unwrap_or("not started"),
                    at.saturating_duration_since(Instant::now()).as_secs() + 1
                )));
            }
            match self.launch() {
                Ok(p) => slot.plugin = Some(p),
                Err(Launch::Fatal(e) | Launch::Failed(e)) => {
                    self.failed(&mut slot, e.clone());
                    return Err(CallError::Broken(e));
                }
            }
        }
        let plugin = slot.plugin.as_mut().expect("started above");
        match plugin.call(method, params, self.timeout) {
            Ok(v) => {
                slot.starts.succeeded();
                Ok(v)
            }
            Err(CallError::Rpc(e)) => {
                slot.starts.succeeded();
                Err(CallError::Rpc(e))
            }
            Err(CallError::Broken(reason)) => {
                if let Some(mut p) = slot.plugin.take() {
                    p.kill();
                }
                self.failed(&mut slot, reason.clone());
                Err(CallError::Broken(reason))
            }
        }
    }

    fn unknown(&self, e: &CallError) -> Observed {
        Observed::Unknown(format!("plugin {}: {e}", self.name))
    }

    fn observe_batch(&self, asked: &[(ObjectRef, Option<&Value>)]) -> Vec<Observed> {
        let params = json!({"resources": asked.iter().map(|(o, spec)| json!({
            "kind": o.kind, "name": o.name, "spec": spec,
        })).collect::<Vec<_>>()});
        let answer = self.call("observe", params).and_then(|v| {
            serde_json::from_value::<ObserveResult>(v)
                .map_err(|e| CallError::Broken(format!("malformed `observe` answer: {e}")))
        });
        let items = match answer {
            Ok(r) if r.resources.len() == asked.len() => r.resources,
            Ok(r) => {
                let e = CallError::Broken(format!(
                    "malformed `observe` answer: {} for {} asked",
                    crate::render::count(r.resources.len(), "resource", "resources"),
                    asked.len()
                ));
                return vec![self.unknown(&e); asked.len()];
            }
            Err(e) => return vec![self.unknown(&e); asked.len()],
        };
        asked
            .iter()
            .zip(items)
            .map(|((o, _), item)| {
                if item.object() != *o {
                    let e = CallError::Broken(format!(
                        "malformed `observe` answer: {}/{} where {}/{} was asked",
                        item.object().kind,
                        item.object().name,
                        o.kind,
                        o.name
                    ));
                    return self.unknown(&e);
                }
                match item {
                    ObservedItem::Present { state, version, .. } if state.is_object() => {
                        Observed::Present(Live::Structured { state, version })
                    }
                    ObservedItem::Present { .. } => self.unknown(&CallError::Broken(format!(
                        "malformed `observe` answer: the state of {}/{} is not an object",
                        o.kind, o.name
                    ))),
                    ObservedItem::Absent { .. } => Observed::Absent,
                    ObservedItem::Unknown { reason, .. } => {
                        Observed::Unknown(format!("plugin {}: {reason}", self.name))
                    }
                }
            })
            .collect()
    }
}

enum Launch {
    Fatal(String),
    Failed(String),
}

/// Why a resource has no identity a plugin knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotAnObject {
    #[error("kind {0} is not served by an exec target")]
    Kind(String),
    #[error("{0} is not a <kind>/<name> key")]
    Key(String),
}

/// The plugin's identity of a resource: from its declaration, or from its
/// key `<kind>/<name>` for inventory members being pruned.
fn object_of(
    path: &RelPath,
    spec: Option<&Spec>,
) -> Result<(ObjectRef, Option<Value>), NotAnObject> {
    match spec {
        Some(Spec::Structured(s)) => Ok((
            ObjectRef {
                kind: s.kind.clone(),
                name: s.name.clone(),
            },
            Some(s.spec.clone()),
        )),
        Some(other) => Err(NotAnObject::Kind(other.kind().to_string())),
        None => match path.as_str().split_once('/') {
            Some((kind, name)) => Ok((
                ObjectRef {
                    kind: kind.into(),
                    name: name.into(),
                },
                None,
            )),
            None => Err(NotAnObject::Key(path.to_string())),
        },
    }
}

impl Target for ExecTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn kinds(&self) -> Result<Vec<String>, TargetError> {
        self.kinds.lock().expect("kinds lock").clone()
    }

    fn observe(&self, probes: &[Probe]) -> Vec<Observed> {
        let mut out = vec![Observed::Unknown("not observed".into()); probes.len()];
        let mut asked = Vec::new();
        for (i, p) in probes.iter().enumerate() {
            match object_of(&p.path, p.spec) {
                Ok((o, spec)) => asked.push((i, o, spec)),
                Err(reason) => out[i] = Observed::Unknown(reason.to_string()),
            }
        }
        self.watched
            .lock()
            .expect("watched lock")
            .extend(asked.iter().map(|(i, ..)| probes[*i].id.clone()));
        for chunk in asked.chunks(OBSERVE_BATCH) {
            let batch: Vec<(ObjectRef, Option<&Value>)> = chunk
                .iter()
                .map(|(_, o, s)| (o.clone(), s.as_ref()))
                .collect();
            for ((i, ..), obs) in chunk.iter().zip(self.observe_batch(&batch)) {
                out[*i] = obs;
            }
        }
        out
    }

    fn read_live(&self, _path: &RelPath) -> std::io::Result<Option<Vec<u8>>> {
        Ok(None)
    }

    fn apply(
        &self,
        change: &Change,
        _content: &dyn ContentSource,
        backup: &dyn Backup,
    ) -> Result<Applied, TargetError> {
        let spec = change.desired.as_ref().map(|d| &d.spec);
        let (object, declared) =
            object_of(&change.path, spec).map_err(|e| TargetError::Terminal(e.to_string()))?;
        let mut backups = Vec::new();
        let observed = match &change.observed {
            Observed::Present(Live::Structured { state, version }) => {
                // The object's previous state, kept like overwritten content.
                let bytes = serde_json::to_vec(state).expect("JSON serializes");
                let reference = backup
                    .save(&change.id, &bytes)
                    .map_err(|e| TargetError::Transient(format!("{}: back up: {e}", change.id)))?;
                backups.push(reference);
                json!({"state": state, "version": version})
            }
            _ => Value::Null,
        };
        // With `ha`, a replica that is not the leader sends nothing.
        let fence = self
            .fence
            .token()
            .map_err(|why| TargetError::Transient(format!("{}: {why}", change.id)))?
            .map(|t| json!({"key": String::from_utf8_lossy(&t.key), "revision": t.revision}));
        let (method, mut params) = match (change.action, declared) {
            (Action::Delete, _) => (
                "delete",
                json!({"kind": object.kind, "name": object.name, "observed": observed}),
            ),
            (_, Some(desired)) => (
                "apply",
                json!({
                    "kind": object.kind, "name": object.name, "desired": desired,
                    "observed": observed, "patch": crate::ownership::to_patch(&change.fields),
                }),
            ),
            (action, None) => {
                return Err(TargetError::Terminal(format!(
                    "{}: {} without a desired state",
                    change.id,
                    action.as_str()
                )))
            }
        };
        if let Some(fence) = fence {
            params["fence"] = fence;
        }
        match self.call(method, params) {
            Ok(v) => {
                let r: ApplyResult = serde_json::from_value(v).unwrap_or_default();
                Ok(Applied {
                    writes: u64::from(r.changed.unwrap_or(true)),
                    backups,
                    left: None,
                })
            }
            Err(CallError::Rpc(e)) if e.is_terminal() => {
                Err(TargetError::Terminal(format!("plugin {}: {e}", self.name)))
            }
            Err(e) => Err(TargetError::Transient(format!("plugin {}: {e}", self.name))),
        }
    }

    fn clean_temp(&self, _paths: &[&RelPath]) -> Swept {
        Swept::default()
    }

    fn subscribe(&self, sink: ChangeSink, _watch: bool) -> Option<Box<dyn Subscription>> {
        *self.sink.lock().expect("sink lock") = Some(sink);
        None
    }
}

impl Drop for ExecTarget {
    fn drop(&mut self) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut p) = slot.plugin.take() {
            p.stop(self.timeout.min(Duration::from_secs(5)));
        }
    }
}
