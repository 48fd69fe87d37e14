//! The `files` target's block in the config: `{type: files, root: DIR}`,
//! and for whole-tree publishing `link: NAME` with `link_keep: N`. Its
//! fields alone; a key of another adapter is an unknown key here.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesConfig {
    /// Managed paths resolve under it as if it were `/`.
    pub root: PathBuf,
    /// Publish each revision as a whole tree and switch this symlink in
    /// the root to it (SPEC §10); absent, files are written in place.
    #[serde(default)]
    pub link: Option<String>,
    /// With `link`: previous trees kept (default 1).
    #[serde(default)]
    pub link_keep: Option<usize>,
}

/// `<root>/<name>` is a symlink to the published tree; `keep` previous
/// trees stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub name: String,
    pub keep: usize,
}

/// Previous trees kept when `link_keep` is not given.
pub const LINK_KEEP: usize = 1;

impl FilesConfig {
    /// A root written in place.
    pub fn at(root: impl Into<PathBuf>) -> FilesConfig {
        FilesConfig {
            root: root.into(),
            link: None,
            link_keep: None,
        }
    }

    /// What is wrong with the block, without touching the file system:
    /// each problem with the key of the block it is about.
    pub fn validate(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.root.as_os_str().is_empty() {
            problems.push(("root", "`root` is empty".to_string()));
        }
        if let Some(name) = &self.link {
            problems.extend(check_link_name(name).err().map(|m| ("link", m.to_string())));
        }
        if self.link_keep.is_some() && self.link.is_none() {
            problems.push(("link_keep", "`link_keep` needs `link`".to_string()));
        }
        problems
    }

    /// Whole-tree publishing, when asked for.
    pub fn link(&self) -> Option<Link> {
        self.link.as_ref().map(|name| Link {
            name: name.clone(),
            keep: self.link_keep.unwrap_or(LINK_KEEP),
        })
    }
}

/// Why a name cannot be the published tree's link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkNameError {
    #[error("link {0:?}: give one name for the symlink in the root, without `/`")]
    NotOneEntry(String),
    #[error("link {0:?}: the name is tend's own; pick another")]
    TendsOwn(String),
}

/// A link name is one entry of the root, and not tend's own (`.tend`, temp
/// names).
pub fn check_link_name(name: &str) -> Result<(), LinkNameError> {
    let temp = name.starts_with(".tend-") && name.ends_with(".tmp");
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(LinkNameError::NotOneEntry(name.to_string()));
    }
    if name == ".tend" || temp {
        return Err(LinkNameError::TendsOwn(name.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_are_one_entry_and_not_tend_s_own() {
        assert!(check_link_name("current").is_ok());
        assert!(check_link_name(".current").is_ok());
        for bad in ["", ".", "..", "a/b", ".tend", ".tend-1.tmp"] {
            assert!(check_link_name(bad).is_err(), "{bad:?}");
        }
        let mut c = FilesConfig::at("/srv");
        c.link_keep = Some(3);
        assert_eq!(
            c.validate(),
            [("link_keep", "`link_keep` needs `link`".to_string())]
        );
        c.link = Some("current".into());
        assert!(c.validate().is_empty());
        assert_eq!(
            c.link(),
            Some(Link {
                name: "current".into(),
                keep: 3
            })
        );
    }
}
