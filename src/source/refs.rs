//! What a configured ref means: which refspecs a fetch needs for it, how it
//! resolves to a commit in the mirror after the fetch, and where the last
//! resolution is kept for readers that must not touch the network.

use git2::{ObjectType, Oid, Repository};

use super::SourceError;

/// The refspecs every fetch uses. Forced (`+`), so a rewritten branch or a
/// moved tag still updates; pruned by the caller, so deleted refs go.
pub(crate) const BASE_REFSPECS: [&str; 2] =
    ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"];

/// Where refs outside heads and tags (`refs/pull/1/head`, ...) land locally.
const EXTRA_PREFIX: &str = "refs/tend/extra/";
/// Where a commit fetched by id lands until it is recorded as resolved.
pub(crate) const FETCHED_COMMIT_REF: &str = "refs/tend/fetched-commit";

/// A configured ref, checked once at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// The remote's HEAD.
    Default,
    /// A full ref name, `refs/...`.
    Full(String),
    /// A branch or tag name; tags win, as in `git rev-parse`.
    Short(String),
    /// A full commit id; a branch or tag spelled the same would win.
    Commit(Oid, String),
}

impl Wanted {
    pub(crate) fn parse(reference: Option<&str>) -> Result<Wanted, SourceError> {
        // `HEAD` is what the remote's HEAD names, as `git fetch URL HEAD`.
        let Some(r) = reference.filter(|r| *r != "HEAD") else {
            return Ok(Wanted::Default);
        };
        let unknown = || SourceError::InvalidRef {
            reference: r.to_string(),
        };
        if r.starts_with("refs/") {
            if !git2::Reference::is_valid_name(r) || r.contains('*') {
                return Err(unknown());
            }
            return Ok(Wanted::Full(r.to_string()));
        }
        if r.len() == 40 && r.bytes().all(|b| b.is_ascii_hexdigit()) {
            let oid = Oid::from_str(r).map_err(|_| unknown())?;
            return Ok(Wanted::Commit(oid, r.to_string()));
        }
        if r.is_empty()
            || r.contains('*')
            || !git2::Reference::is_valid_name(&format!("refs/heads/{r}"))
        {
            return Err(unknown());
        }
        Ok(Wanted::Short(r.to_string()))
    }

    /// The refspec beyond the base ones that this ref needs, if any.
    pub(crate) fn extra_refspec(&self) -> Option<String> {
        match self {
            Wanted::Full(r) if !r.starts_with("refs/heads/") && !r.starts_with("refs/tags/") => {
                Some(format!("+{r}:{}", local_name(r)))
            }
            _ => None,
        }
    }

    /// The ref that records what this configured ref resolved to. One per
    /// configured ref, so a reader never takes another ref's commit after
    /// the configuration changed; hex keeps any valid input a valid ref name.
    pub(crate) fn resolved_ref(&self) -> String {
        match self {
            Wanted::Default => "refs/tend/resolved/default".to_string(),
            Wanted::Full(r) | Wanted::Short(r) | Wanted::Commit(_, r) => {
                format!("refs/tend/resolved/r-{}", hex::encode(r.as_bytes()))
            }
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Wanted::Default => "HEAD".to_string(),
            Wanted::Full(r) | Wanted::Short(r) | Wanted::Commit(_, r) => r.clone(),
        }
    }
}

/// The local name a remote ref is fetched to.
fn local_name(remote_ref: &str) -> String {
    if remote_ref.starts_with("refs/heads/") || remote_ref.starts_with("refs/tags/") {
        remote_ref.to_string()
    } else {
        format!("{EXTRA_PREFIX}{}", &remote_ref["refs/".len()..])
    }
}

/// The outcome of resolving after the main fetch.
pub(crate) enum Resolution {
    Found(Oid),
    /// A commit id the mirror does not have; worth fetching by id.
    Missing(Oid),
}

/// What the remote advertised while connected.
pub(crate) struct Advertised {
    /// The ref the remote's HEAD points to, when it names one.
    pub default_branch: Option<String>,
    /// The commit the remote's HEAD is at, fetched when it names no branch.
    pub head: Option<Oid>,
}

/// Resolves `wanted` against the freshly fetched mirror.
pub(crate) fn resolve(
    repo: &Repository,
    wanted: &Wanted,
    advertised: &Advertised,
    url: &str,
) -> Result<Resolution, SourceError> {
    let unknown = || SourceError::UnknownRef {
        reference: wanted.describe(),
        url: url.to_string(),
    };
    let name = match wanted {
        Wanted::Default => match (&advertised.default_branch, advertised.head) {
            (Some(branch), _) => local_name(branch),
            (None, Some(head)) => return Ok(present_or_missing(repo, head)),
            (None, None) => {
                return Err(SourceError::NoDefaultBranch {
                    url: url.to_string(),
                })
            }
        },
        Wanted::Full(r) => local_name(r),
        Wanted::Short(r) => {
            let candidates = [format!("refs/tags/{r}"), format!("refs/heads/{r}")];
            match candidates
                .into_iter()
                .find(|c| repo.find_reference(c).is_ok())
            {
                Some(found) => found,
                // An abbreviated commit id, as `git rev-parse` takes one:
                // only a commit the fetched branches and tags reach, and
                // only when the prefix names one commit.
                None if r.len() >= 7 && r.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    return match repo.find_commit_by_prefix(r) {
                        Ok(commit) => Ok(Resolution::Found(commit.id())),
                        Err(_) => Err(unknown()),
                    };
                }
                None => return Err(unknown()),
            }
        }
        Wanted::Commit(oid, r) => {
            for candidate in [format!("refs/tags/{r}"), format!("refs/heads/{r}")] {
                if repo.find_reference(&candidate).is_ok() {
                    return peel(repo, &candidate, wanted, url).map(Resolution::Found);
                }
            }
            return Ok(present_or_missing(repo, *oid));
        }
    };
    match repo.find_reference(&name) {
        Ok(_) => peel(repo, &name, wanted, url).map(Resolution::Found),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Err(unknown()),
        Err(e) => Err(SourceError::git(format!("reading {name}"), e)),
    }
}

fn present_or_missing(repo: &Repository, oid: Oid) -> Resolution {
    match repo.find_commit(oid) {
        Ok(_) => Resolution::Found(oid),
        Err(_) => Resolution::Missing(oid),
    }
}

/// Peels a ref (an annotated tag, possibly nested) down to its commit.
pub(crate) fn peel(
    repo: &Repository,
    name: &str,
    wanted: &Wanted,
    url: &str,
) -> Result<Oid, SourceError> {
    let reference = repo
        .find_reference(name)
        .map_err(|e| SourceError::git(format!("reading {name}"), e))?;
    match reference.peel(ObjectType::Commit) {
        Ok(commit) => Ok(commit.id()),
        Err(_) => {
            let kind = reference
                .peel(ObjectType::Any)
                .ok()
                .and_then(|o| o.kind())
                .map_or("missing object", |k| k.str());
            Err(SourceError::NotACommit {
                reference: wanted.describe(),
                url: url.to_string(),
                kind: kind.to_string(),
            })
        }
    }
}

/// What the ref resolved to at the last successful fetch.
pub(crate) fn read_resolved(
    repo: &Repository,
    wanted: &Wanted,
) -> Result<Option<Oid>, SourceError> {
    let name = wanted.resolved_ref();
    match repo.find_reference(&name) {
        Ok(reference) => Ok(reference.target()),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(SourceError::git(format!("reading {name}"), e)),
    }
}

pub(crate) fn record_resolved(
    repo: &Repository,
    wanted: &Wanted,
    commit: Oid,
) -> Result<(), SourceError> {
    let name = wanted.resolved_ref();
    let message = format!("tend: {} resolved", wanted.describe());
    repo.reference(&name, commit, true, &message)
        .map(|_| ())
        .map_err(|e| SourceError::git(format!("writing {name}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind_of_ref() {
        assert_eq!(Wanted::parse(None).unwrap(), Wanted::Default);
        assert_eq!(Wanted::parse(Some("HEAD")).unwrap(), Wanted::Default);
        assert_eq!(
            Wanted::parse(Some("main")).unwrap(),
            Wanted::Short("main".into())
        );
        assert_eq!(
            Wanted::parse(Some("release/1.x")).unwrap(),
            Wanted::Short("release/1.x".into())
        );
        assert_eq!(
            Wanted::parse(Some("refs/pull/7/head")).unwrap(),
            Wanted::Full("refs/pull/7/head".into())
        );
        let id = "0123456789abcdef0123456789abcdef01234567";
        assert!(
            matches!(Wanted::parse(Some(id)).unwrap(), Wanted::Commit(oid, _) if oid.to_string() == id)
        );
        for bad in [
            "",
            "a..b",
            "refs/heads/*",
            "x*",
            "with space",
            "refs/heads/x.lock",
        ] {
            assert!(Wanted::parse(Some(bad)).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn extra_refspec_only_outside_heads_and_tags() {
        let w = |s: &str| Wanted::parse(Some(s)).unwrap();
        assert_eq!(w("refs/heads/main").extra_refspec(), None);
        assert_eq!(w("main").extra_refspec(), None);
        assert_eq!(
            w("refs/pull/7/head").extra_refspec().as_deref(),
            Some("+refs/pull/7/head:refs/tend/extra/pull/7/head")
        );
    }

    #[test]
    fn resolved_refs_differ_per_configured_ref() {
        let a = Wanted::parse(Some("main")).unwrap().resolved_ref();
        let b = Wanted::parse(Some("refs/heads/main"))
            .unwrap()
            .resolved_ref();
        assert_ne!(a, b);
        assert!(git2::Reference::is_valid_name(&a));
        assert!(git2::Reference::is_valid_name(
            &Wanted::Default.resolved_ref()
        ));
    }
}
