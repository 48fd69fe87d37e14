//! `tend plugin check`: runs the protocol against a plugin the way tend
//! would, and reports each conformance check: initialize, observe absent,
//! create, observe equals desired, a repeated reconcile writes nothing, a
//! field outside the declaration survives, delete, garbage input answered
//! with a JSON-RPC error, shutdown.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

mod garbage;

use super::process::{CallError, Plugin};
use super::protocol::{self, InitializeResult, ObserveResult, ObservedItem};
use crate::ownership;

/// The object the checker creates and deletes in the plugin's store.
pub const CHECK_NAME: &str = "tend-conformance-check";

/// One check's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub check: &'static str,
    pub passed: bool,
    /// Not run: the plugin stopped answering at an earlier check.
    pub skipped: bool,
    pub detail: String,
}

/// What observe said of the check object.
enum Seen {
    Absent,
    Present {
        state: Value,
        version: Option<String>,
    },
}

struct Checker<'a> {
    plugin: Plugin,
    timeout: Duration,
    kind: String,
    report: &'a mut dyn FnMut(&Outcome),
    failed: usize,
    /// The session cannot be trusted any more; later checks are skipped.
    broken: bool,
}

/// A failed step: which check, and why.
struct Failure(&'static str, String);

type Step<T> = Result<T, Failure>;

impl Checker<'_> {
    fn pass(&mut self, check: &'static str, detail: String) {
        (self.report)(&Outcome {
            check,
            passed: true,
            skipped: false,
            detail,
        });
    }

    fn fail(&mut self, f: Failure) {
        self.failed += 1;
        (self.report)(&Outcome {
            check: f.0,
            passed: false,
            skipped: false,
            detail: f.1,
        });
    }

    fn skip(&mut self, check: &'static str) {
        (self.report)(&Outcome {
            check,
            passed: false,
            skipped: true,
            detail: "skipped: the plugin broke the protocol at an earlier check".into(),
        });
    }

    fn call(&mut self, check: &'static str, method: &str, params: Value) -> Step<Value> {
        self.plugin
            .call(method, params, self.timeout)
            .map_err(|e| self.failure(check, e, method))
    }

    fn failure(&mut self, check: &'static str, e: CallError, what: &str) -> Failure {
        if matches!(e, CallError::Broken(_)) {
            self.broken = true;
        }
        Failure(check, format!("`{what}`: {e}"))
    }

    fn observe(&mut self, check: &'static str, spec: &Value) -> Step<Seen> {
        let params = json!({"resources": [{"kind": self.kind, "name": CHECK_NAME, "spec": spec}]});
        let v = self.call(check, "observe", params)?;
        let r: ObserveResult = serde_json::from_value(v)
            .map_err(|e| Failure(check, format!("malformed `observe` answer: {e}")))?;
        match r.resources.as_slice() {
            [ObservedItem::Absent { .. }] => Ok(Seen::Absent),
            [ObservedItem::Present { state, version, .. }] if state.is_object() => {
                Ok(Seen::Present {
                    state: state.clone(),
                    version: version.clone(),
                })
            }
            [ObservedItem::Present { .. }] => {
                Err(Failure(check, "the state is not an object".into()))
            }
            [ObservedItem::Unknown { reason, .. }] => {
                Err(Failure(check, format!("observe said unknown: {reason}")))
            }
            other => Err(Failure(
                check,
                format!("`observe` answered {} resources for 1 asked", other.len()),
            )),
        }
    }

    fn present(&mut self, check: &'static str, spec: &Value) -> Step<(Value, String)> {
        match self.observe(check, spec)? {
            Seen::Absent => Err(Failure(check, "observe says absent".into())),
            Seen::Present { version: None, .. } => Err(Failure(
                check,
                "observe reports no `version`; tend needs one read from the store to tell a rewrite from none".into(),
            )),
            Seen::Present {
                state,
                version: Some(v),
            } => Ok((state, v)),
        }
    }

    fn apply(
        &mut self,
        check: &'static str,
        desired: &Value,
        live: Option<(&Value, &str)>,
    ) -> Step<()> {
        let empty = json!({});
        let state = live.map(|(s, _)| s).unwrap_or(&empty);
        let patch = ownership::to_patch(&ownership::compare(desired, state, &[], &[]));
        let observed = live.map_or(Value::Null, |(s, v)| json!({"state": s, "version": v}));
        let params = json!({"kind": self.kind, "name": CHECK_NAME, "desired": desired,
            "observed": observed, "patch": patch});
        self.call(check, "apply", params).map(drop)
    }

    fn lifecycle(&mut self, create: &Value, update: &Value) -> Step<()> {
        match self.observe("observe absent", create)? {
            Seen::Absent => self.pass(
                "observe absent",
                format!("{}/{CHECK_NAME} is absent", self.kind),
            ),
            Seen::Present { .. } => {
                return Err(Failure(
                    "observe absent",
                    format!(
                    "{}/{CHECK_NAME} already exists in the plugin's store; delete it and run again",
                    self.kind
                ),
                ))
            }
        }
        self.apply("apply create", create, None)?;
        self.pass("apply create", "answered".into());
        let (state, v1) = self.present("observe equals desired", create)?;
        let fields = ownership::compare(create, &state, &[], &[]);
        if !fields.is_empty() {
            return Err(Failure("observe equals desired", differing(&fields)));
        }
        self.pass("observe equals desired", format!("version {v1}"));

        // A reconcile of a converged object: an empty plan, and an apply
        // sent again (a retry after a lost answer) writes nothing.
        let (state, v2) = self.present("second reconcile is a no-op", create)?;
        if v2 != v1 {
            return Err(Failure(
                "second reconcile is a no-op",
                format!("observing changed the version from {v1} to {v2}"),
            ));
        }
        self.apply("second reconcile is a no-op", create, Some((&state, &v2)))?;
        let (state, v3) = self.present("second reconcile is a no-op", create)?;
        let fields = ownership::compare(create, &state, &[], &[]);
        if v3 != v1 || !fields.is_empty() {
            return Err(Failure("second reconcile is a no-op", format!(
                "an apply that changed nothing moved the version from {v1} to {v3}: the plugin writes on every apply{}",
                if fields.is_empty() { String::new() } else { format!("; and {}", differing(&fields)) }
            )));
        }
        self.pass(
            "second reconcile is a no-op",
            format!("plan empty, version still {v1}"),
        );

        self.apply("apply update", update, Some((&state, &v3)))?;
        let (after, v4) = self.present("apply update", update)?;
        let fields = ownership::compare(update, &after, &[], &[]);
        if !fields.is_empty() {
            return Err(Failure("apply update", differing(&fields)));
        }
        self.pass("apply update", format!("version {v3} -> {v4}"));
        let kept: Vec<String> = ownership::managed_fields(create)
            .into_iter()
            .filter(|p| !ownership::managed_fields(update).contains(p))
            .collect();
        let spec_of = |s: &Value| json!({"spec": s});
        for p in &kept {
            let before = spec_of(&state).pointer(p).cloned();
            let now = spec_of(&after).pointer(p).cloned();
            if before != now {
                return Err(Failure(
                    "undeclared field survives",
                    format!(
                        "{p} was {} and is {} after an apply that did not declare it",
                        shown(&before),
                        shown(&now)
                    ),
                ));
            }
        }
        self.pass("undeclared field survives", kept.join(", "));

        let observed = json!({"state": after, "version": v4});
        self.call(
            "delete",
            "delete",
            json!({"kind": self.kind, "name": CHECK_NAME, "observed": observed}),
        )?;
        match self.observe("delete", update)? {
            Seen::Absent => self.pass("delete", "observe says absent".into()),
            Seen::Present { .. } => {
                return Err(Failure("delete", "still present after delete".into()))
            }
        }
        Ok(())
    }
}

fn shown(v: &Option<Value>) -> String {
    v.as_ref().map_or("absent".into(), Value::to_string)
}

fn differing(fields: &[crate::model::Field]) -> String {
    let names: Vec<&str> = fields.iter().map(|f| f.name()).collect();
    format!(
        "observed state differs from desired in {}",
        names.join(", ")
    )
}

/// Runs every check against `command`, reporting each as it ends. Returns
/// the number of failed checks.
pub fn run(command: &[String], timeout: Duration, report: &mut dyn FnMut(&Outcome)) -> usize {
    let mut fail = |check, detail: String| {
        report(&Outcome {
            check,
            passed: false,
            skipped: false,
            detail,
        });
        1
    };
    let mut plugin = match Plugin::spawn("check", command, Arc::new(|_| {}), None) {
        Ok(p) => p,
        Err(e) => return fail("start", format!("cannot start {:?}: {e}", command[0])),
    };
    let info = plugin
        .call("initialize", protocol::initialize_params("check"), timeout)
        .map_err(InitError::Call)
        .and_then(|v| serde_json::from_value::<InitializeResult>(v).map_err(InitError::Malformed))
        .and_then(|i| i.check().map(|()| i).map_err(InitError::Incompatible));
    let info = match info {
        Ok(i) => i,
        Err(e) => return fail("initialize", e.to_string()),
    };
    let Some((kind, example)) = info
        .kinds
        .iter()
        .find_map(|k| info.examples.get(k).map(|e| (k.clone(), e.clone())))
    else {
        return fail("initialize", "no `examples` for any kind; the checker needs a `create` and an `update` spec (docs/plugins.md)".into());
    };
    let mut c = Checker {
        plugin,
        timeout,
        kind,
        report,
        failed: 0,
        broken: false,
    };
    c.pass(
        "initialize",
        format!(
            "plugin {:?}, protocol {}, kinds {}, notifications {}",
            info.name,
            info.protocol_version,
            info.kinds.join(", "),
            info.notifications
        ),
    );
    if let Err(f) = check_example(&example.create, &example.update) {
        c.fail(Failure("initialize", f.to_string()));
        return c.failed;
    }
    if let Err(f) = c.lifecycle(&example.create, &example.update) {
        c.fail(f);
        if !c.broken {
            // Leave the store as found, as far as the plugin allows.
            let params = json!({"kind": c.kind, "name": CHECK_NAME, "observed": null});
            let _ = c.plugin.call("delete", params, timeout);
        }
    }
    if c.broken {
        c.plugin.kill();
        c.skip("garbage input gets an error");
        c.skip("shutdown");
        return c.failed;
    }
    if let Err(f) = c.garbage() {
        c.fail(f);
    }
    if c.broken {
        c.plugin.kill();
        c.skip("shutdown");
        return c.failed;
    }
    match c.plugin.call("shutdown", Value::Null, timeout) {
        Err(e @ CallError::Broken(_)) => c.fail(Failure("shutdown", e.to_string())),
        _ => match c.plugin.finish(timeout) {
            Some(s) => c.pass("shutdown", format!("exited ({s})")),
            None => c.fail(Failure(
                "shutdown",
                format!(
                    "still running {} after shutdown",
                    humantime::format_duration(timeout)
                ),
            )),
        },
    }
    c.failed
}

/// Why the plugin's `initialize` leaves nothing to check.
#[derive(Debug, thiserror::Error)]
enum InitError {
    #[error("{0}")]
    Call(CallError),
    #[error("malformed answer: {0}")]
    Malformed(#[source] serde_json::Error),
    #[error(transparent)]
    Incompatible(protocol::Incompatible),
}

/// Why an example cannot drive every check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum ExampleError {
    #[error("example `create` and `update` must be objects")]
    NotObjects,
    #[error("example `update` must leave out a field `create` sets")]
    LeavesNothingOut,
    #[error("example `update` must change a field")]
    ChangesNothing,
}

/// The example must let every check run: an update that changes a field
/// and leaves another out.
fn check_example(create: &Value, update: &Value) -> Result<(), ExampleError> {
    if !create.is_object() || !update.is_object() {
        return Err(ExampleError::NotObjects);
    }
    let (c, u) = (
        ownership::managed_fields(create),
        ownership::managed_fields(update),
    );
    if !c.iter().any(|p| !u.contains(p)) {
        return Err(ExampleError::LeavesNothingOut);
    }
    if ownership::compare(update, create, &[], &[]).is_empty() {
        return Err(ExampleError::ChangesNothing);
    }
    Ok(())
}
