//! A resource's identity, `<target>/<kind>/<key>`, and the path relative
//! to a target root that a file's identity ends with, sharing its bytes.

use arcstr::ArcStr;
use std::fmt;

use super::SharedStr;

/// A resource's stable identity: `<target>/<kind>/<key>`. Never depends on
/// order, time or random values, so a retry finds what an earlier attempt made.
/// Shared, not copied: a pass holds each identity in several maps.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceId(ArcStr);

impl ResourceId {
    pub fn new(target: &str, kind: &str, key: &str) -> Self {
        ResourceId(ArcStr::from(format!("{target}/{kind}/{key}")))
    }
    pub fn from_string(s: String) -> Self {
        ResourceId(ArcStr::from(s))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The target name, the first segment of the identity.
    pub fn target(&self) -> &str {
        self.0.split('/').next().unwrap_or("")
    }
    /// The kind, the second segment of the identity.
    pub fn kind(&self) -> &str {
        self.0.split('/').nth(1).unwrap_or("")
    }
    /// The key, what follows the target and the kind: a file's path.
    pub fn key(&self) -> &str {
        self.0.splitn(3, '/').nth(2).unwrap_or("")
    }
    /// [`ResourceId::target`], sharing the identity's bytes.
    pub fn target_shared(&self) -> SharedStr {
        SharedStr::part(&self.0, 0..self.target().len()).expect("a prefix ending before `/`")
    }
}

// Ordering, equality and hashing are those of the inner string, so maps
// keyed by identity can be searched with a `&str`.
impl std::borrow::Borrow<str> for ResourceId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl serde::Serialize for ResourceId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for ResourceId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(ResourceId::from_string)
    }
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A path relative to a target root: no empty, `.` or `..` components, no
/// leading `/`, no NUL. Built only through [`RelPath::parse`] and its
/// variants. Cloning shares the bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(SharedStr);

/// Whether `raw` is a path in the form [`RelPath::parse`] gives.
pub(super) fn canonical(raw: &str) -> bool {
    !raw.contains('\0') && raw.split('/').all(|part| !matches!(part, "" | "." | ".."))
}

/// Why a path is not one tend takes: relative to a root, inside it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path is empty")]
    Empty,
    #[error("path {0:?} is absolute; paths are relative to the target root")]
    Absolute(String),
    #[error("path contains a NUL byte")]
    Nul,
    #[error("path {0:?} contains `..`")]
    Parent(String),
    #[error("path {0:?} names the root itself")]
    Root(String),
}

impl RelPath {
    pub fn parse(raw: &str) -> Result<Self, PathError> {
        if raw.is_empty() {
            return Err(PathError::Empty);
        }
        if raw.starts_with('/') {
            return Err(PathError::Absolute(raw.into()));
        }
        if raw.contains('\0') {
            return Err(PathError::Nul);
        }
        let mut parts = Vec::new();
        for part in raw.split('/') {
            match part {
                "" | "." => continue,
                ".." => return Err(PathError::Parent(raw.into())),
                p => parts.push(p),
            }
        }
        if parts.is_empty() {
            return Err(PathError::Root(raw.into()));
        }
        Ok(RelPath(parts.join("/").into()))
    }
    /// [`RelPath::parse`], and the identity `<target>/<kind>/<path>` of what
    /// stands there: the path is kept as the end of the identity, one
    /// allocation for both.
    pub fn identify(
        raw: &str,
        target: &str,
        kind: &str,
    ) -> Result<(ResourceId, RelPath), PathError> {
        let parsed;
        let path = if canonical(raw) {
            raw
        } else {
            parsed = RelPath::parse(raw)?;
            parsed.as_str()
        };
        let id = ResourceId::new(target, kind, path);
        let start = id.0.len() - path.len();
        let path = match SharedStr::part(&id.0, start..id.0.len()) {
            Some(part) => RelPath(part),
            None => RelPath(path.into()),
        };
        Ok((id, path))
    }
    /// The end of `id` from byte `start` on, a path [`Desired`] holds as
    /// that offset; sharing the identity's bytes.
    ///
    /// [`Desired`]: super::Desired
    pub(super) fn tail(id: &ResourceId, start: usize) -> RelPath {
        match SharedStr::part(&id.0, start..id.0.len()) {
            Some(part) => RelPath(part),
            None => RelPath(id.0[start..].into()),
        }
    }
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
    /// The path's bytes, shared.
    pub fn shared(&self) -> SharedStr {
        self.0.clone()
    }
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
    /// The parent directory (empty for a top-level entry) and the final name.
    pub fn split_last(&self) -> (&str, &str) {
        let s = self.as_str();
        match s.rfind('/') {
            Some(i) => (&s[..i], &s[i + 1..]),
            None => ("", s),
        }
    }
    pub fn join(&self, child: &str) -> Result<RelPath, PathError> {
        RelPath::parse(&format!("{}/{}", self.0, child))
    }
}

// Ordering, equality and hashing are those of the path string.
impl std::borrow::Borrow<str> for RelPath {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a resource's path begins in its identity: after a `/`, and to its
/// end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathAt(pub(super) u32);

impl PathAt {
    /// Where `path` begins in `id`; `None` when `id` does not end with `/`
    /// and `path`, or when `path` is not one [`RelPath::parse`] gives (no
    /// empty, `.` or `..` part: a declaration cache read back is checked
    /// as a declaration was).
    pub fn of(id: &ResourceId, path: &str) -> Option<PathAt> {
        if path.is_empty() || !canonical(path) {
            return None;
        }
        let id = id.as_str();
        let at = id.len().checked_sub(path.len()).filter(|at| *at > 0)?;
        // `get`: a byte count that ends inside a character is no match.
        if id.get(at - 1..)?.strip_prefix('/') != Some(path) {
            return None;
        }
        u32::try_from(at).ok().map(PathAt)
    }
}

#[cfg(test)]
mod tests {
    use super::RelPath;
    use super::{PathAt, ResourceId};
    use crate::model::{Desired, Spec};

    #[test]
    fn an_identity_names_its_target_and_key() {
        let id = super::ResourceId::new("files", "file", "etc/app/a.conf");
        assert_eq!((id.target(), id.key()), ("files", "etc/app/a.conf"));
        assert_eq!(id.target_shared(), "files");
        let id = super::ResourceId::new("svc", "config.v1", "web");
        assert_eq!((id.target(), id.key()), ("svc", "web"));
    }

    #[test]
    fn identify_agrees_with_parse_and_shares_the_identity() {
        for raw in ["a", "a/b.txt", "a//b", "./a/./b/", "/a", "a/../b", ""] {
            match RelPath::identify(raw, "files", "file") {
                Ok((id, path)) => {
                    assert_eq!(Ok(path.clone()), RelPath::parse(raw), "{raw:?}");
                    assert_eq!(id, super::ResourceId::new("files", "file", path.as_str()));
                    // The path is the identity's tail, not a copy of it.
                    let tail = &id.as_str()[id.as_str().len() - path.as_str().len()..];
                    assert_eq!(tail.as_ptr(), path.as_str().as_ptr(), "{raw:?}");
                }
                Err(e) => assert_eq!(Err(e), RelPath::parse(raw), "{raw:?}"),
            }
        }
    }

    #[test]
    fn a_path_is_found_at_the_end_of_its_identity_or_not_at_all() {
        let file = ResourceId::new("files", "file", "etc/app.conf");
        assert_eq!(PathAt::of(&file, "etc/app.conf"), Some(PathAt(11)));
        let object = ResourceId::new("svc", "config.v1", "web");
        assert_eq!(PathAt::of(&object, "config.v1/web"), Some(PathAt(4)));
        let d = Desired::new(
            object.clone(),
            "config.v1/web",
            Spec::Symlink { target: "x".into() },
            Default::default(),
            false,
            false,
        );
        assert_eq!(
            (d.path_str(), d.path().as_str()),
            ("config.v1/web", "config.v1/web")
        );
        // Not a whole part after a `/`, not the end, too long, or ending
        // inside a character (a damaged cache file may say anything).
        assert_eq!(PathAt::of(&file, "pp.conf"), None);
        assert_eq!(PathAt::of(&file, "etc/app"), None);
        assert_eq!(PathAt::of(&file, "files/file/etc/app.conf"), None);
        let wide = ResourceId::from_string("files/file/éé".into());
        assert_eq!(PathAt::of(&wide, "xx"), None);
        assert_eq!(PathAt::of(&wide, "éé"), Some(PathAt(11)));
        // Only a path as a declaration gives it.
        for odd in ["", "x/", "../etc/x", "a//b", "./a"] {
            let id = ResourceId::from_string(format!("files/file/{odd}"));
            assert_eq!(PathAt::of(&id, odd), None, "{odd:?}");
        }
    }
}
