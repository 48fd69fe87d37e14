//! Tests of the Git puller against real repositories made with the `git`
//! command line in temp dirs, fetched through file:// URLs and plain paths.

mod fetch;
mod gc;
mod links;
mod refs;
mod stamp;
mod tree;
mod url;

use std::path::Path;
use std::time::Duration;

use git2::Oid;

use super::{Mirror, SourceSpec};
use crate::test_repo::TestRepo;

/// The commit id git printed, as git2 reads it.
pub(super) fn oid(hex: &str) -> Oid {
    Oid::from_str(hex).unwrap()
}

/// A spec for a test repository with a short timeout.
pub(super) fn spec(repo: &str, reference: Option<&str>) -> SourceSpec {
    SourceSpec {
        repo: repo.to_string(),
        reference: reference.map(str::to_string),
        timeout: Duration::from_secs(30),
        auth: Default::default(),
        depth: crate::source::DEFAULT_DEPTH,
    }
}

/// Opens a mirror of `repo` at `reference` in `state` and fetches it.
pub(super) fn fetched(state: &Path, repo: &TestRepo, reference: Option<&str>) -> (Mirror, Oid) {
    let mirror = Mirror::open(state, spec(&repo.url(), reference)).unwrap();
    let commit = mirror.fetch().unwrap();
    (mirror, commit)
}
