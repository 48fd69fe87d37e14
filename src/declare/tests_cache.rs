//! The declaration cache: what is read back is what was stored, and a file
//! that is damaged, of another version or of another key is never trusted.

use super::cache::{decode, encode, key, load, store};
use super::tests::snapshot_of;
use super::*;
use crate::test_repo::TestRepo;

fn declared(repo: &TestRepo, mirror: bool) -> Declared {
    let fx = snapshot_of(repo);
    let targets = vec![
        TargetInfo {
            name: "files".into(),
            kinds: vec!["file".into(), "symlink".into()],
            kinds_unknown: None,
        },
        TargetInfo {
            name: "svc".into(),
            kinds: vec!["service".into()],
            kinds_unknown: None,
        },
    ];
    let hooks = vec!["reload".to_string()];
    let opts = Options::plain("", mirror, &targets, &hooks);
    declare(&fx.snapshot, &opts).unwrap()
}

/// Declarations of every shape the cache encodes: files from sources and
/// inline, owners by number, a symlink, a structured resource with ignored
/// fields, a hook, a problem and a refused path.
fn varied() -> TestRepo {
    let repo = TestRepo::new();
    repo.write(
        "host/app.tend.yaml",
        "kind: file\npath: etc/app.conf\nsource: app.conf\nmode: \"0600\"\nowner: 0\non_change: reload\n---\nkind: file\npath: etc/inline\ncontent: \"hi\\n\"\nself_heal: false\n---\nkind: symlink\npath: etc/link\ntarget_path: app.conf\n",
    )
    .write("host/app.conf", "a=1\n")
    .write("host/svc.tend.yaml", "kind: service\nname: web\nspec:\n  replicas: 2\n  image: x\nignore:\n  - /spec/image\n")
    .write("host/bad.tend.yaml", "kind: file\npath: [unclosed\n")
    .symlink("host/ln", "app.conf")
    .write("big.bin", vec![b'x'; 4096]);
    repo.commit("init");
    repo
}

#[test]
fn a_declaration_read_back_is_the_one_stored() {
    let repo = varied();
    for mirror in [false, true] {
        let d = declared(&repo, mirror);
        assert!(!d.resources.is_empty());
        if !mirror {
            assert!(!d.problems.is_empty(), "the bad file is a problem");
            assert!(!d.inline.is_empty(), "inline content is kept");
            let kinds: Vec<&str> = d.resources.values().map(|r| r.spec.kind()).collect();
            assert!(kinds.contains(&"service"), "{kinds:?}");
            assert!(kinds.contains(&"symlink"), "{kinds:?}");
        } else {
            assert!(!d.blocked.is_empty(), "the file over the limit is refused");
            assert!(!d.links.is_empty());
        }
        let k = key(Oid::zero(), "basis");
        assert_eq!(decode(&encode(&k, &d), &k).as_ref(), Some(&d));
    }
}

#[test]
fn a_cache_that_is_damaged_foreign_or_of_another_version_is_not_trusted() {
    let repo = varied();
    let d = declared(&repo, true);
    let k = key(Oid::zero(), "basis");
    let good = encode(&k, &d);
    assert!(decode(&good, &k).is_some());
    // Another revision or basis: another key.
    let other = key(Oid::zero(), "another basis");
    assert_ne!(k, other);
    assert!(decode(&good, &other).is_none());
    // One byte of the body changed: the checksum fails.
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert!(decode(&flipped, &k).is_none());
    // Cut short, and an empty file.
    assert!(decode(&good[..good.len() / 2], &k).is_none());
    assert!(decode(&[], &k).is_none());
    // Another format version.
    let mut version = good.clone();
    version[8] = version[8].wrapping_add(1);
    assert!(decode(&version, &k).is_none());
    // Through the file: stored, read back; then overwritten with garbage.
    let dir = tempfile::tempdir().unwrap();
    let file = cache::path(dir.path());
    store(&file, &k, &d);
    assert_eq!(load(&file, &k).as_ref(), Some(&d));
    std::fs::write(&file, b"tenddecl garbage").unwrap();
    assert!(load(&file, &k).is_none());
    // No temp file is left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

/// A mirror under a source path: each file is declared by itself at its
/// repository path, line 1, and the files share one declaration, as they
/// do again when read back from the cache.
#[test]
fn mirrored_files_share_one_declaration_naming_each_repository_path() {
    let repo = varied();
    let fx = snapshot_of(&repo);
    let targets = vec![TargetInfo {
        name: "files".into(),
        kinds: vec!["file".into(), "symlink".into()],
        kinds_unknown: None,
    }];
    let opts = Options::plain("host", true, &targets, &[]);
    let d = declare(&fx.snapshot, &opts).unwrap();
    let conf = d
        .resources
        .get("files/file/app.conf")
        .expect("mirrored under the source path");
    assert_eq!(conf.origin().to_string(), "host/app.conf:1");
    let k = key(git2::Oid::zero(), "basis");
    let back = decode(&encode(&k, &d), &k).expect("read back");
    assert_eq!(back, d);
    for r in [&d, &back] {
        let files: Vec<_> = r.resources.values().collect();
        assert!(files.len() > 2);
        assert!(
            files
                .windows(2)
                .all(|w| std::sync::Arc::ptr_eq(&w[0].declaration, &w[1].declaration)),
            "one declaration for the mirror's files"
        );
        for f in &files {
            assert_eq!(f.origin().to_string(), format!("host/{}:1", f.path_str()));
        }
    }
}
