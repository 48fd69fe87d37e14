//! The bare mirror of one repository under `<state_dir>/mirrors/`: opening
//! it (its directory is made in mirror_dir.rs), fetching into it under a
//! lock, checking what the fetch resolved is all there (repair.rs), and
//! recording what the configured ref resolved to.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use git2::{AutotagOption, Direction, FetchPrune, Oid, Repository};

use super::mirror_dir::{create, FetchLock, URL_KEY};
use super::refs::{self, Advertised, Resolution, Wanted, BASE_REFSPECS, FETCHED_COMMIT_REF};
use super::remote::Session;
use super::snapshot::{open_mirror, Snapshot};
use super::url::RepoUrl;
use super::{SourceError, SourceSpec};

/// The config key holding the (redacted) address a mirror belongs to.
/// Where a remote HEAD that names no branch is fetched to.
const REMOTE_HEAD_REF: &str = "refs/tend/remote-head";

pub struct Mirror {
    pub(super) dir: PathBuf,
    pub(super) url: RepoUrl,
    wanted: Wanted,
    pub(super) spec: SourceSpec,
    /// The commit whose objects this process last found all present; a
    /// later one is checked only where its tree differs.
    verified: Mutex<Option<Oid>>,
    /// What the last repair did, until [`Mirror::take_repair`] takes it.
    repaired: Mutex<Option<String>>,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("dir", &self.dir)
            .field("url", &self.url)
            .finish()
    }
}

impl Mirror {
    /// Creates or opens the bare mirror for this repository under
    /// `<state_dir>/mirrors/<name>-<hash of the address>`. Touches no network.
    pub fn open(state_dir: &Path, spec: SourceSpec) -> Result<Mirror, SourceError> {
        let url = RepoUrl::parse(&spec.repo)?;
        let wanted = Wanted::parse(spec.reference.as_deref())?;
        let mirrors = state_dir.join("mirrors");
        std::fs::create_dir_all(&mirrors).map_err(|e| SourceError::io(&mirrors, e))?;
        let name = url.mirror_dir_name();
        let dir = mirrors.join(&name);
        if !dir.exists() {
            create(&mirrors, &name, &url)?;
        }
        let repo = open_mirror(&dir)?;
        let found = repo
            .config()
            .and_then(|c| c.get_string(URL_KEY))
            .unwrap_or_else(|_| "(unknown)".to_string());
        if found != url.redacted() {
            return Err(SourceError::MirrorMismatch {
                dir,
                found,
                expected: url.redacted().to_string(),
            });
        }
        Ok(Mirror {
            dir,
            url,
            wanted,
            spec,
            verified: Mutex::new(None),
            repaired: Mutex::new(None),
        })
    }

    pub(super) fn verified_lock(&self) -> std::sync::MutexGuard<'_, Option<Oid>> {
        self.verified.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn repaired_lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.repaired.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn repo_url(&self) -> &RepoUrl {
        &self.url
    }

    /// The mirror's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The repository address with credentials hidden.
    pub fn url(&self) -> &str {
        self.url.redacted()
    }

    pub fn spec(&self) -> &SourceSpec {
        &self.spec
    }

    /// Fetches branches and tags with forced refspecs (so a force-pushed
    /// branch still updates) and prunes deleted ones, then resolves the
    /// configured ref to a commit and records it for [`Mirror::resolved`].
    /// Waits for another process's fetch into the same mirror for at most the
    /// fetch timeout.
    ///
    /// Each fetch opens the mirror afresh, as [`Mirror::resolved`] and
    /// [`Mirror::snapshot`] do: no handle outlives its use, so packs a
    /// roll-up replaced are closed, and their space freed, once the
    /// snapshots reading them are dropped.
    pub fn fetch(&self) -> Result<Oid, SourceError> {
        let _lock = FetchLock::acquire(&self.dir, self.spec.timeout)?;
        let repo = open_mirror(&self.dir)?;
        let fetched = match self.fetch_into(&repo) {
            // Refused for its certificate before the system's bundle was
            // read (see `roots`): once more with it.
            Err(SourceError::Untrusted { .. })
                if self.url.transport == super::url::Transport::Http
                    && super::roots::add_deferred() =>
            {
                self.fetch_into(&repo)
            }
            fetched => fetched,
        };
        let commit = match fetched {
            Ok(commit) => match self.check(&repo, commit)? {
                None => commit,
                Some(missing) => {
                    drop(repo);
                    self.repair(&missing)?
                }
            },
            // A ref naming an object the mirror lost fails to peel: the
            // mirror is repaired, then the ref resolved again.
            Err(e) => match super::damage::lost_objects(&e) {
                Some(what) => {
                    drop(repo);
                    self.repair(&what)?
                }
                None => return Err(e),
            },
        };
        let repo = open_mirror(&self.dir)?;
        refs::record_resolved(&repo, &self.wanted, commit)?;
        *self.verified_lock() = Some(commit);
        match super::packs::roll_up(&repo, super::packs::MOST) {
            Ok(Some(done)) => {
                tracing::info!(
                    packs = done.packs,
                    objects = done.objects,
                    "mirror packs rolled into one"
                );
            }
            Ok(None) => {}
            // The fetch stands; the packs are rolled at a later one.
            Err(e) => tracing::warn!(error = %e, "cannot roll the mirror's packs into one"),
        }
        super::stamp::record_verified(&self.dir, commit);
        Ok(commit)
    }

    /// What the last fetch's repair of the mirror did, once.
    pub fn take_repair(&self) -> Option<String> {
        self.repaired_lock().take()
    }

    /// Fetches into `repo` (this mirror, or a new one replacing it) and
    /// resolves the configured ref there, recording nothing.
    pub(super) fn fetch_into(&self, repo: &Repository) -> Result<Oid, SourceError> {
        // libgit2 takes a plain path that is not there for an address in a
        // scheme it does not know ("unsupported URL protocol").
        if self.url.transport == super::url::Transport::Local {
            if let Some(path) = super::seed::local_path(self.url.raw()).filter(|p| !p.exists()) {
                return Err(SourceError::Fetch {
                    url: self.url.redacted().to_string(),
                    message: format!(
                        "no repository at {}: no such file or directory",
                        path.display()
                    ),
                });
            }
        }
        let linked = super::seed::from_local(&self.url, repo);
        if linked > 0 {
            tracing::debug!(files = linked, "mirror seeded from the local repository");
        }
        let session = Session::new(&self.url, &self.spec.auth, self.spec.timeout)?;
        let mut remote = repo
            .remote_anonymous(self.url.raw())
            .map_err(|e| session.error(e))?;
        let mut refspecs: Vec<String> = BASE_REFSPECS.iter().map(|s| s.to_string()).collect();
        refspecs.extend(self.wanted.extra_refspec());

        let default_branch = {
            let mut connection = remote
                .connect_auth(Direction::Fetch, Some(session.callbacks()), None)
                .map_err(|e| session.error(e))?;
            let default_branch = connection
                .default_branch()
                .ok()
                .and_then(|b| b.as_str().map(str::to_string));
            // A HEAD that names no branch (detached, or an empty remote): fetch
            // it by name. Not from the ref listing, which git2 cannot give for
            // a remote without refs.
            forget_remote_head(repo)?;
            if default_branch.is_none() && self.wanted == Wanted::Default {
                refspecs.push(format!("+HEAD:{REMOTE_HEAD_REF}"));
            }
            session.check_deadline()?;
            // Reuses the connection that read the default branch.
            let mut options = session.fetch_options();
            if let Some(depth) = self.first_depth(repo) {
                options.depth(depth);
            }
            options
                .prune(FetchPrune::On)
                .download_tags(AutotagOption::None)
                .update_fetchhead(false);
            connection
                .remote()
                .fetch(&refspecs, Some(&mut options), Some("tend: fetch"))
                .map_err(|e| session.error(e))?;
            default_branch
        };
        let head = repo
            .find_reference(REMOTE_HEAD_REF)
            .ok()
            .and_then(|r| r.target());
        let advertised = Advertised {
            default_branch,
            head,
        };

        match refs::resolve(repo, &self.wanted, &advertised, self.url.redacted())? {
            Resolution::Found(commit) => Ok(commit),
            Resolution::Missing(commit) => self.fetch_commit(repo, &mut remote, &session, commit),
        }
    }

    /// Fetches a commit that no branch or tag reaches (servers that allow
    /// fetching by id); a commit the remote lacks is reported as not found.
    fn fetch_commit(
        &self,
        repo: &Repository,
        remote: &mut git2::Remote<'_>,
        session: &Session<'_>,
        commit: Oid,
    ) -> Result<Oid, SourceError> {
        let not_found = || SourceError::CommitNotFound {
            id: commit,
            url: self.url.redacted().to_string(),
        };
        // A shallow first fetch may have cut the commit off: the history,
        // whole, may hold it (servers that refuse a fetch by id still serve
        // that).
        if repo.is_shallow() {
            session.check_deadline()?;
            super::deepen::unshallow(repo, remote, session)?;
            if repo.find_commit(commit).is_ok() {
                return Ok(commit);
            }
        }
        session.check_deadline()?;
        let mut options = session.fetch_options();
        options
            .download_tags(AutotagOption::None)
            .update_fetchhead(false);
        let refspec = format!("+{commit}:{FETCHED_COMMIT_REF}");
        if let Err(e) = remote.fetch(&[refspec], Some(&mut options), Some("tend: fetch commit")) {
            return match session.error(e) {
                SourceError::Fetch { .. } => Err(not_found()),
                other => Err(other),
            };
        }
        // The resolved ref keeps the commit alive from now on.
        if let Ok(mut temp) = repo.find_reference(FETCHED_COMMIT_REF) {
            let _ = temp.delete();
        }
        match repo.find_commit(commit) {
            Ok(_) => Ok(commit),
            Err(_) => Err(not_found()),
        }
    }

    /// The commit the configured ref resolved to at the last successful
    /// fetch, read from the mirror alone; `None` before the first one.
    pub fn resolved(&self) -> Result<Option<Oid>, SourceError> {
        refs::read_resolved(&open_mirror(&self.dir)?, &self.wanted)
    }

    /// A reader of one revision's tree and blobs, with its own handle on the
    /// mirror so it can move to another thread.
    pub fn snapshot(&self, commit: Oid) -> Result<Snapshot, SourceError> {
        let repo = self.open_holding(|r| r.find_commit(commit).is_ok())?;
        if repo.find_commit(commit).is_err() {
            return Err(SourceError::CommitNotFound {
                id: commit,
                url: self.url.redacted().to_string(),
            });
        }
        Snapshot::open(repo, &self.dir, commit)
    }

    /// Whether `commit` may be applied by its signature (see
    /// [`super::signed::verify`]): `via_ref` when it is what the configured
    /// ref resolved to, not a pin.
    pub fn verify(
        &self,
        anchors: &super::verify::TrustAnchors,
        commit: Oid,
        via_ref: bool,
    ) -> Result<Result<super::verify::Signer, super::verify::Refusal>, SourceError> {
        let repo = self.open_holding(|r| r.find_commit(commit).is_ok())?;
        super::signed::verify(&repo, &self.wanted, anchors, commit, via_ref)
    }

    /// A revision as an operator writes it (a commit id, abbreviated or
    /// not, a tag or branch name) to the commit in the mirror.
    pub fn find_revision(&self, rev: &str) -> Result<Oid, SourceError> {
        let repo = self.open_holding(|r| r.revparse_single(rev).is_ok())?;
        let not_found = || SourceError::UnknownRef {
            reference: rev.to_string(),
            url: self.url.redacted().to_string(),
        };
        let object = repo.revparse_single(rev).map_err(|_| not_found())?;
        object
            .peel(git2::ObjectType::Commit)
            .map(|c| c.id())
            .map_err(|_| not_found())
    }

    /// Who made a commit and when, and its subject line.
    pub fn commit_info(&self, commit: Oid) -> Result<CommitInfo, SourceError> {
        let repo = self.open_holding(|r| r.find_commit(commit).is_ok())?;
        let c = repo
            .find_commit(commit)
            .map_err(|e| SourceError::git(format!("reading commit {commit}"), e))?;
        let person = |s: git2::Signature<'_>| {
            format!(
                "{} <{}>",
                String::from_utf8_lossy(s.name_bytes()),
                String::from_utf8_lossy(s.email_bytes())
            )
        };
        let when = c.committer().when().seconds();
        Ok(CommitInfo {
            author: person(c.author()),
            committer: person(c.committer()),
            committed_at: std::time::UNIX_EPOCH
                + Duration::from_secs(u64::try_from(when).unwrap_or(0)),
            summary: String::from_utf8_lossy(c.summary_bytes().unwrap_or_default()).into_owned(),
        })
    }
}

/// What [`Mirror::commit_info`] tells of a commit.
#[derive(Debug, Clone)]
pub struct CommitInfo {
    pub author: String,
    pub committer: String,
    pub committed_at: SystemTime,
    pub summary: String,
}

fn forget_remote_head(repo: &Repository) -> Result<(), SourceError> {
    match repo.find_reference(REMOTE_HEAD_REF) {
        Ok(mut stale) => stale
            .delete()
            .map_err(|e| SourceError::git(format!("deleting {REMOTE_HEAD_REF}"), e)),
        Err(_) => Ok(()),
    }
}
