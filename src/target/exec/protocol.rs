//! The messages of the exec plugin protocol (docs/plugins.md): JSON-RPC 2.0,
//! one JSON object per line. Requests tend sends, the replies it accepts,
//! and the `changed` notification; anything else on stdout is malformed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version this tend speaks; `initialize` must answer the same.
pub const PROTOCOL_VERSION: u64 = 1;

/// JSON-RPC 2.0 error codes plugins answer with.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;

/// Longest line read from a plugin; a longer one is malformed output.
pub const MAX_LINE: usize = 16 << 20;

/// Kinds served by tend itself; a plugin may not claim them.
const RESERVED_KINDS: &[&str] = &["file", "directory", "symlink", "key"];

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default)]
    pub data: Option<Value>,
}

impl RpcError {
    /// Errors carry `data.class`: `terminal` needs a human or a new
    /// declaration; anything else is retried.
    pub fn is_terminal(&self) -> bool {
        self.data
            .as_ref()
            .and_then(|d| d.get("class"))
            .and_then(Value::as_str)
            == Some("terminal")
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

/// An object's identity inside a plugin.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectRef {
    pub kind: String,
    pub name: String,
}

/// One line a plugin wrote, once parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Response {
        id: Option<u64>,
        result: Result<Value, RpcError>,
    },
    /// `changed`: these objects may have drifted.
    Changed(Vec<ObjectRef>),
    /// Another notification; ignored, so later protocol versions can add some.
    Notification(String),
}

#[derive(Deserialize)]
struct RawMessage {
    jsonrpc: String,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<RpcError>,
}

#[derive(Deserialize)]
struct ChangedParams {
    resources: Vec<ObjectRef>,
}

/// Shortens a line for messages, on a character boundary.
pub fn snippet(line: &str) -> String {
    let mut s: String = line.chars().take(120).collect();
    if s.len() < line.len() {
        s.push('…');
    }
    s
}

/// A line of plugin output that breaks the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("malformed output {line:?}: {reason}")]
    NotJson { line: String, reason: String },
    #[error("malformed output: jsonrpc is {0:?}, not \"2.0\"")]
    Version(String),
    #[error("the plugin sent a request ({0}); plugins may only send notifications")]
    Request(String),
    #[error("malformed `changed` notification: {0}")]
    Changed(String),
    #[error("malformed output: response id {0} is not one tend sent")]
    Id(String),
}

/// Parses one line of plugin output.
pub fn parse_line(line: &str) -> Result<Incoming, ProtocolError> {
    let raw: RawMessage = serde_json::from_str(line).map_err(|e| ProtocolError::NotJson {
        line: snippet(line),
        reason: e.to_string(),
    })?;
    if raw.jsonrpc != "2.0" {
        return Err(ProtocolError::Version(raw.jsonrpc));
    }
    if let Some(method) = raw.method {
        if raw.id.is_some() {
            return Err(ProtocolError::Request(method));
        }
        if method == "changed" {
            let p: ChangedParams = serde_json::from_value(raw.params.unwrap_or(Value::Null))
                .map_err(|e| ProtocolError::Changed(e.to_string()))?;
            return Ok(Incoming::Changed(p.resources));
        }
        return Ok(Incoming::Notification(method));
    }
    let id = match raw.id {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| ProtocolError::Id(v.to_string()))?),
    };
    let result = match (raw.result, raw.error) {
        (_, Some(e)) => Err(e),
        (Some(r), None) => Ok(r),
        (None, None) => Ok(Value::Null),
    };
    Ok(Incoming::Response { id, result })
}

/// A request line (without the newline). Its params may hold values
/// decrypted from `decrypt: age` sources: the line and the params are
/// wiped once sent.
pub fn request(id: u64, method: &str, params: Value) -> zeroize::Zeroizing<String> {
    let mut message =
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let line = zeroize::Zeroizing::new(message.to_string());
    crate::model::wipe(&mut message);
    line
}

/// Specs for the conformance checker: one to create the object with, and
/// a smaller one that changes some of its fields and leaves others out.
#[derive(Debug, Clone, Deserialize)]
pub struct Example {
    pub create: Value,
    pub update: Value,
}

/// The answer to `initialize`.
#[derive(Debug, Clone, Deserialize)]
pub struct InitializeResult {
    pub protocol_version: u64,
    pub name: String,
    pub kinds: Vec<String>,
    #[serde(default)]
    pub notifications: bool,
    #[serde(default)]
    pub examples: BTreeMap<String, Example>,
}

/// A plugin this tend cannot work with, whatever it is asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incompatible {
    #[error("plugin {name:?} speaks protocol version {version}; this tend speaks version {PROTOCOL_VERSION}")]
    Version { name: String, version: u64 },
    #[error("plugin {0:?} serves no kinds")]
    NoKinds(String),
    #[error("plugin {name:?} claims kind {kind:?}, which tend serves itself")]
    Reserved { name: String, kind: String },
    #[error(
        "plugin {name:?} advertises kind {kind:?}; kinds use letters, digits, `.`, `_` and `-`"
    )]
    InvalidKind { name: String, kind: String },
}

impl InitializeResult {
    /// Checks what tend relies on: the same protocol version, and kinds
    /// that are valid identity segments and not tend's own.
    pub fn check(&self) -> Result<(), Incompatible> {
        let name = || self.name.clone();
        if self.protocol_version != PROTOCOL_VERSION {
            return Err(Incompatible::Version {
                name: name(),
                version: self.protocol_version,
            });
        }
        if self.kinds.is_empty() {
            return Err(Incompatible::NoKinds(name()));
        }
        for k in &self.kinds {
            let kind = k.clone();
            if RESERVED_KINDS.contains(&k.as_str()) {
                return Err(Incompatible::Reserved { name: name(), kind });
            }
            if !crate::declare::valid_kind(k) {
                return Err(Incompatible::InvalidKind { name: name(), kind });
            }
        }
        Ok(())
    }
}

/// `initialize` params.
pub fn initialize_params(target: &str) -> Value {
    serde_json::json!({
        "protocol_version": PROTOCOL_VERSION,
        "tend_version": env!("CARGO_PKG_VERSION"),
        "target": target,
    })
}

/// One answer of `observe`, in the order asked.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ObservedItem {
    Present {
        kind: String,
        name: String,
        state: Value,
        #[serde(default)]
        version: Option<String>,
    },
    Absent {
        kind: String,
        name: String,
    },
    Unknown {
        kind: String,
        name: String,
        reason: String,
    },
}

impl ObservedItem {
    pub fn object(&self) -> ObjectRef {
        let (kind, name) = match self {
            ObservedItem::Present { kind, name, .. }
            | ObservedItem::Absent { kind, name }
            | ObservedItem::Unknown { kind, name, .. } => (kind, name),
        };
        ObjectRef {
            kind: kind.clone(),
            name: name.clone(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ObserveResult {
    pub resources: Vec<ObservedItem>,
}

/// The answer to `apply` and `delete`: whether the store was written.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ApplyResult {
    #[serde(default)]
    pub changed: Option<bool>,
}
