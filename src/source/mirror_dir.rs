//! The mirror's directory on disk: creating it race-free (a temp dir
//! renamed into place), the temp dirs of a creation or repair and their
//! sweeping, and the lock a fetcher holds.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use git2::{Repository, RepositoryInitOptions};

use super::url::RepoUrl;
use super::SourceError;

pub(super) const URL_KEY: &str = "tend.url";

/// Taken by whoever fetches; readers never take it.
const FETCH_LOCK: &str = "tend-fetch.lock";
/// Temp dirs of an interrupted creation older than this are removed.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// Creates the bare repository in a temp dir and renames it into place, so a
/// concurrent opener sees either no mirror or a complete one.
pub(super) fn create(mirrors: &Path, name: &str, url: &RepoUrl) -> Result<(), SourceError> {
    remove_stale_temps(mirrors, name);
    let temp = init_temp(mirrors, name, url)?;
    let target = mirrors.join(name);
    let result = match std::fs::rename(&temp, &target) {
        Ok(()) => Ok(()),
        Err(_) if target.join("HEAD").exists() => Ok(()),
        Err(e) => Err(SourceError::io(&target, e)),
    };
    let _ = std::fs::remove_dir_all(&temp);
    result
}

/// A temp dir beside the mirrors for a mirror `name` while it is made or
/// replaced; swept once stale.
pub(super) fn temp_name(mirrors: &Path, name: &str) -> PathBuf {
    mirrors.join(format!(
        ".tend-{name}-{}-{}.tmp",
        std::process::id(),
        rand::random::<u32>()
    ))
}

/// A new, empty bare mirror of `url` in a temp dir beside the mirrors.
pub(super) fn init_temp(mirrors: &Path, name: &str, url: &RepoUrl) -> Result<PathBuf, SourceError> {
    let temp = temp_name(mirrors, name);
    let result = (|| {
        let repo = Repository::init_opts(
            &temp,
            // No hook samples, description or info/exclude: a mirror
            // runs no hooks and has no work tree.
            RepositoryInitOptions::new()
                .bare(true)
                .mkpath(false)
                .external_template(false),
        )
        .map_err(|e| SourceError::git(format!("creating {}", temp.display()), e))?;
        let mut config = repo
            .config()
            .map_err(|e| SourceError::git("mirror config", e))?;
        let set = |config: &mut git2::Config, key: &str, value: &str| {
            config
                .set_str(key, value)
                .map_err(|e| SourceError::git(format!("setting {key}"), e))
        };
        set(&mut config, URL_KEY, url.redacted())?;
        // A bare mirror needs no reflogs; git gc, if ever run here, must not
        // prune objects only tend's own refs reach.
        set(&mut config, "core.logAllRefUpdates", "false")?;
        Ok(())
    })();
    match result {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&temp);
            Err(e)
        }
    }
}

fn remove_stale_temps(mirrors: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(mirrors) else {
        return;
    };
    let prefix = format!(".tend-{name}-");
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        if !file_name.starts_with(&prefix) || !file_name.ends_with(".tmp") {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age > STALE_TEMP);
        if old {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// An exclusive advisory lock on the mirror, held while fetching.
pub(super) struct FetchLock {
    _file: File,
}

impl FetchLock {
    pub(super) fn acquire(dir: &Path, wait: Duration) -> Result<FetchLock, SourceError> {
        let path = dir.join(FETCH_LOCK);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| SourceError::io(&path, e))?;
        let start = Instant::now();
        loop {
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(FetchLock { _file: file }),
                Err(rustix::io::Errno::WOULDBLOCK) if start.elapsed() < wait => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(SourceError::Busy {
                        dir: dir.to_path_buf(),
                        waited: start.elapsed(),
                    });
                }
                Err(e) => return Err(SourceError::io(&path, e.into())),
            }
        }
    }
}
