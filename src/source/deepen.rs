//! Fetching more of a shallow mirror's history through an open remote
//! (see `shallow.rs` for when). Kept apart so the mirror's fetch can use it
//! without importing the module that extends the mirror.

use git2::{AutotagOption, Repository};

use super::refs::BASE_REFSPECS;
use super::remote::Session;
use super::SourceError;

/// libgit2's "fetch what a shallow mirror lacks" (GIT_FETCH_DEPTH_UNSHALLOW).
pub(super) const UNSHALLOW: i32 = i32::MAX;

/// Fetches the whole history of the branches and tags into a shallow
/// `repo` through `remote`, so a commit the first fetch cut off is found.
pub(super) fn unshallow(
    repo: &Repository,
    remote: &mut git2::Remote<'_>,
    session: &Session<'_>,
) -> Result<(), SourceError> {
    fetch_deep(remote, session, UNSHALLOW)?;
    tracing::info!(
        shallow = repo.is_shallow(),
        "mirror history deepened, whole, to find a commit by its id"
    );
    Ok(())
}

/// Fetches the branches and tags again through `remote`, `depth` commits
/// deep.
pub(super) fn fetch_deep(
    remote: &mut git2::Remote<'_>,
    session: &Session<'_>,
    depth: i32,
) -> Result<(), SourceError> {
    let refspecs: Vec<String> = BASE_REFSPECS.iter().map(|s| s.to_string()).collect();
    let mut options = session.fetch_options();
    options
        .depth(depth)
        .download_tags(AutotagOption::None)
        .update_fetchhead(false);
    remote
        .fetch(&refspecs, Some(&mut options), Some("tend: deepen"))
        .map_err(|e| session.error(e))
}
