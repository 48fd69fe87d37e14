//! Shallow history (`source.depth`): a new mirror of a remote repository
//! fetches only the newest `depth` commits of each branch and tag, not all
//! of history, so a first sync (a fresh sidecar, a CI job) pays for one
//! revision. History is fetched only when a question needs it: whether a
//! fetched commit descends from the newest one applied (the anti-rollback
//! mark), asked of a mirror whose history stops short. Then the mirror is
//! made whole, once: libgit2 does not move a shallow mirror's boundary
//! past commits it marked shallow before (deepening by steps answered
//! "does not descend" where the commits were there), so only the whole
//! history gives a sure answer. Later fetches into it are plain ones.
//! libgit2 fetches shallow over the network only; a local repository is
//! linked into the mirror whole, at no cost.

use git2::{Oid, Repository};

use super::deepen::UNSHALLOW;
use super::mirror::Mirror;
use super::mirror_dir::FetchLock;
use super::remote::Session;
use super::snapshot::open_mirror;
use super::url::Transport;
use super::SourceError;

/// The default `source.depth`: the revision to apply, and no history.
pub const DEFAULT_DEPTH: u32 = 1;

impl Mirror {
    /// The depth a fetch into `repo` asks for: `depth` on a remote's first
    /// fetch (a mirror with no refs yet), none otherwise.
    pub(super) fn first_depth(&self, repo: &Repository) -> Option<i32> {
        let depth = self.spec.depth;
        let remote = self.url.transport != Transport::Local;
        let empty = repo
            .references()
            .map(|mut r| r.next().is_none())
            .unwrap_or(false);
        (remote && depth > 0 && empty).then(|| i32::try_from(depth).unwrap_or(UNSHALLOW))
    }

    /// Whether `commit` is `ancestor` or descends from it; a shallow
    /// mirror that cannot tell is made whole first.
    pub fn descends(&self, commit: Oid, ancestor: Oid) -> Result<bool, SourceError> {
        let repo = open_mirror(&self.dir)?;
        let descends = super::signed::descends(&repo, commit, ancestor);
        if descends || !repo.is_shallow() {
            return Ok(descends);
        }
        drop(repo);
        let _lock = FetchLock::acquire(&self.dir, self.spec.timeout)?;
        self.deepen(UNSHALLOW)?;
        let repo = open_mirror(&self.dir)?;
        let descends = super::signed::descends(&repo, commit, ancestor);
        tracing::info!(
            descends,
            "mirror history deepened, whole, to check the revision descends from the last applied"
        );
        Ok(descends)
    }

    /// The mirror, made whole first when it is shallow and `holds` says it
    /// lacks what is asked of it (a pinned older revision, a commit named
    /// by id).
    pub(super) fn open_holding(
        &self,
        holds: impl Fn(&Repository) -> bool,
    ) -> Result<Repository, SourceError> {
        let repo = open_mirror(&self.dir)?;
        if holds(&repo) || !repo.is_shallow() {
            return Ok(repo);
        }
        drop(repo);
        let _lock = FetchLock::acquire(&self.dir, self.spec.timeout)?;
        self.deepen(UNSHALLOW)?;
        tracing::info!("mirror history deepened, whole, to find an older revision");
        open_mirror(&self.dir)
    }

    /// Fetches the branches and tags again, `depth` commits deep.
    fn deepen(&self, depth: i32) -> Result<(), SourceError> {
        let repo = open_mirror(&self.dir)?;
        let session = Session::new(&self.url, &self.spec.auth, self.spec.timeout)?;
        let mut remote = repo
            .remote_anonymous(self.url.raw())
            .map_err(|e| session.error(e))?;
        super::deepen::fetch_deep(&mut remote, &session, depth)
    }
}
