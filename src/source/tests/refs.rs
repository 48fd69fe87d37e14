//! Ref resolution: default branch, branch, tags, full ref names, commit ids,
//! rewritten history and unknown refs.

use git2::Oid;

use super::{fetched, oid, spec, TestRepo};
use crate::source::{Mirror, SourceError};

/// A repository on `trunk` with a second branch and three commits.
fn repo_with_history() -> (TestRepo, Oid, Oid, Oid) {
    let repo = TestRepo::with_branch("trunk");
    repo.write("a.txt", "one\n");
    let first = oid(&repo.commit("first"));
    repo.write("a.txt", "two\n");
    let second = oid(&repo.commit("second"));
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("b.txt", "feature\n");
    let feature = oid(&repo.commit("feature"));
    repo.git(&["checkout", "-q", "trunk"]);
    (repo, first, second, feature)
}

#[test]
fn no_ref_follows_the_remote_default_branch() {
    let (repo, _, second, _) = repo_with_history();
    let state = tempfile::tempdir().unwrap();
    let (_, commit) = fetched(state.path(), &repo, None);
    assert_eq!(commit, second);

    // The same through a plain path.
    let plain = Mirror::open(state.path(), spec(repo.path().to_str().unwrap(), None)).unwrap();
    assert_eq!(plain.fetch().unwrap(), second);
}

#[test]
fn default_branch_other_than_main_or_master() {
    let (repo, _, _, feature) = repo_with_history();
    // Make `feature` the remote's HEAD: a default branch is whatever HEAD names.
    repo.git(&["symbolic-ref", "HEAD", "refs/heads/feature"]);
    let state = tempfile::tempdir().unwrap();
    assert_eq!(fetched(state.path(), &repo, None).1, feature);
}

#[test]
fn branch_by_short_and_full_name() {
    let (repo, _, second, feature) = repo_with_history();
    let state = tempfile::tempdir().unwrap();
    assert_eq!(fetched(state.path(), &repo, Some("feature")).1, feature);
    assert_eq!(
        fetched(state.path(), &repo, Some("refs/heads/feature")).1,
        feature
    );
    assert_eq!(fetched(state.path(), &repo, Some("trunk")).1, second);
}

#[test]
fn lightweight_and_annotated_tags_peel_to_commits() {
    let (repo, first, second, _) = repo_with_history();
    repo.git(&["tag", "v1", &first.to_string()]);
    repo.git(&["tag", "-a", "v2", "-m", "release 2", &second.to_string()]);
    // A tag of a tag: peeling goes all the way down.
    repo.git(&["tag", "-a", "v2-again", "-m", "again", "v2"]);
    let state = tempfile::tempdir().unwrap();
    assert_eq!(fetched(state.path(), &repo, Some("v1")).1, first);
    assert_eq!(fetched(state.path(), &repo, Some("v2")).1, second);
    assert_eq!(fetched(state.path(), &repo, Some("refs/tags/v2")).1, second);
    assert_eq!(fetched(state.path(), &repo, Some("v2-again")).1, second);
}

#[test]
fn tag_of_a_tree_is_not_a_commit() {
    let (repo, ..) = repo_with_history();
    let tree = repo.git(&["rev-parse", "HEAD^{tree}"]);
    repo.git(&["tag", "just-a-tree", &tree]);
    let state = tempfile::tempdir().unwrap();
    let mirror = Mirror::open(state.path(), spec(&repo.url(), Some("just-a-tree"))).unwrap();
    let err = mirror.fetch().unwrap_err();
    assert!(
        matches!(err, SourceError::NotACommit { ref kind, .. } if kind == "tree"),
        "{err}"
    );
}

#[test]
fn full_commit_id_older_than_the_branch_tip() {
    let (repo, first, ..) = repo_with_history();
    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, Some(&first.to_string()));
    assert_eq!(commit, first);
    assert_eq!(mirror.resolved().unwrap(), Some(first));
}

#[test]
fn commit_id_no_ref_reaches_is_fetched_by_id_or_reported() {
    let (repo, ..) = repo_with_history();
    repo.git(&["checkout", "-q", "-b", "doomed"]);
    repo.write("c.txt", "gone soon\n");
    let orphaned = oid(&repo.commit("only on a deleted branch"));
    repo.git(&["checkout", "-q", "trunk"]);
    repo.git(&["branch", "-q", "-D", "doomed"]);
    let state = tempfile::tempdir().unwrap();
    let mirror =
        Mirror::open(state.path(), spec(&repo.url(), Some(&orphaned.to_string()))).unwrap();
    match mirror.fetch() {
        Ok(commit) => {
            assert_eq!(commit, orphaned);
            let snap = mirror.snapshot(commit).unwrap();
            assert!(snap.entry("c.txt").unwrap().is_some());
        }
        Err(err) => assert!(
            matches!(err, SourceError::CommitNotFound { id, .. } if id == orphaned),
            "{err}"
        ),
    }
}

#[test]
fn commit_id_that_does_not_exist_is_a_clear_error() {
    let (repo, ..) = repo_with_history();
    let state = tempfile::tempdir().unwrap();
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let mirror = Mirror::open(state.path(), spec(&repo.url(), Some(missing))).unwrap();
    let err = mirror.fetch().unwrap_err();
    assert!(matches!(err, SourceError::CommitNotFound { .. }), "{err:?}");
    assert!(err.to_string().contains(missing), "{err}");
    assert_eq!(mirror.resolved().unwrap(), None);
}

#[test]
fn rewritten_history_still_fetches_the_new_commit() {
    let (repo, first, second, _) = repo_with_history();
    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, Some("trunk"));
    assert_eq!(commit, second);

    // What a force push leaves behind: the branch tip is no descendant of
    // what was fetched before.
    repo.git(&["reset", "-q", "--hard", &first.to_string()]);
    repo.write("a.txt", "rewritten\n");
    let rewritten = oid(&repo.commit("rewritten"));
    assert_eq!(
        repo.git(&["merge-base", &rewritten.to_string(), &second.to_string()]),
        first.to_string()
    );

    assert_eq!(mirror.fetch().unwrap(), rewritten);
    let snap = mirror.snapshot(rewritten).unwrap();
    let entry = snap.entry("a.txt").unwrap().unwrap();
    assert_eq!(snap.read(entry.oid).unwrap(), b"rewritten\n");
}

#[test]
fn moved_tag_is_followed() {
    let (repo, first, second, _) = repo_with_history();
    repo.git(&["tag", "stable", &first.to_string()]);
    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, Some("stable"));
    assert_eq!(commit, first);
    repo.git(&["tag", "-f", "stable", &second.to_string()]);
    assert_eq!(mirror.fetch().unwrap(), second);
}

#[test]
fn unknown_ref_is_an_error_naming_it() {
    let (repo, ..) = repo_with_history();
    let state = tempfile::tempdir().unwrap();
    for reference in [
        "no-such-branch",
        "refs/heads/no-such-branch",
        "refs/pull/1/head",
    ] {
        let mirror = Mirror::open(state.path(), spec(&repo.url(), Some(reference))).unwrap();
        let err = mirror.fetch().unwrap_err();
        assert!(
            matches!(err, SourceError::UnknownRef { .. }),
            "{reference}: {err:?}"
        );
        assert!(err.to_string().contains(reference), "{err}");
    }
    let err = Mirror::open(state.path(), spec(&repo.url(), Some("a..b"))).unwrap_err();
    assert!(matches!(err, SourceError::InvalidRef { .. }), "{err:?}");
}

#[test]
fn deleted_branch_is_pruned_and_then_unknown() {
    let (repo, ..) = repo_with_history();
    let state = tempfile::tempdir().unwrap();
    let (mirror, feature) = fetched(state.path(), &repo, Some("feature"));
    repo.git(&["branch", "-q", "-D", "feature"]);
    let err = mirror.fetch().unwrap_err();
    assert!(matches!(err, SourceError::UnknownRef { .. }), "{err:?}");
    // The last good resolution stays readable.
    assert_eq!(mirror.resolved().unwrap(), Some(feature));
    assert!(mirror.snapshot(feature).is_ok());
}

#[test]
fn refs_outside_heads_and_tags_by_full_name() {
    let (repo, _, _, feature) = repo_with_history();
    repo.git(&["update-ref", "refs/pull/7/head", &feature.to_string()]);
    let state = tempfile::tempdir().unwrap();
    assert_eq!(
        fetched(state.path(), &repo, Some("refs/pull/7/head")).1,
        feature
    );
}

#[test]
fn empty_repository_has_no_default_branch() {
    let repo = TestRepo::new();
    let state = tempfile::tempdir().unwrap();
    let mirror = Mirror::open(state.path(), spec(&repo.url(), None)).unwrap();
    let err = mirror.fetch().unwrap_err();
    assert!(
        matches!(err, SourceError::NoDefaultBranch { .. }),
        "{err:?}"
    );
    // Once something is pushed, the same mirror picks it up.
    repo.write("first.txt", "1\n");
    let first = oid(&repo.commit("first"));
    assert_eq!(mirror.fetch().unwrap(), first);
}

#[test]
fn detached_remote_head_is_followed_by_commit() {
    let (repo, first, ..) = repo_with_history();
    repo.write("detached.txt", "d\n");
    repo.git(&["checkout", "-q", "--detach"]);
    let detached = oid(&repo.commit("on a detached HEAD"));
    assert_ne!(detached, first);
    let state = tempfile::tempdir().unwrap();
    assert_eq!(fetched(state.path(), &repo, None).1, detached);
}
