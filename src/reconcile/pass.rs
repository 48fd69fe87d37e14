//! What a pass works on and reports: a revision's desired state (read once
//! and reused by every pass over it), the scope, options and the report.
//! `prepare.rs` observes and plans; `apply.rs` writes and records.

use std::collections::{BTreeMap, BTreeSet};

use git2::Oid;

use super::context::{Context, PassContent};
use crate::declare::{Declared, Problem};
use crate::model::role::Fence;
use crate::model::ResourceId;

#[derive(Debug, Clone, Copy, Default)]
pub struct PassOptions {
    pub allow_mass_prune: bool,
    /// Observe and record, never write.
    pub dry_run: bool,
    /// Set by the pass from the role (`ha`): this replica is not the
    /// leader, so the pass is a dry run.
    pub follower: bool,
}

impl PassOptions {
    /// The options this replica's role allows: with `ha`, a replica that is
    /// not the leader observes and records drift but writes nothing.
    pub fn for_role(self, fence: &Fence) -> PassOptions {
        let follower = !fence.may_write();
        PassOptions {
            dry_run: self.dry_run || follower,
            follower,
            ..self
        }
    }
}

/// Which resources a pass looks at.
#[derive(Debug, Clone)]
pub enum Scope {
    /// The whole desired state and the whole inventory; only these prune.
    All,
    /// The named identities (events, retries).
    Keys(BTreeSet<ResourceId>),
    /// The identities a new revision changed since the fully applied one
    /// before it: only they are looked at, and they prune, within the same
    /// guards, as a full pass would.
    Changes(BTreeSet<ResourceId>),
}

impl Scope {
    /// The identities named, or `None` for everything.
    pub fn keys(&self) -> Option<&BTreeSet<ResourceId>> {
        match self {
            Scope::All => None,
            Scope::Keys(k) | Scope::Changes(k) => Some(k),
        }
    }

    pub fn contains(&self, id: &ResourceId) -> bool {
        self.keys().is_none_or(|k| k.contains(id))
    }

    /// Whether identities no longer declared are pruned in this pass.
    pub fn prunes(&self) -> bool {
        !matches!(self, Scope::Keys(_))
    }
}

/// What a pass did, for exit codes, logs, metrics and requeueing.
#[derive(Debug, Default)]
pub struct PassReport {
    pub revision: Option<Oid>,
    pub applied: usize,
    pub deleted: usize,
    pub failed: usize,
    pub writes: u64,
    pub writes_by_target: BTreeMap<String, u64>,
    pub problems: Vec<Problem>,
    pub prune_blocked: Option<String>,
    pub outcomes: super::Outcomes,
    /// Every resource in scope is InSync and nothing is blocked.
    pub converged: bool,
    /// Hooks run at the end of the pass, and whether each succeeded.
    pub hooks: Vec<(String, bool)>,
    /// The pass stopped early because shutdown was asked for.
    pub cancelled: bool,
    /// Why what the pass wrote is not what readers see yet (a target that
    /// publishes whole trees could not publish this revision's); hooks
    /// wait, and the revision is not recorded applied.
    pub unpublished: Option<String>,
    /// The pass wrote nothing by design: a dry run, or a follower's pass.
    pub dry_run: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error(transparent)]
    Ledger(#[from] crate::ledger::LedgerError),
    /// The pass ran to its end, but the ledger did not take its outcomes
    /// (a full disk): they are here, for the caller to keep and retry.
    #[error("cannot record the pass's outcomes: {error}")]
    Unrecorded {
        report: Box<PassReport>,
        error: crate::ledger::LedgerError,
    },
}

impl PassError {
    /// The ledger's error, when the ledger is what failed.
    pub fn ledger(&self) -> Option<&crate::ledger::LedgerError> {
        match self {
            PassError::Ledger(e) | PassError::Unrecorded { error: e, .. } => Some(e),
            PassError::Source(_) => None,
        }
    }
}

/// How a revision came to be applied: held by the operator's pin, and who
/// signed it (when signatures are checked).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    pub pinned: bool,
    pub signer: Option<String>,
}

/// A revision's desired state, read once and reused by every pass over it.
pub struct Revision {
    pub id: Oid,
    pub provenance: Provenance,
    pub declared: Declared,
    pub content: PassContent,
    /// [`Context::declare_basis`] when it was read.
    pub basis: String,
}

pub fn load(ctx: &Context, id: Oid) -> Result<Revision, PassError> {
    let snapshot = ctx.mirror.snapshot(id)?;
    let basis = ctx.declare_basis();
    // A revision seen before on the same basis is not read again.
    let cache = crate::declare::cache::path(&ctx.settings.state_dir);
    let key = crate::declare::cache::key(id, &basis);
    let declared = match crate::declare::cache::load(&cache, &key) {
        Some(declared) => declared,
        None => {
            let declared = ctx.declare(&snapshot)?;
            crate::declare::cache::store(&cache, &key, &declared);
            declared
        }
    };
    let content = PassContent {
        inline: declared.inline.clone(),
        secrets: declared.secrets.clone(),
        blobs: snapshot.content_source()?,
    };
    Ok(Revision {
        id,
        provenance: Provenance::default(),
        declared,
        content,
        basis,
    })
}
