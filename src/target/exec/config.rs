//! The `exec` target's block in the config:
//! `{type: exec, command: [PROGRAM, ARG...], timeout: 30s}`. Its fields
//! alone; a key of another adapter is an unknown key here.

use std::time::Duration;

use serde::Deserialize;

use crate::duration::Dur;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    /// The plugin and its arguments; only the local config names programs.
    pub command: Vec<String>,
    /// Bound on one call to the plugin.
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
}

fn default_timeout() -> Dur {
    Dur(Duration::from_secs(30))
}

impl ExecConfig {
    /// What is wrong with the block, without starting anything: each
    /// problem with the key of the block it is about.
    pub fn validate(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.command.first().is_none_or(|p| p.is_empty()) {
            problems.push(("command", "`command` needs a program".to_string()));
        }
        problems
    }
}
