//! The record of a revision found whole: trusted by the next process only
//! while the mirror's objects keep the shape they had when it was made.

use super::fetched;
use crate::source::stamp;
use crate::test_repo::TestRepo;

#[test]
fn a_verified_revision_is_trusted_until_an_object_file_goes() {
    let repo = TestRepo::new();
    repo.write("a.txt", "a").write("dir/b.txt", "b");
    repo.commit("one");
    let state = tempfile::tempdir().unwrap();
    let (mirror, commit) = fetched(state.path(), &repo, None);
    let dir = mirror.dir().to_path_buf();
    assert_eq!(stamp::verified(&dir), Some(commit));

    // A loose object removed from the mirror: not trusted any more, and the
    // next fetch (linking it back from the source) records it again.
    let blob = repo.git(&["rev-parse", "HEAD:a.txt"]);
    let loose = dir.join("objects").join(&blob[..2]).join(&blob[2..]);
    std::fs::remove_file(&loose).unwrap();
    assert_eq!(stamp::verified(&dir), None);
    assert_eq!(mirror.fetch().unwrap(), commit);
    assert!(loose.exists());
    assert_eq!(stamp::verified(&dir), Some(commit));

    // A pack that appears or goes changes the stamp too.
    let extra = dir.join("objects/pack/pack-0000.keep");
    std::fs::create_dir_all(extra.parent().unwrap()).unwrap();
    std::fs::write(&extra, "").unwrap();
    assert_eq!(stamp::verified(&dir), None);
    std::fs::remove_file(&extra).unwrap();

    // A record that does not parse is not trusted.
    std::fs::write(dir.join("tend-verified"), "garbage").unwrap();
    assert_eq!(stamp::verified(&dir), None);
}

#[test]
fn a_local_source_is_linked_from_again_only_when_either_side_changed() {
    let repo = TestRepo::new();
    repo.write("a.txt", "a");
    repo.commit("one");
    let state = tempfile::tempdir().unwrap();
    let (mirror, _) = fetched(state.path(), &repo, None);
    let dir = mirror.dir().to_path_buf();
    let from = repo.path().join(".git/objects");
    // Settled after a second fetch (the first one's own writes count).
    mirror.fetch().unwrap();
    assert!(stamp::seeded(&dir, &from));
    // A new loose object in the source.
    repo.write("b.txt", "b");
    repo.commit("two");
    assert!(!stamp::seeded(&dir, &from));
    mirror.fetch().unwrap();
    assert!(stamp::seeded(&dir, &from));
}
