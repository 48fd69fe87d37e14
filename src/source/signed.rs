//! Reading signatures out of the mirror: a commit's `gpgsig` header with
//! the bytes it signs, an annotated tag's signature appended to its
//! message; and whether one commit descends from another (anti-rollback).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use git2::{ObjectType, Oid, Repository};

use super::refs::Wanted;
use super::verify::{Reason, Refusal, Require, Signed, Signer, TrustAnchors};
use super::SourceError;

fn time(t: git2::Time) -> SystemTime {
    match u64::try_from(t.seconds()) {
        Ok(s) => UNIX_EPOCH + Duration::from_secs(s),
        Err(_) => UNIX_EPOCH,
    }
}

fn short(id: Oid) -> String {
    id.to_string()[..12].to_string()
}

/// A commit's signature and signed payload; `None` when it is unsigned.
pub(crate) fn commit_signature(
    repo: &Repository,
    commit: Oid,
) -> Result<Option<Signed>, SourceError> {
    let c = repo
        .find_commit(commit)
        .map_err(|e| SourceError::git(format!("reading commit {commit}"), e))?;
    let at = time(c.committer().when());
    match repo.extract_signature(&commit, None) {
        Ok((sig, payload)) => Ok(Some(Signed {
            signature: String::from_utf8_lossy(&sig).into_owned(),
            payload: payload.to_vec(),
            at,
        })),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(SourceError::git(format!("reading commit {commit}"), e)),
    }
}

const SIGNATURE_STARTS: [&str; 2] = [
    "-----BEGIN SSH SIGNATURE-----",
    "-----BEGIN PGP SIGNATURE-----",
];

/// An annotated tag's signature: git appends it to the message, and signs
/// the tag object up to it.
pub(crate) fn tag_signature(repo: &Repository, tag: Oid) -> Result<Option<Signed>, SourceError> {
    let odb = repo
        .odb()
        .map_err(|e| SourceError::git("opening the object database", e))?;
    let object = odb
        .read(tag)
        .map_err(|e| SourceError::git(format!("reading tag {tag}"), e))?;
    let data = object.data();
    let at = repo
        .find_tag(tag)
        .ok()
        .and_then(|t| t.tagger().map(|s| time(s.when())))
        .unwrap_or(UNIX_EPOCH);
    // The last line that starts a signature block; the message before it
    // may quote one.
    let start = SIGNATURE_STARTS
        .iter()
        .filter_map(|marker| {
            let needle = format!("\n{marker}");
            find_last(data, needle.as_bytes()).map(|i| i + 1)
        })
        .max();
    Ok(start.map(|i| Signed {
        signature: String::from_utf8_lossy(&data[i..]).into_owned(),
        payload: data[..i].to_vec(),
        at,
    }))
}

fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

/// The annotated tag object the configured ref names, if it names one.
pub(crate) fn configured_tag(repo: &Repository, wanted: &Wanted) -> Option<Oid> {
    let name = match wanted {
        Wanted::Short(r) => format!("refs/tags/{r}"),
        Wanted::Full(r) if r.starts_with("refs/tags/") => r.clone(),
        Wanted::Commit(_, r) => format!("refs/tags/{r}"),
        _ => return None,
    };
    let target = repo.find_reference(&name).ok()?.target()?;
    let object = repo.find_object(target, None).ok()?;
    (object.kind() == Some(ObjectType::Tag)).then_some(target)
}

/// Every annotated tag whose chain ends at `commit`.
fn tags_of(repo: &Repository, commit: Oid) -> Vec<Oid> {
    let mut out = Vec::new();
    let Ok(refs) = repo.references_glob("refs/tags/*") else {
        return out;
    };
    for r in refs.flatten() {
        let Some(target) = r.target() else { continue };
        let is_tag = repo
            .find_object(target, None)
            .is_ok_and(|o| o.kind() == Some(ObjectType::Tag));
        if is_tag && r.peel(ObjectType::Commit).is_ok_and(|c| c.id() == commit) {
            out.push(target);
        }
    }
    out
}

/// Whether `commit` may be applied by its signature. `via_ref`: the commit
/// is what the configured ref resolved to (so with `require: tag` that
/// ref's tag is checked); otherwise (a pin) any signed tag pointing at it
/// will do.
pub(crate) fn verify(
    repo: &Repository,
    wanted: &Wanted,
    anchors: &TrustAnchors,
    commit: Oid,
    via_ref: bool,
) -> Result<Result<Signer, Refusal>, SourceError> {
    match anchors.require {
        Require::Commit => {
            let what = format!("commit {}", short(commit));
            Ok(match commit_signature(repo, commit)? {
                Some(signed) => anchors.check(&signed, &what),
                None => Err(Refusal::new(
                    Reason::Unsigned,
                    format!("{what} is not signed"),
                )),
            })
        }
        Require::Tag => {
            let tags = match via_ref {
                true => configured_tag(repo, wanted).into_iter().collect(),
                false => tags_of(repo, commit),
            };
            if tags.is_empty() {
                let detail = match via_ref {
                    true => format!(
                        "ref {} is not an annotated tag (require: tag)",
                        wanted.describe()
                    ),
                    false => format!(
                        "no annotated tag points at {} (require: tag)",
                        short(commit)
                    ),
                };
                return Ok(Err(Refusal::new(Reason::Unsigned, detail)));
            }
            let mut refusal = None;
            for tag in tags {
                let name = repo
                    .find_tag(tag)
                    .ok()
                    .and_then(|t| t.name().map(str::to_string))
                    .unwrap_or_else(|| short(tag));
                let what = format!("tag {name}");
                let outcome = match tag_signature(repo, tag)? {
                    Some(signed) => anchors.check(&signed, &what),
                    None => Err(Refusal::new(
                        Reason::Unsigned,
                        format!("{what} is not signed"),
                    )),
                };
                match outcome {
                    Ok(signer) => return Ok(Ok(signer)),
                    Err(r) => refusal = Some(r),
                }
            }
            Ok(Err(refusal.expect("at least one tag")))
        }
    }
}

/// Whether `commit` is `ancestor` or descends from it; a mark the mirror
/// no longer has cannot be an ancestor of anything fetched.
pub(crate) fn descends(repo: &Repository, commit: Oid, ancestor: Oid) -> bool {
    commit == ancestor || repo.graph_descendant_of(commit, ancestor).unwrap_or(false)
}
