//! Target selection for declarations: the named target, or the only one
//! serving a kind.

use super::Builder;
use crate::declare::DeclError;

impl Builder<'_> {
    /// The target for `kind`: the named one, or the only one serving it. A
    /// target whose kinds are not known yet (its plugin is not answering)
    /// is taken when named, or when no known target serves the kind and it
    /// is the only such target, so its resources are still declared (and
    /// observed as unknown) rather than dropped.
    pub(super) fn pick_target(&self, named: Option<&str>, kind: &str) -> Result<String, DeclError> {
        // Read as written, a target the config does not name is the host's
        // to know: it is taken as named.
        if let Some(n) = named.filter(|n| self.opts.as_written && !self.is_configured(n)) {
            if n.is_empty() || n.contains('/') {
                return Err(format!("target name {n:?} may not be empty or contain `/`").into());
            }
            return Ok(n.to_string());
        }
        let serving: Vec<&str> = self
            .opts
            .targets
            .iter()
            .filter(|t| t.kinds.iter().any(|k| k == kind))
            .map(|t| t.name.as_str())
            .collect();
        let pending: Vec<&crate::declare::TargetInfo> = self
            .opts
            .targets
            .iter()
            .filter(|t| t.kinds_unknown.is_some())
            .collect();
        let path_kind = matches!(kind, "file" | "symlink" | "key");
        match named {
            Some(n) if serving.contains(&n) => Ok(n.to_string()),
            Some(n) if !path_kind && pending.iter().any(|t| t.name == n) => Ok(n.to_string()),
            Some(n) if self.is_configured(n) => {
                Err(format!("target {n:?} does not serve kind {kind:?}").into())
            }
            Some(n) => Err(format!("no target named {n:?} in the config").into()),
            None if serving.len() == 1 => Ok(serving[0].to_string()),
            None if serving.is_empty() && !path_kind && pending.len() == 1 => {
                Ok(pending[0].name.clone())
            }
            None if serving.is_empty() && !path_kind && !pending.is_empty() => Err(format!(
                "no running target serves kind {kind:?}; name one of {} with `target:`",
                pending
                    .iter()
                    .map(|t| format!("{} ({})", t.name, t.kinds_unknown.as_deref().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into()),
            None if serving.is_empty() => {
                Err(format!("no configured target serves kind {kind:?}").into())
            }
            None => Err(format!(
                "several targets serve kind {kind:?} ({}); name one with `target:`",
                serving.join(", ")
            )
            .into()),
        }
    }

    fn is_configured(&self, name: &str) -> bool {
        self.opts.targets.iter().any(|t| t.name == name)
    }
}
