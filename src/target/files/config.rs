//! The `files` target's block in the config: `{type: files, root: DIR}`.
//! Its fields alone; a key of another adapter is an unknown key here.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesConfig {
    /// Managed paths resolve under it as if it were `/`.
    pub root: PathBuf,
}

impl FilesConfig {
    /// What is wrong with the block, without touching the file system.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.root.as_os_str().is_empty() {
            problems.push("`root` is empty".to_string());
        }
        problems
    }
}
