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

#[test]
fn the_stamp_reads_as_a_walk_of_each_path_would() {
    // Records written before the stamp looked names up in one directory
    // handle must still match: the digest is that of a stat of the
    // objects directory, its packs' names and sizes, and each fan-out's
    // lstat (or a zero byte where there is none).
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::MetadataExt;
    let repo = TestRepo::new();
    repo.write("a.txt", "a").write("dir/b.txt", "b");
    repo.commit("one");
    let objects = repo.path().join(".git/objects");
    let bytes = |m: &std::fs::Metadata| {
        let mut out = Vec::new();
        for n in [m.ino() as i64, m.ctime(), m.ctime_nsec(), m.mtime_nsec()] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out
    };
    let mut hash = Sha256::new();
    hash.update(bytes(&std::fs::metadata(&objects).unwrap()));
    let mut packs: Vec<(String, u64)> = std::fs::read_dir(objects.join("pack"))
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    packs.sort();
    for (name, size) in packs {
        hash.update(name.as_bytes());
        hash.update(size.to_le_bytes());
    }
    let mut present = 0;
    for byte in 0..=255u8 {
        match std::fs::symlink_metadata(objects.join(format!("{byte:02x}"))) {
            Ok(m) => {
                present += 1;
                hash.update(bytes(&m));
            }
            Err(_) => hash.update([0u8]),
        }
    }
    assert!(present >= 3, "the commit, its trees and blobs are loose");
    assert_eq!(
        stamp::objects_stamp(&objects),
        Some(hex::encode(hash.finalize()))
    );
}
