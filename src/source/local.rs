//! A revision read straight from a repository on this host (a CI checkout),
//! without a mirror: any revision git names (`origin/main`, `HEAD~1`, a
//! commit id), read from the repository's own object database. Nothing is
//! written into the repository.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use git2::{Repository, RepositoryOpenFlags};

use super::snapshot::Snapshot;
use super::url::{RepoUrl, Transport};
use super::SourceError;

/// The directory a repository address names when it is on this host (a
/// plain path or a `file://` URL), whether or not anything is there.
pub fn local_repository(repo: &str) -> Option<PathBuf> {
    let url = RepoUrl::parse(repo).ok()?;
    if url.transport != Transport::Local {
        return None;
    }
    super::seed::local_path(url.raw())
}

/// The revision `rev` (default `HEAD`) of the repository at `path`.
pub fn snapshot_at(path: &Path, rev: Option<&str>) -> Result<Snapshot, SourceError> {
    let shown = path.display().to_string();
    if !path.exists() {
        return Err(SourceError::Fetch {
            url: shown,
            message: format!(
                "no repository at {}: no such file or directory",
                path.display()
            ),
        });
    }
    let repo = Repository::open_ext(path, RepositoryOpenFlags::NO_SEARCH, [] as [&OsStr; 0])
        .map_err(|e| SourceError::InvalidRepo {
            repo: shown.clone(),
            reason: match e.code() {
                // A CI job running as another user than the checkout's.
                git2::ErrorCode::Owner => format!(
                    "{}; if it is yours to read, mark it safe: git config --global --add safe.directory {}",
                    e.message(),
                    path.display()
                ),
                _ => e.message().to_string(),
            },
        })?;
    let rev = rev.unwrap_or("HEAD");
    let commit = match repo.revparse_single(rev).and_then(|o| o.peel_to_commit()) {
        Ok(c) => c.id(),
        Err(_) => {
            // A CI checkout is often shallow, or has fetched one branch.
            let hint = if repo.is_shallow() {
                " (the clone is shallow: fetch the history, e.g. `git fetch --unshallow`, or check out with fetch-depth 0)"
            } else {
                ""
            };
            return Err(SourceError::UnknownRef {
                reference: rev.to_string(),
                url: format!("{shown}{hint}"),
            });
        }
    };
    let dir = repo.path().to_path_buf();
    Snapshot::open(repo, &dir, commit)
}
