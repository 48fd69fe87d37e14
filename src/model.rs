//! The domain vocabulary shared by every stage: resource identities and
//! paths (`identity.rs`), desired and observed state, and the changes a
//! plan is made of.

use std::fmt;
use std::sync::Arc;

use git2::Oid;

pub mod host;
mod identity;
mod owner;
mod resources;
pub mod role;
mod shared;
pub use identity::{PathAt, PathError, RelPath, ResourceId};
pub use owner::OwnerId;
pub use resources::Resources;
pub use shared::SharedStr;

/// An owner or group, as declared: a name resolved on the host, or a number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Id(u32),
    Name(String),
}

/// Where a declaration came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    pub file: SharedStr,
    pub line: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A regular file's desired state. Content is named by its Git blob id; bytes
/// come from a [`ContentSource`] only when a write needs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSpec {
    pub blob: Oid,
    pub size: u64,
    pub mode: u32,
    /// Owner and group, resolved to ids on this host when declared by name;
    /// none leaves them as they are.
    pub uid: OwnerId,
    pub gid: OwnerId,
    /// The content is a decrypted secret: a target keeps no hash of it
    /// (the files target's stat cache passes it by).
    pub secret: bool,
}

/// A structured resource served by a plugin: an object of some kind, named,
/// whose declared fields tend manages and whose other fields it leaves alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructuredSpec {
    pub kind: String,
    pub name: String,
    /// The declared fields, ignored ones already taken out: what tend owns.
    pub spec: serde_json::Value,
    /// JSON pointers (`/spec/...`) owned by someone else: never compared,
    /// never written.
    pub ignore: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    File(FileSpec),
    Symlink {
        target: String,
    },
    /// Boxed: a file is most resources, and each declared resource is held
    /// for the life of its revision.
    Structured(Box<StructuredSpec>),
}

impl Spec {
    pub fn kind(&self) -> &str {
        match self {
            Spec::File(_) => "file",
            Spec::Symlink { .. } => "symlink",
            Spec::Structured(s) => &s.kind,
        }
    }
}

/// One declared resource, ready to compare with live state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub id: ResourceId,
    /// Where its path begins in its identity, which ends with it: the path
    /// is not kept beside the identity (a revision holds 100k and more).
    pub path_at: PathAt,
    pub spec: Spec,
    /// Where it was declared, and what the declaration says beside its
    /// spec: shared by every resource one declaration makes.
    pub declaration: Arc<Declaration>,
    pub sensitive: bool,
    /// The content is a decrypted `decrypt: age` source (and so
    /// sensitive): what it overwrites is not backed up, since a backup
    /// would keep a secret in clear.
    pub decrypted: bool,
}

/// Where declarations came from and what they say beside their specs, held
/// once for all the resources it made: the files of a `directory`, the
/// keys of a document, every file of a mirror. A revision holds 100k
/// resources and more, most of them alike in all of this.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Declaration {
    /// The declaring file; `None` for a mirrored file, declared by itself:
    /// its own path, between `under` (the source path) and `suffix` (what
    /// a decrypted file's name ends with in the repository).
    pub file: Option<SharedStr>,
    pub under: SharedStr,
    pub suffix: SharedStr,
    pub line: usize,
    pub on_change: Option<String>,
    /// Per-resource override of `policy.self_heal`.
    pub self_heal: Option<bool>,
}

impl Declaration {
    /// What a document at `origin` declares beside its specs.
    pub fn written(
        origin: &Origin,
        on_change: Option<String>,
        self_heal: Option<bool>,
    ) -> Arc<Declaration> {
        Arc::new(Declaration {
            file: Some(origin.file.clone()),
            line: origin.line,
            on_change,
            self_heal,
            ..Declaration::default()
        })
    }
}

impl Desired {
    /// The resource `id` names at `path`, which its identity ends with (as
    /// every declaration names a resource: `<target>/<kind>/<key>`, the path
    /// being the key, or a plugin object's `<kind>/<name>`).
    ///
    /// # Panics
    /// When `id` does not end with `/` and `path`.
    pub fn new(
        id: ResourceId,
        path: &str,
        spec: Spec,
        declaration: Arc<Declaration>,
        sensitive: bool,
        decrypted: bool,
    ) -> Desired {
        let at = PathAt::of(&id, path)
            .unwrap_or_else(|| panic!("identity {id} does not end with its path {path:?}"));
        Desired {
            id,
            path_at: at,
            spec,
            declaration,
            sensitive,
            decrypted,
        }
    }

    /// Its path relative to the target root, sharing its identity's bytes.
    pub fn path(&self) -> RelPath {
        RelPath::tail(&self.id, self.path_at.0 as usize)
    }

    /// [`Desired::path`], borrowed.
    pub fn path_str(&self) -> &str {
        &self.id.as_str()[self.path_at.0 as usize..]
    }

    /// Where it was declared: the file and line.
    pub fn origin(&self) -> Origin {
        let d = &self.declaration;
        let file = match &d.file {
            Some(file) => file.clone(),
            None if d.under.is_empty() && d.suffix.is_empty() => self.path().shared(),
            None => format!("{}{}{}", d.under, self.path_str(), d.suffix).into(),
        };
        Origin { file, line: d.line }
    }

    /// The hook its changes trigger.
    pub fn on_change(&self) -> Option<&str> {
        self.declaration.on_change.as_deref()
    }

    /// Its override of `policy.self_heal`.
    pub fn self_heal(&self) -> Option<bool> {
        self.declaration.self_heal
    }
}

/// A plugin object's values decrypted from `decrypt: age` sources are
/// wiped when the declaration holding them goes, as the plaintext of a
/// decrypted file is ([`crate::secrets::Plaintext`]).
impl Drop for Desired {
    fn drop(&mut self) {
        if let (true, Spec::Structured(s)) = (self.decrypted, &mut self.spec) {
            wipe(&mut s.spec);
        }
    }
}

/// Zeroes every string of `value` in place.
pub fn wipe(value: &mut serde_json::Value) {
    use zeroize::Zeroize;
    match value {
        serde_json::Value::String(s) => s.zeroize(),
        serde_json::Value::Array(items) => items.iter_mut().for_each(wipe),
        serde_json::Value::Object(map) => map.values_mut().for_each(wipe),
        _ => {}
    }
}

impl Desired {
    /// The target's name, the first segment of the identity.
    pub fn target(&self) -> &str {
        self.id.target()
    }
}

/// The kind of an etcd key (`kind: key`), built in like `file`.
pub const KEY_KIND: &str = "key";

/// The mode a key's value is declared and observed with: a key has no mode,
/// so modes never differ.
pub const VALUE_MODE: u32 = 0o644;

/// What a target saw at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Live {
    File {
        blob: Oid,
        size: u64,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Symlink {
        target: String,
    },
    Directory {
        empty: bool,
    },
    /// A device, fifo or socket.
    Other(String),
    /// A plugin's object: its state, and the version its store reports (a
    /// resourceVersion, an mtime) so repeated writes can be told apart.
    Structured {
        state: serde_json::Value,
        version: Option<String>,
    },
}

impl Live {
    pub fn type_name(&self) -> &'static str {
        match self {
            Live::File { .. } => "file",
            Live::Symlink { .. } => "symlink",
            Live::Directory { .. } => "directory",
            Live::Other(_) => "special file",
            Live::Structured { .. } => "object",
        }
    }
}

/// An observation: tend tells "observed absent" from "not observed".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    Present(Live),
    Absent,
    /// Could not observe; nothing is created, changed or deleted on this.
    Unknown(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Create,
    Update,
    Delete,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
        }
    }
}

/// One field that differs between live and desired state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// The object is of another type (a directory where a file belongs...).
    Type {
        from: String,
        to: String,
    },
    Content,
    Mode {
        from: u32,
        to: u32,
    },
    Owner {
        from: u32,
        to: u32,
    },
    Group {
        from: u32,
        to: u32,
    },
    LinkTarget {
        from: String,
        to: String,
    },
    /// One field of a structured resource, named by a JSON pointer under
    /// `/spec`; `None` means absent (an add, or a removal).
    Json {
        pointer: String,
        from: Option<serde_json::Value>,
        to: Option<serde_json::Value>,
    },
}

impl Field {
    /// The short field name used in JSON output and the audit log; a
    /// structured field is named by its pointer.
    pub fn name(&self) -> &str {
        match self {
            Field::Type { .. } => "type",
            Field::Content => "content",
            Field::Mode { .. } => "mode",
            Field::Owner { .. } => "owner",
            Field::Group { .. } => "group",
            Field::LinkTarget { .. } => "target",
            Field::Json { pointer, .. } => pointer,
        }
    }
}

/// One planned correction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub id: ResourceId,
    pub target: String,
    pub path: RelPath,
    pub action: Action,
    pub fields: Vec<Field>,
    /// Absent for deletes.
    pub desired: Option<Desired>,
    pub observed: Observed,
}

/// Gives the bytes of a blob named in a [`FileSpec`]. They must hash to
/// the blob id asked for (the Git object database checks each object it
/// reads): targets write them as given.
pub trait ContentSource: Send + Sync {
    fn read(&self, blob: Oid) -> std::io::Result<Vec<u8>>;
}

/// Takes a copy of content before tend overwrites or deletes it.
pub trait Backup: Send + Sync {
    /// Saves `bytes` durably and returns a reference for the audit log.
    fn save(&self, id: &ResourceId, bytes: &[u8]) -> std::io::Result<String>;
}

/// The Git blob id of some bytes: how live content is compared with desired.
pub fn blob_id(bytes: &[u8]) -> Oid {
    Oid::hash_object(git2::ObjectType::Blob, bytes).expect("hashing bytes in memory cannot fail")
}

#[cfg(test)]
mod wipe_tests {
    #[test]
    fn wipe_empties_every_string_and_keeps_the_shape() {
        let mut v = serde_json::json!({"a": "secret", "b": ["s2", {"c": "s3"}], "n": 1});
        super::wipe(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"a": "", "b": ["", {"c": ""}], "n": 1})
        );
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// A daemon holds one `Desired` per declared resource (100k and more):
    /// the rare structured spec is boxed so files do not pay for its size,
    /// and what a declaration says beside specs is shared.
    #[test]
    fn a_declared_file_stays_small() {
        // An identity is a thin pointer: held by the declaration, the
        // outcomes and the watch, once each per resource.
        assert_eq!(std::mem::size_of::<ResourceId>(), 8);
        assert_eq!(std::mem::size_of::<SharedStr>(), 16);
        assert!(
            std::mem::size_of::<Spec>() <= 48,
            "{}",
            std::mem::size_of::<Spec>()
        );
        assert!(
            std::mem::size_of::<Desired>() <= 72,
            "{}",
            std::mem::size_of::<Desired>()
        );
    }
}
